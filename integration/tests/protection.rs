//! Protection outlives the mirror configuration (review F3): after a failover the destination
//! brokers keep mirrored producer ids for `producer.id.expiration.ms` and more, so the gateway
//! says until when producers must stay behind it, and refuses to start with a configuration that
//! would silently drop a mirror's protection.

use std::time::{SystemTime, UNIX_EPOCH};

use mirrorgate::app::{Gateway, StartError};
use mirrorgate::config::Config;

use crate::failover::{failover, mirror_config, mirror_json, wait_mirroring, wait_stopped};
use crate::gw::TestGateway;
use crate::harness;
use crate::psm_differential::{batch, RawConn};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// Start a gateway with `cfg`; the start error, if any.
fn start_error(cfg: Config) -> Option<String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        match Gateway::start(cfg).await {
            Ok(gw) => {
                gw.shutdown().await;
                None
            }
            Err(e @ StartError::StateMismatch(_)) => Some(e.to_string()),
            Err(e) => panic!("unexpected start error: {e}"),
        }
    })
}

/// A failed-over mirror `name` over a new topic, with mirrored producer ids; its config.
fn failed_over(name: &str) -> Config {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(name);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let cfg = mirror_config(name, &[&topic]);
    let gw = TestGateway::start(cfg.clone());
    wait_mirroring(&gw.admin(), name, 1);
    let mut conn = RawConn::connect(&gw.mirror_bootstrap());
    assert_eq!(conn.produce(&topic, 0, batch(8_100_000, 0, 0, 1, "m")).0, 0);
    let before = now_ms();
    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);
    let until = mirror_json(&gw.admin(), name)["protection_needed_until_ms"]
        .as_i64()
        .unwrap_or_else(|| {
            panic!(
                "no protection_needed_until_ms: {}",
                mirror_json(&gw.admin(), name)
            )
        });
    // The rig's brokers keep producer ids for the default day (plus a 10 min check interval).
    assert!(
        until >= before + 86_400_000,
        "protection needed until {until}, less than a day after the failover at {before}"
    );
    let gauge = gw.metric("mirrorgate_protection_needed_until_seconds");
    assert_eq!(gauge, (until as f64 / 1000.0), "{}", gw.metrics());
    cfg
}

#[test]
fn a_gateway_restarted_without_its_failed_over_mirror_refuses_to_start() {
    let mut cfg = failed_over("protremoved");
    cfg.mirrors.clear();
    let err = start_error(cfg).expect(
        "the gateway started without the failed-over mirror: its topics lost their protection",
    );
    assert!(
        err.contains("\"protremoved\"") && err.contains("no mirror of that name is configured"),
        "{err}"
    );
}

#[test]
fn a_gateway_restarted_with_its_failed_over_mirror_renamed_refuses_to_start() {
    let mut cfg = failed_over("protrenamed");
    cfg.mirrors[0].name = "protrenamed2".into();
    let err = start_error(cfg).expect(
        "the gateway started with the failed-over mirror renamed: its topics were mirroring again",
    );
    assert!(err.contains("\"protrenamed\""), "{err}");
}

