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

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

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
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(h.correlation_id)
        .encode(
            &mut out,
            ApiKey::SaslAuthenticate.response_header_version(h.api_version),
        )
        .ok()?;
    resp.encode(&mut out, h.api_version).ok()?;
    let len = i32::try_from(out.len() - 4).ok()?;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::parse_request_header;
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::HeaderVersion;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn request<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, req: &R) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("t")))
            .encode(&mut out, key.request_header_version(version))
            .unwrap();
        req.encode(&mut out, version).unwrap();
        let len = (out.len() - 4) as i32;
        out[0..4].copy_from_slice(&len.to_be_bytes());
        out.freeze()
    }

    fn send(g: &mut SaslGuard, frame: Bytes) -> Verdict {
        let h = parse_request_header(&frame[4..]).unwrap();
        g.on_request(&h, &frame)
    }

    fn handshake(mech: &'static str) -> Bytes {
        request(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mech)),
        )
    }

    fn authenticate(token: &[u8]) -> Bytes {
        request(
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
        )
    }

    fn metadata() -> Bytes {
        request(
            ApiKey::Metadata,
            12,
            &kafka_protocol::messages::MetadataRequest::default(),
        )
    }

    fn guard() -> SaslGuard {
        SaslGuard::new(Arc::new(PrincipalLimits::new(
            "mirror",
            &["User:mirror".to_string()],
            Some("admin"),
        )))
    }

    #[test]
    fn scram_user_name_is_unescaped() {
        assert_eq!(
            username("SCRAM-SHA-256", b"n,,n=a=2Cb=3Dc,r=abc").unwrap(),
            "a,b=c"
        );
        assert_eq!(
            username("SCRAM-SHA-512", b"n,a=mirror,n=mirror,r=x").unwrap(),
            "mirror"
        );
    }

    #[test]
    fn scram_user_name_with_a_bad_escape_is_unreadable() {
        assert!(username("SCRAM-SHA-256", b"n,,n=a=2,r=abc").is_err());
        assert!(username("SCRAM-SHA-256", b"n,,n=a=41,r=abc").is_err());
        assert!(username("SCRAM-SHA-256", b"n,,r=abc").is_err());
        assert!(username("SCRAM-SHA-256", b"n,,n=,r=abc").is_err());
    }

    #[test]
    fn plain_user_name_is_the_authentication_identity() {
        assert_eq!(username("PLAIN", b"\0alice\0secret").unwrap(), "alice");
        assert_eq!(username("PLAIN", b"alice\0alice\0secret").unwrap(), "alice");
        assert!(username("PLAIN", b"alice-secret").is_err());
        assert!(username("PLAIN", b"\0\0secret").is_err());
    }

    #[test]
    fn other_mechanisms_have_no_readable_user_name() {
        assert!(username("OAUTHBEARER", b"n,,\x01auth=Bearer x\x01\x01").is_err());
        assert!(username("GSSAPI", b"\x60\x82").is_err());
    }

    proptest! {
        #[test]
        fn garbage_tokens_never_panic(mech in "(PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|X)", token in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = username(&mech, &token);
        }

        #[test]
        fn garbage_scram_text_never_panics(token in "[n,=a-z23CD]{0,40}") {
            let _ = username("SCRAM-SHA-256", token.as_bytes());
        }
    }

    #[test]
    fn allowed_principal_is_forwarded_and_then_anything_goes() {
        let mut g = guard();
        assert!(matches!(
            send(
                &mut g,
                request(
                    ApiKey::ApiVersions,
                    3,
                    &kafka_protocol::messages::ApiVersionsRequest::default()
                )
            ),
            Verdict::Forward
        ));
        assert!(matches!(
            send(&mut g, handshake("SCRAM-SHA-256")),
            Verdict::Forward
        ));
        assert!(matches!(
            send(&mut g, authenticate(b"n,,n=mirror,r=abc")),
            Verdict::Forward
        ));
        assert!(matches!(
            send(&mut g, authenticate(b"c=biws,r=abcdef,p=xyz")),
            Verdict::Forward
        ));
        assert!(matches!(send(&mut g, metadata()), Verdict::Forward));
    }

    #[test]
    fn the_gateways_own_user_is_allowed() {
        let mut g = guard();
        send(&mut g, handshake("SCRAM-SHA-512"));
        assert!(matches!(
            send(&mut g, authenticate(b"n,,n=admin,r=abc")),
            Verdict::Forward
        ));
    }

    #[test]
    fn a_principal_not_allowed_is_answered_with_authentication_failed() {
        let mut g = guard();
        send(&mut g, handshake("SCRAM-SHA-256"));
        let Verdict::AnswerAndClose { response, refusal } =
            send(&mut g, authenticate(b"n,,n=alice,r=abc"))
        else {
            panic!("not refused");
        };
        assert_eq!(refusal.kind(), "principal_refused");
        let mut body = response.slice(4..);
        let rh = ResponseHeader::decode(
            &mut body,
            ApiKey::SaslAuthenticate.response_header_version(2),
        )
        .unwrap();
        assert_eq!(rh.correlation_id, 7);
        let r = SaslAuthenticateResponse::decode(&mut body, 2).unwrap();
        assert_eq!(r.error_code, SASL_AUTHENTICATION_FAILED);
        let msg = r.error_message.unwrap().to_string();
        assert!(
            msg.contains("User:alice") && msg.contains("mirror listener"),
            "{msg}"
        );
    }

    #[test]
    fn a_plain_principal_not_allowed_is_refused() {
        let mut g = guard();
        send(&mut g, handshake("PLAIN"));
        assert!(matches!(
            send(&mut g, authenticate(b"\0alice\0alice-secret")),
            Verdict::AnswerAndClose { .. }
        ));
    }

    #[test]
    fn an_unreadable_mechanism_is_refused_when_principals_are_limited() {
        let mut g = guard();
        send(&mut g, handshake("OAUTHBEARER"));
        let Verdict::AnswerAndClose { refusal, .. } =
            send(&mut g, authenticate(b"n,,\x01auth=Bearer t\x01\x01"))
        else {
            panic!("not refused");
        };
        assert!(refusal.to_string().contains("OAUTHBEARER"));
    }

    #[test]
    fn a_request_before_authentication_closes_the_connection() {
        let mut g = guard();
        let Verdict::Close(r) = send(&mut g, metadata()) else {
            panic!("not closed");
        };
        assert_eq!(r.kind(), "unauthenticated_request");
        let mut g = guard();
        send(&mut g, handshake("SCRAM-SHA-256"));
        assert!(matches!(send(&mut g, metadata()), Verdict::Close(_)));
    }

    #[test]
    fn sasl_authenticate_without_handshake_closes_the_connection() {
        let mut g = guard();
        assert!(matches!(
            send(&mut g, authenticate(b"n,,n=mirror,r=abc")),
            Verdict::Close(_)
        ));
    }

    #[test]
    fn reauthentication_checks_the_new_user_name() {
        let mut g = guard();
        send(&mut g, handshake("SCRAM-SHA-256"));
        send(&mut g, authenticate(b"n,,n=mirror,r=abc"));
        send(&mut g, handshake("SCRAM-SHA-256"));
        assert!(matches!(
            send(&mut g, authenticate(b"n,,n=alice,r=abc")),
            Verdict::AnswerAndClose { .. }
        ));
    }
}
