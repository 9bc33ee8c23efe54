//! Several instances, after a failover: a forward listener's ledger of acknowledgements settled
//! to the positions the failover's completed report names (per partition, the next source
//! offset the agent would have mirrored: everything below it is on the destination).
//!
//! The built-in agent runs on one instance; only there are its offset maps current. Elsewhere a
//! forward listener's ledger is pruned to the maps the owner publishes on the state topic (every
//! 2 s at most), so it holds batches that are in fact mirrored, and after a failover that was
//! not a switchover its producers would be refused where they lack nothing. So, on an instance
//! where the agent does not run, a listener whose mirror's partitions are all STOPPED stays held
//! until the completed report is read (at most [`SETTLE_WAIT`]); then its ledger is pruned to the
//! report's positions and it switches. A switchover needs no wait: its catch-up covered every
//! instance. And every instance whose ledger the report does not count yet publishes what its
//! ledger lacks at those positions, which the report read through any instance adds.
//!
//! Owns: that decision and the loss to publish. Must not touch: the route's side (the caller
//! follows the states it is told to), the agent's positions, the report's storage.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::mirror::forwarded_acks::{ForwardedAcks, ForwardedLoss};

/// How long a listener waits for the failover's completed report before it switches with its
/// ledger as it is (its producers with batches the ledger still holds are then refused).
pub const SETTLE_WAIT: Duration = Duration::from_secs(15);

/// How often a waiting listener looks for the report.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// A failover's completed report, as the settling reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completed {
    /// Per partition, the next source offset the agent would have mirrored (partitions whose
    /// position is not known are absent).
    pub next: HashMap<(String, i32), i64>,
    /// The report counts this instance's ledger already (this instance completed it).
    pub counts_here: bool,
}

/// What the settling reads of the mirror and the state topic.
pub trait SettleView {
    /// The mirror's current failover id, as this instance recorded it.
    fn failover_id(&self) -> Option<String>;
    /// Failover `fid`'s report, once completed.
    fn completed(&self, fid: &str) -> Option<Completed>;
    /// Whether the mirror's built-in agent runs on this instance (its maps are current).
    fn runs_agent_here(&self) -> bool;
}

/// What the route does with the mirror's states this round.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Follow them.
    Follow,
    /// Stay held: the partitions are STOPPED, the report is not read yet.
    Hold,
}

/// The settling of one forward listener (see the module doc).
#[derive(Debug, Default)]
pub struct Settle {
    /// Since when every partition has been STOPPED, with no report read.
    waiting_since: Option<Instant>,
    /// The failover whose report the ledger was settled to (and its loss published).
    settled: Option<String>,
    /// The failover the wait gave up on.
    gave_up: Option<String>,
    /// When the report was last looked for while waiting.
    looked: Option<Instant>,
}

impl Settle {
    /// One round. `all_stopped`: every partition of the mirror is STOPPED here; `switched`:
    /// the route serves the destination already; `caught_up`: a switchover's catch-up covers
    /// this listener. Returns what the route does, and the loss to publish for the report
    /// (then [`Settle::published`] once it is).
    pub fn round(
        &mut self,
        view: &dyn SettleView,
        acks: &ForwardedAcks,
        now: Instant,
        (all_stopped, switched, caught_up): (bool, bool, bool),
    ) -> (Verdict, Option<(String, ForwardedLoss)>) {
        if !all_stopped {
            // Mirroring (again, after a failback): the next failover settles anew.
            *self = Settle::default();
            return (Verdict::Follow, None);
        }
        if self.settled.is_some() {
            return (Verdict::Follow, None);
        }
        // While waiting, the report is looked for every [`LOOK_EVERY`] (the caller may ask at
        // every round of a held listener).
        if self.waiting_since.is_some()
            && self
                .looked
                .is_some_and(|t| now.saturating_duration_since(t) < LOOK_EVERY)
        {
            return (Verdict::Hold, None);
        }
        self.looked = Some(now);
        let Some(fid) = view.failover_id() else {
            return (Verdict::Follow, None);
        };
        if let Some(done) = view.completed(&fid) {
            for ((topic, partition), next) in &done.next {
                acks.mirrored_to(topic, *partition, *next);
            }
            if done.counts_here {
                self.settled = Some(fid);
                return (Verdict::Follow, None);
            }
            let loss = acks.missing(&|t, p| done.next.get(&(t.to_string(), p)).copied());
            return (Verdict::Follow, Some((fid, loss)));
        }
        if switched || caught_up || view.runs_agent_here() || self.gave_up.as_ref() == Some(&fid) {
            self.waiting_since = None;
            return (Verdict::Follow, None);
        }
        let since = *self.waiting_since.get_or_insert(now);
        if now.saturating_duration_since(since) < SETTLE_WAIT {
            return (Verdict::Hold, None);
        }
        tracing::warn!(
            failover_id = %fid,
            "the failover's report was not read within {SETTLE_WAIT:?}: the forward listener switches with its ledger as published, and its producers with acknowledged batches not known to be mirrored are refused"
        );
        self.gave_up = Some(fid);
        self.waiting_since = None;
        (Verdict::Follow, None)
    }

