//! The source side of the consistent cut (`super::super::cut`): the partitions of the mirror's
//! topics as the source has them, their log ends and last stable offsets, and whether a range of
//! unmirrored source records holds a transactional batch or a marker, read from the batch
//! headers (Fetch, READ_UNCOMMITTED) within a budget per partition and round. A range proven
//! clean is remembered, so a partition the agent lags on is read once, not at every round.
//!
//! Owns: those reads. Must not touch: the cut's decision.

use std::collections::BTreeMap;

use crate::client::mirror_ops;
use crate::client::single_partition_fetch;
use crate::protocol::batch::BatchWalker;

use super::super::io::{IoError, Scan, Tp};
use super::{KafkaGroupIo, Side};

/// Bytes one Fetch of a scan asks for.
const SCAN_FETCH_BYTES: i32 = 1 << 20;
/// The most a round reads of one partition's unmirrored records (the rest stays unknown: the
/// cut then waits for the agent).
const SCAN_MAX_BYTES: usize = 8 << 20;
/// OFFSET_OUT_OF_RANGE.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// What the batches of a fetched chunk say about source records `[pos, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walked {
    /// A transactional batch or a marker lies in the range.
    Found,
    /// No such batch before this offset (the chunk ended there).
    Upto(i64),
}

/// Walk the batches of `records`, fetched from `pos`, up to `to`.
pub(super) fn walk(records: &[u8], mut pos: i64, to: i64) -> Walked {
    for item in BatchWalker::fetched(records) {
        // A batch that cannot be read ends the walk where it starts: not proven.
        let Ok((h, _)) = item else { break };
        if h.last_offset() < pos {
            continue;
        }
        if h.base_offset >= to {
            return Walked::Upto(to);
        }
        if h.is_transactional() || h.is_control() {
            return Walked::Found;
        }
        pos = h.last_offset() + 1;
    }
    Walked::Upto(pos)
}

impl KafkaGroupIo {
    /// The source's metadata of `topics` (every topic with `None`).
    pub(super) async fn source_meta(
        &self,
        topics: Option<&[String]>,
    ) -> Result<mirror_ops::ClusterMeta, IoError> {
        mirror_ops::metadata_of(
            &self.source_connector,
            &self.source.bootstrap,
            self.timeout(Side::Source),
            topics,
        )
        .await
        .map_err(|e| IoError::retriable(e.to_string()))
    }

    /// Every partition of the mirror's topics on the source (internal topics left out).
    pub(super) async fn source_partitions(&self) -> Result<Vec<Tp>, IoError> {
        let meta = self.source_meta(None).await?;
        let mut out: Vec<Tp> = meta
            .topics
            .iter()
            .filter(|(t, m)| {
                !m.internal && !t.starts_with("__") && self.router.mirror_index(t) == Some(self.idx)
            })
            .flat_map(|(t, m)| (0..m.leaders.len() as i32).map(move |p| (t.clone(), p)))
            .collect();
        out.sort();
        Ok(out)
    }

