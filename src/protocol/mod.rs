//! The Kafka wire protocol as the gateway needs it: framing, header peeks, and decode-on-demand
//! of the few messages the gateway must read or rewrite.
//!
//! Owns: byte-level parsing and encoding. Everything here is synchronous and pure except
//! [`frame::read_frame`] (reads one frame from an async stream).
//! Must not touch: connection management (the gateway's own Kafka client is `client/`),
//! metrics, configuration, or any gateway state.
//! Callers pass in what a rewrite needs (e.g. an [`rewrite::AddressMap`]).

pub mod admin_refusal;
pub mod barrier;
pub mod barrier_value;
pub mod batch;
pub mod codec;
pub mod enforce;
pub mod fetch_filter;
pub mod frame;
pub mod produce;
pub mod records;
pub mod rewrite;
pub mod transactions;
pub mod txn_marker;
mod varint;
pub mod versions;

pub use frame::{parse_request_header, read_frame, FrameError, RequestHeaderInfo};
