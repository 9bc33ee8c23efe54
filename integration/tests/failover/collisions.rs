//! After failover, producers lose nothing to producer ids (and epochs) the mirrored traffic left
//! behind: the hazard on a bare broker, PID screening, the duplicate-ack guard, transactional
//! producers.

use super::*;

#[test]
fn hazard_the_broker_acknowledges_a_colliding_producer_and_appends_nothing() {
    // Pins the failure on the pinned Kafka version, directly against the broker (no gateway).
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("hazard");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let broker = harness::destination_brokers()
        .into_iter()
        .find(|(n, _)| *n == 1)
        .expect("broker 1")
        .1;
    let mut conn = RawConn::connect(&broker);
    let x = 8_000_000 + (std::process::id() as i64 % 1000) * 10;
    // Mirrored batches of producer X, epoch 0, stored as-is.
    let mut mirrored = Vec::new();
    for seq in 0..3 {
        let (code, offset) =
            conn.produce(&topic, 0, batch(x, 0, seq, 1, &format!("mirrored{seq}")));
        assert_eq!(code, 0);
        mirrored.push(offset);
    }
    // A local producer handed X, epoch 0, sends its first single-record batch (sequence 0).
    let (code, offset) = conn.produce(&topic, 0, batch(x, 0, 0, 1, "local"));
    assert_eq!(code, 0, "the broker acknowledges the local batch");
    assert_eq!(
        offset, mirrored[0],
        "acknowledged with the mirrored batch's offset"
    );
    let log = read_log(&destination, &topic, 0);
    assert_eq!(
        log.records.len(),
        3,
        "nothing was appended: {:?}",
        log.records
    );
    assert!(
        log.records
            .iter()
            .all(|r| r.key.as_deref() != Some("local-0")),
        "the local record is not in the log"
    );
}

/// Ids the idempotent collision test mirrors per broker, from its next id on. Tests running alongside take
/// ids from the same brokers between the look-up and the local producers' InitProducerId
/// (review 3.1), so the range reaches well past the next few.
const COLLIDING_IDS_PER_BROKER: i64 = 300;
/// The first ids of that range are mirrored every one (a local producer handed one of them
/// surely collides); past them, every ninth is left free, so an idempotent producer screened
/// there finds a free id within the 8 fresh ids screening asks for.
const DENSE_COLLIDING_IDS: i64 = 30;

/// The producer ids each destination broker hands out next (see `COLLIDING_IDS_PER_BROKER`):
/// the first `DENSE_COLLIDING_IDS`, then runs of 8.
fn colliding_ids(port_for: impl Fn(i32) -> u16) -> Vec<i64> {
    let mut ids = Vec::new();
    for node in [1, 2] {
        let next = next_producer_id(&format!("127.0.0.1:{}", port_for(node)));
        ids.extend(
            (0..COLLIDING_IDS_PER_BROKER)
                .filter(|i| *i < DENSE_COLLIDING_IDS || (i - DENSE_COLLIDING_IDS) % 9 != 8)
                .map(|i| next + i),
        );
    }
    ids.sort();
    ids.dedup();
    ids
}

/// Mirror one single-record batch per (producer id, epoch, sequence) of `batches`, in order,
/// into `partition` of `topic` through the mirror listener at `addr` (pipelined in chunks).
fn mirror_batches(addr: &str, topic: &str, partition: i32, batches: &[(i64, i16, i32)]) {
    let mut conn = RawConn::connect(addr);
    for chunk in batches.chunks(200) {
        let answers = conn.produce_pipelined(
            topic,
            partition,
            chunk
                .iter()
                .map(|(pid, epoch, seq)| batch(*pid, *epoch, *seq, 1, &format!("m{pid}")))
                .collect(),
        );
        for ((pid, _, seq), (code, _)) in chunk.iter().zip(answers) {
            assert_eq!(
                code, 0,
                "mirror produce pid {pid} seq {seq} to {topic}-{partition}"
            );
        }
    }
}

