//! Unit tests of the admission's decisions for admin, transaction and group requests on the
//! mirror listener (review G8), over records set by hand (the lookup reads recorded states only).

use super::*;
use crate::metrics::Metrics;
use crate::mirror::mirror_metrics::MirrorMetrics;
use crate::mirror::state::FailoverStep;

const CONFIG: &str = r#"destination:
  bootstrap: ["127.0.0.1:1"]
listeners:
  client:
    port_base: 9092
admin:
  bind: 127.0.0.1:9180
mirrors:
  - name: dr
    topics: [orders]
  - name: other
    topics: [pay]
"#;

fn admission() -> (Admission, MirrorMetrics) {
    let cfg = crate::config::load_str(CONFIG, "t.yaml").unwrap();
    let metrics = Metrics::new();
    let mm = MirrorMetrics::new(&metrics);
    let cluster = ClusterView::new(
        cfg.destination.clone(),
        crate::client::Connector::plain(),
        metrics.clone(),
    );
    let a = Admission::new(
        vec!["dr".into(), "other".into()],
        cfg.topic_router(),
        cluster,
        None,
        mm.rejected.clone(),
        mm.unknown_writes.clone(),
    );
    (a, mm)
}

fn mirroring(name: &str, topic: &str, partitions: i32) -> MirrorRecord {
    MirrorRecord::new(name, (0..partitions).map(|p| (topic.to_string(), p)), 1)
}

/// Mirror `dr` failed over: orders-0 STOPPED, orders-1 STOPPING, orders-2 FAILED, and no record
/// yet for orders-3 (a partition added since).
fn failed_over() -> MirrorRecord {
    let mut m = mirroring("dr", "orders", 3);
    m.failover_id = Some("f1".into());
    m.started_ms = Some(2);
    for p in &mut m.partitions {
        p.begin_failover("f1", 2).unwrap();
    }
    let p0 = &mut m.partitions[0];
    for step in [
        FailoverStep::Fenced,
        FailoverStep::Drained,
        FailoverStep::BarrierWritten { offset: 10 },
        FailoverStep::BarrierPersisted { offset: 10 },
        FailoverStep::PsmCleared,
    ] {
        p0.advance(step, 3).unwrap();
    }
    p0.complete(4).unwrap();
    m.partitions[2].fail("not leader", 3).unwrap();
    m
}

fn mirror_admin(a: &Admission, op: &str, topic: &str, partition: Option<i32>) -> Option<Refusal> {
    a.refuse_admin(ListenerKind::Mirror, op, topic, partition)
}

#[test]
fn the_mirror_listener_keeps_every_change_to_a_mirroring_or_paused_topic() {
    let (a, mm) = admission();
    let mut paused = mirroring("other", "pay", 1);
    paused.partitions[0].pause(2).unwrap();
    a.refresh([(&mirroring("dr", "orders", 3), None), (&paused, None)].into_iter());
    // The built-in agent failed a partition: still mirrored, not failed over.
    a.set_agent_failed("orders", 1, Some("boom".into()));
    for (op, topic, partition) in [
        ("IncrementalAlterConfigs", "orders", None),
        ("CreatePartitions", "orders", None),
        ("OffsetCommit", "orders", Some(1)),
        ("DeleteRecords", "pay", Some(0)),
        ("OffsetCommit", "pay", Some(0)),
        ("OffsetCommit", "plain", Some(0)),
    ] {
        assert!(
            mirror_admin(&a, op, topic, partition).is_none(),
            "{op} {topic} {partition:?}"
        );
    }
    assert!(a
        .refuse_admin_everywhere(ListenerKind::Mirror, "ElectLeaders")
        .is_none());
    assert_eq!(
        mm.rejected
            .with_label_values(&["mirror_fenced_admin"])
            .get(),
        0
    );
}

