//! Hiding barriers in Fetch responses (v4..=18). Byte 0: version; byte 1: mode (bit 0: build a
//! Fetch response around the input records and a real barrier batch instead of treating the
//! input as a response body; bit 1: filter every topic or only some). Never panics; a filtered
//! response decodes, hides at least one barrier and filtering it again finds nothing.
#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::barrier::{encode_barrier_batch, BarrierValue};
use mirrorgate::protocol::fetch_filter::hide_barriers_in_fetch;
use mirrorgate_fuzz::{framed, Choices};

fn built(version: i16, records: &[u8], split: usize) -> Bytes {
    let barrier = encode_barrier_batch(
        &BarrierValue {
            version: 1,
            mirror: "m".into(),
            failover_id: "f".into(),
            source_cluster_id: None,
            time_ms: 1,
            producers_expired: 0,
            last_mirrored_offset: 9,
        },
        1_700_000_000_000,
    );
    let at = split.min(records.len());
    let mut with = records[..at].to_vec();
    with.extend_from_slice(&barrier);
    with.extend_from_slice(&records[at..]);
    let part = |i: i32, r: Vec<u8>| {
        PartitionData::default()
            .with_partition_index(i)
            .with_high_watermark(100)
            .with_records(Some(Bytes::from(r)))
    };
    let topic = |name: &str, id: u128, parts: Vec<PartitionData>| {
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_string(name.to_string())))
            .with_topic_id(uuid::Uuid::from_u128(id))
            .with_partitions(parts)
    };
    let resp = FetchResponse::default().with_responses(vec![
        topic(
            "mirror.a",
            1,
            vec![part(0, with.clone()), part(1, records.to_vec())],
        ),
        topic("other", 2, vec![part(0, with)]),
    ]);
    let mut out = BytesMut::new();
    out.put_i32(0);
    let hv = ApiKey::Fetch.response_header_version(version);
    ResponseHeader::default()
        .with_correlation_id(3)
        .encode(&mut out, hv)
        .expect("header encodes");
    if resp.encode(&mut out, version).is_err() {
        return Bytes::new();
    }
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

fuzz_target!(|data: &[u8]| {
    let mut c = Choices::new(data);
    let version = 4 + (c.byte() % 16) as i16; // 4..=19: one unsupported version
    let mode = c.byte();
    let split = c.byte() as usize;
    let rest = c.rest();
    let frame = if mode & 1 != 0 {
        built(version, rest, split)
    } else {
        framed(rest)
    };
    let all = mode & 2 != 0;
    let wanted = move |name: &str, id: uuid::Uuid| all || name == "mirror.a" || id.as_u128() == 1;
    let Ok(Some((new, hidden))) = hide_barriers_in_fetch(&frame, version, &wanted) else {
        return;
    };
    assert!(hidden >= 1);
    let len = i32::from_be_bytes([new[0], new[1], new[2], new[3]]);
    assert_eq!(len as usize, new.len() - 4);
    let again = hide_barriers_in_fetch(&new, version, &wanted)
        .unwrap_or_else(|e| panic!("filtered v{version} response does not decode: {e}"));
    assert!(again.is_none(), "a barrier survived filtering");
});
