//! Review finding F5: a mirror topic stays read-only for ordinary clients until failover, through
//! every API that changes its data, its layout or its configuration — not only Produce.
//!
//! Each test drives a real client (Java admin tools where one exists, otherwise the project's
//! `KafkaClient` with kafka-protocol request types) through the gateway's **client** listener
//! against Kafka 4.1.1, then reads the destination brokers directly (never through the gateway)
//! to check that nothing changed: log start offset, topic existence, partition count, config
//! value, no control batch. After a failover (STOPPED) the same operations go through, and the
//! mirror listener keeps allowing them while MIRRORING (mirroring tools create partitions and
//! sync configs through it).

use std::time::{Duration, Instant};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AlterConfigsRequest, CreatePartitionsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest, EndTxnRequest, FindCoordinatorRequest,
    InitProducerIdRequest, MetadataRequest, TopicName, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::{KafkaClient, EARLIEST};

use crate::failover::{failover, mirror_config, read_log, wait_mirroring, wait_stopped};
use crate::gw::TestGateway;
use crate::harness;

const POLICY_VIOLATION: i16 = 44;
const T: Duration = Duration::from_secs(20);

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
        .block_on(f)
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn first(bootstrap: &str) -> String {
    bootstrap
        .split(',')
        .next()
        .expect("address")
        .trim()
        .to_string()
}

/// A mirror `ro` over a new one-partition topic on broker 1, holding 10 mirrored records, with
/// a gateway in front; plus a plain (not mirrored) one-partition topic on broker 1.
struct Setup {
    destination: String,
    topic: String,
    plain: String,
    gw: TestGateway,
}

fn setup(prefix: &str) -> Setup {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(prefix);
    let plain = harness::unique_topic(&format!("{prefix}-plain"));
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    harness::create_topic(&destination, &plain, 1, Some(&[1]));
    let gw = TestGateway::start(mirror_config("ro", &[&topic]));
    wait_mirroring(&gw.admin(), "ro", 1);
    assert_eq!(
        harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 10, &[]).len(),
        10
    );
    assert_eq!(
        harness::produce_keyed(&destination, &plain, 10, &[]).len(),
        10
    );
    Setup {
        destination,
        topic,
        plain,
        gw,
    }
}

/// The log start offset of `topic`-0, read from its leader on the destination.
fn log_start(destination: &str, topic: &str) -> i64 {
    let addr = harness::leader_addr(destination, topic, 0);
    block(async {
        let mut c = KafkaClient::connect(&addr, T).await.expect("connect");
        c.list_offset(topic, 0, EARLIEST)
            .await
            .expect("list offsets")
    })
}

/// Topic id and partition count on the destination, `None` when the topic does not exist.
fn describe(destination: &str, topic: &str) -> Option<(uuid::Uuid, usize)> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    block(async {
        let mut c = KafkaClient::connect(&first(destination), T)
            .await
            .expect("connect");
        let r = c
            .send(
                &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default(
                )
                .with_name(Some(name(topic)))])),
                12,
            )
            .await
            .expect("metadata");
        let t = r.topics.first()?;
        (t.error_code == 0).then_some((t.topic_id, t.partitions.len()))
    })
}

/// A topic config value as the destination reports it.
fn config_value(destination: &str, topic: &str, key: &str) -> Option<String> {
    block(async {
        let mut c = KafkaClient::connect(&first(destination), T)
            .await
            .expect("connect");
        let r = c
            .send(
                &DescribeConfigsRequest::default().with_resources(vec![
                    DescribeConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_string(topic.to_string()))
                        .with_configuration_keys(Some(vec![StrBytes::from_string(
                            key.to_string(),
                        )])),
                ]),
                4,
            )
            .await
            .expect("describe configs");
        let res = r.results.first().expect("result");
        assert_eq!(res.error_code, 0, "describe configs of {topic}");
        res.configs
            .iter()
            .find(|c| c.name.as_str() == key && c.config_source == 1)
            .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
    })
}

