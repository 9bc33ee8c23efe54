//! ACL sync from `authz` (StandardAuthorizer, PLAINTEXT principal a super user) to `secure`
//! (StandardAuthorizer; the gateway authenticates as the super user `admin` on its SASL
//! listener, clients authenticate through the gateway as themselves).

use std::path::PathBuf;
use std::time::Duration;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::config::{
    AclSyncConfig, ClusterConfig, ConfigSyncConfig, MirrorConfig, SaslConfig, SaslMechanism,
    SecretSource,
};
use mirrorgate::sync::acls::{
    AclBinding, PATTERN_LITERAL, PATTERN_PREFIXED, RESOURCE_GROUP, RESOURCE_TOPIC,
};

use super::{wait_until, with_client, INTERVAL_MS};
use crate::failover::{failover, mirror_json, wait_mirroring, wait_stopped};
use crate::gw::{test_config, TestGateway};
use crate::harness;

const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const DESCRIBE_CONFIGS: i8 = 10;
const ALLOW: i8 = 3;

fn binding(rt: i8, name: &str, pattern: i8, principal: &str, op: i8) -> AclBinding {
    AclBinding {
        resource_type: rt,
        resource_name: name.into(),
        pattern_type: pattern,
        principal: principal.into(),
        host: "*".into(),
        operation: op,
        permission_type: ALLOW,
    }
}

fn create_acls(plaintext: &str, acls: &[AclBinding]) {
    let req = CreateAclsRequest::default().with_creations(
        acls.iter()
            .map(|b| {
                AclCreation::default()
                    .with_resource_type(b.resource_type)
                    .with_resource_name(StrBytes::from_string(b.resource_name.clone()))
                    .with_resource_pattern_type(b.pattern_type)
                    .with_principal(StrBytes::from_string(b.principal.clone()))
                    .with_host(StrBytes::from_string(b.host.clone()))
                    .with_operation(b.operation)
                    .with_permission_type(b.permission_type)
            })
            .collect(),
    );
    let resp = with_client(plaintext, |c| {
        Box::pin(async move { c.send(&req, 3).await.expect("CreateAcls") })
    });
    for r in &resp.results {
        assert_eq!(r.error_code, 0, "CreateAcls: {:?}", r.error_message);
    }
}

/// The ACLs of `plaintext`'s cluster on resources named `name` (literal or prefixed, topics and
/// groups).
fn acls_named(plaintext: &str, name: &str) -> Vec<AclBinding> {
    let mut out = Vec::new();
    for rt in [RESOURCE_TOPIC, RESOURCE_GROUP] {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(rt)
            .with_resource_name_filter(Some(StrBytes::from_string(name.to_string())))
            .with_pattern_type_filter(1) // ANY
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(1)
            .with_permission_type(1);
        let resp = with_client(plaintext, |c| {
            Box::pin(async move { c.send(&req, 3).await.expect("DescribeAcls") })
        });
        assert_eq!(resp.error_code, 0, "DescribeAcls: {:?}", resp.error_message);
        for r in &resp.resources {
            for a in &r.acls {
                out.push(AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.to_string(),
                    pattern_type: r.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission_type: a.permission_type,
                });
            }
        }
    }
    out
}

/// Removes every topic and group ACL named after the test's topic from a cluster when dropped.
struct AclCleanup(String, String);
impl Drop for AclCleanup {
    fn drop(&mut self) {
        let filters = [RESOURCE_TOPIC, RESOURCE_GROUP]
            .into_iter()
            .map(|rt| {
                DeleteAclsFilter::default()
                    .with_resource_type_filter(rt)
                    .with_resource_name_filter(Some(StrBytes::from_string(self.1.clone())))
                    .with_pattern_type_filter(1)
                    .with_principal_filter(None)
                    .with_host_filter(None)
                    .with_operation(1)
                    .with_permission_type(1)
            })
            .collect();
        let req = DeleteAclsRequest::default().with_filters(filters);
        with_client(&self.0, |c| {
            Box::pin(async move {
                let _ = c.send(&req, 3).await;
            })
        });
    }
}

fn secure_sasl() -> String {
    let out = harness::rig(&["secure-info"]);
    harness::expect_success("integration/rig secure-info", &out);
    harness::parse_status(&out.stdout)
        .get("sasl_plaintext")
        .cloned()
        .expect("secure-info prints sasl_plaintext")
}

/// A gateway in front of `secure` (SASL, as `admin`) mirroring `topic` from `authz` with ACL
/// sync on for the resources `include` (group ACLs are copied whatever their names: the tests
/// name the groups they copy, so that concurrent tests do not copy each other's).
fn gateway(topic: &str, include: &[String]) -> TestGateway {
    let mut cfg = test_config(&secure_sasl());
    cfg.destination.sasl = Some(SaslConfig {
        mechanism: SaslMechanism::ScramSha256,
        username: "admin".into(),
        password: SecretSource {
            value: Some("admin-secret".into()),
            env: None,
            file: None,
        },
    });
    cfg.mirrors = vec![MirrorConfig {
        name: "m".into(),
        topics: vec![topic.to_string()],
        source: Some(ClusterConfig {
            bootstrap: vec![harness::cluster("authz")],
            connect_timeout_ms: 3000,
            metadata_refresh_ms: 30_000,
            tls: None,
            sasl: None,
        }),
        transactions: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        configs: ConfigSyncConfig::default(),
        acls: AclSyncConfig {
            enabled: true,
            include: include.to_vec(),
            sync_interval_ms: INTERVAL_MS,
            ..Default::default()
        },
        forward: None,
        mirroring: Default::default(),
    }];
    cfg.psm.snapshot_interval_ms = 200;
    let gw = TestGateway::start(cfg);
    wait_mirroring(&gw.admin(), "m", 1);
    gw
}

