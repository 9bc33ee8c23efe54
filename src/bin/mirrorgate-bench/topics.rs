//! Topics a benchmark creates for its run and deletes afterwards, through any Kafka listener
//! (a broker or the gateway's client listener).
//!
//! A KRaft controller refuses a request that would append more than 10,000 metadata records at
//! once (POLICY_VIOLATION, error 44): one per topic and one per partition. Topics are created
//! in requests of at most [`RECORDS_PER_REQUEST`] records ([`plan`]); a topic with more
//! partitions than that is created with part of them and grown by CreatePartitions.
//!
//! Owns: the CreateTopics, CreatePartitions and DeleteTopics requests. Must not touch: what is
//! written to them.

use std::time::Duration;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Most metadata records one request may ask the controller for (KRaft's bound is 10,000; half
/// of it keeps each request short).
pub const RECORDS_PER_REQUEST: i64 = 5_000;

/// Topics per DeleteTopics request.
const TOPICS_PER_DELETE: usize = 100;

fn name(n: &str) -> TopicName {
    TopicName(StrBytes::from_string(n.to_string()))
}

/// One request of a creation plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// CreateTopics of these `(name, partitions)`.
    Create(Vec<(String, i32)>),
    /// CreatePartitions: grow topic `.0` to `.1` partitions in total.
    Grow(String, i32),
}

/// The requests that create `topics` with at most `limit` metadata records each (a topic
/// record and one per partition).
pub fn plan(topics: &[(String, i32)], limit: i64) -> Vec<Step> {
    let limit = limit.max(2);
    let mut steps = Vec::new();
    let mut batch: Vec<(String, i32)> = Vec::new();
    let mut records = 0i64;
    for (n, partitions) in topics {
        let first = i64::from(*partitions).min(limit - 1);
        if records + 1 + first > limit && !batch.is_empty() {
            steps.push(Step::Create(std::mem::take(&mut batch)));
            records = 0;
        }
        batch.push((n.clone(), first as i32));
        records += 1 + first;
        let mut have = first;
        while have < i64::from(*partitions) {
            if !batch.is_empty() {
                steps.push(Step::Create(std::mem::take(&mut batch)));
                records = 0;
            }
            have = (have + limit).min(i64::from(*partitions));
            steps.push(Step::Grow(n.clone(), have as i32));
        }
    }
    if !batch.is_empty() {
        steps.push(Step::Create(batch));
    }
    steps
}

/// Creates each `(name, partitions)` topic (replication factor 1) through `bootstrap`, in
/// requests the controller accepts ([`plan`]); an error names the first topic the cluster
/// refused.
pub async fn create(bootstrap: &str, topics: &[(String, i32)]) -> Result<(), String> {
    let mut c = KafkaClient::connect(bootstrap, TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    for step in plan(topics, RECORDS_PER_REQUEST) {
        let refused = match step {
            Step::Create(batch) => {
                let req = CreateTopicsRequest::default()
                    .with_timeout_ms(60_000)
                    .with_topics(
                        batch
                            .iter()
                            .map(|(n, partitions)| {
                                CreatableTopic::default()
                                    .with_name(name(n))
                                    .with_num_partitions(*partitions)
                                    .with_replication_factor(1)
                            })
                            .collect(),
                    );
                let resp = c.send(&req, 5).await.map_err(|e| e.to_string())?;
                resp.topics
                    .iter()
                    .find(|t| t.error_code != 0)
                    .map(|t| (t.name.0.to_string(), t.error_code))
            }
            Step::Grow(n, count) => {
                let req = CreatePartitionsRequest::default()
                    .with_timeout_ms(60_000)
                    .with_topics(vec![CreatePartitionsTopic::default()
                        .with_name(name(&n))
                        .with_count(count)]);
                let resp = c.send(&req, 3).await.map_err(|e| e.to_string())?;
                resp.results
                    .iter()
                    .find(|t| t.error_code != 0)
                    .map(|t| (t.name.0.to_string(), t.error_code))
            }
        };
        if let Some((t, code)) = refused {
            return Err(format!("cannot create {t}: error {code}"));
        }
    }
    Ok(())
}

/// Deletes `topics` through `bootstrap`, best effort (a benchmark's clean-up).
pub async fn delete(bootstrap: &str, topics: &[String]) {
    if let Ok(mut c) = KafkaClient::connect(bootstrap, TIMEOUT).await {
        for chunk in topics.chunks(TOPICS_PER_DELETE) {
            let req = DeleteTopicsRequest::default()
                .with_timeout_ms(60_000)
                .with_topic_names(chunk.iter().map(|t| name(t)).collect());
            let _ = c.send(&req, 4).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(n: usize, partitions: i32) -> Vec<(String, i32)> {
        (0..n).map(|i| (format!("t{i}"), partitions)).collect()
    }

    /// The metadata records each request of `steps` asks for.
    fn records(steps: &[Step]) -> Vec<i64> {
        let mut have: std::collections::HashMap<String, i64> = Default::default();
        steps
            .iter()
            .map(|s| match s {
                Step::Create(b) => b
                    .iter()
                    .map(|(n, p)| {
                        have.insert(n.clone(), i64::from(*p));
                        1 + i64::from(*p)
                    })
                    .sum(),
                Step::Grow(n, to) => {
                    let before = have.insert(n.clone(), i64::from(*to)).unwrap_or(0);
                    i64::from(*to) - before
                }
            })
            .collect()
    }

    #[test]
    fn ten_thousand_partitions_are_created_in_requests_the_controller_accepts() {
        let t = topics(100, 100);
        let steps = plan(&t, RECORDS_PER_REQUEST);
        assert!(steps.len() > 1, "{steps:?}");
        assert!(records(&steps).iter().all(|r| *r <= RECORDS_PER_REQUEST));
        let created: Vec<(String, i32)> = steps
            .iter()
            .flat_map(|s| match s {
                Step::Create(b) => b.clone(),
                Step::Grow(..) => Vec::new(),
            })
            .collect();
        assert_eq!(created, t, "every topic once, in order, whole");
    }

    #[test]
    fn a_topic_larger_than_one_request_is_created_then_grown() {
        let t = vec![("small".to_string(), 10), ("big".to_string(), 12_000)];
        let steps = plan(&t, RECORDS_PER_REQUEST);
        assert_eq!(
            steps,
            vec![
                Step::Create(vec![("small".into(), 10)]),
                Step::Create(vec![("big".into(), 4_999)]),
                Step::Grow("big".into(), 9_999),
                Step::Grow("big".into(), 12_000),
            ]
        );
        assert!(records(&steps).iter().all(|r| *r <= RECORDS_PER_REQUEST));
    }

    #[test]
    fn the_default_shape_is_one_request() {
        assert_eq!(plan(&topics(10, 100), RECORDS_PER_REQUEST).len(), 1);
    }
}
