//! The group offset sync's rules against a fake [`GroupIo`], one behaviour per test.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cut::CutMemory;
use super::io::*;
use super::policy::*;
use super::*;
use crate::mirror::offset_map::PartitionMap;

const T: &str = "orders";

fn tp(p: i32) -> Tp {
    (T.to_string(), p)
}

/// (group, offsets) of each commit.
type Commits = Vec<(String, Vec<(Tp, i64)>)>;

#[derive(Default)]
struct Fake {
    owned: HashSet<String>,
    maps: HashMap<Tp, PartitionMap>,
    mirroring: HashSet<Tp>,
    unfenced: HashSet<Tp>,
    source: Mutex<BTreeMap<String, BTreeMap<Tp, i64>>>,
    source_down: AtomicBool,
    source_hangs: bool,
    dest: Mutex<BTreeMap<String, BTreeMap<Tp, i64>>>,
    active: HashSet<String>,
    refuse_as_active: bool,
    log_start: HashMap<Tp, i64>,
    commits: Mutex<Commits>,
    /// Partitions the agent saw transactions in.
    txn: HashSet<Tp>,
    /// The source's (log end, last stable offset) answers, in turn (the last one repeats);
    /// empty: every partition ends where its map does, nothing open.
    ends: Mutex<Vec<BTreeMap<Tp, (i64, i64)>>>,
    /// Partitions of the mirror's topics the source has and the agent has no map of yet.
    source_only: Vec<Tp>,
    /// How many reads of a group's source offsets still answer COORDINATOR_NOT_AVAILABLE.
    coordinator_not_available: Mutex<u32>,
    /// When set, reading a group's source offsets signals the first and waits for the second.
    hold: Option<(Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>)>,
    /// What reading the unmirrored records of a partition finds (default: unknown).
    scan: HashMap<Tp, Scan>,
    /// The ranges the sync asked to read.
    scanned: Mutex<Vec<(Tp, i64, i64)>>,
    /// Where the agent has mirrored a partition to, when it moved past its map.
    mirrored_to: Mutex<HashMap<Tp, i64>>,
    /// How many times the source's log ends were asked for.
    ends_asked: std::sync::atomic::AtomicUsize,
    /// How many times the destination's log starts were asked for.
    log_start_requests: std::sync::atomic::AtomicUsize,
}

impl Fake {
    /// Partition 0 of `orders`, mirroring, aligned: source 0..100 is destination 0..100, and
    /// group `g` committed `committed` on the source.
    fn aligned(committed: i64) -> Fake {
        let mut map = PartitionMap::starting_at(0, 0);
        map.record(0, 0, 100);
        let mut f = Fake::default();
        f.owned.insert(T.into());
        f.maps.insert(tp(0), map);
        f.mirroring.insert(tp(0));
        f.source
            .get_mut()
            .unwrap()
            .insert("g".into(), BTreeMap::from([(tp(0), committed)]));
        f
    }

    fn commits(&self) -> Commits {
        self.commits.lock().unwrap().clone()
    }
}

