//! Stream-correctness tests of one proxied connection against a scripted fake broker:
//! pipelining and order, `acks=0`, backpressure, idle timeout, graceful drain, upstream faults.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::config::{ClusterConfig, LimitsConfig, ListenerConfig};
use crate::metrics::{ListenerKind, Metrics};
use crate::protocol::frame::{parse_request_header, read_frame};
use crate::protocol::rewrite::BrokerEndpoint;

use super::connection::serve;
use super::context::{ConnContext, ListenerAddressMap};
use crate::cluster::{ClusterView, Snapshot};

/// How the fake broker answers.
#[derive(Clone, Copy)]
struct Script {
    /// Bytes of response body after the correlation id.
    response_body: usize,
    /// Delay before each response.
    delay: Duration,
    /// Add this to the correlation id of responses.
    corrupt_correlation: i32,
    /// Close the connection after reading this many requests.
    close_after: Option<usize>,
    /// Answer this many requests, then read but never answer.
    stall_after: Option<usize>,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            response_body: 8,
            delay: Duration::ZERO,
            corrupt_correlation: 0,
            close_after: None,
            stall_after: None,
        }
    }
}

/// A fake broker on a random port; counts the requests it has read.
async fn fake_broker(
    script: Script,
) -> (
    String,
    Arc<AtomicUsize>,
    Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(AtomicUsize::new(0));
    let frames = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (seen2, frames2) = (seen.clone(), frames.clone());
    tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let mut buf = BytesMut::new();
        while let Ok(Some(f)) = read_frame(&mut s, &mut buf, 1 << 24).await {
            let n = seen2.fetch_add(1, Ordering::SeqCst) + 1;
            frames2.lock().unwrap().push(f.to_vec());
            if script.close_after.is_some_and(|c| n >= c) {
                return;
            }
            if script.stall_after.is_some_and(|c| n > c) {
                continue;
            }
            let h = parse_request_header(&f[4..]).unwrap();
            if h.api_key == ApiKey::Produce
                && crate::protocol::produce::peek_acks(h.api_version, &f[4 + h.header_len..])
                    .unwrap()
                    == 0
            {
                continue;
            }
            tokio::time::sleep(script.delay).await;
            let mut out = BytesMut::new();
            out.put_i32((4 + script.response_body) as i32);
            out.put_i32(h.correlation_id + script.corrupt_correlation);
            out.extend_from_slice(&vec![0u8; script.response_body]);
            if s.write_all(&out).await.is_err() {
                return;
            }
        }
    });
    (addr, seen, frames)
}

fn request(key: ApiKey, version: i16, corr: i32, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(corr)
        .with_client_id(Some(StrBytes::from_static_str("t")))
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    out.extend_from_slice(body);
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.to_vec()
}

/// Heartbeat v4: forwarded raw, its response is not rewritten.
fn heartbeat(corr: i32) -> Vec<u8> {
    request(ApiKey::Heartbeat, 4, corr, &[0, 0, 0, 0, 0, 0, 0])
}

struct Setup {
    client: TcpStream,
    shutdown: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
}

async fn connect_through_gateway(upstream: &str, limits: LimitsConfig, node: i32) -> Setup {
    connect_with_principal_limits(upstream, limits, node, None).await
}

async fn connect_with_principal_limits(
    upstream: &str,
    limits: LimitsConfig,
    node: i32,
    principal_limits: Option<Arc<super::sasl::PrincipalLimits>>,
) -> Setup {
    connect_with(
        upstream,
        limits,
        node,
        principal_limits,
        ListenerKind::Client,
        None,
    )
    .await
}

