//! The state topic's I/O on the destination cluster: one partition (0) of a compacted topic,
//! appended with `acks=all` one record at a time and read from its leader; created only by
//! `mirrorgate state init` ([`create`]).
//!
//! The topic is read by its id (Fetch v13), the one it had at the first read: a topic deleted
//! and created again under the same name (what `state init` does for a lost one), or one whose
//! log ends before the offset read next (truncated by an unclean leader election), is another
//! incarnation. The read then says so ([`ReadResult::reset`]) and starts again from the new
//! log's start, so that the reader forgets what it concluded from the old one (review G6).
//!
//! Owns: the requests and the record encoding (JSON values keyed by [`PeerRecord::key`]). Must
//! not touch: what the records mean ([`super::view`]), when they are written.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::RecordBatchDecoder;

use super::view::PeerRecord;

pub mod parts;
use crate::client::{ops, KafkaClient, PartitionRequestError, EARLIEST};
use crate::cluster::ClusterView;
use crate::protocol::batch::BatchWalker;

/// Error code TOPIC_AUTHORIZATION_FAILED.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// Error code MESSAGE_TOO_LARGE.
const MESSAGE_TOO_LARGE: i16 = 10;
/// Error code UNKNOWN_TOPIC_ID.
const UNKNOWN_TOPIC_ID: i16 = 100;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the peers need of the state topic (the unit tests use a fake).
pub trait StateLog: Send + Sync + 'static {
    /// Append one record; `Ok` once every in-sync replica has it.
    fn append(&self, record: &PeerRecord) -> BoxFuture<'_, Result<(), String>>;
    /// [`Self::append`] of a record that fits one batch (a heartbeat), with the broker's
    /// append time of it when the topic keeps `LogAppendTime` (review G13).
    fn append_timed(&self, record: &PeerRecord) -> BoxFuture<'_, Result<Option<i64>, String>> {
        let r = self.append(record);
        Box::pin(async move { r.await.map(|()| None) })
    }
    /// The records from `from` on (at most a few hundred kilobytes), with the offset after the
    /// last one returned and the topic's end (high watermark).
    fn read(&self, from: i64) -> BoxFuture<'_, Result<ReadResult, String>>;
}

/// One read of the state topic.
#[derive(Debug, Default)]
pub struct ReadResult {
    pub records: Vec<PeerRecord>,
    /// Where the next read starts.
    pub next: i64,
    pub high_watermark: i64,
    /// The topic is another incarnation than the one read so far (recreated, or truncated
    /// before the offset read next), and why: everything read before is void, and reading
    /// starts again at `next` (review G6).
    pub reset: Option<String>,
}

/// Test hook (environment, read once): while the file named by
/// `MIRRORGATE_TEST_CUT_OFF_STATE_TOPIC_WHILE` exists, every read and append of the state topic
/// fails as if the network to its leader were cut, so a test can replace the topic while this
/// process still holds a lease read from the old one. Unset in production: never cut.
fn cut_off() -> Result<(), String> {
    static CUT: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let cut = CUT
        .get_or_init(|| {
            std::env::var_os("MIRRORGATE_TEST_CUT_OFF_STATE_TOPIC_WHILE").map(Into::into)
        })
        .as_ref()
        .is_some_and(|p| p.exists());
    if cut {
        Err("the state topic cannot be reached (test hook: cut off)".into())
    } else {
        Ok(())
    }
}

/// The state topic on the destination cluster.
pub struct KafkaStateLog {
    view: Arc<ClusterView>,
    topic: String,
    timeout: Duration,
    client: tokio::sync::Mutex<Option<KafkaClient>>,
    /// The id of the incarnation read so far (set at the first read).
    topic_id: std::sync::Mutex<Option<uuid::Uuid>>,
    /// Records appended in parts, put back together as they are read.
    assembler: std::sync::Mutex<parts::Assembler>,
}

impl KafkaStateLog {
    pub fn new(view: Arc<ClusterView>, topic: String, timeout: Duration) -> Self {
        KafkaStateLog {
            view,
            topic,
            timeout,
            client: tokio::sync::Mutex::new(None),
            topic_id: std::sync::Mutex::new(None),
            assembler: std::sync::Mutex::new(parts::Assembler::default()),
        }
    }