impl GroupIo for Fake {
    fn owns(&self, topic: &str) -> bool {
        self.owned.contains(topic)
    }
    async fn mirror_partitions(&self) -> Result<Vec<Tp>, IoError> {
        Ok(self.maps.keys().chain(&self.source_only).cloned().collect())
    }
    async fn scan_transactions(
        &self,
        ranges: &[(Tp, i64, i64)],
    ) -> Result<BTreeMap<Tp, Scan>, IoError> {
        self.scanned.lock().unwrap().extend(ranges.iter().cloned());
        Ok(ranges
            .iter()
            .map(|(tp, _, _)| (tp.clone(), *self.scan.get(tp).unwrap_or(&Scan::Unknown)))
            .collect())
    }
    fn carries_transactions(&self, topic: &str, partition: i32) -> bool {
        self.txn.contains(&(topic.to_string(), partition))
    }
    async fn source_ends(&self, partitions: &[Tp]) -> Result<BTreeMap<Tp, (i64, i64)>, IoError> {
        self.ends_asked.fetch_add(1, SeqCst);
        let mut ends = self.ends.lock().unwrap();
        let answer = match ends.len() {
            0 => None,
            1 => ends.first().cloned(),
            _ => Some(ends.remove(0)),
        };
        Ok(partitions
            .iter()
            .map(|tp| {
                let end = answer
                    .as_ref()
                    .and_then(|a| a.get(tp).copied())
                    .unwrap_or_else(|| {
                        let e = self.mirrored_next(&tp.0, tp.1).unwrap_or(0);
                        (e, e)
                    });
                (tp.clone(), end)
            })
            .collect())
    }
    fn mirrored_next(&self, topic: &str, partition: i32) -> Option<i64> {
        let tp = (topic.to_string(), partition);
        if let Some(next) = self.mirrored_to.lock().unwrap().get(&tp) {
            return Some(*next);
        }
        self.partition_map(topic, partition)
            .and_then(|m| m.next())
            .map(|(s, _)| s)
    }
    fn partition_map(&self, topic: &str, partition: i32) -> Option<PartitionMap> {
        self.maps.get(&(topic.to_string(), partition)).cloned()
    }
    fn may_sync(&self, topic: &str, partition: i32, kind: RoundKind) -> bool {
        let k = (topic.to_string(), partition);
        match kind {
            RoundKind::Periodic => self.mirroring.contains(&k),
            RoundKind::Final => self.mirroring.contains(&k) || self.unfenced.contains(&k),
        }
    }
    async fn source_groups(&self) -> Result<Vec<String>, IoError> {
        if self.source_hangs {
            std::future::pending::<()>().await;
        }
        if self.source_down.load(SeqCst) {
            return Err(IoError::retriable("source unreachable"));
        }
        Ok(self.source.lock().unwrap().keys().cloned().collect())
    }
    async fn source_offsets(&self, group: &str) -> Result<BTreeMap<Tp, i64>, IoError> {
        if let Some((entered, release)) = &self.hold {
            entered.notify_one();
            release.notified().await;
        }
        {
            let mut n = self.coordinator_not_available.lock().unwrap();
            if *n > 0 {
                *n -= 1;
                return Err(IoError::answer(
                    15,
                    format!("FindCoordinator for {group:?}: error code 15"),
                ));
            }
        }
        Ok(self
            .source
            .lock()
            .unwrap()
            .get(group)
            .cloned()
            .unwrap_or_default())
    }
    async fn destination_active_groups(&self) -> Result<HashSet<String>, IoError> {
        Ok(self.active.clone())
    }
    async fn destination_offsets(&self, group: &str) -> Result<BTreeMap<Tp, i64>, IoError> {
        Ok(self
            .dest
            .lock()
            .unwrap()
            .get(group)
            .cloned()
            .unwrap_or_default())
    }
    async fn destination_log_starts(
        &self,
        partitions: &[Tp],
    ) -> Result<BTreeMap<Tp, i64>, IoError> {
        self.log_start_requests.fetch_add(1, SeqCst);
        Ok(partitions
            .iter()
            .map(|tp| (tp.clone(), *self.log_start.get(tp).unwrap_or(&0)))
            .collect())
    }
    async fn commit(&self, group: &str, offsets: &[(Tp, i64)]) -> Result<CommitOutcome, IoError> {
        if self.refuse_as_active {
            return Ok(CommitOutcome::GroupActive);
        }
        self.commits
            .lock()
            .unwrap()
            .push((group.to_string(), offsets.to_vec()));
        let mut dest = self.dest.lock().unwrap();
        for (k, o) in offsets {
            dest.entry(group.to_string())
                .or_default()
                .insert(k.clone(), *o);
        }
        Ok(CommitOutcome::Committed)
    }
}

/// How long a round in these tests waits for the consistent cut and retries.
const LIMITS: RoundLimits = RoundLimits {
    cut_wait: Duration::from_millis(300),
    retry_for: Duration::from_secs(2),
};

fn all() -> GroupFilter {
    GroupFilter::new(&GroupSyncConfig::default()).unwrap()
}

/// One round of a sync with no round before it (a memory of its own).
async fn first_round(
    io: &Fake,
    filter: &GroupFilter,
    kind: RoundKind,
    may_write: &(dyn Fn() -> Result<(), String> + Sync),
    limits: RoundLimits,
) -> RoundReport {
    run_round(
        io,
        filter,
        kind,
        may_write,
        limits,
        &mut CutMemory::default(),
    )
    .await
}

async fn periodic(io: &Fake) -> RoundReport {
    first_round(io, &all(), RoundKind::Periodic, &|| Ok(()), LIMITS).await
}

fn sync_over(io: Fake) -> Arc<GroupSync<Fake>> {
    let m = metrics::GroupMetrics::new().unwrap();
    Arc::new(GroupSync::new("m", &GroupSyncConfig::default(), io, m).unwrap())
}

