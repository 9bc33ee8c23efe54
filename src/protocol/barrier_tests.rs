//! Unit tests of `barrier.rs`.

use super::*;
use bytes::BytesMut;
use kafka_protocol::records::{
    Compression as KCompression, Record, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType as KTimestampType,
};
use proptest::prelude::*;

fn value() -> BarrierValue {
    BarrierValue {
        version: BARRIER_VALUE_VERSION,
        mirror: "orders-dr".into(),
        failover_id: "3f0c2a4e-failover".into(),
        source_cluster_id: Some("lkc-source-ÄÖ".into()),
        time_ms: 1_700_000_000_123,
        producers_expired: 42,
        last_mirrored_offset: 99_999,
    }
}

fn record(key: &[u8], pid: i64, offset: i64, txn: bool, control: bool) -> Record {
    Record {
        transactional: txn,
        control,
        delete_horizon: false,
        partition_leader_epoch: 3,
        producer_id: pid,
        producer_epoch: if pid < 0 { -1 } else { 0 },
        timestamp_type: KTimestampType::Creation,
        offset,
        // The encoder groups records whose `offset - sequence` is constant; without a
        // producer id the batch's base sequence is then −1.
        sequence: if pid < 0 {
            offset as i32 - 1
        } else {
            offset as i32
        },
        timestamp: 1_000 + offset,
        key: Some(Bytes::copy_from_slice(key)),
        value: Some(Bytes::from_static(b"payload")),
        headers: Default::default(),
    }
}

fn encode_records(recs: &[Record]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: KCompression::None,
    };
    RecordBatchEncoder::encode(&mut buf, recs.iter(), &opts).unwrap();
    buf.to_vec()
}

/// Sets base offset and leader epoch as a broker would (neither is covered by the CRC).
fn placed(mut batch: Vec<u8>, base_offset: i64, leader_epoch: i32) -> Vec<u8> {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    batch
}

/// An ordinary batch of `n` records starting at `base_offset`.
fn data_batch(base_offset: i64, n: i64, pid: i64) -> Vec<u8> {
    let recs: Vec<_> = (0..n).map(|i| record(b"k", pid, i, false, false)).collect();
    placed(encode_records(&recs), base_offset, 5)
}

fn barrier_at(base_offset: i64) -> Vec<u8> {
    placed(
        encode_barrier_batch(&value(), 2_000).to_vec(),
        base_offset,
        5,
    )
}

fn decode_all(bytes: &[u8]) -> Vec<kafka_protocol::records::RecordSet> {
    let mut b = Bytes::copy_from_slice(bytes);
    RecordBatchDecoder::decode_all(&mut b).unwrap()
}

// --- value ---

#[test]
fn value_round_trips() {
    let v = value();
    assert_eq!(BarrierValue::decode(&v.encode()).unwrap(), v);
    let none = BarrierValue {
        source_cluster_id: None,
        mirror: String::new(),
        ..value()
    };
    assert_eq!(BarrierValue::decode(&none.encode()).unwrap(), none);
}

#[test]
fn value_layout_is_stable() {
    let v = BarrierValue {
        version: 1,
        mirror: "m".into(),
        failover_id: "f".into(),
        source_cluster_id: None,
        time_ms: 1,
        producers_expired: 2,
        last_mirrored_offset: -1,
    };
    let mut want = b"MGBR\x01\x01m\x01f\x00".to_vec();
    want.extend_from_slice(&1i64.to_be_bytes());
    want.extend_from_slice(&2u32.to_be_bytes());
    want.extend_from_slice(&(-1i64).to_be_bytes());
    assert_eq!(v.encode(), want);
}

