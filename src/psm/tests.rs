//! Scenario tests: one per applicable row of the scenario table in docs/psm.md (row id in the
//! name and comment), plus snapshot and memory tests.
//!
//! Rows not applicable to the PSM (no empty tests for them):
//! - 3a: [4.5] KAFKA-15591, not in the pinned 4.1.1 (row 3 is the 4.1.1 behaviour).
//! - 19, 20: request-level checks (V1 null transactional_id; V4 two transactional PIDs in one
//!   request) done by the broker before any partition; they need the whole request and a
//!   transactional_id, not producer state.
//! - 21, 22, 23, 24, 24a, 25, 26: answers of the transaction coordinator during verification
//!   (T4); they need a real broker. The PSM-visible part (no verification → 48, T5) is
//!   `t5_transactional_batch_without_verification_is_invalid_txn_state`.
//! - 41, 42: per-record checks (timestamps, null keys on compacted topics) need record contents
//!   and topic config.
//! - 44–48: InitProducerId, handled by the coordinator.

use super::*;
use crate::protocol::batch::{single_client_batch, BatchHeader, BatchWalker, ClientBatchError};

const TS: i64 = 1_700_000_000_000;

fn batch(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchHeader {
    BatchHeader {
        base_offset: 0,
        batch_length: 49,
        partition_leader_epoch: -1,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: TS,
        max_timestamp: TS + 10,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        record_count: count,
    }
}

fn txn(mut b: BatchHeader) -> BatchHeader {
    b.attributes |= 0x10;
    b
}

fn at(mut b: BatchHeader, ts: i64) -> BatchHeader {
    b.base_timestamp = ts;
    b.max_timestamp = ts;
    b
}

/// Appends batches in order at consecutive offsets starting at `offset`; panics on rejection.
fn feed(psm: &mut PartitionPsm, offset: &mut i64, batches: &[BatchHeader]) {
    for b in batches {
        let a = psm
            .append(b, *offset)
            .unwrap_or_else(|v| panic!("{b:?} rejected: {v:?}"));
        *offset = a.last_offset + 1;
    }
}

fn seq_batches(pid: i64, epoch: i16, from: i32, n: usize, count: i32) -> Vec<BatchHeader> {
    (0..n)
        .map(|i| batch(pid, epoch, from + i as i32 * count, count))
        .collect()
}

fn oos(expected: i32, got: i32) -> Verdict {
    Verdict::OutOfOrderSequence { expected, got }
}

fn fenced(current: i16, got: i16) -> Verdict {
    Verdict::InvalidProducerEpoch { current, got }
}

// Row 1.
#[test]
fn row01_non_idempotent_batch_is_appended_and_untracked() {
    let mut psm = PartitionPsm::new();
    let b = batch(-1, -1, -1, 3);
    assert_eq!(psm.classify(&b), Verdict::NotIdempotent);
    assert_eq!(psm.classify(&b).error_code(), 0);
    let a = psm.append(&b, 10).unwrap();
    assert!(a.untracked);
    assert!(psm.is_empty());
}

// Row 2.
#[test]
fn row02_unknown_pid_seq0_creates_entry() {
    let mut psm = PartitionPsm::new();
    let b = batch(7, 0, 0, 3);
    assert_eq!(psm.classify(&b), Verdict::Accept { epoch_bump: false });
    let a = psm.append(&b, 100).unwrap();
    assert!(a.new_producer);
    assert_eq!((a.first_offset, a.last_offset), (100, 102));
    let e = psm.get(7).unwrap();
    assert_eq!(
        (e.epoch(), e.batch_count(), e.first_seq(), e.last_seq()),
        (0, 1, 0, 2)
    );
    assert_eq!(e.last_timestamp(), TS + 10);
    assert_eq!(e.last_data_offset(), 102);
}

// Row 3 (≤4.4 behaviour; row 3a is [4.5]).
#[test]
fn row03_unknown_pid_nonzero_seq_is_accepted() {
    let mut psm = PartitionPsm::new();
    assert_eq!(
        psm.append(&batch(7, 2, 17, 1), 0).map(|a| a.new_producer),
        Ok(true)
    );
    assert_eq!(psm.get(7).unwrap().last_seq(), 17);
}

// Row 4.
#[test]
fn row04_same_epoch_next_sequence_is_appended() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 0, 0, 2)]);
    assert_eq!(
        psm.classify(&batch(1, 0, 2, 5)),
        Verdict::Accept { epoch_bump: false }
    );
}

// Row 5.
#[test]
fn row05_sequence_wraps_after_i32_max() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 0, i32::MAX - 2, 3)]);
    assert_eq!(psm.get(1).unwrap().last_seq(), i32::MAX);
    assert_eq!(
        psm.classify(&batch(1, 0, 0, 1)),
        Verdict::Accept { epoch_bump: false }
    );
    // A batch that itself wraps: MAX-1, MAX, 0, 1.
    let mut psm = PartitionPsm::new();
    feed(
        &mut psm,
        &mut off,
        &[batch(2, 0, i32::MAX - 1, 4), batch(2, 0, 2, 1)],
    );
    assert_eq!(psm.get(2).unwrap().last_seq(), 2);
}

