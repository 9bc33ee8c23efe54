//! Unit tests of `registry.rs` (the slot's own transitions are tested in `slot_tests.rs`).

use std::time::Instant;

use super::super::slot::Rebuilt;
use super::*;

/// Install an empty rebuilt state in `slot` as of `at`: the partition is READY.
fn rebuilt_at(slot: &Mutex<PartitionSlot>, at: Instant) {
    let mut s = lock(slot);
    s.begin_rebuild();
    let rebuilt = Rebuilt {
        psm: PartitionPsm::new(),
        from_offset: 0,
        read_through: -1,
        from_snapshot: false,
        barrier: None,
    };
    s.finish_rebuild(rebuilt, at).expect("a rebuild was begun");
}

fn registry_tracking(topic: &str) -> Arc<PsmRegistry> {
    let cfg = crate::config::load_str(
            &format!(
                "destination:\n  bootstrap: [\"127.0.0.1:1\"]\nlisteners:\n  client:\n    port_base: 9092\nadmin:\n  bind: 127.0.0.1:9180\nmirrors:\n  - name: m\n    topics: [{topic}]\n"
            ),
            "t.yaml",
        )
        .unwrap();
    PsmRegistry::new(&cfg, None, &crate::metrics::Metrics::new())
}

#[test]
fn a_partition_rebuilt_less_than_the_interval_ago_waits_for_its_next_rebuild() {
    let r = registry_tracking("t");
    let slot = r.slot("t", 0).expect("tracked");
    rebuilt_at(&slot, Instant::now());
    r.mark_outcome_unknown("t", 0);
    assert!(r.wanting_rebuild().is_empty());
    let earlier = Instant::now().checked_sub(MIN_REBUILD_INTERVAL);
    rebuilt_at(&slot, earlier.expect("the clock is past the interval"));
    r.mark_outcome_unknown("t", 0);
    assert_eq!(r.wanting_rebuild(), vec![("t".to_string(), 0)]);
}

/// The body (after the request header) of a Produce v9 request with one batch of
/// producer 1 for `topic`-0.
fn produce_body(topic: &str, acks: i16) -> Vec<u8> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ProduceRequest;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let req = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(
                    crate::protocol::txn_marker::one_record_batch_for_tests(0, 1, None, false),
                ))])]);
    let mut buf = bytes::BytesMut::new();
    req.encode(&mut buf, 9).expect("encodes");
    buf.to_vec()
}

fn cluster() -> Arc<crate::cluster::ClusterView> {
    crate::cluster::ClusterView::new(
        crate::config::ClusterConfig {
            bootstrap: vec!["127.0.0.1:1".into()],
            connect_timeout_ms: 1000,
            metadata_refresh_ms: 1000,
            tls: None,
            sasl: None,
        },
        crate::client::Connector::plain(),
        crate::metrics::Metrics::new(),
    )
}

#[test]
fn an_acks_0_produce_marks_its_tracked_partition_for_a_rebuild_and_notes_no_batch() {
    let r = registry_tracking("t");
    let slot = r.slot("t", 0).expect("tracked");
    rebuilt_at(&slot, Instant::now());
    let pending = super::super::tap::on_request(&r, &cluster(), 9, &produce_body("t", 0), true);
    assert!(pending.is_none(), "no answer will come: {pending:?}");
    assert!(lock(&slot).view().wants_rebuild);
}

#[test]
fn a_produce_with_acks_notes_its_tracked_batch_and_asks_for_no_rebuild() {
    let r = registry_tracking("t");
    let slot = r.slot("t", 0).expect("tracked");
    rebuilt_at(&slot, Instant::now());
    let pending = super::super::tap::on_request(&r, &cluster(), 9, &produce_body("t", -1), true)
        .expect("a tracked batch");
    assert_eq!(pending.batches.len(), 1);
    assert_eq!(
        (
            pending.batches[0].partition,
            pending.batches[0].header.producer_id
        ),
        (0, 1)
    );
    assert!(!lock(&slot).view().wants_rebuild);
    // An untracked topic: nothing noted, no slot created.
    assert!(
        super::super::tap::on_request(&r, &cluster(), 9, &produce_body("other", 0), true).is_none()
    );
    assert!(r.existing("other", 0).is_none());
}

#[test]
fn a_partition_never_rebuilt_is_rebuilt_at_once() {
    let r = registry_tracking("t");
    let slot = r.slot("t", 1).expect("tracked");
    assert!(lock(&slot).view().wants_rebuild);
    assert_eq!(r.wanting_rebuild(), vec![("t".to_string(), 1)]);
}

/// A single-record batch of producer `pid`, epoch 0, sequence 0 (the slot tests' batch).
fn header(pid: i64) -> BatchHeader {
    super::super::slot::tests::single(pid, 0)
}

#[test]
fn clearing_at_a_barrier_hands_the_producers_over_while_the_partition_is_held_and_counts_them() {
    let r = registry_tracking("t");
    let slot = r.slot("t", 0).expect("tracked");
    rebuilt_at(&slot, Instant::now());
    for (pid, offset) in [(1, 0), (2, 1)] {
        let outcome = BrokerOutcome::Appended {
            base_offset: offset,
        };
        assert_eq!(
            r.apply("t", 0, &header(pid), outcome),
            BatchResult::Accepted
        );
    }
    let mut handed: Vec<i64> = Vec::new();
    let n = r.clear_at_barrier("t", 0, 10, Some(2), |cleared| {
        assert!(slot.try_lock().is_err(), "the partition is held");
        handed = cleared.iter().map(|c| c.producer_id).collect();
    });
    assert_eq!(
        (n, handed),
        (1, vec![1]),
        "the barrier's own id is not handed over"
    );
    assert_eq!(r.counters.expired_by_barrier.get(), 1);
    let view = r.producers("t", 0).expect("known");
    assert!(view.producers.is_empty());
    assert_eq!(view.slot.applied_through, 10);
}

#[test]
fn the_producers_view_is_a_copy_of_the_entries_and_the_phase_of_a_known_partition_only() {
    let r = registry_tracking("t");
    assert!(r.producers("t", 0).is_none(), "not known yet");
    let slot = r.slot("t", 0).expect("tracked");
    rebuilt_at(&slot, Instant::now());
    let outcome = BrokerOutcome::Appended { base_offset: 4 };
    r.apply("t", 0, &header(7), outcome);
    let view = r.producers("t", 0).expect("known");
    assert_eq!(
        view.producers
            .iter()
            .map(|e| e.producer_id())
            .collect::<Vec<_>>(),
        vec![7]
    );
    assert_eq!(
        view.slot,
        SlotView {
            ready: true,
            wants_rebuild: false,
            stale: None,
            applied_through: 4,
        }
    );
    assert_eq!(r.view("t", 0), Some(view.slot));
}
