//! A source or destination that changes behind the agent (another source identity, an older
//! acknowledgement, a deleted topic, added partitions) fails the partition with a clear reason
//! and records nothing wrong.

use super::*;

// ------------------------------------------------------------------ identity and divergence
// (review F4 and F17)

fn on_runtime<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn direct_admin(
    bootstrap: &str,
) -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("socket.timeout.ms", "10000")
        .create()
        .expect("admin client")
}

fn admin_opts() -> rdkafka::admin::AdminOptions {
    rdkafka::admin::AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .operation_timeout(Some(Duration::from_secs(30)))
}

/// DeleteTopics sent to the destination brokers directly (not through the gateway).
pub(crate) fn delete_topic_directly(bootstrap: &str, topic: &str) {
    let r = on_runtime(direct_admin(bootstrap).delete_topics(&[topic], &admin_opts()))
        .expect("DeleteTopics");
    for x in r {
        x.unwrap_or_else(|(t, e)| panic!("delete {t}: {e:?}"));
    }
}

/// CreatePartitions sent to the destination brokers directly (not through the gateway).
fn add_partitions_directly(bootstrap: &str, topic: &str, total: usize) {
    let np = rdkafka::admin::NewPartitions::new(topic, total);
    let r = on_runtime(direct_admin(bootstrap).create_partitions([&np], &admin_opts()))
        .expect("CreatePartitions");
    for x in r {
        x.unwrap_or_else(|(t, e)| panic!("add partitions to {t}: {e:?}"));
    }
}

/// Whether `topic` exists on the cluster (`None`: the metadata could not be read).
fn topic_exists(bootstrap: &str, topic: &str) -> Option<bool> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("allow.auto.create.topics", "false")
        .create()
        .ok()?;
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .ok()?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Some(false);
    };
    match t.error() {
        None => Some(!t.partitions().is_empty()),
        Some(e)
            if format!("{e:?}")
                .to_lowercase()
                .replace('_', "")
                .contains("unknowntopic") =>
        {
            Some(false)
        }
        Some(_) => None,
    }
}

/// Single-record batches written straight to the leader of partition 0, as idempotent
/// producers with the given producer ids send them (epoch 0, sequences 0..n per producer; one
/// producer after the other). Returns the number of records written.
fn write_single_record_batches(
    bootstrap: &str,
    topic: &str,
    tag: &str,
    pids: &[i64],
    n: i32,
) -> i64 {
    let mut conn = RawConn::connect(&leader_addr(bootstrap, topic, 0));
    for pid in pids {
        for seq in 0..n {
            let batch =
                crate::psm_differential::batch(*pid, 0, seq, 1, &format!("{tag}-p{pid}-s{seq}"));
            let (code, _) = conn.produce(topic, 0, batch);
            assert_eq!(code, 0, "produce pid {pid} seq {seq} to {bootstrap}");
        }
    }
    pids.len() as i64 * i64::from(n)
}

type KeyValues = Vec<(Option<String>, Option<String>)>;

/// Mirror `source`/T written by idempotent producers with ids 0 and 1 (single-record batches,
/// so the destination caches those ids and sequences), stop the gateway, and write T on
/// `third` with fresh producers reusing ids 0 and 1 from sequence 0, more records than the
/// map's next offset. Returns (config repointed at `third`, topic, records mirrored, their
/// key/values on the destination).
fn mirror_then_prepare_a_repointed_source(name: &str) -> (Config, String, i64, KeyValues) {
    let source = harness::cluster("source");
    let third = harness::cluster("third");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic(&format!("agent-{name}"));
    harness::create_topic(&source, &topic, 1, None);
    let written = write_single_record_batches(&source, &topic, "src", &[0, 1], 5);
    let cfg = agent_config(name, &[&topic], &source);
    let gw = TestGateway::start(cfg.clone());
    wait_caught_up(&gw.admin(), name, &source, &topic, 1);
    assert_eq!(
        agent_map_next(&gw, name, &topic, 0),
        Some((written, written))
    );
    let mirrored = kv(&read_log(&destination, &topic, 0));
    // The map is persisted at most 1 s behind (a shutdown may not get to its last flush): wait
    // until the file holds the mirrored range before stopping the gateway.
    let file = cfg.state_dir.join("agent").join(format!("{name}.json"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let next = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                let r = v["partitions"][&topic]["0"]["ranges"]
                    .as_array()?
                    .last()?
                    .clone();
                Some(r["source"].as_i64()? + r["count"].as_i64()?)
            });
        if next == Some(written) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "offset map not persisted: {next:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(gw);
    harness::create_topic(&third, &topic, 1, None);
    write_single_record_batches(&third, &topic, "third", &[0, 1], 8);
    let mut repointed = cfg;
    repointed.mirrors[0]
        .source
        .as_mut()
        .expect("source")
        .bootstrap = third.split(',').map(|s| s.trim().to_string()).collect();
    (repointed, topic, written, mirrored)
}

