//! InitProducerId on the client listener: the answer is screened ([`super::super::screen`])
//! while the screening set is active, so that no local producer gets a producer id mirrored
//! traffic left in the brokers.
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