/// Delete `topic` on the destination brokers directly and wait until it is gone.
fn delete_topic_on_the_destination(topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::ClientConfig;
    let destination = harness::cluster("destination");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &destination)
        .create()
        .expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(std::time::Duration::from_secs(30)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    for r in rt
        .block_on(admin.delete_topics(&[topic], &opts))
        .expect("delete topics")
    {
        r.unwrap_or_else(|(t, e)| panic!("delete {t}: {e:?}"));
    }
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &destination)
        .create()
        .expect("client");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let md = c
            .fetch_metadata(Some(topic), std::time::Duration::from_secs(10))
            .expect("metadata");
        let gone = md
            .topics()
            .iter()
            .all(|t| t.name() != topic || t.error().is_some());
        if gone {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{topic} not deleted");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A mirror topic deleted and created again after its failover starts a new log: the old
/// barrier offset guards nothing in it, so genuine acknowledgements below that offset are
/// passed on, not turned into errors (which made producers resend: duplicates, failed sends).
#[test]
fn a_topic_created_again_after_failover_is_not_guarded_by_the_old_barrier() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("recreated");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut cfg = mirror_config("recreated", &[&topic]);
    cfg.destination.metadata_refresh_ms = 1000;
    let gw = TestGateway::start(cfg);
    wait_mirroring(&gw.admin(), "recreated", 1);
    let mut conn = RawConn::connect(&gw.mirror_bootstrap());
    assert_eq!(
        conn.produce(&topic, 0, batch(8_200_000, 0, 0, 100, "m")).0,
        0
    );
    failover(&gw.admin(), "recreated");
    let m = wait_stopped(&gw.admin(), "recreated");
    eprintln!("{m}");
    delete_topic_on_the_destination(&topic);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    // Let the gateway's metadata see the new topic (refreshed every second here).
    std::thread::sleep(std::time::Duration::from_secs(3));
    fifty_idempotent_sends_all_succeed(&gw.bootstrap(), &topic);
    let log = crate::failover::read_log(&destination, &topic, 0);
    assert_eq!(
        log.records.len(),
        50,
        "the new log holds {} records for 50 sends",
        log.records.len()
    );
    assert_eq!(gw.metric("mirrorgate_duplicate_ack_guard_total"), 0.0);
}

/// A failover called while the gateway is still rebuilding the producer state of a mirror's
/// partitions (after a restart that lost the PSM snapshots) waits for the rebuild before it
/// records its barriers and reads the screening entries from the PSM: nothing becomes writable
/// early, and every mirrored producer id is screened.
#[test]
fn disruptive_a_failover_called_before_the_producer_state_is_rebuilt_waits_for_it() {
    use crate::gw::ProcessGateway;
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psmwait");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut cfg = mirror_config("psmwait", &[&topic]);
    // Screening alone: the allocator step would keep the brokers from handing out these ids.
    cfg.failover.pid_allocator.enabled = false;
    let mut gw = ProcessGateway::start(cfg, &[]);
    wait_mirroring(&gw.admin(), "psmwait", 1);
    let ids: Vec<i64> = (0..20).map(|i| 8_300_000 + i).collect();
    let mut conn = RawConn::connect(&gw.mirror_bootstrap());
    for pid in &ids {
        assert_eq!(conn.produce(&topic, 0, batch(*pid, 0, 0, 1, "m")).0, 0);
    }
    drop(conn);
    gw.kill9();
    let psm_dir = gw.config.state_dir.join("psm");
    if psm_dir.is_dir() {
        std::fs::remove_dir_all(&psm_dir).expect("remove PSM snapshots");
    }
    gw.restart_unready(&[("MIRRORGATE_TEST_HOLD_PSM_REBUILD_MS", "6000")]);
    let (s, b) = gw.call(hyper::Method::POST, "/v1/mirrors/psmwait/failover");
    assert_eq!(s, 202, "{b}");
    let held_until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < held_until {
        let (_, body) = gw.call(hyper::Method::GET, "/v1/mirrors/psmwait");
        let m: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(
            m["states"]["STOPPED"], 0,
            "the failover completed while the producer state was not rebuilt: {m}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    wait_stopped(&gw.admin(), "psmwait");
    let screen = crate::failover::screened_ids(&gw.config.state_dir);
    let missing: Vec<&i64> = ids.iter().filter(|i| !screen.contains(i)).collect();
    assert!(
        missing.is_empty(),
        "mirrored producer ids missing from the screening set: {missing:?}"
    );
}

/// Set (`Some`) or remove (`None`) `producer.id.expiration.ms` on destination broker `node`
/// only (a dynamic per-broker config), with the rig's Java ConfigCommand.
fn set_broker_expiration(node: i32, value: Option<&str>) {
    let destination = harness::cluster("destination");
    let node = node.to_string();
    let setting = value.map(|v| format!("producer.id.expiration.ms={v}"));
    let mut args = vec![
        "--bootstrap-server",
        destination.as_str(),
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        node.as_str(),
    ];
    match &setting {
        Some(s) => args.extend(["--add-config", s.as_str()]),
        None => args.extend(["--delete-config", "producer.id.expiration.ms"]),
    }
    let out = harness::rig_java("kafka.admin.ConfigCommand", &args);
    harness::expect_success("ConfigCommand producer.id.expiration.ms", &out);
}

/// Puts broker 2's expiration back when the test ends, pass or fail.
struct BrokerExpirationRestored;
impl Drop for BrokerExpirationRestored {
    fn drop(&mut self) {
        set_broker_expiration(2, None);
    }
}

/// The brokers keep a producer id as long as their `producer.id.expiration.ms` says, and it
/// may differ per broker (a dynamic config): the gateway reads it from every broker and keeps
/// mirrored ids protected for the longest. `disruptive_`: it changes a broker's config.
#[test]
fn disruptive_protection_lasts_as_long_as_the_longest_keeping_broker_keeps_producer_ids() {
    let _restore = BrokerExpirationRestored;
    let two_days: i64 = 2 * 86_400_000;
    set_broker_expiration(2, Some(&two_days.to_string()));
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("expiry");
    // The mirrored partition lives on broker 2, which keeps producer ids for two days.
    harness::create_topic(&destination, &topic, 1, Some(&[2]));
    let gw = TestGateway::start(mirror_config("expiry", &[&topic]));
    wait_mirroring(&gw.admin(), "expiry", 1);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(2)));
    assert_eq!(conn.produce(&topic, 0, batch(8_400_000, 0, 0, 1, "m")).0, 0);
    let before = now_ms();
    failover(&gw.admin(), "expiry");
    wait_stopped(&gw.admin(), "expiry");
    let until = mirror_json(&gw.admin(), "expiry")["protection_needed_until_ms"]
        .as_i64()
        .expect("protection_needed_until_ms");
    assert!(
        until >= before + two_days,
        "protection ends at {until}, {} h after the failover, but broker 2 keeps producer ids for 48 h",
        (until - before) / 3_600_000
    );
}

