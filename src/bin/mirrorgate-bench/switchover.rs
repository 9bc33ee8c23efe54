//! `mirrorgate-bench switchover`: producers write a mirrored topic through the mirror's forward
//! listener while a planned switchover moves them from the source to the destination. Figures:
//! the produce latency of the records sent while the switch held the listener (`pause_ms_*`,
//! against the steady latency before), errors the applications saw, records acknowledged but
//! absent from the destination (`lost`), records twice on it (`duplicated`), records of one
//! producer out of its order in a partition, and `seconds` from the call to the listener
//! released on the destination (docs/benchmarks.md).
//!
//! The load: the Java producer (`ChaosProducer.java`) at half of its own saturation rate
//! measured directly against the source on the same topic first, plus a librdkafka and a
//! kafka-python producer at a modest fixed rate (they show the other libraries see no error,
//! not the throughput). A Java consumer group (`FollowGroup.java`, auto-commit every second)
//! reads the topic through the same forward listener all along: `skipped` counts the records
//! acknowledged to the producers that it never read, `reread` the reads of a record beyond
//! its first. The clusters are the shared rig's `source` and `destination`; the
//! gateway runs in this process.
//!
//! Owns: the run's phases and its figures. Must not touch: other benchmarks' ports, the
//! clusters beyond `Clusters::ensure` and its own topic.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use hyper::Method;
use mirrorgate::app::Gateway;
use serde_json::{json, Value};

use crate::chaos::check::{Op, Origin, Outcome};
use crate::chaos::clients::{self, Library, Producer, Spec};
use crate::consumer_failover::{destination_log, now_ms};
use crate::fleet::admin;
use crate::group_member::{Member, MemberArgs};
use crate::{cluster_brokers, Clusters};

/// The gateway's client listener (node n on BASE + n - 1); mirror listener +10, admin +20,
/// forward listener +30.
const BASE: u16 = 17792;
const MIRROR: &str = "sw";
/// The rate of the librdkafka and kafka-python producers (records a second each).
const SIDE_RATE: u32 = 200;
/// The consumer group's auto-commit interval.
const COMMIT_MS: u64 = 1000;
/// How long the group may take, once the producers stopped, to read what they were
/// acknowledged.
const READ_ALL: Duration = Duration::from_secs(120);

/// How long the producers may take to have a first record acknowledged (a JVM took 10 s to
/// start in one CI run on a loaded machine).
const STARTED: Duration = Duration::from_secs(120);

/// The size of a run.
struct Shape {
    partitions: i32,
    /// Load before and after the switchover.
    steady: Duration,
    /// How long the saturation probe runs.
    probe: Duration,
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn run(quick: bool, group: bool, java_rate: Option<u32>) -> Result<Value, String> {
    let shape = if quick {
        Shape {
            partitions: 100,
            steady: Duration::from_secs(10),
            probe: Duration::from_secs(6),
        }
    } else {
        Shape {
            partitions: 1000,
            steady: Duration::from_secs(30),
            probe: Duration::from_secs(10),
        }
    };
    let stamp = now_ms();
    let work = std::env::temp_dir().join(format!("mirrorgate-bench-sw-{stamp}"));
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let result = run_in(&shape, &work, stamp, group, java_rate);
    // The clients' event logs stay when the run failed or missed a target of 0.
    let missed = result.as_ref().map_or(true, missed_target);
    if missed {
        eprintln!("switchover: logs kept in {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    result.map(|mut v| {
        v["quick"] = json!(quick);
        v
    })
}

/// Whether a run's figures miss a target of 0.
fn missed_target(v: &Value) -> bool {
    [
        "errors_to_application",
        "lost",
        "duplicated",
        "order_violations",
        "skipped",
    ]
    .iter()
    .any(|k| v[*k].as_u64().unwrap_or(0) > 0)
}

/// Runs `spec`'s producer for `d`; the history of what it sent.
fn produce_for(spec: &Spec, d: Duration, work: &Path) -> Result<Vec<Op>, String> {
    let history = clients::Shared::default();
    let p = Producer::start(spec, &history, work)?;
    std::thread::sleep(d);
    p.stop(Duration::from_secs(30));
    Ok(clients::with(&history, |h| h.ops().to_vec()))
}

fn run_in(
    shape: &Shape,
    work: &Path,
    stamp: i64,
    group: bool,
    java_rate: Option<u32>,
) -> Result<Value, String> {
    let (_clusters, addrs) = Clusters::ensure(&["source", "destination"])?;
    let source = cluster_brokers(&addrs, "source")?.remove(0);
    let destination = cluster_brokers(&addrs, "destination")?;
    let topic = format!("bench-sw-{stamp}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(crate::topics::create(
        &source,
        &[(topic.clone(), shape.partitions)],
    ))?;
    // The Java producer's own saturation, directly against the source (its records are
    // mirrored with the rest; the figures count only the run's own producers), unless a rate
    // is given.
    let (saturation, rate) = match java_rate {
        Some(rate) => {
            eprintln!("switchover: the Java producer runs at {rate}/s (given)");
            (None, rate.max(1))
        }
        None => {
            let probe = produce_for(
                &Spec {
                    library: Library::Java,
                    name: "probe",
                    origin: Origin::Source,
                    bootstrap: &source,
                    topic: &topic,
                    per_second: 1_000_000,
                },
                shape.probe,
                work,
            )?;
            let saturation = acked_rate(&probe);
            let rate = ((saturation / 2.0) as u32).max(100);
            eprintln!("switchover: the Java producer saturates at {saturation:.0} records/s directly; it runs at {rate}/s");
            (Some(saturation.round()), rate)
        }
    };

