//! A switchover's hold of the forward listeners of every instance, as the state topic tells
//! it: which instances have a forward listener of a mirror (their heartbeats), the latest hold
//! a switchover recorded for it, who acknowledged that hold, and whether a failover followed.
//!
//! The instance driving a switchover holds its own listener, records the hold, and waits
//! until every instance that has a forward listener of the mirror and may still be alive
//! acknowledged it ([`PeerView::forward_waiting_for`]): only then is nothing forwarded to the
//! source any more, and the source's log end is the end to mirror. Every other instance holds
//! its listener while the hold stands ([`PeerView::forward_hold`]):
//!
//! | hold read here \ next | failover of the mirror read | release read | driver gone or hold past its bound, no failover |
//! |---|---|---|---|
//! | held (driver alive) | stands until the failover ends it | ends | ends |
//! | held, failover after | — | — (no release is written after a failover) | stands |
//! | a switch back's, held | — | ends (the listeners go back to the destination) | ends (likewise) |
//! | a switch back's, caught up (the old source's failover follows) | — | ends (the listeners go on to the source once the mirror mirrors again) | stands |
//!
//! Owns: those records' meaning. Must not touch: the forward listener itself (its instance's
//! follow task holds and releases it), the failover's records.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{PeerRecord, PeerView, MARGIN};

/// What the view keeps of the forward holds.
#[derive(Debug, Default)]
pub(super) struct ForwardHolds {
    /// Instance → the mirrors it has a forward listener for (its latest heartbeat).
    listeners: HashMap<String, Vec<String>>,
    /// Mirror → its latest hold record.
    holds: HashMap<String, Hold>,
    /// (mirror, instance) → the hold it last acknowledged.
    held: HashMap<(String, String), String>,
}

#[derive(Debug, Clone)]
struct Hold {
    hold_id: String,
    by: String,
    held: bool,
    /// The driver's bound on the hold up to its failover (`forward.hold_ms`).
    hold: Duration,
    /// When this view read it (its own clock: a bound measured here).
    read_at: Instant,
    /// A failover of the mirror was announced after it: the hold is the failover's now.
    failover_after: bool,
    /// The switchover recorded that the agent mirrored the source's log end under it (a
    /// switch back: that the old source reached the destination's ends).
    caught_up: bool,
    /// A switch back's hold.
    back: bool,
}

/// A hold by another instance that this instance's forward listener of a mirror keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldOrder {
    pub hold_id: String,
    pub by: String,
    /// This instance acknowledged it already.
    pub acknowledged: bool,
    /// The agent mirrored the source's log end under it (see [`PeerRecord::ForwardHold`]).
    pub caught_up: bool,
    /// A switch back's hold (see [`PeerRecord::ForwardHold`]).
    pub back: bool,
}

impl ForwardHolds {
    pub(super) fn declare(&mut self, instance: &str, mirrors: Vec<String>) {
        self.listeners.insert(instance.to_string(), mirrors);
    }

    /// A [`PeerRecord::ForwardHold`] read at `now` (other records: nothing).
    pub(super) fn hold(&mut self, r: PeerRecord, now: Instant) {
        if let PeerRecord::ForwardHold {
            mirror,
            hold_id,
            by,
            held,
            hold_ms,
            caught_up,
            back,
            ..
        } = r
        {
            let h = Hold {
                hold_id,
                by,
                held,
                hold: Duration::from_millis(hold_ms),
                read_at: now,
                failover_after: false,
                caught_up,
                back,
            };
            self.holds.insert(mirror, h);
        }
    }

    pub(super) fn acknowledge(&mut self, mirror: String, instance: String, hold_id: String) {
        self.held.insert((mirror, instance), hold_id);
    }

    /// What a reader concluded, in a stable order, without the instants read (test builds:
    /// the compaction tests compare two readers).
    #[cfg(test)]
    pub(super) fn conclusions(&self) -> String {
        let mut listeners: Vec<_> = self.listeners.iter().collect();
        listeners.sort();
        let mut holds: Vec<_> = self
            .holds
            .iter()
            .map(|(m, h)| {
                let flags = (h.held, h.caught_up, h.back, h.failover_after);
                (m, &h.hold_id, &h.by, flags)
            })
            .collect();
        holds.sort();
        let mut held: Vec<_> = self.held.iter().collect();
        held.sort();
        format!("listeners {listeners:?} holds {holds:?} held {held:?}")
    }

    /// A failover of `mirror` was announced.
    pub(super) fn failover(&mut self, mirror: &str) {
        if let Some(h) = self.holds.get_mut(mirror) {
            h.failover_after = true;
        }
    }
}

