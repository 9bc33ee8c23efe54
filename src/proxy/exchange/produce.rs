//! Produce: one walk of the request, one decode of the response.
//!
//! Request: a [`ProduceView`] is built in one walk of the body (only when mirrors or the PSM are
//! configured): topics resolved once per topic (name, and the id's name from v13; whether the
//! topic is tracked: the topic router, once per topic), and per partition the facts of its
//! batches that the tap and the barrier count need. Then, in request order per partition:
//! enforcement (unknown topic id, the duplicate-ack guard's producer-id check, admission by the
//! mirror controller for mirror topics), the PSM tap (tracked partitions that are forwarded), and
//! on the mirror listener the count of barriers arriving inside mirrored produce. Rejected
//! partitions are cut out of the request (the one re-encode of a request, only then); every
//! partition rejected → the gateway answers itself.
//!
//! Response: held as an [`Edited`] `ProduceResponse`, decoded at most once when the first step
//! needs it; the tap reads it, the rejection merge and the duplicate-ack guard edit it, the
//! address rewrite (v10+ `node_endpoints`) edits it; it is encoded once, only if something
//! changed it.
//!
//! Owns: the per-request Produce state ([`Pending`]) and the order of the steps. Must not touch:
//! the bytes' layout (`crate::protocol::{produce, enforce, rewrite}`), the decisions (the mirror
//! controller's admission, the PSM registry).

use std::borrow::Cow;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ProduceResponse};

use crate::metrics::ListenerKind;
use crate::mirror::admission::InFlightGuard;
use crate::mirror::fault_hooks::Sabotage;
use crate::mirror::policy::MirrorPolicy;
use crate::mirror::screening::Collision;
use crate::protocol::batch::BatchHeader;
use crate::protocol::enforce::{self, RejectedPartition, Rejection};
use crate::protocol::frame::{Edited, FrameError, RequestHeaderInfo};
use crate::protocol::produce::{BatchQuestions, ProduceView, TopicRef};
use crate::psm::tap::{self, PendingProduce};

use super::{ConnContext, ExchangeError, Step, UNKNOWN_TOPIC_ID};

/// Error code UNKNOWN_PRODUCER_ID: what a local write with a mirrored producer id gets.
const UNKNOWN_PRODUCER_ID: i16 = 59;
/// Error code INVALID_PRODUCER_ID_MAPPING: what a local transaction gets whose producer id the
/// coordinator can never commit (review G11).
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
/// Error code OUT_OF_ORDER_SEQUENCE_NUMBER: what the duplicate-ack guard answers.
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

/// What a Produce request leaves for its response.
#[derive(Default)]
pub struct Pending {
    /// Tracked batches (PSM tap).
    tracked: Option<PendingProduce>,
    /// In-flight mirror produce counted per partition; released with the response.
    guards: Vec<InFlightGuard>,
    /// Partitions refused by the gateway, merged into the broker's response.
    rejected: Vec<RejectedPartition>,
    /// The request wrote to partitions that have a barrier: check the acknowledgements.
    guard_check: bool,
}

/// A topic's name and whether it belongs to a mirror (tracked by the PSM): the topic router,
/// asked once for the topic (a forward listener's source side: the name alone).
pub(super) fn resolve<'a>(ctx: &ConnContext, t: TopicRef<'a>) -> (Option<Cow<'a, str>>, bool) {
    if let Some(psm) = &ctx.psm {
        return tap::resolve(psm, &ctx.cluster, t);
    }
    let name = match t {
        TopicRef::Name(n) => Some(Cow::Borrowed(n)),
        TopicRef::Id(id) => ctx.cluster.topic_name(&id).map(Cow::Owned),
    };
    let mirror = match (&ctx.mirrors, name.as_deref()) {
        (Some(ctl), Some(n)) => ctl.is_mirror_topic(n),
        _ => false,
    };
    (name, mirror)
}

