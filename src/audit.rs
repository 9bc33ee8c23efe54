//! The audit trail of state-changing admin calls: one structured event per call (failover and
//! its dry run, start, pause, resume; forced guards and refusals included), with its caller and
//! outcome. Every event goes to the log (target `mirrorgate::audit`); with `admin.audit_topic`
//! set it is also written, as one JSON record, to that topic on the destination cluster
//! ([`topic`]), so the trail outlives the gateway's process and log files.
//!
//! Owns: the event's shape, its log line, the hand-off to the topic writer and the trail's
//! metrics. Must not touch: the admin calls themselves (the admin API builds the events), the
//! mirror state.
//!
//! Writing to the topic never delays or fails an admin call: events are handed to the writer
//! through a bounded queue ([`QUEUE`] events); an event that finds the queue full is still
//! logged, counted as dropped (`mirrorgate_audit_events_total{result="dropped"}`) and warned
//! about. The writer retries until the brokers take the events (at least once: each event has
//! an `id`, so a duplicate is recognisable).

pub mod topic;

use std::sync::Arc;

use prometheus::{IntCounterVec, IntGauge, Opts};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Events the topic writer may hold before new ones are dropped (they are still logged).
pub const QUEUE: usize = 10_000;

/// One state-changing admin call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// Unique per event (a retried write to the topic may store it twice).
    pub id: String,
    /// When the call was answered, milliseconds since the epoch.
    pub at_ms: i64,
    /// The gateway instance that took the call (its admin address).
    pub instance: String,
    /// `failover`, `start`, `pause`, `resume`, or the path of an unknown call.
    pub action: String,
    /// The mirror named in the path (empty when none).
    pub mirror: String,
    /// Who called: `token@<peer address>` when the admin token was checked, else the peer.
    pub caller: String,
    /// The HTTP status answered.
    pub status: u16,
    /// `accepted` (2xx), `refused` (any other status) or `dry_run` (a preflight: nothing changed).
    pub outcome: String,
    /// How a failover was asked for, the failover it started, why a call was refused.
    #[serde(flatten)]
    pub note: AuditNote,
}

/// What the admin call's handler knows beyond its path and status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditNote {
    pub dry_run: bool,
    /// Guards overridden with `force`.
    pub force: bool,
    pub max_lag_records: Option<i64>,
    pub max_lag_seconds: Option<f64>,
    /// The failover this call started or joined.
    pub failover_id: Option<String>,
    /// Why the call was refused, when it was.
    pub reason: Option<String>,
}

impl AuditEvent {
    /// The event of a call to `path` (under `/v1/mirrors/`) answered with `status`.
    pub fn new(instance: &str, path: &str, caller: &str, status: u16, note: AuditNote) -> Self {
        let rest = path.trim_start_matches("/v1/mirrors/");
        let (mirror, action) = match rest.split('/').collect::<Vec<_>>().as_slice() {
            [m, a] => (m.to_string(), a.to_string()),
            // A failover's own calls: `…/failovers/{id}/unmirrored/recover` is
            // `recover_unmirrored`, `…/realign` `realign_source` (the failover id is in the note).
            [m, "failovers", _, "unmirrored", a @ ("recover" | "realign")] => {
                let action = if *a == "recover" {
                    "recover_unmirrored"
                } else {
                    "realign_source"
                };
                (m.to_string(), action.to_string())
            }
            _ => (String::new(), path.to_string()),
        };
        let success = (200..300).contains(&status);
        let outcome = match (success, note.dry_run) {
            (true, true) => "dry_run",
            (true, false) => "accepted",
            (false, _) => "refused",
        };
        AuditEvent {
            id: uuid::Uuid::new_v4().to_string(),
            at_ms: now_ms(),
            instance: instance.to_string(),
            action,
            mirror,
            caller: caller.to_string(),
            status,
            outcome: outcome.to_string(),
            note,
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The trail's series (docs/monitoring.md).
#[derive(Clone)]
pub struct AuditMetrics {
    /// By `result`: `logged`, `written` (to the topic), `dropped` (queue full), `failed`
    /// (a write attempt to the topic that failed; retried).
    pub events: IntCounterVec,
    /// Events waiting for the topic writer.
    pub pending: IntGauge,
}

impl AuditMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        Ok(AuditMetrics {
            events: IntCounterVec::new(
                Opts::new(
                    "mirrorgate_audit_events_total",
                    "Audit events of state-changing admin calls, by result: logged, written \
                     (to the audit topic), dropped (the writer's queue was full), failed (a write \
                     attempt that failed and is retried).",
                ),
                &["result"],
            )?,
            pending: IntGauge::new(
                "mirrorgate_audit_pending_events",
                "Audit events waiting to be written to the audit topic.",
            )?,
        })
    }

    /// Register the series (a second gateway in the same process keeps the first one's).
    pub fn register(&self, registry: &crate::metrics::MetricsRegistry) {
        // Already registered: the first gateway's series stay (tests run several).
        let _ = registry.register(Box::new(self.events.clone()));
        let _ = registry.register(Box::new(self.pending.clone()));
    }
}

/// Where events go: the log always, the topic writer when one runs.
pub struct AuditTrail {
    to_topic: Option<mpsc::Sender<AuditEvent>>,
    metrics: Arc<AuditMetrics>,
}

impl AuditTrail {
    /// A trail that only logs.
    pub fn log_only(metrics: Arc<AuditMetrics>) -> Self {
        AuditTrail {
            to_topic: None,
            metrics,
        }
    }

