//! What the gateway's own principal may do on the destination, checked against what the
//! protection layers need (review F12).
//!
//! The gateway does work of its own on the destination: it reads mirror partitions (producer
//! state rebuilds, the log after a barrier), writes barriers, re-asks InitProducerId for PID
//! screening and the producer-id allocator step, and reads the brokers' producer-id expiry
//! settings. Where the cluster runs an authorizer and the principal lacks a permission, that
//! work fails only when it is needed — typically during a failover. So the gateway asks the
//! brokers at start, and every minute after, which operations its principal is authorized for
//! (Metadata v10 with `include_cluster_authorized_operations` and
//! `include_topic_authorized_operations`: exactly the broker's own authorizer answer) and
//! reports what is missing: an ERROR line per missing permission, the
//! `mirrorgate_protection_missing_permissions` gauge and `warnings` in `/readyz`.
//!
//! [`missing`] is the policy (pure, unit-tested); [`observe`] the one request.
//!
//! Owns: the list of required operations and its wording. Must not touch: partition states,
//! the screening set, readiness (the controller keeps the result and the gateway reports it).

use std::sync::Mutex;
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::ClusterView;
use crate::metrics::Metrics;

/// The last result of the check, for `/readyz` and the gauge.
pub struct PermissionCheck {
    missing: Mutex<Vec<String>>,
    gauge: prometheus::IntGauge,
    control_barrier: bool,
}

impl PermissionCheck {
    /// `control_barrier`: see [`missing`].
    pub fn new(metrics: &Metrics, control_barrier: bool) -> PermissionCheck {
        let gauge = prometheus::IntGauge::new(
            "mirrorgate_protection_missing_permissions",
            "Permissions the gateway's own principal lacks on the destination for its protection work (barrier writes, producer-state rebuilds, PID screening, expiry settings); 0 when nothing is missing. Each is logged at ERROR and listed in /readyz warnings.",
        )
        .expect("valid metric");
        // Already registered (a second instance in one process) keeps the first; not a
        // transition result.
        let _ = metrics.registry().register(Box::new(gauge.clone()));
        PermissionCheck {
            missing: Mutex::new(Vec::new()),
            gauge,
            control_barrier,
        }
    }

    /// What is missing, as of the last check.
    pub fn missing(&self) -> Vec<String> {
        self.missing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Record a check's result: each newly missing permission is logged at ERROR, a cleared
    /// list at INFO.
    pub fn record(&self, now_missing: Vec<String>) {
        let mut m = self.missing.lock().unwrap_or_else(|e| e.into_inner());
        for line in now_missing.iter().filter(|l| !m.contains(l)) {
            tracing::error!(
                missing = %line,
                "the gateway's own principal lacks a permission its protection work needs on the destination (see docs/security.md#what-the-gateways-own-principal-needs)"
            );
        }
        if now_missing.is_empty() && !m.is_empty() {
            tracing::info!("the gateway's own principal now has every permission it needs");
        }
        self.gauge.set(now_missing.len() as i64);
        *m = now_missing;
    }

    /// Ask the brokers (see [`observe`]) about the mirror topics among `topics` and record
    /// what is missing. A failed request changes nothing (logged at WARN).
    pub async fn run(&self, cluster: &ClusterView, topics: Vec<String>, timeout: Duration) {
        match observe(cluster, &topics, timeout).await {
            Ok(obs) => self.record(missing(&obs, self.control_barrier)),
            Err(e) => tracing::warn!(error = %e, "could not check the gateway's permissions"),
        }
    }
}

/// Kafka's ACL operation codes (`AclOperation`), as bits of an authorized-operations field.
pub mod op {
    pub const READ: u8 = 3;
    pub const WRITE: u8 = 4;
    pub const ALTER: u8 = 7;
    pub const DESCRIBE: u8 = 8;
    pub const CLUSTER_ACTION: u8 = 9;
    pub const DESCRIBE_CONFIGS: u8 = 10;
    pub const IDEMPOTENT_WRITE: u8 = 12;
}

/// Error code TOPIC_AUTHORIZATION_FAILED: the principal may not even describe the topic.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

/// An authorized-operations field as the broker returns it: bit `n` set = operation `n`
/// allowed; `i32::MIN` = not computed (the broker was not asked, or could not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthorizedOps(pub i32);

impl AuthorizedOps {
    fn known(self) -> bool {
        self.0 != i32::MIN
    }

    fn allows(self, op: u8) -> bool {
        self.0 & (1 << op) != 0
    }
}

/// What the brokers said about the gateway's principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub cluster: AuthorizedOps,
    /// Each mirror topic present on the destination: its authorized operations, or the topic's
    /// error code when the broker answered one.
    pub topics: Vec<(String, Result<AuthorizedOps, i16>)>,
}

