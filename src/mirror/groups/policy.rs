//! The group offset sync's rules, over the [`GroupIo`] seam: one round reads the committed
//! offsets of the source's groups, translates them through the agent's exact offset map,
//! clamps them to what the destination holds and commits them on the destination where they
//! differ (docs/moving-applications.md).
//!
//! The rules, each its own unit test (`policy_tests.rs`):
//! - translation through the map ([`translate`]): identity where the logs are aligned, the next
//!   mirrored record for an offset compaction removed;
//! - the clamp (KIP-1279): `max(destination log start, min(translated, mirrored end))`;
//! - a group with members on the destination is never written (`skipped_active`);
//! - only partitions the I/O says may be synced in this kind of round
//!   ([`GroupIo::may_sync`]: MIRRORING or PAUSED for a periodic round, also STOPPING but not
//!   yet fenced for the final one);
//! - nothing once `may_write` says the sync is over (checked before every commit);
//! - a commit only where the destination's committed offset differs;
//! - the consistent cut ([`wait_for_cut`]): a round commits offsets read at a moment `t0` only
//!   once every partition of the mirror that carries transactions (as the agent saw them, or
//!   with a transaction open on the source at `t0`) is mirrored past the source's log end as it
//!   was when the transactions open at `t0` had completed. An exactly-once application commits
//!   its input offsets in the transaction that writes its output: without the cut, a sync could
//!   carry input offsets whose output (or COMMIT marker) is not on the destination yet, and a
//!   failover then would lose that processing. Until the cut holds, the round commits nothing
//!   and reports the groups `waiting_for_mirror`.
//!
//! Owns: those decisions and the per-group report of a round.
//! Must not touch: sockets (the [`GroupIo`] implementation does the requests), the offset map's
//! contents, partition states.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;

use serde::Serialize;

use crate::config::GroupFilter;
use crate::mirror::agent::offsets::PartitionMap;

/// A topic partition.
pub type Tp = (String, i32);

/// A request of the sync failed (its text says which and why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IoError(pub String);

/// Which round runs: the periodic one, or the last one at fencing time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundKind {
    Periodic,
    Final,
}

/// What a commit on the destination did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    Committed,
    /// The destination refused it because the group has members (it became active since it
    /// was listed).
    GroupActive,
}

/// What the sync needs from the clusters, the agent and the controller.
pub trait GroupIo: Send + Sync {
    /// Whether `topic` belongs to this mirror.
    fn owns(&self, topic: &str) -> bool;
    /// The agent's offset map of a partition (none before anything was mirrored).
    fn partition_map(&self, topic: &str, partition: i32) -> Option<PartitionMap>;
    /// Whether a partition may be synced in a round of `kind`.
    fn may_sync(&self, topic: &str, partition: i32, kind: RoundKind) -> bool;
    /// The consumer groups of the source (classic and consumer protocol).
    fn source_groups(&self) -> impl Future<Output = Result<Vec<String>, IoError>> + Send;
    /// A group's committed offsets on the source (partitions without a commit left out).
    fn source_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<BTreeMap<Tp, i64>, IoError>> + Send;
    /// The destination's groups that have members.
    fn destination_active_groups(
        &self,
    ) -> impl Future<Output = Result<HashSet<String>, IoError>> + Send;
    /// A group's committed offsets on the destination.
    fn destination_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<BTreeMap<Tp, i64>, IoError>> + Send;
    /// The log start offset of a destination partition.
    fn destination_log_start(
        &self,
        topic: &str,
        partition: i32,
    ) -> impl Future<Output = Result<i64, IoError>> + Send;
    /// Every partition of this mirror.
    fn mirror_partitions(&self) -> Vec<Tp>;
    /// Whether the agent has mirrored transactional batches or markers into a partition.
    fn carries_transactions(&self, topic: &str, partition: i32) -> bool;
    /// The next source offset the agent will mirror for a partition (`None`: not known).
    fn mirrored_next(&self, topic: &str, partition: i32) -> Option<i64> {
        self.partition_map(topic, partition)
            .and_then(|m| m.next())
            .map(|(s, _)| s)
    }
    /// (log end, last stable offset) of source partitions.
    fn source_ends(
        &self,
        partitions: &[Tp],
    ) -> impl Future<Output = Result<BTreeMap<Tp, (i64, i64)>, IoError>> + Send;
    /// Commit `offsets` for `group` on the destination as an admin (no member, generation -1).
    fn commit(
        &self,
        group: &str,
        offsets: &[(Tp, i64)],
    ) -> impl Future<Output = Result<CommitOutcome, IoError>> + Send;
}

