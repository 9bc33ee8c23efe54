//! The gateway's request and response handling as it was before the per-API exchanges
//! (`proxy/intercept.rs` and the request/response halves of `psm/tap.rs` at the commit before),
//! kept for the property test that the exchanges give byte-identical frames. Produce only (the
//! other APIs moved without changing how they are read). Test code: not compiled into the
//! gateway.

#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::metrics::ListenerKind;
use crate::mirror::controller::InFlightGuard;
use crate::mirror::policy::MirrorPolicy;
use crate::protocol::admin_refusal::AdminRefusalError;
use crate::protocol::enforce::{self, ProduceDecision, RejectedPartition, Rejection};
use crate::protocol::frame::{FrameError, RequestHeaderInfo};
use crate::protocol::produce::TopicRef;
use crate::psm::tap::PendingProduce;

use crate::cluster::ClusterView;
use crate::protocol::batch::single_client_batch;
use crate::protocol::produce::ProduceWalker;
use crate::proxy::ConnContext;
use crate::psm::registry::{BatchResult, BrokerOutcome, PsmRegistry};
use crate::psm::tap::PendingBatch;
use kafka_protocol::messages::{ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;

/// Error code UNKNOWN_TOPIC_ID (retriable: the client refreshes metadata).
const UNKNOWN_TOPIC_ID: i16 = 100;
/// Error code UNKNOWN_PRODUCER_ID: what a local write with a mirrored producer id gets.
const UNKNOWN_PRODUCER_ID: i16 = 59;
/// Error code OUT_OF_ORDER_SEQUENCE_NUMBER: what the duplicate-ack guard answers.
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

/// What to remember about a request until its response.
#[derive(Default)]
pub struct Extras {
    /// Tracked batches (PSM tap).
    pub tracked: Option<PendingProduce>,
    /// In-flight mirror produce counted per partition; released with the response.
    pub guards: Vec<InFlightGuard>,
    /// Partitions refused by the gateway, merged into the broker's response.
    pub rejected: Vec<RejectedPartition>,
    /// The request wrote to partitions that have a barrier: check the acknowledgements.
    pub guard_check: bool,
    /// Hide barriers in the Fetch or ShareFetch response.
    pub hide_barriers: bool,
}

/// What to do with one request.
pub struct Plan {
    /// The frame to send upstream (`None`: nothing goes upstream).
    pub forward: Option<Bytes>,
    /// A response the gateway answers itself (every partition refused).
    pub local_response: Option<Bytes>,
    pub extras: Extras,
}

/// A request the gateway refuses to handle at all (the connection is closed).
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    #[error("produce request not readable for enforcement: {0}")]
    Enforce(#[from] enforce::EnforceError),
    #[error("admin request not readable for read-only enforcement: {0}")]
    Admin(#[from] AdminRefusalError),
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// acks=0 leaves the failover drain nothing to wait for: refused on the mirror listener for
    /// mirror partitions (Kafka itself closes the connection of a failed acks=0 request).
    #[error("acks=0 produce to mirror partition {topic}-{partition} refused on the mirror listener: mirror writes must use acks=1 or acks=all, so a failover knows their outcome")]
    MirrorAcksZero { topic: String, partition: i32 },
}

impl Extras {
    /// The request was never sent upstream: its mirror writes are known not to be appended.
    pub fn release_unsent(self) {
        for g in self.guards {
            g.answered();
        }
    }
}

fn forward(frame: Bytes) -> Plan {
    Plan {
        forward: Some(frame),
        local_response: None,
        extras: Extras::default(),
    }
}

/// Plan one request. `acks`: a Produce request's acks (read once by the connection).
pub fn plan_request(
    ctx: &ConnContext,
    h: &RequestHeaderInfo,
    acks: Option<i16>,
    frame: Bytes,
) -> Result<Plan, InterceptError> {
    let Some(ctl) = &ctx.mirrors else {
        return Ok(plan_tap(ctx, h, frame));
    };
    match h.api_key {
        ApiKey::Produce => {
            let acks = match acks {
                Some(a) => a,
                None => {
                    crate::protocol::produce::peek_acks(h.api_version, &frame[4 + h.header_len..])?
                }
            };
            plan_produce(ctx, ctl, h, acks, frame)
        }
        _ => Ok(forward(frame)),
    }
}

fn plan_tap(ctx: &ConnContext, h: &RequestHeaderInfo, frame: Bytes) -> Plan {
    let mut p = forward(frame);
    if let (Some(psm), ApiKey::Produce) = (&ctx.psm, h.api_key) {
        if let Some(f) = &p.forward {
            p.extras.tracked = tap_on_request(
                psm,
                &ctx.cluster,
                h.api_version,
                &f[4 + h.header_len..],
                ctx.verify_crc,
            );
        }
    }
    p
}

fn plan_produce(
    ctx: &ConnContext,
    ctl: &Arc<dyn MirrorPolicy>,
    h: &RequestHeaderInfo,
    acks: i16,
    frame: Bytes,
) -> Result<Plan, InterceptError> {
    let mut guards = Vec::new();
    let mut guard_check = false;
    let kind = ctx.kind;
    let acks_zero = kind == ListenerKind::Mirror && acks == 0;
    let mut acks_zero_refused: Option<(String, i32)> = None;
    let cluster = &ctx.cluster;
    let decision = enforce::filter_produce(
        &frame,
        h.header_len,
        h.api_version,
        h.correlation_id,
        &mut |pp| {
            let p = pp.partition;
            let name = match pp.topic {
                TopicRef::Name(n) => std::borrow::Cow::Borrowed(n),
                TopicRef::Id(id) => match cluster.topic_name(&id) {
                    Some(n) => std::borrow::Cow::Owned(n),
                    None => {
                        return Some(Rejection::new(
                            UNKNOWN_TOPIC_ID,
                            format!("mirrorgate: topic id {id} is not known yet; refresh metadata and retry"),
                        ))
                    }
                },
            };
            if kind == ListenerKind::Client && ctl.barrier_offset(&name, p).is_some() {
                guard_check = true;
                if let Some(r) = refuse_mirrored_producer_id(ctl.as_ref(), &name, p, pp.records) {
                    return Some(r);
                }
            }
            match ctl.admit(kind, &name, p) {
                Ok(Some(g)) if acks_zero => {
                    g.answered();
                    acks_zero_refused.get_or_insert((name.into_owned(), p));
                    None
                }
                Ok(Some(g)) => {
                    guards.push(g);
                    None
                }
                Ok(None) => None,
                Err(r) => Some(Rejection::new(r.error_code, r.message)),
            }
        },
    )?;
    if let Some((topic, partition)) = acks_zero_refused {
        for g in guards {
            g.answered();
        }
        ctl.count_acks_zero_refused();
        return Err(InterceptError::MirrorAcksZero { topic, partition });
    }
    let mut plan = match decision {
        ProduceDecision::Forward => forward(frame),
        ProduceDecision::Rewritten { frame, rejected } => {
            let mut p = forward(frame);
            p.extras.rejected = rejected;
            p
        }
        ProduceDecision::AllRejected { response, rejected } => {
            for r in &rejected {
                tracing::debug!(topic = %r.topic, partition = r.partition, "{}", r.message);
            }
            return Ok(Plan {
                forward: None,
                local_response: response,
                extras: Extras::default(),
            });
        }
    };
    if let (Some(psm), Some(f)) = (&ctx.psm, &plan.forward) {
        let body = &f[4 + h.header_len..];
        plan.extras.tracked =
            tap_on_request(psm, &ctx.cluster, h.api_version, body, ctx.verify_crc);
        if kind == ListenerKind::Mirror {
            count_inert_barriers(ctl.as_ref(), h.api_version, body);
        }
    }
    plan.extras.guards = guards;
    plan.extras.guard_check = guard_check;
    Ok(plan)
}

/// Count barriers arriving inside mirrored produce (written by an upstream cluster's failover):
/// they are passed on as they are and do not touch the PSM (their producer id is -1).
fn count_inert_barriers(ctl: &dyn MirrorPolicy, version: i16, body: &[u8]) {
    let Ok(walker) = crate::protocol::produce::ProduceWalker::new(version, body) else {
        return;
    };
    for part in walker.flatten() {
        let (TopicRef::Name(topic), Some(records)) = (part.topic, part.records) else {
            continue;
        };
        let n = crate::protocol::batch::BatchWalker::new(records, false)
            .flatten()
            .filter(|(_, b)| crate::protocol::barrier::is_barrier_batch(b))
            .count();
        if n > 0 {
            ctl.count_barriers_seen(topic, "mirrored", n as u64);
        }
    }
}

/// Transform one response (whole frame) according to the request's extras. Runs before address
/// rewriting.
pub async fn on_response(
    ctx: &ConnContext,
    _upstream: &str,
    api: ApiKey,
    version: i16,
    _correlation_id: i32,
    mut frame: Bytes,
    extras: Extras,
) -> Result<Bytes, InterceptError> {
    if let (Some(tracked), Some(psm)) = (extras.tracked, &ctx.psm) {
        tap_on_response(psm, version, &frame, tracked);
    }
    // The broker answered: the outcome of these mirror writes is known.
    for g in extras.guards {
        g.answered();
    }
    let Some(ctl) = &ctx.mirrors else {
        return Ok(frame);
    };
    if api == ApiKey::Produce {
        if !extras.rejected.is_empty() {
            frame = enforce::merge_rejections(&frame, version, &extras.rejected)?;
        }
        if extras.guard_check {
            if let Some(f) = duplicate_ack_guard(ctl.as_ref(), &ctx.cluster, version, &frame)? {
                frame = f;
            }
        }
    }
    Ok(frame)
}

/// The `log_start_offset` sent with [`refuse_mirrored_producer_id`]'s UNKNOWN_PRODUCER_ID: not
/// −1, with which the Java producer retries the batch unchanged (Kafka's "offset not known
/// yet"), and not a real offset, which kafka-python takes for "my records were removed by
/// retention" and also retries unchanged. Any other value makes both bump their producer epoch.
const REFUSAL_LOG_START_OFFSET: i64 = -2;

/// Review F12: a local producer that got its producer id *before* the failover (so screening
/// never saw it) and whose id mirrored traffic also used in the brokers. While its epoch is not
/// above the mirrored one, whatever the broker would do with its batch is wrong: "duplicate" of
/// a mirrored batch (nothing appended), "out of order", or — worst — appended in sequence after
/// the mirrored records while its earlier batches fail, which librdkafka then reports as
/// delivered without them ever being written. So the batch is refused before it reaches the
/// broker, every time, with UNKNOWN_PRODUCER_ID: the Java producer and librdkafka bump their
/// epoch and resend with nothing lost or reordered; kafka-python bumps its epoch and reports the
/// batches it had in flight as failed. With a higher epoch the batch passes (the broker starts
/// the producer's new epoch after the barrier).
fn refuse_mirrored_producer_id(
    ctl: &dyn MirrorPolicy,
    topic: &str,
    partition: i32,
    records: Option<&[u8]>,
) -> Option<Rejection> {
    let header = crate::protocol::batch::BatchHeader::parse(records?)?;
    if !header.has_producer_id() || header.is_control() {
        return None;
    }
    // The handling before the exchanges knew only the epoch rule (review F12).
    let mirrored = ctl
        .mirrored_producer_collision(header.producer_id, Some(header.producer_epoch), None)?
        .entry();
    tracing::warn!(
        topic, partition, producer_id = header.producer_id, epoch = header.producer_epoch,
        mirrored_epoch = mirrored.max_epoch,
        "a local producer writes with a producer id mirrored traffic left in the brokers (it got the id before the failover): refused with UNKNOWN_PRODUCER_ID so that it bumps its epoch"
    );
    Some(Rejection {
        error_code: UNKNOWN_PRODUCER_ID,
        message: format!(
            "mirrorgate: producer id {} epoch {} collides with mirrored data in {topic}-{partition} (epoch {}); bump the epoch or re-initialize the producer and resend",
            header.producer_id, header.producer_epoch, mirrored.max_epoch
        ),
        log_start_offset: REFUSAL_LOG_START_OFFSET,
    })
}

/// Turn local acknowledgements below a partition's barrier into errors: the broker acknowledged
/// a retry of a mirrored batch with its old offset and appended nothing.
fn duplicate_ack_guard(
    ctl: &dyn MirrorPolicy,
    cluster: &crate::cluster::ClusterView,
    version: i16,
    frame: &Bytes,
) -> Result<Option<Bytes>, InterceptError> {
    let changed = enforce::rewrite_partition_errors(
        frame,
        version,
        &mut |name, id, partition, error, base_offset| {
            if error != 0 {
                return None;
            }
            let name = if name.is_empty() {
                cluster.topic_name(&id)?
            } else {
                name.to_string()
            };
            let barrier = ctl.barrier_offset(&name, partition)?;
            if base_offset >= barrier {
                return None;
            }
            ctl.count_duplicate_ack();
            tracing::warn!(
                topic = %name, partition, base_offset, barrier,
                "a local produce was acknowledged below the barrier (a producer-id collision with mirrored data): nothing was appended; answering an error"
            );
            Some((
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            format!(
                "mirrorgate: {name}-{partition} acknowledged this batch at offset {base_offset}, before the failover barrier at {barrier}: it was NOT written (producer-id collision with mirrored data); re-initialize the producer and resend"
            ),
        ))
        },
    )?;
    Ok(changed)
}

// The PSM tap as it was (psm/tap.rs).

fn topic_name(cluster: &ClusterView, t: TopicRef<'_>) -> Option<(String, Option<uuid::Uuid>)> {
    match t {
        TopicRef::Name(n) => Some((n.to_string(), None)),
        TopicRef::Id(id) => cluster.topic_name(&id).map(|n| (n, Some(id))),
    }
}

/// Note the tracked batches of a Produce request body (after the request header).
///
/// `acks=0` requests get no response, so the PSM cannot learn their offsets: their tracked
/// partitions are marked for a rebuild from the log instead.
pub fn tap_on_request(
    registry: &PsmRegistry,
    cluster: &ClusterView,
    version: i16,
    body: &[u8],
    verify_crc: bool,
) -> Option<PendingProduce> {
    let walker = match ProduceWalker::new(version, body) {
        Ok(w) => w,
        Err(e) => {
            tracing::debug!(error = %e, "produce request not readable by the tap; the broker decides");
            return None;
        }
    };
    let acks = walker.acks();
    let mut pending: Option<PendingProduce> = None;
    for part in walker {
        let part = match part {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "produce request not readable by the tap; the broker decides");
                break;
            }
        };
        let tracked = match part.topic {
            TopicRef::Name(n) => registry.tracks(n),
            TopicRef::Id(id) => cluster.topic_name(&id).is_some_and(|n| registry.tracks(&n)),
        };
        if !tracked {
            continue;
        }
        let Some((topic, topic_id)) = topic_name(cluster, part.topic) else {
            continue;
        };
        if acks == 0 {
            registry.mark_outcome_unknown(&topic, part.partition);
            continue;
        }
        let Some(records) = part.records else {
            continue;
        };
        match single_client_batch(records, verify_crc) {
            Ok((header, _)) => pending
                .get_or_insert_with(PendingProduce::default)
                .batches
                .push(PendingBatch {
                    topic,
                    topic_id,
                    partition: part.partition,
                    header,
                }),
            Err(e) => {
                tracing::debug!(topic, partition = part.partition, error = %e, "unreadable batch; the broker decides");
                registry.counters.batch(BatchResult::Unreadable);
            }
        }
    }
    pending
}

