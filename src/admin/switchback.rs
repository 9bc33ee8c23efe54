//! `POST /v1/mirrors/NAME/switchback`: the planned switch of a mirror's forward listener back
//! from the destination to the old source, after a switchover (or a failover), once a failback
//! gateway in front of the old source has copied the destination back onto it.
//!
//! The old source may take writes only once the failback gateway's mirror has failed over:
//! before that its agent would find records it did not copy and mark the partitions FAILED. So
//! the switch back calls that gateway's admin API ([`failback_gateway`]). Steps:
//! 1. **check** the failback gateway's mirror covers every partition of this mirror and mirrors
//!    it (or, for a call repeated after it got that far, has failed over);
//! 2. **hold** the forward listener on its way back ([`crate::proxy::forward`], Returning): no
//!    connection sends the destination a new request, connections accepted now wait;
//! 3. **drain**: the connections to the destination answer what they had in flight and close;
//! 4. **read the destination** under the hold: every partition's log end, and no transaction
//!    open in them (the failback's failover would abort it behind its producer's back: refused
//!    instead);
//! 5. **wait for the old source** to reach those ends (with as-is copying its log ends are then
//!    the destination's: one past them means records the destination never had, refused);
//!    steps 3 to 5 are bounded together by `forward.hold_ms`, and if one does not finish the
//!    listener goes back to the destination and the call answers `409`: nothing changed;
//! 6. **fail over the failback gateway's mirror** (its barriers, its final group offset sync onto
//!    the old source, its producer-id allocator step) and wait until every partition is STOPPED
//!    there (at most [`FAILBACK_FAILOVER_WAIT`]);
//! 7. **start this mirror again** (STOPPED → MIRRORING: the destination follows the old source
//!    again, its agent verifies the alignment first), and switch the route to the source.
//!
//! From step 6 on the call cannot give the listener back to the destination (the old source
//! takes writes): if step 6 or 7 does not finish, the listener stays held and the call answers
//! with the reason; calling again resumes where it stopped.
//!
//! With several instances the hold covers every instance's forward listener through the state
//! topic, as a switchover's does (a switch back's hold, `back`): step 3 waits until every other
//! instance acknowledged it drained its connections to the destination; the catch-up is
//! recorded before the old source's failover (from then on the others' holds stand whatever
//! their bound), and the end after this mirror started again: each instance's listener goes on
//! to the source once the start applied there ([`crate::proxy::forward`]'s peer holds). A
//! switch back that gives up before the old source's failover releases them to the destination.
//!
//! Owns: those steps and their bounds. Must not touch: the failovers (the failback gateway's,
//! through its admin API), the mirror states (the controller's start), the connections (the
//! route tells them).

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use crate::audit::AuditNote;
use crate::controller::{MirrorController, StartError};
use crate::instances::HoldStep;
use crate::proxy::forward::{all_stopped, Side};

pub mod failback_gateway;

use failback_gateway::{stage, FailbackGateway, FailbackTarget, Http, Stage};

use super::switchover::source::{facts_of_cluster, facts_once_closed, NotClosed};
use super::switchover::PeerHold;
use super::{check_token, error_reply, json_reply, AdminBackend, ForwardHandle};

/// How long the switch back waits for the failback gateway's failover to complete.
pub const FAILBACK_FAILOVER_WAIT: Duration = Duration::from_secs(60);
/// How often the drain, the old source's ends and the failback gateway are looked at.
const POLL: Duration = Duration::from_millis(20);
/// The bound of one read of a cluster's log ends.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The call's body: where the failback gateway is, and whether this is a dry run.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Call {
    #[serde(flatten)]
    target: FailbackTarget,
    #[serde(default)]
    dry_run: bool,
}

/// Why a switch back stopped: `gave_back` when the listener is on the destination again
/// (nothing changed), else it stays held (call again to resume).
struct Stop {
    status: StatusCode,
    why: String,
    gave_back: bool,
}

impl Stop {
    fn before_failover(why: String) -> Stop {
        Stop {
            status: StatusCode::CONFLICT,
            why,
            gave_back: true,
        }
    }

    fn held(status: StatusCode, why: String) -> Stop {
        Stop {
            status,
            why,
            gave_back: false,
        }
    }
}

