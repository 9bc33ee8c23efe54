//! Share groups (KIP-932) and a failover, on the rig's Kafka 4.1.1 with `share.version=1` on the
//! clusters a test uses ([`harness::ShareGroupsEnabled`], counted across tests and restored
//! afterwards; a test's share groups are deleted at its end). The gateway syncs no share group
//! (its group sync lists only classic and consumer groups on the source); these tests show why
//! it cannot on 4.1.1 and what docs/moving-applications.md tells operators to do instead:
//!
//! - Kafka 4.1.1 applies no AlterShareGroupOffsets: for a share group it has never seen and for
//!   one whose start offset a consumer moved, it answers without an error and without partition
//!   results, and the start offset stays as it was (a topic it does not know gets its partition
//!   result, so the answer path itself works: the request's topics never reach the group
//!   coordinator);
//! - a share group that acknowledged part of a mirrored topic on the source, with
//!   `share.auto.offset.reset=earliest` set for it on the destination, reads the whole topic
//!   through the gateway after the failover: nothing skipped, everything it had acknowledged on
//!   the source delivered again, delivery counts from 1.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest, FindCoordinatorRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::*;
use crate::failover::{failover, wait_stopped};

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
}

/// A connection to the coordinator of `group` on `bootstrap` (FindCoordinator, key type GROUP).
async fn coordinator(bootstrap: &str, group: &str) -> KafkaClient {
    let first = bootstrap.split(',').next().expect("bootstrap");
    let mut c = KafkaClient::connect(first, Duration::from_secs(10))
        .await
        .expect("connect");
    let r = c
        .send(
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]),
            4,
        )
        .await
        .expect("FindCoordinator");
    let co = &r.coordinators[0];
    assert_eq!(co.error_code, 0, "FindCoordinator for {group}: {co:?}");
    KafkaClient::connect(&format!("{}:{}", co.host, co.port), Duration::from_secs(10))
        .await
        .expect("connect coordinator")
}

/// A share group's start offsets on a cluster (DescribeShareGroupOffsets), per partition of
/// `topic`.
fn start_offsets(bootstrap: &str, group: &str, topic: &str) -> BTreeMap<i32, i64> {
    rt().block_on(async {
        let mut c = coordinator(bootstrap, group).await;
        let r = c
            .send(
                &DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                    DescribeShareGroupOffsetsRequestGroup::default()
                        .with_group_id(StrBytes::from_string(group.to_string()).into())
                        .with_topics(None),
                ]),
                0,
            )
            .await
            .expect("DescribeShareGroupOffsets");
        let g = &r.groups[0];
        assert_eq!(g.error_code, 0, "DescribeShareGroupOffsets {group}: {g:?}");
        g.topics
            .iter()
            .filter(|t| t.topic_name.0.as_str() == topic)
            .flat_map(|t| t.partitions.iter())
            .map(|p| (p.partition_index, p.start_offset))
            .collect()
    })
}

/// AlterShareGroupOffsets of partition 0 of `topic` to `offset`: the answer's top-level error
/// code and its partition results (partition, error code).
fn alter_start_offset(
    bootstrap: &str,
    group: &str,
    topic: &str,
    offset: i64,
) -> (i16, Vec<(i32, i16)>) {
    rt().block_on(async {
        let mut c = coordinator(bootstrap, group).await;
        let req = AlterShareGroupOffsetsRequest::default()
            .with_group_id(StrBytes::from_string(group.to_string()).into())
            .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![
                    AlterShareGroupOffsetsRequestPartition::default()
                        .with_partition_index(0)
                        .with_start_offset(offset),
                ])]);
        let r = c.send(&req, 0).await.expect("AlterShareGroupOffsets");
        let parts = r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| (p.partition_index, p.error_code))
            .collect();
        (r.error_code, parts)
    })
}

/// How long a share consumer of these tests may take.
const CONSUME_MS: u64 = 60_000;

