//! Unit tests of `enforce.rs`.

use super::*;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::RequestHeader;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use uuid::Uuid;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::Encodable;

use crate::protocol::frame::{encode_response, parse_request_header};

const CORR: i32 = 4242;

fn topic_id(t: usize) -> Uuid {
    Uuid::from_u128(0x1000 + t as u128)
}

fn topic_name(t: usize) -> String {
    format!("topic-{t}")
}

/// Records bytes distinct per partition (kafka-protocol treats them as opaque bytes).
fn records(t: usize, p: i32) -> Bytes {
    Bytes::from(
        (0..(61 + t * 7 + p as usize))
            .map(|i| (i * 31 + t * 5 + p as usize) as u8)
            .collect::<Vec<_>>(),
    )
}

/// Three topics: topic-0 (partitions 0, 1, 2), topic-1 (0), topic-2 (0, 1 with null records),
/// plus an empty topic between topic-0 and topic-1.
fn request(version: i16, acks: i16) -> ProduceRequest {
    let mut topics = Vec::new();
    for (t, parts) in [(0usize, 3i32), (1, 1), (2, 2)] {
        let mut td = TopicProduceData::default();
        if version >= 13 {
            td.topic_id = topic_id(t);
        } else {
            td.name = TopicName(StrBytes::from_string(topic_name(t)));
        }
        for p in 0..parts {
            let mut pd = PartitionProduceData::default();
            pd.index = p;
            pd.records = if t == 2 && p == 1 {
                None
            } else {
                Some(records(t, p))
            };
            if version >= 9 && p == 0 {
                pd.unknown_tagged_fields
                    .insert(7, Bytes::from_static(b"part-tag"));
            }
            td.partition_data.push(pd);
        }
        if version >= 9 && t == 1 {
            td.unknown_tagged_fields
                .insert(5, Bytes::from_static(b"topic-tag"));
        }
        topics.push(td);
    }
    let mut empty = TopicProduceData::default();
    if version >= 13 {
        empty.topic_id = topic_id(99);
    } else {
        empty.name = TopicName(StrBytes::from_static_str("empty"));
    }
    topics.insert(1, empty);
    let mut req = ProduceRequest::default();
    req.transactional_id = Some(StrBytes::from_static_str("tx-1").into());
    req.acks = acks;
    req.timeout_ms = 30_000;
    req.topic_data = topics;
    if version >= 9 {
        req.unknown_tagged_fields
            .insert(3, Bytes::from_static(b"req-tag"));
    }
    req
}

/// Whole request frame and its header length.
fn request_frame(version: i16, req: &ProduceRequest) -> (Bytes, usize) {
    let mut h = RequestHeader::default();
    h.request_api_key = ApiKey::Produce as i16;
    h.request_api_version = version;
    h.correlation_id = CORR;
    h.client_id = Some(StrBytes::from_static_str("client-ä"));
    let hv = ApiKey::Produce.request_header_version(version);
    if hv >= 2 {
        h.unknown_tagged_fields
            .insert(9, Bytes::from_static(b"hdr"));
    }
    let mut out = BytesMut::new();
    out.put_i32(0);
    h.encode(&mut out, hv).unwrap();
    req.encode(&mut out, version).unwrap();
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    let frame = out.freeze();
    let info = parse_request_header(&frame[4..]).unwrap();
    (frame, info.header_len)
}

fn decode_request(frame: &Bytes, header_len: usize, version: i16) -> ProduceRequest {
    let prefix = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    assert_eq!(prefix as usize, frame.len() - 4);
    let mut body = frame.slice(4 + header_len..);
    let req = ProduceRequest::decode(&mut body, version).unwrap();
    assert!(body.is_empty());
    req
}

fn decode_resp(frame: &Bytes, version: i16) -> (ResponseHeader, ProduceResponse) {
    let prefix = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    assert_eq!(prefix as usize, frame.len() - 4);
    let mut body = frame.slice(4..);
    let hv = ApiKey::Produce.response_header_version(version);
    let h = ResponseHeader::decode(&mut body, hv).unwrap();
    let r = ProduceResponse::decode(&mut body, version).unwrap();
    assert!(body.is_empty(), "v{version}: trailing bytes");
    (h, r)
}

