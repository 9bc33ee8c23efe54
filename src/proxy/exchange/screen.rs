//! PID screening (docs/architecture.md#the-layers-of-protection, layer 2): after a failover, an
//! InitProducerId answer that hands a local producer a producer id that mirrored traffic left in
//! the brokers' state is not passed on as it is. An idempotent producer gets a fresh id (the
//! gateway asks again); a transactional producer is bumped until its epoch is above every mirrored
//! epoch of that id. Both are bounded; at the bound the client gets a retriable error.
//!
//! Review G11: a transactional id keeps its producer id across InitProducerId, and a partition
//! keeps, per producer id, the highest transaction coordinator epoch a marker carried: mirrored
//! markers leave the *source's* coordinator epoch there. When that is above the epoch of the
//! transactional id's own coordinator (the leader epoch of its `__transaction_state` partition),
//! the partition refuses the coordinator's markers (TRANSACTION_COORDINATOR_FENCED), the
//! coordinator stops sending them, and the transaction hangs half-committed. Such an id cannot
//! commit cleanly under that producer id, and the coordinator hands a transactional id another
//! producer id only when its epoch is exhausted: so the gateway keeps bumping the epoch until the
//! coordinator rotates the producer id (at most 32,767 bumps, each one write to
//! `__transaction_state`; measured 8.7 s for a full rotation on the test rig). The bumps are
//! bounded in time per InitProducerId ([`ROTATION_BUDGET`]); past it the client gets a retriable
//! error and its retry goes on from the epoch reached (the coordinator keeps it).
//!
//! | transactional answer (screened id) | action |
//! |---|---|
//! | mirrored coordinator epoch above the coordinator's | bump until another producer id is handed out, then screen that one |
//! | epoch not above the mirrored one | bump (at most [`MAX_EPOCH_BUMPS`]) |
//! | otherwise | passed on |
//!
//! Owns: that policy and its bounds. Must not touch: the screening set (the mirror controller's),
//! the client's connection (answers are sent by the exchange).

use std::time::{Duration, Instant};

use super::super::context::ConnContext;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};
use kafka_protocol::protocol::Decodable;

use crate::cluster::{transaction_state_partition, TRANSACTION_STATE_TOPIC};
use crate::mirror::policy::MirrorPolicy;
use crate::mirror::screening::ScreenEntry;
use crate::protocol::frame::FrameError;

use super::ExchangeError;

/// Fresh producer ids asked for an idempotent producer before giving up.
pub const MAX_FRESH_IDS: usize = 8;
/// Epoch bumps asked for a transactional producer before giving up (the client retries).
pub const MAX_EPOCH_BUMPS: usize = 32;
/// Epoch bumps that make any coordinator hand a transactional id another producer id: its
/// epoch is exhausted at `i16::MAX - 1`.
pub const ROTATION_BUMPS: usize = i16::MAX as usize;
/// How long one InitProducerId may bump towards a new producer id before the client is told to
/// retry (well below the 30 s request timeout of the Java client).
pub const ROTATION_BUDGET: Duration = Duration::from_secs(15);
/// Rotations asked for one InitProducerId (a new id may collide again).
const MAX_ROTATIONS: usize = 2;
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
        producer_id = resp.producer_id.0, epoch = resp.producer_epoch, mirrored_epoch = entry.max_epoch,
        mirrored_coordinator_epoch = entry.coordinator_epoch, transactional,
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
        ROTATION_BUDGET,
    )
    .await;
    Ok(encode(correlation_id, version, &resp)?)
}

/// The I/O of screening: the same InitProducerId request sent again to the broker that answered,
/// and the epoch of a transactional id's coordinator.
pub trait InitProducerIds {
    /// Send `req` at `version`; `Err` when the broker could not be asked (the reason).
    fn init_producer_id(
        &mut self,
        req: &InitProducerIdRequest,
        version: i16,
    ) -> impl std::future::Future<Output = Result<InitProducerIdResponse, String>> + Send;

    /// The epoch of the transaction coordinator of `transactional_id`: the leader epoch of its
    /// `__transaction_state` partition (the epoch its markers carry); `Err`: why it is unknown.
    fn coordinator_epoch(
        &mut self,
        transactional_id: &str,
    ) -> impl std::future::Future<Output = Result<i32, String>> + Send;
}

