use super::*;
use proptest::prelude::*;
use std::path::Path;

/// A valid base configuration; the line numbers below are relied on by the table tests.
const BASE: &str = r#"destination:
  bootstrap: ["127.0.0.1:29092"]
listeners:
  client:
    port_base: 9092
  mirror:
    port_base: 9192
admin:
  bind: 127.0.0.1:9180
mirrors:
  - name: a
    topics: [orders, "regex:pay\\..*"]
  - name: b
    topics: [users]
"#;

/// `BASE` with line `line` (1-based) replaced by `with` (which may span several lines).
fn edit(line: usize, with: &str) -> String {
    let mut lines: Vec<&str> = BASE.lines().collect();
    lines[line - 1] = with;
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// `BASE` with `extra` appended.
fn append(extra: &str) -> String {
    format!("{BASE}{extra}")
}

fn issues_of(text: &str) -> Vec<ConfigIssue> {
    match load_str(text, "test.yaml") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(ConfigError::Invalid { issues, .. }) => issues,
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn an_instances_section_takes_the_default_state_topic_and_session_timeout() {
    let cfg = load_str(&append("instances:\n  id: gw-a\n"), "i.yaml").unwrap();
    let i = cfg.instances.expect("instances");
    assert_eq!(
        (i.id.as_str(), i.state_topic.as_str(), i.session_timeout_ms),
        ("gw-a", "__mirrorgate_state", 10_000)
    );
}

#[test]
fn base_config_is_valid() {
    let cfg = load_str(BASE, "base.yaml").unwrap();
    assert_eq!(cfg.mirrors.len(), 2);
    assert_eq!(cfg.listeners.client.bind, "127.0.0.1");
    // The producer-id allocator advance is on by default (review F15).
    let p = &cfg.failover.pid_allocator;
    assert!(p.enabled);
    // The barrier is a control batch where the brokers allow it (issue 14).
    assert_eq!(cfg.failover.barrier, super::BarrierMode::Auto);
    assert_eq!(
        (p.max_ids, p.timeout_ms, p.connections, p.in_flight),
        (1_000_000, 120_000, 4, 64)
    );
}

#[test]
fn bad_configs_report_key_path_message_and_line() {
    struct Case {
        name: &'static str,
        text: String,
        path: &'static str,
        fragment: &'static str,
        line: usize,
    }
    let cases = vec![
        Case {
            name: "unknown top-level key",
            text: append("colour: blue\n"),
            path: "colour",
            fragment: "unknown field `colour`",
            line: 15,
        },
        Case {
            name: "unknown nested key",
            text: edit(5, "    port_base: 9092\n    bnd: 1.2.3.4"),
            path: "listeners.client.bnd",
            fragment: "unknown field `bnd`",
            line: 6,
        },
        Case {
            name: "unknown key in a mirror",
            text: edit(14, "    topics: [users]\n    colour: red"),
            path: "mirrors[1].colour",
            fragment: "unknown field `colour`",
            line: 15,
        },
        Case {
            name: "wrong type",
            text: edit(5, "    port_base: ninety"),
            path: "listeners.client.port_base",
            fragment: "invalid type",
            line: 5,
        },
        Case {
            name: "wrong type in a list",
            text: edit(14, "    topics: users"),
            path: "mirrors[1].topics",
            fragment: "expected a sequence",
            line: 14,
        },
        Case {
            name: "port out of range",
            text: edit(5, "    port_base: 70000"),
            path: "listeners.client.port_base",
            fragment: "invalid value",
            line: 5,
        },
        Case {
            name: "client and mirror port ranges overlap",
            text: edit(7, "    port_base: 9100"),
            path: "listeners.mirror.port_base",
            fragment: "overlap listeners.client ports 9092..=9107",
            line: 7,
        },
        Case {
            name: "admin port inside a listener range",
            text: edit(9, "  bind: 127.0.0.1:9095"),
            path: "admin.bind",
            fragment: "port 9095 on 127.0.0.1 is inside listeners.client ports 9092..=9107",
            line: 9,
        },
        Case {
            name: "admin on 0.0.0.0 overlaps a loopback listener",
            text: edit(9, "  bind: 0.0.0.0:9200\n  token: {env: X}"),
            path: "admin.bind",
            fragment: "inside listeners.mirror",
            line: 9,
        },
        Case {
            name: "listener range past 65535",
            text: edit(7, "    port_base: 65530"),
            path: "listeners.mirror.port_base",
            fragment: "does not fit",
            line: 7,
        },
        Case {
            name: "audit topic not a topic name",
            text: edit(9, "  bind: 127.0.0.1:9180\n  audit_topic: \"audit log\""),
            path: "admin.audit_topic",
            fragment: "is not a valid Kafka topic name",
            line: 10,
        },
        Case {
            name: "audit topic is a mirror topic",
            text: edit(9, "  bind: 127.0.0.1:9180\n  audit_topic: orders"),
            path: "admin.audit_topic",
            fragment: "is a mirror topic",
            line: 10,
        },
        Case {
            name: "instance id not a name",
            text: append("instances:\n  id: \"gw a\"\n"),
            path: "instances.id",
            fragment: "is not an instance name",
            line: 16,
        },
        Case {
            name: "state topic is a mirror topic",
            text: append("instances:\n  id: gw-a\n  state_topic: orders\n"),
            path: "instances.state_topic",
            fragment: "is a mirror topic",
            line: 17,
        },
        Case {
            name: "session timeout too short",
            text: append("instances:\n  id: gw-a\n  session_timeout_ms: 10\n"),
            path: "instances.session_timeout_ms",
            fragment: "outside 1000..=300000",
            line: 17,
        },
        Case {
            name: "port_base zero",
            text: edit(7, "    port_base: 0"),
            path: "listeners.mirror.port_base",
            fragment: "must not be 0",
            line: 7,
        },
        Case {
            name: "listener bind not an ip",
            text: edit(5, "    port_base: 9092\n    bind: localhost"),
            path: "listeners.client.bind",
            fragment: "not an IP address",
            line: 6,
        },
        Case {
            name: "topic in two mirrors exact exact",
            text: edit(14, "    topics: [orders]"),
            path: "mirrors[1].topics[0]",
            fragment: "already claimed by mirror `a`",
            line: 14,
        },
        Case {
            name: "topic in two mirrors exact regex",
            text: edit(14, "    topics: [pay.eu]"),
            path: "mirrors[1].topics[0]",
            fragment: "through `regex:pay\\..*`",
            line: 14,
        },
        Case {
            name: "same regex in two mirrors",
            text: edit(14, "    topics: [\"regex:pay\\\\..*\"]"),
            path: "mirrors[1].topics[0]",
            fragment: "pattern `regex:pay\\..*` is already claimed by mirror `a`",
            line: 14,
        },
        Case {
            name: "missing destination bootstrap",
            text: edit(2, "  connect_timeout_ms: 5000"),
            path: "destination.bootstrap",
            fragment: "missing field `bootstrap`",
            line: 2,
        },
        Case {
            name: "missing top-level listeners",
            text: "destination:\n  bootstrap: [\"h:1\"]\n".to_string(),
            path: "listeners",
            fragment: "missing field `listeners`",
            line: 1,
        },
        Case {
            name: "missing topics in a mirror",
            text: edit(14, "    source: {bootstrap: [\"h:1\"]}"),
            path: "mirrors[1].topics",
            fragment: "missing field `topics`",
            line: 13,
        },
        Case {
            name: "empty bootstrap list",
            text: edit(2, "  bootstrap: []"),
            path: "destination.bootstrap",
            fragment: "at least one",
            line: 2,
        },
        Case {
            name: "bootstrap without port",
            text: edit(2, "  bootstrap: [\"127.0.0.1\"]"),
            path: "destination.bootstrap[0]",
            fragment: "missing `:port`",
            line: 2,
        },
        Case {
            name: "source bootstrap with bad port",
            text: edit(
                14,
                "    topics: [users]\n    source: {bootstrap: [\"h:99999\"]}",
            ),
            path: "mirrors[1].source.bootstrap[0]",
            fragment: "invalid port",
            line: 15,
        },
        Case {
            name: "bad regex",
            text: edit(12, "    topics: [orders, \"regex:pay(\"]"),
            path: "mirrors[0].topics[1]",
            fragment: "invalid regex `pay(`",
            line: 12,
        },
        Case {
            name: "bad topic name",
            text: edit(14, "    topics: [\"us ers\"]"),
            path: "mirrors[1].topics[0]",
            fragment: "not a valid topic name",
            line: 14,
        },
        Case {
            name: "empty topic list",
            text: edit(14, "    topics: []"),
            path: "mirrors[1].topics",
            fragment: "at least one topic",
            line: 14,
        },
        Case {
            name: "non-loopback admin without token",
            text: edit(9, "  bind: 0.0.0.0:9180"),
            path: "admin.bind",
            fragment: "binds 0.0.0.0:9180 without a token; set admin.token or bind to 127.0.0.1",
            line: 9,
        },
        Case {
            name: "admin bind not ip:port",
            text: edit(9, "  bind: localhost:9180"),
            path: "admin.bind",
            fragment: "is not `ip:port`",
            line: 9,
        },
        Case {
            name: "bad mirror name",
            text: edit(11, "  - name: \"a b\""),
            path: "mirrors[0].name",
            fragment: "not a valid mirror name",
            line: 11,
        },
        Case {
            name: "duplicate mirror name",
            text: edit(13, "  - name: a"),
            path: "mirrors[1].name",
            fragment: "duplicate mirror name `a`",
            line: 13,
        },
        Case {
            name: "secret source with two fields",
            text: edit(
                9,
                "  bind: 127.0.0.1:9180\n  token: {value: s3cret, env: TOKEN}",
            ),
            path: "admin.token",
            fragment: "exactly one of value, env or file",
            line: 10,
        },
        Case {
            name: "bad logging format",
            text: append("logging:\n  format: xml\n"),
            path: "logging.format",
            fragment: "`text` or `json`",
            line: 16,
        },
        Case {
            name: "frame limit too small",
            text: append("limits:\n  max_frame_bytes: 10\n"),
            path: "limits.max_frame_bytes",
            fragment: "at least 1024",
            line: 16,
        },
        Case {
            name: "no connection for the producer-id allocator advance",
            text: append("failover:\n  pid_allocator:\n    connections: 0\n"),
            path: "failover.pid_allocator.connections",
            fragment: "between 1 and 16",
            line: 17,
        },
        Case {
            name: "too many requests in flight for the producer-id allocator advance",
            text: append("failover:\n  pid_allocator:\n    enabled: true\n    in_flight: 5000\n"),
            path: "failover.pid_allocator.in_flight",
            fragment: "between 1 and 1024",
            line: 18,
        },
        Case {
            name: "unknown barrier form",
            text: append("failover:\n  barrier: marker\n"),
            path: "failover.barrier",
            fragment: "expected one of `auto`, `control`, `data`",
            line: 16,
        },
        Case {
            name: "producer-id allocator advance timeout too short",
            text: append("failover:\n  pid_allocator:\n    timeout_ms: 5\n"),
            path: "failover.pid_allocator.timeout_ms",
            fragment: "at least 100",
            line: 17,
        },
        Case {
            name: "metadata refresh too fast",
            text: edit(2, "  bootstrap: [\"h:1\"]\n  metadata_refresh_ms: 5"),
            path: "destination.metadata_refresh_ms",
            fragment: "at least 100",
            line: 3,
        },
    ];
    for c in cases {
        let issues = issues_of(&c.text);
        let found = issues.iter().find(|i| i.path == c.path);
        let Some(issue) = found else {
            panic!("case `{}`: no issue at {}; got {issues:#?}", c.name, c.path);
        };
        assert!(
            issue.message.contains(c.fragment),
            "case `{}`: message {:?} lacks {:?}",
            c.name,
            issue.message,
            c.fragment
        );
        assert_eq!(issue.line, Some(c.line), "case `{}`: {issue:?}", c.name);
        assert!(issue.column.is_some(), "case `{}`: no column", c.name);
    }
}

#[test]
fn every_issue_has_a_position() {
    let text = edit(
        9,
        "  bind: 0.0.0.0:9180\nlogging: {format: xml}\nlimits: {max_in_flight: 0}",
    );
    let issues = issues_of(&text);
    assert!(issues.len() >= 3, "{issues:#?}");
    for i in &issues {
        assert!(i.line.is_some() && i.column.is_some(), "{i:?}");
        assert!(!i.path.is_empty(), "{i:?}");
    }
}

#[test]
fn semantic_issues_are_all_collected() {
    let text = edit(2, "  bootstrap: []")
        .replace("port_base: 9192", "port_base: 9100")
        .replace("name: b", "name: a");
    let paths: Vec<String> = issues_of(&text).into_iter().map(|i| i.path).collect();
    assert!(
        paths.contains(&"destination.bootstrap".to_string()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"listeners.mirror.port_base".to_string()),
        "{paths:?}"
    );
    assert!(paths.contains(&"mirrors[1].name".to_string()), "{paths:?}");
}

#[test]
fn error_display_is_file_line_col_path_message() {
    let err = load_str(&edit(9, "  bind: 0.0.0.0:9180"), "conf/gw.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "conf/gw.yaml:9:3: admin.bind: binds 0.0.0.0:9180 without a token; set admin.token or bind to 127.0.0.1"
    );
    let err = load_str(&append("colour: blue\n"), "gw.yaml").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("gw.yaml:15:1: colour: unknown field `colour`"),
        "{err}"
    );
}

#[test]
fn multiple_issues_display_one_per_line() {
    let text = append("logging: {format: xml}\nlimits: {max_in_flight: 0}\n");
    let err = load_str(&text, "f.yaml").unwrap_err();
    let shown = err.to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 2, "{shown}");
    assert!(lines[0].starts_with("f.yaml:15:"), "{shown}");
    assert!(lines[1].starts_with("f.yaml:16:"), "{shown}");
}