fn is_topic(t: TopicRef<'_>, n: usize) -> bool {
    match t {
        TopicRef::Name(name) => name == topic_name(n),
        TopicRef::Id(id) => id == topic_id(n),
    }
}

fn rejection(p: i32) -> Rejection {
    Rejection::new(
        87,
        format!("mirror m1 is MIRRORING: partition {p} is read-only"),
    )
}

fn find(resp: &ProduceResponse, version: i16, t: usize) -> Option<&TopicProduceResponse> {
    resp.responses.iter().find(|r| {
        if version >= 13 {
            r.topic_id == topic_id(t)
        } else {
            r.name.0.as_str() == topic_name(t)
        }
    })
}

fn check_error_partition(p: &PartitionProduceResponse, version: i16, code: i16, msg: &str) {
    assert_eq!(p.error_code, code);
    assert_eq!(p.base_offset, -1);
    assert_eq!(p.log_append_time_ms, -1);
    if version >= 5 {
        assert_eq!(p.log_start_offset, -1);
    }
    if version >= 8 {
        assert_eq!(p.error_message.as_ref().map(|m| m.as_str()), Some(msg));
    } else {
        assert_eq!(p.error_message, None);
    }
}

#[test]
fn nothing_rejected_is_forwarded() {
    for version in 3..=13i16 {
        let (frame, hl) = request_frame(version, &request(version, -1));
        let mut calls = 0;
        let d = filter_produce(&frame, hl, version, CORR, &mut |_| {
            calls += 1;
            None
        })
        .unwrap();
        assert_eq!(d, ProduceDecision::Forward, "v{version}");
        assert_eq!(calls, 6, "v{version}: decide called once per partition");
    }
}

#[test]
fn some_rejected_are_removed_and_the_rest_is_identical() {
    for version in 3..=13i16 {
        let original = request(version, -1);
        let (frame, hl) = request_frame(version, &original);
        // Reject topic-0 partition 1 and all of topic-1.
        let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
            let (t, p) = (pp.topic, pp.partition);
            ((is_topic(t, 0) && p == 1) || is_topic(t, 1)).then(|| rejection(p))
        })
        .unwrap();
        let ProduceDecision::Rewritten {
            frame: new,
            rejected,
        } = d
        else {
            panic!("v{version}: expected Rewritten, got {d:?}");
        };
        assert_eq!(
            &new[4..4 + hl],
            &frame[4..4 + hl],
            "v{version}: header bytes"
        );
        let got = decode_request(&new, hl, version);
        let mut want = original.clone();
        want.topic_data[0].partition_data.remove(1);
        want.topic_data.remove(2); // topic-1 (after the empty topic at index 1)
        assert_eq!(got, want, "v{version}");
        // Records are byte-identical.
        assert_eq!(
            got.topic_data[0].partition_data[1].records,
            Some(records(0, 2))
        );
        assert_eq!(rejected.len(), 2);
        for (r, (t, p)) in rejected.iter().zip([(0usize, 1i32), (1, 0)]) {
            if version >= 13 {
                assert_eq!(r.topic, "");
                assert_eq!(r.topic_id, topic_id(t));
            } else {
                assert_eq!(r.topic, topic_name(t));
                assert!(r.topic_id.is_nil());
            }
            assert_eq!(r.partition, p);
            assert_eq!(r.error_code, 87);
            assert_eq!(r.message, rejection(p).message);
        }
        // The rewritten frame's header still parses the same way.
        let info = parse_request_header(&new[4..]).unwrap();
        assert_eq!(info.header_len, hl);
        assert_eq!(info.correlation_id, CORR);
    }
}

#[test]
fn all_rejected_gets_a_synthesized_response() {
    for version in 3..=13i16 {
        let (frame, hl) = request_frame(version, &request(version, -1));
        let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
            Some(rejection(pp.partition))
        })
        .unwrap();
        let ProduceDecision::AllRejected {
            response: Some(resp),
            rejected,
        } = d
        else {
            panic!("v{version}: expected AllRejected with a response, got {d:?}");
        };
        assert_eq!(rejected.len(), 6);
        let (h, r) = decode_resp(&resp, version);
        assert_eq!(h.correlation_id, CORR);
        assert_eq!(r.responses.len(), 3, "v{version}: one entry per topic");
        for (t, parts) in [(0usize, 3i32), (1, 1), (2, 2)] {
            let tr = find(&r, version, t).expect("topic present");
            if version >= 13 {
                assert!(tr.name.0.is_empty());
            } else {
                assert!(tr.topic_id.is_nil());
            }
            assert_eq!(tr.partition_responses.len(), parts as usize);
            for (i, p) in tr.partition_responses.iter().enumerate() {
                assert_eq!(p.index, i as i32);
                check_error_partition(p, version, 87, &rejection(i as i32).message);
            }
        }
    }
}