/// Begin a Produce exchange (`acks` read by the connection).
pub fn begin(
    ctx: &ConnContext,
    h: &RequestHeaderInfo,
    acks: i16,
    frame: Bytes,
) -> Result<(Step, Pending), ExchangeError> {
    if ctx.psm.is_none() && ctx.mirrors.is_none() {
        return Ok((Step::Forward(frame), Pending::default()));
    }
    let version = h.api_version;
    let body_start = match &ctx.mirrors {
        Some(_) => enforce::check_request(&frame, h.header_len, version)?,
        None => 4 + h.header_len,
    };
    let kind = ctx.kind;
    let tap_on = ctx.psm.is_some();
    let count_barriers = tap_on && ctx.mirrors.is_some() && kind == ListenerKind::Mirror;
    let verify_crc = ctx.verify_crc;
    // The view borrows the bytes through a second handle, so the frame itself can move on.
    let held = frame.clone();
    let built = ProduceView::build(
        version,
        &held[body_start..],
        &mut |t| resolve(ctx, t),
        &|t| BatchQuestions {
            single: tap_on && t.mirror && acks != 0,
            verify_crc,
            // Barriers inside mirrored produce are counted for topics named by name.
            barriers: count_barriers && matches!(t.topic, TopicRef::Name(_)),
        },
    );
    let Some(ctl) = &ctx.mirrors else {
        // The PSM alone: the tap reads what it can; the broker decides the rest.
        let tracked = match (&built, &ctx.psm) {
            (Ok(view), Some(psm)) => tap::on_view(psm, view, &|_| true),
            (Err(e), _) => {
                tracing::debug!(error = %e, "produce request not readable by the tap; the broker decides");
                None
            }
            _ => None,
        };
        let pending = Pending {
            tracked,
            ..Pending::default()
        };
        return Ok((Step::Forward(frame), pending));
    };
    let view = built.map_err(enforce::EnforceError::from)?;
    let mut pending = Pending::default();
    let mut rejected_at: Vec<usize> = Vec::new();
    let mut acks_zero_refused: Option<(String, i32)> = None;
    let acks_zero = kind == ListenerKind::Mirror && acks == 0;
    for (i, p) in view.partitions.iter().enumerate() {
        let t = view.topic_of(p);
        let rejection = decide(
            ctl.as_ref(),
            kind,
            t.topic,
            t.name.as_deref(),
            t.mirror,
            p.partition,
            p.records,
            view.transactional_id,
            acks_zero,
            ctx.forward.as_deref(),
            &mut pending,
            &mut acks_zero_refused,
        );
        if let Some(rej) = rejection {
            pending
                .rejected
                .push(enforce::rejected_partition(t.topic, p.partition, rej));
            rejected_at.push(i);
        }
    }
    // A malformed partition refuses the whole request (admitted writes before it were never
    // sent: their guards are dropped unanswered, as for any request that fails here).
    if let Some(e) = &view.error {
        return Err(enforce::EnforceError::from(e.clone()).into());
    }
    let total = view.partitions.len();
    let all_rejected = !rejected_at.is_empty() && rejected_at.len() == total;
    let step = if rejected_at.is_empty() {
        Step::Forward(frame)
    } else if all_rejected && acks == 0 {
        Step::Nothing
    } else if all_rejected {
        Step::Answer(enforce::all_rejected_response(
            version,
            h.correlation_id,
            &pending.rejected,
        )?)
    } else {
        Step::Forward(enforce::trim_request(
            &frame,
            body_start,
            version,
            &rejected_at,
            total,
        )?)
    };
    if let Some((topic, partition)) = acks_zero_refused {
        for g in pending.guards {
            g.answered();
        }
        ctl.count_acks_zero_refused();
        return Err(ExchangeError::MirrorAcksZero { topic, partition });
    }
    if all_rejected {
        for r in &pending.rejected {
            tracing::debug!(topic = %r.topic, partition = r.partition, "{}", r.message);
        }
        return Ok((step, Pending::default()));
    }
    let forwarded = |i: usize| rejected_at.binary_search(&i).is_err();
    if let Some(psm) = &ctx.psm {
        pending.tracked = tap::on_view(psm, &view, &forwarded);
    }
    if count_barriers {
        // Barriers written by an upstream cluster's failover, arriving inside mirrored produce:
        // passed on as they are; they do not touch the PSM (their producer id is -1).
        for (i, p) in view.partitions.iter().enumerate() {
            let n = p.batches.barriers;
            if n > 0 && forwarded(i) {
                if let TopicRef::Name(topic) = view.topic_of(p).topic {
                    ctl.count_barriers_seen(topic, "mirrored", n as u64);
                }
            }
        }
    }
    Ok((step, pending))
}

