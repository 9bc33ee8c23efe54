//! Shared harness for the integration tests: real Kafka clusters from `integration/rig`,
//! topics, Kafka tools and rdkafka producer/consumer helpers.
//!
//! # Clusters
//! - [`cluster`]`("source" | "destination" | "third" | "secure" | "authz")` returns the bootstrap string of a
//!   running cluster (comma-separated when it has several brokers, e.g.
//!   `"127.0.0.1:29092,127.0.0.1:29094"`; take the first entry if a single address is needed).
//!   For `secure` this is its PLAINTEXT listener; its SSL / SASL listeners, CA and SCRAM users
//!   are printed by `integration/rig secure-info` (`KEY=VALUE` lines). `authz` is a second
//!   authorizer-enabled cluster (PLAINTEXT: a super user), the source of the ACL sync tests.
//!   The first call per process and cluster uses, in order:
//!   1. `MIRRORGATE_TEST_SOURCE` / `MIRRORGATE_TEST_DESTINATION` / `MIRRORGATE_TEST_THIRD` /
//!      `MIRRORGATE_TEST_SECURE` (point the tests at an existing cluster),
//!   2. a cluster already started by `integration/rig up` (`rig status`),
//!   3. `integration/rig up NAME --owner-pid <this process>`: the rig's watchdog stops that
//!      cluster when the test process exits (also after a panic or Ctrl-C).
//!
//!   Each cluster is started at most once per process (parallel tests wait for it). A test that
//!   cannot get its cluster panics with the reason; nothing is silently skipped.
//! - [`destination_brokers`]: node id → address of the destination's live brokers (metadata).
//!
//! # Topics and tools
//! - [`unique_topic`], [`create_topic`] (optional per-partition leader assignment),
//!   [`create_topic_with_assignment`] (full replica lists), [`partition_leaders`].
//! - [`rig`] runs `integration/rig ARGS` (bounded); [`rig_java`] runs a Kafka tool class on the
//!   rig classpath (`integration/rig java CLASS ARGS`), killed after [`TOOL_TIMEOUT`].
//!   [`run_with_timeout`] does the same for any `Command`.
//!
//! # Clients (bootstrap is a parameter, so the same helpers run through the gateway)
//! - [`produce_keyed`]: idempotent (acks=all) librdkafka producer, `n` keyed records
//!   (`key-{i}` / `value-{i}`), waits for every ack, returns the acks in send order.
//! - [`consume_group`]: consumer-group reader from the earliest offset until `n` records (then
//!   [`CONSUME_GRACE`] more, so extras show) or a timeout; records grouped per partition.
//! - [`assert_same_per_partition`]: acks vs. consumed records, counts and per-partition order.
//!
//! # Share groups
//! - [`ShareGroupsEnabled`] (`share.version=1` on a cluster while held, counted across tests),
//!   [`ShareGroupsDeleted`] (a test's share groups removed at its end) and [`share_consume`]
//!   (the Java share consumer), in `share.rs`.
//!
//! Every helper bounds its time and panics with context on failure. The sync helpers use no
//! async runtime of the caller (admin calls run on a private runtime in a helper thread), so they
//! can be called from `#[test]` and from `#[tokio::test]` alike (they block the calling thread).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::ClientContext;

mod share;
pub use share::{share_consume, ShareGroupsDeleted, ShareGroupsEnabled};

/// Bound for `rig up` (cold start may fetch the jars first).
pub const RIG_UP_TIMEOUT: Duration = Duration::from_secs(300);
/// Bound for other rig commands.
pub const RIG_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound for a Kafka tool run through [`rig_java`].
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(180);
/// Bound for metadata/admin operations.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Repository root (the crate's manifest dir).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Path of the `integration/rig` script.
pub fn rig_path() -> PathBuf {
    repo().join("integration").join("rig")
}

// ------------------------------------------------------------------ processes

