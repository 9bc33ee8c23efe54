//! The producer id of a failover's control barriers: asked from the brokers (an idempotent
//! InitProducerId, never a transactional id's) until one is free of every producer the brokers,
//! the PSM and the screening set know for the partitions (review F15).
//!
//! Owns: the InitProducerId and DescribeProducers requests of a failover. Must not touch: the
//! records (the executor records the chosen id before any marker is written with it).

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::describe_producers_response::ProducerState;
use kafka_protocol::messages::DescribeProducersRequest;
use kafka_protocol::protocol::StrBytes;

use super::tails::join_all;
use super::{KafkaFailoverIo, NO_LEADER};
use crate::failover::{InUse, NewProducer, PartitionKey, ProducerIdError};
use crate::mirror::state::BarrierProducer;

/// Most idempotent producer ids a failover asks for to find one for its control barriers that
/// no producer of its partitions uses.
const BARRIER_PID_ASKS: usize = 1 + 64 * 16;

impl KafkaFailoverIo {
    /// A producer id and epoch from an idempotent InitProducerId (no transactional id) sent to
    /// the leader of one of `parts`, that no producer in `parts` uses: mirrored traffic may have
    /// used the very ids the brokers hand out next (review F15), and a marker for such an id
    /// would be refused (its epoch is below the mirrored one) or, worse, end a mirrored open
    /// transaction. Ids are asked for until one is free (at most [`BARRIER_PID_ASKS`]).
    pub(super) async fn new_barrier_producer(
        &self,
        parts: &[PartitionKey],
    ) -> Result<NewProducer, ProducerIdError> {
        use kafka_protocol::messages::InitProducerIdRequest;
        let in_use = self.producer_ids_in_use(parts).await?;
        let taken = &in_use.taken;
        let addr = parts
            .iter()
            .filter(|p| !in_use.unreachable.contains(p))
            .find_map(|p| self.leader_addr(&p.0, p.1))
            .ok_or_else(|| {
                ProducerIdError::retry(format!(
                    "no partition's leader could be asked for its producers ({})",
                    in_use.why
                ))
            })?;
        let mut c = self
            .cluster
            .client(&addr, self.timeout)
            .await
            .map_err(|e| ProducerIdError::retry(format!("InitProducerId to {addr}: {e}")))?;
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let mut asked = 0usize;
        let mut n = 1usize;
        let mut last_error = 0i16;
        // A broker loading its coordinator state answers 14 or 15 for a while: retried.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while asked < BARRIER_PID_ASKS {
            let answers = c
                .send_pipelined(&req, 4, n)
                .await
                .map_err(|e| ProducerIdError::retry(format!("InitProducerId to {addr}: {e}")))?;
            if answers.iter().all(|r| matches!(r.error_code, 14 | 15))
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            asked += n;
            // A broker between two blocks of producer ids answers part of a pipelined round
            // with 14 (it is fetching its next block): asked again shortly, not a failure.
            let mut loading = false;
            for r in answers {
                if matches!(r.error_code, 14 | 15) {
                    loading = true;
                    continue;
                }
                if r.error_code != 0 || r.producer_id.0 < 0 {
                    last_error = r.error_code;
                    continue;
                }
                if !taken.contains(&r.producer_id.0) {
                    return Ok(NewProducer {
                        producer: BarrierProducer {
                            producer_id: r.producer_id.0,
                            producer_epoch: r.producer_epoch,
                        },
                        unreachable: in_use.unreachable,
                        why: in_use.why,
                    });
                }
            }
            if last_error != 0 {
                return Err(ProducerIdError::of_code(
                    format!("InitProducerId to {addr} answered error code {last_error}"),
                    last_error,
                ));
            }
            if loading {
                if tokio::time::Instant::now() >= deadline {
                    return Err(ProducerIdError::retry(format!(
                        "InitProducerId to {addr} still answered COORDINATOR_LOAD_IN_PROGRESS after 30 s"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            n = 64;
        }
        Err(ProducerIdError {
            reason: format!(
                "the {asked} producer ids {addr} handed out are all used by producers of the partitions (mirrored traffic)"
            ),
            fallback: true,
        })
    }

    /// The producer ids the barrier's must differ from: those the brokers hold for `parts`
    /// (DescribeProducers to each leader), those the PSM holds for them, and the screened ones.
    pub(super) async fn producer_ids_in_use(
        &self,
        parts: &[PartitionKey],
    ) -> Result<InUse, ProducerIdError> {
        let mut taken: std::collections::HashSet<i64> = self.screening.ids().into_iter().collect();
        taken.extend(self.psm_ids(parts));
        let d = self.describe_producers(parts).await?;
        taken.extend(d.producers.iter().map(|(_, p)| p.producer_id.0));
        Ok(InUse {
            taken,
            unreachable: d.unreachable,
            why: d.why,
        })
    }

    /// DescribeProducers of `parts`, one request per leader: the active producers of each
    /// partition asked, and the partitions whose leader could not be asked (with why). An error
    /// code answered for a partition ends it.
    pub(super) async fn describe_producers(
        &self,
        parts: &[PartitionKey],
    ) -> Result<Described, ProducerIdError> {
        let (by_leader, mut unreachable) = self.by_leader(parts);
        let mut why = if unreachable.is_empty() {
            String::new()
        } else {
            NO_LEADER.to_string()
        };
        let mut producers = Vec::new();
        // Every leader at once.
        let per_leader = join_all(
            by_leader
                .into_iter()
                .map(|(addr, ps)| async move {
                    let req = describe_producers_request(&ps);
                    let resp = async {
                        let mut c = self.cluster.client(&addr, self.timeout).await?;
                        c.send(&req, 0).await
                    }
                    .await;
                    (addr, ps, resp)
                })
                .collect(),
        )
        .await;
        for (addr, ps, resp) in per_leader {
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    // That leader's partitions fail alone (retried); the others go on.
                    why = format!("DescribeProducers to {addr}: {e}");
                    unreachable.extend(ps);
                    continue;
                }
            };
            for t in resp.topics {
                let topic = t.name.0.to_string();
                for p in t.partitions {
                    if p.error_code != 0 {
                        return Err(ProducerIdError::of_code(
                            format!(
                                "DescribeProducers for {topic}-{} answered error code {}",
                                p.partition_index, p.error_code
                            ),
                            p.error_code,
                        ));
                    }
                    let k: PartitionKey = (topic.clone(), p.partition_index);
                    producers.extend(p.active_producers.into_iter().map(|a| (k.clone(), a)));
                }
            }
        }
        Ok(Described {
            producers,
            unreachable,
            why,
        })
    }
}

/// A DescribeProducers request for `parts` (each topic named once).
pub(super) fn describe_producers_request(parts: &[PartitionKey]) -> DescribeProducersRequest {
    let mut topics: Vec<TopicRequest> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for (t, p) in parts {
        let i = *at.entry(t.as_str()).or_insert_with(|| {
            topics.push(TopicRequest::default().with_name(StrBytes::from_string(t.clone()).into()));
            topics.len() - 1
        });
        topics[i].partition_indexes.push(*p);
    }
    DescribeProducersRequest::default().with_topics(topics)
}

/// What [`KafkaFailoverIo::describe_producers`] found.
pub(super) struct Described {
    pub producers: Vec<(PartitionKey, ProducerState)>,
    pub unreachable: Vec<PartitionKey>,
    pub why: String,
}
