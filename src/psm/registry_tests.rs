//! Unit tests of `registry.rs`.

//! How broker outcomes meet the producer state ([`apply_locked`]): outcomes of one
//! partition come from many connections, and a connection's answers are read independently
//! of the others', so they reach the PSM in any order across connections.

use super::*;

fn single(pid: i64, seq: i32) -> BatchHeader {
    BatchHeader {
        base_offset: 0,
        batch_length: 49,
        partition_leader_epoch: -1,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: 0,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_000_000,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: seq,
        record_count: 1,
    }
}

fn ready_slot() -> PartitionSlot {
    let mut s = PartitionSlot::new();
    s.ready = true;
    s.needs_rebuild = false;
    s
}

fn appended(s: &mut PartitionSlot, pid: i64, seq: i32, offset: i64) -> BatchResult {
    apply_locked(
        s,
        &single(pid, seq),
        BrokerOutcome::Appended {
            base_offset: offset,
        },
    )
}

/// (last sequence, last offset) the PSM holds for `pid`.
fn last(s: &PartitionSlot, pid: i64) -> Option<(i32, i64)> {
    s.psm.get(pid).map(|e| (e.last_seq(), e.last_data_offset()))
}

#[test]
fn an_answer_read_after_a_later_offsets_answer_of_another_connection_is_still_applied() {
    let mut s = ready_slot();
    assert_eq!(appended(&mut s, 1, 0, 0), BatchResult::Accepted);
    // The broker appends producer 1's seq 1 at 1, then producer 2's seq 0 at 2; the gateway
    // reads producer 2's answer first.
    assert_eq!(appended(&mut s, 2, 0, 2), BatchResult::Accepted);
    assert_eq!(appended(&mut s, 1, 1, 1), BatchResult::Accepted);
    assert_eq!(last(&s, 1), Some((1, 1)));
    assert!(!s.needs_rebuild);
}

#[test]
fn a_pipelined_producers_next_batch_after_an_answer_read_out_of_log_order_is_in_sequence() {
    // F16: producer 1's third batch (seq 2) was classified out of order because its second
    // batch's answer, read after producer 2's later one, had been dropped.
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    appended(&mut s, 2, 0, 2);
    appended(&mut s, 1, 1, 1);
    assert_eq!(appended(&mut s, 1, 2, 3), BatchResult::Accepted);
    assert_eq!(last(&s, 1), Some((2, 3)));
    assert!(!s.needs_rebuild, "no divergence, no rebuild");
}

#[test]
fn applied_through_is_the_highest_offset_applied_whatever_order_answers_are_read_in() {
    let mut s = ready_slot();
    appended(&mut s, 2, 0, 5);
    appended(&mut s, 1, 0, 4);
    assert_eq!(s.applied_through, 5);
}

#[test]
fn an_answer_for_a_batch_the_rebuild_already_read_is_not_applied_twice() {
    // The rebuild read producer 1's seq 0 and seq 1 (offsets 4 and 5); the answer for
    // seq 0 is read afterwards.
    let mut s = ready_slot();
    let _ = s.psm.replay(&single(1, 0), 4);
    let _ = s.psm.replay(&single(1, 1), 5);
    s.log_read_through = 5;
    s.applied_through = 5;
    assert_eq!(appended(&mut s, 1, 0, 4), BatchResult::Accepted);
    assert_eq!(s.psm.get(1).map(|e| e.batch_count()), Some(2));
    assert_eq!(last(&s, 1), Some((1, 5)));
    assert!(!s.needs_rebuild);
    // The next batch continues the sequence.
    assert_eq!(appended(&mut s, 1, 2, 6), BatchResult::Accepted);
    assert_eq!(last(&s, 1), Some((2, 6)));
}

#[test]
fn an_answer_at_or_below_the_partitions_barrier_does_not_touch_the_state() {
    let mut s = ready_slot();
    s.barrier_offset = Some(10);
    assert_eq!(appended(&mut s, 1, 0, 3), BatchResult::Accepted);
    assert!(s.psm.is_empty());
    assert_eq!(appended(&mut s, 1, 0, 11), BatchResult::Accepted);
    assert_eq!(last(&s, 1), Some((0, 11)));
}

#[test]
fn an_answer_above_what_the_rebuild_read_is_applied() {
    let mut s = ready_slot();
    let _ = s.psm.replay(&single(1, 0), 4);
    s.log_read_through = 4;
    s.applied_through = 4;
    // Producer 2's answer (offset 6) is read before producer 1's (offset 5).
    assert_eq!(appended(&mut s, 2, 0, 6), BatchResult::Accepted);
    assert_eq!(appended(&mut s, 1, 1, 5), BatchResult::Accepted);
    assert_eq!(last(&s, 1), Some((1, 5)));
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
    {
        let mut s = lock(&slot);
        s.needs_rebuild = true;
        s.last_rebuilt = Some(std::time::Instant::now());
    }
    assert!(r.wanting_rebuild().is_empty());
    lock(&slot).last_rebuilt = std::time::Instant::now().checked_sub(MIN_REBUILD_INTERVAL);
    assert_eq!(r.wanting_rebuild(), vec![("t".to_string(), 0)]);
}

