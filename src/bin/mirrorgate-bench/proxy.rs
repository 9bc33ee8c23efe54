//! `mirrorgate-bench proxy`: what the gateway costs a client, side by side with the brokers
//! directly, a byte-relay floor and a peer Kafka proxy, in one run.
//!
//! Modes: `direct` (the destination brokers), `relay` (the frame relay of `relay.rs`, the floor
//! any proxy pays here), `gateway` (`mirrorgate run` with one mirror configured, clients on the
//! client listener writing topics outside the mirror: every Produce goes through the write
//! policy), `gateway-mirror` (the same process, its mirror listener, topics of the mirror: the
//! path a mirroring tool's writes take, with enforcement and the producer-state tap),
//! `gateway-forward` (the same process, the forward listener of a second mirror whose source is
//! the destination cluster itself: the path of an application's traffic before a switchover,
//! every acknowledgement noted in the ledger),
//! `baseline` and `baseline-mirror` (the same two for another gateway binary given with
//! `--baseline`, e.g. a build of an earlier commit: before/after figures side by side in one
//! run) and `peer` (Kroxylicious, when it builds). Every proxy is a process of its own so that
//! its CPU time and resident memory can be read from `/proc`. Phases, each with the modes interleaved (the starting mode rotates per
//! repetition) and medians over the repetitions:
//!
//! 1. saturation: Java `ProducerPerformance` (1 KiB records, acks=all, idempotent, unlimited
//!    rate) then `ConsumerPerformance` of the same records; MB/s, and CPU per MiB of payload
//!    forwarded (produce + consume) per proxy;
//! 2. latency at fixed rates: an idempotent producer (`latency.rs`: 1 KiB records, acks=all, a
//!    batch per partition every 5 ms, 5 in flight) at 25 %, 50 % and 75 % of the direct
//!    saturation rate of phase 1, timed per request to the microsecond after a warm-up;
//!    p50/p99/p99.9 per mode and the overhead versus direct in milliseconds, and CPU per MiB
//!    of each proxy at 50 %.
//!
//! Owns: the phases and what each measures. Must not touch: how the proxies run (`process.rs`,
//! `relay.rs`, `peer.rs`), how measurements become figures (`proxy_report.rs`, which also owns
//! the figures' types: this file uses them, never the other way round).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::{BrokerId, CreateTopicsRequest, DeleteTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;
use serde_json::Value;

use crate::latency;
use crate::peer::{self, PeerProcess};
use crate::process::{gateway_binary, peak_rss_kib, CpuMeter, GatewayProcess};
use crate::proxy_report::{
    round2, Cpu50, LatTable, ProduceRun, SatTable, Saturation, RATES, RECORD_SIZE,
};
use crate::relay::RelayProcess;
use crate::{java, median, Clusters};

/// Gateway client ports (node n on GATEWAY_BASE + n - 1) and admin port.
const GATEWAY_BASE: u16 = 17092;
const GATEWAY_ADMIN: u16 = 17102;
/// The gateway's mirror listener (node n on GATEWAY_MIRROR_BASE + n - 1).
const GATEWAY_MIRROR_BASE: u16 = 17112;
/// The gateway's forward listener (node n on GATEWAY_FORWARD_BASE + n - 1).
const GATEWAY_FORWARD_BASE: u16 = 17122;
/// The same three for the `--baseline` gateway.
const BASELINE_BASE: u16 = 17292;
const BASELINE_ADMIN: u16 = 17302;
const BASELINE_MIRROR_BASE: u16 = 17312;
/// The topics of the gateways' mirror: those of the `*-mirror` modes (see `topic`).
const MIRROR_TOPICS: &str = "bench-proxy-[0-9]+-[a-z]+-mirror-.*";
/// Relay ports (node n on RELAY_BASE + n - 1).
const RELAY_BASE: u16 = 17192;
/// Kroxylicious bootstrap port (node n on PEER_BASE + n).
const PEER_BASE: u16 = 17500;
/// Excluded start of every fixed-rate run (connections, metadata, first batches).
const WARMUP: Duration = Duration::from_secs(2);

