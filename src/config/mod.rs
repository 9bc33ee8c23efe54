//! Gateway configuration: the YAML file format, loading and validation.
//!
//! Owns: the typed configuration model, parsing (unknown keys rejected), semantic validation
//! and error reporting with key paths and file positions.
//! Must not touch: sockets, the state directory, or any runtime state. Everything here is pure.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

mod error;
mod groups;
mod instances;
mod load;
mod positions;
mod recovery;
mod sasl;
mod secret;
mod sync;
mod tls;
mod topics;
mod validate;

#[cfg(test)]
mod tests;

pub use error::{ConfigError, ConfigIssue};
pub use groups::{GroupFilter, GroupSyncConfig, DEFAULT_GROUP_SYNC_INTERVAL_MS};
pub use instances::{InstancesConfig, DEFAULT_STATE_TOPIC};
pub use load::{load_file, load_str, render_effective, validate};
pub use recovery::RecoveryConfig;
pub use sasl::{SaslConfig, SaslMechanism, PRINCIPAL_PREFIX};
pub use secret::{SecretError, REDACTED};
pub use sync::{
    AclResourceKind, AclSelector, AclSyncConfig, ConfigSyncConfig, NamePattern,
    PrincipalFilterConfig, ResourcePattern, LOCAL_TOPIC_CONFIGS,
};
pub use tls::{ClusterTlsConfig, ListenerTlsConfig, MIN_RELOAD_INTERVAL_MS};
pub use topics::{
    compile_topic_regex, is_valid_topic_name, TopicEntry, TopicMatcher, TopicRouter, REGEX_PREFIX,
};
pub use validate::check_host_port;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The destination cluster the gateway stands in front of.
    pub destination: ClusterConfig,
    /// The Kafka listeners of the gateway.
    pub listeners: ListenersConfig,
    /// The admin HTTP server.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Directory for persisted state (mirror states, PSM snapshots).
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Protocol and connection limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Metrics options.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Logging options.
    #[serde(default)]
    pub logging: LoggingConfig,
    /// Producer-state tracking options.
    #[serde(default)]
    pub psm: PsmConfig,
    /// Mirrors: sets of destination topics fed by mirroring.
    #[serde(default)]
    pub mirrors: Vec<MirrorConfig>,
    /// Failover options.
    #[serde(default)]
    pub failover: FailoverConfig,
    /// One of several instances in front of the destination (absent: the only one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<InstancesConfig>,
}

/// A Kafka cluster the gateway connects to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Bootstrap addresses, `host:port`. At least one.
    pub bootstrap: Vec<String>,
    /// Timeout for connecting to a broker, milliseconds.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How often broker metadata is refreshed, milliseconds.
    #[serde(default = "default_metadata_refresh_ms")]
    pub metadata_refresh_ms: u64,
    /// TLS towards the brokers; plain TCP when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClusterTlsConfig>,
    /// The gateway's own SASL credentials for this cluster (see `sasl.rs`). Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<SaslConfig>,
}

/// The client and mirror listeners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenersConfig {
    /// Listener for ordinary clients (local traffic).
    pub client: ListenerConfig,
    /// Listener for mirroring tools (mirror traffic). Optional.
    #[serde(default)]
    pub mirror: Option<ListenerConfig>,
}

/// One listener: a range of ports, one per destination broker.
///
/// Broker with node id `n` is served on `port_base + (n - node_id_base)`; node ids outside
/// `node_id_base .. node_id_base + max_brokers` cannot be served (logged and counted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Address to bind, an IP address.
    #[serde(default = "default_bind_host")]
    pub bind: String,
    /// Host name advertised to clients in rewritten metadata. Defaults to `bind`.
    #[serde(default)]
    pub advertised_host: Option<String>,
    /// First port of the range.
    pub port_base: u16,
    /// Node id served on `port_base`.
    #[serde(default = "default_node_id_base")]
    pub node_id_base: i32,
    /// Number of ports reserved for this listener.
    #[serde(default = "default_max_brokers")]
    pub max_brokers: u16,
    /// TLS for the clients of this listener; plain TCP when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTlsConfig>,
    /// Mirror listener only: SASL principals (`User:NAME`) allowed to authenticate (see
    /// `sasl.rs`). Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_principals: Option<Vec<String>>,
}

