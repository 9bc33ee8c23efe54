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