/// Options of `mirrorgate-bench proxy`.
pub struct Options {
    pub quick: bool,
    pub runs: usize,
    /// One repetition per mode and phase: checks that every mode runs (CI); its figures are
    /// not comparable and are not reported.
    pub smoke: bool,
    pub records: Option<u64>,
    pub rate_seconds: Option<u64>,
    pub peer: bool,
    /// Another gateway binary measured side by side (`baseline`, `baseline-mirror`).
    pub baseline: Option<PathBuf>,
}

/// Parse the final summary line of ProducerPerformance:
/// `N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, P ms 50th, ... P ms 99th, P ms 99.9th.`
fn parse_producer(out: &str) -> Option<ProduceRun> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("records sent") && l.contains("50th"))?;
    let mb = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let field = |suffix: &str| -> Option<f64> {
        line.split(',')
            .find(|p| p.trim().trim_end_matches('.').ends_with(suffix))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(ProduceRun {
        records_per_s: line
            .split(',')
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?,
        mb_per_s: mb,
        p50_ms: field("ms 50th")?,
        p99_ms: field("ms 99th")?,
        p999_ms: field("ms 99.9th")?,
    })
}

/// Parse ConsumerPerformance's CSV line; returns fetch MB/s (excludes group join time).
fn parse_consumer(out: &str) -> Option<f64> {
    let header = out.lines().find(|l| l.contains("fetch.MB.sec"))?;
    let idx = header.split(',').position(|h| h.trim() == "fetch.MB.sec")?;
    let line = out.lines().rev().find(|l| {
        l.split(',').count() == header.split(',').count() && !l.contains("fetch.MB.sec")
    })?;
    line.split(',').nth(idx)?.trim().parse().ok()
}

fn produce(bootstrap: &str, topic: &str, records: u64, rate: i64) -> Result<ProduceRun, String> {
    let out = java(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic".into(),
            topic.into(),
            "--num-records".into(),
            records.to_string(),
            "--record-size".into(),
            RECORD_SIZE.to_string(),
            "--throughput".into(),
            rate.to_string(),
            "--producer-props".into(),
            format!("bootstrap.servers={bootstrap}"),
            "acks=all".into(),
            "enable.idempotence=true".into(),
            "linger.ms=5".into(),
        ],
        Duration::from_secs(600),
    )?;
    parse_producer(&out).ok_or_else(|| format!("cannot parse producer output: {out}"))
}

fn consume(bootstrap: &str, topic: &str, records: u64) -> Result<f64, String> {
    let out = java(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server".into(),
            bootstrap.into(),
            "--topic".into(),
            topic.into(),
            "--messages".into(),
            records.to_string(),
            "--timeout".into(),
            "60000".into(),
        ],
        Duration::from_secs(600),
    )?;
    parse_consumer(&out).ok_or_else(|| format!("cannot parse consumer output: {out}"))
}

/// Creates the topics directly on the destination: 2 partitions, replication factor 1,
/// partition 0 on node 1 and partition 1 on node 2 (so every proxy serves both brokers).
async fn create_topics(bootstrap: &str, names: &[String]) -> Result<(), String> {
    let mut c = KafkaClient::connect(bootstrap, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let assignment = |p: i32| {
        CreatableReplicaAssignment::default()
            .with_partition_index(p)
            .with_broker_ids(vec![BrokerId(p + 1)])
    };
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(
            names
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(n.clone())))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                        .with_assignments(vec![assignment(0), assignment(1)])
                })
                .collect(),
        );
    let resp = c.send(&req, 5).await.map_err(|e| e.to_string())?;
    if let Some(t) = resp.topics.iter().find(|t| t.error_code != 0) {
        return Err(format!(
            "cannot create {}: error {}",
            t.name.0, t.error_code
        ));
    }
    Ok(())
}

