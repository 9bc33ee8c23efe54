//! TLS settings: the `tls` section of a listener (the gateway as a TLS server) and of a
//! cluster (the gateway as a TLS client of the destination or a mirror's source brokers).
//!
//! Owns: the shape of these sections and their validation. Files are only named here; reading
//! and parsing them is the transport's job (`net::tls`), at start-up and on reload.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use super::error::ConfigIssue;

/// Lower bound on `reload_interval_ms`.
pub const MIN_RELOAD_INTERVAL_MS: u64 = 100;

/// TLS on a gateway listener: the certificate it serves and, optionally, the CA that client
/// certificates must chain to (mutual TLS).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTlsConfig {
    /// PEM file with the certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM file with the CA certificates client certificates must chain to. When set, every
    /// client must present a valid certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// How often `cert` and `key` are checked for changes, milliseconds.
    #[serde(default = "default_reload_interval_ms")]
    pub reload_interval_ms: u64,
}

/// TLS towards the brokers of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterTlsConfig {
    /// PEM file with the CA certificates the brokers' certificates must chain to. Default: the
    /// system's trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// PEM file with a client certificate chain, for brokers that require client certificates.
    /// Set together with `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// PEM file with the private key of `cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// The name the brokers' certificates are checked against. Default: the host of each
    /// broker address (an IP address is matched against IP address SANs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

fn default_reload_interval_ms() -> u64 {
    10_000
}

fn check_path(out: &mut Vec<ConfigIssue>, path: String, file: &Path) {
    if file.as_os_str().is_empty() {
        out.push(ConfigIssue::new(path, "must name a file"));
    }
}

/// Issues of a listener's `tls` section at key path `path`.
pub(super) fn listener_tls_issues(path: &str, t: &ListenerTlsConfig) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    check_path(&mut out, format!("{path}.cert"), &t.cert);
    check_path(&mut out, format!("{path}.key"), &t.key);
    if let Some(ca) = &t.client_ca {
        check_path(&mut out, format!("{path}.client_ca"), ca);
    }
    if t.reload_interval_ms < MIN_RELOAD_INTERVAL_MS {
        out.push(ConfigIssue::new(
            format!("{path}.reload_interval_ms"),
            format!(
                "must be at least {MIN_RELOAD_INTERVAL_MS} (got {})",
                t.reload_interval_ms
            ),
        ));
    }
    out
}

