use super::super::SourceBatch;
use super::*;
use kafka_protocol::records::RecordBatchDecoder;

const ATTR_TXN: i16 = 0x10;

/// A record as the test writes it: offset delta, timestamp delta, key, value.
type Rec = (i32, i64, &'static str, Option<&'static str>);

fn encode_record(out: &mut BytesMut, (od, td, k, v): &Rec) {
    let mut r = BytesMut::new();
    r.put_u8(0);
    put_varlong(&mut r, *td);
    put_varlong(&mut r, i64::from(*od));
    put_varlong(&mut r, k.len() as i64);
    r.extend_from_slice(k.as_bytes());
    match v {
        Some(v) => {
            put_varlong(&mut r, v.len() as i64);
            r.extend_from_slice(v.as_bytes());
        }
        None => put_varlong(&mut r, -1),
    }
    put_varlong(&mut r, 1); // one header
    put_varlong(&mut r, 1);
    r.extend_from_slice(b"h");
    put_varlong(&mut r, 2);
    r.extend_from_slice(b"hv");
    put_varlong(out, r.len() as i64);
    out.extend_from_slice(&r);
}

/// A source batch at `base` spanning `last_delta + 1` offsets with the given records, as a
/// broker stores it (producer 42, epoch 3, base sequence 10).
fn batch(base: i64, last_delta: i32, codec: i16, attrs: i16, recs: &[Rec]) -> Bytes {
    let mut plain = BytesMut::new();
    for r in recs {
        encode_record(&mut plain, r);
    }
    let mut body = BytesMut::new();
    let c = BatchHeader {
        attributes: codec,
        ..header(0, 0, 0, 0)
    }
    .compression();
    compress(c, &plain, &mut body).unwrap();
    let h = BatchHeader {
        attributes: codec | attrs,
        batch_length: (BATCH_HEADER_SIZE - 12 + body.len()) as i32,
        ..header(base, last_delta, recs.len() as i32, 1_000)
    };
    let mut out = [0u8; BATCH_HEADER_SIZE];
    h.write_to(&mut out);
    let mut b = BytesMut::from(&out[..]);
    b.extend_from_slice(&body);
    // Max timestamp: the largest record timestamp.
    let max = recs.iter().map(|r| 1_000 + r.1).max().unwrap_or(1_000);
    b[35..43].copy_from_slice(&max.to_be_bytes());
    seal(&mut b);
    b.freeze()
}

fn header(base: i64, last_delta: i32, count: i32, ts: i64) -> BatchHeader {
    BatchHeader {
        base_offset: base,
        batch_length: 0,
        partition_leader_epoch: 5,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: last_delta,
        base_timestamp: ts,
        max_timestamp: ts,
        producer_id: 42,
        producer_epoch: 3,
        base_sequence: 10,
        record_count: count,
    }
}

const GAPPED: [Rec; 3] = [
    (2, 5, "a", Some("1")),
    (3, 7, "b", None),
    (7, 2, "c", Some("3")),
];

fn crc_ok(b: &[u8]) -> bool {
    BatchHeader::parse(b).unwrap().crc == crc32c::crc32c(&b[ATTRIBUTES_OFFSET..])
}

/// (offset, timestamp, key, value, headers) of every record, decoded by kafka-protocol.
fn decoded(b: &Bytes) -> Vec<(i64, i64, String, Option<String>, usize)> {
    let set = RecordBatchDecoder::decode(&mut b.clone()).unwrap();
    set.records
        .iter()
        .map(|r| {
            (
                r.offset,
                r.timestamp,
                String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap(),
                r.value
                    .as_ref()
                    .map(|v| String::from_utf8(v.to_vec()).unwrap()),
                r.headers.len(),
            )
        })
        .collect()
}