#[test]
fn syntax_error_has_position_and_path() {
    let text = "destination:\n  bootstrap: [\"a:1\"\nlisteners: {}\n";
    let issues = issues_of(text);
    assert_eq!(issues.len(), 1);
    assert!(
        issues[0].line.is_some() && issues[0].column.is_some(),
        "{issues:?}"
    );
    assert!(
        issues[0].path.starts_with("destination.bootstrap"),
        "{issues:?}"
    );
}

#[test]
fn empty_document_reports_missing_destination() {
    let issues = issues_of("");
    assert_eq!(issues[0].path, "destination");
    assert_eq!(issues[0].line, Some(1));
}

#[test]
fn missing_file_is_io_error_naming_the_file() {
    let err = load_file(Path::new("/nonexistent/mirrorgate.yaml")).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }));
    assert!(
        err.to_string().contains("/nonexistent/mirrorgate.yaml"),
        "{err}"
    );
}

#[test]
fn shipped_default_config_loads_and_validates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mirrorgate.yaml");
    let cfg = load_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cfg.destination.bootstrap,
        vec!["127.0.0.1:29092".to_string()]
    );
    assert_eq!(cfg.listeners.client.port_for_node(1), Some(9092));
    assert_eq!(cfg.listeners.client.port_for_node(2), Some(9093));
    assert_eq!(cfg.listeners.client.max_brokers, 16);
    let mirror = cfg.listeners.mirror.as_ref().unwrap();
    assert_eq!(mirror.port_for_node(1), Some(9192));
    assert_eq!(
        cfg.admin.bind_addr().unwrap(),
        "127.0.0.1:9180".parse().unwrap()
    );
    assert!(cfg.admin.token.is_none());
    assert_eq!(cfg.state_dir, std::path::PathBuf::from("var/mirrorgate"));
    assert_eq!(cfg.mirrors.len(), 1);
    assert_eq!(cfg.mirrors[0].name, "demo");
    assert_eq!(cfg.mirrors[0].topics, vec!["demo".to_string()]);
    let src = cfg.mirrors[0].source.as_ref().unwrap();
    assert_eq!(src.bootstrap, vec!["127.0.0.1:19092".to_string()]);
    assert_eq!(
        cfg.mirror_for_topic("demo").map(|m| m.name.as_str()),
        Some("demo")
    );
}

