//! The checker's rules on small hand-made histories: a clean run passes, and each breach is
//! counted where it belongs.

use super::*;

const MIRRORED_PID: i64 = 7;
const LOCAL_PID: i64 = 1001;
const BARRIER_PID: i64 = 555;

fn op(client: &str, origin: Origin, n: u64, outcome: Outcome) -> Op {
    Op {
        client: client.into(),
        origin,
        key: format!("{client}-{n}"),
        n,
        sent_ms: 0,
        answered_ms: Some(1),
        outcome,
    }
}

fn acked(partition: i32, offset: i64) -> Outcome {
    Outcome::Acked { partition, offset }
}

fn data(offset: i64, producer_id: i64, key: &str) -> Entry {
    Entry::Data {
        offset,
        producer_id,
        producer_epoch: 0,
        key: key.into(),
        transactional: false,
    }
}

fn txn_data(offset: i64, producer_id: i64, key: &str) -> Entry {
    Entry::Data {
        offset,
        producer_id,
        producer_epoch: 0,
        key: key.into(),
        transactional: true,
    }
}

fn marker(offset: i64, producer_id: i64, commit: bool) -> Entry {
    Entry::Control {
        offset,
        producer_id,
        commit,
    }
}

fn src(offset: i64, key: &str) -> SourceRecord {
    SourceRecord {
        offset,
        key: key.into(),
    }
}

/// One partition: source s-0, s-1 mirrored at 0, 1; the control barrier at 2; local l-0 at 3.
struct Run {
    mode: Mode,
    tool: Tool,
    ops: Vec<Op>,
    source: Vec<Vec<SourceRecord>>,
    destination: Vec<Vec<Entry>>,
    barriers: Vec<Vec<Option<Barrier>>>,
    rpo: Vec<Option<i64>>,
    /// The group's reads on the source and on the destination (`None`: no group).
    group: Option<(Vec<Read>, Vec<Read>)>,
    /// The source's log with markers (`None`: `source` as plain records of the mirrored id).
    source_log: Option<Vec<Vec<Entry>>>,
}

fn read(partition: i32, offset: i64, key: &str) -> Read {
    Read {
        partition,
        offset,
        key: key.into(),
        at_ms: 0,
    }
}

impl Run {
    fn clean() -> Run {
        let barrier = Some(Barrier {
            offset: 2,
            producer_id: Some(BARRIER_PID),
        });
        Run {
            mode: Mode::Unplanned,
            tool: Tool::Agent,
            ops: vec![
                op("s", Origin::Source, 0, acked(0, 0)),
                op("s", Origin::Source, 1, acked(0, 1)),
                op("l", Origin::Local, 0, acked(0, 3)),
            ],
            source: vec![vec![src(0, "s-0"), src(1, "s-1")]],
            destination: vec![vec![
                data(0, MIRRORED_PID, "s-0"),
                data(1, MIRRORED_PID, "s-1"),
                marker(2, BARRIER_PID, false),
                data(3, LOCAL_PID, "l-0"),
            ]],
            barriers: vec![vec![barrier; 3]],
            rpo: vec![Some(0)],
            group: None,
            source_log: None,
        }
    }

    /// The clean run with a group that read s-0 on the source, then s-1 and l-0 through the
    /// gateways.
    fn with_group() -> Run {
        Run {
            group: Some((
                vec![read(0, 0, "s-0")],
                vec![read(0, 1, "s-1"), read(0, 3, "l-0")],
            )),
            ..Run::clean()
        }
    }

    fn check(&self) -> Verdict {
        let plain: Vec<Vec<Entry>> = self
            .source
            .iter()
            .map(|p| {
                p.iter()
                    .map(|r| data(r.offset, MIRRORED_PID, &r.key))
                    .collect()
            })
            .collect();
        check(&Inputs {
            source_log: self.source_log.as_ref().unwrap_or(&plain),
            mode: self.mode,
            tool: self.tool,
            ops: &self.ops,
            source: &self.source,
            destination: &self.destination,
            barriers: &self.barriers,
            rpo: &self.rpo,
            group: self.group.as_ref().map(|(s, d)| GroupReads {
                source: s,
                destination: d,
            }),
        })
    }
}

#[test]
fn a_clean_run_passes() {
    let v = Run::clean().check();
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.operations, v.acked, v.lost), (3, 3, 0));
}

