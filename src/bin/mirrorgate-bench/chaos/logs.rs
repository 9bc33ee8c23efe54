//! Reading a topic's whole log straight from a cluster's partition leaders, for the checker:
//! every record up to the high watermark (`read_uncommitted`), with its offset, producer id and
//! key; control batches as their marker; mirrorgate's data barrier as itself. Also the two
//! waits on those readings: until the mirroring tool has caught up, and until a log has settled.
//!
//! Owns: the Fetch requests of the checker's reading. Must not touch: the gateways (it never
//! reads through one), the rules (`check.rs`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use mirrorgate::client::{single_partition_fetch, KafkaClient};
use mirrorgate::protocol::barrier::BARRIER_KEY;
use mirrorgate::protocol::batch::BatchWalker;

use super::check::{Entry, SourceRecord, Tool};
use super::{PARTITIONS, TOPIC};

const FETCH_BYTES: i32 = 8 << 20;

/// A control record's key is its version (2 bytes) and type (2 bytes: 0 ABORT, 1 COMMIT).
fn control_is_commit(k: &Option<Bytes>) -> bool {
    k.as_deref().and_then(|k| k.get(2..4)) == Some(&[0, 1][..])
}

fn key_text(k: &Option<Bytes>) -> String {
    k.as_ref()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .unwrap_or_default()
}

/// The leader address of each partition of `topic` (index = partition).
pub async fn leaders(bootstrap: &str, topic: &str, partitions: i32) -> Result<Vec<String>, String> {
    let mut c = KafkaClient::connect(bootstrap, Duration::from_secs(5))
        .await
        .map_err(|e| format!("{bootstrap}: {e}"))?;
    let req = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))]));
    let meta = c.send(&req, 12).await.map_err(|e| e.to_string())?;
    let t = meta
        .topics
        .iter()
        .find(|t| t.error_code == 0)
        .ok_or_else(|| format!("{topic}: no metadata on {bootstrap}"))?;
    (0..partitions)
        .map(|p| {
            let mp = t
                .partitions
                .iter()
                .find(|mp| mp.partition_index == p)
                .ok_or_else(|| format!("{topic}-{p}: not in the metadata"))?;
            let b = meta
                .brokers
                .iter()
                .find(|b| b.node_id == mp.leader_id)
                .ok_or_else(|| format!("{topic}-{p}: no leader"))?;
            Ok(format!("{}:{}", b.host.as_str(), b.port))
        })
        .collect()
}

/// Every entry of partition `p` of `topic` on `leader`, up to its high watermark.
async fn read_partition(leader: &str, topic: &str, p: i32) -> Result<Vec<Entry>, String> {
    let mut c = KafkaClient::connect(leader, Duration::from_secs(5))
        .await
        .map_err(|e| format!("{leader}: {e}"))?;
    let mut out = Vec::new();
    let mut next = 0i64;
    loop {
        let req = single_partition_fetch(topic, p, next, FETCH_BYTES, 0);
        let resp = c.send(&req, 12).await.map_err(|e| e.to_string())?;
        let fp = resp
            .responses
            .into_iter()
            .flat_map(|t| t.partitions.into_iter())
            .find(|fp| fp.partition_index == p)
            .ok_or_else(|| format!("{topic}-{p}: no Fetch answer"))?;
        if fp.error_code != 0 {
            return Err(format!("{topic}-{p}: Fetch error {}", fp.error_code));
        }
        let records = fp.records.unwrap_or_default();
        let mut advanced = false;
        for item in BatchWalker::fetched(&records) {
            let (header, batch) = item.map_err(|e| format!("{topic}-{p}: {e}"))?;
            let start = batch.as_ptr() as usize - records.as_ptr() as usize;
            let mut one = records.slice(start..start + batch.len());
            let set = RecordBatchDecoder::decode(&mut one)
                .map_err(|e| format!("{topic}-{p}: records: {e}"))?;
            for r in &set.records {
                out.push(if r.control {
                    Entry::Control {
                        offset: r.offset,
                        producer_id: r.producer_id,
                        commit: control_is_commit(&r.key),
                    }
                } else if r.producer_id == -1 && r.key.as_deref() == Some(BARRIER_KEY) {
                    Entry::DataBarrier { offset: r.offset }
                } else {
                    Entry::Data {
                        offset: r.offset,
                        producer_id: r.producer_id,
                        producer_epoch: r.producer_epoch,
                        key: key_text(&r.key),
                        transactional: r.transactional,
                    }
                });
            }
            next = header.last_offset() + 1;
            advanced = true;
        }
        if !advanced || next >= fp.high_watermark {
            return Ok(out);
        }
    }
}