#[test]
fn render_effective_round_trips() {
    let text = append(
        "limits: {max_in_flight: 7}\nlogging: {format: json}\nmetrics: {per_partition: false}\n",
    )
    .replace(
        "  bind: 127.0.0.1:9180",
        "  bind: 127.0.0.1:9180\n  token: {env: MG_TOKEN}",
    );
    let cfg = load_str(&text, "t.yaml").unwrap();
    let rendered = render_effective(&cfg);
    let again = load_str(&rendered, "rendered.yaml").unwrap_or_else(|e| panic!("{e}\n{rendered}"));
    assert_eq!(cfg, again);
    // Defaults are filled in.
    assert!(
        rendered.contains("max_frame_bytes: 104857600"),
        "{rendered}"
    );
    assert!(rendered.contains("node_id_base: 1"), "{rendered}");
}

#[test]
fn render_effective_redacts_inline_secret() {
    let text = BASE.replace(
        "  bind: 127.0.0.1:9180",
        "  bind: 127.0.0.1:9180\n  token: {value: hunter2}",
    );
    let cfg = load_str(&text, "t.yaml").unwrap();
    let rendered = render_effective(&cfg);
    assert!(!rendered.contains("hunter2"), "{rendered}");
    assert!(rendered.contains("<redacted>"), "{rendered}");
    assert!(!format!("{cfg:?}").contains("hunter2"));
}

