//! One partition of a mirror: find the start position, fetch from the source leader, append
//! each batch as-is through the gateway's mirror listener, keep the exact offset map.
//!
//! Rules:
//! - Start: with an offset map entry, continue where it ends, after reconciling a destination
//!   tail the map does not know yet (batches appended before a crash, matched to the source
//!   batch by batch: same CRC-32C and offset delta — the CRC covers everything the agent copies);
//!   without one, only into an empty destination partition (log end 0), from the source log
//!   start. Anything else: FAILED with what to do.
//! - A batch is sent exactly as fetched except its base offset, set to 0 (outside the CRC; the
//!   broker refuses a produced batch with another base offset and assigns offsets itself).
//! - Transactional and control batches FAIL the partition: nothing is appended for them.
//! - Batches with offset gaps (compaction), empty batches and batches of a producer "tainted" by
//!   them are the child module `gapped` (rewritten, written without producer id, or skipped).
//! - Every append must be acknowledged at the next destination offset of the map
//!   ([`check_ack`]); any other offset FAILS the partition and is not recorded.
//! - Retries never duplicate: an idempotent batch (producer id ≥ 0) is resent as-is and the
//!   broker deduplicates it; for a batch without a producer id, the destination log end is
//!   compared with the offset map (and the batch found there is matched) before resending.
//!
//! Owns: the per-partition loop; its reads of the destination and source logs are the child
//! module `logs`, matching a destination tail to the source the child module `matching`,
//! compacted/gapped batches and batch comparison the child module `gapped`. Must not touch: the controller beyond reading states.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::client::retry::{Lasting, Level};
use crate::client::{KafkaClient, EARLIEST};
use crate::protocol::batch::{BatchHeader, BatchWalker};

mod append;
mod gapped;
mod logs;
mod matching;
mod txn;

use super::{lock, MirrorAgent, PartStats};
use crate::mirror::offset_map::PartitionMap;

/// How a partition task ended.
pub enum Exit {
    /// Stopped (failover, pause, shutdown): nothing wrong.
    Stopped,
    /// The partition cannot be mirrored: the reason.
    Failed(String),
}

enum Halt {
    Stop,
    Fail(String),
    Retry(String),
    /// The destination refused a data batch with OUT_OF_ORDER_SEQUENCE: not appended (the
    /// caller writes it without producer id, `gapped`).
    Sequence,
}

type Step<T> = Result<T, Halt>;

const MAX_FETCH_BYTES: i32 = 64 << 20;
const FETCH_WAIT: Duration = Duration::from_millis(500);
const PRODUCE_TIMEOUT: Duration = Duration::from_secs(45);

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(6)).min(5000))
}

/// The destination refused a transactional batch: its coordinator does not know the producer.
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;

/// Broker error codes after which the batch was certainly not appended (resend as-is).
fn not_appended(code: i16) -> bool {
    // UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
    // NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
    // CONCURRENT_TRANSACTIONS, THROTTLING_QUOTA_EXCEEDED.
    matches!(code, 3 | 5 | 6 | 19 | 56 | 74 | 75 | 51 | 89)
}

/// Broker error codes after which the batch may or may not have been appended.
fn unknown_outcome(code: i16) -> bool {
    // REQUEST_TIMED_OUT, NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    matches!(code, 7 | 13 | 20)
}

/// An append must be acknowledged at the next destination offset of the map: the batch then
/// landed right after what was mirrored. A broker answers a batch it takes for a duplicate (same
/// producer id, epoch and sequence as one of the last five it appended) with that older batch's
/// offset; recording such an ack would map source records to a destination copy that holds other
/// records (a repointed source whose producers reuse the same ids), so it fails the partition.
pub fn check_ack(expected: i64, acked: i64) -> Result<(), String> {
    if acked == expected {
        return Ok(());
    }
    Err(format!(
        "the destination acknowledged the append at offset {acked}, not at the next offset {expected} of the offset map: \
         {} (not recorded; nothing more is appended). Check that the mirror's source is the cluster it mirrored from and \
         that nobody else writes or deleted records in the destination topic",
        if acked < expected {
            "the broker took the batch for a duplicate of an earlier, different batch (same producer id and sequence)"
        } else {
            "records the agent did not write are in the destination"
        }
    ))
}

