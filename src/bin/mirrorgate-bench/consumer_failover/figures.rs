//! The figures of `consumer-failover`, from what the group read on each side, what the
//! destination's log holds, what the source acknowledged and the offsets of the last sync the
//! gateway reported: records are identified by their key (unique per run).
//!
//! Owns: the definitions of `skipped`, `reread`, `reread_bound` and `not_mirrored` (see
//! docs/benchmarks.md). Must not touch: clusters, processes, the gateway.

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use crate::group_member::Read;

/// A record of a log: partition, offset, key.
pub type Logged = (i32, i64, String);

/// What the figures are computed from.
pub struct Inputs<'a> {
    /// Read by the group on the source, before the source was killed.
    pub source_reads: &'a [Read],
    /// Read by the group through the gateway after the failover.
    pub destination_reads: &'a [Read],
    /// The destination topic's records (its whole log, barriers aside).
    pub destination_log: &'a [Logged],
    /// `(partition, key)` of every record the source acknowledged.
    pub acked: &'a [(i32, String)],
    /// Per partition, the group's destination commit in the last sync the gateway reported
    /// before the source was killed (a partition absent: no commit there yet).
    pub synced: &'a BTreeMap<i32, i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    /// Records the group read, both sides, a record read twice counted twice.
    pub records: usize,
    pub records_source: usize,
    pub records_destination: usize,
    /// Records in the destination's log.
    pub mirrored: usize,
    /// Acknowledged by the source, absent from the destination: the mirror's loss at the kill
    /// (no group can read them after the failover), not the group sync's.
    pub not_mirrored: usize,
    /// Records in the destination's log the group read on neither side.
    pub skipped: usize,
    /// Records the group read on the source and again on the destination.
    pub reread: usize,
    /// Records the group read on the source at or past the offset of the last reported sync
    /// (every record it read of a partition without a synced offset).
    pub reread_bound: usize,
}

/// The figures; an error when a record the group read on the source sits at another partition
/// or offset in the destination's log (the bound is computed in offsets, which needs the logs
/// aligned, as they are for a topic mirrored from its start).
pub fn compute(i: &Inputs) -> Result<Figures, String> {
    let on_source: HashMap<&str, (i32, i64)> = i
        .source_reads
        .iter()
        .map(|r| (r.key.as_str(), (r.partition, r.offset)))
        .collect();
    for (p, o, k) in i.destination_log {
        if let Some(at) = on_source.get(k.as_str()) {
            if *at != (*p, *o) {
                return Err(format!(
                    "logs not aligned: {k} read at {}/{} on the source, logged at {p}/{o} on the destination",
                    at.0, at.1
                ));
            }
        }
    }
    let read_source: BTreeSet<&str> = i.source_reads.iter().map(|r| r.key.as_str()).collect();
    let read_destination: BTreeSet<&str> =
        i.destination_reads.iter().map(|r| r.key.as_str()).collect();
    let logged: BTreeSet<&str> = i.destination_log.iter().map(|r| r.2.as_str()).collect();
    let skipped = logged
        .iter()
        .filter(|k| !read_source.contains(*k) && !read_destination.contains(*k))
        .count();
    let not_mirrored = i
        .acked
        .iter()
        .map(|(_, k)| k.as_str())
        .collect::<BTreeSet<_>>()
        .difference(&logged)
        .count();
    let past_sync: BTreeSet<&str> = i
        .source_reads
        .iter()
        .filter(|r| i.synced.get(&r.partition).is_none_or(|s| r.offset >= *s))
        .map(|r| r.key.as_str())
        .collect();
    Ok(Figures {
        records: i.source_reads.len() + i.destination_reads.len(),
        records_source: i.source_reads.len(),
        records_destination: i.destination_reads.len(),
        mirrored: logged.len(),
        not_mirrored,
        skipped,
        reread: read_source.intersection(&read_destination).count(),
        reread_bound: past_sync.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(partition: i32, offset: i64) -> Read {
        Read {
            partition,
            offset,
            key: format!("k{partition}-{offset}"),
            at_ms: 0,
        }
    }

    fn logged(partition: i32, offsets: std::ops::Range<i64>) -> Vec<Logged> {
        offsets
            .map(|o| (partition, o, format!("k{partition}-{o}")))
            .collect()
    }

    fn figures(
        source: &[Read],
        destination: &[Read],
        log: &[Logged],
        synced: &[(i32, i64)],
    ) -> Figures {
        let acked: Vec<(i32, String)> = log.iter().map(|(p, _, k)| (*p, k.clone())).collect();
        compute(&Inputs {
            source_reads: source,
            destination_reads: destination,
            destination_log: log,
            acked: &acked,
            synced: &synced.iter().copied().collect(),
        })
        .expect("aligned")
    }

    #[test]
    fn a_logged_record_read_on_neither_side_is_skipped() {
        let f = figures(&[read(0, 0)], &[read(0, 2)], &logged(0, 0..3), &[(0, 1)]);
        assert_eq!((f.skipped, f.reread), (1, 0));
    }

    #[test]
    fn a_record_read_on_both_sides_is_reread_once_and_counted_twice_in_records() {
        let f = figures(
            &[read(0, 0), read(0, 1)],
            &[read(0, 1), read(0, 2)],
            &logged(0, 0..3),
            &[(0, 1)],
        );
        assert_eq!((f.reread, f.skipped, f.records), (1, 0, 4));
    }

    #[test]
    fn the_bound_counts_source_reads_at_or_past_the_synced_offset_per_partition() {
        let source = [read(0, 0), read(0, 1), read(0, 2), read(1, 0), read(1, 1)];
        let log: Vec<Logged> = logged(0, 0..3).into_iter().chain(logged(1, 0..2)).collect();
        let f = figures(&source, &[], &log, &[(0, 1), (1, 2)]);
        assert_eq!(f.reread_bound, 2);
    }

    #[test]
    fn a_partition_without_a_synced_offset_bounds_every_source_read_of_it() {
        let f = figures(&[read(0, 0), read(1, 0)], &[], &logged(1, 0..1), &[(0, 5)]);
        assert_eq!(f.reread_bound, 1);
    }

    #[test]
    fn an_acknowledged_record_missing_on_the_destination_is_not_mirrored_not_skipped() {
        let acked = vec![(0, "k0-0".to_string()), (0, "k0-1".to_string())];
        let f = compute(&Inputs {
            source_reads: &[],
            destination_reads: &[read(0, 0)],
            destination_log: &logged(0, 0..1),
            acked: &acked,
            synced: &BTreeMap::new(),
        })
        .expect("aligned");
        assert_eq!((f.not_mirrored, f.skipped, f.mirrored), (1, 0, 1));
    }

    #[test]
    fn a_record_at_another_offset_on_the_destination_is_an_error() {
        let log = vec![(0, 7, "k0-0".to_string())];
        let e = compute(&Inputs {
            source_reads: &[read(0, 0)],
            destination_reads: &[],
            destination_log: &log,
            acked: &[],
            synced: &BTreeMap::new(),
        });
        assert!(e.is_err_and(|e| e.contains("not aligned")));
    }
}