#[test]
fn value_rejects_bad_input_with_typed_errors() {
    let good = value().encode();
    let mut bad_magic = good.clone();
    bad_magic[0] = b'X';
    assert_eq!(
        BarrierValue::decode(&bad_magic),
        Err(BarrierError::BadMagic)
    );
    for version in [0u8, 2, 255] {
        let mut b = good.clone();
        b[4] = version;
        assert_eq!(
            BarrierValue::decode(&b),
            Err(BarrierError::UnsupportedVersion(version))
        );
    }
    for cut in 0..good.len() {
        let err = BarrierValue::decode(&good[..cut]).unwrap_err();
        assert!(
            matches!(err, BarrierError::Truncated { .. } | BarrierError::BadMagic),
            "cut {cut}: {err:?}"
        );
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        BarrierValue::decode(&trailing),
        Err(BarrierError::TrailingBytes(1))
    );
    // Mirror name "m" replaced by an invalid UTF-8 byte.
    let mut v = value();
    v.mirror = "m".into();
    let mut b = v.encode();
    b[6] = 0xff;
    assert_eq!(
        BarrierValue::decode(&b),
        Err(BarrierError::InvalidUtf8 { field: "mirror" })
    );
    // Presence tag 2.
    v.source_cluster_id = None;
    let mut b = v.encode();
    let tag_at = 4 + 1 + 2 + 1 + v.failover_id.len();
    assert_eq!(b[tag_at], 0);
    b[tag_at] = 2;
    assert_eq!(
        BarrierValue::decode(&b),
        Err(BarrierError::InvalidTag {
            field: "source_cluster_id",
            tag: 2
        })
    );
    // Overlong length prefix.
    let mut b = b"MGBR\x01".to_vec();
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert_eq!(
        BarrierValue::decode(&b),
        Err(BarrierError::BadLength { field: "mirror" })
    );
}

#[test]
fn encode_always_writes_the_current_version() {
    let v = BarrierValue {
        version: 9,
        ..value()
    };
    assert_eq!(BarrierValue::decode(&v.encode()).unwrap().version, 1);
}

// --- batch ---

#[test]
fn barrier_batch_has_the_specified_shape() {
    let b = encode_barrier_batch(&value(), 2_000);
    let mut walker = BatchWalker::new(&b, true);
    let (h, whole) = walker.next().unwrap().unwrap();
    assert!(walker.next().is_none());
    assert_eq!(whole.len(), b.len());
    assert_eq!(h.base_offset, 0);
    assert_eq!(h.partition_leader_epoch, -1);
    assert_eq!(h.attributes, 0);
    assert_eq!(
        (h.producer_id, h.producer_epoch, h.base_sequence),
        (-1, -1, -1)
    );
    assert_eq!((h.record_count, h.last_offset_delta), (1, 0));
    assert_eq!((h.base_timestamp, h.max_timestamp), (2_000, 2_000));

    let sets = decode_all(&b);
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].compression, KCompression::None);
    let recs = &sets[0].records;
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.producer_id, -1);
    assert_eq!(r.producer_epoch, -1);
    assert_eq!(r.sequence, -1);
    assert!(!r.control && !r.transactional);
    assert_eq!(r.offset, 0);
    assert_eq!(r.timestamp, 2_000);
    assert_eq!(r.key.as_deref(), Some(BARRIER_KEY));
    assert!(r.headers.is_empty());
    assert_eq!(
        BarrierValue::decode(r.value.as_deref().unwrap()).unwrap(),
        value()
    );
}

#[test]
fn a_barrier_without_timestamp_is_detected_parsed_and_hidden() {
    let b = encode_barrier_batch(&value(), BARRIER_TIMESTAMP);
    let (h, _) = BatchWalker::new(&b, true).next().unwrap().unwrap();
    assert_eq!((h.base_timestamp, h.max_timestamp), (-1, -1));
    assert_eq!(decode_all(&b)[0].records[0].timestamp, -1);
    assert!(is_barrier_batch(&b));
    assert_eq!(parse_barrier(&b).unwrap(), Some(value()));
    let hidden = hide_barriers(&b).expect("rewritten");
    assert!(!is_barrier_batch(&hidden));
    let (h, _) = BatchWalker::new(&hidden, true).next().unwrap().unwrap();
    assert_eq!((h.base_timestamp, h.max_timestamp), (-1, -1));
    assert!(decode_all(&hidden)[0].records[0].control);
}

#[test]
fn barrier_batch_is_detected_and_parsed() {
    let b = barrier_at(1234);
    assert!(is_barrier_batch(&b));
    assert_eq!(parse_barrier(&b).unwrap(), Some(value()));
    // Also one the library encodes the same way.
    let lib = encode_records(&[record(BARRIER_KEY, -1, 0, false, false)]);
    assert!(is_barrier_batch(&lib));
    assert!(matches!(parse_barrier(&lib), Err(BarrierError::BadMagic)));
    // A following batch does not matter; a cut one is not a barrier.
    let mut two = b.clone();
    two.extend(data_batch(1235, 1, -1));
    assert!(is_barrier_batch(&two));
    assert!(!is_barrier_batch(&b[..b.len() - 1]));
}

