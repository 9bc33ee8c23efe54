//! A Kafka Streams application with `processing.guarantee=exactly_once_v2`
//! (integration/clients/java/StreamsCount.java: a count per key in a changelogged store, one
//! output record `<input id>:<count>` per input record) moved from the source to the
//! destination by a planned failover: it runs on the source and stops; the agent mirrors its
//! input, output and changelog topics (transactions with their markers) and the sync copies its
//! consumer group's offsets; after the failover the same application id restarts through the
//! gateway with an empty state directory, restores its counts from the mirrored changelog and
//! goes on where it stopped. A `read_committed` consumer through the gateway sees every input
//! record's output exactly once, with the counts continuing across the move.
//!
//! And the same application across a failover while the agent is behind on its output
//! (docs/moving-applications.md, "Applications that write to mirrored topics"): its input
//! mirrored, its output, changelog and markers not, the source lost. The group's offsets on the
//! destination must not be ahead of its mirrored output: the restarted application processes
//! every input record whose output the destination lacks.

use super::*;
use crate::failover::{failover, wait_stopped};
use crate::psm_differential::{broker_producers, RawConn};

const STREAMS_APP: &str = "integration/clients/java/StreamsCount.java";
const PARTITIONS: i32 = 2;
/// Keys `k0..k{KEYS-1}`; input key `k{j}` always goes to partition `j % PARTITIONS`.
const KEYS: usize = 6;
/// Input records processed on the source, then through the gateway after the failover.
const BEFORE: usize = 60;
const AFTER: usize = 42;

/// Input record `i` of a round: key `k{i % KEYS}`, value (its id) `{round}-{i}`.
fn input(round: &str, i: usize) -> (String, String) {
    (format!("k{}", i % KEYS), format!("{round}-{i}"))
}

/// The ids of the `n` input records of `round`.
fn ids(round: &str, n: usize) -> BTreeSet<String> {
    (0..n).map(|i| input(round, i).1).collect()
}

/// How many output records each input id has (an output value is `<input id>:<count>`).
fn outputs_per_input(seen: &BTreeMap<i32, Vec<(String, String)>>) -> BTreeMap<String, usize> {
    let mut times: BTreeMap<String, usize> = BTreeMap::new();
    for (_, value) in seen.values().flatten() {
        let id = value.rsplit_once(':').map_or(value.as_str(), |(id, _)| id);
        *times.entry(id.to_string()).or_default() += 1;
    }
    times
}

/// How many outputs each input id has, as a `read_committed` consumer reads `output` through
/// the gateway; fails when an input of `all` has none (its processing lost: the group's offsets,
/// `synced` on the destination, were ahead of its mirrored output).
fn outputs_through_the_gateway(
    gw: &TestGateway,
    output: &str,
    all: &BTreeSet<String>,
    synced: &BTreeMap<i32, i64>,
) -> BTreeMap<String, usize> {
    let seen = read_committed(&gw.bootstrap(), output, all.len());
    let times = outputs_per_input(&seen);
    let lost: Vec<&String> = all.iter().filter(|id| !times.contains_key(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} input records processed on the source have no output on the destination (lost \
         processing: their offsets were synced ahead of their mirrored output): {lost:?}; \
         the group's offsets on the destination after the failover: {synced:?}",
        lost.len()
    );
    times
}

/// Write the `n` input records of `round` (idempotent, acks=all), each key to its partition.
fn produce_input(bootstrap: &str, topic: &str, round: &str, n: usize) {
    let p = idempotent_producer(bootstrap);
    for i in 0..n {
        let (key, id) = input(round, i);
        let part = ((i % KEYS) as i32) % PARTITIONS;
        let mut rec = BaseRecord::to(topic).key(&key).payload(&id).partition(part);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    p.poll(Duration::from_millis(10));
                }
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(60)).expect("flush the input");
}

