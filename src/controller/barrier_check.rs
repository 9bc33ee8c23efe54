//! At start, every recorded barrier of a STOPPED partition is checked against the partition's
//! log (review F6).
//!
//! The duplicate-ack guard turns every local acknowledgement below a partition's barrier offset
//! into an error: it assumes the log still holds the barrier at that offset, with everything
//! older before it. A log cut below the barrier (an unclean leader election, a destination
//! restored from an older copy, a state directory from another cluster) breaks that: genuine
//! local appends then land below the recorded offset, and the guard would answer errors for
//! records that were written — producers resend, and records are doubled. So each barrier is
//! looked for once at start:
//!
//! | the log at the barrier offset | verdict |
//! |---|---|
//! | the batch there is this failover's barrier (data barrier with its failover id, or the ABORT marker of the recorded producer id) | present: the guard stays |
//! | the log starts after it (retention, DeleteRecords) or the next batch starts after it (compaction removed it) | cannot be checked: the guard stays (every older offset is still older) |
//! | the log ends at or before it, or another batch covers it | missing: the guard is dropped for the partition, ERROR log, `barrier_missing` in the API, `mirrorgate_protection_barriers_missing` |
//!
//! [`judge`] is the decision (pure); [`check_all`] reads the logs and hands the verdicts to the
//! controller, which owns the barriers.
//!
//! Owns: the decision and the reads. Must not touch: partition states, the state files (a
//! missing barrier is recomputed at each start, never recorded).

use std::time::Duration;

use crate::client::{EARLIEST, LATEST};
use crate::cluster::ClusterView;
use crate::metrics::Metrics;
use crate::protocol::batch::BatchWalker;

use crate::controller::{MirrorController, RecordedBarrier};

/// What the log says about a recorded barrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BarrierInLog {
    Present,
    /// Removed from the log, but not by cutting it below the barrier: still guards.
    Unverifiable(String),
    /// The log no longer matches the barrier: it must not guard.
    Missing(String),
}

/// The batch of the log at or after the barrier offset: (base offset, last offset, whether it
/// is the failover's own barrier).
pub type FirstBatch = (i64, i64, bool);

/// Decide from the partition's log start and end and the first batch read at the barrier
/// offset (`None`: nothing readable there).
pub fn judge(
    barrier: i64,
    log_start: i64,
    log_end: i64,
    first: Option<FirstBatch>,
) -> BarrierInLog {
    if log_end <= barrier {
        return BarrierInLog::Missing(format!(
            "the log ends at offset {log_end}, at or before the barrier at {barrier}: it was cut below the barrier"
        ));
    }
    if log_start > barrier {
        return BarrierInLog::Unverifiable(format!(
            "the log starts at {log_start}, after the barrier at {barrier} (retention or DeleteRecords)"
        ));
    }
    match first {
        Some((base, _, true)) if base == barrier => BarrierInLog::Present,
        Some((base, last, _)) if base <= barrier && barrier <= last => BarrierInLog::Missing(
            format!(
                "offset {barrier} lies in another batch ({base}..={last}), not the failover's barrier: the log was rewritten"
            ),
        ),
        Some((base, _, _)) if base > barrier => BarrierInLog::Unverifiable(format!(
            "the barrier's offset {barrier} is no longer in the log (the next batch starts at {base}: compaction)"
        )),
        _ => BarrierInLog::Unverifiable(format!("nothing readable at offset {barrier}")),
    }
}

