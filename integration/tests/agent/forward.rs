//! Forward mode (issue 33): applications connect to a mirror's forward listener from day one;
//! a planned switchover moves them from the source to the destination without an error, a
//! loss, a duplicate or a reordering, their producer sessions kept.

use std::collections::BTreeSet;

use super::*;

/// `agent_config` with a forward listener of its own ports on mirror `name`; its bootstrap.
pub(crate) fn forward_config(name: &str, topics: &[&str], source: &str) -> (Config, String) {
    let mut cfg = agent_config(name, topics, source);
    let (forward, bootstrap) = crate::gw::forward_listener(10_000);
    cfg.mirrors[0].forward = Some(forward);
    (cfg, bootstrap)
}

/// Wait until the agent mirrors every partition of `topic` (the mirror has partitions to switch).
fn wait_mirroring(gw: &TestGateway, name: &str, topic: &str, partitions: i32) {
    wait_for("the agent mirroring", Duration::from_secs(60), || {
        (0..partitions).all(|p| agent_map_next(gw, name, topic, p).is_some_and(|m| m.0 > 0))
    });
}

/// Switch mirror `name` over once the agent mirrors its partitions; wait until it is through.
pub(super) fn switch_over(gw: &TestGateway, name: &str, topic: &str, partitions: i32) {
    wait_mirroring(gw, name, topic, partitions);
    crate::failover::switchover(&gw.admin(), name);
}

/// The keys of a partition's data records, in log order.
pub(super) fn keys(bootstrap: &str, topic: &str, partition: i32) -> Vec<String> {
    read_log(bootstrap, topic, partition)
        .records
        .into_iter()
        .filter_map(|r| r.1)
        .collect()
}

/// The switchover's dry run of mirror `name` (asserted `200`).
fn dry_run(gw: &TestGateway, name: &str) -> serde_json::Value {
    let path = format!("/v1/mirrors/{name}/switchover?dry_run=true");
    let (status, body) = admin_call(&gw.admin(), Method::POST, &path, None);
    assert_eq!(status, 200, "dry run: {body}");
    serde_json::from_str(&body).expect("json")
}

/// The producer ids and epochs the brokers of `bootstrap` hold for `topic`-`partition`
/// (DescribeProducers; the barrier's and markers' -1 left out).
pub(super) fn producer_ids(bootstrap: &str, topic: &str, partition: i32) -> Vec<(i64, i32)> {
    broker_producers(
        &mut RawConn::connect(&leader_addr(bootstrap, topic, partition)),
        topic,
        partition,
    )
    .iter()
    .filter(|r| r.0 >= 0)
    .map(|r| (r.0, r.1))
    .collect()
}

/// The one producer that wrote `topic`-`partition` on the source went on on the destination
/// under the id and epoch the source gave it (an epoch bump, or a new id, would show here).
fn assert_session_kept(source: &str, destination: &str, topic: &str, partition: i32) {
    let app = producer_ids(source, topic, partition);
    assert_eq!(
        app.len(),
        1,
        "partition {partition}: one producer wrote the source: {app:?}"
    );
    let after = producer_ids(destination, topic, partition);
    assert!(
        after.contains(&app[0]),
        "partition {partition}: the destination goes on with the source's producer {:?}: {after:?}",
        app[0]
    );
    assert!(
        after
            .iter()
            .filter(|r| r.0 == app[0].0)
            .all(|r| r.1 == app[0].1),
        "partition {partition}: the producer kept its epoch: {after:?}"
    );
}

#[test]
fn an_idempotent_producer_through_the_forward_listener_goes_on_across_a_switchover_without_an_error(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward");
    harness::create_topic(&source, &topic, 2, None);
    let (cfg, forward) = forward_config("fwd", &[&topic], &source);
    let gw = TestGateway::start(cfg);
    // The application knows only the forward listener.
    let writer = SourceWriter::start(&forward, &topic, "app", 1_000_000, 300);
    wait_for(
        "records through the forward listener",
        Duration::from_secs(60),
        || writer.acked() >= 300,
    );
    let on_source: usize = (0..2).map(|p| keys(&source, &topic, p).len()).sum();
    assert!(
        on_source >= 300,
        "before the switchover the records land on the source ({on_source})"
    );

    switch_over(&gw, "fwd", &topic, 2);
    let at_switch = writer.acked();
    wait_for(
        "the route on the destination",
        Duration::from_secs(10),
        || {
            gw.metrics()
                .contains("mirrorgate_forward_side{mirror=\"fwd\",side=\"destination\"} 1")
        },
    );
    let (status, body) = admin_call(&gw.admin(), Method::GET, "/v1/mirrors/fwd/forward", None);
    assert_eq!(status, 200, "{body}");
    let route: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(route["side"], "destination", "{body}");
    assert_eq!(route["caught_up"], true, "{body}");
    let pause_ms = route["last_pause_ms"].as_i64().expect("a pause");
    eprintln!("forward: the switch held the clients {pause_ms} ms");
    wait_for(
        "records after the switchover",
        Duration::from_secs(60),
        || writer.acked() >= at_switch + 300,
    );
    // No error reached the application, and every record sent was acknowledged.
    let acked = writer.finish(true);

    let source_after: usize = (0..2).map(|p| keys(&source, &topic, p).len()).sum();
    eprintln!("forward: {acked} acknowledged, {at_switch} at the switchover, {source_after} on the source");
    assert_acknowledged_once_in_order(&destination, &topic, "app", acked);
    // The session went on: the destination knows the producer under the id and epoch the
    // source gave it (an epoch bump, or a new id, would show here), and the records after the
    // switchover are its.
    for p in 0..2 {
        assert_session_kept(&source, &destination, &topic, p);
    }
    assert!(
        acked > source_after,
        "records after the switchover went to the destination only ({acked} acknowledged, {source_after} on the source)"
    );
}

/// Every record a writer had acknowledged is on the destination once, in its order per
/// partition (its keys `{prefix}-{n}` ascend).
pub(super) fn assert_acknowledged_once_in_order(
    destination: &str,
    topic: &str,
    prefix: &str,
    acked: usize,
) {
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    for p in 0..2 {
        let numbers: Vec<usize> = keys(destination, topic, p)
            .iter()
            .filter_map(|k| k.strip_prefix(&format!("{prefix}-"))?.parse().ok())
            .collect();
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: {prefix}'s records in its order"
        );
        for n in numbers {
            *seen.entry(n).or_insert(0) += 1;
        }
    }
    let missing: Vec<usize> = (0..acked).filter(|n| !seen.contains_key(n)).collect();
    let doubled: Vec<usize> = seen
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(n, _)| *n)
        .collect();
    assert!(
        missing.is_empty(),
        "{prefix}: acknowledged records missing on the destination: {missing:?}"
    );
    assert!(
        doubled.is_empty(),
        "{prefix}: records written twice: {doubled:?}"
    );
}

