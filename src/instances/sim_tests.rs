//! A deterministic simulation of the several-instances protocol: three gateway processes run the
//! real [`PeerLink`] code — heartbeats, reads of the state topic, leases, fences, the failover's
//! announcement and its wait — over an in-memory state topic, on virtual time, under a seeded
//! schedule of faults. Every mirror write a process admits is followed until it lands in the
//! mirror's partition (or is dropped), and the run is checked against the promise the protocol
//! exists for: **no mirror write lands after the failover's barrier**, except one of an
//! instance the barrier waited out, and then no later than the settle the barrier is checked
//! for (the waited-out leases' end plus `limits.unknown_outcome_settle_ms`, review G1). After
//! the faults stop, every process must converge: fenced, and the failover through its barrier.
//!
//! What a seed chooses: the step lengths, which process acts when, when the failover starts and
//! through which process, and the faults — a process paused (SIGSTOP) for up to two and a half
//! sessions, cut off from the state topic, its appends answered with an error although written
//! (unknown outcome), the state topic down for everyone, a process killed and started again
//! with the same id (its unsent writes gone, its sent ones still landing), its wall clock moved;
//! one seed in twenty, a process that may append to the state topic but never read it again;
//! and one seed in ten, a second process started with an instance's id beside it for a while
//! (review G12; it draws from a stream of its own, so a seed without one replays as before).
//! A driver killed or paused mid-failover is taken over as the controller does it: the
//! instance the state topic names claims the failover at the next epoch, and the first claim
//! of an epoch drives; the checker also fails a run where two instances drive one epoch. Every
//! process could run the mirror's built-in agent: it appends for the agent at each step while
//! [`PeerLink::agent_turn`] says it owns it (asked right before the append), and the checker
//! fails a run where two instances append at one ownership epoch, where an append comes at an
//! epoch below one that already appended, or where not exactly one process runs the agent at
//! the end; where a process and its twin both hold a lease at one moment; and where a process
//! writes a failover epoch's barriers while another that wrote them still runs. Once a driver
//! has written the barriers, the handover is on the state topic: a process named to drive
//! later adopts it (no barrier of its own), and nobody claims the failover any more, as the
//! controller's `drive` and `claim` do. One seed in ten, a process's VM is stopped with its
//! clocks (review G13): on resuming, its lease clock, wall clock and timers have not counted
//! the pause; what it sends or appends for the agent before its next heartbeat is acknowledged
//! is the window the docs describe, counted and not checked. One seed in ten, the state topic
//! is deleted and created again empty before the failover (review G6): each reader starts over
//! at its next read. The partitions are made writable (the controller's STOPPED) by the driver
//! once its handover is appended to the state topic, by every other process once it has read
//! it (review G3): the checker fails a run in which a process makes them writable while the
//! state topic holds no handover, or in which a process that can read never does. Not
//! modelled yet: the adoption partition by partition, failback, where an agent's append lands
//! (the destination's side of review G2).
//!
//! The model of a mirror write follows the gateway: admitted when [`PeerLink::mirror_write_refusal`]
//! says nothing, sent at the process's next step only while its lease holds and before the send
//! deadline taken at admission (the lease's remaining time, review G1), then appended by the
//! broker within a delay (mostly milliseconds, sometimes up to the settle time). A fence
//! (the [`FenceHook`]) succeeds once every write of that process is appended or dropped.
//!
//! Positive controls ([`Sabotage`]): with a protection of the model switched off, the checker
//! must find a violation within the seeds — so a green run is evidence.
//!
//! Replay one seed with its full history: `MIRRORGATE_SIM_SEED=N cargo test --lib
//! instances::sim_tests -- --nocapture`; more seeds: `MIRRORGATE_SIM_SEEDS=100000`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::log::ReadResult;
use super::records::{Stopped, StoppedPartition};
use super::*;

const SESSION: Duration = Duration::from_secs(10);
/// `limits.unknown_outcome_settle_ms`: how long after the waited-out leases' end the barrier
/// is checked for late mirror writes.
const SETTLE_MS: i64 = 5_000;
const MIRROR: &str = "m";
const FID: &str = "f1";
const IDS: [&str; 3] = ["a", "b", "c"];
/// Faults start only before this (virtual ms); the rest of the run is calm.
const FAULTS_UNTIL_MS: i64 = 60_000;
/// The end of a run (virtual ms).
const RUN_MS: i64 = 130_000;
/// The virtual wall clock's start (ms since the epoch).
const EPOCH_MS: i64 = 1_800_000_000_000;
/// The generation of a second process started with an instance's id while it runs (G12).
const TWIN: u32 = 1_000_000;

/// An agent ownership epoch in the incarnation of the state topic it was read from (a topic
/// deleted and created again starts its epochs over: review G6). Shown as the epoch alone in
/// the first incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Epoch {
    incarnation: u32,
    epoch: u32,
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.incarnation {
            0 => write!(f, "{}", self.epoch),
            i => write!(f, "{} of the state topic's incarnation {i}", self.epoch),
        }
    }
}

/// How the history and the checker name a process: its id, primed for a twin.
fn name(slot: usize, generation: u32) -> String {
    if generation >= TWIN {
        format!("{}'", IDS[slot])
    } else {
        IDS[slot].to_string()
    }
}

/// A protection of the model switched off, to show that the checker sees its absence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    None,
    /// A process acknowledges a fence without waiting for its writes in flight.
    Fence,
    /// A process sends an admitted write whatever its lease and send deadline say (before G1).
    SendDeadline,
    /// The barrier is not checked again for the writes of instances it waited out (before G1).
    Settle,
    /// A process back from a pause appends once for the agent on the ownership it had before
    /// the pause: ownership asked once a tick, not right before each append (before G2).
    OwnershipTick,
    /// A heartbeat counts for nothing when its writer's wall clock is more than ten sessions
    /// behind the reader's (liveness by wall-clock age, before G5).
    WallClockLiveness,
    /// A process heartbeats whether or not it reads the state topic (before G10).
    HeartbeatUnread,
    /// The agent's owner keeps its epoch across a lapse of its lease (before S3).
    OwnershipAcrossLapses,
    /// A heartbeat of a process's own id written by another process is ignored (before G12):
    /// two processes with one id each take a lease.
    TwinIgnored,
    /// A heartbeat's broker append time is not compared with the lease clock (before G13): a
    /// process stopped with its clock resumes holding its lease.
    BrokerClockIgnored,
    /// The driver makes the partitions writable (records them STOPPED) before its handover
    /// naming them is on the state topic (before G3).
    StoppedBeforeHandover,
}

/// splitmix64: a stable generator, so that a seed replays the same run on every version of
/// every dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next() % (hi - lo) as u64) as i64
    }

    /// True with probability `per_mille` / 1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteState {
    Admitted,
    Sent { lands_at: i64 },
    Landed { at: i64 },
    Dropped,
}

