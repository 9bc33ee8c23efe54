//! The Produce exchange against a fake [`MirrorPolicy`]: what the connection forwards and
//! answers follows the policy's decisions alone, with no mirror controller, state or broker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::metrics::ListenerKind;
use crate::mirror::admission::{InFlightGuard, Refusal};
use crate::mirror::policy::MirrorPolicy;
use crate::mirror::screening::{Collision, ScreenEntry};

use super::tests::{batch, batch_of, fixture_with, handle, request_frame, response_frame};

/// A policy that mirrors `orders`, refuses partition `refuse` (of a produce, or of an admin,
/// transaction or group request) with its own message, knows a
/// barrier everywhere when `barrier` is set, and reports producer 4242 as mirrored at epoch
/// `mirrored_epoch`, if any. With `guards`, an admitted mirror-listener write comes with an
/// in-flight guard of a partition of its own (kept in `guarded`); `lapsed` is what it says of
/// admitted mirror writes right before their send.
#[derive(Default)]
pub(crate) struct FakePolicy {
    refuse: Option<i32>,
    barrier: bool,
    mirrored_epoch: Option<i16>,
    /// The coordinator epoch mirrored markers left for producer 4242, if any.
    mirrored_coordinator_epoch: Option<i32>,
    guards: bool,
    lapsed: Option<String>,
    /// What [`MirrorPolicy::mirror_send_deadline`] answers.
    pub(crate) send_deadline: Option<std::time::Duration>,
    pub(crate) guarded: Mutex<Vec<Arc<crate::mirror::admission::PartitionWrites>>>,
    admitted: Mutex<Vec<(ListenerKind, String, i32)>>,
    /// The admin, transaction and group requests asked about (listener, op, partition).
    admin_asked: Mutex<Vec<(ListenerKind, String, Option<i32>)>>,
    acks_zero_refused: AtomicUsize,
}

impl FakePolicy {
    /// Admits every write, each mirror-listener one with a guard; says `lapsed` of admitted
    /// mirror writes right before their send.
    pub(crate) fn admitting_with_guards(lapsed: Option<&str>) -> FakePolicy {
        FakePolicy {
            guards: true,
            lapsed: lapsed.map(str::to_string),
            ..FakePolicy::default()
        }
    }
}

impl MirrorPolicy for FakePolicy {
    fn is_mirror_topic(&self, topic: &str) -> bool {
        topic == "orders"
    }
    fn admit(
        &self,
        listener: ListenerKind,
        topic: &str,
        partition: i32,
    ) -> Result<Option<InFlightGuard>, Refusal> {
        self.admitted
            .lock()
            .unwrap()
            .push((listener, topic.to_string(), partition));
        if self.refuse == Some(partition) {
            return Err(Refusal {
                error_code: 44,
                message: "refused by the fake policy".into(),
                reason: "read_only",
            });
        }
        if self.guards && listener == ListenerKind::Mirror {
            let (guard, writes) = InFlightGuard::detached();
            self.guarded.lock().unwrap().push(writes);
            return Ok(Some(guard));
        }
        Ok(None)
    }
    fn admitted_mirror_writes_lapsed(&self) -> Option<String> {
        self.lapsed.clone()
    }
    fn mirror_send_deadline(&self) -> Option<std::time::Duration> {
        self.send_deadline
    }
    fn barrier_offset(&self, _: &str, _: i32) -> Option<i64> {
        self.barrier.then_some(10)
    }
    fn refuse_admin(
        &self,
        listener: ListenerKind,
        op: &str,
        topic: &str,
        partition: Option<i32>,
    ) -> Option<Refusal> {
        self.admin_asked
            .lock()
            .unwrap()
            .push((listener, op.to_string(), partition));
        (topic == "orders" && partition.is_some() && partition == self.refuse).then(|| Refusal {
            error_code: 44,
            message: format!("{op} refused by the fake policy"),
            reason: "mirror_fenced_admin",
        })
    }
    fn refuse_admin_everywhere(&self, _: ListenerKind, _: &str) -> Option<Refusal> {
        None
    }
    fn screening_active(&self) -> bool {
        false
    }
    fn screened(&self, _: i64) -> Option<ScreenEntry> {
        None
    }
    fn mirrored_producer_collision(
        &self,
        producer_id: i64,
        epoch: Option<i16>,
        transactional_id: Option<&str>,
    ) -> Option<Collision> {
        let max_epoch = self.mirrored_epoch?;
        let entry = ScreenEntry {
            max_epoch,
            last_timestamp: 0,
            added_ms: 0,
            coordinator_epoch: self.mirrored_coordinator_epoch.unwrap_or(-1),
        };
        // The coordinator of every transactional id is at epoch 5.
        (producer_id == 4242)
            .then(|| Collision::of(entry, epoch, transactional_id.map(|_| Some(5))))
            .flatten()
    }
    fn count_screened(&self) {}
    fn count_acks_zero_refused(&self) {
        self.acks_zero_refused.fetch_add(1, Ordering::SeqCst);
    }
    fn count_duplicate_ack(&self) {}
    fn count_barriers_seen(&self, _: &str, _: &str, _: u64) {}
}

