//! What a mirror's agent shares across its partitions for mirroring transactions: the
//! transactional id its Produce requests carry for transactional batches, and the destination's
//! `transaction.partition.verification.enable`.
//!
//! A destination broker appends a transactional batch produced with version ≤ 11 without asking
//! its own transaction coordinator only when that setting is false; the coordinator does not
//! know the source's producers and answers INVALID_PRODUCER_ID_MAPPING. With the mirror's
//! `transactions.verification: manage` (the default) the first such refusal makes the agent read
//! the setting and, when it is on and not overridden per broker, set the cluster-wide dynamic
//! default to false (no restart; logged at WARN and counted in
//! `mirrorgate_agent_transaction_verification_disabled_total`). With `check` it only reads it
//! and fails the partition with the command that switches it off. It is never switched back
//! (docs/agent.md#transactions).
//!
//! Owns: that decision and the transactional id. Must not touch: partition tasks' offsets.

use std::time::Duration;

use crate::cluster::ClusterView;
use crate::config::VerificationPolicy;

use crate::client::mirror_ops::{self, VERIFICATION_CONFIG};

/// DescribeConfigs `config_source` of a per-broker dynamic setting, which a cluster-wide
/// default does not override.
const DYNAMIC_BROKER_CONFIG: i8 = 1;

/// A mirror's transaction settings (module doc).
pub struct AgentTransactions {
    /// The transactional id of the agent's Produce requests for transactional batches.
    pub transactional_id: String,
    policy: VerificationPolicy,
    /// Serialises the partitions' checks of the setting.
    check: tokio::sync::Mutex<()>,
    /// The setting was seen false (or set so): transactional batches need no check first.
    off: std::sync::atomic::AtomicBool,
    disabled: prometheus::IntCounterVec,
}

impl AgentTransactions {
    pub fn new(
        mirror: &str,
        policy: VerificationPolicy,
        disabled: prometheus::IntCounterVec,
    ) -> Self {
        AgentTransactions {
            transactional_id: format!("mirrorgate-mirror-{mirror}"),
            policy,
            check: tokio::sync::Mutex::new(()),
            off: std::sync::atomic::AtomicBool::new(false),
            disabled,
        }
    }

    /// Whether the destination's verification was seen off: a transactional batch is then
    /// appended without checking the setting first.
    pub fn known_off(&self) -> bool {
        self.off.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Before the first transactional batch, and after one was refused for verification: make
    /// sure the destination's verification is off (module doc); `Err`: why the partition cannot
    /// be mirrored. (A destination whose verification is on may not answer
    /// INVALID_PRODUCER_ID_MAPPING at all: its own transaction coordinator may not be available,
    /// and the refusal is then a retriable one, for ever.)
    pub async fn verification_off(
        &self,
        mirror: &str,
        cluster: &ClusterView,
        leader: Option<i32>,
        timeout: Duration,
    ) -> Result<(), String> {
        let _one = self.check.lock().await;
        let Some(broker) = leader else {
            // No leader known: the append is retried after a metadata refresh.
            return Ok(());
        };
        let addr = cluster
            .broker_addr(broker)
            .ok_or_else(|| format!("destination broker {broker} has no known address"))?;
        let mut c = match cluster.client(&addr, timeout).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(mirror, broker, error = %e, "cannot read the destination's transaction verification setting; retrying");
                return Ok(());
            }
        };
        let setting = match mirror_ops::broker_setting(&mut c, broker, VERIFICATION_CONFIG).await {
            Ok(s) => s,
            Err(e) => {
                return Err(format!(
                    "the destination refuses transactional batches (INVALID_PRODUCER_ID_MAPPING) and its {VERIFICATION_CONFIG} cannot be read: {e}"
                ))
            }
        };
        if setting.value.as_deref() == Some("false") {
            self.off.store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        let how = format!(
            "kafka-configs.sh --bootstrap-server <destination> --alter --entity-type brokers --entity-default --add-config {VERIFICATION_CONFIG}=false"
        );
        if setting.source == DYNAMIC_BROKER_CONFIG {
            return Err(format!(
                "destination broker {broker} sets {VERIFICATION_CONFIG}=true for itself (a per-broker dynamic config), so transactional \
                 batches of the source cannot be appended: remove it (kafka-configs.sh --alter --entity-type brokers --entity-name {broker} \
                 --delete-config {VERIFICATION_CONFIG}) and let the cluster default be false ({how})"
            ));
        }
        match self.policy {
            VerificationPolicy::Check => Err(format!(
                "the destination verifies transactional batches against its own coordinator ({VERIFICATION_CONFIG}=true), which does not know \
                 the source's producers, so they cannot be appended as-is; switch it off cluster-wide ({how}) or set the mirror's \
                 transactions.verification: manage"
            )),
            VerificationPolicy::Manage => {
                mirror_ops::set_cluster_default(&mut c, VERIFICATION_CONFIG, "false")
                    .await
                    .map_err(|e| {
                        format!(
                            "the destination verifies transactional batches ({VERIFICATION_CONFIG}=true) and the agent could not switch it off: {e}; \
                             switch it off yourself ({how})"
                        )
                    })?;
                self.disabled.with_label_values(&[mirror]).inc();
                self.off.store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    mirror, broker, setting = VERIFICATION_CONFIG,
                    "the destination verified transactional batches against its own coordinator: set {VERIFICATION_CONFIG}=false as the cluster-wide \
                     broker default so the source's transactions can be mirrored as-is (transactions.verification: manage; see docs/agent.md#transactions)"
                );
                Ok(())
            }
        }
    }
}
