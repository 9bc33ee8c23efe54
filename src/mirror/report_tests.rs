//! Unit tests of `report.rs`.

use super::*;
use crate::mirror::state::FailoverStep;

fn record() -> MirrorRecord {
    let mut r = MirrorRecord::new(
        "m",
        [("orders".to_string(), 0), ("orders".to_string(), 1)],
        1,
    );
    r.failover_id = Some("f1".into());
    r.started_ms = Some(10_000);
    r.completed_ms = Some(12_500);
    for p in &mut r.partitions {
        p.state = PartitionState::Stopped;
        p.barrier_offset = Some(100 + i64::from(p.partition));
        p.producers_expired = 2;
    }
    r.partitions[1]
        .transactions_aborted
        .push(AbortedTransaction {
            producer_id: 7,
            producer_epoch: 1,
            first_offset: 90,
        });
    r
}

fn opened() -> FailoverReport {
    FailoverReport::open(
        "m",
        "f1",
        "token".into(),
        10_000,
        (Some(5), None, true),
        vec![],
        Some(true),
    )
}

#[test]
fn a_completed_failover_reports_rto_rpo_and_offsets_per_partition() {
    let read = HashMap::from([
        (
            ("orders".to_string(), 0),
            SourceAtCompletion {
                next: Some((100, 100)),
                source: Some((103, 11_000)),
                last_known: Some((0, None)),
            },
        ),
        (
            ("orders".to_string(), 1),
            SourceAtCompletion {
                next: Some((80, 81)),
                source: Some((80, -1)),
                last_known: Some((0, None)),
            },
        ),
    ]);
    let r = complete(opened(), &record(), &read, 20_000);
    assert!(r.is_complete());
    assert_eq!(r.rto_seconds, Some(2.5));
    let p0 = &r.partitions[0];
    assert_eq!(
        (
            p0.last_mirrored_source_offset,
            p0.last_mirrored_destination_offset
        ),
        (Some(99), Some(99))
    );
    assert_eq!((p0.rpo_records, p0.rpo_seconds), (Some(3), Some(1.5)));
    assert_eq!(p0.barrier_offset, Some(100));
    assert_eq!(p0.next_source_offset, Some(100));
    let p1 = &r.partitions[1];
    assert_eq!((p1.rpo_records, p1.rpo_seconds), (Some(0), Some(0.0)));
    assert_eq!(p1.last_mirrored_destination_offset, Some(80));
    let t = r.totals.unwrap();
    assert_eq!((t.rpo_records, t.max_rpo_seconds), (Some(3), Some(1.5)));
    assert_eq!((t.producers_expired, t.transactions_aborted), (4, 1));
}

#[test]
fn an_unreadable_source_leaves_the_rpo_unknown_with_the_last_known_lag_and_its_age() {
    let read = HashMap::from([(
        ("orders".to_string(), 0),
        SourceAtCompletion {
            next: Some((100, 100)),
            source: None,
            last_known: Some((12, Some(15_000))),
        },
    )]);
    let r = complete(opened(), &record(), &read, 20_000);
    let p0 = &r.partitions[0];
    assert_eq!(p0.rpo_records, None);
    assert_eq!(
        (p0.last_known_lag_records, p0.last_known_age_seconds),
        (Some(12), Some(5.0))
    );
    assert_eq!(r.totals.unwrap().rpo_records, None, "unknown in total too");
}

#[test]
fn completion_needs_every_partition_stopped_by_this_failover() {
    let mut r = record();
    assert!(completed(&r, "f1"));
    assert!(!completed(&r, "f2"));
    r.partitions[0].state = PartitionState::Failed;
    assert!(!completed(&r, "f1"));
}

#[test]
fn reports_are_kept_in_the_state_store_and_listed_per_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReportStore::new(StateStore::init(dir.path()).unwrap());
    let mut a = opened();
    store.save(&a).unwrap();
    a.failover_id = "f0".into();
    a.called_ms = 5_000;
    store.save(&a).unwrap();
    let mut other = opened();
    other.mirror = "m--x".into();
    store.save(&other).unwrap();
    let listed: Vec<String> = store
        .list("m")
        .unwrap()
        .into_iter()
        .map(|r| r.failover_id)
        .collect();
    assert_eq!(listed, vec!["f0", "f1"], "oldest first, only this mirror's");
    assert_eq!(store.load("m", "f1").unwrap().unwrap(), opened());
    assert_eq!(store.load("m", "nope").unwrap(), None);
}