/// The enforcement decision for one partition: `Some` refuses it. Admitted mirror writes leave
/// their in-flight guard in `pending`.
#[allow(clippy::too_many_arguments)]
fn decide(
    ctl: &dyn MirrorPolicy,
    kind: ListenerKind,
    topic: TopicRef<'_>,
    name: Option<&str>,
    mirror: bool,
    partition: i32,
    records: Option<&[u8]>,
    transactional_id: Option<&str>,
    acks_zero: bool,
    forward: Option<&crate::proxy::forward::ForwardRoute>,
    pending: &mut Pending,
    acks_zero_refused: &mut Option<(String, i32)>,
) -> Option<Rejection> {
    let Some(name) = name else {
        let id = match topic {
            TopicRef::Id(id) => id,
            TopicRef::Name(_) => uuid::Uuid::nil(),
        };
        return Some(Rejection::new(
            UNKNOWN_TOPIC_ID,
            format!("mirrorgate: topic id {id} is not known yet; refresh metadata and retry"),
        ));
    };
    if kind != ListenerKind::Mirror && ctl.barrier_offset(name, partition).is_some() {
        let header = records.and_then(BatchHeader::parse);
        if !forwarded_producer(forward, header.as_ref(), name, partition) {
            pending.guard_check = true;
            // With another mirroring tool, a forwarded producer's own id is screened at the
            // switch (`crate::proxy::forward`): refused the same way, said differently.
            let session_not_mirrored = header.is_some_and(|h| {
                forward.is_some_and(|r| !r.owns_state() && r.came_through(h.producer_id))
            });
            if let Some(r) = refuse_mirrored_producer_id(
                ctl,
                (name, partition),
                header,
                transactional_id,
                session_not_mirrored,
            ) {
                return Some(r);
            }
        }
    }
    if !mirror {
        // Not a mirror topic: admission has nothing to say (the router was asked once).
        return None;
    }
    match ctl.admit(kind, name, partition) {
        Ok(Some(g)) if acks_zero => {
            g.answered();
            acks_zero_refused.get_or_insert((name.to_string(), partition));
            None
        }
        Ok(Some(g)) => {
            pending.guards.push(g);
            None
        }
        Ok(None) => None,
        Err(r) => Some(Rejection::new(r.error_code, r.message)),
    }
}