#[test]
fn an_acknowledged_local_record_missing_from_the_log_is_lost() {
    let mut r = Run::clean();
    r.destination[0].pop();
    let v = r.check();
    assert_eq!(v.lost, 1);
    assert!(!v.ok());
}

#[test]
fn a_record_twice_in_the_log_is_duplicated() {
    let mut r = Run::clean();
    r.destination[0].push(data(4, LOCAL_PID, "l-0"));
    assert_eq!(r.check().duplicated, 1);
}

#[test]
fn a_source_record_after_the_barrier_is_a_mirror_write_after_it() {
    let mut r = Run::clean();
    r.source[0].push(src(2, "s-2"));
    r.ops.push(op("s", Origin::Source, 2, acked(0, 2)));
    r.destination[0].push(data(4, MIRRORED_PID, "s-2"));
    r.rpo = vec![Some(1)];
    assert_eq!(r.check().after_barrier, 1);
}

#[test]
fn a_late_mirror_write_is_allowed_before_the_barrier_only() {
    let mut r = Run::clean();
    r.ops.push(op("late", Origin::Late, 0, Outcome::Unknown));
    r.destination[0].push(data(4, -1, "late-0"));
    assert_eq!(r.check().after_barrier, 1);

    let mut r = Run::clean();
    r.ops.push(op("late", Origin::Late, 0, Outcome::Unknown));
    r.destination[0].insert(2, data(2, -1, "late-0"));
    r.barriers = vec![vec![
        Some(Barrier {
            offset: 3,
            producer_id: Some(BARRIER_PID)
        });
        3
    ]];
    if let Entry::Control { offset, .. } = &mut r.destination[0][3] {
        *offset = 3;
    }
    if let Entry::Data { offset, .. } = &mut r.destination[0][4] {
        *offset = 4;
    }
    r.ops[2].outcome = acked(0, 4);
    let v = r.check();
    assert!(v.ok(), "{v:?}");
}

#[test]
fn a_local_record_written_with_a_mirrored_producer_id_is_a_collision_after_the_barrier() {
    let mut r = Run::clean();
    r.destination[0][3] = data(3, MIRRORED_PID, "l-0");
    assert_eq!(r.check().after_barrier, 1);
}

#[test]
fn a_mirrored_producer_id_at_a_higher_epoch_is_no_collision() {
    let mut r = Run::clean();
    r.destination[0][3] = Entry::Data {
        offset: 3,
        producer_id: MIRRORED_PID,
        producer_epoch: 1,
        key: "l-0".into(),
        transactional: false,
    };
    let v = r.check();
    assert!(v.ok(), "{v:?}");
}

#[test]
fn a_local_record_before_the_barrier_breaks_read_only() {
    let mut r = Run::clean();
    r.destination[0].insert(0, data(0, LOCAL_PID, "l-1"));
    r.ops.push(op("l", Origin::Local, 1, Outcome::Unknown));
    let v = r.check();
    assert_eq!(v.before_barrier, 1);
}

#[test]
fn a_partition_without_its_barrier_in_the_log_is_counted() {
    let mut r = Run::clean();
    r.destination[0].remove(2);
    let v = r.check();
    assert_eq!(v.barrier_missing, 1);
    assert!(!v.ok());
}

#[test]
fn instances_that_report_different_barriers_are_counted() {
    let mut r = Run::clean();
    r.barriers[0][1] = None;
    assert_eq!(r.check().barrier_missing, 1);
}

#[test]
fn an_unplanned_failover_may_leave_exactly_the_reported_rpo() {
    let mut r = Run::clean();
    r.source[0].push(src(2, "s-2"));
    r.ops.push(op("s", Origin::Source, 2, acked(0, 2)));
    r.rpo = vec![Some(1)];
    let v = r.check();
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.unmirrored_acked, v.rpo_records), (1, 1));

    r.rpo = vec![None];
    assert!(
        r.check().ok(),
        "with the source dead the report cannot count"
    );

    r.rpo = vec![Some(0)];
    assert_eq!(r.check().rpo_mismatch, 1);
}

#[test]
fn a_planned_failover_leaves_nothing_behind() {
    let mut r = Run::clean();
    r.mode = Mode::Planned;
    r.source[0].push(src(2, "s-2"));
    r.rpo = vec![Some(1)];
    assert_eq!(r.check().rpo_mismatch, 1);
}

