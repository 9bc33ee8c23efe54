//! Advancing the destination brokers' producer-id allocators past the screened producer ids, as
//! a failover step (review F15; docs/architecture.md#the-layers-of-protection, layer 2).
//!
//! After a failover the producer ids that mirrored traffic left in the brokers are screened: an
//! InitProducerId answer handing one out is asked again, up to a bound, then answered with a
//! retriable error. That costs one InitProducerId per overlapping id, so when the brokers are
//! about to hand out thousands of mirrored ids a new producer waits minutes to hours. This step
//! moves every broker past them before the partitions become writable.
//!
//! How a broker hands out idempotent producer ids (Kafka 4.1, measured in the feasibility notes
//! §C): each broker serves ids from a block of 1,000 of its own, granted by the controller from
//! one increasing counter, and fetches its next block ahead of time; while the next block has
//! not arrived it answers COORDINATOR_LOAD_IN_PROGRESS (14). So the ids one broker hands out
//! only ever grow, and one id above the target proves that broker will never hand out a screened
//! id at or below the target again. Every broker is driven (idempotent InitProducerId, no
//! transactional id: no broker state is created) until it answers an id above the target.
//!
//! The target is the highest screened id within `max_ids` of the lowest broker position: ids
//! further away are left to screening (they are counted and logged; at the brokers' usual pace
//! they expire before they are reached). Bounded by `max_ids` and a timeout; an error or an
//! unreachable broker ends that broker's part with the reason. The step never fails a failover:
//! screening remains the fallback for whatever it did not cover. Idempotent: a resumed failover
//! runs it again and finds every broker already past the target (one request per broker).
//!
//! Owns: the policy ([`advance`]), its I/O seam ([`IdSource`]; [`ClusterIds`], in its own child
//! module, is the real one, over the gateway's own connections to the destination brokers), and the step's metrics and
//! last outcome per mirror ([`PidAllocator`]). Must not touch: the screening set (it is given
//! the ids), mirror states.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts};
use serde::Serialize;

use crate::cluster::ClusterView;
use crate::config::PidAllocatorConfig;
use crate::metrics::Metrics;

mod cluster_ids;

pub use cluster_ids::ClusterIds;

/// COORDINATOR_LOAD_IN_PROGRESS (the broker waits for its next block of ids) and
/// COORDINATOR_NOT_AVAILABLE: ask again.
const RETRIABLE: [i16; 2] = [14, 15];
/// Pause after a round answered only with retriable errors (the broker waits for a block).
const RETRY_PAUSE: Duration = Duration::from_millis(2);

/// One InitProducerId answer: the producer id handed out, or the error code.
pub type IdAnswer = Result<i64, i16>;

/// The I/O of the step: fresh idempotent producer ids from one broker.
pub trait IdSource: Send + Sync + 'static {
    /// Ask broker `node` for `n` fresh idempotent producer ids: `n` InitProducerId requests
    /// without transactional id written on one connection before any answer is read. One answer
    /// per request, in order; `Err` when the broker could not be asked (the reason).
    fn fresh_ids(
        &self,
        node: i32,
        n: usize,
    ) -> impl Future<Output = Result<Vec<IdAnswer>, String>> + Send;
}

/// Bounds and shape of the work.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most ids skipped: screened ids further above the lowest broker position are left to
    /// screening.
    pub max_ids: u64,
    pub timeout: Duration,
    /// Connections (concurrent pipelines) per broker.
    pub connections: usize,
    /// Requests written per connection before reading their answers.
    pub in_flight: usize,
}

impl From<&PidAllocatorConfig> for Limits {
    fn from(c: &PidAllocatorConfig) -> Self {
        Limits {
            max_ids: c.max_ids,
            timeout: Duration::from_millis(c.timeout_ms),
            connections: c.connections.max(1),
            in_flight: c.in_flight.max(1),
        }
    }
}

/// How the step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvanceResult {
    /// Every broker now hands out ids above every screened id.
    Advanced,
    /// No screened id lies above any broker's position (or there is none).
    NotNeeded,
    /// Screened ids lie further than `max_ids` above the brokers: those are left to screening
    /// (the brokers were advanced past the ids within reach).
    Capped,
    /// The timeout ended the step.
    TimedOut,
    /// A broker could not be asked or answered an error; the others were advanced.
    Failed,
}

