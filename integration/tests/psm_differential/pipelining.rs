//! Pipelined idempotent producers (several connections, five requests in flight each): the PSM
//! agrees with the broker before and after a failover.

use super::*;

/// `producers` idempotent librdkafka producers started together, each writing `records`
/// single-record batches (`linger.ms=0`, one record per batch, up to 5 requests in flight per
/// connection) to every partition of `topic` through `bootstrap`; waits for every
/// acknowledgement (each producer is bounded by `harness::produce_keyed`).
fn pipelined_idempotent_producers(bootstrap: &str, topic: &str, producers: usize, records: usize) {
    std::thread::scope(|s| {
        for _ in 0..producers {
            s.spawn(|| {
                harness::produce_keyed(
                    bootstrap,
                    topic,
                    records,
                    &[
                        ("linger.ms", "0"),
                        ("batch.num.messages", "1"),
                        ("max.in.flight.requests.per.connection", "5"),
                    ],
                )
            });
        }
    });
}

/// F16: many idempotent producers, each pipelining single-record batches (5 requests in flight),
/// write to partitions led by both destination brokers, first through the mirror listener while
/// the topic is mirrored, then through the client listener after a failover. Their responses
/// reach the gateway on 30 connections at once, in any order across connections: the PSM must
/// classify every batch as the broker did (no `diverged`), and afterwards hold exactly the
/// producers the broker lists.
#[test]
fn the_psm_agrees_with_the_broker_on_pipelined_idempotent_producers_before_and_after_failover() {
    const PRODUCERS: usize = 30;
    const RECORDS: usize = 60;
    let leaders = [1, 2, 1, 2];
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-pipelined");
    harness::create_topic(&destination, &topic, leaders.len() as i32, Some(&leaders));
    let gw = TestGateway::start(crate::failover::mirror_config("pipelined", &[&topic]));
    crate::failover::wait_mirroring(&gw.admin(), "pipelined", leaders.len() as u64);
    let diverged = || gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#);
    let mut failures = Vec::new();

    // Before the failover: mirrored traffic.
    pipelined_idempotent_producers(&gw.mirror_bootstrap(), &topic, PRODUCERS, RECORDS);
    let before = diverged();
    if before != 0.0 {
        failures.push(format!(
            "before the failover: {before} batches diverged (of {} accepted)",
            gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#)
        ));
    }
    wait_psm_settled(&gw, &topic, leaders.len() as i32);
    failures.extend(
        producer_list_differences(&gw, &topic, &leaders, |_| true)
            .into_iter()
            .map(|d| format!("before the failover: {d}")),
    );
    let mirrored: std::collections::BTreeSet<i64> = (0..leaders.len() as i32)
        .flat_map(|p| pids(&gateway_producers(&gw.admin(), &topic, p)))
        .collect();
    assert!(
        mirrored.len() >= PRODUCERS,
        "expected {PRODUCERS} mirrored producers, the gateway lists {}",
        mirrored.len()
    );

    crate::failover::failover(&gw.admin(), "pipelined");
    crate::failover::wait_stopped(&gw.admin(), "pipelined");

    // After the failover: local traffic. The mirrored producers were cleared from the PSM at
    // the barrier (the broker still lists them): compare the others.
    pipelined_idempotent_producers(&gw.bootstrap(), &topic, PRODUCERS, RECORDS);
    let after = diverged() - before;
    if after != 0.0 {
        failures.push(format!(
            "after the failover: {after} batches diverged (of {} accepted in both phases)",
            gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#)
        ));
    }
    wait_psm_settled(&gw, &topic, leaders.len() as i32);
    // The control barrier's producer id: the brokers list it (the marker created its entry),
    // the PSM does not (it is cleared at the barrier, and the gateway never writes data with it).
    let barrier_pids: Vec<i64> = {
        let (_, body) = crate::gw::admin_call(
            &gw.admin(),
            hyper::Method::GET,
            "/v1/mirrors/pipelined/partitions",
            None,
        );
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        v["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .filter_map(|p| p["barrier_producer_id"].as_i64())
            .collect()
    };
    failures.extend(
        producer_list_differences(&gw, &topic, &leaders, |pid| {
            !mirrored.contains(&pid) && !barrier_pids.contains(&pid)
        })
        .into_iter()
        .map(|d| format!("after the failover: {d}")),
    );
    let local: usize = (0..leaders.len() as i32)
        .map(|p| gateway_producers(&gw.admin(), &topic, p).len())
        .max()
        .unwrap_or(0);
    assert!(
        local >= PRODUCERS,
        "expected {PRODUCERS} local producers per partition, the gateway lists {local}"
    );
    assert!(
        failures.is_empty(),
        "the PSM disagreed with the broker:\n{}",
        failures.join("\n")
    );
}

/// F16, with the pipelining spelled out: 30 connections, each with a producer id of its own,
/// send five single-record Produce requests (sequences 0–4, then 5–9, then 10–14) to each
/// partition before reading the five answers; partitions are led by both destination brokers.
/// No batch diverges and the gateway's producer list equals the broker's.
#[test]
fn the_psm_agrees_with_the_broker_on_connections_pipelining_five_produce_requests() {
    const CONNECTIONS: i64 = 30;
    let leaders = [1, 2, 1, 2];
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("psm-raw-pipelined");
    harness::create_topic(&destination, &topic, leaders.len() as i32, Some(&leaders));
    let gw = gateway_tracking(&topic);
    let base = 8_000_000 + (std::process::id() as i64 % 1000) * 1000;
    std::thread::scope(|s| {
        for c in 0..CONNECTIONS {
            let (gw, topic, leaders) = (&gw, &topic, &leaders);
            s.spawn(move || {
                let pid = base + c;
                let mut conns: Vec<RawConn> = leaders
                    .iter()
                    .map(|n| RawConn::connect(&format!("127.0.0.1:{}", gw.mirror_port_for(*n))))
                    .collect();
                for round in 0..3 {
                    for (partition, conn) in conns.iter_mut().enumerate() {
                        let batches = (0..5)
                            .map(|i| {
                                batch(pid, 0, round * 5 + i, 1, &format!("r{pid}-{round}-{i}"))
                            })
                            .collect();
                        for (i, (code, _)) in conn
                            .produce_pipelined(topic, partition as i32, batches)
                            .into_iter()
                            .enumerate()
                        {
                            assert_eq!(
                                code,
                                0,
                                "pid {pid} partition {partition} seq {}",
                                round * 5 + i as i32
                            );
                        }
                    }
                }
            });
        }
    });
    let diverged = gw.metric(r#"mirrorgate_psm_batches_total{result="diverged"}"#);
    wait_psm_settled(&gw, &topic, leaders.len() as i32);
    let differences = producer_list_differences(&gw, &topic, &leaders, |_| true);
    assert!(
        diverged == 0.0 && differences.is_empty(),
        "the PSM disagreed with the broker: {diverged} batches diverged (of {} accepted)\n{}",
        gw.metric(r#"mirrorgate_psm_batches_total{result="accepted"}"#),
        differences.join("\n")
    );
    for p in 0..leaders.len() as i32 {
        assert_eq!(
            gateway_producers(&gw.admin(), &topic, p).len(),
            CONNECTIONS as usize,
            "partition {p}"
        );
    }
}
