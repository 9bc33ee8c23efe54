//! The built-in agent mirrors as-is and fails over while the source is written, a transaction's
//! marker included; what it refuses (a destination that does not match, a mirror without its listener),
//! and resuming from its offset map after a restart.

use super::*;

#[test]
fn active_passive_mirrors_as_is_and_fails_over_while_the_source_is_written() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-ap");
    harness::create_topic(&source, &topic, 2, None);
    // Records from before the agent starts, then the agent creates the destination topic.
    SourceWriter::start(&source, &topic, "pre", 400, 5000).finish(false);
    let gw = TestGateway::start(agent_config("ap", &[&topic], &source));
    wait_caught_up(&gw.admin(), "ap", &source, &topic, 2);
    // The gateway's producer state of each mirrored partition equals the source broker's.
    for p in 0..2 {
        let mut conn = RawConn::connect(&leader_addr(&source, &topic, p));
        let broker = broker_producers(&mut conn, &topic, p);
        assert!(!broker.is_empty(), "the source has producer state");
        assert_eq!(
            gateway_producers(&gw.admin(), &topic, p),
            broker,
            "partition {p}: the PSM equals the source broker's DescribeProducers"
        );
    }
    assert!(
        gw.metrics().contains(&format!(
            "mirrorgate_mirror_lag_records{{mirror=\"ap\",partition=\"0\",topic=\"{topic}\"}} 0"
        )),
        "lag metric: {}",
        gw.metrics()
            .lines()
            .filter(|l| l.contains("lag"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Local writes are refused while mirroring.
    let refused = crate::failover::produce_one_expect_error(&gw.bootstrap(), &topic);
    assert!(
        refused.to_lowercase().contains("policy") || refused.contains("read-only"),
        "{refused}"
    );

    // A producer writes to the source; fail over in the middle of it.
    let destination = harness::cluster("destination");
    let writer = SourceWriter::start(&source, &topic, "live", 1_000_000, 400);
    let mirrored_live = || {
        (0..2)
            .flat_map(|p| read_log(&destination, &topic, p).records)
            .filter(|r| r.1.as_deref().is_some_and(|k| k.starts_with("live-")))
            .count()
    };
    wait_for("live records mirrored", Duration::from_secs(60), || {
        mirrored_live() > 0 && writer.acked() > 100
    });
    assert!(
        writer.is_running(),
        "the failover starts while the source is written"
    );
    failover(&gw.admin(), "ap");
    wait_stopped(&gw.admin(), "ap");
    // The source goes on being written: wait until every partition holds records past what the
    // agent mirrored, so that "nothing after the barrier" has something to leave out.
    let mirrored_to: Vec<i64> = (0..2)
        .map(|p| agent_map_next(&gw, "ap", &topic, p).expect("offset map").0)
        .collect();
    wait_for(
        "the source written past the mirrored records",
        Duration::from_secs(60),
        || (0..2).all(|p| log_end(&source, &topic, p) >= mirrored_to[p as usize] + 50),
    );
    let live = writer.finish(true);
    assert!(live > 100, "the source producer made progress ({live})");
    let barriers = assert_mirrored_up_to_the_barrier(&gw, "ap", &source, &topic, 2);
    // The agent is stopped: nothing is appended after the barrier.
    for (p, b) in &barriers {
        let log = read_log(&destination, &topic, *p);
        assert!(
            log.records.iter().all(|r| r.0 < *b),
            "partition {p}: nothing after the barrier"
        );
    }
    // Some live records were mirrored before the barrier.
    assert!(
        mirrored_live() > 0,
        "live records were mirrored before the failover"
    );
    assert_local_producers_lose_nothing(&gw, &topic, &barriers);
}

#[test]
fn a_librdkafka_transaction_after_plain_records_is_mirrored_with_its_marker() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-txn");
    harness::create_topic(&source, &topic, 1, None);
    SourceWriter::start(&source, &topic, "plain", 10, 5000).finish(false);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &source)
        .set(
            "transactional.id",
            format!("agent-txn-{}", std::process::id()),
        )
        .create()
        .expect("transactional producer");
    harness::init_transactions(&producer);
    producer.begin_transaction().expect("begin");
    producer
        .send(BaseRecord::to(&topic).key("txn").payload("txn"))
        .map_err(|(e, _)| e)
        .expect("send");
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("commit");
    let gw = TestGateway::start(agent_config("txn", &[&topic], &source));
    let destination = harness::cluster("destination");
    wait_for(
        "the transaction's marker on the destination",
        Duration::from_secs(60),
        || {
            !crate::failover::read_log(&destination, &topic, 0)
                .control_batches
                .is_empty()
        },
    );
    let d = read_log(&destination, &topic, 0);
    assert_eq!(
        d.records.len(),
        11,
        "the plain records and the transaction's"
    );
    let markers = crate::failover::read_log(&destination, &topic, 0).control_batches;
    assert_eq!(markers.len(), 1);
    assert!(
        !markers[0].abort,
        "a COMMIT marker at offset {}",
        markers[0].offset
    );
    assert_eq!(markers[0].offset, 11, "at the source's offset");
    assert!(partitions_json(&gw.admin(), "txn")
        .iter()
        .all(|p| p["state"] == "MIRRORING"));
    failover(&gw.admin(), "txn");
    wait_stopped(&gw.admin(), "txn");
}

