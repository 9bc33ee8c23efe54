//! Principal limits of the mirror listener (`listeners.mirror.allowed_principals`).
//!
//! A client's SASL exchange passes through to the destination broker untouched; on a listener
//! with principal limits the gateway also *observes* it: the mechanism from SaslHandshake, the
//! user name from the first SaslAuthenticate token after it (SCRAM client-first-message
//! `n,,n=USER,r=...`, PLAIN `authzid NUL USER NUL PASSWORD`). A principal (`User:USER`) that is not
//! allowed gets a SaslAuthenticate answer from the gateway itself (SASL_AUTHENTICATION_FAILED,
//! naming the principal and the listener) and the connection is closed; nothing of that
//! exchange reaches the broker. Any request other than ApiVersions, SaslHandshake and
//! SaslAuthenticate before an allowed principal's first token closes the connection (the
//! broker itself closes a connection that skips SASL, so no answer is expected).
//!
//! The broker still authenticates: the user name the gateway reads is the one the SCRAM proof
//! or the PLAIN password is checked for (Kafka refuses a differing authorization id), so the
//! principal that ends up authenticated is the one that was allowed.
//!
//! Owns: the per-connection observation state and the refusal answers. Must not touch: socket
//! I/O (the connection does it), logging of tokens or passwords (never: only user names).

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::config::PRINCIPAL_PREFIX;
use crate::protocol::frame::RequestHeaderInfo;

/// Kafka error code SASL_AUTHENTICATION_FAILED.
const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// The principals one listener allows.
#[derive(Debug, Clone)]
pub struct PrincipalLimits {
    allowed: BTreeSet<String>,
    listener: &'static str,
}

impl PrincipalLimits {
    /// `allowed` as configured (`User:NAME`), plus the gateway's own user (the built-in mirror
    /// agent authenticates with the destination credentials) when there is one.
    pub fn new(listener: &'static str, allowed: &[String], gateway_user: Option<&str>) -> Self {
        let mut set: BTreeSet<String> = allowed.iter().cloned().collect();
        if let Some(u) = gateway_user {
            set.insert(format!("{PRINCIPAL_PREFIX}{u}"));
        }
        PrincipalLimits {
            allowed: set,
            listener,
        }
    }

    fn allows(&self, principal: &str) -> bool {
        self.allowed.contains(principal)
    }
}

/// Why the gateway refused a connection on a listener with principal limits.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("principal {principal} is not allowed on the {listener} listener (listeners.{listener}.allowed_principals)")]
    Principal {
        principal: String,
        listener: &'static str,
    },
    #[error("cannot tell the principal of a SASL {mechanism} exchange ({reason}), and the {listener} listener limits principals (listeners.{listener}.allowed_principals)")]
    UnknownPrincipal {
        mechanism: String,
        reason: &'static str,
        listener: &'static str,
    },
    #[error("{api:?} request before SASL authentication on the {listener} listener, which limits principals (listeners.{listener}.allowed_principals)")]
    Unauthenticated { api: ApiKey, listener: &'static str },
}

impl Refusal {
    /// The `kind` label of `mirrorgate_request_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Principal { .. } | Refusal::UnknownPrincipal { .. } => "principal_refused",
            Refusal::Unauthenticated { .. } => "unauthenticated_request",
        }
    }
}

/// What to do with one request.
pub enum Verdict {
    /// Forward it as usual.
    Forward,
    /// Answer it with `response` (nothing goes upstream), then close the connection.
    AnswerAndClose { response: Bytes, refusal: Refusal },
    /// Close the connection without an answer.
    Close(Refusal),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// No SASL exchange yet.
    Unauthenticated,
    /// SaslHandshake seen (mechanism, when readable); the next SaslAuthenticate names the user.
    Handshake(Option<String>),
    /// An allowed principal's exchange is under way or done: the broker decides the rest.
    Allowed,
}

/// The observation state of one connection.
pub struct SaslGuard {
    limits: std::sync::Arc<PrincipalLimits>,
    state: State,
}

impl SaslGuard {
    pub fn new(limits: std::sync::Arc<PrincipalLimits>) -> Self {
        SaslGuard {
            limits,
            state: State::Unauthenticated,
        }
    }

