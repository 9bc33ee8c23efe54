//! Unit tests of the failover executor over a fake [`FailoverIo`] (partitions' logs in memory, no
//! broker) and a real state directory: a crash after each step, partial barrier-write failures, a
//! drain timeout, a persist failure at each step, an illegal transition.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::cluster::ClusterView;
use crate::config::Config;
use crate::instances::view::Stopped;
use crate::metrics::Metrics;
use crate::mirror::admission::Admission;
use crate::mirror::fault_hooks::CrashMode;
use crate::mirror::records::MIRRORS_AREA;
use crate::mirror::screening::ScreenEntry;
use crate::mirror::state::{BarrierKind, BarrierProducer, MirrorRecord};
use crate::state::{StateStore, IDENTITY_FILE};

const MIRROR: &str = "m";
const PARTITIONS: i32 = 3;

/// A call of the fake where a test can make the state store refuse writes from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    StopAgent,
    Writes,
    NewProducer,
    PsmProducers,
    LastMirrored,
    AdvancePidAllocators,
    AnnounceFailover,
    WaitPeersFenced,
}

/// One batch of a fake partition log.
#[derive(Debug, Clone)]
struct Batch {
    offset: i64,
    producer_id: i64,
    /// A barrier: its form, the failover id it carries (data) or nothing (control).
    barrier: Option<(BarrierKind, String)>,
    /// An ABORT marker ending an open transaction of `producer_id`.
    abort: bool,
}

#[derive(Default)]
struct FakeState {
    logs: HashMap<PartitionKey, Vec<Batch>>,
    /// Producers the brokers hold that no PSM here saw (mirrored through other instances).
    broker_producers: Vec<(i64, ScreenEntry)>,
    /// The other instances cannot be told of the failover (this error).
    peers_unreachable: Option<String>,
    /// An other instance alive did not fence (this error).
    peers_not_fenced: Option<String>,
    in_flight: HashMap<PartitionKey, i64>,
    /// Barrier writes to these partitions fail.
    refuse_writes: HashSet<PartitionKey>,
    /// At this call, the state directory loses its identity file (every write is refused).
    break_store_at: Option<Call>,
    cleared: Vec<PartitionKey>,
    /// Producers with a transaction open in a partition.
    open_txns: HashMap<PartitionKey, Vec<i64>>,
    /// Aborting open transactions in these partitions fails.
    refuse_aborts: HashSet<PartitionKey>,
    /// What the failover handed to the other instances, in order.
    published: Vec<Stopped>,
    /// Another instance took the failover over.
    taken_over_by: Option<String>,
    barrier_producers_published: Vec<BarrierProducer>,
    /// Several instances run (STOPPED once handed over).
    several: bool,
    /// Instances were waited out whose leases ended then (ms).
    waited_out: Option<i64>,
    /// A mirror write of this producer lands right after the next barrier written to each of
    /// these partitions, as one queued at a waited-out instance would (its transaction left
    /// open when `true`).
    land_after_barrier: HashMap<PartitionKey, (i64, bool)>,
    /// The handover cannot be appended (this error).
    refuse_handover: Option<String>,
    /// Where each log ended before its first barrier, as recorded.
    barrier_from: HashMap<PartitionKey, i64>,
}

/// The fake I/O: partition logs in memory, shared by the executors of one test (a restarted
/// gateway sees the same logs).
#[derive(Clone)]
struct Fake {
    state: Arc<Mutex<FakeState>>,
    dir: PathBuf,
}

impl Fake {
    fn new(dir: PathBuf) -> Fake {
        let mut s = FakeState::default();
        for p in 0..PARTITIONS {
            // Three mirrored batches of producer 7 in each log.
            let log = (0..3)
                .map(|offset| Batch {
                    offset,
                    producer_id: 7,
                    barrier: None,
                    abort: false,
                })
                .collect();
            s.logs.insert(("orders".to_string(), p), log);
        }
        Fake {
            state: Arc::new(Mutex::new(s)),
            dir,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }

    fn call(&self, call: Call) {
        let mut s = self.state();
        if s.break_store_at == Some(call) {
            s.break_store_at = None;
            std::fs::remove_file(self.dir.join(IDENTITY_FILE)).unwrap();
        }
    }

    /// The barriers in each partition's log.
    fn barriers(&self) -> HashMap<PartitionKey, Vec<i64>> {
        self.state()
            .logs
            .iter()
            .map(|(k, log)| {
                let offsets = log
                    .iter()
                    .filter(|b| b.barrier.is_some())
                    .map(|b| b.offset)
                    .collect();
                (k.clone(), offsets)
            })
            .collect()
    }

    fn is_own(b: &Batch, fid: &str, producer_id: Option<i64>) -> bool {
        match &b.barrier {
            Some((BarrierKind::Data, f)) => f == fid,
            Some((BarrierKind::Control, _)) => producer_id == Some(b.producer_id),
            None => false,
        }
    }
}

impl FailoverIo for Fake {
    async fn stop_agent(&self, _mirror: &str) {
        self.call(Call::StopAgent);
    }

    fn writes(&self, topic: &str, partition: i32) -> WriteCounts {
        self.call(Call::Writes);
        let in_flight = self
            .state()
            .in_flight
            .get(&(topic.to_string(), partition))
            .copied()
            .unwrap_or(0);
        WriteCounts {
            in_flight,
            ..WriteCounts::default()
        }
    }

    async fn find_barrier(
        &self,
        topic: &str,
        partition: i32,
        fid: &str,
        producer_id: Option<i64>,
        from: Option<i64>,
    ) -> Option<FoundBarrier> {
        let s = self.state();
        let log = s.logs.get(&(topic.to_string(), partition))?;
        // Without a recorded start, the real I/O looks at the last few batches only.
        let start = from.unwrap_or_else(|| log.last().map_or(0, |b| b.offset) - 4);
        log.iter()
            .rev()
            .filter(|b| b.offset >= start)
            .find(|b| Fake::is_own(b, fid, producer_id))
            .map(|b| FoundBarrier {
                offset: b.offset,
                kind: b.barrier.as_ref().map(|(k, _)| *k).unwrap(),
                producer_id: producer_id.filter(|_| b.producer_id >= 0),
            })
    }