impl AdvanceResult {
    /// Label value of `mirrorgate_pid_allocator_advances_total{outcome}`.
    pub fn as_str(self) -> &'static str {
        match self {
            AdvanceResult::Advanced => "advanced",
            AdvanceResult::NotNeeded => "not_needed",
            AdvanceResult::Capped => "capped",
            AdvanceResult::TimedOut => "timed_out",
            AdvanceResult::Failed => "failed",
        }
    }
}

/// What happened at one broker.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BrokerProgress {
    pub node: i32,
    /// The first id it handed out (its position before the step).
    pub first_id: Option<i64>,
    /// The highest id it handed out.
    pub last_id: Option<i64>,
    /// Ids it handed out to the step.
    pub ids: u64,
    /// Answers with a retriable error.
    pub retriable: u64,
    /// It hands out only ids above the target now.
    pub done: bool,
    pub error: Option<String>,
}

/// The outcome of one run of the step.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub result: AdvanceResult,
    /// The highest screened id.
    pub highest_screened: Option<i64>,
    /// The id every broker was driven past.
    pub target: Option<i64>,
    /// Screened ids above the brokers' positions left to screening (beyond `max_ids`).
    pub beyond_cap: usize,
    /// Producer ids handed out to the step and never used.
    pub ids_skipped: u64,
    pub requests: u64,
    pub duration_ms: u64,
    pub brokers: Vec<BrokerProgress>,
    /// Why it did not advance every broker, when it did not.
    pub reason: Option<String>,
}

#[derive(Default)]
struct BrokerState {
    first: AtomicI64,
    last: AtomicI64,
    ids: AtomicU64,
    retriable: AtomicU64,
    /// Requests written to it and not answered yet (every lane).
    outstanding: AtomicU64,
    /// It handed out more ids than reaching the target can take, and was stopped.
    over_budget: AtomicBool,
    done: AtomicBool,
    error: Mutex<Option<String>>,
}

