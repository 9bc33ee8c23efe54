//! Aborting the transactions still open in mirror partitions before their barrier (hazard H14:
//! a mirrored transaction the source never finished would hold the destination's last stable
//! offset forever, and `read_committed` consumers with it — nothing on the destination ends it,
//! its coordinator never heard of it). Per leader: DescribeProducers names the producers with an
//! open transaction, then one WriteTxnMarkers request writes an ABORT marker for each, with the
//! producer's own epoch and coordinator epoch (never above them: feasibility notes §A.4).
//!
//! Idempotent: a second pass finds nothing open. Owns: those two requests. Must not touch:
//! the failover's records (the executor decides what a failure means).

use std::collections::{HashMap, HashSet};

use crate::protocol::txn_marker::{markers_request, MarkerSpec, WRITE_TXN_MARKERS_VERSION};

use super::producer_id::describe_producers_request;
use super::tails::join_all;
use super::KafkaFailoverIo;
use crate::failover::{AbortedTxn, OpenTxnAborts, PartitionKey};

impl KafkaFailoverIo {
    pub(super) async fn abort_open(&self, mirror: &str, parts: &[PartitionKey]) -> OpenTxnAborts {
        let mut out = OpenTxnAborts::default();
        let (by_leader, leaderless) = self.by_leader(parts);
        if !leaderless.is_empty() {
            out.reason = "no leader known to abort open transactions on".into();
            out.failed.extend(leaderless);
        }
        // Every leader at once.
        let per_leader = join_all(
            by_leader
                .into_iter()
                .map(|(addr, ps)| async move {
                    let mut aborted = Vec::new();
                    let r = self.abort_on_leader(&addr, &ps, &mut aborted).await;
                    (addr, ps, aborted, r)
                })
                .collect(),
        )
        .await;
        for (addr, ps, aborted, r) in per_leader {
            match r {
                Ok(()) => out.aborted.extend(aborted),
                Err(e) => {
                    out.reason = format!("aborting open transactions on {addr}: {e}");
                    out.failed.extend(ps);
                }
            }
        }
        for a in &out.aborted {
            tracing::warn!(
                mirror, topic = %a.partition.0, partition = a.partition.1, producer_id = a.producer_id,
                epoch = a.epoch, first_offset = a.first_offset,
                "a mirrored transaction the source never finished was aborted before the barrier"
            );
        }
        self.metrics
            .txns_aborted
            .with_label_values(&[mirror])
            .inc_by(out.aborted.len() as u64);
        out
    }

    async fn abort_on_leader(
        &self,
        addr: &str,
        parts: &[PartitionKey],
        aborted: &mut Vec<AbortedTxn>,
    ) -> Result<(), String> {
        let mut c = self
            .cluster
            .client(addr, self.timeout)
            .await
            .map_err(|e| e.to_string())?;
        let resp = c
            .send(&describe_producers_request(parts), 0)
            .await
            .map_err(|e| format!("DescribeProducers: {e}"))?;
        let asked: HashSet<&PartitionKey> = parts.iter().collect();
        let mut open: Vec<AbortedTxn> = Vec::new();
        for t in &resp.topics {
            for p in &t.partitions {
                let key = (t.name.0.to_string(), p.partition_index);
                if !asked.contains(&key) {
                    continue;
                }
                if p.error_code != 0 {
                    return Err(format!(
                        "DescribeProducers {}-{}: error code {}",
                        key.0, key.1, p.error_code
                    ));
                }
                for a in p
                    .active_producers
                    .iter()
                    .filter(|a| a.current_txn_start_offset >= 0)
                {
                    open.push(AbortedTxn {
                        partition: key.clone(),
                        producer_id: a.producer_id.0,
                        epoch: a.producer_epoch as i16,
                        coordinator_epoch: a.coordinator_epoch,
                        first_offset: a.current_txn_start_offset,
                    });
                }
            }
        }
        if open.is_empty() {
            return Ok(());
        }
        // One marker per (producer, epoch, coordinator epoch), naming its partitions.
        let mut markers: HashMap<MarkerSpec, Vec<PartitionKey>> = HashMap::new();
        for o in &open {
            markers
                .entry(MarkerSpec {
                    producer_id: o.producer_id,
                    producer_epoch: o.epoch,
                    commit: false,
                    coordinator_epoch: o.coordinator_epoch,
                })
                .or_default()
                .push(o.partition.clone());
        }
        let markers: Vec<(MarkerSpec, Vec<PartitionKey>)> = markers.into_iter().collect();
        let resp = c
            .send(&markers_request(&markers), WRITE_TXN_MARKERS_VERSION)
            .await
            .map_err(|e| format!("WriteTxnMarkers: {e}"))?;
        for m in &resp.markers {
            for t in &m.topics {
                for p in &t.partitions {
                    if p.error_code != 0 {
                        return Err(format!(
                            "the ABORT marker of producer {} in {}-{} was refused with error code {}",
                            m.producer_id.0,
                            t.name.0.as_str(),
                            p.partition_index,
                            p.error_code
                        ));
                    }
                }
            }
        }
        aborted.extend(open);
        Ok(())
    }
}
