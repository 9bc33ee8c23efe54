//! What one instance knows of the others from the state topic: the records (heartbeats,
//! failovers announced, fences acknowledged), when it last saw each instance, and its own lease
//! (may it still admit mirror writes?). Pure: time comes in as arguments, so the rules are unit
//! tested without a broker.
//!
//! The rules:
//! - An instance is *alive* while a heartbeat of it was read less than the session timeout plus
//!   [`MARGIN`] ago, by this instance's monotonic clock. The writer's wall clock in the record
//!   is never compared with this one's (review G5): a heartbeat read counts from the moment it
//!   was read, so an instance gone long ago counts as alive for one session after this one read
//!   its last heartbeat (this instance then waits longer, never less).
//! - This instance's *lease* is fresh while both its last acknowledged heartbeat and its last
//!   read that reached the state topic's end were *sent* less than the session timeout ago, and
//!   the first read to the end since its first acknowledged heartbeat plus [`grace`] has been
//!   made. A process paused past the timeout therefore holds no lease when it resumes: it admits
//!   no mirror write before it has read the state topic again, failovers included.
//! - It heartbeats only while it has read the state topic to its end within the session timeout
//!   (and never before its first read): an instance that can append but not read never learns
//!   of a failover, so it must not look alive to the others (review G10).
//! - Each process heartbeats with a random *incarnation*. A heartbeat of this instance's id
//!   with another incarnation, read after this instance's first read to the end, is another
//!   process started with the same id (review G12). If this instance held no lease then (it
//!   started second, or it resumes after a pause in which the other took its place), it
//!   *yields*: no lease, no heartbeat, not ready, until the other has not been seen for the
//!   session timeout plus the margin and a random part of a session; then it starts over. One
//!   that holds its lease keeps it and says so loudly. The grace before the first lease is what
//!   lets a process started second see the first's heartbeat before it takes one.
//! - A failover announced by another instance fences the mirror's writes here.
//! - The announcing instance waits, before its barrier, for every instance alive to acknowledge
//!   the fence; one that stops answering is waited out (its lease has then expired).
//!
//! ```text
//! twin state (this id's other process):  none ──read while holding the lease──► tolerated
//!                                         none ──read while holding none──────► yielded
//!                                         tolerated/yielded ──not seen for session + margin
//!                                                              (+ jitter when yielded)──► none
//! ```
//!
//! Owns: those rules (the records themselves are [`super::records`]). Must not touch: the
//! state topic's I/O, the admission of requests, the failover's steps.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::agent_owner::{AgentOwners, AgentTurn};
pub use super::records::{LogPosition, PeerRecord, ScreenedProducer, Stopped, StoppedPartition};
use crate::mirror::report::FailoverReport;
use crate::mirror::state::BarrierProducer;

mod follow;
mod forward_holds;
mod lease;
mod waits;
pub use follow::Follow;
pub use forward_holds::HoldOrder;
pub use lease::{grace, Twin};

/// Added to the session timeout before another instance counts as gone: heartbeats are read
/// with some delay after they are written.
pub const MARGIN: Duration = Duration::from_secs(2);

/// Partition → an offset of its log (where it ended before a failover's barrier).
pub type LogEnds = HashMap<(String, i32), i64>;

/// Why this instance may not drive a failover's next step (several instances).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDriving {
    /// Another instance took the failover over: this one follows it from now on.
    #[error("failover {failover_id} is driven by instance {by} now (taken over)")]
    TakenOver { failover_id: String, by: String },
    /// The state topic cannot confirm that this instance still drives it (no lease, or it
    /// cannot be written): nothing is written to the partitions until it can.
    #[error("{0}")]
    Unconfirmed(String),
}

/// A failover announced on the state topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Announced {
    pub failover_id: String,
    pub by: String,
    pub epoch: u32,
}