/// After a failover a local producer that collides with a mirrored producer id makes the PSM
/// disagree with the broker (the gateway cleared the mirrored producers at the barrier, the
/// broker did not): each such batch asks for a rebuild. Rebuilds read only what lies after the
/// barrier (the PSM is empty there anyway) and run at most once per interval per partition, so
/// collisions cannot make the gateway re-read a large log again and again (review F14).
#[test]
fn collisions_after_failover_rebuild_from_the_barrier_and_not_more_than_once_per_interval() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("storm");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("storm", &[&topic]));
    wait_mirroring(&gw.admin(), "storm", 1);
    let pid = 8_500_000 + (std::process::id() as i64 % 1000) * 10;
    let mirrored = 300;
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let answers = mirror.produce_pipelined(
        &topic,
        0,
        (0..mirrored)
            .map(|seq| batch(pid, 0, seq, 1, &format!("m{seq}")))
            .collect(),
    );
    assert!(answers.iter().all(|(code, _)| *code == 0), "{answers:?}");
    failover(&gw.admin(), "storm");
    wait_stopped(&gw.admin(), "storm");
    let batches_before = gw.metric("mirrorgate_psm_rebuild_batches_total");
    let rebuilds_before = gw.metric("mirrorgate_psm_rebuilds_total");
    let started = std::time::Instant::now();
    // Epoch 1, above the mirrored one (the gateway lets it through): for the broker, which
    // holds the producer at epoch 0, a new epoch must start at sequence 0, so 1000 is refused
    // (45), while the PSM, cleared at the barrier, sees a new producer.
    let mut local = RawConn::connect(&gw.bootstrap());
    for i in 0..10 {
        let (code, _) = local.produce(&topic, 0, batch(pid, 1, 1000 + i, 1, "local"));
        assert_eq!(code, 45, "the broker refuses the out-of-order batch");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The rebuild comes at most 5 s after the partition's previous one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while gw.metric("mirrorgate_psm_rebuilds_total") == rebuilds_before
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let rebuilds = gw.metric("mirrorgate_psm_rebuilds_total") - rebuilds_before;
    let batches = gw.metric("mirrorgate_psm_rebuild_batches_total") - batches_before;
    assert!(
        gw.metric("mirrorgate_psm_batches_total{result=\"diverged\"}") >= 1.0,
        "the collisions did not make the PSM disagree: {}",
        gw.metrics()
    );
    assert!(rebuilds >= 1.0, "no rebuild after the disagreements");
    assert!(
        batches < mirrored as f64,
        "{rebuilds} rebuilds read {batches} batches: the {mirrored} mirrored batches before the barrier were read again"
    );
    let allowed = 1.0 + (elapsed / 5.0).floor();
    assert!(
        rebuilds <= allowed,
        "{rebuilds} rebuilds of one partition in {elapsed:.1} s (at most {allowed} allowed: one per 5 s)"
    );
}

