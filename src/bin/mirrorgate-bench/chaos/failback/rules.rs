//! The failback's rules, over logs read from the brokers and the history of the phase's
//! clients, without I/O:
//! - the old source holds the destination's log entry for entry (the failback copied it all);
//! - the recovery's quarantine topic holds exactly what the failover left behind;
//! - after the failover back onto the old source: its log up to its barrier is the
//!   destination's, the barrier is where the failback gateway reports it, and after it come
//!   only the local records of the phase, each acknowledged one once at its offset, in each
//!   producer's order, none under a producer id the mirrored traffic used at an epoch not above
//!   its highest there, and no write of the late mirroring tool.
//!
//! Owns: those rules. Must not touch: processes, clusters, the first failover's rules
//! (`check.rs`).

use std::collections::{HashMap, HashSet};

use super::super::check::committed::view;
use super::super::check::{Barrier, Entry, Op, Origin, Outcome};

/// The first difference between the old source's log and the destination's, per partition.
pub fn differences(source: &[Vec<Entry>], destination: &[Vec<Entry>]) -> Vec<String> {
    let mut out = Vec::new();
    for (p, (s, d)) in source.iter().zip(destination).enumerate() {
        if s == d {
            continue;
        }
        let at = s.iter().zip(d).position(|(a, b)| a != b);
        out.push(match at {
            Some(k) => format!(
                "failback: partition {p}: entry {k} differs: old source {:?}, destination {:?}",
                s[k], d[k]
            ),
            None => format!(
                "failback: partition {p}: the old source holds {} entries, the destination {}",
                s.len(),
                d.len()
            ),
        });
    }
    out
}

/// The recovery's rule, per partition, after an unplanned failover: the quarantine topic holds
/// exactly what a `read_committed` reader of the old source saw and a `read_committed` reader of
/// the destination does not (the acknowledged records the failover left behind: those never
/// mirrored, and those of a transaction the source committed but the failover aborted), each
/// once, in the source's order. What it breaks, described.
pub fn recovery_breaches(
    source: &[Vec<Entry>],
    destination: &[Vec<Entry>],
    quarantine: &[Vec<Entry>],
) -> Vec<String> {
    let mut out = Vec::new();
    for (p, src) in source.iter().enumerate() {
        let seen: HashSet<&str> = destination
            .get(p)
            .map(|d| view(d, None).into_iter().map(|r| r.1).collect())
            .unwrap_or_default();
        let want: Vec<(i64, &str)> = view(src, None)
            .into_iter()
            .filter(|r| !seen.contains(r.1))
            .map(|r| (r.0, r.1))
            .collect();
        let got: Vec<&str> = quarantine
            .get(p)
            .into_iter()
            .flatten()
            .filter_map(|e| match e {
                Entry::Data { key, .. } => Some(key.as_str()),
                _ => None,
            })
            .collect();
        let wanted: HashSet<&str> = want.iter().map(|w| w.1).collect();
        let in_got: HashSet<&str> = got.iter().copied().collect();
        let missing: Vec<&(i64, &str)> = want.iter().filter(|w| !in_got.contains(w.1)).collect();
        if let Some((offset, key)) = missing.first() {
            out.push(format!(
                "recovery: partition {p}: {} records the failover left behind are not in the quarantine topic, the first {key} (source offset {offset})",
                missing.len()
            ));
        }
        let mut once = HashSet::new();
        let extra: Vec<&&str> = got
            .iter()
            .filter(|k| !wanted.contains(**k) || !once.insert(**k))
            .collect();
        if let Some(key) = extra.first() {
            out.push(format!(
                "recovery: partition {p}: {} records of the quarantine topic are not owed to it or are there twice, the first {key}",
                extra.len()
            ));
        }
        let order: Vec<&str> = want
            .iter()
            .map(|w| w.1)
            .filter(|k| in_got.contains(k))
            .collect();
        let mut seen_got = HashSet::new();
        let got_once: Vec<&str> = got
            .iter()
            .copied()
            .filter(|k| wanted.contains(k) && seen_got.insert(*k))
            .collect();
        if order != got_once {
            out.push(format!(
                "recovery: partition {p}: the quarantine topic holds the records out of the source's order"
            ));
        }
    }
    out
}