/// `key`'s value on `topic` once it equals `expected`, or the last value seen after 15 s.
/// A config change is answered once the controller has committed it; the broker asked
/// here applies it a moment later, so a positive expectation waits for it.
fn await_config_value(destination: &str, topic: &str, key: &str, expected: &str) -> Option<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let v = config_value(destination, topic, key);
        if v.as_deref() == Some(expected) || std::time::Instant::now() >= deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the log of `topic`-0 holds a control batch (a transaction marker).
fn has_control_batch(destination: &str, topic: &str) -> bool {
    read_log(destination, topic, 0)
        .records
        .iter()
        .any(|r| r.control)
}

/// Run a Java tool; returns stdout + stderr.
fn java(class: &str, args: &[&str]) -> String {
    let out = harness::rig_java(class, args);
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn delete_records_command(bootstrap: &str, topic: &str, offset: i64) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("offsets.json");
    std::fs::write(
        &file,
        format!(
            r#"{{"partitions":[{{"topic":"{topic}","partition":0,"offset":{offset}}}],"version":1}}"#
        ),
    )
    .expect("write offsets");
    java(
        "org.apache.kafka.tools.DeleteRecordsCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--offset-json-file",
            file.to_str().expect("path"),
        ],
    )
}

fn alter_topic_config(bootstrap: &str, topic: &str, setting: &str) -> String {
    java(
        "kafka.admin.ConfigCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--add-config",
            setting,
        ],
    )
}

#[test]
fn delete_records_on_a_mirroring_topic_is_refused_and_truncates_nothing() {
    let s = setup("ro-delrec");
    // Java DeleteRecordsCommand through the client listener.
    let out = delete_records_command(&s.gw.bootstrap(), &s.topic, 5);
    assert_eq!(
        log_start(&s.destination, &s.topic),
        0,
        "the mirrored partition was truncated through the client listener:\n{out}"
    );
    assert!(out.contains("PolicyViolation"), "{out}");
    // One request naming the mirror partition and a plain one: only the plain one is truncated.
    let (mirror_code, plain_code) = block(async {
        let addr = format!("127.0.0.1:{}", s.gw.port_for(1));
        let mut c = KafkaClient::connect(&addr, T).await.expect("connect");
        let part = |offset| {
            vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)]
        };
        let r = c
            .send(
                &DeleteRecordsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![
                        DeleteRecordsTopic::default()
                            .with_name(name(&s.topic))
                            .with_partitions(part(3)),
                        DeleteRecordsTopic::default()
                            .with_name(name(&s.plain))
                            .with_partitions(part(4)),
                    ]),
                2,
            )
            .await
            .expect("delete records");
        let code = |t: &str| {
            r.topics
                .iter()
                .find(|x| x.name.0.as_str() == t)
                .and_then(|x| x.partitions.first())
                .map(|p| p.error_code)
        };
        (code(&s.topic), code(&s.plain))
    });
    assert_eq!(log_start(&s.destination, &s.topic), 0, "mixed request");
    assert_eq!(log_start(&s.destination, &s.plain), 4, "the plain topic");
    assert_eq!(mirror_code, Some(POLICY_VIOLATION));
    assert_eq!(plain_code, Some(0));
    assert!(
        s.gw.metric(r#"mirrorgate_produce_rejected_total{reason="read_only_admin"}"#) >= 2.0,
        "{}",
        s.gw.metrics()
    );
}