/// The admin HTTP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address to bind, `ip:port`.
    #[serde(default = "default_admin_bind")]
    pub bind: String,
    /// Token for mutating calls, given inline (discouraged), from an environment variable, or a file.
    #[serde(default)]
    pub token: Option<SecretSource>,
    /// A topic on the destination cluster that receives every audit event (one JSON record per
    /// state-changing admin call) besides the log; created when missing. Absent: log only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_topic: Option<String>,
}

/// Where a secret comes from. Exactly one of the fields is set.
///
/// `Debug` is implemented by hand (in `secret.rs`) so that an inline value is never printed.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
}

/// Protocol and connection limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest frame accepted from a client or broker, bytes (broker default socket.request.max.bytes).
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: u32,
    /// Close a client connection idle for this long, milliseconds.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Requests in flight per connection before the gateway stops reading from the client.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// On shutdown, wait this long for in-flight requests to complete, milliseconds.
    #[serde(default = "default_shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
    /// Close a client connection when its broker has not answered a request (other than
    /// JoinGroup, which waits for a rebalance) for this long, milliseconds: a stalled broker
    /// must not hold client connections forever. Longer than clients' `request.timeout.ms`.
    #[serde(default = "default_upstream_timeout_ms")]
    pub upstream_timeout_ms: u64,
    /// A mirror write whose answer never came (its connection was lost or timed out) may still
    /// be appended by the broker. After writing a failover barrier, the gateway waits until
    /// this long has passed since the last such write of the partition, re-reads the log after
    /// the barrier, and writes a new barrier after anything that landed late; milliseconds.
    #[serde(default = "default_unknown_outcome_settle_ms")]
    pub unknown_outcome_settle_ms: u64,
    /// Threads that serve client connections (both listeners), each a single-threaded runtime
    /// that keeps a connection's work on one thread; `0` (default): one per available core.
    #[serde(default)]
    pub connection_threads: usize,
}

/// Metrics options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Per-partition series (`true`) or aggregated per topic (`false`).
    #[serde(default = "default_true")]
    pub per_partition: bool,
}

/// Logging options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggingConfig {
    /// `text` (default) or `json`.
    #[serde(default = "default_log_format")]
    pub format: String,
    /// Filter in `RUST_LOG` syntax; the environment variable wins when set.
    #[serde(default = "default_log_level")]
    pub level: String,
}

/// Producer-state (PSM) tracking of mirror topics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PsmConfig {
    /// Write a snapshot of each changed partition this often, milliseconds.
    #[serde(default = "default_snapshot_interval_ms")]
    pub snapshot_interval_ms: u64,
    /// Verify the CRC-32C of batches produced on the mirror listener.
    #[serde(default = "default_true")]
    pub verify_crc_mirror: bool,
    /// Verify the CRC-32C of batches produced on the client listener.
    #[serde(default)]
    pub verify_crc_client: bool,
    /// Override `producer.id.expiration.ms` (default: read from the destination brokers).
    #[serde(default)]
    pub expiration_ms: Option<u64>,
    /// Override `producer.id.expiration.check.interval.ms` (default: read from the brokers).
    #[serde(default)]
    pub expiration_check_interval_ms: Option<u64>,
    /// How far the gateway's clock may run ahead of the brokers' (review F11d): added to how
    /// long a mirrored producer id is protected, since the brokers expire producer ids by their
    /// own clock.
    #[serde(default = "default_clock_skew_margin_ms")]
    pub clock_skew_margin_ms: u64,
}

fn default_clock_skew_margin_ms() -> u64 {
    60_000
}

impl Default for PsmConfig {
    fn default() -> Self {
        PsmConfig {
            snapshot_interval_ms: default_snapshot_interval_ms(),
            verify_crc_mirror: true,
            verify_crc_client: false,
            expiration_ms: None,
            expiration_check_interval_ms: None,
            clock_skew_margin_ms: default_clock_skew_margin_ms(),
        }
    }
}

fn default_snapshot_interval_ms() -> u64 {
    30_000
}

/// Failover options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverConfig {
    /// The form of the barrier a failover writes into every mirrored partition.
    #[serde(default)]
    pub barrier: BarrierMode,
    /// Advancing the destination brokers' producer-id allocators past the screened ids.
    #[serde(default)]
    pub pid_allocator: PidAllocatorConfig,
    /// After failover, refuse a local write whose producer id mirrored traffic left in the
    /// brokers, at an epoch not above the mirrored one, with UNKNOWN_PRODUCER_ID (review F12:
    /// producers that got their id before the failover). Off: only the duplicate-ack guard
    /// stands in their way — for a client library that treats UNKNOWN_PRODUCER_ID as fatal.
    #[serde(default = "default_true")]
    pub refuse_mirrored_producer_ids: bool,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        FailoverConfig {
            pid_allocator: PidAllocatorConfig::default(),
            barrier: BarrierMode::default(),
            refuse_mirrored_producer_ids: true,
        }
    }
}