/// The failover back onto the old source (planned: the failback had copied the destination's
/// whole log `destination` first): what `old_source`'s log, with the barriers the failback
/// gateway reports, and the phase's `ops` (local writes through it, late writes into its
/// mirror listener) break.
pub fn back_over_breaches(
    destination: &[Vec<Entry>],
    old_source: &[Vec<Entry>],
    barriers: &[Option<Barrier>],
    ops: &[Op],
) -> Vec<String> {
    let mut out = Vec::new();
    let by_key: HashMap<&str, &Op> = ops.iter().map(|o| (o.key.as_str(), o)).collect();
    let mut found: HashMap<&str, Vec<(usize, i64)>> = HashMap::new();
    for (p, log) in old_source.iter().enumerate() {
        let Some(b) = barriers.get(p).copied().flatten() else {
            out.push(format!(
                "back over: partition {p}: the failback gateway reports no barrier"
            ));
            continue;
        };
        if !b.lies_in(log) {
            out.push(format!(
                "back over: partition {p}: no barrier in the old source's log at offset {}",
                b.offset
            ));
        }
        let before: Vec<&Entry> = log.iter().filter(|e| offset_of(e) < b.offset).collect();
        let mirrored: Vec<&Entry> = destination.get(p).into_iter().flatten().collect();
        if before != mirrored {
            out.push(format!(
                "back over: partition {p}: the old source's log before its barrier ({} entries) is not the destination's ({} entries)",
                before.len(),
                mirrored.len()
            ));
        }
        // The highest epoch each producer id reached in the mirrored part.
        let mut epochs: HashMap<i64, i16> = HashMap::new();
        for e in &before {
            if let Entry::Data {
                producer_id,
                producer_epoch,
                ..
            } = e
            {
                if *producer_id >= 0 {
                    let x = epochs.entry(*producer_id).or_insert(*producer_epoch);
                    *x = (*x).max(*producer_epoch);
                }
            }
        }
        let mut last_n: HashMap<&str, u64> = HashMap::new();
        for e in log.iter().filter(|e| offset_of(e) >= b.offset) {
            let Entry::Data {
                offset,
                producer_id,
                producer_epoch,
                key,
                ..
            } = e
            else {
                continue;
            };
            let Some(op) = by_key.get(key.as_str()) else {
                out.push(format!(
                    "back over: partition {p}: {key} at {offset} after the barrier is no local write of the phase"
                ));
                continue;
            };
            if op.origin == Origin::Late {
                out.push(format!(
                    "back over: partition {p}: mirror write {key} at {offset}, after the barrier"
                ));
                continue;
            }
            found.entry(key.as_str()).or_default().push((p, *offset));
            if epochs.get(producer_id).is_some_and(|m| producer_epoch <= m) {
                out.push(format!(
                    "back over: partition {p}: {key} at {offset} was written with producer id {producer_id} epoch {producer_epoch}, which mirrored traffic used up to epoch {}",
                    epochs[producer_id]
                ));
            }
            if let Some(prev) = last_n.insert(op.client.as_str(), op.n) {
                if prev > op.n {
                    out.push(format!(
                        "back over: partition {p}: {key} at {offset} comes after record {prev} of {}",
                        op.client
                    ));
                }
            }
        }
    }
    for op in ops.iter().filter(|o| o.origin == Origin::Local) {
        let at = found.get(op.key.as_str()).map_or(&[][..], Vec::as_slice);
        match (&op.outcome, at) {
            (Outcome::Acked { partition, offset }, [one])
                if *one != (*partition as usize, *offset) =>
            {
                out.push(format!(
                    "back over: {} acknowledged at {partition}/{offset}, found at {}/{}",
                    op.key, one.0, one.1
                ));
            }
            (Outcome::Acked { .. }, []) => out.push(format!(
                "back over: {} acknowledged, not in the old source's log",
                op.key
            )),
            (_, at) if at.len() > 1 => out.push(format!(
                "back over: {} is in the old source's log {} times",
                op.key,
                at.len()
            )),
            _ => {}
        }
    }
    out
}

