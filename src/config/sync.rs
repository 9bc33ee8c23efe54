//! `mirrors[].configs` and `mirrors[].acls`: what the built-in agent keeps in step on the
//! destination besides the records (docs/configs-and-acls.md), their defaults, patterns and
//! validation.
//!
//! Owns: the two config sections, the default list of topic config keys that stay local, the
//! ACL resource and principal pattern syntax and its compiled form.
//! Must not touch: anything at run time (the sync itself is `sync`).

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::topics::compile_topic_regex;
use super::MirrorConfig;

/// Topic config keys never synced unless `configs.include` names them: they describe the
/// destination cluster's own replicas, placement, storage or admission, and a source value can
/// be wrong (or break mirroring) there.
pub const LOCAL_TOPIC_CONFIGS: &[&str] = &[
    // Depends on the destination's replication factor (the agent may create fewer replicas).
    "min.insync.replicas",
    // Broker ids of the source cluster.
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    // An availability choice of the destination's operators.
    "unclean.leader.election.enable",
    // Checked against the wall clock at append time: mirrored (older) batches would be refused.
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
    // Tiered storage needs the destination's own remote storage set-up.
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    // Placement (vendor key; replica placement is the destination's).
    "confluent.placement.constraints",
];

/// Shortest sync interval.
pub const MIN_SYNC_INTERVAL_MS: u64 = 1000;

fn default_interval() -> u64 {
    30_000
}
fn yes() -> bool {
    true
}
fn default_acl_include() -> Vec<String> {
    vec!["topic".into(), "group".into()]
}

/// `mirrors[].configs`: topic config sync (on by default for mirrors with a `source:`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSyncConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Keys to sync; empty: every key the source set on the topic (dynamic topic configs)
    /// except [`LOCAL_TOPIC_CONFIGS`]. A key named here is synced even if it is local.
    #[serde(default)]
    pub include: Vec<String>,
    /// Keys never synced (besides [`LOCAL_TOPIC_CONFIGS`]); wins over `include`.
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default = "default_interval")]
    pub sync_interval_ms: u64,
}

impl Default for ConfigSyncConfig {
    fn default() -> Self {
        ConfigSyncConfig {
            enabled: true,
            include: Vec::new(),
            exclude: Vec::new(),
            sync_interval_ms: default_interval(),
        }
    }
}

impl ConfigSyncConfig {
    /// Whether `key` is synced.
    pub fn syncs(&self, key: &str) -> bool {
        if self.exclude.iter().any(|k| k == key) {
            return false;
        }
        if self.include.is_empty() {
            !LOCAL_TOPIC_CONFIGS.contains(&key)
        } else {
            self.include.iter().any(|k| k == key)
        }
    }
}

/// `mirrors[].acls`: ACL sync (off by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclSyncConfig {
    #[serde(default)]
    pub enabled: bool,
    /// Resource patterns of the ACLs to copy: `topic` (every topic ACL that applies to a topic
    /// of the mirror), `group` (every group ACL), `topic:NAME` / `group:NAME` (the ACL's
    /// resource name exactly, `*` being Kafka's wildcard resource), `topic:regex:RE`,
    /// `group:regex:RE`.
    #[serde(default = "default_acl_include")]
    pub include: Vec<String>,
    /// Resource patterns never copied; win over `include`.
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub principals: PrincipalFilterConfig,
    #[serde(default = "default_interval")]
    pub sync_interval_ms: u64,
}

impl Default for AclSyncConfig {
    fn default() -> Self {
        AclSyncConfig {
            enabled: false,
            include: default_acl_include(),
            exclude: Vec::new(),
            principals: PrincipalFilterConfig::default(),
            sync_interval_ms: default_interval(),
        }
    }
}

/// `mirrors[].acls.principals`: `User:NAME` exactly, or `regex:RE` over the whole principal.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalFilterConfig {
    /// Empty: every principal.
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

/// The resource kinds ACL sync copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AclResourceKind {
    Topic,
    Group,
}

/// A name pattern: anything, one name, or an anchored regex.
#[derive(Debug, Clone)]
pub enum NamePattern {
    Any,
    Exact(String),
    Regex(Regex),
}

