//! SASL on the real `secure` cluster (SASL_PLAINTEXT listener, SCRAM-SHA-256/512): the gateway's
//! own connections authenticate with `destination.sasl`; clients authenticate with the broker
//! through the gateway (passthrough); the mirror listener limits principals; the built-in agent
//! authenticates on the mirror listener with the destination credentials.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::Method;
use kafka_protocol::messages::{ApiKey, MetadataRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Encodable, StrBytes};
use mirrorgate::client::{ClientError, KafkaClient};
use mirrorgate::client::{ConnectError, Connector};
use mirrorgate::config::{
    ClusterConfig, Config, MirrorConfig, SaslConfig, SaslMechanism, SecretSource,
};

use crate::gw::{test_config, TestGateway};
use crate::harness;
use crate::harness::{verifiable_consume as java_consume, verifiable_produce as java_produce};

mod forward;

const N: usize = 200;

/// The `secure` cluster: (PLAINTEXT address for test set-up, SASL_PLAINTEXT address).
fn secure() -> (String, String) {
    let plaintext = harness::cluster("secure");
    let out = harness::rig(&["secure-info"]);
    harness::expect_success("integration/rig secure-info", &out);
    let info = harness::parse_status(&out.stdout);
    let sasl = info
        .get("sasl_plaintext")
        .cloned()
        .expect("secure-info prints sasl_plaintext");
    (plaintext, sasl)
}

fn creds(mechanism: SaslMechanism, user: &str, password: &str) -> SaslConfig {
    SaslConfig {
        mechanism,
        username: user.to_string(),
        password: SecretSource {
            value: Some(password.to_string()),
            env: None,
            file: None,
        },
    }
}

/// A gateway config in front of the secure cluster's SASL listener, authenticating as `admin`.
fn sasl_config(sasl_addr: &str, password: &str) -> Config {
    let mut cfg = test_config(sasl_addr);
    cfg.destination.sasl = Some(creds(SaslMechanism::ScramSha256, "admin", password));
    cfg
}

/// A Java client properties file for `user` with `mechanism` (SCRAM-SHA-256/512 or PLAIN).
fn client_props(dir: &tempfile::TempDir, mechanism: &str, user: &str, password: &str) -> PathBuf {
    let module = if mechanism == "PLAIN" {
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    } else {
        "org.apache.kafka.common.security.scram.ScramLoginModule"
    };
    let path = dir.path().join(format!("{user}-{mechanism}.properties"));
    std::fs::write(
        &path,
        format!(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n\
             sasl.jaas.config={module} required \
             username=\"{user}\" password=\"{password}\";\n\
             acks=all\nenable.idempotence=true\nretries=2147483647\n\
             max.in.flight.requests.per.connection=5\nlinger.ms=5\nmax.block.ms=20000\n"
        ),
    )
    .expect("write properties");
    path
}

/// `kafka-topics --list` as a quick authenticated admin round trip.
fn java_list_topics(bootstrap: &str, props: &Path) -> std::process::Output {
    harness::rig_java(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--command-config",
            props.to_str().expect("utf-8 path"),
            "--list",
        ],
    )
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn round_trip(mechanism: &str) {
    let (plaintext, sasl) = secure();
    let gw = TestGateway::start(sasl_config(&sasl, "admin-secret"));
    let r = gw.gateway.readiness();
    assert!(r.ready && r.metadata_known, "{r:?}");
    let topic = harness::unique_topic("sasl-rt");
    harness::create_topic(&plaintext, &topic, 2, None);
    let dir = tempfile::tempdir().expect("tempdir");
    let props = client_props(&dir, mechanism, "alice", "alice-secret");
    let (acked, out) = java_produce(&gw.bootstrap(), &topic, N, &props);
    harness::expect_success("VerifiableProducer through the gateway", &out);
    assert_eq!(acked.len(), N, "acknowledged records");
    let consumed = java_consume(&gw.bootstrap(), &topic, N, &props);
    assert_eq!(
        consumed, acked,
        "consumed records differ from the acknowledged ones"
    );
}

