//! The state topic is compacted: the broker may drop every record of a key but the latest.
//! These tests state what the record keys must guarantee: a reader that reads the compacted
//! log reaches the same conclusions (who drives each failover, who owns each agent, what was
//! handed over, who fenced) as a reader that read every record as it was written.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::view::{PeerRecord, PeerView, ScreenedProducer, Stopped, StoppedPartition};
use crate::mirror::report::FailoverReport;
use crate::mirror::screening::ScreenEntry;
use crate::mirror::state::{BarrierKind, BarrierProducer};

const T: Duration = Duration::from_secs(10);

/// What log compaction leaves of `log`: the latest record of each key, in log order.
fn compacted(log: &[PeerRecord]) -> Vec<PeerRecord> {
    let last: HashMap<String, usize> = log.iter().enumerate().map(|(i, r)| (r.key(), i)).collect();
    log.iter()
        .enumerate()
        .filter(|(i, r)| last.get(&r.key()) == Some(i))
        .map(|(_, r)| r.clone())
        .collect()
}

/// A reader's conclusions after reading `log` from its start.
fn conclusions(log: &[PeerRecord]) -> String {
    let now = Instant::now();
    let mut v = PeerView::new("reader", T);
    for r in log {
        v.apply(r.clone(), now, 0);
    }
    v.conclusions()
}

fn claim(m: &str, fid: &str, by: &str, epoch: u32, at_ms: i64) -> PeerRecord {
    PeerRecord::Failover {
        mirror: m.into(),
        failover_id: Some(fid.into()),
        by: by.into(),
        at_ms,
        epoch,
    }
}

#[test]
fn a_compacted_state_topic_still_names_the_first_claim_of_a_raced_takeover_as_the_driver() {
    // b and c both claim epoch 2 of a's failover; b's claim comes first and b drives it.
    let log = vec![
        claim("m", "f1", "a", 1, 1),
        claim("m", "f1", "b", 2, 2),
        claim("m", "f1", "c", 2, 3),
    ];
    assert_eq!(conclusions(&compacted(&log)), conclusions(&log));
}

#[test]
fn a_compacted_state_topic_still_names_the_first_claim_of_a_raced_agent_takeover_as_the_owner() {
    let owner = |o: &str, epoch: u32, at_ms: i64| PeerRecord::AgentOwner {
        mirror: "m".into(),
        owner: o.into(),
        epoch,
        at_ms,
    };
    // a's claim timed out but landed; c claimed the same epoch; a claimed again.
    let log = vec![owner("a", 2, 1), owner("c", 2, 2), owner("a", 2, 3)];
    assert_eq!(conclusions(&compacted(&log)), conclusions(&log));
}

fn pick(v: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(v).prop_map(str::to_string)
}

