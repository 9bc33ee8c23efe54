//! SASL settings: the gateway's own credentials for a cluster (`destination.sasl`,
//! `mirrors[].source.sasl`) and the principal limits of the mirror listener
//! (`listeners.mirror.allowed_principals`), with their validation.
//!
//! Owns: the typed model of these keys and their semantic checks. Must not touch: sockets or
//! the SASL exchanges themselves (`client::sasl` authenticates, `proxy::sasl` enforces limits).

use serde::{Deserialize, Serialize};

use super::error::ConfigIssue;
use super::{Config, SecretSource};

/// A SASL mechanism the gateway can authenticate with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    #[serde(rename = "PLAIN")]
    Plain,
}

impl SaslMechanism {
    /// The mechanism's name as Kafka spells it in SaslHandshake.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::Plain => "PLAIN",
        }
    }
}

impl std::fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The gateway's own SASL credentials for one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// `SCRAM-SHA-256`, `SCRAM-SHA-512` or `PLAIN`.
    pub mechanism: SaslMechanism,
    /// The user name the gateway authenticates as.
    pub username: String,
    /// The password: `{env: VAR}`, `{file: PATH}` or (discouraged) `{value: ...}`.
    pub password: SecretSource,
}

impl SaslConfig {
    /// A copy whose inline password is replaced by `<redacted>`.
    pub fn redacted(&self) -> SaslConfig {
        SaslConfig {
            password: self.password.redacted(),
            ..self.clone()
        }
    }

    /// The Kafka principal of this user with the default principal builder (`User:NAME`).
    pub fn principal(&self) -> String {
        format!("{PRINCIPAL_PREFIX}{}", self.username)
    }
}

/// The only principal type `allowed_principals` understands.
pub const PRINCIPAL_PREFIX: &str = "User:";

/// Issues of a cluster's `sasl` section at `path` (like `destination.sasl`).
pub(super) fn check_sasl(path: &str, s: &SaslConfig) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    if s.username.is_empty() {
        out.push(ConfigIssue::new(
            format!("{path}.username"),
            "must not be empty",
        ));
    } else if s.username.chars().any(|c| c.is_control()) {
        out.push(ConfigIssue::new(
            format!("{path}.username"),
            "must not contain control characters",
        ));
    }
    let p = &s.password;
    let n = p.fields_set();
    if n != 1 {
        out.push(ConfigIssue::new(
            format!("{path}.password"),
            format!("set exactly one of value, env or file (found {n})"),
        ));
    } else if p.env.as_deref() == Some("") {
        out.push(ConfigIssue::new(
            format!("{path}.password.env"),
            "must name an environment variable",
        ));
    } else if p.value.as_deref() == Some("") {
        out.push(ConfigIssue::new(
            format!("{path}.password.value"),
            "must not be empty",
        ));
    } else if p.file.as_ref().is_some_and(|f| f.as_os_str().is_empty()) {
        out.push(ConfigIssue::new(
            format!("{path}.password.file"),
            "must name a file",
        ));
    }
    out
}

/// Issues of `allowed_principals` on both listeners: only the mirror listener has them, each
/// entry is `User:NAME`, and the destination must use SASL (principals come from SASL).
pub(super) fn check_allowed_principals(cfg: &Config) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    if cfg.listeners.client.allowed_principals.is_some() {
        out.push(ConfigIssue::new(
            "listeners.client.allowed_principals",
            "only the mirror listener can limit principals (the client listener has no limits)",
        ));
    }
    let Some(list) = cfg
        .listeners
        .mirror
        .as_ref()
        .and_then(|m| m.allowed_principals.as_ref())
    else {
        return out;
    };
    let path = "listeners.mirror.allowed_principals";
    if list.is_empty() {
        out.push(ConfigIssue::new(
            path,
            "must list at least one `User:NAME` (remove the key for no limit)",
        ));
    }
    for (i, p) in list.iter().enumerate() {
        match p.strip_prefix(PRINCIPAL_PREFIX) {
            Some(name) if !name.is_empty() => {
                if let Some(j) = list[..i].iter().position(|q| q == p) {
                    out.push(ConfigIssue::new(
                        format!("{path}[{i}]"),
                        format!("`{p}` is listed twice (also {path}[{j}])"),
                    ));
                }
            }
            _ => out.push(ConfigIssue::new(
                format!("{path}[{i}]"),
                format!(
                    "`{p}` is not `User:NAME` (the only principal type SASL/SCRAM and PLAIN give)"
                ),
            )),
        }
    }
    if cfg.destination.sasl.is_none() {
        out.push(ConfigIssue::new(
            path,
            "needs destination.sasl: principals are learned from the SASL exchange with a destination that requires SASL",
        ));
    }
    out
}