#[tokio::test]
async fn an_aligned_partition_gets_the_same_offset_on_the_destination() {
    let io = Fake::aligned(40);
    let r = periodic(&io).await;
    assert_eq!(io.commits(), vec![("g".to_string(), vec![(tp(0), 40)])]);
    assert_eq!(r.groups[0].outcome, GroupOutcome::Synced);
}

#[tokio::test]
async fn a_compacted_partition_translates_through_the_map_not_identity() {
    // Source 0..5 → destination 0..5; source 5..8 compacted away; source 8..10 → 5..7.
    let mut map = PartitionMap::starting_at(0, 0);
    map.record(0, 0, 5);
    map.record(8, 5, 2);
    let mut io = Fake::aligned(9);
    io.maps.insert(tp(0), map);
    periodic(&io).await;
    assert_eq!(io.commits()[0].1, vec![(tp(0), 6)]);
}

#[tokio::test]
async fn an_offset_compaction_removed_lands_on_the_next_mirrored_record() {
    let mut map = PartitionMap::starting_at(0, 0);
    map.record(0, 0, 5);
    map.record(8, 5, 2);
    let mut io = Fake::aligned(6);
    io.maps.insert(tp(0), map);
    periodic(&io).await;
    assert_eq!(io.commits()[0].1, vec![(tp(0), 5)]);
}

#[tokio::test]
async fn an_offset_past_the_mirrored_end_is_clamped_to_the_mirrored_end() {
    let io = Fake::aligned(130);
    let r = periodic(&io).await;
    assert_eq!(io.commits()[0].1, vec![(tp(0), 100)]);
    assert!(r.groups[0].partitions[0].clamped);
}

#[tokio::test]
async fn an_offset_before_the_destination_log_start_is_raised_to_it() {
    let mut io = Fake::aligned(10);
    io.log_start.insert(tp(0), 25);
    periodic(&io).await;
    assert_eq!(io.commits()[0].1, vec![(tp(0), 25)]);
}

#[tokio::test]
async fn a_round_reads_the_log_starts_of_all_its_partitions_together_once() {
    let mut io = Fake::aligned(10);
    for p in 1..50 {
        let mut map = PartitionMap::starting_at(0, 0);
        map.record(0, 0, 100);
        io.maps.insert(tp(p), map);
        io.mirroring.insert(tp(p));
        io.log_start.insert(tp(p), 20);
    }
    let offsets: BTreeMap<Tp, i64> = (0..50).map(|p| (tp(p), 10)).collect();
    io.source
        .get_mut()
        .unwrap()
        .insert("g".into(), offsets.clone());
    io.source.get_mut().unwrap().insert("h".into(), offsets);
    periodic(&io).await;
    assert_eq!(io.log_start_requests.load(SeqCst), 1);
    let commits = io.commits();
    assert_eq!(commits.len(), 2, "both groups: {commits:?}");
    assert_eq!(commits[0].1[0], (tp(0), 10));
    assert_eq!(commits[0].1[1], (tp(1), 20), "raised to the log start");
}

#[tokio::test]
async fn a_group_with_members_on_the_destination_is_not_written() {
    let mut io = Fake::aligned(40);
    io.active.insert("g".into());
    let r = periodic(&io).await;
    assert!(io.commits().is_empty());
    assert_eq!(r.groups[0].outcome, GroupOutcome::SkippedActive);
}

#[tokio::test]
async fn a_commit_the_destination_refuses_for_members_is_reported_skipped_active() {
    let mut io = Fake::aligned(40);
    io.refuse_as_active = true;
    let r = periodic(&io).await;
    assert_eq!(r.groups[0].outcome, GroupOutcome::SkippedActive);
}

#[tokio::test]
async fn a_partition_that_is_not_mirroring_is_not_synced() {
    let mut io = Fake::aligned(40);
    io.mirroring.clear();
    io.unfenced.insert(tp(0));
    let r = periodic(&io).await;
    assert!(io.commits().is_empty());
    assert!(r.groups.is_empty());
}

#[tokio::test]
async fn the_final_round_syncs_partitions_not_fenced_yet() {
    let mut io = Fake::aligned(40);
    io.mirroring.clear();
    io.unfenced.insert(tp(0));
    first_round(&io, &all(), RoundKind::Final, &|| Ok(()), LIMITS).await;
    assert_eq!(io.commits()[0].1, vec![(tp(0), 40)]);
}

