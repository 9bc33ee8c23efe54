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

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, DeleteTopicsRequest, FetchRequest, MetadataRequest,
    ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use mirrorgate::client::KafkaClient;
use mirrorgate::protocol::batch::BatchWalker;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

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

fn record_batch(records: usize, value_size: usize, salt: u64) -> Bytes {
    crate::batch::encode(
        records,
        &Bytes::from(vec![b'x'; value_size]),
        |i| Some(Bytes::from(format!("k{salt}-{i}"))),
        None,
    )
}

fn produce_request(topic: &str, partition: i32, batch: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])])
}

/// Partition leaders as the gateway reports them: `(topic, partition, gateway address)`.
async fn leaders(bootstrap: &str, topics: &[String]) -> Result<Vec<(String, i32, String)>, String> {
    let mut c = KafkaClient::connect(bootstrap, REQUEST_TIMEOUT)
        .await
        .map_err(err)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let req = MetadataRequest::default().with_topics(Some(
            topics
                .iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                })
                .collect(),
        ));
        let resp = c.send(&req, 12).await.map_err(err)?;
        let brokers: std::collections::HashMap<i32, String> = resp
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect();
        let mut out = Vec::new();
        let mut complete = resp.topics.len() == topics.len();
        for t in &resp.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            complete &= t.error_code == 0 && !t.partitions.is_empty();
            for p in &t.partitions {
                match brokers.get(&p.leader_id.0) {
                    Some(addr) if p.error_code == 0 => {
                        out.push((name.clone(), p.partition_index, addr.clone()))
                    }
                    _ => complete = false,
                }
            }
        }
        if complete {
            out.sort();
            return Ok(out);
        }
        if Instant::now() > deadline {
            return Err(format!("partition leaders not known after 60 s: {resp:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[derive(Default)]
struct ConnStats {
    /// Request latencies in microseconds (produce, fetch).
    produce_us: Vec<u32>,
    fetch_us: Vec<u32>,
    errors: u64,
    first_errors: Vec<String>,
    records_consumed: u64,
}

impl ConnStats {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_errors.len() < 3 {
            self.first_errors.push(what);
        }
    }
}

/// One client connection: produce and fetch alternately at `RATE` until `end`.
async fn connection(
    id: usize,
    addr: String,
    topic: String,
    partition: i32,
    start: Instant,
    end: Instant,
    connected: Arc<AtomicU64>,
) -> ConnStats {
    let mut st = ConnStats::default();
    // Spread the first requests over one period.
    let period = Duration::from_secs_f64(1.0 / RATE);
    let phase = period.mul_f64((id as f64 * 0.618_034).fract());
    tokio::time::sleep_until((start + phase).into()).await;
    let mut client: Option<KafkaClient> = None;
    let mut offset: i64 = -1;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut produce_next = true;
    let mut counted = false;
    while Instant::now() < end {
        tick.tick().await;
        if Instant::now() >= end {
            break;
        }
        if client.is_none() {
            match KafkaClient::connect(&addr, REQUEST_TIMEOUT).await {
                Ok(c) => {
                    client = Some(c);
                    if !counted {
                        connected.fetch_add(1, Ordering::Relaxed);
                        counted = true;
                    }
                }
                Err(e) => {
                    st.error(format!("connect: {e}"));
                    continue;
                }
            }
        }
        let c = client.as_mut().expect("connected");
        let t0 = Instant::now();
        let ok = if produce_next || offset < 0 {
            produce_next = false;
            let req = produce_request(&topic, partition, record_batch(5, 100, id as u64));
            match c.send(&req, 9).await {
                Ok(resp) => {
                    st.produce_us.push(t0.elapsed().as_micros() as u32);
                    let p = resp
                        .responses
                        .iter()
                        .flat_map(|t| t.partition_responses.iter())
                        .next();
                    match p {
                        Some(p) if p.error_code == 0 => {
                            if offset < 0 {
                                offset = p.base_offset;
                            }
                            true
                        }
                        Some(p) => {
                            st.error(format!("produce error code {}", p.error_code));
                            true
                        }
                        None => {
                            st.error("produce response without the partition".into());
                            true
                        }
                    }
                }
                Err(e) => {
                    st.error(format!("produce: {e}"));
                    false
                }
            }
        } else {
            produce_next = true;
            match c
                .fetch_partition(&topic, partition, offset, 64 * 1024)
                .await
            {
                Ok(p) => {
                    st.fetch_us.push(t0.elapsed().as_micros() as u32);
                    for (h, _) in BatchWalker::fetched(&p.records).map_while(Result::ok) {
                        if h.last_offset() >= offset {
                            st.records_consumed +=
                                (h.last_offset() + 1 - offset.max(h.base_offset)) as u64;
                            offset = h.last_offset() + 1;
                        }
                    }
                    true
                }
                Err(e) => {
                    st.error(format!("fetch: {e}"));
                    // A partition-level error leaves the connection usable.
                    matches!(e, mirrorgate::client::PartitionRequestError::Partition(_))
                }
            }
        };
        if !ok {
            client = None;
        }
    }
    st
}

/// Writes `SLOW_FETCHES` large Fetch requests for `topic`-0 and never reads a response.
/// Returns the connection (kept open until the end of the run) and the requests written.
async fn slow_consumer(addr: &str, topic: &str) -> Result<(TcpStream, usize), String> {
    let mut s = TcpStream::connect(addr).await.map_err(err)?;
    let mut written = 0;
    for i in 0..SLOW_FETCHES {
        let req = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(SLOW_MAX_BYTES)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(0)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(SLOW_MAX_BYTES)])]);
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(12)
            .with_correlation_id(i as i32 + 1)
            .with_client_id(Some(StrBytes::from_static_str("slow-consumer")));
        let mut out = BytesMut::new();
        out.put_i32(0);
        header
            .encode(&mut out, FetchRequest::header_version(12))
            .map_err(err)?;
        req.encode(&mut out, 12).map_err(err)?;
        let len = (out.len() - 4) as i32;
        out[0..4].copy_from_slice(&len.to_be_bytes());
        // A few hundred bytes each: far below what the socket buffers hold, so this does not
        // block even though nothing is read.
        match tokio::time::timeout(Duration::from_secs(2), s.write_all(&out)).await {
            Ok(Ok(())) => written += 1,
            _ => break,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((s, written))
}

