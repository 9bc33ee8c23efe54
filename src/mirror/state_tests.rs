//! Unit tests of `state.rs`.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;
use PartitionState::*;

/// The expected rule for every pair, written out independently of [`TRANSITIONS`]:
/// 'o' ordinary, 's' explicit start only, 'a' abandoning an adopted failover only, '-' refused. Rows: from, columns: to, both in
/// [`PartitionState::ALL`] order (MIRRORING, PAUSED, STOPPING, STOPPED, FAILED).
const MATRIX: [&str; 5] = [
    "-oo--", // MIRRORING
    "o-o--", // PAUSED
    "a--oo", // STOPPING
    "s----", // STOPPED
    "a-o--", // FAILED
];

#[test]
fn all_25_pairs_follow_the_table() {
    for (i, from) in PartitionState::ALL.into_iter().enumerate() {
        for (j, to) in PartitionState::ALL.into_iter().enumerate() {
            let want = MATRIX[i].as_bytes()[j];
            let ordinary = from.transition(to);
            let start = from.start_mirroring(true);
            match want {
                b'o' => {
                    assert_eq!(ordinary, Ok(to), "{from}->{to}");
                    assert_eq!(from.rule(to), Ok(TransitionKind::Ordinary));
                }
                b'a' => {
                    let err = ordinary.unwrap_err();
                    assert_eq!((err.from, err.to), (from, to));
                    assert_eq!(from.rule(to), Ok(TransitionKind::AbandonAdopted));
                    assert_eq!(from.abandon_adopted(), Ok(Mirroring), "{from}->{to}");
                }
                b's' => {
                    let err = ordinary.unwrap_err();
                    assert_eq!((err.from, err.to), (from, to));
                    assert_eq!(start, Ok(Mirroring), "{from}->{to}");
                    let refused = from.start_mirroring(false).unwrap_err();
                    assert!(refused.reason.contains("aligned"));
                }
                _ => {
                    let err = ordinary.unwrap_err();
                    assert_eq!((err.from, err.to), (from, to), "{from}->{to}");
                    assert!(!err.reason.is_empty());
                    assert!(from.rule(to).is_err(), "{from}->{to}");
                    assert!(err.to_string().contains(from.as_str()));
                }
            }
            if to == Mirroring && want != b's' {
                assert!(start.is_err(), "start from {from}");
            }
            if to == Mirroring && want != b'a' {
                assert!(from.abandon_adopted().is_err(), "abandon from {from}");
            }
        }
    }
    assert_eq!(
        TRANSITIONS.len(),
        MATRIX
            .iter()
            .map(|r| r.bytes().filter(|b| *b != b'-').count())
            .sum::<usize>()
    );
}

#[test]
fn produce_acceptance_per_state() {
    let local: Vec<_> = PartitionState::ALL
        .iter()
        .map(|s| s.accepts_local_produce())
        .collect();
    let mirror: Vec<_> = PartitionState::ALL
        .iter()
        .map(|s| s.accepts_mirror_produce())
        .collect();
    assert_eq!(local, [false, false, false, true, false]);
    assert_eq!(mirror, [true, false, false, false, false]);
}

#[test]
fn state_names_match_serde() {
    for s in PartitionState::ALL {
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, format!("\"{}\"", s.as_str()));
        assert_eq!(serde_json::from_str::<PartitionState>(&json).unwrap(), s);
    }
    assert!(serde_json::from_str::<PartitionState>("\"Mirroring\"").is_err());
}

fn stopped_record() -> PartitionRecord {
    let mut p = PartitionRecord::new("orders", 3, 1);
    p.begin_failover("f1", 2).unwrap();
    p.advance(FailoverStep::Fenced, 3).unwrap();
    p.advance(FailoverStep::Drained, 4).unwrap();
    p.advance(FailoverStep::BarrierWritten { offset: 500 }, 5)
        .unwrap();
    p.advance(FailoverStep::BarrierPersisted { offset: 500 }, 6)
        .unwrap();
    p.advance(FailoverStep::PsmCleared, 7).unwrap();
    p.complete(8).unwrap();
    p
}

