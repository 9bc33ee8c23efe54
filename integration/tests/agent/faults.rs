//! Brokers and the gateway killed while the agent mirrors or fails over: nothing lost, nothing
//! duplicated, one barrier per partition.

use super::*;

#[test]
fn disruptive_the_source_killed_before_the_failover_does_not_block_it() {
    let third = harness::cluster("third");
    let topic = harness::unique_topic("agent-kill");
    harness::create_topic(&third, &topic, 2, None);
    SourceWriter::start(&third, &topic, "pre", 300, 5000).finish(false);
    let gw = TestGateway::start(agent_config("killed", &[&topic], &third));
    wait_caught_up(&gw.admin(), "killed", &third, &topic, 2);
    let expected: Vec<Log> = (0..2).map(|p| read_log(&third, &topic, p)).collect();
    let _restart = harness::StoppedNode::kill("third", "1");
    std::thread::sleep(Duration::from_secs(2));
    // An unreachable source does not block the failover (wait_stopped bounds it).
    failover(&gw.admin(), "killed");
    wait_stopped(&gw.admin(), "killed");
    let destination = harness::cluster("destination");
    let mut barriers = BTreeMap::new();
    for p in 0..2 {
        let d = read_log(&destination, &topic, p);
        assert_eq!(d.barriers.len(), 1);
        let before: Vec<_> = d
            .records
            .iter()
            .filter(|r| r.0 < d.barriers[0])
            .cloned()
            .collect();
        assert_eq!(
            before
                .iter()
                .map(|r| (r.1.clone(), r.2.clone()))
                .collect::<Vec<_>>(),
            kv(&expected[p as usize]),
            "partition {p}: the destination holds the source's records up to the barrier"
        );
        barriers.insert(p, d.barriers[0]);
    }
    assert_local_producers_lose_nothing(&gw, &topic, &barriers);
}

/// Runs alone: the source stops answering (its only broker paused: sockets open, no answers)
/// before the mirror of its 24 partitions fails over. The report completes after one read
/// timeout for that broker, its RPO figures unknown, each partition with the position the agent
/// mirrored to and the lag it last knew (0: caught up). Red before the report's reads shared a
/// connection per broker: each partition waited out its own 3 s, and the report was not
/// complete within 30 s. Red too before the lag was kept when the failover stopped the
/// agent's tasks: the report had no last known lag at all.
#[test]
fn disruptive_a_stalled_source_holds_the_failover_report_one_timeout_per_broker_not_per_partition()
{
    let third = harness::cluster("third");
    let topic = harness::unique_topic("agent-stall");
    harness::create_topic(&third, &topic, 24, None);
    SourceWriter::start(&third, &topic, "pre", 480, 5000).finish(false);
    let gw = TestGateway::start(agent_config("stalled", &[&topic], &third));
    wait_caught_up(&gw.admin(), "stalled", &third, &topic, 24);
    let paused = crate::faults::Paused::pause("third", "1");
    std::thread::sleep(Duration::from_secs(1));
    failover(&gw.admin(), "stalled");
    wait_stopped(&gw.admin(), "stalled");
    let report = completed_report(&gw.admin(), "stalled");
    drop(paused);
    let parts = report["partitions"].as_array().cloned().unwrap_or_default();
    assert_eq!(parts.len(), 24, "{report}");
    for p in &parts {
        assert!(
            p["rpo_records"].is_null() && p["last_known_lag_records"] == 0,
            "the source unread, the agent's last known lag instead: {p}"
        );
        assert!(
            p["next_source_offset"].as_i64().is_some_and(|n| n > 0),
            "{p}"
        );
    }
}

/// Runs alone: destination broker 2 (leader of partition 1, replication factor 1) is killed while
/// the agent mirrors a steady stream, then restarted. The agent waits and resumes; the
/// destination ends up with exactly the source's records: nothing lost, nothing doubled.
#[test]
fn disruptive_destination_broker_killed_during_mirroring_resumes_without_loss_or_duplicates() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-dkill");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = TestGateway::start(agent_config("dkill", &[&topic], &source));
    let writer = SourceWriter::start(&source, &topic, "live", 3000, 300);
    kill_destination_broker_2_while_mirroring(&gw, "dkill", &topic, &writer);
    writer.finish(false);
    wait_caught_up(&gw.admin(), "dkill", &source, &topic, 2);
}