#[test]
fn deleting_a_mirroring_topic_is_refused() {
    let s = setup("ro-deltopic");
    let out = java(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &s.gw.bootstrap(),
            "--delete",
            "--topic",
            &s.topic,
        ],
    );
    std::thread::sleep(Duration::from_secs(1));
    let (id, _) = describe(&s.destination, &s.topic).unwrap_or_else(|| {
        panic!("the mirror topic was deleted through the client listener:\n{out}")
    });
    assert!(out.contains("PolicyViolation"), "{out}");
    // By topic id (DeleteTopics v6) and by name next to a plain topic (v5, with a message): the
    // plain topic goes, the mirror topic stays.
    let (by_id, by_name, plain, message) = block(async {
        let addr = format!("127.0.0.1:{}", s.gw.port_for(1));
        let mut c = KafkaClient::connect(&addr, T).await.expect("connect");
        let r = c
            .send(
                &DeleteTopicsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![DeleteTopicState::default().with_topic_id(id)]),
                6,
            )
            .await
            .expect("delete topics v6");
        let by_id = r.responses.first().map(|x| x.error_code);
        let r = c
            .send(
                &DeleteTopicsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topic_names(vec![name(&s.topic), name(&s.plain)]),
                5,
            )
            .await
            .expect("delete topics v5");
        let find = |t: &str| {
            r.responses
                .iter()
                .find(|x| x.name.as_ref().is_some_and(|n| n.0.as_str() == t))
                .cloned()
        };
        let m = find(&s.topic);
        (
            by_id,
            m.as_ref().map(|x| x.error_code),
            find(&s.plain).map(|x| x.error_code),
            m.and_then(|x| x.error_message).map(|m| m.to_string()),
        )
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        describe(&s.destination, &s.topic).is_some(),
        "the mirror topic was deleted through the client listener (by id or in a mixed request)"
    );
    assert!(describe(&s.destination, &s.plain).is_none(), "plain topic");
    assert_eq!(by_id, Some(POLICY_VIOLATION));
    assert_eq!(by_name, Some(POLICY_VIOLATION));
    assert_eq!(plain, Some(0));
    let message = message.unwrap_or_default();
    assert!(
        message.contains(&s.topic)
            && message.contains("mirror ro")
            && message.contains("MIRRORING"),
        "{message}"
    );
}

#[test]
fn adding_partitions_to_a_mirroring_topic_is_refused() {
    let s = setup("ro-addpart");
    let out = java(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &s.gw.bootstrap(),
            "--alter",
            "--topic",
            &s.topic,
            "--partitions",
            "3",
        ],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        describe(&s.destination, &s.topic).map(|d| d.1),
        Some(1),
        "partitions were added to the mirror topic through the client listener:\n{out}"
    );
    assert!(out.contains("PolicyViolation"), "{out}");
    // The mirror listener may: mirroring tools create partitions through it.
    let code = block(async {
        use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
        let addr = format!("127.0.0.1:{}", s.gw.mirror_port_for(1));
        let mut c = KafkaClient::connect(&addr, T).await.expect("connect");
        let r = c
            .send(
                &CreatePartitionsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![CreatePartitionsTopic::default()
                        .with_name(name(&s.topic))
                        .with_count(2)
                        .with_assignments(None)]),
                3,
            )
            .await
            .expect("create partitions");
        r.results.first().map(|x| x.error_code)
    });
    assert_eq!(code, Some(0), "through the mirror listener");
    assert_eq!(describe(&s.destination, &s.topic).map(|d| d.1), Some(2));
}

