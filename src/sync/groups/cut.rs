//! The consistent cut of a round (docs/moving-applications.md, "The consistent cut"). An
//! exactly-once application commits its input offsets in the transaction that writes its
//! output: a round that read such offsets at a moment `t0` may commit them on the destination
//! only once the mirror holds what the transactions wrote up to `t0` (their output, changelog
//! records and markers). Otherwise a failover would make the application start after input
//! whose processing the destination never received.
//!
//! Every partition of the mirror's topics counts, as the source has them at the round (a topic
//! the agent or the controller have not learned yet included), with the source's log end
//! `end0` and last stable offset read right after the offsets. A partition needs:
//! - nothing, when the agent has mirrored it up to `end0` and no transaction was open in it;
//! - when a transaction was open at `t0` (LSO < `end0`): the log end at the moment its LSO
//!   reached `end0` (every transaction open at `t0` complete there, its markers included);
//! - when it is behind (the agent's next source offset below `end0`, or no map yet): `end0`,
//!   unless its unmirrored source records `[next, end0)` are proven free of transactional
//!   batches and markers — transactions that completed before `t0` may sit there, so
//!   "unknown" counts as transactional (review G7). The proof reads the batch headers of that
//!   range ([`GroupIo::scan_transactions`]), once per round, after a moment left to the agent
//!   to catch up ([`SCAN_AFTER`]); a partition the agent has mirrored a transaction into is not
//!   scanned.
//!
//! The round waits (at most its cut wait) until the agent has mirrored every partition up to
//! what it needs; otherwise it commits nothing and its groups are `waiting_for_mirror`.
//!
//! Owns: that decision. Must not touch: the requests (`GroupIo`), the commits (`policy`).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::io::{retried, GroupIo, Scan, Tp};

/// Poll interval while waiting for the cut.
const CUT_POLL: Duration = Duration::from_millis(100);
/// How long the agent is given to catch up before the unmirrored records of a partition still
/// behind are read (at most half the cut's wait).
pub const SCAN_AFTER: Duration = Duration::from_millis(500);

/// What a partition needs before the cut holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// A transaction was open at `t0`: its LSO must reach `end0` first.
    Open { end0: i64 },
    /// The agent must mirror it up to `target`; `scan`: unless its unmirrored records are
    /// proven free of transactions.
    Reach { target: i64, scan: bool },
}

/// Wait (at most `wait`) for the consistent cut of offsets read just before the call (module
/// doc); retriable failures are asked again until `retry_until`. `Err` says what the mirror
/// still lacks.
pub async fn wait_for_cut<I: GroupIo>(
    io: &I,
    wait: Duration,
    retry_until: Instant,
) -> Result<(), String> {
    let start = Instant::now();
    let deadline = start + wait;
    let all = retried(retry_until, "the source's partitions", || {
        io.mirror_partitions()
    })
    .await
    .map_err(|e| format!("cannot read the source's partitions of the mirror's topics: {e}"))?;
    if all.is_empty() {
        return Ok(());
    }
    let ends = |parts: Vec<Tp>| async move {
        retried(retry_until, "the source's log ends", || {
            io.source_ends(&parts)
        })
        .await
        .map_err(|e| format!("cannot read the source's log ends: {e}"))
    };
    let ends0 = ends(all).await?;
    let next = |tp: &Tp| io.mirrored_next(&tp.0, tp.1);
    let mut need: BTreeMap<Tp, Need> = BTreeMap::new();
    for (tp, (end0, stable0)) in ends0 {
        if stable0 < end0 {
            need.insert(tp, Need::Open { end0 });
        } else if next(&tp).unwrap_or(-1) < end0 && end0 > 0 {
            let scan = !io.carries_transactions(&tp.0, tp.1);
            need.insert(tp, Need::Reach { target: end0, scan });
        }
    }
    let mut scanned = false;
    loop {
        // Transactions open at t0 complete: the partition's target is its log end then.
        let open: Vec<Tp> = need
            .iter()
            .filter(|(_, n)| matches!(n, Need::Open { .. }))
            .map(|(tp, _)| tp.clone())
            .collect();
        if !open.is_empty() {
            for (tp, (end, stable)) in ends(open).await? {
                if let Some(n) = need.get_mut(&tp) {
                    if matches!(*n, Need::Open { end0 } if stable >= end0) {
                        *n = Need::Reach {
                            target: end,
                            scan: false,
                        };
                    }
                }
            }
        }
        need.retain(|tp, n| match n {
            Need::Open { .. } => true,
            Need::Reach { target, .. } => next(tp).unwrap_or(-1) < *target,
        });
        if !scanned && !need.is_empty() && start.elapsed() >= SCAN_AFTER.min(wait / 2) {
            scanned = true;
            let ranges: Vec<(Tp, i64, i64)> = need
                .iter()
                .filter_map(|(tp, n)| match n {
                    Need::Reach { target, scan: true } => {
                        Some((tp.clone(), next(tp).unwrap_or(0), *target))
                    }
                    _ => None,
                })
                .collect();
            if !ranges.is_empty() {
                match io.scan_transactions(&ranges).await {
                    Ok(found) => {
                        for (tp, s) in found {
                            if s == Scan::Clean {
                                need.remove(&tp);
                            }
                        }
                    }
                    // Not proven: they stay in the cut.
                    Err(e) => {
                        tracing::debug!(error = %e, "group sync: the unmirrored source records could not be read")
                    }
                }
            }
        }
        if need.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(lacking(&need, next));
        }
        tokio::time::sleep(CUT_POLL).await;
    }
}

/// What the mirror lacks for the cut, in words.
fn lacking(need: &BTreeMap<Tp, Need>, next: impl Fn(&Tp) -> Option<i64>) -> String {
    let mut open = Vec::new();
    let mut behind = Vec::new();
    for (tp, n) in need {
        match n {
            Need::Open { .. } => open.push(format!("{}-{}", tp.0, tp.1)),
            Need::Reach { target, .. } => behind.push(format!(
                "{}-{} ({} < {target})",
                tp.0,
                tp.1,
                next(tp).unwrap_or(-1)
            )),
        }
    }
    let mut out = Vec::new();
    if !open.is_empty() {
        out.push(format!(
            "transactions open on the source when the offsets were read have not completed in {}",
            open.join(", ")
        ));
    }
    if !behind.is_empty() {
        out.push(format!(
            "the mirror does not hold yet what transactions may have written before the offsets were read: {}",
            behind.join(", ")
        ));
    }
    out.join("; ")
}