/// A connection on a `kind` listener, asking `mirrors` (if any) about mirror topics.
async fn connect_with(
    upstream: &str,
    limits: LimitsConfig,
    node: i32,
    principal_limits: Option<Arc<super::sasl::PrincipalLimits>>,
    kind: ListenerKind,
    mirrors: Option<Arc<dyn crate::mirror::policy::MirrorPolicy>>,
) -> Setup {
    let metrics = Metrics::new();
    let cluster = ClusterView::new(
        ClusterConfig {
            bootstrap: vec![upstream.to_string()],
            connect_timeout_ms: 2000,
            metadata_refresh_ms: 1000,
            tls: None,
            sasl: None,
        },
        crate::client::Connector::plain(),
        metrics.clone(),
    );
    let (host, port) = upstream.rsplit_once(':').unwrap();
    cluster.replace(Snapshot {
        brokers: vec![BrokerEndpoint {
            node_id: 1,
            host: host.into(),
            port: port.parse().unwrap(),
        }],
        ..Snapshot::default()
    });
    let listener_cfg = ListenerConfig {
        bind: "127.0.0.1".into(),
        advertised_host: None,
        port_base: 39999,
        node_id_base: 1,
        max_brokers: 4,
        tls: None,
        allowed_principals: None,
    };
    let ctx = Arc::new(ConnContext {
        kind,
        psm: None,
        mirrors,
        verify_crc: false,
        address_map: ListenerAddressMap::new(&listener_cfg),
        cluster,
        metrics: metrics.clone(),
        handles: metrics.api_handles(kind),
        limits,
        connect_timeout: Duration::from_secs(2),
        acceptor: crate::net::Acceptor::default(),
        principal_limits,
        threads: None,
        forward: None,
    });
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let client = TcpStream::connect(addr).await.unwrap();
    let (server_side, peer) = l.accept().await.unwrap();
    let (shutdown, rx) = watch::channel(false);
    let (drain, _drain_rx) = mpsc::channel(1);
    let done = tokio::spawn(serve(
        ctx,
        crate::net::Stream::Plain(server_side),
        peer,
        node,
        rx,
        drain,
    ));
    Setup {
        client,
        shutdown,
        done,
        metrics,
    }
}

async fn read_response(c: &mut TcpStream) -> Option<(i32, usize)> {
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut len))
        .await
        .ok()?
        .ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    c.read_exact(&mut body).await.ok()?;
    Some((
        i32::from_be_bytes([body[0], body[1], body[2], body[3]]),
        body.len(),
    ))
}

async fn expect_closed(c: &mut TcpStream) {
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b))
        .await
        .expect("closed within 5 s");
    assert!(
        matches!(r, Ok(0) | Err(_)),
        "expected the gateway to close the connection"
    );
}

/// The connection's close was counted once as an upstream timeout on the client listener.
fn assert_one_upstream_timeout_counted(metrics: &Metrics) {
    let text = metrics.render();
    assert!(
        text.contains(
            r#"mirrorgate_request_errors_total{kind="upstream_timeout",listener="client"} 1"#
        ),
        "{text}"
    );
}

fn limits() -> LimitsConfig {
    LimitsConfig {
        max_frame_bytes: 1 << 20,
        idle_timeout_ms: 60_000,
        max_in_flight: 16,
        shutdown_grace_ms: 3000,
        upstream_timeout_ms: 60_000,
        unknown_outcome_settle_ms: 5_000,
        connection_threads: 0,
    }
}

#[tokio::test]
async fn pipelined_requests_are_forwarded_unchanged_and_answered_in_order() {
    let (up, seen, frames) = fake_broker(Script::default()).await;
    let mut s = connect_through_gateway(&up, limits(), 1).await;
    let sent: Vec<Vec<u8>> = (0..200).map(heartbeat).collect();
    for f in &sent {
        s.client.write_all(f).await.unwrap();
    }
    for corr in 0..200 {
        assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(corr));
    }
    assert_eq!(seen.load(Ordering::SeqCst), 200);
    assert_eq!(
        *frames.lock().unwrap(),
        sent,
        "request bytes reach the broker unchanged"
    );
}