#[test]
fn secret_errors_do_not_echo_the_secret() {
    let text = BASE.replace(
        "  bind: 127.0.0.1:9180",
        "  bind: 127.0.0.1:9180\n  token: {value: [hunter2]}",
    );
    let err = load_str(&text, "t.yaml").unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert_eq!(err.issues()[0].path, "admin.token.value");
}

#[test]
fn token_from_env_resolves() {
    let var = "MIRRORGATE_CONFIG_TEST_TOKEN_7F3A";
    std::env::set_var(var, "from-env\n");
    let s = SecretSource {
        value: None,
        env: Some(var.to_string()),
        file: None,
    };
    assert_eq!(s.resolve().unwrap(), "from-env");
    let missing = SecretSource {
        value: None,
        env: Some("MIRRORGATE_CONFIG_TEST_UNSET_9C1B".to_string()),
        file: None,
    };
    let err = missing.resolve().unwrap_err();
    assert!(
        err.to_string()
            .contains("MIRRORGATE_CONFIG_TEST_UNSET_9C1B"),
        "{err}"
    );
}

#[test]
fn token_from_file_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "from-file\r\n").unwrap();
    let s = SecretSource {
        value: None,
        env: None,
        file: Some(path.clone()),
    };
    assert_eq!(s.resolve().unwrap(), "from-file");
    let missing = SecretSource {
        value: None,
        env: None,
        file: Some(dir.path().join("nope")),
    };
    let err = missing.resolve().unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn secret_with_two_sources_does_not_resolve() {
    let s = SecretSource {
        value: Some("x".into()),
        env: Some("Y".into()),
        file: None,
    };
    assert!(matches!(s.resolve(), Err(SecretError::Ambiguous(2))));
}

