//! The chaos run's failback, when the seed draws one (the agent's profile): once the failover is
//! complete, the old source is read for the checker as the failover left it, then made ready to
//! take the destination's records back (after an unplanned failover: its un-mirrored tail
//! recovered into the destination's quarantine topic, then its topic realigned, each through
//! the admin API of an instance that answers), and the failback gateway, alone in front of it,
//! mirrors the destination back with its built-in agent while the local producers go on writing
//! through the instances, under the phase's faults. Its rule, once everything is quiet: the old
//! source's log is the destination's entry for entry (offsets, producer ids and epochs, keys,
//! markers, the barrier), and every partition of the failback mirror is MIRRORING.
//!
//! Owns: the failback's steps and its rule. Must not touch: the failover's rules (`check.rs`),
//! the schedule's drawing (`plan.rs`), the clients.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::check::committed::view;
use super::check::{Entry, Tool};
use super::gateways::{self, post_through, Instance, Topology, MIRROR};
use super::logs;
use super::plan::{Failback, Mode, FAILBACK, INSTANCES};
use super::world::World;
use super::{PARTITIONS, SESSION_MS, TOPIC};

/// How long one admin call of the failback may take (a recovery copies), and the calls through
/// every instance together.
const CALL: Duration = Duration::from_secs(30);
const LIMIT: Duration = Duration::from_secs(120);

/// What the failback's start leaves for the checkers.
pub struct Started {
    /// The old source's log as the failover left it (before any realignment or copy back).
    pub source_before: Vec<Vec<Entry>>,
    /// Records of the un-mirrored tail recovered into the quarantine topic (unplanned only).
    recovered: Option<i64>,
}

/// The failback's figures and verdict.
pub struct Outcome {
    pub ok: bool,
    pub violations: Vec<String>,
    pub json: Value,
}

/// Brings the old source back into line and starts the failback gateway; then the phase's
/// faults, until `plan.ms` after the gateway is ready.
pub async fn start(
    world: &World,
    dir: &Path,
    plan: &Failback,
    mode: Mode,
    (source, destination): (&str, &[String]),
    (failover_id, driver): (&str, usize),
) -> Result<Started, String> {
    if mode == Mode::Unplanned {
        world.rig(&["start-node", "source", "1"]).await?;
    }
    // The failover completes (its report names what the source kept) before the old source is
    // read: nothing writes to it any more.
    let mut complete = false;
    for i in (0..INSTANCES).map(|k| (driver + k) % INSTANCES) {
        let limit = Duration::from_secs(if complete { 1 } else { 120 });
        if gateways::wait_state(i, "STOPPED", PARTITIONS as i64, limit)
            .await
            .is_ok()
        {
            complete = true;
            break;
        }
    }
    if !complete {
        return Err("failback: no instance has the mirror STOPPED within 120 s".into());
    }
    let source_before = logs::read_settled(source).await?;
    let mut recovered = None;
    if mode == Mode::Unplanned {
        let path = format!("/v1/mirrors/{MIRROR}/failovers/{failover_id}/unmirrored");
        let r = post_through(driver, &format!("{path}/recover"), CALL, LIMIT).await?;
        if r["verified"] != true {
            return Err(format!("failback: the recovery is not verified: {r}"));
        }
        recovered = r["recovered_records"].as_i64();
        post_through(driver, &format!("{path}/realign?dry_run=true"), CALL, LIMIT).await?;
        post_through(driver, &format!("{path}/realign"), CALL, LIMIT).await?;
        eprintln!(
            "chaos: failback: the old source's tail recovered ({} records) and its topic realigned",
            recovered.unwrap_or(0)
        );
    }
    let topology = Topology {
        source: source.to_string(),
        destination: destination.to_vec(),
        topic: TOPIC.to_string(),
        session_ms: SESSION_MS,
        tool: Tool::Agent,
    };
    let mut back = Instance::configure(&world.bin, FAILBACK, dir, &topology, Vec::new())?;
    back.start(&world.bin)?;
    world.with(|v| v.push(back));
    gateways::wait_ready(FAILBACK, Duration::from_secs(60)).await?;
    eprintln!(
        "chaos: failback: the gateway in front of the old source mirrors the destination back"
    );
    let t = Instant::now();
    world.faults(t, &plan.faults).await?;
    tokio::time::sleep_until((t + Duration::from_millis(plan.ms)).into()).await;
    Ok(Started {
        source_before,
        recovered,
    })
}

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

/// Waits (two minutes at most) until the old source's log is the destination's, then reads the
/// failback mirror's states.
pub async fn check(
    started: &Started,
    source: &str,
    (destination_addr, destination): (&str, &[Vec<Entry>]),
) -> Outcome {
    let begun = Instant::now();
    let mut diff = vec!["failback: the old source could not be read".to_string()];
    while begun.elapsed() < Duration::from_secs(120) {
        if let Ok(now) = logs::read_topic(source, TOPIC, PARTITIONS).await {
            diff = differences(&now, destination);
            if diff.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let equal_s = diff.is_empty().then(|| begun.elapsed().as_secs_f64());
    let states = gateways::states(FAILBACK).await.unwrap_or(Value::Null);
    let mirroring = states["MIRRORING"].as_i64() == Some(PARTITIONS as i64);
    let mut violations = diff.clone();
    // After an unplanned failover: what the recovery put into the quarantine topic.
    let mut quarantined = None;
    if started.recovered.is_some() {
        let topic = format!("{TOPIC}.unmirrored");
        match logs::read_topic(destination_addr, &topic, PARTITIONS).await {
            Ok(q) => {
                quarantined = Some(logs::data_counts(&q).iter().sum::<usize>());
                violations.extend(recovery_breaches(&started.source_before, destination, &q));
            }
            Err(e) => violations.push(format!("recovery: {topic} could not be read: {e}")),
        }
    }
    if !mirroring {
        violations.push(format!(
            "failback: the mirror back is not MIRRORING on every partition: {states}"
        ));
    }
    let entries: usize = destination.iter().map(Vec::len).sum();
    eprintln!(
        "chaos: failback: {entries} entries of the destination; the old source equal to it: {}; the failback mirror's states {states}",
        match equal_s {
            Some(t) => format!("yes, after the check waited {t:.1} s"),
            None => "no".into(),
        }
    );
    for w in &violations {
        eprintln!("chaos:   {w}");
    }
    Outcome {
        ok: violations.is_empty(),
        json: json!({
            "recovered_records": started.recovered,
            "quarantined": quarantined,
            "entries": entries,
            "equal_after_s": equal_s.map(|t| (t * 10.0).round() / 10.0),
            "divergent_partitions": diff.len(),
            "states": states,
        }),
        violations,
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
}