async fn delete_topics(bootstrap: &str, names: &[String]) {
    if let Ok(mut c) = KafkaClient::connect(bootstrap, Duration::from_secs(10)).await {
        let req = DeleteTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topic_names(
                names
                    .iter()
                    .map(|t| TopicName(StrBytes::from_string(t.clone())))
                    .collect(),
            );
        let _ = c.send(&req, 4).await;
    }
}

/// One way for clients to reach the destination.
pub(crate) struct Mode {
    pub(crate) name: &'static str,
    bootstrap: String,
    /// The proxy process (none for `direct`).
    pid: Option<u32>,
}

/// The modes in a rotated order: repetition `i` starts with mode `i % n`, so no mode is always
/// first (or always right after the JVM-heavy one).
fn rotated<T>(items: &[T], i: usize) -> impl Iterator<Item = &T> {
    let n = items.len();
    (0..n).map(move |k| &items[(i + k) % n])
}

pub fn run(opts: Options) -> Result<Value, String> {
    let runs = if opts.smoke { 1 } else { opts.runs.max(3) };
    let records = opts
        .records
        .unwrap_or(if opts.quick { 50_000 } else { 200_000 });
    let rate_seconds = opts
        .rate_seconds
        .unwrap_or(if opts.quick { 6 } else { 15 })
        .max(2);
    let bin = gateway_binary()?;
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let brokers = crate::cluster_brokers(&addrs, "destination")?;
    let direct = brokers.first().cloned().ok_or("no destination broker")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;

    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let sat_topic = |m: &str, i: usize| format!("bench-proxy-{stamp}-{m}-sat-{i}");
    let rate_topic = |m: &str| format!("bench-proxy-{stamp}-{m}-rate");
    let warm_topic = |m: &str| format!("bench-proxy-{stamp}-{m}-warm");
    let mode_names = [
        "direct",
        "relay",
        "gateway",
        "gateway-mirror",
        "gateway-forward",
        "baseline",
        "baseline-mirror",
        "peer",
    ];
    let mut topics = Vec::new();
    for m in mode_names {
        topics.push(warm_topic(m));
        topics.push(rate_topic(m));
        topics.extend((0..runs).map(|i| sat_topic(m, i)));
    }
    // Before the gateways start, so that they find the mirror's partitions at once.
    rt.block_on(create_topics(&direct, &topics))?;
    let result = run_modes(
        &opts,
        &rt,
        &bin,
        &brokers,
        &direct,
        runs,
        records,
        rate_seconds,
        &warm_topic,
        &sat_topic,
        &rate_topic,
    );
    rt.block_on(delete_topics(&direct, &topics));
    result
}

