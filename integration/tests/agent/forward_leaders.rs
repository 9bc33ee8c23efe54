//! Forward mode where the destination's partitions are led by other node ids than the
//! source's: after a switchover a client's connection reaches the same node id on the
//! destination, which answers NOT_LEADER_OR_FOLLOWER for what it does not lead, with a KIP-951
//! hint naming the leader. The Java client follows a hint (at once, without its retry backoff)
//! only when the hint carries a leader epoch: on the destination side the forward listener
//! leaves the destination's epoch in Produce hints.

use super::forward::{
    assert_crossed_without_error, forward_config, forward_side, switch_over, JsonClient,
};
use super::*;
use crate::psm_differential::{batch, RawConn};

/// The forward listener's address for broker `node` (its port base is the node id base's).
fn forward_port_of(forward: &str, node: i32) -> String {
    let (host, port) = forward.rsplit_once(':').expect("host:port");
    let base: i32 = port.parse().expect("port");
    format!("{host}:{}", base + node - 1)
}

/// Wait until mirror `name`'s forward listener is on the destination.
fn wait_destination_side(gw: &TestGateway, name: &str) {
    wait_for(
        "the forward listener on the destination",
        Duration::from_secs(30),
        || forward_side(&gw.admin(), name) == "destination",
    );
}

/// A partition of `topic` that the destination's broker `not` does not lead, and its leader.
fn partition_led_elsewhere(destination: &str, topic: &str, not: i32) -> (i32, i32) {
    let leaders = harness::partition_leaders(destination, topic);
    leaders
        .iter()
        .find(|(_, l)| **l != not)
        .map(|(p, l)| (*p, *l))
        .unwrap_or_else(|| panic!("every partition of {topic} is led by {not}: {leaders:?}"))
}

/// After a switchover, a Produce sent to the forward listener's port of a broker that does not
/// lead the partition is answered NOT_LEADER_OR_FOLLOWER with the destination's leader, its
/// leader epoch and the forward listener's address for it (red before: the epoch was -1).
#[test]
fn after_a_switchover_a_produce_to_the_wrong_broker_names_the_leader_with_its_epoch_at_the_listener(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-hint");
    harness::create_topic(&source, &topic, 4, None);
    let (cfg, forward) = forward_config("fwdh", &[&topic], &source);
    let gw = TestGateway::start(cfg);
    // A record in every partition: the switchover waits until the agent mirrors each one.
    let mut conn = RawConn::connect(&forward);
    for p in 0..4 {
        let (code, _) = conn.produce(&topic, p, batch(-1, -1, -1, 1, "before"));
        assert_eq!(code, 0, "produce through the forward listener");
    }
    switch_over(&gw, "fwdh", &topic, 4);
    wait_destination_side(&gw, "fwdh");
    let (partition, leader) = partition_led_elsewhere(&destination, &topic, 1);
    let resp = RawConn::connect(&forward_port_of(&forward, 1)).produce_at(
        12,
        &topic,
        partition,
        batch(-1, -1, -1, 1, "wrong-broker"),
    );
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(
        p.error_code, 6,
        "NOT_LEADER_OR_FOLLOWER from broker 1 for partition {partition}"
    );
    assert_eq!(
        p.current_leader.leader_id.0, leader,
        "the hint names the leader"
    );
    assert!(
        p.current_leader.leader_epoch >= 0,
        "the hint carries the destination's leader epoch: {:?}",
        p.current_leader
    );
    let endpoint = resp
        .node_endpoints
        .iter()
        .find(|n| n.node_id.0 == leader)
        .unwrap_or_else(|| panic!("no endpoint for node {leader}: {:?}", resp.node_endpoints));
    assert_eq!(
        format!("{}:{}", endpoint.host, endpoint.port),
        forward_port_of(&forward, leader),
        "the leader at the forward listener's address"
    );
}

/// A Java producer whose retry backoff (2 minutes) is longer than its delivery timeout
/// (30 s) writes across a switchover to a destination whose partitions are led by both of its
/// brokers: it follows the leader hints at once, so no record expires and none is lost,
/// doubled or reordered (red before: the hints carried no epoch, the batches for the other
/// broker's partitions waited out the backoff and expired).
///
/// One request in flight per connection: the Java client marks a retried batch as bound for a
/// new leader only while the batch is first in its partition's queue and the hint's epoch is
/// still in its metadata. The metadata it asks for after the error carries −1 again, so a
/// batch that was queued behind another one of its partition when that answer came waits out
/// its backoff, and with two minutes of it here, expires. With one in flight, every batch
/// refused at the switch is the first of its partition.
#[test]
fn a_java_producer_follows_the_destinations_leaders_at_once_after_a_switchover() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-follow");
    harness::create_topic(&source, &topic, 4, None);
    let (cfg, forward) = forward_config("fwdf", &[&topic], &source);
    let gw = TestGateway::start(cfg);
    let python = crate::pid_allocator::python_interpreter();
    let java = JsonClient::producer_with(
        "java",
        &python,
        &forward,
        &topic,
        &[
            "max.in.flight.requests.per.connection=1",
            "retry.backoff.ms=120000",
            "retry.backoff.max.ms=120000",
            "delivery.timeout.ms=30000",
        ],
    );
    wait_for(
        "the producer acknowledged",
        Duration::from_secs(120),
        || java.count("ack") >= 100,
    );
    switch_over(&gw, "fwdf", &topic, 4);
    wait_destination_side(&gw, "fwdf");
    // The precondition: some partitions are led by another node id than on the source (1).
    partition_led_elsewhere(&destination, &topic, 1);
    let at_switch = java.count("ack");
    wait_for(
        "acknowledgements after the switchover",
        Duration::from_secs(60),
        || java.count("ack") >= at_switch + 200,
    );
    let events = java.finish();
    let count = |what: &[&str]| {
        events
            .iter()
            .filter(|e| what.iter().any(|w| e["e"] == *w))
            .count()
    };
    let (sent, answered) = (count(&["send"]), count(&["ack", "err"]));
    let runs = vec![("java".to_string(), events)];
    assert_crossed_without_error(&runs, &source, &destination, &topic, 4);
    assert_eq!(
        answered, sent,
        "every record answered when the producer stopped"
    );
}
