//! Unit tests of `batch.rs`.

use super::*;
use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression as KCompression, Record, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType as KTimestampType,
};
use proptest::prelude::*;

/// A batch with the given header fields and `payload` as record bytes; length and CRC fixed up.
fn raw_batch(mut h: BatchHeader, payload: &[u8]) -> Vec<u8> {
    h.batch_length = (BATCH_HEADER_SIZE - LOG_OVERHEAD + payload.len()) as i32;
    let mut head = [0u8; BATCH_HEADER_SIZE];
    h.write_to(&mut head);
    let mut out = head.to_vec();
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

fn header(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchHeader {
    BatchHeader {
        base_offset: 0,
        batch_length: 0,
        partition_leader_epoch: -1,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: 1_000,
        max_timestamp: 1_005,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        record_count: count,
    }
}

fn records(pid: i64, epoch: i16, seq: i32, count: usize, txn: bool, ts: i64) -> Vec<Record> {
    (0..count)
        .map(|i| Record {
            transactional: txn,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 7,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: KTimestampType::Creation,
            offset: i as i64,
            // The encoder groups records whose offset - sequence is constant.
            sequence: seq.wrapping_add(i as i32),
            timestamp: ts + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(vec![b'v'; i % 7])),
            headers: Default::default(),
        })
        .collect()
}

fn encode(recs: &[Record]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: KCompression::None,
    };
    RecordBatchEncoder::encode(&mut buf, recs.iter(), &opts).unwrap();
    buf.to_vec()
}

