//! The compose stack and the Dockerfile agree with `config/`, the provisioning and each other,
//! and the image's build command builds here.

use super::*;

/// Parse a compose port entry `IP:HOST[-HOST2]:CONTAINER[-CONTAINER2]` into (ip, host ports,
/// container ports).
fn parse_ports(entry: &str) -> (String, Vec<u16>, Vec<u16>) {
    let entry = entry.split('/').next().unwrap_or(entry);
    let parts: Vec<&str> = entry.split(':').collect();
    assert_eq!(parts.len(), 3, "port {entry:?} should be IP:HOST:CONTAINER");
    let range = |s: &str| -> Vec<u16> {
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u16, u16) = (a.parse().expect("port"), b.parse().expect("port"));
                assert!(a <= b, "range {s}");
                (a..=b).collect()
            }
            None => vec![s.parse().expect("port")],
        }
    };
    (parts[0].to_string(), range(parts[1]), range(parts[2]))
}

/// Named volumes of a service: target → volume name.
fn named_volumes(service: &Yaml, name: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for v in service["volumes"].as_sequence().into_iter().flatten() {
        let s = ystr(v, &format!("{name}.volumes"));
        let parts: Vec<&str> = s.split(':').collect();
        if !parts[0].starts_with('.') && !parts[0].starts_with('/') {
            out.insert(parts[1].to_string(), parts[0].to_string());
        }
    }
    out
}

fn env_of(service: &Yaml, key: &str) -> Option<String> {
    let e = &service["environment"];
    if let Some(list) = e.as_sequence() {
        return list.iter().find_map(|kv| {
            kv.as_str()
                .and_then(|s| s.split_once('='))
                .filter(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        });
    }
    match &e[key] {
        Yaml::Null => None,
        v => Some(yscalar(v, key)),
    }
}

/// Instructions of a Dockerfile stage by stage: (stage name, [(INSTRUCTION, arguments)]), with
/// line continuations joined and comments dropped.
fn dockerfile() -> Vec<(String, Vec<(String, String)>)> {
    let text = read("Dockerfile");
    let mut lines = Vec::new();
    let mut cur = String::new();
    for raw in text.lines() {
        let t = raw.trim();
        if cur.is_empty() && (t.starts_with('#') || t.is_empty()) {
            continue;
        }
        if t.starts_with('#') {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
        } else {
            cur.push_str(t);
            lines.push(std::mem::take(&mut cur));
        }
    }
    let mut stages: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for l in lines {
        let (ins, args) = l.split_once(char::is_whitespace).unwrap_or((&l, ""));
        let ins = ins.to_ascii_uppercase();
        let args = args.trim().to_string();
        if ins == "FROM" {
            let words: Vec<&str> = args.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, a, n] if a.eq_ignore_ascii_case("as") => n.to_string(),
                _ => format!("stage{}", stages.len()),
            };
            stages.push((name, vec![(ins, args)]));
        } else {
            stages
                .last_mut()
                .expect("Dockerfile starts with FROM")
                .1
                .push((ins, args));
        }
    }
    stages
}

/// The `cargo ...` commands of the build stage's RUN instructions, as argument lists.
fn dockerfile_cargo_commands() -> Vec<Vec<String>> {
    let stages = dockerfile();
    assert!(stages.len() >= 2, "multi-stage Dockerfile: {stages:?}");
    let (name, build) = &stages[0];
    let mut out = Vec::new();
    for (ins, args) in build {
        if ins != "RUN" {
            continue;
        }
        for cmd in args.split("&&") {
            let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
            if words.first().map(String::as_str) == Some("cargo") {
                assert!(
                    !cmd.contains(['$', '"', '\'', '`', ';', '|']),
                    "stage {name}: keep the cargo line plain (no shell syntax): {cmd}"
                );
                out.push(words);
            }
        }
    }
    out
}

/// Whether `path` (relative to the repo) is excluded by `.dockerignore`.
fn dockerignored(path: &str) -> bool {
    read(".dockerignore").lines().any(|l| {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with('!') {
            return false;
        }
        let pat = l.trim_start_matches('/').trim_end_matches('/');
        if pat.starts_with('*') {
            return path.ends_with(pat.trim_start_matches('*'));
        }
        path == pat || path.starts_with(&format!("{pat}/"))
    })
}

