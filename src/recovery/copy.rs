//! Reading a partition's tail, and copying its recoverable records into the quarantine
//! partition exactly once, whoever copies and however often a copy is cut short.
//!
//! Exactly once rests on the broker's own producer state, with one producer id per recovery
//! (the same for every copier: InitProducerId of a transactional id named after the failover)
//! and a higher epoch for each copier:
//! 1. the copier writes an ABORT marker with its epoch into the quarantine partition: from then
//!    on the broker refuses every write of an earlier copier (a paused or killed one whose
//!    request is still in flight) — `INVALID_PRODUCER_EPOCH`;
//! 2. it reads the quarantine partition up to its high watermark (the marker is below it, so is
//!    every write that beat the marker) and finds the last source offset recovered;
//! 3. it copies the records after it, one batch per source batch (cut at [`MAX_COPY_BATCH`]
//!    bytes), with sequences from 0: a batch resent after a lost answer is a duplicate the
//!    broker drops;
//! 4. it reads the quarantine partition again: count and checksum of the recovered records
//!    against the source's.
//!
//! Owns: those steps over [`RecoveryIo`]. Must not touch: reports, metrics, the admin API.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use super::tail::{provenance_of, with_provenance, Digest, Origin, Tail, TailScan};
use super::{ProduceAnswer, RecoveryError, RecoveryIo};
use crate::protocol::batch::{BatchHeader, BatchWalker};
use crate::protocol::records::{self, encode_idempotent, encoded_len, Producer, StoredRecord};

/// Largest batch a copier writes (the source's batch decompressed, plus provenance headers);
/// under a broker's default `max.message.bytes` of 1 MiB.
pub const MAX_COPY_BATCH: usize = 512 * 1024;

/// Retries of one batch whose answer was lost or retriable.
const PRODUCE_ATTEMPTS: u32 = 8;

/// Fetches that return nothing before the log end are given up after this many.
const EMPTY_FETCHES: u32 = 20;

