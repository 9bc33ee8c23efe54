//! The hold another instance keeps on this instance's forward listener (several instances),
//! as the state topic tells it: a switchover's (the listener held on its way to the
//! destination) or a switch back's (on its way back to the source).
//!
//! | this route \ order | switchover's hold | its release | switch back's hold | released before the old source's failover | caught up, then gone |
//! |---|---|---|---|---|---|
//! | Source | Holding | — | — | — | — |
//! | Holding (for a peer) | stays | Source | — | — | — |
//! | Destination | — | — | Returning | — | Returning, then Source once the mirror mirrors here |
//! | Returning (for a peer) | — | — | stays | Destination | Source once the mirror mirrors here |
//!
//! Owns: following those orders. Must not touch: the state topic (the caller reads it), the
//! mirror states (the caller says whether the mirror mirrors here again).

use super::{ForwardRoute, Side};

/// A hold another instance recorded for the forward listeners of this mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerHoldOrder<'a> {
    pub hold_id: &'a str,
    /// A switchover's: the agent mirrored the source's log end under it. A switch back's: the
    /// old source reached the destination's ends, and its failover follows.
    pub caught_up: bool,
    /// A switch back's hold.
    pub back: bool,
}

/// A hold of another instance, as this route keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PeerHold {
    pub(super) hold_id: String,
    /// See [`PeerHoldOrder::caught_up`].
    pub(super) caught_up: bool,
    pub(super) back: bool,
}

impl ForwardRoute {
    /// Apply the hold another instance keeps on this listener (several instances; see the
    /// module's table). `None`: no hold stands now; `mirrors_here`: every partition of the
    /// mirror mirrors again here (a switch back's start applied). Returns the hold to
    /// acknowledge on the state topic: held here, and (a switchover's) no transaction left to
    /// finish and no connection to the source left, or (a switch back's) no connection to the
    /// destination left.
    pub fn follow_peer_hold(
        &self,
        hold: Option<PeerHoldOrder<'_>>,
        mirrors_here: bool,
    ) -> Option<String> {
        let kept = hold.map(|h| PeerHold {
            hold_id: h.hold_id.to_string(),
            caught_up: h.caught_up,
            back: h.back,
        });
        let had = std::mem::replace(&mut *self.peer_holds(), kept);
        let Some(h) = hold else {
            match had {
                Some(had) if had.back => self.end_switch_back(had, mirrors_here),
                Some(_) if self.step(Side::Holding, Side::Source, "release").is_ok() => {
                    self.stop_finishing();
                    self.forget_caught_up();
                    tracing::info!(mirror = %self.mirror, "forward listener released: the other instance's switchover ended without a failover");
                }
                _ => {}
            }
            return None;
        };
        if h.back {
            if self.side() == Side::Destination && self.hold_back().is_ok() {
                tracing::info!(mirror = %self.mirror, hold_id = h.hold_id, "forward listener held for another instance's switch back");
            }
            return (self.side() == Side::Returning && self.destination_connections() == 0)
                .then(|| h.hold_id.to_string());
        }
        if self.side() == Side::Source {
            let open = self.start_finishing();
            if self.step(Side::Source, Side::Holding, "hold").is_err() {
                self.stop_finishing();
                return None;
            }
            self.note_held();
            tracing::info!(mirror = %self.mirror, hold_id = h.hold_id, transactions_open = open, "forward listener held for another instance's switchover");
        }
        (self.side() == Side::Holding && !self.finishing() && self.source_connections() == 0)
            .then(|| h.hold_id.to_string())
    }

    /// A switch back is through (the state topic says so): the listener
    /// goes on to the source once the mirror mirrors here, from the destination or from its
    /// hold. `true` when it is on the source now.
    pub fn follow_switched_back(&self, mirrors_here: bool) -> bool {
        if !mirrors_here || !self.left_the_source() {
            return self.side() == Side::Source;
        }
        if self.side() == Side::Destination {
            let _ = self.hold_back();
        }
        self.returned().is_ok()
    }

    /// Whether another instance's switch back holds this listener now: `Some(caught_up)`
    /// (caught up: the old source's failover follows, so only going on is left).
    pub fn peer_switch_back(&self) -> Option<bool> {
        self.peer_hold().filter(|h| h.back).map(|h| h.caught_up)
    }

    pub(super) fn peer_hold(&self) -> Option<PeerHold> {
        self.peer_holds().clone()
    }

    fn peer_holds(&self) -> std::sync::MutexGuard<'_, Option<PeerHold>> {
        self.peer_hold.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A switch back's hold is gone: through (caught up), the listener goes on to the source
    /// once the mirror mirrors here (kept until then); else back to the destination.
    fn end_switch_back(&self, had: PeerHold, mirrors_here: bool) {
        if !had.caught_up {
            if self.give_back().is_ok() {
                tracing::info!(mirror = %self.mirror, "forward listener back on the destination: the other instance's switch back gave up");
            }
        } else if mirrors_here {
            if self.follow_switched_back(true) {
                tracing::info!(mirror = %self.mirror, "forward listener on the source: the other instance's switch back is through");
            }
        } else if self.side() == Side::Returning {
            *self.peer_holds() = Some(had);
        }
    }
}