/// Apply the broker's answer (a whole Produce response frame, length prefix included) to the
/// tracked batches of its request.
pub fn tap_on_response(
    registry: &PsmRegistry,
    version: i16,
    frame: &Bytes,
    pending: PendingProduce,
) {
    crate::protocol::frame::counts::bump(crate::protocol::frame::counts::Event::ResponseDecode);
    let mut body = frame.slice(4..);
    let hv = ApiKey::Produce.response_header_version(version);
    let decoded = ResponseHeader::decode(&mut body, hv)
        .and_then(|_| ProduceResponse::decode(&mut body, version));
    let resp = match decoded {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a produce response; rebuilding its tracked partitions");
            for b in &pending.batches {
                registry.apply(
                    &b.topic,
                    b.partition,
                    &b.header,
                    BrokerOutcome::Unknown { error_code: -1 },
                );
            }
            return;
        }
    };
    for b in &pending.batches {
        let found = resp.responses.iter().find_map(|t| {
            let same_topic = match b.topic_id {
                Some(id) => t.topic_id == id,
                None => t.name.0.as_str() == b.topic,
            };
            if !same_topic {
                return None;
            }
            t.partition_responses
                .iter()
                .find(|p| p.index == b.partition)
        });
        let outcome = match found {
            Some(p) if p.error_code == 0 => BrokerOutcome::Appended {
                base_offset: p.base_offset,
            },
            Some(p) => BrokerOutcome::Refused {
                error_code: p.error_code,
            },
            None => BrokerOutcome::Unknown { error_code: -1 },
        };
        // A LogAppendTime topic: the broker stamped the batch with its append time, and that is
        // the producer's last timestamp in its state (review F11a).
        let append_time = found.map(|p| p.log_append_time_ms).filter(|t| *t >= 0);
        match append_time {
            Some(t) => {
                let mut header = b.header;
                header.max_timestamp = t;
                registry.apply(&b.topic, b.partition, &header, outcome);
            }
            None => {
                registry.apply(&b.topic, b.partition, &b.header, outcome);
            }
        }
    }
}
