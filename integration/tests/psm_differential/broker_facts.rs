//! Facts only the broker knows: a LogAppendTime topic's timestamps, and transactions ended by
//! markers the gateway never sees.

use super::*;

/// `batch` with its base and max timestamps set to `ts` (CRC fixed).
fn batch_at(ts: i64, pid: i64, epoch: i16, base_seq: i32, n: i32, tag: &str) -> Bytes {
    let mut b = BytesMut::from(&batch(pid, epoch, base_seq, n, tag)[..]);
    b[27..35].copy_from_slice(&ts.to_be_bytes());
    b[35..43].copy_from_slice(&ts.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// On a LogAppendTime topic the broker keeps its own append time as a producer's last
/// timestamp, not the one in the request; the gateway takes it from the broker's answer, so
/// its expiry and the screening horizon follow the broker (review F11a).
#[test]
fn on_a_log_append_time_topic_the_psm_keeps_the_brokers_timestamp() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("appendtime");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    crate::failover::set_topic_configs_on_the_destination(
        &destination,
        &topic,
        &[("message.timestamp.type", "LogAppendTime")],
    );
    let gw = gateway_tracking(&topic);
    let mut mirror = RawConn::connect(&gw.mirror_bootstrap());
    let two_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
        - 2 * 86_400_000;
    let pid = 8_600_000 + (std::process::id() as i64 % 1000) * 10;
    for seq in 0..3 {
        let (code, _) = mirror.produce(&topic, 0, batch_at(two_days_ago, pid, 0, seq, 1, "old"));
        assert_eq!(code, 0);
    }
    let mut broker = RawConn::connect(&destination_leader(&topic));
    let on_broker = broker_producers(&mut broker, &topic, 0);
    let in_gateway = gateway_producers(&gw.admin(), &topic, 0);
    assert!(
        on_broker[0].3 > two_days_ago + 86_400_000,
        "the broker kept the request's timestamp: {on_broker:?}"
    );
    assert_eq!(
        in_gateway, on_broker,
        "gateway and broker disagree on the producer (last timestamp is the 4th field)"
    );
}

/// Review F11f: a transaction's COMMIT/ABORT marker is written by the transaction coordinator
/// straight to the partition leader, so the gateway never sees it pass. A transactional
/// producer writing through the mirror listener (as MirrorMaker 2 does in exactly-once mode)
/// must not leave the gateway's producer state showing its transactions open for ever (such
/// entries never expire): after the commit and the abort, the gateway agrees with
/// DescribeProducers that no transaction is open.
#[test]
fn transactions_ended_by_markers_the_gateway_never_sees_are_closed_in_its_producer_state() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("txnmarkers");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = TestGateway::start(crate::failover::mirror_config("txnmarkers", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "txnmarkers", 1);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", gw.mirror_bootstrap())
        .set("transactional.id", format!("{topic}-tx"))
        .create()
        .expect("transactional producer");
    let t = std::time::Duration::from_secs(30);
    harness::init_transactions(&producer);
    for commit in [true, false] {
        producer.begin_transaction().expect("begin");
        producer
            .send(BaseRecord::to(&topic).key("k").payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
        producer.flush(t).expect("flush");
        if commit {
            producer.commit_transaction(t).expect("commit");
        } else {
            producer.abort_transaction(t).expect("abort");
        }
    }
    let leader = harness::leader_addr(&destination, &topic, 0);
    let mut direct = RawConn::connect(&leader);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let broker = broker_producers(&mut direct, &topic, 0);
        let gateway = gateway_producers(&gw.admin(), &topic, 0);
        let open = |rows: &[ProducerRow]| rows.iter().filter(|r| r.5 >= 0).count();
        if open(&broker) == 0 && open(&gateway) == 0 {
            assert_eq!(
                gateway, broker,
                "after the markers, the gateway agrees with the broker"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "30 s after the abort the producer states disagree on open transactions:\nbroker:  {broker:?}\ngateway: {gateway:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
