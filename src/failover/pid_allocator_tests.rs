//! Unit tests of the allocator-advance policy over a fake cluster: brokers that serve ids from
//! blocks of 1,000 taken from one shared counter, as Kafka's controller grants them, answering
//! COORDINATOR_LOAD_IN_PROGRESS (14) once while they fetch their next block.

use super::*;

use std::collections::{BTreeMap, HashSet};

const BLOCK: i64 = 1_000;

#[derive(Debug, Clone, Copy)]
struct Block {
    next: i64,
    end: i64,
}

#[derive(Default)]
struct Inner {
    /// Start of the next block the controller grants.
    counter: i64,
    brokers: BTreeMap<i32, Block>,
    /// Brokers waiting for their next block (they answer 14 once).
    fetching: HashSet<i32>,
    /// Calls per broker.
    asked: HashMap<i32, u64>,
}

/// A fake destination cluster.
#[derive(Default)]
struct Fake {
    inner: Mutex<Inner>,
    /// Brokers that cannot be asked (the reason).
    unreachable: HashMap<i32, String>,
    /// Brokers that answer this error code.
    refusing: HashMap<i32, i16>,
    /// Brokers that never answer.
    hanging: HashSet<i32>,
    /// Brokers that stop answering after this many requests.
    hang_after: HashMap<i32, u64>,
    /// Brokers that hand out the same ids over and over (never progress).
    stuck: HashSet<i32>,
    requests: AtomicU64,
}

impl Fake {
    /// Brokers at the given positions, each inside its own block; the shared counter at `counter`.
    fn new(positions: &[(i32, i64)], counter: i64) -> Fake {
        let mut inner = Inner {
            counter,
            ..Default::default()
        };
        for (node, pos) in positions {
            let start = pos - pos.rem_euclid(BLOCK);
            inner.brokers.insert(
                *node,
                Block {
                    next: *pos,
                    end: start + BLOCK,
                },
            );
        }
        Fake {
            inner: Mutex::new(inner),
            ..Default::default()
        }
    }

    fn one(&self, node: i32) -> IdAnswer {
        if let Some(code) = self.refusing.get(&node) {
            return Err(*code);
        }
        let mut g = self.inner.lock().unwrap();
        let inner = &mut *g;
        let b = *inner.brokers.get(&node).expect("known broker");
        if self.stuck.contains(&node) {
            return Ok(b.next);
        }
        if b.next < b.end {
            inner.brokers.get_mut(&node).unwrap().next += 1;
            return Ok(b.next);
        }
        // Out of ids: the first request waits for the next block (14), then it is there.
        if inner.fetching.insert(node) {
            return Err(14);
        }
        inner.fetching.remove(&node);
        let start = inner.counter;
        inner.counter += BLOCK;
        inner.brokers.insert(
            node,
            Block {
                next: start + 1,
                end: start + BLOCK,
            },
        );
        Ok(start)
    }

    /// What broker `node` hands out next (asked outside the step).
    fn next_id(&self, node: i32) -> i64 {
        loop {
            if let Ok(id) = self.one(node) {
                return id;
            }
        }
    }

    fn counter(&self) -> i64 {
        self.inner.lock().unwrap().counter
    }
}

impl IdSource for Fake {
    async fn fresh_ids(&self, node: i32, n: usize) -> Result<Vec<IdAnswer>, String> {
        self.requests.fetch_add(n as u64, Ordering::SeqCst);
        tokio::task::yield_now().await;
        if let Some(reason) = self.unreachable.get(&node) {
            return Err(reason.clone());
        }
        let asked = {
            let mut g = self.inner.lock().unwrap();
            let c = g.asked.entry(node).or_default();
            *c += 1;
            *c
        };
        if self.hanging.contains(&node) || self.hang_after.get(&node).is_some_and(|n| asked > *n) {
            std::future::pending::<()>().await;
        }
        Ok((0..n).map(|_| self.one(node)).collect())
    }
}

fn limits() -> Limits {
    Limits {
        max_ids: 1_000_000,
        timeout: Duration::from_secs(20),
        connections: 4,
        in_flight: 64,
    }
}

/// Three brokers inside their blocks (0–999, 1000–1999, 2000–2999); the counter at 3000.
fn three_brokers() -> Fake {
    Fake::new(&[(1, 10), (2, 1_500), (3, 2_999)], 3_000)
}