#[test]
fn port_for_node_and_node_for_port_are_inverse() {
    let l = ListenerConfig {
        bind: "127.0.0.1".into(),
        advertised_host: None,
        port_base: 9092,
        node_id_base: 1,
        max_brokers: 16,
        tls: None,
        allowed_principals: None,
    };
    for node in 1..=16 {
        let port = l.port_for_node(node).unwrap();
        assert_eq!(l.node_for_port(port), Some(node));
    }
    for port in 9092..=9107 {
        let node = l.node_for_port(port).unwrap();
        assert_eq!(l.port_for_node(node), Some(port));
    }
    assert_eq!(l.port_for_node(0), None);
    assert_eq!(l.port_for_node(17), None);
    assert_eq!(l.node_for_port(9091), None);
    assert_eq!(l.node_for_port(9108), None);
    assert_eq!(l.port_for_node(i32::MIN), None);
}

proptest! {
    #[test]
    fn port_node_inverse_property(base in 1u16.., nbase in 0i32..1_000_000, max in 1u16..64, k in 0u16..64) {
        let l = ListenerConfig {
            bind: "127.0.0.1".into(),
            advertised_host: None,
            port_base: base,
            node_id_base: nbase,
            max_brokers: max,
            tls: None,
            allowed_principals: None,
        };
        let node = nbase + i32::from(k);
        if let Some(port) = l.port_for_node(node) {
            prop_assert_eq!(l.node_for_port(port), Some(node));
        }
        if let Some(n) = l.node_for_port(base.saturating_add(k)) {
            prop_assert_eq!(l.port_for_node(n), Some(base.saturating_add(k)));
        }
    }

    #[test]
    fn load_str_never_panics(s in ".*") {
        let _ = load_str(&s, "fuzz.yaml");
    }

    #[test]
    fn load_str_never_panics_on_yamlish_text(s in "[a-z_:\\-\\[\\]{}, \n\"'&*!|>#0-9.]{0,200}") {
        let _ = load_str(&s, "fuzz.yaml");
    }

    #[test]
    fn load_str_never_panics_on_mutated_base(pos in 0usize..400, ins in "[a-z:\\[\\]{} \n\"-]{0,8}") {
        let mut text = BASE.to_string();
        let at = pos.min(text.len());
        text.insert_str(at, &ins);
        let _ = load_str(&text, "fuzz.yaml");
    }
}

#[test]
fn topic_matcher_anchors_regexes() {
    let m = TopicMatcher::new(&["orders", "regex:pay\\..*", "regex:a|b"]).unwrap();
    assert!(m.matches("orders"));
    assert!(m.matches("pay.eu"));
    assert!(!m.matches("xpay.eu"));
    assert!(!m.matches("orders2"));
    assert!(m.matches("a"));
    assert!(!m.matches("ab"), "alternation must be anchored as a whole");
}

#[test]
fn mirror_for_topic_finds_exact_and_regex() {
    let cfg = load_str(BASE, "t.yaml").unwrap();
    assert_eq!(
        cfg.mirror_for_topic("orders").map(|m| m.name.as_str()),
        Some("a")
    );
    assert_eq!(
        cfg.mirror_for_topic("pay.us").map(|m| m.name.as_str()),
        Some("a")
    );
    assert_eq!(
        cfg.mirror_for_topic("users").map(|m| m.name.as_str()),
        Some("b")
    );
    assert_eq!(cfg.mirror_for_topic("other"), None);
    let router = cfg.topic_router();
    assert_eq!(router.mirror_index("pay.us"), Some(0));
    assert_eq!(
        router
            .mirror_for_topic(&cfg, "users")
            .map(|m| m.name.as_str()),
        Some("b")
    );
    assert_eq!(router.mirror_index("other"), None);
}

