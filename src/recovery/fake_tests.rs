//! The recovery over a fake pair of clusters whose quarantine partitions keep producer state as
//! a broker does (epochs fence, sequences deduplicate), with answers that can be lost and a
//! copier that can be cut short.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};

use super::service::Recoverer;
use super::tail::provenance_of;
use super::tail::tests::{data, marker};
use super::{ProduceAnswer, RecoveryError, RecoveryIo, SourceTopicShape};
use crate::client::Connector;
use crate::config::MirrorConfig;
use crate::metrics::Metrics;
use crate::mirror::report::{FailoverReport, PartitionReport};
use crate::protocol::batch::{BatchHeader, BatchWalker};
use crate::protocol::records;

#[derive(Default)]
struct Producer {
    epoch: i16,
    last_seq: i32,
    /// (first, last) sequences of the last five batches.
    recent: Vec<(i32, i32)>,
}

#[derive(Default)]
struct QPart {
    log: Vec<Bytes>,
    next: i64,
    producers: HashMap<i64, Producer>,
}

impl QPart {
    fn append(&mut self, b: &Bytes) {
        let h = BatchHeader::parse(b).unwrap();
        let mut m = BytesMut::from(&b[..]);
        m[..8].copy_from_slice(&self.next.to_be_bytes());
        self.next += i64::from(h.last_offset_delta) + 1;
        self.log.push(m.freeze());
    }
}

#[derive(Default)]
struct Fake {
    source: Mutex<HashMap<i32, Vec<Bytes>>>,
    /// The destination's mirror partitions (only what a test matches the report against).
    destination: Mutex<HashMap<i32, Vec<Bytes>>>,
    /// The source topic's id (`None`: the topic does not exist); recreated: a new one.
    source_id: Mutex<Option<String>>,
    recreated: Mutex<u32>,
    source_start: i64,
    quarantine: Mutex<HashMap<(String, i32), QPart>>,
    topics: Mutex<HashMap<String, i32>>,
    epoch: Mutex<i16>,
    /// Produces answered with an unknown outcome after the batch was appended.
    lose_answers: Mutex<u32>,
    /// Produces that fail (unknown outcome, nothing appended) once this many batches went in.
    cut_after: Mutex<Option<usize>>,
    produced: Mutex<usize>,
}

fn io_err(s: &str) -> RecoveryError {
    RecoveryError::Io(s.to_string())
}

fn concat(bs: &[Bytes]) -> Bytes {
    let mut m = BytesMut::new();
    for b in bs {
        m.extend_from_slice(b);
    }
    m.freeze()
}

