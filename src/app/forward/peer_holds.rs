//! Following the other instances' holds of a mirror's forward listener (several instances):
//! a switchover's or a switch back's hold read from the state topic, applied to the route, and
//! acknowledged there once the listener drained.
//!
//! Owns: that round of the follow task. Must not touch: the route's transitions (the route's
//! own), the records (`crate::instances`).

use crate::instances::PeerLink;
use crate::mirror::state::PartitionState;
use crate::proxy::forward::{ForwardRoute, PeerHoldOrder};

/// Keep `route` held while another instance's switchover (or switch back) holds it, and
/// acknowledge the hold on the state topic once drained; released when that hold ends without
/// a failover, on to the source when a switch back is through and the mirror mirrors here.
pub(super) async fn follow_peers(
    route: &ForwardRoute,
    link: &PeerLink,
    states: &[PartitionState],
    acknowledged: &mut Option<String>,
) {
    // A switch back's start applied here: no partition left STOPPED (or stopping).
    let mirrors_here = !states.is_empty()
        && !states
            .iter()
            .any(|s| matches!(s, PartitionState::Stopped | PartitionState::Stopping));
    let order = link.forward_hold(route.mirror());
    let hold = order.as_ref().map(|o| PeerHoldOrder {
        hold_id: &o.hold_id,
        caught_up: o.caught_up,
        back: o.back,
    });
    if hold.is_none()
        && route.left_the_source()
        && link.switched_back(route.mirror()).is_some()
        && route.follow_switched_back(mirrors_here)
    {
        tracing::info!(
            mirror = route.mirror(),
            "forward listener on the source: a switch back through another instance is through"
        );
    }
    let Some(hold_id) = route.follow_peer_hold(hold, mirrors_here) else {
        return;
    };
    if order.is_some_and(|o| o.acknowledged) || acknowledged.as_deref() == Some(&hold_id) {
        return;
    }
    match link
        .acknowledge_forward_hold(route.mirror(), &hold_id)
        .await
    {
        Ok(()) => {
            tracing::info!(
                mirror = route.mirror(),
                hold_id,
                "forward listener held and drained for another instance's switchover"
            );
            *acknowledged = Some(hold_id);
        }
        Err(e) => {
            tracing::warn!(mirror = route.mirror(), hold_id, error = %e, "forward hold not acknowledged (tried again)")
        }
    }
}
