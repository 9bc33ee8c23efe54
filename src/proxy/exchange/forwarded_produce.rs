//! Produce on a forward listener's source side: the request goes to the source as it is, and
//! the source's acknowledgements are noted in the mirror's ledger
//! ([`crate::mirror::forwarded_acks`]), so that a failover report can name, per forwarded
//! producer, the acknowledged records the destination lacks.
//!
//! Request: one walk of the body ([`ProduceView`]), each topic named once (a v13 topic id through
//! the source's cluster view, which learns the ids from the Metadata answers of this listener),
//! and per partition the header of its batch (Produce v3+ carries one). Response: decoded once;
//! each partition without an error notes its batch at the answer's base offset; the virtual
//! cluster's leader hints are rewritten on that same decoded answer, which is encoded again only
//! when a hint changed.
//!
//! Owns: pairing a forwarded Produce's batches with the source's answers. Must not touch: the
//! ledger's arithmetic (`crate::mirror::forwarded_acks`), the request's bytes (sent as they are).

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ProduceResponse};

use crate::mirror::forwarded_acks::{AckedBatch, ForwardedAcks};
use crate::protocol::batch::BatchHeader;
use crate::protocol::frame::{Edited, RequestHeaderInfo};
use crate::protocol::produce::{BatchQuestions, ProduceView, TopicRef};

use super::{ConnContext, ExchangeError, Step};

/// A topic of the request: as named there, and its name (`None`: an id the view does not know).
struct Topic {
    id: Option<uuid::Uuid>,
    name: Option<String>,
}

/// What a forwarded Produce request leaves for its answer.
pub struct Pending {
    topics: Vec<Topic>,
    /// (index in `topics`, partition, the batch's header).
    batches: Vec<(usize, i32, BatchHeader)>,
}

/// Begin a Produce on the source side: the frame goes as it is; its batches are noted (nothing
/// when the request is not readable, or acks=0 leaves no answer).
pub fn begin(ctx: &ConnContext, h: &RequestHeaderInfo, frame: Bytes) -> (Step, Option<Pending>) {
    let held = frame.clone();
    let body = &held[4 + h.header_len..];
    let view = match ProduceView::build(
        h.api_version,
        body,
        &mut |t| super::produce::resolve(ctx, t),
        &|_| BatchQuestions::default(),
    ) {
        Ok(v) if v.acks != 0 => v,
        Ok(_) => return (Step::Forward(frame), None),
        Err(e) => {
            tracing::debug!(error = %e, "forwarded produce request not readable: its acknowledgements are not noted");
            return (Step::Forward(frame), None);
        }
    };
    let topics = view
        .topics
        .iter()
        .map(|t| Topic {
            id: match t.topic {
                TopicRef::Id(id) => Some(id),
                TopicRef::Name(_) => None,
            },
            name: t.name.as_deref().map(str::to_string),
        })
        .collect();
    let batches: Vec<(usize, i32, BatchHeader)> = view
        .partitions
        .iter()
        .filter_map(|p| Some((p.topic, p.partition, BatchHeader::parse(p.records?)?)))
        .collect();
    drop(view);
    // A transactional batch opens (or continues) its producer's transaction through the
    // listener: a switchover's hold lets it end.
    if let Some(route) = ctx.forward_to_source() {
        for (_, _, b) in batches.iter().filter(|(_, _, b)| b.is_transactional()) {
            route.note_transaction(b.producer_id);
        }
    }
    (Step::Forward(frame), Some(Pending { topics, batches }))
}

impl Pending {
    /// Note the batches the source acknowledged in `resp`.
    fn note(&self, acks: &ForwardedAcks, resp: &ProduceResponse) {
        // The broker answers in the request's order: each answer is looked for at the next
        // batch first, and searched for only when it is not there (no quadratic walk of a
        // request of a thousand partitions).
        let mut next = 0;
        for t in &resp.responses {
            let topic = self.topics.iter().position(|q| match q.id {
                Some(id) => id == t.topic_id,
                None => q.name.as_deref() == Some(t.name.0.as_str()),
            });
            let Some(ti) = topic else { continue };
            for p in t.partition_responses.iter().filter(|p| p.error_code == 0) {
                let here = |k: &usize| {
                    let (i, part, _) = &self.batches[*k];
                    *i == ti && *part == p.index
                };
                let Some(k) = Some(next)
                    .filter(|k| *k < self.batches.len() && here(k))
                    .or_else(|| (0..self.batches.len()).find(here))
                else {
                    continue;
                };
                next = k + 1;
                let h = &self.batches[k].2;
                let Some(name) = &self.topics[ti].name else {
                    acks.note_unnamed();
                    continue;
                };
                let (producer_id, first_sequence) = if h.has_producer_id() {
                    (h.producer_id, h.base_sequence)
                } else {
                    (-1, -1)
                };
                acks.note(
                    name,
                    p.index,
                    AckedBatch {
                        producer_id,
                        producer_epoch: h.producer_epoch,
                        first_sequence,
                        first_offset: p.base_offset,
                        records: h.last_offset_delta + 1,
                    },
                );
            }
        }
    }

    /// Note the epoch of each producer that wrote a batch of the request (one look per run of
    /// batches of the same producer).
    fn note_epochs(&self, route: &crate::proxy::forward::ForwardRoute) {
        let mut last = None;
        for (_, _, h) in self.batches.iter().filter(|(_, _, h)| h.has_producer_id()) {
            let now = (h.producer_id, h.producer_epoch);
            if last != Some(now) {
                route.note_epoch(now.0, now.1);
                last = Some(now);
            }
        }
    }

    /// Finish with the source's answer: the acknowledgements noted, the leader hints rewritten.
    pub fn finish(
        self,
        ctx: &ConnContext,
        version: i16,
        frame: Bytes,
    ) -> Result<Bytes, ExchangeError> {
        let hv = ApiKey::Produce.response_header_version(version);
        let mut resp = Edited::<ProduceResponse>::new(frame, hv, version);
        let d = resp.get().map_err(ExchangeError::Rewrite)?;
        if let Some(route) = &ctx.forward {
            self.note(route.acks(), &d.body);
            // With another mirroring tool the producers are screened at the switch, at their
            // highest epoch.
            self.note_epochs(route);
        }
        super::produce::rewrite_hints(ctx, version, &mut resp)?;
        resp.into_frame().map_err(ExchangeError::Rewrite)
    }
}