/// One record of any kind, over a few mirrors, failovers and instances (time set later).
fn record() -> impl Strategy<Value = PeerRecord> {
    let m = || pick(&["m", "n"]);
    let i = || pick(&["a", "b", "c"]);
    let f = || pick(&["f1", "f2"]);
    prop_oneof![
        (
            i(),
            prop::collection::vec(m(), 0..2),
            prop::collection::vec(m(), 0..2)
        )
            .prop_map(|(instance, agents, forward)| {
                PeerRecord::Heartbeat {
                    instance,
                    at_ms: 0,
                    agents,
                    incarnation: None,
                    forward,
                }
            }),
        (
            m(),
            pick(&["h1", "h2"]),
            i(),
            any::<bool>(),
            any::<(bool, bool)>()
        )
            .prop_map(|(mirror, hold_id, by, held, (caught_up, back))| {
                PeerRecord::ForwardHold {
                    mirror,
                    hold_id,
                    by,
                    held,
                    hold_ms: 1_000,
                    caught_up,
                    back,
                    at_ms: 0,
                }
            }),
        (m(), pick(&["h1", "h2"]), i()).prop_map(|(mirror, hold_id, instance)| {
            PeerRecord::ForwardHeld {
                mirror,
                hold_id,
                instance,
                at_ms: 0,
            }
        }),
        (m(), f(), i(), 0..3i64).prop_map(|(mirror, failover_id, instance, records)| {
            PeerRecord::ForwardedLoss {
                mirror,
                failover_id,
                instance: instance.clone(),
                loss: crate::mirror::forwarded_acks::ForwardedLoss {
                    records,
                    ..Default::default()
                }
                .of_instance(&instance),
                at_ms: 0,
            }
        }),
        (m(), i(), 1..4u32).prop_map(|(mirror, owner, epoch)| PeerRecord::AgentOwner {
            mirror,
            owner,
            epoch,
            at_ms: 0,
        }),
        (m(), i(), 0..3i64, 0..3u32).prop_map(|(mirror, by, n, epoch)| PeerRecord::AgentOffsets {
            mirror,
            by,
            epoch,
            offsets: serde_json::json!({ "n": n }),
        }),
        (m(), prop::option::of(f()), i(), 0..4u32).prop_map(|(mirror, failover_id, by, epoch)| {
            PeerRecord::Failover {
                mirror,
                failover_id,
                by,
                at_ms: 0,
                epoch,
            }
        }),
        (m(), f(), i(), 0..3i32).prop_map(|(mirror, failover_id, by, n)| {
            PeerRecord::BarrierFrom {
                mirror,
                failover_id,
                by,
                partitions: (0..n)
                    .map(|p| crate::instances::records::LogPosition {
                        topic: "t".into(),
                        partition: p,
                        offset: 7,
                    })
                    .collect(),
            }
        }),
        (m(), f(), i()).prop_map(|(mirror, failover_id, instance)| PeerRecord::Fenced {
            mirror,
            failover_id,
            instance,
            at_ms: 0,
        }),
        (m(), f(), i()).prop_map(|(mirror, failover_id, instance)| PeerRecord::Adopted {
            mirror,
            failover_id,
            instance,
            at_ms: 0,
        }),
        (m(), f(), i(), 0..3i32).prop_map(|(mirror, failover_id, by, n)| {
            PeerRecord::Stopped(Stopped {
                mirror,
                failover_id,
                by,
                at_ms: 0,
                partitions: (0..n)
                    .map(|p| StoppedPartition {
                        topic: "t".into(),
                        partition: p,
                        barrier_offset: 10,
                        kind: BarrierKind::Control,
                        producer: None,
                        topic_id: None,
                        last_mirrored_offset: None,
                        producers_expired: None,
                    })
                    .collect(),
                screened: vec![ScreenedProducer {
                    producer_id: i64::from(n),
                    entry: ScreenEntry {
                        max_epoch: 0,
                        last_timestamp: 0,
                        added_ms: 0,
                        coordinator_epoch: -1,
                    },
                }],
            })
        }),
        (m(), f(), any::<bool>()).prop_map(|(mirror, failover_id, done)| {
            let mut r = FailoverReport::open(
                &mirror,
                &failover_id,
                "token".into(),
                0,
                (None, None, false),
                Vec::new(),
                None,
            );
            if done {
                r.status = "complete".into();
            }
            PeerRecord::Report(Box::new(r))
        }),
        (m(), any::<bool>(), i()).prop_map(|(mirror, paused, by)| PeerRecord::Paused {
            mirror,
            paused,
            by,
            at_ms: 0,
        }),
        (m(), f(), i(), 0..3i64).prop_map(|(mirror, failover_id, by, id)| {
            PeerRecord::BarrierProducer {
                mirror,
                failover_id,
                producer: BarrierProducer {
                    producer_id: id,
                    producer_epoch: 0,
                },
                by,
            }
        }),
    ]
}

/// The record as appended at `at_ms` (each append has its own time).
fn at(mut r: PeerRecord, t: i64) -> PeerRecord {
    match &mut r {
        PeerRecord::AgentOwner { at_ms, .. }
        | PeerRecord::Failover { at_ms, .. }
        | PeerRecord::Fenced { at_ms, .. }
        | PeerRecord::Adopted { at_ms, .. }
        | PeerRecord::Paused { at_ms, .. }
        | PeerRecord::ForwardHold { at_ms, .. }
        | PeerRecord::ForwardHeld { at_ms, .. }
        | PeerRecord::ForwardedLoss { at_ms, .. } => *at_ms = t,
        PeerRecord::Stopped(s) => s.at_ms = t,
        PeerRecord::Heartbeat { .. }
        | PeerRecord::AgentOffsets { .. }
        | PeerRecord::BarrierProducer { .. }
        | PeerRecord::BarrierFrom { .. } => {}
        PeerRecord::Report(r) => r.called_ms = t,
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn compaction_never_changes_what_a_reader_of_the_state_topic_concludes(
        log in prop::collection::vec(record(), 0..24)
    ) {
        let log: Vec<PeerRecord> = log.into_iter().enumerate().map(|(i, r)| at(r, i as i64 + 1)).collect();
        prop_assert_eq!(conclusions(&compacted(&log)), conclusions(&log));
    }
}