/// Delete the records of `topic`-`partition` below `offset` directly on its leader (not
/// through the gateway, which refuses it for mirror topics).
pub(crate) fn delete_records_on_the_broker(
    destination: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::DeleteRecordsRequest;
    use kafka_protocol::protocol::StrBytes;
    let addr = harness::leader_addr(destination, topic, partition);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c =
            mirrorgate::client::KafkaClient::connect(&addr, std::time::Duration::from_secs(10))
                .await
                .expect("connect");
        let r = c
            .send(
                &DeleteRecordsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![DeleteRecordsTopic::default()
                        .with_name(StrBytes::from_string(topic.to_string()).into())
                        .with_partitions(vec![DeleteRecordsPartition::default()
                            .with_partition_index(partition)
                            .with_offset(offset)])]),
                2,
            )
            .await
            .expect("DeleteRecords");
        assert_eq!(r.topics[0].partitions[0].error_code, 0, "DeleteRecords");
    });
}

/// Review F11e: the broker keeps a producer's state after retention or DeleteRecords removed
/// its batches from the log (until the producer id expires), so a rebuild of the gateway's
/// producer state that re-reads the log must not forget it: a rebuild after a divergence keeps
/// the producers whose batches are gone from the log, as the broker does.
#[test]
fn a_rebuild_after_divergence_keeps_producers_whose_records_were_deleted_from_the_log() {
    use crate::psm_differential::{broker_producers, gateway_producers};
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("removed");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("removed", &[&topic]));
    wait_mirroring(&gw.admin(), "removed", 1);
    let base = 8_600_000 + (std::process::id() as i64 % 1000) * 10;
    let (a, b, c) = (base, base + 1, base + 2);
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    assert_eq!(mirror.produce(&topic, 0, batch(a, 0, 0, 1, "a")).0, 0);
    assert_eq!(mirror.produce(&topic, 0, batch(b, 0, 0, 1, "b")).0, 0);
    // A's only batch (offset 0) leaves the log; the broker keeps A.
    delete_records_on_the_broker(&destination, &topic, 0, 1);
    let leader = harness::leader_addr(&destination, &topic, 0);
    let mut direct = RawConn::connect(&leader);
    assert!(
        broker_producers(&mut direct, &topic, 0)
            .iter()
            .any(|r| r.0 == a),
        "the broker keeps A after its records were deleted"
    );
    // A divergence: C wrote straight to the broker, so the gateway takes C for a new producer
    // and expects sequence 5 to be appended; the broker refuses it (45) and the gateway rebuilds.
    assert_eq!(direct.produce(&topic, 0, batch(c, 0, 0, 1, "c")).0, 0);
    let rebuilds_before = gw.metric("mirrorgate_psm_rebuilds_total");
    assert_eq!(mirror.produce(&topic, 0, batch(c, 0, 5, 1, "c5")).0, 45);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while gw.metric("mirrorgate_psm_rebuilds_total") == rebuilds_before {
        assert!(
            std::time::Instant::now() < deadline,
            "the divergence did not cause a rebuild"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let broker: Vec<i64> = broker_producers(&mut direct, &topic, 0)
        .iter()
        .map(|r| r.0)
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let gateway: Vec<i64> = loop {
        let rows: Vec<i64> = gateway_producers(&gw.admin(), &topic, 0)
            .iter()
            .map(|r| r.0)
            .collect();
        if rows.contains(&c) || std::time::Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(broker, vec![a, b, c], "the broker's producers");
    assert_eq!(
        gateway, broker,
        "the gateway's producers after the rebuild differ from the broker's"
    );
}

/// Review F6: the state directory records a barrier the partition's log no longer holds (the
/// log was cut below it — an unclean election, a destination restored from an older copy; here
/// the record's offset is moved past the log end while the gateway is down). At start the
/// gateway checks every barrier against the log, says which one is missing, and does not let
/// it guard: genuine acknowledgements below the recorded offset are passed on, so an
/// idempotent producer's 50 records are all acknowledged and written once.
#[test]
fn a_barrier_the_log_no_longer_holds_is_reported_at_start_and_guards_nothing() {
    use crate::failover::process_metric;
    use crate::gw::ProcessGateway;
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("cutlog");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let mut gw = ProcessGateway::start(mirror_config("cutlog", &[&topic]), &[]);
    wait_mirroring(&gw.admin(), "cutlog", 1);
    let mut conn = RawConn::connect(&gw.mirror_bootstrap());
    let pid = 8_700_000 + (std::process::id() as i64 % 1000) * 10;
    assert_eq!(conn.produce(&topic, 0, batch(pid, 0, 0, 20, "m")).0, 0);
    drop(conn);
    failover(&gw.admin(), "cutlog");
    wait_stopped(&gw.admin(), "cutlog");
    gw.kill9();
    let file = gw.config.state_dir.join("mirrors/cutlog.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("mirror state")).expect("json");
    record["partitions"][0]["barrier_offset"] = serde_json::json!(500);
    std::fs::write(&file, serde_json::to_vec(&record).expect("json")).expect("write");
    gw.restart(&[]);
    let (_, body) = gw.call(hyper::Method::GET, "/v1/mirrors/cutlog/partitions");
    let parts: serde_json::Value = serde_json::from_str(&body).expect("json");
    let why = parts["partitions"][0]["barrier_missing"]
        .as_str()
        .unwrap_or_else(|| panic!("no barrier_missing reported: {parts}"));
    assert!(why.contains("cut below the barrier"), "{why}");
    assert_eq!(
        process_metric(&gw, "mirrorgate_protection_barriers_missing"),
        1.0
    );
    fifty_idempotent_sends_all_succeed(&gw.bootstrap(), &topic);
    let log = crate::failover::read_log(&destination, &topic, 0);
    let local = log
        .records
        .iter()
        .filter(|r| !r.control && r.producer_id != pid && r.value.is_some())
        .count();
    assert_eq!(
        local, 50,
        "the log holds {local} local records for 50 sends"
    );
    assert_eq!(
        process_metric(&gw, "mirrorgate_duplicate_ack_guard_total"),
        0.0
    );
}

/// Java `VerifiableProducer` sends 50 idempotent records to `topic` through `bootstrap`; every
/// send must be acknowledged.
fn fifty_idempotent_sends_all_succeed(bootstrap: &str, topic: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let props = harness::idempotent_producer_props(dir.path());
    let (acked, out) = harness::verifiable_produce(bootstrap, topic, 50, &props);
    assert_eq!(
        acked.len(),
        50,
        "not every send succeeded: {}\n{}",
        harness::tail_text(&out.stdout, 2000),
        harness::tail_text(&out.stderr, 2000)
    );
}