#[test]
fn mirrored_records_that_are_not_the_sources_prefix_diverge() {
    let mut r = Run::clean();
    r.destination[0].swap(0, 1);
    let v = r.check();
    assert_eq!(v.mirror_divergence, 1);
}

#[test]
fn a_producers_records_out_of_order_are_counted() {
    let mut r = Run::clean();
    r.ops.push(op("l", Origin::Local, 1, acked(0, 4)));
    r.destination[0].push(data(4, LOCAL_PID, "l-1"));
    r.ops[2].outcome = acked(0, 4);
    r.ops[3].outcome = acked(0, 3);
    r.destination[0][3] = data(3, LOCAL_PID, "l-1");
    r.destination[0][4] = data(4, LOCAL_PID, "l-0");
    assert_eq!(r.check().order_violations, 1);
}

#[test]
fn an_uncertain_record_may_be_present_once() {
    let mut r = Run::clean();
    r.ops[2].outcome = Outcome::Failed {
        reason: "timeout".into(),
    };
    let v = r.check();
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.uncertain_present, 1);
}

#[test]
fn a_record_no_client_wrote_is_counted() {
    let mut r = Run::clean();
    r.destination[0].push(data(4, LOCAL_PID, "stranger-0"));
    assert_eq!(r.check().mirror_divergence, 1);
}

#[test]
fn a_group_that_read_every_record_on_one_side_or_the_other_skipped_none() {
    let v = Run::with_group().check();
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.skipped, v.unread, v.reread), (Some(0), Some(0), Some(0)));
}

#[test]
fn without_a_group_the_group_figures_are_absent() {
    let v = Run::clean().check();
    assert_eq!((v.skipped, v.unread, v.reread), (None, None, None));
}

#[test]
fn a_record_the_group_read_past_on_the_destination_but_never_read_is_skipped() {
    let mut r = Run::with_group();
    // The group's offsets were moved past s-1: it read l-0 but s-1 on neither side.
    r.group = Some((vec![read(0, 0, "s-0")], vec![read(0, 3, "l-0")]));
    let v = r.check();
    assert_eq!((v.skipped, v.unread), (Some(1), Some(0)));
    assert!(!v.ok());
    assert!(
        v.violations[0].contains("skipped 1 records, the first s-1 at 1"),
        "{v:?}"
    );
}

#[test]
fn records_the_group_never_reached_are_unread_and_fail_the_run() {
    let mut r = Run::with_group();
    r.group = Some((vec![read(0, 0, "s-0")], vec![read(0, 1, "s-1")]));
    let v = r.check();
    assert_eq!((v.skipped, v.unread), (Some(0), Some(1)));
    assert!(!v.ok());
}

#[test]
fn a_record_read_on_both_sides_is_reread_not_a_breach() {
    let mut r = Run::with_group();
    r.group = Some((
        vec![read(0, 0, "s-0"), read(0, 1, "s-1")],
        vec![read(0, 1, "s-1"), read(0, 3, "l-0")],
    ));
    let v = r.check();
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.reread, Some(1));
}

#[test]
fn barriers_and_control_batches_need_no_reading() {
    let mut r = Run::with_group();
    r.destination[0][2] = Entry::DataBarrier { offset: 2 };
    r.barriers = vec![vec![
        Some(Barrier {
            offset: 2,
            producer_id: None
        });
        3
    ]];
    let v = r.check();
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.unread, Some(0));
}