#[test]
fn java_clients_authenticate_through_the_gateway_with_scram_sha_256() {
    round_trip("SCRAM-SHA-256");
}

#[test]
fn java_clients_authenticate_through_the_gateway_with_scram_sha_512() {
    round_trip("SCRAM-SHA-512");
}

/// SASL over TLS: the gateway reaches the broker's SASL_SSL listener (TLS with the rig's CA,
/// then its own SCRAM login); a Java client authenticates as alice through the gateway over the
/// same TLS upstream, and its records round-trip exactly.
#[test]
fn java_clients_authenticate_through_the_gateway_to_a_sasl_ssl_broker() {
    let (plaintext, _) = secure();
    let out = harness::rig(&["secure-info"]);
    harness::expect_success("integration/rig secure-info", &out);
    let info = harness::parse_status(&out.stdout);
    let sasl_ssl = info.get("sasl_ssl").cloned().expect("sasl_ssl=");
    let ca = PathBuf::from(info.get("ca").expect("ca="));
    let mut cfg = sasl_config(&sasl_ssl, "admin-secret");
    cfg.destination.tls = Some(mirrorgate::config::ClusterTlsConfig {
        ca: Some(ca),
        ..Default::default()
    });
    let gw = TestGateway::start(cfg);
    let topic = harness::unique_topic("sasl-ssl");
    harness::create_topic(&plaintext, &topic, 2, None);
    let dir = tempfile::tempdir().expect("tempdir");
    let props = client_props(&dir, "SCRAM-SHA-512", "alice", "alice-secret");
    let (acked, out) = java_produce(&gw.bootstrap(), &topic, N, &props);
    harness::expect_success("VerifiableProducer through the gateway", &out);
    assert_eq!(acked.len(), N, "acknowledged records");
    let consumed = java_consume(&gw.bootstrap(), &topic, N, &props);
    assert_eq!(consumed, acked);
}

fn metadata_with(connector: &Connector, addr: &str) -> Result<usize, ClientError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c = KafkaClient::connect_with(connector, addr, Duration::from_secs(10)).await?;
        let md = c
            .send(&MetadataRequest::default().with_topics(None), 12)
            .await?;
        Ok(md.brokers.len())
    })
}

fn connector(mechanism: SaslMechanism, user: &str, password: &str) -> Connector {
    let cluster = ClusterConfig {
        bootstrap: vec!["unused:1".into()],
        connect_timeout_ms: 10_000,
        metadata_refresh_ms: 30_000,
        tls: None,
        sasl: Some(creds(mechanism, user, password)),
    };
    Connector::for_cluster(&cluster).expect("connector")
}

#[test]
fn the_gateways_own_connections_authenticate_with_scram_sha_256_and_512() {
    let (_, sasl) = secure();
    for m in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
        let n = metadata_with(&connector(m, "admin", "admin-secret"), &sasl)
            .unwrap_or_else(|e| panic!("{m}: {e}"));
        assert_eq!(n, 1, "{m}: brokers in metadata");
    }
}

#[test]
fn a_wrong_gateway_password_is_a_typed_authentication_error_with_the_brokers_message() {
    let (_, sasl) = secure();
    let text = wrong_password_refused(
        &connector(SaslMechanism::ScramSha512, "admin", "wrong"),
        &sasl,
    );
    assert!(
        text.contains("SaslAuthenticationFailed: ") && text.contains("invalid credentials"),
        "{text}"
    );
}

/// Metadata through `connector` (a wrong password, "wrong") fails with the typed authentication
/// error, whose text does not leak the password; returns the text.
fn wrong_password_refused(connector: &Connector, addr: &str) -> String {
    let err = metadata_with(connector, addr).expect_err("authenticated with a wrong password");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            ClientError::Connect(ConnectError::Sasl(
                mirrorgate::client::sasl::SaslError::AuthenticationFailed { .. }
            ))
        ),
        "{text}"
    );
    assert!(!text.contains("wrong"), "the password leaked: {text}");
    text
}

