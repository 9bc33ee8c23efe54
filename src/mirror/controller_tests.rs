//! Unit tests of the controller's decisions for admin requests and of overlapping mirror regexes,
//! over a cluster view filled by hand (no broker).

use super::*;
use crate::proxy::cluster::{Snapshot, TopicInfo};

const CONFIG: &str = r#"destination:
  bootstrap: ["127.0.0.1:1"]
listeners:
  client:
    port_base: 9092
admin:
  bind: 127.0.0.1:9180
mirrors:
  - name: first
    topics: ["regex:pay\\..*"]
  - name: second
    topics: ["regex:.*\\.us", orders]
"#;

fn controller() -> (Arc<MirrorController>, Arc<Metrics>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::config::load_str(
        &format!("{CONFIG}state_dir: {}\n", dir.path().display()),
        "t.yaml",
    )
    .unwrap();
    let store = StateStore::init(dir.path()).unwrap();
    let metrics = Metrics::new();
    let cluster = ClusterView::new(
        cfg.destination.clone(),
        crate::net::Connector::plain(),
        metrics.clone(),
    );
    let topic = |name: &str, n: usize| {
        (
            name.to_string(),
            TopicInfo {
                id: uuid::Uuid::new_v4(),
                leaders: vec![1; n],
            },
        )
    };
    let partitions = vec![topic("pay.us", 2), topic("orders", 3), topic("plain", 1)];
    cluster.replace(Snapshot {
        topics: partitions.iter().map(|(n, i)| (i.id, n.clone())).collect(),
        partitions,
        ..Snapshot::default()
    });
    let ctl = MirrorController::new(&cfg, store, &metrics, None, cluster);
    ctl.sync_partitions();
    (ctl, metrics, dir)
}

fn sample(metrics: &Metrics, series: &str) -> f64 {
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

#[test]
fn a_topic_matched_by_two_mirrors_goes_to_the_first_and_is_reported_once() {
    let (ctl, metrics, _dir) = controller();
    let records = ctl.records();
    let owners: Vec<(String, Vec<String>)> = records
        .iter()
        .map(|(r, _)| {
            (
                r.name.clone(),
                r.partitions.iter().map(|p| p.topic.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(owners[0].0, "first");
    assert!(owners[0].1.iter().all(|t| t == "pay.us") && owners[0].1.len() == 2);
    assert!(!owners[1].1.contains(&"pay.us".to_string()));
    assert_eq!(
        sample(&metrics, "mirrorgate_mirror_topic_overlaps_total"),
        1.0
    );
    ctl.sync_partitions();
    assert_eq!(
        sample(&metrics, "mirrorgate_mirror_topic_overlaps_total"),
        1.0
    );
}

#[test]
fn admin_requests_on_mirror_topics_are_refused_until_stopped() {
    let (ctl, metrics, _dir) = controller();
    let r = ctl
        .refuse_admin("DeleteRecords", "orders", Some(2))
        .expect("refused");
    assert_eq!(r.error_code, REJECT_ERROR_CODE);
    assert_eq!(r.reason, "read_only_admin");
    assert!(
        r.message.contains("DeleteRecords on orders-2")
            && r.message.contains("mirror second")
            && r.message.contains("MIRRORING"),
        "{}",
        r.message
    );
    let r = ctl
        .refuse_admin("DeleteTopics", "pay.us", None)
        .expect("refused");
    assert!(r.message.contains("topic pay.us") && r.message.contains("mirror first"));
    // A mirror topic without partitions known yet is read-only too.
    assert!(ctl
        .refuse_admin("CreatePartitions", "pay.eu", None)
        .is_some());
    assert!(ctl.refuse_admin("DeleteTopics", "plain", None).is_none());
    assert!(ctl
        .refuse_admin("DeleteRecords", "plain", Some(0))
        .is_none());
    assert!(ctl.refuse_admin_everywhere("ElectLeaders").is_some());
    assert_eq!(
        sample(
            &metrics,
            r#"mirrorgate_produce_rejected_total{reason="read_only_admin"}"#
        ),
        4.0
    );
}
