//! Semantic validation of a parsed [`Config`]. Collects every issue; positions are attached by
//! the loader from the position index.

use super::error::ConfigIssue;
use super::topics::{compile_topic_regex, is_valid_topic_name, TopicEntry, MAX_TOPIC_LEN};
use super::{ClusterConfig, Config, ListenerConfig};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// More connection threads than this is a typo, not a machine.
const MAX_CONNECTION_THREADS: usize = 1024;
/// Lower bounds on limits.
pub const MIN_MAX_FRAME_BYTES: u32 = 1024;
pub const MIN_IDLE_TIMEOUT_MS: u64 = 1000;
/// Longest `limits.unknown_outcome_settle_ms` (10 min): a failover may wait that long.
pub const MAX_UNKNOWN_OUTCOME_SETTLE_MS: u64 = 600_000;
pub const MIN_METADATA_REFRESH_MS: u64 = 100;

struct Issues(Vec<ConfigIssue>);

impl Issues {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue::new(path, message));
    }
}

/// Every semantic problem of `cfg`, without positions.
pub fn semantic_issues(cfg: &Config) -> Vec<ConfigIssue> {
    let mut out = Issues(Vec::new());
    check_cluster(&mut out, "destination", &cfg.destination);
    check_listeners_and_admin(&mut out, cfg);
    if cfg.state_dir.as_os_str().is_empty() {
        out.push("state_dir", "must not be empty");
    }
    check_limits(&mut out, cfg);
    check_psm(&mut out, cfg);
    check_failover(&mut out, cfg);
    check_logging(&mut out, cfg);
    check_mirrors(&mut out, cfg);
    out.0.extend(super::sasl::check_allowed_principals(cfg));
    out.0.extend(super::groups::check(cfg));
    out.0.extend(super::recovery::check(cfg));
    out.0.extend(super::instances::check(cfg));
    out.0
}

fn check_cluster(out: &mut Issues, path: &str, c: &ClusterConfig) {
    if let Some(s) = &c.sasl {
        out.0
            .extend(super::sasl::check_sasl(&format!("{path}.sasl"), s));
    }
    if c.bootstrap.is_empty() {
        out.push(
            format!("{path}.bootstrap"),
            "must list at least one `host:port` address",
        );
    }
    for (i, addr) in c.bootstrap.iter().enumerate() {
        if let Err(why) = check_host_port(addr) {
            out.push(
                format!("{path}.bootstrap[{i}]"),
                format!("`{addr}` is not `host:port`: {why}"),
            );
        }
    }
    if c.connect_timeout_ms == 0 {
        out.push(format!("{path}.connect_timeout_ms"), "must be at least 1");
    }
    if c.metadata_refresh_ms < MIN_METADATA_REFRESH_MS {
        out.push(
            format!("{path}.metadata_refresh_ms"),
            format!(
                "must be at least {MIN_METADATA_REFRESH_MS} (got {})",
                c.metadata_refresh_ms
            ),
        );
    }
    if let Some(t) = &c.tls {
        out.0
            .extend(super::tls::cluster_tls_issues(&format!("{path}.tls"), t));
    }
}

/// Checks a `host:port` address (IPv6 hosts in brackets).
pub fn check_host_port(addr: &str) -> Result<(), String> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err("missing `:port`".to_string());
    };
    if host.is_empty() {
        return Err("empty host".to_string());
    }
    if host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err("invalid character in host".to_string());
    }
    if let Some(inner) = host.strip_prefix('[') {
        match inner.strip_suffix(']') {
            Some(v6) if v6.parse::<std::net::Ipv6Addr>().is_ok() => {}
            _ => return Err("invalid bracketed IPv6 address".to_string()),
        }
    } else if host.contains(':') {
        return Err("an IPv6 host must be written in brackets, like `[::1]:9092`".to_string());
    }
    match port.parse::<u16>() {
        Ok(0) => Err("port 0 is not allowed".to_string()),
        Ok(_) => Ok(()),
        Err(_) => Err(format!("invalid port `{port}` (1..=65535)")),
    }
}

/// A bound port range on an address, for overlap checks.
struct Bound {
    path: String,
    what: String,
    ip: IpAddr,
    first: u16,
    last: u16,
}