#[test]
fn after_failover_new_idempotent_producers_lose_nothing_to_colliding_producer_ids() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("collide");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    // PID screening alone, and the data barrier: a control barrier's producer id is asked for
    // until one no mirrored producer uses, which takes the colliding ids from the broker's
    // allocator as the allocator advance would.
    let gw = TestGateway::start(data_barrier(screening_only(mirror_config(
        "collide",
        &[&topic],
    ))));
    wait_mirroring(&gw.admin(), "collide", 2);
    // Mirror the producer ids the destination will hand out next, as a mirrored cluster would
    // (single-record batches, sequences 0..3, epoch 0): exactly the hazard's shape.
    let ids = colliding_ids(|n| gw.port_for(n));
    let batches: Vec<(i64, i16, i32)> = ids
        .iter()
        .flat_map(|pid| (0..3).map(move |seq| (*pid, 0, seq)))
        .collect();
    let leaders = harness::partition_leaders(&destination, &topic);
    std::thread::scope(|s| {
        for (p, leader) in &leaders {
            let addr = format!("127.0.0.1:{}", gw.mirror_port_for(*leader));
            let (topic, batches) = (&topic, &batches);
            s.spawn(move || mirror_batches(&addr, topic, *p, batches));
        }
    });
    failover(&gw.admin(), "collide");
    wait_stopped(&gw.admin(), "collide");
    // librdkafka and Java producers started right after the failover.
    let acks = harness::produce_keyed(
        &gw.bootstrap(),
        &topic,
        200,
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let props = dir.path().join("p.properties");
    std::fs::write(
        &props,
        "enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=0\nbatch.size=1\n",
    )
    .expect("props");
    let out = harness::rig_java(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &gw.bootstrap(),
            "--topic",
            &topic,
            "--max-messages",
            "200",
            "--acks",
            "-1",
            "--producer.config",
            props.to_str().expect("path"),
        ],
    );
    harness::expect_success("VerifiableProducer after failover", &out);
    // (partition, offset, value) of each Java acknowledgement.
    let java_acked: Vec<(i32, i64, String)> = harness::json_lines(&out.stdout)
        .into_iter()
        .filter(|e| e["name"] == "producer_send_success")
        .map(|e| {
            (
                e["partition"].as_i64().unwrap_or(-1) as i32,
                e["offset"].as_i64().unwrap_or(-1),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(java_acked.len(), 200, "every Java record acknowledged");
    assert!(
        gw.metric("mirrorgate_pid_screened_total") >= 1.0,
        "no producer id was screened (did tests alongside take all {} mirrored ids?):\n{}",
        ids.len(),
        gw.metrics()
    );
    // Every acknowledged local record is in the log at its offset, after the barrier.
    let mut by_offset: BTreeMap<(i32, i64), LogRecord> = BTreeMap::new();
    let mut local: Vec<LogRecord> = Vec::new();
    for p in 0..2 {
        let log = read_log(&destination, &topic, p);
        assert_eq!(log.barriers.len(), 1, "partition {p}: {:?}", log.barriers);
        let barrier = log.barriers[0].0;
        for r in log.records {
            if r.offset > barrier {
                local.push(r.clone());
            }
            by_offset.insert((p, r.offset), r);
        }
    }
    for a in &acks {
        let r = by_offset
            .get(&(a.partition, a.offset))
            .unwrap_or_else(|| panic!("acked {a:?} not in the log"));
        assert_eq!(
            r.key.as_deref(),
            Some(a.key.as_str()),
            "acked {a:?} but the log holds {r:?}"
        );
    }
    for (p, o, value) in &java_acked {
        let r = by_offset
            .get(&(*p, *o))
            .unwrap_or_else(|| panic!("Java acked {value:?} at {p}/{o}: not in the log"));
        assert_eq!(
            (r.key.as_deref(), r.value.as_deref()),
            (None, Some(value.as_str())),
            "Java acked {value:?} at {p}/{o} but the log holds {r:?}"
        );
    }
    // After the barriers the logs hold exactly the 400 local records, each once.
    let mut seen: BTreeMap<(Option<String>, Option<String>), usize> = BTreeMap::new();
    for r in &local {
        *seen.entry((r.key.clone(), r.value.clone())).or_default() += 1;
    }
    let mut expected: BTreeMap<(Option<String>, Option<String>), usize> = (0..200)
        .map(|i| ((Some(format!("key-{i}")), Some(format!("value-{i}"))), 1))
        .collect();
    expected.extend((0..200).map(|i| ((None, Some(i.to_string())), 1)));
    assert_eq!(seen, expected, "the local records after the barriers");
    // Each local record came from a producer id no mirrored producer used.
    let mirrored: std::collections::BTreeSet<i64> = ids.iter().copied().collect();
    let colliding: Vec<&LogRecord> = local
        .iter()
        .filter(|r| mirrored.contains(&r.producer_id))
        .collect();
    assert!(
        colliding.is_empty(),
        "local records written with mirrored producer ids: {colliding:?}"
    );
    assert_eq!(
        gw.metric("mirrorgate_duplicate_ack_guard_total"),
        0.0,
        "screening alone prevented the collisions"
    );
}

/// The last layer: a producer id the gateway does not know as mirrored (here removed from the
/// screening set while the gateway was down, as a state directory restored from an older copy
/// would) reaches the broker, which acknowledges the local batch as a duplicate of a mirrored
/// one with an offset before the barrier. The gateway turns that acknowledgement into an error.
#[test]
fn the_duplicate_ack_guard_alone_prevents_a_false_acknowledgement() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("guard");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut gw = ProcessGateway::start(mirror_config("guard", &[&topic]), &[]);
    wait_mirroring(&gw.admin(), "guard", 1);
    let x = 9_000_000 + (std::process::id() as i64 % 1000) * 10;
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    for seq in 0..3 {
        assert_eq!(
            mirror
                .produce(&topic, 0, batch(x, 0, seq, 1, &format!("m{seq}")))
                .0,
            0
        );
    }
    drop(mirror);
    failover(&gw.admin(), "guard");
    wait_stopped(&gw.admin(), "guard");
    gw.kill9();
    let file = gw.config.state_dir.join("screen/pids.json");
    let mut screen: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&file).expect("screen/pids.json")).expect("json");
    assert!(screen.remove(&x.to_string()).is_some(), "{x} was screened");
    std::fs::write(&file, serde_json::to_vec(&screen).expect("json")).expect("write");
    gw.restart(&[]);
    assert!(
        !screened_ids(&gw.config.state_dir).contains(&x),
        "the restarted gateway screens {x} again: the guard would not be alone"
    );
    // Screening bypassed on purpose: a produce with the mirrored id and no InitProducerId.
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _) = local.produce(&topic, 0, batch(x, 0, 0, 1, "local"));
    assert_eq!(
        code, 45,
        "the false acknowledgement is turned into OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    assert_eq!(
        process_metric(&gw, "mirrorgate_duplicate_ack_guard_total"),
        1.0
    );
    let log = read_log(&destination, &topic, 0);
    assert!(log
        .records
        .iter()
        .all(|r| r.key.as_deref() != Some("local-0")));
}

