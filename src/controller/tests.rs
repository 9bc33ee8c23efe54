//! Unit tests of the controller's decisions for admin requests and of overlapping mirror regexes,
//! over a cluster view filled by hand (no broker).

use super::*;
use crate::cluster::{Snapshot, TopicInfo};
use crate::mirror::own_barrier::OwnBarrier;
use crate::mirror::screening::SCREEN_FILE;
use crate::mirror::state::BarrierKind;
use crate::protocol::barrier::{encode_barrier_batch, BarrierValue, BARRIER_TIMESTAMP};
use crate::protocol::batch::BatchWalker;
use std::collections::HashMap;

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
    controller_in(tempfile::tempdir().unwrap())
}

/// A controller over the state directory `dir` (which may already hold files).
fn controller_in(
    dir: tempfile::TempDir,
) -> (Arc<MirrorController>, Arc<Metrics>, tempfile::TempDir) {
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
    show_topics(&cluster, &[("pay.us", 2), ("orders", 3), ("plain", 1)]);
    let ctl = MirrorController::new(&cfg, store, &metrics, None, cluster, FaultHooks::default());
    ctl.sync_partitions();
    (ctl, metrics, dir)
}

/// The destination's metadata as `cluster` shows it: `topics` with their partition counts.
fn show_topics(cluster: &ClusterView, topics: &[(&str, usize)]) {
    let partitions: Vec<(String, TopicInfo)> = topics
        .iter()
        .map(|(name, n)| {
            let id = uuid::Uuid::new_v4();
            let leaders = vec![1; *n];
            (name.to_string(), TopicInfo { id, leaders })
        })
        .collect();
    cluster.replace(Snapshot {
        topics: partitions.iter().map(|(n, i)| (i.id, n.clone())).collect(),
        partitions,
        ..Snapshot::default()
    });
}

fn states(ctl: &MirrorController, mirror: &str, topic: &str) -> Vec<PartitionState> {
    let record = ctl.records.record(mirror).expect("mirror");
    let parts = record.partitions.iter().filter(|p| p.topic == topic);
    parts.map(|p| p.state).collect()
}

#[test]
fn a_partition_added_while_its_mirror_is_paused_is_added_paused_and_resumes_with_it() {
    let (ctl, _metrics, dir) = controller();
    assert_eq!(ctl.set_paused("second", true).unwrap(), 3, "orders");
    show_topics(&ctl.cluster, &[("pay.us", 2), ("orders", 3), ("new.us", 2)]);
    ctl.sync_partitions();
    assert_eq!(
        states(&ctl, "second", "new.us"),
        vec![PartitionState::Paused; 2]
    );
    // The pause is persisted with the record: after a restart a later partition is paused too.
    drop(ctl);
    let (ctl, _metrics, _dir) = controller_in(dir);
    show_topics(&ctl.cluster, &[("pay.us", 2), ("orders", 4), ("new.us", 2)]);
    ctl.sync_partitions();
    assert_eq!(
        states(&ctl, "second", "orders"),
        vec![PartitionState::Paused; 4]
    );
    assert_eq!(ctl.set_paused("second", false).unwrap(), 6);
    show_topics(&ctl.cluster, &[("pay.us", 2), ("orders", 4), ("new.us", 3)]);
    ctl.sync_partitions();
    assert_eq!(
        states(&ctl, "second", "new.us"),
        vec![PartitionState::Mirroring; 3]
    );
    assert_eq!(
        states(&ctl, "first", "pay.us"),
        vec![PartitionState::Mirroring; 2]
    );
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
        .refuse_admin(ListenerKind::Client, "DeleteRecords", "orders", Some(2))
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
        .refuse_admin(ListenerKind::Client, "DeleteTopics", "pay.us", None)
        .expect("refused");
    assert!(r.message.contains("topic pay.us") && r.message.contains("mirror first"));
    // A mirror topic without partitions known yet is read-only too.
    assert!(ctl
        .refuse_admin(ListenerKind::Client, "CreatePartitions", "pay.eu", None)
        .is_some());
    assert!(ctl
        .refuse_admin(ListenerKind::Client, "DeleteTopics", "plain", None)
        .is_none());
    assert!(ctl
        .refuse_admin(ListenerKind::Client, "DeleteRecords", "plain", Some(0))
        .is_none());
    assert!(ctl
        .refuse_admin_everywhere(ListenerKind::Client, "ElectLeaders")
        .is_some());
    assert_eq!(
        sample(
            &metrics,
            r#"mirrorgate_produce_rejected_total{reason="read_only_admin"}"#
        ),
        4.0
    );
}