/// The proof that a start-offset sync cannot work on Kafka 4.1.1, and its tripwire: the day a
/// Kafka version applies the write (or answers it with an error), this test goes red, and the
/// share group section of docs/moving-applications.md is to be revisited (a sync may become
/// possible).
#[test]
fn alter_share_group_offsets_on_kafka_4_1_1_answers_without_an_error_and_sets_nothing() {
    let destination = harness::cluster("destination");
    let _share = harness::ShareGroupsEnabled::enable(&destination);
    let topic = harness::unique_topic("groups-share-alter");
    let never_seen = harness::unique_topic("groups-share-alter-new");
    let used = harness::unique_topic("groups-share-alter-used");
    let _delete = harness::ShareGroupsDeleted::on(&destination, &[&never_seen, &used]);
    harness::create_topic(&destination, &topic, 1, None);
    produce(&destination, &topic, "a", 10, 1);
    // A group whose start offset a consumer moved (10 records accepted, then one more state
    // write so that the persisted start offset is 10).
    harness::share_consume(
        &destination,
        &destination,
        &topic,
        &used,
        10,
        &[],
        CONSUME_MS,
    );
    produce(&destination, &topic, "b", 1, 1);
    harness::share_consume(&destination, "-", &topic, &used, 1, &[], CONSUME_MS);

    let used_before = start_offsets(&destination, &used, &topic);
    let to_never_seen = alter_start_offset(&destination, &never_seen, &topic, 5);
    let to_used = alter_start_offset(&destination, &used, &topic, 5);
    let to_no_topic = alter_start_offset(&destination, &used, "groups-share-no-such-topic", 5);

    assert_eq!(to_never_seen, (0, vec![]));
    assert_eq!(
        start_offsets(&destination, &never_seen, &topic),
        BTreeMap::new()
    );
    assert_eq!(used_before, BTreeMap::from([(0, 10)]));
    assert_eq!(to_used, (0, vec![]));
    assert_eq!(start_offsets(&destination, &used, &topic), used_before);
    assert_eq!(to_no_topic, (0, vec![(0, UNKNOWN_TOPIC_OR_PARTITION)]));
}

/// The operator step of docs/moving-applications.md: `share.auto.offset.reset=earliest` for
/// the share group on the destination before it moves. Nothing of the group is carried over
/// (the destination has no state of it when the failover starts).
#[test]
fn a_share_group_resumes_through_the_gateway_after_failover_from_the_earliest_offset_without_skipping(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let _share_source = harness::ShareGroupsEnabled::enable(&source);
    let _share_destination = harness::ShareGroupsEnabled::enable(&destination);
    let topic = harness::unique_topic("groups-share");
    let group = harness::unique_topic("groups-share-g");
    let _delete_source = harness::ShareGroupsDeleted::on(&source, &[&group]);
    let _delete_destination = harness::ShareGroupsDeleted::on(&destination, &[&group]);
    harness::create_topic(&source, &topic, 1, None);
    let name = "share";
    let gw = TestGateway::start(groups_config(name, &[&topic], &source));

    // On the source: the group reads and accepts offsets 0..30, the whole topic so far.
    produce(&source, &topic, "a", 30, 1);
    wait_mirrored(&gw, name, &source, &topic, 1);
    let on_source = harness::share_consume(&source, &source, &topic, &group, 30, &[], CONSUME_MS);
    let accepted: BTreeSet<i64> = on_source
        .iter()
        .filter(|d| d.accepted)
        .map(|d| d.offset)
        .collect();
    assert_eq!(accepted, (0..30).collect(), "{on_source:?}");

    // 70 records the group never saw on the source; the failover; the destination has no state
    // of the group.
    produce(&source, &topic, "b", 70, 1);
    wait_mirrored(&gw, name, &source, &topic, 1);
    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);
    assert_eq!(start_offsets(&destination, &group, &topic), BTreeMap::new());

    // The same share group through the gateway, `share.auto.offset.reset=earliest` set for it
    // on the destination first (ShareConsume.java, IncrementalAlterConfigs on the GROUP).
    let total = 100;
    let on_destination = harness::share_consume(
        &gw.bootstrap(),
        &destination,
        &topic,
        &group,
        total,
        &[],
        CONSUME_MS,
    );
    let delivered: BTreeSet<i64> = on_destination.iter().map(|d| d.offset).collect();
    assert_eq!(delivered, (0..total as i64).collect(), "{on_destination:?}");
    let again = delivered.intersection(&accepted).count();
    assert_eq!(again, 30);
    assert!(
        on_destination.iter().all(|d| d.delivery_count == 1),
        "{on_destination:?}"
    );
    eprintln!(
        "share group across a failover on Kafka 4.1.1: {again} records acknowledged on the \
         source delivered again through the gateway"
    );
}
