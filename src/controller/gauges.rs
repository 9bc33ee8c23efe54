//! The controller as the source of the mirror gauges: implements [`MirrorStates`] for the
//! scrape-time collector of `mirror_metrics.rs`, which never names the controller.
//!
//! Owns: what a scrape reads. Must not touch: the metrics' names, admission, failover.

use super::MirrorController;
use crate::mirror::mirror_metrics::MirrorStates;
use crate::mirror::state::MirrorRecord;

impl MirrorStates for MirrorController {
    fn state_counts(&self) -> Vec<(String, &'static str, usize)> {
        let mut out = Vec::new();
        for m in self.summaries() {
            for (st, n) in m.counts {
                out.push((m.name.clone(), st.as_str(), n));
            }
        }
        out
    }

    fn records(&self) -> Vec<(MirrorRecord, Option<String>)> {
        MirrorController::records(self)
    }

    fn open_transactions(&self) -> Vec<(String, usize)> {
        MirrorController::open_transactions(self)
    }

    fn protection_needed_until_ms(&self) -> Option<i64> {
        MirrorController::protection_needed_until_ms(self)
    }
}
