//! The chaos run's own clients, written here because no packaged client can play them:
//! - **the moved producer** (`mv`): an idempotent producer that writes the source, and after the
//!   failover carries on through a gateway with the *same* producer id, epoch and next
//!   sequences, as an application re-pointed without a restart would. The screening must refuse
//!   that id (its state on the destination is the mirrored one); refused, it asks the gateway for
//!   a new id and goes on;
//! - **the late mirror writer** (`late`): a mirroring tool that lags, producing through a
//!   gateway's mirror listener after the failover call. Fenced, it is refused; a write admitted
//!   after a partition's barrier is what the checker calls a mirror write after the barrier;
//! - **one-shot producers** (`os`): short-lived idempotent producers on the source (a command
//!   line tool, a function run), each one record per partition at sequence 0 under a producer
//!   id of its own. The destination holds their state after mirroring, so a local producer
//!   handed one of those ids would see its first batch taken for a duplicate: acknowledged and
//!   not written. The screening must keep that from happening.
//!
//! Owns: those clients' requests and their part of the history. Must not touch: the
//! gateways' processes, the clusters, the rules.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;

use super::check::{Origin, Outcome};
use super::clients::{with, Shared};
use super::logs::leaders;
use crate::batch::{encode, Producer};

const TIMEOUT: Duration = Duration::from_secs(5);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One record's Produce request (acks=all).
fn produce(topic: &str, partition: i32, key: &str, producer: Option<Producer>) -> ProduceRequest {
    let k = Bytes::from(key.to_string());
    let batch = encode(1, &k, |_| Some(k.clone()), producer);
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])])
}

/// Sends one record to the leader of its partition behind `bootstrap`: its offset, or why not.
async fn send_one(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    partition: i32,
    key: &str,
    producer: Option<Producer>,
) -> Result<i64, String> {
    let leaders = leaders(bootstrap, topic, partitions).await?;
    let leader = &leaders[partition as usize];
    let mut c = KafkaClient::connect(leader, TIMEOUT)
        .await
        .map_err(|e| format!("{leader}: {e}"))?;
    let resp = c
        .send(&produce(topic, partition, key, producer), 9)
        .await
        .map_err(|e| e.to_string())?;
    let pr = resp
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .next()
        .ok_or("no Produce answer")?;
    if pr.error_code != 0 {
        let msg = pr
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default();
        return Err(format!("error {}: {msg}", pr.error_code));
    }
    Ok(pr.base_offset)
}

/// An idempotent producer id from the cluster (or gateway) at `bootstrap`.
async fn init_producer_id(bootstrap: &str) -> Result<(i64, i16), String> {
    let mut c = KafkaClient::connect(bootstrap, TIMEOUT)
        .await
        .map_err(|e| format!("{bootstrap}: {e}"))?;
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    let resp = c.send(&req, 4).await.map_err(|e| e.to_string())?;
    if resp.error_code != 0 {
        return Err(format!("InitProducerId: error {}", resp.error_code));
    }
    Ok((resp.producer_id.0, resp.producer_epoch))
}

/// Where the moved producer writes: the source until the failover, then the gateways' client
/// listeners (the instance given by `target`, an index into `gateways`).
pub struct Moved {
    pub source: String,
    pub gateways: Vec<String>,
    pub topic: String,
    pub partitions: i32,
    /// Set once the mirror is STOPPED: write through the gateways from now on.
    pub moved: Arc<AtomicBool>,
    /// Set while the producer must not write (the source stopped, the failover not done).
    pub hold: Arc<AtomicBool>,
    pub target: Arc<AtomicUsize>,
    pub stop: Arc<AtomicBool>,
    pub every: Duration,
}

