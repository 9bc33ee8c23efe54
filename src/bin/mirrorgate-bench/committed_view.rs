//! The `read_committed` view of a topic, read straight from a cluster's partition leaders and
//! kept as a count and a digest per partition, so that a source topic and its mirror can be
//! compared record for record (key and value, in order) without holding the records; on request
//! ([`TopicView::keeping_keys`]) also each record's offset and key.
//!
//! Owns: Fetch requests with `isolation_level = 1` (READ_COMMITTED) for the benchmark, the Java
//! consumer's filter over one Fetch response (aborted transactions hidden, control batches
//! skipped), the per-partition digest. Must not touch: the gateway, the rig, how a benchmark
//! times what it reads.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};
use mirrorgate::client::{single_partition_fetch, KafkaClient};
use mirrorgate::protocol::batch::{control_marker, BatchWalker, ControlType};
use sha2::{Digest, Sha256};

/// Bytes asked for per Fetch (the records of a benchmark are ~1 KiB, batches at most a few
/// hundred KiB, so one response always holds at least one whole batch).
const FETCH_BYTES: i32 = 16 << 20;

/// An aborted transaction as a READ_COMMITTED Fetch response lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// Calls `visit` with each record of `records` (one Fetch response's records of one partition)
/// that a `read_committed` consumer returns, in order: the Java consumer's rule — a producer id
/// is aborted from the first offset of an aborted transaction listed in `aborted` until its ABORT
/// marker; transactional data batches of an aborted producer id and every control batch are
/// skipped. Returns the offset after the last whole batch (`None` when there is none).
pub fn visible_records(
    records: &Bytes,
    aborted: &[Aborted],
    visit: &mut dyn FnMut(&Record),
) -> Result<Option<i64>, String> {
    let mut pending: Vec<Aborted> = aborted.to_vec();
    pending.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
    let mut aborting: Vec<i64> = Vec::new();
    let mut next = None;
    for item in BatchWalker::fetched(records) {
        let (header, batch) = item.map_err(|e| format!("fetched batch: {e}"))?;
        while pending
            .last()
            .is_some_and(|a| a.first_offset <= header.last_offset())
        {
            if let Some(a) = pending.pop() {
                aborting.push(a.producer_id);
            }
        }
        next = Some(header.last_offset() + 1);
        let pid = header.producer_id;
        if header.is_control() {
            let marker = control_marker(&header, batch).map_err(|e| e.to_string())?;
            if marker.is_some_and(|m| m.control_type == ControlType::Abort) {
                aborting.retain(|p| *p != pid);
            }
            continue;
        }
        if header.is_transactional() && aborting.contains(&pid) {
            continue;
        }
        let start = offset_in(records, batch);
        let mut one = records.slice(start..start + batch.len());
        let set = RecordBatchDecoder::decode(&mut one).map_err(|e| format!("records: {e}"))?;
        set.records.iter().for_each(&mut *visit);
    }
    Ok(next)
}

/// Where `part` (a sub-slice of `whole`) starts in it.
fn offset_in(whole: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// What a partition's `read_committed` view holds: its record count and a SHA-256 over each
/// record's key and value (length-prefixed, -1 for null), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub digest: String,
}

/// One partition read so far.
struct Partition {
    index: i32,
    next_offset: i64,
    records: u64,
    hasher: Sha256,
    leader: Option<KafkaClient>,
    /// `(offset, key)` of each record read, when kept.
    kept: Option<Vec<(i64, Option<Bytes>)>>,
}

impl Partition {
    fn absorb(&mut self, r: &Record) {
        for field in [&r.key, &r.value] {
            match field {
                Some(b) => {
                    self.hasher.update((b.len() as i32).to_be_bytes());
                    self.hasher.update(b);
                }
                None => self.hasher.update((-1i32).to_be_bytes()),
            }
        }
        self.records += 1;
        if let Some(kept) = self.kept.as_mut() {
            kept.push((r.offset, r.key.clone()));
        }
    }
}

/// The `read_committed` view of one topic on one cluster, read incrementally.
pub struct TopicView {
    bootstrap: String,
    topic: String,
    partitions: Vec<Partition>,
}

impl TopicView {
    pub fn new(bootstrap: &str, topic: &str, partitions: i32) -> TopicView {
        TopicView {
            bootstrap: bootstrap.to_string(),
            topic: topic.to_string(),
            partitions: (0..partitions)
                .map(|index| Partition {
                    index,
                    next_offset: 0,
                    records: 0,
                    hasher: Sha256::new(),
                    leader: None,
                    kept: None,
                })
                .collect(),
        }
    }

