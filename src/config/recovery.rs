//! `mirrors[].recovery`: where the recovery of a failover's un-mirrored tail copies records
//! (docs/failover.md#after-an-unplanned-failover-recovering-the-tail).
//!
//! Owns: the section's model, its default and its validation. Must not touch: anything at run
//! time (the recovery itself is `recovery`).

use serde::{Deserialize, Serialize};

use super::error::ConfigIssue;
use super::topics::{is_valid_topic_name, TopicMatcher};
use super::Config;

/// The placeholder for the mirror topic's name in [`RecoveryConfig::quarantine_topic`].
pub const TOPIC_PLACEHOLDER: &str = "{topic}";

/// `mirrors[].recovery`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryConfig {
    /// The destination topic a mirror topic's recovered records go to; `{topic}` stands for
    /// the mirror topic's name.
    #[serde(default = "default_quarantine_topic")]
    pub quarantine_topic: String,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            quarantine_topic: default_quarantine_topic(),
        }
    }
}

fn default_quarantine_topic() -> String {
    "{topic}.unmirrored".to_string()
}

impl RecoveryConfig {
    /// The quarantine topic of mirror topic `topic`.
    pub fn quarantine_for(&self, topic: &str) -> String {
        self.quarantine_topic.replace(TOPIC_PLACEHOLDER, topic)
    }
}

/// Problems of every mirror's `recovery` section: the name must hold `{topic}` (one quarantine
/// topic per mirror topic), make a legal topic name, and not be selected by any mirror's
/// `topics` for an exact topic of this mirror (the quarantine would itself be mirrored).
pub fn check(cfg: &Config) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    let matchers: Vec<(String, TopicMatcher)> = cfg
        .mirrors
        .iter()
        .filter_map(|m| Some((m.name.clone(), TopicMatcher::for_mirror(m).ok()?)))
        .collect();
    for (i, m) in cfg.mirrors.iter().enumerate() {
        let path = format!("mirrors[{i}].recovery.quarantine_topic");
        let q = &m.recovery.quarantine_topic;
        if !q.contains(TOPIC_PLACEHOLDER) {
            out.push(ConfigIssue::new(
                path,
                format!("must contain {TOPIC_PLACEHOLDER} (one quarantine topic per mirror topic)"),
            ));
            continue;
        }
        if !is_valid_topic_name(&m.recovery.quarantine_for("t")) {
            out.push(ConfigIssue::new(
                path,
                format!("{q:?} does not make a legal topic name"),
            ));
            continue;
        }
        for t in m.topics.iter().filter(|t| !t.starts_with("regex:")) {
            let name = m.recovery.quarantine_for(t);
            if let Some((other, _)) = matchers.iter().find(|(_, mt)| mt.matches(&name)) {
                out.push(ConfigIssue::new(
                    path.clone(),
                    format!(
                        "the quarantine topic {name:?} of {t:?} is a topic of mirror {other:?}"
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{load_str, ConfigError};

    fn with_recovery(topics: &str, recovery: &str) -> String {
        format!(
            "destination:\n  bootstrap: [\"127.0.0.1:29092\"]\nlisteners:\n  client:\n    port_base: 9092\n\
             mirrors:\n  - name: a\n    topics: {topics}\n{recovery}"
        )
    }

    fn issues(text: &str) -> Vec<String> {
        match load_str(text, "t.yaml") {
            Err(ConfigError::Invalid { issues, .. }) => issues
                .iter()
                .map(|i| format!("{}: {}", i.path, i.message))
                .collect(),
            Ok(_) => Vec::new(),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_mirror_without_a_recovery_section_recovers_into_topic_dot_unmirrored() {
        let cfg = load_str(&with_recovery("[orders]", ""), "t.yaml").expect("valid");
        assert_eq!(
            cfg.mirrors[0].recovery.quarantine_for("orders"),
            "orders.unmirrored"
        );
    }

    #[test]
    fn a_quarantine_name_without_the_placeholder_or_illegal_is_refused() {
        let bad = issues(&with_recovery(
            "[orders]",
            "    recovery:\n      quarantine_topic: lost\n",
        ));
        assert!(bad[0].contains("must contain {topic}"), "{bad:?}");
        let bad = issues(&with_recovery(
            "[orders]",
            "    recovery:\n      quarantine_topic: \"{topic}/lost\"\n",
        ));
        assert!(bad[0].contains("legal topic name"), "{bad:?}");
    }

    #[test]
    fn a_quarantine_topic_a_mirror_selects_is_refused() {
        let bad = issues(&with_recovery("[orders, \"regex:orders.*\"]", ""));
        assert!(
            bad.iter()
                .any(|i| i
                    .contains("\"orders.unmirrored\" of \"orders\" is a topic of mirror \"a\"")),
            "{bad:?}"
        );
    }
}
