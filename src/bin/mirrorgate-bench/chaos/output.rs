//! The chaos run's verdict as people and programs read it: the summary on stderr and the JSON
//! object of the last line.
//!
//! Owns: the verdict's wording and its JSON fields. Must not touch: the rules (`check.rs`).

use serde_json::{json, Value};

use super::check::Verdict;
use super::plan::{Operation, Schedule};

/// A group figure as the summary prints it.
fn figure(n: Option<usize>) -> String {
    n.map_or_else(|| "-".to_string(), |n| n.to_string())
}

pub fn summary(
    s: &Schedule,
    v: &Verdict,
    converged: bool,
    panics: &[String],
    caught_up: Option<Option<f64>>,
) {
    eprintln!(
        "chaos: seed {}: {} operations, {} acknowledged; lost {}, duplicated {} (client resends under a bumped epoch {}; the tool's further copies {}), out of order {}, after the barrier {}, before it {}, barriers missing {}, RPO mismatches {}, divergent {}; group: skipped {}, unread {}, reread {}; read_committed mismatches {} (unmirrored commits {}); RPO {} records ({} acknowledged); converged {converged}; panics {}{}",
        s.seed,
        v.operations,
        v.acked,
        v.lost,
        v.duplicated,
        v.client_resends,
        v.tool_copies,
        v.order_violations,
        v.after_barrier,
        v.before_barrier,
        v.barrier_missing,
        v.rpo_mismatch,
        v.mirror_divergence,
        figure(v.skipped),
        figure(v.unread),
        figure(v.reread),
        v.committed_mismatch,
        v.committed_unmirrored,
        v.rpo_records,
        v.unmirrored_acked,
        panics.len(),
        match caught_up {
            Some(Some(t)) => format!("; the mirroring tool caught up {t:.1} s after the source producers stopped"),
            Some(None) => "; the mirroring tool did not catch up within 60 s".into(),
            None => String::new(),
        }
    );
    for w in &v.violations {
        eprintln!("chaos:   {w}");
    }
    for r in &v.resends {
        eprintln!("chaos:   client resend (not a breach): {r}");
    }
    for p in panics.iter().take(5) {
        eprintln!("chaos:   panic: {p}");
    }
}

pub fn verdict_json(
    s: &Schedule,
    v: &Verdict,
    rpo: &[Option<i64>],
    converged: bool,
    panics: &[String],
    sabotage: Option<&str>,
    ok: bool,
) -> Value {
    let reported: Option<i64> = rpo.iter().copied().sum();
    json!({
        "bench": "chaos",
        "seed": s.seed,
        "mode": s.mode,
        "sabotage": sabotage,
        "operations": v.operations,
        "faults": s.fault_count(),
        "rolling_restarts": s.operations.iter().filter(|o| matches!(o, Operation::RollingRestart { .. })).count(),
        "mirror_pauses": s.operations.iter().filter(|o| matches!(o, Operation::PauseMirror { .. })).count(),
        "acked": v.acked,
        "lost": v.lost,
        "duplicated": v.duplicated,
        "client_resends": v.client_resends,
        "order_violations": v.order_violations,
        "after_barrier": v.after_barrier,
        "before_barrier": v.before_barrier,
        "barrier_missing": v.barrier_missing,
        "rpo_mismatch": v.rpo_mismatch,
        "mirror_divergence": v.mirror_divergence,
        "skipped": v.skipped,
        "unread": v.unread,
        "reread": v.reread,
        "committed_mismatch": v.committed_mismatch,
        "committed_unmirrored": v.committed_unmirrored,
        "rpo_records_logs": v.rpo_records,
        "rpo_records_report": reported,
        "unmirrored_acked": v.unmirrored_acked,
        "uncertain_present": v.uncertain_present,
        "converged": converged,
        "panics": panics.len(),
        "violations": v.violations,
        "verdict": if ok { "pass" } else { "fail" },
    })
}