/// Whether the batch of `records` is a forward listener's forwarded producer's: it continues
/// on the destination the state the agent copied for it, which it owns (`crate::proxy::forward`).
fn forwarded_producer(
    forward: Option<&crate::proxy::forward::ForwardRoute>,
    header: Option<&BatchHeader>,
    topic: &str,
    partition: i32,
) -> bool {
    let (Some(route), Some(h)) = (forward, header) else {
        return false;
    };
    // A transactional batch never: its transactional id's session is the source coordinator's,
    // which the destination's does not know (the producer initializes again there). Passed,
    // it would open a transaction the destination's coordinator never ends, or wait for ever
    // on the destination's verification of it.
    h.has_producer_id()
        && !h.is_transactional()
        && route.is_forwarded(h.producer_id, topic, partition)
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
///
/// Review G11: a *transactional* batch of such an id whose transactional id's coordinator is
/// behind the coordinator epoch mirrored markers left for the id (or not known) is refused
/// whatever its epoch, with INVALID_PRODUCER_ID_MAPPING: the partition would refuse the
/// coordinator's markers and the transaction hang. Clients treat it as fatal: the application
/// creates its producer again, and the new producer's InitProducerId is screened, which gets
/// the transactional id another producer id (`proxy::exchange::screen`). UNKNOWN_PRODUCER_ID would not
/// do: a Java client with transactions v2 bumps its epoch with EndTxn, without InitProducerId,
/// and would be refused again and again.
///
/// `session_not_mirrored`: the id is a forward listener's producer's own, screened at the
/// switch because another tool mirrored its records (`crate::proxy::forward`); refused the
/// same way, and said so.
fn refuse_mirrored_producer_id(
    ctl: &dyn MirrorPolicy,
    (topic, partition): (&str, i32),
    header: Option<BatchHeader>,
    transactional_id: Option<&str>,
    session_not_mirrored: bool,
) -> Option<Rejection> {
    let header = header?;
    if !header.has_producer_id() || header.is_control() {
        return None;
    }
    let transactional_id = transactional_id.filter(|_| header.is_transactional());
    let collision = ctl.mirrored_producer_collision(
        header.producer_id,
        Some(header.producer_epoch),
        transactional_id,
    )?;
    let mirrored = collision.entry();
    if let Collision::Coordinator { local, .. } = collision {
        return Some(coordinator_refusal(
            header.producer_id,
            transactional_id.unwrap_or_default(),
            topic,
            partition,
            mirrored.coordinator_epoch,
            local,
        ));
    }
    if session_not_mirrored {
        tracing::info!(
            topic, partition, producer_id = header.producer_id, epoch = header.producer_epoch,
            "a forwarded producer's batch on the destination refused with UNKNOWN_PRODUCER_ID: another tool mirrored its records, so it bumps its epoch"
        );
        return Some(Rejection {
            error_code: UNKNOWN_PRODUCER_ID,
            message: format!(
                "mirrorgate: producer id {} epoch {} went on from the source through the forward listener, but another tool mirrored {topic}-{partition} under its own producer ids, so the destination does not know this producer's session; bump the epoch or re-initialize the producer and resend",
                header.producer_id, header.producer_epoch
            ),
            log_start_offset: REFUSAL_LOG_START_OFFSET,
        });
    }
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

/// Review G11: the refusal of a transaction of `transactional_id` (producer `producer_id`,
/// which it got before the failover) writing to, or adding, failed-over `topic`-`partition`,
/// where mirrored markers left the id coordinator epoch `mirrored`, above its coordinator's
/// (`local`; `None`: not known): INVALID_PRODUCER_ID_MAPPING, with the fix.
pub(super) fn coordinator_refusal(
    producer_id: i64,
    transactional_id: &str,
    topic: &str,
    partition: i32,
    mirrored: i32,
    local: Option<i32>,
) -> Rejection {
    let local = local.map_or_else(|| "not known".to_string(), |l| l.to_string());
    tracing::warn!(
        topic, partition, producer_id, transactional_id, mirrored_coordinator_epoch = mirrored,
        coordinator_epoch = %local,
        "a local transaction uses a producer id whose mirrored transaction markers carry a coordinator epoch above its own coordinator's (it got the id before the failover): refused with INVALID_PRODUCER_ID_MAPPING so that the producer re-initialises"
    );
    Rejection {
        error_code: INVALID_PRODUCER_ID_MAPPING,
        message: format!(
            "mirrorgate: producer id {producer_id} of transactional id {transactional_id} collides with mirrored transactions in {topic}-{partition}, whose markers carry coordinator epoch {mirrored} (this coordinator's: {local}): its commits would hang; close the producer and create it again (initTransactions gets the transactional id a producer id that can commit)"
        ),
        log_start_offset: REFUSAL_LOG_START_OFFSET,
    }
}

/// The decoded response, checked for the edits of enforcement (they must read back as
/// received).
fn for_enforcement(
    resp: &mut Edited<ProduceResponse>,
    version: i16,
) -> Result<(), enforce::EnforceError> {
    let raw = resp.raw().clone();
    let d = resp.get().map_err(|e| enforce::EnforceError::Decode {
        what: "produce response",
        reason: match e {
            FrameError::BadResponse(r) => r,
            other => other.to_string(),
        },
    })?;
    enforce::check_readback(&raw, version, d)
}

impl Pending {
    /// Whether the request holds admitted mirror writes.
    pub fn holds_mirror_writes(&self) -> bool {
        !self.guards.is_empty()
    }

    /// The request was never sent upstream: its mirror writes are known not to be appended.
    pub fn release_unsent(self) {
        for g in self.guards {
            g.answered();
        }
    }

    /// The broker's response `frame` → the frame for the client.
    pub fn finish(
        self,
        ctx: &ConnContext,
        version: i16,
        frame: Bytes,
    ) -> Result<Bytes, ExchangeError> {
        let hv = ApiKey::Produce.response_header_version(version);
        let mut resp = Edited::<ProduceResponse>::new(frame, hv, version);
        if let (Some(tracked), Some(psm)) = (self.tracked, &ctx.psm) {
            let decoded = resp.get().map(|d| &d.body).map_err(|e| e.to_string());
            tap::on_response(psm, decoded, tracked);
        }
        // The broker answered: the outcome of these mirror writes is known.
        for g in self.guards {
            g.answered();
        }
        if let Some(ctl) = &ctx.mirrors {
            if !self.rejected.is_empty() {
                for_enforcement(&mut resp, version)?;
                let rejected = &self.rejected;
                resp.edit_with(|r| {
                    enforce::add_rejections(r, version, rejected);
                    true
                })?;
            }
            if self.guard_check {
                for_enforcement(&mut resp, version)?;
                resp.edit_with(|r| duplicate_ack_guard(ctl.as_ref(), &ctx.cluster, version, r))?;
            }
        }
        rewrite_hints(ctx, version, &mut resp)?;
        resp.into_frame().map_err(ExchangeError::Rewrite)
    }
}

/// The KIP-951 hints of a Produce answer (v10+) mapped to this listener's ports, and a virtual
/// cluster's leader epochs hidden where its map says so: edited, so encoded again, only when
/// the answer carries some.
pub(super) fn rewrite_hints(
    ctx: &ConnContext,
    version: i16,
    resp: &mut Edited<ProduceResponse>,
) -> Result<(), ExchangeError> {
    use crate::protocol::rewrite::AddressMap;
    if !crate::protocol::rewrite::needs_rewrite(ApiKey::Produce, version) {
        return Ok(());
    }
    let d = resp.get().map_err(ExchangeError::Rewrite)?;
    let epochs = !ctx.address_map.produce_hint_epochs()
        && d.body
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .any(|p| p.current_leader.leader_epoch >= 0);
    if d.body.node_endpoints.is_empty() && !epochs {
        return Ok(());
    }
    let mut unmapped = 0;
    resp.edit_with(|r| {
        unmapped = crate::protocol::rewrite::map_produce_endpoints(r, &ctx.address_map);
        true
    })
    .map_err(ExchangeError::Rewrite)?;
    super::metadata::endpoints_unmapped(ctx, unmapped);
    Ok(())
}

/// Turn local acknowledgements below a partition's barrier into errors: the broker acknowledged
/// a retry of a mirrored batch with its old offset and appended nothing. Whether it changed any.
fn duplicate_ack_guard(
    ctl: &dyn MirrorPolicy,
    cluster: &crate::cluster::ClusterView,
    version: i16,
    resp: &mut ProduceResponse,
) -> bool {
    enforce::mark_partition_errors(
        resp,
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
            if base_offset >= barrier || Sabotage::Screening.is_on() {
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
    )
}