/// Runs the moved producer until `stop`; every record goes to `history`.
pub async fn moved_producer(m: Moved, history: Shared) {
    let mut producer: Option<(i64, i16)> = None;
    let mut seqs = vec![0i32; m.partitions as usize];
    let mut on_gateway = false;
    let mut n = 0u64;
    // A record without an answer is sent again with its sequence (the idempotent producer's
    // retry); moving to the gateways starts afresh.
    let mut retry: Option<(String, i32)> = None;
    let mut init_failures = 0u64;
    while !m.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(m.every).await;
        if m.hold.load(Ordering::Relaxed) {
            continue;
        }
        let now_moved = m.moved.load(Ordering::Relaxed);
        if now_moved && !on_gateway {
            // Re-pointed without a restart: same id, epoch and sequences.
            on_gateway = true;
            retry = None;
        }
        let bootstrap = if on_gateway {
            m.gateways[m.target.load(Ordering::Relaxed) % m.gateways.len()].clone()
        } else {
            m.source.clone()
        };
        let (pid, epoch) = match producer {
            Some(p) => p,
            None => match init_producer_id(&bootstrap).await {
                Ok(p) => {
                    seqs.iter_mut().for_each(|s| *s = 0);
                    *producer.insert(p)
                }
                Err(e) => {
                    init_failures += 1;
                    if init_failures <= 3 || init_failures % 100 == 0 {
                        eprintln!("chaos: moved producer: no producer id from {bootstrap} ({init_failures} tries): {e}");
                    }
                    continue;
                }
            },
        };
        let origin = if on_gateway {
            Origin::Local
        } else {
            Origin::Source
        };
        let (key, partition) = match retry.take() {
            Some(r) => r,
            None => {
                let key = format!("mv-{n}");
                let partition = (n % m.partitions as u64) as i32;
                n += 1;
                with(&history, |h| h.sent("mv", origin, &key, now_ms()));
                (key, partition)
            }
        };
        let p = Producer {
            id: pid,
            epoch,
            base_sequence: seqs[partition as usize],
        };
        match send_one(&bootstrap, &m.topic, m.partitions, partition, &key, Some(p)).await {
            Ok(offset) => {
                seqs[partition as usize] += 1;
                let outcome = Outcome::Acked { partition, offset };
                with(&history, |h| h.answered(&key, outcome, now_ms()));
            }
            Err(reason) => {
                let refused = reason.starts_with("error ");
                with(&history, |h| {
                    h.answered(&key, Outcome::Failed { reason }, now_ms())
                });
                if on_gateway && refused {
                    // Refused (screened, fenced epoch, sequence): a new id from the gateway.
                    producer = None;
                } else {
                    // No answer (the instance or a broker away): the outcome is unknown, so the
                    // same record goes again with its sequence, as an idempotent producer
                    // retries a batch. Another record under that sequence would be taken for a
                    // duplicate of this one if it was written: acknowledged, not written.
                    if on_gateway {
                        m.target.fetch_add(1, Ordering::Relaxed);
                    }
                    retry = Some((key, partition));
                }
            }
        }
    }
}

/// The late mirror writer: from its start until `stop`, one record every `every` through the
/// mirror listener of instance `n % gateways` in turn (not idempotent, as MirrorMaker 2's
/// default producer is not bound to the source's ids).
pub async fn late_mirror_writer(
    mirror_listeners: Vec<String>,
    topic: String,
    partitions: i32,
    stop: Arc<AtomicBool>,
    every: Duration,
    history: Shared,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(every).await;
        let key = format!("late-{n}");
        let partition = (n % partitions as u64) as i32;
        let bootstrap = &mirror_listeners[n as usize % mirror_listeners.len()];
        n += 1;
        with(&history, |h| h.sent("late", Origin::Late, &key, now_ms()));
        let outcome = match send_one(bootstrap, &topic, partitions, partition, &key, None).await {
            Ok(offset) => Outcome::Acked { partition, offset },
            Err(reason) => Outcome::Failed { reason },
        };
        with(&history, |h| h.answered(&key, outcome, now_ms()));
    }
}

/// One-shot producers on the source until `stop` (or `count` of them): every `every`, a fresh
/// idempotent producer id writes one record to each partition at sequence 0, then is dropped.
pub async fn one_shot_producers(
    source: String,
    topic: String,
    partitions: i32,
    count: u64,
    stop: Arc<AtomicBool>,
    every: Duration,
    history: Shared,
) {
    let mut n = 0u64;
    for _ in 0..count {
        tokio::time::sleep(every).await;
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok((id, epoch)) = init_producer_id(&source).await else {
            continue;
        };
        for partition in 0..partitions {
            let key = format!("os-{n}");
            n += 1;
            with(&history, |h| h.sent("os", Origin::Source, &key, now_ms()));
            let p = Producer {
                id,
                epoch,
                base_sequence: 0,
            };
            let outcome =
                match send_one(&source, &topic, partitions, partition, &key, Some(p)).await {
                    Ok(offset) => Outcome::Acked { partition, offset },
                    Err(reason) => Outcome::Failed { reason },
                };
            with(&history, |h| h.answered(&key, outcome, now_ms()));
        }
    }
}