/// Run the Streams application against `bootstrap` with a new state directory until it has
/// processed `expected` distinct input ids of `round` (60 s at most; it processes the other
/// rounds' records it reads too) and closed; returns every id it processed.
fn run_app(
    bootstrap: &str,
    app: &str,
    input: &str,
    output: &str,
    round: &str,
    expected: usize,
) -> BTreeSet<String> {
    let state = crate::gw::scratch_dir();
    let source = harness::repo().join(STREAMS_APP);
    let out = harness::rig_java(
        &source.to_string_lossy(),
        &[
            bootstrap,
            app,
            input,
            output,
            &state.to_string_lossy(),
            &expected.to_string(),
            "60000",
            &format!("{round}-"),
        ],
    );
    harness::expect_success("StreamsCount.java", &out);
    let lines = harness::json_lines(&out.stdout);
    let done = summary(&lines);
    assert_eq!(
        done["reached"], true,
        "StreamsCount.java on {bootstrap} processed {} of the {expected} input records of round {round}\n--- stderr (tail) ---\n{}",
        done["counted"],
        harness::tail_text(&out.stderr, 40)
    );
    lines
        .iter()
        .filter_map(|l| l["id"].as_str().map(str::to_string))
        .collect()
}

/// The summary line StreamsCount.java printed at its end.
fn summary(lines: &[serde_json::Value]) -> &serde_json::Value {
    lines
        .iter()
        .find(|l| l["done"] == true)
        .unwrap_or_else(|| panic!("StreamsCount.java printed no summary: {lines:?}"))
}

/// Whether every partition of `topics` ends at the same offset on the source and on the
/// destination (markers included) and no transaction is open on the source.
fn mirrored_and_stable(gw: &TestGateway, name: &str, source: &str, topics: &[&str]) -> bool {
    let destination = harness::cluster("destination");
    let agent = gw.gateway.agent.as_ref().expect("agent");
    topics.iter().all(|topic| {
        (0..PARTITIONS).all(|p| {
            // The destination topic exists once the agent has mirrored into it.
            if agent.offset_map(name, topic, p).is_none() {
                return false;
            }
            let mut conn = RawConn::connect(&harness::leader_addr(source, topic, p));
            let open = broker_producers(&mut conn, topic, p)
                .iter()
                .any(|row| row.5 >= 0);
            !open && end_offset(source, topic, p) == end_offset(&destination, topic, p)
        })
    })
}

/// (key, value) of every record of `topic` a Java `read_committed` consumer reads through
/// `bootstrap` (at least `n`, then one more second), in offset order per partition.
fn read_committed(bootstrap: &str, topic: &str, n: usize) -> BTreeMap<i32, Vec<(String, String)>> {
    read_committed_at(bootstrap, topic, n)
        .into_iter()
        .map(|(p, v)| (p, v.into_iter().map(|(_, k, v)| (k, v)).collect()))
        .collect()
}

/// As [`read_committed`], with each record's offset: (offset, key, value).
fn read_committed_at(
    bootstrap: &str,
    topic: &str,
    n: usize,
) -> BTreeMap<i32, Vec<(i64, String, String)>> {
    let class = harness::repo().join("integration/clients/java/Consume.java");
    let group = harness::unique_topic("streams-check");
    let out = harness::rig_java(
        &class.to_string_lossy(),
        &[
            bootstrap,
            topic,
            &group,
            &n.to_string(),
            "read_committed",
            "30000",
        ],
    );
    harness::expect_success("Consume.java", &out);
    let mut records: BTreeMap<i32, Vec<(i64, String, String)>> = BTreeMap::new();
    for l in harness::json_lines(&out.stdout) {
        if l.get("done").is_some() {
            continue;
        }
        records
            .entry(l["partition"].as_i64().expect("partition") as i32)
            .or_default()
            .push((
                l["offset"].as_i64().expect("offset"),
                l["key"].as_str().unwrap_or_default().to_string(),
                l["value"].as_str().unwrap_or_default().to_string(),
            ));
    }
    for v in records.values_mut() {
        v.sort();
    }
    records
}

