//! InitProducerId on the client listener: the answer is screened ([`super::super::screen`])
//! while the screening set is active, so that no local producer gets a producer id mirrored
//! traffic left in the brokers.
//!
//! On a forward listener the producer id handed out is noted as forwarded
//! ([`crate::proxy::forward`]): on its source side the source's, on its destination side the
//! screened answer (a switch back takes it to the source, where it goes on).
//!
//! Owns: remembering the request for the screening. Must not touch: the screening policy
//! (`proxy::exchange::screen`), the screening set (the mirror controller's).

use bytes::Bytes;

use super::screen::{self, InitRequest};
use super::{ConnContext, ExchangeError, Step};

/// The request, decoded for the screening (`None`: mirrors not configured, or unreadable).
pub struct Pending {
    init: Option<InitRequest>,
}

pub fn begin(
    ctx: &ConnContext,
    h: &crate::protocol::frame::RequestHeaderInfo,
    frame: Bytes,
) -> (Step, Pending) {
    let init = if ctx.mirrors.is_some() {
        InitRequest::read(&frame, h.header_len, h.api_version).ok()
    } else {
        None
    };
    (Step::Forward(frame), Pending { init })
}

impl Pending {
    pub async fn finish(
        self,
        ctx: &ConnContext,
        upstream: &str,
        version: i16,
        correlation_id: i32,
        frame: Bytes,
    ) -> Result<Bytes, ExchangeError> {
        let answer = self
            .answer(ctx, upstream, version, correlation_id, frame)
            .await?;
        // Forward listener, either side: the producer's id came through it (on the destination
        // side too, so that it goes on across a switch back and a later switchover).
        if let Some(route) = &ctx.forward {
            if let Some((id, epoch)) = handed_out(version, &answer) {
                route.note_producer(id, epoch);
            }
        }
        Ok(answer)
    }

    /// The answer for the client: the broker's, screened where the screening is active.
    async fn answer(
        self,
        ctx: &ConnContext,
        upstream: &str,
        version: i16,
        correlation_id: i32,
        frame: Bytes,
    ) -> Result<Bytes, ExchangeError> {
        if ctx.forward_to_source().is_some() {
            return Ok(frame);
        }
        let (Some(ctl), Some(init)) = (&ctx.mirrors, self.init) else {
            return Ok(frame);
        };
        if !ctl.screening_active() {
            return Ok(frame);
        }
        screen::screen(
            ctl.as_ref(),
            upstream,
            version,
            correlation_id,
            frame,
            &init,
            ctx,
        )
        .await
    }
}

/// The producer id and epoch an InitProducerId answer (`frame`, length prefix included) hands out, when
/// it succeeded.
fn handed_out(version: i16, frame: &Bytes) -> Option<(i64, i16)> {
    use kafka_protocol::messages::{ApiKey, InitProducerIdResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;
    let mut body = frame.slice(4..);
    ResponseHeader::decode(
        &mut body,
        ApiKey::InitProducerId.response_header_version(version),
    )
    .ok()?;
    let resp = InitProducerIdResponse::decode(&mut body, version).ok()?;
    (resp.error_code == 0).then_some((resp.producer_id.0, resp.producer_epoch))
}
