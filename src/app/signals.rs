//! The signals that stop a running gateway.
//!
//! Owns: which signals end `mirrorgate run` and `mirrorgate demo` gracefully. Must not touch:
//! the shutdown itself (`Gateway::shutdown` drains and closes).

/// Waits for the signal to stop on: Ctrl-C (SIGINT) or SIGTERM, what Kubernetes, systemd and a
/// rolling restart send (defect C3: the gateway waited for SIGINT alone, and SIGTERM ended it
/// at once). Returns its name. Without a SIGTERM handler (it cannot be installed) only Ctrl-C
/// stops the gateway gracefully, and a WARN says so.
pub async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot handle SIGTERM: it stops the gateway without draining; stop it with SIGINT");
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