    async fn late_batches(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        fid: &str,
        producer_id: Option<i64>,
    ) -> Result<Vec<TailBatch>, String> {
        let s = self.state();
        let log = s.logs.get(&(topic.to_string(), partition)).unwrap();
        Ok(log
            .iter()
            .filter(|b| b.offset >= from && !Fake::is_own(b, fid, producer_id))
            .map(|b| TailBatch {
                base_offset: b.offset,
                producer_id: b.producer_id,
                producer_epoch: 0,
                max_timestamp: 0,
                own_barrier: None,
                last_offset: b.offset,
                is_data: true,
            })
            .collect())
    }

    async fn producer_ids_in_use(&self, _parts: &[PartitionKey]) -> Result<InUse, ProducerIdError> {
        Ok(InUse::default())
    }

    async fn new_barrier_producer(
        &self,
        _parts: &[PartitionKey],
    ) -> Result<NewProducer, ProducerIdError> {
        self.call(Call::NewProducer);
        Ok(NewProducer {
            producer: BarrierProducer {
                producer_id: 5000,
                producer_epoch: 0,
            },
            unreachable: Vec::new(),
            why: String::new(),
        })
    }

    async fn abort_open_transactions(
        &self,
        _mirror: &str,
        parts: &[PartitionKey],
    ) -> OpenTxnAborts {
        let mut s = self.state();
        let mut out = OpenTxnAborts::default();
        for k in parts {
            if s.refuse_aborts.contains(k) {
                out.failed.push(k.clone());
                out.reason = "DescribeProducers: error code 6".into();
                continue;
            }
            let open = s.open_txns.remove(k).unwrap_or_default();
            let log = s.logs.get_mut(k).unwrap();
            for producer_id in open {
                let offset = log.last().map(|b| b.offset + 1).unwrap_or(0);
                log.push(Batch {
                    offset,
                    producer_id,
                    barrier: None,
                    abort: true,
                });
                out.aborted.push(AbortedTxn {
                    partition: k.clone(),
                    producer_id,
                    epoch: 0,
                    coordinator_epoch: 0,
                    first_offset: 0,
                });
            }
        }
        out
    }

    async fn write_barriers(
        &self,
        _mirror: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        parts: &[PartitionKey],
    ) -> BarrierWrites {
        let mut s = self.state();
        let mut w = BarrierWrites::default();
        for k in parts {
            if s.refuse_writes.contains(k) {
                w.failed.push(k.clone());
                w.reason = "leader not available".into();
                continue;
            }
            let log = s.logs.get_mut(k).unwrap();
            let offset = log.last().map(|b| b.offset + 1).unwrap_or(0);
            let (kind, producer_id) = match producer {
                Some(p) => (BarrierKind::Control, p.producer_id),
                None => (BarrierKind::Data, -1),
            };
            log.push(Batch {
                offset,
                producer_id,
                abort: false,
                barrier: Some((kind, fid.to_string())),
            });
            if let Some((late, open)) = s.land_after_barrier.remove(k) {
                let log = s.logs.get_mut(k).unwrap();
                log.push(Batch {
                    offset: offset + 1,
                    producer_id: late,
                    barrier: None,
                    abort: false,
                });
                if open {
                    s.open_txns.entry(k.clone()).or_default().push(late);
                }
            }
            let producer_id = producer.map(|p| p.producer_id);
            w.written.insert(
                k.clone(),
                FoundBarrier {
                    offset,
                    kind,
                    producer_id,
                },
            );
        }
        w
    }

    fn psm_ready(&self, _topic: &str, _partition: i32) -> bool {
        true
    }

    fn psm_producers(&self, parts: &[PartitionKey], _own: &[i64]) -> Vec<(i64, ScreenEntry)> {
        self.call(Call::PsmProducers);
        parts
            .iter()
            .map(|_| {
                let e = ScreenEntry {
                    max_epoch: 0,
                    last_timestamp: now_ms(),
                    added_ms: 0,
                    coordinator_epoch: -1,
                };
                (7, e)
            })
            .collect()
    }

    async fn last_mirrored_offset(
        &self,
        topic: &str,
        partition: i32,
        _fid: &str,
        barrier: FoundBarrier,
    ) -> Result<i64, String> {
        self.call(Call::LastMirrored);
        let s = self.state();
        let log = s.logs.get(&(topic.to_string(), partition)).unwrap();
        Ok(log
            .iter()
            .filter(|b| b.offset < barrier.offset && b.barrier.is_none() && !b.abort)
            .map(|b| b.offset)
            .max()
            .unwrap_or(-1))
    }

    fn topic_id(&self, _topic: &str) -> Option<uuid::Uuid> {
        None
    }

    fn clear_psm_at(&self, topic: &str, partition: i32, _barrier: i64, _own: Option<i64>) -> usize {
        self.state().cleared.push((topic.to_string(), partition));
        1
    }

    async fn advance_pid_allocators(&self, _mirror: &str, _screened: Vec<i64>) {
        self.call(Call::AdvancePidAllocators);
    }

