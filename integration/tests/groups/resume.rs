//! A Java and a librdkafka consumer group read part of a mirrored topic on the source, the sync
//! copies their offsets, they read on, the mirror fails over (the source up, or killed first),
//! and the same group ids resume through the gateway: no record skipped, and re-read records at
//! most those the group read on the source after the last sync the test saw.

use super::*;
use crate::failover::{failover, wait_stopped};

/// Records per partition written before, between and after the groups' reads.
const PARTITIONS: i32 = 2;

fn groups_resume_through_the_gateway(source_cluster: &'static str, kill_source: bool) {
    let source = harness::cluster(source_cluster);
    let topic = harness::unique_topic("groups-resume");
    harness::create_topic(&source, &topic, PARTITIONS, None);
    let name = "resume";
    let gw = TestGateway::start(groups_config(name, &[&topic], &source));
    let java = harness::unique_topic("groups-java");
    let rdk = harness::unique_topic("groups-rdkafka");

    // Part one: both groups read on the source, and the sync copies their offsets.
    produce(&source, &topic, "a", 200, PARTITIONS);
    wait_mirrored(&gw, name, &source, &topic, PARTITIONS);
    let (java_1, java_pos) = java_consume(&source, &topic, &java, 200);
    let rdk_1 = rdkafka_consume(&source, &topic, &rdk, 120);
    // The logs are aligned (a new topic mirrored from its start): identity.
    wait_synced(&gw.admin(), name, &java, &java_pos);
    wait_synced(&gw.admin(), name, &rdk, &positions(&rdk_1));

    // Part two: they read on after that sync; more records arrive that they never read there.
    produce(&source, &topic, "b", 100, PARTITIONS);
    let (java_2, _) = java_consume(&source, &topic, &java, 100);
    let rdk_2 = rdkafka_consume(&source, &topic, &rdk, 50);
    produce(&source, &topic, "c", 60, PARTITIONS);
    wait_mirrored(&gw, name, &source, &topic, PARTITIONS);
    // The bound: what each group read on the source after the last sync the test saw.
    let (java_bound, rdk_bound) = (java_2.len(), rdk_2.len());

    let _restart = kill_source.then(|| harness::StoppedNode::kill(source_cluster, "1"));
    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);

    let all: BTreeSet<String> = ["a", "b", "c"]
        .iter()
        .zip([200, 100, 60])
        .flat_map(|(p, n)| (0..n).map(move |i| format!("{p}-{i}")))
        .collect();
    let java_source: Vec<Read> = java_1.into_iter().chain(java_2).collect();
    let java_left = all.len() - java_source.len();
    let (java_gw, _) = java_consume(&gw.bootstrap(), &topic, &java, java_left);
    let java_reread = assert_nothing_skipped(&all, &java_source, &java_gw);
    assert!(
        java_reread <= java_bound,
        "Java group re-read {java_reread} records, more than the {java_bound} it read after the last sync"
    );

    let rdk_source: Vec<Read> = rdk_1.into_iter().chain(rdk_2).collect();
    let rdk_left = all.len() - rdk_source.len();
    let rdk_gw: Vec<Read> = harness::consume_group(
        &gw.bootstrap(),
        &topic,
        &rdk,
        rdk_left,
        Duration::from_secs(60),
        &[],
    )
    .into_iter()
    .flat_map(|(p, list)| {
        list.into_iter()
            .map(move |c| (p, c.offset, c.value.unwrap_or_default()))
    })
    .collect();
    let rdk_reread = assert_nothing_skipped(&all, &rdk_source, &rdk_gw);
    assert!(
        rdk_reread <= rdk_bound,
        "librdkafka group re-read {rdk_reread} records, more than the {rdk_bound} it read after the last sync"
    );
    eprintln!(
        "groups resume (source {}): java re-read {java_reread} (bound {java_bound}), librdkafka re-read {rdk_reread} (bound {rdk_bound})",
        if kill_source { "killed" } else { "up" }
    );
}

#[test]
fn java_and_librdkafka_groups_resume_through_the_gateway_after_failover_without_skipping() {
    groups_resume_through_the_gateway("source", false);
}

/// Kills the `third` cluster's broker (the source here) before the failover; restarted at the end.
#[test]
fn disruptive_groups_resume_through_the_gateway_after_the_source_is_killed() {
    groups_resume_through_the_gateway("third", true);
}
