//! `mirrorgate-bench consumer-failover`: a consumer group (the Java consumer) reads a mirrored
//! topic on the source while a producer writes it and the gateway's agent mirrors it and syncs
//! the group's offsets every `sync_interval_ms`; the source is killed (SIGKILL, with the
//! application), the mirror fails over, and the same group id resumes through the gateway.
//! Figures: what the group read in total, skipped (read on neither side), re-read, the bound on
//! re-reading from the last sync the gateway reported before the kill, and the time from the
//! failover call to the first record read through the gateway (docs/benchmarks.md).
//!
//! The source is a cluster of the benchmark's own: the `third` layout on an isolated rig (own
//! run directory, ports +5000: 127.0.0.1:28092), started here, killed here and stopped here, so
//! that the shared clusters other runs use are never disturbed. The destination is the shared
//! rig's `destination` (started when not running). The gateway runs in this process.
//!
//! Owns: the run's phases and timing, the isolated source, the report. Must not touch: the
//! shared rig's clusters beyond `Clusters::ensure`, other benchmarks' ports.

mod clients;
mod figures;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper::Method;
use mirrorgate::app::Gateway;
use serde_json::{json, Value};

use crate::committed_view::TopicView;
use crate::fleet::admin;
use crate::group_member::{Member, MemberArgs, Output};
use crate::{cluster_brokers, Clusters, Rig};
use figures::{compute, Inputs};

/// The isolated rig's port offset: its `third` cluster listens on 127.0.0.1:28092 (controller
/// 28093), free in the shared rig's layout and below the ephemeral port range.
const SOURCE_PORT_OFFSET: i32 = 5000;
/// The gateway's client listener (node n on BASE + n - 1); mirror listener +10, admin +20.
const BASE: u16 = 17692;
const MIRROR: &str = "cf";
/// The application's auto-commit interval on the source.
const COMMIT_MS: u64 = 1000;
/// How often the benchmark reads the group sync's status while the load runs.
const STATUS_EVERY: Duration = Duration::from_millis(250);

pub struct Options {
    pub quick: bool,
    pub sync_interval_ms: u64,
}

