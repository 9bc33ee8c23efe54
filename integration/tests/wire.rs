//! Raw Kafka request frames for tests that talk to the gateway or a broker byte for byte
//! (pipelining, closing mid-request, crafted producer state).

#![allow(dead_code)]

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// One whole request frame: length prefix, request header (version chosen for `key`/`version`),
/// body.
pub fn request_frame(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &impl Encodable,
) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("mirrorgate-test")))
        .encode(&mut out, key.request_header_version(version))
        .expect("request header encodes");
    body.encode(&mut out, version)
        .expect("request body encodes");
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

/// A Produce request of one batch to one partition (30 s broker timeout).
pub fn produce_request(topic: &str, partition: i32, acks: i16, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(StrBytes::from_string(topic.to_string()).into())
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}