#[test]
fn reads_every_header_field() {
    let mut h = header(42, 3, 17, 4);
    h.attributes = 0x10 | 0x08 | 3;
    h.partition_leader_epoch = 9;
    let b = raw_batch(h, &[1, 2, 3]);
    let (got, bytes) = BatchWalker::new(&b, true).next().unwrap().unwrap();
    assert_eq!(bytes.len(), b.len());
    assert_eq!(got.total_size(), b.len());
    assert_eq!(got.producer_id, 42);
    assert_eq!(got.producer_epoch, 3);
    assert_eq!(got.base_sequence, 17);
    assert_eq!(got.last_sequence(), 20);
    assert_eq!(got.record_count, 4);
    assert_eq!(got.partition_leader_epoch, 9);
    assert_eq!(got.compression(), Compression::Lz4);
    assert!(got.is_transactional());
    assert!(!got.is_control());
    assert_eq!(got.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!((got.base_timestamp, got.max_timestamp), (1_000, 1_005));
}

#[test]
fn last_sequence_wraps_past_i32_max() {
    let h = header(1, 0, i32::MAX - 1, 4);
    // MAX-1, MAX, 0, 1
    assert_eq!(h.last_sequence(), 1);
    assert_eq!(header(1, 0, i32::MAX, 1).last_sequence(), i32::MAX);
    assert_eq!(header(1, 0, NO_SEQUENCE, 3).last_sequence(), NO_SEQUENCE);
    assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
    assert_eq!(decrement_sequence(10, 3), 7);
}

#[test]
fn walks_several_batches_and_reports_positions() {
    let mut all = raw_batch(header(1, 0, 0, 1), b"a");
    let second_at = all.len();
    all.extend(raw_batch(header(2, 0, 5, 2), b"bb"));
    let got: Vec<_> = BatchWalker::new(&all, true)
        .map(|r| r.unwrap().0.producer_id)
        .collect();
    assert_eq!(got, vec![1, 2]);
    let mut bad = all.clone();
    bad[second_at + 16] = 1;
    let errs: Vec<_> = BatchWalker::new(&bad, false).collect();
    assert_eq!(errs.len(), 2);
    assert_eq!(
        errs[1],
        Err(BatchError::UnsupportedMagic {
            index: 1,
            pos: second_at,
            magic: 1
        })
    );
}

#[test]
fn truncated_header_is_an_error() {
    let b = raw_batch(header(1, 0, 0, 1), b"a");
    assert!(matches!(
        BatchWalker::new(&b[..30], false).next(),
        Some(Err(BatchError::TruncatedHeader {
            index: 0,
            pos: 0,
            available: 30
        }))
    ));
    assert!(matches!(
        BatchWalker::new(&b[..5], false).next(),
        Some(Err(BatchError::TruncatedHeader { available: 5, .. }))
    ));
}

#[test]
fn truncated_batch_is_an_error() {
    let b = raw_batch(header(1, 0, 0, 1), b"abc");
    assert_eq!(
        BatchWalker::new(&b[..b.len() - 1], false).next(),
        Some(Err(BatchError::TruncatedBatch {
            index: 0,
            pos: 0,
            declared: b.len(),
            available: b.len() - 1
        }))
    );
}

#[test]
fn length_below_header_is_an_error() {
    let mut b = raw_batch(header(1, 0, 0, 1), b"abc");
    b[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert_eq!(
        BatchWalker::new(&b, false).next(),
        Some(Err(BatchError::LengthBelowHeader {
            index: 0,
            pos: 0,
            batch_length: 10
        }))
    );
    b[8..12].copy_from_slice(&(-5i32).to_be_bytes());
    assert!(matches!(
        BatchWalker::fetched(&b).next(),
        Some(Err(BatchError::LengthBelowHeader { .. }))
    ));
}

#[test]
fn magic_other_than_2_is_unsupported() {
    for magic in [0i8, 1, 3, -1] {
        let mut h = header(1, 0, 0, 1);
        h.magic = magic;
        let b = raw_batch(h, b"x");
        assert_eq!(
            BatchWalker::new(&b, false).next(),
            Some(Err(BatchError::UnsupportedMagic {
                index: 0,
                pos: 0,
                magic
            }))
        );
    }
}

#[test]
fn count_and_delta_must_agree_for_client_data() {
    for (count, delta) in [(0, -1), (2, 0), (1, 1), (-1, -2), (3, -1)] {
        let mut h = header(1, 0, 0, 1);
        h.record_count = count;
        h.last_offset_delta = delta;
        let b = raw_batch(h, b"x");
        assert_eq!(
            BatchWalker::new(&b, false).next(),
            Some(Err(BatchError::InconsistentCount {
                index: 0,
                pos: 0,
                record_count: count,
                last_offset_delta: delta
            })),
            "count {count} delta {delta}"
        );
    }
}

#[test]
fn control_batch_may_be_empty_but_not_negative() {
    let mut h = header(1, 0, -1, 1);
    h.attributes = 0x30;
    h.record_count = 0;
    h.last_offset_delta = 0;
    assert!(BatchWalker::new(&raw_batch(h, b""), false)
        .next()
        .unwrap()
        .is_ok());
    h.record_count = -1;
    assert!(BatchWalker::new(&raw_batch(h, b""), false)
        .next()
        .unwrap()
        .is_err());
}

#[test]
fn fetched_mode_accepts_compacted_batches() {
    let mut h = header(1, 0, 0, 1);
    h.record_count = 2;
    h.last_offset_delta = 9;
    let b = raw_batch(h, b"x");
    assert!(BatchWalker::new(&b, false).next().unwrap().is_err());
    assert!(BatchWalker::fetched(&b).next().unwrap().is_ok());
    h.record_count = 0;
    assert!(BatchWalker::fetched(&raw_batch(h, b""))
        .next()
        .unwrap()
        .is_ok());
    h.record_count = 11;
    assert!(matches!(
        BatchWalker::fetched(&raw_batch(h, b"")).next(),
        Some(Err(BatchError::InconsistentCount { .. }))
    ));
}

#[test]
fn crc_mismatch_is_reported_only_when_checking() {
    let mut b = raw_batch(header(1, 0, 0, 1), b"abc");
    let last = b.len() - 1;
    b[last] ^= 0xff;
    assert!(BatchWalker::new(&b, false).next().unwrap().is_ok());
    assert!(matches!(
        BatchWalker::new(&b, true).next(),
        Some(Err(BatchError::CrcMismatch {
            index: 0,
            pos: 0,
            ..
        }))
    ));
    assert!(matches!(
        BatchWalker::fetched(&b).with_crc(true).next(),
        Some(Err(BatchError::CrcMismatch { .. }))
    ));
}

#[test]
fn crc_does_not_cover_offset_length_and_leader_epoch() {
    let mut b = raw_batch(header(1, 0, 0, 1), b"abc");
    b[0..8].copy_from_slice(&77i64.to_be_bytes());
    b[12..16].copy_from_slice(&5i32.to_be_bytes());
    assert!(BatchWalker::new(&b, true).next().unwrap().is_ok());
}

#[test]
fn fetched_mode_stops_at_partial_trailing_batch() {
    let mut all = raw_batch(header(1, 0, 0, 1), b"a");
    let complete = all.len();
    all.extend(raw_batch(header(2, 0, 0, 1), b"abcdef"));
    for cut in [
        complete + 1,
        complete + 11,
        complete + 12,
        complete + 40,
        all.len() - 1,
    ] {
        let mut w = BatchWalker::fetched(&all[..cut]);
        assert!(w.next().unwrap().is_ok());
        assert!(w.next().is_none(), "cut at {cut}");
        assert_eq!(w.position(), complete);
    }
    assert!(BatchWalker::new(&all[..complete + 40], false)
        .nth(1)
        .unwrap()
        .is_err());
}

#[test]
fn walker_stops_after_the_first_error() {
    let mut all = raw_batch(header(1, 0, 0, 1), b"a");
    all[16] = 0;
    all.extend(raw_batch(header(2, 0, 0, 1), b"a"));
    let mut w = BatchWalker::new(&all, false);
    assert!(w.next().unwrap().is_err());
    assert!(w.next().is_none());
}

#[test]
fn single_client_batch_applies_the_request_rules() {
    let one = raw_batch(header(1, 0, 0, 1), b"a");
    assert!(single_client_batch(&one, true).is_ok());
    assert_eq!(
        single_client_batch(&[], true),
        Err(ClientBatchError::NoBatch)
    );
    let mut two = one.clone();
    two.extend_from_slice(&one);
    assert_eq!(
        single_client_batch(&two, true),
        Err(ClientBatchError::MoreThanOneBatch)
    );
    let mut h = header(1, 0, 0, 1);
    h.base_offset = 3;
    assert_eq!(
        single_client_batch(&raw_batch(h, b"a"), true),
        Err(ClientBatchError::NonZeroBaseOffset(3))
    );
}

#[test]
fn reads_end_txn_marker_from_control_batch() {
    let rec = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: 9,
        producer_epoch: 4,
        timestamp_type: KTimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 123_456,
        key: Some(Bytes::from_static(&[0, 0, 0, 1])),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 7])),
        headers: Default::default(),
    };
    let b = encode(std::slice::from_ref(&rec));
    let (h, bytes) = BatchWalker::fetched(&b).next().unwrap().unwrap();
    assert!(h.is_control() && h.is_transactional());
    let m = control_marker(&h, bytes).unwrap().unwrap();
    assert_eq!(
        m,
        ControlMarker {
            control_type: ControlType::Commit,
            coordinator_epoch: Some(7),
            timestamp: 123_456
        }
    );
    let data = encode(&records(1, 0, 0, 1, false, 5));
    let (dh, dbytes) = BatchWalker::fetched(&data).next().unwrap().unwrap();
    assert_eq!(control_marker(&dh, dbytes), Err(MarkerError::NotControl));
    let mut short = rec;
    short.value = Some(Bytes::from_static(&[0, 0, 1]));
    let b = encode(std::slice::from_ref(&short));
    let (h, bytes) = BatchWalker::fetched(&b).next().unwrap().unwrap();
    assert!(matches!(
        control_marker(&h, bytes),
        Err(MarkerError::Malformed(_))
    ));
}