/// Check every recorded barrier of `ctl` against its log and hand the verdicts to the
/// controller. A partition whose log cannot be read is left guarded (logged at WARN).
pub async fn check_all(
    ctl: &MirrorController,
    cluster: &ClusterView,
    metrics: &Metrics,
    timeout: Duration,
) {
    let gauge = prometheus::IntGauge::new(
        "mirrorgate_protection_barriers_missing",
        "Recorded barriers of STOPPED partitions that the partition's log no longer holds (checked at start): the duplicate-ack guard is off for them; GET /v1/mirrors/NAME/partitions says why (barrier_missing).",
    )
    .expect("valid metric");
    // Already registered (a second instance in one process) keeps the first; not a
    // transition result.
    let _ = metrics.registry().register(Box::new(gauge.clone()));
    let mut missing = 0;
    for b in ctl.recorded_barriers() {
        match read_and_judge(cluster, &b, timeout).await {
            Ok(BarrierInLog::Present) => {}
            Ok(BarrierInLog::Unverifiable(why)) => tracing::info!(
                topic = %b.topic, partition = b.partition, barrier = b.offset, "barrier not checked against the log: {why}"
            ),
            Ok(BarrierInLog::Missing(why)) => {
                tracing::error!(
                    topic = %b.topic, partition = b.partition, barrier = b.offset,
                    "the partition's log no longer holds its failover barrier ({why}); the duplicate-ack guard is off for it, so genuine acknowledgements are not turned into errors"
                );
                ctl.set_barrier_missing(&b.topic, b.partition, why);
                missing += 1;
            }
            Err(e) => tracing::warn!(
                topic = %b.topic, partition = b.partition, error = %e,
                "cannot check the barrier against the log; it keeps guarding"
            ),
        }
    }
    gauge.set(missing);
    ctl.set_barriers_checked();
}

async fn read_and_judge(
    cluster: &ClusterView,
    b: &RecordedBarrier,
    timeout: Duration,
) -> Result<BarrierInLog, String> {
    let addr = cluster
        .topic(&b.topic)
        .and_then(|t| t.leaders.get(b.partition as usize).copied())
        .filter(|l| *l >= 0)
        .and_then(|l| cluster.broker_addr(l))
        .ok_or_else(|| "no leader known".to_string())?;
    let mut c = cluster
        .client(&addr, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let start = c
        .list_offset(&b.topic, b.partition, EARLIEST)
        .await
        .map_err(|e| e.to_string())?;
    let end = c
        .list_offset(&b.topic, b.partition, LATEST)
        .await
        .map_err(|e| e.to_string())?;
    let first = if end > b.offset && start <= b.offset {
        let f = c
            .fetch_partition(&b.topic, b.partition, b.offset, 1024 * 1024)
            .await
            .map_err(|e| e.to_string())?;
        BatchWalker::fetched(&f.records)
            .filter_map(Result::ok)
            .find(|(h, _)| h.last_offset() >= b.offset)
            .map(|(h, batch)| (h.base_offset, h.last_offset(), b.is_own(&h, batch)))
    } else {
        None
    };
    Ok(judge(b.offset, start, end, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failovers_barrier_at_its_offset_is_present() {
        assert_eq!(
            judge(20, 0, 31, Some((20, 20, true))),
            BarrierInLog::Present
        );
    }

    #[test]
    fn a_log_that_ends_at_or_before_the_barrier_was_cut_below_it() {
        assert!(matches!(judge(20, 0, 20, None), BarrierInLog::Missing(_)));
        assert!(matches!(judge(500, 0, 31, None), BarrierInLog::Missing(_)));
    }

    #[test]
    fn another_batch_covering_the_barrier_offset_is_a_rewritten_log() {
        assert!(matches!(
            judge(20, 0, 40, Some((18, 25, false))),
            BarrierInLog::Missing(_)
        ));
        assert!(matches!(
            judge(20, 0, 40, Some((20, 20, false))),
            BarrierInLog::Missing(_)
        ));
    }

    #[test]
    fn a_barrier_removed_by_retention_or_compaction_still_guards() {
        assert!(matches!(
            judge(20, 25, 40, None),
            BarrierInLog::Unverifiable(_)
        ));
        assert!(matches!(
            judge(20, 0, 40, Some((21, 21, false))),
            BarrierInLog::Unverifiable(_)
        ));
    }
}