/// Produce v9 of one batch (producer 4242, epoch 0) to each of `partitions` of `orders`.
pub(crate) fn request(partitions: &[i32]) -> Bytes {
    request_of(partitions, 2)
}

/// [`request`] whose batches hold `records` records of 48-byte values each.
pub(crate) fn request_of(partitions: &[i32], records: i64) -> Bytes {
    let parts = partitions
        .iter()
        .map(|p| {
            PartitionProduceData::default()
                .with_index(*p)
                .with_records(Some(batch(records)))
        })
        .collect();
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partition_data(parts)]);
    request_frame(&req, 9, 7)
}

/// The broker's answer: every one of `partitions` appended at 1000.
fn response(partitions: &[i32]) -> Bytes {
    let parts = partitions
        .iter()
        .map(|p| {
            PartitionProduceResponse::default()
                .with_index(*p)
                .with_base_offset(1000)
        })
        .collect();
    let resp = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(StrBytes::from_static_str("orders")))
        .with_partition_responses(parts)]);
    response_frame(ApiKey::Produce, &resp, 9, 7)
}

fn forwarded_partitions(frame: &Bytes) -> Vec<i32> {
    let h = crate::protocol::frame::parse_request_header(&frame[4..]).unwrap();
    let mut body = frame.slice(4 + h.header_len..);
    let req = ProduceRequest::decode(&mut body, 9).unwrap();
    req.topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter().map(|p| p.index))
        .collect()
}