#[test]
fn all_rejected_with_acks_0_gets_no_response() {
    for version in 3..=13i16 {
        let (frame, hl) = request_frame(version, &request(version, 0));
        let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
            Some(rejection(pp.partition))
        })
        .unwrap();
        assert!(
            matches!(d, ProduceDecision::AllRejected { response: None, ref rejected } if rejected.len() == 6),
            "v{version}: {d:?}"
        );
    }
}

/// The broker's answer to the rewritten request of the test above.
fn broker_response(version: i16) -> ProduceResponse {
    let mut r = ProduceResponse::default();
    r.throttle_time_ms = 12;
    for (t, parts) in [(0usize, vec![0, 2]), (2, vec![0, 1])] {
        let mut tr = TopicProduceResponse::default();
        if version >= 13 {
            tr.topic_id = topic_id(t);
        } else {
            tr.name = TopicName(StrBytes::from_string(topic_name(t)));
        }
        for p in parts {
            let mut pr = PartitionProduceResponse::default();
            pr.index = p;
            pr.base_offset = 100 * (t as i64 + 1) + p as i64;
            pr.log_append_time_ms = -1;
            pr.log_start_offset = if version >= 5 { 7 } else { -1 };
            tr.partition_responses.push(pr);
        }
        r.responses.push(tr);
    }
    r
}

fn response_frame(version: i16, resp: &ProduceResponse) -> Bytes {
    let mut h = ResponseHeader::default();
    h.correlation_id = CORR;
    encode_response(
        &h,
        ApiKey::Produce.response_header_version(version),
        resp,
        version,
        0,
    )
    .unwrap()
}

#[test]
fn merge_adds_rejected_partitions_to_the_broker_response() {
    for version in 3..=13i16 {
        let (frame, hl) = request_frame(version, &request(version, -1));
        let d = filter_produce(&frame, hl, version, CORR, &mut |pp| {
            let (t, p) = (pp.topic, pp.partition);
            ((is_topic(t, 0) && p == 1) || is_topic(t, 1)).then(|| rejection(p))
        })
        .unwrap();
        let ProduceDecision::Rewritten { rejected, .. } = d else {
            panic!("v{version}");
        };
        let broker = broker_response(version);
        let merged =
            merge_rejections(&response_frame(version, &broker), version, &rejected).unwrap();
        let (h, r) = decode_resp(&merged, version);
        assert_eq!(h.correlation_id, CORR);
        assert_eq!(r.throttle_time_ms, 12);
        assert_eq!(r.responses.len(), 3, "v{version}");
        // topic-0: the broker's partitions 0 and 2, then the rejected 1, in one entry.
        let t0 = find(&r, version, 0).unwrap();
        assert_eq!(
            t0.partition_responses[..2],
            broker.responses[0].partition_responses[..]
        );
        assert_eq!(t0.partition_responses.len(), 3);
        assert_eq!(t0.partition_responses[2].index, 1);
        check_error_partition(
            &t0.partition_responses[2],
            version,
            87,
            &rejection(1).message,
        );
        // topic-1: new entry.
        let t1 = find(&r, version, 1).unwrap();
        assert_eq!(t1.partition_responses.len(), 1);
        check_error_partition(
            &t1.partition_responses[0],
            version,
            87,
            &rejection(0).message,
        );
        // topic-2: untouched.
        assert_eq!(find(&r, version, 2).unwrap(), &broker.responses[1]);
    }
}