#[test]
fn altering_a_mirroring_topics_config_is_refused() {
    let s = setup("ro-config");
    // IncrementalAlterConfigs (Java ConfigCommand).
    let out = alter_topic_config(&s.gw.bootstrap(), &s.topic, "retention.ms=1");
    assert_eq!(
        config_value(&s.destination, &s.topic, "retention.ms"),
        None,
        "the mirror topic's config was changed through the client listener:\n{out}"
    );
    assert!(out.contains("PolicyViolation"), "{out}");
    // Legacy AlterConfigs naming the mirror topic and a plain topic: only the plain one changes.
    let codes = block(async {
        let addr = format!("127.0.0.1:{}", s.gw.port_for(1));
        let mut c = KafkaClient::connect(&addr, T).await.expect("connect");
        let res = |t: &str| {
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(t.to_string()))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("compression.type"))
                    .with_value(Some(StrBytes::from_static_str("gzip")))])
        };
        let r = c
            .send(
                &AlterConfigsRequest::default().with_resources(vec![res(&s.topic), res(&s.plain)]),
                2,
            )
            .await
            .expect("alter configs");
        r.responses
            .iter()
            .map(|x| {
                (
                    x.resource_name.to_string(),
                    x.error_code,
                    x.error_message.as_ref().map(|m| m.to_string()),
                )
            })
            .collect::<Vec<_>>()
    });
    // The plain topic's change first: both resources were in one request, so once the
    // broker shows it, a change to the mirror topic would show too.
    assert_eq!(
        await_config_value(&s.destination, &s.plain, "compression.type", "gzip").as_deref(),
        Some("gzip")
    );
    assert_eq!(
        config_value(&s.destination, &s.topic, "compression.type"),
        None,
        "mixed AlterConfigs changed the mirror topic: {codes:?}"
    );
    let mirror = codes.iter().find(|c| c.0 == s.topic).expect("mirror entry");
    assert_eq!(mirror.1, POLICY_VIOLATION, "{codes:?}");
    assert!(
        mirror.2.as_deref().is_some_and(|m| m.contains("mirror ro")),
        "{codes:?}"
    );
    assert!(
        codes.iter().any(|c| c.0 == s.plain && c.1 == 0),
        "{codes:?}"
    );
}

/// FindCoordinator (transaction) and InitProducerId through the gateway; returns the client
/// connected to the coordinator, the producer id and epoch.
pub(crate) async fn transactional_producer(
    gw: &TestGateway,
    txn_id: &str,
) -> (KafkaClient, i64, i16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let node = coordinator_node(&gw.bootstrap(), txn_id, 1).await;
    let addr = format!("127.0.0.1:{}", gw.port_for(node));
    let mut c = KafkaClient::connect(&addr, T).await.expect("connect");
    loop {
        let r = c
            .send(
                &InitProducerIdRequest::default()
                    .with_transactional_id(Some(StrBytes::from_string(txn_id.to_string()).into()))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id((-1).into())
                    .with_producer_epoch(-1),
                4,
            )
            .await
            .expect("init producer id");
        if r.error_code == 0 {
            return (c, r.producer_id.0, r.producer_epoch);
        }
        assert!(
            matches!(r.error_code, 14 | 15 | 51) && Instant::now() < deadline,
            "init producer id: {}",
            r.error_code
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[test]
fn a_transaction_cannot_add_a_mirroring_partition() {
    let s = setup("ro-txn");
    let txn = harness::unique_topic("ro-txn-id");
    let code = block(async {
        let (mut c, pid, epoch) = transactional_producer(&s.gw, &txn).await;
        let r = c
            .send(
                &AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(StrBytes::from_string(txn.clone()).into())
                    .with_v3_and_below_producer_id(pid.into())
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                        .with_name(name(&s.topic))
                        .with_partitions(vec![0])]),
                3,
            )
            .await
            .expect("add partitions to txn");
        let code = r
            .results_by_topic_v3_and_below
            .first()
            .and_then(|t| t.results_by_partition.first())
            .map(|p| p.partition_error_code);
        // Abort: had the partition joined the transaction, the coordinator would now write an
        // ABORT marker into the mirrored partition.
        let _ = c
            .send(
                &EndTxnRequest::default()
                    .with_transactional_id(StrBytes::from_string(txn.clone()).into())
                    .with_producer_id(pid.into())
                    .with_producer_epoch(epoch)
                    .with_committed(false),
                3,
            )
            .await
            .expect("end txn");
        code
    });
    // Markers are written after EndTxn is answered: give the coordinator time.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !has_control_batch(&s.destination, &s.topic),
        "an ABORT marker was written into the mirrored partition (AddPartitionsToTxn answered {code:?})"
    );
    assert_eq!(code, Some(POLICY_VIOLATION));
}