/// The transactions the failover of mirror `name` aborted, over its partitions.
fn aborted_by_failover(admin: &str, name: &str) -> Vec<serde_json::Value> {
    partitions_json(admin, name)
        .iter()
        .flat_map(|p| {
            p["transactions_aborted"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// A consumer group member polling the forward listener in a thread, committing after every
/// batch it polled, until stopped: the keys it got (re-reads included) and the errors it saw.
pub(super) struct GroupReader {
    stop: Arc<AtomicBool>,
    /// The distinct keys read so far.
    distinct: Arc<std::sync::Mutex<BTreeSet<String>>>,
    thread: Option<std::thread::JoinHandle<(Vec<String>, Vec<String>)>>,
}

impl GroupReader {
    pub(super) fn start(bootstrap: &str, topic: &str, group: &str) -> GroupReader {
        use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .set("session.timeout.ms", "10000")
            .create()
            .expect("consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        let stop = Arc::new(AtomicBool::new(false));
        let distinct = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
        let (s, d) = (stop.clone(), distinct.clone());
        let thread = std::thread::spawn(move || {
            let (mut keys, mut errors) = (Vec::new(), Vec::new());
            while !s.load(Ordering::SeqCst) {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
                        d.lock().expect("keys").insert(key.clone());
                        keys.push(key);
                        // Commit what was read; a failed commit only means more re-reading.
                        let _ = consumer.commit_message(&m, CommitMode::Sync);
                    }
                    Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => {}
                    Some(Err(e)) => errors.push(e.to_string()),
                }
            }
            (keys, errors)
        });
        GroupReader {
            stop,
            distinct,
            thread: Some(thread),
        }
    }

    /// How many distinct keys it has read so far.
    pub(super) fn read(&self) -> usize {
        self.distinct.lock().expect("keys").len()
    }

    pub(super) fn finish(mut self) -> (Vec<String>, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().expect("thread").join().expect("reader")
    }
}

impl Drop for GroupReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The cluster id a Metadata answer of `bootstrap` carries.
fn cluster_id(bootstrap: &str) -> Option<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("client");
    c.client()
        .fetch_metadata(None, Duration::from_secs(10))
        .ok()?;
    c.client().fetch_cluster_id(Duration::from_secs(10))
}

#[test]
fn consumer_groups_through_the_forward_listener_resume_on_the_destination_with_nothing_skipped() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("forward-group");
    harness::create_topic(&source, &topic, 2, None);
    let (cfg, forward) = forward_config("fwdg", &[&topic], &source);
    let gw = TestGateway::start(cfg);
    let before = cluster_id(&forward).expect("cluster id before");
    assert_eq!(
        before, "mirrorgate-forward-fwdg",
        "the forward listener's own cluster id"
    );
    let writer = SourceWriter::start(&forward, &topic, "app", 1_000_000, 200);
    let group = format!("fwd-group-{}", std::process::id());
    let reader = GroupReader::start(&forward, &topic, &group);
    let mut java = JsonClient::java_follower(&forward, &topic, &format!("{group}-java"), "classic");
    let mut kip848 =
        JsonClient::java_follower(&forward, &topic, &format!("{group}-kip848"), "consumer");
    wait_for("records produced", Duration::from_secs(60), || {
        writer.acked() >= 300
    });
    switch_over(&gw, "fwdg", &topic, 2);
    let at_switch = writer.acked();
    wait_for(
        "records after the switchover",
        Duration::from_secs(60),
        || writer.acked() >= at_switch + 200,
    );
    let acked = writer.finish(true);
    // Give the readers the time to get to the end (what one lacks after a minute, the
    // assertions below name).
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline
        && (reader.read() < acked || [&java, &kip848].iter().any(|m| m.distinct_keys() < acked))
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (keys, errors) = reader.finish();
    // The Java members, of a classic group and of a KIP-848 one (its assignments come by topic
    // id from the group coordinator, the destination's after the switch).
    for (name, member) in [("classic", &mut java), ("KIP-848", &mut kip848)] {
        assert!(
            member.running(),
            "the Java {name} consumer is still running: no exception reached the application"
        );
        let keys: BTreeSet<String> = member
            .take_events()
            .iter()
            .filter_map(|e| e["k"].as_str().map(str::to_string))
            .collect();
        let skipped: Vec<usize> = (0..acked)
            .filter(|n| !keys.contains(&format!("app-{n}")))
            .collect();
        assert!(
            skipped.is_empty(),
            "records the Java {name} group never read: {skipped:?}"
        );
    }
    assert_eq!(
        cluster_id(&forward).as_deref(),
        Some(before.as_str()),
        "the cluster id did not change with the upstream"
    );
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for k in &keys {
        let n: usize = k.trim_start_matches("app-").parse().expect("app key");
        *counts.entry(n).or_default() += 1;
    }
    let skipped: Vec<usize> = (0..acked).filter(|n| !counts.contains_key(n)).collect();
    let reread: usize = counts.values().map(|c| c - 1).sum();
    eprintln!(
        "forward group: {acked} acknowledged, {} read, {reread} read again, errors {errors:?}",
        keys.len()
    );
    assert!(
        skipped.is_empty(),
        "records the group never read: {skipped:?}"
    );
}

/// A client process printing one JSON line per event (`integration/clients`); killed on drop.
pub(crate) struct JsonClient {
    name: String,
    child: std::process::Child,
    events: Arc<Mutex<Vec<serde_json::Value>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl JsonClient {
    fn spawn(name: &str, mut cmd: std::process::Command) -> Self {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        JsonClient {
            name: name.to_string(),
            child,
            events,
            reader: Some(reader),
        }
    }

    /// A producer of the chaos run's clients (Java, librdkafka or kafka-python), idempotent with
    /// acks=all, sending `NAME-N` at 100 records a second until told to stop.
    pub(crate) fn producer(library: &str, python: &str, bootstrap: &str, topic: &str) -> Self {
        Self::producer_with(library, python, bootstrap, topic, &[])
    }

    /// [`Self::producer`] with the Java producer's `KEY=VALUE` properties set (`java` only).
    pub(crate) fn producer_with(
        library: &str,
        python: &str,
        bootstrap: &str,
        topic: &str,
        java_props: &[&str],
    ) -> Self {
        assert!(
            java_props.is_empty() || library == "java",
            "properties for {library}"
        );
        let mut cmd = if library == "java" {
            let mut c = std::process::Command::new(harness::rig_path());
            c.arg("java")
                .arg(harness::repo().join("integration/clients/java/ChaosProducer.java"));
            c
        } else {
            let mut c = std::process::Command::new(python);
            c.arg(harness::repo().join("integration/clients/python_chaos_produce.py"))
                .arg(library);
            c
        };
        cmd.args([bootstrap, topic, library, "100"])
            .args(java_props);
        Self::spawn(library, cmd)
    }

    /// A Java consumer group member (FollowGroup.java `follow`) of group `protocol` (`classic`
    /// or KIP-848's `consumer`), auto-committing every 500 ms: it exits on any exception the
    /// client throws to the application.
    fn java_follower(bootstrap: &str, topic: &str, group: &str, protocol: &str) -> Self {
        let mut cmd = std::process::Command::new(harness::rig_path());
        cmd.arg("java")
            .arg(harness::repo().join("integration/clients/java/FollowGroup.java"))
            .args(["follow", bootstrap, topic, group, "500", "600000", protocol]);
        Self::spawn("java consumer", cmd)
    }

    /// How many distinct record keys (`k`) its events carry.
    fn distinct_keys(&self) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| e["k"].as_str())
            .collect::<BTreeSet<&str>>()
            .len()
    }

    pub(crate) fn count(&self, event: &str) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["e"] == event)
            .count()
    }

    /// Whether the process is still running.
    pub(crate) fn running(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// Stop (a line "stop"; killed after 60 s), and return its events.
    pub(crate) fn finish(mut self) -> Vec<serde_json::Value> {
        use std::io::Write;
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill()
    }

    /// Kill it now and take its events.
    fn take_events(&mut self) -> Vec<serde_json::Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    /// Kill it now and return its events.
    fn kill(mut self) -> Vec<serde_json::Value> {
        self.take_events()
    }
}

