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
//! - nothing once `may_write` says no (the sync is over, or this instance may no longer write:
//!   not the agent's owner, no lease, the mirror failed over), asked right before every commit
//!   and every retry of one;
//! - a commit only where the destination's committed offset differs;
//! - a retriable failure ([`IoError::retriable`]: a coordinator loading or moving, a leader
//!   changing, a timeout, a lost connection) is asked again within the round, with a growing
//!   backoff, until the round's retry time ([`RoundLimits::retry_for`]) is over;
//! - the consistent cut ([`super::cut`]): an offset first read at a moment `t0` is committed
//!   only once the mirror holds what transactions wrote up to `t0`. Until it holds, the round
//!   does not commit it and reports its group `waiting_for_mirror` (its other partitions are
//!   committed when theirs hold).
//!
//! Owns: those decisions and the per-group report of a round.
//! Must not touch: sockets (the [`GroupIo`] implementation does the requests), the offset map's
//! contents, partition states.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::config::GroupFilter;
use crate::mirror::offset_map::PartitionMap;

use super::cut::CutMemory;
use super::io::{retried, CommitOutcome, GroupIo, IoError, Retriable, RoundKind, Tp};

/// How long a round may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundLimits {
    /// For the consistent cut.
    pub cut_wait: Duration,
    /// Asking retriable failures again, counted from the round's start.
    pub retry_for: Duration,
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
    /// Some partitions (all, when `commits` is 0) were not written: the mirror does not hold
    /// yet what transactions wrote up to the moment their offsets were first read (the
    /// consistent cut); the next rounds try again.
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
/// commit; once it says no (and why), the round ends without writing.
pub async fn run_round<I: GroupIo>(
    io: &I,
    filter: &GroupFilter,
    kind: RoundKind,
    may_write: &(dyn Fn() -> Result<(), String> + Sync),
    limits: RoundLimits,
    memory: &mut CutMemory,
) -> RoundReport {
    let until = Instant::now() + limits.retry_for;
    let mut report = RoundReport::default();
    let listed = retried(until, "listing the source's groups", || io.source_groups()).await;
    let groups = match listed {
        Ok(g) => g,
        Err(e) => {
            report.error = Some(format!("cannot list the source's groups: {e}"));
            return report;
        }
    };
    let listed = retried(until, "listing the destination's groups", || {
        io.destination_active_groups()
    })
    .await;
    let active = match listed {
        Ok(a) => a,
        Err(e) => {
            report.error = Some(format!("cannot list the destination's groups: {e}"));
            return report;
        }
    };
    let mut wanted: Vec<String> = groups.into_iter().filter(|g| filter.matches(g)).collect();
    wanted.sort();
    wanted.dedup();
    // Every group's offsets first, then the cut, then the commits.
    let mut read = Vec::with_capacity(wanted.len());
    for group in wanted {
        let offsets = retried(until, "a group's source offsets", || {
            io.source_offsets(&group)
        })
        .await;
        read.push((group, offsets));
    }
    let listed: Vec<(String, Option<&BTreeMap<Tp, i64>>)> = read
        .iter()
        .map(|(g, o)| (g.clone(), o.as_ref().ok()))
        .collect();
    let verdicts = memory.settle(io, &listed, limits.cut_wait, until).await;
    let round = Round {
        io,
        kind,
        may_write,
        until,
    };
    let mut log_starts = HashMap::new();
    for (group, offsets) in read {
        let step = match offsets {
            Err(e) => GroupStep::Report(GroupReport {
                group: group.clone(),
                outcome: GroupOutcome::Error(format!("source offsets: {e}")),
                partitions: Vec::new(),
                commits: 0,
            }),
            Ok(source) => {
                // Partitions whose cut holds are committed; the others wait for the mirror.
                let (waiting, held): (BTreeMap<Tp, i64>, BTreeMap<Tp, i64>) =
                    source.into_iter().partition(|(tp, _)| {
                        matches!(verdicts.get(&(group.clone(), tp.clone())), Some(Some(_)))
                    });
                let why = waiting.keys().find_map(|tp| {
                    verdicts
                        .get(&(group.clone(), tp.clone()))
                        .cloned()
                        .flatten()
                });
                let step = round
                    .sync_group(&group, held, &active, &mut log_starts)
                    .await;
                match why {
                    None => step,
                    Some(why) => step.with_waiting(waiting_report(io, &group, kind, waiting, &why)),
                }
            }
        };
        match step {
            GroupStep::Nothing => {}
            GroupStep::Report(r) => report.groups.push(r),
            GroupStep::Stopped(why) => {
                report.error = Some(format!(
                    "the sync stopped before it committed every group: {why}"
                ));
                return report;
            }
        }
    }
    report
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
    /// `may_write` said no: why.
    Stopped(String),
}