impl InitProducerIds for crate::client::KafkaClient {
    async fn init_producer_id(
        &mut self,
        req: &InitProducerIdRequest,
        version: i16,
    ) -> Result<InitProducerIdResponse, String> {
        self.send(req, version).await.map_err(|e| e.to_string())
    }

    async fn coordinator_epoch(&mut self, transactional_id: &str) -> Result<i32, String> {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        use kafka_protocol::messages::MetadataRequest;
        use kafka_protocol::protocol::StrBytes;
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                StrBytes::from_static_str(TRANSACTION_STATE_TOPIC).into(),
            ))]))
            .with_allow_auto_topic_creation(false);
        let resp = self.send(&req, 12).await.map_err(|e| e.to_string())?;
        let t = resp
            .topics
            .first()
            .ok_or_else(|| format!("Metadata of {TRANSACTION_STATE_TOPIC}: empty answer"))?;
        if t.error_code != 0 || t.partitions.is_empty() {
            return Err(format!(
                "Metadata of {TRANSACTION_STATE_TOPIC}: error code {}, {} partitions",
                t.error_code,
                t.partitions.len()
            ));
        }
        let index = transaction_state_partition(transactional_id, t.partitions.len());
        t.partitions
            .iter()
            .find(|p| p.partition_index == index)
            .map(|p| p.leader_epoch)
            .ok_or_else(|| format!("Metadata of {TRANSACTION_STATE_TOPIC}: no partition {index}"))
    }
}

/// What screening does with a screened answer next (the table in the module doc).
#[derive(Debug, PartialEq, Eq)]
enum Next {
    PassOn,
    Bump,
    FreshId,
    Rotate,
}

/// The policy: `resp` handed out a screened producer id (mirrored as `entry`; `screened` says
/// the same of any id). Ask again, up to the bounds, until the answer may be passed on (the
/// table in the module doc). Returns the answer to pass on: that one, an error the broker gave,
/// or at a bound (or when asking fails, or a rotation's time `budget` is spent)
/// COORDINATOR_LOAD_IN_PROGRESS without a producer id.
async fn ask_again(
    ids: &mut impl InitProducerIds,
    screened: impl Fn(i64) -> Option<ScreenEntry>,
    init: &InitRequest,
    version: i16,
    mut resp: InitProducerIdResponse,
    mut entry: ScreenEntry,
    budget: Duration,
) -> InitProducerIdResponse {
    let txn_id = init
        .request
        .transactional_id
        .as_ref()
        .map(|t| t.0.to_string());
    let started = Instant::now();
    // The coordinator's epoch, asked once (it is the same for every answer).
    let mut coordinator: Option<i32> = None;
    let (mut asked, mut rotations) = (0usize, 0usize);
    let mut rotating_from: Option<i64> = None;
    loop {
        let next = match &txn_id {
            None => Next::FreshId,
            Some(txn_id) if entry.coordinator_epoch > 0 => {
                let local = match coordinator {
                    Some(c) => c,
                    None => match ids.coordinator_epoch(txn_id).await {
                        Ok(c) => *coordinator.insert(c),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot read the transaction coordinator's epoch to screen the producer id; answering a retriable error");
                            break;
                        }
                    },
                };
                if entry.coordinator_epoch > local {
                    Next::Rotate
                } else if resp.producer_epoch > entry.max_epoch {
                    Next::PassOn
                } else {
                    Next::Bump
                }
            }
            Some(_) if resp.producer_epoch > entry.max_epoch => Next::PassOn,
            Some(_) => Next::Bump,
        };
        let bound = match next {
            Next::PassOn => return resp,
            Next::Rotate => {
                if rotating_from != Some(resp.producer_id.0) {
                    if rotations == MAX_ROTATIONS {
                        break;
                    }
                    rotations += 1;
                    rotating_from = Some(resp.producer_id.0);
                    tracing::warn!(
                        transactional_id = txn_id.as_deref().unwrap_or_default(),
                        producer_id = resp.producer_id.0,
                        epoch = resp.producer_epoch,
                        coordinator_epoch = coordinator.unwrap_or(-1),
                        mirrored_coordinator_epoch = entry.coordinator_epoch,
                        "mirrored transaction markers left this producer id a coordinator epoch above its transactional id's coordinator: its markers would be refused and its transactions hang; bumping its epoch until the coordinator hands out another producer id"
                    );
                }
                if started.elapsed() >= budget {
                    tracing::debug!(
                        producer_id = resp.producer_id.0,
                        epoch = resp.producer_epoch,
                        "producer id rotation not done within its time budget; the client's retry goes on from this epoch"
                    );
                    return retriable(resp);
                }
                ROTATION_BUMPS + MAX_EPOCH_BUMPS
            }
            Next::Bump => MAX_EPOCH_BUMPS,
            Next::FreshId => MAX_FRESH_IDS,
        };
        if asked >= bound {
            break;
        }
        let mut req = init.request.clone();
        if txn_id.is_some() && version >= 3 {
            // Bump the epoch of the id the coordinator handed out (KIP-360 fields).
            req.producer_id = resp.producer_id;
            req.producer_epoch = resp.producer_epoch;
        } else if txn_id.is_none() {
            req.producer_id = (-1).into();
            req.producer_epoch = -1;
        }
        let answer = match ids.init_producer_id(&req, version).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "screening InitProducerId failed; answering a retriable error");
                break;
            }
        };
        if answer.error_code != 0 {
            return answer;
        }
        asked += 1;
        if rotating_from.is_some_and(|p| p != answer.producer_id.0) {
            tracing::info!(
                transactional_id = txn_id.as_deref().unwrap_or_default(),
                from = rotating_from.unwrap_or(-1),
                to = answer.producer_id.0,
                bumps = asked,
                seconds = started.elapsed().as_secs_f64(),
                "the transaction coordinator handed out another producer id"
            );
            rotating_from = None;
            asked = 0;
        }
        resp = answer;
        match screened(resp.producer_id.0) {
            None => return resp,
            Some(e) => entry = e,
        }
    }
    tracing::warn!(
        producer_id = resp.producer_id.0,
        mirrored_epoch = entry.max_epoch,
        "screening bound reached; answering a retriable error"
    );
    retriable(resp)
}