/// The permissions the gateway's principal lacks, one readable line each (empty: nothing
/// missing, or nothing the brokers could tell). `control_barrier`: the failover writes its
/// barrier as a control batch (`failover.barrier` `auto` or `control`), which needs ALTER or
/// CLUSTER_ACTION on the cluster.
pub fn missing(obs: &Observed, control_barrier: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut any_topic_write = false;
    for (topic, ops) in &obs.topics {
        let ops = match ops {
            Ok(o) if o.known() => *o,
            Ok(_) => continue,
            Err(TOPIC_AUTHORIZATION_FAILED) => {
                out.push(format!(
                    "DESCRIBE, READ and WRITE on topic {topic}: the gateway may not even describe it (metadata, producer-state rebuilds, barrier writes)"
                ));
                continue;
            }
            Err(_) => continue,
        };
        any_topic_write |= ops.allows(op::WRITE);
        for (o, name, why) in [
            (op::DESCRIBE, "DESCRIBE", "metadata and log ends"),
            (
                op::READ,
                "READ",
                "producer-state rebuilds and re-reading the log after a barrier",
            ),
            (op::WRITE, "WRITE", "the failover barrier"),
        ] {
            if !ops.allows(o) {
                out.push(format!("{name} on topic {topic} ({why})"));
            }
        }
    }
    if obs.cluster.known() {
        if !obs.cluster.allows(op::IDEMPOTENT_WRITE) && !any_topic_write {
            out.push(
                "IDEMPOTENT_WRITE on the cluster, or WRITE on a topic (PID screening re-asks InitProducerId; the failover's producer-id allocator step)"
                    .to_string(),
            );
        }
        if control_barrier
            && !obs.cluster.allows(op::ALTER)
            && !obs.cluster.allows(op::CLUSTER_ACTION)
        {
            out.push(
                "ALTER or CLUSTER_ACTION on the cluster (the control-batch barrier, WriteTxnMarkers; with failover.barrier: auto the failover falls back to the data barrier, set failover.barrier: data to say that is intended)"
                    .to_string(),
            );
        }
        if !obs.cluster.allows(op::DESCRIBE_CONFIGS) {
            out.push(
                "DESCRIBE_CONFIGS on the cluster (reading producer.id.expiration.ms from every broker, which decides how long protection lasts)"
                    .to_string(),
            );
        }
    }
    out
}

/// Ask one destination broker which operations the gateway's principal may perform on the
/// cluster and on `topics`.
pub async fn observe(
    cluster: &ClusterView,
    topics: &[String],
    timeout: Duration,
) -> Result<Observed, String> {
    let (_, addr) = cluster
        .brokers()
        .into_iter()
        .next()
        .ok_or_else(|| "no destination broker known".to_string())?;
    let mut c = cluster
        .client(&addr, timeout)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let req = MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(false)
        .with_include_cluster_authorized_operations(true)
        .with_include_topic_authorized_operations(true);
    let resp = c
        .send(&req, 10)
        .await
        .map_err(|e| format!("Metadata from {addr}: {e}"))?;
    Ok(Observed {
        cluster: AuthorizedOps(resp.cluster_authorized_operations),
        topics: resp
            .topics
            .iter()
            .filter_map(|t| {
                let name = t.name.as_ref()?.0.to_string();
                let ops = match t.error_code {
                    0 => Ok(AuthorizedOps(t.topic_authorized_operations)),
                    e => Err(e),
                };
                Some((name, ops))
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(list: &[u8]) -> AuthorizedOps {
        AuthorizedOps(list.iter().fold(0, |a, o| a | (1 << o)))
    }

    fn all() -> AuthorizedOps {
        ops(&[
            op::READ,
            op::WRITE,
            op::ALTER,
            op::DESCRIBE,
            op::DESCRIBE_CONFIGS,
            op::IDEMPOTENT_WRITE,
        ])
    }

    #[test]
    fn a_principal_allowed_everything_lacks_nothing() {
        let obs = Observed {
            cluster: all(),
            topics: vec![("t".into(), Ok(all()))],
        };
        assert!(missing(&obs, true).is_empty());
    }

    #[test]
    fn a_topic_without_write_is_reported_as_the_barrier_it_prevents() {
        let obs = Observed {
            cluster: all(),
            topics: vec![("t".into(), Ok(ops(&[op::READ, op::DESCRIBE])))],
        };
        let m = missing(&obs, true);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("WRITE on topic t"), "{m:?}");
    }

    #[test]
    fn a_topic_the_principal_may_not_describe_is_reported() {
        let obs = Observed {
            cluster: all(),
            topics: vec![("t".into(), Err(TOPIC_AUTHORIZATION_FAILED))],
        };
        assert!(missing(&obs, true)[0].contains("may not even describe"));
    }

    #[test]
    fn idempotent_write_is_needed_only_without_write_on_a_topic() {
        let cluster = ops(&[op::DESCRIBE_CONFIGS, op::CLUSTER_ACTION]);
        let with_write = Observed {
            cluster,
            topics: vec![("t".into(), Ok(all()))],
        };
        assert!(missing(&with_write, true).is_empty());
        let without = Observed {
            cluster,
            topics: vec![],
        };
        assert!(missing(&without, true)[0].starts_with("IDEMPOTENT_WRITE"));
    }

    #[test]
    fn operations_the_broker_did_not_compute_are_not_reported() {
        let obs = Observed {
            cluster: AuthorizedOps(i32::MIN),
            topics: vec![("t".into(), Ok(AuthorizedOps(i32::MIN)))],
        };
        assert!(missing(&obs, true).is_empty());
    }

    #[test]
    fn the_control_barrier_needs_alter_or_cluster_action_unless_the_data_barrier_is_chosen() {
        let obs = Observed {
            cluster: ops(&[op::IDEMPOTENT_WRITE, op::DESCRIBE_CONFIGS]),
            topics: vec![],
        };
        let m = missing(&obs, true);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("ALTER or CLUSTER_ACTION"));
        assert!(missing(&obs, false).is_empty());
    }

    #[test]
    fn describe_configs_on_the_cluster_is_needed_for_the_expiry_settings() {
        let obs = Observed {
            cluster: ops(&[op::IDEMPOTENT_WRITE, op::ALTER]),
            topics: vec![],
        };
        let m = missing(&obs, true);
        assert_eq!(m.len(), 1);
        assert!(m[0].starts_with("DESCRIBE_CONFIGS"));
    }
}