#[test]
fn overlapping_regexes_load_and_the_first_mirror_in_config_order_wins() {
    // `pay\..*` (mirror a) and `.*\.us` (mirror b, listed second) both match `pay.us`: a
    // overlap validation cannot see (the texts differ); routing is deterministic.
    let text = edit(14, "    topics: [users, \"regex:.*\\\\.us\"]");
    let cfg = load_str(&text, "t.yaml").unwrap();
    let router = cfg.topic_router();
    assert_eq!(router.mirror_index("pay.us"), Some(0));
    assert_eq!(router.claimants("pay.us"), vec![0, 1]);
    assert_eq!(
        cfg.mirror_for_topic("pay.us").map(|m| m.name.as_str()),
        Some("a")
    );
    assert_eq!(router.mirror_index("shop.us"), Some(1));
    assert_eq!(router.claimants("shop.us"), vec![1]);
    assert_eq!(router.claimants("orders"), vec![0]);
    assert!(router.claimants("other").is_empty());
    // Listing mirror b first makes it the winner.
    let reordered = format!(
        "{}\n  - name: a\n    topics: [orders, \"regex:pay\\\\..*\"]\n",
        text.replace(
            "  - name: a\n    topics: [orders, \"regex:pay\\\\..*\"]\n",
            ""
        )
        .trim_end()
    );
    let cfg = load_str(&reordered, "t.yaml").unwrap();
    assert_eq!(cfg.mirrors[0].name, "b");
    assert_eq!(
        cfg.mirror_for_topic("pay.us").map(|m| m.name.as_str()),
        Some("b")
    );
    assert_eq!(cfg.topic_router().mirror_index("pay.us"), Some(0));
}

#[test]
fn valid_topic_names() {
    assert!(is_valid_topic_name("a.b_c-D9"));
    assert!(!is_valid_topic_name(""));
    assert!(!is_valid_topic_name("."));
    assert!(!is_valid_topic_name(".."));
    assert!(!is_valid_topic_name("a/b"));
    assert!(is_valid_topic_name(&"x".repeat(249)));
    assert!(!is_valid_topic_name(&"x".repeat(250)));
}

#[test]
fn loopback_admin_without_token_is_fine_and_wildcard_listener_overlaps() {
    let ok = BASE.replace("127.0.0.1:9180", "\"[::1]:9180\"");
    load_str(&ok, "t.yaml").unwrap();
    let text = BASE.replace(
        "  mirror:\n    port_base: 9192",
        "  mirror:\n    bind: 0.0.0.0\n    port_base: 9100",
    );
    let issues = issues_of(&text);
    assert!(
        issues
            .iter()
            .any(|i| i.path == "listeners.mirror.port_base"),
        "{issues:#?}"
    );
    let disjoint = BASE.replace(
        "  mirror:\n    port_base: 9192",
        "  mirror:\n    bind: 127.0.0.2\n    port_base: 9100",
    );
    load_str(&disjoint, "t.yaml").unwrap();
}

#[test]
fn validate_works_on_configs_built_in_code() {
    let mut cfg = load_str(BASE, "t.yaml").unwrap();
    assert!(validate(&cfg).is_ok());
    cfg.logging.format = "xml".into();
    let err = validate(&cfg).unwrap_err();
    assert_eq!(err.issues()[0].path, "logging.format");
}

// ------------------------------------------------------------------ SASL

/// `BASE` with `sasl` under `destination` (`sasl` is the YAML of the section's body, indented
/// by four spaces) and `extra` lines appended under `listeners.mirror`.
fn with_sasl(sasl: &str, mirror_extra: &str) -> String {
    let mut text = BASE.replace(
        "  bootstrap: [\"127.0.0.1:29092\"]\n",
        &format!("  bootstrap: [\"127.0.0.1:29092\"]\n  sasl:\n{sasl}"),
    );
    if !mirror_extra.is_empty() {
        text = text.replace(
            "    port_base: 9192\n",
            &format!("    port_base: 9192\n{mirror_extra}"),
        );
    }
    text
}

const ADMIN_SASL: &str =
    "    mechanism: SCRAM-SHA-256\n    username: admin\n    password: {env: MG_SASL_PW}\n";

fn single_issue(text: &str) -> ConfigIssue {
    let issues = issues_of(text);
    assert_eq!(issues.len(), 1, "{issues:?}");
    issues.into_iter().next().unwrap()
}

#[test]
fn destination_sasl_and_allowed_principals_parse() {
    let text = with_sasl(
        ADMIN_SASL,
        "    allowed_principals: [\"User:mirror\", \"User:a,b\"]\n",
    );
    let cfg = load_str(&text, "t.yaml").unwrap();
    let s = cfg.destination.sasl.as_ref().unwrap();
    assert_eq!(s.mechanism, SaslMechanism::ScramSha256);
    assert_eq!(s.principal(), "User:admin");
    assert_eq!(
        cfg.listeners.mirror.unwrap().allowed_principals.unwrap(),
        vec!["User:mirror".to_string(), "User:a,b".to_string()]
    );
}

#[test]
fn unknown_sasl_mechanism_is_reported_at_its_key() {
    let issue = single_issue(&with_sasl(
        "    mechanism: GSSAPI\n    username: admin\n    password: {env: X}\n",
        "",
    ));
    assert_eq!(issue.path, "destination.sasl.mechanism");
    assert!(issue.message.contains("SCRAM-SHA-512"), "{}", issue.message);
    assert_eq!(issue.line, Some(4));
}

