//! `mirrorgate-bench mirror --transactional`: the built-in agent and MirrorMaker 2 in exactly-once
//! mode mirror the same kind of transactional data (a Java transactional producer, committed and
//! aborted transactions interleaved over 3 partitions, 1 KiB records), each through the gateway,
//! in one run. Each is timed from the first committed record visible on the destination to the
//! whole `read_committed` view of its source topic being there; then each destination topic's
//! `read_committed` view is compared with its source's, partition by partition, record by record
//! (key and value, in order).
//!
//! Owns: the transactional load plan, MirrorMaker 2's exactly-once properties, the comparison and
//! the JSON line. Must not touch: the plain `mirror` benchmark's figures (it shares its MM2
//! launcher, topic creation and timing loop from `mirror.rs`).

use std::time::Duration;

use mirrorgate::app::Gateway;
use serde_json::json;

use crate::committed_view::{Summary, TopicView};
use crate::mirror::{create, time_until, Mm2, Progress};
use crate::{cluster_brokers, java, repo, Clusters};

/// Partitions of each benchmark topic.
const PARTITIONS: i32 = 3;
/// Value bytes of each record (the producer pads values to this size).
const RECORD_BYTES: u64 = 1024;
/// One round of the load: per partition, a committed transaction of 50 records then an aborted
/// one of 10.
const ROUND: &str = "c50,a10";
const ROUND_RECORDS: u64 = 60 * PARTITIONS as u64;

/// MirrorMaker 2's exactly-once settings (Kafka 4.1.1): the `dst` worker with exactly-once
/// source support (KIP-618; MM2 takes the target cluster's `dst.`-prefixed properties as worker
/// properties), the source connector requiring it, and its source consumer reading committed
/// data only (without `read_committed` the connector reports exactly-once as unsupported and
/// `required` refuses to start).
pub const MM2_EOS_PROPERTIES: &str = "dst.exactly.once.source.support = enabled\n\
     src->dst.exactly.once.support = required\n\
     src.consumer.isolation.level = read_committed\n";

/// The agent's progress: the destination topic's `read_committed` view, and a check of the
/// mirror's partitions so that a FAILED one ends the wait at once.
struct AgentProgress {
    view: TopicView,
    admin: String,
    polls: u64,
}

impl Progress for AgentProgress {
    async fn arrived(&mut self) -> Result<i64, String> {
        self.polls += 1;
        if self.polls % 10 == 1 {
            if let Some(failed) = failed_partition(&self.admin).await {
                return Err(failed);
            }
        }
        Ok(self.view.advance().await? as i64)
    }
}

impl Progress for TopicView {
    async fn arrived(&mut self) -> Result<i64, String> {
        Ok(self.advance().await? as i64)
    }
}

/// The first FAILED partition of mirror `agent` with its reason, as the admin API reports it.
async fn failed_partition(admin: &str) -> Option<String> {
    let (_, body) = mirrorgate::admin::client::call(
        admin,
        hyper::Method::GET,
        "/v1/mirrors/agent/partitions",
        None,
        None,
    )
    .await
    .ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["partitions"].as_array()?.iter().find_map(|p| {
        (p["state"] == "FAILED").then(|| {
            format!(
                "agent partition {}-{} FAILED: {}",
                p["topic"].as_str().unwrap_or("?"),
                p["partition"],
                p["last_error"].as_str().unwrap_or("no reason given")
            )
        })
    })
}

/// Writes `rounds` rounds of [`ROUND`] to `topic` with one transactional producer; returns the
/// committed records it reports.
fn produce(bootstrap: &str, topic: &str, txid: &str, rounds: usize) -> Result<u64, String> {
    let producer = repo().join("integration/clients/java/TxnProducer.java");
    let out = java(
        &producer.to_string_lossy(),
        &[
            bootstrap.into(),
            topic.into(),
            PARTITIONS.to_string(),
            txid.into(),
            vec![ROUND; rounds].join(","),
            RECORD_BYTES.to_string(),
        ],
        Duration::from_secs(900),
    )?;
    let done: serde_json::Value = out
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| format!("TxnProducer printed no summary: {out}"))?;
    done["committed"]
        .as_u64()
        .ok_or_else(|| format!("TxnProducer summary without a committed count: {done}"))
}