/// A state directory whose screening set is `content` (a directory when `None`: unreadable).
fn with_screen_file(content: Option<&[u8]>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    StateStore::init(dir.path()).unwrap();
    let screen = dir.path().join(SCREEN_AREA);
    std::fs::create_dir_all(&screen).unwrap();
    match content {
        Some(c) => std::fs::write(screen.join(SCREEN_FILE), c).unwrap(),
        None => std::fs::create_dir_all(screen.join(SCREEN_FILE)).unwrap(),
    }
    dir
}

#[test]
fn a_corrupt_or_unreadable_screening_set_makes_the_gateway_not_ready_and_mirror_topics_read_only() {
    for (what, content) in [
        (
            "corrupt",
            Some(&b"{\"8000\":{\"max_epoch\":0,\"last_ti"[..]),
        ),
        ("unreadable", None),
    ] {
        let (ctl, metrics, dir) = controller_in(with_screen_file(content));
        let problems = ctl.problems();
        let path = dir.path().join("screen/pids.json");
        assert_eq!(problems.len(), 1, "{what}: {problems:?}");
        assert!(
            problems[0].contains(&path.display().to_string()),
            "{what}: the path is named: {problems:?}"
        );
        assert!(
            problems[0].contains("docs/failover.md#recovering-the-pid-screening-set"),
            "{what}: the recovery is named: {problems:?}"
        );
        // Client produce to a mirror topic is refused for the screening set, plain topics pass.
        let r = ctl
            .admit(ListenerKind::Client, "orders", 0)
            .err()
            .unwrap_or_else(|| panic!("{what}: client produce admitted"));
        assert_eq!(r.reason, "screen_unreadable", "{what}: {}", r.message);
        assert!(r.message.contains("screening"), "{}", r.message);
        assert!(ctl.admit(ListenerKind::Client, "plain", 0).is_ok());
        // Mirror produce (MIRRORING) still passes: screening matters only after a failover.
        assert!(ctl.admit(ListenerKind::Mirror, "orders", 0).is_ok());
        assert_eq!(
            sample(
                &metrics,
                r#"mirrorgate_produce_rejected_total{reason="screen_unreadable"}"#
            ),
            1.0
        );
        // A failover would overwrite the set with only its own entries: refused.
        let err = ctl.failover("second").unwrap_err();
        assert!(err.to_string().contains("screening"), "{what}: {err}");
        // Nothing rewrote the file.
        ctl.expire_screen();
        match content {
            Some(c) => assert_eq!(std::fs::read(&path).unwrap(), c),
            None => assert!(path.is_dir()),
        }
    }
}

#[test]
fn a_missing_screening_set_is_empty_and_ready() {
    let (ctl, _, _dir) = controller();
    assert!(ctl.problems().is_empty());
    assert!(!ctl.screening_active());
}

