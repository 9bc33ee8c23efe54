//! `/v1/mirrors`: the mirrors' states and partitions, failover (with its preflight, guards and
//! report), pause, resume, start, failover reports; what the audit event of a state-changing
//! call records beyond its path and status ([`AuditNote`]).
//!
//! Owns: these routes. Must not touch: the decisions (the mirror controller), the facts
//! (`preflight.rs`).

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use crate::controller::{MirrorSummary, PauseError, StartError};
use crate::mirror::state::PartitionRecord;

use super::failover_call::{
    failover_error_reply, read_options, refresh_destination, start_failover,
};
use super::{check_token, error_reply, json_reply, preflight, AdminBackend};
use crate::audit::AuditNote;

/// `pid_allocator`: the outcome of the failover step that advanced the producer-id allocators
/// (review F15), when one ran in this process.
fn mirror_summary(
    m: &MirrorSummary,
    pid_allocator: Option<crate::failover::pid_allocator::Outcome>,
    protection_until: Option<i64>,
) -> serde_json::Value {
    let mut counts = serde_json::Map::new();
    for (st, n) in &m.counts {
        counts.insert(st.as_str().to_string(), json!(n));
    }
    json!({
        "name": m.name,
        "partitions": m.partitions,
        "states": counts,
        "failover_id": m.failover_id,
        "failover_started_ms": m.started_ms,
        "failover_completed_ms": m.completed_ms,
        "pid_allocator": pid_allocator,
        "state_error": m.unreadable,
        // Until when producers of this mirror's topics must stay behind the gateway (the
        // screening set is shared by every mirror); null before any failover.
        "protection_needed_until_ms": m.failover_id.as_ref().and(protection_until),
    })
}

/// `barrier_missing`: why the log no longer holds the partition's barrier (checked at start),
/// so that it guards nothing.
fn partition_json(
    p: &PartitionRecord,
    lag: Option<(i64, f64)>,
    barrier_missing: Option<String>,
) -> serde_json::Value {
    json!({
        "barrier_missing": barrier_missing,
        "lag_records": lag.map(|l| l.0),
        "lag_seconds": lag.map(|l| l.1),
        "topic": p.topic,
        "partition": p.partition,
        "state": p.state.as_str(),
        "failover_id": p.failover_id,
        "step": p.step.map(|s| s.as_str()),
        "barrier_offset": p.barrier_offset,
        "barrier_kind": p.barrier_kind.map(|k| k.as_str()),
        "barrier_producer_id": p.barrier_producer.map(|b| b.producer_id),
        "barrier_producer_epoch": p.barrier_producer.map(|b| b.producer_epoch),
        "last_mirrored_offset": p.last_mirrored_offset,
        "producers_expired": p.producers_expired,
        "transactions_aborted": p.transactions_aborted,
        "last_error": p.last_error,
        "updated_ms": p.updated_ms,
    })
}