fn check_listener(out: &mut Issues, path: &str, l: &ListenerConfig) -> Option<Bound> {
    let mut ok = true;
    let ip = match l.bind.parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => {
            out.push(
                format!("{path}.bind"),
                format!("`{}` is not an IP address", l.bind),
            );
            None
        }
    };
    if let Some(h) = &l.advertised_host {
        if h.is_empty() || h.chars().any(char::is_whitespace) {
            out.push(
                format!("{path}.advertised_host"),
                "must be a non-empty host name",
            );
        }
    }
    if l.port_base == 0 {
        out.push(format!("{path}.port_base"), "must not be 0");
        ok = false;
    }
    if l.max_brokers == 0 {
        out.push(format!("{path}.max_brokers"), "must be at least 1");
        ok = false;
    }
    let last = u32::from(l.port_base) + u32::from(l.max_brokers).saturating_sub(1);
    if last > u32::from(u16::MAX) {
        out.push(
            format!("{path}.port_base"),
            format!(
                "port range {}..={last} does not fit below 65536 (port_base {} + max_brokers {})",
                l.port_base, l.port_base, l.max_brokers
            ),
        );
        ok = false;
    }
    if l.node_id_base < 0 {
        out.push(format!("{path}.node_id_base"), "must not be negative");
    } else if l
        .node_id_base
        .checked_add(i32::from(l.max_brokers))
        .is_none()
    {
        out.push(
            format!("{path}.node_id_base"),
            "node id range overflows a 32-bit integer",
        );
    }
    if let Some(t) = &l.tls {
        out.0
            .extend(super::tls::listener_tls_issues(&format!("{path}.tls"), t));
    }
    let ip = ip?;
    if !ok {
        return None;
    }
    Some(Bound {
        path: format!("{path}.port_base"),
        what: format!("{path} ports {}..={last}", l.port_base),
        ip,
        first: l.port_base,
        last: last as u16,
    })
}

fn ips_overlap(a: IpAddr, b: IpAddr) -> bool {
    a == b || a.is_unspecified() || b.is_unspecified()
}

fn ranges_overlap(a: &Bound, b: &Bound) -> bool {
    ips_overlap(a.ip, b.ip) && a.first <= b.last && b.first <= a.last
}

fn check_listeners_and_admin(out: &mut Issues, cfg: &Config) {
    let mut bounds = Vec::new();
    if let Some(b) = check_listener(out, "listeners.client", &cfg.listeners.client) {
        bounds.push(b);
    }
    if let Some(m) = &cfg.listeners.mirror {
        if let Some(b) = check_listener(out, "listeners.mirror", m) {
            bounds.push(b);
        }
    }
    for (mi, m) in cfg.mirrors.iter().enumerate() {
        let Some(f) = &m.forward else { continue };
        let path = format!("mirrors[{mi}].forward");
        if m.source.is_none() {
            out.push(
                path.clone(),
                "needs the mirror's source (the forward listener's upstream until the failover)",
            );
        }
        if f.hold_ms < 100 {
            out.push(format!("{path}.hold_ms"), "must be at least 100");
        }
        if let Some(id) = &f.cluster_id {
            if id.is_empty() || id.chars().any(char::is_whitespace) {
                out.push(format!("{path}.cluster_id"), "must be a non-empty word");
            }
        }
        if let Some(b) = check_listener(out, &format!("{path}.listener"), &f.listener) {
            bounds.push(b);
        }
    }
    for (i, later) in bounds.iter().enumerate() {
        if let Some(earlier) = bounds[..i].iter().find(|e| ranges_overlap(e, later)) {
            out.push(
                later.path.clone(),
                format!(
                    "{} on {} overlap {} on {}",
                    later.what, later.ip, earlier.what, earlier.ip
                ),
            );
        }
    }

    let admin = &cfg.admin;
    if let Some(t) = &admin.token {
        let n = t.fields_set();
        if n != 1 {
            out.push(
                "admin.token",
                format!("set exactly one of value, env or file (found {n})"),
            );
        } else if t.env.as_deref() == Some("") {
            out.push("admin.token.env", "must name an environment variable");
        } else if t.value.as_deref() == Some("") {
            out.push("admin.token.value", "must not be empty");
        } else if t.file.as_ref().is_some_and(|f| f.as_os_str().is_empty()) {
            out.push("admin.token.file", "must name a file");
        }
    }
    if let Some(t) = &admin.audit_topic {
        if !super::topics::is_valid_topic_name(t) {
            out.push(
                "admin.audit_topic",
                format!("`{t}` is not a valid Kafka topic name (1-249 of a-z A-Z 0-9 . _ -, not `.` or `..`)"),
            );
        } else if cfg.topic_router().mirror_index(t).is_some() {
            out.push(
                "admin.audit_topic",
                format!(
                    "`{t}` is a mirror topic (read-only while mirrored); name a topic of its own"
                ),
            );
        }
    }
    match admin.bind.parse::<SocketAddr>() {
        Err(_) => out.push(
            "admin.bind",
            format!(
                "`{}` is not `ip:port` (like 127.0.0.1:9180 or [::1]:9180)",
                admin.bind
            ),
        ),
        Ok(addr) => {
            if !addr.ip().is_loopback() && admin.token.is_none() {
                out.push(
                    "admin.bind",
                    format!("binds {addr} without a token; set admin.token or bind to 127.0.0.1"),
                );
            }
            let port = addr.port();
            if port != 0 {
                for b in &bounds {
                    if ips_overlap(addr.ip(), b.ip) && b.first <= port && port <= b.last {
                        out.push(
                            "admin.bind",
                            format!(
                                "port {port} on {} is inside {} on {}",
                                addr.ip(),
                                b.what,
                                b.ip
                            ),
                        );
                    }
                }
            }
        }
    }
}