/// Issues of a cluster's `tls` section at key path `path`.
pub(super) fn cluster_tls_issues(path: &str, t: &ClusterTlsConfig) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    if let Some(ca) = &t.ca {
        check_path(&mut out, format!("{path}.ca"), ca);
    }
    match (&t.cert, &t.key) {
        (Some(c), Some(k)) => {
            check_path(&mut out, format!("{path}.cert"), c);
            check_path(&mut out, format!("{path}.key"), k);
        }
        (Some(_), None) => out.push(ConfigIssue::new(
            format!("{path}.cert"),
            "a client certificate needs its private key: set `key` too",
        )),
        (None, Some(_)) => out.push(ConfigIssue::new(
            format!("{path}.key"),
            "a private key needs its client certificate: set `cert` too",
        )),
        (None, None) => {}
    }
    if let Some(name) = &t.server_name {
        if rustls_pki_types::ServerName::try_from(name.as_str()).is_err() {
            out.push(ConfigIssue::new(
                format!("{path}.server_name"),
                format!("`{name}` is neither a DNS name nor an IP address"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::{load_str, ConfigError};

    /// A configuration with TLS everywhere; `{client}`, `{dest}` and `{source}` are replaced by
    /// the bodies of the three `tls` sections.
    fn text(client: &str, dest: &str, source: &str) -> String {
        format!(
            "destination:\n  bootstrap: [\"127.0.0.1:26094\"]\n  tls: {dest}\nlisteners:\n  client:\n    port_base: 9092\n    tls: {client}\n  mirror:\n    port_base: 9192\nmirrors:\n  - name: m\n    topics: [t]\n    source:\n      bootstrap: [\"h:1\"]\n      tls: {source}\n"
        )
    }

    const LISTENER_OK: &str = "{cert: /c.pem, key: /k.pem}";
    const CLUSTER_OK: &str = "{ca: /ca.pem}";

    #[test]
    fn tls_sections_load_with_defaults() {
        let cfg = load_str(&text(LISTENER_OK, CLUSTER_OK, "{}"), "t.yaml").unwrap();
        let l = cfg.listeners.client.tls.unwrap();
        assert_eq!(l.reload_interval_ms, 10_000);
        assert_eq!(l.client_ca, None);
        assert_eq!(
            cfg.destination.tls.unwrap().ca.unwrap().to_str(),
            Some("/ca.pem")
        );
        assert!(cfg.mirrors[0].source.as_ref().unwrap().tls.is_some());
        assert!(cfg.listeners.mirror.unwrap().tls.is_none());
    }

    #[test]
    fn tls_mistakes_report_key_path_message_and_line() {
        // (name, text, key path, message fragment, line)
        let cases = [
            (
                "listener without key",
                text("{cert: /c.pem}", CLUSTER_OK, "{}"),
                "listeners.client.tls.key",
                "missing field `key`",
                7,
            ),
            (
                "empty listener cert path",
                text("{cert: \"\", key: /k.pem}", CLUSTER_OK, "{}"),
                "listeners.client.tls.cert",
                "must name a file",
                7,
            ),
            (
                "empty client_ca path",
                text("{cert: /c, key: /k, client_ca: \"\"}", CLUSTER_OK, "{}"),
                "listeners.client.tls.client_ca",
                "must name a file",
                7,
            ),
            (
                "reload interval too short",
                text(
                    "{cert: /c, key: /k, reload_interval_ms: 5}",
                    CLUSTER_OK,
                    "{}",
                ),
                "listeners.client.tls.reload_interval_ms",
                "at least 100",
                7,
            ),
            (
                "unknown listener tls key",
                text("{cert: /c, key: /k, verify: false}", CLUSTER_OK, "{}"),
                "listeners.client.tls.verify",
                "unknown field `verify`",
                7,
            ),
            (
                "no skip-verification option",
                text(LISTENER_OK, "{insecure_skip_verify: true}", "{}"),
                "destination.tls.insecure_skip_verify",
                "unknown field",
                3,
            ),
            (
                "client cert without key",
                text(LISTENER_OK, "{cert: /c.pem}", "{}"),
                "destination.tls.cert",
                "set `key` too",
                3,
            ),
            (
                "client key without cert",
                text(LISTENER_OK, "{key: /k.pem}", "{}"),
                "destination.tls.key",
                "set `cert` too",
                3,
            ),
            (
                "empty CA path",
                text(LISTENER_OK, "{ca: \"\"}", "{}"),
                "destination.tls.ca",
                "must name a file",
                3,
            ),
            (
                "bad server name",
                text(LISTENER_OK, "{server_name: \"not a name\"}", "{}"),
                "destination.tls.server_name",
                "neither a DNS name nor an IP address",
                3,
            ),
            (
                "source cluster cert without key",
                text(LISTENER_OK, CLUSTER_OK, "{cert: /c.pem}"),
                "mirrors[0].source.tls.cert",
                "set `key` too",
                15,
            ),
        ];
        for (name, text, path, fragment, line) in cases {
            let issues = match load_str(&text, "t.yaml") {
                Err(ConfigError::Invalid { issues, .. }) => issues,
                other => panic!("case `{name}`: expected issues, got {other:?}"),
            };
            let Some(issue) = issues.iter().find(|i| i.path == path) else {
                panic!("case `{name}`: no issue at {path}; got {issues:#?}");
            };
            assert!(
                issue.message.contains(fragment),
                "case `{name}`: {:?} lacks {fragment:?}",
                issue.message
            );
            assert_eq!(issue.line, Some(line), "case `{name}`: {issue:?}");
        }
    }
}
