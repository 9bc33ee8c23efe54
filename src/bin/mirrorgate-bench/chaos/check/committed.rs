//! The checker's rule for transactions: what a `read_committed` consumer sees of the mirrored
//! part of the destination (before the barrier) against what it sees of the source.
//!
//! - Nothing the source did not commit is visible on the destination (an aborted or undecided
//!   transaction of the source shown as committed would break exactly-once).
//! - The visible records come in the source's order.
//! - Planned failover: every record committed on the source is visible on the destination.
//! - Unplanned failover: a committed source record may be missing from the destination's view
//!   only when its COMMIT marker lies after the last record the agent mirrored of that partition
//!   (the marker may not have been mirrored before the source died, and the failover then aborted
//!   the transaction). Those are counted as `committed_unmirrored`, part of the RPO.
//!
//! Owns: the `read_committed` view of a log given as entries, and that rule. Must not touch:
//! the other rules (`check.rs`).

use std::collections::{HashMap, HashSet};

use super::{Entry, Mode, Verdict};

/// The records a `read_committed` consumer returns from `log`, up to `end` (exclusive), in order:
/// `(offset, key, producer id)`. A transactional record counts once the next marker of its
/// producer id is a COMMIT; one with no marker yet (an open transaction) does not count.
pub fn view(log: &[Entry], end: Option<i64>) -> Vec<(i64, &str, i64)> {
    let mut out = Vec::new();
    let mut open: HashMap<i64, Vec<(i64, &str, i64)>> = HashMap::new();
    for e in log {
        match e {
            Entry::Data { offset, .. }
            | Entry::Control { offset, .. }
            | Entry::DataBarrier { offset }
                if end.is_some_and(|b| *offset >= b) =>
            {
                break;
            }
            Entry::Data {
                offset,
                producer_id,
                key,
                transactional,
                ..
            } => {
                let r = (*offset, key.as_str(), *producer_id);
                if *transactional {
                    open.entry(*producer_id).or_default().push(r);
                } else {
                    out.push(r);
                }
            }
            Entry::Control {
                producer_id,
                commit,
                ..
            } => {
                if let Some(recs) = open.remove(producer_id) {
                    if *commit {
                        out.extend(recs);
                    }
                }
            }
            Entry::DataBarrier { .. } => {}
        }
    }
    out.sort_unstable_by_key(|r| r.0);
    out
}

/// The source offset of the marker that ends the transaction of the record at `offset` written
/// by `producer_id` (`None`: still open).
fn marker_after(log: &[Entry], producer_id: i64, offset: i64) -> Option<i64> {
    log.iter().find_map(|e| match e {
        Entry::Control {
            offset: o,
            producer_id: p,
            ..
        } if *p == producer_id && *o > offset => Some(*o),
        _ => None,
    })
}

/// Checks partition `p`: `source` and `destination` are its logs, `barrier` the destination's
/// barrier offset, `from_source` the keys the source's clients wrote (other records of the
/// destination, late mirror writes, are left to the other rules).
pub fn check_partition(
    v: &mut Verdict,
    mode: Mode,
    p: usize,
    source: &[Entry],
    destination: &[Entry],
    barrier: Option<i64>,
    from_source: &HashSet<&str>,
) {
    let s = view(source, None);
    let d: Vec<_> = view(destination, barrier)
        .into_iter()
        .filter(|r| from_source.contains(r.1))
        .collect();
    let at: HashMap<&str, usize> = s.iter().enumerate().map(|(i, r)| (r.1, i)).collect();
    let mut last = None;
    for (offset, key, _) in &d {
        match at.get(key) {
            None => {
                v.committed_mismatch += 1;
                v.breach(format!(
                    "partition {p}: {key} at {offset} is visible to read_committed on the destination, not on the source"
                ));
            }
            Some(&i) => {
                if last.is_some_and(|l| i < l) {
                    v.committed_mismatch += 1;
                    v.breach(format!(
                        "partition {p}: read_committed shows {key} at {offset} out of the source's order"
                    ));
                }
                last = Some(i);
            }
        }
    }
    let visible: HashSet<&str> = d.iter().map(|r| r.1).collect();
    // The source offset of the last record the agent mirrored (by key) before the barrier.
    let mirrored: HashSet<&str> = destination
        .iter()
        .filter_map(|e| match e {
            Entry::Data { offset, key, .. } if barrier.is_none_or(|b| *offset < b) => {
                Some(key.as_str())
            }
            _ => None,
        })
        .collect();
    let last_mirrored = source
        .iter()
        .filter_map(|e| match e {
            Entry::Data { offset, key, .. } if mirrored.contains(key.as_str()) => Some(*offset),
            _ => None,
        })
        .max();
    for (offset, key, pid) in &s {
        if visible.contains(key) {
            continue;
        }
        let marker = marker_after(source, *pid, *offset);
        let may_be_unmirrored = match (marker, last_mirrored) {
            (_, None) => true,
            (Some(m), Some(l)) => m > l,
            (None, Some(_)) => false,
        };
        if mode == Mode::Unplanned && (!mirrored.contains(key) || may_be_unmirrored) {
            v.committed_unmirrored += 1;
            continue;
        }
        v.committed_mismatch += 1;
        v.breach(format!(
            "partition {p}: {key} (source offset {offset}) is committed on the source, not visible to read_committed on the destination"
        ));
    }
}