impl GroupStep {
    /// This step with the group's partitions that wait for the mirror (`waiting`, a
    /// [`waiting_report`]) added: the group is `waiting_for_mirror` unless it failed.
    fn with_waiting(self, waiting: GroupStep) -> GroupStep {
        match (self, waiting) {
            (GroupStep::Stopped(why), _) => GroupStep::Stopped(why),
            (step, GroupStep::Nothing) => step,
            (GroupStep::Nothing, w) => w,
            (GroupStep::Report(mut r), GroupStep::Report(w)) => {
                r.partitions.extend(w.partitions);
                r.partitions
                    .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
                if r.outcome == GroupOutcome::Synced {
                    r.outcome = w.outcome;
                }
                GroupStep::Report(r)
            }
            (step, GroupStep::Stopped(_)) => step,
        }
    }
}

/// Why a commit was not made.
enum CommitError {
    /// `may_write` said no.
    Stopped(String),
    Io(IoError),
}

impl Retriable for CommitError {
    fn is_retriable(&self) -> bool {
        matches!(self, CommitError::Io(e) if e.retriable)
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Stopped(why) => write!(f, "stopped: {why}"),
            CommitError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// What a round's commits need.
struct Round<'a, I> {
    io: &'a I,
    kind: RoundKind,
    may_write: &'a (dyn Fn() -> Result<(), String> + Sync),
    /// Retriable failures are asked again until then.
    until: Instant,
}

impl<I: GroupIo> Round<'_, I> {
    async fn sync_group(
        &self,
        group: &str,
        source: BTreeMap<Tp, i64>,
        active: &HashSet<String>,
        log_starts: &mut HashMap<Tp, i64>,
    ) -> GroupStep {
        let (io, until) = (self.io, self.until);
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
            if c < 0 || !io.owns(&t) || !io.may_sync(&t, p, self.kind) {
                continue;
            }
            let Some(map) = io.partition_map(&t, p) else {
                continue;
            };
            let Some(mut tr) = translate(&map, c) else {
                continue;
            };
            if crate::mirror::fault_hooks::Sabotage::Groups.is_on() {
                // The chaos run's positive control: the group moved to the mirrored end.
                if let Some((_, end)) = map.next() {
                    tr.destination = end;
                }
            }
            parts.push(((t, p), c, tr));
        }
        if parts.is_empty() {
            return GroupStep::Nothing;
        }
        let dest = match retried(until, "a group's destination offsets", || {
            io.destination_offsets(group)
        })
        .await
        {
            Ok(d) => d,
            Err(e) => return error(Vec::new(), format!("destination offsets: {e}")),
        };
        let mut reports = Vec::with_capacity(parts.len());
        let mut translations = Vec::with_capacity(parts.len());
        let mut to_commit = Vec::new();
        // The log starts this round has not read yet, read together (one request per leader).
        let unread: Vec<Tp> = parts
            .iter()
            .map(|(tp, _, _)| tp.clone())
            .filter(|tp| !log_starts.contains_key(tp))
            .collect();
        if !unread.is_empty() {
            match retried(until, "the destination's log starts", || {
                io.destination_log_starts(&unread)
            })
            .await
            {
                Ok(starts) => log_starts.extend(starts),
                Err(e) => return error(reports, format!("destination log start: {e}")),
            }
        }
        for (tp, c, tr) in parts {
            let Some(&log_start) = log_starts.get(&tp) else {
                let e = format!(
                    "the destination did not answer the log start of {}-{}",
                    tp.0, tp.1
                );
                return error(reports, e);
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
            // Asked right before every attempt: a round that read the source while this
            // instance could write commits nothing once it no longer may.
            let attempt = || async {
                (self.may_write)().map_err(CommitError::Stopped)?;
                io.commit(group, &to_commit).await.map_err(CommitError::Io)
            };
            match retried(until, "a commit", attempt).await {
                Ok(CommitOutcome::Committed) => {
                    commits = to_commit.len();
                    for r in reports.iter_mut() {
                        r.destination_committed = Some(r.target);
                    }
                }
                Ok(CommitOutcome::GroupActive) => outcome = GroupOutcome::SkippedActive,
                Err(CommitError::Stopped(why)) => return GroupStep::Stopped(why),
                Err(CommitError::Io(e)) => outcome = GroupOutcome::Error(format!("commit: {e}")),
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
}
