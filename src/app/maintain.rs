//! The background upkeep of the mirrors: their partitions kept in step with the destination's
//! metadata, failovers in progress resumed once the partitions are known, the recorded barriers
//! checked once per start, PID-screening entries expired, and the principal's permissions
//! checked again now and then.
//!
//! Owns: that loop. Must not touch: what each step does (the controller's and the checks').

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::cluster::ClusterView;
use crate::controller::MirrorController;
use crate::metrics::Metrics;
use crate::mirror::permissions::PermissionCheck;

/// How often the gateway principal's permissions are checked again.
const PERMISSION_CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// Keep mirror partitions in step with the destination's metadata, resume failovers in
/// progress once the partitions are known, and expire PID-screening entries.
pub(super) async fn maintain_mirrors(
    controller: Arc<MirrorController>,
    permissions: Arc<PermissionCheck>,
    metrics: Arc<Metrics>,
    cluster: Arc<ClusterView>,
    exact_topics: Vec<String>,
    timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut resumed = false;
    let mut permissions_checked: Option<tokio::time::Instant> = None;
    loop {
        if cluster.is_known() {
            controller.sync_partitions();
            if !resumed {
                controller.resume_all();
                resumed = true;
                // Once per start: do the logs still hold the recorded barriers (review F6)?
                let (ctl, cluster, metrics) =
                    (controller.clone(), cluster.clone(), metrics.clone());
                tokio::spawn(async move {
                    crate::controller::barrier_check::check_all(&ctl, &cluster, &metrics, timeout)
                        .await
                });
            }
            controller.expire_screen();
            if permissions_checked.is_none_or(|t| t.elapsed() >= PERMISSION_CHECK_INTERVAL) {
                permissions_checked = Some(tokio::time::Instant::now());
                // Mirror topics the gateway sees, and those named exactly in the configuration
                // (a principal that may not describe a topic does not see it in metadata).
                let mut topics: Vec<String> = cluster
                    .topic_names()
                    .into_iter()
                    .filter(|t| controller.is_mirror_topic(t))
                    .chain(exact_topics.iter().cloned())
                    .collect();
                topics.sort();
                topics.dedup();
                let (check, cluster) = (permissions.clone(), cluster.clone());
                tokio::spawn(async move { check.run(&cluster, topics, timeout).await });
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = shutdown.changed() => return,
        }
    }
}
