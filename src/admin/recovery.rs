//! `/v1/mirrors/{name}/failovers/{id}/unmirrored`: a completed failover's un-mirrored tail on
//! the old source (GET, read-only), its recovery into the quarantine topics
//! (`POST …/unmirrored/recover`) and the realignment of the old source's topics once it is
//! recovered (`POST …/unmirrored/realign`); `dry_run` in the query string.
//!
//! Owns: these routes, their query and their error statuses. Must not touch: the listing and
//! the copy (`crate::recovery`).

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::StatusCode;

use super::{error_reply, json_reply, AdminBackend};
use crate::audit::AuditNote;
use crate::mirror::report::FailoverReport;
use crate::recovery::RecoveryError;

/// The report of failover `id` of mirror `name`, or the status and message that say why there
/// is none.
fn report_of(
    gw: &dyn AdminBackend,
    name: &str,
    id: &str,
) -> Result<FailoverReport, (StatusCode, String)> {
    let list = gw
        .failover_reports(name)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))?;
    list.into_iter()
        .find(|r| r.failover_id == id)
        .ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("no failover {id:?} of mirror {name:?}"),
            )
        })
}

type Response = hyper::Response<Full<Bytes>>;

fn error(e: &RecoveryError) -> Response {
    let status = match e {
        RecoveryError::UnknownMirror(_) | RecoveryError::UnknownFailover { .. } => {
            StatusCode::NOT_FOUND
        }
        RecoveryError::Io(_) => StatusCode::SERVICE_UNAVAILABLE,
        RecoveryError::Malformed { .. } | RecoveryError::Refused { .. } => StatusCode::BAD_GATEWAY,
        _ => StatusCode::CONFLICT,
    };
    error_reply(status, &e.to_string())
}

/// `GET …/unmirrored`.
pub(super) async fn unmirrored(gw: &dyn AdminBackend, name: &str, id: &str) -> Response {
    let Some(rec) = gw.recovery() else {
        return error_reply(StatusCode::NOT_FOUND, "no mirrors are configured");
    };
    let report = match report_of(gw, name, id) {
        Ok(r) => r,
        Err((status, why)) => return error_reply(status, &why),
    };
    match rec.unmirrored(&report).await {
        Ok(listing) => json_reply(StatusCode::OK, &listing),
        Err(e) => error(&e),
    }
}

/// `POST …/unmirrored/recover` or `…/unmirrored/realign`, `?dry_run=true` (the caller
/// checked the token).
pub(super) async fn act(
    gw: &dyn AdminBackend,
    (name, id, action): (&str, &str, &str),
    query: Option<&str>,
    note: &mut AuditNote,
) -> Response {
    note.failover_id = Some(id.to_string());
    let mut dry_run = false;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=').unwrap_or((pair, "true")) {
            ("dry_run", "true" | "1" | "") => dry_run = true,
            ("dry_run", "false" | "0") => dry_run = false,
            (k, v) => {
                let why = format!("query parameter {k}={v:?}: only dry_run=true|false is known");
                note.reason = Some(why.clone());
                return error_reply(StatusCode::BAD_REQUEST, &why);
            }
        }
    }
    note.dry_run = dry_run;
    let Some(rec) = gw.recovery() else {
        return error_reply(StatusCode::NOT_FOUND, "no mirrors are configured");
    };
    let report = match report_of(gw, name, id) {
        Ok(r) => r,
        Err((status, why)) => return error_reply(status, &why),
    };
    let answer = if action == "realign" {
        rec.realign(&report, dry_run)
            .await
            .map(|o| serde_json::to_value(o).unwrap_or_default())
    } else {
        rec.recover(&report, dry_run)
            .await
            .map(|o| serde_json::to_value(o).unwrap_or_default())
    };
    match answer {
        Ok(v) => json_reply(StatusCode::OK, &v),
        Err(e) => {
            note.reason = Some(e.to_string());
            error(&e)
        }
    }
}
