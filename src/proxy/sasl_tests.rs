//! Unit tests of `sasl.rs`.

use super::*;
use crate::protocol::frame::parse_request_header;
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::Encodable;
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