/// Java client properties for `alice` over SASL_PLAINTEXT/SCRAM-SHA-256.
fn alice_props(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("alice.properties");
    std::fs::write(
        &path,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"alice\" password=\"alice-secret\";\n\
         acks=all\nenable.idempotence=true\nretries=2147483647\n\
         max.in.flight.requests.per.connection=5\nmax.block.ms=20000\n",
    )
    .expect("write properties");
    path
}

/// alice may read and write the topic and use the groups named after it on the source; on the
/// destination the topic is restricted (an ACL for another principal), so without the synced
/// ACLs alice would be refused. After the failover she produces and consumes through the
/// gateway.
#[test]
fn acl_sync_lets_a_principal_allowed_on_the_source_read_and_write_through_the_gateway_after_failover(
) {
    let authz = harness::cluster("authz");
    let secure = harness::cluster("secure");
    let topic = harness::unique_topic("aclsync");
    let _clean_source = AclCleanup(authz.clone(), topic.clone());
    let _clean_destination = AclCleanup(secure.clone(), topic.clone());
    harness::create_topic(&authz, &topic, 1, None);
    let alice: Vec<AclBinding> = [READ, WRITE, DESCRIBE]
        .into_iter()
        .map(|op| binding(RESOURCE_TOPIC, &topic, PATTERN_LITERAL, "User:alice", op))
        .chain([binding(
            RESOURCE_GROUP,
            &topic,
            PATTERN_PREFIXED,
            "User:alice",
            READ,
        )])
        .collect();
    create_acls(&authz, &alice);
    create_acls(
        &secure,
        &[binding(
            RESOURCE_TOPIC,
            &topic,
            PATTERN_LITERAL,
            "User:bob",
            READ,
        )],
    );

    let gw = gateway(&topic, &["topic".into(), format!("group:{topic}")]);
    wait_until(
        "alice's ACLs created on the destination",
        Duration::from_secs(30),
        || {
            let have = acls_named(&secure, &topic);
            alice.iter().all(|b| have.contains(b))
        },
        || format!("{}", mirror_json(&gw.admin(), "m")["acl_sync"]),
    );
    assert_eq!(
        gw.metric("mirrorgate_acl_sync_created_total{mirror=\"m\"}"),
        4.0
    );
    failover(&gw.admin(), "m");
    wait_stopped(&gw.admin(), "m");

    let dir = tempfile::tempdir().expect("tempdir");
    let props = alice_props(&dir);
    let (acked, out) = harness::verifiable_produce(&gw.bootstrap(), &topic, 50, &props);
    assert_eq!(
        acked.len(),
        50,
        "alice produces through the gateway: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let consumed = harness::verifiable_consume(&gw.bootstrap(), &topic, 50, &props);
    assert_eq!(consumed, acked, "alice consumes what she produced");
}

#[test]
fn acl_sync_creates_nothing_after_the_failover() {
    let authz = harness::cluster("authz");
    let secure = harness::cluster("secure");
    let topic = harness::unique_topic("aclsync-fo");
    let _clean_source = AclCleanup(authz.clone(), topic.clone());
    let _clean_destination = AclCleanup(secure.clone(), topic.clone());
    harness::create_topic(&authz, &topic, 1, None);
    let before = binding(RESOURCE_TOPIC, &topic, PATTERN_LITERAL, "User:alice", READ);
    create_acls(&authz, std::slice::from_ref(&before));
    let gw = gateway(&topic, &["topic".into()]);
    wait_until(
        "the ACL created on the destination",
        Duration::from_secs(30),
        || acls_named(&secure, &topic).contains(&before),
        || format!("{}", mirror_json(&gw.admin(), "m")["acl_sync"]),
    );
    failover(&gw.admin(), "m");
    wait_stopped(&gw.admin(), "m");
    assert_eq!(mirror_json(&gw.admin(), "m")["acl_sync"]["stopped"], true);
    let after = binding(
        RESOURCE_TOPIC,
        &topic,
        PATTERN_LITERAL,
        "User:alice",
        DESCRIBE_CONFIGS,
    );
    create_acls(&authz, std::slice::from_ref(&after));
    // Absence cannot be awaited: three sync intervals, in which a running sync would have
    // created it.
    std::thread::sleep(Duration::from_millis(3 * INTERVAL_MS + 500));
    assert_eq!(acls_named(&secure, &topic), vec![before]);
}