#[test]
fn a_mechanism_the_broker_does_not_enable_is_reported_with_the_enabled_ones() {
    let (_, sasl) = secure();
    let err = metadata_with(
        &connector(SaslMechanism::Plain, "admin", "admin-secret"),
        &sasl,
    )
    .expect_err("PLAIN is not enabled on the secure cluster");
    let text = err.to_string();
    assert!(
        text.contains("does not enable SASL mechanism PLAIN")
            && text.contains("SCRAM-SHA-256")
            && text.contains("SCRAM-SHA-512"),
        "{text}"
    );
}

#[test]
fn a_client_with_a_wrong_password_fails_through_the_gateway_and_others_are_served() {
    let (_, sasl) = secure();
    let gw = TestGateway::start(sasl_config(&sasl, "admin-secret"));
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = client_props(&dir, "SCRAM-SHA-256", "alice", "not-her-password");
    let out = java_list_topics(&gw.bootstrap(), &bad);
    assert!(!out.status.success(), "listed topics with a wrong password");
    let text = output_text(&out);
    assert!(text.contains("Authentication failed"), "{text}");
    let good = client_props(&dir, "SCRAM-SHA-256", "alice", "alice-secret");
    let out = java_list_topics(&gw.bootstrap(), &good);
    harness::expect_success("kafka-topics --list with the right password", &out);
    assert!(gw.gateway.readiness().ready);
}