impl Drop for JsonClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn java_librdkafka_and_kafka_python_producers_through_the_forward_listener_see_no_error_across_a_switchover(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-clients");
    harness::create_topic(&source, &topic, 2, None);
    let (cfg, forward) = forward_config("fwdc", &[&topic], &source);
    let gw = TestGateway::start(cfg);
    let runs = three_producers_across(&forward, &topic, || switch_over(&gw, "fwdc", &topic, 2));
    assert_crossed_without_error(&runs, &source, &destination, &topic, 2);
}

/// A switchover that holds the clients longer than their request timeout (its failover held
/// 7 s after fencing; the Java producer gives up on a request after 5 s, closes its connection
/// and sends the request again on a new one): the request the gateway had parked on the
/// connection the client gave up must not reach the destination behind the client's back.
#[test]
fn producers_whose_requests_time_out_during_a_long_switchover_see_no_error_and_lose_nothing() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-slow");
    harness::create_topic(&source, &topic, 2, None);
    let (mut cfg, forward) = forward_config("fwds", &[&topic], &source);
    cfg.mirrors[0].forward.as_mut().expect("forward").hold_ms = 30_000;
    let gw =
        crate::gw::ProcessGateway::start(cfg, &[("MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS", "7000")]);
    let admin = gw.admin();
    let runs = three_producers_across(&forward, &topic, || {
        wait_lag_zero(&admin, "fwds", 2);
        crate::failover::switchover(&admin, "fwds");
    });
    assert_crossed_without_error(&runs, &source, &destination, &topic, 2);
}

/// A forward listener stands for two clusters that give a topic different ids: it offers
/// Produce and Fetch only in the versions that name topics (v12), so that a client's requests
/// mean the same topic after a switch (red before: Produce v13, and each partition's first
/// batch after a switchover was refused with UNKNOWN_TOPIC_ID, the batches pipelined behind
/// it out of sequence). The client listener offers the broker's versions.
#[test]
fn the_forward_listener_offers_produce_and_fetch_in_the_versions_that_name_topics() {
    use crate::psm_differential::RawConn;
    use kafka_protocol::messages::ApiKey;
    let source = harness::cluster("source");
    let topic = harness::unique_topic("forward-versions");
    harness::create_topic(&source, &topic, 1, None);
    let (cfg, forward) = forward_config("fwdv", &[&topic], &source);
    let gw = TestGateway::start(cfg);
    let max = |addr: &str, key: ApiKey| -> i16 {
        RawConn::connect(addr)
            .api_versions()
            .iter()
            .find(|e| e.0 == key as i16)
            .map(|e| e.2)
            .unwrap_or_else(|| panic!("{addr} offers no {key:?}"))
    };
    assert_eq!(max(&forward, ApiKey::Produce), 12);
    assert_eq!(max(&forward, ApiKey::Fetch), 12);
    assert!(
        max(&gw.bootstrap(), ApiKey::Produce) >= 13,
        "the client listener"
    );
}

/// `GET /v1/mirrors/{name}/forward` at `admin` (an empty value when it does not answer JSON).
pub(crate) fn forward_route(admin: &str, name: &str) -> serde_json::Value {
    let path = format!("/v1/mirrors/{name}/forward");
    let (_, body) = crate::gw::admin_call(admin, hyper::Method::GET, &path, None);
    serde_json::from_str(&body).unwrap_or_default()
}