#[test]
fn the_mirror_listener_refuses_changes_to_a_failed_over_topic_as_it_refuses_its_produce() {
    let (a, mm) = admission();
    a.refresh(
        [
            (&failed_over(), None),
            (&mirroring("other", "pay", 1), None),
        ]
        .into_iter(),
    );
    for (p, state) in [
        (0, "STOPPED"),
        (1, "STOPPING"),
        (2, "FAILED"),
        (3, "STOPPING"),
    ] {
        let r = mirror_admin(&a, "OffsetCommit", "orders", Some(p)).expect("refused");
        assert_eq!(
            (r.error_code, r.reason),
            (REJECT_ERROR_CODE, "mirror_fenced_admin")
        );
        let produce = a
            .admit(ListenerKind::Mirror, "orders", p)
            .err()
            .expect("mirror produce refused");
        // The same code, and the same words after the operation's name.
        assert_eq!(produce.error_code, r.error_code);
        let fenced = format!("is fenced: mirror dr is {state}");
        assert!(
            r.message.contains(&format!(
                "OffsetCommit on orders-{p} through the mirror listener {fenced}"
            )) && produce.message.contains(&fenced),
            "{}\n{}",
            r.message,
            produce.message
        );
    }
    let r = mirror_admin(&a, "IncrementalAlterConfigs", "orders", None).expect("refused");
    assert!(
        r.message
            .contains("IncrementalAlterConfigs on topic orders")
            && r.message
                .contains("a failed-over topic takes changes from local clients only"),
        "{}",
        r.message
    );
    assert!(a
        .refuse_admin_everywhere(ListenerKind::Mirror, "ElectLeaders")
        .is_some());
    // The other mirror is still mirrored.
    assert!(mirror_admin(&a, "CreatePartitions", "pay", None).is_none());
    assert_eq!(
        mm.rejected
            .with_label_values(&["mirror_fenced_admin"])
            .get(),
        6
    );
    // The client listener takes changes to the STOPPED partition only.
    assert!(a
        .refuse_admin(ListenerKind::Client, "DeleteRecords", "orders", Some(0))
        .is_none());
    assert!(a
        .refuse_admin(ListenerKind::Client, "DeleteRecords", "orders", Some(1))
        .is_some());
}

#[test]
fn a_mirror_whose_state_cannot_be_read_takes_no_change_on_either_listener() {
    let (a, _) = admission();
    a.refresh([(&mirroring("dr", "orders", 1), Some("corrupt"))].into_iter());
    for listener in [ListenerKind::Client, ListenerKind::Mirror] {
        let r = a
            .refuse_admin(listener, "CreatePartitions", "orders", None)
            .expect("refused");
        assert_eq!(r.reason, "state_unreadable");
        assert_eq!(
            r.message,
            "mirrorgate: CreatePartitions on topic orders is refused: it belongs to mirror dr, whose state cannot be read (corrupt); it stays read-only"
        );
        let produce = a.admit(listener, "orders", 0).err().expect("refused");
        assert_eq!(
            produce.message,
            "mirrorgate: orders-0 belongs to mirror dr, whose state cannot be read (corrupt); it stays read-only"
        );
    }
}

#[test]
fn a_paused_mirror_holds_mirror_writes_with_a_retriable_error_and_a_failed_over_one_fences_them() {
    let (a, mm) = admission();
    let mut paused = mirroring("other", "pay", 1);
    paused.partitions[0].pause(2).unwrap();
    a.refresh([(&failed_over(), None), (&paused, None)].into_iter());
    let held = a
        .admit(ListenerKind::Mirror, "pay", 0)
        .err()
        .expect("a paused mirror takes no mirror write");
    assert_eq!(
        (held.error_code, held.reason),
        (RETRY_LATER_ERROR_CODE, "mirror_paused"),
        "{}",
        held.message
    );
    assert!(
        held.message.contains("PAUSED until it is resumed"),
        "{}",
        held.message
    );
    let fenced = a
        .admit(ListenerKind::Mirror, "orders", 0)
        .err()
        .expect("a failed-over partition takes no mirror write");
    assert_eq!(
        (fenced.error_code, fenced.reason),
        (REJECT_ERROR_CODE, "mirror_fenced")
    );
    assert_eq!(
        mm.rejected.with_label_values(&["mirror_paused"]).get(),
        1,
        "counted as held, not fenced"
    );
}
