//! The group offset sync's rules against a fake [`GroupIo`], one behaviour per test.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::policy::*;
use super::*;
use crate::mirror::agent::offsets::PartitionMap;

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
    source: BTreeMap<String, BTreeMap<Tp, i64>>,
    source_down: bool,
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
    fn mirror_partitions(&self) -> Vec<Tp> {
        self.maps.keys().cloned().collect()
    }
    fn carries_transactions(&self, topic: &str, partition: i32) -> bool {
        self.txn.contains(&(topic.to_string(), partition))
    }
    async fn source_ends(&self, partitions: &[Tp]) -> Result<BTreeMap<Tp, (i64, i64)>, IoError> {
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
        if self.source_down {
            return Err(IoError("source unreachable".into()));
        }
        Ok(self.source.keys().cloned().collect())
    }
    async fn source_offsets(&self, group: &str) -> Result<BTreeMap<Tp, i64>, IoError> {
        Ok(self.source.get(group).cloned().unwrap_or_default())
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
    async fn destination_log_start(&self, topic: &str, partition: i32) -> Result<i64, IoError> {
        Ok(*self
            .log_start
            .get(&(topic.to_string(), partition))
            .unwrap_or(&0))
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

/// How long a round in these tests waits for the consistent cut.
const CUT: Duration = Duration::from_millis(300);

fn all() -> GroupFilter {
    GroupFilter::new(&GroupSyncConfig::default()).unwrap()
}

async fn periodic(io: &Fake) -> RoundReport {
    run_round(io, &all(), RoundKind::Periodic, &|| true, CUT).await
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
    run_round(&io, &all(), RoundKind::Final, &|| true, CUT).await;
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
    run_round(
        &io,
        &GroupFilter::new(&cfg).unwrap(),
        RoundKind::Periodic,
        &|| true,
        CUT,
    )
    .await;
    assert!(io.commits().is_empty());
}

#[tokio::test]
async fn an_unreachable_source_makes_the_round_incomplete_without_writing() {
    let mut io = Fake::aligned(40);
    io.source_down = true;
    let r = periodic(&io).await;
    assert!(!r.complete());
    assert!(io.commits().is_empty());
}

#[tokio::test]
async fn a_round_told_to_stop_writes_nothing() {
    let io = Fake::aligned(40);
    let r = run_round(&io, &all(), RoundKind::Periodic, &|| false, CUT).await;
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
    sync.round(RoundKind::Periodic).await;
    sync.round(RoundKind::Final).await;
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

#[tokio::test]
async fn a_mirror_without_transactions_syncs_at_once_whatever_its_lag() {
    let mut io = with_output(vec![out_end(500, 500)]);
    io.txn.clear();
    let r = periodic(&io).await;
    assert_eq!(io.commits(), vec![("g".to_string(), vec![(tp(0), 40)])]);
    assert_eq!(r.groups[0].outcome, GroupOutcome::Synced);
}