/// Wait (40 s at most) for the partition to be FAILED; its reason.
fn wait_repointed_failed(gw: &TestGateway, name: &str, topic: &str, written: i64) -> String {
    let destination = harness::cluster("destination");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let parts = partitions_json(&gw.admin(), name);
        if let Some(p) = parts.iter().find(|p| p["state"] == "FAILED") {
            return p["last_error"].as_str().unwrap_or_default().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the partition is not FAILED after the source was repointed to another cluster: {parts:?}; \
             destination log end {}, offset map next {:?} (before: ({written}, {written}))",
            read_log(&destination, topic, 0).records.len(),
            agent_map_next(gw, name, topic, 0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// After the failure: the destination and the offset map are as they were before the repoint.
fn assert_nothing_recorded(
    gw: &TestGateway,
    name: &str,
    topic: &str,
    written: i64,
    mirrored: &[(Option<String>, Option<String>)],
) {
    std::thread::sleep(Duration::from_secs(4));
    let destination = harness::cluster("destination");
    assert_eq!(
        kv(&read_log(&destination, topic, 0)),
        mirrored,
        "the destination did not change"
    );
    assert_eq!(
        agent_map_next(gw, name, topic, 0),
        Some((written, written)),
        "nothing was recorded"
    );
}

/// Review F4. The source is repointed to another cluster (`third`) whose same-named topic was
/// written by idempotent producers with the same producer ids and sequences (every cluster
/// allocates producer ids from 0). Appending its batches would be answered as duplicates of
/// older, different batches at older offsets; the agent must not record those acks as the
/// copy. It refuses the source (cluster id changed): FAILED with the reason, nothing appended.
#[test]
fn the_agent_refuses_a_source_whose_identity_changed_instead_of_recording_duplicate_acks() {
    let (cfg, topic, written, mirrored) = mirror_then_prepare_a_repointed_source("repoint");
    let gw = TestGateway::start(cfg);
    let reason = wait_repointed_failed(&gw, "repoint", &topic, written);
    assert!(
        reason.contains("source cluster id changed from") && reason.contains("refuses"),
        "{reason}"
    );
    assert_nothing_recorded(&gw, "repoint", &topic, written, &mirrored);
}

/// Review F4, the ack check itself: the same repoint, with an offset map written before the
/// identity was recorded (no cluster or topic ids: the agent adopts the current ones), so the
/// agent appends. The first append is acknowledged as a duplicate at an older offset: the
/// partition is FAILED and the ack is not recorded.
#[test]
fn an_append_acknowledged_at_an_older_offset_fails_the_partition_instead_of_being_recorded() {
    let (cfg, topic, written, mirrored) = mirror_then_prepare_a_repointed_source("oldmap");
    let file = cfg.state_dir.join("agent").join("oldmap.json");
    let mut map: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("offset map file")).expect("json");
    let obj = map.as_object_mut().expect("object");
    obj.remove("source_cluster_id");
    obj.remove("topics");
    std::fs::write(&file, serde_json::to_vec_pretty(&map).expect("json")).expect("write");
    let gw = TestGateway::start(cfg);
    let reason = wait_repointed_failed(&gw, "oldmap", &topic, written);
    assert!(
        reason.contains(&format!(
            "acknowledged the append at offset 7, not at the next offset {written}"
        )) && reason.contains("duplicate"),
        "{reason}"
    );
    assert_nothing_recorded(&gw, "oldmap", &topic, written, &mirrored);
}

/// Review F17. The destination topic is deleted directly on the brokers (not through the
/// gateway, which refuses it) while the agent mirrors it: the agent must not re-create it and
/// mirror new records at offsets 0.. as if nothing happened; its partitions are FAILED.
#[test]
fn a_mirror_topic_deleted_on_the_destination_behind_the_gateway_is_failed_and_not_re_created() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-deleted");
    harness::create_topic(&source, &topic, 2, None);
    harness::produce_keyed(&source, &topic, 60, &[]);
    let gw = TestGateway::start(agent_config("deleted", &[&topic], &source));
    wait_caught_up(&gw.admin(), "deleted", &source, &topic, 2);
    delete_topic_directly(&destination, &topic);
    harness::produce_keyed(&source, &topic, 20, &[]);
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut gone = false;
    let parts = loop {
        let parts = partitions_json(&gw.admin(), "deleted");
        match topic_exists(&destination, &topic) {
            Some(false) => gone = true,
            Some(true) if gone => panic!(
                "the agent re-created the deleted destination topic {topic}: partitions {parts:?}"
            ),
            _ => {}
        }
        if gone && parts.len() == 2 && parts.iter().all(|p| p["state"] == "FAILED") {
            break parts;
        }
        assert!(
            Instant::now() < deadline,
            "partitions not FAILED after the destination topic was deleted (gone: {gone}): {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for p in &parts {
        let reason = p["last_error"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&format!(
                "destination topic {topic} disappeared after mirroring; not re-creating it"
            )),
            "{p}"
        );
    }
    // Several discovery rounds later it is still not there.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        topic_exists(&destination, &topic),
        Some(false),
        "re-created"
    );
}