#[test]
fn a_wrong_destination_password_leaves_the_gateway_unready_with_the_reason() {
    let (_, sasl) = secure();
    let cfg = sasl_config(&sasl, "not-the-admin-password");
    let rt = tokio::runtime::Runtime::new().expect("rt");
    rt.block_on(async {
        let gw = mirrorgate::app::Gateway::start(cfg)
            .await
            .expect("starts without authenticating");
        let deadline = Instant::now() + Duration::from_secs(30);
        let body = loop {
            let (status, body) = mirrorgate::admin::client::call(
                &gw.admin_addr().to_string(),
                Method::GET,
                "/readyz",
                None,
                None,
            )
            .await
            .expect("admin call");
            assert_eq!(status, 503, "{body}");
            if body.contains("SaslAuthenticationFailed") || Instant::now() > deadline {
                break body;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(
            body.contains("destination metadata not yet known")
                && body.contains("SaslAuthenticationFailed: "),
            "{body}"
        );
        assert!(!body.contains("not-the-admin-password"), "{body}");
        gw.shutdown().await;
    });
}

/// A gateway in front of the secure cluster whose mirror listener allows `User:mirror`.
fn limited_gateway(sasl: &str) -> TestGateway {
    let mut cfg = sasl_config(sasl, "admin-secret");
    cfg.listeners
        .mirror
        .as_mut()
        .expect("mirror listener")
        .allowed_principals = Some(vec!["User:mirror".to_string()]);
    TestGateway::start(cfg)
}

#[test]
fn the_mirror_listener_refuses_a_principal_not_allowed_with_the_gateways_message() {
    let (plaintext, sasl) = secure();
    let gw = limited_gateway(&sasl);
    let topic = harness::unique_topic("sasl-limit");
    harness::create_topic(&plaintext, &topic, 1, None);
    let dir = tempfile::tempdir().expect("tempdir");

    let alice = client_props(&dir, "SCRAM-SHA-256", "alice", "alice-secret");
    let (acked, out) = java_produce(&gw.mirror_bootstrap(), &topic, 5, &alice);
    assert!(acked.is_empty(), "alice produced on the mirror listener");
    let text = output_text(&out);
    assert!(
        text.contains("mirrorgate: principal User:alice is not allowed on the mirror listener"),
        "{text}"
    );
    assert!(
        gw.metric(
            "mirrorgate_request_errors_total{kind=\"principal_refused\",listener=\"mirror\"}"
        ) >= 1.0
    );

    let mirror = client_props(&dir, "SCRAM-SHA-512", "mirror", "mirror-secret");
    let (acked, out) = java_produce(&gw.mirror_bootstrap(), &topic, 20, &mirror);
    harness::expect_success("VerifiableProducer as mirror on the mirror listener", &out);
    assert_eq!(acked.len(), 20);
    // The client listener has no limits.
    let (acked, out) = java_produce(&gw.bootstrap(), &topic, 5, &alice);
    harness::expect_success("VerifiableProducer as alice on the client listener", &out);
    assert_eq!(acked.len(), 5);
}

/// Send one request frame on a raw connection; `true` when the gateway closed the connection
/// without answering.
fn closed_without_answer<R: Encodable>(addr: &str, key: ApiKey, version: i16, req: &R) -> bool {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let out = crate::wire::request_frame(key, version, 1, req);
    s.write_all(&out).expect("send");
    let mut buf = [0u8; 4];
    matches!(s.read(&mut buf), Ok(0))
}

#[test]
fn a_client_skipping_sasl_on_the_limited_mirror_listener_is_closed() {
    let (_, sasl) = secure();
    let gw = limited_gateway(&sasl);
    let addr = gw.mirror_bootstrap();
    assert!(closed_without_answer(
        &addr,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None)
    ));
    assert_eq!(
        gw.metric(
            "mirrorgate_request_errors_total{kind=\"unauthenticated_request\",listener=\"mirror\"}"
        ),
        1.0
    );
}

#[test]
fn sasl_handshake_v0_is_refused_by_closing_the_connection() {
    let (_, sasl) = secure();
    let gw = TestGateway::start(sasl_config(&sasl, "admin-secret"));
    assert!(closed_without_answer(
        &gw.bootstrap(),
        ApiKey::SaslHandshake,
        0,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"))
    ));
    assert_eq!(
        gw.metric(
            "mirrorgate_request_errors_total{kind=\"unsupported_version\",listener=\"client\"}"
        ),
        1.0
    );
}

/// (key, value) of every record of partition 0 of `topic` (read over PLAINTEXT at `bootstrap`).
fn records(bootstrap: &str, topic: &str) -> Vec<(Option<String>, Option<String>)> {
    crate::failover::read_log(bootstrap, topic, 0)
        .records
        .into_iter()
        .map(|r| (r.key, r.value))
        .collect()
}

/// Wait (90 s at most) until partition 0 of `topic` at `destination` holds `want`.
fn wait_mirrored(
    gw: &TestGateway,
    destination: &str,
    topic: &str,
    want: &[(Option<String>, Option<String>)],
) {
    // The agent creates the destination topic (waited for up to 30 s).
    harness::partition_leaders(destination, topic);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = records(destination, topic);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not mirror {topic}: {} of {} records; partitions {}",
            got.len(),
            want.len(),
            crate::gw::admin_call(&gw.admin(), Method::GET, "/v1/mirrors/m/partitions", None).1
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn mirror_from(source: &str, topic: &str, sasl: Option<SaslConfig>) -> MirrorConfig {
    MirrorConfig {
        name: "m".into(),
        topics: vec![topic.to_string()],
        source: Some(ClusterConfig {
            bootstrap: vec![source.to_string()],
            connect_timeout_ms: 3000,
            metadata_refresh_ms: 30_000,
            tls: None,
            sasl,
        }),
        transactions: Default::default(),
        configs: Default::default(),
        acls: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        forward: None,
        mirroring: Default::default(),
    }
}

#[test]
fn the_agent_mirrors_into_a_sasl_destination_through_the_limited_mirror_listener() {
    let (plaintext, sasl) = secure();
    let source = harness::cluster("source");
    let topic = harness::unique_topic("sasl-agent");
    harness::create_topic(&source, &topic, 1, None);
    assert_eq!(harness::produce_keyed(&source, &topic, N, &[]).len(), N);

    // The gateway authenticates as admin, which allowed_principals does not list.
    let mut cfg = sasl_config(&sasl, "admin-secret");
    cfg.listeners
        .mirror
        .as_mut()
        .expect("mirror listener")
        .allowed_principals = Some(vec!["User:mirror".to_string()]);
    cfg.mirrors = vec![mirror_from(&source, &topic, None)];
    cfg.psm.snapshot_interval_ms = 200;
    let gw = TestGateway::start(cfg);
    let want = records(&source, &topic);
    assert_eq!(want.len(), N);
    wait_mirrored(&gw, &plaintext, &topic, &want);
    assert_eq!(
        gw.metric(
            "mirrorgate_request_errors_total{kind=\"principal_refused\",listener=\"mirror\"}"
        ),
        0.0
    );
}

#[test]
fn the_agent_reads_a_sasl_source_with_the_source_credentials() {
    let (plaintext, sasl) = secure();
    let destination = harness::cluster("destination");
    let topic = harness::unique_topic("sasl-source");
    harness::create_topic(&plaintext, &topic, 1, None);
    assert_eq!(harness::produce_keyed(&plaintext, &topic, N, &[]).len(), N);

    let mut cfg = test_config(&destination);
    let creds = creds(SaslMechanism::ScramSha512, "mirror", "mirror-secret");
    cfg.mirrors = vec![mirror_from(&sasl, &topic, Some(creds))];
    cfg.psm.snapshot_interval_ms = 200;
    let gw = TestGateway::start(cfg);
    let want = records(&plaintext, &topic);
    assert_eq!(want.len(), N);
    wait_mirrored(&gw, &destination, &topic, &want);
}

#[test]
fn a_failover_writes_its_barrier_into_the_sasl_destination_and_local_producers_follow() {
    let (plaintext, sasl) = secure();
    let source = harness::cluster("source");
    let topic = harness::unique_topic("sasl-failover");
    harness::create_topic(&source, &topic, 1, None);
    assert_eq!(harness::produce_keyed(&source, &topic, N, &[]).len(), N);
    let mut cfg = sasl_config(&sasl, "admin-secret");
    cfg.mirrors = vec![mirror_from(&source, &topic, None)];
    cfg.psm.snapshot_interval_ms = 200;
    let gw = TestGateway::start(cfg);
    let want = records(&source, &topic);
    wait_mirrored(&gw, &plaintext, &topic, &want);

    crate::failover::failover(&gw.admin(), "m");
    crate::failover::wait_stopped(&gw.admin(), "m");
    let log = crate::failover::read_log(&plaintext, &topic, 0);
    let barriers: Vec<i64> = log.barriers.iter().map(|b| b.0).collect();
    assert_eq!(
        barriers,
        vec![N as i64],
        "one barrier after the mirrored records"
    );

    // After the failover a local client (authenticated through the gateway) writes the topic
    // after the barrier.
    let dir = tempfile::tempdir().expect("tempdir");
    let alice = client_props(&dir, "SCRAM-SHA-256", "alice", "alice-secret");
    let (acked, out) = java_produce(&gw.bootstrap(), &topic, 50, &alice);
    harness::expect_success("VerifiableProducer after the failover", &out);
    assert_eq!(acked.len(), 50);
    assert!(acked.keys().all(|(_, o)| *o > N as i64), "{acked:?}");
}

/// Run `f` with a connection to the secure cluster's PLAINTEXT listener, whose principal is a
/// super user.
fn with_super_user<T>(
    plaintext: &str,
    f: impl for<'c> FnOnce(
        &'c mut mirrorgate::client::KafkaClient,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'c>>,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let mut c =
            mirrorgate::client::KafkaClient::connect(plaintext, std::time::Duration::from_secs(10))
                .await
                .expect("connect");
        f(&mut c).await
    })
}