// Row 6.
#[test]
fn row06_sequence_gap_is_out_of_order() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 0, 0, 3)]);
    let v = psm.classify(&batch(1, 0, 4, 1));
    assert_eq!(v, oos(3, 4));
    assert_eq!(v.error_code(), 45);
    assert_eq!(psm.append(&batch(1, 0, 4, 1), off), Err(v));
}

// Row 7.
#[test]
fn row07_exact_retry_of_cached_batch_is_duplicate_with_cached_offsets() {
    let mut psm = PartitionPsm::new();
    let mut off = 50;
    let bs = seq_batches(1, 0, 0, 5, 2);
    let bs: Vec<_> = bs
        .into_iter()
        .enumerate()
        .map(|(i, b)| at(b, TS + i as i64))
        .collect();
    feed(&mut psm, &mut off, &bs);
    let before = psm.get(1).unwrap().clone();
    for (i, b) in bs.iter().enumerate() {
        let v = psm.classify(b);
        assert_eq!(
            v,
            Verdict::Duplicate {
                first_offset: 50 + 2 * i as i64,
                last_offset: 51 + 2 * i as i64,
                cached_index: i,
                timestamp: TS + i as i64
            }
        );
        assert_eq!(v.error_code(), 0);
        assert!(!v.appends());
        assert_eq!(psm.append(b, off), Err(v));
    }
    assert_eq!(psm.get(1).unwrap(), &before, "a duplicate changes nothing");
}

// Row 8.
#[test]
fn row08_same_first_seq_different_count_is_out_of_order() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 0, 0, 3), batch(1, 0, 3, 3)]);
    assert_eq!(psm.classify(&batch(1, 0, 3, 2)), oos(6, 3));
    assert_eq!(psm.classify(&batch(1, 0, 3, 4)), oos(6, 3));
}

// Row 9.
#[test]
fn row09_retry_of_sixth_most_recent_batch_is_out_of_order() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    let bs = seq_batches(1, 0, 0, 6, 1);
    feed(&mut psm, &mut off, &bs);
    assert_eq!(psm.get(1).unwrap().batch_count(), 5);
    assert_eq!(psm.classify(&bs[0]), oos(6, 0));
    assert!(matches!(
        psm.classify(&bs[1]),
        Verdict::Duplicate {
            cached_index: 0,
            ..
        }
    ));
}

// Row 10.
#[test]
fn row10_lower_epoch_is_fenced() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 3, 0, 1)]);
    let v = psm.classify(&batch(1, 2, 1, 1));
    assert_eq!(v, fenced(3, 2));
    assert_eq!(v.error_code(), 47);
}

// Row 11.
#[test]
fn row11_higher_epoch_seq0_is_appended_and_resets_the_cache() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &seq_batches(1, 0, 0, 3, 1));
    assert_eq!(
        psm.classify(&batch(1, 1, 0, 2)),
        Verdict::Accept { epoch_bump: true }
    );
    let a = psm.append(&batch(1, 1, 0, 2), off).unwrap();
    assert!(a.epoch_bump && !a.new_producer);
    let e = psm.get(1).unwrap();
    assert_eq!((e.epoch(), e.batch_count(), e.last_seq()), (1, 1, 1));
}

// Row 12.
#[test]
fn row12_higher_epoch_nonzero_seq_on_known_producer_is_out_of_order() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 0, 0, 1)]);
    assert_eq!(psm.classify(&batch(1, 1, 1, 1)), oos(0, 1));
}

// Row 13.
#[test]
fn row13_nonzero_base_offset_is_invalid_record() {
    let psm = PartitionPsm::new();
    let mut b = batch(1, 0, 0, 1);
    b.base_offset = 5;
    let v = psm.classify(&b);
    assert_eq!(
        v,
        Verdict::InvalidRecord(InvalidRecordReason::NonZeroBaseOffset)
    );
    assert_eq!(v.error_code(), 87);
}

// Row 14.
#[test]
fn row14_control_batch_from_client_is_invalid_record() {
    let psm = PartitionPsm::new();
    let mut b = batch(1, 0, -1, 1);
    b.attributes = 0x30;
    assert_eq!(
        psm.classify(&b),
        Verdict::InvalidRecord(InvalidRecordReason::ControlBatch)
    );
}

// Row 15.
#[test]
fn row15_producer_id_with_sequence_minus_one_is_invalid_record() {
    let psm = PartitionPsm::new();
    assert_eq!(
        psm.classify(&batch(1, 0, -1, 1)),
        Verdict::InvalidRecord(InvalidRecordReason::MissingSequence)
    );
}

