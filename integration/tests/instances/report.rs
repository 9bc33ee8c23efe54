//! What a failover reports when several instances run (review G15, defect H2): the figures of
//! the barrier step — the producers the barrier expired, the last mirrored offset before it —
//! come from the brokers and the log, not from the driver's own producer state, which saw only
//! the mirror writes that went through it.

use super::{init_state_topic, instance_config, wait_others_alive, wait_report_complete};
use crate::failover::{failover, wait_stopped};
use crate::gw::{admin_call, TestGateway};
use crate::harness;
use crate::psm_differential::{batch, RawConn};

/// Producer ids mirrored through the instance that does not drive the failover.
const PRODUCERS: i64 = 50;

/// The partitions endpoint of mirror `name` at `admin`: per partition index its
/// (barrier_offset, last_mirrored_offset, producers_expired).
fn partition_figures(admin: &str, name: &str) -> Vec<(i64, i64, Option<i64>, u64)> {
    let (status, body) = admin_call(
        admin,
        hyper::Method::GET,
        &format!("/v1/mirrors/{name}/partitions"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let mut out: Vec<(i64, i64, Option<i64>, u64)> = v["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["partition"].as_i64().expect("partition"),
                p["barrier_offset"].as_i64().expect("barrier offset"),
                p["last_mirrored_offset"].as_i64(),
                p["producers_expired"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    out
}

/// Instance B mirrors 50 idempotent producer ids (25 per partition, each one batch of two
/// records); the failover is called through instance A, which saw none of it. A's report and
/// partition records count the 50 producers the barrier expired, and put each partition's last
/// mirrored offset right before its barrier; B, which follows A's handover, shows the same.
#[test]
fn a_failover_driven_by_an_instance_that_saw_no_mirrored_traffic_reports_the_mirrored_producers() {
    let name = "g15";
    let topic = harness::unique_topic("peers-g15");
    harness::create_topic(&harness::cluster("destination"), &topic, 2, Some(&[1, 1]));
    let state_topic = harness::unique_topic("peers-g15-state");
    let cfg = |id: &str| instance_config(name, &topic, id, &state_topic);
    init_state_topic(&cfg("a"));
    let a = TestGateway::start(cfg("a"));
    let b = TestGateway::start(cfg("b"));
    wait_others_alive(&a.admin(), 1);
    wait_others_alive(&b.admin(), 1);
    let base = 9_200_000 + (std::process::id() as i64 % 1000) * 100;
    let mut mirror = RawConn::connect(&b.mirror_bootstrap());
    for i in 0..PRODUCERS {
        let partition = (i % 2) as i32;
        let (code, _, msg) =
            mirror.produce_msg(&topic, partition, batch(base + i, 0, 0, 2, "mirrored"));
        assert_eq!(code, 0, "a mirror write through b: {msg}");
    }
    drop(mirror);

    let fid = failover(&a.admin(), name);
    wait_stopped(&a.admin(), name);
    wait_stopped(&b.admin(), name);
    let report = wait_report_complete(&a.admin(), name, &fid);

    let figures = partition_figures(&a.admin(), name);
    let expected: Vec<(i64, i64, Option<i64>, u64)> = figures
        .iter()
        .map(|(p, barrier, _, _)| (*p, *barrier, Some(barrier - 1), (PRODUCERS / 2) as u64))
        .collect();
    let reported: Vec<(Option<i64>, Option<i64>, Option<u64>)> = report["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["barrier_offset"].as_i64(),
                p["last_mirrored_offset"].as_i64(),
                p["producers_expired"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        (
            report["totals"]["producers_expired"].as_u64(),
            &figures
        ),
        (Some(PRODUCERS as u64), &expected),
        "a's report (producers expired) and partitions (partition, barrier, last mirrored offset, producers expired); report partitions {reported:?}"
    );
    for (barrier, last, expired) in &reported {
        assert_eq!(
            (*last, *expired),
            (barrier.map(|b| b - 1), Some((PRODUCERS / 2) as u64)),
            "a partition of a's report: {report}"
        );
    }
    assert_eq!(
        partition_figures(&b.admin(), name),
        expected,
        "b's partitions, from a's handover"
    );
}
