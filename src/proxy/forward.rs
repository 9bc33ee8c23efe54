//! The forward listener's route: which cluster a mirror's forward listener sends its clients to,
//! the producers that came through it, and the source connections still open.
//!
//! Applications connect to the forward listener from day one. While the mirror is mirrored the
//! upstream is the **source**; once every partition of the mirror is STOPPED (its barrier
//! durable) it is the **destination**; in between the listener is **held**: no connection
//! forwards a new request, connections accepted meanwhile wait for the switch. A switch back
//! (`POST /v1/mirrors/NAME/switchback`: the old source caught up through a failback gateway, which
//! failed over, and the mirror started again) holds it on the way back (**returning**).
//!
//! | side \ event | `hold` (switchover) | failover seen | all STOPPED | `release` | `hold_back` | `give_back` | `returned` |
//! |---|---|---|---|---|---|---|---|
//! | Source | Holding | Holding | Destination | error | error | error | error |
//! | Holding | error (already held) | Holding | Destination | Source | error | error | error |
//! | Destination | error | — (stays) | — (stays) | error | Returning | error | error |
//! | Returning | error | — (stays) | — (stays) | error | error | Destination | Source |
//!
//! The partition states never move the route back to the source: only a switch back does, once
//! the mirror's partitions mirror again.
//!
//! A producer id handed out through the forward listener by the source (its InitProducerId
//! answer) is *forwarded*. After a **switchover** (the listener held, drained, and the agent
//! through the source's log end: [`ForwardRoute::mark_caught_up`]) its batches continue on the
//! destination, where the agent copied its state as-is, and the client listener's refusal of
//! mirrored producer ids (review F12) and the duplicate-ack guard do not apply to it: it owns
//! that state, all of it. After a failover that was not a switchover (the source lost, say) the
//! same holds per partition where the destination lacks none of its acknowledged batches (the
//! ledger of acknowledgements says so). Where it lacks some, the producer is refused like any
//! producer that got its id before the failover (a continued sequence would leave a gap).
//!
//! The source's acknowledgements that pass the listener are noted in the mirror's ledger
//! ([`ForwardedAcks`]) until the agent has mirrored them: after a failover that was not a
//! switchover, the report names per forwarded producer what the destination lacks.
//!
//! Owns: the side, its transitions and the forwarded producer ids. Must not touch: sockets (the
//! listener and connections read the side), the mirror states (the caller tells it what it sees).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

mod finishing;
pub mod handover;
mod peer_hold;

use peer_hold::PeerHold;
pub use peer_hold::PeerHoldOrder;

use super::forward_ids::{DecodeError, ForwardedIds};
use crate::mirror::forwarded_acks::ForwardedAcks;
use crate::mirror::PartitionState;

/// Where the forward listener sends its clients now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Holding,
    Destination,
    /// Held on the way back to the source (a switch back).
    Returning,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Source => "source",
            Side::Holding => "holding",
            Side::Destination => "destination",
            Side::Returning => "returning",
        }
    }
}

/// A transition the route refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the forward listener of mirror {mirror} cannot {action} while it is at {side}")]
pub struct RouteError {
    pub mirror: String,
    pub action: &'static str,
    pub side: &'static str,
}

/// The route of one mirror's forward listener.
pub struct ForwardRoute {
    mirror: String,
    /// The other instances, when there are (see [`ForwardRoute::source_refusal`]).
    peers: std::sync::OnceLock<Arc<dyn crate::mirror::peer_gate::PeerGate>>,
    /// See [`ForwardRoute::owns_state`].
    owns_state: bool,
    cluster_id: String,
    side: watch::Sender<Side>,
    /// Producer ids the source handed out through this listener (persisted by the caller).
    forwarded: Mutex<ForwardedIds>,
    /// Connections to the source still open (a switchover waits for none), and to the
    /// destination (a switch back waits for none).
    source_connections: AtomicUsize,
    destination_connections: AtomicUsize,
    /// The destination holds everything the source acknowledged through this listener.
    caught_up: std::sync::atomic::AtomicBool,
    /// When the route last left the source, and how long its switch held the clients (ms;
    /// -1: no switch yet).
    held_at: Mutex<Option<std::time::Instant>>,
    last_pause_ms: std::sync::atomic::AtomicI64,
    /// What the source acknowledged through this listener, until mirrored (the failover
    /// report's per-producer loss).
    acks: Arc<ForwardedAcks>,
    /// The hold of another instance's switchover kept here (several instances), if any.
    peer_hold: Mutex<Option<PeerHold>>,
    /// Transactions open through this listener: producer id → when a request of it last passed.
    transactions: Mutex<HashMap<i64, Instant>>,
    /// Held for a switchover while transactions are open: their requests still go to the
    /// source, nothing else does, until none is open ([`ForwardRoute::admits_to_source`]).
    finishing: watch::Sender<bool>,
}