#[test]
fn a_gapped_batch_is_rewritten_with_contiguous_offsets_a_valid_crc_and_the_same_records() {
    let src = batch(100, 9, 0, 0, &GAPPED);
    let r = rewrite_gapped(&src).unwrap();
    let h = r.header;
    assert_eq!(
        (h.base_offset, h.last_offset_delta, h.record_count),
        (0, 2, 3)
    );
    assert!(crc_ok(&r.bytes), "CRC-32C of the rewritten batch");
    assert_eq!(h.total_size(), r.bytes.len());
    assert_eq!(r.runs, vec![(102, 2), (107, 1)]);
    assert_eq!(
        decoded(&r.bytes),
        vec![
            (0, 1_005, "a".into(), Some("1".into()), 1),
            (1, 1_007, "b".into(), None, 1),
            (2, 1_002, "c".into(), Some("3".into()), 1),
        ]
    );
    assert_eq!(h.max_timestamp, 1_007);
    assert_eq!(h.partition_leader_epoch, 5);
}

#[test]
fn a_rewritten_batch_has_no_producer_and_is_not_transactional() {
    let src = batch(100, 9, 0, ATTR_TXN, &GAPPED);
    let h = rewrite_gapped(&src).unwrap().header;
    assert_eq!(
        (h.producer_id, h.producer_epoch, h.base_sequence),
        (-1, -1, -1)
    );
    assert!(!h.is_transactional());
}

#[test]
fn a_compressed_gapped_batch_keeps_its_codec_and_its_records() {
    let plain = decoded(&rewrite_gapped(&batch(100, 9, 0, 0, &GAPPED)).unwrap().bytes);
    for codec in 1..=4i16 {
        let src = batch(100, 9, codec, 0, &GAPPED);
        let r = rewrite_gapped(&src).unwrap();
        assert_eq!(r.header.attributes & 0x07, codec, "codec {codec}");
        assert!(crc_ok(&r.bytes), "codec {codec}");
        assert_eq!(decoded(&r.bytes), plain, "codec {codec}");
        assert_eq!(r.runs, vec![(102, 2), (107, 1)]);
    }
}

#[test]
fn the_rewrite_is_deterministic() {
    for codec in 0..=4i16 {
        let src = batch(100, 9, codec, 0, &GAPPED);
        assert_eq!(rewrite_gapped(&src), rewrite_gapped(&src), "codec {codec}");
    }
}

#[test]
fn a_cleaned_batch_loses_its_delete_horizon_and_keeps_its_record_timestamps() {
    let mut src = BytesMut::from(&batch(100, 9, 0, 0x40, &GAPPED)[..]);
    // The cleaner stores the horizon in the base timestamp; records stay relative to it.
    src[27..35].copy_from_slice(&1_000i64.to_be_bytes());
    seal(&mut src);
    let r = rewrite_gapped(&src).unwrap();
    assert!(!r.header.has_delete_horizon());
    assert_eq!(
        r.header.base_timestamp, 1_002,
        "the smallest record timestamp"
    );
    let ts: Vec<_> = decoded(&r.bytes).iter().map(|r| r.1).collect();
    assert_eq!(ts, vec![1_005, 1_007, 1_002]);
}

#[test]
fn stripping_the_producer_keeps_the_records_and_reseals_the_batch() {
    let full: [Rec; 2] = [(0, 0, "a", Some("1")), (1, 1, "b", Some("2"))];
    let src = batch(50, 1, 3, 0, &full);
    let (b, h) = strip_producer(&src).unwrap();
    assert_eq!(
        (h.producer_id, h.producer_epoch, h.base_sequence),
        (-1, -1, -1)
    );
    assert_eq!(
        (h.base_offset, h.last_offset_delta, h.record_count),
        (0, 1, 2)
    );
    assert!(crc_ok(&b));
    assert_eq!(b[BATCH_HEADER_SIZE..], src[BATCH_HEADER_SIZE..]);
}

