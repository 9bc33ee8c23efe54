//! Config sync policy against a fake pair of clusters.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use super::*;

#[derive(Default)]
struct Fake {
    source: Mutex<BTreeMap<String, TopicConfigs>>,
    destination: Mutex<BTreeMap<String, TopicConfigs>>,
    /// Topics that may not be written (not MIRRORING, failover started).
    frozen: Mutex<HashSet<String>>,
    alters: Mutex<Vec<(String, Vec<Change>)>>,
}

fn cfgs(kv: &[(&str, &str)]) -> TopicConfigs {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Fake {
    fn with(source: &[(&str, &str)], destination: &[(&str, &str)]) -> Fake {
        let f = Fake::default();
        f.source.lock().unwrap().insert("t".into(), cfgs(source));
        f.destination
            .lock()
            .unwrap()
            .insert("t".into(), cfgs(destination));
        f
    }
    fn set_source(&self, k: &str, v: Option<&str>) {
        set(&self.source, k, v)
    }
    fn set_destination(&self, k: &str, v: Option<&str>) {
        set(&self.destination, k, v)
    }
    fn dest(&self, k: &str) -> Option<String> {
        self.destination.lock().unwrap()["t"].get(k).cloned()
    }
    fn alters(&self) -> usize {
        self.alters.lock().unwrap().len()
    }
}

fn set(m: &Mutex<BTreeMap<String, TopicConfigs>>, k: &str, v: Option<&str>) {
    let mut m = m.lock().unwrap();
    let t = m.entry("t".into()).or_default();
    match v {
        Some(v) => t.insert(k.into(), v.into()),
        None => t.remove(k),
    };
}

fn describe(
    m: &Mutex<BTreeMap<String, TopicConfigs>>,
    topics: &[String],
) -> HashMap<String, Result<TopicConfigs, String>> {
    let m = m.lock().unwrap();
    topics
        .iter()
        .filter_map(|t| Some((t.clone(), Ok(m.get(t)?.clone()))))
        .collect()
}

impl ConfigIo for Fake {
    fn topics(&self) -> Vec<String> {
        vec!["t".into()]
    }
    fn may_write(&self, topic: &str) -> bool {
        !self.frozen.lock().unwrap().contains(topic)
    }
    async fn source_configs(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, Result<TopicConfigs, String>>, String> {
        Ok(describe(&self.source, topics))
    }
    async fn destination_configs(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, Result<TopicConfigs, String>>, String> {
        Ok(describe(&self.destination, topics))
    }
    async fn alter(&self, topic: &str, changes: &[Change]) -> Result<(), String> {
        self.alters
            .lock()
            .unwrap()
            .push((topic.to_string(), changes.to_vec()));
        for c in changes {
            match c {
                Change::Set(k, v) => self.set_destination(k, Some(v)),
                Change::Delete(k) => self.set_destination(k, None),
            }
        }
        Ok(())
    }
}

async fn round(sync: &mut ConfigSync, io: &Fake) -> RoundReport {
    sync.round(io, &ConfigSyncConfig::default())
        .await
        .expect("round")
}

#[tokio::test]
async fn a_source_value_missing_on_the_destination_is_set() {
    let io = Fake::with(&[("retention.ms", "1000")], &[]);
    let r = round(&mut ConfigSync::default(), &io).await;
    assert_eq!(io.dest("retention.ms").as_deref(), Some("1000"));
    assert_eq!(r.set, 1);
}

#[tokio::test]
async fn a_source_change_reaches_the_destination() {
    let io = Fake::with(&[("retention.ms", "1000")], &[("retention.ms", "1000")]);
    let mut s = ConfigSync::default();
    round(&mut s, &io).await;
    io.set_source("retention.ms", Some("2000"));
    round(&mut s, &io).await;
    assert_eq!(io.dest("retention.ms").as_deref(), Some("2000"));
}

#[tokio::test]
async fn keys_in_step_are_not_written() {
    let io = Fake::with(&[("retention.ms", "1000")], &[("retention.ms", "1000")]);
    let r = round(&mut ConfigSync::default(), &io).await;
    assert_eq!(io.alters(), 0);
    assert_eq!(r.keys_in_step, 1);
}

#[tokio::test]
async fn a_local_key_is_not_synced() {
    let io = Fake::with(&[("min.insync.replicas", "2")], &[]);
    round(&mut ConfigSync::default(), &io).await;
    assert_eq!(io.dest("min.insync.replicas"), None);
}

#[tokio::test]
async fn an_excluded_key_is_not_synced() {
    let io = Fake::with(&[("retention.ms", "1000")], &[]);
    let cfg = ConfigSyncConfig {
        exclude: vec!["retention.ms".into()],
        ..Default::default()
    };
    ConfigSync::default().round(&io, &cfg).await.expect("round");
    assert_eq!(io.dest("retention.ms"), None);
}

#[tokio::test]
async fn a_destination_change_to_a_synced_key_is_reported_not_overwritten() {
    let io = Fake::with(&[("retention.ms", "1000")], &[("retention.ms", "1000")]);
    let mut s = ConfigSync::default();
    round(&mut s, &io).await;
    io.set_destination("retention.ms", Some("5"));
    let r = round(&mut s, &io).await;
    assert_eq!(io.dest("retention.ms").as_deref(), Some("5"));
    assert_eq!(
        r.new_drifts,
        vec![Drift {
            topic: "t".into(),
            key: "retention.ms".into(),
            source: Some("1000".into()),
            destination: Some("5".into()),
        }]
    );
}

#[tokio::test]
async fn a_drift_is_reported_once_while_it_lasts() {
    let io = Fake::with(&[("retention.ms", "1000")], &[("retention.ms", "1000")]);
    let mut s = ConfigSync::default();
    round(&mut s, &io).await;
    io.set_destination("retention.ms", Some("5"));
    round(&mut s, &io).await;
    let r = round(&mut s, &io).await;
    assert!(r.new_drifts.is_empty());
    assert_eq!(s.drifts().len(), 1, "still listed");
}

#[tokio::test]
async fn a_drift_ends_when_the_destination_is_back_in_step() {
    let io = Fake::with(&[("retention.ms", "1000")], &[("retention.ms", "1000")]);
    let mut s = ConfigSync::default();
    round(&mut s, &io).await;
    io.set_destination("retention.ms", Some("5"));
    round(&mut s, &io).await;
    io.set_destination("retention.ms", Some("1000"));
    round(&mut s, &io).await;
    assert!(s.drifts().is_empty());
}

#[tokio::test]
async fn a_source_change_overrides_a_drifted_destination_value() {
    let io = Fake::with(&[("retention.ms", "1000")], &[("retention.ms", "1000")]);
    let mut s = ConfigSync::default();
    round(&mut s, &io).await;
    io.set_destination("retention.ms", Some("5"));
    round(&mut s, &io).await;
    io.set_source("retention.ms", Some("3000"));
    round(&mut s, &io).await;
    assert_eq!(io.dest("retention.ms").as_deref(), Some("3000"));
    assert!(s.drifts().is_empty());
}

#[tokio::test]
async fn a_key_removed_at_the_source_is_deleted_on_the_destination() {
    let io = Fake::with(&[("retention.ms", "1000")], &[]);
    let mut s = ConfigSync::default();
    round(&mut s, &io).await;
    io.set_source("retention.ms", None);
    let r = round(&mut s, &io).await;
    assert_eq!(io.dest("retention.ms"), None);
    assert_eq!(r.deleted, 1);
}

#[tokio::test]
async fn a_destination_only_key_is_never_deleted() {
    let io = Fake::with(&[], &[("segment.ms", "60000")]);
    round(&mut ConfigSync::default(), &io).await;
    assert_eq!(io.dest("segment.ms").as_deref(), Some("60000"));
}

#[tokio::test]
async fn a_topic_that_may_not_be_written_is_left_alone() {
    let io = Fake::with(&[("retention.ms", "1000")], &[]);
    io.frozen.lock().unwrap().insert("t".into());
    round(&mut ConfigSync::default(), &io).await;
    assert_eq!(io.alters(), 0);
}

#[test]
fn the_first_sight_of_a_differing_key_sets_the_source_value() {
    assert_eq!(
        decide("k", Some("1"), Some("2"), None),
        Decision::Write(Change::Set("k".into(), "1".into()))
    );
}
