//! Several gateway instances in front of one destination cluster: each follows the state topic
//! (`instances.state_topic`), writes its heartbeat there, and from it learns of the failovers
//! the others start, so that no instance admits a mirror write after another one's barrier
//! (review F2):
//!
//! ```text
//! instance A (failover called)            instance B (and every other)
//! announce failover {fid}           ───►  reads it: fences the mirror's writes, stops its
//! fence, drain its own writes              agent, drains its writes in flight
//! wait: every instance alive acked  ◄───  fenced/<mirror>/<B> {fid}
//!       (or waited out: lease expired)
//! barrier, clear, STOPPED                  keeps the mirror's topics read-only
//! ```
//!
//! Mirror writes are admitted only while this instance holds its lease ([`view`]): a process
//! paused past the session timeout resumes fenced, and reads the state topic again before it
//! admits anything. An instance that cannot reach the state topic loses its lease the same way
//! and is not ready.
//!
//! Owns: the heartbeat and follow loops, the failover announcements and acknowledgements.
//! Must not touch: the failover's steps and records (the executor calls [`PeerLink::announce`]
//! and [`PeerLink::wait_fenced`] through its I/O), the admission snapshot (asked through
//! [`PeerLink::mirror_write_refusal`]), how a mirror is fenced here (the [`FenceHook`]).

mod adopted;
pub mod agent_owner;
mod agents;
pub mod clock;
mod forward_hold;
pub use forward_hold::HoldStep;

/// Test hook (environment, read once): while the file named by
/// `MIRRORGATE_TEST_HOLD_HEARTBEATS_WHILE` exists, this instance writes no heartbeat (it goes
/// on reading the state topic), so a test can put a record in the log between its first read
/// to the end and its first heartbeat. Unset in production: never held.
fn heartbeats_held() -> bool {
    static HOLD: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    HOLD.get_or_init(|| std::env::var_os("MIRRORGATE_TEST_HOLD_HEARTBEATS_WHILE").map(Into::into))
        .as_ref()
        .is_some_and(|p| p.exists())
}

#[cfg(test)]
mod compaction_tests;
pub mod log;
pub mod migrate;
pub mod records;
#[cfg(test)]
mod sim_tests;
pub mod view;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::watch;

use self::agent_owner::AgentTurn;
use self::log::{BoxFuture, StateLog};
use self::view::{Follow, NotDriving, PeerRecord, PeerView, Stopped};
use crate::mirror::peer_gate::PeerGate;
use crate::mirror::report::FailoverReport;
use crate::mirror::screening::now_ms;
use crate::mirror::state::BarrierProducer;

/// Fences mirror `name` on this instance for another instance's failover: its agent stopped,
/// its mirror writes in flight answered. `Err`: not drained yet (retried).
pub type FenceHook = Arc<dyn Fn(String) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

pub use crate::mirror::peer_gate::PeerRefusal;

/// Follows another instance's record here ([`Follow`]): `Ok(true)` once done, `Ok(false)` or
/// `Err` while not yet (retried after [`FOLLOW_RETRY`]).
pub type FollowHook = Arc<dyn Fn(Follow) -> BoxFuture<'static, Result<bool, String>> + Send + Sync>;

/// How soon a record that could not be followed yet is tried again.
const FOLLOW_RETRY: Duration = Duration::from_millis(500);

/// The link of this instance to the others.
pub struct PeerLink {
    view: Mutex<PeerView>,
    log: Arc<dyn StateLog>,
    topic: String,
    /// Failovers of others being fenced here now (mirror, failover id).
    fencing: Mutex<HashSet<(String, String)>>,
    /// The records followed here: done, or being followed now / not before the instant.
    followed: Mutex<std::collections::HashMap<String, Followed>>,
    /// The mirrors this instance could run the built-in agent for (set once, at start).
    agents: std::sync::OnceLock<Vec<String>>,
    /// The mirrors this instance has a forward listener for (set once, at start).
    forward: std::sync::OnceLock<Vec<String>>,
    /// The incarnation of the other process with this id last logged (G12).
    twin_reported: Mutex<Option<String>>,
    /// Added to the wall clock written into this instance's records (a test hook: a host whose
    /// clock is off).
    clock_skew_ms: std::sync::atomic::AtomicI64,
    /// `limits.unknown_outcome_settle_ms`: how long after a lease ended its mirror writes may
    /// still land (the barrier's settle).
    settle_ms: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, Copy)]
enum Followed {
    Done,
    Running,
    RetryAt(Instant),
}

/// How often the follow loop reads the state topic once it is at its end.
const READ_PAUSE: Duration = Duration::from_millis(100);

impl PeerLink {
    pub fn new(me: &str, topic: &str, session: Duration, log: Arc<dyn StateLog>) -> Arc<Self> {
        Arc::new(PeerLink {
            view: Mutex::new(PeerView::new(me, session)),
            log,
            topic: topic.to_string(),
            fencing: Mutex::new(HashSet::new()),
            followed: Mutex::new(std::collections::HashMap::new()),
            agents: std::sync::OnceLock::new(),
            forward: std::sync::OnceLock::new(),
            twin_reported: Mutex::new(None),
            clock_skew_ms: std::sync::atomic::AtomicI64::new(0),
            settle_ms: std::sync::atomic::AtomicU64::new(5_000),
        })
    }