/// Where a source offset lands on the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Translation {
    /// The destination offset, never past the mirrored end.
    pub destination: i64,
    /// Source records between the mirrored end and the source offset (0 when it was mirrored):
    /// records a consumer committed on the source that the destination does not hold yet.
    pub not_mirrored: i64,
}

/// Translate a committed (next-to-read) source offset through `map`: exact inside what was
/// mirrored (an offset compaction removed lands on the next mirrored record), the first mirrored
/// record before the map's start, the mirrored end (with the count of records past it) beyond.
/// `None` when nothing was mirrored yet.
pub fn translate(map: &PartitionMap, source: i64) -> Option<Translation> {
    let first = map.ranges.first()?;
    let (next_src, next_dst) = map.next()?;
    let (destination, not_mirrored) = if source >= next_src {
        (next_dst, source - next_src)
    } else if source < first.source {
        (first.destination, 0)
    } else {
        (map.to_destination(source)?, 0)
    };
    Some(Translation {
        destination,
        not_mirrored,
    })
}

/// The source offset of a destination offset: exact for a mirrored record, the next source
/// offset for the mirrored end. `None` outside what was mirrored.
pub fn translate_back(map: &PartitionMap, destination: i64) -> Option<i64> {
    if let Some(s) = map.to_source(destination) {
        return Some(s);
    }
    let (next_src, next_dst) = map.next()?;
    (destination == next_dst).then_some(next_src)
}

/// The group's state after a round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "message")]
pub enum GroupOutcome {
    /// The destination holds the translated offsets (committed now or already).
    Synced,
    /// The group has members on the destination: nothing was written.
    SkippedActive,
    /// A request failed; nothing more was written for the group in this round.
    Error(String),
    /// Nothing was written: the mirror does not hold yet what transactions wrote up to the
    /// moment the offsets were read (the consistent cut); the next round tries again.
    WaitingForMirror(String),
}

/// One partition of a group in a round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionReport {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset on the source.
    pub source_committed: i64,
    /// What the sync commits: the translated offset, clamped.
    pub target: i64,
    /// The clamp changed the translated offset (past the mirrored end, before the log start).
    pub clamped: bool,
    /// The group's committed offset on the destination after the round (`None`: none).
    pub destination_committed: Option<i64>,
    /// Records between the destination's committed offset and the source's committed offset
    /// (translated; records not mirrored yet count too): what a failover now would re-read.
    pub lag: Option<i64>,
}

/// One group in a round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupReport {
    pub group: String,
    #[serde(flatten)]
    pub outcome: GroupOutcome,
    pub partitions: Vec<PartitionReport>,
    /// Offsets committed on the destination in this round.
    pub commits: usize,
}

/// The result of one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Groups with offsets for this mirror's partitions.
    pub groups: Vec<GroupReport>,
    /// Why the round could not look at every group (listing failed, the sync stopped).
    pub error: Option<String>,
}

impl RoundReport {
    /// Every included group was looked at and none failed.
    pub fn complete(&self) -> bool {
        self.error.is_none()
            && self.groups.iter().all(|g| {
                matches!(
                    g.outcome,
                    GroupOutcome::Synced | GroupOutcome::SkippedActive
                )
            })
    }
}