/// Put ACLs on the secure cluster: for `principal`, DENY (`deny`) or ALLOW each of
/// `operations` (Kafka's codes) on the resource of type `resource_type` (2 TOPIC, 4 CLUSTER)
/// named `resource`.
fn put_acls(
    plaintext: &str,
    resource_type: i8,
    resource: &str,
    principal: &str,
    operations: &[i8],
    deny: bool,
) {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::CreateAclsRequest;
    use kafka_protocol::protocol::StrBytes;
    let req = CreateAclsRequest::default().with_creations(
        operations
            .iter()
            .map(|op| {
                AclCreation::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(StrBytes::from_string(resource.to_string()))
                    .with_resource_pattern_type(3) // LITERAL
                    .with_principal(StrBytes::from_string(principal.to_string()))
                    .with_host(StrBytes::from_static_str("*"))
                    .with_operation(*op)
                    .with_permission_type(if deny { 2 } else { 3 })
            })
            .collect(),
    );
    let resp = with_super_user(plaintext, |c| {
        Box::pin(async move { c.send(&req, 3).await.expect("CreateAcls") })
    });
    for r in &resp.results {
        assert_eq!(r.error_code, 0, "CreateAcls: {:?}", r.error_message);
    }
}

/// Remove every ACL of `principal` on the CLUSTER resource.
fn delete_cluster_acls(plaintext: &str, principal: &str) {
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::DeleteAclsRequest;
    use kafka_protocol::protocol::StrBytes;
    let req = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
        .with_resource_type_filter(4)
        .with_resource_name_filter(Some(StrBytes::from_static_str("kafka-cluster")))
        .with_pattern_type_filter(3)
        .with_principal_filter(Some(StrBytes::from_string(principal.to_string())))
        .with_host_filter(None)
        .with_operation(1) // ANY
        .with_permission_type(1)]); // ANY
    let resp = with_super_user(plaintext, |c| {
        Box::pin(async move { c.send(&req, 3).await.expect("DeleteAcls") })
    });
    for r in &resp.filter_results {
        assert_eq!(r.error_code, 0, "DeleteAcls: {:?}", r.error_message);
    }
}