    /// Shift the wall clock written into this instance's records by `ms` (a test hook standing
    /// for a host whose clock is off, `MIRRORGATE_TEST_PEER_CLOCK_SKEW_MS`).
    pub fn set_clock_skew_ms(&self, ms: i64) {
        self.clock_skew_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long after a lease ended its mirror writes may still land
    /// (`limits.unknown_outcome_settle_ms`, 5 s unless set): instances gone or restarted that
    /// long before a barrier are settled for ([`Self::lease_end_of_waited_out`]).
    pub fn set_unknown_outcome_settle(&self, settle: Duration) {
        self.settle_ms.store(
            settle.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// This host's wall clock as written into the records, ms since the epoch.
    fn now_ms(&self) -> i64 {
        now_ms()
            + self
                .clock_skew_ms
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn view(&self) -> std::sync::MutexGuard<'_, PeerView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn me(&self) -> String {
        self.view().me().to_string()
    }

    /// Run the heartbeat and follow loops until `shutdown`.
    pub async fn run(
        self: Arc<Self>,
        fence: FenceHook,
        follow: FollowHook,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let hb = self.clone();
        let mut hb_shutdown = shutdown.clone();
        let heartbeats = tokio::spawn(async move {
            let every = hb.view().session() / 4;
            loop {
                // Not written (not read to the end lately, or given way to another process with
                // this id): tried again soon, so the first one follows the first read at once.
                let pause = if hb.heartbeat_once().await {
                    every
                } else {
                    READ_PAUSE
                };
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = hb_shutdown.changed() => break,
                }
            }
        });
        let mut next = 0i64;
        loop {
            let at_end = self.read_once(&mut next, &fence).await;
            self.follow_once(&follow);
            let pause = if at_end { READ_PAUSE } else { Duration::ZERO };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.changed() => break,
            }
        }
        heartbeats.abort();
    }

    /// Write one heartbeat, when this instance may ([`PeerView::may_heartbeat`]); the lease is
    /// renewed from the time it was sent. Returns whether one was written.
    pub async fn heartbeat_once(&self) -> bool {
        if heartbeats_held() {
            return false;
        }
        let sent = clock::now();
        let (me, incarnation) = {
            let v = self.view();
            if !v.may_heartbeat(sent) {
                return false;
            }
            (v.me().to_string(), v.incarnation().to_string())
        };
        let r = self
            .log
            .append_timed(&PeerRecord::Heartbeat {
                instance: me,
                at_ms: self.now_ms(),
                agents: self.agents.get().cloned().unwrap_or_default(),
                incarnation: Some(incarnation),
                forward: self.forward.get().cloned().unwrap_or_default(),
            })
            .await;
        match r {
            Ok(broker_ms) => {
                let unseen = self
                    .view()
                    .heartbeat_appended(sent, clock::now(), broker_ms);
                if let Some(unseen) = unseen {
                    tracing::error!(target: "mirrorgate::peers", topic = %self.topic, unseen_s = unseen.as_secs_f64(),
                        "the state topic's broker saw more time pass between two heartbeats than this machine's clock: this process was paused without its clock counting it; its lease is void until it has read the state topic again");
                    return false;
                }
                self.claim_agents().await;
                true
            }
            Err(e) => {
                tracing::warn!(target: "mirrorgate::peers", topic = %self.topic, error = %e, "heartbeat not written to the state topic");
                self.view().io_failed(e);
                false
            }
        }
    }

    /// After a read: say loudly when another process runs with this instance's id, and forget
    /// one gone (a yielded instance then starts over).
    fn watch_twin(&self) {
        let mut v = self.view();
        let now = clock::now();
        if let Some(t) = v.forget_gone_twin(now) {
            tracing::warn!(target: "mirrorgate::peers", topic = %self.topic, incarnation = %t.incarnation, yielded = t.yielded,
                "the other process with this instance id is no longer seen on the state topic{}",
                if t.yielded { ": this one starts over (heartbeat, grace, lease)" } else { "" });
        }
        let Some(t) = v.twin().cloned() else { return };
        let mut reported = self.twin_reported.lock().unwrap_or_else(|e| e.into_inner());
        if reported.as_deref() != Some(t.incarnation.as_str()) {
            if t.yielded {
                tracing::error!(target: "mirrorgate::peers", instance = %v.me(), topic = %self.topic, other_incarnation = %t.incarnation,
                    "another process heartbeats with this instance's id: this one takes no lease, admits no mirror write, runs no agent and is not ready while that one runs; give every instance its own id");
            } else {
                tracing::error!(target: "mirrorgate::peers", instance = %v.me(), topic = %self.topic, other_incarnation = %t.incarnation,
                    "another process heartbeats with this instance's id; this one holds the lease and goes on, the other stands by; give every instance its own id");
            }
            *reported = Some(t.incarnation);
        }
    }

    /// One read from `next`; applies the records, starts the fences they ask for. Returns
    /// whether the read reached the end of the topic.
    pub async fn read_once(self: &Arc<Self>, next: &mut i64, fence: &FenceHook) -> bool {
        let sent = clock::now();
        let r = match self.log.read(*next).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(target: "mirrorgate::peers", topic = %self.topic, error = %e, "cannot read the state topic");
                self.view().io_failed(e);
                return true;
            }
        };
        if let Some(why) = r.reset {
            self.start_over(&why);
            *next = r.next;
            return false;
        }
        let at_end = r.next >= r.high_watermark;
        {
            let mut v = self.view();
            let (now, ms) = (clock::now(), now_ms());
            for rec in r.records {
                v.apply(rec, now, ms);
            }
            if at_end {
                v.caught_up(sent);
            }
        }
        *next = r.next;
        self.watch_twin();
        if self.view().yielded() {
            // Given way to another process with this id: that one acknowledges for the id.
            return at_end;
        }
        let todo = self.view().unacknowledged();
        for (mirror, a) in todo {
            let k = (mirror.clone(), a.failover_id.clone());
            if !self
                .fencing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(k.clone())
            {
                continue;
            }
            tracing::warn!(target: "mirrorgate::peers", mirror = %mirror, failover_id = %a.failover_id, by = %a.by,
                "another instance fails this mirror over: its mirror writes are fenced here");
            let this = self.clone();
            let fence = fence.clone();
            tokio::spawn(async move {
                let acked = this.fence_and_ack(&mirror, &a.failover_id, &fence).await;
                this.fencing
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&k);
                if let Err(e) = acked {
                    tracing::warn!(target: "mirrorgate::peers", mirror = %mirror, error = %e, "fence not acknowledged yet; retried");
                }
            });
        }
        at_end
    }

    /// The state topic is another incarnation (review G6): forget everything read from the old
    /// one — owners, claims, failovers, fences, handovers, reports, this instance's lease — and
    /// read the new one from its start. Until then this instance holds no lease: it admits no
    /// mirror write, runs no agent and writes no barrier; and its first lease on the new one
    /// waits until any lease read from the old one has ended ([`PeerView::started_over`]).
    fn start_over(&self, why: &str) {
        let settle =
            Duration::from_millis(self.settle_ms.load(std::sync::atomic::Ordering::Relaxed));
        let mut v = self.view();
        let fresh = v.started_over(settle);
        *v = fresh;
        v.io_failed(format!(
            "the state topic is read again from its start: {why}"
        ));
        drop(v);
        self.followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        tracing::warn!(target: "mirrorgate::peers", topic = %self.topic, reason = why,
            "the state topic was replaced: this instance forgot what it had read of it (owners, claims, failovers, its lease) and reads it again from its start");
    }

    /// Start following what the others' records ask of this instance ([`PeerView::to_follow`]),
    /// each record once it is done, one at a time per record.
    pub fn follow_once(self: &Arc<Self>, follow: &FollowHook) {
        let todo = self.view().to_follow(clock::now());
        let now = clock::now();
        for f in todo {
            let k = f.key();
            {
                let mut m = self.followed.lock().unwrap_or_else(|e| e.into_inner());
                match m.get(&k) {
                    Some(Followed::Done | Followed::Running) => continue,
                    Some(Followed::RetryAt(t)) if *t > now => continue,
                    _ => {}
                }
                m.insert(k.clone(), Followed::Running);
            }
            let this = self.clone();
            let follow = follow.clone();
            tokio::spawn(async move {
                let mirror = f.mirror().to_string();
                let r = follow(f).await;
                let next = match r {
                    Ok(true) => Followed::Done,
                    Ok(false) => Followed::RetryAt(clock::now() + FOLLOW_RETRY),
                    Err(e) => {
                        tracing::warn!(target: "mirrorgate::peers", mirror = %mirror, error = %e, "another instance's failover record not followed here yet; retried");
                        Followed::RetryAt(clock::now() + FOLLOW_RETRY)
                    }
                };
                this.followed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(k, next);
            });
        }
    }

    /// Hand the partitions failover `s` STOPPED here to the other instances.
    pub async fn publish_stopped(&self, mut s: Stopped) -> Result<(), String> {
        s.by = self.me();
        let n = s.partitions.len();
        self.log
            .append(&PeerRecord::Stopped(s))
            .await
            .map_err(|e| {
                format!(
                    "cannot hand the {n} STOPPED partitions to the other instances on the state topic {}: {e}",
                    self.topic
                )
            })
    }

    async fn fence_and_ack(
        &self,
        mirror: &str,
        fid: &str,
        fence: &FenceHook,
    ) -> Result<(), String> {
        fence(mirror.to_string()).await?;
        let rec = PeerRecord::Fenced {
            mirror: mirror.to_string(),
            failover_id: fid.to_string(),
            instance: self.me(),
            at_ms: self.now_ms(),
        };
        self.log.append(&rec).await?;
        tracing::info!(target: "mirrorgate::peers", mirror, failover_id = fid, "mirror writes fenced and drained here; acknowledged on the state topic");
        Ok(())
    }

    /// How long this instance's lease still holds (`None`: it holds none now).
    pub fn lease_remaining(&self) -> Option<Duration> {
        self.view().lease_remaining(clock::now())
    }

    /// Why this instance holds no lease on the state topic now (`None`: it does).
    pub fn lease_problem(&self) -> Option<String> {
        self.view().lease_problem(clock::now())
    }

    /// Why a mirror write of `mirror` is refused here (`None`: admitted as far as the peers go).
    /// The state topic decides, whatever this instance's own records say: a failover announced
    /// through any instance (this one included: its records may have been lost) or a pause
    /// refuses them.
    pub fn mirror_write_refusal(&self, mirror: &str) -> Option<PeerRefusal> {
        let v = self.view();
        self.failover_refusal_in(&v, mirror).or_else(|| {
            v.paused(mirror).then(|| {
                PeerRefusal::FailedOver(format!(
                    "mirror {mirror} is paused (state topic {})",
                    self.topic
                ))
            })
        })
    }

    /// Why `mirror`'s topics may be failed over as far as the state topic says (`None`: they
    /// are not): a failover of it is announced through any instance, or this instance holds no
    /// lease and cannot know. A pause does not count: the topics stay mirror topics.
    pub fn failover_refusal(&self, mirror: &str) -> Option<PeerRefusal> {
        self.failover_refusal_in(&self.view(), mirror)
    }

    fn failover_refusal_in(&self, v: &PeerView, mirror: &str) -> Option<PeerRefusal> {
        if let Some(p) = v.lease_problem(clock::now()) {
            return Some(PeerRefusal::NoLease(format!(
                "this instance holds no lease on the state topic {} ({p}); mirror writes wait until it has read it again",
                self.topic
            )));
        }
        v.driver(mirror).map(|a| {
            PeerRefusal::FailedOver(format!(
                "mirror {mirror} is failed over through instance {} (failover {})",
                a.by, a.failover_id
            ))
        })
    }

    /// Why this instance may not write `mirror`'s group offsets now (`None`: it may, as far as
    /// the peers go): it holds no lease on the state topic (it was paused, or cut off: it may
    /// not have read a failover yet), or — outside the failover's final round — a failover of
    /// the mirror is announced, through any instance. A mirror's pause does not refuse: the
    /// sync goes on for PAUSED partitions.
    pub fn group_sync_refusal(&self, mirror: &str, final_round: bool) -> Option<String> {
        let v = self.view();
        if let Some(p) = v.lease_problem(clock::now()) {
            return Some(format!(
                "this instance holds no lease on the state topic {} ({p})",
                self.topic
            ));
        }
        if final_round {
            return None;
        }
        v.driver(mirror).map(|a| {
            format!(
                "mirror {mirror} is failed over through instance {} (failover {})",
                a.by, a.failover_id
            )
        })
    }

    /// The instance that failed `mirror` over, when another one did.
    pub fn failed_over_by(&self, mirror: &str) -> Option<(String, String)> {
        self.view()
            .fenced_by_peer(mirror)
            .map(|a| (a.by.clone(), a.failover_id.clone()))
    }

    /// Announce failover `fid` of `mirror` on the state topic (before its barrier). Once the
    /// announcement (or this instance's claim) is read back, later passes append nothing: they
    /// confirm that this instance still holds its lease and drives the failover
    /// ([`Self::check_driving`]). `TakenOver` once another instance drives it.
    pub async fn announce(&self, mirror: &str, fid: &str) -> Result<(), NotDriving> {
        let me = self.me();
        let driver = self.view().driver(mirror).cloned();
        let epoch = match driver {
            Some(a) if a.failover_id == fid && a.by != me => {
                return Err(NotDriving::TakenOver {
                    failover_id: fid.to_string(),
                    by: a.by,
                })
            }
            Some(a) if a.failover_id == fid => return self.check_driving(mirror, fid),
            _ => 1,
        };
        self.log
            .append(&PeerRecord::Failover {
                mirror: mirror.to_string(),
                failover_id: Some(fid.to_string()),
                by: me,
                at_ms: self.now_ms(),
                epoch,
            })
            .await
            .map_err(|e| {
                NotDriving::Unconfirmed(format!(
                    "cannot announce the failover on the state topic {}: {e}",
                    self.topic
                ))
            })
    }

    /// Whether this instance may write barriers for failover `fid` of `mirror` now: it holds
    /// its lease, and no other instance took the failover over.
    pub fn check_driving(&self, mirror: &str, fid: &str) -> Result<(), NotDriving> {
        let v = self.view();
        if let Some(p) = v.lease_problem(clock::now()) {
            return Err(NotDriving::Unconfirmed(format!(
                "this instance holds no lease on the state topic {} ({p}): it writes no barrier until it has read it again",
                self.topic
            )));
        }
        match v.driver(mirror) {
            Some(a) if a.failover_id == fid && a.by != v.me() => Err(NotDriving::TakenOver {
                failover_id: fid.to_string(),
                by: a.by.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Claim failover `fid` of `mirror` at `epoch` (its driver is gone). Whether the claim
    /// came first is read back from the state topic ([`Follow::Drive`]).
    pub async fn claim(&self, mirror: &str, fid: &str, epoch: u32) -> Result<(), String> {
        self.log
            .append(&PeerRecord::Failover {
                mirror: mirror.to_string(),
                failover_id: Some(fid.to_string()),
                by: self.me(),
                at_ms: self.now_ms(),
                epoch,
            })
            .await
    }

    /// Tell the others the producer of failover `fid`'s control barriers (before any marker).
    pub async fn publish_barrier_producer(
        &self,
        mirror: &str,
        fid: &str,
        producer: BarrierProducer,
    ) -> Result<(), String> {
        self.log
            .append(&PeerRecord::BarrierProducer {
                mirror: mirror.to_string(),
                failover_id: fid.to_string(),
                producer,
                by: self.me(),
            })
            .await
            .map_err(|e| {
                format!(
                    "cannot record the barrier producer on the state topic {}: {e}",
                    self.topic
                )
            })
    }

    /// Record where the logs of `from` partitions ended before failover `fid` of `mirror`
    /// writes a barrier to them (review G3), with every partition recorded for it before (the
    /// first end recorded of a partition stays).
    pub async fn publish_barrier_from(
        &self,
        mirror: &str,
        fid: &str,
        from: &std::collections::HashMap<(String, i32), i64>,
    ) -> Result<(), String> {
        let mut all = self.view().barrier_from(mirror, fid);
        for (k, o) in from {
            all.entry(k.clone()).or_insert(*o);
        }
        let mut partitions: Vec<records::LogPosition> = all
            .into_iter()
            .map(|((topic, partition), offset)| records::LogPosition {
                topic,
                partition,
                offset,
            })
            .collect();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        self.log
            .append(&PeerRecord::BarrierFrom {
                mirror: mirror.to_string(),
                failover_id: fid.to_string(),
                by: self.me(),
                partitions,
            })
            .await
            .map_err(|e| {
                format!(
                    "cannot record where the partitions' logs end before the barrier on the state topic {}: {e}",
                    self.topic
                )
            })
    }

    /// Where each partition's log ended before failover `fid` of `mirror` wrote a barrier to
    /// it, as recorded on the state topic.
    pub fn barrier_from(
        &self,
        mirror: &str,
        fid: &str,
    ) -> std::collections::HashMap<(String, i32), i64> {
        self.view().barrier_from(mirror, fid)
    }

    /// Publish failover report `r` (opened or completed here) for every instance.
    pub async fn publish_report(&self, r: &FailoverReport) -> Result<(), String> {
        self.log
            .append(&PeerRecord::Report(Box::new(r.clone())))
            .await
            .map_err(|e| {
                format!(
                    "cannot publish the failover report on the state topic {}: {e}",
                    self.topic
                )
            })
    }

    /// Whether the state topic ever named failover `fid` of `mirror`.
    pub fn knows_failover(&self, mirror: &str, fid: &str) -> bool {
        self.view().knows_failover(mirror, fid)
    }

    /// The failover reports of `mirror` published on the state topic.
    pub fn reports(&self, mirror: &str) -> Vec<FailoverReport> {
        self.view().reports(mirror)
    }

    /// The latest handover of failover `fid` of `mirror` (by whichever instance drove it).
    pub fn handover(&self, mirror: &str, fid: &str) -> Option<Stopped> {
        self.view()
            .stopped(mirror)
            .filter(|s| s.failover_id == fid)
            .cloned()
    }

    /// The control barriers' producer another instance announced for failover `fid`.
    pub fn barrier_producer(&self, mirror: &str, fid: &str) -> Option<BarrierProducer> {
        self.view().barrier_producer(mirror, fid)
    }

    /// Record that `mirror` mirrors again (failback): every instance follows.
    pub async fn announce_mirroring(&self, mirror: &str) -> Result<(), String> {
        self.log
            .append(&PeerRecord::Failover {
                mirror: mirror.to_string(),
                failover_id: None,
                by: self.me(),
                at_ms: self.now_ms(),
                epoch: 0,
            })
            .await
            .map_err(|e| {
                format!(
                    "cannot record the failback on the state topic {}: {e}",
                    self.topic
                )
            })
    }

    /// Record that `mirror` is paused (or resumed): every instance follows.
    pub async fn announce_paused(&self, mirror: &str, paused: bool) -> Result<(), String> {
        self.log
            .append(&PeerRecord::Paused {
                mirror: mirror.to_string(),
                paused,
                by: self.me(),
                at_ms: self.now_ms(),
            })
            .await
            .map_err(|e| {
                format!(
                    "cannot record the {} on the state topic {}: {e}",
                    if paused { "pause" } else { "resume" },
                    self.topic
                )
            })
    }

    /// Wait until every other instance alive acknowledged the fence of failover `fid`, or
    /// stopped answering for longer than the session timeout; at most `limit`.
    ///
    /// An instance waited out (alive when the wait began, never acknowledged), and an earlier
    /// driver of the failover gone without acknowledging that its own writes were drained, may
    /// have mirror writes the brokers still append (review G1), and so may the previous process
    /// of an instance restarted lately: `Ok(Some(ms))` names when the
    /// last of their leases certainly ended (wall clock, ms), for the barrier's settle.
    pub async fn wait_fenced(
        &self,
        mirror: &str,
        fid: &str,
        limit: Duration,
    ) -> Result<Option<i64>, String> {
        let deadline = clock::now() + limit;
        let mut logged = false;
        let first = self.fence_waiting_for(mirror, fid);
        loop {
            let waiting = self.fence_waiting_for(mirror, fid);
            if waiting.is_empty() {
                return Ok(self.lease_end_of_waited_out(mirror, fid, &first));
            }
            if !logged {
                tracing::info!(target: "mirrorgate::peers", mirror, failover_id = fid, ?waiting,
                    "the barrier waits for these instances to fence their mirror writes (or for their session to time out)");
                logged = true;
            }
            if clock::now() >= deadline {
                return Err(format!(
                    "instances {} are alive and have not fenced their mirror writes within {:.0} s",
                    waiting.join(", "),
                    limit.as_secs_f64()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The instances the barrier of failover `fid` of `mirror` waits for now: alive, and not
    /// having acknowledged its fence (one step of [`Self::wait_fenced`]).
    pub fn fence_waiting_for(&self, mirror: &str, fid: &str) -> Vec<String> {
        self.view().waiting_for(mirror, fid, clock::now())
    }

    /// When the last lease ended (wall clock, ms) of the instances of `waited` that never
    /// acknowledged failover `fid`'s fence, of the earlier drivers of it gone undrained, of the
    /// instances gone just before the wait began (waited for by no one), and of the previous
    /// processes of instances restarted lately (their new process acknowledges for the id, but
    /// cannot drain what the old one sent) — [`Self::wait_fenced`]'s answer once nothing is
    /// waited for.
    pub fn lease_end_of_waited_out(
        &self,
        mirror: &str,
        fid: &str,
        waited: &[String],
    ) -> Option<i64> {
        let v = self.view();
        let now = clock::now();
        let acked = v.acknowledged(mirror, fid);
        let mut gone: Vec<(String, Instant)> = waited
            .iter()
            .filter(|i| !acked.contains(i))
            .map(|i| (i.clone(), v.last_seen(i).unwrap_or(now)))
            .collect();
        gone.extend(v.undrained_drivers(mirror, fid, now));
        // A process restarted lately acknowledged for its id; the writes of the one before it
        // were never drained (found by the simulation, `instances::sim_tests`).
        let settle =
            Duration::from_millis(self.settle_ms.load(std::sync::atomic::Ordering::Relaxed));
        gone.extend(v.replaced_lately(now, settle));
        // An instance gone just before the wait began is waited for by no one; its lease may
        // have ended a moment ago (found by the simulation as well).
        gone.extend(v.gone_lately(mirror, fid, now, settle));
        let session = v.session();
        let last = gone.iter().map(|(_, seen)| *seen + session).max()?;
        let ago = now.saturating_duration_since(last).as_millis() as i64;
        let ahead = last.saturating_duration_since(now).as_millis() as i64;
        // One name once, however many reasons put it in the list.
        let names: std::collections::BTreeSet<&String> = gone.iter().map(|(i, _)| i).collect();
        tracing::warn!(target: "mirrorgate::peers", mirror, failover_id = fid, instances = ?names,
            "instances were waited out, not fenced: mirror writes they sent before their lease ended may still land; the barrier is checked for them");
        Some(now_ms() - ago + ahead)
    }

    /// This instance, driving failover `fid` of `mirror`, drained its own mirror writes: say so
    /// on the state topic (once), so that an instance that takes the failover over does not
    /// wait for them (review G1).
    pub async fn ack_own_drain(&self, mirror: &str, fid: &str) -> Result<(), String> {
        let me = self.me();
        if self.view().acknowledged(mirror, fid).contains(&me) {
            return Ok(());
        }
        self.log
            .append(&PeerRecord::Fenced {
                mirror: mirror.to_string(),
                failover_id: fid.to_string(),
                instance: me,
                at_ms: self.now_ms(),
            })
            .await
    }

    /// The longest [`Self::wait_fenced`] may need: a fence takes up to the drain timeout, an
    /// instance gone takes the session timeout (and margin) to be waited out.
    pub fn wait_limit(&self, drain: Duration) -> Duration {
        self.view().session() * 2 + view::MARGIN + drain
    }

    /// Why this instance is not ready as far as the peers go.
    pub fn problem(&self) -> Option<String> {
        self.view()
            .lease_problem(clock::now())
            .map(|p| format!("state topic {}: {p}", self.topic))
    }

    /// `GET /v1/instances`.
    pub fn status(&self) -> serde_json::Value {
        let v = self.view();
        let now = clock::now();
        let lease = v.lease_problem(now);
        json!({
            "instance": v.me(),
            "state_topic": self.topic,
            "session_timeout_ms": v.session().as_millis() as u64,
            "lease": if lease.is_none() { "held" } else { "stale" },
            "lease_problem": lease,
            "incarnation": v.incarnation(),
            "same_id_elsewhere": v.twin().map(|t| json!({
                "incarnation": t.incarnation,
                "last_seen_ms_ago": now.saturating_duration_since(t.seen).as_millis() as u64,
                "this_one_stands_by": t.yielded,
            })),
            "others_alive": v.alive(now).into_iter().map(|(i, ago)| json!({
                "instance": i, "last_seen_ms_ago": ago.as_millis() as u64,
            })).collect::<Vec<_>>(),
            "failovers": v.failovers().map(|(m, a)| json!({
                "mirror": m, "failover_id": a.failover_id, "by": a.by, "epoch": a.epoch,
                "handed_over": v.stopped(m).filter(|s| s.failover_id == a.failover_id).map(|s| s.partitions.len()),
                "fenced": v.acknowledged(m, &a.failover_id),
            })).collect::<Vec<_>>(),
            "agents": self.agents.get().into_iter().flatten().map(|m| {
                let turn = v.agent_turn(m, now);
                json!({
                    "mirror": m,
                    "owner": v.agent_owner(m).map(|(o, _)| o),
                    "epoch": v.agent_owner(m).map(|(_, e)| e),
                    "runs_here": matches!(turn, AgentTurn::Run { .. }),
                    "standby": match turn { AgentTurn::Standby(why) => Some(why), _ => None },
                })
            }).collect::<Vec<_>>(),
        })
    }

    /// How long ago the last read that reached the state topic's end was sent.
    pub fn read_age(&self) -> Option<Duration> {
        self.view()
            .caught_up_at()
            .map(|t| clock::now().saturating_duration_since(t))
    }

    /// Every mirror with a failover announced, and whether this instance drives it.
    pub fn drivers(&self) -> Vec<(String, bool)> {
        let v = self.view();
        v.failovers()
            .map(|(m, a)| (m.clone(), a.by == v.me()))
            .collect()
    }

    /// Every mirror with a failover announced, and how many instances other than its driver
    /// acknowledged its fence.
    pub fn fences_acknowledged(&self) -> Vec<(String, usize)> {
        let v = self.view();
        v.failovers()
            .map(|(m, a)| {
                let n = v
                    .acknowledged(m, &a.failover_id)
                    .iter()
                    .filter(|i| **i != a.by)
                    .count();
                (m.clone(), n)
            })
            .collect()
    }

    /// Other instances alive now (instance, ms since seen).
    pub fn others_alive(&self) -> Vec<(String, u64)> {
        self.view()
            .alive(clock::now())
            .into_iter()
            .map(|(i, d)| (i, d.as_millis() as u64))
            .collect()
    }
}

/// The admission's view of the peers ([`PeerGate`]): the link answers from its view of the state
/// topic.
impl PeerGate for PeerLink {
    fn lease_remaining(&self) -> Option<Duration> {
        PeerLink::lease_remaining(self)
    }

    fn lease_problem(&self) -> Option<String> {
        PeerLink::lease_problem(self)
    }

    fn mirror_write_refusal(&self, mirror: &str) -> Option<PeerRefusal> {
        PeerLink::mirror_write_refusal(self, mirror)
    }

    fn failover_refusal(&self, mirror: &str) -> Option<PeerRefusal> {
        PeerLink::failover_refusal(self, mirror)
    }

    fn failed_over_by(&self, mirror: &str) -> Option<(String, String)> {
        PeerLink::failed_over_by(self, mirror)
    }

    fn forward_source_refusal(&self, mirror: &str, held_here: bool) -> Option<String> {
        if let Some(r) = PeerLink::failover_refusal(self, mirror) {
            return Some(r.message().to_string());
        }
        if held_here {
            return None;
        }
        self.forward_hold(mirror).map(|o| {
            format!(
                "the switchover through instance {} holds the forward listener of {mirror} (hold {})",
                o.by, o.hold_id
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instances::log::ReadResult;

    /// A state topic in memory shared by several links.
    #[derive(Default)]
    struct Topic {
        records: Mutex<Vec<PeerRecord>>,
        down: std::sync::atomic::AtomicBool,
        /// The next read says the topic was replaced (why).
        replaced: Mutex<Option<String>>,
    }

    impl StateLog for Topic {
        fn append(&self, r: &PeerRecord) -> BoxFuture<'_, Result<(), String>> {
            let r = r.clone();
            Box::pin(async move {
                if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err("down".into());
                }
                self.records.lock().unwrap().push(r);
                Ok(())
            })
        }
        fn read(&self, from: i64) -> BoxFuture<'_, Result<ReadResult, String>> {
            Box::pin(async move {
                if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err("down".into());
                }
                let all = self.records.lock().unwrap();
                let records: Vec<PeerRecord> = all.iter().skip(from as usize).cloned().collect();

                if let Some(why) = self.replaced.lock().unwrap().take() {
                    return Ok(ReadResult {
                        next: 0,
                        high_watermark: i64::MAX,
                        reset: Some(why),
                        ..Default::default()
                    });
                }
                Ok(ReadResult {
                    records,
                    next: all.len() as i64,
                    high_watermark: all.len() as i64,
                    reset: None,
                })
            })
        }
    }

    /// A link of instance `me` without the grace before its first lease (these tests run in
    /// real time; the grace has tests of its own in the view).
    fn link(me: &str, session: Duration, t: &Arc<Topic>) -> Arc<PeerLink> {
        let l = PeerLink::new(me, "st", session, t.clone());
        l.view().set_grace(Duration::ZERO);
        l
    }

    fn no_fence() -> FenceHook {
        Arc::new(|_| Box::pin(async { Ok(()) }))
    }

    async fn step(l: &Arc<PeerLink>, next: &mut i64) {
        l.read_once(next, &no_fence()).await;
        l.heartbeat_once().await;
        l.read_once(next, &no_fence()).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        l.read_once(next, &no_fence()).await;
    }

    #[tokio::test]
    async fn group_sync_commits_need_the_lease_and_periodic_ones_stop_at_an_announced_failover() {
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_secs(10), &t);
        let b = link("b", Duration::from_secs(10), &t);
        assert!(b
            .group_sync_refusal("m", true)
            .is_some_and(|w| w.contains("no lease")));
        let (mut na, mut nb) = (0, 0);
        step(&a, &mut na).await;
        step(&b, &mut nb).await;
        assert_eq!(b.group_sync_refusal("m", false), None);
        a.announce("m", "f1").await.unwrap();
        step(&b, &mut nb).await;
        let why = b.group_sync_refusal("m", false).unwrap_or_default();
        assert!(why.contains("through instance a"), "{why}");
        assert_eq!(
            b.group_sync_refusal("m", true),
            None,
            "the final round runs during the failover"
        );
    }

    #[tokio::test]
    async fn mirror_writes_are_refused_until_the_lease_is_held_then_fenced_by_anothers_failover() {
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_secs(10), &t);
        let b = link("b", Duration::from_secs(10), &t);
        assert!(
            matches!(b.mirror_write_refusal("m"), Some(PeerRefusal::NoLease(m)) if m.contains("no lease"))
        );
        let (mut na, mut nb) = (0, 0);
        step(&a, &mut na).await;
        step(&b, &mut nb).await;
        assert_eq!(b.mirror_write_refusal("m"), None);
        a.announce("m", "f1").await.unwrap();
        step(&b, &mut nb).await;
        let why = b.mirror_write_refusal("m").unwrap().message().to_string();
        assert!(why.contains("through instance a"), "{why}");
        assert_eq!(
            a.mirror_write_refusal("m"),
            None,
            "its own failover is its records' business"
        );
        // b acknowledged (its fence hook succeeded): a's barrier waits for nobody.
        step(&a, &mut na).await;
        a.wait_fenced("m", "f1", Duration::from_millis(200))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_mirrors_topics_count_as_failed_over_once_any_instance_announces_it_not_when_paused()
    {
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_secs(10), &t);
        let b = link("b", Duration::from_secs(10), &t);
        assert!(matches!(
            b.failover_refusal("m"),
            Some(PeerRefusal::NoLease(_))
        ));
        let (mut na, mut nb) = (0, 0);
        step(&a, &mut na).await;
        step(&b, &mut nb).await;
        a.announce_paused("m", true).await.unwrap();
        step(&b, &mut nb).await;
        assert!(
            b.mirror_write_refusal("m").is_some(),
            "paused: no mirror writes"
        );
        assert_eq!(b.failover_refusal("m"), None, "paused: still a mirror");
        a.announce("m", "f1").await.unwrap();
        step(&b, &mut nb).await;
        let why = b.failover_refusal("m").unwrap();
        assert!(
            matches!(&why, PeerRefusal::FailedOver(m) if m.contains("failed over through instance a")),
            "{why:?}"
        );
    }

    #[tokio::test]
    async fn the_barrier_waits_while_an_alive_instance_has_not_fenced() {
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_secs(10), &t);
        let b = link("b", Duration::from_secs(10), &t);
        let (mut na, mut nb) = (0, 0);
        step(&b, &mut nb).await;
        step(&a, &mut na).await;
        a.announce("m", "f1").await.unwrap();
        let e = a
            .wait_fenced("m", "f1", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(e.contains("instances b"), "{e}");
    }

    #[tokio::test]
    async fn a_state_topic_that_cannot_be_reached_takes_the_lease_away() {
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_millis(300), &t);
        let mut n = 0;
        step(&a, &mut n).await;
        assert_eq!(a.problem(), None);
        t.down.store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(350)).await;
        step(&a, &mut n).await;
        let p = a.problem().expect("not ready");
        assert!(p.contains("down"), "{p}");
        assert!(a.mirror_write_refusal("m").is_some());
    }

    #[tokio::test]
    async fn a_failover_read_back_is_not_announced_again_by_its_later_passes() {
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_secs(10), &t);
        let mut n = 0;
        step(&a, &mut n).await;
        a.announce("m", "f1").await.unwrap();
        step(&a, &mut n).await;
        let announced = || {
            t.records
                .lock()
                .unwrap()
                .iter()
                .filter(|r| matches!(r, PeerRecord::Failover { .. }))
                .count()
        };
        assert_eq!(announced(), 1);
        tokio::time::timeout(Duration::from_secs(5), a.announce("m", "f1"))
            .await
            .expect("answered")
            .expect("still driving it, with a lease");
        assert_eq!(announced(), 1, "appended again");
    }

    #[tokio::test]
    async fn a_driver_whose_failover_was_claimed_by_another_instance_may_not_go_on() {
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_secs(10), &t);
        let b = link("b", Duration::from_secs(10), &t);
        let (mut na, mut nb) = (0, 0);
        step(&a, &mut na).await;
        a.announce("m", "f1").await.unwrap();
        a.announce("m", "f1")
            .await
            .expect("announced again at its epoch");
        step(&b, &mut nb).await;
        b.claim("m", "f1", 2).await.unwrap();
        step(&a, &mut na).await;
        let e = a.announce("m", "f1").await.unwrap_err();
        assert!(
            matches!(&e, NotDriving::TakenOver { by, .. } if by == "b"),
            "{e}"
        );
        assert!(matches!(
            a.check_driving("m", "f1"),
            Err(NotDriving::TakenOver { .. })
        ));
        step(&b, &mut nb).await;
        assert_eq!(b.check_driving("m", "f1"), Ok(()));
    }

    #[tokio::test]
    async fn a_replaced_state_topic_is_read_anew_and_every_conclusion_of_the_old_one_forgotten() {
        // Review G6: b owned the agent and announced a failover in the old topic.
        let t = Arc::new(Topic::default());
        let a = link("a", Duration::from_secs(10), &t);
        a.set_agents(vec!["m".into()]);
        let mut n = 0;
        step(&a, &mut n).await;
        t.records.lock().unwrap().extend([
            PeerRecord::Heartbeat {
                instance: "b".into(),
                at_ms: 0,
                agents: vec!["m".into()],
                incarnation: None,
                forward: vec![],
            },
            PeerRecord::AgentOwner {
                mirror: "m".into(),
                owner: "b".into(),
                epoch: 5,
                at_ms: 0,
            },
            PeerRecord::Failover {
                mirror: "m".into(),
                failover_id: Some("f1".into()),
                by: "b".into(),
                at_ms: 0,
                epoch: 1,
            },
        ]);
        step(&a, &mut n).await;
        assert_eq!(a.view().agent_owner("m"), Some(("b", 5)));
        assert!(a.failed_over_by("m").is_some());
        // The topic is deleted and created again, empty.
        t.records.lock().unwrap().clear();
        *t.replaced.lock().unwrap() = Some("recreated".into());
        a.read_once(&mut n, &no_fence()).await;
        assert_eq!(n, 0, "read again from the start");
        assert_eq!(a.view().agent_owner("m"), None);
        assert!(a.failed_over_by("m").is_none());
        let p = a.lease_problem().expect("no lease until read again");
        assert!(p.contains("recreated"), "{p}");
        a.view().set_grace(Duration::ZERO);
        step(&a, &mut n).await;
        assert_eq!(a.lease_problem(), None);
        assert!(
            matches!(
                a.agent_turn("m"),
                AgentTurn::Claim { epoch: 1 } | AgentTurn::Run { .. }
            ),
            "{:?}",
            a.agent_turn("m")
        );
    }
}
