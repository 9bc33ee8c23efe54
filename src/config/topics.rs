//! Topic names and topic → mirror matching.

use super::{Config, MirrorConfig};
use regex::{Regex, RegexBuilder};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};

/// Prefix marking a topic entry as a regular expression over the whole topic name.
pub const REGEX_PREFIX: &str = "regex:";

/// Longest topic name Kafka accepts.
pub const MAX_TOPIC_LEN: usize = 249;

/// Compiled-size limit for topic regexes, a guard against patterns that blow up.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Whether `name` is a legal Kafka topic name: 1..=249 characters of `[A-Za-z0-9._-]`, and not
/// `.` or `..`.
pub fn is_valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOPIC_LEN
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Compiles a topic pattern (the text after `regex:`), anchored to the whole topic name.
pub fn compile_topic_regex(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
}

/// One entry of a mirror's `topics` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicEntry<'a> {
    /// An exact topic name.
    Exact(&'a str),
    /// A regular expression (the text after `regex:`).
    Regex(&'a str),
}

impl<'a> TopicEntry<'a> {
    /// Classifies an entry of `topics`.
    pub fn parse(entry: &'a str) -> TopicEntry<'a> {
        match entry.strip_prefix(REGEX_PREFIX) {
            Some(p) => TopicEntry::Regex(p),
            None => TopicEntry::Exact(entry),
        }
    }
}

/// The topics of one mirror, compiled: a set of exact names and a list of anchored regexes.
#[derive(Debug, Clone, Default)]
pub struct TopicMatcher {
    exact: HashSet<String>,
    regexes: Vec<Regex>,
}

impl TopicMatcher {
    /// Compiles a `topics` list. Fails on the first regex that does not compile.
    pub fn new<S: AsRef<str>>(topics: &[S]) -> Result<TopicMatcher, regex::Error> {
        let mut m = TopicMatcher::default();
        for t in topics {
            match TopicEntry::parse(t.as_ref()) {
                TopicEntry::Exact(name) => {
                    m.exact.insert(name.to_string());
                }
                TopicEntry::Regex(p) => m.regexes.push(compile_topic_regex(p)?),
            }
        }
        Ok(m)
    }

    /// Compiles the topics of a mirror.
    pub fn for_mirror(mirror: &MirrorConfig) -> Result<TopicMatcher, regex::Error> {
        TopicMatcher::new(&mirror.topics)
    }

    /// Whether `topic` is one of the exact names.
    pub fn matches_exact(&self, topic: &str) -> bool {
        self.exact.contains(topic)
    }

    /// Whether `topic` is one of the exact names or matched (whole) by one of the regexes.
    pub fn matches(&self, topic: &str) -> bool {
        self.matches_exact(topic) || self.regexes.iter().any(|r| r.is_match(topic))
    }
}

/// All mirrors' matchers, compiled once: topic → index of the mirror in `Config::mirrors`.
///
/// An exact name wins over a regex; among regexes the first mirror in config order wins. A
/// validated config has no topic claimed by two mirrors except through two regexes that can both
/// match it (whether two regexes overlap is not checked at load); such a topic is routed to the
/// first of them, and [`TopicRouter::claimants`] lets the caller notice and report it.
#[derive(Debug, Clone, Default)]
pub struct TopicRouter {
    matchers: Vec<TopicMatcher>,
}

impl TopicRouter {
    /// Compiles the matchers of every mirror. A mirror whose regex does not compile (impossible
    /// after validation) matches only its exact names.
    pub fn new(cfg: &Config) -> TopicRouter {
        let matchers = cfg
            .mirrors
            .iter()
            .map(|m| {
                TopicMatcher::for_mirror(m).unwrap_or_else(|_| TopicMatcher {
                    exact: exact_names(m).map(str::to_string).collect(),
                    regexes: Vec::new(),
                })
            })
            .collect();
        TopicRouter { matchers }
    }

    /// True when no mirror is configured (nothing is tracked).
    pub fn is_empty(&self) -> bool {
        self.matchers.is_empty()
    }

    /// Index in `Config::mirrors` of the mirror owning `topic`.
    pub fn mirror_index(&self, topic: &str) -> Option<usize> {
        self.matchers
            .iter()
            .position(|m| m.matches_exact(topic))
            .or_else(|| {
                self.matchers
                    .iter()
                    .position(|m| m.regexes.iter().any(|r| r.is_match(topic)))
            })
    }

    /// Indexes (in config order) of every mirror whose exact names or regexes match `topic`.
    /// More than one means overlapping regexes: the topic goes to [`Self::mirror_index`]'s pick.
    pub fn claimants(&self, topic: &str) -> Vec<usize> {
        self.matchers
            .iter()
            .enumerate()
            .filter(|(_, m)| m.matches(topic))
            .map(|(i, _)| i)
            .collect()
    }

    /// The mirror owning `topic`.
    pub fn mirror_for_topic<'c>(&self, cfg: &'c Config, topic: &str) -> Option<&'c MirrorConfig> {
        self.mirror_index(topic).and_then(|i| cfg.mirrors.get(i))
    }
}

fn exact_names(m: &MirrorConfig) -> impl Iterator<Item = &str> {
    m.topics.iter().filter_map(|t| match TopicEntry::parse(t) {
        TopicEntry::Exact(n) => Some(n),
        TopicEntry::Regex(_) => None,
    })
}

/// Process-wide cache of compiled topic regexes, keyed by pattern text, so that
/// [`Config::mirror_for_topic`] compiles each pattern once.
fn cached_regex(pattern: &str) -> Option<Arc<Regex>> {
    static CACHE: OnceLock<RwLock<HashMap<String, Option<Arc<Regex>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Ok(map) = cache.read() {
        if let Some(r) = map.get(pattern) {
            return r.clone();
        }
    }
    let compiled = compile_topic_regex(pattern).ok().map(Arc::new);
    if let Ok(mut map) = cache.write() {
        map.insert(pattern.to_string(), compiled.clone());
    }
    compiled
}

impl Config {
    /// The mirror owning `topic`: the mirror listing it exactly, else the first mirror with a
    /// regex matching the whole name. Regexes are compiled once per process (cached by text);
    /// for a hot path, build a [`TopicRouter`] once and use it instead.
    pub fn mirror_for_topic(&self, topic: &str) -> Option<&MirrorConfig> {
        if let Some(m) = self
            .mirrors
            .iter()
            .find(|m| exact_names(m).any(|n| n == topic))
        {
            return Some(m);
        }
        self.mirrors.iter().find(|m| {
            m.topics.iter().any(|t| match TopicEntry::parse(t) {
                TopicEntry::Regex(p) => cached_regex(p).is_some_and(|r| r.is_match(topic)),
                TopicEntry::Exact(_) => false,
            })
        })
    }

    /// Compiles the topic matchers of every mirror; see [`TopicRouter`].
    pub fn topic_router(&self) -> TopicRouter {
        TopicRouter::new(self)
    }
}
