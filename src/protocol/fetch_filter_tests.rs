//! Unit tests of `fetch_filter.rs`.

use super::*;
use crate::protocol::barrier::{
    encode_barrier_batch, hide_barriers, is_barrier_batch, BarrierValue, BARRIER_VALUE_VERSION,
};
use crate::protocol::batch::BatchWalker;
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use uuid::Uuid;

const VERSIONS: [i16; 7] = [4, 11, 12, 13, 16, 17, 18];

/// Number of barrier batches in `records`, walked as [`hide_barriers`] walks them.
fn count_barriers(records: &[u8]) -> usize {
    BatchWalker::fetched(records)
        .map_while(Result::ok)
        .filter(|(_, batch)| is_barrier_batch(batch))
        .count()
}
const CORR: i32 = 991;

fn barrier_value() -> BarrierValue {
    BarrierValue {
        version: BARRIER_VALUE_VERSION,
        mirror: "orders-dr".into(),
        failover_id: "f-1".into(),
        source_cluster_id: Some("src".into()),
        time_ms: 1_700_000_000_000,
        producers_expired: 3,
        last_mirrored_offset: 41,
    }
}

/// Sets base offset and leader epoch as a broker would (neither is covered by the CRC).
fn placed(mut batch: Vec<u8>, base_offset: i64) -> Vec<u8> {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&5i32.to_be_bytes());
    batch
}