impl RecoveryIo for Fake {
    async fn source_bounds(&self, _t: &str, p: i32) -> Result<(i64, i64), RecoveryError> {
        let src = self.source.lock().unwrap();
        let log = &src[&p];
        let end = log
            .last()
            .map_or(0, |b| BatchHeader::parse(b).unwrap().last_offset() + 1);
        Ok((self.source_start, end))
    }
    async fn source_batches(&self, _t: &str, p: i32, offset: i64) -> Result<Bytes, RecoveryError> {
        let v: Vec<Bytes> = self.source.lock().unwrap()[&p]
            .iter()
            .filter(|b| BatchHeader::parse(b).unwrap().last_offset() >= offset)
            .take(2)
            .cloned()
            .collect();
        Ok(concat(&v))
    }
    async fn destination_batches(
        &self,
        _t: &str,
        p: i32,
        offset: i64,
    ) -> Result<Bytes, RecoveryError> {
        let v: Vec<Bytes> = self
            .destination
            .lock()
            .unwrap()
            .get(&p)
            .into_iter()
            .flatten()
            .filter(|b| BatchHeader::parse(b).unwrap().last_offset() >= offset)
            .take(2)
            .cloned()
            .collect();
        Ok(concat(&v))
    }
    async fn quarantine_bounds(
        &self,
        t: &str,
        p: i32,
    ) -> Result<Option<(i64, i64)>, RecoveryError> {
        if !self.topics.lock().unwrap().contains_key(t) {
            return Ok(None);
        }
        let q = self.quarantine.lock().unwrap();
        Ok(Some((0, q.get(&(t.to_string(), p)).map_or(0, |q| q.next))))
    }
    async fn quarantine_batches(
        &self,
        t: &str,
        p: i32,
        offset: i64,
    ) -> Result<Bytes, RecoveryError> {
        let q = self.quarantine.lock().unwrap();
        let v: Vec<Bytes> = q
            .get(&(t.to_string(), p))
            .map(|q| {
                q.log
                    .iter()
                    .filter(|b| BatchHeader::parse(b).unwrap().last_offset() >= offset)
                    .take(3)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Ok(concat(&v))
    }
    async fn ensure_quarantine(&self, t: &str, n: i32) -> Result<(), RecoveryError> {
        self.topics
            .lock()
            .unwrap()
            .entry(t.to_string())
            .or_insert(n);
        Ok(())
    }
    async fn copier_producer(&self, _id: &str) -> Result<(i64, i16), RecoveryError> {
        let mut e = self.epoch.lock().unwrap();
        *e += 1;
        Ok((900, *e))
    }
    async fn fence(&self, t: &str, p: i32, producer: (i64, i16)) -> Result<(), RecoveryError> {
        let mut q = self.quarantine.lock().unwrap();
        let part = q.entry((t.to_string(), p)).or_default();
        let st = part.producers.entry(producer.0).or_default();
        if producer.1 < st.epoch {
            return Err(RecoveryError::Fenced {
                topic: t.into(),
                partition: p,
            });
        }
        *st = Producer {
            epoch: producer.1,
            last_seq: -1,
            recent: Vec::new(),
        };
        part.append(&marker(0, producer.0, false));
        Ok(())
    }
    async fn source_topic(&self, t: &str) -> Result<Option<SourceTopicShape>, RecoveryError> {
        Ok(self
            .source_id
            .lock()
            .unwrap()
            .clone()
            .map(|id| SourceTopicShape {
                topic: t.to_string(),
                partitions: self.source.lock().unwrap().len() as i32,
                replication_factor: 1,
                configs: vec![("retention.ms".into(), "-1".into())],
                topic_id: Some(id),
            }))
    }
    async fn source_recreate(
        &self,
        _t: &str,
        shape: &SourceTopicShape,
    ) -> Result<(), RecoveryError> {
        let mut n = self.recreated.lock().unwrap();
        *n += 1;
        for log in self.source.lock().unwrap().values_mut() {
            log.clear();
        }
        assert_eq!(shape.configs, vec![("retention.ms".into(), "-1".into())]);
        *self.source_id.lock().unwrap() = Some(format!("new-{n}"));
        Ok(())
    }
    async fn produce(&self, t: &str, p: i32, batch: Bytes) -> Result<ProduceAnswer, RecoveryError> {
        if let Some(n) = *self.cut_after.lock().unwrap() {
            if *self.produced.lock().unwrap() >= n {
                return Err(io_err("connection closed"));
            }
        }
        let h = BatchHeader::parse(&batch).unwrap();
        let mut q = self.quarantine.lock().unwrap();
        let part = q.entry((t.to_string(), p)).or_default();
        let st = part.producers.entry(h.producer_id).or_default();
        let (first, last) = (h.base_sequence, h.last_sequence());
        let code = if h.producer_epoch < st.epoch {
            47
        } else if st.recent.contains(&(first, last)) {
            46
        } else if first != st.last_seq.wrapping_add(1) {
            45
        } else {
            st.last_seq = last;
            st.recent.push((first, last));
            if st.recent.len() > 5 {
                st.recent.remove(0);
            }
            part.append(&batch);
            *self.produced.lock().unwrap() += 1;
            0
        };
        let mut lose = self.lose_answers.lock().unwrap();
        if code == 0 && *lose > 0 {
            *lose -= 1;
            return Err(io_err("answer lost"));
        }
        Ok(ProduceAnswer::Code(code))
    }
}

impl Fake {
    /// The quarantine's data records of partition `p`, as (failover, source offset).
    fn quarantined(&self, p: i32) -> Vec<(String, i64)> {
        let q = self.quarantine.lock().unwrap();
        let Some(part) = q.get(&("orders.unmirrored".to_string(), p)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for b in &part.log {
            for item in BatchWalker::fetched(b) {
                let (h, _) = item.unwrap();
                if h.is_control() {
                    continue;
                }
                for r in records::decode(b).unwrap() {
                    let pv = provenance_of(&r).expect("provenance");
                    out.push((pv.failover_id, pv.offset));
                }
            }
        }
        out
    }
}

fn mirror() -> MirrorConfig {
    let text = "destination:\n  bootstrap: [\"127.0.0.1:1\"]\nlisteners:\n  client:\n    port_base: 9092\n\
                mirrors:\n  - name: m\n    topics: [orders]\n    source:\n      bootstrap: [\"127.0.0.1:2\"]\n";
    crate::config::load_str(text, "t.yaml")
        .expect("valid")
        .mirrors
        .remove(0)
}

fn recoverer() -> std::sync::Arc<Recoverer> {
    let metrics = Metrics::new();
    Recoverer::new(
        &[mirror()],
        (Connector::plain(), vec!["127.0.0.1:1".into()]),
        std::time::Duration::from_secs(1),
        None,
        &metrics,
    )
    .expect("recoverer")
}

/// A completed report of failover `f-1` that mirrored source offsets up to `last` (per
/// partition).
fn report(last: &[Option<i64>]) -> FailoverReport {
    let mut r = FailoverReport::open("m", "f-1", "t".into(), 0, (None, None, false), vec![], None);
    r.status = "complete".into();
    r.partitions = last
        .iter()
        .enumerate()
        .map(|(p, l)| PartitionReport {
            topic: "orders".into(),
            partition: p as i32,
            last_error: None,
            last_mirrored_source_offset: *l,
            last_mirrored_destination_offset: *l,
            next_source_offset: l.map(|o| o + 1),
            barrier_offset: None,
            last_mirrored_offset: None,
            rpo_records: None,
            rpo_seconds: None,
            recoverable_records: None,
            last_known_lag_records: None,
            last_known_age_seconds: None,
            producers_expired: 0,
            transactions_aborted: vec![],
        })
        .collect();
    r
}

/// Partition 0: 10 mirrored records, then a tail of 3 plain records, a committed and an
/// aborted transaction of 2 records each, 4 more plain records, and an open transaction.
fn source() -> HashMap<i32, Vec<Bytes>> {
    let p0 = vec![
        data(0, 10, 1, false),
        data(10, 3, 1, false),
        data(13, 2, 7, true),
        data(15, 2, 8, true),
        marker(17, 7, true),
        marker(18, 8, false),
        data(19, 4, 1, false),
        data(23, 2, 9, true),
    ];
    HashMap::from([(0, p0)])
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_tail_is_copied_once_without_its_aborted_and_open_transactions_and_verified() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let rec = recoverer();
    let out = block_on(rec.recover_over(&fake, &report(&[Some(9)]), false)).expect("recovered");
    assert_eq!((out.copied, out.recoverable_records), (9, 9));
    assert!(out.verified, "{out:?}");
    let offsets: Vec<i64> = fake.quarantined(0).into_iter().map(|(_, o)| o).collect();
    assert_eq!(offsets, vec![10, 11, 12, 13, 14, 19, 20, 21, 22]);
    // Again: nothing more.
    let again = block_on(rec.recover_over(&fake, &report(&[Some(9)]), false)).expect("again");
    assert_eq!((again.copied, again.recovered_records), (0, 9));
    assert!(again.verified);
    assert_eq!(fake.quarantined(0).len(), 9);
}

/// Partition 0: 5 plain records, a transaction of producer 6 (3 records, then 2 more) the
/// agent mirrored without its marker, 2 plain records mirrored; then the tail: 2 plain
/// records and producer 6's marker (`commit` or not).
fn source_with_a_transaction_mirrored_without_its_marker(commit: bool) -> HashMap<i32, Vec<Bytes>> {
    let p0 = vec![
        data(0, 5, 1, false),
        data(5, 3, 6, true),
        data(8, 2, 1, false),
        data(10, 2, 6, true),
        data(12, 2, 1, false),
        marker(14, 6, commit),
    ];
    HashMap::from([(0, p0)])
}

/// Like [`report`] for one partition, with the failover having aborted producer 6's
/// transaction on the destination, whose offsets run `shift` ahead of the source's.
fn report_with_aborted(last: i64, shift: i64) -> FailoverReport {
    let mut r = report(&[Some(last)]);
    let p = &mut r.partitions[0];
    p.last_mirrored_destination_offset = Some(last + shift);
    p.transactions_aborted = vec![crate::mirror::state::AbortedTransaction {
        producer_id: 6,
        producer_epoch: 0,
        first_offset: 5 + shift,
    }];
    r
}

#[test]
fn a_transaction_the_source_committed_and_the_failover_aborted_is_recovered_before_the_tail() {
    let fake = Fake {
        source: Mutex::new(source_with_a_transaction_mirrored_without_its_marker(true)),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let rec = recoverer();
    let out =
        block_on(rec.recover_over(&fake, &report_with_aborted(11, 100), false)).expect("recovered");
    assert_eq!((out.copied, out.recoverable_records), (7, 7));
    assert!(out.verified, "{out:?}");
    let offsets: Vec<i64> = fake.quarantined(0).into_iter().map(|(_, o)| o).collect();
    assert_eq!(
        offsets,
        vec![5, 6, 7, 10, 11, 12, 13],
        "the transaction's records in the source's order, the plain ones mirrored left out"
    );
    let again =
        block_on(rec.recover_over(&fake, &report_with_aborted(11, 100), false)).expect("again");
    assert_eq!((again.copied, again.recovered_records), (0, 7));
}

#[test]
fn a_transaction_the_source_aborted_too_is_not_recovered() {
    let fake = Fake {
        source: Mutex::new(source_with_a_transaction_mirrored_without_its_marker(false)),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let out = block_on(recoverer().recover_over(&fake, &report_with_aborted(11, 0), false))
        .expect("recovered");
    assert_eq!((out.copied, out.recoverable_records), (2, 2));
    let offsets: Vec<i64> = fake.quarantined(0).into_iter().map(|(_, o)| o).collect();
    assert_eq!(offsets, vec![12, 13]);
}

#[test]
fn a_dry_run_lists_the_plan_and_writes_nothing() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let out = block_on(recoverer().recover_over(&fake, &report(&[Some(9)]), true)).unwrap();
    let plan = out.plan.expect("plan");
    let t = plan.totals;
    assert_eq!(
        (
            t.records,
            t.recoverable_records,
            t.committed,
            t.aborted,
            t.open
        ),
        (13, 9, 2, 2, 2)
    );
    assert_eq!(t.remaining_records, 9);
    assert!(fake.quarantine.lock().unwrap().is_empty());
    assert!(fake.topics.lock().unwrap().is_empty());
}

#[test]
fn a_copy_cut_short_continues_where_the_quarantine_ends() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        cut_after: Mutex::new(Some(1)),
        ..Fake::default()
    };
    let rec = recoverer();
    let e = block_on(rec.recover_over(&fake, &report(&[Some(9)]), false)).unwrap_err();
    assert!(e.to_string().contains("call the recovery again"), "{e}");
    assert_eq!(
        fake.quarantined(0).len(),
        3,
        "the first source batch went in"
    );
    *fake.cut_after.lock().unwrap() = None;
    let out = block_on(rec.recover_over(&fake, &report(&[Some(9)]), false)).unwrap();
    assert_eq!(out.partitions[0].copy.already_recovered, 3);
    assert_eq!(out.copied, 6);
    assert!(out.verified);
    assert_eq!(fake.quarantined(0).len(), 9, "each record once");
}

#[test]
fn a_lost_answer_is_resent_and_the_broker_keeps_one_copy() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        lose_answers: Mutex::new(2),
        ..Fake::default()
    };
    let out = block_on(recoverer().recover_over(&fake, &report(&[Some(9)]), false)).unwrap();
    assert_eq!(out.partitions[0].copy.resent_batches, 2);
    assert!(out.verified);
    assert_eq!(fake.quarantined(0).len(), 9);
}

