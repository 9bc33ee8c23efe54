//! Topic config sync from `source` to `destination`.

use std::time::Duration;

use mirrorgate::config::{ClusterConfig, Config, ConfigSyncConfig, MirrorConfig};

use super::{alter_topic_config, topic_config, wait_until, INTERVAL_MS};
use crate::failover::{failover, mirror_json, wait_mirroring, wait_stopped};
use crate::gw::{test_config, TestGateway};
use crate::harness;

/// A gateway in front of `destination` mirroring `topic` from `source` with `configs`.
fn gateway(topic: &str, configs: ConfigSyncConfig) -> (TestGateway, String, String) {
    let source = harness::cluster("source");
    let destination = harness::cluster("destination");
    let mut cfg: Config = test_config(&destination);
    cfg.mirrors = vec![MirrorConfig {
        name: "m".into(),
        topics: vec![topic.to_string()],
        source: Some(ClusterConfig {
            bootstrap: vec![source.clone()],
            connect_timeout_ms: 3000,
            metadata_refresh_ms: 30_000,
            tls: None,
            sasl: None,
        }),
        transactions: Default::default(),
        groups: Default::default(),
        recovery: Default::default(),
        configs,
        acls: Default::default(),
        forward: None,
        mirroring: Default::default(),
    }];
    cfg.psm.snapshot_interval_ms = 200;
    let gw = TestGateway::start(cfg);
    wait_mirroring(&gw.admin(), "m", 1);
    (gw, source, destination)
}

fn fast() -> ConfigSyncConfig {
    ConfigSyncConfig {
        sync_interval_ms: INTERVAL_MS,
        ..Default::default()
    }
}

/// Wait until the destination's `key` of `topic` is `want`.
fn wait_destination(gw: &TestGateway, destination: &str, topic: &str, key: &str, want: &str) {
    wait_until(
        &format!("destination {topic} {key} != {want}"),
        Duration::from_secs(30),
        || topic_config(destination, topic, key).as_deref() == Some(want),
        || format!("{}", mirror_json(&gw.admin(), "m")["config_sync"]),
    );
}

#[test]
fn config_sync_carries_a_source_retention_change_to_the_destination() {
    let topic = harness::unique_topic("cfgsync-ret");
    harness::create_topic(&harness::cluster("source"), &topic, 1, None);
    let (gw, source, destination) = gateway(&topic, fast());
    alter_topic_config(&source, &topic, "retention.ms", Some("7200000"));
    wait_destination(&gw, &destination, &topic, "retention.ms", "7200000");
    let m = mirror_json(&gw.admin(), "m");
    assert!(
        m["config_sync"]["keys_set_total"].as_u64() >= Some(1),
        "{m}"
    );
    assert!(
        gw.metric("mirrorgate_config_sync_changes_total{mirror=\"m\",op=\"set\"}") >= 1.0,
        "{}",
        gw.metrics()
    );
}

#[test]
fn config_sync_leaves_an_excluded_key_alone() {
    let topic = harness::unique_topic("cfgsync-excl");
    let source = harness::cluster("source");
    harness::create_topic(&source, &topic, 1, None);
    alter_topic_config(&source, &topic, "segment.ms", Some("3600000"));
    let (gw, source, destination) = gateway(
        &topic,
        ConfigSyncConfig {
            exclude: vec!["segment.ms".into()],
            ..fast()
        },
    );
    // A round that sees both keys: the included one arrives, the excluded one does not.
    alter_topic_config(&source, &topic, "retention.ms", Some("7300000"));
    wait_destination(&gw, &destination, &topic, "retention.ms", "7300000");
    assert_eq!(topic_config(&destination, &topic, "segment.ms"), None);
}

#[test]
fn config_sync_reports_a_destination_change_to_a_synced_key_and_keeps_it() {
    let topic = harness::unique_topic("cfgsync-drift");
    harness::create_topic(&harness::cluster("source"), &topic, 1, None);
    let (gw, source, destination) = gateway(&topic, fast());
    alter_topic_config(&source, &topic, "retention.ms", Some("7400000"));
    wait_destination(&gw, &destination, &topic, "retention.ms", "7400000");
    alter_topic_config(&destination, &topic, "retention.ms", Some("600000"));
    wait_until(
        "drift reported",
        Duration::from_secs(30),
        || gw.metric("mirrorgate_config_drift_total{mirror=\"m\"}") >= 1.0,
        || gw.metrics(),
    );
    let drift = mirror_json(&gw.admin(), "m")["config_sync"]["drift"].clone();
    assert_eq!(
        drift,
        serde_json::json!([{ "topic": topic, "key": "retention.ms",
                             "source": "7400000", "destination": "600000" }])
    );
    assert_eq!(
        topic_config(&destination, &topic, "retention.ms").as_deref(),
        Some("600000"),
        "the destination's change is not overwritten"
    );
    assert_eq!(gw.metric("mirrorgate_config_drift_keys{mirror=\"m\"}"), 1.0);
}

#[test]
fn config_sync_changes_nothing_after_the_failover() {
    let topic = harness::unique_topic("cfgsync-fo");
    harness::create_topic(&harness::cluster("source"), &topic, 1, None);
    let (gw, source, destination) = gateway(&topic, fast());
    alter_topic_config(&source, &topic, "retention.ms", Some("7500000"));
    wait_destination(&gw, &destination, &topic, "retention.ms", "7500000");
    failover(&gw.admin(), "m");
    wait_stopped(&gw.admin(), "m");
    let m = mirror_json(&gw.admin(), "m");
    assert_eq!(m["config_sync"]["stopped"], true, "{m}");
    let runs = gw.metric("mirrorgate_config_sync_runs_total{mirror=\"m\",result=\"ok\"}");
    alter_topic_config(&source, &topic, "retention.ms", Some("7600000"));
    // Absence cannot be awaited: three sync intervals, in which a running sync would have
    // written the new value.
    std::thread::sleep(Duration::from_millis(3 * INTERVAL_MS + 500));
    assert_eq!(
        topic_config(&destination, &topic, "retention.ms").as_deref(),
        Some("7500000")
    );
    assert_eq!(
        gw.metric("mirrorgate_config_sync_runs_total{mirror=\"m\",result=\"ok\"}"),
        runs,
        "no sync round after the failover"
    );
}