/// The form of the failover barrier (`failover.barrier`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BarrierMode {
    /// A genuine control batch (an ABORT transaction marker written with WriteTxnMarkers),
    /// falling back to the data barrier for partitions whose leader refuses WriteTxnMarkers for
    /// authorization or does not support it (WARN, `mirrorgate_barrier_writes_total{kind="data"}`).
    #[default]
    Auto,
    /// Only the control batch: a refusal fails the partition (retried) instead of falling back.
    Control,
    /// Only the data barrier (single-record batch with the reserved key, hidden by the gateway).
    Data,
}

/// The failover step that advances every destination broker's producer-id allocator past the
/// producer ids mirrored traffic left in the brokers (review F15), so that new local producers
/// are not handed them; PID screening stays the fallback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PidAllocatorConfig {
    /// Run the step (`false`: screening alone).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Most producer ids the step may skip; screened ids further above the brokers' lowest
    /// position are left to screening.
    #[serde(default = "default_pid_max_ids")]
    pub max_ids: u64,
    /// Give up (and rely on screening) after this long, milliseconds.
    #[serde(default = "default_pid_timeout_ms")]
    pub timeout_ms: u64,
    /// Connections per destination broker.
    #[serde(default = "default_pid_connections")]
    pub connections: usize,
    /// InitProducerId requests written per connection before their answers are read.
    #[serde(default = "default_pid_in_flight")]
    pub in_flight: usize,
}

impl Default for PidAllocatorConfig {
    fn default() -> Self {
        PidAllocatorConfig {
            enabled: true,
            max_ids: default_pid_max_ids(),
            timeout_ms: default_pid_timeout_ms(),
            connections: default_pid_connections(),
            in_flight: default_pid_in_flight(),
        }
    }
}

fn default_pid_max_ids() -> u64 {
    1_000_000
}
fn default_pid_timeout_ms() -> u64 {
    120_000
}
fn default_pid_connections() -> usize {
    4
}
fn default_pid_in_flight() -> usize {
    64
}

/// A mirror: destination topics fed from a source cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    /// Unique name, `[A-Za-z0-9._-]+`.
    pub name: String,
    /// Topic names; an entry starting with `regex:` is a regular expression over the whole name.
    pub topics: Vec<String>,
    /// Source cluster, used by the built-in mirror agent (and by the forward listener).
    #[serde(default)]
    pub source: Option<ClusterConfig>,
    /// What copies the source into the destination: the built-in agent (default, with a
    /// `source`) or another tool writing through the mirror listener (docs/forward-mode.md).
    #[serde(default, skip_serializing_if = "Mirroring::is_agent")]
    pub mirroring: Mirroring,
    /// How the built-in agent mirrors transactional data.
    #[serde(default)]
    pub transactions: MirrorTransactionsConfig,
    /// Topic config sync (built-in agent; docs/configs-and-acls.md).
    #[serde(default)]
    pub configs: ConfigSyncConfig,
    /// ACL sync (built-in agent, opt-in; docs/configs-and-acls.md).
    #[serde(default)]
    pub acls: AclSyncConfig,
    /// Which consumer groups' committed offsets follow the data (docs/moving-applications.md).
    #[serde(default)]
    pub groups: GroupSyncConfig,
    /// Where the recovery of a failover's un-mirrored tail copies records (docs/failover.md).
    #[serde(default)]
    pub recovery: RecoveryConfig,
    /// The forward listener: applications connect here from day one; its upstream is the
    /// source until the mirror fails over, the destination after (docs/forward-mode.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardConfig>,
}

/// `mirrors[].mirroring`: what copies a mirror's source into the destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mirroring {
    /// The built-in agent, when the mirror has a `source`: batches copied as they are, producer
    /// ids, epochs and sequences kept.
    #[default]
    Agent,
    /// Another tool (MirrorMaker 2, say) writes through the mirror listener under its own
    /// producer ids; the `source` serves the forward listener and its switchover only.
    External,
}

impl Mirroring {
    fn is_agent(&self) -> bool {
        *self == Mirroring::Agent
    }
}

