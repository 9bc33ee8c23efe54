//! Unit tests of `migrate.rs`.

use std::time::{Duration, Instant};

use super::*;
use crate::instances::view::Follow;
use crate::mirror::screening::ScreenEntry;
use crate::mirror::state::BarrierProducer;

const T: Duration = Duration::from_secs(10);

/// Mirror `m` over `orders`-0..1, failed over by `f1` here: STOPPED at control barriers.
fn stopped_here() -> MirrorRecord {
    let mut r = MirrorRecord::new(
        "m",
        [("orders".to_string(), 0), ("orders".to_string(), 1)],
        1,
    );
    r.failover_id = Some("f1".into());
    r.started_ms = Some(100);
    r.completed_ms = Some(200);
    for p in &mut r.partitions {
        p.state = PartitionState::Stopped;
        p.failover_id = Some("f1".into());
        p.barrier_offset = Some(10 + i64::from(p.partition));
        p.barrier_kind = Some(BarrierKind::Control);
        p.barrier_producer = Some(BarrierProducer {
            producer_id: 77,
            producer_epoch: 0,
        });
    }
    r
}

fn local(records: Vec<MirrorRecord>) -> Local {
    Local {
        records,
        screened: vec![ScreenedProducer {
            producer_id: 5,
            entry: ScreenEntry {
                max_epoch: 0,
                last_timestamp: 1,
                added_ms: 1,
                coordinator_epoch: -1,
            },
        }],
        reports: Vec::new(),
        agent_offsets: Vec::new(),
    }
}

fn view_of(me: &str, records: &[PeerRecord]) -> PeerView {
    let mut v = PeerView::new(me, T);
    for r in records {
        v.apply(r.clone(), Instant::now(), 0);
    }
    v
}

#[test]
fn a_completed_failover_the_state_topic_never_named_is_moved_for_the_others_to_adopt() {
    let p = plan("a", &view_of("a", &[]), &local(vec![stopped_here()]), 1_000);
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    // Another instance reading the moved records: the failover is a's, handed over whole.
    let b = view_of("b", &p.records);
    let d = b.driver("m").expect("announced");
    assert_eq!(
        (d.failover_id.as_str(), d.by.as_str(), d.epoch),
        ("f1", "a", 1)
    );
    let s = b.stopped("m").expect("handed over");
    assert_eq!(s.partitions.len(), 2);
    assert_eq!(s.partitions[1].barrier_offset, 11);
    assert_eq!(s.screened[0].producer_id, 5);
    assert_eq!(
        b.barrier_producer("m", "f1").map(|p| p.producer_id),
        Some(77)
    );
    assert!(matches!(&b.to_follow(Instant::now())[..], [Follow::Stopped(s)] if s.by == "a"));
}

#[test]
fn migrating_again_appends_nothing() {
    let mut l = local(vec![stopped_here()]);
    l.reports.push(FailoverReport::open(
        "m",
        "f1",
        "token".into(),
        100,
        (None, None, false),
        Vec::new(),
        None,
    ));
    l.agent_offsets
        .push(("m".into(), serde_json::json!({"version": 1})));
    let first = plan("a", &view_of("a", &[]), &l, 1_000);
    assert_eq!(first.records.len(), 5, "{:?}", first.notes);
    let again = plan("a", &view_of("a", &first.records), &l, 2_000);
    assert!(again.records.is_empty(), "{:?}", again.records);
    assert!(again.problems.is_empty());
}

#[test]
fn a_failover_not_complete_here_is_not_moved_and_named_as_a_problem() {
    let mut r = stopped_here();
    r.partitions[1].state = PartitionState::Failed;
    let p = plan("a", &view_of("a", &[]), &local(vec![r]), 1_000);
    assert!(p.records.is_empty(), "{:?}", p.records);
    assert!(p.problems[0].contains("not complete"), "{:?}", p.problems);
}

#[test]
fn a_state_topic_that_shows_another_failover_of_the_mirror_is_kept() {
    let topic = [PeerRecord::Failover {
        mirror: "m".into(),
        failover_id: Some("f2".into()),
        by: "b".into(),
        at_ms: 5,
        epoch: 1,
    }];
    let p = plan(
        "a",
        &view_of("a", &topic),
        &local(vec![stopped_here()]),
        1_000,
    );
    assert!(p.records.is_empty(), "{:?}", p.records);
    assert!(p.problems[0].contains("f2"), "{:?}", p.problems);
}

#[test]
fn a_paused_mirror_is_moved_as_a_pause() {
    let mut r = MirrorRecord::new("m", [("orders".to_string(), 0)], 1);
    r.partitions[0].state = PartitionState::Paused;
    let p = plan("a", &view_of("a", &[]), &local(vec![r]), 1_000);
    assert!(view_of("b", &p.records).paused("m"));
}
