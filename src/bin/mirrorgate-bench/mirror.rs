//! `mirrorgate-bench mirror`: the built-in agent and MirrorMaker 2 mirror the same amount of
//! compressed data (1 KiB records, lz4) from the source to the destination, each through the
//! gateway, timed from the first to the last record arriving; then the agent's lag (seconds) is
//! sampled while a producer writes to the source at a fixed rate. CPU per MiB mirrored: the
//! agent's is this process's CPU time while it mirrors (the gateway, agent included, runs here);
//! MirrorMaker 2's is its JVM's, and separately the gateway's while MM2 appends through it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::app::Gateway;
use mirrorgate::client::{KafkaClient, LATEST};
use serde_json::json;

use crate::process::CpuMeter;
use crate::{java, median, repo, Clusters};

/// MirrorMaker 2, stopped when dropped.
pub(crate) struct Mm2(Child);
impl Drop for Mm2 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Mm2 {
    /// Starts MirrorMaker 2 (dedicated mode, only the `src->dst` flow, identity topic names) for
    /// `topic` from `source` to `target`, with `extra` properties appended; its properties and
    /// log (`mm2.log`) are in `dir`.
    pub(crate) fn start(
        dir: &std::path::Path,
        source: &str,
        target: &str,
        topic: &str,
        extra: &str,
    ) -> Result<Mm2, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let props = dir.join("mm2.properties");
        std::fs::write(
            &props,
            format!(
                "clusters = src, dst\nsrc.bootstrap.servers = {source}\ndst.bootstrap.servers = {target}\n\
                 src->dst.enabled = true\nsrc->dst.topics = {topic}\ndst->src.enabled = false\n\
                 replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n\
                 replication.factor = 1\ncheckpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 1\n\
                 offset-syncs.topic.replication.factor = 1\noffset.storage.replication.factor = 1\n\
                 status.storage.replication.factor = 1\nconfig.storage.replication.factor = 1\n\
                 sync.topic.acls.enabled = false\nsync.topic.configs.enabled = false\nemit.checkpoints.enabled = false\n\
                 sync.group.offsets.enabled = false\nrefresh.topics.interval.seconds = 5\n{extra}"
            ),
        )
        .map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("mm2.log")).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child =
            crate::process::die_with_parent(&mut Command::new(repo().join("integration/rig")))
                .args(["java", "org.apache.kafka.connect.mirror.MirrorMaker"])
                .arg(&props)
                .args(["--clusters", "dst"])
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log2))
                .spawn()
                .map_err(|e| format!("cannot start MirrorMaker 2: {e}"))?;
        Ok(Mm2(child))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

fn produce(bootstrap: &str, topic: &str, records: u64, throughput: i64) -> Result<(), String> {
    java(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic".into(),
            topic.into(),
            "--num-records".into(),
            records.to_string(),
            "--record-size".into(),
            "1024".into(),
            "--throughput".into(),
            throughput.to_string(),
            "--producer-props".into(),
            format!("bootstrap.servers={bootstrap}"),
            "acks=all".into(),
            "compression.type=lz4".into(),
            "linger.ms=20".into(),
            "batch.size=65536".into(),
        ],
        Duration::from_secs(900),
    )
    .map(|_| ())
}

pub(crate) fn create(bootstrap: &str, topic: &str, assignment: &str) -> Result<(), String> {
    java(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server".into(),
            bootstrap.into(),
            "--create".into(),
            "--topic".into(),
            topic.into(),
            "--replica-assignment".into(),
            assignment.into(),
        ],
        Duration::from_secs(60),
    )
    .map(|_| ())
}

/// What a timed mirroring run waits on: how many records have arrived on the destination.
pub(crate) trait Progress {
    async fn arrived(&mut self) -> Result<i64, String>;
}

/// Progress as the sum of the destination topic's log end offsets (see [`count`]).
struct LogEnd<'a> {
    destination: &'a str,
    topic: &'a str,
}

impl Progress for LogEnd<'_> {
    async fn arrived(&mut self) -> Result<i64, String> {
        Ok(count(self.destination, self.topic).await)
    }
}

