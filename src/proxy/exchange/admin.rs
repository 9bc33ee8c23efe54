//! Admin, transaction and group requests whose entries the mirrors may refuse: on the client
//! listener the entries that name a mirror topic or partition that is not STOPPED (read-only
//! until failover); on the mirror listener the entries that name a failed-over one (review G8:
//! a mirroring tool still attached after the failover changes nothing). The rest is forwarded
//! (the original bytes when nothing is refused), and the refusals are merged into the broker's
//! answer. A transaction adding a failed-over partition with a producer id that cannot commit
//! there (review G11) is refused on the client listener too.
//!
//! A topic id the gateway does not know (DeleteTopics v6) is refused with UNKNOWN_TOPIC_ID
//! (retriable) rather than forwarded: it may be a mirror topic created since the last metadata
//! refresh, and for an id that really does not exist the broker would answer the same.
//!
//! Owns: asking the mirror controller about each entry. Must not touch: the bytes
//! (`crate::protocol::admin_refusal`).

use bytes::Bytes;

use crate::mirror::screening::Collision;
use crate::protocol::admin_refusal::{self, AdminDecision, Target, TxnProducer};
use crate::protocol::enforce::Rejection;
use crate::protocol::frame::RequestHeaderInfo;

use super::{ConnContext, ExchangeError, Step, UNKNOWN_TOPIC_ID};

/// Entries refused by the gateway, merged into the broker's response.
pub struct Pending {
    refused: Option<admin_refusal::Refused>,
}

pub fn begin(
    ctx: &ConnContext,
    h: &RequestHeaderInfo,
    frame: Bytes,
) -> Result<(Step, Pending), ExchangeError> {
    let none = Pending { refused: None };
    let Some(ctl) = &ctx.mirrors else {
        return Ok((Step::Forward(frame), none));
    };
    let op = format!("{:?}", h.api_key);
    let listener = ctx.kind;
    let cluster = &ctx.cluster;
    let refusal = |r: crate::mirror::admission::Refusal| Rejection::new(r.error_code, r.message);
    let decision = admin_refusal::plan(
        &frame,
        h.api_key,
        h.header_len,
        h.api_version,
        h.correlation_id,
        &mut |target| match target {
            Target::Topic(name) => ctl.refuse_admin(listener, &op, name, None).map(refusal),
            Target::Partition(name, p) => {
                ctl.refuse_admin(listener, &op, name, Some(p)).map(refusal)
            }
            Target::TxnPartition(name, p, txn) => ctl
                .refuse_admin(listener, &op, name, Some(p))
                .map(refusal)
                .or_else(|| colliding_transaction(ctx, name, p, txn)),
            Target::TopicId(id) => match cluster.topic_name(&id) {
                Some(name) => ctl.refuse_admin(listener, &op, &name, None).map(refusal),
                None => Some(Rejection::new(
                    UNKNOWN_TOPIC_ID,
                    format!(
                        "mirrorgate: topic id {id} is not known yet; refresh metadata and retry"
                    ),
                )),
            },
            Target::AllPartitions => ctl.refuse_admin_everywhere(listener, &op).map(refusal),
        },
    )?;
    match decision {
        AdminDecision::Forward => Ok((Step::Forward(frame), none)),
        AdminDecision::Rewritten { frame, refused } => {
            for m in &refused.messages {
                tracing::debug!(api = ?h.api_key, "{m}");
            }
            Ok((
                Step::Forward(frame),
                Pending {
                    refused: Some(refused),
                },
            ))
        }
        AdminDecision::AllRefused { response, messages } => {
            for m in &messages {
                tracing::debug!(api = ?h.api_key, "{m}");
            }
            Ok((Step::Answer(response), none))
        }
    }
}

/// Review G11: on the client listener, a transaction adding a failed-over partition with a
/// producer id whose mirrored markers left a coordinator epoch above its coordinator's is refused
/// before the coordinator records the partition: the coordinator's COMMIT or ABORT marker for it
/// would be refused and the transaction hang (with transactions v1 the partition is added before
/// any record is produced, so refusing the records alone would come too late).
fn colliding_transaction(
    ctx: &ConnContext,
    topic: &str,
    partition: i32,
    txn: TxnProducer<'_>,
) -> Option<Rejection> {
    let ctl = ctx.mirrors.as_ref()?;
    if !ctx.local() || ctl.barrier_offset(topic, partition).is_none() {
        return None;
    }
    match ctl.mirrored_producer_collision(txn.producer_id, None, Some(txn.transactional_id))? {
        Collision::Coordinator { entry, local } => Some(super::produce::coordinator_refusal(
            txn.producer_id,
            txn.transactional_id,
            topic,
            partition,
            entry.coordinator_epoch,
            local,
        )),
        Collision::Epoch(_) => None,
    }
}

impl Pending {
    pub fn finish(self, frame: Bytes) -> Result<Bytes, ExchangeError> {
        match &self.refused {
            Some(refused) => Ok(admin_refusal::merge(&frame, refused)?),
            None => Ok(frame),
        }
    }
}