fn data_batch(base_offset: i64, n: i64) -> Vec<u8> {
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 5,
            producer_id: 77,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 1_000 + i,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from(format!("value-{base_offset}-{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let opts = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, recs.iter(), &opts).unwrap();
    placed(buf.to_vec(), base_offset)
}

fn barrier_at(base_offset: i64) -> Vec<u8> {
    placed(
        encode_barrier_batch(&barrier_value(), 2_000).to_vec(),
        base_offset,
    )
}

/// data(0..3), barrier(3), data(4..6), barrier(6)
fn with_two_barriers() -> Bytes {
    let mut v = data_batch(0, 3);
    v.extend(barrier_at(3));
    v.extend(data_batch(4, 2));
    v.extend(barrier_at(6));
    Bytes::from(v)
}

fn plain() -> Bytes {
    let mut v = data_batch(0, 2);
    v.extend(data_batch(2, 3));
    Bytes::from(v)
}

fn only_barrier() -> Bytes {
    Bytes::from(barrier_at(10))
}

fn partition(version: i16, index: i32, records: Option<Bytes>) -> PartitionData {
    let mut p = PartitionData::default();
    p.partition_index = index;
    p.high_watermark = 100;
    p.last_stable_offset = 90;
    if version >= 5 {
        p.log_start_offset = 0;
    }
    let mut a = AbortedTransaction::default();
    a.producer_id = 12.into();
    a.first_offset = 4;
    p.aborted_transactions = Some(vec![a]);
    if version >= 11 {
        p.preferred_read_replica = BrokerId(-1);
    }
    if version >= 12 {
        p.current_leader.leader_id = BrokerId(2);
        p.current_leader.leader_epoch = 5;
        p.diverging_epoch.epoch = 3;
        p.diverging_epoch.end_offset = 7;
    }
    p.records = records;
    p
}

fn topic(version: i16, name: &str, id: u128, parts: Vec<PartitionData>) -> FetchableTopicResponse {
    let mut t = FetchableTopicResponse::default();
    if version >= 13 {
        t.topic_id = Uuid::from_u128(id);
    } else {
        t.topic = TopicName(StrBytes::from_string(name.to_owned()));
    }
    t.partitions = parts;
    t
}

/// orders: p0 two barriers, p1 plain, p2 null records, p3 only a barrier;
/// other (unwanted): p0 with a barrier.
fn response(version: i16, orders_p0: Bytes) -> FetchResponse {
    let mut r = FetchResponse::default();
    r.throttle_time_ms = 3;
    if version >= 7 {
        r.session_id = 55;
    }
    r.responses = vec![
        topic(
            version,
            "orders",
            1,
            vec![
                partition(version, 0, Some(orders_p0)),
                partition(version, 1, Some(plain())),
                partition(version, 2, None),
                partition(version, 3, Some(only_barrier())),
            ],
        ),
        topic(
            version,
            "other",
            2,
            vec![partition(version, 0, Some(with_two_barriers()))],
        ),
    ];
    if version >= 16 {
        let mut n = NodeEndpoint::default();
        n.node_id = BrokerId(2);
        n.host = StrBytes::from_static_str("broker-2.internal");
        n.port = 9092;
        r.node_endpoints = vec![n];
    }
    r
}

fn frame(version: i16, resp: &FetchResponse) -> Bytes {
    let mut h = ResponseHeader::default();
    h.correlation_id = CORR;
    let mut out = BytesMut::new();
    out.put_i32(0);
    h.encode(&mut out, ApiKey::Fetch.response_header_version(version))
        .unwrap();
    resp.encode(&mut out, version).unwrap();
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

fn decode(version: i16, frame: &Bytes) -> (ResponseHeader, FetchResponse) {
    let prefix = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    assert_eq!(prefix as usize, frame.len() - 4);
    let mut body = frame.slice(4..);
    let h =
        ResponseHeader::decode(&mut body, ApiKey::Fetch.response_header_version(version)).unwrap();
    let r = FetchResponse::decode(&mut body, version).unwrap();
    assert!(body.is_empty());
    (h, r)
}

fn wants_orders(version: i16) -> impl Fn(&str, Uuid) -> bool {
    move |name, id| {
        if version >= 13 {
            assert_eq!(name, "");
            id == Uuid::from_u128(1)
        } else {
            assert!(id.is_nil());
            name == "orders"
        }
    }
}

#[test]
fn barriers_of_wanted_topics_are_hidden_and_everything_else_is_kept() {
    for version in VERSIONS {
        let original = response(version, with_two_barriers());
        let f = frame(version, &original);
        let (new, hidden) = hide_barriers_in_fetch(&f, version, &wants_orders(version))
            .unwrap()
            .unwrap_or_else(|| panic!("v{version}: expected a rewrite"));
        assert_eq!(hidden, 3, "v{version}: two in p0, one in p3");
        let (h, got) = decode(version, &new);
        assert_eq!(h.correlation_id, CORR);
        let mut want = original.clone();
        want.responses[0].partitions[0].records = hide_barriers(&with_two_barriers());
        want.responses[0].partitions[3].records = hide_barriers(&only_barrier());
        assert!(want.responses[0].partitions[0].records.is_some());
        assert_eq!(got, want, "v{version}");
        // Spelled out: untouched partitions and the unwanted topic are byte-identical.
        assert_eq!(got.responses[0].partitions[1].records, Some(plain()));
        assert_eq!(got.responses[0].partitions[2].records, None);
        assert_eq!(
            got.responses[1].partitions[0].records,
            Some(with_two_barriers())
        );
        assert_eq!(got.node_endpoints, original.node_endpoints);
        // Hidden means no barrier batch is left in the wanted topic.
        let p0 = got.responses[0].partitions[0].records.clone().unwrap();
        assert_eq!(count_barriers(&p0), 0);
        assert_eq!(count_barriers(&with_two_barriers()), 2);
    }
}

#[test]
fn no_barrier_in_wanted_topics_means_no_rewrite() {
    for version in VERSIONS {
        let mut r = response(version, plain());
        r.responses[0].partitions.truncate(3); // drop p3 (only a barrier)
        let f = frame(version, &r);
        assert_eq!(
            hide_barriers_in_fetch(&f, version, &wants_orders(version)).unwrap(),
            None,
            "v{version}: only the unwanted topic has barriers"
        );
        assert_eq!(
            hide_barriers_in_fetch(&f, version, &|_, _| false).unwrap(),
            None
        );
        // Wanting every topic finds the barriers of `other`.
        let (_, hidden) = hide_barriers_in_fetch(&f, version, &|_, _| true)
            .unwrap()
            .unwrap();
        assert_eq!(hidden, 2);
    }
}

#[test]
fn a_barrier_with_a_bad_crc_is_left_alone() {
    let version = 12;
    let mut corrupt = barrier_at(3);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff; // in the value, covered by the CRC
    let mut records = data_batch(0, 3);
    records.extend(&corrupt);
    let mut r = response(version, Bytes::from(records));
    r.responses[0].partitions.truncate(3);
    let f = frame(version, &r);
    assert_eq!(
        hide_barriers_in_fetch(&f, version, &wants_orders(version)).unwrap(),
        None
    );
}

#[test]
fn bad_frames_are_errors() {
    let f = frame(12, &response(12, with_two_barriers()));
    assert!(hide_barriers_in_fetch(&f, 3, &|_, _| true).is_err());
    assert!(hide_barriers_in_fetch(&f, 19, &|_, _| true).is_err());
    for cut in 0..f.len() - 1 {
        let mut b = f[..cut].to_vec();
        if cut >= 4 {
            let len = (cut - 4) as i32;
            b[0..4].copy_from_slice(&len.to_be_bytes());
        }
        assert!(
            hide_barriers_in_fetch(&Bytes::from(b), 12, &|_, _| true).is_err(),
            "cut {cut}"
        );
    }
    let mut wrong_prefix = f.to_vec();
    wrong_prefix[3] ^= 1;
    assert!(hide_barriers_in_fetch(&Bytes::from(wrong_prefix), 12, &|_, _| true).is_err());
}

#[test]
fn a_tag_kafka_protocol_cannot_write_back_is_refused() {
    let version = 16;
    let mut r = response(version, with_two_barriers());
    r.responses[0].partitions[0]
        .aborted_transactions
        .as_mut()
        .unwrap()[0]
        .unknown_tagged_fields
        .insert(5, Bytes::from_static(b"MARK"));
    let f = frame(version, &r);
    // Rewrite tag 5 as 2^31 + 5 (a 5-byte varint), which decodes to a negative `i32` key.
    let at = f
        .windows(6)
        .position(|w| w == [5, 4, b'M', b'A', b'R', b'K'])
        .unwrap();
    let mut b = f[..at].to_vec();
    b.extend_from_slice(&[0x85, 0x80, 0x80, 0x80, 0x08]);
    b.extend_from_slice(&f[at + 1..]);
    let len = (b.len() - 4) as i32;
    b[0..4].copy_from_slice(&len.to_be_bytes());
    let b = Bytes::from(b);
    let mut body = b.slice(4..);
    ResponseHeader::decode(&mut body, ApiKey::Fetch.response_header_version(version)).unwrap();
    let decoded = FetchResponse::decode(&mut body, version).unwrap();
    assert!(decoded.responses[0].partitions[0]
        .aborted_transactions
        .as_ref()
        .unwrap()[0]
        .unknown_tagged_fields
        .contains_key(&(0x8000_0005u32 as i32)));
    let err = hide_barriers_in_fetch(&b, version, &|_, _| true).unwrap_err();
    assert!(err.to_string().contains("2^31"), "{err}");
    // Without a barrier to hide, the frame is passed on untouched.
    assert_eq!(
        hide_barriers_in_fetch(&b, version, &|_, _| false).unwrap(),
        None
    );
}

#[test]
fn trailing_bytes_are_refused_when_rewriting() {
    let version = 12;
    let f = frame(version, &response(version, with_two_barriers()));
    let mut b = f.to_vec();
    b.extend_from_slice(b"junk");
    let len = (b.len() - 4) as i32;
    b[0..4].copy_from_slice(&len.to_be_bytes());
    assert!(hide_barriers_in_fetch(&Bytes::from(b), version, &|_, _| true).is_err());
}

// --- recompressed barriers (review F7 a) ---

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// The barrier at `base_offset` as a broker stores it for a topic compressed with `codec`.
fn recompressed_barrier_at(codec: Compression, base_offset: i64) -> Vec<u8> {
    crate::protocol::barrier::recompressed_barrier_for_tests(&barrier_value(), codec, base_offset)
}

/// data(0..3), recompressed barrier(3), data(4..6)
fn with_recompressed_barrier(codec: Compression) -> Bytes {
    let mut v = data_batch(0, 3);
    v.extend(recompressed_barrier_at(codec, 3));
    v.extend(data_batch(4, 2));
    Bytes::from(v)
}

#[test]
fn recompressed_barriers_are_hidden_in_fetch_responses_of_every_version() {
    for codec in CODECS {
        for version in VERSIONS {
            let records = with_recompressed_barrier(codec);
            let original = response(version, records.clone());
            let f = frame(version, &original);
            let (new, hidden) = hide_barriers_in_fetch(&f, version, &wants_orders(version))
                .unwrap()
                .unwrap_or_else(|| panic!("{codec:?} v{version}: the barrier was not hidden"));
            assert_eq!(hidden, 2, "{codec:?} v{version}: p0 and p3");
            let (_, got) = decode(version, &new);
            let p0 = got.responses[0].partitions[0].records.clone().unwrap();
            assert_eq!(count_barriers(&p0), 0, "{codec:?} v{version}");
            let mut b = p0.clone();
            let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut b).unwrap();
            let offsets: Vec<(i64, bool)> = sets
                .iter()
                .flat_map(|s| s.records.iter().map(|r| (r.offset, r.control)))
                .collect();
            assert_eq!(
                offsets,
                vec![
                    (0, false),
                    (1, false),
                    (2, false),
                    (3, true),
                    (4, false),
                    (5, false)
                ],
                "{codec:?} v{version}"
            );
            // The unwanted topic keeps its barriers, byte for byte.
            assert_eq!(
                got.responses[1].partitions[0].records,
                Some(with_two_barriers())
            );
        }
    }
}

// --- ShareFetch (review F7 b) ---

use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, NodeEndpoint as ShareNodeEndpoint, PartitionData as SharePartition,
    ShareFetchableTopicResponse,
};

fn share_versions() -> std::ops::RangeInclusive<i16> {
    SHARE_FETCH_VERSIONS.0..=SHARE_FETCH_VERSIONS.1
}

fn share_partition(index: i32, records: Option<Bytes>, last: i64) -> SharePartition {
    let mut p = SharePartition::default();
    p.partition_index = index;
    p.current_leader.leader_id = 2;
    p.current_leader.leader_epoch = 5;
    p.records = records;
    let mut a = AcquiredRecords::default();
    a.first_offset = 0;
    a.last_offset = last;
    a.delivery_count = 1;
    p.acquired_records = vec![a];
    p
}

/// topic 1 (wanted): p0 `p0`, p1 plain, p2 null records, p3 only a barrier;
/// topic 2 (unwanted): p0 two barriers.
fn share_response(p0: Bytes) -> ShareFetchResponse {
    let mut orders = ShareFetchableTopicResponse::default();
    orders.topic_id = Uuid::from_u128(1);
    orders.partitions = vec![
        share_partition(0, Some(p0), 6),
        share_partition(1, Some(plain()), 4),
        share_partition(2, None, -1),
        share_partition(3, Some(only_barrier()), 10),
    ];
    let mut other = ShareFetchableTopicResponse::default();
    other.topic_id = Uuid::from_u128(2);
    other.partitions = vec![share_partition(0, Some(with_two_barriers()), 6)];
    let mut r = ShareFetchResponse::default();
    r.throttle_time_ms = 1;
    r.acquisition_lock_timeout_ms = 30_000;
    r.responses = vec![orders, other];
    let mut n = ShareNodeEndpoint::default();
    n.node_id = BrokerId(2);
    n.host = StrBytes::from_static_str("broker-2.internal");
    n.port = 9092;
    r.node_endpoints = vec![n];
    r
}

fn share_frame(version: i16, resp: &ShareFetchResponse) -> Bytes {
    let mut h = ResponseHeader::default();
    h.correlation_id = CORR;
    let mut out = BytesMut::new();
    out.put_i32(0);
    h.encode(
        &mut out,
        ApiKey::ShareFetch.response_header_version(version),
    )
    .unwrap();
    resp.encode(&mut out, version).unwrap();
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

fn share_decode(version: i16, frame: &Bytes) -> (ResponseHeader, ShareFetchResponse) {
    let prefix = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    assert_eq!(prefix as usize, frame.len() - 4);
    let mut body = frame.slice(4..);
    let h = ResponseHeader::decode(
        &mut body,
        ApiKey::ShareFetch.response_header_version(version),
    )
    .unwrap();
    let r = ShareFetchResponse::decode(&mut body, version).unwrap();
    assert!(body.is_empty());
    (h, r)
}

fn wants_topic_1(id: Uuid) -> bool {
    id == Uuid::from_u128(1)
}

#[test]
fn kafka_protocol_reads_share_fetch_v1() {
    // What the gateway can read decides what it offers (versions.rs); Kafka 4.1 serves v1.
    assert!(share_versions().contains(&1));
}

#[test]
fn barriers_of_wanted_topics_are_hidden_in_share_fetch_responses() {
    let mut p0s = vec![("uncompressed", with_two_barriers(), 3)];
    for codec in CODECS {
        p0s.push(("recompressed", with_recompressed_barrier(codec), 2));
    }
    for version in share_versions() {
        for (what, p0, want_hidden) in &p0s {
            let original = share_response(p0.clone());
            let f = share_frame(version, &original);
            let (new, hidden) = hide_barriers_in_share_fetch(&f, version, &wants_topic_1)
                .unwrap()
                .unwrap_or_else(|| panic!("v{version} {what}: expected a rewrite"));
            assert_eq!(hidden, *want_hidden, "v{version} {what}");
            let (h, got) = share_decode(version, &new);
            assert_eq!(h.correlation_id, CORR);
            let mut want = original.clone();
            want.responses[0].partitions[0].records = hide_barriers(p0);
            want.responses[0].partitions[3].records = hide_barriers(&only_barrier());
            // Everything else is kept: acquired ranges, leaders, node endpoints, the
            // unwanted topic's barriers.
            assert_eq!(got, want, "v{version} {what}");
            let p0_new = got.responses[0].partitions[0].records.clone().unwrap();
            assert_eq!(count_barriers(&p0_new), 0, "v{version} {what}");
            assert_eq!(
                got.responses[1].partitions[0].records,
                Some(with_two_barriers())
            );
        }
    }
}

#[test]
fn share_fetch_without_a_barrier_in_wanted_topics_is_not_rewritten() {
    for version in share_versions() {
        let mut r = share_response(plain());
        r.responses[0].partitions.truncate(3);
        let f = share_frame(version, &r);
        assert_eq!(
            hide_barriers_in_share_fetch(&f, version, &wants_topic_1).unwrap(),
            None
        );
        assert_eq!(
            hide_barriers_in_share_fetch(&f, version, &|_| false).unwrap(),
            None
        );
        let (_, hidden) = hide_barriers_in_share_fetch(&f, version, &|_| true)
            .unwrap()
            .unwrap();
        assert_eq!(hidden, 2);
    }
}

#[test]
fn bad_share_fetch_frames_are_errors_never_panics() {
    let version = SHARE_FETCH_VERSIONS.1;
    let f = share_frame(version, &share_response(with_two_barriers()));
    assert!(hide_barriers_in_share_fetch(&f, SHARE_FETCH_VERSIONS.0 - 1, &|_| true).is_err());
    assert!(hide_barriers_in_share_fetch(&f, SHARE_FETCH_VERSIONS.1 + 1, &|_| true).is_err());
    for cut in 0..f.len() - 1 {
        let mut b = f[..cut].to_vec();
        if cut >= 4 {
            let len = (cut - 4) as i32;
            b[0..4].copy_from_slice(&len.to_be_bytes());
        }
        assert!(
            hide_barriers_in_share_fetch(&Bytes::from(b), version, &|_| true).is_err(),
            "cut {cut}"
        );
    }
    let mut trailing = f.to_vec();
    trailing.extend_from_slice(b"junk");
    let len = (trailing.len() - 4) as i32;
    trailing[0..4].copy_from_slice(&len.to_be_bytes());
    assert!(hide_barriers_in_share_fetch(&Bytes::from(trailing), version, &|_| true).is_err());
}

// --- which topics are filtered (review F7 c) ---

fn known(id: &uuid::Uuid) -> Option<String> {
    match id.as_u128() {
        1 => Some("orders".into()),
        2 => Some("plain".into()),
        _ => None,
    }
}

fn mirror(name: &str) -> bool {
    name == "orders"
}

#[test]
fn barriers_are_hidden_in_mirror_topics_by_name_and_by_id() {
    let nil = uuid::Uuid::nil();
    assert_eq!(
        barrier_filter("orders", nil, known, mirror),
        BarrierFilter::MirrorTopic("orders".into())
    );
    assert_eq!(
        barrier_filter("", uuid::Uuid::from_u128(1), known, mirror),
        BarrierFilter::MirrorTopic("orders".into())
    );
    assert_eq!(
        barrier_filter("plain", nil, known, mirror),
        BarrierFilter::Other
    );
    assert_eq!(
        barrier_filter("", uuid::Uuid::from_u128(2), known, mirror),
        BarrierFilter::Other
    );
}

#[test]
fn a_topic_id_the_gateway_cannot_name_has_its_barriers_hidden() {
    assert_eq!(
        barrier_filter("", uuid::Uuid::from_u128(3), known, mirror),
        BarrierFilter::UnknownTopicId
    );
    // Even the nil id (never a real topic) is not waved through.
    assert_eq!(
        barrier_filter("", uuid::Uuid::nil(), known, mirror),
        BarrierFilter::UnknownTopicId
    );
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn random_bytes_never_panic(version in 4i16..=18,
                                body in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(&body);
        let _ = hide_barriers_in_fetch(&Bytes::from(f), version, &|_, _| true);
    }

    #[test]
    fn random_share_fetch_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(&body);
        let _ = hide_barriers_in_share_fetch(&Bytes::from(f), SHARE_FETCH_VERSIONS.1, &|_| true);
    }

    #[test]
    fn mutated_share_fetch_responses_never_panic(
        codec in 0usize..4,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let version = SHARE_FETCH_VERSIONS.1;
        let f = share_frame(version, &share_response(with_recompressed_barrier(CODECS[codec])));
        let mut b = f.to_vec();
        for (i, v) in &edits {
            let i = 4 + i.index(b.len() - 4);
            b[i] = *v;
        }
        if let Ok(Some((new, _))) = hide_barriers_in_share_fetch(&Bytes::from(b), version, &|_| true) {
            share_decode(version, &new);
        }
    }

    #[test]
    fn mutated_responses_never_panic(vi in 0usize..VERSIONS.len(),
                                     edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let version = VERSIONS[vi];
        let f = frame(version, &response(version, with_two_barriers()));
        let mut b = f.to_vec();
        for (i, v) in &edits {
            let i = 4 + i.index(b.len() - 4);
            b[i] = *v;
        }
        if let Ok(Some((new, _))) = hide_barriers_in_fetch(&Bytes::from(b), version, &|_, _| true) {
            decode(version, &new);
        }
    }
}
