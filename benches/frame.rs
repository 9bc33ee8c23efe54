//! Micro-benchmarks of the per-request hot path: header peek, produce acks peek, and the
//! frame read + forward loop over an in-memory stream.

use std::hint::black_box;

use bytes::{BufMut, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};
use mirrorgate::protocol::frame::{parse_request_header, read_frame};
use mirrorgate::protocol::produce::peek_acks;

fn produce_frame(payload: usize) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(11)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("bench-client")))
        .encode(&mut out, ApiKey::Produce.request_header_version(11))
        .expect("header");
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30000)
        .encode(&mut out, 11)
        .expect("body");
    out.extend_from_slice(&vec![7u8; payload]);
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.to_vec()
}

fn bench_peek(c: &mut Criterion) {
    let frame = produce_frame(16 * 1024);
    c.bench_function("parse_request_header", |b| {
        b.iter(|| parse_request_header(black_box(&frame[4..])).expect("ok"))
    });
    let h = parse_request_header(&frame[4..]).expect("ok");
    c.bench_function("peek_produce_acks", |b| {
        b.iter(|| peek_acks(11, black_box(&frame[4 + h.header_len..])).expect("ok"))
    });
}

fn bench_forward(c: &mut Criterion) {
    let frame = produce_frame(16 * 1024);
    let frames = 256;
    let stream: Vec<u8> = (0..frames).flat_map(|_| frame.iter().copied()).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    let mut g = c.benchmark_group("forward");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("read_peek_write_256x16KiB", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut input = &stream[..];
                let mut buf = BytesMut::with_capacity(64 * 1024);
                let mut sink: Vec<u8> = Vec::with_capacity(stream.len());
                while let Some(f) = read_frame(&mut input, &mut buf, 1 << 20)
                    .await
                    .expect("frame")
                {
                    let h = parse_request_header(&f[4..]).expect("header");
                    black_box(h.correlation_id);
                    sink.extend_from_slice(&f);
                }
                black_box(sink.len())
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench_peek, bench_forward);
criterion_main!(benches);