// Row 16.
#[test]
fn row16_count_mismatch_or_empty_batch_is_invalid_record() {
    let psm = PartitionPsm::new();
    let mut b = batch(1, 0, 0, 3);
    b.record_count = 2;
    assert_eq!(
        psm.classify(&b),
        Verdict::InvalidRecord(InvalidRecordReason::BadRecordCount)
    );
    let mut empty = batch(1, 0, 0, 1);
    empty.record_count = 0;
    assert_eq!(
        psm.classify(&empty),
        Verdict::InvalidRecord(InvalidRecordReason::BadRecordCount)
    );
}

fn wire(h: &BatchHeader) -> Vec<u8> {
    let mut h = *h;
    h.batch_length = 49 + 3;
    let mut head = [0u8; 61];
    h.write_to(&mut head);
    let mut out = head.to_vec();
    out.extend_from_slice(b"abc");
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

// Row 17: the CRC is checked by the walker before the PSM (V7).
#[test]
fn row17_bad_crc_is_rejected_before_the_psm() {
    let mut bytes = wire(&batch(1, 0, 0, 1));
    bytes[62] ^= 1;
    assert!(matches!(
        single_client_batch(&bytes, true),
        Err(ClientBatchError::Batch(_))
    ));
}

// Row 18.
#[test]
fn row18_two_batches_in_one_partition_are_rejected() {
    let mut bytes = wire(&batch(1, 0, 0, 1));
    bytes.extend(wire(&batch(1, 0, 1, 1)));
    assert_eq!(BatchWalker::new(&bytes, true).count(), 2);
    assert_eq!(
        single_client_batch(&bytes, true),
        Err(ClientBatchError::MoreThanOneBatch)
    );
}

// Row 27.
#[test]
fn row27_transactional_batch_without_verification_opens_a_hanging_txn_that_never_expires() {
    let mut psm = PartitionPsm::new();
    let a = psm.append(&txn(batch(9, 0, 0, 1)), 40).unwrap();
    assert!(a.started_txn);
    assert_eq!(psm.get(9).unwrap().current_txn_first_offset(), Some(40));
    assert_eq!(psm.expire(i64::MAX, DEFAULT_PRODUCER_ID_EXPIRATION_MS), 0);
}

// T5 (the partition-visible part of rows 21–26).
#[test]
fn t5_transactional_batch_without_verification_is_invalid_txn_state() {
    let psm = PartitionPsm::new();
    let ctx = AppendContext {
        verification_enabled: true,
        verification: None,
    };
    let v = psm.classify_with(&txn(batch(9, 0, 0, 1)), &ctx);
    assert_eq!(
        v,
        Verdict::InvalidTxnState(TxnStateReason::NotPartOfOngoingTxn)
    );
    assert_eq!(v.error_code(), 48);
}

// Row 28.
#[test]
fn row28_non_transactional_batch_during_open_txn_is_invalid_txn_state() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[txn(batch(9, 0, 0, 1))]);
    assert_eq!(
        psm.classify(&batch(9, 0, 1, 1)),
        Verdict::InvalidTxnState(TxnStateReason::NonTransactionalInOpenTxn)
    );
}

// Row 29.
#[test]
fn row29_transactional_batch_of_ongoing_txn_needs_no_verification() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[txn(batch(9, 0, 0, 1))]);
    let ctx = AppendContext {
        verification_enabled: true,
        verification: None,
    };
    assert_eq!(
        psm.classify_with(&txn(batch(9, 0, 1, 1)), &ctx),
        Verdict::Accept { epoch_bump: false }
    );
    let a = psm.append_with(&txn(batch(9, 0, 1, 1)), off, &ctx).unwrap();
    assert!(!a.started_txn);
    assert_eq!(psm.get(9).unwrap().current_txn_first_offset(), Some(0));
}

// Row 30 [4.1+] (KAFKA-18042, in 4.1.1): 47 before the verification check's 48.
#[test]
fn row30_stale_epoch_transactional_batch_is_fenced_before_verification() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(9, 5, 0, 1)]);
    let ctx = AppendContext {
        verification_enabled: true,
        verification: None,
    };
    assert_eq!(
        psm.classify_with(&txn(batch(9, 4, 0, 1)), &ctx),
        fenced(5, 4)
    );
}

fn tv2() -> AppendContext {
    AppendContext {
        verification_enabled: true,
        verification: Some(VerificationState {
            lowest_sequence: 0,
            supports_epoch_bump: true,
        }),
    }
}

// Row 31 [4.1+] (KAFKA-18202, in 4.1.1).
#[test]
fn row31_tv2_first_transactional_batch_without_cached_batches_needs_seq0() {
    let psm = PartitionPsm::new();
    let mut ctx = tv2();
    ctx.verification = Some(VerificationState {
        lowest_sequence: 3,
        supports_epoch_bump: true,
    });
    assert_eq!(psm.classify_with(&txn(batch(9, 0, 3, 1)), &ctx), oos(0, 3));
    // Without TV2 verification the same batch is accepted (row 3 / S5).
    assert_eq!(
        psm.classify(&txn(batch(9, 0, 3, 1))),
        Verdict::Accept { epoch_bump: false }
    );
}