/// The HEALTHCHECK command of the Dockerfile as arguments.
fn dockerfile_healthcheck() -> Vec<String> {
    let stages = dockerfile();
    let last = &stages.last().expect("stages").1;
    let hc = last
        .iter()
        .find(|(i, _)| i == "HEALTHCHECK")
        .map(|(_, a)| a.clone())
        .expect("the runtime stage has a HEALTHCHECK");
    let cmd = hc
        .split_once("CMD")
        .map(|(_, c)| c.trim().to_string())
        .expect("HEALTHCHECK ... CMD");
    serde_json::from_str::<Vec<String>>(&cmd)
        .unwrap_or_else(|_| cmd.split_whitespace().map(str::to_string).collect())
}

fn admin_port(cfg: &mirrorgate::config::Config) -> u16 {
    cfg.admin
        .bind
        .parse::<std::net::SocketAddr>()
        .expect("admin.bind")
        .port()
}

/// The second gateway instance of the compose stack (`mirrorgate-b`) agrees with the first
/// (`first`): the same destination, mirrors and state topic, its own instance id, no built-in
/// agent, and exactly its own listener ranges and admin port published. Returns its config.
fn second_instance(
    services: &Yaml,
    first: &mirrorgate::config::Config,
) -> mirrorgate::config::Config {
    let b = &services["mirrorgate-b"];
    assert!(b.is_mapping(), "service mirrorgate-b missing");
    let command: Vec<String> = yseq(&b["command"], "mirrorgate-b.command")
        .iter()
        .map(|v| ystr(v, "command").to_string())
        .collect();
    let target = command
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| command.get(i + 1))
        .expect("mirrorgate-b --config FILE")
        .clone();
    let mounts = bind_mounts(b, "mirrorgate-b");
    let src = mounts.get(&target).expect("mirrorgate-b config mounted");
    let cfg =
        mirrorgate::config::load_file(&repo().join(src)).unwrap_or_else(|e| panic!("{src}: {e}"));
    assert_eq!(cfg.destination.bootstrap, first.destination.bootstrap);
    let (ia, ib) = (
        first.instances.as_ref().expect("gw-a has instances"),
        cfg.instances.as_ref().expect("gw-b has instances"),
    );
    assert_eq!(ia.state_topic, ib.state_topic, "one state topic");
    assert_ne!(ia.id, ib.id, "two instance ids");
    let mirrors = |c: &mirrorgate::config::Config| -> Vec<(String, Vec<String>)> {
        c.mirrors
            .iter()
            .map(|m| (m.name.clone(), m.topics.clone()))
            .collect()
    };
    assert_eq!(mirrors(&cfg), mirrors(first), "the same mirrors");
    assert!(
        cfg.mirrors.iter().all(|m| m.source.is_none()),
        "the agent runs on gw-a only"
    );
    let mut published = BTreeSet::new();
    for p in yseq(&b["ports"], "mirrorgate-b.ports") {
        let (ip, host, cont) = parse_ports(ystr(p, "port"));
        assert_eq!(ip, "127.0.0.1");
        assert_eq!(host, cont);
        published.extend(host);
    }
    let mut expected: BTreeSet<u16> = BTreeSet::new();
    for l in [Some(&cfg.listeners.client), cfg.listeners.mirror.as_ref()]
        .into_iter()
        .flatten()
    {
        expected.extend((0..l.max_brokers).map(|i| l.port_base + i));
        assert_eq!(l.advertised(), "127.0.0.1");
    }
    expected.insert(admin_port(&cfg));
    assert_eq!(published, expected, "mirrorgate-b published ports vs {src}");
    let state = cfg.state_dir.to_string_lossy().to_string();
    assert!(named_volumes(b, "mirrorgate-b").contains_key(&state));
    let hc: Vec<String> = yseq(&b["healthcheck"]["test"], "healthcheck.test")
        .iter()
        .map(|v| ystr(v, "test").to_string())
        .collect();
    assert!(
        hc.contains(&format!("127.0.0.1:{}", admin_port(&cfg))),
        "{hc:?}"
    );
    cfg
}