/// (partition, error code, error message) of each partition of a Produce v9 response frame.
fn answered(frame: &Bytes) -> Vec<(i32, i16, Option<String>)> {
    let mut body = frame.slice(4..);
    ResponseHeader::decode(&mut body, ApiKey::Produce.response_header_version(9)).unwrap();
    let resp = ProduceResponse::decode(&mut body, 9).unwrap();
    let mut out: Vec<_> = resp
        .responses
        .iter()
        .flat_map(|t| {
            t.partition_responses.iter().map(|p| {
                (
                    p.index,
                    p.error_code,
                    p.error_message.as_ref().map(|m| m.to_string()),
                )
            })
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_partition_the_policy_refuses_is_answered_by_the_gateway_and_the_others_forwarded() {
    let policy = Arc::new(FakePolicy {
        refuse: Some(1),
        ..FakePolicy::default()
    });
    let f = fixture_with(Some(policy.clone()));
    let out = handle(&f.mirror, request(&[0, 1, 2]), response(&[0, 2]));
    assert_eq!(out.error, None);
    assert_eq!(
        forwarded_partitions(out.forwarded.as_ref().unwrap()),
        vec![0, 2]
    );
    assert_eq!(
        answered(out.response.as_ref().unwrap()),
        vec![
            (0, 0, None),
            (1, 44, Some("refused by the fake policy".into())),
            (2, 0, None)
        ]
    );
    let admitted = policy.admitted.lock().unwrap().clone();
    assert_eq!(admitted.len(), 3, "{admitted:?}");
    assert!(admitted
        .iter()
        .all(|(k, t, _)| *k == ListenerKind::Mirror && t == "orders"));
}

#[test]
fn a_request_whose_every_partition_the_policy_refuses_is_answered_without_the_broker() {
    let policy = Arc::new(FakePolicy {
        refuse: Some(0),
        ..FakePolicy::default()
    });
    let f = fixture_with(Some(policy));
    let out = handle(&f.client, request(&[0]), response(&[0]));
    assert_eq!(out.forwarded, None);
    let answer = out.answered.expect("the gateway answers");
    assert_eq!(
        answered(&answer),
        vec![(0, 44, Some("refused by the fake policy".into()))]
    );
}

#[test]
fn after_a_barrier_a_local_batch_of_a_producer_the_policy_knows_as_mirrored_is_refused_with_unknown_producer_id(
) {
    let policy = Arc::new(FakePolicy {
        barrier: true,
        mirrored_epoch: Some(0),
        ..FakePolicy::default()
    });
    let f = fixture_with(Some(policy.clone()));
    let out = handle(&f.client, request(&[0]), response(&[0]));
    let answer = out.answered.expect("refused by the gateway");
    let parts = answered(&answer);
    assert_eq!(parts.len(), 1);
    assert_eq!((parts[0].0, parts[0].1), (0, 59), "{parts:?}");
    assert!(
        policy.admitted.lock().unwrap().is_empty(),
        "refused before admission"
    );
}

#[test]
fn after_a_barrier_a_local_batch_above_the_mirrored_epoch_is_forwarded() {
    let policy = Arc::new(FakePolicy {
        barrier: true,
        mirrored_epoch: Some(-1),
        ..FakePolicy::default()
    });
    let f = fixture_with(Some(policy));
    let out = handle(&f.client, request(&[0]), response(&[0]));
    assert_eq!(out.answered, None);
    assert_eq!(
        forwarded_partitions(out.forwarded.as_ref().unwrap()),
        vec![0]
    );
}

/// An admin-style OffsetCommit of `orders` partitions `partitions` and of `plain` partition 0.
fn offset_commit(partitions: &[i32]) -> Bytes {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let topic = |name: &str, ps: &[i32]| {
        OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.into())))
            .with_partitions(
                ps.iter()
                    .map(|p| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(9)
                    })
                    .collect(),
            )
    };
    let req = kafka_protocol::messages::OffsetCommitRequest::default()
        .with_group_id(StrBytes::from_static_str("g").into())
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![topic("orders", partitions), topic("plain", &[0])]);
    request_frame(&req, 8, 7)
}

#[test]
fn on_the_mirror_listener_a_group_offset_commit_the_policy_refuses_is_answered_by_the_gateway() {
    use kafka_protocol::messages::OffsetCommitResponse;
    let policy = Arc::new(FakePolicy {
        refuse: Some(1),
        ..FakePolicy::default()
    });
    let f = fixture_with(Some(policy.clone()));
    let broker = OffsetCommitResponse::default();
    let out = handle(
        &f.mirror,
        offset_commit(&[0, 1]),
        response_frame(ApiKey::OffsetCommit, &broker, 8, 7),
    );
    assert_eq!(out.error, None);
    let mut b = out.forwarded.expect("forwarded").slice(4..);
    kafka_protocol::messages::RequestHeader::decode(&mut b, 2).unwrap();
    let fwd = kafka_protocol::messages::OffsetCommitRequest::decode(&mut b, 8).unwrap();
    let kept: Vec<(String, Vec<i32>)> = fwd
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    assert_eq!(
        kept,
        vec![("orders".into(), vec![0]), ("plain".into(), vec![0])]
    );
    let mut b = out.response.expect("answer").slice(4..);
    ResponseHeader::decode(&mut b, ApiKey::OffsetCommit.response_header_version(8)).unwrap();
    let r = OffsetCommitResponse::decode(&mut b, 8).unwrap();
    let refused: Vec<(i32, i16)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.error_code))
        })
        .collect();
    assert_eq!(refused, vec![(1, 44)]);
    // The client listener never asks: group offsets are the consumers' own there.
    let before = policy.admin_asked.lock().unwrap().len();
    let request = offset_commit(&[0, 1]);
    let out = handle(
        &f.client,
        request.clone(),
        response_frame(ApiKey::OffsetCommit, &broker, 8, 7),
    );
    assert_eq!(out.forwarded, Some(request));
    assert_eq!(policy.admin_asked.lock().unwrap().len(), before);
}

