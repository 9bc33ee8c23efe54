//! A compacted source partition (offsets with gaps, so the destination's offsets differ): the
//! group's committed offset is translated through the agent's offset map, not copied, and the
//! group resumes through the gateway at the record after the last one it read on the source.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use super::*;
use crate::failover::{failover, read_log, wait_stopped};

/// A one-partition topic the cleaner compacts within seconds.
fn create_compacted(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let t = NewTopic::new(topic, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.ms", "500")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("min.compaction.lag.ms", "0");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let r = rt
        .block_on(admin.create_topics([&t], &opts))
        .expect("create");
    assert!(r.iter().all(|r| r.is_ok()), "create {topic}: {r:?}");
    wait_for("the topic has a leader", Duration::from_secs(30), || {
        harness::partition_leaders(bootstrap, topic)
            .values()
            .all(|l| *l >= 0)
    });
}

/// `n` records over 20 keys, values `{round}-{i}` (unique), in pauses so the segments roll.
fn write_keyed(bootstrap: &str, topic: &str, round: &str, n: usize) {
    let p = idempotent_producer(bootstrap);
    for i in 0..n {
        let key = format!("k{}", i % 20);
        let value = format!("{round}-{i}");
        let mut rec = BaseRecord::to(topic).key(&key).payload(&value);
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
        if i % 50 == 49 {
            p.flush(Duration::from_secs(30)).expect("flush");
            std::thread::sleep(Duration::from_millis(600));
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

fn has_gaps(log: &crate::failover::PartitionLog) -> bool {
    log.records.first().is_some_and(|r| r.offset != 0)
        || log
            .records
            .windows(2)
            .any(|w| w[1].offset != w[0].offset + 1)
}

#[test]
fn a_compacted_partition_syncs_through_the_offset_map_and_the_group_resumes_after_its_last_record()
{
    let source = harness::cluster("source");
    let topic = harness::unique_topic("groups-compacted");
    create_compacted(&source, &topic);
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut round = 0;
    while !has_gaps(&read_log(&source, &topic, 0)) {
        assert!(
            Instant::now() < deadline,
            "the source was not compacted in time"
        );
        write_keyed(&source, &topic, &format!("r{round}"), 200);
        round += 1;
    }
    let name = "compacted";
    let gw = TestGateway::start(groups_config(name, &[&topic], &source));
    wait_mirrored(&gw, name, &source, &topic, 1);

    // The group reads half of what the source holds now.
    let held = read_log(&source, &topic, 0)
        .records
        .iter()
        .filter(|r| !r.control)
        .count();
    let group = harness::unique_topic("groups-compacted-g");
    let read = rdkafka_consume(&source, &topic, &group, held / 2);
    let committed = positions(&read)[&0];
    let map = gw
        .gateway
        .agent
        .as_ref()
        .expect("agent")
        .offset_map(name, &topic, 0)
        .expect("map");
    let want = map.to_destination(committed).expect("mirrored");
    assert_ne!(want, committed, "the logs are not aligned: not identity");
    wait_synced(&gw.admin(), name, &group, &BTreeMap::from([(0, want)]));

    failover(&gw.admin(), name);
    wait_stopped(&gw.admin(), name);
    let destination = read_log(&harness::cluster("destination"), &topic, 0);
    let dest_values: BTreeSet<String> = destination
        .records
        .iter()
        .filter(|r| !r.control && r.key.as_deref() != Some("__mirrorgate_barrier"))
        .filter_map(|r| r.value.clone())
        .collect();
    let read_values: BTreeSet<&String> = read.iter().map(|r| &r.2).collect();
    let left = dest_values
        .iter()
        .filter(|v| !read_values.contains(v))
        .count();
    let resumed: Vec<Read> = harness::consume_group(
        &gw.bootstrap(),
        &topic,
        &group,
        left,
        Duration::from_secs(60),
        &[],
    )
    .into_iter()
    .flat_map(|(p, list)| {
        list.into_iter()
            .map(move |c| (p, c.offset, c.value.unwrap_or_default()))
    })
    .collect();
    // At the translated offset (or after it, if the destination's own cleaner removed it).
    let first = resumed
        .first()
        .map(|r| r.1)
        .expect("records after the group's position");
    assert!(
        first >= want,
        "resumed at {first}, before the translated {want}"
    );
    let reread = assert_nothing_skipped(&dest_values, &read, &resumed);
    assert_eq!(reread, 0, "nothing was read on the source after the sync");
}