    fn known_id(&self) -> Option<uuid::Uuid> {
        *self.topic_id.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_known_id(&self, id: uuid::Uuid) {
        *self.topic_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
    }

    /// The id the metadata gives the state topic now, asked again when `fresh`.
    async fn current_id(&self, fresh: bool) -> Option<uuid::Uuid> {
        if fresh || self.view.topic_id(&self.topic).is_none() {
            let _ = self.view.refresh().await;
        }
        self.view.topic_id(&self.topic).filter(|id| !id.is_nil())
    }

    /// A read that starts over at offset 0 of the incarnation with id `id`, for `why`.
    fn start_over(&self, id: uuid::Uuid, why: String) -> ReadResult {
        self.set_known_id(id);
        *self.assembler.lock().unwrap_or_else(|e| e.into_inner()) = parts::Assembler::default();
        tracing::warn!(target: "mirrorgate::peers", topic = %self.topic, %id, reason = %why,
            "the state topic is another incarnation now: everything read from the old one is forgotten and it is read again from its start");
        ReadResult {
            next: 0,
            high_watermark: i64::MAX,
            reset: Some(why),
            ..Default::default()
        }
    }

    async fn leader(&self) -> Result<String, String> {
        if self.view.topic(&self.topic).is_none() {
            let _ = self.view.refresh().await;
        }
        let Some(info) = self.view.topic(&self.topic) else {
            return Err(self.why_absent().await);
        };
        let node = info.leaders.first().copied().unwrap_or(-1);
        self.view
            .broker_addr(node)
            .ok_or_else(|| format!("no leader known for {}-0", self.topic))
    }

    /// Why the state topic is not in the metadata: the cluster's metadata leaves out topics the
    /// principal may not describe, so a topic-level answer tells a denied one from a missing one.
    async fn why_absent(&self) -> String {
        let denied = crate::mirror::permissions::observe(
            &self.view,
            std::slice::from_ref(&self.topic),
            self.timeout,
        )
        .await
        .is_ok_and(|o| {
            o.topics
                .iter()
                .any(|(t, r)| t == &self.topic && *r == Err(TOPIC_AUTHORIZATION_FAILED))
        });
        if denied {
            format!(
                "the gateway's principal may not describe the state topic {:?} (TOPIC_AUTHORIZATION_FAILED): it needs DESCRIBE, READ and WRITE on it",
                self.topic
            )
        } else {
            format!(
                "the state topic {:?} does not exist on the destination cluster (create it with `mirrorgate state init`)",
                self.topic
            )
        }
    }

    /// Append one batch to partition 0 (`acks=all`).
    /// Append one batch; the broker's append time of it (-1 unless the topic keeps
    /// `LogAppendTime`).
    async fn produce(&self, batch: bytes::Bytes) -> Result<i64, String> {
        cut_off()?;
        let topic = self.topic.clone();
        self.with_client(move |c| {
            Box::pin(async move {
                let size = batch.len();
                match ops::produce_one_timed(c, &topic, 0, batch, None).await {
                    Ok((0, _, _, at)) => Ok(at),
                    Ok((MESSAGE_TOO_LARGE, _, _, _)) => Err(format!(
                        "Produce to {topic}-0 answered MESSAGE_TOO_LARGE: a batch of {size} bytes is above the state topic's max.message.bytes (raise it to {MAX_RECORD_BYTES}, as `mirrorgate state init` creates it)"
                    )),
                    Ok((code, _, msg, _)) => Err(format!(
                        "Produce to {topic}-0 answered error code {code}{}",
                        msg.map(|m| format!(" ({m})")).unwrap_or_default()
                    )),
                    Err(e) => Err(e.to_string()),
                }
            })
        })
        .await
    }

    /// A connection to partition 0's leader (kept between calls).
    async fn with_client<T>(
        &self,
        f: impl for<'c> FnOnce(&'c mut KafkaClient) -> BoxFuture<'c, Result<T, String>>,
    ) -> Result<T, String> {
        let leader = self.leader().await?;
        let mut guard = self.client.lock().await;
        if guard.as_ref().map(|c| c.addr() != leader).unwrap_or(true) {
            *guard = Some(
                self.view
                    .client(&leader, self.timeout)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let Some(c) = guard.as_mut() else {
            return Err("no connection".into());
        };
        let r = f(c).await;
        if r.is_err() {
            // The leader may have moved: ask the metadata again before the next call.
            *guard = None;
            let _ = self.view.refresh().await;
        }
        r
    }
}

/// Raw records (key, value) as one batch (v2, uncompressed, no producer id).
fn batch_of(raws: &[parts::Raw]) -> Result<bytes::Bytes, String> {
    let now = crate::mirror::screening::now_ms();
    ops::plain_batch_of(raws.iter().map(|(k, v)| (k.clone(), v.clone(), now)))
        .map_err(|e| format!("a state record: {e}"))
}

/// One record as the batches it is appended as, in order: one batch, or (a record too large
/// for one, [`parts`]) a batch per part and the head's.
pub fn encode(r: &PeerRecord) -> Result<Vec<bytes::Bytes>, String> {
    parts::split(r)?
        .iter()
        .map(|raw| batch_of(std::slice::from_ref(raw)))
        .collect()
}

/// The raw records (key, value) of fetched data from `from` on, and the offset after the last
/// complete batch. Control records are skipped.
pub fn decode_raw(data: &[u8], from: i64) -> (Vec<parts::Raw>, i64) {
    let mut out = Vec::new();
    let mut next = from;
    for b in BatchWalker::fetched(data) {
        let Ok((h, bytes)) = b else {
            break;
        };
        let last = h.base_offset + i64::from(h.last_offset_delta);
        if last < from {
            continue;
        }
        let mut buf = bytes::Bytes::copy_from_slice(bytes);
        if let Ok(set) = RecordBatchDecoder::decode(&mut buf) {
            for r in set.records {
                if r.offset < from || r.control {
                    continue;
                }
                out.push((r.key.unwrap_or_default(), r.value));
            }
        }
        next = next.max(last + 1);
    }
    (out, next)
}

/// The records of fetched data from `from` on (through a fresh [`parts::Assembler`]), and the
/// offset after the last complete batch.
#[cfg(test)]
pub fn decode(data: &[u8], from: i64) -> (Vec<PeerRecord>, i64) {
    let (raws, next) = decode_raw(data, from);
    let mut a = parts::Assembler::default();
    let records = raws
        .iter()
        .filter_map(|(k, v)| a.push(k, v.as_deref()))
        .collect();
    (records, next)
}

impl StateLog for KafkaStateLog {
    fn append(&self, record: &PeerRecord) -> BoxFuture<'_, Result<(), String>> {
        let raws = parts::split(record);
        let key = record.key();
        Box::pin(async move {
            let raws = raws?;
            let whole = raws.len() == 1;
            for raw in &raws {
                self.produce(batch_of(std::slice::from_ref(raw))?).await?;
            }
            if whole {
                return Ok(());
            }
            // In parts: the parts of the head this one replaces are no longer needed.
            let previous = {
                let mut a = self.assembler.lock().unwrap_or_else(|e| e.into_inner());
                let previous = a.head_of(&key);
                if let Some(head) = raws.last() {
                    a.wrote(&key, head);
                }
                previous
            };
            if let Some((id, n)) = previous {
                if let Err(e) = self.produce(batch_of(&parts::tombstones(&id, n))?).await {
                    tracing::debug!(target: "mirrorgate::peers", key = %key, error = %e,
                        "the parts of a replaced state record were not tombstoned (compaction keeps them)");
                }
            }
            Ok(())
        })
    }

    fn append_timed(&self, record: &PeerRecord) -> BoxFuture<'_, Result<Option<i64>, String>> {
        let raws = parts::split(record);
        Box::pin(async move {
            match raws?.as_slice() {
                [raw] => {
                    let at = self.produce(batch_of(std::slice::from_ref(raw))?).await?;
                    Ok((at >= 0).then_some(at))
                }
                _ => Err("a record in parts has no single append time".into()),
            }
        })
    }

