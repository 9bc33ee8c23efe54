//! The forward listeners' side of the state topic: which mirrors this instance has a forward
//! listener for (announced in its heartbeats), a switchover's hold recorded for every instance,
//! its release, and the acknowledgements (see [`super::view`]'s `forward_holds`); and what each
//! instance's forward listener passed that the destination lacks after a failover.
//!
//! Owns: writing those records and waiting for the acknowledgements. Must not touch: the
//! forward listener (the caller holds and releases it), the switchover's other steps.

use std::time::{Duration, Instant};

use super::records::PeerRecord;
use super::view::HoldOrder;
use super::{clock, PeerLink};

/// A step of a switchover's hold (or a switch back's) recorded on the state topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldStep {
    /// Every instance holds its forward listener.
    Hold,
    /// The agent mirrored the source's log end under the hold (the failover follows); a
    /// switch back: the old source reached the destination's ends (its failover follows).
    CaughtUp,
    /// The switchover gave up before its failover: every instance releases its listener; a
    /// switch back gave up before the old source's failover: back to the destination.
    Release,
    /// A switch back is through: every instance's listener goes on to the source once the
    /// mirror mirrors again there.
    Returned,
}

/// How often a switchover looks for the other instances' acknowledgements.
const POLL: Duration = Duration::from_millis(20);

impl PeerLink {
    /// The mirrors this instance has a forward listener for; announced in its heartbeats.
    pub fn set_forward(&self, mirrors: Vec<String>) {
        let _ = self.forward.set(mirrors);
    }

    /// Record a step of a switchover through this instance, which holds the forward
    /// listeners of `mirror` on every instance for hold `hold_id`, at most `hold` before its
    /// failover: the hold, the catch-up under it (just before the failover), or its release
    /// (it gave up before its failover).
    pub async fn record_forward_hold(
        &self,
        mirror: &str,
        hold_id: &str,
        hold: Duration,
        step: HoldStep,
        back: bool,
    ) -> Result<(), String> {
        let held = !matches!(step, HoldStep::Release | HoldStep::Returned);
        let r = PeerRecord::ForwardHold {
            mirror: mirror.to_string(),
            hold_id: hold_id.to_string(),
            by: self.me(),
            held,
            hold_ms: hold.as_millis() as u64,
            caught_up: matches!(step, HoldStep::CaughtUp | HoldStep::Returned),
            back,
            at_ms: self.now_ms(),
        };
        self.log.append(&r).await.map_err(|e| {
            format!(
                "cannot record the forward listeners' {} on the state topic {}: {e}",
                if held { "hold" } else { "release" },
                self.topic
            )
        })
    }

    /// Record that this instance holds its forward listener of `mirror` for hold `hold_id`
    /// with no connection to the source left.
    pub async fn acknowledge_forward_hold(
        &self,
        mirror: &str,
        hold_id: &str,
    ) -> Result<(), String> {
        let r = PeerRecord::ForwardHeld {
            mirror: mirror.to_string(),
            hold_id: hold_id.to_string(),
            instance: self.me(),
            at_ms: self.now_ms(),
        };
        self.log.append(&r).await.map_err(|e| {
            format!(
                "cannot acknowledge the forward hold on the state topic {}: {e}",
                self.topic
            )
        })
    }

    /// Publish what this instance's forward listener of `mirror` passed that the destination
    /// lacks after failover `fid` (`loss`, at its completed report's positions).
    pub async fn publish_forwarded_loss(
        &self,
        mirror: &str,
        fid: &str,
        loss: crate::mirror::forwarded_acks::ForwardedLoss,
    ) -> Result<(), String> {
        let r = PeerRecord::ForwardedLoss {
            mirror: mirror.to_string(),
            failover_id: fid.to_string(),
            instance: self.me(),
            loss,
            at_ms: self.now_ms(),
        };
        self.log.append(&r).await.map_err(|e| {
            format!(
                "cannot publish the forward listener's loss on the state topic {}: {e}",
                self.topic
            )
        })
    }

    /// What the instances' forward listeners of `mirror` passed that the destination lacks
    /// after failover `fid`, as each published it.
    pub fn forwarded_losses(
        &self,
        mirror: &str,
        fid: &str,
    ) -> Vec<crate::mirror::forwarded_acks::ForwardedLoss> {
        self.view().forwarded_losses(mirror, fid)
    }

    /// Whether the latest hold of `mirror` is a switch back that is through (see
    /// [`HoldStep::Returned`]), and its id.
    pub fn switched_back(&self, mirror: &str) -> Option<String> {
        self.view().switched_back(mirror)
    }

    /// The hold another instance's switchover keeps on this instance's forward listener of
    /// `mirror` now (`None`: none).
    pub fn forward_hold(&self, mirror: &str) -> Option<HoldOrder> {
        self.view().forward_hold(mirror, clock::now())
    }

    /// Wait until every other instance with a forward listener of `mirror` acknowledged hold
    /// `hold_id` (an instance gone lately is waited for until what it forwarded has settled),
    /// while this instance holds its lease; until `deadline` at most. `Err`: who is missing.
    pub async fn wait_forward_held(
        &self,
        mirror: &str,
        hold_id: &str,
        deadline: Instant,
    ) -> Result<(), String> {
        let settle =
            Duration::from_millis(self.settle_ms.load(std::sync::atomic::Ordering::Relaxed));
        loop {
            let (missing, lease) = {
                let v = self.view();
                let now = clock::now();
                (
                    v.forward_waiting_for(mirror, hold_id, now, settle),
                    v.lease_problem(now),
                )
            };
            if missing.is_empty() && lease.is_none() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(match lease {
                    Some(p) => format!("this instance holds no lease on the state topic ({p})"),
                    None => format!(
                        "the forward listeners of instance(s) {} did not confirm the hold",
                        missing.join(", ")
                    ),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
