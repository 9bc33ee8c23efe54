//! After a start without a handover (the previous process crashed): read the source's log ends
//! of every partition of the mirror once, for the ledger's restart horizon
//! ([`crate::mirror::forwarded_acks::RestartHorizon`]). Any read after the restart will do: every
//! record the crashed process saw acknowledged lies below it. Tried again every
//! [`READ_AGAIN`] while the source cannot be read.
//!
//! Owns: that read and its retries. Must not touch: what the ledger concludes from it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::cluster::ClusterView;
use crate::config::TopicRouter;
use crate::proxy::forward::ForwardRoute;

/// How long a failed read waits before the next.
const READ_AGAIN: Duration = Duration::from_secs(2);
/// The bound on connecting and on each request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Read the source's log ends of the partitions of mirror `idx` of the config (`router`) into
/// `route`'s ledger, once it wants them, until `shutdown` fires.
pub(super) async fn read(
    route: Arc<ForwardRoute>,
    source: Arc<ClusterView>,
    router: TopicRouter,
    idx: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let mirror = route.mirror().to_string();
    let mut failures = 0u32;
    while route.acks().wants_restart_ends() {
        match ends(&source, &router, idx).await {
            Ok(ends) => {
                let partitions = ends.len();
                match route.acks().read_restart_ends(ends) {
                    Ok(()) => tracing::info!(
                        mirror,
                        partitions,
                        "the source's log ends read after the restart: the producers from before it go on after an unplanned failover where the agent has mirrored past them"
                    ),
                    Err(e) => tracing::error!(mirror, error = %e, "the restart's log ends not used"),
                }
                return;
            }
            Err(e) => {
                failures += 1;
                // Logged at the first failure and then every 30th (a minute).
                if failures % 30 == 1 {
                    tracing::warn!(mirror, error = %e, failures, "the source's log ends cannot be read after the restart (tried again): until they are, the producers from before it are refused after an unplanned failover");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(READ_AGAIN) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The log end of every partition of the source's topics that mirror `idx` covers.
async fn ends(
    source: &ClusterView,
    router: &TopicRouter,
    idx: usize,
) -> Result<std::collections::BTreeMap<(String, i32), i64>, String> {
    source
        .refresh()
        .await
        .map_err(|e| format!("the source's metadata could not be read: {e}"))?;
    let parts: Vec<(String, i32)> = source
        .topic_names()
        .into_iter()
        .filter(|t| router.mirror_index(t) == Some(idx))
        .filter_map(|t| source.topic(&t).map(|i| (t, i.leaders.len())))
        .flat_map(|(t, n)| (0..n as i32).map(move |p| (t.clone(), p)))
        .collect();
    source.log_ends(&parts, READ_TIMEOUT).await
}
