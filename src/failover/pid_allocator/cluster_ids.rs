//! The real I/O of the producer-id allocator step: fresh idempotent producer ids from the
//! destination brokers.
//!
//! Owns: a small pool of the gateway's own connections per broker (the cluster's TLS and SASL),
//! kept between calls and dropped after an error, and the pipelined InitProducerId requests.
//! Must not touch: the policy (which broker, how many ids, when to stop: the parent's
//! `advance`), metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::InitProducerIdRequest;

use crate::client::KafkaClient;
use crate::cluster::ClusterView;

use super::{IdAnswer, IdSource};

/// The real [`IdSource`]: the gateway's own connections to the destination brokers (the
/// cluster's TLS and SASL), kept between calls and dropped after an error.
pub struct ClusterIds {
    cluster: Arc<ClusterView>,
    timeout: Duration,
    idle: Mutex<HashMap<i32, Vec<KafkaClient>>>,
}

impl ClusterIds {
    /// `timeout` bounds connecting and each pipelined round.
    pub fn new(cluster: Arc<ClusterView>, timeout: Duration) -> Self {
        ClusterIds {
            cluster,
            timeout,
            idle: Mutex::new(HashMap::new()),
        }
    }
}

impl IdSource for ClusterIds {
    async fn fresh_ids(&self, node: i32, n: usize) -> Result<Vec<IdAnswer>, String> {
        let addr = self
            .cluster
            .broker_addr(node)
            .ok_or_else(|| format!("broker {node} is not in the destination's metadata"))?;
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&node)
            .and_then(|v| v.pop());
        let mut client = match pooled {
            Some(c) if c.addr() == addr => c,
            _ => self
                .cluster
                .client(&addr, self.timeout)
                .await
                .map_err(|e| e.to_string())?,
        };
        // Idempotent (no transactional id): the broker hands out an id and keeps no state.
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let answers = client
            .send_pipelined(&req, 4, n)
            .await
            .map_err(|e| e.to_string())?;
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node)
            .or_default()
            .push(client);
        Ok(answers
            .into_iter()
            .map(|r| {
                if r.error_code == 0 {
                    Ok(r.producer_id.0)
                } else {
                    Err(r.error_code)
                }
            })
            .collect())
    }
}