#[test]
fn after_failover_a_transactional_producer_is_bumped_above_the_mirrored_epoch() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("txn");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    // PID screening alone, and the data barrier: a control barrier's producer id is asked for
    // until one no mirrored producer uses, which takes the colliding ids from the broker's
    // allocator as the allocator advance would.
    let gw = TestGateway::start(data_barrier(screening_only(mirror_config(
        "txn",
        &[&topic],
    ))));
    wait_mirroring(&gw.admin(), "txn", 1);
    // The coordinator gives the transactional id its producer id now, before the failover, and
    // keeps it: the mirrored traffic then uses that very id at epoch 3, the collision a fresh id
    // from the destination's allocator would make. Which id the allocator hands out next is not
    // predictable while tests alongside take ids from the same brokers.
    let txn_id = format!("{topic}-tx");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let (_, pid_before, epoch_before) =
        rt.block_on(crate::read_only_apis::transactional_producer(&gw, &txn_id));
    assert_eq!(epoch_before, 0, "a new transactional id starts at epoch 0");
    mirror_batches(&gw.mirror_bootstrap(), &topic, 0, &[(pid_before, 3, 0)]);
    failover(&gw.admin(), "txn");
    wait_stopped(&gw.admin(), "txn");
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", gw.bootstrap())
        .set("transactional.id", &txn_id)
        .set("message.timeout.ms", "30000")
        .create()
        .expect("transactional producer");
    harness::init_transactions(&producer);
    producer.begin_transaction().expect("begin");
    for i in 0..20 {
        let key = format!("tx-{i}");
        producer
            .send(BaseRecord::to(&topic).key(&key).payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit");
    drop(producer);
    assert!(
        gw.metric("mirrorgate_pid_screened_total") >= 1.0,
        "the transactional producer id was not screened"
    );
    // The transaction is in the log once, after the barrier, under the producer id that was
    // mirrored ...
    let log = read_log(&destination, &topic, 0);
    assert_eq!(log.barriers.len(), 1, "{:?}", log.barriers);
    let barrier = log.barriers[0].0;
    let tx: Vec<&LogRecord> = log
        .records
        .iter()
        .filter(|r| r.key.as_deref().is_some_and(|k| k.starts_with("tx-")))
        .collect();
    let mut keys: Vec<&str> = tx.iter().filter_map(|r| r.key.as_deref()).collect();
    keys.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("tx-{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected, "each transactional record exactly once");
    assert!(tx.iter().all(|r| r.offset > barrier), "{tx:?}");
    let pid = tx[0].producer_id;
    assert!(tx.iter().all(|r| r.producer_id == pid), "{tx:?}");
    assert_eq!(
        pid, pid_before,
        "the coordinator kept the transactional id's producer id"
    );
    // ... at an epoch above the mirrored 3: in its commit marker and in the broker's state.
    let commits: Vec<&ControlBatch> = log
        .control_batches
        .iter()
        .filter(|c| c.producer_id == pid && !c.abort)
        .collect();
    assert_eq!(commits.len(), 1, "{:?}", log.control_batches);
    assert!(
        commits[0].producer_epoch > 3,
        "committed at epoch {}, not above the mirrored 3",
        commits[0].producer_epoch
    );
    let mut leader = RawConn::connect(&harness::leader_addr(&destination, &topic, 0));
    let state = crate::psm_differential::broker_producers(&mut leader, &topic, 0);
    let row = state
        .iter()
        .find(|r| r.0 == pid)
        .unwrap_or_else(|| panic!("producer {pid} not in the broker's state: {state:?}"));
    assert!(
        row.1 > 3,
        "the broker holds producer {pid} at epoch {}, not above the mirrored 3",
        row.1
    );
}

/// Java's `String.hashCode` (UTF-16 code units, wrapping).
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)))
}