#[tokio::test]
async fn an_offset_the_destination_already_has_is_not_committed_again() {
    let io = Fake::aligned(40);
    io.dest
        .lock()
        .unwrap()
        .insert("g".into(), BTreeMap::from([(tp(0), 40)]));
    let r = periodic(&io).await;
    assert!(io.commits().is_empty());
    assert_eq!(r.groups[0].outcome, GroupOutcome::Synced);
}

#[tokio::test]
async fn topics_of_other_mirrors_are_ignored() {
    let mut io = Fake::aligned(40);
    io.owned.clear();
    periodic(&io).await;
    assert!(io.commits().is_empty());
}

#[tokio::test]
async fn an_excluded_group_is_not_synced() {
    let io = Fake::aligned(40);
    let cfg = GroupSyncConfig {
        exclude: vec!["regex:g.*".into()],
        ..GroupSyncConfig::default()
    };
    first_round(
        &io,
        &GroupFilter::new(&cfg).unwrap(),
        RoundKind::Periodic,
        &|| Ok(()),
        LIMITS,
    )
    .await;
    assert!(io.commits().is_empty());
}

#[tokio::test]
async fn an_unreachable_source_makes_the_round_incomplete_without_writing() {
    let io = Fake::aligned(40);
    io.source_down.store(true, SeqCst);
    let r = periodic(&io).await;
    assert!(!r.complete());
    assert!(io.commits().is_empty());
}

#[tokio::test]
async fn a_round_told_to_stop_writes_nothing() {
    let io = Fake::aligned(40);
    let stop = || Err("told to stop".to_string());
    let r = first_round(&io, &all(), RoundKind::Periodic, &stop, LIMITS).await;
    assert!(io.commits().is_empty());
    assert!(!r.complete());
}

#[tokio::test]
async fn the_lag_is_the_source_commit_past_the_destination_commit() {
    let mut io = Fake::aligned(130);
    io.active.insert("g".into());
    io.dest
        .lock()
        .unwrap()
        .insert("g".into(), BTreeMap::from([(tp(0), 90)]));
    let r = periodic(&io).await;
    // 100 (mirrored end) + 30 not mirrored yet - 90 committed on the destination.
    assert_eq!(r.groups[0].partitions[0].lag, Some(40));
}

#[tokio::test]
async fn nothing_is_written_after_the_final_sync() {
    let sync = sync_over(Fake::aligned(40));
    sync.final_sync(Duration::from_secs(5)).await;
    let before = sync.io.commits().len();
    assert!(sync.round(RoundKind::Periodic).await.is_err());
    assert!(sync.round(RoundKind::Final).await.is_err());
    assert_eq!(sync.io.commits().len(), before);
    assert_eq!(sync.phase(), Phase::Stopped);
}

#[tokio::test]
async fn the_final_sync_writes_the_last_offsets_once() {
    let sync = sync_over(Fake::aligned(40));
    sync.final_sync(Duration::from_secs(5)).await;
    sync.final_sync(Duration::from_secs(5)).await;
    assert_eq!(sync.io.commits().len(), 1);
}

#[tokio::test]
async fn a_final_sync_against_a_hanging_source_ends_at_its_budget_and_stops_the_sync() {
    let mut io = Fake::aligned(40);
    io.source_hangs = true;
    let sync = sync_over(io);
    sync.final_sync(Duration::from_millis(50)).await;
    assert_eq!(sync.phase(), Phase::Stopped);
    assert!(sync.io.commits().is_empty());
}

#[test]
fn the_phase_goes_syncing_final_stopped_and_nowhere_else() {
    assert_eq!(Phase::Syncing.transition(Phase::Final), Ok(Phase::Final));
    assert_eq!(Phase::Final.transition(Phase::Stopped), Ok(Phase::Stopped));
    assert!(Phase::Stopped.transition(Phase::Syncing).is_err());
    assert!(Phase::Syncing.transition(Phase::Stopped).is_err());
    assert!(Phase::Final.transition(Phase::Syncing).is_err());
}

#[test]
fn a_destination_offset_translates_back_exactly() {
    let mut map = PartitionMap::starting_at(0, 0);
    map.record(0, 0, 5);
    map.record(8, 5, 2);
    assert_eq!(translate_back(&map, 5), Some(8));
    assert_eq!(translate_back(&map, 7), Some(10));
    assert_eq!(translate_back(&map, 8), None);
}

#[test]
fn nothing_translates_before_anything_was_mirrored() {
    assert_eq!(translate(&PartitionMap::default(), 3), None);
}