/// The switch back of mirror `name`.
pub(super) async fn switchback(
    gw: &dyn AdminBackend,
    ctl: &MirrorController,
    name: &str,
    req: Request<Incoming>,
    note: &mut AuditNote,
) -> Response<Full<Bytes>> {
    if let Some(denied) = check_token(gw, req.headers()) {
        note.reason = Some("admin token missing or wrong".into());
        return denied;
    }
    let call = match read_call(req).await {
        Ok(c) => c,
        Err(e) => {
            note.reason = Some(e.clone());
            return error_reply(StatusCode::BAD_REQUEST, &e);
        }
    };
    note.dry_run = call.dry_run;
    let refuse = |note: &mut AuditNote, status: StatusCode, why: String| {
        note.reason = Some(why.clone());
        error_reply(status, &format!("mirror {name}: {why}"))
    };
    let Some((record, _)) = ctl.records().into_iter().find(|(r, _)| r.name == name) else {
        return error_reply(StatusCode::NOT_FOUND, &format!("no mirror named {name:?}"));
    };
    let Some(fwd) = gw.forward(name) else {
        return refuse(
            note,
            StatusCode::CONFLICT,
            "no forward listener (mirrors[].forward): nothing to switch back".into(),
        );
    };
    if !fwd.route.owns_state() {
        return refuse(note, StatusCode::CONFLICT, "a switch back starts the mirror again, which needs the built-in agent (mirroring: external): start the other tool and move the applications yourself".into());
    }
    let resumed = fwd.route.side() == Side::Returning;
    if !resumed && fwd.route.side() != Side::Destination {
        let side = fwd.route.side().as_str();
        return refuse(note, StatusCode::CONFLICT, format!("the forward listener is at {side}: only a listener on the destination switches back"));
    }
    if resumed && fwd.route.peer_switch_back() == Some(false) {
        return refuse(note, StatusCode::CONFLICT, "another instance's switch back holds this forward listener (GET /v1/instances); wait until it is through or gives up".into());
    }
    if !resumed && !all_stopped(&ctl.recorded_states(name)) {
        return refuse(
            note,
            StatusCode::CONFLICT,
            "not every partition is STOPPED: the mirror has not failed over".into(),
        );
    }
    let parts: Vec<(String, i32)> = record
        .partitions
        .iter()
        .map(|p| (p.topic.clone(), p.partition))
        .collect();
    let failback = Http(&call.target);
    if call.dry_run {
        return json_reply(StatusCode::OK, &dry_run(gw, &fwd, &parts, &failback).await);
    }
    let started = Instant::now();
    let peers = PeerHold::new(ctl, true);
    let steps = Steps {
        fwd: &fwd,
        name,
        parts: &parts,
        peers: peers.as_ref(),
    };
    match steps.run(gw, ctl, &failback, resumed).await {
        Ok(mut v) => {
            v["mirror"] = json!(name);
            v["call_ms"] = json!(started.elapsed().as_millis() as u64);
            json_reply(StatusCode::OK, &v)
        }
        Err(stop) => {
            if stop.gave_back {
                let _ = fwd.route.give_back();
                steps.record(HoldStep::Release).await;
                tracing::warn!(mirror = %name, reason = %stop.why, "switch back refused; the forward listener is back on the destination");
            } else {
                tracing::warn!(mirror = %name, reason = %stop.why, "switch back stopped after the failback gateway's failover; the forward listener stays held: call again");
            }
            note.reason = Some(stop.why.clone());
            let what = if stop.gave_back {
                "switch back refused, nothing changed"
            } else {
                "switch back not finished, the forward listener stays held (call again to resume)"
            };
            json_reply(
                stop.status,
                &json!({ "error": format!("{what}: {}", stop.why), "side": fwd.route.side().as_str() }),
            )
        }
    }
}

async fn read_call(req: Request<Incoming>) -> Result<Call, String> {
    let dry_in_query = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "dry_run=true"));
    let body = http_body_util::Limited::new(req.into_body(), 64 * 1024)
        .collect()
        .await
        .map_err(|e| format!("cannot read the request body: {e}"))?
        .to_bytes();
    let mut call: Call = serde_json::from_slice(&body).map_err(|e| {
        format!("the body must be JSON {{\"gateway\": \"HOST:PORT\", \"mirror\": \"NAME\", \"token\": optional}}: {e}")
    })?;
    call.dry_run |= dry_in_query;
    if call.target.gateway.trim().is_empty() || call.target.mirror.trim().is_empty() {
        return Err("gateway and mirror must not be empty".into());
    }
    Ok(call)
}

/// A switch back's mirror, its forward listener and partitions, and its hold of the other
/// instances' listeners (several instances).
struct Steps<'a> {
    fwd: &'a ForwardHandle,
    name: &'a str,
    parts: &'a [(String, i32)],
    peers: Option<&'a PeerHold>,
}

