//! Starting a failover from the admin API, shared by the failover and switchover calls: the
//! call's options, the destination's metadata read first, the controller asked, the report
//! opened, and the answer to a refusal.
//!
//! Owns: those steps of a call. Must not touch: the failover itself (the controller), the
//! routes (`mirrors.rs`, `switchover.rs`).

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};

use crate::audit::AuditNote;
use crate::controller::FailoverError;

use super::{check_token, error_reply, json_reply, preflight, AdminBackend};

/// Read the destination's metadata before a failover: a mirror topic created since the last
/// periodic refresh is part of the failover (and of its preflight). Bounded; on failure the
/// failover goes on with the partitions known.
pub(super) async fn refresh_destination(gw: &dyn AdminBackend, name: &str) {
    match tokio::time::timeout(FAILOVER_METADATA_WAIT, gw.cluster().refresh()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(mirror = %name, error = %e, "destination metadata not refreshed before the failover; it covers the partitions known")
        }
        Err(_) => {
            tracing::warn!(mirror = %name, "destination metadata not refreshed within {FAILOVER_METADATA_WAIT:?} before the failover; it covers the partitions known")
        }
    }
}

/// The options of a failover or switchover call, from its query string and JSON body, once
/// its token is checked.
pub(super) async fn read_options(
    gw: &dyn AdminBackend,
    req: Request<Incoming>,
    note: &mut AuditNote,
) -> Result<preflight::FailoverOptions, Response<Full<Bytes>>> {
    if let Some(denied) = check_token(gw, req.headers()) {
        note.reason = Some("admin token missing or wrong".into());
        return Err(denied);
    }
    let query = req.uri().query().map(str::to_string);
    let body = match http_body_util::Limited::new(req.into_body(), 64 * 1024)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Err(error_reply(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {e}"),
            ))
        }
    };
    preflight::FailoverOptions::read(query.as_deref(), &body).map_err(|e| {
        note.reason = Some(e.clone());
        error_reply(StatusCode::BAD_REQUEST, &e)
    })
}

/// Start the failover of mirror `name` (its preflight recorded for the report): `202` with the
/// failover id, or the controller's refusal.
pub(super) fn start_failover(
    gw: &dyn AdminBackend,
    ctl: &std::sync::Arc<crate::controller::MirrorController>,
    name: &str,
    caller: &str,
    options: &preflight::FailoverOptions,
    note: &mut AuditNote,
) -> Response<Full<Bytes>> {
    let at_call = preflight::facts(gw, ctl, name);
    match ctl.failover(name) {
        Ok(started) => {
            note.failover_id = Some(started.failover_id.clone());
            tracing::info!(mirror = %started.mirror, failover_id = %started.failover_id, already_running = started.already_running, forced = options.force, "failover requested");
            if !started.already_running {
                gw.failover_called(preflight::open_report(
                    name,
                    &started.failover_id,
                    caller,
                    options,
                    at_call,
                ));
            }
            json_reply(StatusCode::ACCEPTED, &started)
        }
        Err(e) => {
            note.reason = Some(e.to_string());
            failover_error_reply(e)
        }
    }
}

/// How long a failover call waits for the destination's metadata before it starts.
const FAILOVER_METADATA_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The answer to a failover call the controller refused.
pub(super) fn failover_error_reply(e: FailoverError) -> Response<Full<Bytes>> {
    let status = match &e {
        FailoverError::UnknownMirror(_) => StatusCode::NOT_FOUND,
        FailoverError::AlreadyStopped { .. }
        | FailoverError::NoPartitions { .. }
        | FailoverError::StateUnreadable { .. }
        | FailoverError::ScreenUnreadable(_) => StatusCode::CONFLICT,
        FailoverError::Persist { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error_reply(status, &e.to_string())
}
