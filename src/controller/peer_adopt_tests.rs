//! Unit tests of following the state topic in the controller (review G4): an adoption that has
//! not finished when the failover is failed back, or replaced by a newer failover, never leaves
//! this instance's partitions STOPPING. The controller runs over a cluster view filled by hand
//! and a PSM whose first rebuild has not finished (so an adoption cannot complete); no broker.

use std::sync::Arc;
use std::time::Duration;

use super::MirrorController;
use crate::cluster::{ClusterView, Snapshot, TopicInfo};
use crate::instances::view::{Follow, Stopped, StoppedPartition};
use crate::metrics::Metrics;
use crate::mirror::fault_hooks::FaultHooks;
use crate::mirror::state::{BarrierKind, MirrorRecord, PartitionState};
use crate::psm::registry::PsmRegistry;
use crate::state::StateStore;

const MIRROR: &str = "second";

const CONFIG: &str = r#"destination:
  bootstrap: ["127.0.0.1:1"]
listeners:
  client:
    port_base: 9092
admin:
  bind: 127.0.0.1:9180
mirrors:
  - name: second
    topics: [orders]
"#;

/// A controller of mirror `second` (topic `orders`, 3 partitions MIRRORING) whose PSM has not
/// finished its first rebuild, and that PSM.
fn controller() -> (Arc<MirrorController>, Arc<PsmRegistry>, tempfile::TempDir) {
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
        crate::client::Connector::plain(),
        metrics.clone(),
    );
    let info = TopicInfo {
        id: uuid::Uuid::new_v4(),
        leaders: vec![1; 3],
    };
    cluster.replace(Snapshot {
        topics: [(info.id, "orders".to_string())].into_iter().collect(),
        partitions: vec![("orders".to_string(), info)],
        ..Snapshot::default()
    });
    let psm = PsmRegistry::new(&cfg, Some(store.clone()), &metrics);
    let ctl = MirrorController::new(
        &cfg,
        store,
        &metrics,
        Some(psm.clone()),
        cluster,
        FaultHooks::default(),
    );
    ctl.sync_partitions();
    (ctl, psm, dir)
}

/// The handover of failover `fid` driven by instance `by`: every partition at `barrier`.
fn handover(fid: &str, by: &str, barrier: i64) -> Follow {
    Follow::Stopped(Arc::new(Stopped {
        mirror: MIRROR.into(),
        failover_id: fid.into(),
        by: by.into(),
        at_ms: 1,
        partitions: (0..3)
            .map(|p| StoppedPartition {
                topic: "orders".into(),
                partition: p,
                barrier_offset: barrier,
                kind: BarrierKind::Data,
                producer: None,
                topic_id: None,
                last_mirrored_offset: Some(barrier - 1),
                producers_expired: None,
            })
            .collect(),
        screened: Vec::new(),
    }))
}

fn record(ctl: &MirrorController) -> MirrorRecord {
    ctl.records()
        .into_iter()
        .map(|(r, _)| r)
        .find(|r| r.name == MIRROR)
        .unwrap()
}

fn states(ctl: &MirrorController) -> Vec<PartitionState> {
    record(ctl).partitions.iter().map(|p| p.state).collect()
}

#[tokio::test]
async fn a_failback_followed_while_this_instance_adopts_returns_its_partitions_to_mirroring() {
    let (ctl, _psm, _dir) = controller();
    let follow = ctl.peer_follow_hook(Duration::ZERO);
    let r = follow(handover("f1", "a", 10)).await;
    assert_eq!(r, Ok(false), "the PSM is not rebuilt yet: not adopted");
    assert_eq!(states(&ctl), vec![PartitionState::Stopping; 3]);
    let r = follow(Follow::Mirroring {
        mirror: MIRROR.into(),
        by: "a".into(),
        at_ms: 2,
    })
    .await;
    assert_eq!(r, Ok(true), "the failback is followed here");
    assert_eq!(states(&ctl), vec![PartitionState::Mirroring; 3]);
    let rec = record(&ctl);
    assert_eq!(
        (rec.failover_id, rec.adopted_from),
        (None, None),
        "the adopted failover is forgotten"
    );
}

#[tokio::test]
async fn a_newer_failover_is_adopted_over_an_adoption_that_never_finished() {
    // This instance missed the failback of f1 (it read f2's records first): f2 replaces it.
    let (ctl, psm, _dir) = controller();
    let follow = ctl.peer_follow_hook(Duration::ZERO);
    assert_eq!(follow(handover("f1", "a", 10)).await, Ok(false));
    psm.set_initialized();
    let r = follow(handover("f2", "c", 20)).await;
    assert_eq!(r, Ok(true), "f2 adopted");
    let rec = record(&ctl);
    assert_eq!(rec.failover_id.as_deref(), Some("f2"));
    assert_eq!(rec.adopted_from.as_deref(), Some("c"));
    for p in &rec.partitions {
        assert_eq!(
            (p.state, p.barrier_offset),
            (PartitionState::Stopped, Some(20)),
            "{p:?}"
        );
    }
}

#[tokio::test]
async fn a_failback_followed_after_an_adoption_that_never_finished_lets_the_next_failover_be_adopted(
) {
    let (ctl, psm, _dir) = controller();
    let follow = ctl.peer_follow_hook(Duration::ZERO);
    assert_eq!(follow(handover("f1", "a", 10)).await, Ok(false));
    let back = Follow::Mirroring {
        mirror: MIRROR.into(),
        by: "a".into(),
        at_ms: 2,
    };
    let _ = follow(back).await;
    psm.set_initialized();
    let r = follow(handover("f2", "a", 20)).await;
    assert_eq!(r, Ok(true), "f2 adopted");
    assert_eq!(states(&ctl), vec![PartitionState::Stopped; 3]);
}
