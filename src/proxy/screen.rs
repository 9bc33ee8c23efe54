//! PID screening (docs/architecture.md#the-layers-of-protection, layer 2): after a failover, an
//! InitProducerId answer that hands a local producer a producer id that mirrored traffic left in
//! the brokers' state is not passed on as it is. An idempotent producer gets a fresh id (the
//! gateway asks again); a transactional producer is bumped until its epoch is above every mirrored
//! epoch of that id. Both are bounded; at the bound the client gets a retriable error.

use super::connection::ConnContext;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};
use kafka_protocol::protocol::Decodable;

use crate::mirror::controller::ScreenEntry;
use crate::mirror::policy::MirrorPolicy;
use crate::protocol::frame::FrameError;

use super::exchange::ExchangeError;

/// Fresh producer ids asked for an idempotent producer before giving up.
pub const MAX_FRESH_IDS: usize = 8;
/// Epoch bumps asked for a transactional producer before giving up (the client retries).
pub const MAX_EPOCH_BUMPS: usize = 32;
/// COORDINATOR_LOAD_IN_PROGRESS: retriable for InitProducerId in every client.
const RETRIABLE: i16 = 14;

/// The InitProducerId request as the client sent it.
#[derive(Debug, Clone)]
pub struct InitRequest {
    pub request: InitProducerIdRequest,
    pub version: i16,
}

fn bad(e: impl std::fmt::Display) -> FrameError {
    FrameError::BadResponse(format!("InitProducerId: {e}"))
}

impl InitRequest {
    /// Decode the request body of a whole request frame.
    pub fn read(frame: &Bytes, header_len: usize, version: i16) -> Result<InitRequest, FrameError> {
        let start = 4usize
            .checked_add(header_len)
            .filter(|s| *s <= frame.len())
            .ok_or_else(|| bad("short frame"))?;
        let mut body = frame.slice(start..);
        let request = InitProducerIdRequest::decode(&mut body, version).map_err(bad)?;
        Ok(InitRequest { request, version })
    }
}

fn encode(
    correlation_id: i32,
    version: i16,
    resp: &InitProducerIdResponse,
) -> Result<Bytes, FrameError> {
    crate::protocol::frame::answer(ApiKey::InitProducerId, version, correlation_id, resp, 64)
        .map_err(bad)
}

fn decode(frame: &Bytes, version: i16) -> Result<InitProducerIdResponse, FrameError> {
    let hv = ApiKey::InitProducerId.response_header_version(version);
    crate::protocol::frame::decode_response::<InitProducerIdResponse>(frame, hv, version)
        .map(|d| d.body)
        .map_err(bad)
}

/// Screen one InitProducerId answer (whole frame). Returns the frame to pass on.
pub async fn screen(
    ctl: &dyn MirrorPolicy,
    upstream: &str,
    version: i16,
    correlation_id: i32,
    frame: Bytes,
    init: &InitRequest,
    conn: &ConnContext,
) -> Result<Bytes, ExchangeError> {
    let timeout = conn.connect_timeout;
    let mut resp = decode(&frame, version)?;
    if resp.error_code != 0 {
        return Ok(frame);
    }
    let Some(entry) = ctl.screened(resp.producer_id.0) else {
        return Ok(frame);
    };
    ctl.count_screened();
    let transactional = init.request.transactional_id.is_some();
    tracing::warn!(
        producer_id = resp.producer_id.0, epoch = resp.producer_epoch, mirrored_epoch = entry.max_epoch, transactional,
        "InitProducerId handed out a producer id that mirrored traffic left in the brokers; screening it"
    );
    let mut client = match conn.cluster.client(upstream, timeout).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot reach the broker to screen the producer id; answering a retriable error");
            resp.error_code = RETRIABLE;
            return Ok(encode(correlation_id, version, &resp)?);
        }
    };
    let resp = ask_again(
        &mut client,
        |id| ctl.screened(id),
        init,
        version,
        resp,
        entry,
    )
    .await;
    Ok(encode(correlation_id, version, &resp)?)
}

/// The I/O of screening: the same InitProducerId request sent again to the broker that answered.
pub trait InitProducerIds {
    /// Send `req` at `version`; `Err` when the broker could not be asked (the reason).
    fn init_producer_id(
        &mut self,
        req: &InitProducerIdRequest,
        version: i16,
    ) -> impl std::future::Future<Output = Result<InitProducerIdResponse, String>> + Send;
}