/// Run `cmd` with piped stdout/stderr; kill it and panic if it runs longer than `timeout`.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Output {
    let desc = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {desc}: {e}"));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let stdout = out_t.join().unwrap_or_default();
                let stderr = err_t.join().unwrap_or_default();
                panic!(
                    "{desc} timed out after {timeout:?} and was killed\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
                    tail_text(&stdout, 30),
                    tail_text(&stderr, 30)
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("waiting for {desc}: {e}"),
        }
    };
    Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// The last `n` lines of some output, lossily decoded.
pub fn tail_text(bytes: &[u8], n: usize) -> String {
    let s = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `integration/rig ARGS` with extra environment variables, bounded by `timeout`.
pub fn rig_env(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let mut cmd = Command::new(rig_path());
    cmd.args(args).current_dir(repo());
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_timeout(cmd, timeout)
}

/// `integration/rig ARGS` (generic; bounded by [`RIG_TIMEOUT`], `up` by [`RIG_UP_TIMEOUT`]).
pub fn rig(args: &[&str]) -> Output {
    let t = if args.first() == Some(&"up") {
        RIG_UP_TIMEOUT
    } else {
        RIG_TIMEOUT
    };
    rig_env(args, &[], t)
}

/// Run a Kafka tool class with the rig's classpath (`integration/rig java CLASS ARGS`),
/// killed (and the test panics) after [`TOOL_TIMEOUT`]. The exit status is not checked.
pub fn rig_java(class: &str, args: &[&str]) -> Output {
    rig_java_env(class, args, &[])
}

/// [`rig_java`] with extra environment variables for the program.
pub fn rig_java_env(class: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = vec!["java", class];
    all.extend_from_slice(args);
    rig_env(&all, env, TOOL_TIMEOUT)
}

/// Panic with the output unless the command succeeded.
pub fn expect_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({})\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
        out.status,
        tail_text(&out.stdout, 40),
        tail_text(&out.stderr, 40)
    );
}