/// `orders-0` aligned with group `g` at 40, plus the application's output partition `out-0`
/// (transactional), mirrored up to source offset 50.
fn with_output(ends: Vec<BTreeMap<Tp, (i64, i64)>>) -> Fake {
    let mut f = Fake::aligned(40);
    let mut map = PartitionMap::starting_at(0, 0);
    map.record(0, 0, 50);
    f.maps.insert(("out".into(), 0), map);
    f.owned.insert("out".into());
    f.mirroring.insert(("out".into(), 0));
    f.txn.insert(("out".into(), 0));
    *f.ends.lock().unwrap() = ends;
    f
}

fn out_end(end: i64, stable: i64) -> BTreeMap<Tp, (i64, i64)> {
    BTreeMap::from([(("out".to_string(), 0), (end, stable))])
}

#[tokio::test]
async fn offsets_are_not_synced_while_a_transactional_partition_is_mirrored_behind_the_source() {
    let io = with_output(vec![out_end(80, 80)]);
    let r = periodic(&io).await;
    assert!(io.commits().is_empty(), "{:?}", io.commits());
    assert!(
        matches!(&r.groups[0].outcome, GroupOutcome::WaitingForMirror(w) if w.contains("out-0")),
        "{r:?}"
    );
    assert!(!r.complete(), "a waiting round is not complete");
}

#[tokio::test]
async fn a_transaction_still_open_on_the_source_holds_the_sync() {
    // The mirror holds everything up to the open transaction, which never completes.
    let io = with_output(vec![out_end(80, 50)]);
    let r = periodic(&io).await;
    assert!(io.commits().is_empty());
    assert!(
        matches!(&r.groups[0].outcome, GroupOutcome::WaitingForMirror(w) if w.contains("have not completed")),
        "{r:?}"
    );
}

#[tokio::test]
async fn offsets_are_synced_once_the_transactions_open_at_the_read_complete_and_are_mirrored() {
    // At the read: log end 50, a transaction open from 45. Then it completes (stable 52 >= 50)
    // with the log at 52, which the mirror has not passed (50): the round waits for it.
    let io = with_output(vec![out_end(50, 45), out_end(52, 52)]);
    let r = periodic(&io).await;
    assert!(
        io.commits().is_empty(),
        "the mirror is at 50, the cut at 52"
    );
    assert!(matches!(
        r.groups[0].outcome,
        GroupOutcome::WaitingForMirror(_)
    ));
    // Mirrored past the cut: the next round commits.
    let io = with_output(vec![out_end(50, 45), out_end(50, 50)]);
    let r = periodic(&io).await;
    assert_eq!(io.commits(), vec![("g".to_string(), vec![(tp(0), 40)])]);
    assert_eq!(r.groups[0].outcome, GroupOutcome::Synced);
}

#[tokio::test]
async fn a_partition_with_a_transaction_open_at_the_read_counts_before_the_agent_saw_one() {
    let mut io = with_output(vec![out_end(80, 60)]);
    io.txn.clear();
    periodic(&io).await;
    assert!(io.commits().is_empty());
}

/// `out-0` mirrored up to 50 of the source's 500, no transaction seen in it by the agent nor open
/// on the source; reading its unmirrored records finds `scan` (none: unknown).
fn output_behind(scan: Option<Scan>) -> Fake {
    let mut io = with_output(vec![out_end(500, 500)]);
    io.txn.clear();
    if let Some(s) = scan {
        io.scan.insert(("out".into(), 0), s);
    }
    io
}

