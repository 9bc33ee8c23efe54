//! The real I/O of config and ACL sync: requests straight to the brokers — the source through
//! the mirror's source connector, the destination through [`ClusterView::client`] — and the
//! write gate that makes "nothing after STOPPING" hold: every write takes the gate and checks
//! that sync was not stopped; the failover's stop takes the gate after setting the flag.
//!
//! Owns: request shapes and versions (DescribeConfigs v4, IncrementalAlterConfigs v1,
//! DescribeAcls / CreateAcls / DeleteAcls v3), the may-write rule (every partition MIRRORING, no
//! failover started, and — several instances — this instance runs the mirror's built-in agent). Must not touch: the policies' decisions, partition states.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{Connector, KafkaClient};
use crate::cluster::ClusterView;
use crate::config::TopicRouter;
use crate::controller::MirrorController;
use crate::instances::agent_owner::AgentTurn;
use crate::mirror::PartitionState;

use super::acls::{AclBinding, AclIo, PATTERN_LITERAL, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::configs::{Change, ConfigIo, TopicConfigs};

/// DescribeConfigs `config_source` of a value set on the topic itself.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
/// PatternType ANY (DescribeAcls filter).
const PATTERN_ANY: i8 = 1;
/// AclOperation / AclPermissionType ANY (filters).
const ANY: i8 = 1;

fn err_text(code: i16, msg: Option<&StrBytes>) -> String {
    let name = match code {
        29 => " TOPIC_AUTHORIZATION_FAILED",
        31 => " CLUSTER_AUTHORIZATION_FAILED",
        54 => " SECURITY_DISABLED (the cluster has no authorizer)",
        3 => " UNKNOWN_TOPIC_OR_PARTITION",
        _ => "",
    };
    format!(
        "error code {code}{name}{}",
        msg.map(|m| format!(" ({})", m.as_str()))
            .unwrap_or_default()
    )
}

/// The sync's view of one mirror and its two clusters.
pub struct SyncIo {
    pub name: String,
    pub idx: usize,
    pub router: TopicRouter,
    pub source_bootstrap: Vec<String>,
    pub source_connector: Connector,
    pub source_timeout: Duration,
    pub cluster: Arc<ClusterView>,
    pub dest_timeout: Duration,
    pub controller: Arc<MirrorController>,
    /// Taken by every write; the failover's stop takes it after setting `stopped`.
    pub gate: Arc<tokio::sync::Mutex<()>>,
    pub stopped: Arc<AtomicBool>,
}

impl SyncIo {
    /// Whether the mirror's failover started (or sync was stopped).
    pub fn failover_started(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
            || self
                .controller
                .records()
                .iter()
                .any(|(r, _)| r.name == self.name && r.failover_id.is_some())
    }

    async fn source(&self) -> Result<KafkaClient, String> {
        let mut last = "no source bootstrap address".to_string();
        for addr in &self.source_bootstrap {
            match KafkaClient::connect_with(&self.source_connector, addr, self.source_timeout).await
            {
                Ok(c) => return Ok(c),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    async fn destination(&self) -> Result<KafkaClient, String> {
        let mut last = "no destination broker known".to_string();
        for (_, addr) in self.cluster.brokers() {
            match self.cluster.client(&addr, self.dest_timeout).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// Why this instance does not sync the mirror now (several instances: another one runs
    /// its built-in agent, and the agent's owner alone syncs); `None` when it does.
    pub fn standby(&self) -> Option<String> {
        match self.controller.agent_turn(&self.name) {
            AgentTurn::Run { .. } => None,
            AgentTurn::Claim { epoch } => Some(format!(
                "this instance is about to claim the built-in agent (ownership epoch {epoch})"
            )),
            AgentTurn::Standby(why) => Some(why),
        }
    }

    /// Run `write` under the gate unless sync was stopped, or this instance no longer runs
    /// the mirror's agent.
    async fn gated<T>(
        &self,
        write: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let _g = self.gate.lock().await;
        if self.failover_started() {
            return Err("not written: the mirror is failing over (sync stopped)".into());
        }
        if let Some(why) = self.standby() {
            return Err(format!(
                "not written: the instance running the mirror's built-in agent syncs it ({why})"
            ));
        }
        write.await
    }
}

async fn describe_configs(
    mut c: KafkaClient,
    topics: &[String],
) -> Result<HashMap<String, Result<TopicConfigs, String>>, String> {
    let req = DescribeConfigsRequest::default().with_resources(
        topics
            .iter()
            .map(|t| {
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_string(t.clone()))
                    .with_configuration_keys(None)
            })
            .collect(),
    );
    let resp = c.send(&req, 4).await.map_err(|e| e.to_string())?;
    let mut out = HashMap::new();
    for r in &resp.results {
        let v = if r.error_code != 0 {
            Err(err_text(r.error_code, r.error_message.as_ref()))
        } else {
            Ok(r.configs
                .iter()
                .filter(|c| c.config_source == DYNAMIC_TOPIC_CONFIG && !c.is_sensitive)
                .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                .collect())
        };
        out.insert(r.resource_name.to_string(), v);
    }
    Ok(out)
}

impl ConfigIo for SyncIo {
    fn topics(&self) -> Vec<String> {
        self.cluster
            .topic_names()
            .into_iter()
            .filter(|t| self.router.mirror_index(t) == Some(self.idx))
            .collect()
    }

    fn may_write(&self, topic: &str) -> bool {
        if self.failover_started() {
            return false;
        }
        let Some(info) = self.cluster.topic(topic) else {
            return false;
        };
        let n = info.leaders.len() as i32;
        n > 0
            && (0..n).all(|p| self.controller.state_of(topic, p) == Some(PartitionState::Mirroring))
    }

    async fn source_configs(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, Result<TopicConfigs, String>>, String> {
        describe_configs(self.source().await?, topics).await
    }

    async fn destination_configs(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, Result<TopicConfigs, String>>, String> {
        describe_configs(self.destination().await?, topics).await
    }

    async fn alter(&self, topic: &str, changes: &[Change]) -> Result<(), String> {
        let configs = changes
            .iter()
            .map(|c| match c {
                Change::Set(k, v) => AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(v.clone()))),
                Change::Delete(k) => AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(1)
                    .with_value(None),
            })
            .collect();
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(topic.to_string()))
                .with_configs(configs),
        ]);
        self.gated(async {
            let mut c = self.destination().await?;
            let resp = c.send(&req, 1).await.map_err(|e| e.to_string())?;
            match resp.responses.iter().find(|r| r.error_code != 0) {
                Some(r) => Err(err_text(r.error_code, r.error_message.as_ref())),
                None => Ok(()),
            }
        })
        .await
    }
}

async fn describe_acls(mut c: KafkaClient) -> Result<Vec<AclBinding>, String> {
    let mut out = Vec::new();
    for rt in [RESOURCE_TOPIC, RESOURCE_GROUP] {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(rt)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(PATTERN_ANY)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY);
        let resp = c.send(&req, 3).await.map_err(|e| e.to_string())?;
        if resp.error_code != 0 {
            return Err(err_text(resp.error_code, resp.error_message.as_ref()));
        }
        for r in &resp.resources {
            for a in &r.acls {
                out.push(AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.to_string(),
                    pattern_type: r.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission_type: a.permission_type,
                });
            }
        }
    }
    Ok(out)
}