#[test]
fn parse_barrier_checks_the_crc() {
    let mut b = barrier_at(7);
    let at = b.len() - 2; // last byte of last_mirrored_offset (the headers count follows)
    b[at] ^= 0x01;
    assert!(is_barrier_batch(&b));
    assert!(matches!(
        parse_barrier(&b),
        Err(BarrierError::CrcMismatch { .. })
    ));
    // Not hidden either: the consumer reports the corruption as it would without us.
    assert!(hide_barriers(&Bytes::from(b)).is_none());
}

#[test]
fn ordinary_batches_are_not_barriers() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "plain, no pid",
            encode_records(&[record(b"k", -1, 0, false, false)]),
        ),
        (
            "plain, pid",
            encode_records(&[record(b"k", 7, 0, false, false)]),
        ),
        (
            "barrier key, pid",
            encode_records(&[record(BARRIER_KEY, 7, 0, false, false)]),
        ),
        (
            "barrier key, two records",
            encode_records(&[
                record(BARRIER_KEY, -1, 0, false, false),
                record(BARRIER_KEY, -1, 1, false, false),
            ]),
        ),
        (
            "barrier key, transactional",
            encode_records(&[record(BARRIER_KEY, 7, 0, true, false)]),
        ),
        (
            "barrier key, control",
            encode_records(&[record(BARRIER_KEY, -1, 0, false, true)]),
        ),
        (
            "longer key",
            encode_records(&[record(b"__mirrorgate_barrier_", -1, 0, false, false)]),
        ),
        (
            "prefix key",
            encode_records(&[record(b"__mirrorgate_barrie", -1, 0, false, false)]),
        ),
    ];
    for (name, b) in &cases {
        // Each case is exactly one well-formed batch.
        let batches: Vec<_> = BatchWalker::new(b, true).collect();
        assert_eq!(batches.len(), 1, "{name}");
        let (h, _) = batches[0].as_ref().unwrap();
        if name.contains("two records") {
            assert_eq!(h.record_count, 2);
        }
        assert!(!is_barrier_batch(b), "{name}");
        assert_eq!(parse_barrier(b), Ok(None), "{name}");
    }
    let mut null_key = record(b"", -1, 0, false, false);
    null_key.key = None;
    assert!(!is_barrier_batch(&encode_records(&[null_key])));
    assert!(!is_barrier_batch(&[]));
    assert!(!is_barrier_batch(&[0u8; 61]));
}

// --- hiding ---

/// Asserts that `out` is `input` with the barrier at `at` (byte range) replaced by a
/// control batch with the same offsets.
fn check_replacement(replacement: &[u8], original: &[u8]) {
    let o = BatchHeader::parse(original).unwrap();
    let r = BatchHeader::parse(replacement).unwrap();
    assert_eq!(r.total_size(), replacement.len());
    assert_eq!(r.base_offset, o.base_offset);
    assert_eq!(r.last_offset(), o.last_offset());
    assert_eq!(r.partition_leader_epoch, o.partition_leader_epoch);
    assert_eq!(
        (r.base_timestamp, r.max_timestamp),
        (o.base_timestamp, o.max_timestamp)
    );
    assert!(r.is_control());
    assert!(!r.is_transactional());
    assert_eq!(r.compression(), Compression::None);
    assert_eq!(
        (r.producer_id, r.producer_epoch, r.base_sequence),
        (-1, -1, -1)
    );
    assert_eq!(r.record_count, 1);
    assert_eq!(crc32c::crc32c(&replacement[CRC_FROM..]), r.crc);
    assert!(!is_barrier_batch(replacement));
    let marker = super::super::batch::control_marker(&r, replacement)
        .unwrap()
        .unwrap();
    assert_eq!(
        marker.control_type,
        super::super::batch::ControlType::Other(HIDDEN_BARRIER_CONTROL_TYPE)
    );
}