/// The epoch of the destination's transaction coordinator for `txn_id`: the leader epoch of its
/// `__transaction_state` partition (`abs(hashCode) % partitions`, as Kafka places it).
fn transaction_coordinator_epoch(destination: &str, txn_id: &str) -> i32 {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::MetadataRequest;
    let addr = destination.split(',').next().expect("address").to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(20))
            .await
            .expect("connect");
        let r = c
            .send(
                &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default(
                )
                .with_name(Some(
                    kafka_protocol::protocol::StrBytes::from_static_str("__transaction_state")
                        .into(),
                ))])),
                12,
            )
            .await
            .expect("metadata");
        let t = r.topics.first().expect("__transaction_state");
        assert_eq!(t.error_code, 0, "__transaction_state metadata");
        let h = java_string_hash(txn_id);
        let abs = if h == i32::MIN { 0 } else { h.abs() };
        let index = abs % t.partitions.len() as i32;
        t.partitions
            .iter()
            .find(|p| p.partition_index == index)
            .map(|p| p.leader_epoch)
            .expect("coordinator partition")
    })
}

/// A mirror `txncoord` over a new one-partition topic behind a gateway, with a collision of
/// transactional producer ids: the transactional id `<topic>-tx` is known to the destination
/// (another application on the shared cluster got its producer id P before the failover, and
/// keeps it), and the source cluster's producer with the same id P committed a transaction into
/// the topic, whose COMMIT marker carries the source coordinator's epoch, here 50 above the
/// destination coordinator's epoch for the transactional id.
struct TxnCollision {
    destination: String,
    topic: String,
    gw: TestGateway,
    txn_id: String,
    pid: i64,
    local_coordinator_epoch: i32,
    mirrored_coordinator_epoch: i32,
}