impl AclIo for SyncIo {
    fn topics(&self) -> Vec<String> {
        ConfigIo::topics(self)
    }

    fn may_write(&self) -> bool {
        !self.failover_started()
    }

    async fn source_acls(&self) -> Result<Vec<AclBinding>, String> {
        describe_acls(self.source().await?).await
    }

    async fn destination_acls(&self) -> Result<Vec<AclBinding>, String> {
        describe_acls(self.destination().await?).await
    }

    async fn create(&self, acls: &[AclBinding]) -> Result<Vec<Result<(), String>>, String> {
        let req = CreateAclsRequest::default().with_creations(
            acls.iter()
                .map(|b| {
                    AclCreation::default()
                        .with_resource_type(b.resource_type)
                        .with_resource_name(StrBytes::from_string(b.resource_name.clone()))
                        .with_resource_pattern_type(b.pattern_type)
                        .with_principal(StrBytes::from_string(b.principal.clone()))
                        .with_host(StrBytes::from_string(b.host.clone()))
                        .with_operation(b.operation)
                        .with_permission_type(b.permission_type)
                })
                .collect(),
        );
        self.gated(async {
            let mut c = self.destination().await?;
            let resp = c.send(&req, 3).await.map_err(|e| e.to_string())?;
            outcomes(
                resp.results
                    .iter()
                    .map(|r| (r.error_code, r.error_message.as_ref()))
                    .collect(),
                acls.len(),
                "CreateAcls",
            )
        })
        .await
    }

    async fn delete(&self, acls: &[AclBinding]) -> Result<Vec<Result<(), String>>, String> {
        // Each filter names one binding exactly (no ANY field, LITERAL or PREFIXED pattern), so
        // it matches that binding only.
        let req = DeleteAclsRequest::default().with_filters(
            acls.iter()
                .map(|b| {
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(b.resource_type)
                        .with_resource_name_filter(Some(StrBytes::from_string(
                            b.resource_name.clone(),
                        )))
                        .with_pattern_type_filter(b.pattern_type.max(PATTERN_LITERAL))
                        .with_principal_filter(Some(StrBytes::from_string(b.principal.clone())))
                        .with_host_filter(Some(StrBytes::from_string(b.host.clone())))
                        .with_operation(b.operation)
                        .with_permission_type(b.permission_type)
                })
                .collect(),
        );
        self.gated(async {
            let mut c = self.destination().await?;
            let resp = c.send(&req, 3).await.map_err(|e| e.to_string())?;
            outcomes(
                resp.filter_results
                    .iter()
                    .map(|r| (r.error_code, r.error_message.as_ref()))
                    .collect(),
                acls.len(),
                "DeleteAcls",
            )
        })
        .await
    }
}

/// One outcome per entry of a batched ACL request, in the order asked; `what` names the request.
fn outcomes(
    answers: Vec<(i16, Option<&StrBytes>)>,
    asked: usize,
    what: &str,
) -> Result<Vec<Result<(), String>>, String> {
    if answers.len() != asked {
        return Err(format!(
            "{what} answered {} results for {asked} entries",
            answers.len()
        ));
    }
    Ok(answers
        .into_iter()
        .map(|(code, message)| match code {
            0 => Ok(()),
            e => Err(err_text(e, message)),
        })
        .collect())
}
