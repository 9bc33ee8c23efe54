//! Every response rewriter (ApiVersions, Metadata, FindCoordinator, DescribeCluster, Produce
//! v10+, Fetch v16+) at every version it rewrites. The first two bytes choose key and version,
//! the rest is the response body (after the length prefix). Never panics; a rewritten frame is
//! well formed, rewriting it again changes nothing, and no unmapped broker address survives.
//! A Produce response rewritten by the gateway's Produce exchange (one `Edited` decode,
//! `map_produce_endpoints`, one encode) gives the same bytes as `rewrite_response`.
#![no_main]

use kafka_protocol::messages::{
    ApiKey, DescribeClusterResponse, FetchResponse, MetadataResponse, ProduceResponse,
    ResponseHeader,
};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::frame::Edited;
use mirrorgate::protocol::rewrite::{map_produce_endpoints, rewrite_response};
use mirrorgate_fuzz::{choose_rewrite, framed, FixedMap};

fn mapped(id: i32, host: &str, port: i32) -> bool {
    (0..=3).contains(&id) && host == "gw.example" && port == 19092 + id
}

/// Every broker endpoint left in a rewritten frame is one the map serves.
fn check_endpoints(key: ApiKey, version: i16, frame: &bytes::Bytes) {
    let mut body = frame.slice(4..);
    ResponseHeader::decode(&mut body, key.response_header_version(version))
        .expect("rewritten header decodes");
    match key {
        ApiKey::Metadata => {
            let r = MetadataResponse::decode(&mut body, version).expect("rewritten decodes");
            assert!(r
                .brokers
                .iter()
                .all(|b| mapped(b.node_id.0, &b.host, b.port)));
        }
        ApiKey::DescribeCluster => {
            let r = DescribeClusterResponse::decode(&mut body, version).expect("rewritten decodes");
            if version == 0 || r.endpoint_type == 1 {
                assert!(r
                    .brokers
                    .iter()
                    .all(|b| mapped(b.broker_id.0, &b.host, b.port)));
            }
        }
        ApiKey::Produce => {
            let r = ProduceResponse::decode(&mut body, version).expect("rewritten decodes");
            assert!(r
                .node_endpoints
                .iter()
                .all(|b| mapped(b.node_id.0, &b.host, b.port)));
        }
        ApiKey::Fetch => {
            let r = FetchResponse::decode(&mut body, version).expect("rewritten decodes");
            assert!(r
                .node_endpoints
                .iter()
                .all(|b| mapped(b.node_id.0, &b.host, b.port)));
        }
        _ => {}
    }
}

/// Whether `bytes` hold an unsigned varint of 5 or more bytes whose value does not fit in 31
/// bits: a tagged-field number that kafka-protocol keys as a negative `i32` (counted when
/// re-encoding, but not written).
fn has_huge_varint(bytes: &[u8]) -> bool {
    bytes
        .windows(5)
        .any(|w| w[..4].iter().all(|b| b & 0x80 != 0) && w[4] & 0x7f >= 0x08)
}

/// Set `MIRRORGATE_FUZZ_SKIP_NEGATIVE_TAG=1` to keep fuzzing past the known defect that
/// `rewrite_response` re-encodes a response carrying a tagged field numbered 2^31 or more into
/// a malformed frame (see docs/reliability.md); without it such an input fails the target.
fn skip_negative_tag(body: &[u8]) -> bool {
    static SKIP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SKIP.get_or_init(|| std::env::var_os("MIRRORGATE_FUZZ_SKIP_NEGATIVE_TAG").is_some())
        && has_huge_varint(body)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (key, version) = choose_rewrite(data[0], data[1]);
    let frame = framed(&data[2..]);
    let whole = rewrite_response(key, version, &frame, &FixedMap);
    if key == ApiKey::Produce {
        let hv = key.response_header_version(version);
        let mut e = Edited::<ProduceResponse>::new(frame.clone(), hv, version);
        let by_edit = e
            .get()
            .map(|d| d.body.node_endpoints.is_empty())
            .map(|empty| {
                if !empty {
                    e.edit_with(|r| {
                        map_produce_endpoints(r, &FixedMap);
                        true
                    })
                    .expect("decoded");
                }
                e.into_frame().expect("encodes")
            });
        match (&whole, by_edit) {
            (Ok(out), Ok(f)) => assert_eq!(out.frame.as_ref().unwrap_or(&frame), &f),
            (Err(_), Err(_)) => {}
            (w, b) => panic!("Edited and rewrite_response disagree: {w:?} / {b:?}"),
        }
    }
    let Ok(out) = whole else {
        return;
    };
    let Some(new) = out.frame else { return };
    let len = i32::from_be_bytes([new[0], new[1], new[2], new[3]]);
    assert_eq!(len as usize, new.len() - 4, "length prefix");
    if !skip_negative_tag(&data[2..]) {
        check_endpoints(key, version, &new);
    }
    // Idempotent: the gateway's own output passes through unchanged.
    let again = match rewrite_response(key, version, &new, &FixedMap) {
        Ok(again) => again,
        Err(_) if skip_negative_tag(&data[2..]) => return,
        Err(e) => panic!("{key:?} v{version}: rewritten frame does not parse: {e}"),
    };
    if again.unmapped != 0 && skip_negative_tag(&data[2..]) {
        return;
    }
    assert_eq!(
        again.unmapped, 0,
        "{key:?} v{version}: unmapped endpoint after rewriting"
    );
    if let Some(f) = again.frame {
        if f != new && skip_negative_tag(&data[2..]) {
            return;
        }
        assert_eq!(
            f, new,
            "{key:?} v{version}: second rewrite changed the frame"
        );
    }
});