/// Run one round of `kind` for the groups `filter` includes. `may_write` is asked before every
/// commit; once it says no, the round ends without writing.
pub async fn run_round<I: GroupIo>(
    io: &I,
    filter: &GroupFilter,
    kind: RoundKind,
    may_write: &(dyn Fn() -> bool + Sync),
    cut_wait: std::time::Duration,
) -> RoundReport {
    let mut report = RoundReport::default();
    let groups = match io.source_groups().await {
        Ok(g) => g,
        Err(e) => {
            report.error = Some(format!("cannot list the source's groups: {e}"));
            return report;
        }
    };
    let active = match io.destination_active_groups().await {
        Ok(a) => a,
        Err(e) => {
            report.error = Some(format!("cannot list the destination's groups: {e}"));
            return report;
        }
    };
    let mut log_starts = HashMap::new();
    let mut wanted: Vec<String> = groups.into_iter().filter(|g| filter.matches(g)).collect();
    wanted.sort();
    wanted.dedup();
    // Every group's offsets first, then the cut, then the commits.
    let mut read = Vec::with_capacity(wanted.len());
    for group in wanted {
        let offsets = io.source_offsets(&group).await;
        read.push((group, offsets));
    }
    let waiting = wait_for_cut(io, cut_wait).await.err();
    for (group, offsets) in read {
        let step = match (offsets, &waiting) {
            (Err(e), _) => GroupStep::Report(GroupReport {
                group: group.clone(),
                outcome: GroupOutcome::Error(format!("source offsets: {e}")),
                partitions: Vec::new(),
                commits: 0,
            }),
            (Ok(source), Some(why)) => waiting_report(io, &group, kind, source, why),
            (Ok(source), None) => {
                sync_group(
                    io,
                    &group,
                    source,
                    kind,
                    &active,
                    &mut log_starts,
                    may_write,
                )
                .await
            }
        };
        match step {
            GroupStep::Nothing => {}
            GroupStep::Report(r) => report.groups.push(r),
            GroupStep::Stopped => {
                report.error = Some("the sync stopped (failover)".into());
                return report;
            }
        }
    }
    report
}

/// Poll interval while waiting for the cut.
const CUT_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Wait (at most `wait`) for the consistent cut of offsets read just before the call (module
/// doc): `Err` says what the mirror still lacks.
pub async fn wait_for_cut<I: GroupIo>(io: &I, wait: std::time::Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + wait;
    let all = io.mirror_partitions();
    if all.is_empty() {
        return Ok(());
    }
    let ends0 = io
        .source_ends(&all)
        .await
        .map_err(|e| format!("cannot read the source's log ends: {e}"))?;
    let txn: Vec<Tp> = all
        .into_iter()
        .filter(|(t, p)| {
            io.carries_transactions(t, *p)
                || ends0
                    .get(&(t.clone(), *p))
                    .is_some_and(|(end, stable)| stable < end)
        })
        .collect();
    if txn.is_empty() {
        return Ok(());
    }
    // The transactions open at t0 complete: every last stable offset reaches its log end of t0;
    // the log ends then are what the mirror must hold (their markers included).
    let target = loop {
        let now = io
            .source_ends(&txn)
            .await
            .map_err(|e| format!("cannot read the source's log ends: {e}"))?;
        let open: Vec<String> = txn
            .iter()
            .filter(|tp| {
                let end0 = ends0.get(*tp).map_or(0, |e| e.0);
                now.get(*tp).is_none_or(|(_, stable)| *stable < end0)
            })
            .map(|(t, p)| format!("{t}-{p}"))
            .collect();
        if open.is_empty() {
            break now;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "transactions open on the source when the offsets were read have not completed in {}",
                open.join(", ")
            ));
        }
        tokio::time::sleep(CUT_POLL).await;
    };
    loop {
        let behind: Vec<String> = txn
            .iter()
            .filter_map(|tp| {
                let want = target.get(tp).map_or(0, |e| e.0);
                let have = io.mirrored_next(&tp.0, tp.1).unwrap_or(-1);
                (have < want).then(|| format!("{}-{} ({have} < {want})", tp.0, tp.1))
            })
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the mirror does not hold yet what transactions wrote before the offsets were read: {}",
                behind.join(", ")
            ));
        }
        tokio::time::sleep(CUT_POLL).await;
    }
}