    /// The loss of failover `fid` is published: the ledger is settled.
    pub fn published(&mut self, fid: String) {
        self.settled = Some(fid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::forwarded_acks::AckedBatch;
    use std::cell::RefCell;

    #[derive(Default)]
    struct View {
        fid: Option<String>,
        done: RefCell<Option<Completed>>,
        agent_here: bool,
    }

    impl SettleView for View {
        fn failover_id(&self) -> Option<String> {
            self.fid.clone()
        }
        fn completed(&self, fid: &str) -> Option<Completed> {
            self.done
                .borrow()
                .clone()
                .filter(|_| Some(fid) == self.fid.as_deref())
        }
        fn runs_agent_here(&self) -> bool {
            self.agent_here
        }
    }

    fn failed_over() -> View {
        View {
            fid: Some("f1".into()),
            ..View::default()
        }
    }

    fn report(next: i64, counts_here: bool) -> Completed {
        Completed {
            next: HashMap::from([(("t".to_string(), 0), next)]),
            counts_here,
        }
    }

    /// A ledger with producer 7's batches at source offsets 0–4 and 5–9 (partition t-0).
    fn ledger() -> ForwardedAcks {
        let acks = ForwardedAcks::new();
        for first in [0, 5] {
            acks.note(
                "t",
                0,
                AckedBatch {
                    producer_id: 7,
                    producer_epoch: 0,
                    first_sequence: first as i32,
                    first_offset: first,
                    records: 5,
                },
            );
        }
        acks
    }

    const STOPPED: (bool, bool, bool) = (true, false, false);

    #[test]
    fn a_listener_where_the_agent_does_not_run_stays_held_until_the_report_is_read_then_settles_its_ledger(
    ) {
        let (view, acks, mut s, t0) = (failed_over(), ledger(), Settle::default(), Instant::now());
        let (v, loss) = s.round(&view, &acks, t0, STOPPED);
        assert_eq!((v, loss), (Verdict::Hold, None));
        *view.done.borrow_mut() = Some(report(10, false));
        let (v, loss) = s.round(&view, &acks, t0 + Duration::from_secs(1), STOPPED);
        assert_eq!(v, Verdict::Follow);
        assert!(!acks.lacks(7, "t", 0), "pruned to the report's position");
        let (fid, loss) = loss.expect("the loss to publish");
        assert_eq!((fid.as_str(), loss.records), ("f1", 0));
    }

    #[test]
    fn what_the_report_says_the_destination_lacks_is_published_and_the_producer_stays_refused_there(
    ) {
        let (view, acks, mut s) = (failed_over(), ledger(), Settle::default());
        *view.done.borrow_mut() = Some(report(5, false));
        let (v, loss) = s.round(&view, &acks, Instant::now(), STOPPED);
        assert_eq!(v, Verdict::Follow);
        let (_, loss) = loss.expect("the loss to publish");
        assert_eq!(loss.records, 5);
        assert_eq!(loss.producers[0].first_offset, 5);
        assert!(acks.lacks(7, "t", 0));
        s.published("f1".into());
        assert_eq!(
            s.round(&view, &acks, Instant::now(), STOPPED),
            (Verdict::Follow, None),
            "published once"
        );
    }

    #[test]
    fn the_instance_the_report_counts_already_publishes_nothing() {
        let (view, acks, mut s) = (failed_over(), ledger(), Settle::default());
        *view.done.borrow_mut() = Some(report(5, true));
        assert_eq!(
            s.round(&view, &acks, Instant::now(), STOPPED),
            (Verdict::Follow, None)
        );
    }

    #[test]
    fn the_wait_for_the_report_is_bounded() {
        let (view, acks, mut s, t0) = (failed_over(), ledger(), Settle::default(), Instant::now());
        assert_eq!(s.round(&view, &acks, t0, STOPPED).0, Verdict::Hold);
        let late = t0 + SETTLE_WAIT;
        assert_eq!(s.round(&view, &acks, late, STOPPED).0, Verdict::Follow);
        assert_eq!(
            s.round(&view, &acks, late, STOPPED).0,
            Verdict::Follow,
            "not held again once given up"
        );
        assert!(acks.lacks(7, "t", 0), "the ledger as it was");
        // The report read later still settles the ledger and gives the loss.
        *view.done.borrow_mut() = Some(report(10, false));
        assert!(s.round(&view, &acks, late, STOPPED).1.is_some());
        assert!(!acks.lacks(7, "t", 0));
    }

    #[test]
    fn no_wait_where_the_agent_runs_after_a_switchover_or_once_switched() {
        let acks = ledger();
        for (view, flags) in [
            (
                View {
                    agent_here: true,
                    ..failed_over()
                },
                STOPPED,
            ),
            (failed_over(), (true, false, true)),
            (failed_over(), (true, true, false)),
        ] {
            let mut s = Settle::default();
            assert_eq!(
                s.round(&view, &acks, Instant::now(), flags),
                (Verdict::Follow, None)
            );
        }
    }

    #[test]
    fn a_mirror_not_stopped_follows_and_a_failback_forgets_the_settled_failover() {
        let (view, acks, mut s) = (failed_over(), ledger(), Settle::default());
        *view.done.borrow_mut() = Some(report(0, false));
        assert_eq!(
            s.round(&view, &acks, Instant::now(), (false, false, false)),
            (Verdict::Follow, None)
        );
        assert!(s.round(&view, &acks, Instant::now(), STOPPED).1.is_some());
        s.published("f1".into());
        s.round(&view, &acks, Instant::now(), (false, true, false));
        assert!(
            s.round(&view, &acks, Instant::now(), STOPPED).1.is_some(),
            "a later failover settles again"
        );
    }
}