#[test]
fn every_allowed_transition_through_the_record_api() {
    let mut p = PartitionRecord::new("t", 0, 0);
    p.pause(1).unwrap();
    assert_eq!(p.state, Paused);
    p.resume(2).unwrap();
    assert_eq!(p.state, Mirroring);
    p.begin_failover("f1", 3).unwrap(); // MIRRORING → STOPPING
    assert_eq!(p.state, Stopping);
    p.advance(FailoverStep::Fenced, 4).unwrap();
    p.fail("fence timed out", 5).unwrap(); // STOPPING → FAILED
    assert_eq!((p.state, p.step), (Failed, Some(FailoverStep::Fenced)));
    p.retry(6).unwrap(); // FAILED → STOPPING, step kept
    assert_eq!((p.state, p.step), (Stopping, Some(FailoverStep::Fenced)));
    assert_eq!(p.updated_ms, 6);

    let mut q = PartitionRecord::new("t", 1, 0);
    q.pause(1).unwrap();
    q.begin_failover("f1", 2).unwrap(); // PAUSED → STOPPING
    assert_eq!(q.state, Stopping);

    let mut s = stopped_record(); // STOPPING → STOPPED
    assert_eq!((s.state, s.barrier_offset), (Stopped, Some(500)));
    assert!(s.validate().is_ok());
    assert!(s.start_mirroring(false, 9).is_err());
    assert_eq!(s.state, Stopped);
    s.start_mirroring(true, 9).unwrap(); // STOPPED → MIRRORING
    assert_eq!(s, PartitionRecord::new("orders", 3, 9));
}

#[test]
fn record_api_refuses_what_the_table_refuses() {
    let mut p = PartitionRecord::new("t", 0, 0);
    assert!(p.resume(1).is_err());
    assert!(p.retry(1).is_err());
    assert!(p.fail("x", 1).is_err());
    assert!(p.complete(1).is_err());
    assert!(p.start_mirroring(true, 1).is_err());
    assert!(p.advance(FailoverStep::Fenced, 1).is_err());
    assert!(p.begin_failover("", 1).is_err());
    assert_eq!(
        p,
        PartitionRecord::new("t", 0, 0),
        "refusals change nothing"
    );

    p.begin_failover("f", 1).unwrap();
    assert!(p.pause(2).is_err());
    assert!(p.begin_failover("g", 2).is_err());
    p.fail("boom", 3).unwrap();
    let err = p.begin_failover("f", 4).unwrap_err();
    assert!(err.reason.contains("retry"));
    assert!(
        p.advance(FailoverStep::Fenced, 4).is_err(),
        "no steps while FAILED"
    );

    let mut s = stopped_record();
    assert!(s.pause(1).is_err());
    assert!(s.begin_failover("f2", 1).is_err());
    assert!(s.fail("x", 1).is_err());
}

