//! Fetch and ShareFetch on the client listener: barriers are hidden from ordinary consumers,
//! whether they fetch or read as a KIP-932 share group (review F7 b); the mirror listener passes
//! them on.
//!
//! Owns: choosing the topics whose barriers are hidden, counting them. Must not touch: the
//! records' bytes (`crate::protocol::fetch_filter` rewrites them).

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::protocol::fetch_filter::{
    barrier_filter, hide_barriers_in_fetch, hide_barriers_in_share_fetch, BarrierFilter,
};

use super::{ConnContext, ExchangeError, Step};

/// Whether to hide barriers in the response (mirrors are configured).
pub struct Pending {
    hide_barriers: bool,
}

pub fn begin(ctx: &ConnContext, frame: Bytes) -> (Step, Pending) {
    (
        Step::Forward(frame),
        Pending {
            hide_barriers: ctx.mirrors.is_some(),
        },
    )
}

impl Pending {
    pub fn finish(
        self,
        ctx: &ConnContext,
        api: ApiKey,
        version: i16,
        frame: Bytes,
    ) -> Result<Bytes, ExchangeError> {
        let (Some(ctl), true) = (&ctx.mirrors, self.hide_barriers) else {
            return Ok(frame);
        };
        let cluster = &ctx.cluster;
        // The first mirror topic of the response names the mirror the hidden barriers are
        // counted under (a consumer's fetch rarely spans mirrors).
        let first_mirror_topic = std::cell::RefCell::new(None::<String>);
        let wanted = |name: &str, id: uuid::Uuid| match barrier_filter(
            name,
            id,
            |id| cluster.topic_name(id),
            |n| ctl.is_mirror_topic(n),
        ) {
            BarrierFilter::MirrorTopic(n) => {
                first_mirror_topic.borrow_mut().get_or_insert(n);
                true
            }
            BarrierFilter::UnknownTopicId => true,
            BarrierFilter::Other => false,
        };
        let hidden = if api == ApiKey::Fetch {
            hide_barriers_in_fetch(&frame, version, &wanted)?
        } else {
            hide_barriers_in_share_fetch(&frame, version, &|id| wanted("", id))?
        };
        match hidden {
            Some((f, n)) => {
                let topic = first_mirror_topic.borrow().clone().unwrap_or_default();
                ctl.count_barriers_seen(&topic, "hidden", n as u64);
                Ok(f)
            }
            None => Ok(frame),
        }
    }
}