#[tokio::test]
async fn every_broker_ends_above_the_highest_screened_id() {
    let fake = Arc::new(three_brokers());
    // Screened ids in every broker's block and far beyond them, the highest 25,000.
    let screened: Vec<i64> = (5..25_000).step_by(7).chain([25_000]).collect();
    let o = advance(fake.clone(), &[1, 2, 3], &screened, &limits()).await;
    assert_eq!(o.result, AdvanceResult::Advanced, "{o:?}");
    assert_eq!(o.target, Some(25_000));
    assert_eq!(o.beyond_cap, 0);
    for node in [1, 2, 3] {
        let next = fake.next_id(node);
        assert!(next > 25_000, "broker {node} hands out {next} next");
    }
    for b in &o.brokers {
        assert!(b.done && b.error.is_none(), "{b:?}");
        assert!(b.last_id.unwrap() >= 25_000, "{b:?}");
    }
    assert_eq!(o.brokers[0].first_id, Some(10));
    assert_eq!(o.brokers[2].first_id, Some(2_999));
    // The work is about the gap, not a multiple of it: the shared counter moved past the
    // target once, plus the brokers' own blocks and the pipelines in flight.
    assert!(o.ids_skipped >= 25_000 - 3_000, "{}", o.ids_skipped);
    assert!(
        o.ids_skipped <= 25_000 + 3 * 2_000 + 3 * 4 * 64,
        "{}",
        o.ids_skipped
    );
}

#[tokio::test]
async fn a_broker_already_past_the_screened_ids_is_asked_once() {
    let fake = Arc::new(three_brokers());
    let o = advance(fake.clone(), &[1, 2, 3], &[3, 7, 9], &limits()).await;
    assert_eq!(o.result, AdvanceResult::NotNeeded, "{o:?}");
    assert_eq!(o.ids_skipped, 3, "one probe per broker");
    assert_eq!(fake.requests.load(Ordering::SeqCst), 3);
    // Brokers 1 and 2 are below a screened id (2_000), broker 3 is past it: only it is not
    // driven.
    let fake = Arc::new(three_brokers());
    let o = advance(fake.clone(), &[1, 2, 3], &[3, 2_000], &limits()).await;
    assert_eq!(o.result, AdvanceResult::Advanced, "{o:?}");
    assert!(fake.next_id(1) > 2_000 && fake.next_id(2) > 2_000);
    assert_eq!(o.brokers[2].ids, 1, "{o:?}");
}

