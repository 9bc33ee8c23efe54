//! What a forward listener's ledger knows of the acknowledgements a previous process passed and
//! did not hand over (it crashed: its journal lacks its last second, or it left none).
//!
//! Every record the source acknowledged before that process stopped lies below the source's log
//! end read after the restart. So once the agent has mirrored a partition past that end (the
//! **horizon**), the destination holds every record acknowledged there before the restart, and
//! the producers from before it can go on there after an unplanned failover, as those noted
//! since. Before that, they are refused (they may lack records the ledger does not know).
//!
//! | state \ event | restart without handover | log ends read | a position past a partition's end |
//! |---|---|---|---|
//! | `Clean` | `Unknown` | error: not asked for | stays |
//! | `Unknown` | `Unknown` | `Horizon` (`Covered` when no partition) | stays |
//! | `Horizon` | `Unknown` (a later end covers more) | error: not asked for | `Covered` once every partition is past its end |
//! | `Covered` | `Unknown` | error: not asked for | stays |
//!
//! Owns: that state and its transitions. Must not touch: the batches (the ledger), reading the
//! source (the caller reads the log ends).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A read of the log ends that no restart asked for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the source's log ends were read for a restart, but the ledger's restart state is {0:?}: nothing asked for them")]
pub struct NotAskedFor(pub &'static str);

/// See the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartHorizon {
    /// No restart left acknowledgements unaccounted (none yet, or every one was handed over):
    /// only producers noted by this process (or handed over) go on.
    #[default]
    Clean,
    /// A restart without handover; the source's log ends are yet to be read.
    Unknown,
    /// The source's log ends read after the restart, per topic and partition, each with
    /// whether the agent has mirrored past it.
    Horizon(BTreeMap<String, BTreeMap<i32, (i64, bool)>>),
    /// The agent has mirrored past every end: everything acknowledged before the restart is
    /// on the destination.
    Covered,
}

