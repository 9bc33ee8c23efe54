//! Fault-injection hooks of the failover, read once from the environment at start and passed to
//! the mirror controller (the restart and fault tests of `integration/` set them; a gateway in
//! production runs with none).
//!
//! Owns: the names and meaning of the `MIRRORGATE_CRASH_AFTER` and `MIRRORGATE_TEST_*` variables
//! the controller honours, and the crash points of a failover. Must not touch: anything else of
//! the environment (the agent's own hooks are read where they act:
//! `MIRRORGATE_TEST_LOSE_AGENT_APPEND_ANSWERS` by `agent.rs`,
//! `MIRRORGATE_TEST_HOLD_AGENT_DISCOVERY_WHILE` by `agent/discovery.rs`,
//! `MIRRORGATE_TEST_HOLD_AGENT_MARKERS_WHILE` by `agent/partition.rs`,
//! `MIRRORGATE_TEST_HOLD_BETWEEN_SOURCE_READS_WHILE` by `admin/switchover/source.rs`,
//! `MIRRORGATE_TEST_HOLD_AGENT_CLAIM_WHILE` by `instances/agents.rs`,
//! `MIRRORGATE_TEST_HOLD_HEARTBEATS_WHILE` by `instances.rs`), the failover's
//! rules.
//!
//! `MIRRORGATE_TEST_SABOTAGE` ([`Sabotage`]) is read here too, once per process, and asked where
//! the protection it switches off acts: the chaos run's positive controls
//! (`mirrorgate-bench chaos --sabotage NAME`) start gateways with one protection off to show
//! that its checker then fails the run.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// A protection switched off by `MIRRORGATE_TEST_SABOTAGE=barrier|fence|screening|groups` (never in
/// production: the gateway logs an ERROR at start when it is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// Barrier writes are skipped and reported written at the log end: partitions turn
    /// writable with no barrier in their log.
    Barrier,
    /// The mirror listener admits writes to partitions a failover fenced or stopped.
    Fence,
    /// Every protection against producer-id collisions is off: no producer id is screened
    /// (neither InitProducerId answers nor local writes of mirrored producer ids are checked
    /// against the screening set), the failover does not advance the brokers' producer-id
    /// allocators, and a local write acknowledged below the barrier passes as acknowledged.
    Screening,
    /// The consumer group offset sync commits the mirrored end of each partition instead of
    /// where the group is: a group resumes on the destination past records it never read.
    Groups,
}

impl Sabotage {
    /// Every sabotage, as `MIRRORGATE_TEST_SABOTAGE` names it.
    pub const ALL: [Sabotage; 4] = [
        Sabotage::Barrier,
        Sabotage::Fence,
        Sabotage::Screening,
        Sabotage::Groups,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Sabotage::Barrier => "barrier",
            Sabotage::Fence => "fence",
            Sabotage::Screening => "screening",
            Sabotage::Groups => "groups",
        }
    }

    pub fn parse(s: &str) -> Option<Sabotage> {
        Sabotage::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// The sabotage this process runs with (`MIRRORGATE_TEST_SABOTAGE`, read once).
    pub fn active() -> Option<Sabotage> {
        static ACTIVE: OnceLock<Option<Sabotage>> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            std::env::var("MIRRORGATE_TEST_SABOTAGE")
                .ok()
                .and_then(|v| Sabotage::parse(&v))
        })
    }

    /// Whether this process runs with `self` switched off.
    pub fn is_on(self) -> bool {
        Sabotage::active() == Some(self)
    }
}

/// A point of the failover right after a step where `MIRRORGATE_CRASH_AFTER` can end the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Every partition recorded STOPPING (the failover call's own write).
    FencedPersisted,
    /// FENCED recorded.
    Fenced,
    /// Barriers acknowledged by the brokers, not yet recorded.
    BarrierWritten,
    /// The screening set holding the partitions' producers is durable.
    ScreenPersisted,
    /// BARRIER_PERSISTED recorded.
    BarrierPersisted,
    /// PSM_CLEARED and STOPPED recorded.
    PsmCleared,
}

impl CrashPoint {
    /// Every crash point, in failover order.
    pub const ALL: [CrashPoint; 6] = [
        CrashPoint::FencedPersisted,
        CrashPoint::Fenced,
        CrashPoint::BarrierWritten,
        CrashPoint::ScreenPersisted,
        CrashPoint::BarrierPersisted,
        CrashPoint::PsmCleared,
    ];

    /// The value of `MIRRORGATE_CRASH_AFTER` that names this point.
    pub const fn as_str(self) -> &'static str {
        match self {
            CrashPoint::FencedPersisted => "fenced_persisted",
            CrashPoint::Fenced => "fenced",
            CrashPoint::BarrierWritten => "barrier_written",
            CrashPoint::ScreenPersisted => "screen_persisted",
            CrashPoint::BarrierPersisted => "barrier_persisted",
            CrashPoint::PsmCleared => "psm_cleared",
        }
    }

    /// The point named `s`, if any.
    pub fn parse(s: &str) -> Option<CrashPoint> {
        CrashPoint::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// How a crash point ends the failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrashMode {
    /// End the process (`std::process::abort`): what the restart tests need.
    #[default]
    Abort,
    /// Unwind the failover's task instead (unit tests, which run in one process and then start
    /// a new controller over the same state directory).
    Unwind,
}