/// The application's topics on the source (input and output, named after `prefix`) and a
/// gateway whose mirror `name` mirrors them and the application's internal topics (here its
/// changelog) by pattern, as an operator would: (gateway, application id, input, output,
/// changelog).
fn mirrored_app(
    source: &str,
    prefix: &str,
    name: &str,
) -> (TestGateway, String, String, String, String) {
    let app = harness::unique_topic(&format!("{prefix}-app"));
    let input_topic = harness::unique_topic(&format!("{prefix}-in"));
    let output = harness::unique_topic(&format!("{prefix}-out"));
    let changelog = format!("{app}-counts-changelog");
    harness::create_topic(source, &input_topic, PARTITIONS, None);
    harness::create_topic(source, &output, PARTITIONS, None);
    let internal = format!("regex:{app}-.*");
    let gw = TestGateway::start(groups_config(
        name,
        &[&input_topic, &output, &internal],
        source,
    ));
    (gw, app, input_topic, output, changelog)
}

#[test]
fn a_kafka_streams_exactly_once_application_restarted_through_the_gateway_after_failover_continues_without_duplicates(
) {
    let source = harness::cluster("source");
    let name = "streams";
    let (gw, app, input_topic, output, changelog) = mirrored_app(&source, "streams", name);

    // On the source: the first input, processed exactly once, then the application stops.
    produce_input(&source, &input_topic, "a", BEFORE);
    let first = run_app(&source, &app, &input_topic, &output, "a", BEFORE);
    let round_a = ids("a", BEFORE);
    assert_eq!(first, round_a, "the first run processed the first input");

    // Planned move: everything it wrote is mirrored, markers included, and its group synced.
    wait_for(
        "input, output and changelog mirrored, no transaction open on the source",
        Duration::from_secs(90),
        || mirrored_and_stable(&gw, name, &source, &[&input_topic, &output, &changelog]),
    );
    let committed: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, end_offset(&source, &input_topic, p)))
        .collect();
    wait_synced(&gw.admin(), name, &app, &committed);
    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);

    // On the destination: more input through the gateway, and the same application id restarted
    // with an empty state directory: its counts can only come from the mirrored changelog.
    produce_input(&gw.bootstrap(), &input_topic, "b", AFTER);
    let second = run_app(&gw.bootstrap(), &app, &input_topic, &output, "b", AFTER);
    let round_b = ids("b", AFTER);
    assert_eq!(
        second, round_b,
        "the restarted application went on from the synced offsets: none of the first input again"
    );

    // What a read_committed consumer of the output sees through the gateway.
    let total = BEFORE + AFTER;
    let seen = read_committed(&gw.bootstrap(), &output, total);
    let times = outputs_per_input(&seen);
    let duplicated: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "output records duplicated: {duplicated:?}"
    );
    let all: BTreeSet<String> = round_a.union(&round_b).cloned().collect();
    let missing: Vec<_> = all.iter().filter(|id| !times.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "input records without output: {missing:?}"
    );
    assert_eq!(times.len(), total, "no output for anything but the input");

    // Per key, in output order: the key's inputs in input order, counted 1, 2, … across the move.
    for j in 0..KEYS {
        let key = format!("k{j}");
        let want: Vec<String> = (0..BEFORE)
            .map(|i| input("a", i))
            .chain((0..AFTER).map(|i| input("b", i)))
            .filter(|(k, _)| *k == key)
            .enumerate()
            .map(|(n, (_, id))| format!("{id}:{}", n + 1))
            .collect();
        // The output is partitioned by the Java client's hash of the key: one partition per key.
        let got: Vec<String> = seen
            .values()
            .flatten()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(
            got, want,
            "key {key}: counts continue from the restored state"
        );
    }
}

/// Pause mirror `name` and wait until all its `partitions` are PAUSED: the agent appends
/// nothing more, the group sync goes on (PAUSED partitions are synced).
fn pause(admin: &str, name: &str, partitions: u64) {
    mirror_op(admin, name, "pause");
    wait_for("every partition PAUSED", Duration::from_secs(30), || {
        crate::failover::mirror_json(admin, name)["states"]["PAUSED"].as_u64() == Some(partitions)
    });
}