/// This instance's view.
#[derive(Debug)]
pub struct PeerView {
    me: String,
    /// This process's incarnation (a random id, new at each start).
    incarnation: String,
    session: Duration,
    /// Another process with this instance's id, when one was read ([`Twin`]).
    twin: Option<Twin>,
    /// Added to how long a yielded instance waits before it starts over (a random part of a
    /// session, so that two yielded processes do not start over together).
    yield_jitter: Duration,
    /// When this instance's first heartbeat since its start (or since it last started over)
    /// was acknowledged: the grace before the first lease counts from it.
    first_acked: Option<Instant>,
    /// Whether a heartbeat of this process (its incarnation) has been read back: the log holds
    /// nothing of a previous process with this id after it, so only then is a heartbeat of
    /// another incarnation read a twin (a previous process's can come after a read that
    /// seemed to reach the end, e.g. from a partition leader whose high watermark lags).
    own_heartbeat_read: bool,
    /// The grace before the first lease ([`grace`] of the session; longer in a view started
    /// over after the state topic was replaced, see [`PeerView::started_over`]).
    grace: Duration,
    /// This view started over after the state topic was replaced (review G6).
    after_reset: bool,
    /// A heartbeat of this instance's id written by another process was read: the first lease
    /// waits a whole session plus the margin (a process with the id paused now may hold one
    /// until then).
    other_process_read: bool,
    /// Instance → when this instance read its last heartbeat.
    seen: HashMap<String, Instant>,
    /// Instance → the incarnation of its last heartbeat read.
    incarnations: HashMap<String, String>,
    /// Instance → when the last heartbeat of its previous process was read, once a heartbeat of
    /// another incarnation followed (it was restarted): that process's mirror writes may still
    /// land although the new one acknowledges fences for the id.
    replaced: HashMap<String, Instant>,
    /// Mirror → the failover announced for it (absent or `None`: mirroring).
    failovers: BTreeMap<String, Option<Announced>>,
    /// Mirror → who announced it mirrors again, and when (the latest such record).
    mirroring: HashMap<String, (String, i64)>,
    /// Mirror → the latest STOPPED partitions of its failover.
    stopped: HashMap<String, std::sync::Arc<Stopped>>,
    /// Mirror → (failover id, its control barriers' producer).
    barrier_producers: HashMap<String, (String, BarrierProducer)>,
    /// Mirror → (failover id, where each partition's log ended before its barrier).
    barrier_from: HashMap<String, (String, LogEnds)>,
    /// (mirror, instance) → the failover id it acknowledged.
    fenced: HashMap<(String, String), String>,
    /// (mirror, instance) → the failover id it has every partition STOPPED for.
    adopted: HashMap<(String, String), String>,
    /// Sent-at of the last heartbeat of this instance the state topic acknowledged.
    heartbeat_acked: Option<Instant>,
    /// Sent-at of the last read that reached the state topic's end (records applied).
    caught_up: Option<Instant>,
    /// The last error of the state topic's I/O, shown while the lease is stale.
    last_error: Option<String>,
    /// The brokers' time of this instance's heartbeats, against the lease clock (G13).
    broker_clock: super::clock::BrokerClock,
    /// When the lease was last voided by a pause the local clock did not count: a read sent
    /// before it is not a read to the end (its answer may be older than the pause).
    voided_at: Option<Instant>,
    /// How many leases this instance has begun (a lease held without a break is one term; the
    /// agent's ownership lasts one term, S3).
    lease_term: u64,
    /// Who runs each mirror's built-in agent.
    agents: AgentOwners,
    /// Mirror → the agent's offset maps as last published at the highest ownership epoch
    /// published, and that epoch.
    agent_offsets: HashMap<String, (u32, serde_json::Value)>,
    /// Mirror → (paused, by, at_ms) of its latest pause or resume since its last failover
    /// record.
    paused: HashMap<String, (bool, String, i64)>,
    /// (mirror, failover id) → its report as last published (a completed one is never
    /// replaced by one in progress).
    reports: BTreeMap<(String, String), Box<FailoverReport>>,
    /// (mirror, failover id) → every instance that drove it, in the order of their claims.
    drivers: HashMap<(String, String), Vec<String>>,
    /// Every (mirror, failover id) a failover record named (its records are never compacted).
    known: std::collections::BTreeSet<(String, String)>,
    /// The switchovers' holds of the forward listeners.
    forward: forward_holds::ForwardHolds,
    /// (mirror, failover id, instance) → what that instance's forward listener passed that the
    /// destination lacks.
    forwarded_losses:
        BTreeMap<(String, String, String), crate::mirror::forwarded_acks::ForwardedLoss>,
}

impl PeerView {
    pub fn new(me: &str, session: Duration) -> PeerView {
        Self::with_incarnation(me, session, &uuid::Uuid::new_v4().simple().to_string())
    }

    /// A view of process `incarnation` of instance `me`.
    pub fn with_incarnation(me: &str, session: Duration, incarnation: &str) -> PeerView {
        let jitter_ms = session.as_millis().max(1) as u64;
        let seed = uuid::Uuid::new_v4().as_u128() as u64;
        PeerView {
            me: me.to_string(),
            incarnation: incarnation.to_string(),
            session,
            twin: None,
            yield_jitter: Duration::from_millis(seed % jitter_ms),
            first_acked: None,
            own_heartbeat_read: false,
            grace: grace(session),
            after_reset: false,
            other_process_read: false,
            seen: HashMap::new(),
            incarnations: HashMap::new(),
            replaced: HashMap::new(),
            failovers: BTreeMap::new(),
            mirroring: HashMap::new(),
            stopped: HashMap::new(),
            barrier_producers: HashMap::new(),
            barrier_from: HashMap::new(),
            fenced: HashMap::new(),
            adopted: HashMap::new(),
            heartbeat_acked: None,
            caught_up: None,
            last_error: None,
            broker_clock: Default::default(),
            voided_at: None,
            lease_term: 0,
            agents: AgentOwners::default(),
            agent_offsets: HashMap::new(),
            paused: HashMap::new(),
            reports: BTreeMap::new(),
            known: Default::default(),
            drivers: HashMap::new(),
            forward: Default::default(),
            forwarded_losses: BTreeMap::new(),
        }
    }