#[test]
fn a_destination_batch_restamped_with_log_append_time_is_the_same_batch() {
    let full: [Rec; 1] = [(0, 0, "a", Some("1"))];
    let sent = batch(0, 0, 0, 0x08, &full);
    let mut stored = BytesMut::from(&sent[..]);
    stored[35..43].copy_from_slice(&99_999i64.to_be_bytes());
    seal(&mut stored);
    let d = BatchHeader::parse(&stored).unwrap();
    assert!(same_batch(&d, &sent));
    let other = batch(0, 0, 0, 0x08, &[(0, 0, "b", Some("1"))]);
    assert!(!same_batch(&d, &other), "another record");
    // CreateTime: a different max timestamp is a different batch.
    let mut ct = BytesMut::from(&batch(0, 0, 0, 0, &full)[..]);
    let expected = ct.clone().freeze();
    ct[35..43].copy_from_slice(&99_999i64.to_be_bytes());
    seal(&mut ct);
    assert!(!same_batch(&BatchHeader::parse(&ct).unwrap(), &expected));
    assert!(same_batch(
        &BatchHeader::parse(&expected).unwrap(),
        &expected
    ));
}

#[test]
fn empty_and_gapped_batches_are_their_own_kinds() {
    let empty = header(10, 4, 0, 0);
    assert_eq!(SourceBatch::of(&empty), SourceBatch::Empty);
    let control_empty = BatchHeader {
        attributes: 0x20,
        ..empty
    };
    assert_eq!(SourceBatch::of(&control_empty), SourceBatch::Empty);
    assert_eq!(SourceBatch::of(&header(10, 4, 2, 0)), SourceBatch::Gapped);
    let txn_gapped = BatchHeader {
        attributes: ATTR_TXN,
        ..header(10, 4, 2, 0)
    };
    assert_eq!(SourceBatch::of(&txn_gapped), SourceBatch::Gapped);
    assert_eq!(SourceBatch::of(&header(10, 4, 5, 0)), SourceBatch::Data);
}

#[test]
fn malformed_batches_are_errors_not_panics() {
    let src = batch(100, 9, 0, 0, &GAPPED);
    assert_eq!(rewrite_gapped(&src[..40]), Err(RewriteError::Truncated));
    assert_eq!(
        rewrite_gapped(&src[..src.len() - 1]),
        Err(RewriteError::Truncated)
    );
    let mut lying = BytesMut::from(&src[..]);
    lying[57..61].copy_from_slice(&5i32.to_be_bytes());
    assert!(matches!(
        rewrite_gapped(&lying),
        Err(RewriteError::CountMismatch {
            found: 3,
            declared: 5
        })
    ));
    let outside = batch(100, 5, 0, 0, &GAPPED);
    assert!(matches!(
        rewrite_gapped(&outside),
        Err(RewriteError::OffsetOutOfBatch { delta: 7, last: 5 })
    ));
    let mut garbage = BytesMut::from(&batch(100, 9, 4, 0, &GAPPED)[..]);
    let n = garbage.len();
    garbage[BATCH_HEADER_SIZE..n].fill(0xff);
    assert!(matches!(
        rewrite_gapped(&garbage),
        Err(RewriteError::Decompress(_))
    ));
    assert!(strip_producer(&src[..30]).is_err());
}

#[test]
fn a_log_append_time_batch_is_sent_as_create_time_with_a_valid_crc() {
    let full: [Rec; 1] = [(0, 0, "a", Some("1"))];
    let mut b = BytesMut::from(&batch(0, 0, 0, 0x08, &full)[..]);
    assert!(clear_log_append_time(&mut b));
    let h = BatchHeader::parse(&b).unwrap();
    assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
    assert!(crc_ok(&b));
    assert!(
        !clear_log_append_time(&mut b),
        "a CreateTime batch is left as is"
    );
    let gapped = rewrite_gapped(&batch(100, 9, 0, 0x08, &GAPPED)).unwrap();
    assert_eq!(gapped.header.timestamp_type(), TimestampType::CreateTime);
}
