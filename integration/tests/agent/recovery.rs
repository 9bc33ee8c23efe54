//! Recovering what a failover left behind: the old source's un-mirrored tail listed exactly,
//! copied once into the quarantine topic — also when the gateway is SIGKILLed in the middle of
//! the copy —, then the old source realigned and mirrored back from the destination.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use mirrorgate::client::{KafkaClient, LATEST};
use mirrorgate::protocol::batch::BatchWalker;

use super::transactions::txn_produce;
use super::*;
use crate::failover::read_log as raw_log;
use crate::gw::ProcessGateway;

/// A record of the quarantine topic: its provenance headers and its value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Quarantined {
    source_partition: i32,
    source_offset: i64,
    failover_id: String,
    value: Option<String>,
}

/// Every data record of a quarantine partition, read from its leader with kafka-protocol's own
/// decoder (not the gateway's).
fn quarantined(bootstrap: &str, topic: &str, partition: i32) -> Vec<Quarantined> {
    let addr = harness::leader_addr(bootstrap, topic, partition);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(10))
            .await
            .expect("connect");
        let end = c.list_offset(topic, partition, LATEST).await.expect("end");
        let mut next = 0;
        let mut out = Vec::new();
        while next < end {
            let f = c
                .fetch_partition(topic, partition, next, 16 << 20)
                .await
                .expect("fetch");
            for item in BatchWalker::fetched(&f.records) {
                let (h, b) = item.expect("batch");
                next = h.last_offset() + 1;
                if h.is_control() {
                    continue;
                }
                let mut bytes = Bytes::copy_from_slice(b);
                let set = RecordBatchDecoder::decode(&mut bytes).expect("decode");
                for r in set.records {
                    let header = |k: &str| {
                        let v = r
                            .headers
                            .iter()
                            .find(|(name, _)| name.as_str() == k)
                            .and_then(|(_, v)| v.clone())
                            .unwrap_or_else(|| panic!("header {k} on {r:?}"));
                        String::from_utf8(v.to_vec()).expect("utf-8")
                    };
                    assert_eq!(
                        header("mirrorgate.source.topic"),
                        topic.trim_end_matches(".unmirrored")
                    );
                    out.push(Quarantined {
                        source_partition: header("mirrorgate.source.partition").parse().unwrap(),
                        source_offset: header("mirrorgate.source.offset").parse().unwrap(),
                        failover_id: header("mirrorgate.failover.id"),
                        value: r.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
                    });
                }
            }
        }
        out
    })
}

/// The high watermark of a partition, `None` while the topic does not exist.
fn try_end(bootstrap: &str, topic: &str, partition: i32) -> Option<i64> {
    let leaders = harness::try_partition_leaders(bootstrap, topic).ok()?;
    leaders.get(&partition)?;
    let addr = harness::leader_addr(bootstrap, topic, partition);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let mut c = KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .ok()?;
        c.list_offset(topic, partition, LATEST).await.ok()
    })
}

