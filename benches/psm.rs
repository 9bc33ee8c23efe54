//! Criterion benchmarks of the producer state and the batch-header walker:
//! - PSM classify + append per batch, steady state, 1,000 producers;
//! - Produce body walk (~1 MiB, 1,000 batches), with and without CRC;
//! - snapshot encode / decode of 10,000 producers.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use mirrorgate::protocol::batch::{single_client_batch, BatchHeader, BATCH_HEADER_SIZE};
use mirrorgate::protocol::produce::ProduceWalker;
use mirrorgate::psm::PartitionPsm;

fn header(pid: i64, seq: i32, count: i32, payload: usize) -> BatchHeader {
    BatchHeader {
        base_offset: 0,
        batch_length: (BATCH_HEADER_SIZE - 12 + payload) as i32,
        partition_leader_epoch: -1,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_000_000,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: seq,
        record_count: count,
    }
}

fn wire_batch(pid: i64, payload: usize) -> Vec<u8> {
    let mut head = [0u8; BATCH_HEADER_SIZE];
    header(pid, 0, 10, payload).write_to(&mut head);
    let mut out = head.to_vec();
    out.extend((0..payload).map(|i| (i * 31) as u8));
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

fn produce_body() -> Vec<u8> {
    let per_batch = (1 << 20) / 1000 - BATCH_HEADER_SIZE - 9;
    let topics = (0..10)
        .map(|t| {
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(format!("topic-{t}"))))
                .with_partition_data(
                    (0..100)
                        .map(|p| {
                            PartitionProduceData::default()
                                .with_index(p)
                                .with_records(Some(Bytes::from(wire_batch(
                                    i64::from(t * 100 + p),
                                    per_batch,
                                ))))
                        })
                        .collect(),
                )
        })
        .collect();
    let mut buf = BytesMut::new();
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(topics)
        .encode(&mut buf, 9)
        .expect("encode");
    buf.to_vec()
}

fn walk(body: &[u8], crc: bool) -> usize {
    let mut n = 0;
    for p in ProduceWalker::new(9, body).expect("walker") {
        let records = p.expect("partition").records.expect("records");
        let (h, _) = single_client_batch(records, crc).expect("batch");
        n += h.record_count as usize;
    }
    n
}

fn steady_psm(producers: i64) -> (PartitionPsm, i64) {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    for seq in 0..5 {
        for pid in 0..producers {
            psm.append(&header(pid, seq, 1, 0), off).expect("append");
            off += 1;
        }
    }
    (psm, off)
}

fn bench_psm(c: &mut Criterion) {
    let producers = 1000i64;
    let (mut psm, mut off) = steady_psm(producers);
    let mut seq = 5;
    let mut pid = 0i64;
    let mut g = c.benchmark_group("psm");
    g.throughput(Throughput::Elements(1));
    g.bench_function("classify_append_1000_producers", |b| {
        b.iter(|| {
            let h = header(pid, seq, 1, 0);
            black_box(psm.classify(black_box(&h)));
            let a = psm.append(&h, off).expect("in sequence");
            off = a.last_offset + 1;
            pid += 1;
            if pid == producers {
                pid = 0;
                seq += 1;
            }
        })
    });
    g.finish();
}

fn bench_walk(c: &mut Criterion) {
    let body = produce_body();
    let mut g = c.benchmark_group("walk");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("produce_1mib_1000_batches", |b| {
        b.iter(|| walk(black_box(&body), false))
    });
    g.bench_function("produce_1mib_1000_batches_crc", |b| {
        b.iter(|| walk(black_box(&body), true))
    });
    g.finish();
}

fn bench_snapshot(c: &mut Criterion) {
    let (psm, off) = steady_psm(10_000);
    let bytes = psm.encode_snapshot(off);
    let mut g = c.benchmark_group("snapshot");
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("encode_10000_producers", |b| {
        b.iter(|| psm.encode_snapshot(black_box(off)))
    });
    g.bench_function("decode_10000_producers", |b| {
        b.iter(|| PartitionPsm::decode_snapshot(black_box(&bytes)).expect("decode"))
    });
    g.finish();
}

criterion_group!(benches, bench_psm, bench_walk, bench_snapshot);
criterion_main!(benches);
