//! The state topic's I/O on the destination cluster: one partition (0) of a compacted topic,
//! appended with `acks=all` one record at a time and read from its leader; created only by
//! `mirrorgate state init` ([`create`]).
//!
//! Owns: the requests and the record encoding (JSON values keyed by [`PeerRecord::key`]). Must
//! not touch: what the records mean ([`super::view`]), when they are written.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::RecordBatchDecoder;

use super::view::PeerRecord;
use crate::client::{ops, KafkaClient, PartitionRequestError, EARLIEST};
use crate::cluster::ClusterView;
use crate::protocol::batch::BatchWalker;

/// Error code TOPIC_AUTHORIZATION_FAILED.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// Error code MESSAGE_TOO_LARGE.
const MESSAGE_TOO_LARGE: i16 = 10;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the peers need of the state topic (the unit tests use a fake).
pub trait StateLog: Send + Sync + 'static {
    /// Append one record; `Ok` once every in-sync replica has it.
    fn append(&self, record: &PeerRecord) -> BoxFuture<'_, Result<(), String>>;
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
}

/// The state topic on the destination cluster.
pub struct KafkaStateLog {
    view: Arc<ClusterView>,
    topic: String,
    timeout: Duration,
    client: tokio::sync::Mutex<Option<KafkaClient>>,
}

impl KafkaStateLog {
    pub fn new(view: Arc<ClusterView>, topic: String, timeout: Duration) -> Self {
        KafkaStateLog {
            view,
            topic,
            timeout,
            client: tokio::sync::Mutex::new(None),
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

/// One record as a batch (v2, uncompressed, no producer id).
pub fn encode(r: &PeerRecord) -> Result<bytes::Bytes, String> {
    let value = serde_json::to_vec(r).map_err(|e| e.to_string())?;
    let rec = (
        bytes::Bytes::from(r.key()),
        bytes::Bytes::from(value),
        super::super::screening::now_ms(),
    );
    ops::plain_batch(std::iter::once(rec)).map_err(|e| format!("a state record: {e}"))
}

/// The records of fetched data from `from` on, and the offset after the last complete batch.
/// Values that are not a record of this version (or tombstones) are skipped.
pub fn decode(data: &[u8], from: i64) -> (Vec<PeerRecord>, i64) {
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
                if let Some(v) = r.value {
                    match serde_json::from_slice::<PeerRecord>(&v) {
                        Ok(p) => out.push(p),
                        Err(e) => {
                            tracing::warn!(offset = r.offset, error = %e, "state topic record not understood; skipped")
                        }
                    }
                }
            }
        }
        next = next.max(last + 1);
    }
    (out, next)
}

impl StateLog for KafkaStateLog {
    fn append(&self, record: &PeerRecord) -> BoxFuture<'_, Result<(), String>> {
        let batch = encode(record);
        Box::pin(async move {
            let batch = batch?;
            let topic = self.topic.clone();
            self.with_client(move |c| {
                Box::pin(async move {
                    let size = batch.len();
                    match ops::produce_one(c, &topic, 0, batch, None).await {
                        Ok((0, _, _)) => Ok(()),
                        Ok((MESSAGE_TOO_LARGE, _, _)) => Err(format!(
                            "Produce to {topic}-0 answered MESSAGE_TOO_LARGE: this record of {size} bytes is above the state topic's max.message.bytes (raise it to {MAX_RECORD_BYTES}, as `mirrorgate state init` creates it)"
                        )),
                        Ok((code, _, msg)) => Err(format!(
                            "Produce to {topic}-0 answered error code {code}{}",
                            msg.map(|m| format!(" ({m})")).unwrap_or_default()
                        )),
                        Err(e) => Err(e.to_string()),
                    }
                })
            })
            .await
        })
    }

    fn read(&self, from: i64) -> BoxFuture<'_, Result<ReadResult, String>> {
        Box::pin(async move {
            let topic = self.topic.clone();
            self.with_client(move |c| {
                Box::pin(async move {
                    let f = match c.fetch_partition(&topic, 0, from, 512 * 1024).await {
                        Ok(f) if f.error_code == 0 => f,
                        Ok(f) => {
                            return Err(format!(
                                "Fetch of {topic}-0 answered error code {}",
                                f.error_code
                            ))
                        }
                        // OFFSET_OUT_OF_RANGE: the topic was recreated (or truncated): read it
                        // again from its start.
                        Err(PartitionRequestError::Partition(e)) if e.error_code == 1 => {
                            let start = c
                                .list_offset(&topic, 0, EARLIEST)
                                .await
                                .map_err(|e| e.to_string())?;
                            tracing::warn!(target: "mirrorgate::peers", topic = %topic, from, start,
                                "the state topic no longer holds the offset read next: read again from its start");
                            return Ok(ReadResult {
                                records: Vec::new(),
                                next: start,
                                high_watermark: i64::MAX,
                            });
                        }
                        Err(e) => return Err(e.to_string()),
                    };
                    // Compaction and cleaning may start the log past `from`.
                    let from = from.max(f.log_start_offset);
                    let (records, next) = decode(&f.records, from);
                    Ok(ReadResult {
                        records,
                        next: next.max(from),
                        high_watermark: f.high_watermark,
                    })
                })
            })
            .await
        })
    }
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
            instance: "a".into(),
            at_ms: 5,
        };
        let b = encode(&r).unwrap();
        assert_eq!(decode(&b, 0), (vec![r], 1));
        assert_eq!(decode(&b, 1), (vec![], 1));
    }

    #[test]
    fn a_partial_batch_ends_the_read_where_the_complete_ones_end() {
        let r = PeerRecord::Heartbeat {
            agents: vec![],
            instance: "a".into(),
            at_ms: 5,
        };
        let b = encode(&r).unwrap();
        assert_eq!(decode(&b[..b.len() - 3], 0), (vec![], 0));
    }
}