    /// For each `(partition, from, to)`: whether source records `[from, to)` hold a
    /// transactional batch or a marker.
    pub(super) async fn scan(
        &self,
        ranges: &[(Tp, i64, i64)],
    ) -> Result<BTreeMap<Tp, Scan>, IoError> {
        let mut topics: Vec<String> = ranges.iter().map(|((t, _), _, _)| t.clone()).collect();
        topics.sort();
        topics.dedup();
        let meta = self.source_meta(Some(&topics)).await?;
        let mut out = BTreeMap::new();
        for (tp, from, to) in ranges {
            let scan = match meta.leader_addr(&tp.0, tp.1) {
                None => Scan::Unknown,
                Some(addr) => match self.scan_one(&addr, tp, *from, *to).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(topic = %tp.0, partition = tp.1, error = %e, "group sync: cannot read the unmirrored source records");
                        Scan::Unknown
                    }
                },
            };
            out.insert(tp.clone(), scan);
        }
        Ok(out)
    }

    /// Read the batch headers of `[from, to)` of one partition on its leader `addr`, starting
    /// where an earlier scan proved the range clean.
    async fn scan_one(&self, addr: &str, tp: &Tp, from: i64, to: i64) -> Result<Scan, IoError> {
        let mut pos = {
            let clean = self.clean.lock().unwrap_or_else(|e| e.into_inner());
            match clean.get(tp) {
                Some((a, b)) if *a <= from && from <= *b => *b,
                _ => from,
            }
        };
        let mut read = 0usize;
        let scan = loop {
            if pos >= to {
                break Scan::Clean;
            }
            if read >= SCAN_MAX_BYTES {
                break Scan::Unknown;
            }
            let req = single_partition_fetch(&tp.0, tp.1, pos, SCAN_FETCH_BYTES, 0);
            let resp = self.send(Side::Source, addr, &req, 12).await?;
            let Some(p) = resp
                .responses
                .into_iter()
                .filter(|t| t.topic.0.as_str() == tp.0)
                .flat_map(|t| t.partitions.into_iter())
                .find(|p| p.partition_index == tp.1)
            else {
                break Scan::Unknown;
            };
            if p.error_code == OFFSET_OUT_OF_RANGE && pos < p.log_start_offset {
                // Deleted before it was mirrored: what is left starts at the log start.
                pos = p.log_start_offset;
                continue;
            }
            if p.error_code != 0 {
                break Scan::Unknown;
            }
            let records = p.records.unwrap_or_default();
            read += records.len();
            match walk(&records, pos, to) {
                Walked::Found => break Scan::Transactional,
                Walked::Upto(next) if next > pos => pos = next,
                // Nothing readable came back: not proven.
                Walked::Upto(_) => break Scan::Unknown,
            }
        };
        if pos > from {
            let mut clean = self.clean.lock().unwrap_or_else(|e| e.into_inner());
            let start = match clean.get(tp) {
                Some((a, b)) if *a <= from && from <= *b => *a,
                _ => from,
            };
            clean.insert(tp.clone(), (start, pos.min(to)));
        }
        Ok(scan)
    }

    /// (log end, last stable offset) of source partitions, from their leaders.
    pub(super) async fn ends(
        &self,
        partitions: &[Tp],
    ) -> Result<BTreeMap<Tp, (i64, i64)>, IoError> {
        let mut topics: Vec<String> = partitions.iter().map(|(t, _)| t.clone()).collect();
        topics.sort();
        topics.dedup();
        let meta = self.source_meta(Some(&topics)).await?;
        let mut by_leader: BTreeMap<String, Vec<(&str, i32)>> = BTreeMap::new();
        for (t, p) in partitions {
            let addr = meta
                .leader_addr(t, *p)
                .ok_or_else(|| IoError::retriable(format!("no source leader known for {t}-{p}")))?;
            by_leader.entry(addr).or_default().push((t.as_str(), *p));
        }
        let mut out = BTreeMap::new();
        for (addr, parts) in by_leader {
            let mut answers = Vec::with_capacity(2);
            // 0: READ_UNCOMMITTED (the log end), 1: READ_COMMITTED (the last stable offset).
            for isolation in [0i8, 1] {
                let req = crate::client::list_offsets_request(
                    parts.iter().copied(),
                    crate::client::LATEST,
                    isolation,
                );
                answers.push(self.send(Side::Source, &addr, &req, 7).await?);
            }
            let read = |i: usize| -> Result<BTreeMap<Tp, i64>, IoError> {
                let mut m = BTreeMap::new();
                for t in &answers[i].topics {
                    for p in &t.partitions {
                        if p.error_code != 0 {
                            return Err(IoError::answer(
                                p.error_code,
                                format!(
                                    "ListOffsets {}-{} on the source: error code {}",
                                    t.name.0.as_str(),
                                    p.partition_index,
                                    p.error_code
                                ),
                            ));
                        }
                        m.insert((t.name.0.to_string(), p.partition_index), p.offset);
                    }
                }
                Ok(m)
            };
            let ends = read(0)?;
            let stable = read(1)?;
            for (tp, end) in ends {
                let lso = stable.get(&tp).copied().unwrap_or(end);
                out.insert(tp, (end, lso));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// One batch of `n` records at `offset`; `transactional` sets the batch's bit.
    fn batch(offset: i64, n: i64, transactional: bool) -> Bytes {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: if transactional { 7 } else { -1 },
                producer_epoch: if transactional { 0 } else { -1 },
                timestamp_type: TimestampType::Creation,
                offset: offset + i,
                sequence: if transactional { i as i32 } else { -1 },
                timestamp: 0,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .expect("encode");
        buf.freeze()
    }

    fn chunk(batches: &[Bytes]) -> Vec<u8> {
        batches.iter().flat_map(|b| b.iter().copied()).collect()
    }

    #[test]
    fn plain_batches_prove_a_range_free_of_transactions_up_to_where_they_end() {
        let c = chunk(&[batch(10, 5, false), batch(15, 5, false)]);
        assert_eq!(walk(&c, 10, 100), Walked::Upto(20));
        assert_eq!(walk(&c, 12, 18), Walked::Upto(18));
    }

    #[test]
    fn a_transactional_batch_in_the_range_is_found() {
        let c = chunk(&[batch(10, 5, false), batch(15, 2, true)]);
        assert_eq!(walk(&c, 10, 100), Walked::Found);
    }

    #[test]
    fn a_transactional_batch_outside_the_range_does_not_count() {
        let c = chunk(&[batch(10, 5, true), batch(15, 5, false), batch(20, 2, true)]);
        assert_eq!(walk(&c, 15, 20), Walked::Upto(20));
    }

    #[test]
    fn a_partial_last_batch_ends_the_walk_where_it_starts() {
        let mut c = chunk(&[batch(10, 5, false)]);
        let next = batch(15, 5, true);
        c.extend_from_slice(&next[..next.len() / 2]);
        assert_eq!(walk(&c, 10, 100), Walked::Upto(15));
    }
}