#[test]
fn no_barrier_means_none() {
    let mut blob = data_batch(0, 3, -1);
    blob.extend(data_batch(3, 2, 9));
    blob.extend(encode_records(&[record(BARRIER_KEY, 9, 0, false, false)]));
    let blob = Bytes::from(blob);
    assert!(hide_barriers(&blob).is_none());
    assert!(hide_barriers(&Bytes::new()).is_none());
    // Partial trailing barrier: not a complete batch, left as is.
    let mut partial = data_batch(0, 1, -1);
    let b = barrier_at(1);
    partial.extend_from_slice(&b[..b.len() - 3]);
    assert!(hide_barriers(&Bytes::from(partial)).is_none());
}

#[test]
fn replaces_a_barrier_in_the_middle() {
    let a = data_batch(100, 3, 4);
    let bar = barrier_at(103);
    let c = data_batch(104, 2, -1);
    let input = Bytes::from([a.clone(), bar.clone(), c.clone()].concat());
    let out = hide_barriers(&input).unwrap();

    assert_eq!(&out[..a.len()], &a[..]);
    assert_eq!(&out[out.len() - c.len()..], &c[..]);
    let replacement = &out[a.len()..out.len() - c.len()];
    check_replacement(replacement, &bar);

    let sets = decode_all(&out);
    assert_eq!(sets.len(), 3);
    let ctrl = &sets[1].records;
    assert_eq!(ctrl.len(), 1);
    assert!(ctrl[0].control);
    assert!(!ctrl[0].transactional);
    assert_eq!(ctrl[0].offset, 103);
    assert_eq!(ctrl[0].producer_id, -1);
    assert_eq!(ctrl[0].key.as_deref(), Some(&[0u8, 0, 0x4D, 0x47][..]));
    assert_eq!(ctrl[0].value, None);
    assert_eq!(sets[2].records[0].offset, 104);
    // The output walks cleanly with CRC checks.
    assert_eq!(
        BatchWalker::new(&out, true).filter(|r| r.is_ok()).count(),
        3
    );
}

#[test]
fn replaces_a_barrier_at_the_end_and_keeps_a_partial_tail() {
    let a = data_batch(0, 2, -1);
    let bar = barrier_at(2);
    let input = Bytes::from([a.clone(), bar.clone()].concat());
    let out = hide_barriers(&input).unwrap();
    assert_eq!(&out[..a.len()], &a[..]);
    check_replacement(&out[a.len()..], &bar);
    let sets = decode_all(&out);
    assert_eq!(sets.len(), 2);
    assert!(sets[1].records[0].control);
    assert_eq!(sets[1].records[0].offset, 2);

    // Same, followed by a partial batch.
    let next = data_batch(3, 4, 5);
    let tail = &next[..next.len() - 10];
    let input = Bytes::from([a.clone(), bar.clone(), tail.to_vec()].concat());
    let out = hide_barriers(&input).unwrap();
    assert_eq!(&out[out.len() - tail.len()..], tail);
    check_replacement(&out[a.len()..out.len() - tail.len()], &bar);
}