/// Review G11: with a barrier and producer 4242 mirrored with coordinator epoch 50 (the fake's
/// coordinators are at 5), a local transaction of 4242 is refused with
/// INVALID_PRODUCER_ID_MAPPING whether it adds the partition first (transactions v1) or produces
/// to it (transactions v2); an idempotent batch of 4242 above the mirrored epoch passes, and so
/// does the transaction when the mirrored coordinator epoch is not above its coordinator's.
#[test]
fn after_a_barrier_a_transaction_whose_coordinator_is_behind_the_mirrored_one_is_refused() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
    let add = request_frame(
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(StrBytes::from_static_str("tx").into())
            .with_v3_and_below_producer_id(4242.into())
            .with_v3_and_below_producer_epoch(3)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![0])]),
        3,
        7,
    );
    let produce = |transactional: bool| {
        let req = ProduceRequest::default()
            .with_transactional_id(transactional.then(|| StrBytes::from_static_str("tx").into()))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("orders")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch_of(2, transactional)))])]);
        request_frame(&req, 9, 7)
    };
    for (mirrored_coordinator_epoch, refused) in [(50, true), (5, false)] {
        let policy = Arc::new(FakePolicy {
            barrier: true,
            mirrored_epoch: Some(-1),
            mirrored_coordinator_epoch: Some(mirrored_coordinator_epoch),
            ..FakePolicy::default()
        });
        let f = fixture_with(Some(policy));
        let out = handle(
            &f.client,
            add.clone(),
            response_frame(
                ApiKey::AddPartitionsToTxn,
                &AddPartitionsToTxnResponse::default(),
                3,
                7,
            ),
        );
        let local = out.answered.map(|a| {
            let mut b = a.slice(4..);
            ResponseHeader::decode(
                &mut b,
                ApiKey::AddPartitionsToTxn.response_header_version(3),
            )
            .unwrap();
            AddPartitionsToTxnResponse::decode(&mut b, 3).unwrap()
        });
        let code = local.and_then(|r| {
            r.results_by_topic_v3_and_below
                .first()
                .and_then(|t| t.results_by_partition.first())
                .map(|p| p.partition_error_code)
        });
        assert_eq!(
            code,
            refused.then_some(49),
            "coordinator epoch {mirrored_coordinator_epoch}"
        );
        let out = handle(&f.client, produce(true), response(&[0]));
        let got = answered(
            out.answered
                .as_ref()
                .or(out.response.as_ref())
                .expect("an answer"),
        );
        let (code, message) = (got[0].1, got[0].2.clone().unwrap_or_default());
        assert_eq!(
            code,
            if refused { 49 } else { 0 },
            "coordinator epoch {mirrored_coordinator_epoch}: {message}"
        );
        assert!(
            !refused
                || message.contains("transactional id tx") && message.contains("create it again"),
            "{message}"
        );
        let out = handle(&f.client, produce(false), response(&[0]));
        assert_eq!(out.answered, None, "an idempotent batch passes");
    }
}
