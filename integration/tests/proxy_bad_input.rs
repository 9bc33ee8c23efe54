//! Bad input through the gateway: each case on its own connection while another connection
//! keeps producing successfully. Every case gets its defined outcome (an error response where
//! the protocol has one, else a logged close counted in `mirrorgate_request_errors_total`),
//! and the gateway keeps serving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, MetadataRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::gw::TestGateway;
use crate::harness;

fn frame(key: i16, version: i16, corr: i32, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    let header = RequestHeader::default()
        .with_request_api_key(key)
        .with_request_api_version(version)
        .with_correlation_id(corr)
        .with_client_id(Some(StrBytes::from_static_str("bad-input-test")));
    let hv = ApiKey::try_from(key)
        .map(|k| k.request_header_version(version))
        .unwrap_or(1);
    header.encode(&mut out, hv).expect("header encodes");
    out.extend_from_slice(body);
    let len = (out.len() - 4) as i32;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    out.to_vec()
}

/// Read until the gateway closes the connection; returns the bytes received before the close.
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("gateway did not close the connection within 10 s: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "gateway kept the connection open"
        );
    }
}

/// A producer writing through the gateway in the background for the duration of a test.
struct BackgroundProducer {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BackgroundProducer {
    fn start(bootstrap: &str, topic: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (b, t) = (bootstrap.to_string(), topic.to_string());
        let (s2, a2, f2) = (stop.clone(), acked.clone(), failed.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("rt");
            rt.block_on(async move {
                let producer: FutureProducer = ClientConfig::new()
                    .set("bootstrap.servers", &b)
                    .set("enable.idempotence", "true")
                    .set("message.timeout.ms", "30000")
                    .create()
                    .expect("producer");
                let mut i = 0u64;
                while !s2.load(Ordering::SeqCst) {
                    let payload = format!("bg-{i}");
                    let rec = FutureRecord::to(&t).key(&payload).payload(&payload);
                    match producer.send(rec, Duration::from_secs(30)).await {
                        Ok(_) => a2.fetch_add(1, Ordering::SeqCst),
                        Err(_) => f2.fetch_add(1, Ordering::SeqCst),
                    };
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        });
        BackgroundProducer {
            stop,
            acked,
            failed,
            thread: Some(thread),
        }
    }

    /// Stop and return (acknowledged, failed).
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("producer thread");
        }
        (
            self.acked.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        )
    }
}

impl Drop for BackgroundProducer {
    /// Stops the producer also when the test fails before [`BackgroundProducer::finish`].
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn with_gateway_and_producer(case: impl FnOnce(&TestGateway)) {
    let destination = harness::cluster("destination");
    let gw = TestGateway::in_front_of(&destination);
    let topic = harness::unique_topic("bad-input");
    harness::create_topic(&destination, &topic, 2, None);
    let bg = BackgroundProducer::start(&gw.bootstrap(), &topic);
    // Let the producer get going before the bad input arrives.
    let deadline = Instant::now() + Duration::from_secs(30);
    while bg.acked.load(Ordering::SeqCst) < 10 {
        assert!(
            Instant::now() < deadline,
            "background producer made no progress"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    case(&gw);
    let before = bg.acked.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    while bg.acked.load(Ordering::SeqCst) < before + 10 {
        assert!(
            Instant::now() < deadline,
            "producing stopped after the bad input"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (acked, failed) = bg.finish();
    assert_eq!(
        failed, 0,
        "the other connection's produce failed ({acked} acknowledged)"
    );
}

fn connect(gw: &TestGateway) -> TcpStream {
    TcpStream::connect(gw.bootstrap()).expect("connect to gateway")
}

fn errors(gw: &TestGateway, kind: &str) -> f64 {
    gw.metric(&format!(
        r#"mirrorgate_request_errors_total{{kind="{kind}",listener="client"}}"#
    ))
}

fn wait_for_error(gw: &TestGateway, kind: &str, at_least: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while errors(gw, kind) < at_least {
        assert!(
            Instant::now() < deadline,
            "error {kind} not counted; metrics:\n{}",
            gw.metrics()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn random_bytes_close_only_that_connection() {
    with_gateway_and_producer(|gw| {
        let mut s = connect(gw);
        // Deterministic "random" bytes whose length prefix is far over the maximum.
        let mut x: u32 = 0x9e37_79b9;
        let junk: Vec<u8> = (0..256)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8 | 0x40
            })
            .collect();
        s.write_all(&junk).expect("write");
        assert!(read_until_closed(&mut s).is_empty());
        wait_for_error(gw, "frame_too_large", 1.0);
    });
}

#[test]
fn length_prefix_over_the_maximum_closes_the_connection() {
    with_gateway_and_producer(|gw| {
        let mut s = connect(gw);
        s.write_all(&(64 * 1024 * 1024i32).to_be_bytes())
            .expect("write");
        assert!(read_until_closed(&mut s).is_empty());
        wait_for_error(gw, "frame_too_large", 1.0);
    });
}

#[test]
fn truncated_frame_then_close_is_logged_and_counted() {
    with_gateway_and_producer(|gw| {
        let mut s = connect(gw);
        let f = frame(ApiKey::Metadata as i16, 12, 1, &[0u8; 40]);
        s.write_all(&f[..20]).expect("write");
        s.shutdown(std::net::Shutdown::Write).expect("half close");
        assert!(read_until_closed(&mut s).is_empty());
        wait_for_error(gw, "truncated_frame", 1.0);
    });
}

#[test]
fn unknown_api_key_closes_the_connection() {
    with_gateway_and_producer(|gw| {
        let mut s = connect(gw);
        let mut f = frame(ApiKey::Metadata as i16, 1, 7, &[0, 0, 0, 0]);
        f[4..6].copy_from_slice(&9999i16.to_be_bytes());
        s.write_all(&f).expect("write");
        assert!(read_until_closed(&mut s).is_empty());
        wait_for_error(gw, "unknown_api", 1.0);
    });
}

#[test]
fn unsupported_version_of_a_rewritten_api_closes_the_connection() {
    with_gateway_and_producer(|gw| {
        let mut s = connect(gw);
        s.write_all(&frame(ApiKey::Metadata as i16, 99, 8, &[0, 0, 0, 0]))
            .expect("write");
        assert!(read_until_closed(&mut s).is_empty());
        wait_for_error(gw, "unsupported_version", 1.0);
    });
}

#[test]
fn unsupported_api_versions_version_gets_an_error_response() {
    with_gateway_and_producer(|gw| {
        let mut s = connect(gw);
        // KIP-511: an ApiVersions request newer than the broker is answered with a v0 body and
        // UNSUPPORTED_VERSION (35), not a close.
        s.write_all(&frame(ApiKey::ApiVersions as i16, 77, 9, &[]))
            .expect("write");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut len = [0u8; 4];
        s.read_exact(&mut len).expect("a response arrives");
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).expect("whole response");
        assert_eq!(
            i32::from_be_bytes([body[0], body[1], body[2], body[3]]),
            9,
            "correlation id"
        );
        assert_eq!(
            i16::from_be_bytes([body[4], body[5]]),
            35,
            "UNSUPPORTED_VERSION"
        );
        // The connection is still usable: a valid Metadata request gets an answer.
        let mut m = BytesMut::new();
        MetadataRequest::default()
            .with_topics(Some(vec![]))
            .encode(&mut m, 12)
            .expect("encode");
        s.write_all(&frame(ApiKey::Metadata as i16, 12, 10, &m))
            .expect("write");
        s.read_exact(&mut len).expect("metadata response");
    });
}

#[test]
fn unparsable_request_header_closes_the_connection() {
    with_gateway_and_producer(|gw| {
        let mut s = connect(gw);
        // Metadata v1, client id length 500 in a 12-byte frame.
        let mut f = Vec::new();
        f.extend_from_slice(&12i32.to_be_bytes());
        f.extend_from_slice(&3i16.to_be_bytes());
        f.extend_from_slice(&1i16.to_be_bytes());
        f.extend_from_slice(&5i32.to_be_bytes());
        f.extend_from_slice(&500i16.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        s.write_all(&f).expect("write");
        assert!(read_until_closed(&mut s).is_empty());
        wait_for_error(gw, "bad_frame", 1.0);
    });
}