#[test]
fn rewrite_partition_errors_changes_only_the_chosen_partition() {
    for version in 3..=13i16 {
        let broker = broker_response(version);
        let frame = response_frame(version, &broker);
        let mut seen = Vec::new();
        let out = rewrite_partition_errors(&frame, version, &mut |name, id, p, err, base| {
            seen.push((name.to_owned(), id, p, err, base));
            let is_t2 = if version >= 13 {
                name.is_empty() && id == topic_id(2)
            } else {
                name == topic_name(2) && id.is_nil()
            };
            (is_t2 && p == 1).then(|| (46, "duplicate ack below the barrier".to_owned()))
        })
        .unwrap()
        .expect("changed");
        assert_eq!(seen.len(), 4);
        assert!(seen.contains(&(
            if version >= 13 {
                String::new()
            } else {
                topic_name(2)
            },
            if version >= 13 {
                topic_id(2)
            } else {
                Uuid::nil()
            },
            1,
            0,
            301
        )));
        let (h, r) = decode_resp(&out, version);
        assert_eq!(h.correlation_id, CORR);
        let mut want = broker.clone();
        let p = &mut want.responses[1].partition_responses[1];
        p.error_code = 46;
        p.base_offset = -1;
        p.log_append_time_ms = -1;
        p.log_start_offset = -1;
        if version >= 8 {
            p.error_message = Some(StrBytes::from_static_str("duplicate ack below the barrier"));
        }
        assert_eq!(r, want, "v{version}");

        let none = rewrite_partition_errors(&frame, version, &mut |_, _, _, _, _| None).unwrap();
        assert_eq!(none, None);
    }
}

#[test]
fn bad_arguments_are_errors() {
    let version = 9;
    let (frame, hl) = request_frame(version, &request(version, -1));
    let mut reject_all = |pp: &ProducePartition<'_>| Some(rejection(pp.partition));
    // Wrong version for this frame.
    assert!(filter_produce(&frame, hl, 8, CORR, &mut reject_all).is_err());
    // Unsupported versions.
    assert!(matches!(
        filter_produce(&frame, hl, 2, CORR, &mut reject_all),
        Err(EnforceError::UnsupportedVersion(2))
    ));
    assert!(merge_rejections(&frame, 14, &[]).is_err());
    // Header length past the end.
    assert!(filter_produce(&frame, frame.len(), version, CORR, &mut reject_all).is_err());
    assert!(filter_produce(&frame, usize::MAX, version, CORR, &mut reject_all).is_err());
    // Wrong length prefix.
    let mut bad = frame.to_vec();
    bad[3] ^= 1;
    assert!(filter_produce(&Bytes::from(bad), hl, version, CORR, &mut reject_all).is_err());
    // Truncated at every cut: never a panic, and an error once the body is cut.
    for cut in 4 + hl..frame.len() - 1 {
        let mut b = frame[..cut].to_vec();
        let len = (cut - 4) as i32;
        b[0..4].copy_from_slice(&len.to_be_bytes());
        let b = Bytes::from(b);
        assert!(
            filter_produce(&b, hl, version, CORR, &mut |pp| is_topic(pp.topic, 0)
                .then(|| rejection(pp.partition)))
            .is_err(),
            "cut {cut}"
        );
    }
    // Empty and tiny frames.
    for f in [&b""[..], &[0, 0, 0, 0], &[0, 0, 0, 1, 0]] {
        let f = Bytes::copy_from_slice(f);
        assert!(filter_produce(&f, 0, version, CORR, &mut reject_all).is_err());
        assert!(merge_rejections(&f, version, &[]).is_err());
        assert!(rewrite_partition_errors(&f, version, &mut |_, _, _, _, _| None).is_err());
    }
}

/// Replaces the one-byte tag number in front of `[size, marker..]` by 2^31 + tag, which
/// kafka-protocol decodes to a negative key it would not write back.
fn with_huge_tag(frame: &Bytes, tag: u8, marker: &[u8]) -> Bytes {
    let mut needle = vec![tag, marker.len() as u8];
    needle.extend_from_slice(marker);
    let at = frame
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("marker present");
    let mut b = frame[..at].to_vec();
    b.extend_from_slice(&[0x80 | tag, 0x80, 0x80, 0x80, 0x08]);
    b.extend_from_slice(&frame[at + 1..]);
    let len = (b.len() - 4) as i32;
    b[0..4].copy_from_slice(&len.to_be_bytes());
    Bytes::from(b)
}