fn check_limits(out: &mut Issues, cfg: &Config) {
    let l = &cfg.limits;
    if l.max_frame_bytes < MIN_MAX_FRAME_BYTES {
        out.push(
            "limits.max_frame_bytes",
            format!(
                "must be at least {MIN_MAX_FRAME_BYTES} (got {})",
                l.max_frame_bytes
            ),
        );
    }
    if l.max_in_flight < 1 {
        out.push("limits.max_in_flight", "must be at least 1");
    }
    if l.connection_threads > MAX_CONNECTION_THREADS {
        out.push(
            "limits.connection_threads",
            format!(
                "must be at most {MAX_CONNECTION_THREADS} (got {}; 0 means one per core)",
                l.connection_threads
            ),
        );
    }
    if l.upstream_timeout_ms < MIN_IDLE_TIMEOUT_MS {
        out.push(
            "limits.upstream_timeout_ms",
            format!(
                "must be at least {MIN_IDLE_TIMEOUT_MS} (got {})",
                l.upstream_timeout_ms
            ),
        );
    }
    if l.unknown_outcome_settle_ms > MAX_UNKNOWN_OUTCOME_SETTLE_MS {
        out.push(
            "limits.unknown_outcome_settle_ms",
            format!(
                "must be at most {MAX_UNKNOWN_OUTCOME_SETTLE_MS} (got {}): a failover waits this long",
                l.unknown_outcome_settle_ms
            ),
        );
    }
    if l.idle_timeout_ms < MIN_IDLE_TIMEOUT_MS {
        out.push(
            "limits.idle_timeout_ms",
            format!(
                "must be at least {MIN_IDLE_TIMEOUT_MS} (got {})",
                l.idle_timeout_ms
            ),
        );
    }
}

fn check_psm(out: &mut Issues, cfg: &Config) {
    if cfg.psm.snapshot_interval_ms < 100 {
        out.push(
            "psm.snapshot_interval_ms",
            format!(
                "must be at least 100 (got {})",
                cfg.psm.snapshot_interval_ms
            ),
        );
    }
    if cfg.psm.expiration_ms == Some(0) {
        out.push("psm.expiration_ms", "must be at least 1");
    }
    if cfg.psm.clock_skew_margin_ms > 7 * 24 * 3_600_000 {
        out.push(
            "psm.clock_skew_margin_ms",
            "must be at most 604800000 (7 days); keep the clocks in sync instead",
        );
    }
    if cfg.psm.expiration_check_interval_ms == Some(0) {
        out.push("psm.expiration_check_interval_ms", "must be at least 1");
    }
}

fn check_failover(out: &mut Issues, cfg: &Config) {
    let p = &cfg.failover.pid_allocator;
    if p.timeout_ms < 100 {
        out.push(
            "failover.pid_allocator.timeout_ms",
            format!("must be at least 100 (got {})", p.timeout_ms),
        );
    }
    if !(1..=16).contains(&p.connections) {
        out.push(
            "failover.pid_allocator.connections",
            format!("must be between 1 and 16 (got {})", p.connections),
        );
    }
    if !(1..=1024).contains(&p.in_flight) {
        out.push(
            "failover.pid_allocator.in_flight",
            format!("must be between 1 and 1024 (got {})", p.in_flight),
        );
    }
}

fn check_logging(out: &mut Issues, cfg: &Config) {
    let lg = &cfg.logging;
    if lg.format != "text" && lg.format != "json" {
        out.push(
            "logging.format",
            format!("must be `text` or `json` (got `{}`)", lg.format),
        );
    }
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&lg.level) {
        out.push(
            "logging.level",
            format!("`{}` is not a valid log filter: {e}", lg.level),
        );
    }
}