#[test]
fn a_copier_fenced_by_a_later_one_writes_nothing_more() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let rec = recoverer();
    // The first copier got its producer (epoch 1), then paused; a second one (epoch 2) ran.
    let stale = block_on(fake.copier_producer("x")).unwrap();
    block_on(rec.recover_over(&fake, &report(&[Some(9)]), false)).unwrap();
    // The paused copier's next write is refused, whatever its sequence.
    let batch = data(0, 1, stale.0, false);
    let mut m = BytesMut::from(&batch[..]);
    m[51..53].copy_from_slice(&stale.1.to_be_bytes());
    let answer = block_on(fake.produce("orders.unmirrored", 0, m.freeze())).unwrap();
    assert_eq!(answer, ProduceAnswer::Code(47));
    assert_eq!(fake.quarantined(0).len(), 9);
}

#[test]
fn the_whole_partition_is_the_tail_when_nothing_was_mirrored() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let out = block_on(recoverer().recover_over(&fake, &report(&[None]), true)).unwrap();
    assert_eq!(out.plan.unwrap().totals.recoverable_records, 19);
}

#[test]
fn offsets_removed_from_the_source_are_warned_about() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        source_start: 13,
        ..Fake::default()
    };
    let out = block_on(recoverer().recover_over(&fake, &report(&[Some(9)]), true)).unwrap();
    let plan = out.plan.unwrap();
    assert_eq!(plan.totals.offsets_removed, 3);
    assert!(
        plan.warnings[0].contains("3 offsets of the tail (10..13)"),
        "{:?}",
        plan.warnings
    );
    assert_eq!(plan.totals.recoverable_records, 6);
}