/// Kill destination broker 2 (leader of partition 1) once the agent has mirrored records into
/// partition 1 while `writer` still writes the source; keep it down until the source has
/// taken 300 more records (a backlog for partition 1), then restart it.
fn kill_destination_broker_2_while_mirroring(
    gw: &TestGateway,
    name: &str,
    topic: &str,
    writer: &SourceWriter,
) {
    wait_for(
        "records mirrored into partition 1",
        Duration::from_secs(60),
        || agent_map_next(gw, name, topic, 1).is_some_and(|(_, d)| d > 0),
    );
    assert!(
        writer.is_running(),
        "the source is still written at the kill"
    );
    let restart = harness::StoppedNode::kill("destination", "2");
    let at_kill = writer.acked();
    wait_for(
        "the source written while destination broker 2 is down",
        Duration::from_secs(60),
        || writer.acked() >= at_kill + 300,
    );
    assert!(
        writer.is_running(),
        "the source is still written when the broker comes back"
    );
    drop(restart);
}

/// Runs alone. README "retries never duplicate", for batches without a producer id: the source
/// is written by a plain producer (`enable.idempotence=false`, `acks=1`), so the destination
/// broker cannot deduplicate a resent batch and only the agent's own check (the destination log
/// end against the offset map) can. Destination broker 2 (leader of partition 1) is killed
/// while the agent mirrors and restarted: the destination ends up with exactly the source's
/// log, the same records at the same offsets, and the offset map is one range per partition.
#[test]
fn disruptive_batches_without_a_producer_id_are_mirrored_exactly_once_across_a_destination_broker_kill(
) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-nopid");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    let gw = TestGateway::start(agent_config("nopid", &[&topic], &source));
    let writer = SourceWriter::start_without_producer_id(&source, &topic, "plain", 3000, 300);
    kill_destination_broker_2_while_mirroring(&gw, "nopid", &topic, &writer);
    writer.finish(false);
    wait_caught_up(&gw.admin(), "nopid", &source, &topic, 2);
    for p in 0..2 {
        let s = crate::failover::read_log(&source, &topic, p);
        assert!(
            !s.records.is_empty() && s.records.iter().all(|r| r.producer_id == -1),
            "partition {p}: the source batches carry no producer id"
        );
        let d = crate::failover::read_log(&destination, &topic, p);
        assert_eq!(
            offsets_keys_values(&d),
            offsets_keys_values(&s),
            "partition {p}: the destination log (left) equals the source log (right), offsets included"
        );
        assert_eq!(
            agent_map(&gw, "nopid", &topic, p).ranges,
            vec![Range {
                source: 0,
                destination: 0,
                count: s.records.len() as i64
            }],
            "partition {p}: every source offset maps to the same destination offset"
        );
    }
}

/// README "retries never duplicate", for batches without a producer id, with the lost answers
/// made certain: the gateway process drops the answers of the agent's first 3 appends after the
/// broker appended them (test hook `MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS`). The source is
/// written by a plain producer, so the broker cannot deduplicate a resend; the agent finds each
/// of the 3 batches in the destination log and does not resend it. The destination log equals
/// the source log, offsets included.
#[test]
fn an_append_without_a_producer_id_whose_answer_was_lost_is_found_in_the_log_and_not_resent() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-lost");
    harness::create_topic(&source, &topic, 1, None);
    harness::create_topic(&destination, &topic, 1, Some(&[1]));
    let written =
        SourceWriter::start_without_producer_id(&source, &topic, "plain", 200, 2000).finish(false);
    assert_eq!(written, 200, "the source holds 200 records");
    let gw = crate::gw::ProcessGateway::start(
        agent_config("lost", &[&topic], &source),
        &[("MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS", "3")],
    );
    wait_caught_up(&gw.admin(), "lost", &source, &topic, 1);
    let s = crate::failover::read_log(&source, &topic, 0);
    assert!(
        s.records.iter().all(|r| r.producer_id == -1),
        "the source batches carry no producer id"
    );
    let d = crate::failover::read_log(&destination, &topic, 0);
    assert_eq!(
        offsets_keys_values(&d),
        offsets_keys_values(&s),
        "the destination log (left) equals the source log (right), offsets included"
    );
    let series = |resolution: &str| {
        crate::failover::process_metric(
            &gw,
            &format!(
                "mirrorgate_agent_unknown_outcomes_total{{mirror=\"lost\",resolution=\"{resolution}\"}}"
            ),
        )
    };
    assert_eq!(
        (series("already_appended"), series("resent")),
        (3.0, 0.0),
        "each of the 3 lost answers was resolved by finding the batch in the log"
    );
}