/// [`TxnCollision`], mirrored as the built-in agent mirrors a transaction: the batch as-is (with
/// the destination's verification off, as the agent sets it) and the marker with
/// WriteTxnMarkers, both through the mirror listener; then the gateway's producer state shows the
/// marker's coordinator epoch (the agent tells it of each marker it writes; here it learns the
/// marker from the broker).
fn txn_collision(prefix: &str) -> TxnCollision {
    use mirrorgate::client::mirror_ops::{set_cluster_default, write_marker, VERIFICATION_CONFIG};
    use mirrorgate::protocol::txn_marker::MarkerSpec;
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(prefix);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("txncoord", &[&topic]));
    wait_mirroring(&gw.admin(), "txncoord", 1);
    let txn_id = format!("{topic}-tx");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let (_, pid, epoch) = rt.block_on(crate::read_only_apis::transactional_producer(&gw, &txn_id));
    assert_eq!(epoch, 0, "a new transactional id starts at epoch 0");
    let local_coordinator_epoch = transaction_coordinator_epoch(&destination, &txn_id);
    let mirrored_coordinator_epoch = local_coordinator_epoch + 50;
    rt.block_on(async {
        let t = Duration::from_secs(20);
        let dest = destination.split(',').next().expect("address").to_string();
        let mut d = KafkaClient::connect(&dest, t).await.expect("connect");
        set_cluster_default(&mut d, VERIFICATION_CONFIG, "false")
            .await
            .expect("verification off");
        let mut m = KafkaClient::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(1)), t)
            .await
            .expect("connect to the mirror listener");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let req = crate::wire::produce_request(
                &topic,
                0,
                -1,
                crate::psm_differential::txn_batch(pid, 0, 0, 3, "mirrored"),
            )
            .with_transactional_id(Some(
                kafka_protocol::protocol::StrBytes::from_string(format!("{topic}-source-tx"))
                    .into(),
            ));
            let r = m.send(&req, 9).await.expect("mirror produce");
            let code = r.responses[0].partition_responses[0].error_code;
            if code == 0 {
                break;
            }
            // The setting reaches every broker within moments.
            assert!(
                Instant::now() < deadline,
                "mirrored transactional batch: {code}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let code = write_marker(
            &mut m,
            &topic,
            0,
            MarkerSpec {
                producer_id: pid,
                producer_epoch: 0,
                commit: true,
                coordinator_epoch: mirrored_coordinator_epoch,
            },
        )
        .await
        .expect("mirrored COMMIT marker");
        assert_eq!(code, 0, "mirrored COMMIT marker");
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = crate::psm_differential::gateway_producers_json(&gw.admin(), &topic, 0);
        let known = v["producers"].as_array().into_iter().flatten().any(|p| {
            p["producer_id"].as_i64() == Some(pid)
                && p["coordinator_epoch"].as_i64() == Some(i64::from(mirrored_coordinator_epoch))
                && p["current_txn_start_offset"].as_i64() == Some(-1)
        });
        if known {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway does not show producer {pid} at coordinator epoch {mirrored_coordinator_epoch}: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    TxnCollision {
        destination,
        topic,
        gw,
        txn_id,
        pid,
        local_coordinator_epoch,
        mirrored_coordinator_epoch,
    }
}

impl TxnCollision {
    /// A `read_committed` consumer reads the application's 10 committed records within 30 s, and
    /// they were committed under another producer id than P, which the coordinator handed the
    /// transactional id once its epoch was exhausted: P's entry in the partition keeps the
    /// mirrored coordinator epoch, under which no COMMIT of the destination's coordinator is
    /// accepted.
    fn assert_committed_under_another_producer_id(&self) {
        let read = crate::agent::transactions::java_consume(
            &self.gw.bootstrap(),
            &self.topic,
            &format!("{}-reader", self.topic),
            13,
            "read_committed",
        );
        let local = read
            .iter()
            .filter(|r| r.2.starts_with(&self.txn_id))
            .count();
        let mut leader = RawConn::connect(&harness::leader_addr(&self.destination, &self.topic, 0));
        let state = crate::psm_differential::broker_producers(&mut leader, &self.topic, 0);
        assert_eq!(
            local,
            10,
            "a read_committed consumer read {local} of the 10 committed records within 30 s (it read {read:?}); \
             the broker's producers of {}-0 (id, epoch, last seq, last timestamp, coordinator epoch, \
             open transaction's first offset): {state:?}; the destination coordinator's epoch is \
             {}, the mirrored marker's {}",
            self.topic,
            self.local_coordinator_epoch,
            self.mirrored_coordinator_epoch
        );
        let log = read_log(&self.destination, &self.topic, 0);
        let committed: Vec<i64> = log
            .records
            .iter()
            .filter(|r| {
                r.value
                    .as_deref()
                    .is_some_and(|v| v.starts_with(&self.txn_id))
            })
            .map(|r| r.producer_id)
            .collect();
        assert_eq!(committed.len(), 10, "{:?}", log.records);
        assert!(
            committed
                .iter()
                .all(|p| *p == committed[0] && *p != self.pid),
            "{committed:?} (P = {})",
            self.pid
        );
        assert!(
            log.control_batches
                .iter()
                .any(|c| c.producer_id == committed[0] && !c.abort),
            "no COMMIT marker of producer {}: {:?}",
            committed[0],
            log.control_batches
        );
    }
}