impl MirrorConfig {
    /// The source the built-in agent mirrors from: none for a mirror without a `source` or
    /// with `mirroring: external`.
    pub fn agent_source(&self) -> Option<&ClusterConfig> {
        match self.mirroring {
            Mirroring::Agent => self.source.as_ref(),
            Mirroring::External => None,
        }
    }
}

/// `mirrors[].forward`: one virtual cluster for the applications of a mirror's topics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardConfig {
    /// The ports, one per broker node id of either cluster (same keys as `listeners.client`).
    pub listener: ListenerConfig,
    /// The cluster id clients see, the same before and after the switch (default
    /// `mirrorgate-forward-NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// A switchover holds the forward listener at most this long for the source connections to
    /// finish and the agent to mirror the source's log end; past it, it is refused and the
    /// listener released to the source (>= 100).
    #[serde(default = "default_forward_hold_ms")]
    pub hold_ms: u64,
}

fn default_forward_hold_ms() -> u64 {
    5000
}

impl ForwardConfig {
    /// The cluster id the forward listener of mirror `mirror` presents.
    pub fn cluster_id_for(&self, mirror: &str) -> String {
        self.cluster_id
            .clone()
            .unwrap_or_else(|| format!("mirrorgate-forward-{mirror}"))
    }
}

/// `mirrors[].transactions`: mirroring transactional data as-is (docs/agent.md#transactions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorTransactionsConfig {
    /// What the agent does when the destination verifies transactional batches against its own
    /// coordinator (`transaction.partition.verification.enable=true`).
    #[serde(default)]
    pub verification: VerificationPolicy,
}

/// `mirrors[].transactions.verification`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerificationPolicy {
    /// Set the destination's cluster-wide default to false when a transactional batch is
    /// refused for it (logged, counted).
    #[default]
    Manage,
    /// Only read it: the partition fails with the command that switches it off.
    Check,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("var/mirrorgate")
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}
fn default_metadata_refresh_ms() -> u64 {
    30_000
}
fn default_bind_host() -> String {
    "127.0.0.1".to_string()
}
fn default_node_id_base() -> i32 {
    1
}
fn default_max_brokers() -> u16 {
    16
}
fn default_admin_bind() -> String {
    "127.0.0.1:9180".to_string()
}
fn default_max_frame_bytes() -> u32 {
    104_857_600
}
fn default_idle_timeout_ms() -> u64 {
    600_000
}
fn default_max_in_flight() -> usize {
    128
}
fn default_shutdown_grace_ms() -> u64 {
    10_000
}
fn default_upstream_timeout_ms() -> u64 {
    120_000
}
fn default_unknown_outcome_settle_ms() -> u64 {
    5_000
}
fn default_true() -> bool {
    true
}
fn default_log_format() -> String {
    "text".to_string()
}
fn default_log_level() -> String {
    "info".to_string()
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            bind: default_admin_bind(),
            token: None,
            audit_topic: None,
        }
    }
}
impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_frame_bytes: default_max_frame_bytes(),
            idle_timeout_ms: default_idle_timeout_ms(),
            max_in_flight: default_max_in_flight(),
            connection_threads: 0,
            shutdown_grace_ms: default_shutdown_grace_ms(),
            upstream_timeout_ms: default_upstream_timeout_ms(),
            unknown_outcome_settle_ms: default_unknown_outcome_settle_ms(),
        }
    }
}
impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            per_partition: true,
        }
    }
}
impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            format: default_log_format(),
            level: default_log_level(),
        }
    }
}

impl ListenerConfig {
    /// The port serving broker `node_id`, or `None` when the node id is outside the range.
    pub fn port_for_node(&self, node_id: i32) -> Option<u16> {
        let idx = node_id.checked_sub(self.node_id_base)?;
        if idx < 0 || idx >= i32::from(self.max_brokers) {
            return None;
        }
        u16::try_from(i32::from(self.port_base) + idx).ok()
    }
    /// The node id served on `port`, the inverse of [`Self::port_for_node`].
    pub fn node_for_port(&self, port: u16) -> Option<i32> {
        let idx = i32::from(port) - i32::from(self.port_base);
        if idx < 0 || idx >= i32::from(self.max_brokers) {
            return None;
        }
        self.node_id_base.checked_add(idx)
    }
    /// The host advertised to clients.
    pub fn advertised(&self) -> &str {
        self.advertised_host.as_deref().unwrap_or(&self.bind)
    }
}

impl AdminConfig {
    /// The admin bind address, parsed.
    pub fn bind_addr(&self) -> Result<SocketAddr, std::net::AddrParseError> {
        self.bind.parse()
    }
}