// S6: a batch above the verification low-water mark.
#[test]
fn s6_sequence_above_verification_lowest_is_out_of_order() {
    let psm = PartitionPsm::new();
    let ctx = AppendContext {
        verification_enabled: true,
        verification: Some(VerificationState {
            lowest_sequence: 2,
            supports_epoch_bump: false,
        }),
    };
    assert_eq!(psm.classify_with(&txn(batch(9, 0, 4, 1)), &ctx), oos(2, 4));
    assert_eq!(
        psm.classify_with(&txn(batch(9, 0, 2, 1)), &ctx),
        Verdict::Accept { epoch_bump: false }
    );
}

/// A TV2 transaction: data at epoch `e`, commit marker at `e + 1`.
fn tv2_committed(psm: &mut PartitionPsm) -> i64 {
    let mut off = 0;
    feed(
        psm,
        &mut off,
        &[txn(batch(9, 0, 0, 2)), txn(batch(9, 0, 2, 1))],
    );
    let done = psm
        .apply_control(9, 1, Marker::Commit, 0, off, TS + 20)
        .unwrap();
    assert_eq!(
        done,
        Some(CompletedTxn {
            producer_id: 9,
            first_offset: 0,
            last_offset: off,
            aborted: false
        })
    );
    off + 1
}

// Row 32.
#[test]
fn row32_tv2_data_at_old_epoch_after_commit_is_fenced() {
    let mut psm = PartitionPsm::new();
    tv2_committed(&mut psm);
    let e = psm.get(9).unwrap();
    assert_eq!(
        (e.epoch(), e.batch_count(), e.current_txn_first_offset()),
        (1, 0, None)
    );
    assert_eq!(
        psm.classify_with(&txn(batch(9, 0, 3, 1)), &tv2()),
        fenced(1, 0)
    );
}

// Row 33.
#[test]
fn row33_tv2_data_at_new_epoch_after_commit_needs_seq0() {
    let mut psm = PartitionPsm::new();
    tv2_committed(&mut psm);
    assert_eq!(
        psm.classify_with(&txn(batch(9, 1, 0, 1)), &tv2()),
        Verdict::Accept { epoch_bump: false }
    );
    let ctx = AppendContext {
        verification_enabled: true,
        verification: Some(VerificationState {
            lowest_sequence: 3,
            supports_epoch_bump: true,
        }),
    };
    assert_eq!(psm.classify_with(&txn(batch(9, 1, 3, 1)), &ctx), oos(0, 3));
    // Without verification context the same-epoch rule applies to the emptied entry (S4).
    assert_eq!(psm.classify(&txn(batch(9, 1, 3, 1))), oos(0, 3));
}

// Row 34.
#[test]
fn row34_tv1_commit_keeps_cache_and_sequence_continues() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[txn(batch(9, 0, 0, 2))]);
    psm.apply_control(9, 0, Marker::Commit, 0, off, TS + 20)
        .unwrap();
    off += 1;
    let e = psm.get(9).unwrap();
    assert_eq!(
        (e.epoch(), e.batch_count(), e.last_timestamp()),
        (0, 1, TS + 20)
    );
    assert_eq!(
        psm.classify(&txn(batch(9, 0, 2, 1))),
        Verdict::Accept { epoch_bump: false }
    );
    assert!(
        psm.append(&txn(batch(9, 0, 2, 1)), off)
            .unwrap()
            .started_txn
    );
}

// Row 35.
#[test]
fn row35_marker_with_lower_epoch_is_fenced() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[txn(batch(9, 3, 0, 1))]);
    let before = psm.get(9).unwrap().clone();
    assert_eq!(
        psm.apply_control(9, 2, Marker::Abort, 0, off, TS),
        Err(fenced(3, 2))
    );
    assert_eq!(psm.get(9).unwrap(), &before);
}

// Row 36: [4.2+] in the spec. In 4.1.1 a marker at the entry's epoch passes the only (TV0/1)
// epoch rule, so the outcome (accepted) is the same, for a different reason.
#[test]
fn row36_marker_at_same_epoch_without_txn_is_accepted() {
    let mut psm = PartitionPsm::new();
    tv2_committed(&mut psm);
    assert_eq!(
        psm.apply_control(9, 1, Marker::Commit, 0, 10, TS + 30),
        Ok(None)
    );
}

// Row 37.
#[test]
fn row37_marker_with_lower_coordinator_epoch_is_fenced() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[txn(batch(9, 0, 0, 1))]);
    psm.apply_control(9, 0, Marker::Commit, 4, off, TS).unwrap();
    feed(&mut psm, &mut off, &[txn(batch(9, 0, 1, 1))]);
    let v = psm
        .apply_control(9, 0, Marker::Abort, 3, off + 1, TS)
        .unwrap_err();
    assert_eq!(v, Verdict::CoordinatorFenced { current: 4, got: 3 });
    assert_eq!(v.error_code(), 52);
    assert_eq!(
        psm.get(9).unwrap().current_txn_first_offset(),
        Some(off - 1)
    );
}