/// Every fault-injection hook of the failover (all off by default).
#[derive(Debug, Clone, Default)]
pub struct FaultHooks {
    /// `MIRRORGATE_CRASH_AFTER=fenced_persisted|fenced|barrier_written|screen_persisted|
    /// barrier_persisted|psm_cleared`: end the process right after that step.
    pub crash_after: Option<CrashPoint>,
    pub crash_mode: CrashMode,
    /// `MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS`: hold the failover after fencing for this long.
    pub hold_after_fence: Duration,
    /// `MIRRORGATE_TEST_HOLD_AFTER_FENCE_UNTIL=PATH`: hold the failover after fencing until PATH
    /// exists (120 s at most), so a test can act inside that window without racing a timer.
    pub hold_after_fence_until: Option<PathBuf>,
    /// `MIRRORGATE_TEST_HOLD_BEFORE_HANDOVER_UNTIL=PATH`: hold the failover after its barriers
    /// are recorded and the PSM cleared, before the partitions are handed to the other
    /// instances, until PATH exists (120 s at most): a test can kill the driver there.
    pub hold_before_handover_until: Option<PathBuf>,
    /// `MIRRORGATE_TEST_HOLD_ADOPTION_UNTIL=PATH`: a partition adopted from another instance's
    /// handover stays STOPPING (DRAINED), as while this instance's PSM is still rebuilding,
    /// until PATH exists (review G4).
    pub hold_adoption_until: Option<PathBuf>,
    /// `MIRRORGATE_TEST_FAIL_BARRIER_WRITES=N`: the first N barrier writes fail.
    pub fail_barrier_writes: i64,
    /// `MIRRORGATE_TEST_TXN_MARKERS_ERROR=CODE`: every barrier marker is answered with that error
    /// code instead of sending WriteTxnMarkers (e.g. 31, CLUSTER_AUTHORIZATION_FAILED, for the
    /// fallback to the data barrier).
    pub txn_markers_error: Option<i16>,
    /// `MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS=N`: the answers of the first N
    /// WriteTxnMarkers requests are dropped after the broker gave them, as a connection lost
    /// after the markers were appended.
    pub lose_marker_answers: i64,
    /// `MIRRORGATE_TEST_BARRIER_CLOCK_SKEW_MS`: shifts the gateway clock as barrier writes see
    /// it, standing for a gateway whose wall clock is off from the brokers'.
    pub barrier_clock_skew_ms: i64,
    /// `MIRRORGATE_TEST_PEER_CLOCK_SKEW_MS`: shifts the wall clock this instance writes into its
    /// state-topic records (heartbeats, claims), standing for a host whose clock is off from the
    /// other instances' (review G5).
    pub peer_clock_skew_ms: i64,
}

impl FaultHooks {
    /// The hooks the environment sets (read once, at start).
    pub fn from_env() -> FaultHooks {
        let num = |var: &str| std::env::var(var).ok().and_then(|v| v.parse::<i64>().ok());
        FaultHooks {
            crash_after: std::env::var("MIRRORGATE_CRASH_AFTER")
                .ok()
                .and_then(|v| CrashPoint::parse(&v)),
            crash_mode: CrashMode::Abort,
            hold_after_fence: Duration::from_millis(
                num("MIRRORGATE_TEST_HOLD_AFTER_FENCE_MS")
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0),
            ),
            hold_after_fence_until: std::env::var_os("MIRRORGATE_TEST_HOLD_AFTER_FENCE_UNTIL")
                .map(PathBuf::from),
            hold_before_handover_until: std::env::var_os(
                "MIRRORGATE_TEST_HOLD_BEFORE_HANDOVER_UNTIL",
            )
            .map(PathBuf::from),
            hold_adoption_until: std::env::var_os("MIRRORGATE_TEST_HOLD_ADOPTION_UNTIL")
                .map(PathBuf::from),
            fail_barrier_writes: num("MIRRORGATE_TEST_FAIL_BARRIER_WRITES").unwrap_or(0),
            txn_markers_error: std::env::var("MIRRORGATE_TEST_TXN_MARKERS_ERROR")
                .ok()
                .and_then(|v| v.parse().ok()),
            lose_marker_answers: num("MIRRORGATE_TEST_LOSE_BARRIER_MARKER_ANSWERS").unwrap_or(0),
            barrier_clock_skew_ms: num("MIRRORGATE_TEST_BARRIER_CLOCK_SKEW_MS").unwrap_or(0),
            peer_clock_skew_ms: num("MIRRORGATE_TEST_PEER_CLOCK_SKEW_MS").unwrap_or(0),
        }
    }

    /// Crash here when `MIRRORGATE_CRASH_AFTER` names `point`.
    pub fn crash_point(&self, point: CrashPoint) {
        if self.crash_after != Some(point) {
            return;
        }
        let step = point.as_str();
        match self.crash_mode {
            CrashMode::Abort => {
                eprintln!("mirrorgate: MIRRORGATE_CRASH_AFTER={step}: aborting");
                std::process::abort();
            }
            CrashMode::Unwind => panic!("crash after {step} (fault hook)"),
        }
    }

    /// The hold after fencing that the hooks ask for (none by default).
    pub async fn hold_after_fence(&self) {
        if !self.hold_after_fence.is_zero() {
            tokio::time::sleep(self.hold_after_fence).await;
        }
        if let Some(path) = &self.hold_after_fence_until {
            hold_until(path).await;
        }
    }

    /// The hold before the handover that the hooks ask for (none by default).
    pub async fn hold_before_handover(&self) {
        if let Some(path) = &self.hold_before_handover_until {
            hold_until(path).await;
        }
    }
}

impl FaultHooks {
    /// Whether the hooks hold adoptions now (`MIRRORGATE_TEST_HOLD_ADOPTION_UNTIL`).
    pub fn adoption_held(&self) -> bool {
        self.hold_adoption_until
            .as_deref()
            .is_some_and(|p| !p.exists())
    }
}

/// Wait until `path` exists, 120 s at most.
async fn hold_until(path: &std::path::Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !tokio::fs::try_exists(path).await.unwrap_or(false)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