#[test]
fn steps_follow_their_order() {
    use FailoverStep::*;
    let w = |o| BarrierWritten { offset: o };
    let pst = |o| BarrierPersisted { offset: o };
    let ok: &[(Option<FailoverStep>, FailoverStep)] = &[
        (None, Fenced),
        (Some(Fenced), Fenced),
        (Some(Fenced), Drained),
        (Some(Drained), Drained),
        (Some(Drained), w(10)),
        (Some(w(10)), w(10)),
        (Some(w(10)), w(12)),
        (Some(w(10)), w(3)),
        (Some(w(10)), pst(10)),
        (Some(pst(10)), pst(10)),
        (Some(pst(10)), PsmCleared),
        (Some(PsmCleared), PsmCleared),
    ];
    for (prev, next) in ok {
        assert_eq!(next.check_after(*prev), Ok(()), "{prev:?} -> {next:?}");
    }
    let refused: &[(Option<FailoverStep>, FailoverStep)] = &[
        (None, Drained),
        (None, w(1)),
        (None, pst(1)),
        (None, PsmCleared),
        (Some(Fenced), w(1)),
        (Some(Fenced), PsmCleared),
        (Some(Drained), Fenced),
        (Some(Drained), pst(1)),
        (Some(w(10)), pst(11)),
        (Some(w(10)), Drained),
        (Some(w(10)), PsmCleared),
        (Some(pst(10)), w(11)),
        (Some(pst(10)), pst(11)),
        (Some(PsmCleared), Fenced),
        (Some(PsmCleared), w(1)),
        (Some(Drained), w(-1)),
    ];
    for (prev, next) in refused {
        assert!(next.check_after(*prev).is_err(), "{prev:?} -> {next:?}");
    }
}

#[test]
fn advance_tracks_the_barrier_offset() {
    let mut p = PartitionRecord::new("t", 0, 0);
    p.begin_failover("f", 1).unwrap();
    p.advance(FailoverStep::Fenced, 2).unwrap();
    p.advance(FailoverStep::Drained, 3).unwrap();
    p.advance(FailoverStep::BarrierWritten { offset: 7 }, 4)
        .unwrap();
    assert_eq!(p.barrier_offset, None);
    let err = p
        .advance(FailoverStep::BarrierPersisted { offset: 8 }, 5)
        .unwrap_err();
    assert_eq!(err.state, Stopping);
    assert!(err.to_string().contains("BARRIER_PERSISTED(offset 8)"));
    p.advance(FailoverStep::BarrierPersisted { offset: 7 }, 5)
        .unwrap();
    assert_eq!(p.barrier_offset, Some(7));
    p.advance(FailoverStep::PsmCleared, 6).unwrap();
    assert_eq!(p.barrier_offset, Some(7));
    assert!(p.validate().is_ok());
}

#[test]
fn complete_is_refused_without_a_persisted_barrier() {
    use FailoverStep::*;
    let steps = [
        Fenced,
        Drained,
        BarrierWritten { offset: 9 },
        BarrierPersisted { offset: 9 },
    ];
    let mut p = PartitionRecord::new("t", 0, 0);
    p.begin_failover("f", 1).unwrap();
    let err = p.complete(2).unwrap_err();
    assert!(err.reason.contains("not persisted"), "{err}");
    for step in steps {
        p.advance(step, 2).unwrap();
        let err = p.complete(3).unwrap_err();
        assert_eq!((err.from, err.to), (Stopping, Stopped));
        assert_eq!(p.state, Stopping);
    }
    // Hand-built: PSM_CLEARED but no offset — still refused.
    let mut forged = p.clone();
    forged.step = Some(PsmCleared);
    forged.barrier_offset = None;
    assert!(forged
        .complete(4)
        .unwrap_err()
        .reason
        .contains("not persisted"));
    p.advance(PsmCleared, 4).unwrap();
    p.complete(5).unwrap();
    assert_eq!(p.state, Stopped);
    // From FAILED it must be retried first.
    let mut f = PartitionRecord::new("t", 1, 0);
    f.begin_failover("f", 1).unwrap();
    f.fail("x", 2).unwrap();
    assert!(f.complete(3).is_err());
}

fn mirror() -> MirrorRecord {
    let mut m = MirrorRecord::new(
        "dr",
        [
            ("orders".to_owned(), 0),
            ("orders".to_owned(), 1),
            ("pay".to_owned(), 0),
        ],
        10,
    );
    m.failover_id = Some("f1".into());
    m.started_ms = Some(11);
    let p0 = m.partition_mut("orders", 0).unwrap();
    p0.begin_failover("f1", 12).unwrap();
    p0.advance(FailoverStep::Fenced, 13).unwrap();
    p0.producers_expired = 4;
    let p1 = m.partition_mut("orders", 1).unwrap();
    p1.begin_failover("f1", 12).unwrap();
    p1.fail("not leader", 13).unwrap();
    m.partitions[2] = {
        let mut s = stopped_record();
        s.topic = "pay".into();
        s.partition = 0;
        s.failover_id = Some("f1".into());
        s
    };
    m
}