#[derive(Debug, Clone)]
struct Write {
    /// The process (slot, generation) that admitted it.
    by: (usize, u32),
    admitted_at: i64,
    deadline: i64,
    /// The send deadline on the admitting process's lease clock (which a frozen VM's pause
    /// does not advance).
    deadline_local: i64,
    /// Sent after its process resumed from a freeze and before a heartbeat of its was
    /// acknowledged again: the window [`check`] allows (see the module's doc).
    in_freeze_window: bool,
    state: WriteState,
}

/// What the processes and the state topic share: the topic's records, the faults in force and
/// the mirror writes.
struct World {
    now: i64,
    records: Vec<PeerRecord>,
    down_until: i64,
    cut_until: [i64; 3],
    lose_answers_until: [i64; 3],
    /// A process that may append to the state topic but not read it, from then on for good (an
    /// ACL granting WRITE without READ: review G10).
    unreadable: Option<(usize, i64)>,
    writes: Vec<Write>,
    sabotage: Sabotage,
    /// Drive follows handed to processes (slot, generation, epoch), taken by the run loop.
    drive: Vec<(usize, u32, u32)>,
    /// A driver wrote the failover's barriers: its handover (every partition STOPPED) is on
    /// the state topic.
    handed_over: bool,
    /// When each process (slot, generation) last had a heartbeat acknowledged.
    heartbeat_acked: std::collections::HashMap<(usize, u32), i64>,
    /// The state topic's incarnation: deleted and created again, it starts empty (review G6).
    incarnation: u32,
    /// The incarnation each process (slot, generation) has read last.
    read_incarnation: std::collections::HashMap<(usize, u32), u32>,
}

type Shared = Arc<Mutex<World>>;

fn lock(w: &Shared) -> std::sync::MutexGuard<'_, World> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

/// The state topic as one process reaches it.
struct SimLog {
    world: Shared,
    slot: usize,
    generation: u32,
}

impl SimLog {
    /// Append `r`; `Ok` with the broker's append time (virtual wall clock, the topic keeps
    /// `LogAppendTime`).
    fn append_at(&self, r: &PeerRecord) -> Result<i64, String> {
        let mut w = lock(&self.world);
        if w.now < w.down_until || w.now < w.cut_until[self.slot] {
            return Err("state topic unreachable".into());
        }
        w.records.push(r.clone());
        if w.now < w.lose_answers_until[self.slot] {
            return Err("answer lost (the record was written)".into());
        }
        Ok(EPOCH_MS + w.now)
    }
}

impl StateLog for SimLog {
    fn append(&self, r: &PeerRecord) -> BoxFuture<'_, Result<(), String>> {
        let r = self.append_at(r).map(|_| ());
        Box::pin(async move { r })
    }

    fn append_timed(&self, r: &PeerRecord) -> BoxFuture<'_, Result<Option<i64>, String>> {
        let r = self.append_at(r);
        if let Ok(at) = r {
            let mut w = lock(&self.world);
            let now = w.now;
            w.heartbeat_acked.insert((self.slot, self.generation), now);
            debug_assert_eq!(at, EPOCH_MS + now);
        }
        Box::pin(async move { r.map(Some) })
    }

    fn read(&self, from: i64) -> BoxFuture<'_, Result<ReadResult, String>> {
        Box::pin(async move {
            let mut w = lock(&self.world);
            if w.now < w.down_until || w.now < w.cut_until[self.slot] {
                return Err("state topic unreachable".into());
            }
            // A new incarnation (the topic's id changed): the reader starts over, as the
            // Kafka log's read says.
            let inc = w.incarnation;
            if let Some(read) = w.read_incarnation.insert((self.slot, self.generation), inc) {
                if read != inc {
                    return Ok(ReadResult {
                        records: Vec::new(),
                        next: 0,
                        high_watermark: i64::MAX,
                        reset: Some(format!("the state topic is incarnation {inc} now")),
                    });
                }
            }
            if w.unreadable
                .is_some_and(|(s, from)| s == self.slot && w.now >= from)
            {
                return Err("not authorized to read the state topic".into());
            }
            let end = w.records.len() as i64;
            // At most 64 records per read, as a bounded fetch would return.
            let upto = end.min(from.max(0) + 64);
            Ok(ReadResult {
                records: w.records[from.max(0) as usize..upto as usize].to_vec(),
                next: upto,
                high_watermark: end,
                reset: None,
            })
        })
    }
}

