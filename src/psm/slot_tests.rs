//! Unit tests of `slot.rs`: one test per row of the transition table (named `row_NN_…`), then
//! how broker outcomes meet the producer state ([`PartitionSlot::apply`]): outcomes of one
//! partition come from many connections, and a connection's answers are read independently
//! of the others', so they reach the PSM in any order across connections.

use std::time::Instant;

use super::*;
use crate::psm::Marker;

/// A single-record batch header of producer `pid`, epoch 0, at sequence `seq`.
pub(in crate::psm) fn single(pid: i64, seq: i32) -> BatchHeader {
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
    s.phase = Phase::Ready;
    s
}

fn appended(s: &mut PartitionSlot, pid: i64, seq: i32, offset: i64) -> BatchResult {
    s.apply(
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

fn phase(s: &PartitionSlot) -> &'static str {
    s.phase.name()
}

/// The buffered items: (offset, batch header), or (offset, None) for a marker.
fn buffered_items(s: &PartitionSlot) -> Vec<(i64, Option<BatchHeader>)> {
    match &s.phase {
        Phase::Unbuilt { buffered } | Phase::Rebuilding { buffered, .. } => buffered
            .iter()
            .map(|(o, a)| match a {
                Appended::Batch(h) => (*o, Some(*h)),
                Appended::Marker(_) => (*o, None),
            })
            .collect(),
        Phase::Ready | Phase::Stale { .. } => Vec::new(),
    }
}

/// The buffered batches (markers left out).
fn buffered(s: &PartitionSlot) -> Vec<(i64, BatchHeader)> {
    buffered_items(s)
        .into_iter()
        .filter_map(|(o, h)| Some((o, h?)))
        .collect()
}

/// The rebuild under way missed an outcome (it will install as STALE).
fn missed(s: &PartitionSlot) -> bool {
    matches!(
        s.phase,
        Phase::Rebuilding {
            missed: Some(_),
            ..
        }
    )
}

fn rebuilt(psm: PartitionPsm, read_through: i64) -> Rebuilt {
    Rebuilt {
        psm,
        from_offset: 0,
        read_through,
        from_snapshot: false,
        barrier: None,
    }
}

fn stale_slot(why: StaleReason) -> PartitionSlot {
    let mut s = ready_slot();
    s.phase = Phase::Stale { why };
    s
}

fn rebuilding_slot() -> PartitionSlot {
    let mut s = PartitionSlot::new();
    s.begin_rebuild();
    s
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
    assert!(!s.view().wants_rebuild);
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
    assert!(!s.view().wants_rebuild, "no divergence, no rebuild");
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
    assert!(!s.view().wants_rebuild);
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

#[test]
fn an_answer_that_leaves_the_outcome_unknown_asks_for_a_rebuild() {
    // REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND: the batch may be in the log.
    for code in [REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND] {
        let mut s = ready_slot();
        appended(&mut s, 1, 0, 0);
        let r = s.apply(&single(1, 1), BrokerOutcome::Refused { error_code: code });
        assert_eq!(r, BatchResult::UnknownOutcome, "code {code}");
        assert!(s.view().wants_rebuild, "code {code}");
        assert_eq!(last(&s, 1), Some((0, 0)), "nothing guessed for code {code}");
    }
    let mut s = ready_slot();
    let r = s.apply(&single(1, 0), BrokerOutcome::Unknown { error_code: -1 });
    assert_eq!(r, BatchResult::UnknownOutcome);
    assert!(s.view().wants_rebuild);
}

#[test]
fn an_append_the_psm_judged_out_of_order_is_followed_and_asks_for_a_rebuild() {
    // The broker appended sequence 2 after 0: sequence 1 reached it some other way.
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    assert_eq!(appended(&mut s, 1, 2, 2), BatchResult::Diverged);
    assert_eq!(last(&s, 1), Some((2, 2)), "the PSM follows the broker");
    assert!(s.view().wants_rebuild);
}

#[test]
fn a_refusal_the_psm_did_not_predict_asks_for_a_rebuild_other_errors_do_not() {
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    // OUT_OF_ORDER_SEQUENCE_NUMBER for the next sequence: the broker knows more.
    let r = s.apply(&single(1, 1), BrokerOutcome::Refused { error_code: 45 });
    assert_eq!(r, BatchResult::Diverged);
    assert!(s.view().wants_rebuild);
    // NOT_LEADER_OR_FOLLOWER: nothing appended, nothing to learn.
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    let r = s.apply(&single(1, 1), BrokerOutcome::Refused { error_code: 6 });
    assert_eq!(r, BatchResult::OtherError);
    assert!(!s.view().wants_rebuild);
}

#[test]
fn answers_during_a_rebuild_are_buffered_with_their_offsets() {
    let mut s = PartitionSlot::new();
    assert_eq!(appended(&mut s, 1, 0, 7), BatchResult::Buffered);
    assert_eq!(appended(&mut s, 2, 0, 5), BatchResult::Buffered);
    let refused = s.apply(&single(3, 0), BrokerOutcome::Refused { error_code: 6 });
    assert_eq!(refused, BatchResult::Buffered);
    let offsets: Vec<(i64, i64)> = buffered(&s)
        .iter()
        .map(|(o, h)| (*o, h.producer_id))
        .collect();
    assert_eq!(offsets, vec![(7, 1), (5, 2)], "appends only, as answered");
    assert!(
        s.psm.is_empty(),
        "nothing applied before the rebuild is installed"
    );
}

// One test per row of the transition table in the module doc.

#[test]
fn row_01_unbuilt_begin_rebuild_is_rebuilding_with_the_buffer_dropped() {
    let mut s = PartitionSlot::new();
    s.set_barrier(3);
    appended(&mut s, 1, 0, 7);
    assert_eq!(
        s.begin_rebuild(),
        Some(3),
        "the rebuild clears at the barrier"
    );
    assert_eq!(phase(&s), "REBUILDING");
    assert!(buffered(&s).is_empty());
}

#[test]
fn row_02_rebuilding_begin_rebuild_again_drops_the_buffer() {
    // A rebuild failed; the retry reads the log again.
    let mut s = rebuilding_slot();
    appended(&mut s, 1, 0, 7);
    assert_eq!(buffered(&s).len(), 1);
    s.begin_rebuild();
    assert_eq!(phase(&s), "REBUILDING");
    assert!(buffered(&s).is_empty());
}

#[test]
fn row_03_ready_begin_rebuild_is_rebuilding() {
    let mut s = ready_slot();
    s.begin_rebuild();
    assert_eq!(phase(&s), "REBUILDING");
    assert!(!s.is_ready());
}

#[test]
fn row_04_stale_begin_rebuild_is_rebuilding() {
    let mut s = stale_slot(StaleReason::Diverged);
    s.begin_rebuild();
    assert_eq!(phase(&s), "REBUILDING");
    assert_eq!(s.view().stale, None);
}

#[test]
fn row_05_rebuilding_finish_rebuild_installs_the_state_then_the_buffered_appends_and_is_ready() {
    let mut s = rebuilding_slot();
    // Answered while rebuilding: producer 2 at 9 (above what the log held), producer 1 at 4
    // (the rebuild read it).
    appended(&mut s, 2, 0, 9);
    appended(&mut s, 1, 0, 4);
    let mut psm = PartitionPsm::new();
    let _ = psm.replay(&single(1, 0), 4);
    let now = Instant::now();
    assert_eq!(s.finish_rebuild(rebuilt(psm, 5), now), Ok(0));
    assert_eq!(phase(&s), "READY");
    assert_eq!(last(&s, 1), Some((0, 4)));
    assert_eq!(last(&s, 2), Some((0, 9)));
    assert_eq!(
        s.psm.get(1).map(|e| e.batch_count()),
        Some(1),
        "not applied twice"
    );
    assert_eq!((s.applied_through, s.log_read_through), (9, 5));
    assert!(s.dirty);
    assert!(!s.wants_rebuild_at(now + MIN_REBUILD_INTERVAL));
}

#[test]
fn row_06_finish_rebuild_without_a_rebuild_begun_is_an_error_and_changes_nothing() {
    for (mut s, name) in [
        (PartitionSlot::new(), "UNBUILT"),
        (ready_slot(), "READY"),
        (stale_slot(StaleReason::OutcomeUnknown), "STALE"),
    ] {
        let mut psm = PartitionPsm::new();
        let _ = psm.replay(&single(1, 0), 0);
        let r = s.finish_rebuild(rebuilt(psm, 0), Instant::now());
        assert_eq!(r, Err(SlotError::NotRebuilding { phase: name }));
        assert_eq!(phase(&s), name);
        assert!(s.psm.is_empty(), "{name}: nothing installed");
        assert_eq!(s.last_rebuilt, None, "{name}");
    }
}

#[test]
fn row_07_not_rebuilt_appended_outcome_is_buffered() {
    for mut s in [PartitionSlot::new(), rebuilding_slot()] {
        assert_eq!(appended(&mut s, 1, 0, 7), BatchResult::Buffered);
        assert_eq!(buffered(&s).len(), 1);
        assert!(s.psm.is_empty(), "{}", phase(&s));
    }
}

#[test]
fn row_08_not_rebuilt_appended_outcome_with_a_full_buffer_drops_the_buffer() {
    let mut s = rebuilding_slot();
    for i in 0..MAX_BUFFERED_WHILE_REBUILDING {
        appended(&mut s, 1, i as i32, i as i64);
    }
    assert_eq!(buffered(&s).len(), MAX_BUFFERED_WHILE_REBUILDING);
    assert_eq!(appended(&mut s, 1, 10_000, 10_000), BatchResult::Buffered);
    assert!(buffered(&s).is_empty());
    assert_eq!(phase(&s), "REBUILDING");
}

#[test]
fn row_09_not_rebuilt_refused_outcome_changes_nothing() {
    for mut s in [PartitionSlot::new(), rebuilding_slot()] {
        let name = phase(&s);
        let refused = BrokerOutcome::Refused { error_code: 6 };
        assert_eq!(s.apply(&single(1, 0), refused), BatchResult::Buffered);
        assert_eq!(phase(&s), name);
        assert!(buffered(&s).is_empty(), "{name}");
        assert!(!missed(&s), "{name}");
    }
}

#[test]
fn row_17_unbuilt_unknown_outcome_asks_for_nothing_more_the_rebuild_to_come_reads_the_log() {
    let mut s = PartitionSlot::new();
    let timed_out = BrokerOutcome::Refused {
        error_code: REQUEST_TIMED_OUT,
    };
    assert_eq!(s.apply(&single(1, 0), timed_out), BatchResult::Buffered);
    s.mark_outcome_unknown();
    s.begin_rebuild();
    assert!(!missed(&s));
    assert_eq!(
        s.finish_rebuild(rebuilt(PartitionPsm::new(), 3), Instant::now()),
        Ok(0)
    );
    assert_eq!(phase(&s), "READY");
}

/// An outcome the rebuild under way may have read past: the installed state may miss it.
#[test]
fn row_18_rebuilding_unknown_outcome_installs_the_rebuild_as_stale_outcome_unknown() {
    let timed_out = BrokerOutcome::Refused {
        error_code: REQUEST_TIMED_OUT,
    };
    let unknown = BrokerOutcome::Unknown { error_code: -1 };
    for event in ["timed out", "unknown", "acks=0"] {
        let mut s = rebuilding_slot();
        match event {
            "timed out" => assert_eq!(s.apply(&single(1, 0), timed_out), BatchResult::Buffered),
            "unknown" => assert_eq!(s.apply(&single(1, 0), unknown), BatchResult::Buffered),
            _ => s.mark_outcome_unknown(),
        }
        assert_eq!(phase(&s), "REBUILDING", "{event}");
        let now = Instant::now();
        assert_eq!(
            s.finish_rebuild(rebuilt(PartitionPsm::new(), 3), now),
            Ok(0)
        );
        assert_eq!(phase(&s), "STALE", "{event}");
        assert_eq!(s.view().stale, Some(StaleReason::OutcomeUnknown), "{event}");
        assert!(s.wants_rebuild_at(now + MIN_REBUILD_INTERVAL), "{event}");
    }
}

#[test]
fn row_19_rebuilding_full_buffer_installs_the_rebuild_as_stale_outcome_unknown() {
    let mut s = rebuilding_slot();
    for i in 0..=MAX_BUFFERED_WHILE_REBUILDING {
        appended(&mut s, 1, i as i32, i as i64);
    }
    assert!(buffered(&s).is_empty());
    assert_eq!(
        s.finish_rebuild(rebuilt(PartitionPsm::new(), -1), Instant::now()),
        Ok(0)
    );
    assert_eq!(s.view().stale, Some(StaleReason::OutcomeUnknown));
}

#[test]
fn row_20_a_new_rebuild_forgets_what_the_failed_one_missed() {
    let mut s = rebuilding_slot();
    s.mark_outcome_unknown();
    s.begin_rebuild();
    assert!(!missed(&s));
    assert_eq!(
        s.finish_rebuild(rebuilt(PartitionPsm::new(), 3), Instant::now()),
        Ok(0)
    );
    assert_eq!(phase(&s), "READY");
}

/// A transactional single-record batch of producer `pid` at `epoch`, sequence `seq`.
fn txn_batch(pid: i64, epoch: i16, seq: i32) -> BatchHeader {
    BatchHeader {
        attributes: 0x10,
        producer_epoch: epoch,
        ..single(pid, seq)
    }
}

fn marker(pid: i64, epoch: i16, m: Marker) -> AppendedMarker {
    AppendedMarker {
        producer_id: pid,
        epoch,
        marker: m,
        coordinator_epoch: 0,
        timestamp: 1_700_000_000_500,
    }
}

fn open_txn_first_offset(s: &PartitionSlot, pid: i64) -> Option<i64> {
    s.psm.get(pid).and_then(|e| e.current_txn_first_offset())
}

#[test]
fn row_21_not_rebuilt_marker_is_buffered_and_installed_in_offset_order() {
    let mut s = rebuilding_slot();
    let data = s.apply(
        &txn_batch(1, 0, 0),
        BrokerOutcome::Appended { base_offset: 4 },
    );
    assert_eq!(data, BatchResult::Buffered);
    assert_eq!(
        s.apply_marker(5, marker(1, 1, Marker::Commit)),
        BatchResult::Buffered
    );
    assert_eq!(
        buffered_items(&s)
            .iter()
            .map(|(o, _)| *o)
            .collect::<Vec<_>>(),
        vec![4, 5]
    );
    s.finish_rebuild(rebuilt(PartitionPsm::new(), 3), Instant::now())
        .unwrap();
    assert_eq!(phase(&s), "READY");
    assert_eq!(open_txn_first_offset(&s, 1), None, "the marker closed it");
    assert_eq!(s.view().applied_through, 5);
}

#[test]
fn row_22_ready_or_stale_marker_already_reflected_is_not_applied() {
    for mut s in [ready_slot(), stale_slot(StaleReason::Diverged)] {
        let name = phase(&s);
        s.apply(
            &txn_batch(1, 0, 0),
            BrokerOutcome::Appended { base_offset: 0 },
        );
        s.log_read_through = 5;
        assert_eq!(
            s.apply_marker(5, marker(1, 1, Marker::Abort)),
            BatchResult::Accepted
        );
        assert_eq!(open_txn_first_offset(&s, 1), Some(0), "{name}");
        assert_eq!(phase(&s), name);
    }
}

#[test]
fn row_23_ready_marker_closes_the_open_transaction() {
    let mut s = ready_slot();
    s.apply(
        &txn_batch(1, 0, 0),
        BrokerOutcome::Appended { base_offset: 0 },
    );
    assert_eq!(open_txn_first_offset(&s, 1), Some(0));
    assert_eq!(
        s.apply_marker(1, marker(1, 1, Marker::Commit)),
        BatchResult::Accepted
    );
    assert_eq!(open_txn_first_offset(&s, 1), None);
    assert_eq!(s.psm.get(1).map(|e| e.epoch()), Some(1), "the TV2 bump");
    assert_eq!(phase(&s), "READY");
    // The next transaction (bumped epoch, sequence 0) is in sequence: no divergence.
    let next = s.apply(
        &txn_batch(1, 1, 0),
        BrokerOutcome::Appended { base_offset: 2 },
    );
    assert_eq!(next, BatchResult::Accepted);
    assert!(!s.view().wants_rebuild);
}

#[test]
fn row_24_ready_marker_the_state_refuses_is_stale_diverged_and_the_state_follows() {
    let mut s = ready_slot();
    s.apply(
        &txn_batch(1, 3, 0),
        BrokerOutcome::Appended { base_offset: 0 },
    );
    assert_eq!(
        s.apply_marker(1, marker(1, 2, Marker::Abort)),
        BatchResult::Diverged
    );
    assert_eq!(s.view().stale, Some(StaleReason::Diverged));
    assert_eq!(open_txn_first_offset(&s, 1), None, "the broker appended it");
}

#[test]
fn row_10_ready_predicted_outcome_stays_ready_and_the_state_follows() {
    let mut s = ready_slot();
    assert_eq!(appended(&mut s, 1, 0, 0), BatchResult::Accepted);
    assert_eq!(appended(&mut s, 1, 0, 0), BatchResult::Duplicate);
    let r = s.apply(&single(1, 5), BrokerOutcome::Refused { error_code: 45 });
    assert_eq!(r, BatchResult::OutOfOrder);
    assert_eq!(phase(&s), "READY");
    assert_eq!(last(&s, 1), Some((0, 0)));
}

#[test]
fn row_11_ready_or_stale_appended_outcome_already_reflected_is_not_applied() {
    for mut s in [ready_slot(), stale_slot(StaleReason::Diverged)] {
        let name = phase(&s);
        s.log_read_through = 5;
        assert_eq!(appended(&mut s, 1, 3, 5), BatchResult::Accepted);
        assert!(s.psm.is_empty(), "{name}");
        assert_eq!(phase(&s), name);
    }
}

#[test]
fn row_12_ready_outcome_not_predicted_is_stale_diverged_and_the_state_follows() {
    let mut s = ready_slot();
    appended(&mut s, 1, 0, 0);
    assert_eq!(appended(&mut s, 1, 2, 2), BatchResult::Diverged);
    assert_eq!(s.view().stale, Some(StaleReason::Diverged));
    assert_eq!(last(&s, 1), Some((2, 2)));
}

#[test]
fn row_13_ready_unknown_outcome_is_stale_outcome_unknown() {
    for code in [-1, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND] {
        let mut s = ready_slot();
        let outcome = if code < 0 {
            BrokerOutcome::Unknown { error_code: code }
        } else {
            BrokerOutcome::Refused { error_code: code }
        };
        assert_eq!(s.apply(&single(1, 0), outcome), BatchResult::UnknownOutcome);
        assert_eq!(s.view().stale, Some(StaleReason::OutcomeUnknown), "{code}");
    }
}

#[test]
fn row_14_ready_mark_outcome_unknown_is_stale_outcome_unknown() {
    let mut s = ready_slot();
    s.mark_outcome_unknown();
    assert_eq!(s.view().stale, Some(StaleReason::OutcomeUnknown));
    assert!(s.is_ready(), "classifications stay meaningful");
}

#[test]
fn row_15_stale_outcomes_are_classified_and_the_first_reason_is_kept() {
    let mut s = stale_slot(StaleReason::Diverged);
    assert_eq!(appended(&mut s, 1, 0, 0), BatchResult::Accepted);
    assert_eq!(last(&s, 1), Some((0, 0)), "the state follows the broker");
    let r = s.apply(&single(1, 1), BrokerOutcome::Unknown { error_code: -1 });
    assert_eq!(r, BatchResult::UnknownOutcome);
    s.mark_outcome_unknown();
    assert_eq!(s.view().stale, Some(StaleReason::Diverged));
}

#[test]
fn row_16_clear_at_barrier_keeps_the_phase_and_clears_every_producer_at_the_barrier() {
    for mut s in [
        PartitionSlot::new(),
        rebuilding_slot(),
        ready_slot(),
        stale_slot(StaleReason::Diverged),
    ] {
        let name = phase(&s);
        let _ = s.psm.replay(&single(1, 0), 4);
        let _ = s.psm.replay(&single(7, 0), 5);
        s.applied_through = 5;
        s.dirty = false;
        let cleared = s.clear_at_barrier(20, Some(7));
        assert_eq!(
            cleared.iter().map(|c| c.producer_id).collect::<Vec<_>>(),
            vec![1],
            "{name}: the barrier's own producer id is not handed over"
        );
        assert!(s.psm.is_empty(), "{name}");
        assert_eq!(
            (s.barrier_offset, s.applied_through, s.dirty),
            (Some(20), 20, true)
        );
        assert_eq!(phase(&s), name);
    }
}

#[test]
fn a_rebuilt_partition_wants_its_next_rebuild_only_after_the_interval() {
    let mut s = rebuilding_slot();
    let t = Instant::now();
    assert_eq!(s.finish_rebuild(rebuilt(PartitionPsm::new(), -1), t), Ok(0));
    s.mark_outcome_unknown();
    assert!(!s.wants_rebuild_at(t));
    assert!(s.wants_rebuild_at(t + MIN_REBUILD_INTERVAL));
    assert!(
        PartitionSlot::new().wants_rebuild_at(t),
        "never rebuilt: at once"
    );
}

#[test]
fn a_snapshot_is_taken_only_from_a_rebuilt_changed_partition_and_again_when_not_written() {
    let mut s = PartitionSlot::new();
    s.dirty = true;
    assert_eq!(s.take_snapshot(), None, "not rebuilt");
    let mut s = ready_slot();
    assert_eq!(s.take_snapshot(), None, "unchanged");
    appended(&mut s, 1, 0, 0);
    assert!(s.take_snapshot().is_some());
    assert_eq!(s.take_snapshot(), None, "taken");
    s.snapshot_not_written();
    assert!(s.take_snapshot().is_some());
}

/// Defect P1: this instance took the agent over; the log holds what the previous owner wrote.
#[test]
fn row_25_ready_written_elsewhere_goes_stale_and_wants_a_rebuild() {
    let mut s = ready_slot();
    s.mark_written_elsewhere();
    assert_eq!(phase(&s), "STALE");
    assert_eq!(s.view().stale, Some(StaleReason::WrittenElsewhere));
    assert!(s.view().wants_rebuild);
}

#[test]
fn row_26_written_elsewhere_keeps_a_stale_reason_leaves_unbuilt_and_marks_a_rebuild_missed() {
    let mut s = stale_slot(StaleReason::Diverged);
    s.mark_written_elsewhere();
    assert_eq!(
        s.view().stale,
        Some(StaleReason::Diverged),
        "first why kept"
    );
    let mut s = PartitionSlot::new();
    s.mark_written_elsewhere();
    assert_eq!(phase(&s), "UNBUILT");
    let mut s = rebuilding_slot();
    s.mark_written_elsewhere();
    assert!(missed(&s));
    let now = Instant::now();
    assert_eq!(
        s.finish_rebuild(rebuilt(PartitionPsm::new(), 3), now),
        Ok(0)
    );
    assert_eq!(s.view().stale, Some(StaleReason::WrittenElsewhere));
    assert!(s.wants_rebuild_at(now + MIN_REBUILD_INTERVAL));
}
