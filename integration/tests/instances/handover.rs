//! The handover on the state topic is a failover's commit point across instances (review G3):
//! a partition is writable nowhere until the state topic names it STOPPED at its barrier, so an
//! instance that takes over a failover whose driver died finds that driver's barrier at the end
//! of the log and never mistakes local writes for mirrored ones.

use std::time::Duration;

use std::sync::atomic::AtomicUsize;

use rdkafka::config::ClientConfig;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use super::*;

/// Counts the records a producer got acknowledged.
#[derive(Clone, Default)]
struct Delivered(Arc<AtomicUsize>);

impl ClientContext for Delivered {}

impl ProducerContext for Delivered {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if r.is_ok() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Local writes through the driver `a` while it holds after recording its barriers and before
/// handing them over: a librdkafka idempotent producer, and a transactional one whose
/// transaction stays open. Returns how many idempotent records were acknowledged, and the
/// transactional producer with whether its 200 records were acknowledged (its transaction is
/// still open then).
fn local_writes_during_the_hold(
    bootstraps: &str,
    topic: &str,
) -> (usize, ThreadedProducer<Delivered>, bool) {
    let (acked, _) =
        harness::produce_keyed_outcomes(bootstraps, topic, 200, &[("message.timeout.ms", "5000")]);
    let acked = acked.len();
    let delivered = Delivered::default();
    let producer: ThreadedProducer<Delivered> = ClientConfig::new()
        .set("bootstrap.servers", bootstraps)
        .set("transactional.id", format!("{topic}-tx"))
        .set("message.timeout.ms", "5000")
        .set("transaction.timeout.ms", "120000")
        .create_with_context(delivered.clone())
        .expect("transactional producer");
    harness::init_transactions(&producer);
    producer.begin_transaction().expect("begin");
    for i in 0..200 {
        let key = format!("tx-{i}");
        let _ = producer.send(BaseRecord::to(topic).key(&key).payload("v"));
    }
    let _ = producer.flush(Duration::from_secs(10));
    let sent = delivered.0.load(Ordering::SeqCst) == 200;
    (acked, producer, sent)
}

/// The driver of a failover is killed after it recorded its barrier and cleared the PSM, before
/// it handed the partition over on the state topic, while local producers write through it
/// (a transactional one keeping its transaction open). The instance that takes the failover over
/// finds the driver's barrier, writes none of its own, aborts no local transaction and screens
/// no local producer: one barrier in the log, the local transaction commits, and the local
/// producer ids are not in its screening set.
#[test]
fn a_partition_written_locally_through_a_driver_that_dies_before_its_handover_keeps_one_barrier_and_its_transactions(
) {
    let topic = mirror_topic("peers-commit");
    let state_topic = harness::unique_topic("peers-commit-state");
    let cfg = |id: &str| instance_config("commit", &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let release = crate::gw::scratch_dir().join("release");
    let hold = release.to_string_lossy().to_string();
    let mut a = ProcessGateway::start(
        cfg("a"),
        &[("MIRRORGATE_TEST_HOLD_BEFORE_HANDOVER_UNTIL", hold.as_str())],
    );
    let b = TestGateway::start(cfg("b"));
    wait_others_alive(&b.admin(), 1);
    let mirrored = 8_400_000 + (std::process::id() as i64 % 1000) * 10;
    let mut conn = RawConn::connect(&a.mirror_bootstrap());
    for seq in 0..3 {
        let (code, _, msg) = conn.produce_msg(&topic, 0, batch(mirrored, 0, seq, 1, "mirrored"));
        assert_eq!(code, 0, "a mirror write through a: {msg}");
    }
    drop(conn);
    failover(&a.admin(), "commit");
    // a holds once its barrier is recorded.
    let deadline = Instant::now() + Duration::from_secs(30);
    while crate::failover::recorded_barrier(&a.admin(), "commit", &topic).is_none() {
        assert!(Instant::now() < deadline, "a recorded no barrier");
        std::thread::sleep(Duration::from_millis(100));
    }
    let bootstraps = format!("{},{}", a.bootstrap(), b.bootstrap());
    let (idempotent_acked, tx, tx_sent) = local_writes_during_the_hold(&bootstraps, &topic);
    a.kill9();
    crate::failover::wait_stopped(&b.admin(), "commit");
    // The transaction: committed if its records were taken through a; else (refused while the
    // partition was not handed over) a new producer of the same transactional id writes it.
    if tx_sent {
        tx.commit_transaction(Duration::from_secs(30))
            .expect("the local transaction commits");
        drop(tx);
    } else {
        drop(tx);
        let again: ThreadedProducer<Delivered> = ClientConfig::new()
            .set("bootstrap.servers", b.bootstrap())
            .set("transactional.id", format!("{topic}-tx"))
            .set("message.timeout.ms", "30000")
            .create_with_context(Delivered::default())
            .expect("transactional producer");
        harness::init_transactions(&again);
        again.begin_transaction().expect("begin");
        for i in 0..200 {
            let key = format!("tx-{i}");
            again
                .send(BaseRecord::to(&topic).key(&key).payload("v"))
                .map_err(|(e, _)| e)
                .expect("send through b");
        }
        again
            .commit_transaction(Duration::from_secs(30))
            .expect("the local transaction commits through b");
    }
    // The coordinator writes the markers after it answered the commit: the log is read once
    // the transaction's marker is in it (30 s at most).
    let marker_written = |log: &crate::failover::PartitionLog| {
        let pid = log
            .records
            .iter()
            .rfind(|r| r.key.as_deref().is_some_and(|k| k.starts_with("tx-")))
            .map(|r| r.producer_id);
        pid.is_some_and(|pid| log.control_batches.iter().any(|c| c.producer_id == pid))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut log = read_log(&harness::cluster("destination"), &topic, 0);
    while !marker_written(&log) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        log = read_log(&harness::cluster("destination"), &topic, 0);
    }
    let barriers: Vec<i64> = log.barriers.iter().map(|b| b.0).collect();
    assert_eq!(
        barriers.len(),
        1,
        "one barrier in the log (idempotent records acknowledged through a during its hold: {idempotent_acked}, transaction sent: {tx_sent}): {barriers:?}"
    );
    let tx_records: Vec<&crate::failover::LogRecord> = log
        .records
        .iter()
        .filter(|r| r.key.as_deref().is_some_and(|k| k.starts_with("tx-")))
        .collect();
    let tx_pid = tx_records
        .last()
        .map(|r| r.producer_id)
        .expect("tx records");
    let aborted: Vec<_> = log
        .control_batches
        .iter()
        .filter(|c| c.producer_id == tx_pid && c.abort)
        .collect();
    let committed = log
        .control_batches
        .iter()
        .filter(|c| c.producer_id == tx_pid && !c.abort)
        .count();
    assert!(
        committed == 1 && (aborted.is_empty() || !tx_sent),
        "the local transaction aborted by the failover (sent through a: {tx_sent}): aborts {aborted:?}, commits {committed}"
    );
    let local: std::collections::BTreeSet<i64> = log
        .records
        .iter()
        .filter(|r| r.producer_id >= 0 && r.producer_id != mirrored && !r.control)
        .map(|r| r.producer_id)
        .collect();
    let screened = crate::failover::screened_ids(&b.config.state_dir);
    let wrongly: Vec<&i64> = local.iter().filter(|p| screened.contains(p)).collect();
    assert!(
        wrongly.is_empty(),
        "local producer ids screened as mirrored by b: {wrongly:?}"
    );
    assert!(screened.contains(&mirrored), "the mirrored id is screened");
}