#[test]
fn an_exactly_once_applications_offsets_are_not_synced_ahead_of_its_mirrored_output() {
    const FIRST: usize = 60;
    const SECOND: usize = 30;
    const THIRD: usize = 24;
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let name = "ahead";
    let (gw, app, input_topic, output, changelog) = mirrored_app(&source, "streams-ahead", name);

    // The first input processed on the source, everything mirrored (markers included) and the
    // group's offsets synced: the last consistent point.
    produce_input(&source, &input_topic, "a", FIRST);
    let first = run_app(&source, &app, &input_topic, &output, "a", FIRST);
    assert_eq!(
        first,
        ids("a", FIRST),
        "the first run processed the first input"
    );
    wait_for(
        "input, output and changelog mirrored, no transaction open on the source",
        Duration::from_secs(90),
        || mirrored_and_stable(&gw, name, &source, &[&input_topic, &output, &changelog]),
    );
    let committed: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, end_offset(&source, &input_topic, p)))
        .collect();
    wait_synced(&gw.admin(), name, &app, &committed);

    // The second input is mirrored, then the agent falls behind (paused): the application
    // processes it on the source, and its output, changelog records and COMMIT markers stay
    // there while the group sync goes on reading the source's offsets.
    produce_input(&source, &input_topic, "b", SECOND);
    wait_mirrored(&gw, name, &source, &input_topic, PARTITIONS);
    pause(&gw.admin(), name, 3 * PARTITIONS as u64);
    let second = run_app(&source, &app, &input_topic, &output, "b", SECOND);
    assert_eq!(
        second,
        ids("b", SECOND),
        "the second run processed the second input"
    );
    assert!(
        (0..PARTITIONS)
            .any(|p| end_offset(&destination, &output, p) < end_offset(&source, &output, p)),
        "the second run's output is on the source only"
    );
    // Ten sync intervals: periodic rounds ran over the PAUSED partitions in that time.
    std::thread::sleep(Duration::from_millis(10 * SYNC_INTERVAL_MS));

    // The disaster: the source is lost before the agent catches up, emulated by failing over
    // while paused (the agent mirrors nothing more).
    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);

    // Where the restarted application starts: the group's offsets on the destination. The input
    // records at or after them that the application processed on the source it processes again;
    // where their output was mirrored, it appears twice. That is the bound on duplicates: only
    // these ids, at most twice each. (A first input synced before the pause and a second one
    // whose output never reached the destination make it 0 duplicates in fact: an offset synced
    // back to the last consistent point re-reads the second input, whose output was not mirrored.)
    let synced = destination_committed(&app, &input_topic, PARTITIONS);
    let reread: BTreeSet<String> = read_committed_at(&gw.bootstrap(), &input_topic, FIRST + SECOND)
        .iter()
        .flat_map(|(p, records)| {
            let from = synced.get(p).copied().unwrap_or(0);
            records
                .iter()
                .filter(move |(offset, _, _)| *offset >= from)
                .map(|(_, _, id)| id.clone())
        })
        .collect();

    // After the failover: more input through the gateway, and the same application id restarted
    // with an empty state directory (its counts from the mirrored changelog) until it processed
    // the new input, which comes after any earlier input it re-reads.
    produce_input(&gw.bootstrap(), &input_topic, "c", THIRD);
    run_app(&gw.bootstrap(), &app, &input_topic, &output, "c", THIRD);

    // What a read_committed consumer of the output sees through the gateway.
    let all: BTreeSet<String> = ids("a", FIRST)
        .into_iter()
        .chain(ids("b", SECOND))
        .chain(ids("c", THIRD))
        .collect();
    let times = outputs_through_the_gateway(&gw, &output, &all, &synced);
    let beyond: Vec<(&String, &usize)> = times
        .iter()
        .filter(|(id, n)| **n > 2 || (**n > 1 && !reread.contains(*id)))
        .collect();
    assert!(
        beyond.is_empty(),
        "output duplicated beyond the re-read input {reread:?}: {beyond:?}"
    );
    let unknown: Vec<&String> = times.keys().filter(|id| !all.contains(*id)).collect();
    assert!(unknown.is_empty(), "output for no input: {unknown:?}");
}

