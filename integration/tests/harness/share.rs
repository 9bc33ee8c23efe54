//! Share groups (KIP-932) on the rig's clusters: the rig starts every cluster with the
//! `share.version` feature at 0 (Kafka 4.1's default), so a test that needs share groups holds a
//! [`ShareGroupsEnabled`] for each cluster it uses.
//!
//! [`share_consume`] runs a KafkaShareConsumer (integration/clients/java/ShareConsume.java).
//!
//! The guard is counted per cluster in this process: the first holder upgrades the feature
//! (`kafka-features upgrade --feature share.version=1`), the last one to drop it finalizes it
//! back to the level it found (even when the test panics), so two tests that need it at once
//! (the parallel phase runs two at a time) never switch it off under each other. While it is
//! on, only share-group APIs change (they answer instead of UNSUPPORTED_VERSION): classic and
//! consumer-protocol groups, producers and fetches behave the same.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use super::{expect_success, json_lines, repo, rig_java, tail_text};

/// Holders and the level found, per bootstrap.
fn holders() -> &'static Mutex<BTreeMap<String, (usize, String)>> {
    static H: OnceLock<Mutex<BTreeMap<String, (usize, String)>>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// The finalized level of `share.version` on `bootstrap`.
fn share_version(bootstrap: &str) -> String {
    let out = rig_java(
        "org.apache.kafka.tools.FeatureCommand",
        &["--bootstrap-server", bootstrap, "describe"],
    );
    expect_success("kafka-features describe", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Feature: share.version"))
        .unwrap_or_else(|| panic!("no share.version feature:\n{text}"));
    line.split("FinalizedVersionLevel:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no finalized level: {line}"))
        .to_string()
}

fn set_share_version(bootstrap: &str, verb: &str, level: &str) -> std::process::Output {
    let feature = format!("share.version={level}");
    rig_java(
        "org.apache.kafka.tools.FeatureCommand",
        &["--bootstrap-server", bootstrap, verb, "--feature", &feature],
    )
}

/// `share.version=1` on one cluster for the life of the value (see the module doc).
pub struct ShareGroupsEnabled {
    bootstrap: String,
}

impl ShareGroupsEnabled {
    pub fn enable(bootstrap: &str) -> ShareGroupsEnabled {
        let mut h = holders().lock().unwrap_or_else(|e| e.into_inner());
        match h.get_mut(bootstrap) {
            Some((n, _)) => *n += 1,
            None => {
                let before = share_version(bootstrap);
                if before != "1" {
                    let out = set_share_version(bootstrap, "upgrade", "1");
                    expect_success("kafka-features upgrade share.version=1", &out);
                }
                h.insert(bootstrap.to_string(), (1, before));
            }
        }
        ShareGroupsEnabled {
            bootstrap: bootstrap.to_string(),
        }
    }
}

impl Drop for ShareGroupsEnabled {
    fn drop(&mut self) {
        let mut h = holders().lock().unwrap_or_else(|e| e.into_inner());
        let Some((n, before)) = h.get_mut(&self.bootstrap) else {
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        let before = before.clone();
        h.remove(&self.bootstrap);
        if before == "1" {
            return;
        }
        let out = set_share_version(&self.bootstrap, "downgrade", &before);
        if !out.status.success() {
            eprintln!(
                "harness: could not restore share.version={before} on {}: {}",
                self.bootstrap,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Deletes share groups from a cluster when dropped (after the test's consumers have left), so
/// that no share group of a test outlives it on a shared cluster. Drop it before the
/// cluster's [`ShareGroupsEnabled`] (declare it after).
pub struct ShareGroupsDeleted {
    bootstrap: String,
    groups: Vec<String>,
}

impl ShareGroupsDeleted {
    pub fn on(bootstrap: &str, groups: &[&str]) -> ShareGroupsDeleted {
        ShareGroupsDeleted {
            bootstrap: bootstrap.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }
}

impl Drop for ShareGroupsDeleted {
    fn drop(&mut self) {
        let mut args = vec!["--bootstrap-server", self.bootstrap.as_str(), "--delete"];
        for g in &self.groups {
            args.extend(["--group", g.as_str()]);
        }
        let out = rig_java(
            "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
            &args,
        );
        if !out.status.success() {
            eprintln!(
                "harness: could not delete share groups {:?} on {}: {}",
                self.groups,
                self.bootstrap,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A record a share consumer was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareDelivery {
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    /// The delivery count the broker gave it (1 for a first delivery).
    pub delivery_count: i64,
    /// Acknowledged ACCEPT (else RELEASE: given back to the group).
    pub accepted: bool,
}

/// Consume `topic` with share group `group` through `bootstrap` until `n` distinct records
/// were delivered or `timeout_ms` passed. `admin` (brokers) gets the group's
/// `share.auto.offset.reset=earliest` first (`-`: nothing set, the group starts where its
/// share partitions' state says); offsets in `release` are acknowledged RELEASE, the others
/// ACCEPT. Every delivery, in order.
pub fn share_consume(
    bootstrap: &str,
    admin: &str,
    topic: &str,
    group: &str,
    n: usize,
    release: &[i64],
    timeout_ms: u64,
) -> Vec<ShareDelivery> {
    let class = repo().join("integration/clients/java/ShareConsume.java");
    let release: Vec<String> = release.iter().map(|o| o.to_string()).collect();
    let out = rig_java(
        &class.to_string_lossy(),
        &[
            bootstrap,
            admin,
            topic,
            group,
            &n.to_string(),
            &timeout_ms.to_string(),
            &release.join(","),
        ],
    );
    expect_success("ShareConsume.java", &out);
    let lines = json_lines(&out.stdout);
    assert!(
        lines.iter().any(|l| l.get("done").is_some()),
        "ShareConsume did not finish:\n{}",
        tail_text(&out.stderr, 40)
    );
    lines
        .iter()
        .filter_map(|l| {
            Some(ShareDelivery {
                partition: l.get("partition")?.as_i64()? as i32,
                offset: l.get("offset")?.as_i64()?,
                key: l["key"].as_str().unwrap_or("<null>").to_string(),
                delivery_count: l["delivery_count"].as_i64().unwrap_or(0),
                accepted: l["ack"] == "accept",
            })
        })
        .collect()
}
