//! What a failover asks of the built-in agent when it starts (the controller's stop hook): stop
//! the mirror's config/ACL sync, stop its partition tasks and wait (bounded) for their appends
//! in flight, match the source's unmatched tails — the offset map is final then — and start the
//! mirror's final group offset sync ([`crate::sync::groups`], bounded by its budget) as a task
//! of its own. The hook returns once the appends are answered; the final group sync runs
//! beside the failover's fence, drain and barriers, and the failover waits for its task before
//! it makes the partitions writable (`failover.rs`, step *settle*).
//!
//! Owns: the order of the agent's stop. Must not touch: the failover's records and steps.

use std::sync::{Arc, Weak};

use crate::controller::MirrorController;
use crate::sync::groups::FINAL_SYNC_BUDGET;

use super::Agent;

/// Install the stop hook of `agent` on `controller` (it holds the agent weakly: a stopped
/// gateway's agent is not kept alive by it).
pub(super) fn install(controller: &MirrorController, agent: Weak<Agent>) {
    controller.set_agent_stop_hook(Arc::new(move |name: &str| {
        let agent = agent.upgrade();
        let name = name.to_string();
        Box::pin(async move {
            let a = agent.as_ref()?;
            a.sync.stop(&name).await;
            if let Some(m) = a.mirror(&name) {
                m.stop_and_drain().await;
                m.match_unmatched_tails().await;
            }
            let g = a.group_sync(&name)?;
            Some(tokio::spawn(async move {
                g.final_sync(FINAL_SYNC_BUDGET).await;
            }))
        })
    }));
}