impl NamePattern {
    fn parse(text: &str) -> Result<NamePattern, String> {
        match text.strip_prefix(super::REGEX_PREFIX) {
            Some(re) => compile_topic_regex(re)
                .map(NamePattern::Regex)
                .map_err(|e| format!("bad regex `{re}`: {}", one_line(&e.to_string()))),
            None if text.is_empty() => Err("empty name".into()),
            None => Ok(NamePattern::Exact(text.to_string())),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Any => true,
            NamePattern::Exact(n) => n == name,
            NamePattern::Regex(r) => r.is_match(name),
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One compiled entry of `acls.include` / `acls.exclude`.
#[derive(Debug, Clone)]
pub struct ResourcePattern {
    pub kind: AclResourceKind,
    pub name: NamePattern,
}

impl ResourcePattern {
    /// `topic`, `group`, `topic:NAME`, `group:regex:RE`, ...
    pub fn parse(text: &str) -> Result<ResourcePattern, String> {
        let (kind, rest) = match text.split_once(':') {
            Some((k, r)) => (k, Some(r)),
            None => (text, None),
        };
        let kind = match kind {
            "topic" => AclResourceKind::Topic,
            "group" => AclResourceKind::Group,
            other => {
                return Err(format!(
                    "`{other}` is not a resource kind ACL sync copies (use topic or group, \
                     optionally followed by :NAME or :regex:RE)"
                ))
            }
        };
        let name = match rest {
            None => NamePattern::Any,
            Some(r) => NamePattern::parse(r)?,
        };
        Ok(ResourcePattern { kind, name })
    }

    pub fn matches(&self, kind: AclResourceKind, name: &str) -> bool {
        self.kind == kind && self.name.matches(name)
    }
}

/// `acls` compiled: which (resource, principal) pairs are copied.
#[derive(Debug, Clone)]
pub struct AclSelector {
    include: Vec<ResourcePattern>,
    exclude: Vec<ResourcePattern>,
    principals_include: Vec<NamePattern>,
    principals_exclude: Vec<NamePattern>,
}

impl AclSelector {
    /// Compile `acls`; the first bad entry is the error (validation reports each).
    pub fn compile(c: &AclSyncConfig) -> Result<AclSelector, String> {
        let res = |v: &[String]| {
            v.iter()
                .map(|t| ResourcePattern::parse(t))
                .collect::<Result<Vec<_>, _>>()
        };
        let pri = |v: &[String]| {
            v.iter()
                .map(|t| NamePattern::parse(t))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(AclSelector {
            include: res(&c.include)?,
            exclude: res(&c.exclude)?,
            principals_include: pri(&c.principals.include)?,
            principals_exclude: pri(&c.principals.exclude)?,
        })
    }

    /// Whether ACLs of this resource kind are copied at all.
    pub fn wants_kind(&self, kind: AclResourceKind) -> bool {
        self.include.iter().any(|p| p.kind == kind)
    }

    /// Whether an ACL on resource (`kind`, `name`) for `principal` is copied.
    pub fn selects(&self, kind: AclResourceKind, name: &str, principal: &str) -> bool {
        self.include.iter().any(|p| p.matches(kind, name))
            && !self.exclude.iter().any(|p| p.matches(kind, name))
            && (self.principals_include.is_empty()
                || self.principals_include.iter().any(|p| p.matches(principal)))
            && !self.principals_exclude.iter().any(|p| p.matches(principal))
    }
}

fn is_config_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

/// Problems of a mirror's `configs` and `acls` sections: (key path, message).
pub fn check(mpath: &str, m: &MirrorConfig) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let c = &m.configs;
    for (field, keys) in [("include", &c.include), ("exclude", &c.exclude)] {
        for (i, k) in keys.iter().enumerate() {
            if !is_config_key(k) {
                out.push((
                    format!("{mpath}.configs.{field}[{i}]"),
                    format!("`{k}` is not a topic config key (lower case letters, digits, `.`, `_`, `-`)"),
                ));
            } else if field == "include" && c.exclude.contains(k) {
                out.push((
                    format!("{mpath}.configs.include[{i}]"),
                    format!("`{k}` is both included and excluded"),
                ));
            }
        }
    }
    if c.sync_interval_ms < MIN_SYNC_INTERVAL_MS {
        out.push((
            format!("{mpath}.configs.sync_interval_ms"),
            format!("must be at least {MIN_SYNC_INTERVAL_MS}"),
        ));
    }
    let a = &m.acls;
    if a.enabled && m.agent_source().is_none() {
        out.push((
            format!("{mpath}.acls.enabled"),
            "ACL sync needs the built-in agent (the mirror's `source:`, not `mirroring: external`): it reads the source's ACLs"
                .into(),
        ));
    }
    if a.enabled && a.include.is_empty() {
        out.push((
            format!("{mpath}.acls.include"),
            "is empty: nothing would be synced (use [topic, group], the default)".into(),
        ));
    }
    for (field, list) in [("include", &a.include), ("exclude", &a.exclude)] {
        for (i, t) in list.iter().enumerate() {
            if let Err(e) = ResourcePattern::parse(t) {
                out.push((format!("{mpath}.acls.{field}[{i}]"), e));
            }
        }
    }
    for (field, list) in [
        ("include", &a.principals.include),
        ("exclude", &a.principals.exclude),
    ] {
        for (i, t) in list.iter().enumerate() {
            if let Err(e) = NamePattern::parse(t) {
                out.push((format!("{mpath}.acls.principals.{field}[{i}]"), e));
            }
        }
    }
    if a.sync_interval_ms < MIN_SYNC_INTERVAL_MS {
        out.push((
            format!("{mpath}.acls.sync_interval_ms"),
            format!("must be at least {MIN_SYNC_INTERVAL_MS}"),
        ));
    }
    out
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