/// Everything under `/v1/mirrors`.
pub(super) async fn mirrors(
    gw: &dyn AdminBackend,
    method: &Method,
    path: &str,
    req: Request<Incoming>,
    caller: &str,
    note: &mut AuditNote,
) -> Response<Full<Bytes>> {
    let Some(ctl) = gw.mirrors() else {
        return match (method, path) {
            (&Method::GET, "/v1/mirrors") => json_reply(StatusCode::OK, &json!({ "mirrors": [] })),
            _ => error_reply(StatusCode::NOT_FOUND, "no mirrors are configured"),
        };
    };
    let rest: Vec<&str> = path
        .trim_start_matches("/v1/mirrors")
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let find = |name: &str| ctl.records().into_iter().find(|(r, _)| r.name == name);
    let until = ctl.protection_needed_until_ms();
    match (method, rest.as_slice()) {
        (&Method::GET, []) => {
            let list: Vec<serde_json::Value> = ctl
                .summaries()
                .iter()
                .map(|m| mirror_summary(m, ctl.pid_allocator_outcome(&m.name), until))
                .collect();
            json_reply(StatusCode::OK, &json!({ "mirrors": list }))
        }
        (&Method::GET, [name]) => match ctl.summaries().into_iter().find(|m| m.name == *name) {
            Some(m) => {
                let mut v = mirror_summary(&m, ctl.pid_allocator_outcome(name), until);
                let sync = gw.mirror_sync(name);
                if let Some(o) = v.as_object_mut() {
                    for key in ["config_sync", "acl_sync"] {
                        let part = sync.as_ref().and_then(|s| s.get(key)).cloned();
                        o.insert(key.into(), part.unwrap_or(serde_json::Value::Null));
                    }
                }
                json_reply(StatusCode::OK, &v)
            }
            None => error_reply(StatusCode::NOT_FOUND, &format!("no mirror named {name:?}")),
        },
        (&Method::GET, [name, "partitions"]) => match find(name) {
            Some((r, _)) => {
                let parts: Vec<serde_json::Value> = r
                    .partitions
                    .iter()
                    .map(|p| {
                        partition_json(
                            p,
                            gw.agent_lag(&r.name, &p.topic, p.partition),
                            ctl.barrier_missing(&p.topic, p.partition),
                        )
                    })
                    .collect();
                json_reply(
                    StatusCode::OK,
                    &json!({ "mirror": r.name, "partitions": parts }),
                )
            }
            None => error_reply(StatusCode::NOT_FOUND, &format!("no mirror named {name:?}")),
        },
        (&Method::GET, [name, "groups"]) => super::groups::groups(gw, ctl, name),
        (&Method::GET, [name, "offsets", "translate"]) => {
            super::groups::translate_offset(gw, ctl, name, req.uri().query())
        }
        (_, [_, "groups"] | [_, "offsets", "translate"]) => error_reply(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{method} is not allowed on {path}; use GET"),
        ),
        (&Method::POST, [name, "failover"]) => {
            let options = match read_options(gw, req, note).await {
                Ok(o) => o,
                Err(reply) => return reply,
            };
            refresh_destination(gw, name).await;
            note.dry_run = options.dry_run;
            note.force = options.force;
            note.max_lag_records = options.max_lag_records;
            note.max_lag_seconds = options.max_lag_seconds;
            let guarded = options.max_lag_records.is_some() || options.max_lag_seconds.is_some();
            if options.dry_run || guarded {
                let Some(facts) = preflight::facts(gw, ctl, name) else {
                    return error_reply(
                        StatusCode::NOT_FOUND,
                        &format!("no mirror named {name:?}"),
                    );
                };
                let assessment = crate::failover::preflight::assess(facts, options.guards());
                if options.dry_run {
                    // With the groups the failover's final round of the group sync will sync.
                    let mut v = serde_json::to_value(&assessment).unwrap_or_default();
                    v["groups"] = serde_json::to_value(gw.group_sync(name)).unwrap_or_default();
                    // Where several instances run: those the barrier will wait for.
                    if let Some(p) = ctl.peers_status() {
                        v["instances"] = p;
                    }
                    return json_reply(StatusCode::OK, &v);
                }
                if assessment.guard_exceeded && !options.force {
                    tracing::warn!(mirror = %name, reasons = ?assessment.reasons, "failover refused by its guards (force overrides)");
                    note.reason = Some(format!(
                        "the failover exceeds its guards: {}",
                        assessment.reasons.join("; ")
                    ));
                    return json_reply(
                        StatusCode::CONFLICT,
                        &json!({
                            "error": "the failover exceeds its guards (max_lag_records / max_lag_seconds); nothing was changed; add force to fail over anyway",
                            "preflight": assessment,
                        }),
                    );
                }
            }
            start_failover(gw, ctl, name, caller, &options, note)
        }
        (&Method::GET, [name, "forward"]) => super::switchover::status(gw, name),
        (&Method::POST, [name, "switchover"]) => {
            let options = match read_options(gw, req, note).await {
                Ok(o) => o,
                Err(reply) => return reply,
            };
            super::switchover::switchover(gw, ctl, name, caller, &options, note).await
        }
        (&Method::POST, [name, "switchback"]) => {
            super::switchback::switchback(gw, ctl, name, req, note).await
        }
        (&Method::GET, [name, "failovers"]) => match gw.failover_reports(name) {
            Ok(list) if find(name).is_some() => json_reply(
                StatusCode::OK,
                &json!({ "mirror": name, "failovers": list }),
            ),
            Ok(_) => error_reply(StatusCode::NOT_FOUND, &format!("no mirror named {name:?}")),
            Err(e) => error_reply(StatusCode::INTERNAL_SERVER_ERROR, &e),
        },
        (&Method::GET, [name, "failovers", id]) => match gw.failover_reports(name) {
            Ok(list) => match list.into_iter().find(|r| r.failover_id == *id) {
                Some(r) => json_reply(StatusCode::OK, &r),
                None => error_reply(
                    StatusCode::NOT_FOUND,
                    &format!("no failover {id:?} of mirror {name:?}"),
                ),
            },
            Err(e) => error_reply(StatusCode::INTERNAL_SERVER_ERROR, &e),
        },
        (&Method::GET, [name, "failovers", id, "unmirrored"]) => {
            super::recovery::unmirrored(gw, name, id).await
        }
        (&Method::POST, [name, "failovers", id, "unmirrored", action @ ("recover" | "realign")]) => {
            if let Some(denied) = check_token(gw, req.headers()) {
                note.reason = Some("admin token missing or wrong".into());
                return denied;
            }
            super::recovery::act(gw, (name, id, action), req.uri().query(), note).await
        }
        (
            _,
            [_, "failovers", _, "unmirrored"]
            | [_, "failovers", _, "unmirrored", "recover" | "realign"],
        ) => {
            error_reply(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{method} is not allowed on {path}; GET …/unmirrored, POST …/unmirrored/recover or …/unmirrored/realign"),
            )
        }
        (&Method::POST, [name, "start"]) => {
            if let Some(denied) = check_token(gw, req.headers()) {
                note.reason = Some("admin token missing or wrong".into());
                return denied;
            }
            match ctl.start_mirroring(name).await {
                Ok(moved) => json_reply(
                    StatusCode::ACCEPTED,
                    &json!({ "mirror": name, "partitions_started": moved,
                             "note": "the agent verifies each partition is empty or aligned with the source before mirroring; a partition that is not goes FAILED with the reason" }),
                ),
                Err(e) => {
                    note.reason = Some(e.to_string());
                    match e {
                        StartError::Failover(e) => failover_error_reply(e),
                        e @ StartError::StateTopic(_) => {
                            error_reply(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
                        }
                        e => error_reply(StatusCode::CONFLICT, &e.to_string()),
                    }
                }
            }
        }
        (&Method::POST, [name, action @ ("pause" | "resume")]) => {
            if let Some(denied) = check_token(gw, req.headers()) {
                note.reason = Some("admin token missing or wrong".into());
                return denied;
            }
            match ctl.pause(name, *action == "pause").await {
                Ok(moved) => json_reply(
                    StatusCode::OK,
                    &json!({ "mirror": name, "action": action, "partitions_moved": moved }),
                ),
                Err(e) => {
                    note.reason = Some(e.to_string());
                    match e {
                        PauseError::Mirror(e) => failover_error_reply(e),
                        e @ PauseError::StateTopic(_) => {
                            error_reply(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
                        }
                    }
                }
            }
        }
        (_, [_, "failover"]) => error_reply(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{method} is not allowed on {path}; use POST"),
        ),
        (_, [] | [_] | [_, "partitions"]) => error_reply(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{method} is not allowed on {path}"),
        ),
        _ => error_reply(
            StatusCode::NOT_FOUND,
            &format!("no such endpoint: {method} {path}"),
        ),
    }
}
