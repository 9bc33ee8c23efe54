//! Topics a benchmark creates for its run and deletes afterwards, through any Kafka listener
//! (a broker or the gateway's client listener).
//!
//! Owns: the CreateTopics and DeleteTopics requests. Must not touch: what is written to them.

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, DeleteTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;

const TIMEOUT: Duration = Duration::from_secs(10);

fn name(n: &str) -> TopicName {
    TopicName(StrBytes::from_string(n.to_string()))
}

/// Creates each `(name, partitions)` topic (replication factor 1) through `bootstrap`; an error
/// names the first topic the cluster refused.
pub async fn create(bootstrap: &str, topics: &[(String, i32)]) -> Result<(), String> {
    let mut c = KafkaClient::connect(bootstrap, TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(
            topics
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
    match resp.topics.iter().find(|t| t.error_code != 0) {
        Some(t) => Err(format!(
            "cannot create {}: error {}",
            t.name.0, t.error_code
        )),
        None => Ok(()),
    }
}

/// Deletes `topics` through `bootstrap`, best effort (a benchmark's clean-up).
pub async fn delete(bootstrap: &str, topics: &[String]) {
    if let Ok(mut c) = KafkaClient::connect(bootstrap, TIMEOUT).await {
        let req = DeleteTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topic_names(topics.iter().map(|t| name(t)).collect());
        let _ = c.send(&req, 4).await;
    }
}
