//! `mirrorgate-bench psm`: producer-state and batch-walker micro-figures, measured with
//! `std::time::Instant` (warm-up, several repetitions, median). No cluster needed.
//!
//! - `ns_per_batch`: `PartitionPsm::classify` + `append` per batch, steady state, 1,000
//!   producers each with five cached batches, round-robin, in-sequence batches.
//! - `walk_mib_per_s` / `walk_crc_mib_per_s`: `ProduceWalker` + `single_client_batch` over a
//!   ~1 MiB Produce v9 body with 1,000 partitions of one ~1 KiB batch each, CRC off / on.
//! - `bytes_per_producer`: `PartitionPsm::memory_bytes() / producers` for 1,000 and 10,000
//!   producers. `memory_bytes` adds the entry vector's capacity × `size_of::<ProducerEntry>()`
//!   and the id→slot map's table (power-of-two buckets at 7/8 load, each a 12-byte
//!   `(i64, u32)` slot padded to 16 plus one control byte); no allocator hooks.

use std::hint::black_box;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use mirrorgate::protocol::batch::{single_client_batch, BatchHeader, BATCH_HEADER_SIZE};
use mirrorgate::protocol::produce::ProduceWalker;
use mirrorgate::psm::{PartitionPsm, ProducerEntry};

use super::median;

pub fn header(pid: i64, seq: i32, count: i32, payload: usize) -> BatchHeader {
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

/// A Produce v9 body of about 1 MiB: 10 topics × 100 partitions, one batch each.
pub fn produce_body() -> Vec<u8> {
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
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(topics);
    let mut buf = BytesMut::new();
    req.encode(&mut buf, 9).expect("encode produce");
    buf.to_vec()
}

/// Walks the body; returns the number of batches.
pub fn walk(body: &[u8], crc: bool) -> Result<usize, String> {
    let mut n = 0;
    for p in ProduceWalker::new(9, body).map_err(|e| e.to_string())? {
        let p = p.map_err(|e| e.to_string())?;
        let records = p.records.ok_or("null records")?;
        let (h, _) = single_client_batch(records, crc).map_err(|e| e.to_string())?;
        n += black_box(h).record_count as usize / 10;
    }
    Ok(n)
}

/// A PSM with `producers` producers, each with five cached single-record batches.
pub fn steady_psm(producers: i64) -> (PartitionPsm, i64) {
    let mut psm = PartitionPsm::new();
    let mut off = 0;
    for seq in 0..5 {
        for pid in 0..producers {
            psm.append(&header(pid, seq, 1, 0), off)
                .expect("warm-up append");
            off += 1;
        }
    }
    (psm, off)
}

/// `rounds` batches per producer through classify + append; returns ns per batch.
fn psm_round(
    psm: &mut PartitionPsm,
    producers: i64,
    next_seq: &mut i32,
    off: &mut i64,
    rounds: i32,
) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..rounds {
        for pid in 0..producers {
            let b = header(pid, *next_seq, 1, 0);
            let v = psm.classify(black_box(&b));
            black_box(v);
            psm.append(&b, *off)
                .map_err(|v| format!("append rejected: {v:?}"))?;
            *off += 1;
        }
        *next_seq += 1;
    }
    Ok(start.elapsed().as_nanos() as f64 / (rounds as f64 * producers as f64))
}

pub fn run(quick: bool) -> Result<serde_json::Value, String> {
    let producers = 1000i64;
    let reps = if quick { 5 } else { 11 };
    let rounds = if quick { 200 } else { 1000 };

    let (mut psm, mut off) = steady_psm(producers);
    let mut next_seq = 5;
    psm_round(&mut psm, producers, &mut next_seq, &mut off, rounds)?; // warm-up
    let mut ns = Vec::new();
    for _ in 0..reps {
        ns.push(psm_round(
            &mut psm,
            producers,
            &mut next_seq,
            &mut off,
            rounds,
        )?);
    }
    let ns_per_batch = median(ns);

    let body = produce_body();
    let mib = body.len() as f64 / (1024.0 * 1024.0);
    let walk_reps = if quick { 20 } else { 100 };
    let rate = |crc: bool| -> Result<f64, String> {
        if walk(&body, crc)? != 1000 {
            return Err("walk did not see 1000 batches".into());
        }
        let mut v = Vec::new();
        for _ in 0..reps {
            let start = Instant::now();
            for _ in 0..walk_reps {
                black_box(walk(black_box(&body), crc)?);
            }
            v.push(mib * walk_reps as f64 / start.elapsed().as_secs_f64());
        }
        Ok(median(v))
    };
    let walk_mib_per_s = rate(false)?;
    let walk_crc_mib_per_s = rate(true)?;

    let bytes_1k = psm.memory_bytes() as f64 / psm.len() as f64;
    let (big, _) = steady_psm(10_000);
    let bytes_10k = big.memory_bytes() as f64 / big.len() as f64;

    Ok(serde_json::json!({
        "ns_per_batch": (ns_per_batch * 10.0).round() / 10.0,
        "walk_mib_per_s": walk_mib_per_s.round(),
        "walk_crc_mib_per_s": walk_crc_mib_per_s.round(),
        "walk_body_bytes": body.len(),
        "walk_batches": 1000,
        "bytes_per_producer": bytes_1k.round(),
        "bytes_per_producer_10k": bytes_10k.round(),
        "entry_size_bytes": std::mem::size_of::<ProducerEntry>(),
        "producers": producers,
        "repetitions": reps,
        "quick": quick,
    }))
}