    /// A trail that also hands events to a topic writer; returns the writer's end.
    pub fn with_topic(metrics: Arc<AuditMetrics>) -> (Self, mpsc::Receiver<AuditEvent>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (
            AuditTrail {
                to_topic: Some(tx),
                metrics,
            },
            rx,
        )
    }

    /// Record one event: log it, and queue it for the topic.
    pub fn record(&self, event: AuditEvent) {
        log(&event);
        self.metrics.events.with_label_values(&["logged"]).inc();
        let Some(tx) = &self.to_topic else { return };
        match tx.try_send(event) {
            Ok(()) => self.metrics.pending.inc(),
            Err(mpsc::error::TrySendError::Full(e)) => {
                self.metrics.events.with_label_values(&["dropped"]).inc();
                tracing::warn!(target: "mirrorgate::audit", id = %e.id, queue = QUEUE,
                    "the audit topic writer is behind; this event is only in the log");
            }
            Err(mpsc::error::TrySendError::Closed(e)) => {
                self.metrics.events.with_label_values(&["dropped"]).inc();
                tracing::warn!(target: "mirrorgate::audit", id = %e.id,
                    "the audit topic writer has stopped; this event is only in the log");
            }
        }
    }
}

/// The event's log line.
pub fn log(e: &AuditEvent) {
    tracing::info!(
        target: "mirrorgate::audit",
        id = %e.id, action = %e.action, mirror = %e.mirror, caller = %e.caller,
        status = e.status, outcome = %e.outcome, dry_run = e.note.dry_run, force = e.note.force,
        max_lag_records = ?e.note.max_lag_records, max_lag_seconds = ?e.note.max_lag_seconds,
        failover_id = ?e.note.failover_id, reason = ?e.note.reason,
        "admin call"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Arc<AuditMetrics> {
        Arc::new(AuditMetrics::new().expect("metrics"))
    }

    #[test]
    fn an_accepted_forced_failover_names_its_mirror_caller_and_guards() {
        let note = AuditNote {
            force: true,
            max_lag_records: Some(10),
            failover_id: Some("f-1".into()),
            ..Default::default()
        };
        let e = AuditEvent::new(
            "127.0.0.1:9180",
            "/v1/mirrors/orders/failover",
            "token@1.2.3.4:5",
            202,
            note,
        );
        assert_eq!(
            (e.mirror.as_str(), e.action.as_str()),
            ("orders", "failover")
        );
        assert_eq!(e.outcome, "accepted");
        assert!(e.note.force);
        assert_eq!(e.note.max_lag_records, Some(10));
        assert_eq!(e.note.failover_id.as_deref(), Some("f-1"));
        assert_eq!(e.caller, "token@1.2.3.4:5");
    }

    #[test]
    fn a_refused_call_and_a_dry_run_have_their_own_outcomes() {
        let refused = AuditEvent::new(
            "i",
            "/v1/mirrors/m/failover",
            "p",
            409,
            AuditNote::default(),
        );
        assert_eq!(refused.outcome, "refused");
        let dry = AuditEvent::new(
            "i",
            "/v1/mirrors/m/failover",
            "p",
            200,
            AuditNote {
                dry_run: true,
                ..Default::default()
            },
        );
        assert_eq!(dry.outcome, "dry_run");
    }

    #[test]
    fn a_path_without_a_mirror_and_action_is_kept_whole_as_the_action() {
        let e = AuditEvent::new("i", "/v1/mirrors", "p", 405, AuditNote::default());
        assert_eq!((e.mirror.as_str(), e.action.as_str()), ("", "/v1/mirrors"));
    }

    #[test]
    fn every_event_has_its_own_id() {
        let a = AuditEvent::new("i", "/v1/mirrors/m/pause", "p", 200, AuditNote::default());
        let b = AuditEvent::new("i", "/v1/mirrors/m/pause", "p", 200, AuditNote::default());
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn an_event_the_full_queue_cannot_take_is_counted_dropped_and_the_call_is_not_delayed() {
        let m = metrics();
        let (trail, _rx) = AuditTrail::with_topic(m.clone());
        for _ in 0..QUEUE + 3 {
            trail.record(AuditEvent::new(
                "i",
                "/v1/mirrors/m/pause",
                "p",
                200,
                AuditNote::default(),
            ));
        }
        assert_eq!(m.events.with_label_values(&["dropped"]).get(), 3);
        assert_eq!(m.pending.get(), QUEUE as i64);
        assert_eq!(
            m.events.with_label_values(&["logged"]).get(),
            QUEUE as u64 + 3
        );
    }

    #[test]
    fn a_log_only_trail_queues_nothing() {
        let m = metrics();
        let trail = AuditTrail::log_only(m.clone());
        trail.record(AuditEvent::new(
            "i",
            "/v1/mirrors/m/resume",
            "p",
            200,
            AuditNote::default(),
        ));
        assert_eq!(m.pending.get(), 0);
        assert_eq!(m.events.with_label_values(&["logged"]).get(), 1);
    }

    #[test]
    fn an_event_round_trips_through_its_json_record() {
        let e = AuditEvent::new("i", "/v1/mirrors/m/start", "p", 202, AuditNote::default());
        let back: AuditEvent =
            serde_json::from_slice(&serde_json::to_vec(&e).expect("json")).expect("parse");
        assert_eq!(back, e);
    }
}