#[test]
fn a_local_transactional_producer_with_a_mirrored_id_commits_after_failover() {
    let c = txn_collision("txncoord");
    failover(&c.gw.admin(), "txncoord");
    wait_stopped(&c.gw.admin(), "txncoord");
    // The application's Java transactional producer: one transaction of 10 records, committed.
    crate::agent::transactions::txn_produce(&c.gw.bootstrap(), &c.topic, 1, &c.txn_id, "c10");
    c.assert_committed_under_another_producer_id();
}

#[test]
fn a_transactional_producer_initialised_before_the_failover_with_a_mirrored_id_is_told_to_re_create_itself_and_then_commits(
) {
    let c = txn_collision("txncoord-before");
    let gate = tempfile::tempdir().expect("gate dir");
    let gate_file = gate.path().join("open");
    let ready = gate.path().join("open.ready");
    let out = std::thread::scope(|s| {
        // The application's Java producer initialises now, before the failover, and keeps P.
        let client = s.spawn(|| {
            let source = harness::repo().join("integration/clients/java/GatedTxnProducer.java");
            harness::rig_java(
                source.to_str().expect("utf-8 path"),
                &[
                    &c.gw.bootstrap(),
                    &c.topic,
                    &c.txn_id,
                    "10",
                    gate_file.to_str().expect("utf-8 path"),
                    "90000",
                ],
            )
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() && !client.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the Java producer never initialised"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        failover(&c.gw.admin(), "txncoord");
        wait_stopped(&c.gw.admin(), "txncoord");
        std::fs::write(&gate_file, b"").expect("open the gate");
        client.join().expect("client thread")
    });
    harness::expect_success("GatedTxnProducer.java", &out);
    c.assert_committed_under_another_producer_id();
    let events = harness::json_lines(&out.stdout);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    // Its first transaction was refused before the broker, with the reason and the fix: create
    // the producer again; the new producer's InitProducerId got another producer id.
    let recreated: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "recreated")
        .collect();
    assert_eq!(
        (recreated.len(), kinds.contains(&"committed")),
        (1, true),
        "{kinds:?}: {events:?}"
    );
    let reason = recreated[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("InvalidPidMapping") && reason.contains("create it again"),
        "{reason}"
    );
}

/// The same with librdkafka, which (transactions v1) adds the partition to the transaction
/// before producing: the gateway refuses the AddPartitionsToTxn (were the partition added, the
/// coordinator's ABORT marker for it would be refused as well, and the transactional id stuck).
/// librdkafka reports the transaction as needing an abort, and its abort as fatal (the
/// coordinator never saw the transaction begin): the application creates the producer again,
/// and screening gets it another producer id.
#[test]
fn a_librdkafka_transactional_producer_initialised_before_the_failover_with_a_mirrored_id_is_told_to_re_create_itself_and_then_commits(
) {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let c = txn_collision("txncoord-rdk");
    let create = || {
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", c.gw.bootstrap())
            .set("transactional.id", &c.txn_id)
            .set("message.timeout.ms", "60000")
            .create()
            .expect("transactional producer");
        harness::init_transactions(&p);
        p
    };
    // Initialised before the failover: it holds P.
    let mut producer = create();
    failover(&c.gw.admin(), "txncoord");
    wait_stopped(&c.gw.admin(), "txncoord");
    let t = Duration::from_secs(60);
    let (mut errors, mut recreated) = (Vec::new(), 0);
    for _ in 0..3 {
        producer.begin_transaction().expect("begin");
        let sent = (0..10).try_for_each(|i| {
            let value = format!("{}-r{i}", c.txn_id);
            producer
                .send(
                    BaseRecord::to(&c.topic)
                        .partition(0)
                        .key("k")
                        .payload(&value),
                )
                .map_err(|(e, _)| e)
        });
        match sent.and_then(|()| producer.commit_transaction(t)) {
            Ok(()) => break,
            Err(e) => {
                errors.push(e.to_string());
                if let Err(fatal) = producer.abort_transaction(t) {
                    errors.push(fatal.to_string());
                    drop(producer);
                    producer = create();
                    recreated += 1;
                }
            }
        }
    }
    drop(producer);
    c.assert_committed_under_another_producer_id();
    assert_eq!(recreated, 1, "{errors:?}");
    assert!(
        errors[0]
            .contains("Producer attempted to use a producer id which is not currently assigned"),
        "{errors:?}"
    );
}