/// Review G7: the application's first run happens while the mirror is paused, so the agent has
/// never mirrored a transaction into its output (and its changelog topic is created then). At
/// every round the output's transactions are complete on the source: the cut left the output
/// out and the sync committed the input offsets, whose output never reached the destination;
/// after the failover the restarted application skipped that input.
#[test]
fn an_exactly_once_applications_output_never_mirrored_before_the_failover_is_not_skipped() {
    const FIRST: usize = 60;
    const SECOND: usize = 24;
    let source = harness::cluster("source");
    let name = "unplanned";
    let (gw, app, input_topic, output, _changelog) =
        mirrored_app(&source, "streams-unplanned", name);

    // The input is mirrored, then the mirror is paused before the application ever runs.
    produce_input(&source, &input_topic, "a", FIRST);
    wait_mirrored(&gw, name, &source, &input_topic, PARTITIONS);
    pause(&gw.admin(), name, 2 * PARTITIONS as u64);
    let first = run_app(&source, &app, &input_topic, &output, "a", FIRST);
    assert_eq!(first, ids("a", FIRST), "the first run processed the input");
    // Ten sync intervals: periodic rounds read the group's offsets on the source meanwhile.
    std::thread::sleep(Duration::from_millis(10 * SYNC_INTERVAL_MS));

    // The source is lost (emulated by failing over while paused: nothing more is mirrored).
    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);
    let synced = destination_committed(&app, &input_topic, PARTITIONS);

    // Restarted through the gateway with an empty state directory, with more input.
    produce_input(&gw.bootstrap(), &input_topic, "b", SECOND);
    run_app(&gw.bootstrap(), &app, &input_topic, &output, "b", SECOND);

    let all: BTreeSet<String> = ids("a", FIRST)
        .into_iter()
        .chain(ids("b", SECOND))
        .collect();
    let times = outputs_through_the_gateway(&gw, &output, &all, &synced);
    let twice: Vec<(&String, &usize)> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "output duplicated: {twice:?}");
    let unknown: Vec<&String> = times.keys().filter(|id| !all.contains(*id)).collect();
    assert!(unknown.is_empty(), "output for no input: {unknown:?}");
}