#[test]
fn unclean_leader_election_on_a_mirroring_partition_is_refused() {
    let s = setup("ro-elect");
    let before = harness::partition_leaders(&s.destination, &s.topic);
    let election = |kind: &str| {
        java(
            "org.apache.kafka.tools.LeaderElectionCommand",
            &[
                "--bootstrap-server",
                &s.gw.bootstrap(),
                "--election-type",
                kind,
                "--topic",
                &s.topic,
                "--partition",
                "0",
            ],
        )
    };
    let unclean = election("unclean");
    assert_eq!(harness::partition_leaders(&s.destination, &s.topic), before);
    // The broker itself would answer ELECTION_NOT_NEEDED (the leader is alive): the request
    // must not reach it.
    assert!(unclean.contains("PolicyViolation"), "{unclean}");
    // Preferred elections pass.
    let preferred = election("preferred");
    assert!(!preferred.contains("PolicyViolation"), "{preferred}");
    assert!(
        preferred.contains("Valid replica already elected"),
        "{preferred}"
    );
}

#[test]
fn write_txn_markers_for_a_mirroring_partition_is_refused() {
    let s = setup("ro-markers");
    let code = block(async {
        let addr = format!("127.0.0.1:{}", s.gw.port_for(1));
        let mut c = KafkaClient::connect(&addr, T).await.expect("connect");
        let r = c
            .send(
                &WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                    .with_producer_id(987_654_321.into())
                    .with_producer_epoch(0)
                    .with_transaction_result(false)
                    .with_coordinator_epoch(0)
                    .with_topics(vec![WritableTxnMarkerTopic::default()
                        .with_name(name(&s.topic))
                        .with_partition_indexes(vec![0])])]),
                1,
            )
            .await
            .expect("write txn markers");
        r.markers
            .first()
            .and_then(|m| m.topics.first())
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code)
    });
    assert!(
        !has_control_batch(&s.destination, &s.topic),
        "a transaction marker was written into the mirrored partition (answer {code:?})"
    );
    assert_eq!(code, Some(POLICY_VIOLATION));
}

#[test]
fn after_failover_delete_records_and_config_changes_go_through() {
    let s = setup("ro-after");
    failover(&s.gw.admin(), "ro");
    wait_stopped(&s.gw.admin(), "ro");
    let out = delete_records_command(&s.gw.bootstrap(), &s.topic, 5);
    assert_eq!(log_start(&s.destination, &s.topic), 5, "{out}");
    let out = alter_topic_config(&s.gw.bootstrap(), &s.topic, "retention.ms=86400001");
    assert_eq!(
        await_config_value(&s.destination, &s.topic, "retention.ms", "86400001").as_deref(),
        Some("86400001"),
        "{out}"
    );
    let out = java(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &s.gw.bootstrap(),
            "--alter",
            "--topic",
            &s.topic,
            "--partitions",
            "2",
        ],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        describe(&s.destination, &s.topic).map(|d| d.1),
        Some(2),
        "{out}"
    );
}

