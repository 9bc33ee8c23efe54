//! Forward mode with several instances: a switchover driven through the instance that runs the
//! mirror's agent holds the forward listener of every other instance too, through the state
//! topic, so nothing another instance forwards reaches the source after the log ends it
//! mirrors to; the producers of every instance keep their sessions.

use super::forward::{assert_acknowledged_once_in_order, forward_config, producer_ids};
use super::owners::{agent_status, instance_configs};
use super::*;
use crate::gw::ProcessGateway;

/// The configuration of instance `id`: the agent of `topic` from `source` on a shared state
/// topic (from `configs`), with a forward listener of its own ports; its forward bootstrap.
fn with_forward(
    configs: &impl Fn(&str) -> Config,
    id: &str,
    name: &str,
    topic: &str,
    source: &str,
) -> (Config, String) {
    let mut cfg = configs(id);
    let (with_listener, bootstrap) = forward_config(name, &[topic], source);
    cfg.mirrors[0].forward = with_listener.mirrors[0].forward.clone();
    (cfg, bootstrap)
}

#[test]
fn a_switchover_through_one_instance_holds_the_forward_listener_of_another_whose_producers_go_on() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("forward-instances");
    harness::create_topic(&source, &topic, 2, None);
    let configs = instance_configs("fwdi", &[&topic], &source, |_| {});
    let (cfg_a, forward_a) = with_forward(&configs, "a", "fwdi", &topic, &source);
    let (cfg_b, forward_b) = with_forward(&configs, "b", "fwdi", &topic, &source);
    let a = ProcessGateway::start(cfg_a, &[]);
    let b = TestGateway::start(cfg_b);
    wait_for("a runs the agent", Duration::from_secs(30), || {
        let s = agent_status(&b.admin(), "fwdi");
        s["owner"] == "a" && s["runs_here"] == false
    });
    // Applications on both instances' forward listeners.
    let via_a = SourceWriter::start(&forward_a, &topic, "via-a", 1_000_000, 300);
    let via_b = SourceWriter::start(&forward_b, &topic, "via-b", 1_000_000, 300);
    wait_for(
        "records through both forward listeners, mirrored",
        Duration::from_secs(60),
        || {
            via_a.acked() >= 300
                && via_b.acked() >= 300
                && (0..2).all(|p| log_end(&destination, &topic, p) > 0)
        },
    );

    // Not where the agent stands by: it could not mirror the source's end.
    let (status, body) = a.call(Method::POST, "/v1/mirrors/fwdi/switchover?dry_run=true");
    assert_eq!(status, 200, "{body}");
    let dry: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(dry["agent_runs_here"], true, "{body}");
    let (status, body) = admin_call(
        &b.admin(),
        Method::POST,
        "/v1/mirrors/fwdi/switchover",
        None,
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("does not run on this instance"), "{body}");

    let (status, body) = a.call(Method::POST, "/v1/mirrors/fwdi/switchover");
    assert_eq!(status, 202, "switchover through a: {body}");
    wait_stopped(&a.admin(), "fwdi");
    let at_switch = (via_a.acked(), via_b.acked());
    wait_for(
        "b's forward listener on the destination, caught up",
        Duration::from_secs(30),
        || {
            let (status, body) =
                admin_call(&b.admin(), Method::GET, "/v1/mirrors/fwdi/forward", None);
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            status == 200 && v["side"] == "destination" && v["caught_up"] == true
        },
    );
    wait_for(
        "records through both listeners after the switchover",
        Duration::from_secs(60),
        || via_a.acked() >= at_switch.0 + 300 && via_b.acked() >= at_switch.1 + 300,
    );
    // No error reached either application, and every record sent was acknowledged.
    let acked = (via_a.finish(true), via_b.finish(true));
    eprintln!("forward instances: {acked:?} acknowledged, {at_switch:?} at the switchover");
    assert_acknowledged_once_in_order(&destination, &topic, "via-a", acked.0);
    assert_acknowledged_once_in_order(&destination, &topic, "via-b", acked.1);
    // Both producers went on under the id and epoch the source gave them.
    for p in 0..2 {
        let on_source = producer_ids(&source, &topic, p);
        assert_eq!(on_source.len(), 2, "partition {p}: {on_source:?}");
        let after = producer_ids(&destination, &topic, p);
        for (id, epoch) in &on_source {
            assert!(
                after.iter().any(|r| r == &(*id, *epoch))
                    && after.iter().all(|r| r.0 != *id || r.1 == *epoch),
                "partition {p}: producer {id} goes on with epoch {epoch} on the destination: {after:?}"
            );
        }
    }
    drop(a);
}