#[allow(clippy::too_many_arguments)]
fn run_modes(
    opts: &Options,
    rt: &tokio::runtime::Runtime,
    bin: &std::path::Path,
    brokers: &[String],
    direct: &str,
    runs: usize,
    records: u64,
    rate_seconds: u64,
    warm_topic: &dyn Fn(&str) -> String,
    sat_topic: &dyn Fn(&str, usize) -> String,
    rate_topic: &dyn Fn(&str) -> String,
) -> Result<Value, String> {
    let gateway = GatewayProcess::start_with(
        bin,
        brokers,
        GATEWAY_BASE,
        GATEWAY_ADMIN,
        "proxy",
        Some((
            GATEWAY_MIRROR_BASE,
            MIRROR_TOPICS,
            Some(GATEWAY_FORWARD_BASE),
        )),
    )?;
    rt.block_on(gateway.wait_ready(Duration::from_secs(60)))?;
    let baseline = match &opts.baseline {
        Some(b) => {
            let p = GatewayProcess::start_with(
                b,
                brokers,
                BASELINE_BASE,
                BASELINE_ADMIN,
                "baseline",
                Some((BASELINE_MIRROR_BASE, MIRROR_TOPICS, None)),
            )?;
            rt.block_on(p.wait_ready(Duration::from_secs(60)))?;
            Some(p)
        }
        None => None,
    };
    let relay = RelayProcess::start(RELAY_BASE, brokers)?;
    let (peer, peer_error) = if opts.peer {
        match peer::build().and_then(|cp| PeerProcess::start(&cp, brokers, PEER_BASE)) {
            Ok(p) => (Some(p), None),
            Err(e) => {
                eprintln!("peer proxy unavailable: {e}");
                (None, Some(e))
            }
        }
    } else {
        (None, Some("disabled with --no-peer".to_string()))
    };
    let mut modes = vec![
        Mode {
            name: "direct",
            bootstrap: direct.to_string(),
            pid: None,
        },
        Mode {
            name: "relay",
            bootstrap: format!("127.0.0.1:{RELAY_BASE}"),
            pid: Some(relay.pid()),
        },
        Mode {
            name: "gateway",
            bootstrap: format!("127.0.0.1:{GATEWAY_BASE}"),
            pid: Some(gateway.pid()),
        },
        Mode {
            name: "gateway-mirror",
            bootstrap: format!("127.0.0.1:{GATEWAY_MIRROR_BASE}"),
            pid: Some(gateway.pid()),
        },
        Mode {
            name: "gateway-forward",
            bootstrap: format!("127.0.0.1:{GATEWAY_FORWARD_BASE}"),
            pid: Some(gateway.pid()),
        },
    ];
    if let Some(b) = &baseline {
        modes.push(Mode {
            name: "baseline",
            bootstrap: format!("127.0.0.1:{BASELINE_BASE}"),
            pid: Some(b.pid()),
        });
        modes.push(Mode {
            name: "baseline-mirror",
            bootstrap: format!("127.0.0.1:{BASELINE_MIRROR_BASE}"),
            pid: Some(b.pid()),
        });
    }
    if let Some(p) = &peer {
        modes.push(Mode {
            name: "peer",
            bootstrap: p.bootstrap.clone(),
            pid: Some(p.pid()),
        });
    }

    let result = measure(
        rt,
        &modes,
        runs,
        records,
        rate_seconds,
        warm_topic,
        sat_topic,
        rate_topic,
    );
    let (sat, lat, cpu50) = match result {
        Ok(r) => r,
        Err(e) => {
            gateway.print_log_tail();
            if let Some(b) = &baseline {
                b.print_log_tail();
            }
            return Err(e);
        }
    };
    let rss = |pid: u32| peak_rss_kib(pid).map(|k| round2(k as f64 / 1024.0));
    let gateway_rss = rss(gateway.pid());
    let relay_rss = rss(relay.pid());
    let peer_rss = peer.as_ref().and_then(|p| rss(p.pid()));
    let baseline_rss = baseline.as_ref().and_then(|p| rss(p.pid()));
    drop(baseline);
    drop(peer);
    drop(relay);
    drop(gateway);

    let names: Vec<&'static str> = modes.iter().map(|m| m.name).collect();
    Ok(crate::proxy_report::report(
        &names,
        &sat,
        &lat,
        &cpu50,
        records,
        rate_seconds,
        runs,
        gateway_rss,
        relay_rss,
        peer_rss,
        baseline_rss,
        peer_error,
    ))
}