/// Review F12: the gateway's own principal (`mirror` here) may not WRITE one mirror topic, so
/// a failover could not write its barrier there. The gateway says so before any failover: at
/// start it asks the broker's authorizer what its principal may do and lists what is missing
/// in `/readyz` warnings and `mirrorgate_protection_missing_permissions` — while the other
/// mirror topic, fully allowed, is not named.
#[test]
fn a_gateway_principal_that_may_not_write_a_mirror_topic_is_reported_before_any_failover() {
    let (plaintext, sasl) = secure();
    let denied = harness::unique_topic("nowrite");
    let allowed = harness::unique_topic("canwrite");
    harness::create_topic(&plaintext, &denied, 1, None);
    harness::create_topic(&plaintext, &allowed, 1, None);
    // Once a topic has ACLs, only what they allow is allowed: DESCRIBE and READ, not WRITE.
    put_acls(&plaintext, 2, &denied, "User:mirror", &[8, 3], false);
    let (gw, warnings) = as_mirror_user(&sasl, "acl", &[&denied, &allowed]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!("WRITE on topic {denied}")),
        "{warnings:?}"
    );
    assert_eq!(gw.metric("mirrorgate_protection_missing_permissions"), 1.0);
    assert!(
        gw.gateway.readiness().ready,
        "missing permissions do not make it unready"
    );
}