struct Proc {
    generation: u32,
    link: Arc<PeerLink>,
    next: i64,
    next_read: i64,
    next_heartbeat: i64,
    paused_until: i64,
    /// Dead until then (killed; started again with the same id at that time).
    dead_until: i64,
    /// This process's lease clock's offset from virtual time (processes start at other times;
    /// a freeze sets it back by its length).
    clock_offset_ms: i64,
    /// How far this process's wall clock is moved (a fault, or a freeze: it lags by the freeze
    /// until NTP would step it).
    skew_ms: i64,
    /// Resumed from a freeze, and no heartbeat acknowledged since.
    unconfirmed_freeze: bool,
    fence: FenceHook,
    follow: FollowHook,
    /// When this process last took a step, and the agent's turn it had then.
    last_step: i64,
    last_turn: Option<AgentTurn>,
    /// When this process made the mirror's partitions writable (the controller's STOPPED): as
    /// the driver, once its handover is on the state topic; otherwise once it read it.
    writable_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
enum Driver {
    Announcing,
    DrainingOwn,
    Waiting {
        first: Vec<String>,
    },
    Done {
        barrier_at: i64,
        settle_ms: Option<i64>,
    },
    /// Another instance's claim came first: this one writes no barrier.
    TakenOver {
        by: String,
    },
    /// Named to drive once the failover's barriers were written and its handover recorded:
    /// it adopts the STOPPED partitions and writes no barrier (the controller's `drive`).
    Adopted,
}

/// The outcome of one seed.
#[derive(Debug, Default)]
pub struct Outcome {
    pub violations: Vec<String>,
    pub not_converged: Vec<String>,
    pub admitted: usize,
    pub landed: usize,
    pub faults: usize,
    /// Drivers that took the failover over (an epoch above the first).
    pub takeovers: usize,
    /// Second processes started with an instance's id (review G12).
    pub twins: usize,
    /// VMs stopped with their clocks (review G13), and the writes that landed after a barrier
    /// because they were sent in the window such a freeze leaves (see the module's doc).
    pub freezes: usize,
    pub freeze_window_writes: usize,
    /// The agent's appends in that window.
    pub freeze_window_appends: usize,
    /// State topics deleted and created again (review G6).
    pub recreations: usize,
    /// Appends of the mirror's agent, and the highest ownership epoch they ran at.
    pub agent_appends: usize,
    pub agent_epoch: u32,
    pub history: Vec<String>,
}

fn fence_hook(world: &Shared, slot: usize, generation: u32) -> FenceHook {
    let world = world.clone();
    Arc::new(move |_mirror: String| {
        let world = world.clone();
        Box::pin(async move {
            let w = lock(&world);
            if w.sabotage == Sabotage::Fence {
                return Ok(());
            }
            let busy = w
                .writes
                .iter()
                .filter(|x| x.by == (slot, generation))
                .filter(|x| matches!(x.state, WriteState::Admitted | WriteState::Sent { .. }))
                .count();
            if busy == 0 {
                Ok(())
            } else {
                Err(format!("{busy} mirror writes not answered yet"))
            }
        }) as BoxFuture<'static, Result<(), String>>
    })
}

/// What the controller does with a follow: a failover whose driver is gone is claimed on the
/// state topic; a claim that came first (or the process's own announcement) makes it drive.
/// Once the handover is recorded nothing is claimed; adopting it, failbacks and pauses are
/// not modelled (done at once).
fn follow_hook(world: &Shared, slot: usize, generation: u32, link: &Arc<PeerLink>) -> FollowHook {
    let world = world.clone();
    let link = Arc::downgrade(link);
    Arc::new(move |f: Follow| {
        let world = world.clone();
        let link = link.clone();
        Box::pin(async move {
            match f {
                Follow::TakeOver {
                    mirror,
                    failover_id,
                    epoch,
                    ..
                } => match link.upgrade() {
                    // Nothing to claim once the handover is recorded: every partition is
                    // STOPPED here too (the controller's `claim`).
                    _ if lock(&world).handed_over => Ok(true),
                    Some(l) => l.claim(&mirror, &failover_id, epoch).await.map(|()| true),
                    None => Ok(true),
                },
                Follow::Drive { epoch, .. } => {
                    lock(&world).drive.push((slot, generation, epoch));
                    Ok(true)
                }
                _ => Ok(true),
            }
        }) as BoxFuture<'static, Result<bool, String>>
    })
}

/// Whether the state topic holds the handover of the failover (its current incarnation).
fn handover_in_log(w: &World) -> bool {
    w.records
        .iter()
        .any(|r| matches!(r, PeerRecord::Stopped(s) if s.failover_id == FID))
}

/// What the driver hands over: the mirror's one partition, STOPPED at its barrier.
fn handover(now: i64) -> Stopped {
    Stopped {
        mirror: MIRROR.to_string(),
        failover_id: FID.to_string(),
        by: String::new(),
        at_ms: EPOCH_MS + now,
        partitions: vec![StoppedPartition {
            topic: "t".to_string(),
            partition: 0,
            barrier_offset: 0,
            kind: crate::mirror::state::BarrierKind::Control,
            producer: None,
            topic_id: None,
            last_mirrored_offset: None,
            producers_expired: None,
        }],
        screened: Vec::new(),
    }
}

/// The step in which process `p` makes the mirror's partitions writable, as the controller
/// does (review G3): a driver that wrote its barriers hands them over on the state topic
/// ([`PeerLink::publish_stopped`], retried at its next steps while the append fails) and only
/// then records them STOPPED; any other process adopts them once it has read the handover.
/// The checker fails a run in which a process makes them writable while the state topic does
/// not name them STOPPED.
fn make_writable(
    world: &Shared,
    rt: &tokio::runtime::Runtime,
    p: &mut Proc,
    slot: usize,
    drivers: &[(usize, u32, u32, Driver)],
    out: &mut Outcome,
    now: i64,
) {
    if p.writable_at.is_some() {
        return;
    }
    let generation = p.generation;
    let barriers_written = drivers
        .iter()
        .any(|(s, g, _, d)| (*s, *g) == (slot, generation) && matches!(d, Driver::Done { .. }));
    let before_handover = lock(world).sabotage == Sabotage::StoppedBeforeHandover;
    let writable = if barriers_written {
        if before_handover {
            check_named_stopped(world, slot, generation, now, out);
        }
        let published = rt.block_on(p.link.publish_stopped(handover(now))).is_ok();
        if published {
            out.history.push(format!(
                "{now:>7} {} hands the STOPPED partitions over on the state topic",
                name(slot, generation)
            ));
        }
        published || before_handover
    } else {
        p.link.handover(MIRROR, FID).is_some()
    };
    if !writable {
        return;
    }
    if !before_handover {
        check_named_stopped(world, slot, generation, now, out);
    }
    let mut w = lock(world);
    w.handed_over |= handover_in_log(&w);
    drop(w);
    p.writable_at = Some(now);
    out.history.push(format!(
        "{now:>7} {} makes the mirror's partitions writable",
        name(slot, generation)
    ));
}

/// No partition is writable anywhere before the state topic names it STOPPED.
fn check_named_stopped(world: &Shared, slot: usize, generation: u32, now: i64, out: &mut Outcome) {
    if !handover_in_log(&lock(world)) {
        out.violations.push(format!(
            "{} made the mirror's partitions writable at {now}, before the state topic named them STOPPED",
            name(slot, generation)
        ));
    }
}

fn start(world: &Shared, slot: usize, generation: u32, now: i64, rng: &mut Rng) -> Proc {
    let log = Arc::new(SimLog {
        world: world.clone(),
        slot,
        generation,
    });
    let link = PeerLink::new(IDS[slot], "state", SESSION, log);
    link.set_unknown_outcome_settle(Duration::from_millis(SETTLE_MS as u64));
    link.set_agents(vec![MIRROR.to_string()]);
    let follow = follow_hook(world, slot, generation, &link);
    let clock_offset_ms = rng.range(0, 3_600_000);
    // The yielded process's jitter, random in the gateway, derived from the seed here.
    link.view().set_yield_jitter(Duration::from_millis(
        (clock_offset_ms as u64 * 7_919) % SESSION.as_millis() as u64,
    ));
    Proc {
        generation,
        link,
        next: 0,
        next_read: now,
        next_heartbeat: now,
        paused_until: 0,
        dead_until: 0,
        clock_offset_ms,
        skew_ms: 0,
        unconfirmed_freeze: false,
        fence: fence_hook(world, slot, generation),
        follow,
        last_step: now,
        last_turn: None,
        writable_at: None,
    }
}

/// Run one seed.
pub fn run(seed: u64, sabotage: Sabotage) -> Outcome {
    super::view::sim_sabotage::set_wall_clock_liveness(sabotage == Sabotage::WallClockLiveness);
    super::view::sim_sabotage::set_heartbeat_unread(sabotage == Sabotage::HeartbeatUnread);
    super::view::sim_sabotage::set_ownership_across_lapses(
        sabotage == Sabotage::OwnershipAcrossLapses,
    );
    super::view::sim_sabotage::set_twin_ignored(sabotage == Sabotage::TwinIgnored);
    super::view::sim_sabotage::set_broker_clock_ignored(sabotage == Sabotage::BrokerClockIgnored);
    let out = run_with(seed, sabotage);
    super::view::sim_sabotage::set_wall_clock_liveness(false);
    super::view::sim_sabotage::set_heartbeat_unread(false);
    super::view::sim_sabotage::set_ownership_across_lapses(false);
    super::view::sim_sabotage::set_twin_ignored(false);
    super::view::sim_sabotage::set_broker_clock_ignored(false);
    out
}

fn run_with(seed: u64, sabotage: Sabotage) -> Outcome {
    let mut rng = Rng(seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let base = Instant::now();
    let world: Shared = Arc::new(Mutex::new(World {
        now: 0,
        records: Vec::new(),
        down_until: 0,
        cut_until: [0; 3],
        lose_answers_until: [0; 3],
        unreadable: None,
        writes: Vec::new(),
        sabotage,
        drive: Vec::new(),
        handed_over: false,
        heartbeat_acked: Default::default(),
        incarnation: 0,
        read_incarnation: Default::default(),
    }));
    let mut out = Outcome::default();
    let mut procs: Vec<Proc> = (0..3).map(|s| start(&world, s, 0, 0, &mut rng)).collect();
    let failover_at = rng.range(8_000, 40_000);
    // One seed in twenty: a process loses the right to read the state topic for good (drawn
    // apart, so that the other draws of a seed stay as they were).
    let mut side = Rng(seed ^ 0x6a09_e667_f3bc_c908);
    let unreadable = side.chance(50).then(|| {
        (
            side.range(0, 3) as usize,
            side.range(2_000, FAULTS_UNTIL_MS),
        )
    });
    if let Some((slot, from)) = unreadable {
        lock(&world).unreadable = Some((slot, from));
        out.faults += 1;
        out.history.push(format!(
            "{from:>7} fault: {} may append to the state topic but not read it, from now on",
            IDS[slot]
        ));
    }
    // Every process that drove the failover: (slot, generation, epoch, phase); one that was
    // taken over or died stays listed with its last phase.
    let mut drivers: Vec<(usize, u32, u32, Driver)> = Vec::new();
    let mut called = false;
    // Epoch → the instances that drove it (at most one may).
    let mut epochs: std::collections::BTreeMap<u32, std::collections::BTreeSet<usize>> =
        Default::default();
    // Every append of the mirror's agent: (time, slot, ownership epoch).
    let mut agent_appends: Vec<(i64, (usize, u32), Epoch)> = Vec::new();
    // Every barrier written: (epoch, slot, generation, time). A process writes the barriers of
    // an epoch while no other process that wrote them runs: two processes with one instance
    // id (review G12) both taking the failover for theirs would write a second set after the
    // partitions were made writable. (A process started again after writing them may write
    // them again: the model keeps no records across a restart.)
    let mut barriers: Vec<(u32, usize, u32, i64)> = Vec::new();
    // One seed in ten: a second process with one instance's id runs beside it for a while (an
    // operator's mistake, review G12): (slot, from, until). The twin draws from a stream of
    // its own, so that a seed without one replays as before.
    let mut twin_rng = Rng(seed ^ 0xbb67_ae85_84ca_a73b);
    let twin_plan = twin_rng.chance(100).then(|| {
        let from = twin_rng.range(2_000, 45_000);
        (
            twin_rng.range(0, 3) as usize,
            from,
            from + twin_rng.range(2_000, 15_000),
        )
    });
    let mut twin: Option<(usize, Proc)> = None;
    let mut two_leases = false;
    // One seed in ten: a process's VM is stopped with its clocks (review G13): (slot, at, ms).
    // From a stream of its own too.
    let mut freeze_rng = Rng(seed ^ 0x3c6e_f372_fe94_f82b);
    let mut freeze_plan = freeze_rng.chance(100).then(|| {
        (
            freeze_rng.range(0, 3) as usize,
            freeze_rng.range(2_000, FAULTS_UNTIL_MS),
            freeze_rng.range(2_000, 30_000),
        )
    });
    // One seed in ten: the state topic is deleted and created again before the failover is
    // called, as `mirrorgate state init` does for a lost one (review G6): (at, ms without it).
    // A fourth stream.
    let mut recreate_rng = Rng(seed ^ 0xa54f_f53a_5f1d_36f1);
    let mut recreate_plan = recreate_rng.chance(100).then(|| {
        (
            recreate_rng.range(2_000, failover_at),
            recreate_rng.range(500, 8_000),
        )
    });
    let mut now = 0i64;
    while now < RUN_MS {
        now += rng.range(5, 150);
        lock(&world).now = now;
        crate::mirror::screening::sim_clock::set(Some(EPOCH_MS + now));
        // Writes appended by the brokers by now.
        {
            let mut w = lock(&world);
            for x in w.writes.iter_mut() {
                if let WriteState::Sent { lands_at } = x.state {
                    if lands_at <= now {
                        x.state = WriteState::Landed { at: lands_at };
                    }
                }
            }
        }
        // The twin starts, and later stops for good (killed: its unsent writes gone).
        if let Some((slot, from, until)) = twin_plan {
            if twin.is_none() && now >= from && now < until {
                twin = Some((slot, start(&world, slot, TWIN, now, &mut twin_rng)));
                out.faults += 1;
                out.twins += 1;
                out.history.push(format!(
                    "{now:>7} fault: a second process with the id {} starts beside it, until {until}",
                    IDS[slot]
                ));
            } else if twin.is_some() && now >= until {
                twin = None;
                let mut w = lock(&world);
                for x in w.writes.iter_mut() {
                    if x.by == (slot, TWIN) && x.state == WriteState::Admitted {
                        x.state = WriteState::Dropped;
                    }
                }
                drop(w);
                out.history.push(format!(
                    "{now:>7} the second process with the id {} stops",
                    IDS[slot]
                ));
                // A failover called through it whose announcement is not on the state topic is
                // lost with it: the operator's call failed, and the operator calls again.
                let announced = lock(&world)
                    .records
                    .iter()
                    .any(|r| matches!(r, PeerRecord::Failover { .. }));
                if !announced
                    && drivers
                        .iter()
                        .any(|(s, g, _, d)| (*s, *g) == (slot, TWIN) && *d == Driver::Announcing)
                {
                    drivers.retain(|(s, g, _, _)| (*s, *g) != (slot, TWIN));
                    if let Some(by) = epochs.get_mut(&1) {
                        by.remove(&slot);
                    }
                    called = false;
                    out.history.push(format!(
                        "{now:>7} the failover's call through it was lost: the operator calls again"
                    ));
                }
            }
        }
        // The freeze: the process stops, and when it resumes neither its lease clock nor its
        // wall clock has counted the pause (nothing reads its clocks while it is stopped).
        if let Some((slot, _, d)) = freeze_plan.filter(|(_, at, _)| now >= *at) {
            freeze_plan = None;
            let p = &mut procs[slot];
            if now >= p.paused_until && now >= p.dead_until && p.clock_offset_ms >= d {
                p.paused_until = now + d;
                // Its timers run on the clock that stood still: they fire that much later.
                p.next_heartbeat += d;
                p.next_read += d;
                p.clock_offset_ms -= d;
                p.skew_ms -= d;
                p.link.set_clock_skew_ms(p.skew_ms);
                p.unconfirmed_freeze = true;
                out.faults += 1;
                out.freezes += 1;
                out.history.push(format!(
                    "{now:>7} fault: stop the VM of {} for {d} ms, its clocks with it",
                    IDS[slot]
                ));
            }
        }
        if let Some((_, d)) = recreate_plan.filter(|(at, _)| now >= *at) {
            recreate_plan = None;
            let mut w = lock(&world);
            w.records.clear();
            w.incarnation += 1;
            w.down_until = w.down_until.max(now + d);
            drop(w);
            out.faults += 1;
            out.recreations += 1;
            out.history.push(format!(
                "{now:>7} fault: the state topic is deleted, and created again empty after {d} ms"
            ));
        }
        // Faults.
        if now < FAULTS_UNTIL_MS && rng.chance(8) {
            let slot = rng.range(0, 3) as usize;
            let kind = rng.range(0, 6);
            let what = match kind {
                0 => {
                    let d = rng.range(1_000, 25_000);
                    procs[slot].paused_until = procs[slot].paused_until.max(now + d);
                    format!("pause {} for {d} ms", IDS[slot])
                }
                1 => {
                    let d = rng.range(1_000, 25_000);
                    let mut w = lock(&world);
                    w.cut_until[slot] = w.cut_until[slot].max(now + d);
                    format!("cut {} off the state topic for {d} ms", IDS[slot])
                }
                2 => {
                    let d = rng.range(500, 5_000);
                    let mut w = lock(&world);
                    w.lose_answers_until[slot] = w.lose_answers_until[slot].max(now + d);
                    format!("lose the append answers of {} for {d} ms", IDS[slot])
                }
                3 => {
                    let d = rng.range(1_000, 15_000);
                    let mut w = lock(&world);
                    w.down_until = w.down_until.max(now + d);
                    format!("state topic down for {d} ms")
                }
                4 if procs[slot].dead_until <= now => {
                    let d = rng.range(500, 20_000);
                    let generation = procs[slot].generation;
                    // Its writes not sent yet die with it; the ones sent still land.
                    let mut w = lock(&world);
                    for x in w.writes.iter_mut() {
                        if x.by == (slot, generation) && x.state == WriteState::Admitted {
                            x.state = WriteState::Dropped;
                        }
                    }
                    drop(w);
                    procs[slot] = start(&world, slot, generation + 1, now + d, &mut rng);
                    procs[slot].dead_until = now + d;
                    // A failover it was driving is in its records: the new process resumes it
                    // (the executor's resume at start), announcing it again.
                    // (One that wrote its barriers resumes too until its handover is on the
                    // state topic: the executor hands over before it records STOPPED.)
                    let handed_over = lock(&world).handed_over;
                    let resumes = drivers.iter().any(|(s, g, _, d)| {
                        *s == slot
                            && *g == generation
                            && match d {
                                Driver::Done { .. } => !handed_over,
                                Driver::TakenOver { .. } | Driver::Adopted => false,
                                _ => true,
                            }
                    });
                    if resumes {
                        drivers.push((slot, generation + 1, 1, Driver::Announcing));
                    }
                    format!("kill {} and start it again after {d} ms", IDS[slot])
                }
                _ => {
                    let skew = rng.range(-120_000, 120_000);
                    procs[slot].skew_ms = skew;
                    procs[slot].link.set_clock_skew_ms(skew);
                    format!("move the wall clock of {} by {skew} ms", IDS[slot])
                }
            };
            out.faults += 1;
            out.history.push(format!("{now:>7} fault: {what}"));
        }
        // Each process that runs takes a step, in an order the seed chooses.
        // The processes running now: (slot, generation).
        let live: Vec<(usize, u32)> = procs
            .iter()
            .enumerate()
            .map(|(s, p)| (s, p.generation))
            .chain(twin.as_ref().map(|(s, t)| (*s, t.generation)))
            .collect();
        let first = rng.range(0, 3) as usize;
        let mut order: Vec<(usize, bool)> = (0..3).map(|k| ((first + k) % 3, false)).collect();
        if let Some((slot, _)) = &twin {
            order.insert(twin_rng.range(0, 4) as usize, (*slot, true));
        }
        for (slot, is_twin) in order {
            let (p, rng) = match (is_twin, twin.as_mut()) {
                (true, Some((_, t))) => (t, &mut twin_rng),
                _ => (&mut procs[slot], &mut rng),
            };
            if now < p.paused_until || now < p.dead_until {
                continue;
            }
            let generation = p.generation;
            let link = p.link.clone();
            clock::sim::set(Some(
                base + Duration::from_millis((now + p.clock_offset_ms) as u64),
            ));
            // Read the state topic (every 100 ms at its end, at once otherwise).
            if now >= p.next_read {
                let fence = p.fence.clone();
                let follow = p.follow.clone();
                let mut next = p.next;
                let at_end = rt.block_on(async {
                    let at_end = link.read_once(&mut next, &fence).await;
                    link.follow_once(&follow);
                    for _ in 0..8 {
                        tokio::task::yield_now().await;
                    }
                    at_end
                });
                p.next = next;
                p.next_read = now + if at_end { 100 } else { 0 };
            }
            if now >= p.next_heartbeat {
                let ok = rt.block_on(link.heartbeat_once());
                if p.unconfirmed_freeze
                    && lock(&world).heartbeat_acked.get(&(slot, generation)) == Some(&now)
                {
                    p.unconfirmed_freeze = false;
                    out.history.push(format!(
                        "{now:>7} {}'s first heartbeat since its freeze is acknowledged",
                        name(slot, generation)
                    ));
                }
                p.next_heartbeat = now
                    + if ok {
                        SESSION.as_millis() as i64 / 4
                    } else {
                        100
                    };
            }
            // The mirror's agent appends at every step while this process owns it, ownership
            // asked right before the append (review G2). Sabotaged, a process back from a pause
            // first appends once on the turn it had before.
            let fresh = link.agent_turn(MIRROR);
            let stale = p
                .last_turn
                .take()
                .filter(|_| sabotage == Sabotage::OwnershipTick && now - p.last_step > 1_000);
            for turn in stale.into_iter().chain([fresh.clone()]) {
                if let AgentTurn::Run { epoch } = turn {
                    let epoch = Epoch {
                        incarnation: lock(&world)
                            .read_incarnation
                            .get(&(slot, generation))
                            .copied()
                            .unwrap_or(0),
                        epoch,
                    };
                    let who = (slot, generation / TWIN * TWIN);
                    // Resumed from a freeze with no heartbeat acknowledged since: the window
                    // the module's doc describes; counted, not checked.
                    if p.unconfirmed_freeze {
                        if out.freeze_window_appends == 0 {
                            out.history.push(format!(
                                "{now:>7} {} appends for the agent at epoch {epoch}, resumed from a freeze, no heartbeat acknowledged since",
                                name(slot, generation)
                            ));
                        }
                        out.freeze_window_appends += 1;
                        continue;
                    }
                    if agent_appends
                        .last()
                        .is_none_or(|(_, s, e)| (*s, *e) != (who, epoch))
                    {
                        out.history.push(format!(
                            "{now:>7} {} appends for the agent at epoch {epoch}",
                            name(slot, generation)
                        ));
                    }
                    agent_appends.push((now, who, epoch));
                }
            }
            p.last_turn = Some(fresh);
            p.last_step = now;
            // Send the admitted writes (or drop those whose lease ended).
            {
                let lapsed = link.lease_problem().is_some();
                let local_now = now + p.clock_offset_ms;
                let in_window = p.unconfirmed_freeze;
                let mut w = lock(&world);
                let sabotage = w.sabotage;
                let mut sent = Vec::new();
                for (i, x) in w.writes.iter_mut().enumerate() {
                    if x.by != (slot, generation) || x.state != WriteState::Admitted {
                        continue;
                    }
                    if sabotage != Sabotage::SendDeadline
                        && (lapsed || local_now > x.deadline_local)
                    {
                        x.state = WriteState::Dropped;
                        continue;
                    }
                    let delay = if rng.chance(100) {
                        rng.range(0, SETTLE_MS)
                    } else {
                        rng.range(0, 50)
                    };
                    x.state = WriteState::Sent {
                        lands_at: now + delay,
                    };
                    x.in_freeze_window = in_window;
                    sent.push((i, delay));
                }
                drop(w);
                for (i, delay) in sent {
                    out.history.push(format!(
                        "{now:>7} {} sends write {i} (lands in {delay} ms){}",
                        name(slot, generation),
                        if in_window {
                            ", resumed from a freeze, no heartbeat acknowledged since"
                        } else {
                            ""
                        }
                    ));
                }
            }
            // Drive what the state topic named this process to drive.
            let named: Vec<u32> = {
                let mut w = lock(&world);
                let (mine, rest): (Vec<_>, Vec<_>) = w
                    .drive
                    .drain(..)
                    .partition(|(s, g, _)| *s == slot && *g == generation);
                w.drive = rest;
                mine.into_iter().map(|(_, _, e)| e).collect()
            };
            for epoch in named {
                if !drivers
                    .iter()
                    .any(|(s, g, e, _)| *s == slot && *g == generation && *e == epoch)
                {
                    if lock(&world).handed_over {
                        drivers.push((slot, generation, epoch, Driver::Adopted));
                        out.history.push(format!(
                            "{now:>7} {} adopts the handover of failover {FID} (epoch {epoch}): its barriers are written",
                            name(slot, generation)
                        ));
                        continue;
                    }
                    epochs.entry(epoch).or_default().insert(slot);
                    drivers.push((slot, generation, epoch, Driver::DrainingOwn));
                    if epoch > 1 {
                        out.takeovers += 1;
                    }
                    out.history.push(format!(
                        "{now:>7} {} drives failover {FID} at epoch {epoch}",
                        name(slot, generation)
                    ));
                }
            }
            // Admit a mirror write, unless this process's controller already runs the failover.
            let stopping = drivers
                .iter()
                .any(|(s, g, _, _)| *s == slot && *g == generation);
            if !stopping && rng.chance(300) && link.mirror_write_refusal(MIRROR).is_none() {
                let remaining = link.lease_remaining().unwrap_or_default().as_millis() as i64;
                let mut w = lock(&world);
                let i = w.writes.len();
                w.writes.push(Write {
                    by: (slot, generation),
                    admitted_at: now,
                    deadline: now + remaining,
                    deadline_local: now + p.clock_offset_ms + remaining,
                    in_freeze_window: false,
                    state: WriteState::Admitted,
                });
                out.admitted += 1;
                out.history.push(format!(
                    "{now:>7} {} admits write {i} (send deadline in {remaining} ms)",
                    name(slot, generation)
                ));
            }
            // The failover, through this process.
            // The operator calls an instance that works.
            if !called && now >= failover_at && unreadable.is_none_or(|(s, _)| s != slot) {
                called = true;
                epochs.entry(1).or_default().insert(slot);
                drivers.push((slot, generation, 1, Driver::Announcing));
                out.history.push(format!(
                    "{now:>7} failover {FID} called through {}",
                    name(slot, generation)
                ));
            }
            for (ds, dg, de, d) in drivers.iter_mut() {
                if *ds != slot || *dg != generation {
                    continue;
                }
                let next = match d.clone() {
                    Driver::Announcing => match rt.block_on(link.announce(MIRROR, FID)) {
                        Ok(()) => Some(Driver::DrainingOwn),
                        Err(NotDriving::TakenOver { by, .. }) => Some(Driver::TakenOver { by }),
                        Err(_) => None,
                    },
                    Driver::DrainingOwn => {
                        let w = lock(&world);
                        let busy = w.writes.iter().any(|x| {
                            x.by == (slot, generation)
                                && matches!(x.state, WriteState::Admitted | WriteState::Sent { .. })
                        });
                        drop(w);
                        (!busy).then(|| Driver::Waiting {
                            first: link.fence_waiting_for(MIRROR, FID),
                        })
                    }
                    Driver::Waiting { first } => match link.check_driving(MIRROR, FID) {
                        Err(NotDriving::TakenOver { by, .. }) => Some(Driver::TakenOver { by }),
                        Err(_) => None,
                        Ok(()) if !link.fence_waiting_for(MIRROR, FID).is_empty() => None,
                        Ok(()) => {
                            let settle = link.lease_end_of_waited_out(MIRROR, FID, &first);
                            Some(Driver::Done {
                                barrier_at: now,
                                settle_ms: settle
                                    .filter(|_| sabotage != Sabotage::Settle)
                                    .map(|ms| ms - EPOCH_MS),
                            })
                        }
                    },
                    Driver::Done { .. } | Driver::TakenOver { .. } | Driver::Adopted => None,
                };
                if let Some(n) = next {
                    out.history.push(format!(
                        "{now:>7} {} failover: {n:?}",
                        name(slot, generation)
                    ));
                    if matches!(n, Driver::Done { .. }) {
                        if let Some((s0, g0, at0)) = barriers
                            .iter()
                            .find(|(e, s0, g0, _)| {
                                *e == *de
                                    && live.contains(&(*s0, *g0))
                                    && (*s0, *g0) != (slot, generation)
                            })
                            .map(|(_, s0, g0, at0)| (*s0, *g0, *at0))
                        {
                            out.violations.push(format!(
                                "{} wrote the barriers of failover {FID} at epoch {de} at {now}, after {} did at {at0} and while it runs",
                                name(slot, generation),
                                name(s0, g0)
                            ));
                        }
                        barriers.push((*de, slot, generation, now));
                    }
                    *d = n;
                }
            }
            make_writable(&world, &rt, p, slot, &drivers, &mut out, now);
        }
        // One instance id, one lease holder (review G12): a process and its twin never both
        // hold a lease while both run.
        if let Some((slot, t)) = &twin {
            let o = &procs[*slot];
            let holds = |p: &Proc| {
                clock::sim::set(Some(
                    base + Duration::from_millis((now + p.clock_offset_ms) as u64),
                ));
                now >= p.paused_until && now >= p.dead_until && p.link.lease_problem().is_none()
            };
            if holds(o) && holds(t) && !two_leases {
                two_leases = true;
                out.violations.push(format!(
                    "{} and {} both hold a lease at {now}",
                    name(*slot, o.generation),
                    name(*slot, t.generation)
                ));
            }
        }
        clock::sim::set(None);
    }
    crate::mirror::screening::sim_clock::set(None);
    drop(rt);
    for (epoch, by) in &epochs {
        if by.len() > 1 {
            out.violations.push(format!(
                "epoch {epoch} of failover {FID} was driven by {} instances: {:?}",
                by.len(),
                by.iter().map(|s| IDS[*s]).collect::<Vec<_>>()
            ));
        }
    }
    check(&world, &procs, &drivers, &mut out, base, now, unreadable);
    check_agent(&agent_appends, &procs, &mut out, base, now);
    out
}

/// The agent's rule: at most one instance appends per ownership epoch, never an epoch below one
/// that already appended, and at the end exactly one process runs it.
fn check_agent(
    appends: &[(i64, (usize, u32), Epoch)],
    procs: &[Proc],
    out: &mut Outcome,
    base: Instant,
    now: i64,
) {
    out.agent_appends = appends.len();
    let mut by_epoch: std::collections::BTreeMap<Epoch, (usize, u32)> = Default::default();
    let mut highest: Option<(i64, (usize, u32), Epoch)> = None;
    // Each process and epoch is reported once per rule (its first offending append).
    let mut reported: std::collections::BTreeSet<((usize, u32), Epoch, bool)> = Default::default();
    for &(t, who, epoch) in appends {
        if let Some(&other) = by_epoch.get(&epoch) {
            if other != who && reported.insert((who, epoch, false)) {
                out.violations.push(format!(
                    "{} appended for the agent at epoch {epoch} at {t}, which {} owns",
                    name(who.0, who.1),
                    name(other.0, other.1)
                ));
            }
        }
        by_epoch.entry(epoch).or_insert(who);
        match highest {
            Some((ht, hs, he)) if epoch < he => {
                if reported.insert((who, epoch, true)) {
                    out.violations.push(format!(
                        "{} appended for the agent at epoch {epoch} at {t}, after {} did at epoch {he} at {ht}",
                        name(who.0, who.1),
                        name(hs.0, hs.1)
                    ));
                }
            }
            _ => highest = Some((t, who, epoch)),
        }
    }
    out.agent_epoch = highest.map_or(0, |h| h.2.epoch);
    let running: Vec<&str> = procs
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            clock::sim::set(Some(
                base + Duration::from_millis((now + p.clock_offset_ms) as u64),
            ));
            matches!(p.link.agent_turn(MIRROR), AgentTurn::Run { .. })
        })
        .map(|(slot, _)| IDS[slot])
        .collect();
    clock::sim::set(None);
    if running.len() != 1 {
        out.not_converged.push(format!(
            "{} processes run the agent at the end: {running:?}",
            running.len()
        ));
    }
}