#[tokio::test]
async fn acks_zero_produce_gets_no_response_and_does_not_hold_up_the_next_request() {
    let (up, seen, _) = fake_broker(Script::default()).await;
    let mut s = connect_through_gateway(&up, limits(), 1).await;
    let mut body = BytesMut::new();
    ProduceRequest::default()
        .with_acks(0)
        .with_timeout_ms(1000)
        .encode(&mut body, 9)
        .unwrap();
    s.client
        .write_all(&request(ApiKey::Produce, 9, 1, &body))
        .await
        .unwrap();
    s.client.write_all(&heartbeat(2)).await.unwrap();
    assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(2));
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_client_that_does_not_read_stops_the_gateway_from_reading_more_requests() {
    // 1 MiB responses; the client never reads them. Without backpressure every request would
    // reach the broker and the gateway would buffer the responses.
    let script = Script {
        response_body: 1 << 20,
        ..Script::default()
    };
    let (up, seen, _) = fake_broker(script).await;
    let mut l = limits();
    l.max_in_flight = 4;
    l.max_frame_bytes = 4 << 20;
    let mut s = connect_through_gateway(&up, l, 1).await;
    let (mut rd, mut wr) = s.client.split();
    let writer = async {
        for corr in 0..1000 {
            if wr.write_all(&heartbeat(corr)).await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), writer).await;
    let forwarded = seen.load(Ordering::SeqCst);
    assert!(
        forwarded < 64,
        "{forwarded} of 1000 requests reached the broker while the client read nothing"
    );
    assert!(forwarded >= 1, "nothing was forwarded");
    // Reading responses resumes the flow: more requests reach the broker.
    let mut buf = vec![0u8; 1 << 16];
    let drain = async {
        while seen.load(Ordering::SeqCst) < forwarded + 8 {
            if rd.read(&mut buf).await.unwrap_or(0) == 0 {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .expect("reading lets requests through again");
    assert!(seen.load(Ordering::SeqCst) >= forwarded + 8);
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (up, _, _) = fake_broker(Script::default()).await;
    let mut l = limits();
    l.idle_timeout_ms = 1000;
    let mut s = connect_through_gateway(&up, l, 1).await;
    s.client.write_all(&heartbeat(1)).await.unwrap();
    assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(1));
    expect_closed(&mut s.client).await;
}

#[tokio::test]
async fn a_connection_that_keeps_sending_stays_open_past_the_idle_timeout() {
    // The idle timer is one per connection, moved on at each request: requests every 300 ms
    // for 2.4 s keep a connection with a 1 s idle timeout open.
    let (up, _, _) = fake_broker(Script::default()).await;
    let mut l = limits();
    l.idle_timeout_ms = 1000;
    let mut s = connect_through_gateway(&up, l, 1).await;
    for corr in 0..8 {
        s.client.write_all(&heartbeat(corr)).await.unwrap();
        assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(corr));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    expect_closed(&mut s.client).await;
}

#[tokio::test]
async fn each_request_gets_the_whole_upstream_timeout_when_answers_come_one_after_another() {
    // Answers 400 ms apart with a 1 s upstream timeout: 6 requests take 2.4 s in all, each is
    // answered within its own second (the answer timer moves to each request's deadline).
    let script = Script {
        delay: Duration::from_millis(400),
        ..Script::default()
    };
    let (up, _, _) = fake_broker(script).await;
    let mut l = limits();
    l.upstream_timeout_ms = 1000;
    let mut s = connect_through_gateway(&up, l, 1).await;
    for corr in 0..6 {
        s.client.write_all(&heartbeat(corr)).await.unwrap();
        assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(corr));
    }
    let text = s.metrics.render();
    assert!(!text.contains(r#"kind="upstream_timeout""#), "{text}");
}

#[tokio::test]
async fn an_upstream_timeout_after_quick_answers_still_closes_the_connection() {
    // The broker answers two requests, then stalls: the third times out, although the answer
    // timer was moved on twice before.
    let script = Script {
        stall_after: Some(2),
        ..Script::default()
    };
    let (up, seen, _) = fake_broker(script).await;
    let mut l = limits();
    l.upstream_timeout_ms = 1000;
    let mut s = connect_through_gateway(&up, l, 1).await;
    for corr in 0..2 {
        s.client.write_all(&heartbeat(corr)).await.unwrap();
        assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(corr));
    }
    let started = std::time::Instant::now();
    s.client.write_all(&heartbeat(2)).await.unwrap();
    expect_closed(&mut s.client).await;
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert_one_upstream_timeout_counted(&s.metrics);
}

#[tokio::test]
async fn shutdown_answers_requests_in_flight_before_closing() {
    let script = Script {
        delay: Duration::from_millis(500),
        ..Script::default()
    };
    let (up, seen, _) = fake_broker(script).await;
    let mut s = connect_through_gateway(&up, limits(), 1).await;
    s.client.write_all(&heartbeat(7)).await.unwrap();
    // Shut down once the request is in flight: the broker has it (and answers 500 ms later).
    tokio::time::timeout(Duration::from_secs(5), async {
        while seen.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the broker receives the request");
    s.shutdown.send(true).unwrap();
    assert_eq!(
        read_response(&mut s.client).await.map(|r| r.0),
        Some(7),
        "in-flight request answered"
    );
    expect_closed(&mut s.client).await;
    tokio::time::timeout(Duration::from_secs(5), s.done)
        .await
        .expect("connection task ends")
        .unwrap();
}

#[tokio::test]
async fn a_broker_that_closes_the_connection_closes_the_client_connection() {
    let script = Script {
        close_after: Some(1),
        ..Script::default()
    };
    let (up, _, _) = fake_broker(script).await;
    let mut s = connect_through_gateway(&up, limits(), 1).await;
    s.client.write_all(&heartbeat(1)).await.unwrap();
    expect_closed(&mut s.client).await;
    let text = s.metrics.render();
    assert!(
        text.contains(r#"mirrorgate_request_errors_total{kind="upstream",listener="client"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_broker_that_does_not_answer_within_the_upstream_timeout_closes_the_client_connection() {
    // A stalled broker (e.g. a paused process): it reads requests but never answers.
    let script = Script {
        delay: Duration::from_secs(3600),
        ..Script::default()
    };
    let (up, seen, _) = fake_broker(script).await;
    let mut l = limits();
    l.upstream_timeout_ms = 1000;
    let mut s = connect_through_gateway(&up, l, 1).await;
    let started = std::time::Instant::now();
    s.client.write_all(&heartbeat(1)).await.unwrap();
    expect_closed(&mut s.client).await;
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_one_upstream_timeout_counted(&s.metrics);
}

#[tokio::test]
async fn a_join_group_waiting_longer_than_the_upstream_timeout_is_not_cut_off() {
    // JoinGroup legitimately waits for the rebalance; the timeout does not apply to it.
    let script = Script {
        delay: Duration::from_millis(2500),
        ..Script::default()
    };
    let (up, _, _) = fake_broker(script).await;
    let mut l = limits();
    l.upstream_timeout_ms = 1000;
    let mut s = connect_through_gateway(&up, l, 1).await;
    let mut body = BytesMut::new();
    kafka_protocol::messages::JoinGroupRequest::default()
        .encode(&mut body, 5)
        .unwrap();
    s.client
        .write_all(&request(ApiKey::JoinGroup, 5, 7, &body))
        .await
        .unwrap();
    assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(7));
}

#[tokio::test]
async fn a_response_with_the_wrong_correlation_id_closes_the_connection() {
    let script = Script {
        corrupt_correlation: 5,
        ..Script::default()
    };
    let (up, _, _) = fake_broker(script).await;
    let mut s = connect_through_gateway(&up, limits(), 1).await;
    s.client.write_all(&heartbeat(1)).await.unwrap();
    expect_closed(&mut s.client).await;
    assert!(s
        .metrics
        .render()
        .contains(r#"kind="upstream_correlation""#));
}

#[tokio::test]
async fn a_port_for_an_unknown_broker_closes_the_connection() {
    let (up, _, _) = fake_broker(Script::default()).await;
    let mut s = connect_through_gateway(&up, limits(), 3).await;
    expect_closed(&mut s.client).await;
    assert!(s.metrics.render().contains(r#"kind="unknown_broker""#));
}

fn encoded<R: Encodable>(req: &R, version: i16) -> Vec<u8> {
    let mut b = BytesMut::new();
    req.encode(&mut b, version).unwrap();
    b.to_vec()
}

#[tokio::test]
async fn a_refused_principal_is_answered_by_the_gateway_after_earlier_responses_and_never_reaches_the_broker(
) {
    use kafka_protocol::messages::{
        ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    };
    use kafka_protocol::protocol::Decodable;
    let (up, _seen, frames) = fake_broker(Script::default()).await;
    let limits_cfg = Arc::new(super::sasl::PrincipalLimits::new(
        "mirror",
        &["User:mirror".to_string()],
        None,
    ));
    let mut s = connect_with_principal_limits(&up, limits(), 1, Some(limits_cfg)).await;
    let handshake = request(
        ApiKey::SaslHandshake,
        1,
        1,
        &encoded(
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256")),
            1,
        ),
    );
    let first_token = request(
        ApiKey::SaslAuthenticate,
        2,
        2,
        &encoded(
            &SaslAuthenticateRequest::default()
                .with_auth_bytes(bytes::Bytes::from_static(b"n,,n=alice,r=nonce")),
            2,
        ),
    );
    s.client.write_all(&handshake).await.unwrap();
    s.client.write_all(&first_token).await.unwrap();
    assert_eq!(read_response(&mut s.client).await.map(|r| r.0), Some(1));
    let mut len = [0u8; 4];
    s.client.read_exact(&mut len).await.unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.client.read_exact(&mut body).await.unwrap();
    let mut body = bytes::Bytes::from(body);
    let h = ResponseHeader::decode(
        &mut body,
        ApiKey::SaslAuthenticate.response_header_version(2),
    )
    .unwrap();
    assert_eq!(h.correlation_id, 2);
    let r = SaslAuthenticateResponse::decode(&mut body, 2).unwrap();
    assert_eq!(r.error_code, 58);
    assert!(r
        .error_message
        .unwrap()
        .to_string()
        .contains("principal User:alice is not allowed on the mirror listener"));
    expect_closed(&mut s.client).await;
    assert_eq!(
        *frames.lock().unwrap(),
        vec![handshake],
        "only the handshake reached the broker"
    );
    assert!(s.metrics.render().contains(r#"kind="principal_refused""#));
}

/// A mirror-listener connection to the fake broker through a policy that admits every write of
/// `orders` with a guard and says `lapsed` of them right before their send.
async fn mirror_connection(
    lapsed: Option<&str>,
) -> (
    Setup,
    Arc<AtomicUsize>,
    Arc<super::exchange::policy_tests::FakePolicy>,
) {
    let (up, seen, _) = fake_broker(Script::default()).await;
    let policy = Arc::new(super::exchange::policy_tests::FakePolicy::admitting_with_guards(lapsed));
    let s = connect_with(
        &up,
        limits(),
        1,
        None,
        ListenerKind::Mirror,
        Some(policy.clone()),
    )
    .await;
    (s, seen, policy)
}

#[tokio::test]
async fn an_admitted_mirror_write_whose_admission_lapsed_before_the_send_is_never_sent() {
    let (mut s, seen, policy) = mirror_connection(Some("no lease on the state topic")).await;
    s.client
        .write_all(&super::exchange::policy_tests::request(&[0]))
        .await
        .unwrap();
    expect_closed(&mut s.client).await;
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the broker got the write");
    let guarded = policy.guarded.lock().unwrap();
    assert_eq!(guarded.len(), 1, "the write was admitted");
    assert_eq!(
        guarded[0].counts(),
        (0, 0),
        "released as a write known not to be appended"
    );
    let text = s.metrics.render();
    assert!(
        text.contains("kind=\"admission_lapsed\""),
        "no admission_lapsed error counted:\n{text}"
    );
}

#[tokio::test]
async fn an_admitted_mirror_write_whose_admission_holds_is_sent() {
    let (mut s, seen, policy) = mirror_connection(None).await;
    s.client
        .write_all(&super::exchange::policy_tests::request(&[0]))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while seen.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the write was not sent");
    assert_eq!(policy.guarded.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_admitted_mirror_write_still_being_written_when_the_lease_ends_closes_the_broker_connection(
) {
    // Review G1: a broker that reads nothing (its socket buffers full) holds the write past the
    // lease; it is never finished later.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = silent.local_addr().unwrap().to_string();
    let accepted = tokio::spawn(async move {
        let (socket, _) = silent.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(socket);
    });
    let mut policy = super::exchange::policy_tests::FakePolicy::admitting_with_guards(None);
    policy.send_deadline = Some(Duration::from_millis(300));
    let policy = Arc::new(policy);
    let mut s = connect_with(
        &up,
        limits(),
        1,
        None,
        ListenerKind::Mirror,
        Some(policy.clone()),
    )
    .await;
    // 16 frames of about 900 KB: more than the sockets buffer.
    let frame = super::exchange::policy_tests::request_of(&[0], 15_000);
    let writer = tokio::spawn(async move {
        for _ in 0..16 {
            if s.client.write_all(&frame).await.is_err() {
                break;
            }
        }
        s
    });
    let mut s = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the client's writes end")
        .unwrap();
    expect_closed(&mut s.client).await;
    let guarded = policy.guarded.lock().unwrap();
    assert!(!guarded.is_empty(), "writes were admitted");
    assert!(
        guarded.iter().all(|g| g.counts().0 == 0),
        "every admitted write released"
    );
    assert!(
        guarded.iter().any(|g| g.counts().1 == 1),
        "the write cut short counted as of unknown outcome"
    );
    let text = s.metrics.render();
    assert!(text.contains("kind=\"admission_lapsed\""), "{text}");
    accepted.abort();
}
