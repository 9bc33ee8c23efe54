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
//! A committed offset read again unchanged in a later round was committed before the first
//! round that read it: that round's cut is the one it needs, and later rounds keep working
//! towards it ([`CutMemory`]) rather than asking for the source's end at every round. A
//! stopped application's offsets thus reach the destination once the mirror has passed the
//! end its first round saw, even while the mirror stays behind a busy transactional producer
//! (P2, docs/reliability.md). A partition's offset is safe on its own: its input up to that
//! offset was processed in transactions that completed before the first read, so the
//! partitions of a group are decided one by one.
//!
//! A round waits (at most its cut wait) until the agent has mirrored every partition up to
//! what the cuts in use need; an offset whose cut does not hold is not committed, and its
//! group is `waiting_for_mirror`.
//!
//! Owns: those decisions and the memory of which cut an offset needs. Must not touch: the
//! requests (`GroupIo`), the commits (`policy`).

use std::collections::{BTreeMap, BTreeSet};
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

/// The consistent cut of one moment `t0`: what the mirror still lacks for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cut {
    need: BTreeMap<Tp, Need>,
    /// It could not be read or followed: why (it never holds).
    failed: Option<String>,
}

impl Cut {
    /// The cut of offsets read just before the call (module doc); retriable failures are asked
    /// again until `retry_until`.
    pub async fn read<I: GroupIo>(io: &I, retry_until: Instant) -> Cut {
        let all = match retried(retry_until, "the source's partitions", || {
            io.mirror_partitions()
        })
        .await
        {
            Ok(all) => all,
            Err(e) => {
                return Cut::failed(format!(
                    "cannot read the source's partitions of the mirror's topics: {e}"
                ))
            }
        };
        if all.is_empty() {
            return Cut::default();
        }
        let ends0 = match source_ends(io, all, retry_until).await {
            Ok(e) => e,
            Err(e) => return Cut::failed(e),
        };
        let mut need = BTreeMap::new();
        for (tp, (end0, stable0)) in ends0 {
            if stable0 < end0 {
                need.insert(tp, Need::Open { end0 });
            } else if io.mirrored_next(&tp.0, tp.1).unwrap_or(-1) < end0 && end0 > 0 {
                let scan = !io.carries_transactions(&tp.0, tp.1);
                need.insert(tp, Need::Reach { target: end0, scan });
            }
        }
        Cut { need, failed: None }
    }

    fn failed(why: String) -> Cut {
        Cut {
            need: BTreeMap::new(),
            failed: Some(why),
        }
    }

    /// The mirror holds everything the cut needs.
    pub fn holds(&self) -> bool {
        self.failed.is_none() && self.need.is_empty()
    }

    /// Follow the cut: transactions open at `t0` that completed give their partition's target
    /// (its log end then); partitions mirrored up to their target leave it.
    async fn follow<I: GroupIo>(&mut self, io: &I, retry_until: Instant) {
        if self.failed.is_some() {
            return;
        }
        let open: Vec<Tp> = self
            .need
            .iter()
            .filter(|(_, n)| matches!(n, Need::Open { .. }))
            .map(|(tp, _)| tp.clone())
            .collect();
        if !open.is_empty() {
            match source_ends(io, open, retry_until).await {
                Ok(ends) => {
                    for (tp, (end, stable)) in ends {
                        if let Some(n) = self.need.get_mut(&tp) {
                            if matches!(*n, Need::Open { end0 } if stable >= end0) {
                                *n = Need::Reach {
                                    target: end,
                                    scan: false,
                                };
                            }
                        }
                    }
                }
                Err(e) => {
                    self.failed = Some(e);
                    return;
                }
            }
        }
        self.need.retain(|tp, n| match n {
            Need::Open { .. } => true,
            Need::Reach { target, .. } => io.mirrored_next(&tp.0, tp.1).unwrap_or(-1) < *target,
        });
    }

    /// The unmirrored source records this cut would drop if they held no transaction.
    fn scannable(&self) -> impl Iterator<Item = (&Tp, i64)> {
        self.need.iter().filter_map(|(tp, n)| match n {
            Need::Reach { target, scan: true } => Some((tp, *target)),
            _ => None,
        })
    }

    /// Source records `[next, to)` of `tp` hold no transaction: the partition needs nothing
    /// more where its target is within them.
    fn proven_clean(&mut self, tp: &Tp, to: i64) {
        if matches!(self.need.get(tp), Some(Need::Reach { target, scan: true }) if *target <= to) {
            self.need.remove(tp);
        }
    }