#[test]
fn a_report_still_in_progress_or_of_a_mirror_without_source_is_refused() {
    let rec = recoverer();
    let mut r = report(&[Some(9)]);
    r.status = "in_progress".into();
    let e = block_on(rec.unmirrored(&r)).unwrap_err();
    assert!(matches!(e, RecoveryError::NotComplete(_)), "{e}");
    let mut r = report(&[Some(9)]);
    r.mirror = "other".into();
    assert!(matches!(
        block_on(rec.unmirrored(&r)),
        Err(RecoveryError::UnknownMirror(_))
    ));
}

#[test]
fn the_old_source_is_realigned_only_once_its_tail_is_recovered_and_verified() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let rec = recoverer();
    let e = block_on(rec.realign_over(&fake, &report(&[Some(9)]), false)).unwrap_err();
    assert!(
        e.to_string().contains("0 of 9 recoverable records"),
        "nothing recovered yet: {e}"
    );
    block_on(rec.recover_over(&fake, &report(&[Some(9)]), false)).unwrap();
    let plan = block_on(rec.realign_over(&fake, &report(&[Some(9)]), true)).unwrap();
    assert_eq!(plan.actions["orders"], "would_recreate");
    assert_eq!(
        *fake.recreated.lock().unwrap(),
        0,
        "a dry run changes nothing"
    );
    let done = block_on(rec.realign_over(&fake, &report(&[Some(9)]), false)).unwrap();
    assert_eq!(done.actions["orders"], "recreated");
    assert_eq!(done.topics[0].topic_id.as_deref(), Some("old"));
    assert_eq!(*fake.recreated.lock().unwrap(), 1);
}