/// Review F17. Partitions added to a mirror topic directly on the destination brokers have no
/// source partition behind them: they are FAILED with a clear reason (read-only until a
/// failover), while the mirrored partition goes on.
#[test]
fn partitions_added_on_the_destination_behind_the_gateway_are_failed_with_a_clear_reason() {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("agent-extra");
    harness::create_topic(&source, &topic, 1, None);
    harness::produce_keyed(&source, &topic, 30, &[]);
    let gw = TestGateway::start(agent_config("extra", &[&topic], &source));
    wait_caught_up(&gw.admin(), "extra", &source, &topic, 1);
    add_partitions_directly(&destination, &topic, 3);
    let deadline = Instant::now() + Duration::from_secs(45);
    let parts = loop {
        let parts = partitions_json(&gw.admin(), "extra");
        let extra_failed = parts.len() == 3
            && parts
                .iter()
                .filter(|p| p["partition"] != 0)
                .all(|p| p["state"] == "FAILED");
        if extra_failed {
            break parts;
        }
        assert!(
            Instant::now() < deadline,
            "partitions added on the destination are not FAILED: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for p in parts.iter().filter(|p| p["partition"] != 0) {
        let reason = p["last_error"].as_str().unwrap_or_default();
        assert!(
            reason.contains("has 3 partitions but its source has 1")
                && reason.contains("no source partition"),
            "{p}"
        );
    }
    // Partition 0 keeps mirroring.
    harness::produce_keyed(&source, &topic, 20, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let parts = partitions_json(&gw.admin(), "extra");
        let p0 = parts.iter().find(|p| p["partition"] == 0).cloned();
        if p0.as_ref().is_some_and(|p| p["state"] == "MIRRORING")
            && kv(&read_log(&source, &topic, 0)) == kv(&read_log(&destination, &topic, 0))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partition 0 stopped mirroring: {parts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
