//! The controller's links to the PSM for transactions (the markers the built-in agent writes —
//! the produce tap never sees WriteTxnMarkers — and the open transactions per mirror), for an
//! agent taken over from another instance (its mirror writes were never seen here), and to the
//! failover reports' gauges.
//!
//! Owns: those calls. Must not touch: admission, failover.

use super::MirrorController;

impl MirrorController {
    /// Per mirror, the transactions open in its partitions as the PSM holds them (0 without a
    /// PSM or nothing open).
    pub fn open_transactions(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = self.names.iter().map(|n| (n.clone(), 0)).collect();
        if let Some(psm) = &self.psm {
            for ((topic, _), open) in psm.open_transactions() {
                if let Some(i) = self.router.mirror_index(&topic) {
                    if let Some(c) = counts.get_mut(i) {
                        c.1 += open.len();
                    }
                }
            }
        }
        counts
    }

    /// The built-in agent appended a transaction marker at `offset` of a mirror partition (the
    /// produce tap never sees WriteTxnMarkers): the PSM applies it.
    pub fn psm_marker(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        marker: crate::psm::registry::AppendedMarker,
    ) {
        if let Some(psm) = &self.psm {
            psm.apply_marker(topic, partition, offset, marker);
        }
    }

    /// This instance took mirror `mirror`'s agent over from another: every tracked partition
    /// of the mirror's topics wants a rebuild from the log, which holds what the previous
    /// owner mirrored (defect P1). Returns how many partitions were marked.
    pub fn psm_written_elsewhere(&self, mirror: &str) -> usize {
        let (Some(psm), Some(idx)) = (&self.psm, self.names.iter().position(|n| n == mirror))
        else {
            return 0;
        };
        psm.mark_written_elsewhere(|topic| self.router.mirror_index(topic) == Some(idx))
    }

    /// A failover report completed (or read at start): its figures become the
    /// `mirrorgate_failover_last_report` gauges of the mirror.
    pub fn note_failover_report(&self, r: &crate::mirror::report::FailoverReport) {
        let g = &self.metrics.last_failover;
        let set = |figure: &str, v: Option<f64>| match v {
            Some(v) => g.with_label_values(&[r.mirror.as_str(), figure]).set(v),
            None => {
                let _ = g.remove_label_values(&[r.mirror.as_str(), figure]);
            }
        };
        set("rto_seconds", r.rto_seconds);
        set(
            "rpo_records",
            r.totals.and_then(|t| t.rpo_records).map(|n| n as f64),
        );
        set("rpo_seconds", r.totals.and_then(|t| t.max_rpo_seconds));
        // The step timeline: seconds from the call until the last partition reached each step.
        for step in crate::mirror::report::STEP_ORDER {
            let at = r
                .steps
                .iter()
                .find(|s| s.step == step)
                .map(|s| (s.last_ms - r.called_ms).max(0) as f64 / 1000.0);
            set(&format!("step_{}_seconds", step.to_lowercase()), at);
        }
    }
}
