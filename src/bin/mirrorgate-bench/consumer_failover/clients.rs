//! The producer of `consumer-failover`: it writes the source topic under load (this process,
//! records keyed `r<N>`). The group members are `crate::group_member`'s.
//!
//! Owns: the Produce requests to the source and what was acknowledged. Must not touch: the
//! gateway, the rig's clusters, the figures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;

/// Time between two Produce requests (one batch per partition each).
const TICK: Duration = Duration::from_millis(20);
/// Bytes of each record's value.
const VALUE_BYTES: usize = 100;

/// What the producer wrote and the source acknowledged.
#[derive(Debug, Default)]
pub struct Produced {
    /// `(partition, key)` of every acknowledged record.
    pub acked: Vec<(i32, String)>,
    /// Produce requests that failed (the last ones: the source was killed).
    pub errors: u64,
    pub last_error: Option<String>,
}

fn produce_request(
    topic: &str,
    partitions: i32,
    per_partition: usize,
    next: u64,
) -> ProduceRequest {
    let value = Bytes::from(vec![b'v'; VALUE_BYTES]);
    let data = (0..partitions)
        .map(|p| {
            let first = next + (p as u64) * per_partition as u64;
            let batch = crate::batch::encode(
                per_partition,
                &value,
                |i| Some(Bytes::from(format!("r{}", first + i as u64))),
                None,
            );
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(batch))
        })
        .collect();
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(data)])
}

/// Writes `per_partition` records to every partition of `topic` on `source` (a one-broker cluster:
/// its broker leads every partition) each [`TICK`] until `stop`; after a failed request it
/// reconnects, and once `stop` is set it ends.
pub async fn produce(
    source: String,
    topic: String,
    partitions: i32,
    per_partition: usize,
    stop: Arc<AtomicBool>,
) -> Produced {
    let mut out = Produced::default();
    let mut next = 0u64;
    let mut client: Option<KafkaClient> = None;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let c = match client.as_mut() {
            Some(c) => c,
            None => match KafkaClient::connect(&source, Duration::from_secs(2)).await {
                Ok(c) => client.insert(c),
                Err(e) => {
                    out.errors += 1;
                    out.last_error = Some(e.to_string());
                    continue;
                }
            },
        };
        let req = produce_request(&topic, partitions, per_partition, next);
        let sent = next;
        next += partitions as u64 * per_partition as u64;
        match c.send(&req, 9).await {
            Ok(resp) => {
                for pr in resp
                    .responses
                    .iter()
                    .flat_map(|t| t.partition_responses.iter())
                {
                    if pr.error_code != 0 {
                        out.errors += 1;
                        out.last_error =
                            Some(format!("partition {}: error {}", pr.index, pr.error_code));
                        continue;
                    }
                    let first = sent + (pr.index as u64) * per_partition as u64;
                    out.acked.extend(
                        (0..per_partition as u64).map(|i| (pr.index, format!("r{}", first + i))),
                    );
                }
            }
            Err(e) => {
                out.errors += 1;
                out.last_error = Some(e.to_string());
                client = None;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_partition_of_a_produce_request_gets_its_own_run_of_keys() {
        let req = produce_request("t", 2, 3, 10);
        let keys: Vec<Vec<String>> = req.topic_data[0]
            .partition_data
            .iter()
            .map(|p| {
                let mut b = p.records.clone().expect("records");
                kafka_protocol::records::RecordBatchDecoder::decode(&mut b)
                    .expect("decodes")
                    .records
                    .iter()
                    .map(|r| {
                        String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned()
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            keys,
            vec![vec!["r10", "r11", "r12"], vec!["r13", "r14", "r15"]]
        );
    }
}
