//! The agent's own counters (batches, bytes, unknown outcomes, markers, verification changes),
//! registered once per process.
//!
//! Owns: their definitions. Must not touch: what counts them (the tasks).

use prometheus::{IntCounterVec, Opts};

use crate::metrics::Metrics;

#[derive(Clone)]
pub(super) struct AgentMetrics {
    pub(super) batches: IntCounterVec,
    pub(super) bytes: IntCounterVec,
    /// Appends whose outcome was unknown (answer lost, connection closed, timed out), by how
    /// they were resolved: `already_appended` (found in the destination log, not resent) or
    /// `resent`.
    pub(super) unknown_outcomes: IntCounterVec,
    /// Transaction markers reproduced on the destination, by result (commit, abort).
    pub(super) markers: IntCounterVec,
}

impl AgentMetrics {
    /// The counters, registered; and the verification counter the agent's transactions use.
    pub(super) fn register(metrics: &Metrics) -> Result<(AgentMetrics, IntCounterVec), String> {
        let batches = IntCounterVec::new(
            Opts::new(
                "mirrorgate_agent_batches_total",
                "Batches the built-in mirror agent appended.",
            ),
            &["mirror"],
        )
        .map_err(|e| e.to_string())?;
        let bytes = IntCounterVec::new(
            Opts::new(
                "mirrorgate_agent_bytes_total",
                "Batch bytes the built-in mirror agent appended.",
            ),
            &["mirror"],
        )
        .map_err(|e| e.to_string())?;
        let unknown_outcomes = IntCounterVec::new(
            Opts::new(
                "mirrorgate_agent_unknown_outcomes_total",
                "Appends of the built-in mirror agent whose outcome was unknown (answer lost), by \
             resolution: already_appended (found in the destination log) or resent.",
            ),
            &["mirror", "resolution"],
        )
        .map_err(|e| e.to_string())?;
        let markers = IntCounterVec::new(
            Opts::new(
                "mirrorgate_agent_markers_total",
                "Transaction markers of the source the built-in mirror agent reproduced on the \
             destination (WriteTxnMarkers), by result: commit or abort.",
            ),
            &["mirror", "result"],
        )
        .map_err(|e| e.to_string())?;
        let verification_disabled = IntCounterVec::new(
            Opts::new(
                "mirrorgate_agent_transaction_verification_disabled_total",
                "Times the built-in mirror agent set the destination's cluster-wide \
             transaction.partition.verification.enable to false to mirror transactional batches.",
            ),
            &["mirror"],
        )
        .map_err(|e| e.to_string())?;
        // Registration fails only for a second gateway in the same process (tests): its series are
        // then the first one's.
        let _ = metrics.registry().register(Box::new(markers.clone()));
        let _ = metrics
            .registry()
            .register(Box::new(verification_disabled.clone()));
        let _ = metrics.registry().register(Box::new(batches.clone()));
        let _ = metrics.registry().register(Box::new(bytes.clone()));
        let _ = metrics
            .registry()
            .register(Box::new(unknown_outcomes.clone()));
        Ok((
            AgentMetrics {
                batches,
                bytes,
                unknown_outcomes,
                markers,
            },
            verification_disabled,
        ))
    }
}