/// A gateway in front of the secure cluster's SASL listener as the `mirror` user, with mirror
/// `name` over `topics`, and the `/readyz` warnings once there are any (30 s at most).
fn as_mirror_user(sasl: &str, name: &str, topics: &[&str]) -> (TestGateway, Vec<String>) {
    let mut cfg = test_config(sasl);
    cfg.destination.sasl = Some(creds(SaslMechanism::ScramSha256, "mirror", "mirror-secret"));
    cfg.mirrors = vec![mirrorgate::config::MirrorConfig {
        name: name.into(),
        topics: topics.iter().map(|t| t.to_string()).collect(),
        source: None,
        transactions: Default::default(),
        configs: Default::default(),
        acls: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        forward: None,
        mirroring: Default::default(),
    }];
    let gw = TestGateway::start(cfg);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let warnings = loop {
        let w = gw.gateway.readiness().warnings;
        if !w.is_empty() || std::time::Instant::now() > deadline {
            break w;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    (gw, warnings)
}

/// Removes the CLUSTER ACLs of a principal when dropped (also when the test panics).
struct ClusterAclsGuard<'a>(&'a str, &'a str);
impl Drop for ClusterAclsGuard<'_> {
    fn drop(&mut self) {
        delete_cluster_acls(self.0, self.1);
    }
}

/// Review F7 with a real authorizer: the gateway's principal (`mirror`) may do everything on
/// the cluster but ALTER and CLUSTER_ACTION, so the brokers refuse its WriteTxnMarkers. The
/// gateway says so before any failover (`/readyz` warnings), and a failover with
/// `failover.barrier: auto` writes the data barrier instead (counted) and completes.
/// `disruptive_`: an ACL on the CLUSTER resource restricts every non-super principal of the
/// `secure` cluster while it exists (removed at the end).
#[test]
fn disruptive_a_principal_the_brokers_refuse_write_txn_markers_fails_over_with_the_data_barrier() {
    let (plaintext, sasl) = secure();
    let topic = harness::unique_topic("noalter");
    harness::create_topic(&plaintext, &topic, 1, None);
    // DESCRIBE (metadata), IDEMPOTENT_WRITE (InitProducerId), DESCRIBE_CONFIGS; not ALTER or
    // CLUSTER_ACTION.
    put_acls(
        &plaintext,
        4,
        "kafka-cluster",
        "User:mirror",
        &[8, 12, 10],
        false,
    );
    let _cleanup = ClusterAclsGuard(&plaintext, "User:mirror");
    let (gw, warnings) = as_mirror_user(&sasl, "noalter", &[&topic]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("ALTER or CLUSTER_ACTION"),
        "{warnings:?}"
    );
    crate::failover::wait_mirroring(&gw.admin(), "noalter", 1);
    crate::failover::failover(&gw.admin(), "noalter");
    let m = crate::failover::wait_stopped(&gw.admin(), "noalter");
    eprintln!("{m}");
    assert_eq!(
        gw.metric("mirrorgate_barrier_writes_total{kind=\"data\",mirror=\"noalter\"}"),
        1.0,
        "{}",
        gw.metrics()
    );
    let log = crate::failover::read_log(&plaintext, &topic, 0);
    assert_eq!(
        log.barriers.len(),
        1,
        "one data barrier: {:?}",
        log.barriers
    );
}

// ------------------------------------------------------------------ PLAIN, re-authentication

/// `secure-info`'s value for `key` (the cluster being up).
fn secure_info(key: &str) -> String {
    secure();
    let out = harness::rig(&["secure-info"]);
    harness::expect_success("integration/rig secure-info", &out);
    harness::parse_status(&out.stdout)
        .get(key)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "secure-info prints no {key}= (a secure cluster started before the rig had \
                 that listener: `integration/rig down secure`, then `up secure`)"
            )
        })
}

/// The address of one of the secure cluster's PLAIN-enabled listeners (`sasl_plain`,
/// `sasl_reauth`), checked to be listening.
fn plain_listener(key: &str) -> String {
    let addr = secure_info(key);
    let sock: std::net::SocketAddr = addr.parse().expect("host:port");
    if let Err(e) = TcpStream::connect_timeout(&sock, Duration::from_secs(5)) {
        panic!(
            "nothing listens on {key}={addr} ({e}): the secure cluster was started before the rig \
             had this listener; `integration/rig down secure`, then `integration/rig up secure`"
        );
    }
    addr
}

/// README (SASL): the gateway's own credentials support PLAIN (`NUL user NUL password`), on the
/// secure cluster's SASL_PLAIN listener, which enables PLAIN; the broker checks the password.
#[test]
fn the_gateways_own_connections_authenticate_with_plain() {
    let plain = plain_listener("sasl_plain");
    let n = metadata_with(
        &connector(SaslMechanism::Plain, "admin", "admin-secret"),
        &plain,
    )
    .unwrap_or_else(|e| panic!("PLAIN: {e}"));
    assert_eq!(n, 1, "brokers in metadata");
    wrong_password_refused(&connector(SaslMechanism::Plain, "admin", "wrong"), &plain);
}