/// (offset, key, value) of every record of a partition log, barriers and control records
/// included.
fn offsets_keys_values(
    log: &crate::failover::PartitionLog,
) -> Vec<(i64, Option<String>, Option<String>)> {
    log.records
        .iter()
        .map(|r| (r.offset, r.key.clone(), r.value.clone()))
        .collect()
}

fn agent_map(gw: &TestGateway, name: &str, topic: &str, p: i32) -> PartitionMap {
    gw.gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map(name, topic, p)
        .unwrap_or_else(|| panic!("no offset map for {topic}-{p}"))
}

/// The offset map a (possibly dead) gateway process persisted for mirror `name`.
fn persisted_map(cfg: &Config, name: &str) -> Option<MirrorOffsets> {
    let file = cfg.state_dir.join("agent").join(format!("{name}.json"));
    MirrorOffsets::decode(&std::fs::read(file).ok()?).ok()
}

/// The log ends of the destination partitions, once two readings 300 ms apart agree (appends
/// a killed gateway had in flight have landed).
fn settled_log_ends(destination: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let read = || {
        (0..partitions)
            .map(|p| log_end(destination, topic, p))
            .collect::<Vec<_>>()
    };
    let mut last = read();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = read();
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "destination log still moving");
        last = now;
    }
}

/// Log line of the agent having matched the destination batches it found beyond its offset map.
const RECOVERED: &str = "matched the destination's tail beyond the offset map to the source";
/// Log line of the agent starting without an offset map on an aligned destination.
const ALIGNED: &str = "the destination is aligned with the source; mirroring continues from there";

/// The gateway process is killed (kill -9) while its agent mirrors a steady stream, and
/// restarted: the agent resumes from its offset map and matches the destination tail that map
/// did not record yet (appends acknowledged after its last flush) batch by batch, and the
/// destination ends up with exactly the source's records (nothing appended twice).
///
/// The kill comes once records are mirrored and the writer still runs, and it must leave such
/// an unknown tail (the map is persisted every second, so almost every kill does); a kill that
/// happens to land right after a flush is followed by another one.
#[test]
fn disruptive_gateway_killed_during_mirroring_resumes_without_loss_or_duplicates() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-gkill");
    harness::create_topic(&source, &topic, 2, None);
    let cfg = agent_config("gkill", &[&topic], &source);
    let mut gw = crate::gw::ProcessGateway::start(cfg.clone(), &[]);
    let writer = SourceWriter::start(&source, &topic, "live", 1_000_000, 500);
    let mut attempts = 0;
    let (at_kill, tail_partitions, log_from) = loop {
        attempts += 1;
        let before: Vec<i64> = (0..2).map(|p| log_end(&destination, &topic, p)).collect();
        // Both partitions have an offset map on disk (so the restart resumes from it, not
        // from an alignment check) and more mirrored records than before.
        wait_for(
            "more records mirrored on both partitions, with a persisted offset map",
            Duration::from_secs(60),
            || {
                let m = persisted_map(&cfg, "gkill");
                (0..2).all(|p| {
                    m.as_ref().is_some_and(|m| m.get(&topic, p).is_some())
                        && log_end(&destination, &topic, p) > before[p as usize]
                })
            },
        );
        assert!(
            writer.is_running(),
            "the source is still written at the kill"
        );
        gw.kill9();
        let at_kill = settled_log_ends(&destination, &topic, 2);
        let persisted = persisted_map(&cfg, "gkill");
        let persisted_next = |p: i32| {
            persisted
                .as_ref()
                .and_then(|m| m.get(&topic, p))
                .and_then(|m| m.next())
                .map_or(0, |(_, d)| d)
        };
        let tail: Vec<i32> = (0..2)
            .filter(|p| persisted_next(*p) < at_kill[*p as usize])
            .collect();
        let log_from = gw.log().len();
        gw.restart(&[]);
        if !tail.is_empty() {
            break (at_kill, tail, log_from);
        }
        assert!(
            attempts < 5,
            "5 kills, each right after the offset map was persisted (no unknown tail)"
        );
    };
    assert!(
        at_kill.iter().all(|n| *n > 0),
        "records mirrored before the kill: {at_kill:?}"
    );
    assert!(
        writer.is_running(),
        "the source is still written after the restart"
    );
    let acked = writer.acked();
    wait_for(
        "the source written after the restart",
        Duration::from_secs(60),
        || writer.acked() >= acked + 200,
    );
    writer.finish(true);
    wait_caught_up(&gw.admin(), "gkill", &source, &topic, 2);
    // The restarted agent resumed from its map (no alignment from scratch) and matched the
    // tail the map did not know.
    let log = gw.log()[log_from..].to_string();
    assert!(
        !log.contains(ALIGNED),
        "the agent started without its offset map:\n{log}"
    );
    for p in &tail_partitions {
        assert!(
            log.lines()
                .any(|l| l.contains(RECOVERED) && l.contains(&format!("partition={p}"))),
            "partition {p}: the unknown tail (destination log end {} at the kill) was not matched \
             batch by batch:\n{log}",
            at_kill[*p as usize]
        );
    }
    // The persisted map covers every record mirrored before the kill, mapping each to the same
    // source offset (one range from 0: nothing skipped, nothing doubled).
    wait_for(
        "the offset map persisted up to the destination log end",
        Duration::from_secs(10),
        || {
            let m = persisted_map(&cfg, "gkill");
            (0..2).all(|p| {
                m.as_ref()
                    .and_then(|m| m.get(&topic, p))
                    .and_then(|m| m.next())
                    == Some((
                        log_end(&source, &topic, p),
                        log_end(&destination, &topic, p),
                    ))
            })
        },
    );
    let map = persisted_map(&cfg, "gkill").expect("offset map");
    for p in 0..2 {
        let ranges = &map.get(&topic, p).expect("partition map").ranges;
        assert_eq!(ranges.len(), 1, "partition {p}: {ranges:?}");
        assert_eq!((ranges[0].source, ranges[0].destination), (0, 0));
        assert!(
            ranges[0].count >= at_kill[p as usize],
            "partition {p}: the map ({ranges:?}) covers the {} records mirrored before the kill",
            at_kill[p as usize]
        );
    }
}