// Row 38.
#[test]
fn row38_idle_producer_expires_then_any_sequence_is_accepted() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(
        &mut psm,
        &mut off,
        &[at(batch(1, 0, 0, 1), TS), at(batch(2, 0, 0, 1), TS + 1000)],
    );
    let day = DEFAULT_PRODUCER_ID_EXPIRATION_MS;
    assert_eq!(psm.expire(TS + day - 1, day), 0);
    assert_eq!(
        psm.expire(TS + day, day),
        1,
        "now - last_timestamp >= expiration expires"
    );
    assert!(psm.get(1).is_none() && psm.get(2).is_some());
    assert_eq!(
        psm.classify(&batch(1, 0, 57, 1)),
        Verdict::Accept { epoch_bump: false }
    );
    assert_eq!(DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS, 600_000);
}

// Row 38 (X2): a batch whose timestamps are all −1 expires at the next sweep.
#[test]
fn row38_batch_without_timestamps_expires_at_next_sweep() {
    let mut psm = PartitionPsm::new();
    psm.append(&at(batch(1, 0, 0, 1), -1), 0).unwrap();
    assert_eq!(
        psm.expire(
            DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            DEFAULT_PRODUCER_ID_EXPIRATION_MS
        ),
        1
    );
}

// Row 39: log-start moves do not touch producer state (X3); the PSM has no hook for them.
#[test]
fn row39_state_survives_delete_records_in_sequence_ok_gap_rejected() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 0, 0, 3)]);
    assert_eq!(
        psm.classify(&batch(1, 0, 3, 1)),
        Verdict::Accept { epoch_bump: false }
    );
    assert_eq!(psm.classify(&batch(1, 0, 5, 1)), oos(3, 5));
}

// Row 40.
#[test]
fn row40_after_broker_snapshot_load_only_the_last_batch_is_a_duplicate() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    let bs = seq_batches(1, 0, 0, 3, 1);
    feed(&mut psm, &mut off, &bs);
    psm.retain_last_batches();
    assert_eq!(psm.classify(&bs[1]), oos(3, 1));
    assert!(matches!(
        psm.classify(&bs[2]),
        Verdict::Duplicate {
            first_offset: 2,
            ..
        }
    ));
}

// Row 43.
#[test]
fn row43_produce_v0_to_v2_is_unsupported() {
    use crate::protocol::produce::{ProduceError, ProduceWalker};
    for v in 0..3 {
        assert_eq!(
            ProduceWalker::new(v, &[]).err(),
            Some(ProduceError::UnsupportedVersion(v))
        );
    }
}

/// Mirrored producer X: epoch `e`, single-record batches 0..=n.
fn mirrored(psm: &mut PartitionPsm, e: i16, n: i32) -> i64 {
    let mut off = 0;
    feed(psm, &mut off, &seq_batches(77, e, 0, n as usize + 1, 1));
    off
}

// Row 49 (C1).
#[test]
fn row49_collision_c1_same_range_is_a_silent_duplicate() {
    let mut psm = PartitionPsm::new();
    let off = mirrored(&mut psm, 0, 2);
    let local = batch(77, 0, 0, 1);
    assert!(matches!(
        psm.append(&local, off),
        Err(Verdict::Duplicate {
            first_offset: 0,
            last_offset: 0,
            ..
        })
    ));
}

// Row 50 (C2).
#[test]
fn row50_collision_c2_no_range_match_then_bump_takes_over() {
    let mut psm = PartitionPsm::new();
    let off = mirrored(&mut psm, 0, 2);
    assert_eq!(psm.classify(&batch(77, 0, 0, 2)), oos(3, 0));
    // J1: the client bumps its epoch and restarts at 0; the mirror is fenced afterwards.
    psm.append(&batch(77, 1, 0, 2), off).unwrap();
    assert_eq!(psm.classify(&batch(77, 0, 3, 1)), fenced(1, 0));
}

// Row 51 (C3).
#[test]
fn row51_collision_c3_mirrored_epoch_higher_fences_local() {
    let mut psm = PartitionPsm::new();
    mirrored(&mut psm, 4, 2);
    assert_eq!(psm.classify(&batch(77, 0, 0, 1)), fenced(4, 0));
}

// Row 52 (C4).
#[test]
fn row52_collision_c4_local_epoch_higher_seq0_takes_over_and_fences_mirror() {
    let mut psm = PartitionPsm::new();
    let off = mirrored(&mut psm, 0, 2);
    let a = psm.append(&batch(77, 3, 0, 1), off).unwrap();
    assert!(a.epoch_bump);
    assert_eq!(psm.get(77).unwrap().batch_count(), 1);
    assert_eq!(psm.classify(&batch(77, 0, 3, 1)), fenced(3, 0));
    assert_eq!(psm.classify(&batch(77, 3, 5, 1)), oos(1, 5));
}