    /// What the mirror lacks for the cut, in words.
    pub fn lacking<I: GroupIo>(&self, io: &I) -> String {
        if let Some(why) = &self.failed {
            return why.clone();
        }
        let mut open = Vec::new();
        let mut behind = Vec::new();
        for (tp, n) in &self.need {
            match n {
                Need::Open { .. } => open.push(format!("{}-{}", tp.0, tp.1)),
                Need::Reach { target, .. } => behind.push(format!(
                    "{}-{} ({} < {target})",
                    tp.0,
                    tp.1,
                    io.mirrored_next(&tp.0, tp.1).unwrap_or(-1)
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
}

async fn source_ends<I: GroupIo>(
    io: &I,
    parts: Vec<Tp>,
    retry_until: Instant,
) -> Result<BTreeMap<Tp, (i64, i64)>, String> {
    retried(retry_until, "the source's log ends", || {
        io.source_ends(&parts)
    })
    .await
    .map_err(|e| format!("cannot read the source's log ends: {e}"))
}

/// Follow `cuts` (at most `wait`) until every one holds; unmirrored records are read for proof
/// once ([`SCAN_AFTER`]), for every cut at once.
pub async fn wait_for_cuts<I: GroupIo>(
    io: &I,
    cuts: &mut [&mut Cut],
    wait: Duration,
    retry_until: Instant,
) {
    let start = Instant::now();
    let deadline = start + wait;
    let mut scanned = false;
    loop {
        for cut in cuts.iter_mut() {
            cut.follow(io, retry_until).await;
        }
        if cuts.iter().all(|c| c.holds() || c.failed.is_some()) {
            return;
        }
        if !scanned && start.elapsed() >= SCAN_AFTER.min(wait / 2) {
            scanned = true;
            scan(io, cuts).await;
            continue;
        }
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(CUT_POLL).await;
    }
}

/// Read the unmirrored records every cut could drop (per partition up to the furthest target
/// any cut needs) and drop the partitions proven free of transactions.
async fn scan<I: GroupIo>(io: &I, cuts: &mut [&mut Cut]) {
    let mut upto: BTreeMap<Tp, i64> = BTreeMap::new();
    for cut in cuts.iter() {
        for (tp, target) in cut.scannable() {
            let to = upto.entry(tp.clone()).or_insert(target);
            *to = (*to).max(target);
        }
    }
    if upto.is_empty() {
        return;
    }
    let ranges: Vec<(Tp, i64, i64)> = upto
        .iter()
        .map(|(tp, to)| (tp.clone(), io.mirrored_next(&tp.0, tp.1).unwrap_or(0), *to))
        .collect();
    match io.scan_transactions(&ranges).await {
        Ok(found) => {
            for (tp, s) in found {
                if s != Scan::Clean {
                    continue;
                }
                if let Some(to) = upto.get(&tp) {
                    for cut in cuts.iter_mut() {
                        cut.proven_clean(&tp, *to);
                    }
                }
            }
        }
        // Not proven: they stay in the cuts.
        Err(e) => {
            tracing::debug!(error = %e, "group sync: the unmirrored source records could not be read")
        }
    }
}

/// A group's committed offset of one partition.
pub type GroupTp = (String, Tp);

/// Which cut each committed offset needs, across rounds (module doc): an offset read again
/// unchanged keeps the cut of the round that first read it.
#[derive(Debug, Default)]
pub struct CutMemory {
    cuts: BTreeMap<u64, Cut>,
    /// The offset last read and the cut it needs.
    offsets: BTreeMap<GroupTp, (i64, u64)>,
    next_id: u64,
}

/// What a round may commit: per group partition, `None` when its cut holds, else what the
/// mirror still lacks.
pub type Verdicts = BTreeMap<GroupTp, Option<String>>;

impl CutMemory {
    /// The cuts this round's offsets need, followed until they hold (at most `wait`).
    /// `read`: every group the round listed, with the offsets read for it (`None`: reading
    /// failed; what was remembered for it stays). Groups no longer listed are forgotten.
    pub async fn settle<I: GroupIo>(
        &mut self,
        io: &I,
        read: &[(String, Option<&BTreeMap<Tp, i64>>)],
        wait: Duration,
        retry_until: Instant,
    ) -> Verdicts {
        let fresh = self.next_id;
        self.next_id += 1;
        let unread: BTreeSet<&str> = read
            .iter()
            .filter(|(_, o)| o.is_none())
            .map(|(g, _)| g.as_str())
            .collect();
        let previous = std::mem::take(&mut self.offsets);
        let mut in_use = BTreeSet::new();
        for (group, source) in read {
            let Some(source) = source else { continue };
            for (tp, c) in source.iter() {
                if *c < 0 || !io.owns(&tp.0) {
                    continue;
                }
                let key = (group.clone(), tp.clone());
                let id = match previous.get(&key) {
                    Some((before, id)) if before == c && self.cuts.contains_key(id) => *id,
                    _ => fresh,
                };
                in_use.insert(id);
                self.offsets.insert(key, (*c, id));
            }
        }
        // The source's ends are read (right after the offsets) only when an offset is new.
        if in_use.contains(&fresh) {
            self.cuts.insert(fresh, Cut::read(io, retry_until).await);
        }
        // What could not be read this round stays as it was remembered.
        for (key, v) in previous {
            if unread.contains(key.0.as_str()) {
                self.offsets.insert(key, v);
            }
        }
        self.cuts
            .retain(|id, _| self.offsets.values().any(|(_, i)| i == id));
        let mut cuts: Vec<&mut Cut> = self
            .cuts
            .iter_mut()
            .filter(|(id, _)| in_use.contains(*id))
            .map(|(_, c)| c)
            .collect();
        wait_for_cuts(io, &mut cuts, wait, retry_until).await;
        let why: BTreeMap<u64, Option<String>> = self
            .cuts
            .iter()
            .map(|(id, c)| (*id, (!c.holds()).then(|| c.lacking(io))))
            .collect();
        read.iter()
            .filter_map(|(g, o)| o.map(|o| (g, o)))
            .flat_map(|(g, o)| o.keys().map(move |tp| (g.clone(), tp.clone())))
            .filter_map(|key| {
                let (_, id) = self.offsets.get(&key)?;
                Some((key, why.get(id).cloned().flatten()))
            })
            .collect()
    }
}
