use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as KpCompression, Record, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;

use super::*;

fn kp_record(i: i64, key: &str, value: Option<&str>, seq: i32) -> Record {
    let mut headers = IndexMap::new();
    headers.insert(
        StrBytes::from_static_str("h"),
        Some(Bytes::from(format!("v{i}"))),
    );
    Record {
        transactional: false,
        control: false,
        partition_leader_epoch: 0,
        producer_id: 42,
        producer_epoch: 3,
        timestamp_type: TimestampType::Creation,
        offset: 100 + i,
        sequence: seq + i as i32,
        timestamp: 1_000 + i * 7,
        key: Some(Bytes::from(key.to_string())),
        value: value.map(|v| Bytes::from(v.to_string())),
        headers,
        delete_horizon: false,
    }
}

fn kp_batch(compression: KpCompression, n: i64) -> Bytes {
    let recs: Vec<Record> = (0..n)
        .map(|i| kp_record(i, &format!("k{i}"), (i % 3 != 0).then_some("value"), 10))
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encodes");
    buf.freeze()
}

#[test]
fn every_record_of_a_batch_is_read_whatever_its_codec() {
    for c in [
        KpCompression::None,
        KpCompression::Gzip,
        KpCompression::Snappy,
        KpCompression::Lz4,
        KpCompression::Zstd,
    ] {
        let got = decode(&kp_batch(c, 5)).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        assert_eq!(got.len(), 5, "{c:?}");
        for (i, r) in got.iter().enumerate() {
            let i = i as i64;
            assert_eq!(r.offset, 100 + i, "{c:?}");
            assert_eq!(r.timestamp, 1_000 + i * 7, "{c:?}");
            assert_eq!(r.sequence, 10 + i as i32, "{c:?}");
            assert_eq!(r.key.as_deref(), Some(format!("k{i}").as_bytes()));
            assert_eq!(r.value.is_none(), i % 3 == 0);
            assert_eq!(
                r.headers,
                vec![(Bytes::from_static(b"h"), Some(Bytes::from(format!("v{i}"))))]
            );
        }
    }
}

fn stored(offset: i64, headers: Vec<(&'static str, Option<&'static str>)>) -> StoredRecord {
    StoredRecord {
        offset,
        timestamp: 5_000 - offset,
        sequence: -1,
        key: None,
        value: Some(Bytes::from(format!("value-{offset}"))),
        headers: headers
            .into_iter()
            .map(|(k, v)| {
                (
                    Bytes::from_static(k.as_bytes()),
                    v.map(|v| Bytes::from_static(v.as_bytes())),
                )
            })
            .collect(),
    }
}

#[test]
fn a_written_batch_keeps_repeated_header_keys_in_order_and_a_valid_crc() {
    let recs = vec![
        stored(0, vec![("a", Some("1")), ("a", Some("2")), ("b", None)]),
        stored(1, vec![]),
    ];
    let producer = Producer {
        producer_id: 77,
        producer_epoch: 4,
        base_sequence: 9,
    };
    let b = encode_idempotent(&recs, producer).expect("a batch");
    // kafka-protocol's decoder checks the CRC.
    let set = RecordBatchDecoder::decode(&mut b.clone()).expect("a valid batch");
    assert_eq!(set.records.len(), 2);
    assert_eq!(set.records[0].producer_id, 77);
    assert_eq!(set.records[1].sequence, 10);
    let back = decode(&b).expect("read back");
    assert_eq!(back[0].headers, recs[0].headers, "order and repeats kept");
    assert_eq!(
        back[1].timestamp, recs[1].timestamp,
        "a timestamp below the first"
    );
    assert_eq!(back[1].value, recs[1].value);
    assert_eq!(back[0].sequence, 9);
    assert_eq!(encoded_len(&recs[0]) + encoded_len(&recs[1]) + 61, b.len());
}

#[test]
fn no_records_make_no_batch() {
    let p = Producer {
        producer_id: 1,
        producer_epoch: 0,
        base_sequence: 0,
    };
    assert!(encode_idempotent(&[], p).is_none());
}

#[test]
fn a_batch_cut_short_or_of_another_magic_is_an_error() {
    let b = kp_batch(KpCompression::None, 3);
    assert!(matches!(
        decode(&b.slice(..b.len() - 1)),
        Err(RecordsError::Truncated(100))
    ));
    let mut m = BytesMut::from(&b[..]);
    m[16] = 1;
    assert!(matches!(decode(&m.freeze()), Err(RecordsError::NotV2(100))));
}

proptest! {
    #[test]
    fn garbage_in_a_batch_never_panics(cut in 0usize..400, flips in proptest::collection::vec((61usize..400, any::<u8>()), 0..8)) {
        let b = kp_batch(KpCompression::None, 6);
        let mut m = BytesMut::from(&b[..]);
        for (at, v) in flips {
            if at < m.len() {
                m[at] = v;
            }
        }
        let m = m.freeze();
        let _ = decode(&m);
        let _ = decode(&m.slice(..cut.min(m.len())));
    }
}