#[allow(clippy::too_many_arguments)]
fn measure(
    rt: &tokio::runtime::Runtime,
    modes: &[Mode],
    runs: usize,
    records: u64,
    rate_seconds: u64,
    warm_topic: &dyn Fn(&str) -> String,
    sat_topic: &dyn Fn(&str, usize) -> String,
    rate_topic: &dyn Fn(&str) -> String,
) -> Result<(SatTable, LatTable, Cpu50), String> {
    // Warm-up: every path once (JIT of the peer, connection pools, page cache of the brokers).
    for m in modes {
        produce(&m.bootstrap, &warm_topic(m.name), 20_000, -1)?;
    }
    // 1. Saturation.
    let mut sat: SatTable = BTreeMap::new();
    for i in 0..runs {
        for m in rotated(modes, i) {
            let topic = sat_topic(m.name, i);
            let meter = m.pid.map(CpuMeter::start);
            let produce = produce(&m.bootstrap, &topic, records, -1)?;
            let consume_mb_per_s = consume(&m.bootstrap, &topic, records)?;
            let cpu_s = meter.map(|c| c.stop());
            eprintln!(
                "saturation {i} {:>7}: produce {:.1} MB/s ({:.0} rec/s), consume {:.1} MB/s{}",
                m.name,
                produce.mb_per_s,
                produce.records_per_s,
                consume_mb_per_s,
                cpu_s
                    .map(|c| format!(", proxy CPU {c:.2} s"))
                    .unwrap_or_default()
            );
            sat.entry(m.name).or_default().push(Saturation {
                produce,
                consume_mb_per_s,
                cpu_s,
            });
        }
    }
    let direct_rate = median(
        sat.get("direct")
            .map(|v| v.iter().map(|s| s.produce.records_per_s).collect())
            .unwrap_or_default(),
    );
    if !(direct_rate.is_finite() && direct_rate > 0.0) {
        return Err("no direct saturation rate measured".into());
    }
    // 2. Fixed rates.
    let mut lat: LatTable = BTreeMap::new();
    let mut cpu50: Cpu50 = BTreeMap::new();
    for pct in RATES {
        let rate = direct_rate * pct as f64 / 100.0;
        for i in 0..runs {
            for m in rotated(modes, i) {
                let meter = m.pid.map(CpuMeter::start);
                let r = rt.block_on(latency::fixed_rate(
                    &m.bootstrap,
                    &rate_topic(m.name),
                    rate,
                    WARMUP,
                    rate_seconds,
                ))?;
                if let (Some(c), 50) = (meter, pct) {
                    cpu50.entry(m.name).or_default().push((
                        c.stop(),
                        (r.records * RECORD_SIZE) as f64 / (1024.0 * 1024.0),
                    ));
                }
                eprintln!(
                    "rate {pct}% ({rate:.0} rec/s) {i} {:>7}: p50 {:.3} ms p99 {:.3} ms p99.9 {:.3} ms ({} requests)",
                    m.name, r.p50_ms, r.p99_ms, r.p999_ms, r.requests
                );
                lat.entry((m.name, pct)).or_default().push(r);
            }
        }
    }
    Ok((sat, lat, cpu50))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::median;

    #[test]
    fn parses_the_producer_perf_summary() {
        let out = "5000 records sent, 1000.0 records/sec (0.98 MB/sec), 3.1 ms avg latency, 180.0 ms max latency.\n\
                   50000 records sent, 24509.8 records/sec (23.94 MB/sec), 12.34 ms avg latency, 250.00 ms max latency, 5 ms 50th, 30 ms 95th, 41 ms 99th, 50 ms 99.9th.";
        let r = parse_producer(out).unwrap();
        assert_eq!(
            r,
            ProduceRun {
                records_per_s: 24509.8,
                mb_per_s: 23.94,
                p50_ms: 5.0,
                p99_ms: 41.0,
                p999_ms: 50.0
            }
        );
    }

    #[test]
    fn parses_the_consumer_perf_csv() {
        let out = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n\
                   2026-11-29 08:00:00:000, 2026-11-29 08:00:03:000, 48.8281, 16.2760, 50000, 16666.6667, 300, 2700, 18.0845, 18518.5185";
        assert_eq!(parse_consumer(out), Some(18.0845));
    }

    #[test]
    fn median_of_even_and_odd_lengths() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn every_repetition_starts_with_another_mode() {
        let modes = ["direct", "relay", "gateway", "peer"];
        let order = |i| rotated(&modes, i).copied().collect::<Vec<_>>();
        assert_eq!(order(0), ["direct", "relay", "gateway", "peer"]);
        assert_eq!(order(1), ["relay", "gateway", "peer", "direct"]);
        assert_eq!(order(5), ["relay", "gateway", "peer", "direct"]);
    }
}
