//! The gateway as the admin API sees it: [`crate::admin::AdminBackend`] for [`Gateway`].
//!
//! Owns: that mapping. Must not touch: the admin API's routes, the parts' own logic.

use std::sync::Arc;

use crate::cluster::ClusterView;
use crate::controller::MirrorController;
use crate::psm::registry::PsmRegistry;

use super::{Gateway, Readiness};
use std::net::SocketAddr;

impl crate::admin::AdminBackend for Gateway {
    fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }
    fn readiness(&self) -> Readiness {
        Gateway::readiness(self)
    }
    fn metrics_text(&self) -> String {
        self.metrics.render()
    }
    fn cluster(&self) -> &ClusterView {
        &self.cluster
    }
    fn gateway_ports(&self, node_id: i32) -> Vec<(&'static str, String)> {
        self.listeners
            .iter()
            .filter_map(|l| {
                l.bound
                    .snapshot()
                    .into_iter()
                    .find(|(n, _)| *n == node_id)
                    .map(|(_, a)| (l.kind.as_str(), a.to_string()))
            })
            .collect()
    }
    fn audit(&self, event: crate::audit::AuditEvent) {
        Gateway::audit(self, event)
    }
    fn forward(&self, mirror: &str) -> Option<crate::admin::ForwardHandle> {
        let f = self.forwards.iter().find(|f| f.route.mirror() == mirror)?;
        Some(crate::admin::ForwardHandle {
            route: f.route.clone(),
            source: f.source.clone(),
            hold: f.hold,
        })
    }
    fn agent_next_source(&self, mirror: &str, topic: &str, partition: i32) -> Option<i64> {
        self.agent.as_ref()?.next_source(mirror, topic, partition)
    }
    fn agent_rediscover(&self, mirror: &str) {
        if let Some(a) = &self.agent {
            a.rediscover(mirror);
        }
    }
    fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }
    fn mirrors(&self) -> Option<&Arc<MirrorController>> {
        self.mirrors.as_ref()
    }
    fn psm(&self) -> Option<&Arc<PsmRegistry>> {
        self.psm.as_ref()
    }
    fn agent_lag(&self, mirror: &str, topic: &str, partition: i32) -> Option<(i64, f64)> {
        Gateway::agent_lag(self, mirror, topic, partition)
    }
    fn agent_lag_bytes(&self, mirror: &str, topic: &str, partition: i32) -> Option<i64> {
        self.agent.as_ref()?.lag_bytes(mirror, topic, partition)
    }
    fn screened_ids(&self) -> usize {
        self.mirrors.as_ref().map_or(0, |m| m.screened_ids_count())
    }
    fn agent_source_end_moved_ms(&self, mirror: &str, topic: &str, partition: i32) -> Option<i64> {
        self.agent
            .as_ref()?
            .source_end_moved_ms(mirror, topic, partition)
    }
    fn agent_source(&self, mirror: &str) -> Option<crate::failover::preflight::SourceFacts> {
        self.agent.as_ref()?.source_facts(mirror)
    }
    fn failover_called(&self, report: crate::mirror::report::FailoverReport) {
        if let (Some(store), Some(ctl)) = (&self.reports, &self.mirrors) {
            crate::agent::report_follow::open(store, ctl.clone(), self.agent.clone(), report);
        }
    }
    fn failover_reports(
        &self,
        mirror: &str,
    ) -> Result<Vec<crate::mirror::report::FailoverReport>, String> {
        let published = self
            .mirrors
            .as_ref()
            .map(|ctl| ctl.published_reports(mirror))
            .unwrap_or_default();
        let mut reports = match &self.reports {
            Some(store) => crate::mirror::report::merged(store.list(mirror)?, published),
            None => published,
        };
        // Several instances: what the other instances' forward listeners passed.
        if let Some(ctl) = &self.mirrors {
            for r in reports.iter_mut().filter(|r| r.is_complete()) {
                let losses = ctl.published_forwarded_losses(mirror, &r.failover_id);
                crate::mirror::report::add_forwarded_losses(r, losses);
            }
        }
        Ok(reports)
    }
    fn recovery(&self) -> Option<&Arc<crate::recovery::service::Recoverer>> {
        self.recovery.as_ref()
    }
    fn mirror_sync(&self, mirror: &str) -> Option<serde_json::Value> {
        self.agent.as_ref()?.sync_status(mirror)
    }
    fn group_sync(&self, mirror: &str) -> Option<crate::sync::groups::SyncStatus> {
        Some(self.agent.as_ref()?.group_sync(mirror)?.status())
    }
    fn offset_map(
        &self,
        mirror: &str,
        topic: &str,
        partition: i32,
    ) -> Option<crate::mirror::offset_map::PartitionMap> {
        self.agent.as_ref()?.offset_map(mirror, topic, partition)
    }
    fn permissions_missing(&self) -> Vec<String> {
        self.permissions
            .as_ref()
            .map(|p| p.missing())
            .unwrap_or_default()
    }
}