impl RestartHorizon {
    /// The state's name, as the route's status shows it.
    pub fn name(&self) -> &'static str {
        match self {
            RestartHorizon::Clean => "clean",
            RestartHorizon::Unknown => "waiting for the log ends",
            RestartHorizon::Horizon(_) => "horizon",
            RestartHorizon::Covered => "covered",
        }
    }

    /// A process started without a handover from the one before.
    pub fn restarted(&mut self) {
        *self = RestartHorizon::Unknown;
    }

    /// Whether the source's log ends are to be read.
    pub fn wants_ends(&self) -> bool {
        *self == RestartHorizon::Unknown
    }

    /// The source's log ends, read after the restart.
    pub fn read(&mut self, ends: BTreeMap<(String, i32), i64>) -> Result<(), NotAskedFor> {
        if !self.wants_ends() {
            return Err(NotAskedFor(self.name()));
        }
        let mut by_topic: BTreeMap<String, BTreeMap<i32, (i64, bool)>> = BTreeMap::new();
        for ((t, p), end) in ends {
            by_topic.entry(t).or_default().insert(p, (end, end <= 0));
        }
        *self = RestartHorizon::Horizon(by_topic);
        self.cover_if_all();
        Ok(())
    }

    /// The agent mirrored `topic`-`partition` up to `next`. Returns whether that made the
    /// state `Covered`.
    pub fn mirrored(&mut self, topic: &str, partition: i32, next: i64) -> bool {
        let RestartHorizon::Horizon(map) = self else {
            return false;
        };
        match map.get_mut(topic).and_then(|ps| ps.get_mut(&partition)) {
            Some((end, covered)) if !*covered && next >= *end => *covered = true,
            _ => return false,
        }
        self.cover_if_all()
    }

    fn cover_if_all(&mut self) -> bool {
        let RestartHorizon::Horizon(map) = self else {
            return false;
        };
        let all = map.values().flat_map(|ps| ps.values()).all(|(_, c)| *c);
        if all {
            *self = RestartHorizon::Covered;
        }
        all
    }

    /// Whether everything acknowledged before the restart in `topic`-`partition` is on the
    /// destination.
    pub fn covers(&self, topic: &str, partition: i32) -> bool {
        match self {
            RestartHorizon::Covered => true,
            RestartHorizon::Horizon(map) => map
                .get(topic)
                .and_then(|ps| ps.get(&partition))
                .is_some_and(|(_, covered)| *covered),
            RestartHorizon::Clean | RestartHorizon::Unknown => false,
        }
    }

    /// Whether the positions `next` reach past every end (a failover's final positions): the
    /// figures then count everything acknowledged before the restart.
    pub fn covered_at(&self, next: &dyn Fn(&str, i32) -> Option<i64>) -> bool {
        match self {
            RestartHorizon::Clean | RestartHorizon::Covered => true,
            RestartHorizon::Unknown => false,
            RestartHorizon::Horizon(map) => map.iter().all(|(t, ps)| {
                ps.iter()
                    .all(|(p, (end, c))| *c || next(t, *p).is_some_and(|n| n >= *end))
            }),
        }
    }

    /// The partitions whose ends the agent has not mirrored past yet (the pruner gives their
    /// positions even when the ledger keeps no batch there).
    pub fn uncovered(&self) -> Vec<(String, i32)> {
        let RestartHorizon::Horizon(map) = self else {
            return Vec::new();
        };
        map.iter()
            .flat_map(|(t, ps)| {
                ps.iter()
                    .filter(|(_, (_, c))| !*c)
                    .map(move |(p, _)| (t.clone(), *p))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(v: &[(&str, i32, i64)]) -> BTreeMap<(String, i32), i64> {
        v.iter()
            .map(|(t, p, e)| ((t.to_string(), *p), *e))
            .collect()
    }

    #[test]
    fn a_restart_without_handover_covers_nothing_until_the_log_ends_are_read() {
        let mut h = RestartHorizon::default();
        assert!(!h.wants_ends() && !h.covers("t", 0));
        h.restarted();
        assert!(h.wants_ends());
        assert!(!h.covers("t", 0));
        assert!(!h.mirrored("t", 0, i64::MAX), "no end known yet");
    }

    #[test]
    fn a_partition_is_covered_once_the_agent_mirrored_past_its_end_and_all_of_them_end_it() {
        let mut h = RestartHorizon::Unknown;
        h.read(ends(&[("t", 0, 10), ("t", 1, 20)])).unwrap();
        assert_eq!(h.uncovered().len(), 2);
        assert!(!h.mirrored("t", 0, 9));
        assert!(!h.covers("t", 0));
        assert!(!h.mirrored("t", 0, 10), "one of two");
        assert!(h.covers("t", 0) && !h.covers("t", 1));
        assert_eq!(h.uncovered(), [("t".to_string(), 1)]);
        assert!(h.mirrored("t", 1, 25));
        assert_eq!(h, RestartHorizon::Covered);
        assert!(
            h.covers("u", 3),
            "everything before the restart is on the destination"
        );
    }

    #[test]
    fn empty_partitions_and_no_partitions_are_covered_at_once() {
        let mut h = RestartHorizon::Unknown;
        h.read(ends(&[("t", 0, 0)])).unwrap();
        assert_eq!(h, RestartHorizon::Covered);
        let mut h = RestartHorizon::Unknown;
        h.read(BTreeMap::new()).unwrap();
        assert_eq!(h, RestartHorizon::Covered);
    }

    #[test]
    fn a_read_no_restart_asked_for_is_an_error() {
        for mut h in [RestartHorizon::Clean, RestartHorizon::Covered] {
            assert!(h.read(ends(&[("t", 0, 5)])).is_err());
        }
        let mut h = RestartHorizon::Unknown;
        h.read(ends(&[("t", 0, 5)])).unwrap();
        assert_eq!(h.read(ends(&[("t", 0, 6)])), Err(NotAskedFor("horizon")));
    }

    #[test]
    fn a_later_restart_asks_for_the_ends_again() {
        let mut h = RestartHorizon::Unknown;
        h.read(ends(&[("t", 0, 5)])).unwrap();
        h.mirrored("t", 0, 5);
        assert_eq!(h, RestartHorizon::Covered);
        h.restarted();
        assert!(h.wants_ends() && !h.covers("t", 0));
    }

    #[test]
    fn final_positions_past_every_end_count_everything_before_the_restart() {
        let mut h = RestartHorizon::Unknown;
        assert!(!h.covered_at(&|_, _| Some(i64::MAX)), "ends not known");
        h.read(ends(&[("t", 0, 10), ("t", 1, 20)])).unwrap();
        assert!(h.covered_at(&|_, p| Some(if p == 0 { 10 } else { 20 })));
        assert!(!h.covered_at(&|_, p| Some(if p == 0 { 10 } else { 19 })));
        assert!(!h.covered_at(&|_, p| (p == 0).then_some(10)));
        assert!(RestartHorizon::Clean.covered_at(&|_, _| None));
    }
}