#[test]
fn classify_does_not_mutate() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 0, 0, 1)]);
    let snap = psm.encode_snapshot(off);
    for b in [
        batch(1, 0, 1, 1),
        batch(1, 1, 0, 1),
        batch(2, 0, 5, 1),
        batch(1, 0, 0, 1),
    ] {
        let _ = psm.classify(&b);
    }
    assert_eq!(psm.encode_snapshot(off), snap);
}

#[test]
fn replay_applies_without_validation() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &[batch(1, 5, 0, 1)]);
    // Lower epoch and a gap: logged by the broker on replication, applied.
    let a = psm.replay(&batch(1, 4, 9, 2), off).unwrap();
    assert_eq!(a.last_offset, off + 1);
    let e = psm.get(1).unwrap();
    assert_eq!((e.epoch(), e.batch_count(), e.last_seq()), (4, 1, 10));
    assert!(psm.replay(&batch(-1, -1, -1, 1), 0).is_none());
    assert_eq!(psm.replay_control(1, 3, Marker::Abort, -5, 20, TS), None);
    assert_eq!(psm.get(1).unwrap().epoch(), 3);
}

#[test]
fn marker_for_unknown_producer_creates_an_entry_without_completed_txn() {
    let mut psm = PartitionPsm::new();
    assert_eq!(psm.apply_control(5, 2, Marker::Abort, 1, 30, TS), Ok(None));
    let e = psm.get(5).unwrap();
    assert_eq!(
        (
            e.epoch(),
            e.coordinator_epoch(),
            e.last_timestamp(),
            e.batch_count()
        ),
        (2, 1, TS, 0)
    );
    // Same epoch, empty ring: only sequence 0 continues (S4).
    assert_eq!(psm.classify(&batch(5, 2, 4, 1)), oos(0, 4));
}

#[test]
fn clear_forgets_every_producer() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(
        &mut psm,
        &mut off,
        &[batch(1, 0, 0, 1), batch(2, 0, 0, 1), txn(batch(3, 0, 0, 1))],
    );
    assert_eq!(psm.len(), 3);
    assert_eq!(psm.iter().count(), 3);
    assert_eq!(psm.clear(), 3);
    assert!(psm.is_empty() && psm.get(1).is_none());
}

#[test]
fn expiry_keeps_the_index_consistent() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    for pid in 0..50 {
        feed(
            &mut psm,
            &mut off,
            &[at(batch(pid, 0, 0, 1), if pid % 3 == 0 { 0 } else { TS })],
        );
    }
    assert_eq!(
        psm.expire(
            DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            DEFAULT_PRODUCER_ID_EXPIRATION_MS
        ),
        17
    );
    for pid in 0..50 {
        assert_eq!(psm.get(pid).is_some(), pid % 3 != 0, "pid {pid}");
        if let Some(e) = psm.get(pid) {
            assert_eq!(e.producer_id(), pid);
        }
    }
}

#[test]
fn entry_size_and_memory_per_producer_stay_within_target() {
    assert_eq!(std::mem::size_of::<ProducerEntry>(), 152);
    for n in [1usize, 100, 1000, 1025, 5000, 10_000, 16_385, 100_000] {
        let mut psm = PartitionPsm::new();
        for pid in 0..n as i64 {
            psm.append(&batch(pid, 0, 0, 1), pid).unwrap();
        }
        let per = psm.memory_bytes() / n;
        if n >= 100 {
            assert!(per <= 256, "{per} bytes per producer at {n}");
        }
    }
}

#[test]
fn snapshot_round_trips_and_rejects_corruption() {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    feed(&mut psm, &mut off, &seq_batches(1, 0, 0, 7, 2));
    feed(&mut psm, &mut off, &[txn(batch(2, 3, i32::MAX, 2))]);
    psm.apply_control(3, 1, Marker::Commit, 2, off, TS).unwrap();
    let bytes = psm.encode_snapshot(off + 1);
    let (back, last) = PartitionPsm::decode_snapshot(&bytes).unwrap();
    assert_eq!(last, off + 1);
    assert_eq!(back.len(), 3);
    for e in psm.iter() {
        assert_eq!(
            back.get(e.producer_id())
                .unwrap()
                .batches()
                .collect::<Vec<_>>(),
            e.batches().collect::<Vec<_>>()
        );
        assert_eq!(
            back.get(e.producer_id())
                .unwrap()
                .current_txn_first_offset(),
            e.current_txn_first_offset()
        );
    }
    assert_eq!(
        PartitionPsm::decode_snapshot(&bytes[..10]).err(),
        Some(SnapshotError::TooShort(10))
    );
    let mut bad = bytes.clone();
    bad[0] = b'X';
    assert_eq!(
        PartitionPsm::decode_snapshot(&bad).err(),
        Some(SnapshotError::BadMagic)
    );
    let mut bad = bytes.clone();
    bad[5] = 9;
    assert_eq!(
        PartitionPsm::decode_snapshot(&bad).err(),
        Some(SnapshotError::UnsupportedVersion(9))
    );
    let mut bad = bytes.clone();
    let n = bad.len();
    bad[n - 3] ^= 0x40;
    assert!(matches!(
        PartitionPsm::decode_snapshot(&bad),
        Err(SnapshotError::CrcMismatch { .. })
    ));
    assert!(matches!(
        PartitionPsm::decode_snapshot(&bytes[..bytes.len() - 1]),
        Err(SnapshotError::LengthMismatch { .. })
    ));
}

