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
    /// A forward listener's cluster id (see [`AddressMap::virtual_cluster`]).
    virtual_cluster: Option<StrBytes>,
    /// See [`AddressMap::produce_hint_epochs`].
    produce_hint_epochs: bool,
}

impl ListenerAddressMap {
    pub fn new(listener: &ListenerConfig) -> Self {
        ListenerAddressMap {
            host: StrBytes::from_string(listener.advertised().to_string()),
            listener: listener.clone(),
            virtual_cluster: None,
            produce_hint_epochs: true,
        }
    }

    /// The map of a forward listener presenting one cluster with id `cluster_id`, on its
    /// `destination` side or its source side (Produce leader hints keep their epochs on the
    /// destination side only: see [`AddressMap::produce_hint_epochs`]).
    pub fn forward(listener: &ListenerConfig, cluster_id: &str, destination: bool) -> Self {
        ListenerAddressMap {
            virtual_cluster: Some(StrBytes::from_string(cluster_id.to_string())),
            produce_hint_epochs: destination,
            ..ListenerAddressMap::new(listener)
        }
    }
}

impl AddressMap for ListenerAddressMap {
    fn endpoint(&self, node_id: i32) -> Option<(StrBytes, i32)> {
        self.listener
            .port_for_node(node_id)
            .map(|p| (self.host.clone(), i32::from(p)))
    }

    fn virtual_cluster(&self) -> Option<StrBytes> {
        self.virtual_cluster.clone()
    }

    fn produce_hint_epochs(&self) -> bool {
        self.produce_hint_epochs
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
    /// A forward listener's route (`None` on the client and mirror listeners). Its source-side
    /// context has no mirrors and no PSM: the source is the active cluster there.
    pub forward: Option<Arc<super::forward::ForwardRoute>>,
}

impl ConnContext {
    /// Whether this connection's traffic is local (client listener, or a forward listener on
    /// the destination side): what read-only enforcement and screening apply to.
    pub fn local(&self) -> bool {
        self.kind != ListenerKind::Mirror
    }

    /// The forward route of a connection to the source (nothing is enforced there).
    pub fn forward_to_source(&self) -> Option<&Arc<super::forward::ForwardRoute>> {
        self.forward.as_ref().filter(|_| self.mirrors.is_none())
    }

    /// Whether a forward connection to the source may not send now (several instances: see
    /// [`super::forward::ForwardRoute::source_refusal`]); the request waits as for a hold.
    pub fn source_refused(&self) -> bool {
        let Some(why) = self.forward_to_source().and_then(|r| r.source_refusal()) else {
            return false;
        };
        tracing::info!(reason = %why, "a request for the source waits: the state topic's view refuses it now");
        true
    }
}
