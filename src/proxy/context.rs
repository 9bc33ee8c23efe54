//! What a client connection is given: the context shared by every connection of one listener
//! ([`ConnContext`]) and the listener's node-id → port map its responses are rewritten with.
//! The connection (`connection.rs`) and the per-API exchanges (`exchange/`) both read it.
//!
//! Owns: those two types. Must not touch: sockets, what a request means.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::protocol::StrBytes;

use crate::cluster::ClusterView;
use crate::config::{LimitsConfig, ListenerConfig};
use crate::metrics::{ApiHandles, ListenerKind, Metrics};
use crate::protocol::rewrite::AddressMap;

/// Maps node ids to this listener's ports.
pub struct ListenerAddressMap {
    host: StrBytes,
    listener: ListenerConfig,
}

impl ListenerAddressMap {
    pub fn new(listener: &ListenerConfig) -> Self {
        ListenerAddressMap {
            host: StrBytes::from_string(listener.advertised().to_string()),
            listener: listener.clone(),
        }
    }
}

impl AddressMap for ListenerAddressMap {
    fn endpoint(&self, node_id: i32) -> Option<(StrBytes, i32)> {
        self.listener
            .port_for_node(node_id)
            .map(|p| (self.host.clone(), i32::from(p)))
    }
}

/// Everything a connection needs, shared by all connections of one listener.
pub struct ConnContext {
    pub kind: ListenerKind,
    /// The PSM registry, when mirrors are configured (the produce tap feeds it).
    pub psm: Option<Arc<crate::psm::registry::PsmRegistry>>,
    /// Verify CRC-32C of tracked batches on this listener.
    pub verify_crc: bool,
    /// The mirror controller, when mirrors are configured (read-only enforcement, fencing,
    /// barriers, PID screening).
    pub mirrors: Option<Arc<dyn crate::mirror::policy::MirrorPolicy>>,
    pub address_map: ListenerAddressMap,
    pub cluster: Arc<ClusterView>,
    pub metrics: Arc<Metrics>,
    pub handles: ApiHandles,
    pub limits: LimitsConfig,
    pub connect_timeout: Duration,
    /// Sets up the transport of accepted client sockets (TLS, when configured).
    pub acceptor: crate::net::Acceptor,
    /// SASL principals allowed on this listener (`None`: no limit).
    pub principal_limits: Option<Arc<super::sasl::PrincipalLimits>>,
    /// The threads accepted connections run on (`None`: the accepting runtime's own tasks).
    pub threads: Option<Arc<super::threads::ConnectionThreads>>,
}