impl BrokerState {
    fn new() -> Self {
        BrokerState {
            first: AtomicI64::new(-1),
            last: AtomicI64::new(-1),
            ..Default::default()
        }
    }
    fn failed(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
    fn fail(&self, reason: String) {
        let mut e = self.error.lock().unwrap_or_else(|e| e.into_inner());
        e.get_or_insert(reason);
    }
    /// Record the answers of one round; returns how many carried an id.
    fn record(&self, answers: &[IdAnswer], target: i64) -> u64 {
        let mut got = 0;
        for a in answers {
            match a {
                Ok(id) => {
                    got += 1;
                    let _ =
                        self.first
                            .compare_exchange(-1, *id, Ordering::SeqCst, Ordering::SeqCst);
                    self.first.fetch_min(*id, Ordering::SeqCst);
                    self.last.fetch_max(*id, Ordering::SeqCst);
                    // The broker hands out only greater ids from now on.
                    if *id >= target {
                        self.done.store(true, Ordering::SeqCst);
                    }
                }
                Err(c) if RETRIABLE.contains(c) => {
                    self.retriable.fetch_add(1, Ordering::SeqCst);
                }
                Err(c) => self.fail(format!("InitProducerId answered error code {c}")),
            }
        }
        self.ids.fetch_add(got, Ordering::SeqCst);
        got
    }
    fn progress(&self, node: i32) -> BrokerProgress {
        let id = |v: i64| (v >= 0).then_some(v);
        BrokerProgress {
            node,
            first_id: id(self.first.load(Ordering::SeqCst)),
            last_id: id(self.last.load(Ordering::SeqCst)),
            ids: self.ids.load(Ordering::SeqCst),
            retriable: self.retriable.load(Ordering::SeqCst),
            done: self.done.load(Ordering::SeqCst),
            error: self.error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

/// Drive every broker of `brokers` until it hands out only ids above the screened ids (see the
/// module documentation). Never takes (much) longer than `limits.timeout`.
pub async fn advance<S: IdSource>(
    source: Arc<S>,
    brokers: &[i32],
    screened: &[i64],
    limits: &Limits,
) -> Outcome {
    let started = Instant::now();
    let highest_screened = screened.iter().copied().max();
    let states: Vec<(i32, Arc<BrokerState>)> = brokers
        .iter()
        .map(|n| (*n, Arc::new(BrokerState::new())))
        .collect();
    let requests = Arc::new(AtomicU64::new(0));
    let mut out = Outcome {
        result: AdvanceResult::NotNeeded,
        highest_screened,
        target: None,
        beyond_cap: 0,
        ids_skipped: 0,
        requests: 0,
        duration_ms: 0,
        brokers: Vec::new(),
        reason: None,
    };
    let finish = |mut out: Outcome, states: &[(i32, Arc<BrokerState>)]| {
        out.brokers = states.iter().map(|(n, s)| s.progress(*n)).collect();
        out.ids_skipped = out.brokers.iter().map(|b| b.ids).sum();
        out.requests = requests.load(Ordering::SeqCst);
        out.duration_ms = started.elapsed().as_millis() as u64;
        let failed: Vec<String> = out
            .brokers
            .iter()
            .filter_map(|b| b.error.as_ref().map(|e| format!("broker {}: {e}", b.node)))
            .collect();
        if !failed.is_empty() && out.result != AdvanceResult::TimedOut {
            out.result = AdvanceResult::Failed;
            out.reason = Some(failed.join("; "));
        }
        out
    };
    let Some(highest) = highest_screened else {
        return finish(out, &states);
    };
    if brokers.is_empty() {
        out.result = AdvanceResult::Failed;
        out.reason = Some("no destination broker is known".into());
        return finish(out, &states);
    }
    let deadline = tokio::time::Instant::now() + limits.timeout;

    // 1. Each broker's position: the first id it hands out.
    let mut probes = tokio::task::JoinSet::new();
    for (node, st) in &states {
        let (node, st, source, requests) = (*node, st.clone(), source.clone(), requests.clone());
        probes.spawn(async move {
            while !st.failed() && st.first.load(Ordering::SeqCst) < 0 {
                requests.fetch_add(1, Ordering::SeqCst);
                match source.fresh_ids(node, 1).await {
                    Ok(a) => {
                        // A broker already past every screened id is done.
                        if st.record(&a, highest) == 0 && !st.failed() {
                            tokio::time::sleep(RETRY_PAUSE * 25).await;
                        }
                    }
                    Err(e) => st.fail(e),
                }
            }
        });
    }
    // A broker that does not answer at all must not hold up the others.
    let probe_bound = limits.timeout / 4;
    if tokio::time::timeout(probe_bound, async {
        while probes.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        probes.abort_all();
        for (_, st) in &states {
            if st.first.load(Ordering::SeqCst) < 0 {
                st.fail(format!("no producer id within {probe_bound:?}"));
            }
        }
    }
    let low = states
        .iter()
        .filter_map(|(_, s)| {
            let f = s.first.load(Ordering::SeqCst);
            (f >= 0).then_some(f)
        })
        .min();
    let Some(low) = low else {
        return finish(out, &states);
    };

    // 2. The target: the highest screened id within reach.
    let reach = low.saturating_add(i64::try_from(limits.max_ids).unwrap_or(i64::MAX));
    let target = screened.iter().copied().filter(|s| *s <= reach).max();
    out.beyond_cap = screened.iter().filter(|s| **s > reach).count();
    let Some(target) = target.filter(|t| *t > low) else {
        if out.beyond_cap > 0 {
            out.result = AdvanceResult::Capped;
            out.reason = Some(cap_reason(out.beyond_cap, limits.max_ids, low));
        }
        return finish(out, &states);
    };
    out.target = Some(target);
    for (_, s) in &states {
        let f = s.first.load(Ordering::SeqCst);
        if f >= target {
            s.done.store(true, Ordering::SeqCst);
        }
    }

    // 3. Drive the brokers that are not past the target yet, pipelined, several connections
    //    each, until each hands out an id above it (or the budget, an error or time ends it).
    let driven = states
        .iter()
        .filter(|(_, s)| !s.done.load(Ordering::SeqCst) && !s.failed())
        .count() as u64;
    // A broker's ids only grow, so it reaches the target after at most `target - first + 1`
    // ids, plus the rounds in flight when it does: more means it does not progress (it is
    // stopped alone, the others go on).
    let pipeline = (limits.connections * limits.in_flight) as u64;
    let over_budget = Arc::new(AtomicBool::new(false));
    let mut lanes = tokio::task::JoinSet::new();
    for (node, st) in &states {
        if st.done.load(Ordering::SeqCst) || st.failed() {
            continue;
        }
        let first = st.first.load(Ordering::SeqCst);
        let budget = u64::try_from(target.saturating_sub(first)).unwrap_or(0) + 1 + pipeline;
        for _ in 0..limits.connections {
            let (node, st, source) = (*node, st.clone(), source.clone());
            let (requests, over_budget) = (requests.clone(), over_budget.clone());
            let (in_flight, lanes_per_broker) = (limits.in_flight, limits.connections);
            lanes.spawn(async move {
                while !st.done.load(Ordering::SeqCst) && !st.failed() {
                    if st.ids.load(Ordering::SeqCst) >= budget {
                        st.over_budget.store(true, Ordering::SeqCst);
                        over_budget.store(true, Ordering::SeqCst);
                        return;
                    }
                    let n = round_size(
                        st.last.load(Ordering::SeqCst),
                        target,
                        st.outstanding.load(Ordering::SeqCst),
                        (in_flight, lanes_per_broker),
                    );
                    if n == 0 {
                        // The rounds of the other lanes may already reach the target.
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    st.outstanding.fetch_add(n as u64, Ordering::SeqCst);
                    requests.fetch_add(n as u64, Ordering::SeqCst);
                    let answers = source.fresh_ids(node, n).await;
                    st.outstanding.fetch_sub(n as u64, Ordering::SeqCst);
                    match answers {
                        Ok(a) => {
                            let got = st.record(&a, target);
                            if got == 0 && !st.done.load(Ordering::SeqCst) {
                                tokio::time::sleep(RETRY_PAUSE).await;
                            }
                        }
                        Err(e) => st.fail(e),
                    }
                }
            });
        }
    }
    if tokio::time::timeout_at(deadline, async {
        while lanes.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        lanes.abort_all();
        out.result = AdvanceResult::TimedOut;
        out.reason = Some(format!(
            "not every broker was past producer id {target} after {:?}",
            limits.timeout
        ));
        return finish(out, &states);
    }
    out.result = if over_budget.load(Ordering::SeqCst) {
        let stopped: Vec<String> = states
            .iter()
            .filter(|(_, s)| s.over_budget.load(Ordering::SeqCst))
            .map(|(n, s)| {
                format!(
                    "broker {n} handed out {} ids from {} without reaching it",
                    s.ids.load(Ordering::SeqCst),
                    s.first.load(Ordering::SeqCst)
                )
            })
            .collect();
        out.reason = Some(format!(
            "stopped short of producer id {target}: {} (its ids do not progress)",
            stopped.join("; ")
        ));
        AdvanceResult::Capped
    } else if out.beyond_cap > 0 {
        out.reason = Some(cap_reason(out.beyond_cap, limits.max_ids, low));
        AdvanceResult::Capped
    } else if driven == 0 {
        AdvanceResult::NotNeeded
    } else {
        AdvanceResult::Advanced
    };
    finish(out, &states)
}

/// Requests one lane writes in its next round (0: none now). A broker hands out consecutive
/// ids within a block, so once its last id `last` is within a pipeline of the target, exactly
/// `target - last` more ids reach it: the lanes share what is still needed beyond the
/// `outstanding` requests of every lane, so they take (next to) nothing past the target, where
/// full rounds of every lane took up to `lanes × in_flight - 1` ids past it. Where the
/// broker's block ends first, its next id jumps to another block (any id at or above the
/// target ends the broker's part). `shape`: (`in_flight`, lanes per broker).
fn round_size(last: i64, target: i64, outstanding: u64, shape: (usize, usize)) -> usize {
    let (in_flight, lanes) = shape;
    if last < 0 {
        return in_flight;
    }
    let needed = u64::try_from(target.saturating_sub(last)).unwrap_or(0);
    let Some(open) = needed.checked_sub(outstanding).filter(|n| *n > 0) else {
        return 0;
    };
    let share = open.div_ceil(lanes.max(1) as u64);
    usize::try_from(share)
        .unwrap_or(usize::MAX)
        .clamp(1, in_flight)
}

fn cap_reason(beyond: usize, max_ids: u64, low: i64) -> String {
    format!(
        "{beyond} screened producer ids lie more than {max_ids} ids above the lowest broker position {low} \
         (failover.pid_allocator.max_ids); they are left to screening"
    )
}

/// The failover step: configuration, metrics and the last outcome per mirror.
pub struct PidAllocator {
    config: PidAllocatorConfig,
    cluster: Arc<ClusterView>,
    timeout: Duration,
    advances: IntCounterVec,
    skipped: IntCounter,
    duration: Histogram,
    last: Mutex<HashMap<String, Outcome>>,
}

impl PidAllocator {
    /// `timeout` bounds connecting to a broker and each pipelined round.
    pub fn new(
        config: PidAllocatorConfig,
        cluster: Arc<ClusterView>,
        timeout: Duration,
        metrics: &Metrics,
    ) -> Self {
        let advances = IntCounterVec::new(
            Opts::new(
                "mirrorgate_pid_allocator_advances_total",
                "Failover steps advancing the destination brokers' producer-id allocators past the screened ids, by outcome.",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let skipped = IntCounter::new(
            "mirrorgate_pid_allocator_ids_skipped_total",
            "Producer ids the failover step took from the destination brokers (and never used) to move them past the screened ids.",
        )
        .expect("valid metric");
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "mirrorgate_pid_allocator_advance_duration_seconds",
                "Time the failover step advancing the producer-id allocators took (part of the failover's duration).",
            )
            .buckets(vec![0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0]),
        )
        .expect("valid metric");
        let r = metrics.registry();
        for c in [
            Box::new(advances.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(skipped.clone()),
            Box::new(duration.clone()),
        ] {
            let _ = r.register(c);
        }
        PidAllocator {
            config,
            cluster,
            timeout,
            advances,
            skipped,
            duration,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Run the step for a failover of `mirror` whose screening set is complete and durable:
    /// advance every destination broker past `screened`. Logs and counts the outcome; never
    /// fails (screening is the fallback).
    pub async fn advance_past(&self, mirror: &str, screened: Vec<i64>) {
        if !self.config.enabled || crate::mirror::fault_hooks::Sabotage::Screening.is_on() {
            return;
        }
        let brokers: Vec<i32> = self.cluster.brokers().into_iter().map(|(n, _)| n).collect();
        let source = Arc::new(ClusterIds::new(self.cluster.clone(), self.timeout));
        let limits = Limits::from(&self.config);
        let o = advance(source, &brokers, &screened, &limits).await;
        self.advances.with_label_values(&[o.result.as_str()]).inc();
        self.skipped.inc_by(o.ids_skipped);
        self.duration.observe(o.duration_ms as f64 / 1000.0);
        let ids_per_s = (o.ids_skipped * 1000)
            .checked_div(o.duration_ms)
            .unwrap_or(0);
        let brokers = o
            .brokers
            .iter()
            .map(|b| {
                format!(
                    "{}: {:?}→{:?}",
                    b.node,
                    b.first_id.unwrap_or(-1),
                    b.last_id.unwrap_or(-1)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        match o.result {
            AdvanceResult::Advanced | AdvanceResult::NotNeeded => tracing::info!(
                mirror, outcome = o.result.as_str(), screened = screened.len(),
                target = ?o.target, ids_skipped = o.ids_skipped, requests = o.requests,
                duration_ms = o.duration_ms, ids_per_s, brokers = %brokers,
                "destination producer-id allocators are past every screened producer id"
            ),
            _ => tracing::warn!(
                mirror, outcome = o.result.as_str(), screened = screened.len(),
                target = ?o.target, beyond_cap = o.beyond_cap, ids_skipped = o.ids_skipped,
                duration_ms = o.duration_ms, brokers = %brokers, reason = o.reason.as_deref().unwrap_or(""),
                "could not advance every destination producer-id allocator past the screened producer ids; \
                 PID screening covers the rest (new producers may be slower to get an id)"
            ),
        }
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(mirror.to_string(), o);
    }

    /// The outcome of the last run for `mirror` in this process, if any.
    pub fn last_outcome(&self, mirror: &str) -> Option<Outcome> {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(mirror)
            .cloned()
    }
}

#[cfg(test)]
#[path = "pid_allocator_tests.rs"]
mod tests;
