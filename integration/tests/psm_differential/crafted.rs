//! Crafted batches (chosen producer id, epoch and sequences) and real idempotent producers: the
//! PSM classifies every batch as the broker answers it, and its producer list equals the
//! broker's `DescribeProducers`.

use super::*;

#[test]
fn psm_classification_matches_the_broker_for_every_crafted_batch() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-diff");
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let gw = gateway_tracking(&topic);
    let mut conn = RawConn::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(1)));
    let base = 7_000_000 + (std::process::id() as i64 % 1000) * 100;
    let (a, b, c, d) = (base + 1, base + 2, base + 3, base + 4);
    let steps = [
        Step {
            what: "new producer, first batch",
            pid: a,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "next batch in sequence",
            pid: a,
            epoch: 0,
            seq: 1,
            n: 3,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "retry of the first batch",
            pid: a,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 0,
            result: "duplicate",
        },
        Step {
            what: "gap in sequence",
            pid: a,
            epoch: 0,
            seq: 10,
            n: 1,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "epoch bump restarts at 0",
            pid: a,
            epoch: 1,
            seq: 0,
            n: 2,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "old epoch after the bump",
            pid: a,
            epoch: 0,
            seq: 4,
            n: 1,
            broker: 47,
            result: "invalid_producer_epoch",
        },
        Step {
            what: "epoch bump not starting at 0",
            pid: a,
            epoch: 2,
            seq: 5,
            n: 1,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "second producer",
            pid: b,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 2",
            pid: b,
            epoch: 0,
            seq: 1,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 3",
            pid: b,
            epoch: 0,
            seq: 2,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 4",
            pid: b,
            epoch: 0,
            seq: 3,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 5",
            pid: b,
            epoch: 0,
            seq: 4,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: 6 (first batch leaves the cache)",
            pid: b,
            epoch: 0,
            seq: 5,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "b: retry of a batch in the middle of the cache",
            pid: b,
            epoch: 0,
            seq: 3,
            n: 1,
            broker: 0,
            result: "duplicate",
        },
        Step {
            what: "b: retry of a batch no longer cached",
            pid: b,
            epoch: 0,
            seq: 0,
            n: 1,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "b: same start, different length",
            pid: b,
            epoch: 0,
            seq: 5,
            n: 2,
            broker: 45,
            result: "out_of_order_sequence",
        },
        Step {
            what: "unknown producer starting above 0 (accepted by 4.1.1)",
            pid: c,
            epoch: 0,
            seq: 5,
            n: 1,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "third producer, a large batch",
            pid: d,
            epoch: 0,
            seq: 0,
            n: 50,
            broker: 0,
            result: "accepted",
        },
        Step {
            what: "retry of the large batch",
            pid: d,
            epoch: 0,
            seq: 0,
            n: 50,
            broker: 0,
            result: "duplicate",
        },
    ];
    let mut offsets: BTreeMap<(i64, i16, i32), i64> = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        let before = batches_by_result(&gw);
        let (code, offset) = conn.produce(
            &topic,
            0,
            batch(st.pid, st.epoch, st.seq, st.n, &format!("s{i}")),
        );
        // The tap applies the outcome before the response reaches the client, so the counter
        // has moved by now.
        let after = batches_by_result(&gw);
        let m = moved(&before, &after);
        if code == 0 && st.result == "duplicate" {
            let original = offsets.get(&(st.pid, st.epoch, st.seq)).copied();
            if original != Some(offset) {
                failures.push(format!(
                    "step {i} ({}): duplicate acked at {offset}, original at {original:?}",
                    st.what
                ));
            }
        } else if code == 0 {
            offsets.insert((st.pid, st.epoch, st.seq), offset);
        }
        if code != st.broker {
            failures.push(format!(
                "step {i} ({}): broker answered {code}, scenario expects {}",
                st.what, st.broker
            ));
        }
        if m != vec![st.result.to_string()] {
            failures.push(format!(
                "step {i} ({}): PSM result {m:?}, expected [{}] (broker code {code})",
                st.what, st.result
            ));
        }
    }
    assert!(failures.is_empty(), "differences:\n{}", failures.join("\n"));
    assert_eq!(
        gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#),
        0.0
    );

    // The gateway's producer list equals the broker's.
    let broker = broker_producers(
        &mut RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(1))),
        &topic,
        0,
    );
    let gateway = gateway_producers(&gw.admin(), &topic, 0);
    assert_eq!(
        gateway, broker,
        "gateway PSM (left) vs broker DescribeProducers (right)"
    );
    assert!(gateway.len() >= 4, "{gateway:?}");
}

#[test]
fn psm_follows_real_idempotent_producers_and_agrees_with_describe_producers() {
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-real");
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = gateway_tracking(&topic);
    for _ in 0..3 {
        harness::produce_keyed(&gw.mirror_bootstrap(), &topic, 2_000, &[]);
    }
    assert_eq!(
        gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#),
        0.0
    );
    assert!(gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#) > 0.0);
    for (partition, node) in [(0, 1), (1, 2)] {
        let broker = broker_producers(
            &mut RawConn::connect(&format!("127.0.0.1:{}", gw.port_for(node))),
            &topic,
            partition,
        );
        let gateway = gateway_producers(&gw.admin(), &topic, partition);
        assert_eq!(
            gateway, broker,
            "partition {partition}: gateway (left) vs broker (right)"
        );
        assert_eq!(
            broker.len(),
            3,
            "three producers wrote to partition {partition}"
        );
    }
}