fn check(
    world: &Shared,
    procs: &[Proc],
    drivers: &[(usize, u32, u32, Driver)],
    out: &mut Outcome,
    base: Instant,
    now: i64,
    unreadable: Option<(usize, i64)>,
) {
    let w = lock(world);
    out.landed = w
        .writes
        .iter()
        .filter(|x| matches!(x.state, WriteState::Landed { .. }))
        .count();
    // Every barrier written, with the settle its driver checks it for.
    let done: Vec<(i64, Option<i64>)> = drivers
        .iter()
        .filter_map(|(_, _, _, d)| match d {
            Driver::Done {
                barrier_at,
                settle_ms,
            } => Some((*barrier_at, *settle_ms)),
            _ => None,
        })
        .collect();
    match done.iter().map(|(b, _)| *b).min() {
        None => out.not_converged.push(format!(
            "the failover did not reach its barrier by the end of the run: {drivers:?}"
        )),
        Some(first) => {
            for (i, x) in w.writes.iter().enumerate() {
                let WriteState::Landed { at } = x.state else {
                    continue;
                };
                // A later barrier lies after it, or a driver re-reads the log behind its
                // barrier until after it landed.
                let covered = done
                    .iter()
                    .any(|(b, s)| at <= *b || s.is_some_and(|s| at <= s + SETTLE_MS));
                if at > first && !covered && x.in_freeze_window {
                    out.freeze_window_writes += 1;
                } else if at > first && !covered {
                    out.violations.push(format!(
                        "write {i} of {} (admitted at {}, send deadline {}) landed at {at}, after the barrier at {first} and outside every settle: {done:?}",
                        name(x.by.0, x.by.1),
                        x.admitted_at,
                        x.deadline,
                    ));
                }
            }
        }
    }
    drop(w);
    for (slot, p) in procs.iter().enumerate() {
        // A process that cannot read the state topic cannot learn of the failover.
        if unreadable.is_some_and(|(s, _)| s == slot) {
            continue;
        }
        clock::sim::set(Some(
            base + Duration::from_millis((now + p.clock_offset_ms) as u64),
        ));
        match p.link.mirror_write_refusal(MIRROR) {
            Some(PeerRefusal::FailedOver(_)) => {}
            other => out.not_converged.push(format!(
                "{} still admits or does not know the failover at the end: {other:?}",
                IDS[slot]
            )),
        }
        if p.writable_at.is_none() {
            out.not_converged.push(format!(
                "{} never made the mirror's partitions writable (the handover: {:?})",
                IDS[slot],
                p.link.handover(MIRROR, FID).map(|h| h.by)
            ));
        }
    }
    clock::sim::set(None);
}

