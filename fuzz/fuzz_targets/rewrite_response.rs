//! Every response rewriter (ApiVersions, Metadata, FindCoordinator, DescribeCluster, Produce
//! v10+, Fetch v16+) at every version it rewrites. The first two bytes choose key and version,
//! the rest is the response body (after the length prefix). Never panics; a rewritten frame is
//! well formed, rewriting it again changes nothing, and no unmapped broker address survives.
#![no_main]

use kafka_protocol::messages::{
    ApiKey, DescribeClusterResponse, FetchResponse, MetadataResponse, ProduceResponse,
    ResponseHeader,
};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::rewrite::rewrite_response;
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
            assert!(r.brokers.iter().all(|b| mapped(b.node_id.0, &b.host, b.port)));
        }
        ApiKey::DescribeCluster => {
            let r = DescribeClusterResponse::decode(&mut body, version).expect("rewritten decodes");
            if version == 0 || r.endpoint_type == 1 {
                assert!(r.brokers.iter().all(|b| mapped(b.broker_id.0, &b.host, b.port)));
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

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (key, version) = choose_rewrite(data[0], data[1]);
    let frame = framed(&data[2..]);
    let Ok(out) = rewrite_response(key, version, &frame, &FixedMap) else {
        return;
    };
    let Some(new) = out.frame else { return };
    let len = i32::from_be_bytes([new[0], new[1], new[2], new[3]]);
    assert_eq!(len as usize, new.len() - 4, "length prefix");
    check_endpoints(key, version, &new);
    // Idempotent: the gateway's own output passes through unchanged.
    let again = rewrite_response(key, version, &new, &FixedMap)
        .unwrap_or_else(|e| panic!("{key:?} v{version}: rewritten frame does not parse: {e}"));
    assert_eq!(again.unmapped, 0);
    if let Some(f) = again.frame {
        assert_eq!(f, new, "{key:?} v{version}: second rewrite changed the frame");
    }
});