/// `resp` turned into COORDINATOR_LOAD_IN_PROGRESS without a producer id.
fn retriable(mut resp: InitProducerIdResponse) -> InitProducerIdResponse {
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
    /// test did not expect), recording the requests; its transaction coordinator has epoch
    /// `coordinator`.
    struct Scripted {
        answers: Box<dyn Iterator<Item = Result<InitProducerIdResponse, String>> + Send>,
        asked: Vec<InitProducerIdRequest>,
        coordinator: Result<i32, String>,
        coordinator_asked: usize,
    }

    impl Scripted {
        fn new(answers: Vec<Result<InitProducerIdResponse, String>>) -> Scripted {
            Scripted::from(answers.into_iter())
        }

        fn from(
            answers: impl Iterator<Item = Result<InitProducerIdResponse, String>> + Send + 'static,
        ) -> Scripted {
            Scripted {
                answers: Box::new(answers),
                asked: Vec::new(),
                coordinator: Ok(0),
                coordinator_asked: 0,
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

        async fn coordinator_epoch(&mut self, transactional_id: &str) -> Result<i32, String> {
            assert_eq!(transactional_id, "tx");
            self.coordinator_asked += 1;
            self.coordinator.clone()
        }
    }

    fn answer(producer_id: i64, epoch: i16) -> Result<InitProducerIdResponse, String> {
        Ok(InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch))
    }

    fn entry(max_epoch: i16) -> ScreenEntry {
        mirrored_entry(max_epoch, -1)
    }

    /// A screening entry whose mirrored markers carried `coordinator_epoch`.
    fn mirrored_entry(max_epoch: i16, coordinator_epoch: i32) -> ScreenEntry {
        ScreenEntry {
            max_epoch,
            last_timestamp: 0,
            added_ms: 0,
            coordinator_epoch,
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
        let mirrored: HashMap<i64, ScreenEntry> =
            mirrored.iter().map(|(id, e)| (*id, entry(*e))).collect();
        run_entries(broker, &mirrored, init, first, ROTATION_BUDGET)
    }

    /// [`run`] with whole screening entries and a rotation budget.
    fn run_entries(
        broker: &mut Scripted,
        mirrored: &HashMap<i64, ScreenEntry>,
        init: &InitRequest,
        first: (i64, i16),
        budget: Duration,
    ) -> InitProducerIdResponse {
        let resp = answer(first.0, first.1).expect("answer");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        rt.block_on(ask_again(
            broker,
            |id| mirrored.get(&id).copied(),
            init,
            init.version,
            resp,
            mirrored[&first.0],
            budget,
        ))
    }

    /// A transactional producer's screening, from `first`, of its id mirrored as `mirrored`,
    /// within `budget`.
    fn transactional_run(
        broker: &mut Scripted,
        mirrored: ScreenEntry,
        first: (i64, i16),
        budget: Duration,
    ) -> InitProducerIdResponse {
        let set: HashMap<i64, ScreenEntry> = [(first.0, mirrored)].into();
        run_entries(broker, &set, &transactional(), first, budget)
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

    #[test]
    fn a_transactional_id_whose_coordinator_is_behind_the_mirrored_coordinator_epoch_gets_another_producer_id(
    ) {
        // Mirrored markers left coordinator epoch 50 for id 100; the id's coordinator is at 3.
        let mirrored = mirrored_entry(0, 50);
        // The coordinator bumps 100 up to its last epoch, then hands out 101.
        let answers = (2..=i16::MAX - 1)
            .map(|e| answer(100, e))
            .chain(std::iter::once(answer(101, 0)));
        let mut broker = Scripted::from(answers);
        broker.coordinator = Ok(3);
        let r = transactional_run(&mut broker, mirrored, (100, 1), ROTATION_BUDGET);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, 101, 0)
        );
        assert_eq!(broker.asked.len(), usize::try_from(i16::MAX - 1).unwrap());
        assert_eq!(broker.coordinator_asked, 1, "asked once");
        // Each bump names the previous answer (KIP-360), up to the exhausted epoch.
        let last = broker.asked.last().unwrap();
        assert_eq!(
            (last.producer_id.0, last.producer_epoch),
            (100, i16::MAX - 1)
        );
    }

    #[test]
    fn a_transactional_id_whose_coordinator_is_not_behind_keeps_its_producer_id() {
        let mirrored = mirrored_entry(2, 7);
        let mut broker = Scripted::new((1..=3).map(|e| answer(100, e)).collect());
        broker.coordinator = Ok(7);
        let r = transactional_run(&mut broker, mirrored, (100, 0), ROTATION_BUDGET);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, 100, 3)
        );
    }

    #[test]
    fn a_mirrored_coordinator_epoch_of_0_is_never_compared() {
        let mirrored = mirrored_entry(0, 0);
        let mut broker = Scripted::new(vec![answer(100, 1)]);
        broker.coordinator = Err("not asked".into());
        let r = transactional_run(&mut broker, mirrored, (100, 0), ROTATION_BUDGET);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, 100, 1)
        );
        assert_eq!(broker.coordinator_asked, 0);
    }

    #[test]
    fn when_the_coordinator_epoch_cannot_be_read_the_client_is_told_to_retry() {
        let mirrored = mirrored_entry(0, 50);
        let mut broker = Scripted::new(Vec::new());
        broker.coordinator = Err("connection closed".into());
        let r = transactional_run(&mut broker, mirrored, (100, 1), ROTATION_BUDGET);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (14, -1, -1)
        );
        assert!(broker.asked.is_empty());
    }

    #[test]
    fn a_rotation_past_its_time_budget_tells_the_client_to_retry_and_its_retry_goes_on() {
        let mirrored = mirrored_entry(0, 50);
        let mut broker = Scripted::new(Vec::new());
        broker.coordinator = Ok(3);
        let r = transactional_run(&mut broker, mirrored, (100, 9000), Duration::ZERO);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (14, -1, -1)
        );
        // The retry starts from the epoch the coordinator reached.
        let mut broker = Scripted::new(vec![answer(100, i16::MAX - 1), answer(102, 0)]);
        broker.coordinator = Ok(3);
        let r = transactional_run(&mut broker, mirrored, (100, i16::MAX - 2), ROTATION_BUDGET);
        assert_eq!((r.error_code, r.producer_id.0), (0, 102));
        assert_eq!(broker.asked.len(), 2);
    }
}