#[test]
fn encode_decode_round_trip_and_format() {
    let m = mirror();
    assert_eq!(m.validate(), Ok(()));
    let bytes = m.encode();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(text.starts_with("{\"version\":1,\"name\":\"dr\""), "{text}");
    assert!(text.contains("\"state\":\"STOPPED\""));
    assert!(text.contains("\"step\":{\"step\":\"PSM_CLEARED\"}"));
    assert_eq!(MirrorRecord::decode(&bytes).unwrap(), m);
    let fresh = MirrorRecord::new("m", [("t".to_owned(), 0)], 1);
    assert_eq!(MirrorRecord::decode(&fresh.encode()).unwrap(), fresh);
}

#[test]
fn a_mirror_s_pause_round_trips_and_files_without_it_load_unpaused() {
    let mut m = MirrorRecord::new("m", [("t".to_owned(), 0)], 1);
    let unpaused = String::from_utf8(m.encode()).unwrap();
    assert!(!unpaused.contains("paused"), "{unpaused}");
    m.paused = true;
    m.partitions[0].pause(2).unwrap();
    let bytes = m.encode();
    assert!(std::str::from_utf8(&bytes)
        .unwrap()
        .contains("\"paused\":true"));
    assert_eq!(MirrorRecord::decode(&bytes).unwrap(), m);
    assert!(!MirrorRecord::decode(unpaused.as_bytes()).unwrap().paused);
}

#[test]
fn a_control_barrier_s_identity_round_trips_and_older_files_without_it_still_load() {
    let mut m = mirror();
    let p = m.partition_mut("pay", 0).unwrap();
    p.barrier_kind = Some(BarrierKind::Control);
    p.barrier_producer = Some(BarrierProducer {
        producer_id: 1000,
        producer_epoch: 0,
    });
    p.last_mirrored_offset = Some(41);
    let bytes = m.encode();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(text.contains("\"barrier_kind\":\"control\""), "{text}");
    assert!(
        text.contains("\"barrier_producer\":{\"producer_id\":1000,\"producer_epoch\":0}"),
        "{text}"
    );
    assert!(text.contains("\"last_mirrored_offset\":41"), "{text}");
    assert_eq!(MirrorRecord::decode(&bytes).unwrap(), m);
    // A file written before the barrier's identity was recorded (no such fields) loads,
    // with none set: its barriers are data batches.
    let old = mirror().encode();
    assert!(!std::str::from_utf8(&old).unwrap().contains("barrier_kind"));
    let loaded = MirrorRecord::decode(&old).unwrap();
    let p = loaded.partition("pay", 0).unwrap();
    assert_eq!(
        (p.barrier_kind, p.barrier_producer, p.last_mirrored_offset),
        (None, None, None)
    );
    // A control barrier without its producer id is impossible.
    let mut bad = mirror();
    bad.partition_mut("pay", 0).unwrap().barrier_kind = Some(BarrierKind::Control);
    assert!(MirrorRecord::decode(&bad.encode()).is_err());
    // A new failover and a failback forget the previous barrier's identity.
    let mut p = m.partition("pay", 0).unwrap().clone();
    p.start_mirroring(true, 20).unwrap();
    assert_eq!(
        (p.barrier_kind, p.barrier_producer, p.last_mirrored_offset),
        (None, None, None)
    );
}

