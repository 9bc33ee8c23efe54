//! A forward listener's memory handed from a gateway that stops cleanly to the next one: the
//! ledger of acknowledgements not seen mirrored yet, and the producer ids this process noted.
//!
//! The ledger lives in memory, so after a restart only the producers that got their id since
//! then have all their acknowledgements in it: after an *unplanned* failover the others would be
//! refused (their epoch bumped) and their acknowledgements left out of the report. A clean stop
//! (SIGTERM, a rolling restart) knows its ledger is whole once every connection has ended, and
//! hands it over; the next process takes it over before its listener accepts anything, and its
//! producers count as noted there.
//!
//! A running gateway also writes the same form as its **journal**, about once a second while the
//! ledger changes. A process that crashed handed nothing over; the next one restores the
//! journal's ledger ([`ForwardRoute::restore_journal`]) for the report, which then says that
//! what passed after the journal's last write is not counted. Its producers do not count as
//! noted there: the journal may lack their last acknowledgements, so after an unplanned
//! failover they are refused (their epoch bumped), as without it.
//!
//! Owns: the handover's encoding and what taking it over changes in the route. Must not touch:
//! the state directory (the caller reads, removes and writes the file), the sockets.

use serde::{Deserialize, Serialize};

use super::{now_ms, ForwardRoute};
use crate::mirror::forwarded_acks::LedgerSnapshot;

/// The handed-over form.
#[derive(Debug, Serialize, Deserialize)]
struct Handover {
    version: u32,
    /// The mirror it is of.
    mirror: String,
    written_ms: i64,
    /// The ids the stopping process noted: (id, when last noted, highest epoch seen).
    producers: Vec<(i64, i64, i16)>,
    acks: LedgerSnapshot,
}

/// A handover that cannot be taken over.
#[derive(Debug, thiserror::Error)]
#[error("the forward listener's handover is not readable: {0}")]
pub struct HandoverError(String);

/// What a handover brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakenOver {
    pub producers: usize,
    pub batches: usize,
    /// When the earlier process wrote it.
    pub written_ms: i64,
}

impl ForwardRoute {
    /// The route's memory to hand to the next process. Only whole once no connection of the
    /// listener is left (the caller's drain ended).
    pub fn handover(&self) -> Vec<u8> {
        let h = Handover {
            version: 1,
            mirror: self.mirror.clone(),
            written_ms: now_ms(),
            producers: self.ids().noted_here_entries(),
            acks: self.acks.snapshot(),
        };
        serde_json::to_vec(&h).unwrap_or_default()
    }

    /// Take over what an earlier process handed over (`bytes`), before the listener accepts
    /// anything.
    pub fn take_handover(&self, bytes: &[u8]) -> Result<TakenOver, HandoverError> {
        self.restore_from(bytes, false)
    }

    /// Restore the ledger of the journal (`bytes`, the form [`Self::handover`] writes) that a
    /// process which crashed left, before the listener accepts anything: for the report only
    /// (see the module doc; no producer is taken over).
    pub fn restore_journal(&self, bytes: &[u8]) -> Result<TakenOver, HandoverError> {
        self.restore_from(bytes, true)
    }

    /// A handover (its producers taken over), or after a `crash` a journal (the ledger only).
    fn restore_from(&self, bytes: &[u8], crash: bool) -> Result<TakenOver, HandoverError> {
        let h = self.decode(bytes)?;
        let batches = h.acks.batches();
        let producers = if crash {
            self.acks.restore_after_crash(h.acks, h.written_ms);
            0
        } else {
            self.acks.restore(h.acks);
            self.ids().take_over(&h.producers, now_ms())
        };
        Ok(TakenOver {
            producers,
            batches,
            written_ms: h.written_ms,
        })
    }