/// Every batch of `topic`/`partition` of one side from `from` to `end`, in order.
async fn each_batch<I: RecoveryIo>(
    io: &I,
    quarantine: bool,
    topic: &str,
    partition: i32,
    from: i64,
    end: i64,
    mut f: impl FnMut(&BatchHeader, &Bytes) -> Result<(), RecoveryError>,
) -> Result<(), RecoveryError> {
    let mut offset = from;
    let mut empty = 0;
    while offset < end {
        let data = if quarantine {
            io.quarantine_batches(topic, partition, offset).await?
        } else {
            io.source_batches(topic, partition, offset).await?
        };
        let before = offset;
        let mut pos = 0usize;
        for item in BatchWalker::fetched(&data) {
            let (h, _) = item.map_err(|e| RecoveryError::Malformed {
                topic: topic.to_string(),
                partition,
                why: e.to_string(),
            })?;
            let at = pos;
            pos += h.total_size();
            if h.last_offset() < offset {
                continue;
            }
            if h.base_offset >= end {
                return Ok(());
            }
            f(&h, &data.slice(at..pos))?;
            offset = h.last_offset() + 1;
        }
        if offset == before {
            empty += 1;
            if empty >= EMPTY_FETCHES {
                return Err(RecoveryError::Io(format!(
                    "{topic}-{partition}: no batch at offset {offset} although the log ends at {end}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The tail of `topic`/`partition` after source offset `from` (the failover's last mirrored
/// offset + 1), with the transactions the failover aborted on the destination (`aborted`:
/// producer id and first source offset), classified. Read-only.
pub async fn scan<I: RecoveryIo>(
    io: &I,
    topic: &str,
    partition: i32,
    from: i64,
    aborted: &[(i64, i64)],
) -> Result<Tail, RecoveryError> {
    let (log_start, log_end) = io.source_bounds(topic, partition).await?;
    let mut s = TailScan::new(topic, partition, from, log_start, log_end)
        .reaching_back(aborted.iter().copied());
    let start = s.start();
    each_batch(io, false, topic, partition, start, log_end, |h, b| {
        s.push(h, b).map_err(|e| RecoveryError::Malformed {
            topic: topic.to_string(),
            partition,
            why: e.to_string(),
        })
    })
    .await?;
    Ok(s.finish())
}

/// What the quarantine partition holds of one failover's recovery of one source partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Recovered {
    /// The last source offset recovered.
    pub last_source_offset: Option<i64>,
    pub digest: Digest,
}

/// Read the quarantine partition (`None` bounds: the topic does not exist yet) for the records
/// of failover `failover_id` from source `source_topic`/`source_partition`.
pub async fn recovered<I: RecoveryIo>(
    io: &I,
    quarantine: &str,
    partition: i32,
    failover_id: &str,
    source: (&str, i32),
) -> Result<Recovered, RecoveryError> {
    let Some((start, end)) = io.quarantine_bounds(quarantine, partition).await? else {
        return Ok(Recovered::default());
    };
    let mut out = Recovered::default();
    let (topic, sp) = source;
    each_batch(io, true, quarantine, partition, start, end, |h, b| {
        if h.is_control() {
            return Ok(());
        }
        let recs = records::decode(b).map_err(|e| RecoveryError::Malformed {
            topic: quarantine.to_string(),
            partition,
            why: e.to_string(),
        })?;
        for r in &recs {
            let Some(pv) = provenance_of(r) else {
                continue;
            };
            if pv.failover_id == failover_id && pv.topic == topic && pv.partition == sp {
                out.last_source_offset = Some(pv.offset);
                out.digest.add(&pv.original);
            }
        }
        Ok(())
    })
    .await?;
    Ok(out)
}

/// One partition's copy.
#[derive(Debug, Clone)]
pub struct CopyJob<'a> {
    pub failover_id: &'a str,
    pub source_topic: &'a str,
    pub source_partition: i32,
    pub quarantine_topic: &'a str,
    /// The copier's producer (id and epoch; sequences are this module's).
    pub producer: (i64, i16),
    pub tail: &'a Tail,
}

/// What a copy did and found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CopyOutcome {
    /// Recovered before this copy (an earlier, cut-short copy).
    pub already_recovered: i64,
    /// Copied by this copy.
    pub copied: i64,
    /// Resent after a lost answer (the broker kept one).
    pub resent_batches: u32,
    /// The source's recoverable records and the quarantine's recovered ones of this failover.
    pub source: Digest,
    pub quarantine: Digest,
    /// Both the same: every recoverable record is there once, in order.
    pub verified: bool,
}

/// Copy one partition's recoverable records (see the module doc).
pub async fn copy<I: RecoveryIo>(io: &I, job: CopyJob<'_>) -> Result<CopyOutcome, RecoveryError> {
    walk(io, job, true).await
}

/// Compare, without writing anything, the partition's recoverable records on the source with
/// those of the quarantine partition (`producer` of `job` unused).
pub async fn verify<I: RecoveryIo>(io: &I, job: CopyJob<'_>) -> Result<CopyOutcome, RecoveryError> {
    walk(io, job, false).await
}

/// Read the source's tail, digesting every recoverable record; with `write`, fence earlier
/// copiers first and copy what the quarantine partition lacks.
async fn walk<I: RecoveryIo>(
    io: &I,
    job: CopyJob<'_>,
    write: bool,
) -> Result<CopyOutcome, RecoveryError> {
    let (q, p) = (job.quarantine_topic, job.source_partition);
    let source = (job.source_topic, job.source_partition);
    if write {
        io.fence(q, p, job.producer).await?;
    }
    let before = recovered(io, q, p, job.failover_id, source).await?;
    let mut out = CopyOutcome {
        already_recovered: before.digest.records,
        ..CopyOutcome::default()
    };
    let s = &job.tail.summary;
    let resume_after = if write {
        before.last_source_offset.unwrap_or(i64::MIN)
    } else {
        i64::MAX
    };
    let mut sequence = 0i32;
    let mut pending: Vec<(BatchHeader, Bytes)> = Vec::new();
    let start = job.tail.start();
    // Batches are collected, then copied in order after the walk (the walk's closure is not
    // async); at most a fetch's worth at a time.
    let mut offset = start;
    while offset < s.log_end_offset {
        pending.clear();
        let mut next = offset;
        let mut stop = false;
        let data = io.source_batches(job.source_topic, p, offset).await?;
        let mut pos = 0usize;
        for item in BatchWalker::fetched(&data) {
            let (h, _) = item.map_err(|e| RecoveryError::Malformed {
                topic: job.source_topic.to_string(),
                partition: p,
                why: e.to_string(),
            })?;
            let at = pos;
            pos += h.total_size();
            if h.base_offset >= s.log_end_offset {
                stop = true;
                break;
            }
            if h.last_offset() < offset {
                continue;
            }
            pending.push((h, data.slice(at..at + h.total_size())));
            next = h.last_offset() + 1;
        }
        for (h, b) in &pending {
            if h.is_control()
                || job.tail.excluded.contains(&h.base_offset)
                || !job.tail.holds(h.base_offset, h.last_offset())
            {
                continue;
            }
            let recs = records::decode(b).map_err(|e| RecoveryError::Malformed {
                topic: job.source_topic.to_string(),
                partition: p,
                why: e.to_string(),
            })?;
            let origin = Origin {
                failover_id: job.failover_id,
                topic: job.source_topic,
                partition: p,
                producer_id: h.producer_id,
                producer_epoch: h.producer_epoch,
            };
            let mut chunk: Vec<StoredRecord> = Vec::new();
            let mut size = 0usize;
            for r in recs
                .iter()
                .filter(|r| job.tail.holds(h.base_offset, r.offset))
            {
                out.source.add(r);
                if r.offset <= resume_after {
                    continue;
                }
                let c = with_provenance(r, origin);
                let len = encoded_len(&c);
                if !chunk.is_empty() && size + len > MAX_COPY_BATCH {
                    write_chunk(io, &job, &mut chunk, &mut sequence, &mut out).await?;
                    size = 0;
                }
                size += len;
                chunk.push(c);
            }
            write_chunk(io, &job, &mut chunk, &mut sequence, &mut out).await?;
        }
        if stop || next == offset {
            if next == offset && !stop {
                return Err(RecoveryError::Io(format!(
                    "{}-{p}: no batch at offset {offset} although the log ends at {}",
                    job.source_topic, s.log_end_offset
                )));
            }
            break;
        }
        offset = next;
    }
    let after = if write {
        recovered(io, q, p, job.failover_id, source).await?
    } else {
        before
    };
    out.quarantine = after.digest;
    out.verified = out.quarantine == out.source;
    Ok(out)
}

/// Write `chunk` (emptied) as one batch with the next sequences.
async fn write_chunk<I: RecoveryIo>(
    io: &I,
    job: &CopyJob<'_>,
    chunk: &mut Vec<StoredRecord>,
    sequence: &mut i32,
    out: &mut CopyOutcome,
) -> Result<(), RecoveryError> {
    if chunk.is_empty() {
        return Ok(());
    }
    let producer = Producer {
        producer_id: job.producer.0,
        producer_epoch: job.producer.1,
        base_sequence: *sequence,
    };
    let batch = encode_idempotent(chunk, producer).ok_or_else(|| {
        RecoveryError::Io("a batch of the quarantine topic could not be written".into())
    })?;
    let (q, p) = (job.quarantine_topic, job.source_partition);
    let mut last = String::new();
    for attempt in 0..PRODUCE_ATTEMPTS {
        if attempt > 0 {
            out.resent_batches += 1;
            tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
        }
        match io.produce(q, p, batch.clone()).await {
            // 46 DUPLICATE_SEQUENCE_NUMBER: an earlier attempt was appended.
            Ok(ProduceAnswer::Code(0 | 46)) => {
                *sequence =
                    crate::protocol::batch::increment_sequence(*sequence, chunk.len() as i32);
                out.copied += chunk.len() as i64;
                chunk.clear();
                return Ok(());
            }
            // OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: another
            // copier fenced this one.
            Ok(ProduceAnswer::Code(45 | 47 | 90)) => {
                return Err(RecoveryError::Fenced {
                    topic: q.to_string(),
                    partition: p,
                })
            }
            Ok(ProduceAnswer::Code(code)) if crate::client::retry::is_retriable(code) => {
                last = format!("error code {code}");
            }
            Ok(ProduceAnswer::Code(code)) => {
                return Err(RecoveryError::Refused {
                    topic: q.to_string(),
                    partition: p,
                    code,
                })
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(RecoveryError::Io(format!(
        "{q}-{p}: a batch was not acknowledged after {PRODUCE_ATTEMPTS} attempts ({last}); \
         call the recovery again: it continues where the quarantine topic ends"
    )))
}