/// The side of mirror `name`'s forward listener (`source`, `holding`, `destination`).
pub(crate) fn forward_side(admin: &str, name: &str) -> String {
    forward_route(admin, name)["side"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Wait until the switchover's dry run of mirror `name` at `admin` shows its `partitions`
/// partitions all mirrored to the source's end.
pub(crate) fn wait_lag_zero(admin: &str, name: &str, partitions: usize) {
    wait_for("every partition mirrored", Duration::from_secs(60), || {
        let (status, body) = crate::gw::admin_call(
            admin,
            hyper::Method::POST,
            &format!("/v1/mirrors/{name}/switchover?dry_run=true"),
            None,
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        status == 200
            && v["partitions"].as_array().is_some_and(|ps| {
                ps.len() == partitions && ps.iter().all(|p| p["lag_records"] == 0)
            })
    });
}

/// A client that gives up on a connection the switchover holds (its request timed out, say)
/// takes what it had sent with it: the gateway does not send it to the destination after the
/// switch, behind what the client sent again on a new connection meanwhile (red before: it
/// did).
#[test]
fn a_request_whose_client_closed_its_connection_during_the_hold_never_reaches_the_destination() {
    use crate::psm_differential::{batch, RawConn};
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-gone");
    harness::create_topic(&source, &topic, 1, None);
    let (cfg, forward) = forward_config("fwdx", &[&topic], &source);
    let release = crate::gw::scratch_dir().join("release");
    let gw = crate::gw::ProcessGateway::start(
        cfg,
        &[(
            "MIRRORGATE_TEST_HOLD_AFTER_FENCE_UNTIL",
            release.to_str().expect("path"),
        )],
    );
    let admin = gw.admin();
    let (code, _) = RawConn::connect(&forward).produce(&topic, 0, batch(-1, -1, -1, 2, "before"));
    assert_eq!(code, 0, "produce through the forward listener");
    wait_lag_zero(&admin, "fwdx", 1);
    // The forward listener's port of the destination's leader of the partition.
    let leader = harness::partition_leaders(&destination, &topic)[&0];
    let port: u16 = forward
        .rsplit_once(':')
        .expect("host:port")
        .1
        .parse()
        .expect("port");
    let leader_port = format!("127.0.0.1:{}", port + leader as u16 - 1);
    let (status, body) = crate::gw::admin_call(
        &admin,
        hyper::Method::POST,
        "/v1/mirrors/fwdx/switchover",
        None,
    );
    assert_eq!(status, 202, "switchover: {body}");
    // Held now (the failover waits after fencing): a client sends a request and gives up.
    let mut gone = RawConn::connect(&leader_port);
    gone.produce_acks_0(&topic, 0, batch(-1, -1, -1, 1, "gave-up"));
    std::thread::sleep(Duration::from_millis(500));
    drop(gone);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&release, b"").expect("release the failover");
    crate::failover::wait_stopped(&admin, "fwdx");
    wait_for(
        "the forward listener on the destination",
        Duration::from_secs(30),
        || forward_side(&admin, "fwdx") == "destination",
    );
    let (code, _) =
        RawConn::connect(&leader_port).produce(&topic, 0, batch(-1, -1, -1, 1, "after"));
    assert_eq!(code, 0, "produce on the destination after the switch");
    let on_destination = keys(&destination, &topic, 0);
    assert_eq!(
        on_destination,
        vec!["before-0", "before-1", "after-0"],
        "the destination's records"
    );
}

/// Java, librdkafka and kafka-python idempotent producers through `forward` at 100 records/s
/// each: 100 acknowledged each, then `switch`, then 100 more each; their events.
pub(super) fn three_producers_across(
    forward: &str,
    topic: &str,
    switch: impl FnOnce(),
) -> Vec<(String, Vec<serde_json::Value>)> {
    let python = crate::pid_allocator::python_interpreter();
    let producers: Vec<JsonClient> = ["java", "librdkafka", "kafka-python"]
        .iter()
        .map(|lib| JsonClient::producer(lib, &python, forward, topic))
        .collect();
    wait_for(
        "every client acknowledged",
        Duration::from_secs(120),
        || producers.iter().all(|p| p.count("ack") >= 100),
    );
    let epoch_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    let began = epoch_ms();
    switch();
    eprintln!(
        "forward clients: the switchover ran from {began} to {} (ms)",
        epoch_ms()
    );
    let at_switch: Vec<usize> = producers.iter().map(|p| p.count("ack")).collect();
    wait_for(
        "every client acknowledged after the switchover",
        Duration::from_secs(120),
        || {
            producers
                .iter()
                .zip(&at_switch)
                .all(|(p, n)| p.count("ack") >= n + 100)
        },
    );
    producers
        .into_iter()
        .map(|p| (p.name.clone(), p.finish()))
        .collect()
}

/// No error reached the producers of `runs`; every record acknowledged to them is on the
/// destination once, in each producer's order per partition, under the producer ids and epochs
/// the source gave them.
pub(super) fn assert_crossed_without_error(
    runs: &[(String, Vec<serde_json::Value>)],
    source: &str,
    destination: &str,
    topic: &str,
    partitions: i32,
) {
    let mut on_destination: BTreeMap<String, Vec<(i32, usize)>> = BTreeMap::new();
    for p in 0..partitions {
        for k in keys(destination, topic, p) {
            on_destination.entry(k).or_default().push((p, 0));
        }
    }
    // Every client's errors are printed before any assertion: a failure names them all, first
    // lines first (a long panic message is cut in CI's excerpt).
    for (name, events) in runs {
        let errors: Vec<String> = events
            .iter()
            .filter(|e| e["e"] == "err")
            .map(|e| format!("{} at {}: {}", e["k"], e["t"], e["r"]))
            .collect();
        if !errors.is_empty() {
            eprintln!(
                "forward clients: {name}: {} error(s) reached the application, first: {:?}",
                errors.len(),
                &errors[..errors.len().min(3)]
            );
        }
    }
    for (name, events) in runs {
        let errors = events.iter().filter(|e| e["e"] == "err").count();
        assert_eq!(errors, 0, "{name}: errors reached the application (above)");
        let sent: BTreeMap<&str, i64> = events
            .iter()
            .filter(|e| e["e"] == "send")
            .filter_map(|e| Some((e["k"].as_str()?, e["t"].as_i64()?)))
            .collect();
        let acks: Vec<(&str, i64)> = events
            .iter()
            .filter(|e| e["e"] == "ack")
            .filter_map(|e| Some((e["k"].as_str()?, e["t"].as_i64()?)))
            .collect();
        let mut latencies: Vec<i64> = acks
            .iter()
            .filter_map(|(k, t)| Some(t - sent.get(k)?))
            .collect();
        latencies.sort_unstable();
        let pct = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        eprintln!(
            "forward clients: {name}: {} acknowledged, latency p50 {} ms, p99 {} ms, max {} ms",
            acks.len(),
            pct(0.5),
            pct(0.99),
            pct(1.0)
        );
        for (k, _) in &acks {
            let copies = on_destination.get(*k).map_or(0, Vec::len);
            assert_eq!(
                copies, 1,
                "{name}: {k} is on the destination {copies} times"
            );
        }
    }
    // Each partition holds every producer's records in its send order.
    for p in 0..partitions {
        let mut last: BTreeMap<String, usize> = BTreeMap::new();
        for k in keys(destination, topic, p) {
            let (name, n) = k.rsplit_once('-').expect("NAME-N");
            let n: usize = n.parse().expect("N");
            if let Some(prev) = last.insert(name.to_string(), n) {
                assert!(
                    prev < n,
                    "partition {p}: {name} out of order ({prev} then {n})"
                );
            }
        }
    }
    // No producer had to start a new session: the source's producer ids and epochs go on.
    for p in 0..partitions {
        let rows = |cluster: &str| -> Vec<(i64, i32)> {
            broker_producers(
                &mut RawConn::connect(&leader_addr(cluster, topic, p)),
                topic,
                p,
            )
            .into_iter()
            .filter(|r| r.0 >= 0)
            .map(|r| (r.0, r.1))
            .collect()
        };
        let (src, dst) = (rows(source), rows(destination));
        for id in &src {
            assert!(
                dst.contains(id),
                "partition {p}: the destination lacks producer {id:?} of the source: {dst:?}"
            );
        }
        for (pid, epoch) in &dst {
            assert!(
                src.iter().all(|(s, e)| s != pid || e == epoch),
                "partition {p}: producer {pid} changed its epoch to {epoch} ({src:?})"
            );
        }
    }
}

#[test]
fn a_switchover_that_cannot_mirror_the_sources_end_in_time_changes_nothing() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("forward-refused");
    harness::create_topic(&source, &topic, 1, None);
    let (mut cfg, forward) = forward_config("fwdr", &[&topic], &source);
    if let Some(f) = cfg.mirrors[0].forward.as_mut() {
        f.hold_ms = 1000;
    }
    let gw = TestGateway::start(cfg);
    let writer = SourceWriter::start(&forward, &topic, "app", 1_000_000, 200);
    wait_for(
        "records through the forward listener",
        Duration::from_secs(60),
        || writer.acked() >= 100,
    );
    wait_mirroring(&gw, "fwdr", &topic, 1);
    // Paused, the agent copies nothing more: the source runs ahead of the destination.
    let (status, body) = admin_call(&gw.admin(), Method::POST, "/v1/mirrors/fwdr/pause", None);
    assert_eq!(status, 200, "pause: {body}");
    wait_for(
        "the source ahead of the paused agent",
        Duration::from_secs(60),
        || {
            let mirrored = agent_map_next(&gw, "fwdr", &topic, 0).map_or(0, |m| m.0);
            log_end(&source, &topic, 0) >= mirrored + 100
        },
    );
    let dry = dry_run(&gw, "fwdr");
    assert_eq!(dry["side"], "source", "{dry}");
    assert!(dry["forwarded_producers"].as_u64() >= Some(1), "{dry}");
    assert_eq!(dry["transactions_open"], serde_json::json!([]), "{dry}");
    // What the pause would be made of: the source reads (timed), the agent's catch-up, the
    // failover of one partition, within the hold's bound.
    let pause = &dry["expected_pause"];
    assert!(pause["source_read_ms"].is_u64(), "{pause}");
    assert!(pause["catch_up_ms_at_most"].is_u64(), "{pause}");
    assert_eq!(pause["failover_partitions"], 1, "{pause}");
    assert_eq!(pause["bound_ms"], dry["hold_ms"], "{pause}");
    assert!(pause["last_switch_ms"].is_null(), "no switch yet: {pause}");
    // A topic the applications write through the listener that the mirror does not cover is
    // named: it would be absent on the destination.
    let other = harness::unique_topic("forward-uncovered");
    harness::create_topic(&source, &other, 1, None);
    SourceWriter::start(&forward, &other, "other", 20, 200).finish(false);
    wait_for("the uncovered topic named", Duration::from_secs(15), || {
        dry_run(&gw, "fwdr")["uncovered_topics"] == serde_json::json!([other.clone()])
    });

    let (status, body) = admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/fwdr/switchover",
        None,
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("had not mirrored"), "{body}");
    // Nothing changed: the mirror is still PAUSED, and the application goes on on the source.
    let states: Vec<String> = partitions_json(&gw.admin(), "fwdr")
        .iter()
        .map(|p| p["state"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(states, vec!["PAUSED".to_string()]);
    let refused_at = writer.acked();
    wait_for(
        "records after the refused switchover",
        Duration::from_secs(60),
        || writer.acked() >= refused_at + 100,
    );
    let acked = writer.finish(true);
    assert_eq!(
        keys(&source, &topic, 0).len(),
        acked,
        "every record went to the source, once"
    );
    let (status, _) = admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/nosuch/switchover",
        None,
    );
    assert_eq!(status, 404);
}

/// A transactional producer of `bootstrap` (transactional id `PREFIX-PID`) with a transaction
/// open: `txn-0` to `txn-4` written to `topic`, not committed.
fn open_transaction(bootstrap: &str, prefix: &str, topic: &str) -> BaseProducer {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set(
            "transactional.id",
            format!("{prefix}-{}", std::process::id()),
        )
        .create()
        .expect("transactional producer");
    harness::init_transactions(&producer);
    producer.begin_transaction().expect("begin");
    for i in 0..5 {
        let key = format!("txn-{i}");
        producer
            .send(BaseRecord::to(topic).key(&key).payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    producer
}

#[test]
fn a_switchover_is_refused_while_a_transaction_is_open_and_goes_through_once_it_is_committed() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-txn");
    harness::create_topic(&source, &topic, 1, None);
    let (mut cfg, forward) = forward_config("fwdt", &[&topic], &source);
    if let Some(f) = cfg.mirrors[0].forward.as_mut() {
        f.hold_ms = 1500;
    }
    let gw = TestGateway::start(cfg);
    let producer = open_transaction(&forward, "fwd-txn", &topic);
    wait_mirroring(&gw, "fwdt", &topic, 1);
    // The dry run names the open transaction (the preflight of a switchover).
    let dry = dry_run(&gw, "fwdt");
    let body = dry.to_string();
    let open = dry["transactions_open"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(open.len(), 1, "one transaction open: {body}");
    assert!(
        open[0].as_str().unwrap_or_default().contains(&topic),
        "{body}"
    );

    let (status, body) = admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/fwdt/switchover",
        None,
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("transactions are open"), "{body}");
    // The producer goes on on the source: its transaction commits there.
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit after the refused switchover");

    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        let (status, body) = admin_call(
            &gw.admin(),
            Method::POST,
            "/v1/mirrors/fwdt/switchover",
            None,
        );
        if status == 202 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "switchover still refused: {body}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    wait_stopped(&gw.admin(), "fwdt");
    // The committed transaction is on the destination, before the barrier, and nothing was
    // aborted behind the producer's back.
    let committed = keys(&destination, &topic, 0);
    assert_eq!(
        committed.len(),
        5,
        "the transaction's records: {committed:?} ({body})"
    );
    let aborted = aborted_by_failover(&gw.admin(), "fwdt");
    assert!(aborted.is_empty(), "the failover aborted {aborted:?}");
}

/// Runs alone (kills the `third` cluster's broker). The source goes away with two mirrors on it,
/// each with its forward listener and an idempotent librdkafka producer writing through it:
/// - mirror `fwdc`: its producer holds its sends and the agent mirrors all it was acknowledged
///   before the source goes: after the (unplanned) failover the producer goes on on the
///   destination with no error, under its producer id and epoch;
/// - mirror `fwdk`: paused, so the source holds records acknowledged to its producer that the
///   destination lacks: the failover report names them exactly, per producer.
#[test]
fn disruptive_an_unplanned_failover_keeps_whole_forwarded_producers_and_names_what_the_others_lack()
{
    let third = harness::cluster("third");
    let destination = harness::cluster("destination");
    let lost_topic = harness::unique_topic("forward-lost");
    let kept_topic = harness::unique_topic("forward-kept");
    harness::create_topic(&third, &lost_topic, 2, None);
    harness::create_topic(&third, &kept_topic, 2, None);
    let (mut cfg, lost_forward) = forward_config("fwdk", &[&lost_topic], &third);
    let (kept_cfg, kept_forward) = forward_config("fwdc", &[&kept_topic], &third);
    cfg.mirrors.push(kept_cfg.mirrors[0].clone());
    let gw = TestGateway::start(cfg);
    let lossy = SourceWriter::start(&lost_forward, &lost_topic, "lost", 1_000_000, 200);
    let whole = SourceWriter::start(&kept_forward, &kept_topic, "kept", 1_000_000, 200);
    wait_for(
        "records through the forward listeners",
        Duration::from_secs(60),
        || lossy.acked() >= 200 && whole.acked() >= 200,
    );
    wait_mirroring(&gw, "fwdk", &lost_topic, 2);
    wait_mirroring(&gw, "fwdc", &kept_topic, 2);
    let (status, body) = admin_call(&gw.admin(), Method::POST, "/v1/mirrors/fwdk/pause", None);
    assert_eq!(status, 200, "pause: {body}");
    let at_pause = lossy.acked();
    wait_for(
        "records acknowledged by the source after the pause",
        Duration::from_secs(60),
        || lossy.acked() >= at_pause + 300,
    );
    let (_, body) = admin_call(&gw.admin(), Method::GET, "/v1/mirrors/fwdk/forward", None);
    let route: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(
        route["acknowledged_batches_not_mirrored"].as_u64() > Some(0),
        "the route keeps what the paused agent has not mirrored: {body}"
    );
    // The whole producer's application holds its sends; the agent mirrors what it was sent.
    whole.hold(true);
    std::thread::sleep(Duration::from_millis(500));
    wait_caught_up(&gw.admin(), "fwdc", &third, &kept_topic, 2);
    let kept_ids: Vec<(i64, i32)> = (0..2)
        .flat_map(|p| producer_ids(&third, &kept_topic, p))
        .collect();

    let restart = harness::StoppedNode::kill("third", "1");
    std::thread::sleep(Duration::from_secs(2));
    failover(&gw.admin(), "fwdk");
    failover(&gw.admin(), "fwdc");
    wait_stopped(&gw.admin(), "fwdk");
    wait_stopped(&gw.admin(), "fwdc");
    wait_for(
        "the routes on the destination",
        Duration::from_secs(10),
        || {
            let m = gw.metrics();
            ["fwdk", "fwdc"].iter().all(|name| {
                m.contains(&format!(
                    "mirrorgate_forward_side{{mirror=\"{name}\",side=\"destination\"}} 1"
                ))
            })
        },
    );
    let whole_acked = writes_on_after_the_failover(whole);
    let lossy_keys = lossy.acked_keys();
    let (lossy_acked, lossy_errors) = lossy.finish_with_errors();
    drop(restart);
    eprintln!(
        "forward kill: whole producer {whole_acked} acknowledged; lossy producer {lossy_acked} acknowledged, errors: {:?}",
        lossy_errors.iter().take(3).collect::<Vec<_>>()
    );

    assert_whole_producer_went_on(&destination, &kept_topic, "kept", &kept_ids, whole_acked);
    let lacking_total = assert_report_names_what_is_lacking(
        &gw.admin(),
        "fwdk",
        &destination,
        (&lost_topic, None),
        &lossy_keys,
    );
    assert!(
        lacking_total >= 300,
        "the paused agent left the records acknowledged after the pause unmirrored ({lacking_total})"
    );
    let whole_report = completed_report(&gw.admin(), "fwdc");
    assert_eq!(
        whole_report["forwarded"]["records"].as_i64(),
        Some(0),
        "the whole producer's mirror lacks nothing: {whole_report}"
    );
}

/// After a failover: `whole`, holding its sends, writes on until 200 more of its records are
/// acknowledged; ended with no error reaching its application. How many were acknowledged.
pub(super) fn writes_on_after_the_failover(whole: SourceWriter) -> usize {
    let at_failover = whole.acked();
    whole.hold(false);
    wait_for(
        "the whole producer's records on the destination after the failover",
        Duration::from_secs(60),
        || whole.acked() >= at_failover + 200,
    );
    whole.finish(true)
}

/// After an unplanned failover: the producer whose records were all mirrored went on on the
/// destination under the ids and epochs the source gave it (`kept_ids`, its 2 partitions), each
/// record (`{prefix}-N`) once and in its order, and every record acknowledged to it is there.
pub(super) fn assert_whole_producer_went_on(
    destination: &str,
    topic: &str,
    prefix: &str,
    kept_ids: &[(i64, i32)],
    acked: usize,
) {
    for p in 0..2 {
        let ids = producer_ids(destination, topic, p);
        // (The failover's barrier adds a producer of its own.)
        assert!(
            kept_ids.iter().any(|k| ids.contains(k)),
            "partition {p}: the destination goes on with the source's producer: {ids:?} (source: {kept_ids:?})"
        );
        assert!(
            ids.iter()
                .filter(|id| kept_ids.iter().any(|k| k.0 == id.0))
                .all(|id| kept_ids.contains(id)),
            "partition {p}: the producer kept its epoch: {ids:?} (source: {kept_ids:?})"
        );
        let numbers: Vec<usize> = keys(destination, topic, p)
            .iter()
            .map(|k| {
                k.trim_start_matches(&format!("{prefix}-"))
                    .parse()
                    .expect("key")
            })
            .collect();
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: the whole producer's records once each, in its order"
        );
    }
    let on_destination: usize = (0..2).map(|p| keys(destination, topic, p).len()).sum();
    assert_eq!(on_destination, acked, "every acknowledged record, once");
}

/// After an unplanned failover of mirror `name`: its report's `forwarded` figures name, in each
/// of `topic`'s 2 partitions, exactly the records of `acked` (partition, key) that the
/// destination lacks, under one producer id; no record is there twice. They say they are exact,
/// or (`inexact`) why they may not be, in words containing it. Their total.
pub(super) fn assert_report_names_what_is_lacking(
    admin: &str,
    name: &str,
    destination: &str,
    (topic, inexact): (&str, Option<&str>),
    acked: &[(i32, String)],
) -> i64 {
    let report = completed_report(admin, name);
    let fwd = &report["forwarded"];
    assert!(
        fwd.is_object(),
        "the report has the forwarded figures: {report}"
    );
    match inexact {
        None => assert!(fwd["inexact"].is_null(), "{fwd}"),
        Some(why) => assert!(
            fwd["inexact"].as_str().is_some_and(|w| w.contains(why)),
            "the figures say why they may be short ({why:?}): {fwd}"
        ),
    }
    let gaps = fwd["producers"].as_array().cloned().unwrap_or_default();
    let ids: BTreeSet<i64> = gaps
        .iter()
        .filter_map(|g| g["producer_id"].as_i64())
        .collect();
    assert_eq!(ids.len(), 1, "one forwarded producer lacks records: {fwd}");
    assert!(
        ids.iter().all(|id| *id >= 0),
        "under its producer id: {fwd}"
    );
    let mut lacking_total = 0;
    for p in 0..2 {
        let on_destination = keys(destination, topic, p);
        let present: BTreeSet<&String> = on_destination.iter().collect();
        assert_eq!(
            present.len(),
            on_destination.len(),
            "partition {p}: no record twice on the destination"
        );
        let lacking = acked
            .iter()
            .filter(|(part, k)| *part == p && !present.contains(k))
            .count() as i64;
        let reported: i64 = gaps
            .iter()
            .filter(|g| g["partition"] == p)
            .map(|g| g["records"].as_i64().unwrap_or(-1))
            .sum();
        eprintln!(
            "{name}: partition {p}: {lacking} acknowledged records lacking, {reported} reported"
        );
        assert_eq!(
            reported, lacking,
            "partition {p}: the report names exactly the acknowledged records the destination lacks: {fwd}"
        );
        lacking_total += lacking;
    }
    assert_eq!(fwd["records"].as_i64(), Some(lacking_total), "{fwd}");
    lacking_total
}

/// The gateway is killed and restarted between the producer's start and the switchover: the
/// producer id the source handed out through the forward listener is restored from the state
/// directory, and the producer still goes on on the destination with its id and epoch.
#[test]
fn a_forwarded_producer_keeps_its_session_across_a_gateway_restart_and_a_switchover() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-restart");
    harness::create_topic(&source, &topic, 1, None);
    let (cfg, forward) = forward_config("fwdrs", &[&topic], &source);
    let mut gw = crate::gw::ProcessGateway::start(cfg, &[]);
    let writer = SourceWriter::start(&forward, &topic, "app", 1_000_000, 200);
    wait_for(
        "records through the forward listener",
        Duration::from_secs(60),
        || writer.acked() >= 300,
    );
    gw.kill9();
    gw.restart(&[]);
    let restarted = writer.acked();
    wait_for(
        "records through the restarted gateway",
        Duration::from_secs(60),
        || writer.acked() >= restarted + 200,
    );
    let (_, body) = gw.call(Method::GET, "/v1/mirrors/fwdrs/forward");
    let route: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(route["forwarded_producers"], 1, "restored: {body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = gw.call(Method::POST, "/v1/mirrors/fwdrs/switchover");
        if status == 202 {
            break;
        }
        assert!(Instant::now() < deadline, "switchover refused: {body}");
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_stopped(&gw.admin(), "fwdrs");
    let at_switch = writer.acked();
    wait_for(
        "records after the switchover",
        Duration::from_secs(60),
        || writer.acked() >= at_switch + 200,
    );
    let acked = writer.finish(true);
    let on_destination = keys(&destination, &topic, 0);
    assert_eq!(
        on_destination.len(),
        acked,
        "every acknowledged record, once"
    );
    assert_session_kept(&source, &destination, &topic, 0);
}

/// A transaction open through the forward listener when a switchover holds it ends on the
/// source: its commit passes the hold, then the switchover goes through, and the failover aborts
/// nothing. After the switch the producer's transactional id is unknown to the destination's
/// coordinator: its next transaction fails, and a new producer with the same id goes on there.
#[test]
fn a_transaction_open_at_the_switchover_commits_on_the_source_and_the_switchover_goes_through() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-txn-end");
    harness::create_topic(&source, &topic, 1, None);
    let (cfg, forward) = forward_config("fwde", &[&topic], &source);
    let gw = TestGateway::start(cfg);
    let txn_id = format!("fwd-txn-end-{}", std::process::id());
    let transactional = || -> BaseProducer {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &forward)
            .set("transactional.id", &txn_id)
            .create()
            .expect("transactional producer");
        harness::init_transactions(&p);
        p
    };
    let producer = transactional();
    let send = |p: &BaseProducer, keys: std::ops::Range<usize>| {
        for i in keys {
            let key = format!("txn-{i}");
            p.send(BaseRecord::to(&topic).key(&key).payload("v"))
                .map_err(|(e, _)| e)
                .expect("send");
        }
        p.flush(Duration::from_secs(30)).expect("flush");
    };
    producer.begin_transaction().expect("begin");
    send(&producer, 0..5);
    wait_mirroring(&gw, "fwde", &topic, 1);

    let admin = gw.admin();
    let call = std::thread::spawn(move || {
        admin_call(&admin, Method::POST, "/v1/mirrors/fwde/switchover", None)
    });
    let route = || forward_route(&gw.admin(), "fwde");
    wait_for("the listener held", Duration::from_secs(10), || {
        route()["side"] == "holding"
    });
    let held = route();
    assert_eq!(held["finishing_transactions"], true, "{held}");
    assert_eq!(
        held["forwarded_transactions_open"].as_array().map(Vec::len),
        Some(1),
        "{held}"
    );
    // The commit passes the hold: the transaction ends on the source.
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit while the switchover holds the listener");
    let (status, body) = call.join().expect("switchover call");
    assert_eq!(status, 202, "switchover: {body}");
    wait_stopped(&gw.admin(), "fwde");
    let committed = keys(&destination, &topic, 0);
    assert_eq!(
        committed,
        (0..5).map(|i| format!("txn-{i}")).collect::<Vec<_>>(),
        "the committed transaction on the destination"
    );
    let aborted = aborted_by_failover(&gw.admin(), "fwde");
    assert!(aborted.is_empty(), "the failover aborted {aborted:?}");

    // After the switch: the destination's coordinator does not know the transactional id.
    let next = producer.begin_transaction().and_then(|()| {
        send(&producer, 5..6);
        producer.commit_transaction(Duration::from_secs(30))
    });
    eprintln!("forward txn: the first transaction after the switch: {next:?}");
    assert!(
        next.is_err(),
        "the destination's coordinator does not know the producer's transactional id"
    );
    drop(producer);
    // A new producer with the same transactional id goes on on the destination.
    let again = transactional();
    again.begin_transaction().expect("begin on the destination");
    send(&again, 10..13);
    again
        .commit_transaction(Duration::from_secs(30))
        .expect("commit on the destination");
    let after: Vec<String> = keys(&destination, &topic, 0);
    for k in ["txn-10", "txn-11", "txn-12"] {
        assert_eq!(
            after.iter().filter(|x| *x == k).count(),
            1,
            "{k} once on the destination: {after:?}"
        );
    }
}