    fn decode(&self, bytes: &[u8]) -> Result<Handover, HandoverError> {
        let h: Handover =
            serde_json::from_slice(bytes).map_err(|e| HandoverError(e.to_string()))?;
        if h.version != 1 {
            return Err(HandoverError(format!("unknown version {}", h.version)));
        }
        if h.mirror != self.mirror {
            return Err(HandoverError(format!(
                "it is mirror {:?}'s, not {:?}'s",
                h.mirror, self.mirror
            )));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::mirror::forwarded_acks::AckedBatch;
    use crate::mirror::PartitionState::{Stopped, Stopping};

    fn route() -> Arc<ForwardRoute> {
        ForwardRoute::new("dr", "mirrorgate-forward-dr", Arc::default(), true)
    }

    fn batch(producer_id: i64, first_offset: i64) -> AckedBatch {
        AckedBatch {
            producer_id,
            producer_epoch: 0,
            first_sequence: 0,
            first_offset,
            records: 5,
        }
    }

    /// The ids file as the first process persisted it (what a crash leaves behind).
    fn ids_file(r: &ForwardRoute) -> Vec<u8> {
        let mut out = Vec::new();
        r.persist_producers(|b| {
            out = b.to_vec();
            Ok::<(), ()>(())
        })
        .unwrap();
        out
    }

    /// An unplanned failover: the route held, then on the destination, no catch-up.
    fn failed_over(r: &ForwardRoute) {
        r.follow(&[Stopping]);
        r.follow(&[Stopped]);
    }

    #[test]
    fn after_a_clean_stop_the_next_process_lets_a_producer_whose_records_were_all_mirrored_go_on_after_an_unplanned_failover(
    ) {
        let first = route();
        first.note_producer(7, 0);
        first.note_producer(8, 0);
        first.acks().note("t", 0, batch(8, 0));
        let (ids, handed) = (ids_file(&first), first.handover());

        let next = route();
        next.restore_producers(&ids).unwrap();
        let taken = next.take_handover(&handed).unwrap();
        assert_eq!((taken.producers, taken.batches), (2, 1));
        failed_over(&next);
        assert!(next.is_forwarded(7, "t", 0), "7 lacks nothing: it goes on");
        assert!(
            !next.is_forwarded(8, "t", 0),
            "8's acknowledged batch is not on the destination: refused"
        );
        let loss = next.acks().missing(&|_, _| Some(0));
        assert_eq!(loss.records, 5, "the report still names it");
    }

    #[test]
    fn after_a_crash_the_restored_ids_alone_do_not_let_a_producer_go_on_after_an_unplanned_failover(
    ) {
        let first = route();
        first.note_producer(7, 0);
        let ids = ids_file(&first);
        let next = route();
        next.restore_producers(&ids).unwrap();
        failed_over(&next);
        assert!(next.came_through(7));
        assert!(
            !next.is_forwarded(7, "t", 0),
            "its acknowledgements before the crash are not known"
        );
    }

    #[test]
    fn after_a_crash_the_journal_gives_the_report_its_batches_but_lets_no_producer_of_it_go_on() {
        let first = route();
        first.note_producer(7, 0);
        first.acks().note("t", 0, batch(7, 0));
        let (ids, journal) = (ids_file(&first), first.handover());

        let next = route();
        next.restore_producers(&ids).unwrap();
        let restored = next.restore_journal(&journal).unwrap();
        assert_eq!((restored.producers, restored.batches), (0, 1));
        next.note_producer(9, 0);
        failed_over(&next);
        let loss = next.acks().missing(&|_, _| Some(0));
        assert_eq!(loss.records, 5, "the report names the journal's batch");
        assert!(loss.inexact.is_some_and(|w| w.contains("crash")));
        assert!(
            !next.is_forwarded(7, "t", 0),
            "its last acknowledgements may be missing from the journal: refused"
        );
        assert!(
            next.is_forwarded(9, "t", 0),
            "a producer noted since the restart goes on"
        );
    }

    #[test]
    fn a_handover_of_another_mirror_or_an_unknown_form_is_refused_and_changes_nothing() {
        let other = ForwardRoute::new("other", "c", Arc::default(), true);
        other.note_producer(7, 0);
        let r = route();
        let e = r.take_handover(&other.handover()).unwrap_err();
        assert!(e.to_string().contains("\"other\""), "{e}");
        assert!(r.take_handover(b"{\"version\":2}").is_err());
        assert!(r.take_handover(b"not json").is_err());
        assert!(r.restore_journal(&other.handover()).is_err());
        assert!(r.restore_journal(b"not json").is_err());
        assert!(!r.came_through(7));
    }
}