    async fn broker_producers(
        &self,
        parts: &[PartitionKey],
        own: &[i64],
    ) -> Result<Vec<(PartitionKey, i64, ScreenEntry)>, String> {
        // The brokers hold each of them in every partition asked.
        Ok(parts
            .iter()
            .flat_map(|k| {
                self.state()
                    .broker_producers
                    .iter()
                    .filter(|(id, _)| !own.contains(id))
                    .map(|(id, e)| (k.clone(), *id, *e))
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    async fn announce_failover(&self, _mirror: &str, _fid: &str) -> Result<(), NotDriving> {
        self.call(Call::AnnounceFailover);
        let s = self.state();
        if let Some(by) = s.taken_over_by.clone() {
            return Err(NotDriving::TakenOver {
                failover_id: String::new(),
                by,
            });
        }
        s.peers_unreachable
            .clone()
            .map_or(Ok(()), |e| Err(NotDriving::Unconfirmed(e)))
    }

    fn check_driving(&self, _mirror: &str, _fid: &str) -> Result<(), NotDriving> {
        match self.state().taken_over_by.clone() {
            Some(by) => Err(NotDriving::TakenOver {
                failover_id: String::new(),
                by,
            }),
            None => Ok(()),
        }
    }

    async fn publish_barrier_producer(
        &self,
        _mirror: &str,
        _fid: &str,
        producer: BarrierProducer,
    ) -> Result<(), String> {
        self.state().barrier_producers_published.push(producer);
        Ok(())
    }

    fn announced_barrier_producer(&self, _mirror: &str, _fid: &str) -> Option<BarrierProducer> {
        self.state().barrier_producers_published.last().copied()
    }

    async fn wait_peers_fenced(&self, _mirror: &str, _fid: &str) -> Result<Option<i64>, String> {
        self.call(Call::WaitPeersFenced);
        let s = self.state();
        s.peers_not_fenced.clone().map_or(Ok(s.waited_out), Err)
    }

    async fn publish_stopped(&self, stopped: Stopped) -> Result<(), String> {
        let mut s = self.state();
        if let Some(e) = s.peers_unreachable.clone().or(s.refuse_handover.clone()) {
            return Err(e);
        }
        s.published.push(stopped);
        Ok(())
    }

    fn hands_over(&self) -> bool {
        self.state().several
    }

    async fn log_ends(
        &self,
        parts: &[PartitionKey],
    ) -> (HashMap<PartitionKey, i64>, Vec<PartitionKey>, String) {
        let s = self.state();
        let ends = parts
            .iter()
            .map(|k| {
                let end = s
                    .logs
                    .get(k)
                    .and_then(|l| l.last())
                    .map_or(0, |b| b.offset + 1);
                (k.clone(), end)
            })
            .collect();
        (ends, Vec::new(), String::new())
    }

    async fn publish_barrier_from(
        &self,
        _mirror: &str,
        _fid: &str,
        from: &HashMap<PartitionKey, i64>,
    ) -> Result<(), String> {
        let mut s = self.state();
        for (k, o) in from {
            s.barrier_from.entry(k.clone()).or_insert(*o);
        }
        Ok(())
    }

    fn announced_barrier_from(&self, _mirror: &str, _fid: &str) -> HashMap<PartitionKey, i64> {
        self.state().barrier_from.clone()
    }
}

/// A state directory holding mirror `m` with partitions `orders`-0..2 MIRRORING, and the fake
/// logs of those partitions.
struct Rig {
    dir: tempfile::TempDir,
    config: Config,
    fake: Fake,
}

fn rig(barrier: &str) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::config::load_str(
        &format!(
            "destination:\n  bootstrap: [\"127.0.0.1:1\"]\nlisteners:\n  client:\n    port_base: 9092\n\
             admin:\n  bind: 127.0.0.1:9180\nmirrors:\n  - name: {MIRROR}\n    topics: [orders]\n\
             failover:\n  barrier: {barrier}\nstate_dir: {}\n",
            dir.path().display()
        ),
        "t.yaml",
    )
    .unwrap();
    let store = StateStore::init(dir.path()).unwrap();
    let record = MirrorRecord::new(MIRROR, (0..PARTITIONS).map(|p| ("orders".into(), p)), 1);
    store
        .write(MIRRORS_AREA, &format!("{MIRROR}.json"), &record.encode())
        .unwrap();
    let fake = Fake::new(dir.path().to_path_buf());
    Rig { dir, config, fake }
}

impl Rig {
    /// An executor over the state directory as a gateway (re)started now would build it.
    fn executor(&self, hooks: FaultHooks) -> Arc<Failover<Fake>> {
        let store = StateStore::open(self.dir.path()).unwrap();
        let metrics = Metrics::new();
        let mm = Arc::new(MirrorMetrics::new(&metrics));
        let screening = Arc::new(Screening::load(store.clone(), false, None, 0));
        let cluster = ClusterView::new(
            self.config.destination.clone(),
            crate::client::Connector::plain(),
            metrics.clone(),
        );
        let admission = Arc::new(Admission::new(
            vec![MIRROR.to_string()],
            self.config.topic_router(),
            cluster,
            None,
            mm.rejected.clone(),
            mm.unknown_writes.clone(),
        ));
        let records = Arc::new(Records::load(
            &self.config,
            store,
            admission,
            mm.illegal_transitions.clone(),
        ));
        let settings = FailoverSettings {
            drain_timeout: Duration::from_millis(50),
            unknown_outcome_settle: Duration::ZERO,
            started_ms: now_ms(),
            barrier_mode: self.config.failover.barrier,
        };
        Arc::new(Failover::new(
            records,
            screening,
            mm,
            self.fake.clone(),
            settings,
            hooks,
        ))
    }

    fn crashing_after(&self, point: CrashPoint) -> Arc<Failover<Fake>> {
        self.executor(FaultHooks {
            crash_after: Some(point),
            crash_mode: CrashMode::Unwind,
            ..FaultHooks::default()
        })
    }

    fn on_disk(&self) -> MirrorRecord {
        let bytes = std::fs::read(self.dir.path().join(MIRRORS_AREA).join("m.json")).unwrap();
        MirrorRecord::decode(&bytes).unwrap()
    }

    /// The state directory accepts writes again.
    fn repair_store(&self) {
        StateStore::init(self.dir.path()).unwrap();
    }

    fn break_store_at(&self, call: Call) {
        self.fake.state().break_store_at = Some(call);
    }

    /// Every partition STOPPED, on disk, at the one barrier its log holds.
    fn assert_stopped_with_one_barrier_each(&self) {
        let record = self.on_disk();
        let barriers = self.fake.barriers();
        assert!(record.completed_ms.is_some(), "{record:?}");
        for p in &record.partitions {
            assert_eq!(p.state, PartitionState::Stopped, "{p:?}");
            let in_log = &barriers[&(p.topic.clone(), p.partition)];
            assert_eq!(in_log.len(), 1, "{}-{}: {in_log:?}", p.topic, p.partition);
            assert_eq!(p.barrier_offset, Some(in_log[0]), "{p:?}");
        }
    }
}

/// The partitions of the record in memory, as the disk has them (`last_error` is memory only).
fn comparable(mut r: MirrorRecord) -> MirrorRecord {
    for p in r.partitions.iter_mut() {
        p.last_error = None;
    }
    r
}

fn assert_memory_is_disk(rig: &Rig, exec: &Failover<Fake>) {
    let memory = exec.records.record(MIRROR).unwrap();
    assert_eq!(comparable(memory), comparable(rig.on_disk()));
}

fn steps(record: &MirrorRecord) -> Vec<(PartitionState, Option<FailoverStep>)> {
    record
        .partitions
        .iter()
        .map(|p| (p.state, p.step))
        .collect()
}

/// Run passes as the background task does (FAILED partitions retried between passes) until the
/// failover completes; at most 10.
async fn run_to_completion(exec: &Failover<Fake>, resumed: bool) {
    for attempt in 0..10 {
        if let Ok(PassOutcome::Complete) = exec.run_pass(MIRROR, resumed || attempt > 0).await {
            return;
        }
        exec.retry_failed(MIRROR);
    }
    panic!("the failover did not complete in 10 passes");
}

/// Start a failover whose hooks crash after `point`, then run it as a restarted gateway does.
async fn crash_and_resume(rig: &Rig, point: CrashPoint) {
    let crashing = rig.crashing_after(point);
    let begun = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crashing.begin(MIRROR)));
    if point != CrashPoint::FencedPersisted {
        begun.expect("no crash").expect("the failover begins");
        let pass = tokio::spawn({
            let e = crashing.clone();
            async move { e.run_pass(MIRROR, false).await }
        });
        let crashed = pass.await.expect_err("the pass crashes");
        assert!(crashed.is_panic());
    } else {
        assert!(begun.is_err(), "the failover call crashes");
    }
    drop(crashing);
    let restarted = rig.executor(FaultHooks::default());
    run_to_completion(&restarted, true).await;
    rig.assert_stopped_with_one_barrier_each();
}

#[tokio::test]
async fn a_failover_stops_every_partition_at_one_control_barrier_each() {
    let rig = rig("auto");
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let outcome = exec.run_pass(MIRROR, false).await.unwrap();
    assert_eq!(outcome, PassOutcome::Complete);
    rig.assert_stopped_with_one_barrier_each();
    for p in &rig.on_disk().partitions {
        assert_eq!(p.barrier_kind, Some(BarrierKind::Control));
        assert_eq!(p.barrier_producer.map(|b| b.producer_id), Some(5000));
    }
    assert_eq!(rig.fake.state().cleared.len(), PARTITIONS as usize);
}

#[tokio::test]
async fn a_crash_after_the_failover_call_is_recorded_resumes_to_one_barrier_each() {
    crash_and_resume(&rig("auto"), CrashPoint::FencedPersisted).await;
}

#[tokio::test]
async fn a_crash_after_fenced_resumes_to_one_barrier_each() {
    crash_and_resume(&rig("auto"), CrashPoint::Fenced).await;
}

#[tokio::test]
async fn a_crash_after_the_control_barriers_are_written_finds_them_again_on_resume() {
    crash_and_resume(&rig("auto"), CrashPoint::BarrierWritten).await;
}

#[tokio::test]
async fn a_crash_after_the_data_barriers_are_written_finds_them_again_on_resume() {
    crash_and_resume(&rig("data"), CrashPoint::BarrierWritten).await;
}

#[tokio::test]
async fn a_crash_after_the_screening_set_is_persisted_resumes_to_one_barrier_each() {
    crash_and_resume(&rig("auto"), CrashPoint::ScreenPersisted).await;
}

#[tokio::test]
async fn a_crash_after_barrier_persisted_resumes_to_one_barrier_each() {
    crash_and_resume(&rig("auto"), CrashPoint::BarrierPersisted).await;
}

#[tokio::test]
async fn a_crash_after_psm_cleared_leaves_the_failover_complete() {
    crash_and_resume(&rig("auto"), CrashPoint::PsmCleared).await;
}

#[tokio::test]
async fn a_partial_barrier_write_failure_fails_only_those_partitions_and_the_others_stop() {
    let rig = rig("data");
    let refused = ("orders".to_string(), 1);
    rig.fake.state().refuse_writes.insert(refused.clone());
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let outcome = exec.run_pass(MIRROR, false).await.unwrap();
    assert_eq!(
        outcome,
        PassOutcome::Unfinished {
            stopping: 0,
            failed: 1
        }
    );
    for p in &rig.on_disk().partitions {
        if (p.topic.clone(), p.partition) == refused {
            assert_eq!(p.state, PartitionState::Failed);
            assert_eq!(p.step, Some(FailoverStep::Drained), "retried from its step");
            assert_eq!(p.last_error.as_deref(), Some("leader not available"));
        } else {
            assert_eq!(p.state, PartitionState::Stopped);
        }
    }
}

#[tokio::test]
async fn failed_partitions_are_retried_from_their_recorded_step_to_one_barrier_each() {
    let rig = rig("data");
    rig.fake
        .state()
        .refuse_writes
        .insert(("orders".to_string(), 1));
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    exec.run_pass(MIRROR, false).await.unwrap();
    rig.fake.state().refuse_writes.clear();
    exec.retry_failed(MIRROR);
    let outcome = exec.run_pass(MIRROR, true).await.unwrap();
    assert_eq!(outcome, PassOutcome::Complete);
    rig.assert_stopped_with_one_barrier_each();
}

#[tokio::test]
async fn a_drain_timeout_fails_the_busy_partition_and_holds_the_others_at_fenced() {
    let rig = rig("auto");
    let busy = ("orders".to_string(), 2);
    rig.fake.state().in_flight.insert(busy.clone(), 1);
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let stall = exec.run_pass(MIRROR, false).await.unwrap_err();
    assert!(
        matches!(stall, Stall::PartitionsFailed { partitions: 1, .. }),
        "{stall}"
    );
    for p in &rig.on_disk().partitions {
        assert_eq!(p.step, Some(FailoverStep::Fenced), "{p:?}");
        if (p.topic.clone(), p.partition) == busy {
            assert_eq!(p.state, PartitionState::Failed);
            assert!(p.last_error.as_deref().unwrap().contains("in flight"));
        } else {
            assert_eq!(p.state, PartitionState::Stopping);
        }
    }
    assert!(
        rig.fake.barriers().values().all(Vec::is_empty),
        "no barrier yet"
    );
}

#[tokio::test]
async fn a_failover_the_other_instances_cannot_be_told_of_fences_but_writes_no_barrier() {
    let rig = rig("auto");
    rig.fake.state().peers_unreachable = Some("state topic unreachable".into());
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let stall = exec.run_pass(MIRROR, false).await.unwrap_err();
    assert!(
        stall.to_string().contains("state topic unreachable"),
        "{stall}"
    );
    for p in &rig.on_disk().partitions {
        assert_eq!(p.state, PartitionState::Failed, "{p:?}");
    }
    assert!(rig.fake.barriers().values().all(Vec::is_empty));
    rig.fake.state().peers_unreachable = None;
    run_to_completion(&exec, true).await;
    rig.assert_stopped_with_one_barrier_each();
}

#[tokio::test]
async fn no_barrier_is_written_while_another_instance_alive_has_not_fenced() {
    let rig = rig("auto");
    rig.fake.state().peers_not_fenced = Some("instances b are alive and have not fenced".into());
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let stall = exec.run_pass(MIRROR, false).await.unwrap_err();
    assert!(stall.to_string().contains("instances b"), "{stall}");
    for p in &rig.on_disk().partitions {
        assert_eq!(p.step, Some(FailoverStep::Drained), "{p:?}");
        assert_eq!(p.state, PartitionState::Failed);
    }
    assert!(rig.fake.barriers().values().all(Vec::is_empty));
    rig.fake.state().peers_not_fenced = None;
    run_to_completion(&exec, true).await;
    rig.assert_stopped_with_one_barrier_each();
}

#[tokio::test]
async fn producers_mirrored_through_other_instances_are_screened_from_the_brokers_state() {
    let rig = rig("auto");
    let now = now_ms();
    let entry = ScreenEntry {
        max_epoch: 3,
        last_timestamp: now,
        added_ms: now,
        coordinator_epoch: -1,
    };
    rig.fake.state().broker_producers = vec![(8_000_001, entry)];
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    run_to_completion(&exec, false).await;
    rig.assert_stopped_with_one_barrier_each();
    let on_disk = Screening::load(StateStore::open(rig.dir.path()).unwrap(), false, None, 0);
    assert!(on_disk.ids().contains(&8_000_001), "{:?}", on_disk.ids());
}

#[tokio::test]
async fn after_a_drain_timeout_the_answered_partition_is_retried_to_stopped() {
    let rig = rig("auto");
    let busy = ("orders".to_string(), 2);
    rig.fake.state().in_flight.insert(busy.clone(), 1);
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    exec.run_pass(MIRROR, false).await.unwrap_err();
    rig.fake.state().in_flight.clear();
    run_to_completion(&exec, true).await;
    rig.assert_stopped_with_one_barrier_each();
}

#[test]
fn a_persist_failure_when_the_failover_is_called_changes_nothing() {
    let rig = rig("auto");
    let exec = rig.executor(FaultHooks::default());
    std::fs::remove_file(rig.dir.path().join(IDENTITY_FILE)).unwrap();
    let err = exec.begin(MIRROR).unwrap_err();
    assert!(matches!(err, FailoverError::Persist { .. }), "{err}");
    assert_memory_is_disk(&rig, &exec);
    let record = rig.on_disk();
    assert!(record.failover_id.is_none());
    assert!(record
        .partitions
        .iter()
        .all(|p| p.state == PartitionState::Mirroring));
}

/// Make the state store refuse writes at `call` of a first pass; memory must stay as on disk,
/// on disk every partition at `expected`; the repaired store lets the failover complete.
async fn persist_failure(rig: &Rig, call: Call, expected: Option<FailoverStep>) {
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    rig.break_store_at(call);
    let stall = exec.run_pass(MIRROR, false).await.unwrap_err();
    assert!(matches!(stall, Stall::NotRecorded(_)), "{stall}");
    assert_memory_is_disk(rig, &exec);
    let on_disk = rig.on_disk();
    let want = vec![(PartitionState::Stopping, expected); PARTITIONS as usize];
    assert_eq!(steps(&on_disk), want);
    rig.repair_store();
    run_to_completion(&exec, true).await;
    rig.assert_stopped_with_one_barrier_each();
}

#[tokio::test]
async fn a_persist_failure_at_fenced_keeps_memory_at_the_recorded_start() {
    persist_failure(&rig("auto"), Call::StopAgent, None).await;
}

#[tokio::test]
async fn a_persist_failure_at_drained_keeps_memory_at_fenced() {
    persist_failure(&rig("auto"), Call::Writes, Some(FailoverStep::Fenced)).await;
}

#[tokio::test]
async fn a_persist_failure_recording_the_barrier_producer_writes_no_barrier() {
    let rig = rig("auto");
    persist_failure(&rig, Call::NewProducer, Some(FailoverStep::Drained)).await;
    // (The completed run wrote one barrier each; none came from the failed pass.)
}

#[tokio::test]
async fn a_persist_failure_of_the_screening_set_keeps_memory_at_drained() {
    persist_failure(
        &rig("auto"),
        Call::PsmProducers,
        Some(FailoverStep::Drained),
    )
    .await;
}

#[tokio::test]
async fn a_persist_failure_at_barrier_persisted_keeps_memory_at_drained() {
    persist_failure(
        &rig("auto"),
        Call::LastMirrored,
        Some(FailoverStep::Drained),
    )
    .await;
}

#[tokio::test]
async fn a_persist_failure_at_psm_cleared_keeps_memory_at_barrier_persisted() {
    let rig = rig("auto");
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    rig.break_store_at(Call::AdvancePidAllocators);
    let stall = exec.run_pass(MIRROR, false).await.unwrap_err();
    assert!(matches!(stall, Stall::NotRecorded(_)), "{stall}");
    assert_memory_is_disk(&rig, &exec);
    for p in &rig.on_disk().partitions {
        assert_eq!(p.state, PartitionState::Stopping);
        assert!(matches!(
            p.step,
            Some(FailoverStep::BarrierPersisted { .. })
        ));
    }
    rig.repair_store();
    run_to_completion(&exec, true).await;
    rig.assert_stopped_with_one_barrier_each();
}

#[tokio::test]
async fn no_barrier_is_written_with_a_producer_id_that_is_not_recorded() {
    let rig = rig("auto");
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    rig.break_store_at(Call::NewProducer);
    exec.run_pass(MIRROR, false).await.unwrap_err();
    assert!(rig.fake.barriers().values().all(Vec::is_empty));
}

#[tokio::test]
async fn a_retry_of_failed_partitions_that_cannot_be_persisted_leaves_them_failed() {
    let rig = rig("data");
    rig.fake
        .state()
        .refuse_writes
        .insert(("orders".to_string(), 0));
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    exec.run_pass(MIRROR, false).await.unwrap();
    std::fs::remove_file(rig.dir.path().join(IDENTITY_FILE)).unwrap();
    exec.retry_failed(MIRROR);
    assert_memory_is_disk(&rig, &exec);
    let failed = rig
        .on_disk()
        .partitions
        .iter()
        .filter(|p| p.state == PartitionState::Failed)
        .count();
    assert_eq!(failed, 1);
}

#[test]
fn an_illegal_step_is_refused_counted_and_nothing_is_recorded() {
    let rig = rig("auto");
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let before = rig.on_disk();
    // PSM_CLEARED straight after the start skips every step in between.
    let r = exec.records.update_stopping(MIRROR, |p| {
        Ok(p.advance(FailoverStep::PsmCleared, now_ms())?)
    });
    assert!(matches!(r, Err(UpdateError::Illegal { .. })), "{r:?}");
    assert_eq!(rig.on_disk(), before);
    assert_memory_is_disk(&rig, &exec);
    assert_eq!(exec.metrics.illegal_transitions.get(), 1);
}

/// (offset, producer id) of the ABORT markers and the barrier offsets in a partition's log.
fn aborts_and_barriers(rig: &Rig, partition: i32) -> (Vec<(i64, i64)>, Vec<i64>) {
    let s = rig.fake.state();
    let log = &s.logs[&("orders".to_string(), partition)];
    (
        log.iter()
            .filter(|b| b.abort)
            .map(|b| (b.offset, b.producer_id))
            .collect(),
        log.iter()
            .filter(|b| b.barrier.is_some())
            .map(|b| b.offset)
            .collect(),
    )
}

#[tokio::test]
async fn a_transaction_left_open_is_aborted_before_the_partition_barrier() {
    let rig = rig("auto");
    rig.fake
        .state()
        .open_txns
        .insert(("orders".to_string(), 1), vec![9, 11]);
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    assert_eq!(
        exec.run_pass(MIRROR, false).await.unwrap(),
        PassOutcome::Complete
    );
    rig.assert_stopped_with_one_barrier_each();
    assert_eq!(
        aborts_and_barriers(&rig, 1),
        (vec![(3, 9), (4, 11)], vec![5]),
        "both markers, then the barrier"
    );
    assert_eq!(aborts_and_barriers(&rig, 0), (vec![], vec![3]));
    let aborted: Vec<(i32, i64)> = rig
        .on_disk()
        .partitions
        .iter()
        .flat_map(|p| {
            p.transactions_aborted
                .iter()
                .map(|a| (p.partition, a.producer_id))
        })
        .collect();
    assert_eq!(
        aborted,
        vec![(1, 9), (1, 11)],
        "recorded in the mirror state"
    );
}

#[tokio::test]
async fn a_partition_whose_open_transactions_cannot_be_aborted_fails_without_a_barrier() {
    let rig = rig("auto");
    let refused = ("orders".to_string(), 2);
    {
        let mut s = rig.fake.state();
        s.open_txns.insert(refused.clone(), vec![9]);
        s.refuse_aborts.insert(refused.clone());
    }
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    assert_eq!(
        exec.run_pass(MIRROR, false).await.unwrap(),
        PassOutcome::Unfinished {
            stopping: 0,
            failed: 1
        }
    );
    for p in &rig.on_disk().partitions {
        if (p.topic.clone(), p.partition) == refused {
            assert_eq!(p.state, PartitionState::Failed);
            assert_eq!(p.step, Some(FailoverStep::Drained), "retried from its step");
            assert!(p
                .last_error
                .as_deref()
                .unwrap()
                .contains("DescribeProducers"));
        } else {
            assert_eq!(p.state, PartitionState::Stopped);
        }
    }
    assert_eq!(aborts_and_barriers(&rig, 2), (vec![], vec![]));
    rig.fake.state().refuse_aborts.clear();
    exec.retry_failed(MIRROR);
    assert_eq!(
        exec.run_pass(MIRROR, true).await.unwrap(),
        PassOutcome::Complete
    );
    assert_eq!(aborts_and_barriers(&rig, 2), (vec![(3, 9)], vec![4]));
}

/// The failover that ran here, handed over as the other instances read it.
async fn handover_of_a_completed_failover() -> (Rig, Stopped) {
    let driver = rig("auto");
    let now = now_ms();
    let entry = ScreenEntry {
        max_epoch: 3,
        last_timestamp: now,
        added_ms: now,
        coordinator_epoch: -1,
    };
    driver.fake.state().broker_producers = vec![(8_000_001, entry)];
    let exec = driver.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    run_to_completion(&exec, false).await;
    let mut h = driver
        .fake
        .state()
        .published
        .last()
        .cloned()
        .expect("handed over");
    h.by = "a".into();
    (driver, h)
}

#[tokio::test]
async fn a_completed_failover_hands_its_barriers_and_screened_ids_to_the_other_instances() {
    let (driver, h) = handover_of_a_completed_failover().await;
    let on_disk = driver.on_disk();
    assert_eq!(h.failover_id, on_disk.failover_id.clone().unwrap());
    assert_eq!(h.partitions.len(), PARTITIONS as usize);
    for p in &on_disk.partitions {
        let handed = h
            .partitions
            .iter()
            .find(|s| s.topic == p.topic && s.partition == p.partition)
            .expect("every STOPPED partition");
        assert_eq!(Some(handed.barrier_offset), p.barrier_offset);
        assert_eq!(handed.producer, p.barrier_producer);
    }
    let ids: Vec<i64> = h.screened.iter().map(|s| s.producer_id).collect();
    assert!(ids.contains(&8_000_001), "{ids:?}");
    assert_eq!(
        driver.fake.state().published.len(),
        1,
        "handed over once per new partition count"
    );
}

#[tokio::test]
async fn an_adopted_handover_stops_every_partition_at_the_other_instances_barrier_writing_none() {
    let (driver, h) = handover_of_a_completed_failover().await;
    let follower = rig("auto");
    let exec = follower.executor(FaultHooks::default());
    assert!(exec.adopt(&h).expect("adopted"), "every partition STOPPED");
    let record = follower.on_disk();
    assert_eq!(record.failover_id, driver.on_disk().failover_id);
    assert_eq!(record.adopted_from.as_deref(), Some("a"));
    assert!(record.completed_ms.is_some(), "{record:?}");
    for p in &record.partitions {
        assert_eq!(p.state, PartitionState::Stopped, "{p:?}");
        let theirs = driver.on_disk();
        let d = theirs.partition(&p.topic, p.partition).unwrap();
        assert_eq!(p.barrier_offset, d.barrier_offset);
        assert_eq!(p.barrier_producer, d.barrier_producer);
    }
    assert!(
        follower.fake.barriers().values().all(Vec::is_empty),
        "an adopting instance writes no barrier"
    );
    assert_eq!(follower.fake.state().cleared.len(), PARTITIONS as usize);
    let screened = Screening::load(
        StateStore::open(follower.dir.path()).unwrap(),
        false,
        None,
        0,
    );
    assert!(screened.ids().contains(&8_000_001), "{:?}", screened.ids());
}

#[tokio::test]
async fn a_partition_with_mirror_writes_in_flight_here_stays_read_only_until_they_are_answered() {
    let (_driver, h) = handover_of_a_completed_failover().await;
    let follower = rig("auto");
    let busy = ("orders".to_string(), 1);
    follower.fake.state().in_flight.insert(busy.clone(), 1);
    let exec = follower.executor(FaultHooks::default());
    assert!(!exec.adopt(&h).unwrap(), "one partition still busy");
    let p1 = follower.on_disk().partition("orders", 1).cloned().unwrap();
    assert_eq!(
        (p1.state, p1.step),
        (PartitionState::Stopping, Some(FailoverStep::Fenced))
    );
    follower.fake.state().in_flight.remove(&busy);
    assert!(exec.adopt(&h).unwrap());
}

#[tokio::test]
async fn a_failover_called_where_one_is_adopted_joins_it_and_runs_nothing_here() {
    let (_driver, h) = handover_of_a_completed_failover().await;
    let follower = rig("auto");
    follower
        .fake
        .state()
        .in_flight
        .insert(("orders".to_string(), 0), 1);
    follower.executor(FaultHooks::default()).adopt(&h).unwrap();
    // As after a restart: the adoption is on disk, and a failover call joins it.
    let restarted = follower.executor(FaultHooks::default());
    let (started, run) = restarted.begin(MIRROR).unwrap();
    assert!(started.already_running);
    assert_eq!(started.failover_id, h.failover_id);
    assert_eq!(run, None, "no pass runs here: the other instance drives it");
}

#[tokio::test]
async fn a_handover_is_not_adopted_over_a_failover_of_this_instances_own_in_progress() {
    let (_driver, h) = handover_of_a_completed_failover().await;
    let follower = rig("auto");
    let exec = follower.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let e = exec.adopt(&h).unwrap_err();
    assert!(matches!(e, AdoptError::OwnFailover { .. }), "{e}");
    assert!(follower.on_disk().adopted_from.is_none());
}

#[tokio::test]
async fn a_failover_another_instance_took_over_writes_no_barrier_here_and_follows_that_instance() {
    let rig = rig("auto");
    rig.fake.state().taken_over_by = Some("b".into());
    let exec = rig.executor(FaultHooks::default());
    let (_, run) = exec.begin(MIRROR).unwrap();
    exec.spawn(MIRROR.to_string(), run.unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while rig.on_disk().adopted_from.is_none() {
        assert!(std::time::Instant::now() < deadline, "{:?}", rig.on_disk());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rig.on_disk().adopted_from.as_deref(), Some("b"));
    assert!(rig.fake.barriers().values().all(Vec::is_empty));
}

#[tokio::test]
async fn an_instance_taking_over_after_the_first_driver_wrote_its_barriers_finds_them_and_writes_none(
) {
    let first = rig("auto");
    let crashing = first.crashing_after(CrashPoint::BarrierWritten);
    crashing.begin(MIRROR).unwrap();
    let r = tokio::spawn(async move {
        let _ = crashing.run_pass(MIRROR, false).await;
    })
    .await;
    assert!(
        r.is_err(),
        "the first driver crashed after writing its barriers"
    );
    let written = first.fake.barriers();
    assert!(written.values().all(|b| b.len() == 1), "{written:?}");
    let producer = *first
        .fake
        .state()
        .barrier_producers_published
        .last()
        .expect("announced before any marker");
    let fid = first.on_disk().failover_id.unwrap();
    // The next driver: its own state directory, the same partitions' logs.
    let mut next = rig("auto");
    next.fake = Fake {
        state: first.fake.state.clone(),
        dir: next.dir.path().to_path_buf(),
    };
    let exec = next.executor(FaultHooks::default());
    exec.take_over(MIRROR, &fid, Some(producer)).unwrap();
    run_to_completion(&exec, true).await;
    next.assert_stopped_with_one_barrier_each();
    assert_eq!(next.fake.barriers(), written, "no barrier written again");
    assert_eq!(next.on_disk().failover_id.as_deref(), Some(fid.as_str()));
}

#[tokio::test]
async fn a_driver_whose_records_lack_the_announced_barrier_producer_still_finds_the_markers() {
    // A partition that joined the failover after the takeover, or a driver whose state
    // directory was lost: its records carry no barrier producer, the state topic does.
    let first = rig("auto");
    let crashing = first.crashing_after(CrashPoint::BarrierWritten);
    crashing.begin(MIRROR).unwrap();
    let r = tokio::spawn(async move {
        let _ = crashing.run_pass(MIRROR, false).await;
    })
    .await;
    assert!(r.is_err(), "the first driver crashed after its barriers");
    let written = first.fake.barriers();
    let fid = first.on_disk().failover_id.unwrap();
    let mut next = rig("auto");
    next.fake = Fake {
        state: first.fake.state.clone(),
        dir: next.dir.path().to_path_buf(),
    };
    let exec = next.executor(FaultHooks::default());
    exec.take_over(MIRROR, &fid, None).unwrap();
    run_to_completion(&exec, true).await;
    next.assert_stopped_with_one_barrier_each();
    assert_eq!(next.fake.barriers(), written, "no barrier written again");
}

#[tokio::test]
async fn a_handover_naming_a_partition_not_known_here_yet_is_not_done_until_it_is() {
    let (_driver, mut h) = handover_of_a_completed_failover().await;
    let mut extra = h.partitions[0].clone();
    extra.partition = PARTITIONS;
    h.partitions.push(extra);
    let follower = rig("auto");
    let exec = follower.executor(FaultHooks::default());
    assert!(
        !exec.adopt(&h).unwrap(),
        "orders-{PARTITIONS} is not in this instance's metadata yet"
    );
    assert!(follower
        .on_disk()
        .partitions
        .iter()
        .all(|p| p.state == PartitionState::Stopped));
}

#[tokio::test]
async fn with_several_instances_a_partition_turns_stopped_only_once_its_handover_is_on_the_state_topic(
) {
    // Review G3: the handover is the commit point.
    let rig = rig("auto");
    rig.fake.state().several = true;
    rig.fake.state().refuse_handover = Some("state topic unreachable".into());
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    let r = exec.run_pass(MIRROR, false).await;
    assert!(matches!(r, Err(Stall::NotPublished(_))), "{r:?}");
    for p in &rig.on_disk().partitions {
        assert_eq!(
            (p.state, p.step),
            (PartitionState::Stopping, Some(FailoverStep::PsmCleared)),
            "read-only until handed over: {p:?}"
        );
        assert!(p.barrier_offset.is_some());
    }
    rig.fake.state().refuse_handover = None;
    run_to_completion(&exec, true).await;
    rig.assert_stopped_with_one_barrier_each();
    let published = rig.fake.state().published.clone();
    assert_eq!(published.last().map(|h| h.partitions.len()), Some(3));
}

#[tokio::test]
async fn with_several_instances_where_each_log_ends_is_recorded_before_its_barrier_is_written() {
    // Review G3: a takeover looks for the barrier from there, not in a fixed window.
    let rig = rig("auto");
    rig.fake.state().several = true;
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    run_to_completion(&exec, false).await;
    let from = rig.fake.state().barrier_from.clone();
    for (k, offsets) in rig.fake.barriers() {
        assert_eq!(from.get(&k), offsets.first(), "{k:?}: {from:?}");
    }
}

#[tokio::test]
async fn a_failover_that_waited_an_instance_out_bars_what_that_instance_sent_that_lands_late() {
    // Review G1: an instance waited out, not fenced, had a mirror write queued at the broker;
    // it lands after the barrier. Every partition is re-read after its barrier and a new
    // barrier follows what landed, its producer screened, its open transaction aborted first.
    let rig = rig("auto");
    let p0 = ("orders".to_string(), 0);
    {
        let mut s = rig.fake.state();
        s.several = true;
        s.waited_out = Some(now_ms());
        s.land_after_barrier.insert(p0.clone(), (9_001, true));
    }
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    run_to_completion(&exec, false).await;
    let log = rig.fake.state().logs[&p0].clone();
    let last = log.iter().rposition(|b| b.barrier.is_some()).unwrap();
    let late = log.iter().position(|b| b.producer_id == 9_001).unwrap();
    assert!(
        late < last,
        "the late write lies before the last barrier: {log:?}"
    );
    let aborted = log.iter().position(|b| b.abort && b.producer_id == 9_001);
    assert!(
        aborted.is_some_and(|a| a < last),
        "its transaction aborted before it: {log:?}"
    );
    let record = rig.on_disk();
    let p = record.partition("orders", 0).unwrap();
    assert_eq!(p.barrier_offset, Some(log[last].offset));
    assert!(
        exec.screening.screened(9_001).is_some(),
        "its producer screened"
    );
}

#[tokio::test]
async fn a_failover_whose_peers_all_fenced_does_not_reread_its_barriers() {
    let rig = rig("auto");
    let p0 = ("orders".to_string(), 0);
    {
        let mut s = rig.fake.state();
        s.several = true;
        s.land_after_barrier.insert(p0.clone(), (9_002, false));
    }
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    run_to_completion(&exec, false).await;
    // Nothing could land late: no re-read, one barrier (the test's write after it stands for
    // what the settle would have found).
    assert_eq!(rig.fake.barriers()[&p0].len(), 1);
}

#[tokio::test]
async fn the_producers_mirrored_through_other_instances_are_counted_in_producers_expired() {
    // Review G15: the brokers hold a producer no PSM here saw; the partition record (and so the
    // report) counts it with the PSM's own.
    let rig = rig("auto");
    let now = now_ms();
    let entry = ScreenEntry {
        max_epoch: 0,
        last_timestamp: now,
        added_ms: now,
        coordinator_epoch: crate::mirror::screening::NO_COORDINATOR_EPOCH,
    };
    rig.fake.state().broker_producers = vec![(8_000_001, entry), (8_000_002, entry)];
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    run_to_completion(&exec, false).await;
    let expired: Vec<(i32, u32)> = rig
        .on_disk()
        .partitions
        .iter()
        .map(|p| (p.partition, p.producers_expired))
        .collect();
    assert!(
        expired.iter().all(|(_, n)| *n == 3),
        "producer 7 of the PSM and the brokers' two, per partition: {expired:?}"
    );
}

#[tokio::test]
async fn after_a_late_write_round_the_last_mirrored_offset_is_the_late_write_before_the_final_barrier(
) {
    // Defect H2: the last mirrored offset is read from the log before the *final* barrier; the
    // abort marker the failover wrote after the late write is not a mirrored record.
    let rig = rig("auto");
    let p0 = ("orders".to_string(), 0);
    {
        let mut s = rig.fake.state();
        s.several = true;
        s.waited_out = Some(now_ms());
        s.land_after_barrier.insert(p0.clone(), (9_003, true));
    }
    let exec = rig.executor(FaultHooks::default());
    exec.begin(MIRROR).unwrap();
    run_to_completion(&exec, false).await;
    let log = rig.fake.state().logs[&p0].clone();
    let late = log.iter().find(|b| b.producer_id == 9_003 && !b.abort);
    let p = rig.on_disk().partition("orders", 0).unwrap().clone();
    assert_eq!(
        (p.last_mirrored_offset, p.barrier_offset.map(|b| b > 4)),
        (late.map(|b| b.offset), Some(true)),
        "{log:?}"
    );
}
