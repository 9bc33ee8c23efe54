//! The `instances` section: this gateway is one of several in front of the same destination
//! cluster, known to the others through the state topic (`instances.rs`).
//!
//! Owns: the section's fields, defaults and checks. Must not touch: what the instances do with
//! them.

use serde::{Deserialize, Serialize};

use super::{Config, ConfigIssue};

/// The default state topic.
pub const DEFAULT_STATE_TOPIC: &str = "__mirrorgate_state";

/// Several instances in front of one destination cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstancesConfig {
    /// This instance's name, unique among the instances (1-64 of a-z A-Z 0-9 . _ -).
    pub id: String,
    /// The compacted topic on the destination cluster the instances share (created by
    /// `mirrorgate state init`, never by `run`).
    #[serde(default = "default_state_topic")]
    pub state_topic: String,
    /// An instance whose heartbeat is older than this is gone: its lease has expired, so it
    /// admits no mirror write until it has read the state topic again (1,000-300,000 ms).
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u64,
}

fn default_state_topic() -> String {
    DEFAULT_STATE_TOPIC.to_string()
}

fn default_session_timeout_ms() -> u64 {
    10_000
}

/// The problems of `cfg.instances`.
pub fn check(cfg: &Config) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    let Some(i) = &cfg.instances else {
        return out;
    };
    let id_ok = !i.id.is_empty()
        && i.id.len() <= 64
        && i.id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !id_ok {
        out.push(ConfigIssue::new(
            "instances.id",
            format!(
                "`{}` is not an instance name (1-64 of a-z A-Z 0-9 . _ -)",
                i.id
            ),
        ));
    }
    let t = &i.state_topic;
    if !super::topics::is_valid_topic_name(t) {
        out.push(ConfigIssue::new(
            "instances.state_topic",
            format!("`{t}` is not a valid Kafka topic name (1-249 of a-z A-Z 0-9 . _ -, not `.` or `..`)"),
        ));
    } else if cfg.topic_router().mirror_index(t).is_some() {
        out.push(ConfigIssue::new(
            "instances.state_topic",
            format!("`{t}` is a mirror topic; name a topic of its own"),
        ));
    } else if cfg.admin.audit_topic.as_deref() == Some(t.as_str()) {
        out.push(ConfigIssue::new(
            "instances.state_topic",
            format!("`{t}` is the audit topic; name a topic of its own"),
        ));
    }
    if !(1_000..=300_000).contains(&i.session_timeout_ms) {
        out.push(ConfigIssue::new(
            "instances.session_timeout_ms",
            format!("{} is outside 1000..=300000", i.session_timeout_ms),
        ));
    }
    out
}