/// Runs alone: destination broker 2 is down when the failover starts. Its partition cannot get
/// a barrier: it stays read-only (FAILED, with the reason) while partition 0 completes; when the
/// broker is back the failover completes by itself with exactly one barrier per partition and
/// every mirrored record before it.
#[test]
fn disruptive_destination_broker_killed_during_failover_completes_with_one_barrier_per_partition() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-fkill");
    harness::create_topic(&source, &topic, 2, None);
    harness::create_topic(&destination, &topic, 2, Some(&[1, 2]));
    SourceWriter::start(&source, &topic, "pre", 600, 5000).finish(false);
    let gw = TestGateway::start(agent_config("fkill", &[&topic], &source));
    wait_caught_up(&gw.admin(), "fkill", &source, &topic, 2);
    let restart = harness::StoppedNode::kill("destination", "2");
    failover(&gw.admin(), "fkill");
    let deadline = Instant::now() + Duration::from_secs(60);
    let p1 = loop {
        let parts = partitions_json(&gw.admin(), "fkill");
        let p1 = parts
            .iter()
            .find(|p| p["partition"] == 1)
            .cloned()
            .expect("partition 1");
        assert_ne!(p1["state"], "STOPPED", "opened without its barrier: {p1}");
        if p1["state"] == "FAILED"
            && parts
                .iter()
                .any(|p| p["partition"] == 0 && p["state"] == "STOPPED")
        {
            break p1;
        }
        assert!(
            Instant::now() < deadline,
            "partition 1 not FAILED: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        p1["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "FAILED without a reason: {p1}"
    );
    let mut local = RawConn::connect(&gw.bootstrap());
    let (code, _, msg) = local.produce_msg(
        &topic,
        1,
        crate::psm_differential::batch(-1, -1, -1, 1, "early"),
    );
    assert_eq!(code, 44, "partition 1 writable before its barrier: {msg}");
    drop(restart);
    wait_stopped(&gw.admin(), "fkill");
    let barriers = assert_mirrored_up_to_the_barrier(&gw, "fkill", &source, &topic, 2);
    assert_local_producers_lose_nothing(&gw, &topic, &barriers);
}