#[test]
fn replaces_every_barrier_and_keeps_unusual_header_bits() {
    // Two barriers back to back, the second with LogAppendTime and a wider span.
    let first = barrier_at(10);
    let mut second = barrier_at(11);
    second[21..23].copy_from_slice(&0x08i16.to_be_bytes());
    second[23..27].copy_from_slice(&3i32.to_be_bytes()); // last offset delta 3
    let crc = crc32c::crc32c(&second[CRC_FROM..]);
    second[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(is_barrier_batch(&second));
    let input = Bytes::from([first.clone(), second.clone()].concat());
    let out = hide_barriers(&input).unwrap();
    let h1 = BatchHeader::parse(&out).unwrap();
    check_replacement(&out[..h1.total_size()], &first);
    let rest = &out[h1.total_size()..];
    check_replacement(rest, &second);
    let h2 = BatchHeader::parse(rest).unwrap();
    assert_eq!(h2.attributes, 0x20 | 0x08);
    assert_eq!(h2.last_offset(), 14);
}

// --- barriers recompressed by the broker (review F7 a) ---

const CODECS: [KCompression; 4] = [
    KCompression::Gzip,
    KCompression::Snappy,
    KCompression::Lz4,
    KCompression::Zstd,
];

/// The barrier as a broker stores it after recompressing it for a topic whose
/// `compression.type` is `codec`: one record, same key and value, no producer state, the
/// batch encoded by kafka-protocol (not by the gateway's own encoder).
fn recompressed_barrier(codec: KCompression, base_offset: i64) -> Vec<u8> {
    let b = recompressed_barrier_for_tests(&value(), codec, base_offset);
    let h = BatchHeader::parse(&b).unwrap();
    assert_ne!(h.compression(), Compression::None, "{codec:?}");
    assert_eq!((h.producer_id, h.record_count), (-1, 1), "{codec:?}");
    b
}

#[test]
fn a_barrier_recompressed_by_the_broker_is_detected_and_parsed() {
    for codec in CODECS {
        let b = recompressed_barrier(codec, 40);
        assert!(is_barrier_batch(&b), "{codec:?}: not detected");
        assert_eq!(parse_barrier(&b), Ok(Some(value())), "{codec:?}");
    }
}

#[test]
fn a_barrier_recompressed_by_the_broker_is_hidden_from_consumers() {
    for codec in CODECS {
        let a = data_batch(37, 3, -1);
        let bar = recompressed_barrier(codec, 40);
        let c = data_batch(41, 2, 9);
        let input = Bytes::from([a.clone(), bar.clone(), c.clone()].concat());
        let out = hide_barriers(&input)
            .unwrap_or_else(|| panic!("{codec:?}: the barrier was not replaced"));
        assert_eq!(&out[..a.len()], &a[..], "{codec:?}");
        assert_eq!(&out[out.len() - c.len()..], &c[..], "{codec:?}");
        check_replacement(&out[a.len()..out.len() - c.len()], &bar);
        let sets = decode_all(&out);
        assert_eq!(sets.len(), 3, "{codec:?}");
        assert!(sets[1].records[0].control, "{codec:?}");
        assert_eq!(sets[1].records[0].offset, 40, "{codec:?}");
        assert!(sets
            .iter()
            .flat_map(|s| &s.records)
            .all(|r| r.key.as_deref() != Some(BARRIER_KEY)));
    }
}

/// A single record batch without producer id, compressed with `codec`, from `recs`.
fn compressed_records(codec: KCompression, recs: &[Record]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: codec,
    };
    RecordBatchEncoder::encode(&mut buf, recs.iter(), &opts).unwrap();
    placed(buf.to_vec(), 7, 5)
}

#[test]
fn compressed_batches_that_are_not_barriers_are_left_alone() {
    for codec in CODECS {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "other key, no pid",
                compressed_records(codec, &[record(b"k", -1, 0, false, false)]),
            ),
            (
                "barrier key, pid",
                compressed_records(codec, &[record(BARRIER_KEY, 7, 0, false, false)]),
            ),
            (
                "barrier key, two records",
                compressed_records(
                    codec,
                    &[
                        record(BARRIER_KEY, -1, 0, false, false),
                        record(BARRIER_KEY, -1, 1, false, false),
                    ],
                ),
            ),
            (
                "prefix key",
                compressed_records(
                    codec,
                    &[record(b"__mirrorgate_barrie", -1, 0, false, false)],
                ),
            ),
            (
                "longer key",
                compressed_records(
                    codec,
                    &[record(b"__mirrorgate_barrier_", -1, 0, false, false)],
                ),
            ),
        ];
        for (name, b) in &cases {
            assert!(!is_barrier_batch(b), "{codec:?} {name}");
            assert_eq!(parse_barrier(b), Ok(None), "{codec:?} {name}");
            assert!(
                hide_barriers(&Bytes::copy_from_slice(b)).is_none(),
                "{codec:?} {name}"
            );
        }
        // The barrier key with a value that is not a barrier value: still hidden (detection
        // is key-based), but its value is reported as unreadable.
        let odd = compressed_records(codec, &[record(BARRIER_KEY, -1, 0, false, false)]);
        assert!(is_barrier_batch(&odd), "{codec:?}");
        assert_eq!(
            parse_barrier(&odd),
            Err(BarrierError::BadMagic),
            "{codec:?}"
        );
    }
}

#[test]
fn a_recompressed_barrier_with_a_bad_crc_is_reported_and_not_hidden() {
    for codec in CODECS {
        let mut b = recompressed_barrier(codec, 3);
        let last = b.len() - 1;
        b[last] ^= 0x01; // in the compressed stream, covered by the CRC
        let crc = crc32c::crc32c(&b[CRC_FROM..]);
        // Whether or not the changed stream still decompresses, the stored CRC no longer
        // matches: never a barrier value, never hidden.
        assert!(!matches!(parse_barrier(&b), Ok(Some(_))), "{codec:?}");
        assert!(
            hide_barriers(&Bytes::from(b.clone())).is_none(),
            "{codec:?}"
        );
        // Fixing the CRC over the corrupt stream: not a barrier unless the stream still
        // decodes to the same record.
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let _ = parse_barrier(&b);
    }
}