/// A transaction of the source commits while the switchover reads the source's log ends and
/// open transactions (a test hook holds the switchover between the two reads of the leader
/// until the commit is done): the coordinator's COMMIT marker lands between them, and the agent
/// is slow to mirror it (another hook holds markers for 3 s). The switchover waits until the
/// marker is mirrored and the transaction is committed on the destination; the failover aborts
/// nothing. Red before: the ends were read first, then the producers, so the marker lay above
/// the end mirrored to and the transaction was out of the open list; the failover stopped the
/// agent before the marker and aborted on the destination the transaction the source had
/// committed (unit test
/// `a_commit_marker_written_between_the_two_reads_is_below_the_end_or_the_transaction_is_open`).
#[test]
fn a_transaction_committing_while_the_switchover_reads_the_source_is_committed_on_the_destination()
{
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-txn-reads");
    harness::create_topic(&source, &topic, 1, None);
    let (cfg, _forward) = forward_config("fwdm", &[&topic], &source);
    let scratch = std::env::temp_dir().join(format!(
        "mirrorgate-test-reads-{}-{}",
        std::process::id(),
        harness::unique_topic("h")
    ));
    let reached = scratch.with_extension("reached");
    let markers = scratch.with_extension("markers");
    std::fs::write(&markers, b"").expect("marker hold file");
    let (hold, hold_markers) = (
        scratch.to_string_lossy().to_string(),
        markers.to_string_lossy().to_string(),
    );
    let gw = crate::gw::ProcessGateway::start(
        cfg,
        &[
            (
                "MIRRORGATE_TEST_HOLD_BETWEEN_SOURCE_READS_WHILE",
                hold.as_str(),
            ),
            (
                "MIRRORGATE_TEST_HOLD_AGENT_MARKERS_WHILE",
                hold_markers.as_str(),
            ),
        ],
    );
    let admin = gw.admin();
    // A producer of the source itself: its commit does not pass the forward listener's hold.
    let producer = open_transaction(&source, "fwd-reads", &topic);
    wait_lag_zero(&admin, "fwdm", 1);
    // Set now: the dry runs above read the source too.
    std::fs::write(&scratch, b"").expect("hold file");

    let call_admin = admin.clone();
    let call = std::thread::spawn(move || {
        admin_call(
            &call_admin,
            Method::POST,
            "/v1/mirrors/fwdm/switchover",
            None,
        )
    });
    wait_for(
        "the switchover between its reads of the source",
        Duration::from_secs(30),
        || reached.exists(),
    );
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit on the source");
    std::fs::remove_file(&scratch).expect("release the hold");
    std::thread::sleep(Duration::from_secs(3));
    std::fs::remove_file(&markers).expect("release the markers");
    let (status, body) = call.join().expect("switchover call");
    let _ = std::fs::remove_file(&reached);
    assert_eq!(status, 202, "switchover: {body}");
    crate::failover::wait_stopped(&admin, "fwdm");
    assert_eq!(
        keys(&destination, &topic, 0),
        (0..5).map(|i| format!("txn-{i}")).collect::<Vec<_>>(),
        "the records of the transaction the source committed, on the destination"
    );
    // The source's COMMIT marker is the destination's, and no ABORT of that producer is there.
    let commit = crate::failover::read_log(&source, &topic, 0)
        .control_batches
        .into_iter()
        .find(|c| !c.abort)
        .expect("the source's COMMIT marker");
    let markers: Vec<_> = crate::failover::read_log(&destination, &topic, 0)
        .control_batches
        .into_iter()
        .filter(|c| c.producer_id == commit.producer_id)
        .collect();
    assert!(
        markers.len() == 1 && !markers[0].abort,
        "the destination's markers of producer {}: {markers:?}",
        commit.producer_id
    );
    let aborted = aborted_by_failover(&admin, "fwdm");
    assert!(aborted.is_empty(), "the failover aborted {aborted:?}");
}