fn edit(f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(&mirror().encode()).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn decode_rejects_corrupt_and_unknown_input() {
    let good = mirror().encode();
    for cut in [0, 1, good.len() / 2, good.len() - 1] {
        assert!(
            matches!(
                MirrorRecord::decode(&good[..cut]),
                Err(StateDecodeError::Json(_))
            ),
            "cut {cut}"
        );
    }
    assert!(matches!(
        MirrorRecord::decode(b"[1,2]"),
        Err(StateDecodeError::Json(_))
    ));
    assert!(matches!(
        MirrorRecord::decode(b"\xff\xfe"),
        Err(StateDecodeError::Json(_))
    ));
    let no_version = edit(|v| {
        v.as_object_mut().unwrap().remove("version");
    });
    assert_eq!(
        MirrorRecord::decode(&no_version),
        Err(StateDecodeError::MissingVersion)
    );
    let v2 = edit(|v| v["version"] = 2.into());
    assert_eq!(
        MirrorRecord::decode(&v2),
        Err(StateDecodeError::UnsupportedVersion(2))
    );
    let v_str = edit(|v| v["version"] = "1".into());
    assert!(matches!(
        MirrorRecord::decode(&v_str),
        Err(StateDecodeError::BadVersion(_))
    ));
    let unknown_field = edit(|v| v["extra"] = true.into());
    assert!(matches!(
        MirrorRecord::decode(&unknown_field),
        Err(StateDecodeError::Json(_))
    ));
    let missing_null_field = edit(|v| {
        v["partitions"][0]
            .as_object_mut()
            .unwrap()
            .remove("last_error");
    });
    assert!(matches!(
        MirrorRecord::decode(&missing_null_field),
        Err(StateDecodeError::Json(_))
    ));
    let bad_state = edit(|v| v["partitions"][0]["state"] = "RUNNING".into());
    assert!(matches!(
        MirrorRecord::decode(&bad_state),
        Err(StateDecodeError::Json(_))
    ));
    let bad_step = edit(|v| v["partitions"][0]["step"] = serde_json::json!({"step": "JUMPED"}));
    assert!(matches!(
        MirrorRecord::decode(&bad_step),
        Err(StateDecodeError::Json(_))
    ));
}

#[test]
fn decode_rejects_impossible_combinations() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "STOPPED without barrier",
            edit(|v| v["partitions"][2]["barrier_offset"] = serde_json::Value::Null),
        ),
        (
            "STOPPED before PSM cleared",
            edit(|v| {
                v["partitions"][2]["step"] =
                    serde_json::json!({"step": "BARRIER_WRITTEN", "offset": 500});
                v["partitions"][2]["barrier_offset"] = serde_json::Value::Null;
            }),
        ),
        (
            "MIRRORING with a step",
            edit(|v| {
                v["partitions"][0]["state"] = "MIRRORING".into();
            }),
        ),
        (
            "STOPPING without failover id",
            edit(|v| v["partitions"][0]["failover_id"] = serde_json::Value::Null),
        ),
        (
            "FAILED without error",
            edit(|v| v["partitions"][1]["last_error"] = serde_json::Value::Null),
        ),
        (
            "barrier offset before persisted",
            edit(|v| v["partitions"][0]["barrier_offset"] = 3.into()),
        ),
        (
            "persisted offset mismatch",
            edit(|v| {
                v["partitions"][2]["step"] =
                    serde_json::json!({"step": "BARRIER_PERSISTED", "offset": 501})
            }),
        ),
        (
            "duplicate partition",
            edit(|v| {
                let p = v["partitions"][0].clone();
                v["partitions"].as_array_mut().unwrap().push(p);
            }),
        ),
        (
            "foreign failover id",
            edit(|v| v["partitions"][0]["failover_id"] = "f2".into()),
        ),
        (
            "completed with partitions not stopped",
            edit(|v| v["completed_ms"] = 99.into()),
        ),
        (
            "failover without start time",
            edit(|v| v["started_ms"] = serde_json::Value::Null),
        ),
        (
            "negative partition",
            edit(|v| v["partitions"][0]["partition"] = (-1).into()),
        ),
        ("empty name", edit(|v| v["name"] = "".into())),
    ];
    for (name, bytes) in cases {
        assert!(
            matches!(
                MirrorRecord::decode(&bytes),
                Err(StateDecodeError::Inconsistent(_))
            ),
            "{name}: {:?}",
            MirrorRecord::decode(&bytes)
        );
    }
}