proptest! {
    #[test]
    fn agrees_with_kafka_protocol_decoder(
        batches in proptest::collection::vec(
            (0i64..1_000_000, -1i16..300, prop_oneof![Just(-1i32), 0i32..i32::MAX - 32], 1usize..20, any::<bool>(), 0i64..1_700_000_000_000),
            1..6,
        )
    ) {
        let mut bytes = Vec::new();
        for (pid, epoch, seq, count, txn, ts) in &batches {
            bytes.extend(encode(&records(*pid, *epoch, *seq, *count, *txn, *ts)));
        }
        let theirs = RecordBatchDecoder::decode_batch_info(&mut Bytes::from(bytes.clone())).unwrap();
        let ours: Vec<BatchHeader> = BatchWalker::new(&bytes, true).map(|r| r.unwrap().0).collect();
        prop_assert_eq!(ours.len(), theirs.len());
        for ((o, t), (_, _, _, count, _, ts)) in ours.iter().zip(&theirs).zip(&batches) {
            prop_assert_eq!(o.record_count, t.record_count);
            prop_assert_eq!(o.base_offset, t.min_offset);
            prop_assert_eq!(o.base_timestamp, t.min_timestamp);
            prop_assert_eq!(o.base_sequence, t.base_sequence);
            prop_assert_eq!(o.is_transactional(), t.transactional);
            prop_assert_eq!(o.is_control(), t.control);
            prop_assert_eq!(o.has_delete_horizon(), t.delete_horizon);
            prop_assert_eq!(o.partition_leader_epoch, t.partition_leader_epoch);
            prop_assert_eq!(o.producer_id, t.producer_id);
            prop_assert_eq!(o.producer_epoch, t.producer_epoch);
            prop_assert_eq!(o.compression(), Compression::None);
            prop_assert_eq!(t.compression, KCompression::None);
            prop_assert_eq!(o.magic, t.version);
            prop_assert_eq!(o.timestamp_type() == TimestampType::LogAppendTime, t.timestamp_type == KTimestampType::LogAppend);
            prop_assert_eq!(o.last_offset_delta, *count as i32 - 1);
            prop_assert_eq!(o.max_timestamp, ts + *count as i64 - 1);
        }
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400), crc in any::<bool>()) {
        for (h, b) in BatchWalker::new(&bytes, crc).flatten() {
            prop_assert_eq!(h.total_size(), b.len());
            let _ = control_marker(&h, b);
        }
        for r in BatchWalker::fetched(&bytes).with_crc(crc).flatten() {
            let _ = control_marker(&r.0, r.1);
        }
        let _ = single_client_batch(&bytes, crc);
    }

    #[test]
    fn never_panics_on_mutated_valid_batches(
        flips in proptest::collection::vec((0usize..200, any::<u8>()), 1..8),
        cut in 0usize..200,
    ) {
        let mut bytes = raw_batch(header(5, 1, 3, 2), b"0123456789");
        bytes.extend(raw_batch(header(6, 1, 3, 1), b"xyz"));
        for (at, v) in flips {
            let n = bytes.len();
            bytes[at % n] = v;
        }
        bytes.truncate(cut.min(bytes.len()));
        for r in BatchWalker::new(&bytes, true).chain(BatchWalker::fetched(&bytes)).flatten() {
            let _ = control_marker(&r.0, r.1);
        }
    }
}