#[test]
fn the_step_timeline_has_the_first_and_last_partition_at_each_step_in_step_order() {
    let mut r = MirrorRecord::new(
        "m",
        [("orders".to_string(), 0), ("orders".to_string(), 1)],
        1,
    );
    for (i, p) in r.partitions.iter_mut().enumerate() {
        let at = 1_000 * i as i64;
        p.begin_failover("f1", 10_000).unwrap();
        p.advance(FailoverStep::Fenced, 10_100 + at).unwrap();
        p.advance(FailoverStep::Drained, 10_200 + at).unwrap();
    }
    let steps = step_timeline(&r);
    let names: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(names, vec!["STOPPING", "FENCED", "DRAINED"]);
    assert_eq!(
        (steps[1].first_ms, steps[1].last_ms, steps[1].partitions),
        (10_100, 11_100, 2)
    );
}

#[test]
fn a_partition_that_mirrors_again_forgets_the_step_times_of_its_last_failover() {
    let mut r = MirrorRecord::new("m", [("orders".to_string(), 0)], 1);
    let p = &mut r.partitions[0];
    p.begin_failover("f1", 10_000).unwrap();
    assert!(!p.step_ms.is_empty());
    p.state = PartitionState::Stopped;
    p.start_mirroring(true, 20_000).unwrap();
    assert!(p.step_ms.is_empty());
}

#[test]
fn the_reports_of_every_instance_merge_to_one_per_failover_the_completed_one_winning() {
    let mut done = opened();
    done.status = "complete".into();
    let mut other = opened();
    other.failover_id = "f0".into();
    other.called_ms = 1;
    let v = merged(vec![opened()], vec![done.clone(), other.clone()]);
    assert_eq!(v, vec![other.clone(), done.clone()], "oldest call first");
    let v = merged(vec![done.clone()], vec![opened()]);
    assert_eq!(
        v,
        vec![done],
        "a published report in progress does not hide a completed one"
    );
    assert_eq!(merged(vec![], vec![other.clone()]), vec![other]);
}

#[test]
fn the_forwarded_losses_other_instances_published_are_added_once_each_to_the_report() {
    use crate::mirror::forwarded_acks::{ForwardedLoss, ForwardedProducerGap};
    let gap = |producer_id: i64, records: i64| ForwardedProducerGap {
        producer_id,
        producer_epoch: 0,
        topic: "orders".into(),
        partition: 0,
        records,
        first_offset: 10,
        last_offset: 9 + records,
        first_sequence: 0,
        last_sequence: records as i32 - 1,
        instance: None,
    };
    let loss = |records: i64, producer_id: i64, inexact: Option<&str>| ForwardedLoss {
        records,
        producers: vec![gap(producer_id, records)],
        inexact: inexact.map(str::to_string),
        ..ForwardedLoss::default()
    };
    let mut r = complete(opened(), &record(), &HashMap::new(), 20_000);
    r.forwarded = Some(loss(3, 7, None).of_instance("a"));
    add_forwarded_losses(
        &mut r,
        vec![
            // The completer's own figures, published too: counted once.
            loss(3, 7, None).of_instance("a"),
            loss(5, 8, Some("1 crash(es)")).of_instance("b"),
            loss(2, 9, None).of_instance("c"),
        ],
    );
    let f = r.forwarded.expect("forwarded");
    assert_eq!(f.records, 10);
    assert_eq!(f.instances, ["a", "b", "c"]);
    let by: Vec<(i64, Option<&str>)> = f
        .producers
        .iter()
        .map(|g| (g.producer_id, g.instance.as_deref()))
        .collect();
    assert_eq!(by, [(7, Some("a")), (8, Some("b")), (9, Some("c"))]);
    assert_eq!(f.inexact.as_deref(), Some("b: 1 crash(es)"));

    // A completer without a forward listener: the others' figures are the whole section.
    let mut r = complete(opened(), &record(), &HashMap::new(), 20_000);
    add_forwarded_losses(&mut r, vec![loss(5, 8, None).of_instance("b")]);
    assert_eq!(r.forwarded.map(|f| f.records), Some(5));
}