/// The size of a run.
struct Shape {
    partitions: i32,
    /// Records per partition per 20 ms.
    per_partition: usize,
    /// Time the group reads under load before the source is killed.
    load: Duration,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn run(o: Options) -> Result<Value, String> {
    let shape = if o.quick {
        Shape {
            partitions: 3,
            per_partition: 6,
            load: Duration::from_secs(25),
        }
    } else {
        Shape {
            partitions: 6,
            per_partition: 6,
            load: Duration::from_secs(60),
        }
    };
    let stamp = now_ms();
    let work = std::env::temp_dir().join(format!("mirrorgate-bench-cf-{stamp}"));
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let result = run_in(&o, &shape, &work, stamp);
    let _ = std::fs::remove_dir_all(&work);
    result.map(|mut v| {
        v["quick"] = json!(o.quick);
        v
    })
}

/// The last sync of the group the gateway reported: when its round ended, and per partition
/// the destination's committed offset.
#[derive(Debug, Default, Clone)]
struct Synced {
    at_ms: Option<i64>,
    committed: BTreeMap<i32, i64>,
}

/// The group's entry in `GET /v1/mirrors/{MIRROR}/groups`, if the sync reports it `synced`.
async fn synced(admin_addr: &str, group: &str) -> Option<Synced> {
    let path = format!("/v1/mirrors/{MIRROR}/groups");
    let (_, v) = admin(admin_addr, Method::GET, &path).await.ok()?;
    let g = v["groups"]
        .as_array()?
        .iter()
        .find(|g| g["group"] == group)?;
    if g["state"] != "synced" {
        return None;
    }
    let committed = g["partitions"]
        .as_array()?
        .iter()
        .filter_map(|p| {
            Some((
                p["partition"].as_i64()? as i32,
                p["destination_committed"].as_i64()?,
            ))
        })
        .collect();
    Some(Synced {
        at_ms: g["last_sync_ms"].as_i64(),
        committed,
    })
}

/// Waits until `GET /v1/mirrors/{MIRROR}` counts `n` partitions in `state` (and, with `gw`, the
/// gateway is ready); the time it took.
async fn wait_state(
    admin_addr: &str,
    state: &str,
    n: i32,
    gw: Option<&Gateway>,
    limit: Duration,
) -> Result<f64, String> {
    let started = Instant::now();
    loop {
        let (_, m) = admin(admin_addr, Method::GET, &format!("/v1/mirrors/{MIRROR}")).await?;
        if m["states"][state].as_i64() == Some(i64::from(n))
            && gw.is_none_or(|g| g.readiness().ready)
        {
            return Ok(started.elapsed().as_secs_f64());
        }
        if started.elapsed() > limit {
            return Err(format!("not {n} partitions {state} within {limit:?}: {m}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every record of `topic` in the destination's log (read from its brokers directly), once
/// two readings agree.
pub(crate) async fn destination_log(
    destination: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<(i32, i64, String)>, String> {
    let mut view = TopicView::new(destination, topic, partitions).keeping_keys();
    let mut last = None;
    for _ in 0..40 {
        let n = view.advance().await?;
        if n > 0 && last == Some(n) {
            return Ok(view.keys());
        }
        last = Some(n);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!(
        "the destination's {topic} could not be read to its end"
    ))
}

fn run_in(o: &Options, shape: &Shape, work: &std::path::Path, stamp: i64) -> Result<Value, String> {
    let (_shared, addrs) = Clusters::ensure(&["destination"])?;
    let destination = cluster_brokers(&addrs, "destination")?;
    let rig = Rig::isolated(&work.join("rig"), SOURCE_PORT_OFFSET);
    let (own, own_addrs) = Clusters::ensure_in(rig, &["third"], true)?;
    if !own.started("third") {
        return Err("the benchmark's own source cluster was running already: not killing a cluster it did not start".into());
    }
    let source = cluster_brokers(&own_addrs, "third")?.remove(0);
    let topic = format!("bench-cf-{stamp}");
    let group = format!("bench-cf-{stamp}-app");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(crate::topics::create(
        &source,
        &[(topic.clone(), shape.partitions)],
    ))?;
    let cfg = crate::bench_config(
        &destination,
        BASE,
        &work.join("state"),
        &format!(
            "mirrors:\n  - name: {MIRROR}\n    topics: [\"{topic}\"]\n    source: {{ bootstrap: [\"{source}\"] }}\n    groups: {{ include: [\"{group}\"], sync_interval_ms: {} }}\n",
            o.sync_interval_ms
        ),
    )?;
    let admin_addr = format!("127.0.0.1:{}", BASE + 20);
    let gw = rt
        .block_on(Gateway::start(cfg))
        .map_err(|e| e.to_string())?;
    let result = measure(
        &Setup {
            rt: &rt,
            gw: &gw,
            own: &own,
            work,
            source: &source,
            destination: &destination[0],
            topic: &topic,
            group: &group,
            admin_addr: &admin_addr,
        },
        o,
        shape,
    );
    rt.block_on(gw.shutdown());
    rt.block_on(crate::topics::delete(
        &destination[0],
        std::slice::from_ref(&topic),
    ));
    drop(own);
    result
}

/// What a run measures with: the runtime, the gateway, the benchmark's own source cluster, its
/// work directory, addresses and names.
struct Setup<'a> {
    rt: &'a tokio::runtime::Runtime,
    gw: &'a Gateway,
    own: &'a Clusters,
    work: &'a std::path::Path,
    source: &'a str,
    destination: &'a str,
    topic: &'a str,
    group: &'a str,
    admin_addr: &'a str,
}

fn measure(s: &Setup, o: &Options, shape: &Shape) -> Result<Value, String> {
    let Setup {
        rt,
        gw,
        own,
        work,
        source,
        destination,
        topic,
        group,
        admin_addr,
    } = *s;
    let p = shape.partitions;
    rt.block_on(wait_state(
        admin_addr,
        "MIRRORING",
        p,
        Some(gw),
        Duration::from_secs(90),
    ))?;
    let gateway = format!("127.0.0.1:{BASE}");
    let member = |mode, bootstrap, timeout| MemberArgs {
        mode,
        bootstrap,
        topic,
        group,
        commit_ms: COMMIT_MS,
        timeout,
    };
    // Both JVMs start now; the resume member waits for `go` with its consumer created.
    let mut app = Member::start(
        &member("follow", source, shape.load + Duration::from_secs(120)),
        &work.join("follow.log"),
    )?;
    let mut resumed = Member::start(
        &member("resume", &gateway, Duration::from_secs(90)),
        &work.join("resume.log"),
    )?;
    app.wait(
        "the group's assignment on the source",
        Duration::from_secs(90),
        |out: &Output| out.assigned.len() == p as usize,
    )?;
    resumed.wait(
        "the resume consumer's start",
        Duration::from_secs(90),
        |out: &Output| out.ready,
    )?;

    let stop = Arc::new(AtomicBool::new(false));
    let producer = rt.spawn(clients::produce(
        source.to_string(),
        topic.to_string(),
        p,
        shape.per_partition,
        stop.clone(),
    ));
    eprintln!(
        "consumer-failover: {} records/s over {p} partitions for {:?}, group sync every {} ms",
        shape.per_partition * p as usize * 50,
        shape.load,
        o.sync_interval_ms
    );
    let load_started = Instant::now();
    let mut last = Synced::default();
    while load_started.elapsed() < shape.load {
        std::thread::sleep(STATUS_EVERY);
        if let Some(s) = rt.block_on(synced(admin_addr, group)) {
            last = s;
        }
    }
    if let Some(s) = rt.block_on(synced(admin_addr, group)) {
        last = s;
    }
    // The source region is lost: its broker and the application, at once.
    let killed_ms = now_ms();
    own.rig().run(&["kill-node", "third", "1"])?;
    app.kill();
    stop.store(true, Ordering::Relaxed);
    let load_seconds = load_started.elapsed().as_secs_f64();
    let produced = rt.block_on(producer).map_err(|e| e.to_string())?;
    let app = app.into_output();

    let called_ms = now_ms();
    let (status, body) = rt.block_on(admin(
        admin_addr,
        Method::POST,
        &format!("/v1/mirrors/{MIRROR}/failover"),
    ))?;
    if status != 202 {
        return Err(format!("failover call answered {status}: {body}"));
    }
    let failover_seconds = rt.block_on(wait_state(
        admin_addr,
        "STOPPED",
        p,
        None,
        Duration::from_secs(120),
    ))?;
    resumed.go()?;
    resumed.wait(
        "the group's resumption through the gateway",
        Duration::from_secs(120),
        |out: &Output| out.done.is_some(),
    )?;
    let resumed = resumed.into_output();
    let first_ms = resumed.reads.iter().map(|r| r.at_ms).min();

    let log = rt.block_on(destination_log(destination, topic, p))?;
    let f = compute(&Inputs {
        source_reads: &app.reads,
        destination_reads: &resumed.reads,
        destination_log: &log,
        acked: &produced.acked,
        synced: &last.committed,
    })?;
    if let Some(e) = &produced.last_error {
        eprintln!(
            "producer: {} failed requests, the last: {e}",
            produced.errors
        );
    }
    Ok(json!({
        "bench": "consumer-failover",
        "partitions": p,
        "load_seconds": round3(load_seconds),
        "produced": produced.acked.len(),
        "produce_rate_per_s": round3(produced.acked.len() as f64 / load_seconds),
        "mirrored": f.mirrored,
        "not_mirrored": f.not_mirrored,
        "records": f.records,
        "records_source": f.records_source,
        "records_destination": f.records_destination,
        "skipped": f.skipped,
        "reread": f.reread,
        "reread_bound": f.reread_bound,
        "sync_interval_s": o.sync_interval_ms as f64 / 1000.0,
        "commit_interval_s": COMMIT_MS as f64 / 1000.0,
        "sync_age_at_kill_s": last.at_ms.map(|t| round3((killed_ms - t) as f64 / 1000.0)),
        "failover_seconds": round3(failover_seconds),
        "resume_seconds": first_ms.map(|t| round3((t - called_ms) as f64 / 1000.0)),
    }))
}