impl Steps<'_> {
    /// Record `step` of the hold for the other instances; a failure is logged (a hold that
    /// is not caught up ends at its bound there; one caught up stands until recorded through:
    /// call again).
    async fn record(&self, step: HoldStep) {
        if let Err(e) = self.try_record(step).await {
            tracing::warn!(mirror = %self.name, error = %e, ?step, "switch back: the other instances' hold not recorded");
        }
    }

    async fn try_record(&self, step: HoldStep) -> Result<(), String> {
        match self.peers {
            Some(p) => p.record(self.name, self.fwd.hold, step).await,
            None => Ok(()),
        }
    }

    /// Steps 1 to 7 (see the module's comment); the answer's fields.
    async fn run(
        &self,
        gw: &dyn AdminBackend,
        ctl: &MirrorController,
        failback: &impl FailbackGateway,
        resumed: bool,
    ) -> Result<serde_json::Value, Stop> {
        let (fwd, name, parts) = (self.fwd, self.name, self.parts);
        let first = stage(
            parts,
            &failback.partitions().await.map_err(Stop::before_failover)?,
        )
        .map_err(Stop::before_failover)?;
        if first != Stage::Mirroring && !resumed {
            // Failed over before the clients left the destination: the old source may lack what
            // they wrote since (checked below, under the hold).
            tracing::warn!(mirror = %name, "switch back: the failback gateway's mirror failed over already");
        }
        if !resumed {
            fwd.route
                .hold_back()
                .map_err(|e| Stop::before_failover(e.to_string()))?;
        }
        let held = Instant::now();
        let deadline = held + fwd.hold;
        let hold = fwd.hold;
        self.try_record(HoldStep::Hold)
            .await
            .map_err(Stop::before_failover)?;
        while fwd.route.destination_connections() > 0 {
            if Instant::now() >= deadline {
                return Err(Stop::before_failover(format!(
                    "{} connections to the destination still had requests in flight after {hold:?}",
                    fwd.route.destination_connections()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
        // Every other instance's forward listener held and drained too: nothing reaches the
        // destination any more, so its log ends now are the ends to reach.
        if let Some(p) = self.peers {
            p.link
                .wait_forward_held(name, &p.hold_id, deadline)
                .await
                .map_err(Stop::before_failover)?;
        }
        let ends = destination_ends(gw, parts, deadline, hold).await?;
        let failed_over_here = match first {
            Stage::Mirroring => {
                old_source_reaches(fwd, &ends, deadline).await?;
                // Recorded before the failover: the other instances' holds stand from here on.
                self.try_record(HoldStep::CaughtUp)
                    .await
                    .map_err(Stop::before_failover)?;
                let started = match failback.fail_over().await {
                    Ok(started) => started,
                    // An answer lost on the way (a timeout, say) may hide a failover that started:
                    // the listener goes back to the destination only while none did.
                    Err(e) => match failback.partitions().await.and_then(|p| stage(parts, &p)) {
                        Ok(Stage::FailingOver | Stage::FailedOver) => true,
                        _ => return Err(Stop::before_failover(e)),
                    },
                };
                tracing::info!(mirror = %name, started, "switch back: the old source reached the destination's ends; the failback gateway fails over");
                true
            }
            Stage::FailingOver | Stage::FailedOver => {
                // Its failover ran before the hold: the old source must hold everything now.
                old_source_reaches(fwd, &ends, Instant::now()).await?;
                self.try_record(HoldStep::CaughtUp)
                    .await
                    .map_err(Stop::before_failover)?;
                false
            }
        };
        let wait_until = Instant::now() + FAILBACK_FAILOVER_WAIT;
        loop {
            let now = failback.partitions().await.and_then(|p| stage(parts, &p));
            match now {
            Ok(Stage::FailedOver) => break,
            Ok(_) | Err(_) if Instant::now() < wait_until => tokio::time::sleep(POLL * 5).await,
            Ok(s) => {
                return Err(Stop::held(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!("the failback gateway's failover did not complete within {FAILBACK_FAILOVER_WAIT:?} ({})", s.as_str()),
                ))
            }
            Err(e) => return Err(Stop::held(StatusCode::SERVICE_UNAVAILABLE, e)),
        }
        }
        let started = match ctl.start_mirroring(name).await {
            Ok(n) => n,
            Err(StartError::NothingStopped(_)) if resumed => 0,
            Err(e) => {
                return Err(Stop::held(
                    StatusCode::CONFLICT,
                    format!("the old source failed over, but this mirror did not start again: {e}"),
                ))
            }
        };
        fwd.route
            .returned()
            .map_err(|e| Stop::held(StatusCode::CONFLICT, e.to_string()))?;
        // The others go on to the source once the start applied there. Not recorded, their
        // listeners stay held: the answer says so (a call through one of them finishes it).
        let others_released = self.try_record(HoldStep::Returned).await;
        if let Err(e) = &others_released {
            tracing::warn!(mirror = %name, error = %e, "switch back through here; the other instances' listeners stay held until it is recorded");
        }
        Ok(json!({
            "others_release_error": others_released.err(),
            "side": fwd.route.side().as_str(),
            "held_ms": fwd.route.last_pause_ms(),
            "failback_failed_over_by_this_call": failed_over_here,
            "partitions_started": started,
            "note": "this mirror's agent verifies each partition is aligned with the old source before mirroring it again",
        }))
    }
}

/// Step 4: the destination's log ends under the hold, once no transaction is open in them.
async fn destination_ends(
    gw: &dyn AdminBackend,
    parts: &[(String, i32)],
    deadline: Instant,
    hold: Duration,
) -> Result<std::collections::BTreeMap<(String, i32), i64>, Stop> {
    let read = facts_once_closed(gw.cluster(), parts, "destination", deadline.into()).await;
    match read {
        Ok(facts) => Ok(facts.ends),
        Err(NotClosed::Read(e)) => Err(Stop::before_failover(e)),
        Err(NotClosed::Deadline(open)) if !open.is_empty() => Err(Stop::before_failover(format!(
            "transactions are open on the destination, which the failback's failover would abort: {}; let them end, then switch back again",
            open.join(", ")
        ))),
        Err(NotClosed::Deadline(_)) => Err(Stop::before_failover(format!(
            "the destination's log ends were not read within {hold:?}"
        ))),
    }
}

/// Step 5: wait (until `deadline`) for the old source's log ends to reach the destination's
/// `ends`; one past them is refused at once.
async fn old_source_reaches(
    fwd: &ForwardHandle,
    ends: &std::collections::BTreeMap<(String, i32), i64>,
    deadline: Instant,
) -> Result<(), Stop> {
    let parts: Vec<(String, i32)> = ends.keys().cloned().collect();
    loop {
        let _ = fwd.source.refresh().await;
        let now = fwd.source.log_ends(&parts, READ_TIMEOUT).await;
        let behind = match &now {
            Ok(old) => {
                let past: Vec<String> = ends
                    .iter()
                    .filter(|(k, end)| old.get(*k).is_some_and(|o| o > *end))
                    .map(|((t, p), end)| {
                        format!(
                            "{t}-{p} (old source {}, destination {end})",
                            old[&(t.clone(), *p)]
                        )
                    })
                    .collect();
                if !past.is_empty() {
                    return Err(Stop::before_failover(format!(
                        "the old source is past the destination's log ends read under the hold: {}; it holds records the destination never had (realign it and mirror the destination back first), or clients that do not use the forward listener wrote to the destination since (stop them, then switch back again)",
                        past.join(", ")
                    )));
                }
                ends.iter()
                    .filter(|(k, end)| old.get(*k).is_none_or(|o| o < *end))
                    .map(|((t, p), end)| {
                        format!(
                            "{t}-{p} (old source {}, destination {end})",
                            old.get(&(t.clone(), *p))
                                .map_or("?".into(), |o| o.to_string())
                        )
                    })
                    .collect::<Vec<String>>()
            }
            Err(e) => vec![format!("the old source's log ends could not be read: {e}")],
        };
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Stop::before_failover(format!(
                "the old source had not reached the destination's log ends within {:?}: {}",
                fwd.hold,
                behind.join(", ")
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The dry run: what a switch back would find now, nothing changed.
async fn dry_run(
    gw: &dyn AdminBackend,
    fwd: &ForwardHandle,
    parts: &[(String, i32)],
    failback: &impl FailbackGateway,
) -> serde_json::Value {
    let mut v = fwd.route.status();
    v["hold_ms"] = json!(fwd.hold.as_millis() as u64);
    v["failback_stage"] = match failback.partitions().await.and_then(|p| stage(parts, &p)) {
        Ok(s) => json!(s.as_str()),
        Err(e) => json!({ "error": e }),
    };
    let destination = tokio::time::timeout(
        READ_TIMEOUT,
        facts_of_cluster(gw.cluster(), parts, "destination"),
    )
    .await;
    let _ = fwd.source.refresh().await;
    let old = fwd.source.log_ends(parts, READ_TIMEOUT).await;
    match (destination, old) {
        (Ok(Ok(facts)), Ok(old)) => {
            let per: Vec<serde_json::Value> = facts
                .ends
                .iter()
                .map(|((t, p), end)| {
                    json!({ "topic": t, "partition": p, "destination_end": end,
                            "old_source_end": old.get(&(t.clone(), *p)) })
                })
                .collect();
            v["partitions"] = json!(per);
            v["transactions_open"] = json!(facts.open);
        }
        (Ok(Err(e)), _) | (_, Err(e)) => v["read_error"] = json!(e),
        (Err(_), _) => {
            v["read_error"] = json!(format!(
                "the destination was not read within {READ_TIMEOUT:?}"
            ))
        }
    }
    v
}