    /// The same view, keeping each record's offset and key (see [`TopicView::keys`]).
    pub fn keeping_keys(mut self) -> TopicView {
        for p in &mut self.partitions {
            p.kept.get_or_insert_with(Vec::new);
        }
        self
    }

    /// `(partition, offset, key)` of every record read so far (empty unless
    /// [`TopicView::keeping_keys`]), a key that is not UTF-8 lossily converted.
    pub fn keys(&self) -> Vec<(i32, i64, String)> {
        self.partitions
            .iter()
            .flat_map(|p| {
                p.kept.iter().flatten().map(|(o, k)| {
                    let key = k.as_ref().map(|k| String::from_utf8_lossy(k).into_owned());
                    (p.index, *o, key.unwrap_or_default())
                })
            })
            .collect()
    }

    /// Visible records read so far, over all partitions.
    pub fn records(&self) -> u64 {
        self.partitions.iter().map(|p| p.records).sum()
    }

    /// Per partition, in partition order.
    pub fn summaries(&self) -> Vec<Summary> {
        self.partitions
            .iter()
            .map(|p| Summary {
                records: p.records,
                digest: p
                    .hasher
                    .clone()
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
            })
            .collect()
    }

    /// Reads every partition up to its last stable offset; returns the visible records so far.
    /// A partition whose leader is unknown (the topic does not exist yet) or that answers with
    /// an error is read again at the next call.
    pub async fn advance(&mut self) -> Result<u64, String> {
        if self.partitions.iter().any(|p| p.leader.is_none()) {
            self.connect_leaders().await;
        }
        let topic = self.topic.clone();
        for p in &mut self.partitions {
            let Some(mut client) = p.leader.take() else {
                continue;
            };
            if read_partition(&mut client, &topic, p).await.is_ok() {
                p.leader = Some(client);
            }
        }
        Ok(self.records())
    }

    async fn connect_leaders(&mut self) {
        let timeout = Duration::from_secs(5);
        let Ok(mut c) = KafkaClient::connect(&self.bootstrap, timeout).await else {
            return;
        };
        let req =
            MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(self.topic.clone()))))]));
        let Ok(meta) = c.send(&req, 12).await else {
            return;
        };
        for t in meta.topics.iter().filter(|t| t.error_code == 0) {
            for mp in &t.partitions {
                let Some(p) = self
                    .partitions
                    .iter_mut()
                    .find(|p| p.index == mp.partition_index && p.leader.is_none())
                else {
                    continue;
                };
                let Some(b) = meta.brokers.iter().find(|b| b.node_id == mp.leader_id) else {
                    continue;
                };
                let addr = format!("{}:{}", b.host.as_str(), b.port);
                p.leader = KafkaClient::connect(&addr, timeout).await.ok();
            }
        }
    }
}

/// Fetches `p` from its next offset up to the last stable offset, absorbing what is visible.
async fn read_partition(
    client: &mut KafkaClient,
    topic: &str,
    p: &mut Partition,
) -> Result<(), String> {
    loop {
        let req = single_partition_fetch(topic, p.index, p.next_offset, FETCH_BYTES, 1);
        let resp = client.send(&req, 12).await.map_err(|e| e.to_string())?;
        let Some(fp) = resp
            .responses
            .into_iter()
            .flat_map(|t| t.partitions.into_iter())
            .find(|fp| fp.partition_index == p.index)
        else {
            return Err(format!("{topic}-{}: no Fetch answer", p.index));
        };
        if fp.error_code != 0 {
            return Err(format!(
                "{topic}-{}: Fetch error {}",
                p.index, fp.error_code
            ));
        }
        let aborted: Vec<Aborted> = fp
            .aborted_transactions
            .unwrap_or_default()
            .iter()
            .map(|a| Aborted {
                producer_id: a.producer_id.0,
                first_offset: a.first_offset,
            })
            .collect();
        let records = fp.records.unwrap_or_default();
        let next = visible_records(&records, &aborted, &mut |r| p.absorb(r))?;
        match next {
            Some(n) if n > p.next_offset => p.next_offset = n,
            _ => return Ok(()),
        }
        if p.next_offset >= fp.last_stable_offset {
            return Ok(());
        }
    }
}

#[cfg(test)]
#[path = "committed_view_tests.rs"]
mod tests;