/// A planned run whose source partition holds a committed transaction (t-0, t-1), an aborted
/// one (t-2) and a plain record (s-0), mirrored as they are before the barrier at 7.
fn with_transactions() -> Run {
    const TXN_PID: i64 = 9;
    let source_log = vec![
        txn_data(0, TXN_PID, "t-0"),
        txn_data(1, TXN_PID, "t-1"),
        marker(2, TXN_PID, true),
        txn_data(3, TXN_PID, "t-2"),
        marker(4, TXN_PID, false),
        data(5, MIRRORED_PID, "s-0"),
    ];
    let mut destination = source_log.clone();
    destination.push(marker(6, BARRIER_PID, false));
    destination.push(data(7, LOCAL_PID, "l-0"));
    Run {
        mode: Mode::Planned,
        tool: Tool::Agent,
        ops: vec![
            op("t", Origin::Source, 0, acked(0, 0)),
            op("t", Origin::Source, 1, acked(0, 1)),
            op(
                "t",
                Origin::Source,
                2,
                Outcome::Failed {
                    reason: "aborted".into(),
                },
            ),
            op("s", Origin::Source, 0, acked(0, 5)),
            op("l", Origin::Local, 0, acked(0, 7)),
        ],
        source: vec![vec![
            src(0, "t-0"),
            src(1, "t-1"),
            src(3, "t-2"),
            src(5, "s-0"),
        ]],
        destination: vec![destination],
        barriers: vec![vec![
            Some(Barrier {
                offset: 6,
                producer_id: Some(BARRIER_PID)
            });
            3
        ]],
        rpo: vec![Some(0)],
        group: None,
        source_log: Some(vec![source_log]),
    }
}

#[test]
fn transactions_mirrored_with_their_markers_show_the_same_committed_view() {
    let v = with_transactions().check();
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.committed_mismatch, v.committed_unmirrored), (0, 0));
}

#[test]
fn a_transaction_aborted_on_the_source_but_committed_on_the_destination_is_a_mismatch() {
    let mut r = with_transactions();
    r.destination[0][4] = marker(4, 9, true);
    let v = r.check();
    assert_eq!(v.committed_mismatch, 1, "{v:?}");
    assert!(v.violations[0].contains("t-2 at 3 is visible"), "{v:?}");
}

#[test]
fn a_committed_transaction_aborted_on_the_destination_fails_a_planned_failover() {
    let mut r = with_transactions();
    r.destination[0][2] = marker(2, 9, false);
    let v = r.check();
    assert_eq!(v.committed_mismatch, 2, "{v:?}");
}

/// An unplanned run: transaction t-0, t-1 of producer 9 and a plain s-0 on the source, the
/// COMMIT at `commit_at` (3: after s-0, 2: before it); the destination holds the three records,
/// the failover's ABORT of producer 9 at 3, the barrier at 4 and a local record.
fn unplanned_with_commit_at(commit_at: i64) -> Run {
    let s0_at = if commit_at == 3 { 2 } else { 3 };
    let mut source_log = vec![
        txn_data(0, 9, "t-0"),
        txn_data(1, 9, "t-1"),
        data(s0_at, MIRRORED_PID, "s-0"),
        marker(commit_at, 9, true),
    ];
    source_log.sort_by_key(|e| match e {
        Entry::Data { offset, .. } | Entry::Control { offset, .. } => *offset,
        Entry::DataBarrier { offset } => *offset,
    });
    let destination = vec![
        txn_data(0, 9, "t-0"),
        txn_data(1, 9, "t-1"),
        data(2, MIRRORED_PID, "s-0"),
        marker(3, 9, false),
        marker(4, BARRIER_PID, false),
        data(5, LOCAL_PID, "l-0"),
    ];
    Run {
        mode: Mode::Unplanned,
        tool: Tool::Agent,
        ops: vec![
            op("t", Origin::Source, 0, acked(0, 0)),
            op("t", Origin::Source, 1, acked(0, 1)),
            op("s", Origin::Source, 0, acked(0, s0_at)),
            op("l", Origin::Local, 0, acked(0, 5)),
        ],
        source: vec![vec![src(0, "t-0"), src(1, "t-1"), src(s0_at, "s-0")]],
        destination: vec![destination],
        barriers: vec![vec![
            Some(Barrier {
                offset: 4,
                producer_id: Some(BARRIER_PID)
            });
            3
        ]],
        rpo: vec![Some(0)],
        group: None,
        source_log: Some(vec![source_log]),
    }
}

#[test]
fn an_unplanned_failover_may_abort_a_transaction_whose_commit_it_never_mirrored() {
    let v = unplanned_with_commit_at(3).check();
    assert!(v.ok(), "{v:?}");
    assert_eq!(
        (v.committed_mismatch, v.committed_unmirrored),
        (0, 2),
        "{v:?}"
    );
}

#[test]
fn an_unplanned_failover_may_not_abort_a_transaction_committed_before_records_it_mirrored() {
    let v = unplanned_with_commit_at(2).check();
    assert_eq!(
        (v.committed_mismatch, v.committed_unmirrored),
        (2, 0),
        "{v:?}"
    );
}