    let forward_port = BASE + 30;
    let cfg = crate::bench_config(
        &destination,
        BASE,
        &work.join("state"),
        &format!(
            "mirrors:\n  - name: {MIRROR}\n    topics: [\"{topic}\"]\n    source: {{ bootstrap: [\"{source}\"] }}\n    forward: {{ listener: {{ port_base: {forward_port}, max_brokers: 8 }}, hold_ms: 5000 }}\n"
        ),
    )?;
    let admin_addr = format!("127.0.0.1:{}", BASE + 20);
    let gw = rt
        .block_on(Gateway::start(cfg))
        .map_err(|e| e.to_string())?;
    let result = measure(
        &rt,
        &admin_addr,
        &format!("127.0.0.1:{forward_port}"),
        (&source, &destination[0]),
        &topic,
        shape,
        rate,
        (work, group),
    );
    rt.block_on(gw.shutdown());
    // A run that missed a target keeps its topic on both clusters, to be read.
    if result.as_ref().is_ok_and(missed_target) {
        eprintln!("switchover: topic {topic} kept on both clusters");
    } else {
        for cluster in [&source, &destination[0]] {
            rt.block_on(crate::topics::delete(cluster, std::slice::from_ref(&topic)));
        }
    }
    result.map(|mut v| {
        v["java_saturation_records_per_s"] = json!(saturation);
        v
    })
}