    fn read(&self, from: i64) -> BoxFuture<'_, Result<ReadResult, String>> {
        Box::pin(async move {
            cut_off()?;
            let Some(now_id) = self.current_id(false).await else {
                return Err(self.why_absent().await);
            };
            let id = match self.known_id() {
                None => {
                    self.set_known_id(now_id);
                    now_id
                }
                Some(known) if known != now_id => {
                    return Ok(self.start_over(
                        now_id,
                        format!(
                        "its id changed from {known} to {now_id}: it was deleted and created again"
                    ),
                    ))
                }
                Some(known) => known,
            };
            let topic = self.topic.clone();
            let r = self
                .with_client(move |c| {
                    Box::pin(async move {
                        let f = match c.fetch_partition_by_id(id, 0, from, 512 * 1024).await {
                            Ok(f) if f.error_code == 0 => f,
                            Ok(f) => {
                                return Err(format!(
                                    "Fetch of {topic}-0 answered error code {}",
                                    f.error_code
                                ))
                            }
                            Err(PartitionRequestError::Partition(e))
                                if e.error_code == UNKNOWN_TOPIC_ID =>
                            {
                                return Ok(Fetched::UnknownId)
                            }
                            // OFFSET_OUT_OF_RANGE: the log starts after `from` (compaction,
                            // retention) or ends before it (truncated).
                            Err(PartitionRequestError::Partition(e)) if e.error_code == 1 => {
                                let start = c
                                    .list_offset(&topic, 0, EARLIEST)
                                    .await
                                    .map_err(|e| e.to_string())?;
                                let end = c
                                    .list_offset(&topic, 0, crate::client::LATEST)
                                    .await
                                    .map_err(|e| e.to_string())?;
                                return Ok(Fetched::OutOfRange { start, end });
                            }
                            Err(e) => return Err(e.to_string()),
                        };
                        // Compaction and cleaning may start the log past `from`.
                        let from = from.max(f.log_start_offset);
                        let (raws, next) = decode_raw(&f.records, from);
                        Ok(Fetched::Read {
                            raws,
                            next: next.max(from),
                            high_watermark: f.high_watermark,
                        })
                    })
                })
                .await?;
            match r {
                Fetched::Read {
                    raws,
                    next,
                    high_watermark,
                } => {
                    let mut a = self.assembler.lock().unwrap_or_else(|e| e.into_inner());
                    let records = raws
                        .iter()
                        .filter_map(|(k, v)| a.push(k, v.as_deref()))
                        .collect();
                    Ok(ReadResult {
                        records,
                        next,
                        high_watermark,
                        reset: None,
                    })
                }
                Fetched::UnknownId => match self.current_id(true).await {
                    Some(new) if new != id => Ok(self.start_over(
                        new,
                        format!("its id changed from {id} to {new}: it was deleted and created again"),
                    )),
                    _ => Err(format!(
                        "the state topic {} (id {id}) is no longer on the destination cluster (deleted?)",
                        self.topic
                    )),
                },
                Fetched::OutOfRange { end, .. } if end < from => Ok(self.start_over(
                    id,
                    format!("its log ends at offset {end}, before offset {from} read next: it was truncated (an unclean leader election) or created again"),
                )),
                Fetched::OutOfRange { start, .. } => {
                    tracing::info!(target: "mirrorgate::peers", topic = %self.topic, from, start,
                        "the state topic no longer holds the offset read next (compacted): read on from its start");
                    Ok(ReadResult {
                        next: start,
                        high_watermark: i64::MAX,
                        ..Default::default()
                    })
                }
            }
        })
    }
}