/// The report of a group the round does not commit because the cut does not hold.
fn waiting_report<I: GroupIo>(
    io: &I,
    group: &str,
    kind: RoundKind,
    source: BTreeMap<Tp, i64>,
    why: &str,
) -> GroupStep {
    let partitions: Vec<PartitionReport> = source
        .into_iter()
        .filter(|((t, p), c)| *c >= 0 && io.owns(t) && io.may_sync(t, *p, kind))
        .map(|((t, p), c)| PartitionReport {
            topic: t,
            partition: p,
            source_committed: c,
            target: -1,
            clamped: false,
            destination_committed: None,
            lag: None,
        })
        .collect();
    if partitions.is_empty() {
        return GroupStep::Nothing;
    }
    GroupStep::Report(GroupReport {
        group: group.to_string(),
        outcome: GroupOutcome::WaitingForMirror(why.to_string()),
        partitions,
        commits: 0,
    })
}

enum GroupStep {
    /// The group has no offsets for this mirror's partitions that may be synced.
    Nothing,
    Report(GroupReport),
    Stopped,
}

async fn sync_group<I: GroupIo>(
    io: &I,
    group: &str,
    source: BTreeMap<Tp, i64>,
    kind: RoundKind,
    active: &HashSet<String>,
    log_starts: &mut HashMap<Tp, i64>,
    may_write: &(dyn Fn() -> bool + Sync),
) -> GroupStep {
    let error = |partitions, e: String| {
        GroupStep::Report(GroupReport {
            group: group.to_string(),
            outcome: GroupOutcome::Error(e),
            partitions,
            commits: 0,
        })
    };
    // (partition, committed on the source, translation)
    let mut parts = Vec::new();
    for ((t, p), c) in source {
        if c < 0 || !io.owns(&t) || !io.may_sync(&t, p, kind) {
            continue;
        }
        let Some(tr) = io.partition_map(&t, p).and_then(|m| translate(&m, c)) else {
            continue;
        };
        parts.push(((t, p), c, tr));
    }
    if parts.is_empty() {
        return GroupStep::Nothing;
    }
    let dest = match io.destination_offsets(group).await {
        Ok(d) => d,
        Err(e) => return error(Vec::new(), format!("destination offsets: {e}")),
    };
    let mut reports = Vec::with_capacity(parts.len());
    let mut translations = Vec::with_capacity(parts.len());
    let mut to_commit = Vec::new();
    for (tp, c, tr) in parts {
        let log_start = match log_starts.get(&tp) {
            Some(s) => *s,
            None => match io.destination_log_start(&tp.0, tp.1).await {
                Ok(s) => {
                    log_starts.insert(tp.clone(), s);
                    s
                }
                Err(e) => return error(reports, format!("destination log start: {e}")),
            },
        };
        let target = tr.destination.max(log_start);
        let committed = dest.get(&tp).copied().filter(|o| *o >= 0);
        if committed != Some(target) {
            to_commit.push((tp.clone(), target));
        }
        reports.push(PartitionReport {
            topic: tp.0,
            partition: tp.1,
            source_committed: c,
            target,
            clamped: tr.not_mirrored > 0 || target != tr.destination,
            destination_committed: committed,
            lag: None,
        });
        translations.push(tr);
    }
    let mut outcome = GroupOutcome::Synced;
    let mut commits = 0;
    if active.contains(group) {
        outcome = GroupOutcome::SkippedActive;
    } else if !to_commit.is_empty() {
        if !may_write() {
            return GroupStep::Stopped;
        }
        match io.commit(group, &to_commit).await {
            Ok(CommitOutcome::Committed) => {
                commits = to_commit.len();
                for r in reports.iter_mut() {
                    r.destination_committed = Some(r.target);
                }
            }
            Ok(CommitOutcome::GroupActive) => outcome = GroupOutcome::SkippedActive,
            Err(e) => outcome = GroupOutcome::Error(format!("commit: {e}")),
        }
    }
    for (r, tr) in reports.iter_mut().zip(translations) {
        r.lag = r
            .destination_committed
            .map(|d| tr.destination + tr.not_mirrored - d);
    }
    GroupStep::Report(GroupReport {
        group: group.to_string(),
        outcome,
        partitions: reports,
        commits,
    })
}