#[test]
fn a_compressed_barrier_candidate_larger_than_the_bound_is_not_decompressed() {
    for codec in CODECS {
        let mut big = record(BARRIER_KEY, -1, 0, false, false);
        // Incompressible bytes: the compressed section exceeds the bound.
        let mut x: u32 = 0x9e37_79b9;
        let noise: Vec<u8> = (0..codec::MAX_DECOMPRESSED + 512)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        big.value = Some(Bytes::from(noise));
        let b = compressed_records(codec, &[big]);
        assert!(
            b.len() - BATCH_HEADER_SIZE > codec::MAX_DECOMPRESSED,
            "{codec:?}"
        );
        assert!(!is_barrier_batch(&b), "{codec:?}");
    }
}

#[test]
fn compressed_garbage_after_a_candidate_header_is_not_a_barrier() {
    for codec in CODECS {
        let b = recompressed_barrier(codec, 0);
        let h = BatchHeader::parse(&b).unwrap();
        for fill in [0x00u8, 0xff, 0x5a] {
            let mut g = b[..BATCH_HEADER_SIZE].to_vec();
            g.extend(std::iter::repeat_n(fill, b.len() - BATCH_HEADER_SIZE));
            assert_eq!(
                BatchHeader::parse(&g).unwrap().compression(),
                h.compression()
            );
            assert!(!is_barrier_batch(&g), "{codec:?} {fill:#x}");
            assert_eq!(parse_barrier(&g), Ok(None), "{codec:?} {fill:#x}");
        }
        // Cut anywhere: never a barrier, never a panic.
        for cut in 0..b.len() {
            assert!(!is_barrier_batch(&b[..cut]), "{codec:?} cut {cut}");
        }
    }
}

proptest! {
    #[test]
    fn value_round_trips_prop(
        mirror in ".{0,40}",
        failover_id in ".{0,40}",
        source in proptest::option::of(".{0,40}"),
        time_ms in any::<i64>(),
        producers_expired in any::<u32>(),
        last in any::<i64>(),
    ) {
        let v = BarrierValue {
            version: 1, mirror, failover_id, source_cluster_id: source,
            time_ms, producers_expired, last_mirrored_offset: last,
        };
        prop_assert_eq!(BarrierValue::decode(&v.encode()).unwrap(), v.clone());
        let batch = encode_barrier_batch(&v, time_ms);
        prop_assert_eq!(parse_barrier(&batch).unwrap(), Some(v));
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = BarrierValue::decode(&bytes);
        let _ = is_barrier_batch(&bytes);
        let _ = parse_barrier(&bytes);
        let _ = hide_barriers(&Bytes::from(bytes));
    }

    #[test]
    fn mutated_recompressed_barriers_never_panic(
        c in 0usize..4,
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let mut b = recompressed_barrier(CODECS[c], 9);
        let i = BATCH_HEADER_SIZE + at.index(b.len() - BATCH_HEADER_SIZE);
        b[i] ^= xor;
        // The CRC is made to match, so a mutated stream reaches the decompressor.
        let crc = crc32c::crc32c(&b[CRC_FROM..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let _ = is_barrier_batch(&b);
        let _ = parse_barrier(&b);
        if let Some(out) = hide_barriers(&Bytes::copy_from_slice(&b)) {
            prop_assert!(!is_barrier_batch(&out));
        }
    }

    #[test]
    fn mutated_barriers_never_panic(
        at in 0usize..200,
        xor in 1u8..=255,
        cut in 0usize..200,
    ) {
        let mut b = [data_batch(0, 1, -1), barrier_at(1)].concat();
        let at = at % b.len();
        b[at] ^= xor;
        let cut = cut.min(b.len());
        let b = &b[..b.len() - cut];
        let _ = BarrierValue::decode(b);
        let _ = is_barrier_batch(b);
        let _ = parse_barrier(b);
        if let Some(out) = hide_barriers(&Bytes::copy_from_slice(b)) {
            prop_assert!(out.len() <= b.len());
        }
    }
}
