//! Topic config sync policy: keep each mirror topic's dynamic configs on the destination equal
//! to the source's for the synced keys (`mirrors[].configs`), report destination-side changes
//! instead of fighting them, and write nothing once the topic is not MIRRORING.
//!
//! Per synced key (the keys the source set on the topic, plus the keys mirrorgate set before),
//! with `s` the source value, `d` the destination value (dynamic topic configs only; `None`:
//! not set) and `last` what mirrorgate last saw in step (in memory, per gateway):
//!
//! | condition                                   | decision                          |
//! |---------------------------------------------|-----------------------------------|
//! | `s == d`                                    | in step (`last = s`, drift ends)  |
//! | `last` unknown (first sight since start)    | SET `s` (the source wins)         |
//! | `s == last`, `d != last`                    | drift: reported, not written      |
//! | `s != last` (the source changed)            | SET `s`, or DELETE when `s` unset |
//!
//! Owns: the decision per key, the memory of what was in step, the drift set, one round over
//! the topics. Must not touch: the requests (the [`ConfigIo`] implementation does), partition
//! states (it only asks whether a topic may be written).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;

use serde::Serialize;

use crate::config::ConfigSyncConfig;

/// Dynamic topic configs: key → value.
pub type TopicConfigs = BTreeMap<String, String>;

/// One change to a destination topic's configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(String, String),
    Delete(String),
}

/// The I/O of config sync (real: `sync::wire`; tests: a fake).
pub trait ConfigIo: Send + Sync {
    /// The mirror's topics that exist on the destination.
    fn topics(&self) -> Vec<String>;
    /// Whether the topic's destination configs may be written now: every partition MIRRORING,
    /// no failover started, sync not stopped.
    fn may_write(&self, topic: &str) -> bool;
    /// Dynamic configs the source set on each topic (sensitive ones left out); per topic an
    /// error when it could not be described.
    fn source_configs(
        &self,
        topics: &[String],
    ) -> impl Future<Output = Result<HashMap<String, Result<TopicConfigs, String>>, String>> + Send;
    /// The same on the destination.
    fn destination_configs(
        &self,
        topics: &[String],
    ) -> impl Future<Output = Result<HashMap<String, Result<TopicConfigs, String>>, String>> + Send;
    /// Apply `changes` to one destination topic (IncrementalAlterConfigs).
    fn alter(
        &self,
        topic: &str,
        changes: &[Change],
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// What the policy decided for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    InStep,
    Write(Change),
    Drift,
}

/// The decision for one key (see the module's table).
pub fn decide(
    key: &str,
    source: Option<&str>,
    destination: Option<&str>,
    last: Option<Option<&str>>,
) -> Decision {
    if source == destination {
        return Decision::InStep;
    }
    let write = || match source {
        Some(v) => Decision::Write(Change::Set(key.to_string(), v.to_string())),
        None => Decision::Write(Change::Delete(key.to_string())),
    };
    match last {
        None => write(),
        Some(last) if source == last => Decision::Drift,
        Some(_) => write(),
    }
}

/// A synced key whose destination value was changed by someone else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    pub topic: String,
    pub key: String,
    pub source: Option<String>,
    pub destination: Option<String>,
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RoundReport {
    /// Topics compared (MIRRORING, described on both sides).
    pub topics: usize,
    /// Synced keys in step after the round.
    pub keys_in_step: usize,
    pub set: usize,
    pub deleted: usize,
    /// Drifts first seen in this round (a drift is reported once while it lasts).
    pub new_drifts: Vec<Drift>,
    /// Per-topic errors of this round.
    pub errors: Vec<String>,
}

/// The policy's memory (per mirror, in memory: issue 15 keeps no sync state in Kafka yet).
#[derive(Debug, Default)]
pub struct ConfigSync {
    /// (topic, key) → the value last seen in step (`None`: unset on both sides).
    last: HashMap<(String, String), Option<String>>,
    /// (topic, key) → the drift currently reported.
    drift: BTreeMap<(String, String), Drift>,
}

impl ConfigSync {
    /// Drifts currently reported.
    pub fn drifts(&self) -> Vec<Drift> {
        self.drift.values().cloned().collect()
    }