/// The same application connected only to a mirror's forward listener, running without a stop
/// while its input keeps coming (through the listener too), across a planned switchover: its
/// open transaction ends on the source during the hold, then it goes on on the destination (its
/// producer's transactional id is new there: Streams creates its producer again). When the
/// first request of the next transaction to reach the destination's coordinator is the offset
/// commit, the Java client takes its INVALID_PRODUCER_ID_MAPPING for an unexpected, fatal error
/// and the stream thread dies (seen in a fresh-clone CI run); the application replaces it
/// (`REPLACE_THREAD`, as production applications set) and goes on. A `read_committed` consumer
/// of the destination sees every input record's output exactly once, with the counts continuing
/// across the switch.
#[test]
fn a_kafka_streams_exactly_once_application_on_the_forward_listener_crosses_a_switchover() {
    const FIRST: usize = 60;
    const SECOND: usize = 60;
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let name = "streams-fwd";
    let app = harness::unique_topic("streams-fwd-app");
    let input_topic = harness::unique_topic("streams-fwd-in");
    let output = harness::unique_topic("streams-fwd-out");
    harness::create_topic(&source, &input_topic, PARTITIONS, None);
    harness::create_topic(&source, &output, PARTITIONS, None);
    let internal = format!("regex:{app}-.*");
    let mut cfg = groups_config(name, &[&input_topic, &output, &internal], &source);
    let (listener, forward) = crate::gw::forward_listener(10_000);
    cfg.mirrors[0].forward = Some(listener);
    let gw = TestGateway::start(cfg);

    produce_input(&forward, &input_topic, "a", FIRST);
    let state = crate::gw::scratch_dir();
    let streams = {
        let (forward, app, input_topic, output) = (
            forward.clone(),
            app.clone(),
            input_topic.clone(),
            output.clone(),
        );
        std::thread::spawn(move || {
            let class = harness::repo().join(STREAMS_APP);
            // A stream thread that dies is replaced, as a production application sets it: the
            // first commit after the switch can fail for good in the Java client (below).
            harness::rig_java_env(
                &class.to_string_lossy(),
                &[
                    &forward,
                    &app,
                    &input_topic,
                    &output,
                    &state.to_string_lossy(),
                    &(FIRST + SECOND).to_string(),
                    "180000",
                ],
                &[("STREAMS_REPLACE_THREAD", "1")],
            )
        })
    };
    // The second input comes while the application runs, 20 records a second, across the switch.
    let feeder = {
        let (forward, input_topic) = (forward.clone(), input_topic.clone());
        std::thread::spawn(move || {
            let p = idempotent_producer(&forward);
            for i in 0..SECOND {
                let (key, id) = input("b", i);
                let part = ((i % KEYS) as i32) % PARTITIONS;
                p.send(
                    BaseRecord::to(&input_topic)
                        .key(&key)
                        .payload(&id)
                        .partition(part),
                )
                .map_err(|(e, _)| e)
                .expect("send");
                p.flush(Duration::from_secs(60)).expect("flush the input");
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    wait_for(
        "the application's output on the source",
        Duration::from_secs(120),
        || {
            (0..PARTITIONS)
                .map(|p| end_offset(&source, &output, p))
                .sum::<i64>()
                >= FIRST as i64
        },
    );
    crate::failover::switchover(&gw.admin(), name);
    feeder.join().expect("feeder");
    let out = streams.join().expect("streams thread");
    harness::expect_success("StreamsCount.java", &out);
    let lines = harness::json_lines(&out.stdout);
    let done = summary(&lines);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let migrated = stderr
        .lines()
        .filter(|l| l.contains("InvalidPidMapping") || l.contains("TaskMigrated"))
        .count();
    let replaced: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l.get("replaced_thread").is_some())
        .collect();
    eprintln!("streams across the switchover: {done}; {migrated} log lines of a task migrated or a producer id unknown to the destination; stream threads replaced: {replaced:?}");
    assert_eq!(
        done["reached"],
        true,
        "the application processed {} of the {} input records\n--- stderr (tail) ---\n{}",
        done["counted"],
        FIRST + SECOND,
        harness::tail_text(&out.stderr, 40)
    );

    assert_eq!(
        done["committed"], true,
        "the application's outputs of every input it processed, committed, before it closed"
    );

    let total = FIRST + SECOND;
    let seen = read_committed(&destination, &output, total);
    let times = outputs_per_input(&seen);
    let duplicated: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "output records duplicated: {duplicated:?}"
    );
    let all: BTreeSet<String> = ids("a", FIRST).union(&ids("b", SECOND)).cloned().collect();
    let missing: Vec<_> = all.iter().filter(|id| !times.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "input records without output: {missing:?}\n--- the output topic's logs (offset, producer id, epoch, control, key, value) ---\n{}",
        output_logs(&[("source", &source), ("destination", &destination)], &output)
    );
    for j in 0..KEYS {
        let key = format!("k{j}");
        let counts: Vec<usize> = seen
            .values()
            .flatten()
            .filter(|(k, _)| *k == key)
            .filter_map(|(_, v)| v.rsplit_once(':')?.1.parse().ok())
            .collect();
        let want: Vec<usize> = (1..=counts.len()).collect();
        assert_eq!(counts, want, "key {key}: counts go on across the switch");
    }
}

/// Every record of `topic` on each cluster, markers included, one a line: what a failure of
/// the test above needs to be read (a record without its marker, a marker where none is due).
fn output_logs(clusters: &[(&str, &str)], topic: &str) -> String {
    let mut out = String::new();
    for (name, bootstrap) in clusters {
        for p in 0..PARTITIONS {
            let log = crate::failover::read_log(bootstrap, topic, p);
            for r in &log.records {
                out.push_str(&format!(
                    "{name} {p} {} {} {} {} {:?} {:?}\n",
                    r.offset, r.producer_id, r.producer_epoch, r.control, r.key, r.value
                ));
            }
            for c in &log.control_batches {
                out.push_str(&format!(
                    "{name} {p} {} {} {} control-batch attributes {:#x}\n",
                    c.offset, c.producer_id, c.producer_epoch, c.attributes
                ));
            }
        }
    }
    out
}
