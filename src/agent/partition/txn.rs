//! A partition task's part in mirroring transactions: a source control batch (a COMMIT or ABORT
//! marker) is reproduced on the destination with WriteTxnMarkers through the gateway's mirror
//! listener, with the source marker's producer id, epoch, result and coordinator epoch, at the
//! next destination offset of the map; and a transactional batch the destination refuses because
//! its coordinator verifies transactions switches the destination's verification off (or fails,
//! per the mirror's `transactions.verification`).
//!
//! Rules:
//! - A marker takes one offset on both sides. The broker answers no offset, so the marker is
//!   recorded at `next_dst`; the next append's acknowledged offset proves it (`check_ack`).
//! - WriteTxnMarkers is not deduplicated: after an unknown outcome the destination log end is
//!   read, and the batch at `next_dst` is matched (a control batch of the same producer id and
//!   epoch) before anything is resent.
//! - An empty control batch (compaction removed its marker) has nothing to write: skipped.
//! - The PSM is told of each marker at its offset (the produce tap never sees WriteTxnMarkers).
//!
//! Owns: these rules. Must not touch: data batches (the parent's `append`), the offset map's
//! format.

use kafka_protocol::messages::ApiKey;

use crate::mirror::PartitionState;
use crate::protocol::batch::{control_marker, BatchHeader, ControlType};
use crate::protocol::txn_marker::MarkerSpec;
use crate::psm::Marker;

use super::{not_appended, unknown_outcome, Halt, Step, Task};
use crate::client::mirror_ops;

/// Refusals of a transactional batch for verification after which the partition fails even
/// though the destination's verification is off (the setting reaches every broker in
/// milliseconds; a refusal that outlasts this many back-offs is something else).
const MAX_VERIFICATION_REFUSALS: u32 = 8;

impl Task {
    /// A source control batch: its marker reproduced on the destination (module doc).
    pub(super) async fn mirror_marker(&mut self, h: &BatchHeader, b: &[u8]) -> Step<()> {
        let marker = control_marker(h, b).map_err(|e| {
            Halt::Fail(format!(
                "the source control batch at offset {} cannot be read: {e}",
                h.base_offset
            ))
        })?;
        let Some(marker) = marker else {
            // Compaction left the batch empty: nothing to reproduce.
            self.skip_source(h);
            return Ok(());
        };
        let commit = match marker.control_type {
            ControlType::Commit => true,
            ControlType::Abort => false,
            ControlType::Other(t) => {
                return Err(Halt::Fail(format!(
                    "the source control batch at offset {} holds control record type {t}, which is not a transaction marker: not mirrored",
                    h.base_offset
                )))
            }
        };
        if h.last_offset_delta != 0 {
            return Err(Halt::Fail(format!(
                "the source control batch at offset {} spans {} offsets; a marker takes one",
                h.base_offset,
                h.last_offset_delta + 1
            )));
        }
        let spec = MarkerSpec {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            commit,
            coordinator_epoch: marker.coordinator_epoch.unwrap_or(0),
        };
        let at = self.next_dst;
        self.write_marker(h, b, spec).await?;
        self.record(h.base_offset, at, 1);
        self.m.count_marker(commit);
        self.m.controller.psm_marker(
            &self.topic,
            self.partition,
            at,
            crate::psm::registry::AppendedMarker {
                producer_id: spec.producer_id,
                epoch: spec.producer_epoch,
                marker: if commit {
                    Marker::Commit
                } else {
                    Marker::Abort
                },
                coordinator_epoch: spec.coordinator_epoch,
                timestamp: crate::mirror::screening::now_ms(),
            },
        );
        Ok(())
    }

    /// Write the marker at `next_dst`, retrying without ever writing it twice.
    async fn write_marker(&mut self, h: &BatchHeader, b: &[u8], spec: MarkerSpec) -> Step<()> {
        let mut attempt = 0u32;
        loop {
            if !self.next_attempt(&mut attempt).await? {
                continue;
            }
            let Some(c) = self.dst.as_mut() else { continue };
            let unknown = match mirror_ops::write_marker(c, &self.topic, self.partition, spec).await {
                Ok(0) => return Ok(()),
                Ok(code) if code == crate::mirror::admission::REJECT_ERROR_CODE => {
                    // Refused by the gateway: fenced (failover), paused, or read-only.
                    if self.m.controller.state_of(&self.topic, self.partition)
                        != Some(PartitionState::Mirroring)
                    {
                        return Err(Halt::Stop);
                    }
                    tracing::warn!(topic = %self.topic, partition = self.partition, "marker refused by the gateway; retrying");
                    false
                }
                Ok(code) if not_appended(code) => {
                    self.dst = None;
                    let _ = self.m.cluster.refresh().await;
                    false
                }
                Ok(code) if unknown_outcome(code) => {
                    self.dst = None;
                    true
                }
                Ok(code) => {
                    return Err(Halt::Fail(format!(
                        "the destination refused the {} marker of source offset {} (producer id {}, epoch {}, coordinator epoch {}) \
                         with error code {code}{}",
                        if spec.commit { "COMMIT" } else { "ABORT" },
                        h.base_offset,
                        spec.producer_id,
                        spec.producer_epoch,
                        spec.coordinator_epoch,
                        match code {
                            29 | 31 => " (WriteTxnMarkers needs CLUSTER_ACTION or ALTER on the CLUSTER resource for the gateway's destination principal)",
                            47 => " (INVALID_PRODUCER_EPOCH: the destination holds a newer epoch of this producer id)",
                            52 => " (TRANSACTION_COORDINATOR_FENCED: the destination holds a newer coordinator epoch of this producer id)",
                            35 => " (the destination does not support WriteTxnMarkers version 1)",
                            _ => "",
                        }
                    )))
                }
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = self.partition, error = %e, api = ?ApiKey::WriteTxnMarkers, "marker outcome unknown");
                    self.dst = None;
                    true
                }
            };
            if unknown {
                if self.appended_already(b).await?.is_some() {
                    tracing::info!(topic = %self.topic, partition = self.partition, offset = self.next_dst, "a marker whose answer was lost is in the destination log: not written again");
                    self.m.count_unknown_outcome("already_appended");
                    return Ok(());
                }
                self.m.count_unknown_outcome("resent");
            }
        }
    }

    /// Move past a source batch that has nothing to append (the offset map is not changed:
    /// after a restart the batch is read and skipped again).
    fn skip_source(&mut self, h: &BatchHeader) {
        self.next_src = h.last_offset() + 1;
        self.stats
            .next_source
            .store(self.next_src, std::sync::atomic::Ordering::Relaxed);
    }

    /// A transactional batch was refused with INVALID_PRODUCER_ID_MAPPING for the
    /// `refusals`-th time: have the destination's verification switched off (or fail).
    pub(super) async fn verification_off(
        &mut self,
        refusals: u32,
        message: Option<String>,
    ) -> Step<()> {
        if refusals > MAX_VERIFICATION_REFUSALS {
            return Err(Halt::Fail(format!(
                "the destination keeps refusing transactional batches with INVALID_PRODUCER_ID_MAPPING{} although {} is false: \
                 check that no broker overrides it (kafka-configs --describe --entity-type brokers --all)",
                message.map(|m| format!(" ({m})")).unwrap_or_default(),
                mirror_ops::VERIFICATION_CONFIG
            )));
        }
        let leader = self.dest_leader();
        self.m
            .transactions
            .verification_off(&self.m.name, &self.m.cluster, leader, self.m.dest_timeout)
            .await
            .map_err(Halt::Fail)?;
        self.dst = None;
        Ok(())
    }
}