impl PeerView {
    /// The hold another instance's switchover keeps on this instance's forward listener of
    /// `mirror` at `now` (see the module's table), `None` when none does.
    pub fn forward_hold(&self, mirror: &str, now: Instant) -> Option<HoldOrder> {
        let h = self.forward.holds.get(mirror)?;
        if !h.held || h.by == self.me {
            return None;
        }
        let driver_alive = self.alive(now).iter().any(|(i, _)| *i == h.by);
        let within = now < h.read_at + h.hold + self.session + MARGIN;
        // A hold followed by a failover stands, and so does a switch back's once the old
        // source's failover follows; otherwise while its driver may still proceed.
        let committed = h.failover_after || h.back && h.caught_up;
        let stands = committed || driver_alive && within;
        if !stands {
            return None;
        }
        Some(HoldOrder {
            hold_id: h.hold_id.clone(),
            by: h.by.clone(),
            acknowledged: self.forward_acknowledged(mirror, &self.me, &h.hold_id),
            caught_up: h.caught_up,
            back: h.back,
        })
    }

    /// The id of `mirror`'s latest hold when it is a switch back that is through (released
    /// with its catch-up: the old source failed over) and no failover of the mirror came after.
    pub fn switched_back(&self, mirror: &str) -> Option<String> {
        let h = self.forward.holds.get(mirror)?;
        (h.back && !h.held && h.caught_up && !h.failover_after).then(|| h.hold_id.clone())
    }

    fn forward_acknowledged(&self, mirror: &str, instance: &str, hold_id: &str) -> bool {
        self.forward
            .held
            .get(&(mirror.to_string(), instance.to_string()))
            .is_some_and(|h| h == hold_id)
    }

    /// The other instances with a forward listener of `mirror` that hold `hold_id` is still
    /// waiting for at `now`: not acknowledged, and alive, or gone so lately (within `settle`
    /// after their session) that a request they forwarded may still reach the source.
    pub fn forward_waiting_for(
        &self,
        mirror: &str,
        hold_id: &str,
        now: Instant,
        settle: Duration,
    ) -> Vec<String> {
        let mut v: Vec<String> = self
            .forward
            .listeners
            .iter()
            .filter(|(i, mirrors)| **i != self.me && mirrors.iter().any(|m| m == mirror))
            .filter(|(i, _)| {
                self.seen
                    .get(*i)
                    .is_some_and(|seen| now < *seen + self.session + MARGIN.max(settle))
            })
            .filter(|(i, _)| !self.forward_acknowledged(mirror, i, hold_id))
            .map(|(i, _)| i.clone())
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PeerRecord, PeerView};
    use std::time::{Duration, Instant};

    const SESSION: Duration = Duration::from_secs(3);
    const SETTLE: Duration = Duration::from_secs(5);

    fn heartbeat(i: &str, forward: &[&str]) -> PeerRecord {
        PeerRecord::Heartbeat {
            instance: i.into(),
            at_ms: 0,
            agents: vec![],
            incarnation: None,
            forward: forward.iter().map(|m| m.to_string()).collect(),
        }
    }

    fn hold(by: &str, id: &str, held: bool) -> PeerRecord {
        hold_record(by, id, held, false, false)
    }

    /// A switch back's hold: held, caught up (the old source's failover follows), or
    /// released (`caught_up`: through).
    fn back(by: &str, id: &str, held: bool, caught_up: bool) -> PeerRecord {
        hold_record(by, id, held, caught_up, true)
    }

    fn hold_record(by: &str, id: &str, held: bool, caught_up: bool, back: bool) -> PeerRecord {
        PeerRecord::ForwardHold {
            mirror: "m".into(),
            hold_id: id.into(),
            by: by.into(),
            held,
            hold_ms: 1_000,
            caught_up,
            back,
            at_ms: 0,
        }
    }

    fn held(i: &str, id: &str) -> PeerRecord {
        PeerRecord::ForwardHeld {
            mirror: "m".into(),
            hold_id: id.into(),
            instance: i.into(),
            at_ms: 0,
        }
    }

    fn failover() -> PeerRecord {
        PeerRecord::Failover {
            mirror: "m".into(),
            failover_id: Some("f1".into()),
            by: "a".into(),
            at_ms: 0,
            epoch: 1,
        }
    }

    fn view(me: &str, records: Vec<PeerRecord>, now: Instant) -> PeerView {
        let mut v = PeerView::new(me, SESSION);
        for r in records {
            v.apply(r, now, 0);
        }
        v
    }

