//! The Kafka-facing side of the gateway: listeners, client connections and their upstream
//! connections, response rewriting, and the view of the destination cluster.
//!
//! Owns: sockets to clients and to destination brokers, and the destination metadata view.
//! Must not touch: the admin API, configuration loading, the state store. It reads the
//! configuration it is given and records what happens in [`crate::metrics`].

pub mod cluster;
pub mod connection;
pub mod intercept;
pub mod listener;
pub mod sasl;
pub mod screen;

pub use cluster::ClusterView;
pub use connection::{ConnContext, ListenerAddressMap};
pub use listener::BoundPorts;

#[cfg(test)]
mod tests;