/// What one fetch of the state topic found.
enum Fetched {
    Read {
        raws: Vec<parts::Raw>,
        next: i64,
        high_watermark: i64,
    },
    /// The topic read so far (by id) is gone.
    UnknownId,
    /// The offset asked for is outside the log `[start, end)`.
    OutOfRange { start: i64, end: i64 },
}

/// The state topic's `max.message.bytes`: a mirror's handover, offset maps and failover
/// reports are one record each, which with thousands of partitions outgrows the brokers'
/// default of 1 MiB. Reads get a record larger than their fetch size whole (KIP-74).
pub const MAX_RECORD_BYTES: u32 = 16 << 20;

/// Create the state topic (`mirrorgate state init`): one partition, compacted, replicated to
/// up to 3 brokers, records up to [`MAX_RECORD_BYTES`]. An existing topic is fine (its
/// configuration is left as it is).
pub async fn create(view: &ClusterView, topic: &str, timeout: Duration) -> Result<i16, String> {
    view.refresh().await.map_err(|e| e.to_string())?;
    let brokers = view.brokers();
    let Some((_, addr)) = brokers.first() else {
        return Err("no destination broker known".into());
    };
    let rf = brokers.len().clamp(1, 3) as i16;
    let mut c = view
        .client(addr, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let min_isr = (rf - 1).max(1).to_string();
    ops::create_topic(
        &mut c,
        topic,
        1,
        rf,
        &[
            ("cleanup.policy".into(), "compact".into()),
            ("min.insync.replicas".into(), min_isr),
            ("max.message.bytes".into(), MAX_RECORD_BYTES.to_string()),
            // A truncated state topic loses claims every instance acted on (review G6).
            ("unclean.leader.election.enable".into(), "false".into()),
            // The broker's time in every heartbeat's answer: a pause the local clock did not
            // count shows against it (review G13).
            ("message.timestamp.type".into(), "LogAppendTime".into()),
        ],
    )
    .await?;
    Ok(rf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoded_record_decodes_from_its_offset_and_is_skipped_before_it() {
        let r = PeerRecord::Heartbeat {
            agents: vec![],
            incarnation: None,
            forward: vec![],
            instance: "a".into(),
            at_ms: 5,
        };
        let b = encode(&r).unwrap().remove(0);
        assert_eq!(decode(&b, 0), (vec![r], 1));
        assert_eq!(decode(&b, 1), (vec![], 1));
    }

    #[test]
    fn a_partial_batch_ends_the_read_where_the_complete_ones_end() {
        let r = PeerRecord::Heartbeat {
            agents: vec![],
            incarnation: None,
            forward: vec![],
            instance: "a".into(),
            at_ms: 5,
        };
        let b = encode(&r).unwrap().remove(0);
        assert_eq!(decode(&b[..b.len() - 3], 0), (vec![], 0));
    }
}
