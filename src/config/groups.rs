//! `mirrors[].groups`: which consumer groups' committed offsets the gateway copies from a
//! mirror's source to the destination, and how often (docs/moving-applications.md).
//!
//! Owns: the section's model, its defaults, its validation and the compiled group filter.
//! Must not touch: anything at run time (the sync itself is `sync/groups`).

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::error::ConfigIssue;
use super::topics::{compile_topic_regex, TopicEntry};
use super::Config;

/// Default time between two sync rounds.
pub const DEFAULT_GROUP_SYNC_INTERVAL_MS: u64 = 10_000;
/// Shortest accepted interval (a round lists every group of the source).
pub const MIN_GROUP_SYNC_INTERVAL_MS: u64 = 100;
/// Longest accepted interval (one hour).
pub const MAX_GROUP_SYNC_INTERVAL_MS: u64 = 3_600_000;

/// `mirrors[].groups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSyncConfig {
    /// Whether the sync runs (only for mirrors with a `source:`).
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Group ids to sync: exact ids, or `regex:` over the whole id. Default: every group.
    #[serde(default = "default_include")]
    pub include: Vec<String>,
    /// Group ids never synced (wins over `include`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Time between two rounds.
    #[serde(default = "default_interval")]
    pub sync_interval_ms: u64,
}

impl Default for GroupSyncConfig {
    fn default() -> Self {
        GroupSyncConfig {
            enabled: default_enabled(),
            include: default_include(),
            exclude: Vec::new(),
            sync_interval_ms: default_interval(),
        }
    }
}

fn default_enabled() -> bool {
    true
}
fn default_include() -> Vec<String> {
    vec!["regex:.*".to_string()]
}
fn default_interval() -> u64 {
    DEFAULT_GROUP_SYNC_INTERVAL_MS
}

/// The compiled `include` / `exclude` lists.
#[derive(Debug, Clone, Default)]
pub struct GroupFilter {
    include: Vec<Pattern>,
    exclude: Vec<Pattern>,
}

#[derive(Debug, Clone)]
enum Pattern {
    Exact(String),
    Regex(Regex),
}

impl Pattern {
    fn compile(entry: &str) -> Result<Pattern, regex::Error> {
        Ok(match TopicEntry::parse(entry) {
            TopicEntry::Exact(id) => Pattern::Exact(id.to_string()),
            TopicEntry::Regex(p) => Pattern::Regex(compile_topic_regex(p)?),
        })
    }
    fn matches(&self, group: &str) -> bool {
        match self {
            Pattern::Exact(id) => id == group,
            Pattern::Regex(r) => r.is_match(group),
        }
    }
}

impl GroupFilter {
    /// Compiles the lists; fails on the first regex that does not compile.
    pub fn new(cfg: &GroupSyncConfig) -> Result<GroupFilter, regex::Error> {
        let compile = |v: &[String]| {
            v.iter()
                .map(|e| Pattern::compile(e))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(GroupFilter {
            include: compile(&cfg.include)?,
            exclude: compile(&cfg.exclude)?,
        })
    }

    /// Whether `group` is synced: included and not excluded.
    pub fn matches(&self, group: &str) -> bool {
        self.include.iter().any(|p| p.matches(group))
            && !self.exclude.iter().any(|p| p.matches(group))
    }
}

/// Every problem of the `groups` sections.
pub(super) fn check(cfg: &Config) -> Vec<ConfigIssue> {
    let mut out = Vec::new();
    for (mi, m) in cfg.mirrors.iter().enumerate() {
        let g = &m.groups;
        let path = format!("mirrors[{mi}].groups");
        if !(MIN_GROUP_SYNC_INTERVAL_MS..=MAX_GROUP_SYNC_INTERVAL_MS).contains(&g.sync_interval_ms)
        {
            out.push(ConfigIssue::new(
                format!("{path}.sync_interval_ms"),
                format!(
                    "must be between {MIN_GROUP_SYNC_INTERVAL_MS} and {MAX_GROUP_SYNC_INTERVAL_MS}"
                ),
            ));
        }
        for (list, entries) in [("include", &g.include), ("exclude", &g.exclude)] {
            for (i, e) in entries.iter().enumerate() {
                let at = format!("{path}.{list}[{i}]");
                match TopicEntry::parse(e) {
                    TopicEntry::Exact("") => {
                        out.push(ConfigIssue::new(at, "empty group id"));
                    }
                    TopicEntry::Exact(_) => {}
                    TopicEntry::Regex("") => {
                        out.push(ConfigIssue::new(at, "empty `regex:` pattern"));
                    }
                    TopicEntry::Regex(p) => {
                        if let Err(err) = compile_topic_regex(p) {
                            let reason = err.to_string();
                            let last = reason.lines().last().unwrap_or_default().trim();
                            out.push(ConfigIssue::new(at, format!("invalid regex `{p}`: {last}")));
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{load_str, ConfigError};
    use super::*;

    fn with_groups(groups: &str) -> String {
        format!(
            "destination:\n  bootstrap: [\"127.0.0.1:29092\"]\nlisteners:\n  client:\n    port_base: 9092\n\
             mirrors:\n  - name: a\n    topics: [orders]\n{groups}"
        )
    }

    fn issue_paths(text: &str) -> Vec<String> {
        match load_str(text, "t.yaml") {
            Err(ConfigError::Invalid { issues, .. }) => {
                issues.iter().map(|i| i.path.clone()).collect()
            }
            other => panic!("expected issues, got {other:?}"),
        }
    }

    #[test]
    fn a_mirror_without_a_groups_section_syncs_every_group_every_ten_seconds() {
        let cfg = load_str(&with_groups(""), "t.yaml").expect("valid");
        let g = &cfg.mirrors[0].groups;
        assert!(g.enabled);
        assert_eq!(g.sync_interval_ms, DEFAULT_GROUP_SYNC_INTERVAL_MS);
        assert!(GroupFilter::new(g).expect("compiles").matches("any-group"));
    }

    #[test]
    fn exclude_wins_over_include() {
        let cfg = GroupSyncConfig {
            include: vec!["regex:app-.*".into()],
            exclude: vec!["app-test".into()],
            ..GroupSyncConfig::default()
        };
        let f = GroupFilter::new(&cfg).expect("compiles");
        assert!(f.matches("app-orders"));
        assert!(!f.matches("app-test"));
        assert!(!f.matches("other"));
    }

    #[test]
    fn a_bad_group_regex_is_reported_at_its_path() {
        let text = with_groups("    groups:\n      include: [\"regex:(\"]\n");
        assert_eq!(issue_paths(&text), vec!["mirrors[0].groups.include[0]"]);
    }

    #[test]
    fn a_sync_interval_out_of_range_is_reported() {
        let text = with_groups("    groups:\n      sync_interval_ms: 5\n");
        assert_eq!(
            issue_paths(&text),
            vec!["mirrors[0].groups.sync_interval_ms"]
        );
    }

    #[test]
    fn an_unknown_key_in_groups_is_refused() {
        let text = with_groups("    groups:\n      interval: 5\n");
        assert!(load_str(&text, "t.yaml").is_err());
    }
}