#[tokio::test]
async fn nothing_screened_asks_nothing() {
    let fake = Arc::new(three_brokers());
    let o = advance(fake.clone(), &[1, 2, 3], &[], &limits()).await;
    assert_eq!(o.result, AdvanceResult::NotNeeded);
    assert_eq!(fake.requests.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn running_it_again_finds_every_broker_past_the_target() {
    let fake = Arc::new(three_brokers());
    let screened: Vec<i64> = (0..8_000).collect();
    let first = advance(fake.clone(), &[1, 2, 3], &screened, &limits()).await;
    assert_eq!(first.result, AdvanceResult::Advanced);
    let again = advance(fake.clone(), &[1, 2, 3], &screened, &limits()).await;
    assert_eq!(again.result, AdvanceResult::NotNeeded, "{again:?}");
    // One id from each broker (a broker that ended on the last id of its block first answers
    // COORDINATOR_LOAD_IN_PROGRESS while it fetches the next block).
    assert!(again.brokers.iter().all(|b| b.ids == 1), "{again:?}");
}

#[tokio::test]
async fn screened_ids_beyond_the_cap_are_left_to_screening() {
    // Some ids within reach, one ten million ids away.
    let fake = Arc::new(three_brokers());
    let screened = vec![100, 4_000, 12_000, 10_000_000];
    let lim = Limits {
        max_ids: 50_000,
        ..limits()
    };
    let o = advance(fake.clone(), &[1, 2, 3], &screened, &lim).await;
    assert_eq!(o.result, AdvanceResult::Capped, "{o:?}");
    assert_eq!(o.target, Some(12_000));
    assert_eq!(o.beyond_cap, 1);
    assert!(o.reason.as_deref().unwrap().contains("max_ids"), "{o:?}");
    for node in [1, 2, 3] {
        assert!(fake.next_id(node) > 12_000);
    }
    assert!(fake.counter() < 30_000, "the cap bounds the work");

    // Every screened id out of reach: nothing but the probes.
    let fake = Arc::new(three_brokers());
    let o = advance(fake.clone(), &[1, 2, 3], &[10_000_000], &lim).await;
    assert_eq!(o.result, AdvanceResult::Capped, "{o:?}");
    assert_eq!(o.target, None);
    assert_eq!(o.ids_skipped, 3);
}

#[tokio::test]
async fn an_allocator_that_never_gets_there_is_stopped_by_the_bound() {
    let mut fake = three_brokers();
    fake.stuck.insert(2);
    let fake = Arc::new(fake);
    let lim = Limits {
        max_ids: 5_000,
        ..limits()
    };
    let o = tokio::time::timeout(
        Duration::from_secs(10),
        advance(fake.clone(), &[1, 2, 3], &[4_000], &lim),
    )
    .await
    .expect("bounded");
    assert_eq!(o.result, AdvanceResult::Capped, "{o:?}");
    assert!(!o.brokers[1].done, "{o:?}");
    assert!(o.brokers[0].done && o.brokers[2].done, "{o:?}");
    assert!(o.ids_skipped < 4_000 + 3 * 2_000 + 3 * 4 * 64, "{o:?}");
}

#[tokio::test]
async fn an_unreachable_or_refusing_broker_fails_clearly_and_the_others_are_advanced() {
    let mut fake = three_brokers();
    fake.unreachable
        .insert(2, "connection to 127.0.0.1:2 refused".into());
    fake.refusing.insert(3, 31);
    let fake = Arc::new(fake);
    let o = tokio::time::timeout(
        Duration::from_secs(10),
        advance(fake.clone(), &[1, 2, 3], &[9_000], &limits()),
    )
    .await
    .expect("no hang");
    assert_eq!(o.result, AdvanceResult::Failed, "{o:?}");
    let reason = o.reason.clone().unwrap();
    assert!(
        reason.contains("broker 2: connection to 127.0.0.1:2 refused"),
        "{reason}"
    );
    assert!(
        reason.contains("broker 3: InitProducerId answered error code 31"),
        "{reason}"
    );
    assert!(o.brokers[0].done, "{o:?}");
    assert!(fake.next_id(1) > 9_000);
    assert_eq!(o.target, Some(9_000));
}

#[tokio::test]
async fn a_broker_that_never_answers_is_given_up_and_the_others_are_advanced() {
    let mut fake = three_brokers();
    fake.hanging.insert(3);
    let fake = Arc::new(fake);
    let lim = Limits {
        timeout: Duration::from_millis(400),
        ..limits()
    };
    let t = Instant::now();
    let o = advance(fake.clone(), &[1, 2, 3], &[9_000], &lim).await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(o.result, AdvanceResult::Failed, "{o:?}");
    assert!(
        o.reason
            .as_deref()
            .unwrap()
            .contains("broker 3: no producer id within 100ms"),
        "{o:?}"
    );
    assert!(fake.next_id(1) > 9_000 && fake.next_id(2) > 9_000);
}

#[tokio::test]
async fn a_broker_that_stops_answering_midway_ends_the_step_at_the_timeout() {
    let mut fake = three_brokers();
    fake.hang_after.insert(2, 3);
    let fake = Arc::new(fake);
    let lim = Limits {
        timeout: Duration::from_millis(400),
        ..limits()
    };
    let t = Instant::now();
    let o = advance(fake.clone(), &[1, 2, 3], &[20_000], &lim).await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(o.result, AdvanceResult::TimedOut, "{o:?}");
    assert!(o.reason.as_deref().unwrap().contains("400ms"), "{o:?}");
    assert!(!o.brokers[1].done, "{o:?}");
}

#[tokio::test]
async fn no_broker_known_is_a_failure_not_a_hang() {
    let fake = Arc::new(three_brokers());
    let o = advance(fake, &[], &[5], &limits()).await;
    assert_eq!(o.result, AdvanceResult::Failed);
    assert!(o.reason.unwrap().contains("no destination broker"));
}

/// Ids broker `node` handed out at or above `target` during the step: what it took past what
/// was needed (the first such id proves the broker is past the target).
fn taken_past(fake: &Fake, node: i32, target: i64) -> i64 {
    let next = fake.next_id(node);
    next - target
}

#[tokio::test]
async fn the_step_takes_almost_no_id_past_a_target_inside_the_brokers_block() {
    // Broker 1 at 10 must reach 700, inside its own block (0–999): 690 ids are needed, and
    // the first id at or above 700 proves it is past. Pipelined rounds of 4 × 64 must not
    // run on past it.
    let fake = Arc::new(three_brokers());
    let o = advance(fake.clone(), &[1, 2, 3], &[5, 700], &limits()).await;
    assert_eq!(o.result, AdvanceResult::Advanced, "{o:?}");
    assert_eq!(o.target, Some(700));
    let past = taken_past(&fake, 1, 700);
    assert!(
        past <= limits().connections as i64,
        "broker 1 handed out {past} ids at or above the target 700 (the step needs one)"
    );
}

#[tokio::test]
async fn a_target_between_a_brokers_blocks_costs_the_ids_below_it_not_the_jump_above_it() {
    // The target (3,500) lies in a block no broker holds yet: broker 1 (at 10) uses up its
    // block, then gets the next one from the shared counter, which starts at 3,000 and the one
    // after at 4,000 — its position jumps by a block at a time, so its last id lies up to a
    // block and more above the target; the ids between belong to other brokers' blocks and
    // were never handed to the step. This is the "overshoot" of 1,000–2,000 per broker seen
    // in `last_id - target`: block granularity, not ids the step took.
    let fake = Arc::new(three_brokers());
    let o = advance(fake.clone(), &[1, 2, 3], &[5, 3_500], &limits()).await;
    assert_eq!(o.result, AdvanceResult::Advanced, "{o:?}");
    for b in &o.brokers {
        let last = b.last_id.expect("handed out ids");
        assert!(last >= 3_500, "{b:?}");
    }
    // The work is the gap below the target in each broker's blocks, plus one id past it per
    // broker, plus at most a round per lane that crosses a block boundary.
    let needed = (1_000 - 10) + (2_000 - 1_500) + (3_000 - 2_999) + 500;
    assert!(
        o.ids_skipped <= needed + 3 * 4 * 64,
        "{} ids skipped for {needed} needed",
        o.ids_skipped
    );
}
