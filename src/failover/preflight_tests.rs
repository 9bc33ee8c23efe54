//! Unit tests of `preflight.rs`: one rule per test.

use super::*;

const NOW: i64 = 1_800_000_000_000;

fn part(p: i32) -> PartitionFacts {
    PartitionFacts {
        topic: "orders".into(),
        partition: p,
        state: "MIRRORING".into(),
        last_error: None,
        lag_records: Some(0),
        lag_seconds: Some(0.0),
        lag_bytes_estimate: Some(0),
        source_end_moved_ms: Some(NOW - 600_000),
        leader: Some(1),
        psm_ready: true,
        psm_producers: 2,
        open_transactions: 0,
    }
}

fn facts(parts: Vec<PartitionFacts>) -> MirrorFacts {
    MirrorFacts {
        mirror: "m".into(),
        state_unreadable: None,
        source: Some(SourceFacts {
            reachable: true,
            since_ms: 0,
        }),
        partitions: parts,
        barrier_permission: None,
        screened_ids: 0,
        final_group_sync: false,
        last_failover: None,
        now_ms: NOW,
    }
}

#[test]
fn a_healthy_caught_up_mirror_is_go() {
    let a = assess(facts(vec![part(0), part(1)]), Guards::default());
    assert_eq!(a.verdict, "go");
    assert!(a.reasons.is_empty() && a.warnings.is_empty(), "{a:?}");
    assert_eq!(a.totals.psm_producers, 4);
}

#[test]
fn a_failed_partition_is_no_go_and_named_with_its_error_and_what_it_misses() {
    let mut p = part(1);
    p.state = "FAILED".into();
    p.last_error = Some("the destination is not aligned".into());
    p.lag_records = Some(40);
    let a = assess(facts(vec![part(0), p]), Guards::default());
    assert_eq!(a.verdict, "no-go");
    assert_eq!(
        a.reasons,
        vec!["orders-1 is FAILED: the destination is not aligned (40 source records not on the destination)"]
    );
    assert!(!a.guard_exceeded);
    assert_eq!(a.totals.failed, 1);
}

#[test]
fn a_leaderless_partition_is_no_go() {
    let mut p = part(0);
    p.leader = None;
    let a = assess(facts(vec![p]), Guards::default());
    assert_eq!(a.verdict, "no-go");
    assert!(
        a.reasons[0].contains("orders-0 has no destination leader"),
        "{a:?}"
    );
}

#[test]
fn a_producer_state_not_rebuilt_is_no_go() {
    let mut p = part(0);
    p.psm_ready = false;
    let a = assess(facts(vec![p]), Guards::default());
    assert!(a.reasons[0].contains("not rebuilt"), "{a:?}");
}

#[test]
fn lag_above_a_guard_is_no_go_and_marked_as_a_guard() {
    let mut p = part(0);
    p.lag_records = Some(500);
    p.lag_seconds = Some(12.5);
    let guards = Guards {
        max_lag_records: Some(100),
        max_lag_seconds: Some(10.0),
    };
    let a = assess(facts(vec![p.clone()]), guards);
    assert_eq!(a.verdict, "no-go");
    assert!(a.guard_exceeded);
    assert_eq!(a.reasons.len(), 2, "{a:?}");
    let within = Guards {
        max_lag_records: Some(500),
        max_lag_seconds: Some(13.0),
    };
    assert_eq!(assess(facts(vec![p]), within).verdict, "go");
}

#[test]
fn an_unreachable_source_is_reported_but_is_no_reason() {
    let mut f = facts(vec![part(0)]);
    f.source = Some(SourceFacts {
        reachable: false,
        since_ms: NOW - 42_000,
    });
    let a = assess(f, Guards::default());
    assert_eq!(a.verdict, "go");
    assert!(a.warnings[0].contains("unreachable (for 42 s)"), "{a:?}");
}

#[test]
fn a_source_log_end_that_moved_recently_warns_that_producers_still_write_there() {
    let mut p = part(0);
    p.source_end_moved_ms = Some(NOW - 1_000);
    let a = assess(facts(vec![p]), Guards::default());
    assert_eq!(a.verdict, "go");
    assert_eq!(a.totals.source_still_written, 1);
    assert!(a.warnings[0].contains("still write to the source"), "{a:?}");
}

#[test]
fn open_transactions_are_counted_and_announced_as_aborted() {
    let mut p = part(0);
    p.open_transactions = 2;
    let a = assess(facts(vec![p]), Guards::default());
    assert_eq!(a.totals.open_transactions, 2);
    assert!(a.warnings[0].contains("aborts them"), "{a:?}");
}

#[test]
fn stopped_partitions_are_not_judged_and_a_fully_stopped_mirror_is_no_go() {
    let mut p = part(0);
    p.state = "STOPPED".into();
    p.leader = None;
    let a = assess(facts(vec![p]), Guards::default());
    assert_eq!(
        a.reasons,
        vec!["every partition is STOPPED already: nothing to fail over"]
    );
}

#[test]
fn an_unreadable_mirror_state_is_no_go() {
    let mut f = facts(vec![part(0)]);
    f.state_unreadable = Some("checksum mismatch".into());
    let a = assess(f, Guards::default());
    assert_eq!(a.verdict, "no-go");
    assert!(a.reasons[0].contains("checksum mismatch"));
}

#[test]
fn the_lag_in_bytes_is_the_sum_of_the_partitions_estimates() {
    let mut a = part(0);
    a.lag_records = Some(10);
    a.lag_bytes_estimate = Some(1_000);
    let mut b = part(1);
    b.lag_bytes_estimate = None;
    let r = assess(facts(vec![a, b]), Guards::default());
    assert_eq!(r.totals.lag_bytes_estimate, 1_000);
}

#[test]
fn the_expected_duration_adds_the_allocator_advance_and_the_final_group_sync() {
    let mut f = facts(vec![part(0), part(1)]);
    let plain = expected_duration(&f).seconds;
    f.screened_ids = 30_000;
    f.final_group_sync = true;
    let e = expected_duration(&f);
    let want = plain + 30_000.0 / EXPECTED_IDS_PER_SECOND + EXPECTED_FINAL_GROUP_SYNC_SECONDS;
    assert!((e.seconds - want).abs() < 1e-9, "{e:?}");
    assert_eq!(e.basis.len(), 4, "{e:?}");
}

#[test]
fn the_expected_duration_counts_only_partitions_not_stopped_yet() {
    let mut stopped = part(1);
    stopped.state = "STOPPED".into();
    let one = expected_duration(&facts(vec![part(0)])).seconds;
    let with_stopped = expected_duration(&facts(vec![part(0), stopped])).seconds;
    assert_eq!(one, with_stopped);
}

#[test]
fn the_last_failover_is_shown_for_comparison_without_changing_the_estimate() {
    let mut f = facts(vec![part(0)]);
    let before = expected_duration(&f).seconds;
    f.last_failover = Some((0.8, 1));
    let e = expected_duration(&f);
    assert_eq!(e.seconds, before);
    assert!(
        e.basis
            .iter()
            .any(|b| b.contains("0.800 s for 1 partitions")),
        "{e:?}"
    );
}