/// Re-seals a payload with a valid header so that structural errors behind the CRC are reached.
fn seal(payload: &[u8]) -> Vec<u8> {
    let mut out = SNAPSHOT_MAGIC.to_vec();
    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[test]
fn snapshot_structural_errors_behind_a_valid_crc_are_typed() {
    let mut p = 5i64.to_be_bytes().to_vec();
    p.extend_from_slice(&1000u32.to_be_bytes());
    assert_eq!(
        PartitionPsm::decode_snapshot(&seal(&p)).err(),
        Some(SnapshotError::Truncated("the entry list"))
    );
    let mut psm = PartitionPsm::new();
    psm.append(&batch(4, 0, 0, 1), 0).unwrap();
    let good = psm.encode_snapshot(1);
    let mut payload = good[16..].to_vec();
    payload[8 + 4 + 8 + 2 + 4 + 8 + 8] = 6; // batch count
    assert!(matches!(
        PartitionPsm::decode_snapshot(&seal(&payload)),
        Err(SnapshotError::BadEntry { index: 0, .. })
    ));
    let mut twice = good[16..].to_vec();
    let entry = twice[12..].to_vec();
    twice.extend_from_slice(&entry);
    twice[8..12].copy_from_slice(&2u32.to_be_bytes());
    assert_eq!(
        PartitionPsm::decode_snapshot(&seal(&twice)).err(),
        Some(SnapshotError::DuplicateProducer(4))
    );
    let mut trailing = good[16..].to_vec();
    trailing.push(0);
    assert_eq!(
        PartitionPsm::decode_snapshot(&seal(&trailing)).err(),
        Some(SnapshotError::TrailingBytes(1))
    );
}

mod snapshot_props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn snapshot_round_trip_preserves_every_entry(
            ops in proptest::collection::vec((0i64..20, 0i16..3, 1i32..4, any::<bool>(), any::<bool>()), 0..80),
            last in any::<i64>(),
        ) {
            let mut psm = PartitionPsm::new();
            let mut off = 0i64;
            for (pid, epoch, count, t, marker) in ops {
                if marker {
                    let _ = psm.apply_control(pid, epoch, Marker::Commit, 0, off, TS + off);
                    off += 1;
                } else {
                    let next = psm.get(pid).filter(|e| e.epoch() == epoch).map_or(0, |e| e.last_seq().wrapping_add(1).max(0));
                    let mut b = at(batch(pid, epoch, next, count), TS + off);
                    if t { b = txn(b); }
                    if let Ok(a) = psm.append(&b, off) { off = a.last_offset + 1; }
                }
            }
            let bytes = psm.encode_snapshot(last);
            let (back, got_last) = PartitionPsm::decode_snapshot(&bytes).unwrap();
            prop_assert_eq!(got_last, last);
            prop_assert_eq!(back.len(), psm.len());
            for e in psm.iter() {
                let b = back.get(e.producer_id()).unwrap();
                prop_assert_eq!(b.epoch(), e.epoch());
                prop_assert_eq!(b.coordinator_epoch(), e.coordinator_epoch());
                prop_assert_eq!(b.last_timestamp(), e.last_timestamp());
                prop_assert_eq!(b.current_txn_first_offset(), e.current_txn_first_offset());
                prop_assert_eq!(b.batches().collect::<Vec<_>>(), e.batches().collect::<Vec<_>>());
            }
            prop_assert_eq!(back.encode_snapshot(last).len(), bytes.len());
        }

        #[test]
        fn snapshot_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), reseal in any::<bool>()) {
            let input = if reseal { seal(&bytes) } else { bytes };
            let _ = PartitionPsm::decode_snapshot(&input);
        }
    }
}

/// Review F11e: a rebuild from what is left of the log keeps the producers whose batches left
/// it (the broker keeps them), but not those it already has, nor those cleared at the barrier.
#[test]
fn a_rebuilt_state_keeps_producers_whose_batches_left_the_log() {
    let mut previous = PartitionPsm::new();
    let mut offset = 0;
    feed(&mut previous, &mut offset, &[batch(1, 0, 0, 1)]); // offset 0: before the barrier
    feed(&mut previous, &mut offset, &[batch(2, 0, 0, 1)]); // offset 1: deleted
    feed(&mut previous, &mut offset, &[batch(3, 0, 0, 1)]); // offset 2: still in the log
    let mut rebuilt = PartitionPsm::new();
    let mut from = 2;
    feed(&mut rebuilt, &mut from, &[batch(3, 0, 0, 1)]);
    let kept = rebuilt.keep_removed_producers(&previous, 2, 1);
    assert_eq!(kept, 1);
    assert!(rebuilt.get(1).is_none(), "cleared at the barrier");
    assert_eq!(rebuilt.get(2).map(|e| e.last_seq()), Some(0), "kept");
    assert_eq!(rebuilt.get(3).map(|e| e.last_data_offset()), Some(2));
}