    /// One round: describe both sides, decide per key, write what must be written.
    pub async fn round<Io: ConfigIo>(
        &mut self,
        io: &Io,
        cfg: &ConfigSyncConfig,
    ) -> Result<RoundReport, String> {
        let topics: Vec<String> = io
            .topics()
            .into_iter()
            .filter(|t| io.may_write(t))
            .collect();
        let mut report = RoundReport::default();
        if topics.is_empty() {
            return Ok(report);
        }
        let src = io
            .source_configs(&topics)
            .await
            .map_err(|e| format!("source: {e}"))?;
        let dst = io
            .destination_configs(&topics)
            .await
            .map_err(|e| format!("destination: {e}"))?;
        for topic in &topics {
            let (s, d) = match (src.get(topic), dst.get(topic)) {
                (Some(Ok(s)), Some(Ok(d))) => (s, d),
                (Some(Err(e)), _) => {
                    report.errors.push(format!("{topic}: source: {e}"));
                    continue;
                }
                (_, Some(Err(e))) => {
                    report.errors.push(format!("{topic}: destination: {e}"));
                    continue;
                }
                _ => continue,
            };
            report.topics += 1;
            self.topic_round(io, cfg, topic, s, d, &mut report).await;
        }
        Ok(report)
    }

    async fn topic_round<Io: ConfigIo>(
        &mut self,
        io: &Io,
        cfg: &ConfigSyncConfig,
        topic: &str,
        s: &TopicConfigs,
        d: &TopicConfigs,
        report: &mut RoundReport,
    ) {
        let mut keys: Vec<String> = s.keys().cloned().collect();
        keys.extend(
            self.last
                .keys()
                .filter(|(t, k)| t == topic && !s.contains_key(k))
                .map(|(_, k)| k.clone()),
        );
        let mut changes = Vec::new();
        for key in keys.iter().filter(|k| cfg.syncs(k)) {
            let id = (topic.to_string(), key.clone());
            let sv = s.get(key).map(String::as_str);
            let dv = d.get(key).map(String::as_str);
            let last = self.last.get(&id).map(|l| l.as_deref());
            match decide(key, sv, dv, last) {
                Decision::InStep => {
                    report.keys_in_step += 1;
                    self.drift.remove(&id);
                    match sv {
                        Some(v) => self.last.insert(id, Some(v.to_string())),
                        None => self.last.remove(&id),
                    };
                }
                Decision::Drift => {
                    let drift = Drift {
                        topic: topic.to_string(),
                        key: key.clone(),
                        source: sv.map(str::to_string),
                        destination: dv.map(str::to_string),
                    };
                    if self.drift.get(&id) != Some(&drift) {
                        report.new_drifts.push(drift.clone());
                        self.drift.insert(id, drift);
                    }
                }
                Decision::Write(c) => changes.push(c),
            }
        }
        if changes.is_empty() {
            return;
        }
        if !io.may_write(topic) {
            return;
        }
        match io.alter(topic, &changes).await {
            Ok(()) => {
                for c in &changes {
                    match c {
                        Change::Set(k, v) => {
                            report.set += 1;
                            self.drift.remove(&(topic.to_string(), k.clone()));
                            self.last
                                .insert((topic.to_string(), k.clone()), Some(v.clone()));
                        }
                        Change::Delete(k) => {
                            report.deleted += 1;
                            self.drift.remove(&(topic.to_string(), k.clone()));
                            self.last.remove(&(topic.to_string(), k.clone()));
                        }
                    }
                    report.keys_in_step += 1;
                }
            }
            Err(e) => report.errors.push(format!("{topic}: alter: {e}")),
        }
    }
}

#[cfg(test)]
#[path = "configs_tests.rs"]
mod tests;