#[test]
fn concurrent_screening_writers_never_leave_an_older_or_torn_set() {
    // Each writer adds a live entry and an expired one, then `expire_screen` persists: the file
    // must always end up equal to memory (no lost update, no interleaved bytes).
    let (ctl, _, dir) = controller();
    let path = dir.path().join("screen/pids.json");
    for round in 0..60i64 {
        let threads: Vec<_> = (0..4i64)
            .map(|t| {
                let ctl = ctl.clone();
                std::thread::spawn(move || {
                    let pid = round * 10 + t;
                    {
                        let mut s = ctl.screening.lock();
                        s.insert(
                            pid,
                            ScreenEntry {
                                max_epoch: 0,
                                last_timestamp: now_ms(),
                                added_ms: 0,
                                coordinator_epoch: -1,
                            },
                        );
                        s.insert(
                            1_000_000 + pid,
                            ScreenEntry {
                                max_epoch: 0,
                                last_timestamp: i64::MIN / 2,
                                added_ms: 0,
                                coordinator_epoch: -1,
                            },
                        );
                    }
                    ctl.expire_screen();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let on_disk: HashMap<i64, ScreenEntry> =
            serde_json::from_slice(&std::fs::read(&path).unwrap())
                .unwrap_or_else(|e| panic!("round {round}: torn screening set: {e}"));
        let mut disk: Vec<i64> = on_disk.keys().copied().collect();
        let mut mem: Vec<i64> = ctl.screening.lock().keys().copied().collect();
        disk.sort();
        mem.sort();
        assert_eq!(disk, mem, "round {round}: the file lost an update");
        assert_eq!(mem.len() as i64, (round + 1) * 4);
    }
}

#[test]
fn a_mirror_write_answered_by_the_broker_leaves_no_unknown_outcome() {
    let (ctl, metrics, _dir) = controller();
    let g = ctl
        .admit(ListenerKind::Mirror, "orders", 1)
        .unwrap()
        .expect("a mirror write is counted");
    assert_eq!(
        ctl.admission
            .writes("orders", 1)
            .in_flight
            .load(Ordering::SeqCst),
        1
    );
    g.answered();
    let w = ctl.admission.writes("orders", 1);
    assert_eq!(w.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(w.unknown.load(Ordering::SeqCst), 0);
    assert!(!metrics
        .render()
        .contains("mirrorgate_protection_unknown_outcome_writes_total 1"));
}

#[test]
fn a_mirror_write_released_without_an_answer_counts_as_unknown_outcome() {
    let (ctl, metrics, _dir) = controller();
    let before = now_ms();
    let g = ctl
        .admit(ListenerKind::Mirror, "orders", 2)
        .unwrap()
        .expect("a mirror write is counted");
    drop(g);
    let w = ctl.admission.writes("orders", 2);
    assert_eq!(
        w.in_flight.load(Ordering::SeqCst),
        0,
        "the drain is not held"
    );
    assert_eq!(w.unknown.load(Ordering::SeqCst), 1);
    assert!(w.last_unknown_ms.load(Ordering::SeqCst) >= before);
    assert!(metrics
        .render()
        .contains("mirrorgate_protection_unknown_outcome_writes_total 1"));
}

/// A state directory holding `mirrors/NAME.json` for each of `names`.
fn store_with_mirrors(names: &[(&str, &[&str])]) -> (StateStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::init(dir.path()).unwrap();
    for (name, topics) in names {
        let mut r = MirrorRecord::new(name.to_string(), Vec::new(), 1);
        for t in *topics {
            r.partitions.push(PartitionRecord::new(t.to_string(), 0, 1));
        }
        store
            .write(MIRRORS_AREA, &format!("{name}.json"), &r.encode())
            .unwrap();
    }
    (store, dir)
}

fn config_text() -> crate::config::Config {
    crate::config::load_str(CONFIG, "t.yaml").unwrap()
}

#[test]
fn a_state_file_of_a_mirror_that_is_no_longer_configured_is_an_error_at_start() {
    let (store, _dir) = store_with_mirrors(&[("first", &["pay.us"]), ("retired", &["old"])]);
    let err = check_state_matches_config(&config_text(), &store).unwrap_err();
    assert!(
        err.contains("mirror \"retired\"")
            && err.contains("no mirror of that name is configured")
            && err.contains("protection_needed_until_ms"),
        "{err}"
    );
}

#[test]
fn a_topic_moved_to_another_mirror_is_an_error_at_start() {
    // "pay.us" matches both regexes; "first" owns it. A state naming it under "second" means
    // the configuration changed under a mirror that held it.
    let (store, _dir) = store_with_mirrors(&[("second", &["orders", "pay.us"])]);
    let err = check_state_matches_config(&config_text(), &store).unwrap_err();
    assert!(
        err.contains("mirror \"second\" holds partitions of topics its configuration no longer matches: pay.us (now mirror \"first\")"),
        "{err}"
    );
}

#[test]
fn a_state_directory_matching_the_configuration_starts() {
    let (store, _dir) = store_with_mirrors(&[("first", &["pay.us"]), ("second", &["orders"])]);
    check_state_matches_config(&config_text(), &store).unwrap();
}

#[test]
fn a_screened_producer_id_with_an_old_timestamp_stays_protected_until_an_expiry_check_after_it_was_added(
) {
    let day = 86_400_000;
    let e = ScreenEntry {
        max_epoch: 0,
        last_timestamp: 1_000,
        added_ms: 10 * day,
        coordinator_epoch: -1,
    };
    assert_eq!(e.protected_until(day, 600_000), 10 * day + 600_000);
    let recent = ScreenEntry { added_ms: 0, ..e };
    assert_eq!(recent.protected_until(day, 600_000), 1_000 + day + 600_000);
}

/// A controller with a producer-state registry whose expiry settings come from `psm_yaml`.
fn controller_with_psm(psm_yaml: &str) -> (Arc<MirrorController>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::config::load_str(
        &format!(
            "{CONFIG}psm:\n{psm_yaml}state_dir: {}\n",
            dir.path().display()
        ),
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
    let registry = PsmRegistry::new(&cfg, Some(store.clone()), &metrics);
    let ctl = MirrorController::new(
        &cfg,
        store,
        &metrics,
        Some(registry),
        cluster,
        FaultHooks::default(),
    );
    (ctl, dir)
}

/// Review F11d: the brokers expire producer ids by their own clock. A screening entry that the
/// gateway's clock says expired a few seconds ago stays screened for `psm.clock_skew_margin_ms`
/// more (the gateway's clock may run ahead of the brokers'); without the margin it would not.
#[test]
fn a_screened_producer_id_stays_protected_for_the_clock_skew_margin() {
    let entry = ScreenEntry {
        max_epoch: 0,
        last_timestamp: now_ms() - 10_000,
        added_ms: now_ms() - 10_000,
        coordinator_epoch: -1,
    };
    let settings = "  expiration_ms: 1000\n  expiration_check_interval_ms: 1000\n";
    let (with_margin, _d1) = controller_with_psm(settings);
    with_margin.screening.lock().insert(42, entry);
    assert!(with_margin.screened(42).is_some(), "within the 60 s margin");
    let (without, _d2) = controller_with_psm(&format!("{settings}  clock_skew_margin_ms: 0\n"));
    without.screening.lock().insert(42, entry);
    assert!(
        without.screened(42).is_none(),
        "8 s past expiry by the gateway's clock"
    );
}

/// One uncompressed v2 control batch holding an ABORT (`commit`: COMMIT) marker of `pid`.
fn marker_batch(pid: i64, commit: bool) -> bytes::Bytes {
    crate::protocol::txn_marker::one_record_batch_for_tests(0, pid, Some(i16::from(commit)), true)
}

#[test]
fn a_failover_recognises_its_barrier_in_the_log_in_either_form() {
    let value = |fid: &str| BarrierValue {
        version: 1,
        mirror: "m".into(),
        failover_id: fid.into(),
        source_cluster_id: None,
        time_ms: 1,
        producers_expired: 0,
        last_mirrored_offset: -1,
    };
    let kind = |own: &OwnBarrier<'_>, b: &bytes::Bytes| {
        let (h, batch) = BatchWalker::fetched(b).next().unwrap().unwrap();
        own.kind_of(&h, batch)
    };
    let data_ours = encode_barrier_batch(&value("f1"), BARRIER_TIMESTAMP);
    let data_other = encode_barrier_batch(&value("f0"), BARRIER_TIMESTAMP);
    let control_ours = marker_batch(1000, false);
    let control_other = marker_batch(1001, false);
    let commit_ours = marker_batch(1000, true);
    let with_pid = OwnBarrier {
        failover_id: "f1",
        producer_id: Some(1000),
    };
    assert_eq!(kind(&with_pid, &control_ours), Some(BarrierKind::Control));
    assert_eq!(kind(&with_pid, &data_ours), Some(BarrierKind::Data));
    assert_eq!(kind(&with_pid, &control_other), None);
    assert_eq!(kind(&with_pid, &commit_ours), None);
    assert_eq!(kind(&with_pid, &data_other), None);
    // A failover that recorded no producer id (older state, or the data form) knows only data
    // barriers; a lookup by producer id alone (after writing markers) knows only markers.
    let data_only = OwnBarrier {
        failover_id: "f1",
        producer_id: None,
    };
    assert_eq!(kind(&data_only, &control_ours), None);
    assert_eq!(kind(&data_only, &data_ours), Some(BarrierKind::Data));
    let markers_only = OwnBarrier {
        failover_id: "",
        producer_id: Some(1000),
    };
    assert_eq!(kind(&markers_only, &data_ours), None);
    assert_eq!(
        kind(&markers_only, &control_ours),
        Some(BarrierKind::Control)
    );
}

/// Review G11: a local transactional write with a producer id whose mirrored markers left a
/// coordinator epoch above its transactional id's coordinator's (or when that is not known) is a
/// collision whatever its epoch; a coordinator at or above it, idempotent writes and ids
/// mirrored with coordinator epoch 0 go by the epoch alone.
#[test]
fn a_transaction_whose_coordinator_is_behind_the_mirrored_coordinator_epoch_collides_whatever_its_epoch(
) {
    let (ctl, _dir) = controller_with_psm("");
    let now = now_ms();
    let entry = |coordinator_epoch| ScreenEntry {
        max_epoch: 2,
        last_timestamp: now,
        added_ms: now,
        coordinator_epoch,
    };
    ctl.screening.lock().insert(42, entry(50));
    ctl.screening.lock().insert(43, entry(0));
    let coordinator = |tx: &str| {
        let p = crate::cluster::transaction_state_partition(tx, 3);
        usize::try_from(p).unwrap()
    };
    let (behind, ahead) = ("tx-behind", "tx-ahead");
    let mut epochs = vec![0; 3];
    epochs[coordinator(ahead)] = 50;
    assert_ne!(coordinator(behind), coordinator(ahead));
    // Not known yet: a collision.
    assert!(matches!(
        ctl.mirrored_producer_collision(42, Some(5), Some(behind)),
        Some(Collision::Coordinator { local: None, .. })
    ));
    ctl.cluster.replace(crate::cluster::Snapshot {
        transaction_state_epochs: epochs,
        ..Default::default()
    });
    assert!(matches!(
        ctl.mirrored_producer_collision(42, Some(5), Some(behind)),
        Some(Collision::Coordinator { local: Some(0), .. })
    ));
    assert_eq!(
        ctl.mirrored_producer_collision(42, Some(5), Some(ahead)),
        None
    );
    assert!(matches!(
        ctl.mirrored_producer_collision(42, Some(2), Some(ahead)),
        Some(Collision::Epoch(_))
    ));
    assert_eq!(ctl.mirrored_producer_collision(42, Some(5), None), None);
    assert!(matches!(
        ctl.mirrored_producer_collision(42, Some(2), None),
        Some(Collision::Epoch(_))
    ));
    assert_eq!(
        ctl.mirrored_producer_collision(43, Some(5), Some(behind)),
        None
    );
    // A partition added to a transaction: the coordinator rule alone.
    assert!(matches!(
        ctl.mirrored_producer_collision(42, None, Some(behind)),
        Some(Collision::Coordinator { .. })
    ));
    assert_eq!(ctl.mirrored_producer_collision(42, None, Some(ahead)), None);
}

/// Screening files and handovers of older versions carry no coordinator epoch: they load with
/// none; an entry without one is written as before, one with one keeps it.
#[test]
fn a_screening_entry_s_coordinator_epoch_is_optional_in_json() {
    let old: ScreenEntry =
        serde_json::from_str(r#"{"max_epoch":3,"last_timestamp":7,"added_ms":9}"#).unwrap();
    assert_eq!(old.coordinator_epoch, -1);
    assert_eq!(
        serde_json::to_string(&old).unwrap(),
        r#"{"max_epoch":3,"last_timestamp":7,"added_ms":9}"#
    );
    let with = ScreenEntry {
        coordinator_epoch: 50,
        ..old
    };
    let back: ScreenEntry = serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
    assert_eq!(back, with);
    // Merging keeps the highest coordinator epoch.
    let (ctl, _dir) = controller_with_psm("");
    ctl.screening.merge(vec![(1, with), (1, old)]);
    assert_eq!(ctl.screened(1).map(|e| e.coordinator_epoch), Some(50));
}

/// A forward listener follows the recorded states: a partition the agent failed is shown
/// FAILED by `records`, but no failover began, so it must not hold the listener.
#[test]
fn a_partition_the_agent_failed_keeps_its_recorded_state() {
    let (ctl, _metrics, _dir) = controller();
    ctl.set_agent_failed("orders", 1, Some("diverged".into()));
    let shown: Vec<PartitionState> = ctl
        .records()
        .into_iter()
        .filter(|(r, _)| r.name == "second")
        .flat_map(|(r, _)| r.partitions.into_iter().map(|p| p.state))
        .collect();
    assert!(shown.contains(&PartitionState::Failed), "{shown:?}");
    let recorded = ctl.recorded_states("second");
    assert_eq!(recorded.len(), shown.len());
    assert!(
        recorded.iter().all(|s| *s == PartitionState::Mirroring),
        "{recorded:?}"
    );
}

/// A forward listener's route switches its clients to the destination once every partition it
/// follows is STOPPED; its writes are then admitted only where admission's snapshot says
/// STOPPED too. A failover step changes the records in memory, persists them and only then
/// refreshes that snapshot: a route that read the records in between switched while the
/// partitions were still refused as read-only (POLICY_VIOLATION reached forwarded producers
/// after a switchover). The route follows the snapshot.
#[test]
fn a_forward_route_sees_a_state_only_once_admission_decides_by_it() {
    let (ctl, _metrics, _dir) = controller();
    {
        let mut slots = ctl.records.lock();
        let slot = slots
            .iter_mut()
            .find(|s| s.record.name == "second")
            .expect("mirror second");
        for p in &mut slot.record.partitions {
            p.state = PartitionState::Stopped;
        }
    }
    let followed = ctl.recorded_states("second");
    assert!(!followed.is_empty());
    assert!(
        ctl.admit(ListenerKind::Forward, "orders", 0).is_err(),
        "admission still refuses: its snapshot was not refreshed"
    );
    assert!(
        followed.iter().all(|s| *s == PartitionState::Mirroring),
        "the route follows admission's snapshot, not the records being changed: {followed:?}"
    );
    ctl.records.refresh();
    assert!(ctl.admit(ListenerKind::Forward, "orders", 0).is_ok());
    assert!(ctl
        .recorded_states("second")
        .iter()
        .all(|s| *s == PartitionState::Stopped));
}