/// Waits (`limit` at most) until each producer of `names` has had a record acknowledged, so
/// that the steady time, and the switchover after it, begin with every producer writing. A
/// producer whose process starts late would otherwise begin with the switchover (its first
/// requests held, then sent to the destination): a producer starting at a switch, not the
/// pause of one that was writing, which is what the run measures.
fn all_writing(history: &clients::Shared, names: &[&str], limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        let silent: Vec<&str> = clients::with(history, |h| {
            let acked: std::collections::HashSet<&str> = h
                .ops()
                .iter()
                .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
                .map(|o| o.client.as_str())
                .collect();
            names
                .iter()
                .copied()
                .filter(|n| !acked.contains(n))
                .collect()
        });
        if silent.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no record of producer(s) {} was acknowledged within {limit:?} of their start",
                silent.join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Records acknowledged a second, from the first send to the last acknowledgement.
fn acked_rate(ops: &[Op]) -> f64 {
    let acked: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
        .collect();
    let first = ops.iter().map(|o| o.sent_ms).min().unwrap_or(0);
    let last = acked
        .iter()
        .filter_map(|o| o.answered_ms)
        .max()
        .unwrap_or(0);
    acked.len() as f64 * 1000.0 / (last - first).max(1) as f64
}

/// Waits until the dry run of the switchover shows every partition mirrored with no lag.
async fn wait_caught_up(admin_addr: &str, partitions: i32) -> Result<(), String> {
    let path = format!("/v1/mirrors/{MIRROR}/switchover?dry_run=true");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (status, v) = admin(admin_addr, Method::POST, &path).await?;
        let lags = v["partitions"].as_array().cloned().unwrap_or_default();
        if status == 200
            && lags.len() == partitions as usize
            && lags.iter().all(|p| p["lag_records"].as_i64() == Some(0))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the agent did not catch up within 300 s: {v}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The side the forward listener is on.
async fn side(admin_addr: &str) -> Result<String, String> {
    let (_, v) = admin(
        admin_addr,
        Method::GET,
        &format!("/v1/mirrors/{MIRROR}/forward"),
    )
    .await?;
    Ok(v["side"].as_str().unwrap_or_default().to_string())
}

#[allow(clippy::too_many_arguments)]
fn measure(
    rt: &tokio::runtime::Runtime,
    admin_addr: &str,
    forward: &str,
    (source, destination): (&str, &str),
    topic: &str,
    shape: &Shape,
    rate: u32,
    (work, with_group): (&Path, bool),
) -> Result<Value, String> {
    rt.block_on(wait_caught_up(admin_addr, shape.partitions))?;
    let mut member = match with_group {
        true => Some(Member::start(
            &MemberArgs {
                mode: "follow",
                bootstrap: forward,
                topic,
                group: &format!("bench-sw-group-{}", now_ms()),
                commit_ms: COMMIT_MS,
                timeout: Duration::from_secs(3600),
            },
            &work.join("group.log"),
        )?),
        false => None,
    };
    let history = clients::Shared::default();
    let specs = [
        (Library::Java, "java", rate),
        (Library::Librdkafka, "librdkafka", SIDE_RATE),
        (Library::KafkaPython, "kafka-python", SIDE_RATE),
    ];
    let mut producers = Vec::new();
    for (library, name, per_second) in specs {
        let spec = Spec {
            library,
            name,
            origin: Origin::Source,
            bootstrap: forward,
            topic,
            per_second,
        };
        producers.push(Producer::start(&spec, &history, work)?);
    }
    let names: Vec<&str> = specs.iter().map(|(_, name, _)| *name).collect();
    if let Err(e) = all_writing(&history, &names, STARTED) {
        rt.block_on(clients::stop_producers(producers));
        return Err(e);
    }
    std::thread::sleep(shape.steady);
    let called_ms = now_ms();
    let called = Instant::now();
    let (status, body) = rt.block_on(admin(
        admin_addr,
        Method::POST,
        &format!("/v1/mirrors/{MIRROR}/switchover"),
    ))?;
    if status != 202 {
        rt.block_on(clients::stop_producers(producers));
        return Err(format!("switchover answered {status}: {body}"));
    }
    loop {
        if rt.block_on(side(admin_addr))? == "destination" {
            break;
        }
        if called.elapsed() > Duration::from_secs(120) {
            rt.block_on(clients::stop_producers(producers));
            return Err("the forward listener was not on the destination within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = called.elapsed().as_secs_f64();
    let released_ms = now_ms();
    std::thread::sleep(shape.steady);
    rt.block_on(clients::stop_producers(producers));
    let ops = clients::with(&history, |h| h.ops().to_vec());
    let acked: std::collections::HashSet<&str> = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
        .map(|o| o.key.as_str())
        .collect();
    // Whether the group got everything or not, the figures say what it read.
    if let Some(m) = member.as_mut() {
        let everything = |o: &crate::group_member::Output| {
            let read: std::collections::HashSet<&str> =
                o.reads.iter().map(|r| r.key.as_str()).collect();
            acked.iter().all(|k| read.contains(k))
        };
        if let Err(e) = m.wait(
            "the group reading every acknowledged record",
            READ_ALL,
            everything,
        ) {
            eprintln!("switchover: {e}");
        }
    }
    let reads: Option<Vec<String>> =
        member.map(|m| m.into_output().reads.into_iter().map(|r| r.key).collect());
    let (_, fwd) = rt.block_on(admin(
        admin_addr,
        Method::GET,
        &format!("/v1/mirrors/{MIRROR}/forward"),
    ))?;
    let log = rt.block_on(destination_log(destination, topic, shape.partitions))?;
    let mut out = figures(&ops, &log, called_ms, released_ms);
    // Where the time after the release goes: the partitions whose destination leader has
    // another node id than their source leader are answered NOT_LEADER_OR_FOLLOWER first by the
    // broker a client's connection reaches after the switch.
    let moved = rt.block_on(leader_moved(source, destination, topic))?;
    out["after_release_ms"] = after_release(&ops, &moved, called_ms, released_ms);
    if let Some(reads) = &reads {
        let (skipped, reread) = group_figures(&ops, reads);
        out["skipped"] = json!(skipped);
        out["reread"] = json!(reread);
        out["group_reads"] = json!(reads.len());
    }
    out["bench"] = json!("switchover");
    out["partitions"] = json!(shape.partitions);
    out["java_rate_per_s"] = json!(rate);
    out["side_rate_per_s"] = json!(SIDE_RATE);
    out["seconds"] = json!((seconds * 1000.0).round() / 1000.0);
    out["route_last_pause_ms"] = fwd["last_pause_ms"].clone();
    Ok(out)
}

/// What the consumer group's reads (keys, in read order) say of the producers' records:
/// (acknowledged records it never read, reads of a record beyond its first). The records of
/// the saturation probe are not counted.
fn group_figures(ops: &[Op], reads: &[String]) -> (usize, usize) {
    let mut times: HashMap<&str, usize> = HashMap::new();
    for k in reads.iter().filter(|k| !k.starts_with("probe-")) {
        *times.entry(k.as_str()).or_default() += 1;
    }
    let skipped = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
        .filter(|o| !times.contains_key(o.key.as_str()))
        .count();
    let reread = times.values().map(|n| n - 1).sum();
    (skipped, reread)
}

/// The nearest-rank percentile `q` of sorted `v`.
fn percentile(v: &[i64], q: f64) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i])
}

/// Per partition of `topic`: whether its destination leader has another node id than its
/// source leader.
async fn leader_moved(source: &str, destination: &str, topic: &str) -> Result<Vec<bool>, String> {
    let names = [topic.to_string()];
    let of = |v: Vec<(String, Vec<i32>)>| v.into_iter().next().map(|(_, l)| l).unwrap_or_default();
    let s = of(crate::failover_fixture::leaders(&[source.to_string()], &names).await?);
    let d = of(crate::failover_fixture::leaders(&[destination.to_string()], &names).await?);
    Ok(d.iter().zip(&s).map(|(d, s)| d != s).collect())
}

/// The latency from the release to the acknowledgement of the records sent while the listener
/// was held, apart for the partitions whose leader kept its node id across the switch and those
/// whose leader moved (`moved`, by partition): for all producers, and per producer.
fn after_release(ops: &[Op], moved: &[bool], called_ms: i64, released_ms: i64) -> Value {
    type Split = (Vec<i64>, Vec<i64>);
    let mut all: Split = Default::default();
    let mut per: BTreeMap<&str, Split> = BTreeMap::new();
    for op in ops
        .iter()
        .filter(|o| o.sent_ms >= called_ms && o.sent_ms <= released_ms)
    {
        if let (Outcome::Acked { partition, .. }, Some(at)) = (&op.outcome, op.answered_ms) {
            let other = moved.get(*partition as usize) == Some(&true);
            for (kept, away) in [&mut all, per.entry(op.client.as_str()).or_default()] {
                match other {
                    true => away.push(at - released_ms),
                    false => kept.push(at - released_ms),
                }
            }
        }
    }
    let part = |v: &mut Vec<i64>| {
        v.sort_unstable();
        json!({"records": v.len(), "p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "max": v.last()})
    };
    let split =
        |(kept, away): &mut Split| json!({"leader_kept": part(kept), "leader_moved": part(away)});
    let mut out = split(&mut all);
    out["per_producer"] = per
        .iter_mut()
        .map(|(c, s)| (c.to_string(), split(s)))
        .collect();
    out
}

/// The run's figures from the producers' history and the destination's log.
fn figures(ops: &[Op], log: &[(i32, i64, String)], called_ms: i64, released_ms: i64) -> Value {
    let ours = |k: &str| !k.starts_with("probe-");
    let mut copies: HashMap<&str, Vec<(i32, i64)>> = HashMap::new();
    for (p, o, k) in log.iter().filter(|(_, _, k)| ours(k)) {
        copies.entry(k.as_str()).or_default().push((*p, *o));
    }
    let duplicated = copies.values().filter(|c| c.len() > 1).count();
    let mut errors = 0;
    let mut unknown = 0;
    let mut lost = 0;
    let mut acked = 0;
    let (mut held, mut steady) = (Vec::new(), Vec::new());
    let mut held_per: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    // Per producer, the errors its application got, by reason.
    let mut failed_per: BTreeMap<&str, BTreeMap<String, usize>> = BTreeMap::new();
    // Per producer and partition: the destination offsets of its records in send order.
    let mut order: BTreeMap<(&str, i32), Vec<(u64, i64)>> = BTreeMap::new();
    for op in ops {
        match &op.outcome {
            Outcome::Acked { .. } => {
                acked += 1;
                match copies.get(op.key.as_str()) {
                    Some(c) => order
                        .entry((op.client.as_str(), c[0].0))
                        .or_default()
                        .push((op.n, c[0].1)),
                    None => lost += 1,
                }
                let latency = op.answered_ms.unwrap_or(op.sent_ms) - op.sent_ms;
                if op.sent_ms >= called_ms && op.sent_ms <= released_ms {
                    held.push(latency);
                    held_per
                        .entry(op.client.as_str())
                        .or_default()
                        .push(latency);
                } else if op.sent_ms < called_ms {
                    steady.push(latency);
                }
            }
            Outcome::Failed { reason } => {
                errors += 1;
                *failed_per
                    .entry(op.client.as_str())
                    .or_default()
                    .entry(reason.chars().take(120).collect())
                    .or_default() += 1;
            }
            Outcome::Unknown => unknown += 1,
        }
    }
    // Which producer's records are twice in the log, and where (the first few).
    let mut doubled_per: BTreeMap<&str, usize> = BTreeMap::new();
    let mut doubled_examples = Vec::new();
    for op in ops {
        if let Some(c) = copies.get(op.key.as_str()).filter(|c| c.len() > 1) {
            *doubled_per.entry(op.client.as_str()).or_default() += 1;
            if doubled_examples.len() < 5 {
                doubled_examples.push(json!({"key": op.key, "at": c, "sent_ms": op.sent_ms}));
            }
        }
    }
    let out_of_order: usize = order
        .values_mut()
        .map(|v| {
            v.sort();
            v.windows(2).filter(|w| w[0].1 > w[1].1).count()
        })
        .sum();
    held.sort_unstable();
    steady.sort_unstable();
    let pause_per: BTreeMap<&str, Value> = held_per
        .iter_mut()
        .map(|(c, v)| {
            v.sort_unstable();
            (
                *c,
                json!({"p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "max": v.last()}),
            )
        })
        .collect();
    let per_client: BTreeMap<&str, usize> = ops.iter().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o.client.as_str()).or_default() += 1;
        m
    });
    json!({
        "sent": ops.len(),
        "sent_per_producer": per_client,
        "acked": acked,
        "errors_to_application": errors,
        "unknown": unknown,
        "lost": lost,
        "duplicated": duplicated,
        "duplicated_per_producer": doubled_per,
        "duplicated_examples": doubled_examples,
        "errors_per_producer": failed_per,
        "order_violations": out_of_order,
        "sent_while_held": held.len(),
        "pause_ms_p50": percentile(&held, 0.50),
        "pause_ms_p99": percentile(&held, 0.99),
        "pause_ms_max": held.last(),
        "pause_ms_per_producer": pause_per,
        "steady_ms_p50": percentile(&steady, 0.50),
        "steady_ms_p99": percentile(&steady, 0.99),
        "held_ms": round1((released_ms - called_ms) as f64),
        "called_at_ms": called_ms,
        "released_at_ms": released_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: &str, n: u64, sent: i64, outcome: Outcome) -> Op {
        Op {
            client: client.into(),
            origin: Origin::Source,
            key: format!("{client}-{n}"),
            n,
            sent_ms: sent,
            answered_ms: Some(sent + 5),
            outcome,
        }
    }

    fn acked() -> Outcome {
        Outcome::Acked {
            partition: 0,
            offset: 0,
        }
    }

    #[test]
    fn a_record_acknowledged_but_absent_is_lost_and_one_twice_is_duplicated() {
        let ops = vec![op("j", 0, 10, acked()), op("j", 1, 20, acked())];
        let log = vec![(0, 0, "j-0".to_string()), (0, 1, "j-0".to_string())];
        let f = figures(&ops, &log, 100, 200);
        assert_eq!(f["lost"], 1);
        assert_eq!(f["duplicated"], 1);
    }

    #[test]
    fn records_of_one_producer_out_of_its_order_in_a_partition_are_counted() {
        let ops = vec![op("j", 0, 10, acked()), op("j", 1, 20, acked())];
        let log = vec![(0, 5, "j-1".to_string()), (0, 6, "j-0".to_string())];
        assert_eq!(figures(&ops, &log, 100, 200)["order_violations"], 1);
    }

    #[test]
    fn the_pause_is_the_latency_of_records_sent_while_the_listener_was_held() {
        let mut ops = vec![op("j", 0, 10, acked()), op("j", 1, 150, acked())];
        ops[1].answered_ms = Some(400);
        let log = vec![(0, 0, "j-0".to_string()), (0, 1, "j-1".to_string())];
        let f = figures(&ops, &log, 100, 200);
        assert_eq!(f["pause_ms_max"], 250);
        assert_eq!(f["steady_ms_p50"], 5);
        assert_eq!(f["sent_while_held"], 1);
    }

    #[test]
    fn the_group_skips_an_acknowledged_record_it_never_read_and_rereads_one_read_twice() {
        let ops = vec![
            op("j", 0, 10, acked()),
            op("j", 1, 20, acked()),
            op("j", 2, 30, Outcome::Unknown),
        ];
        let reads: Vec<String> = ["probe-1", "j-0", "j-0", "probe-1"]
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(group_figures(&ops, &reads), (1, 1));
    }

    #[test]
    fn the_time_after_the_release_is_split_by_whether_the_partition_leader_moved() {
        let at = |p: i32, sent: i64| Op {
            outcome: Outcome::Acked {
                partition: p,
                offset: 0,
            },
            ..op("java", sent as u64, sent, acked())
        };
        // Called at 100, released at 200; answered 5 ms after sending.
        let ops = [at(0, 150), at(1, 190), at(1, 50), at(0, 250)];
        let v = after_release(&ops, &[false, true], 100, 200);
        assert_eq!(v["leader_kept"]["records"], 1);
        assert_eq!(v["leader_kept"]["p99"], -45);
        assert_eq!(v["leader_moved"]["records"], 1);
        assert_eq!(v["leader_moved"]["max"], -5);
        assert_eq!(v["per_producer"]["java"]["leader_moved"]["records"], 1);
    }

    #[test]
    fn the_run_waits_until_every_producer_had_a_record_acknowledged() {
        let history = clients::Shared::default();
        clients::with(&history, |h| {
            h.sent("java", Origin::Source, "java-0", 1);
            h.answered("java-0", acked(), 2);
            h.sent("librdkafka", Origin::Source, "librdkafka-0", 1);
        });
        let names = ["java", "librdkafka"];
        let e = all_writing(&history, &names, Duration::from_millis(150)).unwrap_err();
        assert!(e.contains("producer(s) librdkafka was"), "{e}");
        clients::with(&history, |h| h.answered("librdkafka-0", acked(), 3));
        assert_eq!(all_writing(&history, &names, Duration::ZERO), Ok(()));
    }

    #[test]
    fn errors_and_unanswered_records_are_counted_apart() {
        let ops = vec![
            op("j", 0, 10, Outcome::Failed { reason: "x".into() }),
            op("j", 1, 20, Outcome::Unknown),
        ];
        let f = figures(&ops, &[], 100, 200);
        assert_eq!(
            (f["errors_to_application"].clone(), f["unknown"].clone()),
            (json!(1), json!(1))
        );
    }
}