/// The node id of the coordinator of `key` (`key_type` 0: a group, 1: a transactional id), found
/// through `bootstrap` (retried while the coordinator is not available, up to 60 s).
async fn coordinator_node(bootstrap: &str, key: &str, key_type: i8) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = KafkaClient::connect(&first(bootstrap), T)
            .await
            .expect("connect");
        let r = c
            .send(
                &FindCoordinatorRequest::default()
                    .with_key(StrBytes::from_string(key.to_string()))
                    .with_key_type(key_type),
                3,
            )
            .await
            .expect("find coordinator");
        if r.error_code == 0 {
            return r.node_id.0;
        }
        assert!(
            Instant::now() < deadline,
            "no coordinator for {key}: {}",
            r.error_code
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A client connected to the group coordinator of `group`, found through `bootstrap` and
/// reached at `port_for(node)`.
async fn group_coordinator(
    bootstrap: &str,
    group: &str,
    port_for: impl Fn(i32) -> String,
) -> KafkaClient {
    let node = coordinator_node(bootstrap, group, 0).await;
    KafkaClient::connect(&port_for(node), T)
        .await
        .expect("connect to the coordinator")
}

/// An admin-style OffsetCommit (generation -1, no member: what `AdminClient`
/// `alterConsumerGroupOffsets` and MirrorMaker 2's checkpoint sync send) of `offset` for
/// `topic`-0; returns the partition's error code.
async fn commit_offset(c: &mut KafkaClient, group: &str, topic: &str, offset: i64) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::OffsetCommitRequest;
    let r = c
        .send(
            &OffsetCommitRequest::default()
                .with_group_id(StrBytes::from_string(group.to_string()).into())
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)])]),
            8,
        )
        .await
        .expect("offset commit");
    r.topics
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code)
        .expect("partition answer")
}

/// The offset `group` has committed for `topic`-0, read from the destination's coordinator.
fn committed_offset(destination: &str, group: &str, topic: &str) -> i64 {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::OffsetFetchRequest;
    let brokers = harness::destination_brokers();
    block(async {
        let mut c = group_coordinator(destination, group, |node| {
            brokers
                .iter()
                .find(|(n, _)| *n == node)
                .map(|(_, a)| a.clone())
                .expect("coordinator address")
        })
        .await;
        let r = c
            .send(
                &OffsetFetchRequest::default()
                    .with_group_id(StrBytes::from_string(group.to_string()).into())
                    .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                        .with_name(name(topic))
                        .with_partition_indexes(vec![0])])),
                7,
            )
            .await
            .expect("offset fetch");
        r.topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.committed_offset)
            .expect("partition answer")
    })
}