/// A copy of `key` at `offset` written by `producer_id` at `epoch`.
fn data_at_epoch(offset: i64, producer_id: i64, epoch: i16, key: &str) -> Entry {
    Entry::Data {
        offset,
        producer_id,
        producer_epoch: epoch,
        key: key.into(),
        transactional: false,
    }
}

#[test]
fn a_record_sent_again_under_a_bumped_epoch_whose_second_copy_was_acknowledged_is_a_client_resend()
{
    let mut r = Run::clean();
    r.destination[0].push(data_at_epoch(4, LOCAL_PID, 1, "l-0"));
    r.ops[2] = op("l", Origin::Local, 0, acked(0, 4));
    let v = r.check();
    assert_eq!((v.duplicated, v.client_resends), (0, 1), "{v:?}");
    assert!(v.ok(), "{v:?}");
}

#[test]
fn a_second_copy_under_a_bumped_epoch_after_the_first_was_acknowledged_is_a_duplicate() {
    let mut r = Run::clean();
    r.destination[0].push(data_at_epoch(4, LOCAL_PID, 1, "l-0"));
    let v = r.check();
    assert_eq!((v.duplicated, v.client_resends), (1, 0), "{v:?}");
    assert!(!v.ok());
}

#[test]
fn copies_of_two_producer_ids_are_a_duplicate_whatever_their_epochs() {
    let mut r = Run::clean();
    r.destination[0].push(data_at_epoch(4, LOCAL_PID + 1, 1, "l-0"));
    r.ops[2] = op("l", Origin::Local, 0, acked(0, 4));
    assert_eq!(r.check().duplicated, 1);
}

/// MirrorMaker 2's copy of the clean run: its own producer id and offsets (s-0 copied twice, as
/// a restarted task does), the barrier after them, a local record after it.
fn copied_by_mirrormaker() -> Run {
    const MM2_PID: i64 = 3;
    let barrier = Some(Barrier {
        offset: 3,
        producer_id: Some(BARRIER_PID),
    });
    Run {
        tool: Tool::MirrorMaker2,
        mode: Mode::Planned,
        ops: vec![
            op("s", Origin::Source, 0, acked(0, 0)),
            op("s", Origin::Source, 1, acked(0, 1)),
            op("l", Origin::Local, 0, acked(0, 4)),
        ],
        destination: vec![vec![
            data(0, MM2_PID, "s-0"),
            data(1, MM2_PID, "s-0"),
            data(2, MM2_PID, "s-1"),
            marker(3, BARRIER_PID, false),
            data(4, LOCAL_PID, "l-0"),
        ]],
        barriers: vec![vec![barrier; 3]],
        rpo: vec![None],
        ..Run::clean()
    }
}

#[test]
fn mirrormakers_further_copies_before_the_barrier_are_its_own_not_duplicates() {
    let v = copied_by_mirrormaker().check();
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.tool_copies, v.duplicated), (1, 0));

    let mut agent = copied_by_mirrormaker();
    agent.tool = Tool::Agent;
    agent.rpo = vec![Some(0)];
    assert_eq!(
        agent.check().duplicated,
        1,
        "the agent copies exactly once: a second copy is a duplicate"
    );
}

#[test]
fn a_mirrormaker_copy_after_the_barrier_is_a_mirror_write_after_it() {
    let mut r = copied_by_mirrormaker();
    r.destination[0].push(data(5, 3, "s-1"));
    let v = r.check();
    assert_eq!((v.after_barrier, v.duplicated), (1, 1), "{v:?}");
}

#[test]
fn behind_mirrormaker_a_planned_failover_still_leaves_no_source_record_behind() {
    let mut r = copied_by_mirrormaker();
    r.source[0].push(src(2, "s-2"));
    r.ops.push(op("s", Origin::Source, 2, acked(0, 2)));
    let v = r.check();
    assert_eq!(v.rpo_mismatch, 1, "{v:?}");
}

#[test]
fn behind_mirrormaker_records_copied_out_of_the_sources_order_diverge() {
    let mut r = copied_by_mirrormaker();
    r.destination[0][0] = data(0, 3, "s-1");
    r.destination[0][2] = data(2, 3, "s-0");
    let v = r.check();
    assert_eq!(v.mirror_divergence, 1, "{v:?}");
}
