//! What the admission asks of the other gateway instances: [`PeerGate`], implemented by the
//! instances' link to the state topic (`instances::PeerLink`), and [`PeerRefusal`], its answer.
//! With one instance no gate is set and nothing is asked.
//!
//! Owns: that question and its answer's shape. Must not touch: the state topic, leases, how the
//! answers are found (all `instances/`).

use std::time::Duration;

/// Why the peers refuse a mirror write here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerRefusal {
    /// Passing: this instance has not confirmed its view of the state topic lately (it just
    /// started, was paused, or cannot reach the topic); a retry may be admitted.
    NoLease(String),
    /// Lasting: the mirror is failed over (announced on the state topic, through any
    /// instance), or paused.
    FailedOver(String),
}

impl PeerRefusal {
    pub fn message(&self) -> &str {
        match self {
            PeerRefusal::NoLease(m) | PeerRefusal::FailedOver(m) => m,
        }
    }
}

/// The other instances as the admission sees them.
pub trait PeerGate: Send + Sync {
    /// How long this instance's lease still holds (`None`: it holds none now).
    fn lease_remaining(&self) -> Option<Duration>;
    /// Why this instance holds no lease on the state topic now (`None`: it does).
    fn lease_problem(&self) -> Option<String>;
    /// Why a mirror write of `mirror` is refused here (`None`: admitted as far as the peers go):
    /// a failover announced through any instance, a pause, or no lease.
    fn mirror_write_refusal(&self, mirror: &str) -> Option<PeerRefusal>;
    /// Why `mirror`'s topics may be failed over as far as the state topic says (`None`: they
    /// are not).
    fn failover_refusal(&self, mirror: &str) -> Option<PeerRefusal>;
    /// The instance and failover id that failed `mirror` over, when another instance did.
    fn failed_over_by(&self, mirror: &str) -> Option<(String, String)>;
    /// Why this instance's forward listener of `mirror` may not send the source a request now
    /// (`None`: it may, as far as the peers go): it holds no lease on the state topic (it was
    /// paused, is cut off, or has just started: a failover or a switchover's hold recorded
    /// there through another instance would not be known here), a failover of the mirror is
    /// announced there, or, unless `held_here` (the listener knows of its hold already), a
    /// switchover through another instance holds the listener.
    fn forward_source_refusal(&self, mirror: &str, held_here: bool) -> Option<String>;
}