#[test]
fn after_failover_the_mirror_listener_refuses_changes_to_stopped_topics() {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::incremental_alter_configs_request as iac;
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let s = setup("ro-mirror-after");
    let group = harness::unique_topic("ro-mirror-after-group");
    let mirror_addr = |node: i32| format!("127.0.0.1:{}", s.gw.mirror_port_for(node));
    // While MIRRORING the mirror listener takes a mirroring tool's group offsets (MirrorMaker 2
    // checkpoints), as it takes its configs and partitions.
    let code = block(async {
        let mut c = group_coordinator(&s.gw.mirror_bootstrap(), &group, mirror_addr).await;
        commit_offset(&mut c, &group, &s.topic, 4).await
    });
    assert_eq!(
        code, 0,
        "admin-style commit through the mirror listener while MIRRORING"
    );
    assert_eq!(committed_offset(&s.destination, &group, &s.topic), 4);
    failover(&s.gw.admin(), "ro");
    wait_stopped(&s.gw.admin(), "ro");
    // The tool is still attached to the mirror listener after the failover.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let mut c = rt
        .block_on(KafkaClient::connect(&mirror_addr(1), T))
        .expect("connect");
    let resource = |t: &str| {
        iac::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(t.to_string()))
            .with_configs(vec![iac::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_static_str("1")))])
    };
    let r = rt
        .block_on(
            c.send(
                &IncrementalAlterConfigsRequest::default()
                    .with_resources(vec![resource(&s.topic), resource(&s.plain)]),
                1,
            ),
        )
        .expect("incremental alter configs");
    let configs: Vec<(String, i16, String)> = r
        .responses
        .iter()
        .map(|x| {
            (
                x.resource_name.to_string(),
                x.error_code,
                x.error_message
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            )
        })
        .collect();
    let r = rt
        .block_on(
            c.send(
                &CreatePartitionsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![CreatePartitionsTopic::default()
                        .with_name(name(&s.topic))
                        .with_count(2)
                        .with_assignments(None)]),
                3,
            ),
        )
        .expect("create partitions");
    let partitions = r
        .results
        .first()
        .map(|x| {
            (
                x.error_code,
                x.error_message
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
            )
        })
        .expect("create partitions answer");
    let commit = block(async {
        let mut g = group_coordinator(&s.gw.mirror_bootstrap(), &group, mirror_addr).await;
        commit_offset(&mut g, &group, &s.topic, 9).await
    });
    let r = rt
        .block_on(
            c.send(
                &DeleteRecordsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topics(vec![DeleteRecordsTopic::default()
                        .with_name(name(&s.topic))
                        .with_partitions(vec![DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(5)])]),
                2,
            ),
        )
        .expect("delete records");
    let delete_records = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code);
    std::thread::sleep(Duration::from_secs(1));
    // What reached the broker (read there, not through the gateway).
    let mut changed = Vec::new();
    if let Some(v) = config_value(&s.destination, &s.topic, "retention.ms") {
        changed.push(format!("retention.ms={v} (answers {configs:?})"));
    }
    if let Some(n) = describe(&s.destination, &s.topic)
        .map(|d| d.1)
        .filter(|n| *n != 1)
    {
        changed.push(format!("{n} partitions (answer {partitions:?})"));
    }
    let committed = committed_offset(&s.destination, &group, &s.topic);
    if committed != 4 {
        changed.push(format!("group offset {committed} (answer {commit})"));
    }
    let start = log_start(&s.destination, &s.topic);
    if start != 0 {
        changed.push(format!("log start {start} (answer {delete_records:?})"));
    }
    let r = rt
        .block_on(
            c.send(
                &DeleteTopicsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topic_names(vec![name(&s.topic)]),
                5,
            ),
        )
        .expect("delete topics");
    let delete_topics = r.responses.first().map(|x| x.error_code);
    std::thread::sleep(Duration::from_secs(1));
    if describe(&s.destination, &s.topic).is_none() {
        changed.push(format!("topic deleted (answer {delete_topics:?})"));
    }
    assert!(
        changed.is_empty(),
        "through the mirror listener after the failover, the failed-over topic was changed: {}",
        changed.join("; ")
    );
    // Each change was refused as a mirror produce is (POLICY_VIOLATION, the mirror and its
    // state named), and the plain topic in the same request was changed.
    let mirror = configs
        .iter()
        .find(|c| c.0 == s.topic)
        .expect("mirror topic entry");
    assert_eq!(mirror.1, POLICY_VIOLATION, "{configs:?}");
    // The admin API shows the records, which are saved before the admission's lookup snapshot
    // is refreshed from them: a request right after the API showed STOPPED may still be refused
    // naming STOPPING. Either is the refusal the guarantee asks for.
    assert!(
        mirror.2.contains("is fenced")
            && mirror.2.contains("mirror ro")
            && (mirror.2.contains("STOPPED") || mirror.2.contains("STOPPING")),
        "{configs:?}"
    );
    assert!(
        configs.iter().any(|c| c.0 == s.plain && c.1 == 0),
        "{configs:?}"
    );
    assert_eq!(
        config_value(&s.destination, &s.plain, "retention.ms").as_deref(),
        Some("1")
    );
    assert_eq!(partitions.0, POLICY_VIOLATION, "{partitions:?}");
    assert!(partitions.1.contains("mirror ro"), "{partitions:?}");
    assert_eq!(commit, POLICY_VIOLATION);
    assert_eq!(delete_records, Some(POLICY_VIOLATION));
    assert_eq!(delete_topics, Some(POLICY_VIOLATION));
    assert!(
        s.gw.metric(r#"mirrorgate_produce_rejected_total{reason="mirror_fenced_admin"}"#) >= 5.0,
        "{}",
        s.gw.metrics()
    );
}