/// Reads `view` until it holds `n` records (bounded).
async fn read_fully(view: &mut TopicView, n: u64, limit: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + limit;
    while view.advance().await? < n {
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "{} of {n} records read within {limit:?}",
                view.records()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The last lines of MirrorMaker 2's log (for an error).
fn log_tail(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(dir.join("mm2.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

pub fn run(quick: bool) -> Result<serde_json::Value, String> {
    let rounds = if quick { 100 } else { 600 };
    let (_clusters, addrs) = Clusters::ensure(&["source", "destination"])?;
    let source = cluster_brokers(&addrs, "source")?
        .first()
        .cloned()
        .ok_or("source has no broker")?;
    let destination = cluster_brokers(&addrs, "destination")?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (t_agent, t_mm2) = (
        format!("bench-mirror-txn-{stamp}-agent"),
        format!("bench-mirror-txn-{stamp}-mm2"),
    );
    create(&source, &t_agent, "1,1,1")?;
    create(&source, &t_mm2, "1,1,1")?;
    create(&destination[0], &t_mm2, "1,2,1")?;
    let records = rounds as u64 * ROUND_RECORDS;
    eprintln!("producing {rounds} rounds of {ROUND} × {PARTITIONS} partitions ({records} records of 1 KiB) transactionally to two source topics…");
    let committed = produce(&source, &t_agent, &format!("bench-{stamp}-agent"), rounds)?;
    produce(&source, &t_mm2, &format!("bench-{stamp}-mm2"), rounds)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let source_view = |topic: &str| -> Result<Vec<Summary>, String> {
        let mut v = TopicView::new(&source, topic, PARTITIONS);
        rt.block_on(read_fully(&mut v, committed, Duration::from_secs(120)))?;
        Ok(v.summaries())
    };
    let (src_agent, src_mm2) = (source_view(&t_agent)?, source_view(&t_mm2)?);
    let base = 17392u16;
    let state = std::env::temp_dir().join(format!("mirrorgate-bench-mirror-txn-{stamp}"));
    let cfg = crate::bench_config(&destination, base, &state, &format!("mirrors:\n  - name: agent\n    topics: [\"{t_agent}\"]\n    source: {{ bootstrap: [\"{source}\"] }}\n  - name: mm2\n    topics: [\"{t_mm2}\"]\n"))?;
    let mb = records as f64 * RECORD_BYTES as f64 / 1_000_000.0;
    let gw = rt
        .block_on(Gateway::start(cfg))
        .map_err(|e| e.to_string())?;
    // 1. The agent (it starts on its own: the mirror has a source).
    let mut agent = AgentProgress {
        view: TopicView::new(&destination[0], &t_agent, PARTITIONS),
        admin: format!("127.0.0.1:{}", base + 20),
        polls: 0,
    };
    let limit = Duration::from_secs(if quick { 300 } else { 600 });
    let agent_s = rt.block_on(time_until(
        &mut agent,
        &t_agent,
        committed as i64,
        limit,
        &mut || {},
    ));
    match &agent_s {
        Ok(s) => eprintln!("agent: {mb:.1} MB of transactional data in {s:.2} s"),
        Err(e) => eprintln!("agent: {e}"),
    }
    if let Err(r) = rt.block_on(gw.wait_ready(Duration::from_secs(60))) {
        eprintln!("gateway not ready: {}", r.reasons.join("; "));
    }
    // 2. MirrorMaker 2 in exactly-once mode into the mirror listener.
    let dir = std::env::temp_dir().join(format!("mirrorgate-bench-mm2-txn-{stamp}"));
    let mm2 = Mm2::start(
        &dir,
        &source,
        &format!("127.0.0.1:{}", base + 10),
        &t_mm2,
        MM2_EOS_PROPERTIES,
    )?;
    let mut mm2_view = TopicView::new(&destination[0], &t_mm2, PARTITIONS);
    let mm2_s = rt
        .block_on(time_until(
            &mut mm2_view,
            &t_mm2,
            committed as i64,
            limit,
            &mut || {},
        ))
        .map_err(|e| format!("MirrorMaker 2: {e}; its log ends with:\n{}", log_tail(&dir)));
    drop(mm2);
    rt.block_on(gw.shutdown());
    let _ = std::fs::remove_dir_all(&state);
    let mm2_s = mm2_s?;
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("MirrorMaker 2 (EOS): {mb:.1} MB of transactional data in {mm2_s:.2} s");
    // 3. The read_committed views, destination against source.
    let agent_equal = agent_s.is_ok() && agent.view.summaries() == src_agent;
    let mm2_equal = mm2_view.summaries() == src_mm2;
    let agent_rate = agent_s.as_ref().ok().map(|s| mb / s);
    let mm2_rate = mb / mm2_s;
    Ok(json!({
        "bench": "mirror-transactional",
        "records": records,
        "committed_records": committed,
        "aborted_records": records - committed,
        "partitions": PARTITIONS,
        "record_size": RECORD_BYTES,
        "plan_round": ROUND,
        "rounds": rounds,
        "agent_mb_per_s": agent_rate,
        "agent_seconds": agent_s.as_ref().ok(),
        "agent_error": agent_s.as_ref().err(),
        "mm2_mb_per_s": mm2_rate,
        "mm2_seconds": mm2_s,
        "mm2_mode": "exactly-once, through the mirror listener",
        "ratio": agent_rate.map(|a| a / mm2_rate),
        "agent_read_committed_equal": agent_equal,
        "mm2_read_committed_equal": mm2_equal,
        "read_committed_equal": agent_equal && mm2_equal,
    }))
}