/// Writes `SLOW_PREFILL_MIB` 1-MiB batches to `slow_topic`-0 through its leader's gateway port.
async fn prefill(parts: &[(String, i32, String)], slow_topic: &str) -> Result<(), String> {
    let addr = parts
        .iter()
        .find(|p| p.0 == slow_topic)
        .map(|p| p.2.clone())
        .ok_or("slow topic has no leader")?;
    let mut c = KafkaClient::connect(&addr, Duration::from_secs(60))
        .await
        .map_err(err)?;
    for i in 0..SLOW_PREFILL_MIB {
        let batch = record_batch(15, 64 * 1024, i as u64);
        let resp = c
            .send(&produce_request(slow_topic, 0, batch), 9)
            .await
            .map_err(err)?;
        if let Some(p) = resp
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.error_code != 0)
        {
            return Err(format!(
                "produce to {slow_topic}-0 answered error {}",
                p.error_code
            ));
        }
    }
    Ok(())
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
    {
        let mut c = KafkaClient::connect(&bootstrap, REQUEST_TIMEOUT)
            .await
            .map_err(err)?;
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(60_000)
            .with_topics(
                all_topics
                    .iter()
                    .map(|n| {
                        CreatableTopic::default()
                            .with_name(TopicName(StrBytes::from_string(n.clone())))
                            .with_num_partitions(if *n == slow_topic { 1 } else { PARTITIONS })
                            .with_replication_factor(1)
                    })
                    .collect(),
            );
        let resp = c.send(&req, 5).await.map_err(err)?;
        if let Some(t) = resp.topics.iter().find(|t| t.error_code != 0) {
            return Err(format!(
                "cannot create {}: error {}",
                t.name.0, t.error_code
            ));
        }
    }
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

    // Clean up the topics (best effort).
    if let Ok(mut c) = KafkaClient::connect(&bootstrap, REQUEST_TIMEOUT).await {
        let req = DeleteTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topic_names(
                all_topics
                    .iter()
                    .map(|t| TopicName(StrBytes::from_string(t.clone())))
                    .collect(),
            );
        let _ = c.send(&req, 4).await;
    }

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