#[test]
fn compose_stack_agrees_with_config_dockerfile_and_provisioning() {
    let compose = yaml("docker-compose.yml");
    let services = &compose["services"];
    for s in [
        "source-1",
        "destination-1",
        "destination-2",
        "mirrorgate",
        "prometheus",
        "grafana",
    ] {
        assert!(services[s].is_mapping(), "service {s} missing");
    }
    let declared_volumes: BTreeSet<String> = compose["volumes"]
        .as_mapping()
        .map(|m| m.keys().map(|k| ystr(k, "volume").to_string()).collect())
        .unwrap_or_default();
    for (name, svc) in services.as_mapping().expect("services") {
        let name = ystr(name, "service name");
        for (target, src) in bind_mounts(svc, name) {
            assert!(
                repo().join(&src).exists(),
                "{name}: mounts ./{src} at {target}, which is not in the repository"
            );
        }
        for (target, vol) in named_volumes(svc, name) {
            assert!(
                declared_volumes.contains(&vol),
                "{name}: volume {vol} at {target} is not declared"
            );
        }
        // depends_on: a list of names, or a map of name → condition.
        let deps: Vec<&Yaml> = match &svc["depends_on"] {
            Yaml::Mapping(m) => m.keys().collect(),
            other => other.as_sequence().into_iter().flatten().collect(),
        };
        for dep in deps {
            let dep = ystr(dep, "depends_on");
            assert!(
                services[dep].is_mapping(),
                "{name} depends on unknown {dep}"
            );
        }
    }

    // ---- mirrorgate: built from the Dockerfile, configured by a mounted config.
    let mg = &services["mirrorgate"];
    let build = match &mg["build"] {
        Yaml::String(s) => s.clone(),
        b => ystr(&b["context"], "mirrorgate.build.context").to_string(),
    };
    assert_eq!(build, ".", "mirrorgate is built from the repository root");
    assert!(repo().join("Dockerfile").exists());
    let command: Vec<String> = yseq(&mg["command"], "mirrorgate.command")
        .iter()
        .map(|v| ystr(v, "command").to_string())
        .collect();
    assert_eq!(
        command.first().map(String::as_str),
        Some("run"),
        "{command:?}"
    );
    let cfg_target = command
        .iter()
        .position(|a| a == "--config" || a == "-c")
        .and_then(|i| command.get(i + 1))
        .expect("mirrorgate command has --config FILE")
        .clone();
    let mounts = bind_mounts(mg, "mirrorgate");
    let cfg_src = mounts
        .get(&cfg_target)
        .unwrap_or_else(|| panic!("{cfg_target} is not mounted from the repository: {mounts:?}"));
    let ccfg = mirrorgate::config::load_file(&repo().join(cfg_src))
        .unwrap_or_else(|e| panic!("{cfg_src}: {e}"));
    let local = mirrorgate::config::load_file(&repo().join("config/mirrorgate.yaml"))
        .expect("config/mirrorgate.yaml");

    // Same ports as the local default.
    let cl = &ccfg.listeners.client;
    let ll = &local.listeners.client;
    assert_eq!(
        (cl.port_base, cl.node_id_base),
        (ll.port_base, ll.node_id_base)
    );
    let cm = ccfg
        .listeners
        .mirror
        .as_ref()
        .expect("compose config: mirror listener");
    let lm = local
        .listeners
        .mirror
        .as_ref()
        .expect("local config: mirror listener");
    assert_eq!(
        (cm.port_base, cm.node_id_base),
        (lm.port_base, lm.node_id_base)
    );
    assert_eq!(admin_port(&ccfg), admin_port(&local), "admin port");
    let names = |c: &mirrorgate::config::Config| -> Vec<(String, Vec<String>)> {
        c.mirrors
            .iter()
            .map(|m| (m.name.clone(), m.topics.clone()))
            .collect()
    };
    assert_eq!(
        names(&ccfg),
        names(&local),
        "same mirrors as config/mirrorgate.yaml"
    );

    // Published ports: exactly the listener ranges and the admin port, on loopback, host ==
    // container; at least one port per destination broker of the compose file.
    let mut published = BTreeSet::new();
    for p in yseq(&mg["ports"], "mirrorgate.ports") {
        let (ip, host, cont) = parse_ports(ystr(p, "port"));
        assert_eq!(ip, "127.0.0.1", "publish on loopback only");
        assert_eq!(host, cont, "host and container ports match");
        published.extend(host);
    }
    let range = |l: &mirrorgate::config::ListenerConfig| -> Vec<u16> {
        (0..l.max_brokers).map(|i| l.port_base + i).collect()
    };
    let mut expected: BTreeSet<u16> = range(cl).into_iter().chain(range(cm)).collect();
    expected.insert(admin_port(&ccfg));
    assert_eq!(
        published, expected,
        "mirrorgate published ports vs {cfg_src}"
    );
    let dest_services: Vec<&str> = ["destination-1", "destination-2"].to_vec();
    assert!(usize::from(cl.max_brokers) >= dest_services.len());
    for l in [cl, cm] {
        assert_eq!(
            l.advertised(),
            "127.0.0.1",
            "clients on the host reach the published ports at 127.0.0.1"
        );
    }

    // The gateway reaches the brokers on their INTERNAL listeners by service name.
    let internal = |svc: &str| -> String {
        let adv = env_of(&services[svc], "KAFKA_ADVERTISED_LISTENERS").expect("advertised");
        adv.split(',')
            .find_map(|l| l.strip_prefix("INTERNAL://"))
            .unwrap_or_else(|| panic!("{svc}: no INTERNAL listener in {adv}"))
            .to_string()
    };
    let dest_internal: BTreeSet<String> = dest_services.iter().map(|s| internal(s)).collect();
    assert!(!ccfg.destination.bootstrap.is_empty());
    for a in &ccfg.destination.bootstrap {
        assert!(
            dest_internal.contains(a),
            "{cfg_src}: destination.bootstrap {a} is not a destination INTERNAL listener {dest_internal:?}"
        );
    }
    let src_internal = internal("source-1");
    for m in &ccfg.mirrors {
        if let Some(s) = &m.source {
            assert_eq!(
                s.bootstrap,
                vec![src_internal.clone()],
                "mirror {} source",
                m.name
            );
        }
    }
    // A non-loopback admin needs a token; compose provides it.
    if let Some(t) = &ccfg.admin.token {
        if let Some(var) = &t.env {
            assert!(
                env_of(mg, var).is_some(),
                "compose sets {var} for mirrorgate"
            );
        }
    }
    // State survives restarts.
    let state = ccfg.state_dir.to_string_lossy().to_string();
    assert!(
        named_volumes(mg, "mirrorgate").contains_key(&state),
        "state_dir {state} is a named volume"
    );

    // Health check: the Dockerfile's and compose's are the same `mirrorgate status` on the
    // admin port (it asks /readyz and exits 0 only when ready).
    let hc = dockerfile_healthcheck();
    let hc_ok = (hc.first().map(String::as_str) == Some("mirrorgate")
        && hc.get(1).map(String::as_str) == Some("status"))
        || hc.iter().any(|a| a.contains("/readyz"));
    assert!(
        hc_ok,
        "HEALTHCHECK runs `mirrorgate status` or hits /readyz: {hc:?}"
    );
    let admin_arg = hc
        .iter()
        .position(|a| a == "--admin")
        .and_then(|i| hc.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9180".into());
    assert_eq!(
        admin_arg,
        format!("127.0.0.1:{}", admin_port(&ccfg)),
        "health check asks the configured admin port"
    );
    let compose_hc: Vec<String> = yseq(&mg["healthcheck"]["test"], "healthcheck.test")
        .iter()
        .map(|v| ystr(v, "test").to_string())
        .collect();
    assert_eq!(compose_hc.first().map(String::as_str), Some("CMD"));
    assert_eq!(
        &compose_hc[1..],
        &hc[..],
        "compose and Dockerfile health checks agree"
    );

    // Dockerfile: multi-stage, builder new enough, non-root runtime, COPY sources present and
    // not excluded by .dockerignore, the built binary copied from where cargo puts it.
    let stages = dockerfile();
    assert!(stages.len() >= 2);
    let from = |s: &(String, Vec<(String, String)>)| -> String {
        s.1[0].1.split_whitespace().next().unwrap_or("").to_string()
    };
    let builder = from(&stages[0]);
    let rust_version = builder
        .strip_prefix("rust:")
        .and_then(|v| v.split('-').next())
        .unwrap_or_else(|| panic!("builder image {builder} is not rust:X.Y"));
    let cargo_toml = read("Cargo.toml");
    let msrv = cargo_toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version"))
        .and_then(|r| r.split('"').nth(1))
        .expect("rust-version in Cargo.toml");
    let ver = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    assert!(
        ver(rust_version) >= ver(msrv),
        "builder {builder} older than rust-version {msrv}"
    );
    let runtime = stages.last().expect("runtime");
    let user = runtime
        .1
        .iter()
        .rev()
        .find(|(i, _)| i == "USER")
        .map(|(_, a)| a.clone())
        .expect("runtime stage sets USER");
    let uname = user.split(':').next().unwrap_or("");
    assert!(
        uname != "root" && uname != "0",
        "runtime runs as non-root, not {user}"
    );
    let build_workdir = stages[0]
        .1
        .iter()
        .rev()
        .find(|(i, _)| i == "WORKDIR")
        .map(|(_, a)| a.clone())
        .expect("build stage WORKDIR");
    for (stage, ins) in &stages {
        for (i, args) in ins {
            if i != "COPY" {
                continue;
            }
            let words: Vec<&str> = args.split_whitespace().collect();
            if let Some(from_stage) = words.iter().find_map(|w| w.strip_prefix("--from=")) {
                assert_eq!(from_stage, stages[0].0, "COPY --from the build stage");
                let src = words[words.len() - 2];
                assert_eq!(
                    src,
                    format!("{build_workdir}/target/release/mirrorgate"),
                    "the runtime copies the binary cargo built"
                );
                continue;
            }
            let srcs = &words[..words.len() - 1];
            for s in srcs.iter().filter(|s| !s.starts_with("--")) {
                let s = s.trim_start_matches("./").trim_end_matches('/');
                assert!(
                    repo().join(s).exists(),
                    "stage {stage}: COPY {s}: not in the repository"
                );
                assert!(
                    !dockerignored(s),
                    "stage {stage}: COPY {s} is excluded by .dockerignore"
                );
            }
        }
    }
    for big in ["target", ".git"] {
        assert!(dockerignored(big), ".dockerignore excludes {big}");
    }
    let expose: BTreeSet<u16> = runtime
        .1
        .iter()
        .filter(|(i, _)| i == "EXPOSE")
        .flat_map(|(_, a)| {
            a.split_whitespace()
                .flat_map(|p| {
                    let p = p.split('/').next().unwrap_or(p);
                    match p.split_once('-') {
                        Some((a, b)) => (a.parse::<u16>().expect("port")
                            ..=b.parse::<u16>().expect("port"))
                            .collect::<Vec<_>>(),
                        None => vec![p.parse().expect("port")],
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(expose, expected, "EXPOSE matches the published ports");
    let cmds = dockerfile_cargo_commands();
    assert!(
        cmds.iter().any(|c| c.contains(&"build".to_string())
            && c.contains(&"--release".to_string())
            && c.contains(&"--locked".to_string())
            && c.windows(2)
                .any(|w| w[0] == "--bin" && w[1] == "mirrorgate")),
        "build stage runs cargo build --release --locked --bin mirrorgate: {cmds:?}"
    );

    // ---- prometheus: the compose config is config/prometheus.yml with the mirrorgate service
    // as target; rule files mounted next to it.
    let prom = &services["prometheus"];
    let pmounts = bind_mounts(prom, "prometheus");
    let pcmd: Vec<String> = yseq(&prom["command"], "prometheus.command")
        .iter()
        .map(|v| ystr(v, "command").to_string())
        .collect();
    let conf_target = pcmd
        .iter()
        .find_map(|a| a.strip_prefix("--config.file="))
        .expect("prometheus --config.file=")
        .to_string();
    let conf_src = pmounts
        .get(&conf_target)
        .unwrap_or_else(|| panic!("{conf_target} not mounted: {pmounts:?}"));
    let pc = yaml(conf_src);
    let conf_dir = Path::new(&conf_target).parent().expect("dir");
    for r in yseq(&pc["rule_files"], "rule_files") {
        let r = ystr(r, "rule file");
        let target = conf_dir.join(r).to_string_lossy().to_string();
        let src = pmounts
            .get(&target)
            .unwrap_or_else(|| panic!("rule file {target} not mounted: {pmounts:?}"));
        assert_eq!(src, "config/alerts.yml");
    }
    let job = yseq(&pc["scrape_configs"], "scrape_configs")
        .iter()
        .find(|j| j["job_name"] == "mirrorgate")
        .expect("job mirrorgate")
        .clone();
    let targets = yseq(&job["static_configs"][0]["targets"], "targets");
    assert_eq!(
        targets
            .iter()
            .map(|t| ystr(t, "target"))
            .collect::<Vec<_>>(),
        vec![
            format!("mirrorgate:{}", admin_port(&ccfg)),
            format!(
                "mirrorgate-b:{}",
                admin_port(&second_instance(services, &ccfg))
            ),
        ],
        "compose Prometheus scrapes both gateway instances' admin ports"
    );
    // Identical to config/prometheus.yml apart from the targets, which there are the local
    // default's admin address.
    let mut local_pc = yaml("config/prometheus.yml");
    let local_targets = local_pc["scrape_configs"][0]["static_configs"][0]["targets"].clone();
    assert_eq!(
        yseq(&local_targets, "targets")
            .iter()
            .map(|t| ystr(t, "target"))
            .collect::<Vec<_>>(),
        vec![local.admin.bind.clone()],
        "config/prometheus.yml scrapes config/mirrorgate.yaml's admin address"
    );
    local_pc["scrape_configs"][0]["static_configs"][0]["targets"] =
        pc["scrape_configs"][0]["static_configs"][0]["targets"].clone();
    assert_eq!(
        local_pc, pc,
        "{conf_src} differs from config/prometheus.yml beyond the targets"
    );
    assert!(
        yseq(&prom["ports"], "prometheus.ports")
            .iter()
            .any(|p| ystr(p, "port").ends_with(":9090:9090")),
        "prometheus on 9090"
    );

    // ---- grafana: provisioning and dashboards mounted; the datasource points at the
    // prometheus service; the dashboard provider reads the mounted dashboards directory.
    let graf = &services["grafana"];
    let gmounts = bind_mounts(graf, "grafana");
    assert_eq!(
        gmounts.get("/etc/grafana/provisioning").map(String::as_str),
        Some("config/grafana/provisioning"),
        "{gmounts:?}"
    );
    let prov = yaml("config/grafana/provisioning/dashboards/mirrorgate.yml");
    let providers = yseq(&prov["providers"], "providers");
    assert_eq!(providers.len(), 1);
    let dash_path = ystr(&providers[0]["options"]["path"], "provider path");
    assert_eq!(
        gmounts.get(dash_path).map(String::as_str),
        Some("dashboards"),
        "the provider path {dash_path} is the mounted dashboards/ directory"
    );
    assert!(repo().join("dashboards/mirrorgate.json").exists());
    if let Some(home) = env_of(graf, "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH") {
        let rel = home
            .strip_prefix(&format!("{dash_path}/"))
            .unwrap_or_else(|| panic!("home dashboard {home} outside {dash_path}"));
        assert!(repo().join("dashboards").join(rel).exists(), "{home}");
    }
    assert_eq!(
        env_of(graf, "GF_AUTH_ANONYMOUS_ENABLED").as_deref(),
        Some("true")
    );
    assert_eq!(
        env_of(graf, "GF_AUTH_ANONYMOUS_ORG_ROLE").as_deref(),
        Some("Viewer")
    );
    assert!(
        yseq(&graf["ports"], "grafana.ports")
            .iter()
            .any(|p| ystr(p, "port").ends_with(":3000:3000")),
        "grafana on 3000"
    );
    let (_, uid, url) = provisioned_datasource();
    assert_eq!(
        url, "http://prometheus:9090",
        "datasource url is the compose service"
    );
    assert!(!uid.is_empty());
}

// ------------------------------------------------------------------------------ build

/// The build stage's cargo line is plain and locked. The image itself is built for real (the
/// Dockerfile, under podman) and its binary started with the image's config by
/// `integration/compose-test`, the test command's last step; a release build here, beside the
/// parallel integration tests, only repeated it and starved them.
#[test]
fn dockerfile_build_stage_is_one_locked_release_build_of_the_gateway() {
    let cmds = dockerfile_cargo_commands();
    assert_eq!(cmds.len(), 1, "one cargo line in the build stage: {cmds:?}");
    let words = &cmds[0];
    for flag in ["build", "--release", "--locked"] {
        assert!(words.contains(&flag.to_string()), "{words:?} has {flag}");
    }
    assert!(
        words
            .windows(2)
            .any(|w| w[0] == "--bin" && w[1] == "mirrorgate"),
        "{words:?} builds the gateway binary"
    );
}

// ------------------------------------------------------------------------------ promtool