/// Parse `rig status` / `rig up` output lines `NAME=addr[,addr]`.
pub fn parse_status(stdout: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.trim().split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ------------------------------------------------------------------ clusters

fn slot(name: &str) -> Arc<OnceLock<String>> {
    static SLOTS: OnceLock<Mutex<HashMap<String, Arc<OnceLock<String>>>>> = OnceLock::new();
    let map = SLOTS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(name.to_string()).or_default().clone()
}

/// Bootstrap string of a running cluster (`source`, `destination`, `third`, `secure` or `authz`); see
/// module doc.
pub fn cluster(name: &str) -> String {
    crate::gw::install_panic_hook();
    assert!(
        matches!(
            name,
            "source" | "destination" | "third" | "secure" | "authz"
        ),
        "unknown cluster {name:?}"
    );
    let slot = slot(name);
    slot.get_or_init(|| locate_or_start(name)).clone()
}

fn locate_or_start(name: &str) -> String {
    let var = format!("MIRRORGATE_TEST_{}", name.to_uppercase());
    if let Ok(v) = std::env::var(&var) {
        if !v.trim().is_empty() {
            return v.trim().to_string();
        }
    }
    let st = rig(&["status"]);
    expect_success("integration/rig status", &st);
    if let Some(addr) = parse_status(&st.stdout).remove(name) {
        return addr;
    }
    let pid = std::process::id().to_string();
    let t0 = Instant::now();
    let out = rig(&["up", name, "--owner-pid", &pid]);
    assert!(
        out.status.success(),
        "cannot get Kafka cluster {name:?}: `integration/rig up {name}` failed ({}); set {var} to use an \
         existing cluster.\n--- stderr (tail) ---\n{}",
        out.status,
        tail_text(&out.stderr, 60)
    );
    let addr = parse_status(&out.stdout).remove(name).unwrap_or_else(|| {
        panic!(
            "`integration/rig up {name}` printed no status line for it:\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    eprintln!(
        "harness: started cluster {name} at {addr} in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    addr
}

/// Node id → `host:port` of the destination's live brokers (from metadata).
pub fn destination_brokers() -> Vec<(i32, String)> {
    brokers(&cluster("destination"))
}

/// Node id → `host:port` of the live brokers of any cluster (from metadata), sorted by id.
pub fn brokers(bootstrap: &str) -> Vec<(i32, String)> {
    let c = metadata_client(bootstrap);
    let md = c
        .fetch_metadata(None, ADMIN_TIMEOUT)
        .unwrap_or_else(|e| panic!("metadata from {bootstrap}: {e}"));
    let mut v: Vec<(i32, String)> = md
        .brokers()
        .iter()
        .map(|b| (b.id(), format!("{}:{}", b.host(), b.port())))
        .collect();
    v.sort();
    v
}

// ------------------------------------------------------------------ topics

/// A topic name unique per run and call: `{prefix}-{unix millis}-{pid}-{counter}`.
pub fn unique_topic(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{ms}-{}-{n}", std::process::id())
}

/// Run a future to completion on a private runtime in a helper thread (works whether or not
/// the caller is inside a tokio runtime).
fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime")
                .block_on(f)
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Create `topic` with `partitions` partitions, replication factor 1. With `assignment`, partition
/// `i` is placed on broker `assignment[i]` (so a test can spread leaders over both destination
/// brokers). Waits until metadata shows a leader for every partition.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32, assignment: Option<&[i32]>) {
    match assignment {
        None => create_topic_inner(bootstrap, topic, partitions, TopicReplication::Fixed(1)),
        Some(a) => {
            assert_eq!(
                a.len() as i32,
                partitions,
                "assignment must name one broker per partition"
            );
            let lists: Vec<Vec<i32>> = a.iter().map(|b| vec![*b]).collect();
            let refs: Vec<&[i32]> = lists.iter().map(|v| v.as_slice()).collect();
            create_topic_inner(
                bootstrap,
                topic,
                partitions,
                TopicReplication::Variable(&refs),
            );
        }
    }
}

/// Create `topic` with an explicit replica list per partition (first replica = preferred leader).
pub fn create_topic_with_assignment(bootstrap: &str, topic: &str, replicas: &[&[i32]]) {
    create_topic_inner(
        bootstrap,
        topic,
        replicas.len() as i32,
        TopicReplication::Variable(replicas),
    );
}

fn create_topic_inner(bootstrap: &str, topic: &str, partitions: i32, repl: TopicReplication<'_>) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "10000")
        .create()
        .unwrap_or_else(|e| panic!("admin client for {bootstrap}: {e}"));
    let new_topic = NewTopic::new(topic, partitions, repl);
    let opts = AdminOptions::new()
        .request_timeout(Some(ADMIN_TIMEOUT))
        .operation_timeout(Some(ADMIN_TIMEOUT));
    let res = block_on(admin.create_topics([&new_topic], &opts))
        .unwrap_or_else(|e| panic!("create topic {topic} on {bootstrap}: {e}"));
    for r in res {
        if let Err((name, code)) = r {
            panic!("create topic {name} on {bootstrap}: {code:?}");
        }
    }
    let deadline = Instant::now() + ADMIN_TIMEOUT;
    loop {
        let leaders = try_partition_leaders(bootstrap, topic);
        if let Ok(l) = &leaders {
            if l.len() == partitions as usize && l.values().all(|b| *b >= 0) {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "topic {topic} on {bootstrap}: no leader for every partition after {ADMIN_TIMEOUT:?} (last: {leaders:?})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metadata_client(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "10000")
        .create()
        .unwrap_or_else(|e| panic!("client for {bootstrap}: {e}"))
}

pub fn try_partition_leaders(bootstrap: &str, topic: &str) -> Result<BTreeMap<i32, i32>, String> {
    let c = metadata_client(bootstrap);
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| format!("topic {topic} not in metadata"))?;
    if let Some(e) = t.error() {
        return Err(format!("topic error {e:?}"));
    }
    Ok(t.partitions()
        .iter()
        .map(|p| (p.id(), p.leader()))
        .collect())
}

/// Partition → leader broker id of `topic` (panics after [`ADMIN_TIMEOUT`]).
/// The address of the broker leading `topic`-`partition` (for reads and writes that bypass
/// the gateway).
pub fn leader_addr(bootstrap: &str, topic: &str, partition: i32) -> String {
    let leader = partition_leaders(bootstrap, topic)[&partition];
    brokers(bootstrap)
        .into_iter()
        .find(|(n, _)| *n == leader)
        .expect("leader address")
        .1
}

pub fn partition_leaders(bootstrap: &str, topic: &str) -> BTreeMap<i32, i32> {
    let deadline = Instant::now() + ADMIN_TIMEOUT;
    loop {
        match try_partition_leaders(bootstrap, topic) {
            Ok(l) if !l.is_empty() => return l,
            other => assert!(
                Instant::now() < deadline,
                "metadata of {topic} on {bootstrap}: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ------------------------------------------------------------------ producer

/// One acknowledged record: index in send order, key, partition and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub index: usize,
    pub key: String,
    pub partition: i32,
    pub offset: i64,
}

#[derive(Default)]
struct AckCollector {
    acks: Mutex<Vec<Acked>>,
    errors: Mutex<Vec<String>>,
}

struct AckContext(Arc<AckCollector>);

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = Box<usize>;

    fn delivery(&self, r: &DeliveryResult<'_>, index: Box<usize>) {
        match r {
            Ok(m) => {
                let key = m
                    .key()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default();
                self.0
                    .acks
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Acked {
                        index: *index,
                        key,
                        partition: m.partition(),
                        offset: m.offset(),
                    });
            }
            Err((e, _)) => self
                .0
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("record {}: {e}", *index)),
        }
    }
}

/// Produce `n` records `key-{i}` → `value-{i}` with an idempotent (acks=all) librdkafka producer
/// and wait for every acknowledgement (bounded by `60 s + n/100 ms`). `extra` overrides producer
/// config. Panics on any delivery error. Returns the acks sorted by index (send order).
pub fn produce_keyed(bootstrap: &str, topic: &str, n: usize, extra: &[(&str, &str)]) -> Vec<Acked> {
    let (acks, errors) = produce_keyed_outcomes(bootstrap, topic, n, extra);
    assert!(
        errors.is_empty(),
        "{} of {n} records to {topic} on {bootstrap} failed, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    acks
}

/// [`produce_keyed`], returning what was acknowledged and what failed (refused or timed out)
/// instead of panicking on a failure: the acks sorted by index, and the errors.
pub fn produce_keyed_outcomes(
    bootstrap: &str,
    topic: &str,
    n: usize,
    extra: &[(&str, &str)],
) -> (Vec<Acked>, Vec<String>) {
    let collector = Arc::new(AckCollector::default());
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "60000");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let producer: BaseProducer<AckContext> = cfg
        .create_with_context(AckContext(collector.clone()))
        .unwrap_or_else(|e| panic!("producer for {bootstrap}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_millis(n as u64 / 100);
    for i in 0..n {
        let key = format!("key-{i}");
        let value = format!("value-{i}");
        let mut rec = BaseRecord::with_opaque_to(topic, Box::new(i))
            .key(&key)
            .payload(&value);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    assert!(
                        Instant::now() < deadline,
                        "producing to {topic} on {bootstrap}: queue still full at record {i}"
                    );
                    rec = r;
                    producer.poll(Duration::from_millis(20));
                }
                Err((e, _)) => panic!("producing record {i} to {topic} on {bootstrap}: {e}"),
            }
        }
        if i % 1000 == 999 {
            producer.poll(Duration::ZERO);
        }
    }
    loop {
        producer.poll(Duration::from_millis(50));
        let done = collector
            .acks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
            + collector
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len();
        if done >= n {
            break;
        }
        if Instant::now() >= deadline {
            panic!(
                "producing to {topic} on {bootstrap}: only {done} of {n} deliveries reported before the deadline \
                 (in flight: {})",
                producer.in_flight_count()
            );
        }
    }
    let errors = std::mem::take(&mut *collector.errors.lock().unwrap_or_else(|p| p.into_inner()));
    let mut acks = std::mem::take(&mut *collector.acks.lock().unwrap_or_else(|p| p.into_inner()));
    acks.sort_by_key(|a| a.index);
    (acks, errors)
}

// ------------------------------------------------------------------ consumer

/// One consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub offset: i64,
    pub key: Option<String>,
    pub value: Option<String>,
}

/// How long [`consume_group`] keeps reading after the `n`-th record, so that records past the
/// expected ones (a duplicate at the end of the last partition read) are returned too.
pub const CONSUME_GRACE: Duration = Duration::from_secs(2);

/// Read `topic` with consumer group `group` from the earliest offset until `n` records arrived or
/// `timeout` passed (then returns what it has; callers assert counts), and once `n` arrived,
/// [`CONSUME_GRACE`] longer: records beyond the `n` expected are returned as well, so a caller
/// asserting an exact count or content sees a trailing duplicate. Records grouped per
/// partition, in the order received (= offset order). `extra` overrides consumer config.
pub fn consume_group(
    bootstrap: &str,
    topic: &str,
    group: &str,
    n: usize,
    timeout: Duration,
    extra: &[(&str, &str)],
) -> BTreeMap<i32, Vec<Consumed>> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("session.timeout.ms", "10000");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let consumer: BaseConsumer = cfg
        .create()
        .unwrap_or_else(|e| panic!("consumer for {bootstrap}: {e}"));
    consumer
        .subscribe(&[topic])
        .unwrap_or_else(|e| panic!("subscribe to {topic}: {e}"));
    let mut deadline = Instant::now() + timeout;
    let mut out: BTreeMap<i32, Vec<Consumed>> = BTreeMap::new();
    let mut count = 0;
    let mut grace_started = false;
    while Instant::now() < deadline {
        if count >= n && !grace_started {
            grace_started = true;
            deadline = Instant::now() + CONSUME_GRACE;
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                out.entry(m.partition()).or_default().push(Consumed {
                    offset: m.offset(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
                });
                count += 1;
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => eprintln!("harness: consumer {group} on {bootstrap}: {e}"),
        }
    }
    out
}

/// Assert that `consumed` holds exactly the acknowledged records: same count, and per partition
/// the same keys at the same offsets, in offset order, with send order preserved.
pub fn assert_same_per_partition(acks: &[Acked], consumed: &BTreeMap<i32, Vec<Consumed>>) {
    let total: usize = consumed.values().map(Vec::len).sum();
    assert_eq!(
        total,
        acks.len(),
        "consumed {total} records, produced {}",
        acks.len()
    );
    let mut produced: BTreeMap<i32, Vec<&Acked>> = BTreeMap::new();
    for a in acks {
        produced.entry(a.partition).or_default().push(a);
    }
    for (p, list) in produced.iter_mut() {
        list.sort_by_key(|a| a.offset);
        let idx: Vec<usize> = list.iter().map(|a| a.index).collect();
        assert!(
            idx.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: acked offsets are not in send order"
        );
    }
    let produced_parts: Vec<i32> = produced.keys().copied().collect();
    let consumed_parts: Vec<i32> = consumed.keys().copied().collect();
    assert_eq!(produced_parts, consumed_parts, "partitions differ");
    for (p, list) in &produced {
        let got = &consumed[p];
        let want: Vec<(i64, Option<String>)> = list
            .iter()
            .map(|a| (a.offset, Some(a.key.clone())))
            .collect();
        let have: Vec<(i64, Option<String>)> =
            got.iter().map(|c| (c.offset, c.key.clone())).collect();
        if want != have {
            let first = want
                .iter()
                .zip(have.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(want.len().min(have.len()));
            panic!(
                "partition {p}: consumed records differ from acks at position {first}: want {:?}, have {:?}",
                want.get(first),
                have.get(first)
            );
        }
    }
}

// ------------------------------------------------------------------ Java verifiable clients

/// JSON objects, one per line of a tool's output (other lines skipped).
pub fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A VerifiableProducer properties file in `dir`: idempotent, acks=all, one record per batch,
/// sends given up after 20 s.
pub fn idempotent_producer_props(dir: &std::path::Path) -> std::path::PathBuf {
    let props = dir.join("p.properties");
    std::fs::write(
        &props,
        "enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=0\nbatch.size=1\ndelivery.timeout.ms=20000\nrequest.timeout.ms=5000\n",
    )
    .expect("props");
    props
}

/// Produce `n` records with VerifiableProducer; (partition, offset) → value of each ack.
pub fn verifiable_produce(
    bootstrap: &str,
    topic: &str,
    n: usize,
    props: &std::path::Path,
) -> (BTreeMap<(i32, i64), String>, std::process::Output) {
    let out = verifiable_producer(bootstrap, topic, n, None, props);
    (verifiable_acks(&out), out)
}

/// VerifiableProducer of `n` records (acks=all) with `props`, at most `per_second` records a
/// second when given; its output (the acks: [`verifiable_acks`]).
pub fn verifiable_producer(
    bootstrap: &str,
    topic: &str,
    n: usize,
    per_second: Option<u32>,
    props: &std::path::Path,
) -> std::process::Output {
    let n = n.to_string();
    let rate = per_second.map(|r| r.to_string());
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--max-messages",
        &n,
    ];
    if let Some(rate) = &rate {
        args.extend(["--throughput", rate.as_str()]);
    }
    args.extend([
        "--acks",
        "-1",
        "--producer.config",
        props.to_str().expect("utf-8 path"),
    ]);
    rig_java("org.apache.kafka.tools.VerifiableProducer", &args)
}

/// (partition, offset) → value of every record VerifiableProducer reported acknowledged.
pub fn verifiable_acks(out: &Output) -> BTreeMap<(i32, i64), String> {
    let mut acked = BTreeMap::new();
    for e in json_lines(&out.stdout) {
        if e["name"] == "producer_send_success" {
            acked.insert(
                (
                    e["partition"].as_i64().unwrap_or(-1) as i32,
                    e["offset"].as_i64().unwrap_or(-1),
                ),
                e["value"].as_str().unwrap_or_default().to_string(),
            );
        }
    }
    acked
}

/// Consume `n` records with VerifiableConsumer (group `<topic>-group`, from the earliest
/// offset); (partition, offset) → value of each record. Fails the test when the tool fails.
pub fn verifiable_consume(
    bootstrap: &str,
    topic: &str,
    n: usize,
    props: &std::path::Path,
) -> BTreeMap<(i32, i64), String> {
    let n = n.to_string();
    let group = format!("{topic}-group");
    let out = rig_java(
        "org.apache.kafka.tools.VerifiableConsumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group-id",
            &group,
            "--max-messages",
            &n,
            "--reset-policy",
            "earliest",
            "--verbose",
            "--consumer.config",
            props.to_str().expect("utf-8 path"),
        ],
    );
    expect_success("VerifiableConsumer through the gateway", &out);
    json_lines(&out.stdout)
        .into_iter()
        .filter(|e| e["name"] == "record_data")
        .map(|e| {
            (
                (
                    e["partition"].as_i64().unwrap_or(-1) as i32,
                    e["offset"].as_i64().unwrap_or(-1),
                ),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

// ------------------------------------------------------------------ stopped nodes

/// A rig node stopped for a test (`integration/rig stop-node`) and started again when dropped
/// (`start-node`). A failed restart fails the test (unless it is already failing, then it is
/// printed): a node left down would break every later test on that cluster.
pub struct StoppedNode {
    cluster: &'static str,
    node: &'static str,
}

impl StoppedNode {
    /// Stop `node` of `cluster` (`rig stop-node`, a clean shutdown); panics when the rig cannot.
    pub fn stop(cluster: &'static str, node: &'static str) -> StoppedNode {
        StoppedNode::by("stop-node", cluster, node)
    }

    /// Kill `node` of `cluster` (`rig kill-node`, SIGKILL); panics when the rig cannot.
    pub fn kill(cluster: &'static str, node: &'static str) -> StoppedNode {
        StoppedNode::by("kill-node", cluster, node)
    }

    fn by(how: &str, cluster: &'static str, node: &'static str) -> StoppedNode {
        // The guard exists before the command runs: a node the command half-stopped is
        // started again too.
        let guard = StoppedNode { cluster, node };
        expect_success(
            &format!("integration/rig {how} {cluster} {node}"),
            &rig(&[how, cluster, node]),
        );
        guard
    }
}

impl Drop for StoppedNode {
    fn drop(&mut self) {
        let out = rig(&["start-node", self.cluster, self.node]);
        if !out.status.success() {
            let msg = format!(
                "restarting {} node {} failed ({}): {}",
                self.cluster,
                self.node,
                out.status,
                tail_text(&out.stderr, 20)
            );
            if std::thread::panicking() {
                eprintln!("{msg}");
            } else {
                panic!("{msg}");
            }
        }
    }
}

/// `init_transactions` on `producer`, calling it again while librdkafka says the error is
/// retriable (a transaction coordinator still loading its partitions on a busy machine answers
/// so), for up to 90 s; panics with the last error after that or on any other error.
pub fn init_transactions<C: ProducerContext>(producer: &impl Producer<C>) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match producer.init_transactions(Duration::from_secs(30)) {
            Ok(()) => return,
            Err(KafkaError::Transaction(e)) if e.is_retriable() && Instant::now() < deadline => {
                eprintln!("init transactions: {e}; calling it again");
            }
            Err(e) => panic!("init transactions: {e}"),
        }
    }
}

// ------------------------------------------------------------------ clusters of one test

/// A rig instance of one test alone: its own run directory (a temp directory) and every port
/// shifted by `port_offset` (`MIRRORGATE_RIG_DIR`, `MIRRORGATE_RIG_PORT_OFFSET`). The shared
/// clusters are never touched. `rig down` and the directory removed when dropped.
pub struct IsolatedRig {
    dir: tempfile::TempDir,
    offset: String,
}

impl IsolatedRig {
    /// `port_offset` must be unique among the tests (and leave the shared rig's ports and the
    /// ephemeral range alone).
    pub fn new(port_offset: u16) -> IsolatedRig {
        IsolatedRig {
            dir: tempfile::Builder::new()
                .prefix("mirrorgate-rig-test-")
                .tempdir()
                .expect("tempdir"),
            offset: port_offset.to_string(),
        }
    }

    /// Its run directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// `integration/rig ARGS` on it (`up` bounded by [`RIG_UP_TIMEOUT`], the rest by
    /// [`RIG_TIMEOUT`]).
    pub fn rig(&self, args: &[&str]) -> Output {
        let dir = self.dir.path().to_string_lossy().into_owned();
        let timeout = if args.first() == Some(&"up") {
            RIG_UP_TIMEOUT
        } else {
            RIG_TIMEOUT
        };
        rig_env(
            args,
            &[
                ("MIRRORGATE_RIG_DIR", &dir),
                ("MIRRORGATE_RIG_PORT_OFFSET", &self.offset),
            ],
            timeout,
        )
    }
}

impl Drop for IsolatedRig {
    fn drop(&mut self) {
        let out = self.rig(&["down"]);
        if !out.status.success() {
            eprintln!(
                "stopping the test's own rig failed: {}",
                tail_text(&out.stderr, 20)
            );
        }
    }
}

/// A one-broker Kafka cluster of one test alone: the rig's `third` layout on an [`IsolatedRig`]
/// (as the consumer-failover benchmark runs its source). It starts with fresh storage (no
/// `__consumer_offsets` yet) and the test may kill it. Stopped when dropped.
pub struct OwnCluster {
    rig: IsolatedRig,
    pub bootstrap: String,
}

impl OwnCluster {
    /// Start it on ports shifted by `port_offset` (see [`IsolatedRig::new`]).
    pub fn start(port_offset: u16) -> OwnCluster {
        let rig = IsolatedRig::new(port_offset);
        let pid = std::process::id().to_string();
        let out = rig.rig(&["up", "third", "--owner-pid", &pid]);
        expect_success("integration/rig up third (own cluster)", &out);
        let bootstrap = parse_status(&out.stdout)
            .remove("third")
            .expect("the own cluster's address");
        OwnCluster { rig, bootstrap }
    }

    /// SIGKILL its broker: the cluster stops answering (connections refused).
    pub fn kill(&self) {
        expect_success(
            "integration/rig kill-node third 1 (own cluster)",
            &self.rig.rig(&["kill-node", "third", "1"]),
        );
    }
}