#[test]
fn an_answer_that_leaves_the_outcome_unknown_asks_for_a_rebuild() {
    // REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND: the batch may be in the log.
    for code in [REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND] {
        let mut s = ready_slot();
        appended(&mut s, 1, 0, 0);
        let r = apply_locked(
            &mut s,
            &single(1, 1),
            BrokerOutcome::Refused { error_code: code },
        );
        assert_eq!(r, BatchResult::UnknownOutcome, "code {code}");
        assert!(s.needs_rebuild, "code {code}");
        assert_eq!(last(&s, 1), Some((0, 0)), "nothing guessed for code {code}");
    }
    let mut s = ready_slot();
    let r = apply_locked(
        &mut s,
        &single(1, 0),
        BrokerOutcome::Unknown { error_code: -1 },
    );
    assert_eq!(r, BatchResult::UnknownOutcome);
    assert!(s.needs_rebuild);
}

#[test]
fn an_append_the_psm_judged_out_of_order_is_followed_and_asks_for_a_rebuild() {
    // The broker appended sequence 2 after 0: sequence 1 reached it some other way.
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    assert_eq!(appended(&mut s, 1, 2, 2), BatchResult::Diverged);
    assert_eq!(last(&s, 1), Some((2, 2)), "the PSM follows the broker");
    assert!(s.needs_rebuild);
}

#[test]
fn a_refusal_the_psm_did_not_predict_asks_for_a_rebuild_other_errors_do_not() {
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    // OUT_OF_ORDER_SEQUENCE_NUMBER for the next sequence: the broker knows more.
    let r = apply_locked(
        &mut s,
        &single(1, 1),
        BrokerOutcome::Refused { error_code: 45 },
    );
    assert_eq!(r, BatchResult::Diverged);
    assert!(s.needs_rebuild);
    // NOT_LEADER_OR_FOLLOWER: nothing appended, nothing to learn.
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    let r = apply_locked(
        &mut s,
        &single(1, 1),
        BrokerOutcome::Refused { error_code: 6 },
    );
    assert_eq!(r, BatchResult::OtherError);
    assert!(!s.needs_rebuild);
}

#[test]
fn answers_during_a_rebuild_are_buffered_with_their_offsets() {
    let mut s = PartitionSlot::new();
    assert_eq!(appended(&mut s, 1, 0, 7), BatchResult::Buffered);
    assert_eq!(appended(&mut s, 2, 0, 5), BatchResult::Buffered);
    let refused = apply_locked(
        &mut s,
        &single(3, 0),
        BrokerOutcome::Refused { error_code: 6 },
    );
    assert_eq!(refused, BatchResult::Buffered);
    let offsets: Vec<(i64, i64)> = s
        .buffered
        .iter()
        .map(|(o, h)| (*o, h.producer_id))
        .collect();
    assert_eq!(offsets, vec![(7, 1), (5, 2)], "appends only, as answered");
    assert!(
        s.psm.is_empty(),
        "nothing applied before the rebuild is installed"
    );
}

#[test]
fn an_unknown_outcome_during_a_rebuild_asks_for_another_one() {
    let mut s = PartitionSlot::new();
    s.needs_rebuild = false; // the rebuild in progress took the request
    let r = apply_locked(
        &mut s,
        &single(1, 0),
        BrokerOutcome::Refused {
            error_code: REQUEST_TIMED_OUT,
        },
    );
    assert_eq!(r, BatchResult::Buffered);
    assert!(s.needs_rebuild);
}

#[test]
fn a_full_rebuild_buffer_is_dropped_and_the_partition_rebuilt_again() {
    let mut s = PartitionSlot::new();
    s.needs_rebuild = false;
    for i in 0..MAX_BUFFERED_WHILE_REBUILDING {
        appended(&mut s, 1, i as i32, i as i64);
    }
    assert_eq!(s.buffered.len(), MAX_BUFFERED_WHILE_REBUILDING);
    assert!(!s.needs_rebuild);
    appended(&mut s, 1, 10_000, 10_000);
    assert!(s.buffered.is_empty());
    assert!(s.needs_rebuild);
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
        crate::net::Connector::plain(),
        crate::metrics::Metrics::new(),
    )
}

#[test]
fn an_acks_0_produce_marks_its_tracked_partition_for_a_rebuild_and_notes_no_batch() {
    let r = registry_tracking("t");
    let slot = r.slot("t", 0).expect("tracked");
    lock(&slot).needs_rebuild = false;
    let pending = super::super::tap::on_request(&r, &cluster(), 9, &produce_body("t", 0), true);
    assert!(pending.is_none(), "no answer will come: {pending:?}");
    assert!(lock(&slot).needs_rebuild);
}

#[test]
fn a_produce_with_acks_notes_its_tracked_batch_and_asks_for_no_rebuild() {
    let r = registry_tracking("t");
    let slot = r.slot("t", 0).expect("tracked");
    lock(&slot).needs_rebuild = false;
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
    assert!(!lock(&slot).needs_rebuild);
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
    assert!(lock(&slot).needs_rebuild);
    assert_eq!(r.wanting_rebuild(), vec![("t".to_string(), 1)]);
}
