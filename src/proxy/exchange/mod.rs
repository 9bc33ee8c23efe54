//! Per-API exchanges: what the gateway does with one request and its response beyond
//! forwarding them, one module per API family, behind one interface the connection loop uses:
//!
//! ```text
//! begin(ctx, header, acks, frame) ──► (Step, Pending)      request half
//!      Step::Forward(frame) → upstream │ Step::Answer(frame) → client │ Step::Nothing
//! pending.finish(ctx, upstream, response) ──► frame         response half
//! ```
//!
//! - [`produce`]: one [`ProduceView`](crate::protocol::produce::ProduceView) per request read by
//!   enforcement (read-only mirror topics, fencing, acks=0 on the mirror listener), the PSM tap
//!   and the inert-barrier count; one decoded response shared by the tap, the rejection merge,
//!   the duplicate-ack guard and the address rewrite, encoded once and only when changed.
//! - [`forwarded_produce`]: on a forward listener's source side, the source's acknowledgements
//!   noted per batch for the failover report ([`super::forward`]); the request sent as it is.
//! - [`fetch`]: barriers hidden from ordinary consumers (Fetch, ShareFetch; client listener).
//! - [`init_producer_id`]: PID screening of InitProducerId answers (client listener, forward
//!   listener on the destination); on a forward listener's source side, the producer ids the
//!   source hands out are remembered as forwarded ([`super::forward`]), and nothing else is
//!   done but the address rewrite.
//! - [`admin`]: admin and transaction requests naming mirror topics refused (client listener:
//!   read-only until failover); admin, transaction and group-offset requests naming failed-over
//!   topics refused (mirror listener: review G8).
//! - [`markers`]: WriteTxnMarkers admitted per mirror partition like a mirror write (mirror
//!   listener: the agent's copies of the source's transaction markers).
//! - [`metadata`]: broker addresses in responses rewritten to the gateway's (every API that
//!   carries them; the cluster view learns brokers and topic ids from Metadata).
//!
//! Which features are configured (mirrors, PSM) is decided here, per API: the connection loop
//! does not branch on them.
//!
//! Owns: the per-request [`Pending`] state and the per-response transformations. Must not touch:
//! socket I/O (the connection does it), the decisions themselves (the mirror controller and the
//! PSM registry make them), the bytes' layout (`crate::protocol`).

pub mod admin;
pub mod fetch;
pub mod forwarded_produce;
pub mod init_producer_id;
pub mod markers;
pub mod metadata;
pub mod produce;
pub mod screen;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::protocol::admin_refusal::{self, AdminRefusalError};
use crate::protocol::enforce;
use crate::protocol::frame::{FrameError, RequestHeaderInfo};

use super::context::ConnContext;

/// Error code UNKNOWN_TOPIC_ID (retriable: the client refreshes metadata).
const UNKNOWN_TOPIC_ID: i16 = 100;

/// What to do with a request now.
#[derive(Debug)]
pub enum Step {
    /// Send this frame upstream; its response goes through [`Pending::finish`].
    Forward(Bytes),
    /// Send nothing upstream; answer the client with this frame.
    Answer(Bytes),
    /// Send nothing anywhere (an acks=0 Produce whose every partition was refused).
    Nothing,
}

/// What one request leaves for its response.
pub struct Pending {
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    kind: Kind,
}

enum Kind {
    Plain,
    Produce(produce::Pending),
    ForwardedProduce(forwarded_produce::Pending),
    Fetch(fetch::Pending),
    InitProducerId(init_producer_id::Pending),
    Admin(admin::Pending),
    Markers(markers::Pending),
    /// A forward listener's EndTxn to the source, of this producer id.
    EndTxn(i64),
}