/// Records in `topic` on the destination (sum of log end offsets), asked of the destination
/// brokers directly so that the count does not depend on the gateway's metadata view; 0 while
/// the topic does not exist.
async fn count(destination: &str, topic: &str) -> i64 {
    let Ok(mut c) = KafkaClient::connect(destination, Duration::from_secs(5)).await else {
        return 0;
    };
    let req = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))]));
    let Ok(meta) = c.send(&req, 12).await else {
        return 0;
    };
    let mut total = 0;
    for t in meta.topics.iter().filter(|t| t.error_code == 0) {
        for p in &t.partitions {
            let Some(b) = meta.brokers.iter().find(|b| b.node_id == p.leader_id) else {
                continue;
            };
            let addr = format!("{}:{}", b.host.as_str(), b.port);
            if let Ok(mut lc) = KafkaClient::connect(&addr, Duration::from_secs(5)).await {
                total += lc
                    .list_offset(topic, p.partition_index, LATEST)
                    .await
                    .unwrap_or(0);
            }
        }
    }
    total
}

/// Seconds from the first record arriving (as `progress` counts them) to `n` records; `on_first`
/// runs when the first record is seen. `what` names the run in the error after `limit`.
pub(crate) async fn time_until(
    progress: &mut impl Progress,
    what: &str,
    n: i64,
    limit: Duration,
    on_first: &mut dyn FnMut(),
) -> Result<f64, String> {
    let deadline = Instant::now() + limit;
    let mut first: Option<Instant> = None;
    loop {
        let c = progress.arrived().await?;
        if c > 0 && first.is_none() {
            first = Some(Instant::now());
            on_first();
        }
        if c >= n {
            return Ok(first
                .map(|f| f.elapsed().as_secs_f64())
                .unwrap_or(0.0)
                .max(0.001));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{what}: {c} of {n} records mirrored within {limit:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn run(quick: bool) -> Result<serde_json::Value, String> {
    let records: u64 = if quick { 30_000 } else { 150_000 };
    let (_clusters, addrs) = Clusters::ensure(&["source", "destination"])?;
    let get = |name: &str| {
        addrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
            .ok_or(format!("{name} not running"))
    };
    let source = get("source")?
        .split(',')
        .next()
        .unwrap_or_default()
        .to_string();
    let destination: Vec<String> = get("destination")?.split(',').map(str::to_string).collect();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (t_agent, t_mm2, t_lag) = (
        format!("bench-mirror-{stamp}-agent"),
        format!("bench-mirror-{stamp}-mm2"),
        format!("bench-mirror-{stamp}-lag"),
    );
    for t in [&t_agent, &t_mm2, &t_lag] {
        create(&source, t, "1,1")?;
    }
    create(&destination[0], &t_mm2, "1,2")?;
    eprintln!("producing {records} records of 1 KiB (lz4) to two source topics…");
    produce(&source, &t_agent, records, -1)?;
    produce(&source, &t_mm2, records, -1)?;
    let base = 17292u16;
    let state = std::env::temp_dir().join(format!("mirrorgate-bench-mirror-{stamp}"));
    let cfg = crate::bench_config(&destination, base, &state, &format!("mirrors:\n  - name: agent\n    topics: [\"{t_agent}\", \"{t_lag}\"]\n    source: {{ bootstrap: [\"{source}\"] }}\n  - name: mm2\n    topics: [\"{t_mm2}\"]\n"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mb = records as f64 * 1024.0 / 1_000_000.0;
    let mib = records as f64 * 1024.0 / (1024.0 * 1024.0);
    // The gateway (and so the agent) runs in this process: its CPU is this process's, measured
    // from before the gateway starts (the agent starts mirroring as soon as it can), so the
    // agent's figure includes the gateway's start.
    let me = std::process::id();
    let agent_cpu = CpuMeter::start(me);
    let gw = rt
        .block_on(Gateway::start(cfg))
        .map_err(|e| e.to_string())?;
    // 1. The agent (it starts on its own: the mirror has a source).
    let agent_s = rt.block_on(time_until(
        &mut LogEnd {
            destination: &destination[0],
            topic: &t_agent,
        },
        &t_agent,
        records as i64,
        Duration::from_secs(600),
        &mut || {},
    ))?;
    let agent_cpu_s = agent_cpu.stop();
    eprintln!("agent: {mb:.1} MB in {agent_s:.2} s, {agent_cpu_s:.2} s CPU");
    rt.block_on(gw.wait_ready(Duration::from_secs(120)))
        .map_err(|r| r.reasons.join("; "))?;
    // 2. MirrorMaker 2 into the mirror listener.
    let dir = std::env::temp_dir().join(format!("mirrorgate-bench-mm2-{stamp}"));
    let mm2 = Mm2::start(
        &dir,
        &source,
        &format!("127.0.0.1:{}", base + 10),
        &t_mm2,
        "",
    )?;
    // MirrorMaker 2's CPU: in total (JVM and Connect start included) and from its first record
    // on the destination to its last (the work itself).
    let mm2_pid = mm2.pid();
    let mm2_cpu = CpuMeter::start(mm2_pid);
    let mut at_first: Option<(CpuMeter, CpuMeter)> = None;
    let mm2_s = rt.block_on(time_until(
        &mut LogEnd {
            destination: &destination[0],
            topic: &t_mm2,
        },
        &t_mm2,
        records as i64,
        Duration::from_secs(900),
        &mut || at_first = Some((CpuMeter::start(mm2_pid), CpuMeter::start(me))),
    ))?;
    let mm2_total_cpu_s = mm2_cpu.stop();
    let (mm2_cpu_s, mm2_gateway_cpu_s) = at_first
        .map(|(m, g)| (m.stop(), g.stop()))
        .unwrap_or((mm2_total_cpu_s, 0.0));
    drop(mm2);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "MirrorMaker 2: {mb:.1} MB in {mm2_s:.2} s, {mm2_cpu_s:.2} s CPU from its first record ({mm2_total_cpu_s:.2} s with its start; + {mm2_gateway_cpu_s:.2} s in the gateway)"
    );
    // 3. Lag at a fixed rate (1,000 records/s) with the agent.
    let (rate, seconds) = if quick { (1000, 20u64) } else { (1000, 60) };
    let src = source.clone();
    let t = t_lag.clone();
    let producer = std::thread::spawn(move || produce(&src, &t, rate * seconds, rate as i64));
    let mut samples = Vec::new();
    let started = Instant::now();
    while !producer.is_finished() && started.elapsed() < Duration::from_secs(seconds + 120) {
        let lags: Vec<f64> = rt.block_on(async {
            let (_, body) = mirrorgate::admin::client::call(
                &format!("127.0.0.1:{}", base + 20),
                hyper::Method::GET,
                "/v1/mirrors/agent/partitions",
                None,
                None,
            )
            .await
            .unwrap_or((0, String::new()));
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            v["partitions"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["topic"] == t_lag.as_str())
                        .filter_map(|p| p["lag_seconds"].as_f64())
                        .collect()
                })
                .unwrap_or_default()
        });
        if let Some(max) = lags.iter().cloned().reduce(f64::max) {
            samples.push(max);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    producer
        .join()
        .map_err(|_| "lag producer panicked".to_string())??;
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let p99 = samples
        .get(((samples.len() as f64) * 0.99) as usize)
        .or(samples.last())
        .copied()
        .unwrap_or(f64::NAN);
    rt.block_on(gw.shutdown());
    let _ = std::fs::remove_dir_all(&state);
    let per_mib = |cpu_s: f64| ((cpu_s * 1000.0 / mib) * 100.0).round() / 100.0;
    let agent = mb / agent_s;
    let mm2_rate = mb / mm2_s;
    Ok(json!({
        "bench": "mirror",
        "records": records,
        "record_size": 1024,
        "compression": "lz4",
        "agent_mb_per_s": agent,
        "mm2_mb_per_s": mm2_rate,
        "ratio": agent / mm2_rate,
        "lag_p99_s": p99,
        "lag_median_s": median(samples.clone()),
        "lag_rate_records_per_s": rate,
        "agent_cpu_ms_per_mib": per_mib(agent_cpu_s),
        "mm2_cpu_ms_per_mib": per_mib(mm2_cpu_s),
        "mm2_cpu_ms_per_mib_with_start": per_mib(mm2_total_cpu_s),
        "mm2_gateway_cpu_ms_per_mib": per_mib(mm2_gateway_cpu_s),
        "mm2_total_cpu_ms_per_mib": per_mib(mm2_cpu_s + mm2_gateway_cpu_s),
    }))
}