/// A Java transactional producer that never pauses (ChaosTxnProducer.java: transactions of 4
/// records at 100 records a second, every fifth aborted) writes through the forward listener:
/// the switchover lets its open transaction end on the source and goes through. After the
/// switch its next transaction fails (the destination's coordinator does not know its
/// transactional id) and the application creates its producer again; in the destination's
/// read_committed view every committed record is there once, and no aborted one.
#[test]
fn a_java_transactional_producer_that_never_pauses_crosses_a_switchover_without_loss_or_duplicate()
{
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-txn-java");
    harness::create_topic(&source, &topic, 2, None);
    let (mut cfg, forward) = forward_config("fwdj", &[&topic], &source);
    // The transactions finish and the agent catches up within the hold even on a loaded
    // machine (the default 5 s was outrun there once).
    if let Some(f) = cfg.mirrors[0].forward.as_mut() {
        f.hold_ms = 15_000;
    }
    let gw = TestGateway::start(cfg);
    let mut cmd = std::process::Command::new(harness::rig_path());
    cmd.arg("java")
        .arg(harness::repo().join("integration/clients/java/ChaosTxnProducer.java"))
        .args([
            &forward,
            &topic,
            &format!("txn-app-{}", std::process::id()),
            "100",
        ]);
    let app = JsonClient::spawn("java transactional", cmd);
    wait_for(
        "committed transactions through the forward listener",
        Duration::from_secs(120),
        || app.count("ack") >= 100,
    );
    switch_over(&gw, "fwdj", &topic, 2);
    let at_switch = app.count("ack");
    wait_for(
        "committed transactions after the switchover",
        Duration::from_secs(120),
        || app.count("ack") >= at_switch + 100,
    );
    let events = app.finish();
    let keys_of = |kind: &str, reason: Option<&str>| -> BTreeSet<String> {
        events
            .iter()
            .filter(|e| e["e"] == kind)
            .filter(|e| reason.is_none_or(|r| e["r"] == r))
            .filter_map(|e| e["k"].as_str().map(str::to_string))
            .collect()
    };
    let committed = keys_of("ack", None);
    let aborted = keys_of("err", Some("aborted"));
    let unknown: BTreeSet<String> = keys_of("err", None).difference(&aborted).cloned().collect();
    let read = super::transactions::librdkafka_consume(
        &destination,
        &topic,
        &format!("fwdj-check-{}", std::process::id()),
        committed.len(),
    );
    let mut copies: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, v) in &read {
        *copies.entry(v.as_str()).or_default() += 1;
    }
    let missing: Vec<&String> = committed
        .iter()
        .filter(|k| !copies.contains_key(k.as_str()))
        .collect();
    let doubled: Vec<(&&str, &usize)> = copies.iter().filter(|(_, n)| **n > 1).collect();
    let visible_aborted: Vec<&String> = aborted
        .iter()
        .filter(|k| copies.contains_key(k.as_str()))
        .collect();
    eprintln!(
        "forward txn java: {} committed ({at_switch} at the switchover), {} aborted, {} with an unknown outcome",
        committed.len(),
        aborted.len(),
        unknown.len()
    );
    assert!(missing.is_empty(), "committed records missing: {missing:?}");
    let where_doubled: Vec<&(i64, i64, String)> = read
        .iter()
        .filter(|(_, _, v)| copies.get(v.as_str()).is_some_and(|n| *n > 1))
        .collect();
    assert!(
        doubled.is_empty(),
        "records read twice: {doubled:?} at {where_doubled:?}; unknown outcomes {unknown:?}"
    );
    assert!(
        visible_aborted.is_empty(),
        "aborted records visible: {visible_aborted:?}"
    );
    let aborted_by_failover = aborted_by_failover(&gw.admin(), "fwdj");
    assert!(
        aborted_by_failover.is_empty(),
        "the failover aborted {aborted_by_failover:?}"
    );
}