fn get_json(gw: &ProcessGateway, path: &str) -> serde_json::Value {
    let (status, body) = gw.call(Method::GET, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("json")
}

/// Instances `a` and `b` of mirror `mirror` (the built-in agent, from `source`) on a new state
/// topic, session 3 s: `a` started first and running the agent, both seeing each other alive.
fn two_instances(mirror: &str, topic: &str, source: &str) -> (ProcessGateway, ProcessGateway) {
    let state_topic = harness::unique_topic(&format!("{mirror}-state"));
    let cfg = |id: &str| {
        let mut c = agent_config(mirror, &[topic], source);
        c.instances = Some(mirrorgate::config::InstancesConfig {
            id: id.into(),
            state_topic: state_topic.clone(),
            session_timeout_ms: 3_000,
        });
        c
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
        .block_on(mirrorgate::app::peers::init_state_topic(&cfg("a")))
        .expect("state topic created");
    let a = ProcessGateway::start(cfg("a"), &[]);
    wait_for("a runs the agent", Duration::from_secs(30), || {
        super::owners::agent_status(&a.admin(), mirror)["runs_here"] == true
    });
    let b = ProcessGateway::start(cfg("b"), &[]);
    wait_for("both instances alive", Duration::from_secs(60), || {
        [&a, &b].iter().all(|g| {
            get_json(g, "/v1/instances")["others_alive"]
                .as_array()
                .is_some_and(|v| v.len() == 1)
        })
    });
    (a, b)
}

/// The source (`third`) SIGKILLed, the failover of `mirror` called and waited for until its
/// report is complete, then `while_down` with its id; the source is started again before the
/// id is returned.
fn failover_with_the_source_down(
    gw: &ProcessGateway,
    mirror: &str,
    while_down: impl FnOnce(&str),
) -> String {
    let _source_down = harness::StoppedNode::kill("third", "1");
    let (status, body) = gw.call(Method::POST, &format!("/v1/mirrors/{mirror}/failover"));
    assert_eq!(status, 202, "{body}");
    let fid = serde_json::from_str::<serde_json::Value>(&body).unwrap()["failover_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for("the failover report", Duration::from_secs(60), || {
        get_json(gw, &format!("/v1/mirrors/{mirror}/failovers/{fid}"))["status"] == "complete"
    });
    while_down(&fid);
    fid
}

/// The source's records after the failover point (data only), per partition: what the listing
/// must find, computed from the source's log and the destination's.
struct Expected {
    tail: Vec<(i64, Option<String>)>,
    /// The values a recovery copies: not those of aborted or open transactions.
    recoverable: Vec<(i64, Option<String>)>,
}

fn expected(source: &str, destination: &str, topic: &str, p: i32) -> Expected {
    let src = raw_log(source, topic, p);
    let mirrored = raw_log(destination, topic, p)
        .records
        .iter()
        .filter(|r| !r.control)
        .count() as i64;
    // The source's data records past the ones mirrored (source and destination offsets match:
    // the destination was empty when the agent started).
    let last_mirrored = src
        .records
        .iter()
        .filter(|r| !r.control)
        .nth(mirrored as usize - 1)
        .map(|r| r.offset)
        .expect("something mirrored");
    let tail: Vec<(i64, Option<String>)> = src
        .records
        .iter()
        .filter(|r| !r.control && r.offset > last_mirrored)
        .map(|r| (r.offset, r.value.clone()))
        .collect();
    let recoverable = tail
        .iter()
        .filter(|(_, v)| {
            v.as_deref()
                .is_some_and(|v| !v.ends_with("-a") && !v.ends_with("-o"))
        })
        .cloned()
        .collect();
    Expected { tail, recoverable }
}

/// The source (`third`) is SIGKILLed while the paused mirror lags behind by the records of
/// idempotent librdkafka and Java producers and committed, aborted and open transactions; the
/// failover is unplanned, and local writes follow it. Once the source is back,
/// `unmirrored` lists exactly the records the test computes from both logs; a recovery cut
/// short by a SIGKILL of the gateway, then called again, leaves each committed or plain record
/// exactly once in `<topic>.unmirrored`, never an aborted or open one; the second call goes
/// through the other instance. The old source is then realigned and mirrored back.
#[test]
fn disruptive_the_unmirrored_tail_is_listed_exactly_and_recovered_once_across_a_gateway_kill() {
    let source = harness::cluster("third");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("recover");
    let quarantine = format!("{topic}.unmirrored");
    harness::create_topic(&source, &topic, 2, None);
    SourceWriter::start(&source, &topic, "pre", 100, 5000).finish(false);
    // Two instances on a state topic: `gw` takes the failover and the first recovery call,
    // `other` the rest.
    let (mut gw, other) = two_instances("rec", &topic, &source);
    wait_for("mirrored", Duration::from_secs(90), || {
        (0..2).all(|p| kv(&read_log(&source, &topic, p)) == kv(&read_log(&destination, &topic, p)))
    });
    let (status, body) = gw.call(Method::POST, "/v1/mirrors/rec/pause");
    assert_eq!(status, 200, "{body}");
    // The tail: many small batches of an idempotent librdkafka producer, a Java idempotent
    // producer (one record per batch), then per partition a committed, an aborted and an open
    // transaction.
    SourceWriter::start(&source, &topic, "late", 2000, 400).finish(false);
    let dir = tempfile::tempdir().expect("tempdir");
    let (java, out) = harness::verifiable_produce(
        &source,
        &topic,
        300,
        &harness::idempotent_producer_props(dir.path()),
    );
    assert_eq!(java.len(), 300, "{}", String::from_utf8_lossy(&out.stderr));
    txn_produce(&source, &topic, 2, &format!("{topic}-tx"), "c3,a2,o2");
    let want: Vec<Expected> = (0..2)
        .map(|p| expected(&source, &destination, &topic, p))
        .collect();
    let fid = failover_with_the_source_down(&gw, "rec", |fid| {
        // Local writes on the destination since the failover.
        assert_eq!(
            harness::produce_keyed(&gw.bootstrap(), &topic, 40, &[]).len(),
            40
        );
        // The source is down: nothing can be listed yet, and nothing changes.
        let (status, body) = gw.call(
            Method::GET,
            &format!("/v1/mirrors/rec/failovers/{fid}/unmirrored"),
        );
        assert_eq!(status, 503, "{body}");
    });
    // The source is back.
    let path = format!("/v1/mirrors/rec/failovers/{fid}/unmirrored");
    let mut listing = serde_json::Value::Null;
    wait_for("the old source listed", Duration::from_secs(90), || {
        let (status, body) = gw.call(Method::GET, &path);
        listing = serde_json::from_str(&body).unwrap_or_default();
        status == 200
    });
    let mut recoverable_total = 0;
    for p in 0..2usize {
        let l = &listing["partitions"][p];
        let w = &want[p];
        assert_eq!(l["partition"], p as i64, "{listing}");
        assert_eq!(l["from_offset"], w.tail[0].0, "{l}");
        assert_eq!(l["records"], w.tail.len() as i64, "{l}");
        assert_eq!(
            (&l["committed"], &l["aborted"], &l["open"]),
            (
                &serde_json::json!(3),
                &serde_json::json!(2),
                &serde_json::json!(2)
            ),
            "{l}"
        );
        assert_eq!(l["recoverable_records"], w.recoverable.len() as i64, "{l}");
        assert_eq!(l["recovered_records"], 0, "{l}");
        assert!(
            l["producer_ids"].as_array().is_some_and(|v| !v.is_empty()),
            "{l}"
        );
        recoverable_total += w.recoverable.len() as i64;
    }
    // The CLI lists the same.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"))
        .args(["unmirrored", "rec", &fid, "--admin", &gw.admin()])
        .output()
        .expect("mirrorgate unmirrored");
    let text = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{text}");
    assert!(
        text.contains(&format!("({recoverable_total} recoverable: 6 committed")),
        "{text}"
    );
    let report = get_json(&gw, &format!("/v1/mirrors/rec/failovers/{fid}"));
    assert_eq!(
        report["totals"]["recoverable_records"], recoverable_total,
        "{report}"
    );
    // A dry run copies nothing.
    let (status, body) = gw.call(Method::POST, &format!("{path}/recover?dry_run=true"));
    assert_eq!(status, 200, "{body}");
    assert!(
        try_end(&destination, &quarantine, 0).is_none(),
        "no quarantine topic yet"
    );
    // The recovery, SIGKILLed once the quarantine topic has records.
    let admin = gw.admin();
    let recover_path = format!("{path}/recover");
    let call = std::thread::spawn(move || {
        crate::gw::try_admin_call(&admin, Method::POST, &recover_path, None)
    });
    let started = Instant::now();
    // Past the copier's fence marker (one offset) of either partition: a record is in.
    while try_end(&destination, &quarantine, 0).unwrap_or(0) <= 1
        && try_end(&destination, &quarantine, 1).unwrap_or(0) <= 1
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the copy did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    gw.kill9();
    let _ = call.join();
    // The other instance knows the failover (its report is on the state topic) and goes on.
    let gw = other;
    let after_kill = get_json(&gw, &path);
    let cut = after_kill["totals"]["recovered_records"].as_i64().unwrap();
    assert!(
        cut > 0 && cut < recoverable_total,
        "the copy was cut short: {cut} of {recoverable_total} recovered"
    );
    assert_eq!(
        after_kill["totals"]["remaining_records"],
        recoverable_total - cut
    );
    let (status, body) = gw.call(Method::POST, &format!("{path}/recover"));
    assert_eq!(status, 200, "{body}");
    let out: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(out["verified"], true, "{out}");
    assert_eq!(out["recovered_records"], recoverable_total, "{out}");
    assert_eq!(out["copied"], recoverable_total - cut, "{out}");
    for p in 0..2i32 {
        let got = quarantined(&destination, &quarantine, p);
        let w = &want[p as usize];
        let got_pairs: Vec<(i64, Option<String>)> = got
            .iter()
            .map(|q| (q.source_offset, q.value.clone()))
            .collect();
        assert_eq!(
            got_pairs, w.recoverable,
            "partition {p}: each recoverable record once, in order"
        );
        assert!(got
            .iter()
            .all(|q| q.failover_id == fid && q.source_partition == p));
    }
    let metrics = gw.call(Method::GET, "/metrics").1;
    let series = format!("mirrorgate_unmirrored_records{{mirror=\"rec\",topic=\"{topic}\"}} 0");
    assert!(metrics.contains(&series), "{series} in {metrics}");
    let series = format!(
        "mirrorgate_recovered_records_total{{mirror=\"rec\",topic=\"{topic}\"}} {}",
        recoverable_total - cut
    );
    assert!(
        metrics.contains(&series),
        "{series}: copied by the restarted gateway"
    );
    // Called again: nothing more is copied.
    let (status, body) = gw.call(Method::POST, &format!("{path}/recover"));
    assert_eq!(status, 200, "{body}");
    let again: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (again["copied"].as_i64(), again["verified"].as_bool()),
        (Some(0), Some(true))
    );
    // Realign the old source: a dry run names the topic and changes nothing; then it is deleted
    // and created again empty, and a failback mirror copies the destination back.
    let realign = format!("{path}/realign");
    let before = read_log(&source, &topic, 0).records.len();
    let (status, body) = gw.call(Method::POST, &format!("{realign}?dry_run=true"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("would_recreate"), "{body}");
    assert_eq!(
        read_log(&source, &topic, 0).records.len(),
        before,
        "untouched"
    );
    let (status, body) = gw.call(Method::POST, &realign);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""recreated""#), "{body}");
    for p in 0..2 {
        assert!(
            read_log(&source, &topic, p).records.is_empty(),
            "empty again"
        );
    }
    let (status, body) = gw.call(Method::POST, &realign);
    assert_eq!(status, 409, "only once: {body}");
    let (status, body) = gw.call(Method::POST, &format!("{path}/recover"));
    assert_eq!(status, 409, "the tail is gone from the old source: {body}");
    let mut back = agent_config("back", &[&topic], &destination);
    back.destination.bootstrap = source.split(',').map(|s| s.trim().to_string()).collect();
    let failback = TestGateway::start(back);
    wait_for(
        "the old source equal to the destination",
        Duration::from_secs(90),
        || {
            (0..2).all(|p| {
                let (a, b) = (
                    read_log(&source, &topic, p),
                    read_log(&destination, &topic, p),
                );
                !b.records.is_empty() && kv(&a) == kv(&b)
            })
        },
    );
    drop(failback);
    let report = get_json(&gw, &format!("/v1/mirrors/rec/failovers/{fid}"));
    assert_eq!(report["recovery"]["verified"], true, "{report}");
    assert!(
        report["recovery"]["source_realigned_ms"].is_i64(),
        "{report}"
    );
    let last_known: Vec<&serde_json::Value> = report["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| &p["last_known_lag_records"])
        .collect();
    eprintln!(
        "recovery figures: rpo_records {} (last known lag per partition {last_known:?}), listing {}, recoverable_records {}, cut at {cut}, recovered {}, verified {}, recovery {}",
        report["totals"]["rpo_records"],
        listing["totals"],
        report["totals"]["recoverable_records"],
        out["recovered_records"],
        out["verified"],
        report["recovery"]
    );
}

/// A transaction whose records the agent mirrored, but not its COMMIT, when the source died:
/// the failover aborts it on the destination (its records invisible to `read_committed` there)
/// while the source committed it, so its producer was told it is written. Those records are
/// owed to the quarantine topic like the un-mirrored tail's, in the source's order before it,
/// each once. Found by the chaos run's recovery rule (docs/correctness.md, R1).
#[test]
fn disruptive_a_transaction_committed_after_its_records_were_mirrored_is_recovered() {
    let source = harness::cluster("third");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("recover-txn");
    let quarantine = format!("{topic}.unmirrored");
    harness::create_topic(&source, &topic, 1, None);
    SourceWriter::start(&source, &topic, "pre", 20, 5000).finish(false);
    let gw = ProcessGateway::start(agent_config("rectx", &[&topic], &source), &[]);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &source)
        .set("transactional.id", format!("{topic}-tx"))
        .set("linger.ms", "0")
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init transactions");
    producer.begin_transaction().expect("begin");
    for i in 0..5 {
        let v = format!("t{i}");
        producer
            .send(BaseRecord::to(&topic).partition(0).key(&v).payload(&v))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    wait_for(
        "the transaction's records mirrored (not its marker: it is not written yet)",
        Duration::from_secs(90),
        || read_log(&destination, &topic, 0).records.len() == 25,
    );
    let (status, body) = gw.call(Method::POST, "/v1/mirrors/rectx/pause");
    assert_eq!(status, 200, "{body}");
    producer
        .commit_transaction(Duration::from_secs(30))
        .expect("the source commits the transaction");
    wait_for(
        "the COMMIT marker on the source",
        Duration::from_secs(30),
        || {
            raw_log(&source, &topic, 0)
                .records
                .iter()
                .any(|r| r.control)
        },
    );
    drop(producer);
    // And records after it that were never mirrored: the tail as it always was.
    SourceWriter::start(&source, &topic, "late", 10, 5000).finish(false);
    let fid = failover_with_the_source_down(&gw, "rectx", |_| {});
    let report = get_json(&gw, &format!("/v1/mirrors/rectx/failovers/{fid}"));
    assert_eq!(
        report["partitions"][0]["transactions_aborted"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "the failover aborted the open transaction on the destination: {report}"
    );
    let path = format!("/v1/mirrors/rectx/failovers/{fid}/unmirrored");
    let mut listing = serde_json::Value::Null;
    wait_for("the old source listed", Duration::from_secs(90), || {
        let (status, body) = gw.call(Method::GET, &path);
        listing = serde_json::from_str(&body).unwrap_or_default();
        status == 200
    });
    let l = &listing["partitions"][0];
    assert_eq!(
        (&l["committed"], &l["recoverable_records"]),
        (&serde_json::json!(5), &serde_json::json!(15)),
        "the transaction's 5 records and the 10 after it: {l}"
    );
    let (status, body) = gw.call(Method::POST, &format!("{path}/recover"));
    assert_eq!(status, 200, "{body}");
    let out: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(out["verified"], true, "{out}");
    let got: Vec<Option<String>> = quarantined(&destination, &quarantine, 0)
        .into_iter()
        .map(|q| q.value)
        .collect();
    let want: Vec<Option<String>> = (0..5)
        .map(|i| Some(format!("t{i}")))
        .chain(
            read_log(&source, &topic, 0)
                .records
                .iter()
                .filter(|r| r.2.as_deref().is_some_and(|v| v.starts_with("value-late")))
                .map(|r| r.2.clone()),
        )
        .collect();
    assert_eq!(want.len(), 15);
    assert_eq!(got, want, "each owed record once, in the source's order");
}

/// R2 (the ten-minute chaos campaign, seed 112): the agent's owner `a` is SIGKILLed while it
/// mirrors, and the source right after it, between two publications of a's offset maps. The
/// failover goes through `b`, which takes the maps a published last and cannot match them to
/// the destination's tail (that needs the source, which is down): its report's offsets lag
/// what the destination holds. Once the source is back, the recovery must copy into the
/// quarantine topic exactly the records the destination lacks — none of those a mirrored after
/// its last publication.
#[test]
fn disruptive_a_recovery_after_the_owner_died_between_two_publications_copies_nothing_the_destination_has(
) {
    let source = harness::cluster("third");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("recover-stale");
    let quarantine = format!("{topic}.unmirrored");
    harness::create_topic(&source, &topic, 1, None);
    let (mut a, b) = two_instances("stale", &topic, &source);
    let writer = SourceWriter::start(&source, &topic, "w", 30_000, 3_000);
    wait_for("the agent mirrors", Duration::from_secs(60), || {
        read_log(&destination, &topic, 0).records.len() >= 6_000
    });
    // a dies with what it mirrored since its last publication; the source a moment later.
    a.kill9();
    let fid = failover_with_the_source_down(&b, "stale", |_| {});
    let _ = writer.finish_with_errors();
    let report = get_json(&b, &format!("/v1/mirrors/stale/failovers/{fid}"));
    let part = &report["partitions"][0];
    let map_dst = part["last_mirrored_destination_offset"]
        .as_i64()
        .unwrap_or(-1);
    let log_dst = part["last_mirrored_offset"].as_i64().unwrap_or(-1);
    println!(
        "the report's map ends at destination offset {map_dst}, the destination's data at {log_dst}"
    );
    assert!(
        map_dst < log_dst,
        "a published its maps up to the end before it died: the case did not happen ({part})"
    );
    let path = format!("/v1/mirrors/stale/failovers/{fid}/unmirrored");
    wait_for("the old source listed", Duration::from_secs(90), || {
        b.call(Method::GET, &path).0 == 200
    });
    let (status, body) = b.call(Method::POST, &format!("{path}/recover"));
    assert_eq!(status, 200, "{body}");
    let on_destination: std::collections::HashSet<Option<String>> =
        kv(&read_log(&destination, &topic, 0))
            .into_iter()
            .map(|(_, v)| v)
            .collect();
    let copied = quarantined(&destination, &quarantine, 0);
    let twice: Vec<&Quarantined> = copied
        .iter()
        .filter(|q| on_destination.contains(&q.value))
        .collect();
    let lacking: Vec<Option<String>> = kv(&read_log(&source, &topic, 0))
        .into_iter()
        .map(|(_, v)| v)
        .filter(|v| !on_destination.contains(v))
        .collect();
    println!(
        "{} records copied to the quarantine topic, {} of them on the destination too; the destination lacks {}",
        copied.len(),
        twice.len(),
        lacking.len()
    );
    assert!(
        twice.is_empty(),
        "{} records of the quarantine topic are on the destination too, the first {:?}",
        twice.len(),
        twice.first()
    );
    let got: std::collections::HashSet<&Option<String>> = copied.iter().map(|q| &q.value).collect();
    let missing: Vec<&Option<String>> = lacking.iter().filter(|v| !got.contains(v)).collect();
    assert!(
        missing.is_empty(),
        "{} records the destination lacks are not in the quarantine topic, the first {:?}",
        missing.len(),
        missing.first()
    );
}