/// A request or response the gateway refuses to handle (the connection is closed).
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("produce request not readable for enforcement: {0}")]
    Enforce(#[from] enforce::EnforceError),
    #[error("admin request not readable for read-only enforcement: {0}")]
    Admin(#[from] AdminRefusalError),
    #[error("WriteTxnMarkers request not readable for mirror admission: {0}")]
    Markers(String),
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The address rewrite could not read the response (the connection reports a bad response).
    #[error(transparent)]
    Rewrite(FrameError),
    /// acks=0 leaves the failover drain nothing to wait for: refused on the mirror listener for
    /// mirror partitions (Kafka itself closes the connection of a failed acks=0 request).
    #[error("acks=0 produce to mirror partition {topic}-{partition} refused on the mirror listener: mirror writes must use acks=1 or acks=all, so a failover knows their outcome")]
    MirrorAcksZero { topic: String, partition: i32 },
}

/// Begin the exchange of one request (`frame`, length prefix included, header `h`). `acks`: a
/// Produce request's acks, read once by the connection.
pub fn begin(
    ctx: &ConnContext,
    h: &RequestHeaderInfo,
    acks: Option<i16>,
    frame: Bytes,
) -> Result<(Step, Pending), ExchangeError> {
    let pending = |kind| Pending {
        api: h.api_key,
        version: h.api_version,
        correlation_id: h.correlation_id,
        kind,
    };
    let client = ctx.local();
    if ctx.forward_to_source().is_some() {
        // The source is the active cluster: nothing is enforced; the producer ids it hands
        // out through this listener and its acknowledgements are remembered (`super::forward`).
        let (step, kind) = match h.api_key {
            ApiKey::Produce => match forwarded_produce::begin(ctx, h, frame) {
                (step, Some(p)) => (step, Kind::ForwardedProduce(p)),
                (step, None) => (step, Kind::Plain),
            },
            ApiKey::InitProducerId => {
                let (step, p) = init_producer_id::begin(ctx, h, frame);
                (step, Kind::InitProducerId(p))
            }
            // The transactions open through the listener (a switchover's hold lets them end).
            api @ (ApiKey::AddPartitionsToTxn
            | ApiKey::AddOffsetsToTxn
            | ApiKey::TxnOffsetCommit
            | ApiKey::EndTxn) => {
                let body = frame.slice(4 + h.header_len..);
                let id = crate::protocol::transactions::producer_of(api, h.api_version, &body);
                match (id, ctx.forward_to_source()) {
                    (Some(id), _) if api == ApiKey::EndTxn => {
                        (Step::Forward(frame), Kind::EndTxn(id))
                    }
                    (Some(id), Some(route)) => {
                        route.note_transaction(id);
                        (Step::Forward(frame), Kind::Plain)
                    }
                    _ => (Step::Forward(frame), Kind::Plain),
                }
            }
            _ => (Step::Forward(frame), Kind::Plain),
        };
        return Ok((step, pending(kind)));
    }
    let (step, kind) = match h.api_key {
        ApiKey::Produce => {
            let acks = match acks {
                Some(a) => a,
                None => {
                    crate::protocol::produce::peek_acks(h.api_version, &frame[4 + h.header_len..])?
                }
            };
            let (step, p) = produce::begin(ctx, h, acks, frame)?;
            (step, Kind::Produce(p))
        }
        ApiKey::Fetch | ApiKey::ShareFetch if client => {
            let (step, p) = fetch::begin(ctx, frame);
            (step, Kind::Fetch(p))
        }
        ApiKey::InitProducerId if client => {
            let (step, p) = init_producer_id::begin(ctx, h, frame);
            (step, Kind::InitProducerId(p))
        }
        ApiKey::WriteTxnMarkers if !client => {
            let (step, p) = markers::begin(ctx, h, frame)?;
            (step, Kind::Markers(p))
        }
        api if client && admin_refusal::is_guarded(api)
            || !client && admin_refusal::is_guarded_on_mirror(api) =>
        {
            let (step, p) = admin::begin(ctx, h, frame)?;
            (step, Kind::Admin(p))
        }
        _ => (Step::Forward(frame), Kind::Plain),
    };
    Ok((step, pending(kind)))
}

impl Pending {
    /// Nothing to do with the response of request `h` (the gateway answered it itself).
    pub fn plain(h: &RequestHeaderInfo) -> Pending {
        Pending {
            api: h.api_key,
            version: h.api_version,
            correlation_id: h.correlation_id,
            kind: Kind::Plain,
        }
    }

    /// Whether the request holds admitted mirror writes (mirror-listener Produce or
    /// WriteTxnMarkers), which may be sent only while
    /// [`crate::mirror::policy::MirrorPolicy::admitted_mirror_writes_lapsed`] says nothing.
    pub fn holds_mirror_writes(&self) -> bool {
        match &self.kind {
            Kind::Produce(p) => p.holds_mirror_writes(),
            Kind::Markers(p) => p.holds_mirror_writes(),
            _ => false,
        }
    }

    /// The request was never sent upstream: its mirror writes are known not to be appended.
    pub fn release_unsent(self) {
        match self.kind {
            Kind::Produce(p) => p.release_unsent(),
            Kind::Markers(p) => p.finish(),
            _ => {}
        }
    }

    /// Finish the exchange with the broker's response (`frame`, length prefix included, from
    /// `upstream`): the frame for the client.
    pub async fn finish(
        self,
        ctx: &ConnContext,
        upstream: &str,
        frame: Bytes,
    ) -> Result<Bytes, ExchangeError> {
        let (api, version) = (self.api, self.version);
        let frame = match self.kind {
            Kind::Produce(p) => return p.finish(ctx, version, frame),
            Kind::ForwardedProduce(p) => return p.finish(ctx, version, frame),
            Kind::Plain => frame,
            Kind::Fetch(p) => p.finish(ctx, api, version, frame)?,
            Kind::InitProducerId(p) => {
                p.finish(ctx, upstream, version, self.correlation_id, frame)
                    .await?
            }
            Kind::Admin(p) => p.finish(frame)?,
            Kind::Markers(p) => {
                p.finish();
                frame
            }
            Kind::EndTxn(id) => {
                let ended = crate::protocol::transactions::end_txn_ended(version, &frame);
                if let (Some(true), Some(route)) = (ended, ctx.forward_to_source()) {
                    route.end_transaction(id);
                }
                frame
            }
        };
        metadata::rewrite(ctx, api, version, frame).map_err(ExchangeError::Rewrite)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod golden_tests;

#[cfg(test)]
#[path = "policy_tests.rs"]
pub(crate) mod policy_tests;
