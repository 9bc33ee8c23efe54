//! The Kafka-facing side of the gateway: listeners, client connections and their upstream
//! connections, response rewriting.
//!
//! Owns: sockets to clients and to destination brokers. The destination metadata view it reads
//! and updates is [`crate::cluster`].
//! Must not touch: the admin API, configuration loading, the state store. It reads the
//! configuration it is given and records what happens in [`crate::metrics`].

mod close;
pub mod connection;
pub mod context;
pub mod exchange;
pub mod forward;
pub mod forward_ids;
pub mod listener;
pub mod sasl;
pub mod threads;

pub use context::{ConnContext, ListenerAddressMap};
pub use listener::BoundPorts;

#[cfg(test)]
mod tests;
