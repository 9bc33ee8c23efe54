//! The gateway's own Kafka client: the connections the gateway opens to brokers for its own
//! requests (metadata, producer state, barriers, screening, the mirror agent), above the byte
//! transport of `net` and the wire format of `protocol`.
//!
//! Owns: opening such a connection ([`Connector`]: the transport, then the gateway's SASL
//! login, [`sasl`] and [`scram`]), and sending requests on it ([`KafkaClient`]); which answers
//! are retriable and when their retries stop being quiet ([`retry`]).
//! Must not touch: client connections proxied by the gateway (their bytes, SASL included, are
//! `proxy/`'s), the cluster view and any gateway state, metrics.

mod connector;
mod kafka;
pub mod mirror_ops;
pub mod ops;
pub mod retry;
pub mod sasl;
pub mod scram;

pub use connector::{ConnectError, Connector, SetupError};
pub use kafka::{
    list_offsets_request, single_partition_fetch, ClientError, FetchedPartition, KafkaClient,
    PartitionError, PartitionRequestError, RequestError, EARLIEST, LATEST,
};