#[test]
fn a_mirror_with_a_source_requires_the_mirror_listener() {
    let mut cfg = agent_config("nolistener", &["agent-nolistener"], "127.0.0.1:1");
    cfg.listeners.mirror = None;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let err = rt
        .block_on(mirrorgate::app::Gateway::start(cfg))
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("listeners.mirror") && msg.contains("nolistener"),
        "{msg}"
    );
}

#[test]
fn a_restarted_gateway_resumes_from_the_offset_map_without_duplicates() {
    let source = harness::cluster("source");
    let topic = harness::unique_topic("agent-restart");
    harness::create_topic(&source, &topic, 1, None);
    SourceWriter::start(&source, &topic, "one", 200, 2000).finish(false);
    let cfg = agent_config("restart", &[&topic], &source);
    let gw = TestGateway::start(cfg.clone());
    wait_caught_up(&gw.admin(), "restart", &source, &topic, 1);
    drop(gw);
    SourceWriter::start(&source, &topic, "two", 200, 2000).finish(false);
    let gw = TestGateway::start(cfg);
    wait_caught_up(&gw.admin(), "restart", &source, &topic, 1);
    let map = gw
        .gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map("restart", &topic, 0)
        .expect("map");
    assert_eq!(map.next(), Some((400, 400)));
}

/// A gateway that starts without the offset map of a destination that already holds the
/// source's batches (another gateway mirrored them; its state directory is gone) matches them
/// batch for batch before it mirrors on. A failover called as soon as that matching has begun
/// completes with a report naming the destination's last mirrored record, whether the failover
/// stopped the matching part-way (the rest is matched when the failover completes) or not.
/// Red before: the report named where the matching stopped; later, matching read everything
/// after each batch again, and 20,000 one-record batches were not matched within the bound
/// of the failover's completion (8,475 were).
#[test]
fn a_failover_called_as_the_agent_matches_a_long_destination_tail_reports_its_last_mirrored_record()
{
    const RECORDS: i64 = 20_000;
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-startmatch");
    harness::create_topic(&source, &topic, 1, None);
    write_one_record_batches(&source, &topic, RECORDS);
    let first = TestGateway::start(agent_config("startmatch", &[&topic], &source));
    wait_caught_up(&first.admin(), "startmatch", &source, &topic, 1);
    drop(first);
    // A fresh state directory: no offset map.
    let gw = TestGateway::start(agent_config("startmatch", &[&topic], &source));
    let deadline = Instant::now() + Duration::from_secs(60);
    let part_way = loop {
        if let Some((next, _)) = agent_map_next(&gw, "startmatch", &topic, 0) {
            if next > 0 {
                break next;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the agent never started matching"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    failover(&gw.admin(), "startmatch");
    wait_stopped(&gw.admin(), "startmatch");
    let d = read_log(&destination, &topic, 0);
    assert_eq!(d.records.len() as i64, RECORDS, "nothing appended twice");
    let report = completed_report(&gw.admin(), "startmatch");
    let p = &report["partitions"][0];
    assert_eq!(
        p["last_mirrored_destination_offset"].as_i64(),
        Some(RECORDS - 1),
        "matching had reached {part_way} when the failover was called: {p}"
    );
    assert_eq!(
        p["last_mirrored_source_offset"].as_i64(),
        Some(RECORDS - 1),
        "{p}"
    );
}

/// `n` records on partition 0 of `topic`, each a batch of its own (no producer id).
fn write_one_record_batches(bootstrap: &str, topic: &str, n: i64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "false")
        .set("acks", "1")
        .set("linger.ms", "0")
        .set("batch.size", "1")
        .create()
        .expect("producer");
    for i in 0..n {
        let key = format!("k-{i}");
        let value = format!("v-{i}");
        let mut rec = BaseRecord::to(topic).key(&key).payload(&value).partition(0);
        while let Err((e, r)) = producer.send(rec) {
            assert!(
                matches!(
                    e,
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull
                    )
                ),
                "{e}"
            );
            rec = r;
            producer.poll(Duration::from_millis(10));
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    assert_eq!(log_end(bootstrap, topic, 0), n, "every record written");
}

#[test]
fn a_non_empty_destination_partition_that_does_not_match_the_source_is_failed_not_overwritten() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-nonempty");
    harness::create_topic(&source, &topic, 1, None);
    harness::create_topic(&destination, &topic, 1, None);
    SourceWriter::start(&source, &topic, "src", 10, 2000).finish(false);
    SourceWriter::start(&destination, &topic, "local", 3, 2000).finish(false);
    let gw = TestGateway::start(agent_config("nonempty", &[&topic], &source));
    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        let parts = partitions_json(&gw.admin(), "nonempty");
        if let Some(p) = parts.iter().find(|p| p["state"] == "FAILED") {
            break p["last_error"].as_str().unwrap_or_default().to_string();
        }
        assert!(Instant::now() < deadline, "partition not FAILED: {parts:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(reason.contains("do not match the source"), "{reason}");
    assert_eq!(read_log(&destination, &topic, 0).records.len(), 3);
}

#[test]
fn start_refuses_a_mirror_without_the_agent_and_a_mirror_that_is_not_stopped() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("start-refused");
    harness::create_topic(&destination, &topic, 1, None);
    let gw = TestGateway::start(crate::failover::mirror_config("external", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "external", 1);
    let (status, body) = crate::gw::admin_call(
        &gw.admin(),
        Method::POST,
        "/v1/mirrors/external/start",
        None,
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cannot verify"), "{body}");
    let (status, _) =
        crate::gw::admin_call(&gw.admin(), Method::POST, "/v1/mirrors/nope/start", None);
    assert_eq!(status, 404);
}
