//! `mirrorgate-bench load`: many concurrent client connections with steady produce and consume
//! through a gateway running as its own process, while `/readyz` is polled and the gateway's
//! resident memory is sampled; one deliberately slow consumer asks for large fetches and never
//! reads the answers.
//!
//! Each connection is one [`KafkaClient`] to the gateway port of its partition's leader and
//! alternates a Produce (acks=1, one batch of 5 × 100-byte records) and a Fetch (from where it
//! last read, no wait) at `RATE` requests per second. Latency is measured per request as the
//! client sees it (send to decoded response). An error is a failed request (connection, timeout,
//! decode) or a non-zero partition error code; after one the connection reconnects.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

mod clients;

use clients::{connection, leaders, prefill, slow_consumer};

use crate::process::{gateway_binary, readyz, rss_kib, GatewayProcess};
use crate::Clusters;

/// Requests per second per connection (produce and fetch alternate).
const RATE: f64 = 2.0;
/// Topics × partitions the connections are spread over (replication factor 1, so the
/// partitions' leaders are spread over both destination brokers).
const TOPICS: usize = 4;
const PARTITIONS: i32 = 6;
/// Client listener ports of the gateway (node n on BASE + n - 1) and its admin port.
const BASE: u16 = 17392;
const ADMIN: u16 = BASE + 10;
/// The slow consumer: fetches of up to this many bytes, this many of them, never read.
const SLOW_MAX_BYTES: i32 = 16 * 1024 * 1024;
const SLOW_FETCHES: usize = 64;
/// Data written to the slow consumer's partition before the run (1 MiB batches).
const SLOW_PREFILL_MIB: usize = 32;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The soft limit on open files, from /proc/self/limits: `(soft, hard)`.
fn nofile_limits() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line.split_whitespace().skip(3).map(|w| {
        if w == "unlimited" {
            Some(u64::MAX)
        } else {
            w.parse().ok()
        }
    });
    Some((nums.next()??, nums.next()??))
}

