//! Matching the destination's tail to the source: the destination batches beyond the offset
//! map (appended before a crash, by a previous owner, or by a gateway whose state directory is
//! gone) are compared in order with the source batches from the map's next source offset, and
//! each one that is the same batch is recorded in the map.
//!
//! Both logs are read a fetch window at a time (one destination fetch and one source fetch
//! match every batch they both hold), so matching a tail of `n` batches costs `n / window`
//! round trips, not `2 n` fetches of everything after each batch.
//!
//! Owns: the walk over the two windows. Must not touch: what counts as the same batch and how
//! it is recorded (`gapped::reconcile_with`), the reads themselves (`logs`).

use crate::protocol::batch::{BatchHeader, BatchWalker};

use super::{Halt, Step, Task};

impl Task {
    /// Match every destination batch from the map's next destination offset up to `end` (see
    /// the module doc); one summary line when there were any.
    pub(super) async fn match_destination_tail(&mut self, end: i64) -> Step<()> {
        let from = (self.next_src, self.next_dst);
        let started = std::time::Instant::now();
        let mut batches = 0u64;
        while self.next_dst < end {
            batches += self.reconcile_window(end).await?;
        }
        if batches > 0 {
            tracing::info!(
                topic = %self.topic, partition = self.partition, batches,
                source_from = from.0, destination_from = from.1, destination_to = end,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "matched the destination's tail beyond the offset map to the source"
            );
        }
        Ok(())
    }

    /// Match the destination batches from the map's next destination offset up to `end`
    /// with the source batches from its next source offset, as many as one fetch of each log
    /// holds. Returns how many were matched (at least one), or: `Retry` when the destination
    /// holds no batch at its next offset yet, `Fail` when a destination batch is not the
    /// source's next batch (the destination holds what the agent did not write).
    pub(super) async fn reconcile_window(&mut self, end: i64) -> Step<u64> {
        let dest = self.dest_fetch(self.next_dst).await?;
        let src = self.source_fetch(self.next_src).await?;
        let mut dests = BatchWalker::fetched(&dest);
        let mut sources = BatchWalker::fetched(&src.records);
        let mut d_cur: Option<BatchHeader> = None;
        let mut s_cur: Option<(BatchHeader, &[u8])> = None;
        let mut matched = 0u64;
        while self.next_dst < end {
            // The destination batch holding `next_dst`, then the source batch holding
            // `next_src` (a compacted source may have none at `next_src` itself: the next one).
            while d_cur.is_none_or(|d| d.last_offset() < self.next_dst) {
                d_cur = match dests.next() {
                    Some(item) => Some(
                        item.map_err(|e| Halt::Fail(format!("corrupt destination batch: {e}")))?
                            .0,
                    ),
                    None => None,
                };
                if d_cur.is_none() {
                    break;
                }
            }
            while s_cur.is_none_or(|(s, _)| s.last_offset() < self.next_src) {
                s_cur = match sources.next() {
                    Some(item) => {
                        Some(item.map_err(|e| Halt::Fail(format!("corrupt source batch: {e}")))?)
                    }
                    None => None,
                };
                if s_cur.is_none() {
                    break;
                }
            }
            let Some(d) = d_cur else {
                if matched == 0 {
                    return Err(Halt::Retry(format!(
                        "no destination batch at {} yet",
                        self.next_dst
                    )));
                }
                break;
            };
            let Some((s, b)) = s_cur else {
                if matched == 0 {
                    return Err(self.unmatched_tail(end));
                }
                break;
            };
            if !(s.base_offset >= self.next_src
                && d.base_offset == self.next_dst
                && self.reconcile_with(&s, b, &d)?)
            {
                return Err(self.unmatched_tail(end));
            }
            matched += 1;
        }
        Ok(matched)
    }

    fn unmatched_tail(&self, end: i64) -> Halt {
        const RECOVERING_THE_TAIL: &str =
            "docs/failover.md#after-an-unplanned-failover-recovering-the-tail";
        Halt::Fail(format!(
            "the destination has records {}..{end} that do not match the source from offset {} \
             (not written by this agent); delete and recreate the destination topic — after an \
             unplanned failover the other way, recover its un-mirrored tail and realign this \
             cluster with the gateway that failed over ({RECOVERING_THE_TAIL})",
            self.next_dst, self.next_src
        ))
    }
}