/// How long an open transaction is remembered without a request of it (twice the clients'
/// default `transaction.timeout.ms`, after which its coordinator aborts it). Either way a
/// mistake only refuses a switchover: a transaction still open on the source is read there
/// before the failover (DescribeProducers), and one remembered too long keeps the hold waiting.
const TRANSACTION_FORGOTTEN: Duration = Duration::from_secs(120);

/// Whether a mirror whose partitions are in `states` has failed over: every partition STOPPED
/// (the route then moves to the destination).
pub fn all_stopped(states: &[PartitionState]) -> bool {
    !states.is_empty() && states.iter().all(|s| *s == PartitionState::Stopped)
}

/// Put request `frame` back in front of what the client sent after it (`buf`): a connection
/// that leaves its side reads it first when it goes on, on whichever side the route is then.
pub fn put_back(buf: &mut bytes::BytesMut, frame: &[u8]) {
    let mut back = bytes::BytesMut::with_capacity(frame.len() + buf.len());
    back.extend_from_slice(frame);
    back.extend_from_slice(buf);
    *buf = back;
}

/// Counts one connection to a side's cluster while it lives.
pub struct SideConnection(Arc<ForwardRoute>, Side);

impl Drop for SideConnection {
    fn drop(&mut self) {
        if let Some(n) = self.0.connections_to(self.1) {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl ForwardRoute {
    /// The route of mirror `mirror`'s listener, noting the source's acknowledgements in `acks`;
    /// `owns_state`: the built-in agent mirrors it (see [`Self::owns_state`]).
    pub fn new(
        mirror: &str,
        cluster_id: &str,
        acks: Arc<ForwardedAcks>,
        owns_state: bool,
    ) -> Arc<ForwardRoute> {
        Arc::new(ForwardRoute {
            mirror: mirror.to_string(),
            peers: std::sync::OnceLock::new(),
            owns_state,
            cluster_id: cluster_id.to_string(),
            side: watch::channel(Side::Source).0,
            forwarded: Mutex::new(ForwardedIds::default()),
            source_connections: AtomicUsize::new(0),
            destination_connections: AtomicUsize::new(0),
            caught_up: std::sync::atomic::AtomicBool::new(false),
            held_at: Mutex::new(None),
            last_pause_ms: std::sync::atomic::AtomicI64::new(-1),
            acks,
            peer_hold: Mutex::new(None),
            transactions: Mutex::new(HashMap::new()),
            finishing: watch::channel(false).0,
        })
    }

    pub fn mirror(&self) -> &str {
        &self.mirror
    }

    /// The cluster id clients of this listener see, on either side.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn side(&self) -> Side {
        *self.side.borrow()
    }

    /// Whether the route went to the destination, whether or not it is on its way back.
    pub fn left_the_source(&self) -> bool {
        matches!(self.side(), Side::Destination | Side::Returning)
    }

    /// Follow the side.
    pub fn subscribe(&self) -> watch::Receiver<Side> {
        self.side.subscribe()
    }

    fn refuse(&self, action: &'static str, side: Side) -> RouteError {
        RouteError {
            mirror: self.mirror.clone(),
            action,
            side: side.as_str(),
        }
    }

    /// Source → Holding (a switchover begins).
    pub fn hold(&self) -> Result<(), RouteError> {
        // Finishing first: a connection that sees the hold must see its open transactions.
        let open = self.start_finishing();
        if let Err(e) = self.step(Side::Source, Side::Holding, "hold") {
            if self.side() != Side::Holding {
                self.stop_finishing();
            }
            return Err(e);
        }
        self.note_held();
        tracing::info!(mirror = %self.mirror, transactions_open = open, "forward listener held: no new request goes to the source but those of the transactions open");
        Ok(())
    }

    /// Destination → Returning (a switch back begins): no new request goes to the destination.
    pub fn hold_back(&self) -> Result<(), RouteError> {
        self.step(Side::Destination, Side::Returning, "hold for a switch back")?;
        self.note_held();
        tracing::info!(mirror = %self.mirror, "forward listener held for a switch back to the source: no new request goes to the destination");
        Ok(())
    }

    /// Returning → Destination (a switch back gave up before the old source failed over).
    pub fn give_back(&self) -> Result<(), RouteError> {
        self.step(
            Side::Returning,
            Side::Destination,
            "go back to the destination",
        )?;
        tracing::info!(mirror = %self.mirror, "forward listener back on the destination: the switch back gave up");
        Ok(())
    }

    /// Returning → Source (the old source failed over and the mirror mirrors it again): a
    /// later switchover catches up anew.
    pub fn returned(&self) -> Result<(), RouteError> {
        self.step(Side::Returning, Side::Source, "return to the source")?;
        self.forget_caught_up();
        let held = self.note_switched();
        tracing::info!(mirror = %self.mirror, held_ms = held, "forward listener switched back to the source");
        Ok(())
    }

    /// Holding → Source (a switchover gave up before its failover began).
    pub fn release(&self) -> Result<(), RouteError> {
        self.step(Side::Holding, Side::Source, "release to the source")?;
        self.stop_finishing();
        self.forget_caught_up();
        tracing::info!(mirror = %self.mirror, "forward listener released to the source");
        Ok(())
    }

    /// `from` → `to`, or the refusal of `action` from wherever the route is.
    fn step(&self, from: Side, to: Side, action: &'static str) -> Result<(), RouteError> {
        let mut refused = None;
        self.side.send_if_modified(|s| {
            if *s == from {
                *s = to;
                true
            } else {
                refused = Some(*s);
                false
            }
        });
        match refused {
            None => Ok(()),
            Some(side) => Err(self.refuse(action, side)),
        }
    }

    /// Apply what the mirror's partitions say: a failover holds the listener, a finished one
    /// (every partition STOPPED) switches it to the destination. Returns the side after.
    pub fn follow(&self, states: &[PartitionState]) -> Side {
        let all_stopped = all_stopped(states);
        let failing_over = states
            .iter()
            .any(|s| matches!(s, PartitionState::Stopping | PartitionState::Failed));
        if failing_over || all_stopped {
            // The failover aborts what is still open: nothing more goes to the source.
            self.stop_finishing();
        }
        self.side.send_if_modified(|s| {
            let next = match *s {
                Side::Destination => Side::Destination,
                Side::Returning => Side::Returning,
                _ if all_stopped => Side::Destination,
                Side::Source if failing_over => Side::Holding,
                other => other,
            };
            if next == *s {
                return false;
            }
            if *s == Side::Source {
                self.note_held();
            }
            if next == Side::Destination {
                if self.peer_hold().is_some_and(|h| h.caught_up && !h.back) {
                    self.mark_caught_up();
                }
                let held = self.note_switched();
                tracing::info!(mirror = %self.mirror, from = s.as_str(), held_ms = held, "forward listener switched to the destination");
            } else {
                tracing::info!(mirror = %self.mirror, from = s.as_str(), to = next.as_str(), "forward listener switched");
            }
            *s = next;
            true
        });
        self.side()
    }

    fn note_held(&self) {
        *self.held_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
    }

    /// A switch ends the hold: how long it held the clients (ms), kept as the last pause.
    fn note_switched(&self) -> i64 {
        let held = self
            .held_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map_or(0, |t| t.elapsed().as_millis() as i64);
        self.last_pause_ms.store(held, Ordering::Release);
        held
    }

    /// How long the last switch to the destination held the clients, from the hold to the
    /// switch (`None`: no switch yet).
    pub fn last_pause_ms(&self) -> Option<i64> {
        Some(self.last_pause_ms.load(Ordering::Acquire)).filter(|p| *p >= 0)
    }

    /// Whether a switchover's catch-up holds (see [`ForwardRoute::mark_caught_up`]).
    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// What the admin API shows of the route.
    pub fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "mirror": self.mirror,
            "side": self.side().as_str(),
            "cluster_id": self.cluster_id,
            "forwarded_producers": self.forwarded_producers(),
            "source_connections": self.source_connections(),
            "destination_connections": self.destination_connections(),
            "caught_up": self.caught_up(),
            "last_pause_ms": self.last_pause_ms(),
            "acknowledged_batches_not_mirrored": self.acks.len(),
            "forwarded_transactions_open": self.open_transactions(),
            "finishing_transactions": self.finishing(),
            "uncovered_topics": self.acks.uncovered_topics(),
            "restart": self.acks.restart_status(),
        })
    }

    /// A producer id the source handed out through this listener, at `epoch`.
    pub fn note_producer(&self, producer_id: i64, epoch: i16) {
        self.ids().note(producer_id, epoch, now_ms());
    }

    /// A batch of a forwarded producer at `epoch` passed to the source.
    pub fn note_epoch(&self, producer_id: i64, epoch: i16) {
        self.ids().note_epoch(producer_id, epoch);
    }

    /// With several instances: the other instances' view, which
    /// [`ForwardRoute::source_refusal`] asks.
    pub fn set_peers(&self, peers: Arc<dyn crate::mirror::peer_gate::PeerGate>) {
        let _ = self.peers.set(peers);
    }

    /// Why a connection may not send the source a request now, although the route serves the
    /// source (`None`: it may). With several instances the route learns of a failover or of
    /// another instance's switchover hold only when it next follows the state topic's view
    /// (a tenth of a second later at most), and an instance that was paused, or has just started,
    /// has not read the state topic yet: a request it read before could reach the source after
    /// the switchover read the source's log ends, and never be mirrored (correctness F5). So
    /// before each send the state topic's view is asked directly: no lease, a failover
    /// announced, or a hold the route does not know of yet refuse. One instance: never.
    pub fn source_refusal(&self) -> Option<String> {
        let peers = self.peers.get()?;
        match self.side() {
            Side::Destination | Side::Returning => None,
            side => peers.forward_source_refusal(&self.mirror, side == Side::Holding),
        }
    }

    /// Whether forwarded producers own their state on the destination: the built-in agent
    /// copies their batches as they are. Not with another mirroring tool (it writes under its
    /// own producer ids): they are screened at the switch instead ([`Self::screen_entries`]).
    pub fn owns_state(&self) -> bool {
        self.owns_state
    }

    /// The forwarded producer ids, each with the highest epoch seen of it: with another
    /// mirroring tool these are screened before the route moves to the destination, so their
    /// producers bump their epoch there (and the destination never hands the ids out).
    pub fn screen_entries(&self) -> Vec<(i64, i16)> {
        self.ids().with_epochs()
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, ForwardedIds> {
        self.forwarded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Merge the forwarded producer ids an earlier process persisted (see
    /// [`crate::proxy::forward_ids`]); how many were added.
    pub fn restore_producers(&self, bytes: &[u8]) -> Result<usize, DecodeError> {
        self.ids().restore(bytes, now_ms())
    }

    /// Hands the forwarded producer ids to `write` when they changed since its last success
    /// (see [`ForwardedIds::persist`]).
    pub fn persist_producers<E>(
        &self,
        write: impl FnOnce(&[u8]) -> Result<(), E>,
    ) -> Result<bool, E> {
        self.ids().persist(now_ms(), write)
    }

    /// A held listener's source connections are closed and the agent mirrored the source's log
    /// end: the destination holds every batch acknowledged through the listener.
    pub fn mark_caught_up(&self) {
        self.caught_up.store(true, Ordering::Release);
    }

    /// A switchover gave up: its catch-up no longer holds (the listener goes back to the source).
    fn forget_caught_up(&self) {
        self.caught_up.store(false, Ordering::Release);
    }

    /// Whether `producer_id`'s batch to `topic`-`partition` came through this listener and owns
    /// its mirrored state on the destination: after a switchover's catch-up; after another
    /// failover, while the destination lacks none of its acknowledged batches in that partition
    /// (the ledger exact, and pruned to the agent's final position before the switch).
    pub fn is_forwarded(&self, producer_id: i64, topic: &str, partition: i32) -> bool {
        let (came, here) = {
            let ids = self.ids();
            (ids.contains(producer_id), ids.noted_here(producer_id))
        };
        if !came || !self.owns_state {
            return false;
        }
        // Noted by this process (its ledger is whole), or covered by the restart's horizon.
        self.caught_up()
            || (here || self.acks.covers_restart(topic, partition))
                && self.side() == Side::Destination
                && self.acks.is_exact()
                && !self.acks.lacks(producer_id, topic, partition)
    }

    /// Whether the source handed `producer_id` out through this listener.
    pub fn came_through(&self, producer_id: i64) -> bool {
        self.ids().contains(producer_id)
    }

    /// How many producer ids came through this listener.
    pub fn forwarded_producers(&self) -> usize {
        self.ids().len()
    }

    /// The source's acknowledgements passed through this listener, until mirrored.
    pub fn acks(&self) -> &ForwardedAcks {
        &self.acks
    }

    /// Count a connection to `side`'s cluster (source or destination) while the returned
    /// guard lives.
    pub fn connection_to(self: &Arc<Self>, side: Side) -> Option<SideConnection> {
        self.connections_to(side)?.fetch_add(1, Ordering::AcqRel);
        Some(SideConnection(self.clone(), side))
    }

    fn connections_to(&self, side: Side) -> Option<&AtomicUsize> {
        match side {
            Side::Source => Some(&self.source_connections),
            Side::Destination => Some(&self.destination_connections),
            Side::Holding | Side::Returning => None,
        }
    }

    /// Connections to the source still open.
    pub fn source_connections(&self) -> usize {
        self.source_connections.load(Ordering::Acquire)
    }

    /// Connections to the destination still open.
    pub fn destination_connections(&self) -> usize {
        self.destination_connections.load(Ordering::Acquire)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::ApiKey;
    use PartitionState::*;

    fn route() -> Arc<ForwardRoute> {
        ForwardRoute::new("dr", "mirrorgate-forward-dr", Arc::default(), true)
    }

    #[test]
    fn a_mirrored_mirror_keeps_its_forward_listener_on_the_source() {
        let r = route();
        assert_eq!(r.follow(&[Mirroring, Paused]), Side::Source);
    }

    #[test]
    fn a_failover_in_progress_holds_the_forward_listener() {
        let r = route();
        assert_eq!(r.follow(&[Mirroring, Stopping]), Side::Holding);
        assert_eq!(r.follow(&[Stopped, Failed]), Side::Holding);
    }

    #[test]
    fn every_partition_stopped_switches_the_forward_listener_to_the_destination_for_good() {
        let r = route();
        assert_eq!(r.follow(&[Stopping, Stopping]), Side::Holding);
        assert_eq!(r.follow(&[Stopped, Stopped]), Side::Destination);
        assert_eq!(r.follow(&[Mirroring]), Side::Destination);
        assert!(r.hold().is_err());
        assert!(r.release().is_err());
    }

    fn on_the_destination() -> Arc<ForwardRoute> {
        let r = route();
        r.hold().expect("hold");
        r.mark_caught_up();
        assert_eq!(r.follow(&[Stopped, Stopped]), Side::Destination);
        r
    }

    #[test]
    fn a_switch_back_holds_the_listener_whatever_the_partitions_say_until_it_returns() {
        let r = on_the_destination();
        r.hold_back().expect("hold back");
        assert_eq!(r.follow(&[Stopped, Stopped]), Side::Returning);
        assert_eq!(r.follow(&[Mirroring, Mirroring]), Side::Returning);
        assert!(!r.serves_source());
        r.returned().expect("returned");
        assert_eq!(r.side(), Side::Source);
        assert_eq!(r.follow(&[Mirroring, Mirroring]), Side::Source);
        assert!(!r.caught_up(), "a later switchover catches up anew");
        assert!(r.last_pause_ms().is_some());
    }

    fn order(hold_id: &str, caught_up: bool, back: bool) -> Option<PeerHoldOrder<'_>> {
        Some(PeerHoldOrder {
            hold_id,
            caught_up,
            back,
        })
    }

    #[test]
    fn another_instances_switch_back_holds_the_listener_and_its_end_takes_it_to_the_source_once_the_mirror_mirrors_here(
    ) {
        let r = on_the_destination();
        let conn = r.connection_to(Side::Destination).expect("counted");
        assert_eq!(
            r.follow_peer_hold(order("h2", false, true), false),
            None,
            "not drained"
        );
        assert_eq!(r.side(), Side::Returning);
        drop(conn);
        let ack = r.follow_peer_hold(order("h2", false, true), false);
        assert_eq!(ack.as_deref(), Some("h2"));
        assert_eq!(
            r.peer_switch_back(),
            Some(false),
            "a switch back may still give up"
        );
        r.follow_peer_hold(order("h2", true, true), false);
        assert_eq!(r.peer_switch_back(), Some(true));
        r.follow_peer_hold(None, false);
        assert_eq!(
            r.side(),
            Side::Returning,
            "through, but the start not applied here yet"
        );
        r.follow_peer_hold(None, false);
        assert_eq!(r.side(), Side::Returning);
        r.follow_peer_hold(None, true);
        assert_eq!(r.side(), Side::Source);
    }

    #[test]
    fn another_instances_switch_back_that_gives_up_leaves_the_listener_on_the_destination() {
        let r = on_the_destination();
        r.follow_peer_hold(order("h2", false, true), false);
        assert_eq!(r.side(), Side::Returning);
        r.follow_peer_hold(None, false);
        assert_eq!(r.side(), Side::Destination);
    }

    #[test]
    fn a_listener_that_missed_a_switch_back_goes_to_the_source_once_it_is_through_and_the_mirror_mirrors_here(
    ) {
        let r = on_the_destination();
        assert!(!r.follow_switched_back(false));
        assert_eq!(r.side(), Side::Destination);
        assert!(r.follow_switched_back(true));
        assert_eq!(r.side(), Side::Source);
    }

    #[test]
    fn a_switch_back_that_gives_up_leaves_the_listener_on_the_destination() {
        let r = on_the_destination();
        r.hold_back().expect("hold back");
        r.give_back().expect("give back");
        assert_eq!(r.side(), Side::Destination);
        assert_eq!(r.follow(&[Stopped, Stopped]), Side::Destination);
    }

    #[test]
    fn only_a_listener_on_the_destination_is_held_back_and_only_a_returning_one_returns() {
        let r = route();
        assert!(r.hold_back().is_err(), "on the source");
        assert!(r.returned().is_err());
        assert!(r.give_back().is_err());
        r.hold().expect("hold");
        assert!(r.hold_back().is_err(), "held for a switchover");
        let r = on_the_destination();
        assert!(r.returned().is_err(), "not held back");
        r.hold_back().expect("hold back");
        assert!(r.hold_back().is_err(), "already held back");
        assert!(r.hold().is_err());
        assert!(r.release().is_err());
    }

    #[test]
    fn connections_to_the_destination_are_counted_while_they_live() {
        let r = on_the_destination();
        let a = r.connection_to(Side::Destination).expect("counted");
        assert_eq!(r.destination_connections(), 1);
        assert!(r.connection_to(Side::Returning).is_none());
        drop(a);
        assert_eq!(r.destination_connections(), 0);
        assert_eq!(r.source_connections(), 0);
    }

    #[test]
    fn a_switch_to_the_destination_records_how_long_it_held_the_clients() {
        let r = route();
        assert_eq!(r.last_pause_ms(), None);
        r.hold().expect("hold");
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.follow(&[Stopped]);
        let pause = r.last_pause_ms().expect("a pause");
        assert!((20..5_000).contains(&pause), "{pause}");
        assert_eq!(r.status()["side"], "destination");
    }

    #[test]
    fn a_mirror_without_partitions_stays_on_the_source() {
        let r = route();
        assert_eq!(r.follow(&[]), Side::Source);
    }

    #[test]
    fn a_switchover_holds_then_releases_and_a_second_hold_is_refused() {
        let r = route();
        r.hold().expect("hold");
        assert_eq!(r.side(), Side::Holding);
        let e = r.hold().expect_err("held already");
        assert_eq!(e.side, "holding");
        // A mirror still MIRRORING does not release a held listener.
        assert_eq!(r.follow(&[Mirroring]), Side::Holding);
        r.release().expect("release");
        assert_eq!(r.side(), Side::Source);
        assert!(r.release().is_err(), "nothing to release");
    }

    #[test]
    fn producer_ids_handed_out_through_the_listener_own_their_state_only_after_a_catch_up() {
        let r = route();
        r.note_producer(7, 0);
        r.note_producer(-1, 0);
        assert!(r.came_through(7));
        assert!(!r.is_forwarded(7, "t", 0), "no switchover caught up yet");
        r.hold().expect("hold");
        r.mark_caught_up();
        assert!(r.is_forwarded(7, "t", 0));
        assert!(!r.is_forwarded(8, "t", 0));
        assert_eq!(r.forwarded_producers(), 1);
    }

    #[test]
    fn with_another_mirroring_tool_forwarded_producers_never_own_state_and_are_screened_at_their_epoch(
    ) {
        let r = ForwardRoute::new("dr", "c", Arc::default(), false);
        r.note_producer(7, 0);
        r.note_epoch(7, 2);
        r.hold().expect("hold");
        r.mark_caught_up();
        assert_eq!(r.follow(&[Stopped]), Side::Destination);
        assert!(
            !r.is_forwarded(7, "t", 0),
            "MirrorMaker wrote under its own ids"
        );
        assert_eq!(r.screen_entries(), vec![(7, 2)]);
    }

    /// The other instances' view, as a fake: what `forward_source_refusal` answers, and what it
    /// was asked.
    #[derive(Default)]
    struct Peers {
        refusal: Mutex<Option<String>>,
        asked_held_here: Mutex<Vec<bool>>,
    }

    impl crate::mirror::peer_gate::PeerGate for Peers {
        fn lease_remaining(&self) -> Option<Duration> {
            None
        }
        fn lease_problem(&self) -> Option<String> {
            None
        }
        fn mirror_write_refusal(&self, _: &str) -> Option<crate::mirror::peer_gate::PeerRefusal> {
            None
        }
        fn failover_refusal(&self, _: &str) -> Option<crate::mirror::peer_gate::PeerRefusal> {
            None
        }
        fn failed_over_by(&self, _: &str) -> Option<(String, String)> {
            None
        }
        fn forward_source_refusal(&self, _: &str, held_here: bool) -> Option<String> {
            self.asked_held_here.lock().unwrap().push(held_here);
            self.refusal.lock().unwrap().clone()
        }
    }

    #[test]
    fn one_instance_never_refuses_the_source() {
        assert_eq!(route().source_refusal(), None);
    }

    #[test]
    fn with_several_instances_the_state_topics_view_refuses_the_source_before_each_send() {
        let r = route();
        let peers = Arc::new(Peers::default());
        r.set_peers(peers.clone());
        assert_eq!(r.source_refusal(), None);
        *peers.refusal.lock().unwrap() = Some("no lease".into());
        assert_eq!(r.source_refusal().as_deref(), Some("no lease"));
        // Held here: the hold is known (only a lease or a failover can refuse then).
        r.hold().expect("hold");
        r.source_refusal();
        assert_eq!(
            *peers.asked_held_here.lock().unwrap(),
            vec![false, false, true]
        );
        // On the destination nothing goes to the source: nothing to ask.
        r.follow(&[Stopped]);
        assert_eq!(r.source_refusal(), None);
        assert_eq!(peers.asked_held_here.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_released_switchover_forgets_its_catch_up() {
        let r = route();
        r.note_producer(7, 0);
        r.hold().expect("hold");
        r.mark_caught_up();
        r.release().expect("release");
        assert!(!r.is_forwarded(7, "t", 0));
    }

    #[test]
    fn after_a_failover_that_was_not_a_switchover_a_forwarded_producer_goes_on_where_nothing_of_it_is_lacking(
    ) {
        let r = route();
        r.note_producer(7, 0);
        let batch = |first_offset| crate::mirror::forwarded_acks::AckedBatch {
            producer_id: 7,
            producer_epoch: 0,
            first_sequence: 0,
            first_offset,
            records: 1,
        };
        r.acks().note("t", 1, batch(9));
        assert_eq!(r.follow(&[Stopping]), Side::Holding);
        assert!(!r.is_forwarded(7, "t", 0), "not before the switch");
        assert_eq!(r.follow(&[Stopped]), Side::Destination);
        assert!(r.is_forwarded(7, "t", 0), "nothing of it lacking there");
        assert!(
            !r.is_forwarded(7, "t", 1),
            "an acknowledged batch lacking there"
        );
        assert!(!r.is_forwarded(8, "t", 0), "not a forwarded producer");
    }

    #[test]
    fn a_producer_from_before_a_crash_goes_on_after_a_failover_only_where_the_agent_mirrored_past_the_ends_read_after_it(
    ) {
        let before = route();
        before.note_producer(7, 0);
        let mut ids = Vec::new();
        before
            .persist_producers(|b| {
                ids = b.to_vec();
                Ok::<_, ()>(())
            })
            .unwrap();
        let r = route();
        r.restore_producers(&ids).unwrap();
        r.acks().restarted_without_handover();
        r.follow(&[Stopped]);
        assert!(
            !r.is_forwarded(7, "t", 0),
            "its last acknowledgements unknown"
        );
        let ends = std::collections::BTreeMap::from([(("t".to_string(), 0), 10)]);
        r.acks().read_restart_ends(ends).unwrap();
        assert!(!r.is_forwarded(7, "t", 0), "not mirrored past the end yet");
        r.acks().mirrored_to("t", 0, 10);
        assert!(r.is_forwarded(7, "t", 0));
    }

    #[test]
    fn an_inexact_ledger_leaves_every_producer_to_the_refusal_after_a_failover() {
        let r = route();
        r.note_producer(7, 0);
        r.acks().note_unnamed();
        r.follow(&[Stopped]);
        assert!(!r.is_forwarded(7, "t", 0));
    }

    #[test]
    fn another_instances_hold_holds_the_route_and_is_acknowledged_once_no_source_connection_is_left(
    ) {
        let r = route();
        let conn = r.connection_to(Side::Source).expect("counted");
        assert_eq!(
            r.follow_peer_hold(order("h1", false, false), false),
            None,
            "still one in flight"
        );
        assert_eq!(r.side(), Side::Holding);
        drop(conn);
        assert_eq!(
            r.follow_peer_hold(order("h1", false, false), false)
                .as_deref(),
            Some("h1")
        );
    }

    #[test]
    fn another_instances_hold_that_ends_without_a_failover_releases_the_route() {
        let r = route();
        r.follow_peer_hold(order("h1", false, false), false);
        assert_eq!(r.follow_peer_hold(None, false), None);
        assert_eq!(r.side(), Side::Source);
        assert_eq!(r.follow(&[Mirroring]), Side::Source);
    }

    #[test]
    fn a_failover_in_progress_keeps_the_route_held_when_the_other_instances_hold_ends() {
        let r = route();
        r.follow_peer_hold(order("h1", false, false), false);
        r.follow_peer_hold(None, false);
        assert_eq!(r.follow(&[Stopping]), Side::Holding);
    }

    #[test]
    fn producers_forwarded_here_go_on_after_another_instances_switchover_only_once_it_caught_up() {
        let r = route();
        r.note_producer(7, 0);
        r.follow_peer_hold(order("h1", false, false), false);
        r.follow(&[Stopping]);
        r.follow_peer_hold(order("h1", true, false), false);
        assert!(!r.is_forwarded(7, "t", 0), "not before the switch");
        assert_eq!(r.follow(&[Stopped]), Side::Destination);
        assert!(r.caught_up());
        assert!(r.is_forwarded(7, "t", 0));

        let other = route();
        other.note_producer(7, 0);
        other.follow_peer_hold(order("h1", false, false), false);
        other.follow(&[Stopped]);
        assert!(
            !other.caught_up(),
            "a hold whose catch-up was not recorded proves nothing"
        );
    }

    /// A request body of `api` by producer `id` (after its header).
    fn txn_request(api: ApiKey, version: i16, id: i64) -> Bytes {
        use kafka_protocol::messages::{EndTxnRequest, ProducerId, TxnOffsetCommitRequest};
        use kafka_protocol::protocol::Encodable;
        let mut b = bytes::BytesMut::new();
        match api {
            ApiKey::EndTxn => EndTxnRequest::default()
                .with_producer_id(ProducerId(id))
                .encode(&mut b, version),
            _ => TxnOffsetCommitRequest::default()
                .with_producer_id(ProducerId(id))
                .encode(&mut b, version),
        }
        .expect("encode");
        b.freeze()
    }

    #[test]
    fn a_hold_lets_the_requests_of_the_transactions_open_through_it_reach_the_source_and_nothing_else(
    ) {
        let r = route();
        r.note_transaction(7);
        let nothing = Bytes::new();
        assert!(r.admits_to_source(ApiKey::Fetch, 12, &nothing), "not held");
        r.hold().expect("hold");
        assert!(r.finishing());
        assert!(r.serves_source());
        assert!(r.admits_to_source(ApiKey::EndTxn, 3, &txn_request(ApiKey::EndTxn, 3, 7)));
        assert!(r.admits_to_source(
            ApiKey::TxnOffsetCommit,
            3,
            &txn_request(ApiKey::TxnOffsetCommit, 3, 7)
        ));
        assert!(r.admits_to_source(ApiKey::Metadata, 12, &nothing));
        assert!(
            !r.admits_to_source(ApiKey::EndTxn, 3, &txn_request(ApiKey::EndTxn, 3, 8)),
            "a transaction not open at the hold"
        );
        assert!(!r.admits_to_source(ApiKey::Fetch, 12, &nothing));
        assert!(
            !r.admits_to_source(ApiKey::Produce, 9, &nothing),
            "unreadable"
        );
    }

    #[test]
    fn the_last_open_transaction_ending_ends_the_finishing_and_nothing_more_reaches_the_source() {
        let r = route();
        r.note_transaction(7);
        r.note_transaction(9);
        r.hold().expect("hold");
        r.end_transaction(7);
        assert!(r.finishing(), "one still open");
        r.end_transaction(9);
        assert!(!r.finishing());
        assert!(!r.serves_source());
        assert!(!r.admits_to_source(ApiKey::EndTxn, 3, &txn_request(ApiKey::EndTxn, 3, 9)));
        assert!(!r.admits_to_source(ApiKey::Metadata, 12, &Bytes::new()));
    }

    #[test]
    fn a_hold_without_open_transactions_does_not_finish_and_a_release_or_a_failover_ends_finishing()
    {
        let r = route();
        r.hold().expect("hold");
        assert!(!r.finishing());
        r.release().expect("release");
        r.note_transaction(7);
        r.hold().expect("hold");
        assert!(r.finishing());
        r.release().expect("release");
        assert!(!r.finishing(), "released");
        r.hold().expect("hold");
        r.follow(&[Stopping]);
        assert!(!r.finishing(), "the failover aborts what is open");
    }

    #[test]
    fn source_connections_are_counted_while_they_live() {
        let r = route();
        let a = r.connection_to(Side::Source).expect("counted");
        let b = r.connection_to(Side::Source).expect("counted");
        assert_eq!(r.source_connections(), 2);
        drop(a);
        drop(b);
        assert_eq!(r.source_connections(), 0);
    }
}