    /// What this instance does with `mirror`'s built-in agent at `now` (no lease: standby).
    pub fn agent_turn(&self, mirror: &str, now: Instant) -> AgentTurn {
        if let Some(p) = self.lease_problem(now) {
            return AgentTurn::Standby(format!("this instance holds no lease ({p})"));
        }
        let alive: Vec<String> = self.alive(now).into_iter().map(|(i, _)| i).collect();
        #[cfg(test)] // The simulation's control for S3 (ownership kept across a lapse).
        if sim_sabotage::ownership_across_lapses() {
            let term = self.agents.read_in(mirror).unwrap_or(self.lease_term);
            return self.agents.turn(mirror, &self.me, &alive, term);
        }
        self.agents.turn(mirror, &self.me, &alive, self.lease_term)
    }

    /// The owner of `mirror`'s agent and its epoch, once claimed.
    pub fn agent_owner(&self, mirror: &str) -> Option<(&str, u32)> {
        self.agents.owner(mirror)
    }

    /// The agent's offset maps of `mirror` as its owner last published them.
    pub fn agent_offsets(&self, mirror: &str) -> Option<&serde_json::Value> {
        self.agent_offsets.get(mirror).map(|(_, o)| o)
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    pub fn session(&self) -> Duration {
        self.session
    }

    /// Apply one record read at `now` (`_now_ms`: this host's wall clock, kept for the records
    /// that carry one; liveness never compares it with the writer's).
    pub fn apply(&mut self, r: PeerRecord, now: Instant, _now_ms: i64) {
        match r {
            PeerRecord::Heartbeat {
                instance,
                agents,
                incarnation,
                forward,
                at_ms: _at_ms,
            } => {
                #[cfg(test)] // The simulation's control for G5 (liveness by wall clock).
                if sim_sabotage::drops_heartbeat(_now_ms, _at_ms, self.session) {
                    return;
                }
                self.forward.declare(&instance, forward);
                if instance != self.me {
                    self.agents.heartbeat(&instance, agents);
                    if let Some(inc) = incarnation {
                        let before = self.incarnations.insert(instance.clone(), inc.clone());
                        if before.is_some_and(|b| b != inc) {
                            if let Some(last) = self.seen.get(&instance) {
                                self.replaced.insert(instance.clone(), *last);
                            }
                        }
                    }
                    self.seen.insert(instance, now);
                } else if let Some(i) = incarnation {
                    if i == self.incarnation {
                        self.own_heartbeat_read = true;
                    } else {
                        self.read_twin(i, now);
                    }
                }
            }
            PeerRecord::AgentOwner {
                mirror,
                owner,
                epoch,
                ..
            } => self.agents.claim(&mirror, &owner, epoch, self.lease_term),
            PeerRecord::AgentOffsets {
                mirror,
                offsets,
                epoch,
                ..
            } => {
                // A former owner's publication that lands after a later owner's is stale: the
                // maps of the highest epoch published count (review G15).
                if self
                    .agent_offsets
                    .get(&mirror)
                    .is_some_and(|(kept, _)| *kept > epoch)
                {
                    return;
                }
                self.agent_offsets.insert(mirror, (epoch, offsets));
            }
            PeerRecord::Failover {
                mirror,
                failover_id,
                by,
                at_ms,
                epoch,
            } => {
                if let Some(fid) = &failover_id {
                    self.known.insert((mirror.clone(), fid.clone()));
                    self.forward.failover(&mirror);
                }
                if let (Some(fid), Some(Some(cur))) = (&failover_id, self.failovers.get(&mirror)) {
                    // The same failover again: only the first claim of the next epoch counts.
                    if cur.failover_id == *fid && epoch != cur.epoch + 1 {
                        return;
                    }
                }
                match &failover_id {
                    None => self.mirroring.insert(mirror.clone(), (by.clone(), at_ms)),
                    Some(_) => self.mirroring.remove(&mirror),
                };
                // A failover, or a failback, ends a pause (as it does on one instance).
                self.paused.remove(&mirror);
                let a = failover_id.map(|failover_id| Announced {
                    failover_id,
                    by,
                    epoch: epoch.max(1),
                });
                if let Some(a) = &a {
                    let d = self
                        .drivers
                        .entry((mirror.clone(), a.failover_id.clone()))
                        .or_default();
                    if !d.contains(&a.by) {
                        d.push(a.by.clone());
                    }
                }
                self.failovers.insert(mirror, a);
            }
            PeerRecord::BarrierProducer {
                mirror,
                failover_id,
                producer,
                ..
            } => {
                self.barrier_producers
                    .insert(mirror, (failover_id, producer));
            }
            PeerRecord::BarrierFrom {
                mirror,
                failover_id,
                partitions,
                ..
            } => {
                let m = partitions
                    .into_iter()
                    .map(|p| ((p.topic, p.partition), p.offset))
                    .collect();
                self.barrier_from.insert(mirror, (failover_id, m));
            }
            PeerRecord::Stopped(s) => {
                self.stopped
                    .insert(s.mirror.clone(), std::sync::Arc::new(s));
            }
            PeerRecord::Fenced {
                mirror,
                failover_id,
                instance,
                ..
            } => {
                self.fenced.insert((mirror, instance), failover_id);
            }
            PeerRecord::Adopted {
                mirror,
                failover_id,
                instance,
                ..
            } => {
                self.adopted.insert((mirror, instance), failover_id);
            }
            PeerRecord::Paused {
                mirror,
                paused,
                by,
                at_ms,
            } => {
                self.paused.insert(mirror, (paused, by, at_ms));
            }
            r @ PeerRecord::ForwardHold { .. } => self.forward.hold(r, now),
            PeerRecord::ForwardHeld {
                mirror,
                hold_id,
                instance,
                ..
            } => self.forward.acknowledge(mirror, instance, hold_id),
            PeerRecord::ForwardedLoss {
                mirror,
                failover_id,
                instance,
                loss,
                ..
            } => {
                self.forwarded_losses
                    .insert((mirror, failover_id, instance), loss);
            }
            PeerRecord::Report(r) => {
                // The caller's open report, retried, can land after the completed one of the
                // instance that took the failover over (review G15): it changes nothing.
                let k = (r.mirror.clone(), r.failover_id.clone());
                if !r.is_complete() && self.reports.get(&k).is_some_and(|kept| kept.is_complete()) {
                    return;
                }
                self.reports.insert(k, r);
            }
        }
    }

    /// The failover another instance announced for `mirror`, fencing its writes here.
    pub fn fenced_by_peer(&self, mirror: &str) -> Option<&Announced> {
        self.failovers
            .get(mirror)
            .and_then(|a| a.as_ref())
            .filter(|a| a.by != self.me)
    }

    /// Failovers announced by other instances that this instance has not acknowledged yet.
    pub fn unacknowledged(&self) -> Vec<(String, Announced)> {
        self.failovers
            .iter()
            .filter_map(|(m, a)| a.as_ref().map(|a| (m, a)))
            .filter(|(_, a)| a.by != self.me)
            .filter(|(m, a)| {
                self.fenced.get(&((*m).clone(), self.me.clone())) != Some(&a.failover_id)
            })
            .map(|(m, a)| (m.clone(), a.clone()))
            .collect()
    }

    /// The other instances alive at `now`, with how long ago each was seen.
    pub fn alive(&self, now: Instant) -> Vec<(String, Duration)> {
        let mut v: Vec<(String, Duration)> = self
            .seen
            .iter()
            .map(|(i, t)| (i.clone(), now.saturating_duration_since(*t)))
            .filter(|(_, ago)| *ago < self.session + MARGIN)
            .collect();
        v.sort();
        v
    }

    /// The instances a barrier of failover `fid` of `mirror` still waits for at `now`: alive,
    /// and not having acknowledged the fence.
    pub fn waiting_for(&self, mirror: &str, fid: &str, now: Instant) -> Vec<String> {
        self.alive(now)
            .into_iter()
            .map(|(i, _)| i)
            .filter(|i| {
                self.fenced
                    .get(&(mirror.to_string(), i.clone()))
                    .map(String::as_str)
                    != Some(fid)
            })
            .collect()
    }

    /// Whether the state topic ever named failover `fid` of `mirror`.
    pub fn knows_failover(&self, mirror: &str, fid: &str) -> bool {
        self.known.contains(&(mirror.to_string(), fid.to_string()))
    }

    /// The failover reports of `mirror` published on the state topic.
    pub fn reports(&self, mirror: &str) -> Vec<FailoverReport> {
        self.reports
            .iter()
            .filter(|((m, _), _)| m == mirror)
            .map(|(_, r)| r.as_ref().clone())
            .collect()
    }

    /// What the instances' forward listeners of `mirror` passed that the destination lacks
    /// after failover `fid`, as each published it.
    pub fn forwarded_losses(
        &self,
        mirror: &str,
        fid: &str,
    ) -> Vec<crate::mirror::forwarded_acks::ForwardedLoss> {
        self.forwarded_losses
            .iter()
            .filter(|((m, f, _), _)| m == mirror && f == fid)
            .map(|(_, l)| l.clone())
            .collect()
    }

    /// Whether `mirror` is paused on the state topic (a pause not ended by a resume, a
    /// failover or a failback since).
    pub fn paused(&self, mirror: &str) -> bool {
        self.paused.get(mirror).is_some_and(|(p, _, _)| *p)
    }

    /// The instance driving `mirror`'s failover now, if one is announced.
    pub fn driver(&self, mirror: &str) -> Option<&Announced> {
        self.failovers.get(mirror).and_then(|a| a.as_ref())
    }

    /// The control barriers' producer of failover `fid` of `mirror`, once announced.
    pub fn barrier_producer(&self, mirror: &str, fid: &str) -> Option<BarrierProducer> {
        self.barrier_producers
            .get(mirror)
            .filter(|(f, _)| f == fid)
            .map(|(_, p)| *p)
    }

    /// Where each partition's log ended before failover `fid` of `mirror` wrote a barrier to
    /// it, as recorded (by any instance).
    pub fn barrier_from(&self, mirror: &str, fid: &str) -> LogEnds {
        self.barrier_from
            .get(mirror)
            .filter(|(f, _)| f == fid)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    /// When the last read that reached the state topic's end was sent.
    pub fn caught_up_at(&self) -> Option<Instant> {
        self.caught_up
    }

    /// The STOPPED partitions published for `mirror`'s failover (by any instance).
    pub fn stopped(&self, mirror: &str) -> Option<&Stopped> {
        self.stopped.get(mirror).map(|s| s.as_ref())
    }

    /// Every failover announced, per mirror.
    pub fn failovers(&self) -> impl Iterator<Item = (&String, &Announced)> {
        self.failovers
            .iter()
            .filter_map(|(m, a)| a.as_ref().map(|a| (m, a)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::screening::ScreenEntry;
    use crate::mirror::state::BarrierKind;

    const T: Duration = Duration::from_secs(10);

    fn hb(i: &str, at_ms: i64) -> PeerRecord {
        PeerRecord::Heartbeat {
            agents: vec![],
            instance: i.into(),
            at_ms,
            incarnation: None,
            forward: vec![],
        }
    }

    fn announce(m: &str, fid: &str, by: &str) -> PeerRecord {
        claim(m, fid, by, 1)
    }

    fn claim(m: &str, fid: &str, by: &str, epoch: u32) -> PeerRecord {
        PeerRecord::Failover {
            mirror: m.into(),
            failover_id: Some(fid.into()),
            by: by.into(),
            at_ms: 0,
            epoch,
        }
    }

    fn fenced(m: &str, fid: &str, i: &str) -> PeerRecord {
        PeerRecord::Fenced {
            mirror: m.into(),
            failover_id: fid.into(),
            instance: i.into(),
            at_ms: 0,
        }
    }

    #[test]
    fn records_round_trip_as_json_with_their_compaction_keys() {
        for r in [hb("a", 1), announce("m", "f", "a"), fenced("m", "f", "b")] {
            let back: PeerRecord =
                serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
            assert_eq!(back, r);
        }
        assert_eq!(hb("a", 1).key(), "instance/a");
        assert_eq!(announce("m", "f", "a").key(), "failover/m/f/1/a/0");
        assert_eq!(fenced("m", "f", "b").key(), "fenced/m/b");
    }

    fn hb_of(i: &str, incarnation: &str) -> PeerRecord {
        PeerRecord::Heartbeat {
            agents: vec![],
            instance: i.into(),
            at_ms: 0,
            incarnation: Some(incarnation.into()),
            forward: vec![],
        }
    }

    #[test]
    fn a_restarted_instances_previous_process_is_listed_while_its_writes_may_still_land() {
        let t0 = Instant::now();
        let settle = Duration::from_secs(5);
        let mut v = PeerView::new("a", T);
        v.apply(hb_of("b", "first"), t0, 0);
        v.apply(hb_of("b", "first"), t0 + Duration::from_secs(1), 0);
        assert!(v
            .replaced_lately(t0 + Duration::from_secs(2), settle)
            .is_empty());
        v.apply(hb_of("b", "second"), t0 + Duration::from_secs(3), 0);
        let seen = t0 + Duration::from_secs(1);
        assert_eq!(
            v.replaced_lately(t0 + Duration::from_secs(4), settle),
            vec![("b".to_string(), seen)],
            "the old process was last seen at its last heartbeat"
        );
        assert!(v.replaced_lately(seen + T + settle, settle).is_empty());
    }

    #[test]
    fn an_instance_gone_without_acknowledging_is_listed_until_its_lease_and_settle_are_over() {
        let t0 = Instant::now();
        let settle = Duration::from_secs(5);
        let mut v = PeerView::new("a", T);
        v.apply(hb("b", 0), t0, 0);
        v.apply(hb("c", 0), t0, 0);
        v.apply(fenced("m", "f", "c"), t0, 0);
        assert!(
            v.gone_lately("m", "f", t0 + T, settle).is_empty(),
            "alive: waited for, not gone"
        );
        assert_eq!(
            v.gone_lately("m", "f", t0 + T + MARGIN, settle),
            vec![("b".to_string(), t0)],
            "c acknowledged the fence"
        );
        assert!(v.gone_lately("m", "f", t0 + T + settle, settle).is_empty());
    }

    #[test]
    fn an_instance_is_alive_until_the_session_timeout_and_margin_after_its_last_heartbeat() {
        let t0 = Instant::now();
        let mut v = PeerView::new("a", T);
        v.apply(hb("b", 1_000), t0, 1_000);
        v.apply(hb("a", 1_000), t0, 1_000);
        assert_eq!(v.alive(t0 + T).len(), 1, "itself is never listed");
        assert!(v.alive(t0 + T + MARGIN).is_empty());
    }

    #[test]
    fn a_failover_of_another_instance_fences_here_until_acknowledged_and_a_restart_unfences() {
        let mut v = PeerView::new("b", T);
        let now = Instant::now();
        v.apply(announce("m", "f1", "a"), now, 0);
        assert_eq!(v.fenced_by_peer("m").map(|a| a.by.as_str()), Some("a"));
        assert_eq!(v.unacknowledged().len(), 1);
        v.apply(fenced("m", "f1", "b"), now, 0);
        assert!(v.unacknowledged().is_empty());
        assert!(
            v.fenced_by_peer("m").is_some(),
            "still fenced once acknowledged"
        );
        v.apply(
            PeerRecord::Failover {
                mirror: "m".into(),
                failover_id: None,
                by: "a".into(),
                at_ms: 0,
                epoch: 0,
            },
            now,
            0,
        );
        assert!(v.fenced_by_peer("m").is_none());
    }

    #[test]
    fn an_own_failover_fences_nothing_here() {
        let mut v = PeerView::new("a", T);
        v.apply(announce("m", "f1", "a"), Instant::now(), 0);
        assert!(v.fenced_by_peer("m").is_none());
        assert!(v.unacknowledged().is_empty());
    }

    #[test]
    fn the_barrier_waits_for_alive_instances_until_they_acknowledge_or_expire() {
        let t0 = Instant::now();
        let mut v = PeerView::new("a", T);
        v.apply(hb("b", 0), t0, 0);
        v.apply(hb("c", 0), t0, 0);
        assert_eq!(v.waiting_for("m", "f1", t0), vec!["b", "c"]);
        v.apply(fenced("m", "f0", "b"), t0, 0);
        assert_eq!(
            v.waiting_for("m", "f1", t0),
            vec!["b", "c"],
            "another failover's ack"
        );
        v.apply(fenced("m", "f1", "b"), t0, 0);
        assert_eq!(v.waiting_for("m", "f1", t0), vec!["c"]);
        assert!(
            v.waiting_for("m", "f1", t0 + T + MARGIN).is_empty(),
            "c waited out"
        );
        assert_eq!(v.acknowledged("m", "f1"), vec!["b"]);
    }

    fn stopped(m: &str, fid: &str, by: &str) -> PeerRecord {
        PeerRecord::Stopped(Stopped {
            mirror: m.into(),
            failover_id: fid.into(),
            by: by.into(),
            at_ms: 1,
            partitions: vec![StoppedPartition {
                topic: "t".into(),
                partition: 0,
                barrier_offset: 9,
                kind: BarrierKind::Control,
                producer: Some(BarrierProducer {
                    producer_id: 5,
                    producer_epoch: 0,
                }),
                topic_id: None,
                last_mirrored_offset: Some(8),
                producers_expired: Some(1),
            }],
            screened: vec![ScreenedProducer {
                producer_id: 7,
                entry: ScreenEntry {
                    max_epoch: 1,
                    last_timestamp: 2,
                    added_ms: 3,
                    coordinator_epoch: -1,
                },
            }],
        })
    }

    #[test]
    fn a_handover_round_trips_as_json_keyed_by_its_mirror() {
        let r = stopped("m", "f1", "a");
        let back: PeerRecord = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.key(), "stopped/m");
    }

    #[test]
    fn only_the_handover_of_the_failover_announced_now_is_followed() {
        let now = Instant::now();
        let mut v = PeerView::new("b", T);
        v.apply(stopped("m", "f0", "a"), now, 0);
        v.apply(announce("m", "f1", "a"), now, 0);
        assert!(v.to_follow(now).is_empty(), "an older failover's handover");
        v.apply(stopped("m", "f1", "a"), now, 0);
        assert!(matches!(&v.to_follow(now)[..], [Follow::Stopped(s)] if s.failover_id == "f1"));
    }

    #[test]
    fn the_driver_follows_its_own_failover_from_the_state_topic_too() {
        // Its records know the failover (the follower then does nothing), unless its state
        // directory was lost: the state topic is the state of record.
        let now = Instant::now();
        let mut own = PeerView::new("a", T);
        own.apply(announce("m", "f1", "a"), now, 0);
        assert!(
            matches!(&own.to_follow(now)[..], [Follow::Drive { epoch: 1, .. }]),
            "{:?}",
            own.to_follow(now)
        );
        own.apply(stopped("m", "f1", "a"), now, 0);
        assert!(matches!(
            &own.to_follow(now)[..],
            [Follow::Stopped(s), Follow::Drive { .. }] if s.by == "a"
        ));
    }

    #[test]
    fn a_pause_is_followed_by_every_instance_until_a_failover_or_failback_of_the_mirror() {
        let now = Instant::now();
        let mut v = PeerView::new("b", T);
        let pause = |paused: bool, at_ms: i64| PeerRecord::Paused {
            mirror: "m".into(),
            paused,
            by: "a".into(),
            at_ms,
        };
        v.apply(pause(true, 1), now, 0);
        assert!(v.paused("m"));
        assert!(matches!(
            &v.to_follow(now)[..],
            [Follow::Paused { paused: true, .. }]
        ));
        v.apply(pause(false, 2), now, 0);
        assert!(!v.paused("m"));
        v.apply(pause(true, 3), now, 0);
        v.apply(announce("m", "f1", "c"), now, 0);
        assert!(!v.paused("m"), "the failover ended the pause");
        assert!(!v
            .to_follow(now)
            .iter()
            .any(|f| matches!(f, Follow::Paused { .. })));
    }

    #[test]
    fn a_failback_waits_for_every_instance_alive_until_it_has_adopted_that_failover() {
        // Review G4.
        let now = Instant::now();
        let mut v = PeerView::new("a", T);
        v.apply(hb("b", 0), now, 0);
        v.apply(hb("c", 0), now, 0);
        v.apply(announce("m", "f1", "a"), now, 0);
        assert_eq!(v.not_adopted("m", "f1", now), vec!["b", "c"]);
        let adopted = |i: &str, fid: &str| PeerRecord::Adopted {
            mirror: "m".into(),
            failover_id: fid.into(),
            instance: i.into(),
            at_ms: 1,
        };
        v.apply(adopted("b", "f1"), now, 0);
        v.apply(adopted("c", "f0"), now, 0);
        assert_eq!(
            v.not_adopted("m", "f1", now),
            vec!["c"],
            "c adopted another"
        );
        let later = now + T + MARGIN;
        assert!(v.not_adopted("m", "f1", later).is_empty(), "c is gone");
    }

    #[test]
    fn a_mirror_another_instance_started_again_is_followed_and_a_new_failover_replaces_it() {
        let now = Instant::now();
        let mut v = PeerView::new("b", T);
        v.apply(announce("m", "f1", "a"), now, 0);
        v.apply(stopped("m", "f1", "a"), now, 0);
        let again = PeerRecord::Failover {
            mirror: "m".into(),
            failover_id: None,
            by: "a".into(),
            at_ms: 5,
            epoch: 0,
        };
        v.apply(again, now, 0);
        assert!(matches!(&v.to_follow(now)[..], [Follow::Mirroring { by, .. }] if by == "a"));
        v.apply(announce("m", "f2", "c"), now, 0);
        assert!(
            v.to_follow(now).is_empty(),
            "f2 has handed nothing over yet"
        );
    }

    #[test]
    fn of_two_claims_of_a_failovers_next_epoch_the_first_in_the_log_wins() {
        let now = Instant::now();
        let mut v = PeerView::new("c", T);
        v.apply(announce("m", "f1", "a"), now, 0);
        v.apply(claim("m", "f1", "b", 2), now, 0);
        v.apply(claim("m", "f1", "c", 2), now, 0);
        v.apply(announce("m", "f1", "a"), now, 0);
        let d = v.driver("m").unwrap();
        assert_eq!((d.by.as_str(), d.epoch), ("b", 2), "{d:?}");
        v.apply(claim("m", "f1", "c", 3), now, 0);
        assert_eq!(v.driver("m").unwrap().by, "c");
    }

    #[test]
    fn a_failover_whose_driver_is_gone_is_taken_over_by_the_lowest_instance_alive_with_a_lease() {
        let t0 = Instant::now();
        let mut b = PeerView::new("b", T);
        b.apply(hb("a", 0), t0, 0);
        b.apply(hb("c", 0), t0, 0);
        b.apply(announce("m", "f1", "a"), t0, 0);
        b.heartbeat_acked(t0, t0);
        b.heartbeat_acked(t0 + T, t0 + T);
        b.caught_up(t0 + T);
        let now = t0 + T + MARGIN;
        assert!(
            b.to_follow(t0 + T).is_empty(),
            "a is still alive at the session timeout"
        );
        let f = b.to_follow(now);
        assert!(
            matches!(&f[..], [Follow::TakeOver { from, epoch: 2, .. }] if from == "a"),
            "{f:?}"
        );
        let mut c = PeerView::new("c", T);
        c.apply(hb("b", 0), t0 + T, 0);
        c.apply(announce("m", "f1", "a"), t0, 0);
        c.heartbeat_acked(t0, t0);
        c.heartbeat_acked(now, now);
        c.caught_up(now);
        assert!(c.to_follow(now).is_empty(), "b, alive, comes first");
        let mut lone = PeerView::new("d", T);
        lone.apply(announce("m", "f1", "a"), t0, 0);
        assert!(lone.to_follow(now).is_empty(), "no lease: no takeover");
    }

    #[test]
    fn an_earlier_driver_gone_without_acknowledging_its_own_drain_is_settled_for() {
        // Review G1: a takeover re-reads for what the dead driver sent, unless it said it had
        // drained its own mirror writes.
        let t0 = Instant::now();
        let mut b = PeerView::new("b", T);
        b.apply(hb("a", 0), t0, 0);
        b.apply(announce("m", "f1", "a"), t0, 0);
        b.apply(claim("m", "f1", "b", 2), t0, 0);
        let later = t0 + T + MARGIN;
        assert_eq!(
            b.undrained_drivers("m", "f1", later),
            vec![("a".to_string(), t0)]
        );
        assert!(
            b.undrained_drivers("m", "f1", t0).is_empty(),
            "a still alive"
        );
        b.apply(fenced("m", "f1", "a"), later, 0);
        assert!(b.undrained_drivers("m", "f1", later).is_empty());
    }

    fn offsets(by: &str, epoch: u32, n: i64) -> PeerRecord {
        PeerRecord::AgentOffsets {
            mirror: "m".into(),
            by: by.into(),
            epoch,
            offsets: serde_json::json!({ "n": n }),
        }
    }

    #[test]
    fn a_former_agent_owners_late_offsets_do_not_replace_the_new_owners() {
        // Review G15: a's publication at epoch 1 lands after b, owner at epoch 2, published.
        let now = Instant::now();
        let mut v = PeerView::new("c", T);
        v.apply(offsets("a", 1, 10), now, 0);
        v.apply(offsets("b", 2, 20), now, 0);
        v.apply(offsets("a", 1, 11), now, 0);
        assert_eq!(v.agent_offsets("m"), Some(&serde_json::json!({ "n": 20 })));
        v.apply(offsets("b", 2, 21), now, 0);
        assert_eq!(
            v.agent_offsets("m"),
            Some(&serde_json::json!({ "n": 21 })),
            "the owner's own later maps replace its earlier ones"
        );
        assert_ne!(
            offsets("a", 1, 0).key(),
            offsets("b", 2, 0).key(),
            "compaction keeps each epoch's latest"
        );
    }

    fn report(fid: &str, complete: bool) -> PeerRecord {
        let mut r = FailoverReport::open(
            "m",
            fid,
            "caller".into(),
            1,
            (None, None, false),
            Vec::new(),
            None,
        );
        if complete {
            r.status = "complete".into();
        }
        PeerRecord::Report(Box::new(r))
    }

    #[test]
    fn an_open_report_landing_after_the_completed_one_of_its_failover_changes_nothing() {
        // Review G15: the caller retries its open report; the instance that took the failover
        // over completed it meanwhile.
        let now = Instant::now();
        let mut v = PeerView::new("c", T);
        v.apply(report("f1", false), now, 0);
        v.apply(report("f1", true), now, 0);
        v.apply(report("f1", false), now, 0);
        v.apply(report("f2", false), now, 0);
        let status: Vec<(String, String)> = v
            .reports("m")
            .into_iter()
            .map(|r| (r.failover_id, r.status))
            .collect();
        assert_eq!(
            status,
            vec![
                ("f1".to_string(), "complete".to_string()),
                ("f2".to_string(), "in_progress".to_string())
            ]
        );
        assert_ne!(
            report("f1", false).key(),
            report("f1", true).key(),
            "compaction keeps the completed one"
        );
    }
}

#[cfg(test)]
pub(crate) mod sim_sabotage;

#[cfg(test)]
mod conclusions;