fn offset_of(e: &Entry) -> i64 {
    match e {
        Entry::Data { offset, .. }
        | Entry::Control { offset, .. }
        | Entry::DataBarrier { offset } => *offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(offset: i64, key: &str) -> Entry {
        Entry::Data {
            offset,
            producer_id: 7,
            producer_epoch: 0,
            key: key.into(),
            transactional: false,
        }
    }

    fn txn(offset: i64, pid: i64, key: &str) -> Entry {
        Entry::Data {
            offset,
            producer_id: pid,
            producer_epoch: 0,
            key: key.into(),
            transactional: true,
        }
    }

    fn marker(offset: i64, pid: i64, commit: bool) -> Entry {
        Entry::Control {
            offset,
            producer_id: pid,
            commit,
        }
    }

    #[test]
    fn a_quarantine_holding_the_unmirrored_tail_once_in_order_breaks_nothing() {
        let source = vec![vec![data(0, "a"), data(1, "b"), data(2, "c")]];
        let destination = vec![vec![data(0, "a"), Entry::DataBarrier { offset: 1 }]];
        let quarantine = vec![vec![data(0, "b"), data(1, "c")]];
        assert!(recovery_breaches(&source, &destination, &quarantine).is_empty());
    }

    #[test]
    fn a_record_left_behind_and_not_recovered_is_a_breach() {
        let source = vec![vec![data(0, "a"), data(1, "b"), data(2, "c")]];
        let destination = vec![vec![data(0, "a")]];
        let quarantine = vec![vec![data(0, "b")]];
        let b = recovery_breaches(&source, &destination, &quarantine);
        assert!(
            b.len() == 1 && b[0].contains("1 records") && b[0].contains("c (source offset 2)"),
            "{b:?}"
        );
    }

    #[test]
    fn a_transaction_committed_on_the_source_and_aborted_on_the_destination_is_owed() {
        // The agent mirrored the records, not the COMMIT; the failover aborted the transaction.
        let source = vec![vec![txn(0, 9, "t1"), txn(1, 9, "t2"), marker(2, 9, true)]];
        let destination = vec![vec![txn(0, 9, "t1"), txn(1, 9, "t2"), marker(2, 9, false)]];
        let b = recovery_breaches(&source, &destination, &[vec![]]);
        assert!(
            b.len() == 1 && b[0].contains("2 records") && b[0].contains("t1"),
            "{b:?}"
        );
        let recovered = vec![vec![data(0, "t1"), data(1, "t2")]];
        assert!(recovery_breaches(&source, &destination, &recovered).is_empty());
    }

    #[test]
    fn aborted_and_open_transactions_are_not_owed() {
        let source = vec![vec![
            txn(0, 9, "x"),
            marker(1, 9, false),
            txn(2, 8, "open"),
            data(3, "d"),
        ]];
        let destination = vec![vec![]];
        let b = recovery_breaches(&source, &destination, &[vec![data(0, "x"), data(1, "d")]]);
        assert!(
            b.len() == 1 && b[0].contains("not owed") && b[0].contains("x"),
            "{b:?}"
        );
        assert!(recovery_breaches(&source, &destination, &[vec![data(0, "d")]]).is_empty());
    }

    #[test]
    fn a_record_recovered_twice_or_out_of_order_is_a_breach() {
        let source = vec![vec![data(0, "a"), data(1, "b")]];
        let twice = recovery_breaches(
            &source,
            &[vec![]],
            &[vec![data(0, "a"), data(1, "a"), data(2, "b")]],
        );
        assert!(twice.iter().any(|b| b.contains("twice")), "{twice:?}");
        let swapped = recovery_breaches(&source, &[vec![]], &[vec![data(0, "b"), data(1, "a")]]);
        assert!(
            swapped
                .iter()
                .any(|b| b.contains("out of the source's order")),
            "{swapped:?}"
        );
    }

    #[test]
    fn equal_logs_have_no_difference() {
        let log = vec![vec![data(0, "a"), Entry::DataBarrier { offset: 1 }], vec![]];
        assert!(differences(&log, &log).is_empty());
    }

    #[test]
    fn a_record_the_old_source_lacks_is_named_with_its_partition() {
        let dest = vec![vec![data(0, "a")], vec![data(0, "b"), data(1, "c")]];
        let src = vec![vec![data(0, "a")], vec![data(0, "b")]];
        let d = differences(&src, &dest);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].contains("partition 1") && d[0].contains("holds 1 entries, the destination 2")
        );
    }

    #[test]
    fn another_record_at_an_offset_is_named_with_both() {
        let dest = vec![vec![data(0, "a"), data(1, "b")]];
        let src = vec![vec![data(0, "a"), data(1, "x")]];
        let d = differences(&src, &dest);
        assert!(
            d[0].contains("entry 1 differs") && d[0].contains("\"x\""),
            "{d:?}"
        );
    }

    fn op(client: &str, n: u64, origin: Origin, outcome: Outcome) -> Op {
        Op {
            client: client.into(),
            origin,
            key: format!("{client}-{n}"),
            n,
            sent_ms: 0,
            answered_ms: Some(1),
            outcome,
        }
    }

    fn local(offset: i64, pid: i64, epoch: i16, key: &str) -> Entry {
        Entry::Data {
            offset,
            producer_id: pid,
            producer_epoch: epoch,
            key: key.into(),
            transactional: false,
        }
    }

    fn acked(client: &str, n: u64, offset: i64) -> Op {
        op(
            client,
            n,
            Origin::Local,
            Outcome::Acked {
                partition: 0,
                offset,
            },
        )
    }

    /// The destination's log (a mirrored record, its barrier, a local one) and the old source
    /// holding it, its own barrier at 3, then `after`.
    type Logs = Vec<Vec<Entry>>;

    fn back(after: Vec<Entry>) -> (Logs, Logs, Vec<Option<Barrier>>) {
        let dest = vec![
            data(0, "s-0"),
            Entry::DataBarrier { offset: 1 },
            local(2, 40, 0, "l-0"),
        ];
        let mut src = dest.clone();
        src.push(Entry::Control {
            offset: 3,
            producer_id: 99,
            commit: false,
        });
        src.extend(after);
        let barrier = Barrier {
            offset: 3,
            producer_id: Some(99),
        };
        (vec![dest], vec![src], vec![Some(barrier)])
    }

    #[test]
    fn local_writes_after_the_barrier_back_each_once_in_order_break_nothing() {
        let (d, s, b) = back(vec![local(4, 50, 0, "bj-0"), local(5, 50, 0, "bj-1")]);
        let ops = [acked("bj", 0, 4), acked("bj", 1, 5)];
        assert!(back_over_breaches(&d, &s, &b, &ops).is_empty());
    }

    #[test]
    fn a_missing_barrier_or_another_prefix_is_a_breach() {
        let (d, mut s, b) = back(vec![]);
        s[0].retain(|e| !matches!(e, Entry::Control { .. }));
        let out = back_over_breaches(&d, &s, &b, &[]);
        assert!(out.iter().any(|x| x.contains("no barrier")), "{out:?}");
        let (d, mut s, b) = back(vec![]);
        s[0].remove(2);
        let out = back_over_breaches(&d, &s, &b, &[]);
        assert!(
            out.iter().any(|x| x.contains("is not the destination's")),
            "{out:?}"
        );
    }

    #[test]
    fn a_local_write_where_the_barrier_should_be_is_found_and_the_barrier_named_missing() {
        let (d, mut s, b) = back(vec![]);
        s[0].pop();
        s[0].push(local(3, 50, 0, "bj-0"));
        let out = back_over_breaches(&d, &s, &b, &[acked("bj", 0, 3)]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].contains("no barrier"), "{out:?}");
    }

    #[test]
    fn an_acknowledged_write_lost_doubled_or_elsewhere_is_a_breach() {
        let (d, s, b) = back(vec![local(4, 50, 0, "bj-0"), local(5, 50, 0, "bj-0")]);
        let out = back_over_breaches(&d, &s, &b, &[acked("bj", 0, 4), acked("bj", 1, 6)]);
        assert!(
            out.iter().any(|x| x.contains("bj-1 acknowledged, not in")),
            "{out:?}"
        );
        assert!(
            out.iter()
                .any(|x| x.contains("bj-0 is in the old source's log 2 times")),
            "{out:?}"
        );
    }

    #[test]
    fn a_late_mirror_write_or_a_stranger_after_the_barrier_is_a_breach() {
        let (d, s, b) = back(vec![local(4, -1, -1, "late-0"), local(5, -1, -1, "who")]);
        let late = op(
            "late",
            0,
            Origin::Late,
            Outcome::Failed { reason: "x".into() },
        );
        let out = back_over_breaches(&d, &s, &b, &[late]);
        assert!(
            out.iter().any(|x| x.contains("mirror write late-0")),
            "{out:?}"
        );
        assert!(
            out.iter()
                .any(|x| x.contains("who at 5 after the barrier is no local write")),
            "{out:?}"
        );
    }

    #[test]
    fn a_local_write_under_a_mirrored_producer_id_and_epoch_is_a_breach() {
        let (d, s, b) = back(vec![local(4, 40, 0, "bj-0")]);
        let out = back_over_breaches(&d, &s, &b, &[acked("bj", 0, 4)]);
        assert!(
            out.iter()
                .any(|x| x
                    .contains("producer id 40 epoch 0, which mirrored traffic used up to epoch 0")),
            "{out:?}"
        );
        let (d, s, b) = back(vec![local(4, 40, 1, "bj-0")]);
        assert!(back_over_breaches(&d, &s, &b, &[acked("bj", 0, 4)]).is_empty());
    }

    #[test]
    fn a_producers_records_out_of_its_order_are_a_breach() {
        let (d, s, b) = back(vec![local(4, 50, 0, "bj-1"), local(5, 50, 0, "bj-0")]);
        let out = back_over_breaches(&d, &s, &b, &[acked("bj", 0, 5), acked("bj", 1, 4)]);
        assert!(
            out.iter().any(|x| x.contains("comes after record 1 of bj")),
            "{out:?}"
        );
    }
}