    /// Look at one request (`frame` with its length prefix, `h` its parsed header).
    pub fn on_request(&mut self, h: &RequestHeaderInfo, frame: &Bytes) -> Verdict {
        let listener = self.limits.listener;
        let body = || frame.slice((4 + h.header_len).min(frame.len())..);
        match h.api_key {
            ApiKey::ApiVersions => Verdict::Forward,
            ApiKey::SaslHandshake => {
                // A new handshake (also KIP-368 re-authentication) names a user again.
                let mech = SaslHandshakeRequest::decode(&mut body(), h.api_version)
                    .ok()
                    .map(|r| r.mechanism.to_string());
                self.state = State::Handshake(mech);
                Verdict::Forward
            }
            ApiKey::SaslAuthenticate => match std::mem::replace(&mut self.state, State::Allowed) {
                State::Allowed => Verdict::Forward,
                State::Unauthenticated => {
                    self.state = State::Unauthenticated;
                    Verdict::Close(Refusal::Unauthenticated {
                        api: h.api_key,
                        listener,
                    })
                }
                State::Handshake(mech) => {
                    let mechanism = mech.unwrap_or_else(|| "(unreadable)".to_string());
                    let token = SaslAuthenticateRequest::decode(&mut body(), h.api_version)
                        .map(|r| r.auth_bytes)
                        .map_err(|_| "unreadable SaslAuthenticate request");
                    let user = token.and_then(|t| username(&mechanism, &t));
                    let refusal = match user {
                        Ok(u) => {
                            let principal = format!("{PRINCIPAL_PREFIX}{u}");
                            if self.limits.allows(&principal) {
                                return Verdict::Forward;
                            }
                            Refusal::Principal {
                                principal,
                                listener,
                            }
                        }
                        Err(reason) => Refusal::UnknownPrincipal {
                            mechanism,
                            reason,
                            listener,
                        },
                    };
                    self.state = State::Unauthenticated;
                    match refusal_response(h, &refusal) {
                        Some(response) => Verdict::AnswerAndClose { response, refusal },
                        None => Verdict::Close(refusal),
                    }
                }
            },
            _ if self.state == State::Allowed => Verdict::Forward,
            api => Verdict::Close(Refusal::Unauthenticated { api, listener }),
        }
    }
}

/// The user name of the first client token of `mechanism`, or why it cannot be read.
pub fn username(mechanism: &str, token: &[u8]) -> Result<String, &'static str> {
    match mechanism {
        "PLAIN" => plain_username(token),
        m if m.starts_with("SCRAM-") => scram_username(token),
        _ => Err("the gateway reads user names of SCRAM and PLAIN only"),
    }
}

/// `authzid NUL authcid NUL passwd`: the authentication identity.
fn plain_username(token: &[u8]) -> Result<String, &'static str> {
    let mut parts = token.splitn(3, |b| *b == 0);
    let (Some(_authzid), Some(user), Some(_password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed PLAIN token");
    };
    let user = std::str::from_utf8(user).map_err(|_| "PLAIN user name is not UTF-8")?;
    if user.is_empty() {
        return Err("empty PLAIN user name");
    }
    Ok(user.to_string())
}

/// client-first-message `gs2-header client-first-bare`, `n=saslname` being the first attribute
/// of the bare part; `=2C` and `=3D` unescaped.
fn scram_username(token: &[u8]) -> Result<String, &'static str> {
    let text = std::str::from_utf8(token).map_err(|_| "SCRAM message is not UTF-8")?;
    // gs2-header: cbind-flag "," [authzid] ","
    let mut it = text.splitn(3, ',');
    let (Some(flag), Some(_authzid), Some(bare)) = (it.next(), it.next(), it.next()) else {
        return Err("malformed SCRAM client-first-message");
    };
    if !matches!(flag, "n" | "y") && !flag.starts_with("p=") {
        return Err("malformed SCRAM gs2 header");
    }
    if bare.starts_with("m=") {
        return Err("SCRAM mandatory extensions are not understood");
    }
    let name = bare
        .split(',')
        .next()
        .and_then(|a| a.strip_prefix("n="))
        .ok_or("SCRAM client-first-message has no user name")?;
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3).ok_or("bad escape in SCRAM user name")?;
        out.push(match esc {
            "=2C" => ',',
            "=3D" => '=',
            _ => return Err("bad escape in SCRAM user name"),
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err("empty SCRAM user name");
    }
    Ok(out)
}

/// The gateway's own SaslAuthenticate answer: SASL_AUTHENTICATION_FAILED with the refusal.
fn refusal_response(h: &RequestHeaderInfo, refusal: &Refusal) -> Option<Bytes> {
    let resp = SaslAuthenticateResponse::default()
        .with_error_code(SASL_AUTHENTICATION_FAILED)
        .with_error_message(Some(StrBytes::from_string(format!(
            "mirrorgate: {refusal}"
        ))));
    crate::protocol::frame::answer(
        ApiKey::SaslAuthenticate,
        h.api_version,
        h.correlation_id,
        &resp,
        256,
    )
    .ok()
}

#[cfg(test)]
#[path = "sasl_tests.rs"]
mod tests;