#[test]
fn empty_sasl_username_is_refused() {
    let issue = single_issue(&with_sasl(
        "    mechanism: PLAIN\n    username: \"\"\n    password: {env: X}\n",
        "",
    ));
    assert_eq!(issue.path, "destination.sasl.username");
    assert_eq!(issue.message, "must not be empty");
}

#[test]
fn sasl_password_needs_exactly_one_source() {
    let issue = single_issue(&with_sasl(
        "    mechanism: PLAIN\n    username: u\n    password: {env: X, file: /p}\n",
        "",
    ));
    assert_eq!(issue.path, "destination.sasl.password");
    assert!(issue.message.contains("exactly one"), "{}", issue.message);
}

#[test]
fn sasl_password_env_must_name_a_variable() {
    let issue = single_issue(&with_sasl(
        "    mechanism: PLAIN\n    username: u\n    password: {env: \"\"}\n",
        "",
    ));
    assert_eq!(issue.path, "destination.sasl.password.env");
}

#[test]
fn sasl_password_type_errors_do_not_echo_the_secret() {
    let err = load_str(
        &with_sasl(
            "    mechanism: PLAIN\n    username: u\n    password: {value: [hunter2]}\n",
            "",
        ),
        "t.yaml",
    )
    .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert_eq!(err.issues()[0].path, "destination.sasl.password.value");
}

#[test]
fn render_effective_redacts_sasl_passwords() {
    let text = with_sasl(
        "    mechanism: PLAIN\n    username: u\n    password: {value: hunter2}\n",
        "",
    );
    let cfg = load_str(&text, "t.yaml").unwrap();
    let rendered = render_effective(&cfg);
    assert!(!rendered.contains("hunter2"), "{rendered}");
    assert!(rendered.contains("<redacted>"), "{rendered}");
}

#[test]
fn mirror_source_sasl_is_validated_with_its_key_path() {
    let text = BASE.replace(
        "    topics: [users]\n",
        "    topics: [users]\n    source:\n      bootstrap: [\"127.0.0.1:19092\"]\n      sasl: {mechanism: SCRAM-SHA-512, username: \"\", password: {env: X}}\n",
    );
    let issue = single_issue(&text);
    assert_eq!(issue.path, "mirrors[1].source.sasl.username");
}

#[test]
fn allowed_principals_on_the_client_listener_are_refused() {
    let text = with_sasl(ADMIN_SASL, "").replace(
        "    port_base: 9092\n",
        "    port_base: 9092\n    allowed_principals: [\"User:x\"]\n",
    );
    let issue = single_issue(&text);
    assert_eq!(issue.path, "listeners.client.allowed_principals");
    assert!(issue.message.contains("only the mirror listener"));
}

#[test]
fn allowed_principal_must_be_a_user_principal() {
    let issue = single_issue(&with_sasl(
        ADMIN_SASL,
        "    allowed_principals: [\"User:mirror\", \"mirror\"]\n",
    ));
    assert_eq!(issue.path, "listeners.mirror.allowed_principals[1]");
    assert!(issue.message.contains("`mirror` is not `User:NAME`"));
}

#[test]
fn empty_allowed_principals_are_refused() {
    let issue = single_issue(&with_sasl(ADMIN_SASL, "    allowed_principals: []\n"));
    assert_eq!(issue.path, "listeners.mirror.allowed_principals");
}

#[test]
fn duplicate_allowed_principals_are_refused() {
    let issue = single_issue(&with_sasl(
        ADMIN_SASL,
        "    allowed_principals: [\"User:m\", \"User:m\"]\n",
    ));
    assert_eq!(issue.path, "listeners.mirror.allowed_principals[1]");
    assert!(issue.message.contains("listed twice"));
}

#[test]
fn allowed_principals_need_destination_sasl() {
    let text = BASE.replace(
        "    port_base: 9192\n",
        "    port_base: 9192\n    allowed_principals: [\"User:mirror\"]\n",
    );
    let issue = single_issue(&text);
    assert_eq!(issue.path, "listeners.mirror.allowed_principals");
    assert!(issue.message.contains("needs destination.sasl"));
}