pub struct Task {
    m: Arc<MirrorAgent>,
    topic: String,
    partition: i32,
    stats: Arc<PartStats>,
    stop: watch::Receiver<bool>,
    src: Option<KafkaClient>,
    dst: Option<KafkaClient>,
    next_src: i64,
    next_dst: i64,
    max_bytes: i32,
}

impl Task {
    pub fn new(
        m: Arc<MirrorAgent>,
        topic: String,
        partition: i32,
        stats: Arc<PartStats>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Task {
            m,
            topic,
            partition,
            stats,
            stop,
            src: None,
            dst: None,
            next_src: -1,
            next_dst: -1,
            max_bytes: 1 << 20,
        }
    }

    pub async fn run(mut self) -> Exit {
        let exit = match self.run_inner().await {
            Ok(()) | Err(Halt::Stop) => return Exit::Stopped,
            Err(Halt::Fail(r) | Halt::Retry(r)) => Exit::Failed(r),
            Err(Halt::Sequence) => Exit::Failed("a batch was refused as out of sequence".into()),
        };
        // A FAILED partition keeps exporting its lag: what the source has that the destination
        // does not (bounded; best effort).
        let _ = tokio::time::timeout(Duration::from_secs(5), self.note_failed_lag()).await;
        exit
    }

    /// Match the destination's tail beyond the partition's offset map to the source and
    /// record it, appending nothing (the agent is stopped: a failover). A partition STOPPED
    /// already is matched up to its barrier (the barrier and local writes after it are not
    /// the source's). Retried briefly while a log cannot be read.
    pub async fn match_tail(mut self) -> Result<(), String> {
        let barrier = self
            .m
            .controller
            .barrier_offset(&self.topic, self.partition);
        let mut attempt = 0u32;
        loop {
            match self.start_position_up_to(barrier).await {
                Ok(()) => return Ok(()),
                Err(Halt::Retry(e)) if attempt < 3 => {
                    attempt += 1;
                    tracing::debug!(topic = %self.topic, partition = self.partition, error = %e, "matching the tail: retried");
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(Halt::Fail(e) | Halt::Retry(e)) => return Err(e),
                Err(Halt::Stop) => return Err("stopped".into()),
                Err(Halt::Sequence) => return Err("a batch out of sequence".into()),
            }
        }
    }

    /// The lag figures of a partition that failed: the next source offset (the map's, else
    /// the source log start) and the source log end.
    async fn note_failed_lag(&mut self) {
        if self.stats.next_source.load(Ordering::Relaxed) < 0 {
            let next = match self.map().and_then(|m| m.next()) {
                Some((s, _)) => Some(s),
                None => self.source_offset(EARLIEST).await.ok(),
            };
            if let Some(n) = next {
                self.stats.next_source.store(n, Ordering::Relaxed);
            }
        }
        if let Ok(end) = self.source_offset(crate::client::LATEST).await {
            self.stats.set_high_watermark(end);
        }
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    async fn sleep(&mut self, d: Duration) -> Step<()> {
        if self.stopped() {
            return Err(Halt::Stop);
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = self.stop.changed() => {}
        }
        if self.stopped() {
            return Err(Halt::Stop);
        }
        Ok(())
    }

    fn label(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    // ------------------------------------------------------------------ offset map

    fn map(&self) -> Option<PartitionMap> {
        self.m
            .offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&self.topic, self.partition)
            .cloned()
    }

    /// A transactional batch or a marker is being mirrored: the map says so from now on.
    fn note_transactional(&mut self) {
        let mut offsets = self.m.offsets.lock().unwrap_or_else(|e| e.into_inner());
        let map = offsets.entry(&self.topic, self.partition);
        if !map.transactional {
            map.transactional = true;
            self.m.offsets_dirty.store(true, Ordering::SeqCst);
        }
    }

    /// Whether the partition's map may fall short of the destination's tail (see
    /// `MirrorAgent::unmatched`).
    fn mark_unmatched(&self, unmatched: bool) {
        let key = (self.topic.clone(), self.partition);
        let mut set = lock(&self.m.unmatched);
        if unmatched {
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }

    fn record(&mut self, src_base: i64, dst_base: i64, count: i64) {
        self.m
            .offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(&self.topic, self.partition)
            .record(src_base, dst_base, count);
        self.m.offsets_dirty.store(true, Ordering::SeqCst);
        self.next_src = src_base + count;
        self.next_dst = dst_base + count;
        self.stats
            .next_source
            .store(self.next_src, Ordering::Relaxed);
    }

    /// Start position (module doc).
    async fn start_position(&mut self) -> Step<()> {
        self.start_position_up_to(None).await
    }

    /// [`Self::start_position`], matching the destination's log only below `limit` when
    /// given (a barrier offset).
    async fn start_position_up_to(&mut self, limit: Option<i64>) -> Step<()> {
        if let Some(e) = &self.m.offsets_error {
            return Err(Halt::Fail(format!(
                "the agent's offset map cannot be read ({e}); repair or remove state_dir/agent/{}.json",
                self.m.name
            )));
        }
        // Starting to mirror: everything the leader holds readable first (G2). Matching a
        // stopped partition's tail up to its barrier reads what is there.
        let end = match limit {
            None => self.dest_settled_end().await?,
            Some(l) => self.dest_end().await?.min(l),
        };
        match self.map().and_then(|m| m.next()) {
            Some((s, d)) => {
                self.next_src = s;
                self.next_dst = d;
                if end < d {
                    return Err(Halt::Fail(format!(
                        "the destination log end {end} is below the {d} the offset map recorded: the destination lost mirrored \
                         records (truncated or recreated); delete and recreate the destination topic and the agent's map entry"
                    )));
                }
                self.match_destination_tail(end).await?;
            }
            None => {
                let start = self.source_offset(EARLIEST).await?;
                let dst_start = if end == 0 {
                    0
                } else {
                    self.dest_start().await?
                };
                if end != 0 && dst_start != start {
                    return Err(Halt::Fail(format!(
                        "the destination partition is not empty (log {dst_start}..{end}) and not aligned with the source \
                         (its log starts at {start}), and the agent has no offset map for it: delete and recreate the \
                         destination topic (or restore state_dir/agent/{}.json)",
                        self.m.name
                    )));
                }
                self.m
                    .offsets
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .partitions
                    .entry(self.topic.clone())
                    .or_default()
                    .insert(self.partition, PartitionMap::starting_at(start, dst_start));
                self.m.offsets_dirty.store(true, Ordering::SeqCst);
                self.next_src = start;
                self.next_dst = dst_start;
                // A non-empty destination is accepted when it is aligned: batch for batch the
                // same as the source from the same offset (failback: the old source mirrors from
                // the cluster that mirrored it as-is). Every batch is compared (CRC, offsets).
                self.match_destination_tail(end).await?;
                if end != 0 {
                    tracing::info!(
                        topic = %self.topic, partition = self.partition, aligned_through = end,
                        "the destination is aligned with the source; mirroring continues from there"
                    );
                }
            }
        }
        self.stats
            .next_source
            .store(self.next_src, Ordering::Relaxed);
        Ok(())
    }

    // ------------------------------------------------------------------ main loop

    async fn run_inner(&mut self) -> Step<()> {
        // Until its start position is matched, the map may fall short of the destination's
        // tail (a failover stopping the task now matches it then).
        self.mark_unmatched(true);
        let mut attempt = 0u32;
        loop {
            match self.start_position().await {
                Ok(()) => {
                    // Its tail is matched here now: exact, as if this instance had mirrored it.
                    self.mark_unmatched(false);
                    break;
                }
                Err(Halt::Retry(e)) => {
                    attempt += 1;
                    tracing::debug!(topic = %self.topic, partition = self.partition, error = %e, "start position not known yet");
                    self.sleep(backoff(attempt)).await?;
                }
                Err(e) => return Err(e),
            }
        }
        self.m
            .controller
            .set_agent_failed(&self.topic, self.partition, None);
        tracing::info!(mirror = %self.m.name, topic = %self.topic, partition = self.partition,
            source_offset = self.next_src, destination_offset = self.next_dst, "mirroring partition");
        let mut attempt = 0u32;
        // A fresh topic's leader, a leader moving: quiet retries until the failure lasts.
        let mut failing = Lasting::default();
        loop {
            if self.stopped() {
                return Err(Halt::Stop);
            }
            let f = match self.source_fetch(self.next_src).await {
                Ok(f) => {
                    attempt = 0;
                    failing.succeeded();
                    f
                }
                Err(Halt::Retry(e)) => {
                    attempt += 1;
                    match failing.failed(true, std::time::Instant::now()) {
                        Level::Warn => {
                            tracing::warn!(mirror = %self.m.name, topic = %self.topic, partition = self.partition, error = %e, "source fetch failed; retrying")
                        }
                        Level::Quiet => {
                            tracing::debug!(mirror = %self.m.name, topic = %self.topic, partition = self.partition, error = %e, "source fetch: a passing failure; retried")
                        }
                    }
                    self.sleep(backoff(attempt)).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.stats.set_high_watermark(f.high_watermark);
            let mut complete = 0;
            for item in BatchWalker::fetched(&f.records) {
                let (h, b) = item.map_err(|e| {
                    Halt::Fail(format!(
                        "corrupt batch from the source near offset {}: {e}",
                        self.next_src
                    ))
                })?;
                complete += 1;
                if h.last_offset() < self.next_src {
                    continue;
                }
                if h.base_offset < self.next_src {
                    return Err(Halt::Fail(format!(
                        "the source batch {}..{} starts before the next offset to mirror {}",
                        h.base_offset,
                        h.last_offset(),
                        self.next_src
                    )));
                }
                self.mirror_batch(&h, b).await?;
                if self.stopped() {
                    return Err(Halt::Stop);
                }
            }
            if complete == 0 && !f.records.is_empty() {
                // One batch larger than the fetch size.
                self.max_bytes = (self.max_bytes * 2).min(MAX_FETCH_BYTES);
            }
        }
    }

    /// Mirror one source batch at or after `next_src`, by kind.
    async fn mirror_batch(&mut self, h: &BatchHeader, b: &[u8]) -> Step<()> {
        let kind = SourceBatch::of(h);
        if matches!(kind, SourceBatch::Data | SourceBatch::Transactional) && self.tainted(h) {
            return self.mirror_stripped(h, b, false).await;
        }
        match kind {
            SourceBatch::Data => match self.mirror_data(h, b).await {
                Err(Halt::Sequence) => self.out_of_sequence(h, b).await,
                r => r,
            },
            // A transactional batch is appended as-is too, with a transactional id (`append`).
            SourceBatch::Transactional => {
                self.note_transactional();
                self.mirror_data(h, b).await
            }
            SourceBatch::Control => {
                self.note_transactional();
                self.hold_markers_while_the_test_says_so().await?;
                self.mirror_marker(h, b).await
            }
            SourceBatch::Gapped => self.mirror_gapped(h, b).await,
            SourceBatch::Empty => self.mirror_empty(h),
        }
    }

    /// `MIRRORGATE_TEST_HOLD_AGENT_MARKERS_WHILE=PATH`: while PATH exists, a transaction marker
    /// fetched from the source waits before it is mirrored, as behind a slow destination (a
    /// stop still ends the wait). Unset in production: a marker never waits.
    async fn hold_markers_while_the_test_says_so(&mut self) -> Step<()> {
        static HOLD: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
        let hold = HOLD.get_or_init(|| {
            std::env::var_os("MIRRORGATE_TEST_HOLD_AGENT_MARKERS_WHILE").map(Into::into)
        });
        if let Some(path) = hold {
            while path.exists() {
                self.sleep(Duration::from_millis(50)).await?;
            }
        }
        Ok(())
    }

    /// The destination refused an idempotent batch as out of sequence. Either an earlier batch
    /// of its producer is missing on the source (compaction removed it): appended without its
    /// producer id. Or another writer — an agent owner that was replaced — already appended it
    /// (review G2): then the destination holds it at the map's next offset, and it is taken as
    /// appended, never appended twice.
    async fn out_of_sequence(&mut self, h: &BatchHeader, b: &[u8]) -> Step<()> {
        let mut owned = bytes::BytesMut::from(b);
        owned[..8].copy_from_slice(&0i64.to_be_bytes());
        gapped::clear_log_append_time(&mut owned);
        if let Some(base) = self.appended_already(&owned).await? {
            tracing::warn!(topic = %self.topic, partition = self.partition, offset = base,
                "an out-of-sequence batch is already in the destination log (appended by another writer): taken as appended");
            self.record(h.base_offset, base, i64::from(h.last_offset_delta) + 1);
            return Ok(());
        }
        self.mirror_stripped(h, b, true).await
    }

    /// A batch without gaps, neither transactional nor control: appended as-is except its base
    /// offset.
    async fn mirror_data(&mut self, h: &BatchHeader, b: &[u8]) -> Step<()> {
        if self.stats.last_ts.load(Ordering::Relaxed) < 0 {
            self.stats
                .pending_ts
                .store(h.max_timestamp, Ordering::Relaxed);
        }
        // As-is, except the base offset (outside the CRC): the broker requires 0 in a
        // produced batch and assigns the offsets itself.
        let mut owned = bytes::BytesMut::from(b);
        owned[..8].copy_from_slice(&0i64.to_be_bytes());
        // A LogAppendTime batch is sent as CreateTime (`gapped`): the destination restamps it.
        gapped::clear_log_append_time(&mut owned);
        let bytes = owned.freeze();
        let len = bytes.len();
        let base = self.append(h, bytes).await?;
        self.record(h.base_offset, base, i64::from(h.last_offset_delta) + 1);
        self.stats.last_ts.store(h.max_timestamp, Ordering::Relaxed);
        self.stats
            .note_append(len, i64::from(h.last_offset_delta) + 1);
        self.m.count_append(len);
        Ok(())
    }
}

/// What kind of source batch the agent mirrors, and so how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SourceBatch {
    /// Contiguous offsets, neither transactional nor control.
    Data,
    /// No record at all (compaction left it for the producer state), control or not.
    Empty,
    /// Fewer records than offsets (compaction removed some), at least one: not a control batch.
    Gapped,
    /// A transactional data batch without gaps.
    Transactional,
    /// A control batch (a transaction marker).
    Control,
}

impl SourceBatch {
    fn of(h: &BatchHeader) -> Self {
        if h.record_count == 0 {
            SourceBatch::Empty
        } else if h.is_control() {
            SourceBatch::Control
        } else if h.record_count != h.last_offset_delta + 1 {
            SourceBatch::Gapped
        } else if h.is_transactional() {
            SourceBatch::Transactional
        } else {
            SourceBatch::Data
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_ack;

    #[test]
    fn an_append_acknowledged_at_any_offset_but_the_next_expected_one_fails_the_partition() {
        assert!(check_ack(10, 10).is_ok());
        let dup = check_ack(10, 7).unwrap_err();
        assert!(
            dup.contains("offset 7") && dup.contains("next offset 10"),
            "{dup}"
        );
        assert!(dup.contains("duplicate"), "{dup}");
        let ahead = check_ack(10, 12).unwrap_err();
        assert!(ahead.contains("did not write"), "{ahead}");
        assert!(check_ack(0, 5).is_err());
    }
}