#[test]
fn a_realignment_refuses_a_source_written_to_after_the_recovery() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let rec = recoverer();
    block_on(rec.recover_over(&fake, &report(&[Some(9)]), false)).unwrap();
    fake.source
        .lock()
        .unwrap()
        .get_mut(&0)
        .unwrap()
        .push(data(25, 2, -1, false));
    let e = block_on(rec.realign_over(&fake, &report(&[Some(9)]), false)).unwrap_err();
    assert!(matches!(e, RecoveryError::NotRecovered(_)), "{e}");
    assert_eq!(*fake.recreated.lock().unwrap(), 0);
}

#[test]
fn a_realignment_cut_short_resumes_with_the_recorded_topics_and_a_recovery_after_it_is_refused() {
    let fake = Fake {
        source: Mutex::new(source()),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let rec = recoverer();
    let mut r = report(&[Some(9)]);
    r.recovery = Some(crate::mirror::report::RecoveryRecord {
        realign_started_ms: Some(1),
        source_topics: vec![SourceTopicShape {
            topic: "orders".into(),
            partitions: 1,
            replication_factor: 1,
            configs: vec![("retention.ms".into(), "-1".into())],
            topic_id: Some("old".into()),
        }],
        ..Default::default()
    });
    // Deleted before the cut: the topic is gone; it is created from the recorded shape.
    *fake.source_id.lock().unwrap() = None;
    let done = block_on(rec.realign_over(&fake, &r, false)).unwrap();
    assert_eq!(done.actions["orders"], "recreated");
    // Created before the cut (another id): left alone.
    let done = block_on(rec.realign_over(&fake, &r, false)).unwrap();
    assert_eq!(done.actions["orders"], "already_recreated");
    assert!(matches!(
        block_on(rec.recover_over(&fake, &r, false)),
        Err(RecoveryError::Realigned(1))
    ));
}

/// The source batch `b` as the agent copies it onto the destination: the same bytes at an
/// offset `shift` further (the CRC does not cover the base offset).
fn copied_at(b: &Bytes, shift: i64) -> Bytes {
    let base = BatchHeader::parse(b).unwrap().base_offset + shift;
    let mut m = BytesMut::from(&b[..]);
    m[..8].copy_from_slice(&base.to_be_bytes());
    m.freeze()
}

/// A report whose offset map ends at source offset 9 (destination 109), while the destination's
/// data reaches destination offset `log_last` (finding R2: the map was published before the
/// agent's owner copied more, and not matched at completion).
fn report_short_of_the_destination(log_last: i64) -> FailoverReport {
    let mut r = report(&[Some(9)]);
    let p = &mut r.partitions[0];
    p.last_mirrored_destination_offset = Some(109);
    p.last_mirrored_offset = Some(log_last);
    r
}

#[test]
fn a_tail_starts_after_what_the_destination_holds_beyond_the_reports_offset_map() {
    let src = source();
    let destination = vec![copied_at(&src[&0][0], 100), copied_at(&src[&0][1], 100)];
    let fake = Fake {
        source: Mutex::new(src),
        destination: Mutex::new(HashMap::from([(0, destination)])),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let rec = recoverer();
    let report = report_short_of_the_destination(112);
    let plan = block_on(rec.recover_over(&fake, &report, true)).expect("listed");
    let warnings = plan.plan.expect("a dry run's plan").warnings;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("source offsets up to 12, beyond the report's 9")),
        "{warnings:?}"
    );
    let out = block_on(rec.recover_over(&fake, &report, false)).expect("recovered");
    assert!(out.verified, "{out:?}");
    let offsets: Vec<i64> = fake.quarantined(0).into_iter().map(|(_, o)| o).collect();
    assert_eq!(
        offsets,
        vec![13, 14, 19, 20, 21, 22],
        "offsets 10-12 are on the destination already"
    );
}

#[test]
fn a_destination_batch_that_is_not_the_sources_leaves_the_tail_at_the_reports_offset_and_says_so() {
    let src = source();
    let other = data(110, 3, 99, false);
    let destination = vec![copied_at(&src[&0][0], 100), other];
    let fake = Fake {
        source: Mutex::new(src),
        destination: Mutex::new(HashMap::from([(0, destination)])),
        source_id: Mutex::new(Some("old".into())),
        ..Fake::default()
    };
    let plan =
        block_on(recoverer().recover_over(&fake, &report_short_of_the_destination(112), true))
            .expect("listed");
    let listing = plan.plan.expect("a dry run's plan");
    assert!(
        listing
            .warnings
            .iter()
            .any(|w| w.contains("is not the source's at offset 12")),
        "{:?}",
        listing.warnings
    );
    assert_eq!(listing.partitions[0].tail.from_offset, 10);
}