/// Review G7: this test was `a_mirror_without_transactions_syncs_at_once_whatever_its_lag` and
/// asserted the commit: a partition the agent has not seen a transaction in yet, mirrored up to
/// 50 of 500, did not count, though transactions completed before the read may sit in 50..500.
#[tokio::test]
async fn a_partition_behind_the_source_not_known_to_be_free_of_transactions_holds_the_sync() {
    let io = output_behind(None);
    let r = periodic(&io).await;
    assert!(io.commits().is_empty(), "{:?}", io.commits());
    assert!(
        matches!(&r.groups[0].outcome, GroupOutcome::WaitingForMirror(w) if w.contains("out-0")),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_partition_behind_the_source_proven_free_of_transactions_does_not_hold_the_sync() {
    let io = output_behind(Some(Scan::Clean));
    let r = periodic(&io).await;
    assert_eq!(io.commits(), vec![("g".to_string(), vec![(tp(0), 40)])]);
    assert_eq!(r.groups[0].outcome, GroupOutcome::Synced);
    assert_eq!(
        *io.scanned.lock().unwrap(),
        vec![(("out".to_string(), 0), 50, 500)],
        "the unmirrored records 50..500 were read"
    );
}

#[tokio::test]
async fn a_transaction_in_the_unmirrored_records_of_a_partition_holds_the_sync() {
    let io = output_behind(Some(Scan::Transactional));
    let r = periodic(&io).await;
    assert!(io.commits().is_empty());
    assert!(matches!(
        r.groups[0].outcome,
        GroupOutcome::WaitingForMirror(_)
    ));
}

#[tokio::test]
async fn a_partition_the_agent_mirrored_a_transaction_into_is_not_read_for_proof() {
    let io = with_output(vec![out_end(500, 500)]);
    periodic(&io).await;
    assert!(io.scanned.lock().unwrap().is_empty());
    assert!(io.commits().is_empty());
}

#[tokio::test]
async fn a_partition_the_agent_has_no_map_of_yet_is_in_the_cut() {
    let mut io = Fake::aligned(40);
    let new = ("new".to_string(), 0);
    io.owned.insert("new".into());
    io.source_only.push(new.clone());
    *io.ends.lock().unwrap() = vec![BTreeMap::from([(new, (30, 30))])];
    let r = periodic(&io).await;
    assert!(io.commits().is_empty(), "{:?}", io.commits());
    assert!(
        matches!(&r.groups[0].outcome, GroupOutcome::WaitingForMirror(w) if w.contains("new-0")),
        "{r:?}"
    );
}

/// A sync whose rounds wait for the cut at most 300 ms.
fn quick_sync_over(io: Fake) -> Arc<GroupSync<Fake>> {
    let cfg = GroupSyncConfig {
        sync_interval_ms: 300,
        ..GroupSyncConfig::default()
    };
    let m = metrics::GroupMetrics::new().unwrap();
    Arc::new(GroupSync::new("m", &cfg, io, m).unwrap())
}

/// Round 1 read g's offsets with `out-0` at 80 and the mirror at 50; then the mirror moves to
/// 90 while the source's `out-0` is at 120.
async fn after_a_first_waiting_round(io: Fake) -> Arc<GroupSync<Fake>> {
    *io.ends.lock().unwrap() = vec![out_end(80, 80), out_end(120, 120)];
    let sync = quick_sync_over(io);
    sync.round(RoundKind::Periodic).await.unwrap();
    assert!(sync.io.commits().is_empty(), "the mirror is at 50 of 80");
    sync.io
        .mirrored_to
        .lock()
        .unwrap()
        .insert(("out".into(), 0), 90);
    sync
}

/// P2 (chaos seeds 21 and 27): every round asked for the source's end at that round, so a
/// mirror behind a busy transactional producer blocked the offsets of a group that had stopped
/// long before, however far the mirror had got past them.
#[tokio::test]
async fn a_stopped_groups_offsets_are_synced_once_the_mirror_passes_the_end_its_first_round_saw() {
    // g is still at 40: read when out-0 ended at 80, which the mirror (at 90) has passed,
    // though the source's out-0 is at 120 now.
    let sync = after_a_first_waiting_round(with_output(Vec::new())).await;
    sync.round(RoundKind::Periodic).await.unwrap();
    assert_eq!(
        sync.io.commits(),
        vec![("g".to_string(), vec![(tp(0), 40)])],
        "g's offset 40 was committed before the source's end was 80, which the mirror passed"
    );
}

fn set_source(sync: &GroupSync<Fake>, group: &str, offsets: &[(Tp, i64)]) {
    let mut source = sync.io.source.lock().unwrap();
    source.clear();
    if !offsets.is_empty() {
        source.insert(group.to_string(), offsets.iter().cloned().collect());
    }
}

#[tokio::test]
async fn an_offset_that_moved_since_the_first_round_needs_the_cut_of_the_round_that_read_it() {
    let sync = after_a_first_waiting_round(with_output(Vec::new())).await;
    set_source(&sync, "g", &[(tp(0), 45)]);
    let r = sync.round(RoundKind::Periodic).await.unwrap();
    assert!(sync.io.commits().is_empty(), "{:?}", sync.io.commits());
    let g = &sync.status().groups[0];
    assert!(
        matches!(&g.report.outcome, GroupOutcome::WaitingForMirror(w) if w.contains("out-0 (90 < 120)")),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_groups_partition_whose_offset_stayed_is_committed_while_one_that_moved_waits() {
    let mut io = with_output(Vec::new());
    let mut map = PartitionMap::starting_at(0, 0);
    map.record(0, 0, 100);
    io.maps.insert(tp(1), map);
    io.mirroring.insert(tp(1));
    io.source
        .get_mut()
        .unwrap()
        .insert("g".into(), BTreeMap::from([(tp(0), 40), (tp(1), 70)]));
    let sync = after_a_first_waiting_round(io).await;
    set_source(&sync, "g", &[(tp(0), 40), (tp(1), 75)]);
    sync.round(RoundKind::Periodic).await.unwrap();
    assert_eq!(
        sync.io.commits(),
        vec![("g".to_string(), vec![(tp(0), 40)])],
        "orders-0 stayed at 40, read when out-0 ended at 80; orders-1 moved to 75 at 120"
    );
    let g = &sync.status().groups[0].report;
    assert!(
        matches!(g.outcome, GroupOutcome::WaitingForMirror(_)),
        "{g:?}"
    );
    assert_eq!(g.commits, 1);
    assert_eq!(g.partitions.len(), 2, "both partitions reported: {g:?}");
}

#[tokio::test]
async fn a_round_whose_offsets_were_all_read_before_does_not_ask_the_source_for_its_ends() {
    let sync = quick_sync_over(Fake::aligned(40));
    sync.round(RoundKind::Periodic).await.unwrap();
    let asked = sync.io.ends_asked.load(SeqCst);
    assert!(asked > 0, "the first round reads the cut");
    sync.round(RoundKind::Periodic).await.unwrap();
    assert_eq!(sync.io.ends_asked.load(SeqCst), asked, "g is still at 40");
    assert_eq!(sync.io.commits().len(), 1);
}

#[tokio::test]
async fn a_group_no_longer_listed_is_forgotten_and_read_anew_when_it_returns() {
    let sync = after_a_first_waiting_round(with_output(Vec::new())).await;
    set_source(&sync, "g", &[]);
    sync.round(RoundKind::Periodic).await.unwrap();
    set_source(&sync, "g", &[(tp(0), 40)]);
    sync.round(RoundKind::Periodic).await.unwrap();
    assert!(
        sync.io.commits().is_empty(),
        "g came back after a round without it: its offset may have been committed since"
    );
}

/// Log lines written on this thread while the guard lives.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Review H1: a fresh destination answers FindCoordinator with COORDINATOR_NOT_AVAILABLE until
/// its `__consumer_offsets` exists; the round waited a whole interval before it tried again.
#[tokio::test]
async fn a_coordinator_not_available_answer_is_retried_within_the_round() {
    let io = Fake::aligned(40);
    *io.coordinator_not_available.lock().unwrap() = 2;
    let r = periodic(&io).await;
    assert_eq!(
        io.commits(),
        vec![("g".to_string(), vec![(tp(0), 40)])],
        "{r:?}"
    );
    assert_eq!(r.groups[0].outcome, GroupOutcome::Synced);
}

/// Run the final sync of `sync`: its log (which must not call it done) and its outcome.
async fn final_not_done(sync: &GroupSync<Fake>) -> (String, outcome::FinalGroupSync) {
    let (logs, _guard) = Logs::capture();
    sync.final_sync(Duration::from_secs(5)).await;
    let text = logs.text();
    assert!(
        !text.contains("final group offset sync done"),
        "a final round that did not sync every group was logged as done:\n{text}"
    );
    let fin = sync.status().final_round;
    (text, fin.expect("the final round's outcome"))
}

#[tokio::test]
async fn a_final_round_that_could_not_reach_the_source_is_not_logged_as_done() {
    let io = Fake::aligned(40);
    io.source_down.store(true, SeqCst);
    let sync = sync_over(io);
    let (text, fin) = final_not_done(&sync).await;
    assert!(
        text.contains("WARN") && text.contains("final group offset sync incomplete"),
        "{text}"
    );
    assert!(sync.io.commits().is_empty());
    assert_eq!(fin.outcome, outcome::FinalOutcome::Incomplete);
    assert!(
        fin.error
            .as_deref()
            .is_some_and(|e| e.contains("source unreachable")),
        "{fin:?}"
    );
}

#[tokio::test]
async fn a_final_round_that_cannot_reach_the_source_names_the_groups_it_did_not_sync() {
    let sync = sync_over(Fake::aligned(40));
    sync.round(RoundKind::Periodic).await.unwrap();
    assert_eq!(sync.io.commits().len(), 1, "a periodic round synced g");
    sync.io.source_down.store(true, SeqCst);
    let (text, fin) = final_not_done(&sync).await;
    assert_eq!(fin.outcome, outcome::FinalOutcome::Incomplete);
    let named: Vec<(&str, outcome::NotSynced)> = fin
        .groups_not_synced
        .iter()
        .map(|g| (g.group.as_str(), g.why))
        .collect();
    assert_eq!(named, vec![("g", outcome::NotSynced::RoundIncomplete)]);
    assert!(fin.groups_not_synced[0]
        .reason
        .contains("cannot list the source's groups"));
    let line = text
        .lines()
        .find(|l| l.contains("final group offset sync"))
        .unwrap_or_default();
    assert!(
        line.contains("WARN") && line.contains("g (cannot list the source's groups"),
        "{line}"
    );
    assert_eq!(
        sync.not_synced_counts(),
        vec![
            ("error", 0),
            ("waiting_for_mirror", 0),
            ("round_incomplete", 1)
        ]
    );
}

#[tokio::test]
async fn a_final_round_that_synced_every_group_is_logged_done() {
    let (logs, _guard) = Logs::capture();
    let sync = sync_over(Fake::aligned(40));
    sync.final_sync(Duration::from_secs(5)).await;
    let fin = sync
        .status()
        .final_round
        .expect("the final round's outcome");
    assert_eq!(fin.outcome, outcome::FinalOutcome::Complete);
    assert_eq!(fin.groups_synced, 1);
    assert!(logs.text().contains("final group offset sync done"));
}

#[tokio::test]
async fn a_retriable_failure_that_outlasts_the_rounds_retry_time_fails_the_group() {
    let io = Fake::aligned(40);
    *io.coordinator_not_available.lock().unwrap() = u32::MAX;
    let limits = RoundLimits {
        cut_wait: Duration::from_millis(300),
        retry_for: Duration::from_millis(500),
    };
    let started = std::time::Instant::now();
    let r = first_round(&io, &all(), RoundKind::Periodic, &|| Ok(()), limits).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the retries are bounded by the round's retry time"
    );
    assert!(io.commits().is_empty());
    assert!(
        matches!(&r.groups[0].outcome, GroupOutcome::Error(e) if e.contains("error code 15")),
        "{r:?}"
    );
}

fn gated(io: Fake, gate: Gate) -> Arc<GroupSync<Fake>> {
    let m = metrics::GroupMetrics::new().unwrap();
    Arc::new(
        GroupSync::new("m", &GroupSyncConfig::default(), io, m)
            .unwrap()
            .with_gate(gate),
    )
}

/// Review G14 (a): a round that read the source while this instance owned the agent, and
/// commits after it lost it (a pause, the failover done elsewhere), writes nothing.
#[tokio::test]
async fn a_round_commits_nothing_once_this_instance_lost_the_agent_while_it_read_the_source() {
    let entered = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let mut io = Fake::aligned(40);
    io.hold = Some((entered.clone(), release.clone()));
    let owner = Arc::new(AtomicBool::new(true));
    let o = owner.clone();
    let sync = gated(
        io,
        Arc::new(move |_| {
            o.load(SeqCst)
                .then_some(())
                .ok_or_else(|| "not the agent's owner".to_string())
        }),
    );
    let round = tokio::spawn({
        let sync = sync.clone();
        async move { sync.round(RoundKind::Periodic).await }
    });
    entered.notified().await;
    owner.store(false, SeqCst);
    release.notify_one();
    let summary = round.await.unwrap().expect("the round ran");
    assert!(
        sync.io.commits().is_empty(),
        "committed after the gate closed: {:?}",
        sync.io.commits()
    );
    assert!(
        summary
            .error
            .is_some_and(|e| e.contains("not the agent's owner")),
        "the round says why it stopped"
    );
}

/// Review G14 (b): the final round on an instance that does not own the agent does not run;
/// it must say so, not "done".
#[tokio::test]
async fn a_final_sync_on_an_instance_that_does_not_own_the_agent_is_reported_skipped() {
    let sync = gated(
        Fake::aligned(40),
        Arc::new(|_| Err("not the agent's owner: another instance runs the mirror's agent".into())),
    );
    let (text, fin) = final_not_done(&sync).await;
    assert!(text.contains("skipped"), "{text}");
    assert!(sync.io.commits().is_empty());
    assert_eq!(fin.outcome, outcome::FinalOutcome::Skipped);
    assert!(
        fin.error
            .as_deref()
            .is_some_and(|e| e.contains("not the agent's owner")),
        "{fin:?}"
    );
}