/// Review F11f: the broker's word closes a transaction whose marker the gateway never saw, but
/// not once a batch arrived after the broker was asked.
#[test]
fn a_transaction_the_broker_says_ended_is_closed_unless_a_batch_came_since() {
    let mut psm = PartitionPsm::new();
    let mut offset = 0;
    feed(&mut psm, &mut offset, &[txn(batch(7, 0, 0, 1))]);
    let e = psm.get(7).expect("entry");
    let seen = (
        e.current_txn_first_offset().expect("open"),
        e.last_data_offset(),
    );
    let ended = partition::BrokerTxnState {
        epoch: 0,
        coordinator_epoch: 3,
        txn_start_offset: -1,
        last_timestamp: TS + 50,
    };
    // A batch since the broker was asked: nothing changes.
    let mut later = psm.clone();
    let mut o = offset;
    feed(&mut later, &mut o, &[txn(batch(7, 0, 1, 1))]);
    assert!(!later.settle_transaction(7, seen.0, seen.1, ended));
    // Otherwise the broker's state is taken.
    assert!(psm.settle_transaction(7, seen.0, seen.1, ended));
    let e = psm.get(7).expect("entry");
    assert_eq!(e.current_txn_first_offset(), None);
    assert_eq!(e.coordinator_epoch(), 3);
    assert_eq!(e.last_timestamp(), TS + 50);
    assert_eq!(e.last_seq(), 0, "the same epoch keeps the cached batches");
}

/// A v2 batch of one record at `offset`: data of `pid` (sequence 0), or, with `abort`, a
/// transactional control batch holding an ABORT marker of `pid` (coordinator epoch 0), as
/// WriteTxnMarkers appends it.
fn log_batch(offset: i64, pid: i64, abort: bool) -> Vec<u8> {
    crate::protocol::txn_marker::one_record_batch_for_tests(offset, pid, abort.then_some(0), abort)
        .to_vec()
}

#[test]
fn a_rebuild_clears_at_a_control_barrier_and_keeps_an_unknown_producer_s_lone_marker_as_an_entry() {
    // 0: data of 1; 1: a lone ABORT marker of 7 (another failover's barrier, say);
    // 2: data of 2; 3: the partition's own control barrier (producer 9); 4: data of 3.
    let mut log = Vec::new();
    for (offset, pid, abort) in [
        (0, 1, false),
        (1, 7, true),
        (2, 2, false),
        (3, 9, true),
        (4, 3, false),
    ] {
        log.extend(log_batch(offset, pid, abort));
    }
    // Without a barrier: the marker of 7 gives it an entry with no open transaction.
    let mut psm = PartitionPsm::new();
    let (next, n) = rebuild::replay_records(&mut psm, &log, 0, None).unwrap();
    assert_eq!((next, n), (5, 5));
    let e = psm.get(7).expect("an entry for the marker's producer");
    assert_eq!(
        (
            e.epoch(),
            e.coordinator_epoch(),
            e.current_txn_first_offset()
        ),
        (0, 0, None)
    );
    assert!(psm.get(9).is_some() && psm.get(1).is_some());
    // With the barrier at 3: everything before it is forgotten, the barrier's own producer is
    // not tracked, what follows is.
    let mut psm = PartitionPsm::new();
    let (next, _) = rebuild::replay_records(&mut psm, &log, 0, Some(3)).unwrap();
    assert_eq!(next, 5);
    assert_eq!(
        psm.iter().map(|e| e.producer_id()).collect::<Vec<_>>(),
        vec![3]
    );
}

#[test]
fn outcomes_buffered_during_a_rebuild_are_installed_in_offset_order_after_what_the_log_held() {
    // The rebuild read the log through offset 4 (producer 2's batch at 3 among it). Meanwhile
    // producer 1's answers arrived out of offset order: sequences 2-3 (offset 7) before 0-1 (5).
    let mut psm = PartitionPsm::new();
    let _ = psm.replay(&batch(2, 0, 0, 1), 3);
    let buffered = vec![
        (7, slot::Appended::Batch(batch(1, 0, 2, 2))),
        (3, slot::Appended::Batch(batch(2, 0, 0, 1))),
        (5, slot::Appended::Batch(batch(1, 0, 0, 2))),
    ];
    let through = slot::apply_buffered(&mut psm, buffered, 4);
    assert_eq!(through, 8);
    let one = psm.get(1).expect("producer 1");
    assert_eq!((one.last_seq(), one.last_data_offset()), (3, 8));
    assert_eq!(one.batch_count(), 2);
    let two = psm.get(2).expect("producer 2");
    assert_eq!(
        two.batch_count(),
        1,
        "the batch the log held is not applied twice"
    );
}