fn seeds() -> u64 {
    std::env::var("MIRRORGATE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

fn tail(h: &[String], n: usize) -> String {
    h[h.len().saturating_sub(n)..].join("\n")
}

/// Seeds `shard`, `shard + SHARDS`, … below [`seeds`]: every run keeps the promise and
/// converges. (The seeds are split over several tests so that they run on every core.)
fn check_seeds(shard: u64) {
    if let Some(seed) = std::env::var("MIRRORGATE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        if seed % SHARDS != shard {
            return;
        }
        let o = run(seed, Sabotage::None);
        println!("{}", o.history.join("\n"));
        assert!(
            o.violations.is_empty() && o.not_converged.is_empty(),
            "seed {seed}: {:?} {:?}",
            o.violations,
            o.not_converged
        );
        return;
    }
    let (mut admitted, mut landed, mut faults, mut takeovers, mut runs) = (0, 0, 0, 0, 0);
    let (mut twins, mut freezes, mut in_window, mut window_appends) = (0, 0, 0, 0);
    let mut recreations = 0;
    let (mut agent_appends, mut agent_epochs) = (0, 0);
    for seed in (shard..seeds()).step_by(SHARDS as usize) {
        let o = run(seed, Sabotage::None);
        assert!(
            o.violations.is_empty() && o.not_converged.is_empty(),
            "seed {seed} (replay: MIRRORGATE_SIM_SEED={seed} cargo test --lib instances::sim_tests -- --nocapture):\nviolations: {:#?}\nnot converged: {:#?}\nlast events:\n{}",
            o.violations,
            o.not_converged,
            tail(&o.history, 60)
        );
        admitted += o.admitted;
        landed += o.landed;
        faults += o.faults;
        takeovers += o.takeovers;
        twins += o.twins;
        freezes += o.freezes;
        in_window += o.freeze_window_writes;
        window_appends += o.freeze_window_appends;
        recreations += o.recreations;
        agent_appends += o.agent_appends;
        agent_epochs += o.agent_epoch as usize;
        runs += 1;
    }
    println!(
        "shard {shard}: {runs} seeds, {admitted} mirror writes admitted, {landed} landed, {faults} faults, {takeovers} takeovers, {twins} twins, {freezes} freezes ({in_window} writes landed late and {window_appends} agent appends from the window after one), {recreations} state topics recreated, {agent_appends} agent appends, {agent_epochs} agent ownership epochs"
    );
}

const SHARDS: u64 = 4;

#[test]
fn no_mirror_write_lands_after_the_barrier_beyond_its_settle_and_every_instance_converges_0() {
    check_seeds(0);
}

#[test]
fn no_mirror_write_lands_after_the_barrier_beyond_its_settle_and_every_instance_converges_1() {
    check_seeds(1);
}

#[test]
fn no_mirror_write_lands_after_the_barrier_beyond_its_settle_and_every_instance_converges_2() {
    check_seeds(2);
}

#[test]
fn no_mirror_write_lands_after_the_barrier_beyond_its_settle_and_every_instance_converges_3() {
    check_seeds(3);
}

/// A positive control: some seed's run fails with `sabotage` (else "no seed caught `what`").
fn assert_caught(sabotage: Sabotage, what: &str) {
    let found = first_violation(sabotage);
    println!("sabotage {sabotage:?}: {found:?}");
    assert!(found.is_some(), "no seed caught {what}");
}

/// The first seed (of at most `MIRRORGATE_SIM_SEEDS`) whose run breaks the promise or does
/// not converge with `sabotage`, and why.
fn first_violation(sabotage: Sabotage) -> Option<(u64, String)> {
    (0..seeds()).find_map(|seed| {
        let o = run(seed, sabotage);
        o.violations
            .first()
            .or(o.not_converged.first())
            .map(|v| (seed, v.clone()))
    })
}

#[test]
fn a_fence_acknowledged_before_its_writes_were_answered_is_caught() {
    assert_caught(Sabotage::Fence, "the sabotaged fence");
}

#[test]
fn a_write_sent_after_its_lease_ended_is_caught() {
    assert_caught(Sabotage::SendDeadline, "writes sent without a lease");
}

#[test]
fn a_barrier_not_settled_for_a_waited_out_instance_is_caught() {
    assert_caught(Sabotage::Settle, "the missing settle (review G1)");
}

#[test]
fn an_agent_append_on_the_ownership_from_before_a_pause_is_caught() {
    assert_caught(
        Sabotage::OwnershipTick,
        "a former agent owner appending after a pause (review G2)",
    );
}

#[test]
fn liveness_by_the_writers_wall_clock_is_caught() {
    assert_caught(
        Sabotage::WallClockLiveness,
        "an instance with a lagging clock left out (review G5)",
    );
}

#[test]
fn an_instance_heartbeating_without_reading_is_caught() {
    assert_caught(
        Sabotage::HeartbeatUnread,
        "an instance that heartbeats but cannot read (review G10)",
    );
}

#[test]
fn a_partition_made_writable_before_the_state_topic_names_it_stopped_is_caught() {
    assert_caught(
        Sabotage::StoppedBeforeHandover,
        "a driver recording STOPPED before its handover (review G3)",
    );
}

#[test]
fn a_second_process_with_an_instances_id_left_unnoticed_is_caught() {
    assert_caught(
        Sabotage::TwinIgnored,
        "two processes with one instance id (review G12)",
    );
}

/// Before G13 (the broker's append time not compared with the lease clock): a process whose
/// VM was stopped with its clocks resumes on its lease, and once its first heartbeat is
/// acknowledged (past the window the checker allows) it sends a write admitted before the
/// freeze, whose send deadline its clock never reached. The first of the default seeds that
/// shows it is 1250 (pinned: searching for it would take a minute of the unit tests).
#[test]
fn a_vm_stopped_with_its_clock_resuming_on_its_lease_is_caught() {
    let o = run(1250, Sabotage::BrokerClockIgnored);
    println!(
        "sabotage BrokerClockIgnored, seed 1250: {:?}",
        o.violations.first()
    );
    assert!(
        o.violations
            .iter()
            .any(|v| v.contains("after the barrier") && v.contains("outside every settle")),
        "seed 1250 did not catch a lease kept across a freeze: {:?}",
        o.violations
    );
    assert!(o.freezes > 0);
}

/// The same seed with the broker's time compared: the write is dropped at the heartbeat that
/// shows the freeze.
#[test]
fn a_vm_stopped_with_its_clock_loses_its_lease_at_its_first_heartbeat_after_it() {
    let o = run(1250, Sabotage::None);
    assert!(
        o.violations.is_empty() && o.not_converged.is_empty(),
        "{:?} {:?}",
        o.violations,
        o.not_converged
    );
    assert!(
        o.history
            .iter()
            .any(|h| h.contains("first heartbeat since its freeze is acknowledged")),
        "seed 1250 no longer draws a freeze that ends in a heartbeat"
    );
}

/// Seeds that found a defect, whether or not the default number of seeds reaches them: S1
/// (189), S2 (1467), S3 (6425, found by a campaign of 10,000 seeds), S4 (2847) and S5 (445).
const DEFECT_SEEDS: [u64; 5] = [189, 1467, 2847, 6425, 445];

#[test]
fn the_seeds_that_found_defects_keep_the_promise_and_converge() {
    for seed in DEFECT_SEEDS {
        let o = run(seed, Sabotage::None);
        assert!(
            o.violations.is_empty() && o.not_converged.is_empty(),
            "seed {seed}: {:#?} {:#?}",
            o.violations,
            o.not_converged
        );
    }
}

/// Defect S3's rule switched off (an owner keeps its ownership epoch across a lapse of its
/// lease, and a new process of the id runs on its id's epoch). Seed 6425 found S3 through a
/// pause; with the handover of a finished failover modelled (no claim after it) its log, and
/// so its timing, changed. Seed 2453 catches the same rule through a second process with the
/// owner's id (review G12), which runs the agent on the epoch its id claimed.
#[test]
fn an_agent_owner_keeping_its_epoch_across_a_lapse_of_its_lease_is_caught() {
    let o = run(2453, Sabotage::OwnershipAcrossLapses);
    println!(
        "sabotage OwnershipAcrossLapses, seed 2453: {:?}",
        o.violations.first()
    );
    assert!(
        o.violations
            .iter()
            .any(|v| v.contains("appended for the agent at epoch")),
        "seed 2453 did not catch the ownership kept across a lapse: {:?}",
        o.violations
    );
}

#[test]
fn a_seed_replays_the_same_history() {
    let a = run(7, Sabotage::None).history;
    let b = run(7, Sabotage::None).history;
    assert!(!a.is_empty());
    assert_eq!(a, b);
}