#[test]
fn the_commented_sasl_examples_of_the_default_config_are_valid() {
    let text = include_str!("../../config/mirrorgate.yaml");
    let uncommented: String = text
        .lines()
        .map(|l| {
            let t = l.trim_start();
            let indent = &l[..l.len() - t.len()];
            let keep = [
                "# sasl",
                "#   mechanism",
                "#   username",
                "#   password",
                "# allowed_principals",
            ];
            if keep.iter().any(|k| t.starts_with(k)) {
                format!("{indent}{}\n", &t[2..])
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let cfg =
        load_str(&uncommented, "mirrorgate.yaml").unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
    assert!(cfg.destination.sasl.is_some());
    assert!(cfg.mirrors[0].source.as_ref().unwrap().sasl.is_some());
    assert_eq!(
        cfg.listeners.mirror.unwrap().allowed_principals,
        Some(vec!["User:mirror".to_string()])
    );
}

#[test]
fn sasl_username_with_control_characters_is_refused() {
    let issue = single_issue(&with_sasl(
        "    mechanism: PLAIN\n    username: \"a\\u0000b\"\n    password: {env: X}\n",
        "",
    ));
    assert_eq!(issue.path, "destination.sasl.username");
    assert_eq!(issue.message, "must not contain control characters");
}

#[test]
fn empty_inline_sasl_password_is_refused() {
    let issue = single_issue(&with_sasl(
        "    mechanism: PLAIN\n    username: u\n    password: {value: \"\"}\n",
        "",
    ));
    assert_eq!(issue.path, "destination.sasl.password.value");
    assert_eq!(issue.message, "must not be empty");
}

#[test]
fn empty_sasl_password_file_is_refused() {
    let issue = single_issue(&with_sasl(
        "    mechanism: PLAIN\n    username: u\n    password: {file: \"\"}\n",
        "",
    ));
    assert_eq!(issue.path, "destination.sasl.password.file");
    assert_eq!(issue.message, "must name a file");
}

#[test]
fn an_unknown_outcome_settle_time_beyond_ten_minutes_is_refused() {
    let err = load_str(
        &append("limits: {unknown_outcome_settle_ms: 600001}\n"),
        "f.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("limits.unknown_outcome_settle_ms") && err.contains("at most 600000"),
        "{err}"
    );
    let cfg = load_str(&append(""), "f.yaml").unwrap();
    assert_eq!(cfg.limits.unknown_outcome_settle_ms, 5_000);
}

#[test]
fn the_barrier_form_is_read_from_failover_barrier() {
    for (text, want) in [
        ("auto", super::BarrierMode::Auto),
        ("control", super::BarrierMode::Control),
        ("data", super::BarrierMode::Data),
    ] {
        let cfg = load_str(
            &append(&format!("failover:\n  barrier: {text}\n")),
            "b.yaml",
        )
        .unwrap_or_else(|e| panic!("barrier: {text}: {e}"));
        assert_eq!(cfg.failover.barrier, want);
    }
}

/// Mirror `f` with a source and a forward listener on `port_base` (`extra`: more keys of it).
fn with_forward(port_base: u16, extra: &str) -> String {
    append(&format!(
        "  - name: f\n    topics: [fwd]\n    source: {{bootstrap: [\"127.0.0.1:19092\"]}}\n    forward:\n      listener: {{port_base: {port_base}}}\n{extra}"
    ))
}

#[test]
fn a_forward_listener_loads_with_its_defaults() {
    let cfg = load_str(&with_forward(9292, ""), "t.yaml").unwrap();
    let f = cfg.mirrors[2].forward.as_ref().expect("forward");
    assert_eq!(f.listener.port_base, 9292);
    assert_eq!(f.hold_ms, 5000);
    assert_eq!(f.cluster_id_for("f"), "mirrorgate-forward-f");
}

#[test]
fn a_forward_listener_overlapping_another_listener_is_refused() {
    let issues = issues_of(&with_forward(9100, ""));
    assert!(
        issues
            .iter()
            .any(|i| i.path == "mirrors[2].forward.listener.port_base"),
        "{issues:#?}"
    );
}

#[test]
fn a_forward_listener_needs_the_mirrors_source_and_a_hold_of_at_least_100_ms() {
    let text = with_forward(9292, "      hold_ms: 50\n")
        .replace("    source: {bootstrap: [\"127.0.0.1:19092\"]}\n", "");
    let issues = issues_of(&text);
    let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
    assert!(paths.contains(&"mirrors[2].forward"), "{issues:#?}");
    assert!(paths.contains(&"mirrors[2].forward.hold_ms"), "{issues:#?}");
}

#[test]
fn a_mirror_mirrored_by_another_tool_keeps_its_source_for_the_forward_listener_alone() {
    let text = with_forward(9292, "    mirroring: external\n");
    let cfg = load_str(&text, "t.yaml").unwrap();
    let m = &cfg.mirrors[2];
    assert_eq!(m.mirroring, super::Mirroring::External);
    assert!(m.source.is_some(), "the forward listener's upstream");
    assert!(m.agent_source().is_none(), "no built-in agent");
    let agent = load_str(&with_forward(9292, ""), "t.yaml").unwrap();
    assert!(agent.mirrors[2].agent_source().is_some());
}

#[test]
fn an_unknown_mirroring_tool_is_refused() {
    let text = with_forward(9292, "    mirroring: replicator\n");
    let err = load_str(&text, "t.yaml").unwrap_err().to_string();
    assert!(err.contains("mirroring"), "{err}");
}