    #[test]
    fn a_switchover_waits_for_every_instance_with_a_forward_listener_of_the_mirror() {
        let now = Instant::now();
        let mut v = view(
            "a",
            vec![
                heartbeat("b", &["m"]),
                heartbeat("c", &["other"]),
                heartbeat("d", &["m", "other"]),
                hold("a", "h1", true),
            ],
            now,
        );
        assert_eq!(v.forward_waiting_for("m", "h1", now, SETTLE), ["b", "d"]);
        v.apply(held("b", "h1"), now, 0);
        v.apply(held("d", "h0"), now, 0);
        assert_eq!(
            v.forward_waiting_for("m", "h1", now, SETTLE),
            ["d"],
            "an acknowledgement of an earlier hold does not count"
        );
        v.apply(held("d", "h1"), now, 0);
        assert!(v.forward_waiting_for("m", "h1", now, SETTLE).is_empty());
    }

    #[test]
    fn an_instance_gone_lately_is_waited_for_until_its_forwarded_requests_have_settled() {
        let then = Instant::now();
        let v = view("a", vec![heartbeat("b", &["m"])], then);
        let gone = then + SESSION + Duration::from_secs(3);
        assert_eq!(v.forward_waiting_for("m", "h1", gone, SETTLE), ["b"]);
        let settled = then + SESSION + SETTLE + Duration::from_millis(1);
        assert!(v.forward_waiting_for("m", "h1", settled, SETTLE).is_empty());
    }

    #[test]
    fn another_instances_hold_holds_the_listener_here_until_it_is_released() {
        let now = Instant::now();
        let mut v = view(
            "b",
            vec![heartbeat("a", &["m"]), hold("a", "h1", true)],
            now,
        );
        let order = v.forward_hold("m", now).expect("held");
        assert_eq!((order.hold_id.as_str(), order.acknowledged), ("h1", false));
        v.apply(held("b", "h1"), now, 0);
        assert!(v.forward_hold("m", now).expect("held").acknowledged);
        v.apply(hold("a", "h1", false), now, 0);
        assert_eq!(v.forward_hold("m", now), None);
    }

    #[test]
    fn a_switch_back_caught_up_stands_past_its_bound_until_it_says_it_is_through() {
        let then = Instant::now();
        let past = then + Duration::from_secs(1) + SESSION + Duration::from_secs(3);
        let held = vec![heartbeat("a", &["m"]), back("a", "h2", true, false)];
        let v = view("b", held.clone(), then);
        assert!(v.forward_hold("m", then).expect("held").back);
        assert_eq!(
            v.forward_hold("m", past),
            None,
            "not caught up: ends at its bound"
        );
        let mut v = view("b", held, then);
        v.apply(back("a", "h2", true, true), then, 0);
        assert!(v.forward_hold("m", past).is_some(), "caught up: stands");
        assert_eq!(v.switched_back("m"), None);
        v.apply(back("a", "h2", false, true), then, 0);
        assert_eq!(v.forward_hold("m", then), None);
        assert_eq!(v.switched_back("m").as_deref(), Some("h2"));
    }

    #[test]
    fn a_switch_back_given_up_or_followed_by_a_failover_is_not_through() {
        let now = Instant::now();
        let v = view(
            "b",
            vec![heartbeat("a", &["m"]), back("a", "h2", false, false)],
            now,
        );
        assert_eq!(v.switched_back("m"), None, "given up");
        let v = view(
            "b",
            vec![
                heartbeat("a", &["m"]),
                back("a", "h2", false, true),
                failover(),
            ],
            now,
        );
        assert_eq!(v.switched_back("m"), None, "a later failover of the mirror");
    }

    #[test]
    fn an_own_hold_is_not_an_order_here() {
        let now = Instant::now();
        let v = view("a", vec![hold("a", "h1", true)], now);
        assert_eq!(v.forward_hold("m", now), None);
    }

    #[test]
    fn a_hold_whose_driver_is_gone_or_past_its_bound_without_a_failover_ends() {
        let then = Instant::now();
        let v = view(
            "b",
            vec![heartbeat("a", &["m"]), hold("a", "h1", true)],
            then,
        );
        let past = then + Duration::from_secs(1) + SESSION + Duration::from_secs(3);
        assert_eq!(v.forward_hold("m", past), None, "past its bound");
        let v = view("b", vec![hold("a", "h1", true)], then);
        assert_eq!(v.forward_hold("m", then), None, "its driver never seen");
    }

    #[test]
    fn a_hold_followed_by_a_failover_stands_even_when_its_driver_is_gone() {
        let then = Instant::now();
        let v = view(
            "b",
            vec![heartbeat("a", &["m"]), hold("a", "h1", true), failover()],
            then,
        );
        let later = then + Duration::from_secs(60);
        assert_eq!(v.forward_hold("m", later).expect("stands").hold_id, "h1");
    }
}
