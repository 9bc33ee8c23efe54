//! Why the gateway closes a client connection on its own ([`Refused`]), and the metric label
//! of each reason. The upstream broker is the destination's, or on a forward listener the side
//! the route is on (the source before a switchover).
//!
//! Owns: those reasons. Must not touch: the connection (which decides to close), sockets.

use kafka_protocol::messages::ApiKey;
use std::time::Duration;

use crate::protocol::frame::FrameError;

use super::exchange::ExchangeError;

/// Why the gateway closed a connection on its own.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("{0}")]
    Exchange(ExchangeError),
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("{api:?} v{version} is not supported by the gateway")]
    UnsupportedVersion { api: ApiKey, version: i16 },
    #[error("upstream broker {addr} failed: {source}")]
    Upstream {
        addr: String,
        source: std::io::Error,
    },
    #[error("upstream broker {0} closed the connection")]
    UpstreamClosed(String),
    #[error("upstream broker {addr} did not answer {api:?} within {after:?}")]
    UpstreamTimeout {
        addr: String,
        api: ApiKey,
        after: Duration,
    },
    #[error("upstream broker sent correlation id {got}, expected {want}")]
    Correlation { got: i32, want: i32 },
    #[error("client went away: {0}")]
    ClientGone(std::io::Error),
}

impl From<ExchangeError> for Refused {
    fn from(e: ExchangeError) -> Self {
        match e {
            ExchangeError::Rewrite(f) => Refused::Frame(f),
            other => Refused::Exchange(other),
        }
    }
}

impl Refused {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Refused::Frame(FrameError::TooLarge { .. }) => "frame_too_large",
            Refused::Frame(FrameError::UnknownApiKey(_)) => "unknown_api",
            Refused::Frame(FrameError::Truncated { .. }) => "truncated_frame",
            Refused::Frame(FrameError::BadResponse(_)) => "bad_response",
            Refused::Frame(FrameError::Io(_)) => "io",
            Refused::Frame(_) => "bad_frame",
            Refused::UnsupportedVersion { .. } => "unsupported_version",
            Refused::Upstream { .. } | Refused::UpstreamClosed(_) => "upstream",
            Refused::UpstreamTimeout { .. } => "upstream_timeout",
            Refused::Correlation { .. } => "upstream_correlation",
            Refused::ClientGone(_) => "client_gone",
            Refused::Exchange(ExchangeError::MirrorAcksZero { .. }) => "mirror_acks_zero",
            Refused::Exchange(_) => "unreadable_for_enforcement",
        }
    }
}