fn arb_partition(failover: Option<String>) -> impl Strategy<Value = PartitionRecord> {
    (
        "[a-z._-]{1,12}",
        0i32..1000,
        0usize..12,
        0i64..1_000_000,
        any::<u32>(),
        proptest::option::of(".{0,20}"),
        any::<i64>(),
    )
        .prop_map(move |(topic, partition, path, offset, expired, err, now)| {
            let mut p = PartitionRecord::new(topic, partition, now);
            let id = failover.clone();
            // Walk a prefix of a legal history; `path` picks how far.
            let script: [&dyn Fn(&mut PartitionRecord) -> bool; 11] = [
                &|p| p.pause(now).is_ok(),
                &|p| p.resume(now).is_ok(),
                &|p| {
                    id.as_ref()
                        .is_some_and(|id| p.begin_failover(id.as_str(), now).is_ok())
                },
                &|p| p.advance(FailoverStep::Fenced, now).is_ok(),
                &|p| p.advance(FailoverStep::Drained, now).is_ok(),
                &|p| {
                    p.advance(FailoverStep::BarrierWritten { offset }, now)
                        .is_ok()
                },
                &|p| {
                    p.fail(err.clone().unwrap_or_default(), now)
                        .and_then(|_| p.retry(now))
                        .is_ok()
                },
                &|p| {
                    p.advance(FailoverStep::BarrierPersisted { offset }, now)
                        .is_ok()
                },
                &|p| p.advance(FailoverStep::PsmCleared, now).is_ok(),
                &|p| p.complete(now).is_ok(),
                &|p| p.fail(err.clone().unwrap_or_default(), now).is_ok(),
            ];
            for step in script.iter().take(path) {
                if !step(&mut p) {
                    break;
                }
            }
            p.producers_expired = expired;
            p
        })
}

fn arb_mirror() -> impl Strategy<Value = MirrorRecord> {
    (
        "[a-zA-Z0-9 ._-]{1,16}",
        proptest::option::of("[a-f0-9-]{1,36}"),
        any::<i64>(),
        any::<bool>(),
    )
        .prop_flat_map(|(name, failover, started, paused)| {
            proptest::collection::vec(arb_partition(failover.clone()), 0..6).prop_map(
                move |mut parts| {
                    let mut seen = HashSet::new();
                    parts.retain(|p| seen.insert((p.topic.clone(), p.partition)));
                    MirrorRecord {
                        name: name.clone(),
                        started_ms: failover.as_ref().map(|_| started),
                        failover_id: failover.clone(),
                        completed_ms: None,
                        adopted_from: None,
                        paused,
                        partitions: parts,
                    }
                },
            )
        })
}

proptest! {
    #[test]
    fn round_trip_prop(m in arb_mirror()) {
        prop_assert_eq!(m.validate(), Ok(()));
        let mut m = m;
        if m.failover_id.is_some() && !m.partitions.is_empty() && m.all_stopped() {
            m.completed_ms = Some(1);
        }
        prop_assert_eq!(MirrorRecord::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = MirrorRecord::decode(&bytes);
    }

    #[test]
    fn decode_of_mutated_json_never_panics(at in 0usize..2000, byte in any::<u8>()) {
        let mut b = mirror().encode();
        let at = at % b.len();
        b[at] = byte;
        if let Ok(m) = MirrorRecord::decode(&b) {
            prop_assert_eq!(m.validate(), Ok(()));
        }
    }
}