impl InitProducerIds for crate::client::KafkaClient {
    async fn init_producer_id(
        &mut self,
        req: &InitProducerIdRequest,
        version: i16,
    ) -> Result<InitProducerIdResponse, String> {
        self.send(req, version).await.map_err(|e| e.to_string())
    }
}

/// The policy: `resp` handed out a screened producer id (mirrored at up to `entry`'s epoch). Ask
/// again, up to the bound, until the answer is not screened (idempotent producer: a fresh id)
/// or its epoch is above the mirrored one (transactional producer: the same id, bumped). Returns
/// the answer to pass on: that one, an error the broker gave, or at the bound (or when asking
/// fails) COORDINATOR_LOAD_IN_PROGRESS without a producer id.
async fn ask_again(
    ids: &mut impl InitProducerIds,
    screened: impl Fn(i64) -> Option<ScreenEntry>,
    init: &InitRequest,
    version: i16,
    mut resp: InitProducerIdResponse,
    mut entry: ScreenEntry,
) -> InitProducerIdResponse {
    let transactional = init.request.transactional_id.is_some();
    let bound = if transactional {
        MAX_EPOCH_BUMPS
    } else {
        MAX_FRESH_IDS
    };
    for _ in 0..bound {
        let mut req = init.request.clone();
        if transactional && version >= 3 {
            // Bump the epoch of the id the coordinator handed out (KIP-360 fields).
            req.producer_id = resp.producer_id;
            req.producer_epoch = resp.producer_epoch;
        } else if !transactional {
            req.producer_id = (-1).into();
            req.producer_epoch = -1;
        }
        let next = match ids.init_producer_id(&req, version).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "screening InitProducerId failed; answering a retriable error");
                break;
            }
        };
        if next.error_code != 0 {
            return next;
        }
        resp = next;
        match screened(resp.producer_id.0) {
            None => return resp,
            Some(e) if transactional && resp.producer_epoch > e.max_epoch => return resp,
            Some(e) => entry = e,
        }
    }
    tracing::warn!(
        producer_id = resp.producer_id.0,
        mirrored_epoch = entry.max_epoch,
        "screening bound reached; answering a retriable error"
    );
    resp.error_code = RETRIABLE;
    resp.producer_id = (-1).into();
    resp.producer_epoch = -1;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use kafka_protocol::messages::{ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    /// A broker that answers each InitProducerId with the next of `answers` (then an error the
    /// test did not expect), recording the requests.
    struct Scripted {
        answers: std::vec::IntoIter<Result<InitProducerIdResponse, String>>,
        asked: Vec<InitProducerIdRequest>,
    }

    impl Scripted {
        fn new(answers: Vec<Result<InitProducerIdResponse, String>>) -> Scripted {
            Scripted {
                answers: answers.into_iter(),
                asked: Vec::new(),
            }
        }
    }

    impl InitProducerIds for Scripted {
        async fn init_producer_id(
            &mut self,
            req: &InitProducerIdRequest,
            _version: i16,
        ) -> Result<InitProducerIdResponse, String> {
            self.asked.push(req.clone());
            self.answers
                .next()
                .unwrap_or_else(|| Err("asked more often than scripted".into()))
        }
    }

    fn answer(producer_id: i64, epoch: i16) -> Result<InitProducerIdResponse, String> {
        Ok(InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch))
    }

    fn entry(max_epoch: i16) -> ScreenEntry {
        ScreenEntry {
            max_epoch,
            last_timestamp: 0,
            added_ms: 0,
        }
    }

    fn idempotent() -> InitRequest {
        InitRequest {
            request: InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            version: 4,
        }
    }

    fn transactional() -> InitRequest {
        InitRequest {
            request: InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            version: 4,
        }
    }

    /// Screening with the mirrored ids `mirrored` (id → mirrored epoch), starting from the
    /// screened answer (`first`, epoch `epoch`).
    fn run(
        broker: &mut Scripted,
        mirrored: &HashMap<i64, i16>,
        init: &InitRequest,
        first: (i64, i16),
    ) -> InitProducerIdResponse {
        let resp = answer(first.0, first.1).expect("answer");
        let e = entry(mirrored[&first.0]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        rt.block_on(ask_again(
            broker,
            |id| mirrored.get(&id).map(|m| entry(*m)),
            init,
            init.version,
            resp,
            e,
        ))
    }

    #[test]
    fn an_idempotent_producer_gets_the_first_fresh_id_that_is_not_screened() {
        let mirrored: HashMap<i64, i16> = (100..103).map(|id| (id, 0)).collect();
        let mut broker = Scripted::new(vec![answer(101, 0), answer(102, 0), answer(103, 0)]);
        let r = run(&mut broker, &mirrored, &idempotent(), (100, 0));
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, 103, 0)
        );
        assert_eq!(broker.asked.len(), 3);
        assert!(
            broker
                .asked
                .iter()
                .all(|q| q.producer_id.0 == -1 && q.producer_epoch == -1),
            "each re-ask is for a fresh id: {:?}",
            broker.asked
        );
    }

    #[test]
    fn an_idempotent_producer_is_asked_for_at_most_8_fresh_ids_then_told_to_retry() {
        let mirrored: HashMap<i64, i16> = (100..200).map(|id| (id, 0)).collect();
        let mut broker = Scripted::new((101..200).map(|id| answer(id, 0)).collect());
        let r = run(&mut broker, &mirrored, &idempotent(), (100, 0));
        assert_eq!(broker.asked.len(), MAX_FRESH_IDS);
        assert_eq!(MAX_FRESH_IDS, 8);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (14, -1, -1),
            "COORDINATOR_LOAD_IN_PROGRESS without a producer id"
        );
    }

    #[test]
    fn the_eighth_fresh_id_is_still_handed_out_when_it_is_not_screened() {
        let mirrored: HashMap<i64, i16> = (100..108).map(|id| (id, 0)).collect();
        let mut broker = Scripted::new((101..=108).map(|id| answer(id, 0)).collect());
        let r = run(&mut broker, &mirrored, &idempotent(), (100, 0));
        assert_eq!((r.error_code, r.producer_id.0), (0, 108));
        assert_eq!(broker.asked.len(), 8);
    }

    #[test]
    fn a_transactional_producer_is_bumped_until_its_epoch_is_above_the_mirrored_one() {
        let mirrored: HashMap<i64, i16> = [(100, 3)].into();
        let mut broker = Scripted::new((1..=4).map(|e| answer(100, e)).collect());
        let r = run(&mut broker, &mirrored, &transactional(), (100, 0));
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, 100, 4)
        );
        // Each bump names the id and epoch of the previous answer (KIP-360).
        let asked: Vec<(i64, i16)> = broker
            .asked
            .iter()
            .map(|q| (q.producer_id.0, q.producer_epoch))
            .collect();
        assert_eq!(asked, vec![(100, 0), (100, 1), (100, 2), (100, 3)]);
    }

    #[test]
    fn a_transactional_producer_is_bumped_at_most_32_times_then_told_to_retry() {
        let mirrored: HashMap<i64, i16> = [(100, 1000)].into();
        let mut broker = Scripted::new((1..=40).map(|e| answer(100, e)).collect());
        let r = run(&mut broker, &mirrored, &transactional(), (100, 0));
        assert_eq!(broker.asked.len(), MAX_EPOCH_BUMPS);
        assert_eq!(MAX_EPOCH_BUMPS, 32);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (14, -1, -1),
            "COORDINATOR_LOAD_IN_PROGRESS without a producer id"
        );
    }

    #[test]
    fn a_broker_error_while_screening_is_passed_on() {
        let mirrored: HashMap<i64, i16> = [(100, 0)].into();
        let mut broker = Scripted::new(vec![Ok(
            InitProducerIdResponse::default().with_error_code(15)
        )]);
        let r = run(&mut broker, &mirrored, &idempotent(), (100, 0));
        assert_eq!(r.error_code, 15);
        assert_eq!(broker.asked.len(), 1);
    }

    #[test]
    fn a_failed_re_ask_never_hands_out_the_screened_id() {
        let mirrored: HashMap<i64, i16> = [(100, 0)].into();
        let mut broker = Scripted::new(vec![Err("connection closed".into())]);
        let r = run(&mut broker, &mirrored, &idempotent(), (100, 0));
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (14, -1, -1)
        );
    }
}
