//! PID screening (DESIGN §4.3, layer 2): after a failover, an InitProducerId answer that hands a
//! local producer a producer id that mirrored traffic left in the brokers' state is not passed on
//! as it is. An idempotent producer gets a fresh id (the gateway asks again); a transactional
//! producer is bumped until its epoch is above every mirrored epoch of that id. Both are bounded;
//! at the bound the client gets a retriable error.

use super::connection::ConnContext;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::mirror::controller::MirrorController;
use crate::protocol::frame::FrameError;

use super::intercept::InterceptError;

/// Fresh producer ids asked for an idempotent producer before giving up.
pub const MAX_FRESH_IDS: usize = 8;
/// Epoch bumps asked for a transactional producer before giving up (the client retries).
pub const MAX_EPOCH_BUMPS: usize = 32;
/// COORDINATOR_LOAD_IN_PROGRESS: retriable for InitProducerId in every client.
const RETRIABLE: i16 = 14;

/// The InitProducerId request as the client sent it.
#[derive(Debug, Clone)]
pub struct InitRequest {
    pub request: InitProducerIdRequest,
    pub version: i16,
}

fn bad(e: impl std::fmt::Display) -> FrameError {
    FrameError::BadResponse(format!("InitProducerId: {e}"))
}

impl InitRequest {
    /// Decode the request body of a whole request frame.
    pub fn read(frame: &Bytes, header_len: usize, version: i16) -> Result<InitRequest, FrameError> {
        let start = 4usize
            .checked_add(header_len)
            .filter(|s| *s <= frame.len())
            .ok_or_else(|| bad("short frame"))?;
        let mut body = frame.slice(start..);
        let request = InitProducerIdRequest::decode(&mut body, version).map_err(bad)?;
        Ok(InitRequest { request, version })
    }
}

fn encode(
    correlation_id: i32,
    version: i16,
    resp: &InitProducerIdResponse,
) -> Result<Bytes, FrameError> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(
            &mut out,
            ApiKey::InitProducerId.response_header_version(version),
        )
        .map_err(bad)?;
    resp.encode(&mut out, version).map_err(bad)?;
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

fn decode(frame: &Bytes, version: i16) -> Result<InitProducerIdResponse, FrameError> {
    let mut body = frame.slice(4.min(frame.len())..);
    ResponseHeader::decode(
        &mut body,
        ApiKey::InitProducerId.response_header_version(version),
    )
    .map_err(bad)?;
    InitProducerIdResponse::decode(&mut body, version).map_err(bad)
}

/// Screen one InitProducerId answer (whole frame). Returns the frame to pass on.
pub async fn screen(
    ctl: &MirrorController,
    upstream: &str,
    version: i16,
    correlation_id: i32,
    frame: Bytes,
    init: &InitRequest,
    conn: &ConnContext,
) -> Result<Bytes, InterceptError> {
    let timeout = conn.connect_timeout;
    let mut resp = decode(&frame, version)?;
    if resp.error_code != 0 {
        return Ok(frame);
    }
    let Some(mut entry) = ctl.screened(resp.producer_id.0) else {
        return Ok(frame);
    };
    ctl.count_screened();
    let transactional = init.request.transactional_id.is_some();
    tracing::warn!(
        producer_id = resp.producer_id.0, epoch = resp.producer_epoch, mirrored_epoch = entry.max_epoch, transactional,
        "InitProducerId handed out a producer id that mirrored traffic left in the brokers; screening it"
    );
    let mut client = match conn.cluster.client(upstream, timeout).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot reach the broker to screen the producer id; answering a retriable error");
            resp.error_code = RETRIABLE;
            return Ok(encode(correlation_id, version, &resp)?);
        }
    };
    let bound = if transactional {
        MAX_EPOCH_BUMPS
    } else {
        MAX_FRESH_IDS
    };
    for _ in 0..bound {
        let mut req = init.request.clone();
        if transactional && version >= 3 {
            // Bump the epoch of the id the coordinator handed out (KIP-360 fields).
            req.producer_id = resp.producer_id;
            req.producer_epoch = resp.producer_epoch;
        } else if !transactional {
            req.producer_id = (-1).into();
            req.producer_epoch = -1;
        }
        let next = match client.send(&req, version).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "screening InitProducerId failed; answering a retriable error");
                break;
            }
        };
        if next.error_code != 0 {
            resp = next;
            break;
        }
        resp = next;
        match ctl.screened(resp.producer_id.0) {
            None => return Ok(encode(correlation_id, version, &resp)?),
            Some(e) if transactional && resp.producer_epoch > e.max_epoch => {
                return Ok(encode(correlation_id, version, &resp)?);
            }
            Some(e) => entry = e,
        }
    }
    if resp.error_code == 0 {
        tracing::warn!(
            producer_id = resp.producer_id.0,
            mirrored_epoch = entry.max_epoch,
            "screening bound reached; answering a retriable error"
        );
        resp.error_code = RETRIABLE;
        resp.producer_id = (-1).into();
        resp.producer_epoch = -1;
    }
    Ok(encode(correlation_id, version, &resp)?)
}
