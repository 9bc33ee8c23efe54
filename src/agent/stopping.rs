//! Stopping a mirror's partition tasks: those of partitions that left the mirror, and every
//! one when a failover stops the agent (draining their appends in flight, keeping each
//! partition's last known lag for the report, persisting the offset map).
//!
//! Owns: that stop. Must not touch: starting tasks (`supervise`), the failover's steps.

use tokio::task::JoinHandle;

use super::{lock, MirrorAgent, STOP_WAIT};

impl MirrorAgent {
    /// Signal the tasks matching `which` to stop; returns their handles.
    pub(super) fn stop_tasks(&self, which: impl Fn(&(String, i32)) -> bool) -> Vec<JoinHandle<()>> {
        let mut tasks = lock(&self.tasks);
        let mut handles = Vec::new();
        for (k, slot) in tasks.iter_mut() {
            if which(k) {
                let _ = slot.stop.send(true);
                if let Some(h) = slot.handle.take() {
                    handles.push(h);
                }
            }
        }
        handles
    }

    /// The failover hook: stop every task of this mirror, clear the FAILED marks the agent set,
    /// wait (bounded) until the tasks finished their appends in flight, persist the offset map.
    pub(super) async fn stop_and_drain(&self) {
        let handles = self.stop_tasks(|_| true);
        {
            let mut tasks = lock(&self.tasks);
            let mut last_known = lock(&self.last_known);
            last_known.clear();
            for ((t, p), slot) in tasks.drain() {
                self.controller.set_agent_failed(&t, p, None);
                if let Some(lag) = slot.stats.last_known() {
                    last_known.insert((t, p), lag);
                }
            }
        }
        for (t, p) in lock(&self.marked).drain() {
            self.controller.set_agent_failed(&t, p, None);
        }
        let n = handles.len();
        if tokio::time::timeout(STOP_WAIT, join(handles))
            .await
            .is_err()
        {
            tracing::warn!(mirror = %self.name, "agent tasks still busy after {STOP_WAIT:?}; the failover goes on (fencing refuses their appends)");
        }
        self.flush();
        tracing::info!(mirror = %self.name, tasks = n, "mirror agent stopped for the failover");
    }
}

/// Wait for every task of `handles` to end.
pub(super) async fn join(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}