/// Every entry of every partition of `topic` on the cluster at `bootstrap`.
pub async fn read_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<Vec<Entry>>, String> {
    let leaders = leaders(bootstrap, topic, partitions).await?;
    let mut out = Vec::new();
    for (p, leader) in leaders.iter().enumerate() {
        out.push(read_partition(leader, topic, p as i32).await?);
    }
    Ok(out)
}

/// The data records of a source topic (control batches and barriers left out).
pub fn source_records(log: Vec<Vec<Entry>>) -> Vec<Vec<SourceRecord>> {
    log.into_iter()
        .map(|p| {
            p.into_iter()
                .filter_map(|e| match e {
                    Entry::Data { offset, key, .. } => Some(SourceRecord { offset, key }),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The data records of each partition: how many.
pub fn data_counts(log: &[Vec<Entry>]) -> Vec<usize> {
    log.iter()
        .map(|p| p.iter().filter(|e| matches!(e, Entry::Data { .. })).count())
        .collect()
}

/// The log as text, one entry a line (`partition offset kind producer_id epoch key`; kind: data,
/// txn-data, commit, abort, barrier), kept next
/// to the history to read a failing seed.
pub fn dump(log: &[Vec<Entry>]) -> String {
    let mut out = String::new();
    for (p, entries) in log.iter().enumerate() {
        for e in entries {
            let line = match e {
                Entry::Data {
                    offset,
                    producer_id,
                    producer_epoch,
                    key,
                    transactional,
                } => {
                    let kind = if *transactional { "txn-data" } else { "data" };
                    format!("{p}\t{offset}\t{kind}\t{producer_id}\t{producer_epoch}\t{key}\n")
                }
                Entry::Control {
                    offset,
                    producer_id,
                    commit,
                } => {
                    let kind = if *commit { "commit" } else { "abort" };
                    format!("{p}\t{offset}\t{kind}\t{producer_id}\t\t\n")
                }
                Entry::DataBarrier { offset } => format!("{p}\t{offset}\tbarrier\t-1\t\t\n"),
            };
            out.push_str(&line);
        }
    }
    out
}

/// Whether the destination holds the source's records: as many per partition (the agent copies
/// exactly once), or every source key of each partition (MirrorMaker 2 copies at least once).
fn caught_up(tool: Tool, source: &[Vec<Entry>], destination: &[Vec<Entry>]) -> bool {
    match tool {
        Tool::Agent => data_counts(source) == data_counts(destination),
        Tool::MirrorMaker2 => source.iter().zip(destination).all(|(s, d)| {
            let keys: HashSet<&str> = d.iter().filter_map(data_key).collect();
            s.iter().filter_map(data_key).all(|k| keys.contains(k))
        }),
    }
}

fn data_key(e: &Entry) -> Option<&str> {
    match e {
        Entry::Data { key, .. } => Some(key.as_str()),
        _ => None,
    }
}

/// Waits until the destination holds the source's records (the mirroring tool caught up): the
/// seconds it took, or `None` after a minute.
pub async fn wait_caught_up(tool: Tool, source: &str, destination: &str) -> Option<f64> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let s = read_topic(source, TOPIC, PARTITIONS).await;
        let d = read_topic(destination, TOPIC, PARTITIONS).await;
        if let (Ok(s), Ok(d)) = (s, d) {
            if caught_up(tool, &s, &d) {
                return Some(started.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// Waits until every partition of the topic on `destination` holds a data record (the
/// mirroring tool copies).
pub async fn wait_copying(destination: &str, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Ok(d) = read_topic(destination, TOPIC, PARTITIONS).await {
            if data_counts(&d).iter().all(|n| *n > 0) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "the mirroring tool copied nothing to {destination} within {} s",
        limit.as_secs()
    ))
}

/// The whole topic on `bootstrap`, once two readings agree (60 s at most).
pub async fn read_settled(bootstrap: &str) -> Result<Vec<Vec<Entry>>, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last: Option<Vec<Vec<Entry>>> = None;
    let mut why = String::new();
    while Instant::now() < deadline {
        match read_topic(bootstrap, TOPIC, PARTITIONS).await {
            Ok(now) => {
                if last.as_ref() == Some(&now) {
                    return Ok(now);
                }
                last = Some(now);
            }
            Err(e) => why = e,
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    Err(format!(
        "{bootstrap}: {TOPIC} could not be read to a settled end: {why}"
    ))
}
