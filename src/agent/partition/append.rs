//! A partition task's appends through the gateway's mirror listener: connecting to the
//! leader's port, one batch per request with its retries (a batch with a producer id is resent
//! as-is and deduplicated by the broker; one without is resent only after the destination log
//! shows it is not there), and the verification refusal of a transactional batch.
//!
//! Owns: that retry loop. Must not touch: what is appended (the parent's kinds), the map.

use bytes::Bytes;

use crate::client::KafkaClient;
use crate::mirror::PartitionState;
use crate::protocol::batch::BatchHeader;

use super::{
    backoff, check_ack, not_appended, unknown_outcome, Halt, Step, Task,
    INVALID_PRODUCER_ID_MAPPING, PRODUCE_TIMEOUT,
};
use crate::client::mirror_ops;

impl Task {
    /// Append one batch as-is; returns the destination base offset.
    pub(super) async fn append(&mut self, h: &BatchHeader, batch: Bytes) -> Step<i64> {
        let mut attempt = 0u32;
        let mut verification_refusals = 0u32;
        let mut outcome_unknown = false;
        if h.is_transactional() && !self.m.transactions.known_off() {
            // Checked before the first transactional batch (not only on its refusal).
            self.verification_off(0, None).await?;
        }
        loop {
            if !self.next_attempt(&mut attempt).await? {
                continue;
            }
            let Some(c) = self.dst.as_mut() else { continue };
            let m = self.m.clone();
            let txid = h
                .is_transactional()
                .then_some(m.transactions.transactional_id.as_str());
            let unknown = match mirror_ops::produce_one(c, &self.topic, self.partition, batch.clone(), txid)
                .await
            {
                Ok((0, _, _)) if self.m.lose_append_answer() => {
                    tracing::warn!(topic = %self.topic, partition = self.partition, "test hook: the append's answer is dropped");
                    self.dst = None;
                    true
                }
                Ok((0, base, _)) => {
                    check_ack(self.next_dst, base).map_err(Halt::Fail)?;
                    if outcome_unknown {
                        self.mark_unmatched(false);
                    }
                    return Ok(base);
                }
                Ok((44, _, msg)) => {
                    // Refused by the gateway: fenced (failover), paused, or read-only.
                    if self.m.controller.state_of(&self.topic, self.partition)
                        != Some(PartitionState::Mirroring)
                    {
                        return Err(Halt::Stop);
                    }
                    tracing::warn!(topic = %self.topic, partition = self.partition, message = ?msg, "append refused by the gateway; retrying");
                    false
                }
                Ok((INVALID_PRODUCER_ID_MAPPING, _, msg)) if h.is_transactional() => {
                    // The destination verifies transactional batches against its own
                    // coordinator, which does not know the source's producers.
                    verification_refusals += 1;
                    self.verification_off(verification_refusals, msg).await?;
                    false
                }
                Ok((45, _, _)) if h.has_producer_id() && !h.is_transactional() && !h.is_control() => {
                    return Err(Halt::Sequence);
                }
                Ok((code, _, _)) if not_appended(code) => {
                    self.dst = None;
                    let _ = self.m.cluster.refresh().await;
                    false
                }
                Ok((code, _, _)) if unknown_outcome(code) => {
                    self.dst = None;
                    true
                }
                Ok((code, _, msg)) => {
                    return Err(Halt::Fail(format!(
                        "the destination refused the batch at source offset {} (producer id {}, epoch {}, sequence {}) \
                         with error code {code}{}",
                        h.base_offset,
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        msg.map(|m| format!(": {m}")).unwrap_or_default()
                    )))
                }
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = self.partition, error = %e, "append outcome unknown");
                    self.dst = None;
                    true
                }
            };
            if unknown {
                // Until an answer says where the batch is, the destination may hold it beyond
                // the map (a failover stopping the task now matches the tail).
                if !outcome_unknown {
                    outcome_unknown = true;
                    self.mark_unmatched(true);
                }
                // No producer id: the broker cannot deduplicate; look before resending.
                if h.producer_id < 0 {
                    if let Some(base) = self.appended_already(&batch).await? {
                        tracing::info!(topic = %self.topic, partition = self.partition, offset = base, "an append whose answer was lost is in the destination log: not resent");
                        self.m.count_unknown_outcome("already_appended");
                        self.mark_unmatched(false);
                        return Ok(base);
                    }
                }
                self.m.count_unknown_outcome("resent");
            }
        }
    }

    /// Before each attempt of a request to the mirror listener: back off (after the first),
    /// then connect; `false` when not connected yet. Right before the send, this instance must
    /// still own the agent at the epoch it ran with: an append is never sent on an ownership
    /// read a tick ago (review G2).
    pub(super) async fn next_attempt(&mut self, attempt: &mut u32) -> Step<bool> {
        if *attempt > 0 {
            self.sleep(backoff(*attempt)).await?;
        }
        *attempt += 1;
        let connected = self.connect_mirror().await?;
        if connected && !self.m.owns_the_agent() {
            tracing::info!(topic = %self.topic, partition = self.partition,
                "this instance no longer owns the built-in agent: the partition's task stops before its next append");
            return Err(Halt::Stop);
        }
        Ok(connected)
    }

    /// Connect to the gateway's mirror-listener port of the partition's leader when not
    /// connected; `false` when it cannot yet (retry after a back-off).
    pub(super) async fn connect_mirror(&mut self) -> Step<bool> {
        if self.dst.is_some() {
            return Ok(true);
        }
        let addr = match self.gateway_addr() {
            Ok(a) => a,
            Err(Halt::Retry(e)) => {
                tracing::debug!(topic = %self.topic, partition = self.partition, error = %e, "append waits");
                let _ = self.m.cluster.refresh().await;
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        match KafkaClient::connect_with(&self.m.mirror_connector, &addr, PRODUCE_TIMEOUT).await {
            Ok(c) => {
                self.dst = Some(c);
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(topic = %self.topic, partition = self.partition, error = %e, "cannot reach the gateway's mirror listener");
                Ok(false)
            }
        }
    }

    /// After an unknown outcome: whether the batch is already in the destination (its base
    /// offset), by comparing the destination log end with the offset map, and the batch found
    /// there with the one appended (`gapped::same_batch`: LogAppendTime restamping allowed).
    pub(super) async fn appended_already(&mut self, batch: &[u8]) -> Step<Option<i64>> {
        let mut attempt = 0;
        let end = loop {
            match self.dest_end().await {
                Ok(e) => break e,
                Err(Halt::Retry(e)) => {
                    attempt += 1;
                    tracing::warn!(topic = %self.topic, partition = self.partition, error = %e, "cannot read the destination log end");
                    self.sleep(backoff(attempt)).await?;
                }
                Err(e) => return Err(e),
            }
        };
        if end == self.next_dst {
            return Ok(None);
        }
        if end < self.next_dst {
            return Err(Halt::Fail(format!(
                "the destination log end {end} is below the {} the offset map recorded",
                self.next_dst
            )));
        }
        match self.dest_batch_at(self.next_dst).await? {
            Some(d) if super::gapped::same_batch(&d, batch) && d.base_offset == self.next_dst => {
                Ok(Some(d.base_offset))
            }
            _ => Err(Halt::Fail(format!(
                "after an unanswered append the destination log end moved to {end} with records the agent did not write (expected {})",
                self.next_dst
            ))),
        }
    }
}