/// A gateway whose own login is PLAIN gets ready (its metadata comes over PLAIN-authenticated
/// connections) and serves Java clients that authenticate with PLAIN through it, exactly.
#[test]
fn a_gateway_logging_in_with_plain_serves_clients_authenticating_with_plain() {
    let plain = plain_listener("sasl_plain");
    let mut cfg = test_config(&plain);
    cfg.destination.sasl = Some(creds(SaslMechanism::Plain, "admin", "admin-secret"));
    let gw = TestGateway::start(cfg);
    let r = gw.gateway.readiness();
    assert!(r.ready && r.metadata_known, "{r:?}");
    let topic = harness::unique_topic("sasl-plain");
    harness::create_topic(&harness::cluster("secure"), &topic, 2, None);
    let dir = tempfile::tempdir().expect("tempdir");
    let props = client_props(&dir, "PLAIN", "alice", "alice-secret");
    let (acked, out) = java_produce(&gw.bootstrap(), &topic, N, &props);
    harness::expect_success("VerifiableProducer through the gateway", &out);
    assert_eq!(acked.len(), N, "acknowledged records");
    let consumed = java_consume(&gw.bootstrap(), &topic, N, &props);
    assert_eq!(
        consumed, acked,
        "consumed records differ from the acknowledged ones"
    );
}

/// Sum of every series of `family` whose labels include all of `labels` (`name="value"`).
fn metric_sum(gw: &TestGateway, family: &str, labels: &[&str]) -> f64 {
    gw.metrics()
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// README (SASL): "Re-authentication (KIP-368) passes through the same way." The SASL_REAUTH
/// listener sets `connections.max.reauth.ms`; a Java producer through the gateway runs for
/// several sessions. A client whose session expires either re-authenticates on its connection
/// (a new SaslHandshake on it) or has the connection closed by the broker; every record must be
/// acknowledged once and more SASL handshakes must pass than client connections were opened.
#[test]
fn clients_reauthenticate_through_the_gateway_when_sessions_expire() {
    let reauth = plain_listener("sasl_reauth");
    let reauth_ms: u64 = secure_info("reauth_ms").parse().expect("reauth_ms");
    let gw = TestGateway::start(sasl_config(&reauth, "admin-secret"));
    let topic = harness::unique_topic("sasl-reauth");
    harness::create_topic(&harness::cluster("secure"), &topic, 1, None);
    let dir = tempfile::tempdir().expect("tempdir");
    let props = client_props(&dir, "SCRAM-SHA-256", "alice", "alice-secret");
    // About three sessions long: `n` records at 20 a second.
    let n = (3 * reauth_ms / 1000 * 20).max(60) as usize;
    let handshakes = |gw: &TestGateway| {
        metric_sum(
            gw,
            "mirrorgate_requests_total",
            &[r#"listener="client""#, r#"api="SaslHandshake""#],
        )
    };
    let connections = |gw: &TestGateway| {
        metric_sum(
            gw,
            "mirrorgate_connections_total",
            &[r#"listener="client""#],
        )
    };
    let (h0, c0) = (handshakes(&gw), connections(&gw));
    let out = harness::verifiable_producer(&gw.bootstrap(), &topic, n, Some(20), &props);
    harness::expect_success("VerifiableProducer through the gateway", &out);
    for e in harness::json_lines(&out.stdout) {
        assert_ne!(e["name"], "producer_send_error", "send error: {e}");
    }
    let acked = harness::verifiable_acks(&out);
    assert_eq!(acked.len(), n, "acknowledged records");
    let (handshakes, connections) = (handshakes(&gw) - h0, connections(&gw) - c0);
    eprintln!("{handshakes} SASL handshakes on {connections} client connections");
    assert!(
        connections >= 1.0 && handshakes > connections,
        "{handshakes} SASL handshakes on {connections} client connections: no session was \
         re-authenticated through the gateway"
    );
    let consumed = java_consume(&gw.bootstrap(), &topic, n, &props);
    assert_eq!(
        consumed, acked,
        "consumed records differ from the acknowledged ones"
    );
}