#[test]
fn what_cannot_be_re_encoded_faithfully_is_refused() {
    let version = 11;
    let reject_t1 =
        &mut |pp: &ProducePartition<'_>| is_topic(pp.topic, 1).then(|| rejection(pp.partition));
    // Trailing bytes after the request.
    let (frame, hl) = request_frame(version, &request(version, -1));
    let mut b = frame.to_vec();
    b.extend_from_slice(b"junk");
    let len = (b.len() - 4) as i32;
    b[0..4].copy_from_slice(&len.to_be_bytes());
    let b = Bytes::from(b);
    let err = filter_produce(&b, hl, version, CORR, reject_t1).unwrap_err();
    assert!(err.to_string().contains("4 bytes after"), "{err}");
    // A partition-level tag number of 2^31 or more (tag 7 carries "part-tag").
    let huge = with_huge_tag(&frame, 7, b"part-tag");
    let err = filter_produce(&huge, hl, version, CORR, reject_t1).unwrap_err();
    assert!(err.to_string().contains("2^31"), "{err}");
    // ... but a request the gateway does not rewrite is forwarded as it is.
    assert_eq!(
        filter_produce(&huge, hl, version, CORR, &mut |_| None).unwrap(),
        ProduceDecision::Forward
    );
    // The same in a response.
    let mut broker = broker_response(version);
    broker.responses[0].partition_responses[0]
        .unknown_tagged_fields
        .insert(6, Bytes::from_static(b"resp-tag"));
    let resp = with_huge_tag(&response_frame(version, &broker), 6, b"resp-tag");
    let err = merge_rejections(&resp, version, &[]).unwrap_err();
    assert!(err.to_string().contains("2^31"), "{err}");
    assert!(
        rewrite_partition_errors(&resp, version, &mut |_, _, _, _, _| Some((1, "x".into())))
            .is_err()
    );
    // Unchanged, the broker's tag is written back.
    let ok = response_frame(version, &broker);
    let merged = merge_rejections(&ok, version, &[]).unwrap();
    assert_eq!(decode_resp(&merged, version).1, broker);
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A frame: valid Produce request header for `version`, then `body`.
fn frame_with_body(version: i16, body: &[u8]) -> (Bytes, usize) {
    let (frame, hl) = request_frame(version, &ProduceRequest::default());
    let mut out = frame[..4 + hl].to_vec();
    out.extend_from_slice(body);
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    (Bytes::from(out), hl)
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn random_request_bodies_never_panic(version in 3i16..=13,
                                         body in proptest::collection::vec(any::<u8>(), 0..400),
                                         mask in any::<u32>()) {
        let (frame, hl) = frame_with_body(version, &body);
        let mut n = 0u32;
        let _ = filter_produce(&frame, hl, version, CORR, &mut |pp| {
            n += 1;
            (mask & (1 << (n % 32)) != 0).then(|| rejection(pp.partition))
        });
    }

    #[test]
    fn mutated_requests_never_panic(version in 3i16..=13,
                                    edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                                    cut in any::<prop::sample::Index>(),
                                    mask in any::<u32>()) {
        let (frame, hl) = request_frame(version, &request(version, -1));
        let mut body = frame[4 + hl..].to_vec();
        for (i, b) in &edits {
            let i = i.index(body.len());
            body[i] = *b;
        }
        body.truncate(cut.index(body.len() + 1).max(body.len() / 2));
        let (frame, hl) = frame_with_body(version, &body);
        let mut n = 0u32;
        let r = filter_produce(&frame, hl, version, CORR, &mut |pp| {
            n += 1;
            (mask & (1 << (n % 32)) != 0).then(|| rejection(pp.partition))
        });
        if let Ok(ProduceDecision::Rewritten { frame: new, .. }) = r {
            // Whatever came out is a request the decoder reads back.
            decode_request(&new, hl, version);
        }
    }

    #[test]
    fn random_responses_never_panic(version in 3i16..=13,
                                    body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(&body);
        let f = Bytes::from(f);
        let rej = [RejectedPartition {
            topic: "t".into(),
            topic_id: Uuid::from_u128(1),
            partition: 0,
            error_code: 87,
            message: "read-only".into(),
            log_start_offset: -1,
        }];
        let _ = merge_rejections(&f, version, &rej);
        let _ = rewrite_partition_errors(&f, version, &mut |_, _, _, _, _| Some((1, "x".into())));
    }
}
