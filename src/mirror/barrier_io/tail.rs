//! Reading the tail of a partition's log during a failover: this failover's barrier in it (from
//! where the log ended before it, when several instances recorded that), the batches that
//! landed after a barrier, and the last mirrored batch before it.
//!
//! Owns: those reads and how a barrier of this failover is recognised ([`OwnBarrier`]). Must
//! not touch: what the executor does with them.

use crate::protocol::barrier::parse_barrier;
use crate::protocol::batch::{BatchHeader, BatchWalker};

use super::super::failover::{FoundBarrier, TailBatch};
use super::super::state::BarrierKind;
use super::{KafkaFailoverIo, NO_LEADER};

impl KafkaFailoverIo {
    /// Look for this failover's barrier in the log tail of a partition (the last one, when a
    /// late write made the failover write more than one): a data barrier carrying the failover
    /// id, or a control batch (ABORT marker) of `producer_id`, the control barrier's recorded
    /// producer id.
    pub(super) async fn find_barrier_in_log(
        &self,
        topic: &str,
        partition: i32,
        fid: &str,
        producer_id: Option<i64>,
        from: Option<i64>,
    ) -> Option<FoundBarrier> {
        let addr = self.leader_addr(topic, partition)?;
        let mut c = self.cluster.client(&addr, self.timeout).await.ok()?;
        let start = c
            .list_offset(topic, partition, crate::client::EARLIEST)
            .await
            .ok()?;
        // From where the log ended before the failover's first barrier, when recorded (several
        // instances); else the barrier follows the last mirrored batch: look at the last few.
        let from = match from {
            Some(from) => from,
            None => {
                let end = c
                    .list_offset(topic, partition, crate::client::LATEST)
                    .await
                    .ok()?;
                end - 64
            }
        };
        let own = OwnBarrier {
            failover_id: fid,
            producer_id,
        };
        let tail = read_batches(&mut c, topic, partition, from.max(start), &own)
            .await
            .ok()?;
        tail.iter().rev().find_map(|b| {
            b.own_barrier.map(|kind| FoundBarrier {
                offset: b.base_offset,
                kind,
                producer_id: (kind == BarrierKind::Control).then_some(b.producer_id),
            })
        })
    }

    /// The batches of a partition from `from` to its end that are not this failover's barrier.
    pub(super) async fn late_batches_in_log(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        own: &OwnBarrier<'_>,
    ) -> Result<Vec<TailBatch>, String> {
        let addr = self
            .leader_addr(topic, partition)
            .ok_or_else(|| NO_LEADER.to_string())?;
        let mut c = self
            .cluster
            .client(&addr, self.timeout)
            .await
            .map_err(|e| e.to_string())?;
        let all = read_batches(&mut c, topic, partition, from, own).await?;
        Ok(all
            .into_iter()
            .filter(|b| b.own_barrier.is_none())
            .collect())
    }

    /// The last offset of the last data batch before offset `before` (a barrier) in a
    /// partition's log, whoever mirrored it (review G15): control batches (markers, this
    /// failover's control barriers) and data barriers (of any failover) are not mirrored
    /// records. -1 when there is none down to the log start. Read backwards from `before`, a
    /// growing window at a time.
    pub(super) async fn last_data_before(
        &self,
        topic: &str,
        partition: i32,
        before: i64,
        own: &OwnBarrier<'_>,
    ) -> Result<i64, String> {
        let addr = self
            .leader_addr(topic, partition)
            .ok_or_else(|| NO_LEADER.to_string())?;
        let mut c = self
            .cluster
            .client(&addr, self.timeout)
            .await
            .map_err(|e| e.to_string())?;
        let start = c
            .list_offset(topic, partition, crate::client::EARLIEST)
            .await
            .map_err(|e| e.to_string())?;
        let mut until = before;
        let mut window = 64i64;
        while until > start {
            let from = until.saturating_sub(window).max(start);
            let mut last = None;
            let mut next = from;
            while next < until {
                let f = c
                    .fetch_partition(topic, partition, next, 1024 * 1024)
                    .await
                    .map_err(|e| e.to_string())?;
                let at = next;
                for item in BatchWalker::fetched(&f.records) {
                    let Ok((h, batch)) = item else { break };
                    if h.base_offset >= until {
                        next = until;
                        break;
                    }
                    let mirrored = !h.is_control()
                        && own.kind_of(&h, batch).is_none()
                        && !matches!(parse_barrier(batch), Ok(Some(_)));
                    if mirrored {
                        last = Some(h.last_offset().min(until - 1));
                    }
                    next = next.max(h.last_offset() + 1);
                }
                if next == at {
                    if at >= f.high_watermark {
                        break;
                    }
                    return Err(format!(
                        "no progress reading {topic}-{partition} at offset {at}"
                    ));
                }
            }
            if let Some(last) = last {
                return Ok(last);
            }
            until = from;
            window = window.saturating_mul(8);
        }
        Ok(-1)
    }
}

/// What identifies the failover's own barriers in a log: a data barrier carries the failover
/// id; a control barrier is an ABORT marker of the recorded producer id.
pub(crate) struct OwnBarrier<'a> {
    pub failover_id: &'a str,
    pub producer_id: Option<i64>,
}

impl OwnBarrier<'_> {
    /// The form of the barrier `batch` (header `h`) is, if it is one of this failover's.
    pub fn kind_of(&self, h: &BatchHeader, batch: &[u8]) -> Option<BarrierKind> {
        if let Some(pid) = self.producer_id {
            if crate::protocol::txn_marker::is_control_barrier(h, batch, pid) {
                return Some(BarrierKind::Control);
            }
        }
        if h.is_control() || self.failover_id.is_empty() {
            return None;
        }
        matches!(parse_barrier(batch), Ok(Some(v)) if v.failover_id == self.failover_id)
            .then_some(BarrierKind::Data)
    }
}

/// The batches of a partition from `from` to its high watermark.
pub(super) async fn read_batches(
    c: &mut crate::client::KafkaClient,
    topic: &str,
    partition: i32,
    from: i64,
    own: &OwnBarrier<'_>,
) -> Result<Vec<TailBatch>, String> {
    let mut out = Vec::new();
    let mut from = from;
    loop {
        let f = c
            .fetch_partition(topic, partition, from, 1024 * 1024)
            .await
            .map_err(|e| e.to_string())?;
        if from >= f.high_watermark {
            return Ok(out);
        }
        let mut next = from;
        for item in BatchWalker::fetched(&f.records) {
            let Ok((h, batch)) = item else { break };
            out.push(TailBatch {
                base_offset: h.base_offset,
                producer_id: h.producer_id,
                producer_epoch: h.producer_epoch,
                max_timestamp: h.max_timestamp,
                own_barrier: own.kind_of(&h, batch),
            });
            next = h.last_offset() + 1;
        }
        if next == from {
            return Err(format!(
                "no progress reading {topic}-{partition} at offset {from}"
            ));
        }
        from = next;
    }
}