fn is_valid_mirror_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn check_mirrors(out: &mut Issues, cfg: &Config) {
    let mut names: HashMap<&str, usize> = HashMap::new();
    // Exact topic → (mirror index, path of the entry).
    let mut exact: HashMap<&str, (usize, String)> = HashMap::new();
    // Regex text → (mirror index, path of the entry).
    let mut regex_text: HashMap<&str, (usize, String)> = HashMap::new();
    // Compiled regexes: (mirror index, path, pattern, regex).
    let mut compiled = Vec::new();

    for (mi, m) in cfg.mirrors.iter().enumerate() {
        let mpath = format!("mirrors[{mi}]");
        for (at, msg) in super::sync::check(&mpath, m) {
            out.push(at, msg);
        }
        if m.name.is_empty() {
            out.push(format!("{mpath}.name"), "must not be empty");
        } else if !is_valid_mirror_name(&m.name) {
            out.push(
                format!("{mpath}.name"),
                format!(
                    "`{}` is not a valid mirror name (use [A-Za-z0-9._-]+)",
                    m.name
                ),
            );
        } else if let Some(first) = names.get(m.name.as_str()) {
            out.push(
                format!("{mpath}.name"),
                format!("duplicate mirror name `{}` (also mirrors[{first}])", m.name),
            );
        } else {
            names.insert(&m.name, mi);
        }
        if let Some(src) = &m.source {
            check_cluster(out, &format!("{mpath}.source"), src);
        }
        if m.topics.is_empty() {
            out.push(
                format!("{mpath}.topics"),
                "must list at least one topic or `regex:` pattern",
            );
        }
        for (ti, t) in m.topics.iter().enumerate() {
            let tpath = format!("{mpath}.topics[{ti}]");
            match TopicEntry::parse(t) {
                TopicEntry::Exact(name) => {
                    if !is_valid_topic_name(name) {
                        out.push(
                            tpath,
                            format!(
                                "`{name}` is not a valid topic name (1..={MAX_TOPIC_LEN} characters of [A-Za-z0-9._-], not `.` or `..`); write `regex:...` for a pattern"
                            ),
                        );
                        continue;
                    }
                    match exact.get(name) {
                        Some((other, opath)) if *other == mi => {
                            out.push(
                                tpath,
                                format!("topic `{name}` is listed twice (also {opath})"),
                            );
                        }
                        Some((other, opath)) => out.push(
                            tpath,
                            format!(
                                "topic `{name}` is already claimed by mirror `{}` ({opath})",
                                cfg.mirrors[*other].name
                            ),
                        ),
                        None => {
                            exact.insert(name, (mi, tpath));
                        }
                    }
                }
                TopicEntry::Regex(pattern) => {
                    if pattern.is_empty() {
                        out.push(tpath, "empty `regex:` pattern");
                        continue;
                    }
                    match compile_topic_regex(pattern) {
                        Err(e) => {
                            out.push(
                                tpath,
                                format!(
                                    "invalid regex `{pattern}`: {}",
                                    regex_error_text(pattern, &e)
                                ),
                            );
                            continue;
                        }
                        Ok(r) => compiled.push((mi, tpath.clone(), pattern, r)),
                    }
                    match regex_text.get(pattern) {
                        Some((other, opath)) if *other == mi => {
                            out.push(tpath, format!("pattern `regex:{pattern}` is listed twice (also {opath})"));
                        }
                        Some((other, opath)) => out.push(
                            tpath,
                            format!(
                                "pattern `regex:{pattern}` is already claimed by mirror `{}` ({opath})",
                                cfg.mirrors[*other].name
                            ),
                        ),
                        None => {
                            regex_text.insert(pattern, (mi, tpath));
                        }
                    }
                }
            }
        }
    }

    // An exact name of one mirror matched by a regex of another: reported on the entry that
    // comes later in the file.
    let mut cross = Vec::new();
    for (name, (emi, epath)) in &exact {
        for (rmi, rpath, pattern, r) in &compiled {
            if rmi != emi && r.is_match(name) {
                let (at, msg) = if emi > rmi {
                    (
                        epath.clone(),
                        format!(
                            "topic `{name}` is already claimed by mirror `{}` through `regex:{pattern}` ({rpath})",
                            cfg.mirrors[*rmi].name
                        ),
                    )
                } else {
                    (
                        rpath.clone(),
                        format!(
                            "`regex:{pattern}` matches topic `{name}` already claimed by mirror `{}` ({epath})",
                            cfg.mirrors[*emi].name
                        ),
                    )
                };
                cross.push((at, msg));
            }
        }
    }
    cross.sort();
    for (at, msg) in cross {
        out.push(at, msg);
    }
}

/// A one-line reason for a regex error, phrased on the pattern as written (not the anchored
/// wrapper): regex syntax errors end with a line `error: REASON`.
fn regex_error_text(pattern: &str, anchored_err: &regex::Error) -> String {
    let err = regex::Regex::new(pattern)
        .err()
        .unwrap_or_else(|| anchored_err.clone());
    let text = err.to_string();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let reason = last.trim().strip_prefix("error: ").unwrap_or(last.trim());
    if reason.is_empty() {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    } else {
        reason.to_string()
    }
}