/// Makes sure this process (and the gateway it starts, which inherits the limit) may open
/// enough files: the bench needs one per connection, the gateway two. When the soft limit is
/// too low but the hard limit allows it, re-runs itself through `sh -c 'ulimit -n N; exec …'`;
/// otherwise fails with what to do.
fn ensure_fd_limit(connections: usize) -> Result<(), String> {
    let need = (2 * connections + 512) as u64;
    let Some((soft, hard)) = nofile_limits() else {
        return Ok(()); // not Linux /proc: try anyway
    };
    if soft >= need {
        return Ok(());
    }
    if hard < need || std::env::var_os("MIRRORGATE_BENCH_FD_RAISED").is_some() {
        return Err(format!(
            "open-file limit too low for {connections} connections: soft {soft}, hard {hard}, \
             need {need} (the gateway holds two descriptors per connection). Raise it, e.g. \
             `ulimit -n {need}` (hard limit: /etc/security/limits.conf), or use --connections"
        ));
    }
    eprintln!("raising the open-file limit from {soft} to {need}");
    let exe = std::env::current_exe().map_err(err)?;
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {need} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env("MIRRORGATE_BENCH_FD_RAISED", "1")
        .status()
        .map_err(err)?;
    std::process::exit(status.code().unwrap_or(1));
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    f64::from(sorted[idx.min(sorted.len() - 1)]) / 1000.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub fn run(
    quick: bool,
    connections: Option<usize>,
    seconds: Option<u64>,
) -> Result<serde_json::Value, String> {
    let connections = connections.unwrap_or(if quick { 200 } else { 1000 }).max(1);
    let seconds = seconds.unwrap_or(if quick { 30 } else { 180 }).max(5);
    ensure_fd_limit(connections)?;
    let bin = gateway_binary()?;
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let destination = crate::cluster_brokers(&addrs, "destination")?;
    let mut gateway = GatewayProcess::start(&bin, &destination, BASE, ADMIN, "load")?;
    let pid = gateway.pid();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let mut result = rt.block_on(drive(pid, connections, seconds));
    // What the clients cannot see: a panic in the gateway (a connection task that panics just
    // closes its connection) and a gateway that died after the clients finished.
    let alive = matches!(gateway.child.try_wait(), Ok(None));
    let log = std::fs::read_to_string(gateway.dir.join("gateway.log")).unwrap_or_default();
    let panics = log.matches("panicked at").count();
    if let Ok(v) = result.as_mut() {
        v["gateway_alive_at_end"] = json!(alive);
        v["gateway_panics"] = json!(panics);
    }
    if result.is_err() || !alive || panics > 0 {
        gateway.print_log_tail();
    }
    if let Some(at) = log.find("panicked at") {
        let first: Vec<&str> = log[at..].lines().take(2).collect();
        eprintln!(
            "gateway panicked ({panics} times), first: {}",
            first.join(" ")
        );
    }
    drop(gateway);
    result
}

async fn drive(pid: u32, connections: usize, seconds: u64) -> Result<serde_json::Value, String> {
    let bootstrap = format!("127.0.0.1:{BASE}");
    // Ready (destination discovered, listeners bound).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !readyz(ADMIN).await {
        if Instant::now() > deadline {
            return Err("gateway not ready on /readyz within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let topics: Vec<String> = (0..TOPICS)
        .map(|i| format!("bench-load-{stamp}-{i}"))
        .collect();
    let slow_topic = format!("bench-load-{stamp}-slow");
    let mut all_topics = topics.clone();
    all_topics.push(slow_topic.clone());
    let specs: Vec<(String, i32)> = all_topics
        .iter()
        .map(|n| (n.clone(), if *n == slow_topic { 1 } else { PARTITIONS }))
        .collect();
    crate::topics::create(&bootstrap, &specs).await?;
    // Prefill the slow consumer's partition so that its fetches have data to return; retried
    // (with fresh leaders) while a just-created partition has no leader yet.
    let deadline = Instant::now() + Duration::from_secs(90);
    let parts = loop {
        let parts = leaders(&bootstrap, &all_topics).await?;
        match prefill(&parts, &slow_topic).await {
            Ok(()) => break parts,
            Err(e) if Instant::now() < deadline => {
                eprintln!("prefill: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(format!("prefill failed: {e}")),
        }
    };
    let nodes: std::collections::BTreeSet<&str> = parts.iter().map(|p| p.2.as_str()).collect();
    eprintln!(
        "{} partitions over {} gateway ports ({}); {connections} connections for {seconds} s",
        parts.len(),
        nodes.len(),
        nodes.iter().copied().collect::<Vec<_>>().join(", ")
    );
    let slow_addr = parts
        .iter()
        .find(|p| p.0 == slow_topic)
        .map(|p| p.2.clone())
        .ok_or("slow topic has no leader")?;
    let load_parts: Vec<(String, i32, String)> =
        parts.into_iter().filter(|p| p.0 != slow_topic).collect();
    let rss_before = rss_kib(pid).unwrap_or(0);

    let stop = Arc::new(AtomicBool::new(false));
    // Memory sampler.
    let rss_max = Arc::new(AtomicU64::new(rss_before));
    let rss_samples = Arc::new(std::sync::Mutex::new(Vec::<(f64, u64)>::new()));
    let t_start = Instant::now();
    let sampler = {
        let (stop, rss_max, samples) = (stop.clone(), rss_max.clone(), rss_samples.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Some(kib) = rss_kib(pid) {
                    rss_max.fetch_max(kib, Ordering::Relaxed);
                    if n % 20 == 0 {
                        samples
                            .lock()
                            .expect("samples")
                            .push((t_start.elapsed().as_secs_f64(), kib));
                    }
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    // Readiness poller.
    let ready_polls = Arc::new(AtomicU64::new(0));
    let ready_failures = Arc::new(AtomicU64::new(0));
    // Time of each /readyz answer (a probe gives up, and counts as a failure, after 1 s).
    let ready_us = Arc::new(std::sync::Mutex::new(Vec::<u32>::new()));
    let poller = {
        let (stop, polls, failures, times) = (
            stop.clone(),
            ready_polls.clone(),
            ready_failures.clone(),
            ready_us.clone(),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                polls.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                if readyz(ADMIN).await {
                    times
                        .lock()
                        .expect("readyz times")
                        .push(t0.elapsed().as_micros() as u32);
                } else {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    // The slow consumer first, so that it is stuck for the whole run.
    let (slow_stream, slow_sent) = slow_consumer(&slow_addr, &slow_topic).await?;

    let connected = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_secs(2);
    let end = start + Duration::from_secs(seconds);
    let mut tasks = Vec::with_capacity(connections);
    for id in 0..connections {
        let (topic, partition, addr) = load_parts[id % load_parts.len()].clone();
        tasks.push(tokio::spawn(connection(
            id,
            addr,
            topic,
            partition,
            start,
            end,
            connected.clone(),
        )));
    }
    let mut produce_us = Vec::new();
    let mut fetch_us = Vec::new();
    let mut errors = 0u64;
    let mut first_errors = Vec::new();
    let mut consumed = 0u64;
    for t in tasks {
        let st = t.await.map_err(err)?;
        produce_us.extend(st.produce_us);
        fetch_us.extend(st.fetch_us);
        errors += st.errors;
        consumed += st.records_consumed;
        for e in st.first_errors {
            if first_errors.len() < 5 {
                first_errors.push(e);
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Is the slow consumer still connected (the gateway may also have closed it)?
    let slow_open = {
        let mut probe = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(200), slow_stream.peek(&mut probe)).await {
            Ok(Ok(n)) => n > 0,
            Ok(Err(_)) => false,
            Err(_) => true, // nothing to read yet, still open
        }
    };
    drop(slow_stream);
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let _ = poller.await;
    let rss_after = rss_kib(pid).unwrap_or(0);

    crate::topics::delete(&bootstrap, &all_topics).await;

    if !first_errors.is_empty() {
        eprintln!("first errors: {first_errors:?}");
    }
    let mut all: Vec<u32> = produce_us.iter().chain(fetch_us.iter()).copied().collect();
    all.sort_unstable();
    produce_us.sort_unstable();
    fetch_us.sort_unstable();
    let requests = all.len() as u64;
    let mut ready_us = std::mem::take(&mut *ready_us.lock().expect("readyz times"));
    ready_us.sort_unstable();
    let mib = |kib: u64| round2(kib as f64 / 1024.0);
    let samples: Vec<serde_json::Value> = rss_samples
        .lock()
        .expect("samples")
        .iter()
        .map(|(t, k)| json!([round2(*t), mib(*k)]))
        .collect();
    Ok(json!({
        "bench": "load",
        "connections": connections,
        "connected": connected.load(Ordering::Relaxed),
        "seconds": round2(elapsed),
        "rate_per_connection": RATE,
        "topics": TOPICS,
        "partitions": load_parts.len(),
        "requests": requests,
        "requests_per_s": round2(requests as f64 / elapsed),
        "records_consumed": consumed,
        "errors": errors,
        "p50_ms": round2(percentile(&all, 50.0)),
        "p99_ms": round2(percentile(&all, 99.0)),
        "p999_ms": round2(percentile(&all, 99.9)),
        "max_ms": round2(percentile(&all, 100.0)),
        "produce_p99_ms": round2(percentile(&produce_us, 99.0)),
        "fetch_p99_ms": round2(percentile(&fetch_us, 99.0)),
        "rss_mib": mib(rss_max.load(Ordering::Relaxed)),
        "rss_before_mib": mib(rss_before),
        "rss_after_mib": mib(rss_after),
        "rss_samples_mib": samples,
        "readyz_polls": ready_polls.load(Ordering::Relaxed),
        "readyz_failures": ready_failures.load(Ordering::Relaxed),
        "readyz_p99_ms": round2(percentile(&ready_us, 99.0)),
        "readyz_max_ms": round2(percentile(&ready_us, 100.0)),
        "slow_consumer_fetches": slow_sent,
        "slow_consumer_fetches_intended": SLOW_FETCHES,
        "slow_consumer_fetch_max_bytes": SLOW_MAX_BYTES,
        "slow_consumer_open_at_end": slow_open,
    }))
}
