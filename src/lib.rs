//! mirrorgate: a Kafka-wire-compatible gateway for the destination cluster of a mirrored
//! Kafka deployment. The architecture is described in `docs/architecture.md`; one module per
//! responsibility:
//!
//! - [`protocol`]: framing, header peek, decode-on-demand of the APIs the gateway rewrites.
//! - [`client`]: the gateway's own Kafka client: connections with its SASL login, requests.
//! - [`proxy`]: listeners, client/upstream connections, response rewriting.
//! - [`cluster`]: the gateway's view of the destination cluster (brokers, topics, metadata).
//! - [`psm`]: per-partition producer state, the produce tap, rebuild from the log.
//! - [`mirror`]: mirror partition states, the controller, failover with barriers.
//! - [`admin`]: the admin HTTP server.
//! - [`state`]: the on-disk state store.
//! - [`config`]: configuration model, loading, validation.
//! - [`metrics`]: the Prometheus registry and the gateway's metric families.
//! - [`net`]: transport under the protocol: TCP and TLS of client and broker connections.

pub mod admin;
pub mod agent;
pub mod app;
pub mod audit;
pub mod client;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod failover;
pub mod instances;
pub mod metrics;
pub mod mirror;
pub mod net;
pub mod protocol;
pub mod proxy;
pub mod psm;
pub mod recovery;
pub mod state;
pub mod sync;

#[cfg(test)]
mod architecture_tests;
#[cfg(test)]
mod docs_tests;
#[cfg(test)]
mod file_graph_tests;
