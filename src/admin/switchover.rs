//! `POST /v1/mirrors/NAME/switchover`: the planned switch of a mirror's forward listener from
//! the source to the destination, which its clients do not notice.
//!
//! Steps, bounded together by `forward.hold_ms` up to the failover (the switchover runs on the
//! instance that runs the mirror's built-in agent):
//! 1. **hold** the forward listener ([`crate::proxy::forward`]): no connection sends the source
//!    a new request but those of the transactions open through it; connections accepted now
//!    wait for the switch. With several instances the hold is recorded on the state topic, and
//!    every instance with a forward listener of the mirror holds its own;
//! 2. **finish and drain**: the transactions open through the listener end on the source (their
//!    requests still pass, nothing else does); then the connections to the source answer what
//!    they had in flight and close. With several instances, each of the others acknowledges
//!    its hold once drained (one gone lately is waited for until what it forwarded has
//!    settled);
//! 3. **mirror to the end**: every partition of the topics the mirror covers on the source is
//!    one of the mirror's (the agent is asked to discover those it does not have yet); the
//!    source's log end of every partition of the mirror is read, and
//!    the built-in agent mirrors up to it (with another mirroring tool, `mirroring: external`:
//!    the destination's last records are the source's, [`tail`]), and no transaction stays
//!    open in them (the failover would abort it behind its producer's back: refused instead).
//!    With several instances
//!    that catch-up is recorded too: the others' forwarded producers keep their sessions after
//!    the switch as this instance's do;
//! 4. **fail over** as `POST /v1/mirrors/NAME/failover` does (barriers, final group offset sync);
//!    the route switches to the destination once every partition is STOPPED, and the held
//!    connections go there.
//!
//! If step 2 or 3 does not finish within the bound, or the failover is refused, the listener is
//! released to the source (on every instance) and the call answers `409` with the reason:
//! nothing changed.
//!
//! Owns: those steps and their bound. Must not touch: the failover itself (the controller), the
//! connections (the route tells them).

use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use serde_json::json;

use crate::audit::AuditNote;
use crate::cluster::ClusterView;
use crate::controller::MirrorController;
use crate::instances::agent_owner::AgentTurn;
use crate::instances::{HoldStep, PeerLink};

pub(super) mod source;
mod tail;

use source::{facts_once_closed, source_facts, NotClosed};

use super::failover_call::{refresh_destination, start_failover};
use super::{error_reply, json_reply, preflight, AdminBackend, ForwardHandle};

/// How often the drain and the agent's progress are looked at.
const POLL: Duration = Duration::from_millis(10);

/// The switchover call of mirror `name`.
pub(super) async fn switchover(
    gw: &dyn AdminBackend,
    ctl: &std::sync::Arc<MirrorController>,
    name: &str,
    caller: &str,
    options: &preflight::FailoverOptions,
    note: &mut AuditNote,
) -> Response<Full<Bytes>> {
    let Some((record, _)) = ctl.records().into_iter().find(|(r, _)| r.name == name) else {
        return error_reply(StatusCode::NOT_FOUND, &format!("no mirror named {name:?}"));
    };
    let Some(fwd) = gw.forward(name) else {
        note.reason = Some("no forward listener".into());
        return error_reply(
            StatusCode::CONFLICT,
            &format!("mirror {name} has no forward listener (mirrors[].forward); use failover"),
        );
    };
    let partitions: Vec<(String, i32)> = record
        .partitions
        .iter()
        .map(|p| (p.topic.clone(), p.partition))
        .collect();
    note.dry_run = options.dry_run;
    if partitions.is_empty() {
        note.reason = Some("no partitions yet".into());
        return error_reply(
            StatusCode::CONFLICT,
            &format!(
                "mirror {name} has no partitions on the destination yet: nothing to switch over"
            ),
        );
    }
    if options.dry_run {
        let lag: Vec<serde_json::Value> = partitions
            .iter()
            .map(|(t, p)| {
                json!({
                    "topic": t,
                    "partition": p,
                    "lag_records": gw.agent_lag(name, t, *p).map(|l| l.0),
                })
            })
            .collect();
        let mut v = fwd.route.status();
        v["hold_ms"] = json!(fwd.hold.as_millis() as u64);
        v["partitions"] = json!(lag);
        v["mirroring"] = json!(if fwd.route.owns_state() {
            "agent"
        } else {
            "external"
        });
        v["agent_runs_here"] =
            json!(fwd.route.owns_state() && matches!(ctl.agent_turn(name), AgentTurn::Run { .. }));
        // Partitions of the mirror's topics on the source that it does not mirror yet (the
        // switchover waits for the agent to discover them).
        if let Ok(Ok(topics)) = tokio::time::timeout(fwd.hold, source_topics(&fwd.source)).await {
            let missing: Vec<String> = ctl
                .unrecorded_partitions(name, &topics)
                .into_iter()
                .map(|(t, p)| format!("{t}-{p}"))
                .collect();
            v["partitions_not_mirrored_yet"] = json!(missing);
        }
        // The transactions open now, which would refuse the switchover (read as it would).
        let started = Instant::now();
        let read = tokio::time::timeout(fwd.hold, source_facts(&fwd.source, &partitions)).await;
        v["expected_pause"] = expected_pause(gw, name, &partitions, started.elapsed(), &v);
        match read {
            Ok(Ok(facts)) => v["transactions_open"] = json!(facts.open),
            Ok(Err(e)) => v["source_read_error"] = json!(e),
            Err(_) => v["source_read_error"] = json!(format!("not read within {:?}", fwd.hold)),
        }
        return json_reply(StatusCode::OK, &v);
    }
    let agent_elsewhere = matches!(
        ctl.agent_turn(name),
        AgentTurn::Claim { .. } | AgentTurn::Standby(_)
    );
    if agent_elsewhere && fwd.route.owns_state() {
        let why = "the built-in agent of this mirror does not run on this instance (GET /v1/instances says which one runs it): call the switchover there";
        note.reason = Some(why.into());
        return error_reply(StatusCode::CONFLICT, &format!("mirror {name}: {why}"));
    }
    if let Err(e) = fwd.route.hold() {
        note.reason = Some(e.to_string());
        return error_reply(StatusCode::CONFLICT, &e.to_string());
    }
    let held = Instant::now();
    let peers = PeerHold::new(ctl, false);
    let caught_up = async {
        if let Some(p) = &peers {
            p.record(name, fwd.hold, HoldStep::Hold).await?;
        }
        mirror_to_the_end(gw, ctl, &fwd, name, peers.as_ref(), held + fwd.hold).await?;
        match &peers {
            Some(p) => p.record(name, fwd.hold, HoldStep::CaughtUp).await,
            None => Ok(()),
        }
    };
    if let Err(why) = caught_up.await {
        release(&fwd, name, peers.as_ref()).await;
        let held_ms = held.elapsed().as_millis() as u64;
        tracing::warn!(mirror = %name, held_ms, reason = %why, "switchover refused; the forward listener is back on the source");
        note.reason = Some(why.clone());
        return json_reply(
            StatusCode::CONFLICT,
            &json!({
                "error": format!("switchover refused, nothing changed: {why}"),
                "held_ms": held_ms,
            }),
        );
    }
    fwd.route.mark_caught_up();
    if !fwd.route.owns_state() {
        // Another tool mirrors: the forwarded ids are screened before the failover, so that
        // its producer-id allocator step counts them too (the route screens them again when
        // it switches, as after an unplanned failover).
        ctl.screen_forwarded(name, &fwd.route.screen_entries());
    }
    refresh_destination(gw, name).await;
    let reply = start_failover(gw, ctl, name, caller, options, note);
    let held_ms = held.elapsed().as_millis() as u64;
    if reply.status() != StatusCode::ACCEPTED {
        release(&fwd, name, peers.as_ref()).await;
        tracing::warn!(mirror = %name, held_ms, "switchover: the failover was refused; the forward listener is back on the source");
        return reply;
    }
    tracing::info!(mirror = %name, held_ms, "switchover: the source drained and mirrored to its end; failover started");
    reply
}

/// What the pause of a switchover now is made of, as far as it can be known before: the
/// source reads it starts with (timed by the dry run's own read), the agent's catch-up (at most
/// its largest lag now, in time), and the failover of the mirror's partitions (each gets a
/// barrier; a previous switch of this listener held its clients `last_switch_ms`).
fn expected_pause(
    gw: &dyn AdminBackend,
    name: &str,
    partitions: &[(String, i32)],
    source_read: Duration,
    route: &serde_json::Value,
) -> serde_json::Value {
    let lags: Vec<f64> = partitions
        .iter()
        .filter_map(|(t, p)| gw.agent_lag(name, t, *p).map(|l| l.1))
        .collect();
    let catch_up = (lags.len() == partitions.len())
        .then(|| (lags.iter().copied().fold(0.0, f64::max) * 1000.0).round() as u64);
    json!({
        "source_read_ms": source_read.as_millis() as u64,
        "catch_up_ms_at_most": catch_up,
        "failover_partitions": partitions.len(),
        "last_switch_ms": route["last_pause_ms"],
        "bound_ms": route["hold_ms"],
    })
}

/// A switchover's hold of the other instances' forward listeners (several instances), or a
/// switch back's (`back`).
pub(super) struct PeerHold {
    pub link: std::sync::Arc<PeerLink>,
    pub hold_id: String,
    pub back: bool,
}

impl PeerHold {
    /// A new hold of the other instances' listeners, when there are other instances.
    pub fn new(ctl: &MirrorController, back: bool) -> Option<PeerHold> {
        ctl.peer_link().map(|link| PeerHold {
            link: link.clone(),
            hold_id: uuid::Uuid::new_v4().simple().to_string(),
            back,
        })
    }

    pub async fn record(&self, mirror: &str, hold: Duration, step: HoldStep) -> Result<(), String> {
        self.link
            .record_forward_hold(mirror, &self.hold_id, hold, step, self.back)
            .await
    }
}

/// Give the forward listeners back to the source: this instance's, and the others' through the
/// state topic (a release that cannot be recorded ends at the hold's bound there).
async fn release(fwd: &ForwardHandle, name: &str, peers: Option<&PeerHold>) {
    let _ = fwd.route.release();
    if let Some(p) = peers {
        if let Err(e) = p.record(name, fwd.hold, HoldStep::Release).await {
            tracing::warn!(mirror = %name, error = %e, "the other instances' forward listeners stay held until the hold's bound");
        }
    }
}

/// `GET /v1/mirrors/NAME/forward`: the forward listener's route.
pub(super) fn status(gw: &dyn AdminBackend, name: &str) -> Response<Full<Bytes>> {
    match gw.forward(name) {
        Some(fwd) => {
            let mut v = fwd.route.status();
            v["hold_ms"] = json!(fwd.hold.as_millis() as u64);
            json_reply(StatusCode::OK, &v)
        }
        None => error_reply(
            StatusCode::NOT_FOUND,
            &format!("mirror {name:?} has no forward listener (mirrors[].forward)"),
        ),
    }
}

/// Steps 2 and 3: the source connections closed, the agent through the source's log end and no
/// transaction open, before `deadline`; why not otherwise.
async fn mirror_to_the_end(
    gw: &dyn AdminBackend,
    ctl: &MirrorController,
    fwd: &ForwardHandle,
    name: &str,
    peers: Option<&PeerHold>,
    deadline: Instant,
) -> Result<(), String> {
    let hold = fwd.hold;
    // Step 2 begins with the transactions open through the listener: their requests still go
    // to the source until each has ended (nothing else does).
    while fwd.route.finishing() {
        if Instant::now() >= deadline {
            let open = fwd.route.open_transactions();
            fwd.route.stop_finishing();
            return Err(format!(
                "transactions are open through the forward listener and did not end within {hold:?} (producer ids {open:?}); switch over when they can end"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    while fwd.route.source_connections() > 0 {
        if Instant::now() >= deadline {
            return Err(format!(
                "{} connections to the source still had requests in flight after {hold:?}",
                fwd.route.source_connections()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    // Every other instance's forward listener held and drained too: nothing reaches the
    // source any more, so its log end now is the end to mirror.
    if let Some(p) = peers {
        p.link.wait_forward_held(name, &p.hold_id, deadline).await?;
    }
    let partitions = &every_partition(gw, ctl, fwd, name, deadline).await?;
    // Step 3: the source's ends and open transactions, read under the hold. A transaction
    // whose commit or abort was sent before the hold ends with the coordinator's markers (the
    // log end moves past them); one still open would be aborted by the failover behind its
    // producer's back: refused instead.
    let transactions_open = |open: &[String]| {
        format!(
            "transactions are open on the source, which the failover would abort: {}; let them end, then switch over again",
            open.join(", ")
        )
    };
    let facts = match facts_once_closed(&fwd.source, partitions, "source", deadline.into()).await {
        Ok(facts) => facts,
        Err(NotClosed::Read(e)) => return Err(e),
        Err(NotClosed::Deadline(open)) if !open.is_empty() => return Err(transactions_open(&open)),
        Err(NotClosed::Deadline(_)) => {
            return Err(format!(
                "the source's log ends were not read within {hold:?}"
            ))
        }
    };
    if !fwd.route.owns_state() {
        // Another tool mirrors: the destination's last records are compared with the source's.
        return tail::wait_copied(&fwd.source, gw.cluster(), &facts.ends, deadline)
            .await
            .map_err(|e| format!("within {hold:?}, {e}"));
    }
    loop {
        let behind: Vec<String> = facts
            .ends
            .iter()
            .filter_map(|((t, p), end)| {
                let next = gw.agent_next_source(name, t, *p);
                (next.unwrap_or(-1) < *end).then(|| {
                    format!(
                        "{t}-{p} (mirrored to {}, source end {end})",
                        next.map_or("?".to_string(), |n| n.to_string())
                    )
                })
            })
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the agent had not mirrored the source's log end within {hold:?}: {}",
                behind.join(", ")
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The source's topics (name, partition count), as `source` shows them after a refresh.
async fn source_topics(source: &ClusterView) -> Result<Vec<(String, usize)>, String> {
    source
        .refresh()
        .await
        .map_err(|e| format!("the source's metadata could not be read: {e}"))?;
    Ok(source
        .topic_names()
        .into_iter()
        .filter(|t| !t.starts_with("__"))
        .filter_map(|t| {
            let n = source.topic(&t)?.leaders.len();
            Some((t, n))
        })
        .collect())
}

/// Every partition the mirror covers on the source, once the mirror has a record of each
/// (before `deadline`). A topic of the mirror created on the source since the agent's last
/// discovery would otherwise be absent, or read-only, on the destination after the switch: the
/// agent is asked to discover it now, and it is mirrored to its end with the others.
async fn every_partition(
    gw: &dyn AdminBackend,
    ctl: &MirrorController,
    fwd: &ForwardHandle,
    name: &str,
    deadline: Instant,
) -> Result<Vec<(String, i32)>, String> {
    let mut asked: Option<Instant> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let topics = tokio::time::timeout(left, source_topics(&fwd.source))
            .await
            .map_err(|_| format!("the source's metadata was not read within {:?}", fwd.hold))??;
        let missing = ctl.unrecorded_partitions(name, &topics);
        if missing.is_empty() {
            let mut all: Vec<(String, i32)> = ctl
                .records()
                .into_iter()
                .filter(|(r, _)| r.name == name)
                .flat_map(|(r, _)| r.partitions.into_iter().map(|p| (p.topic, p.partition)))
                .collect();
            all.sort();
            return Ok(all);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} partitions of topics the mirror covers are on the source but not mirrored yet ({}); the agent discovers them, switch over again then",
                missing.len(),
                some_partitions(missing.iter())
            ));
        }
        // Ask once, then look at the destination again every half second: its partitions
        // become the mirror's once the agent created them there.
        if asked.is_none_or(|t| t.elapsed() >= POLL * 50) {
            if asked.is_none() {
                tracing::info!(mirror = %name, missing = missing.len(), "switchover: topics of the mirror on the source not mirrored yet; the agent discovers them");
                gw.agent_rediscover(name);
            }
            refresh_destination(gw, name).await;
            asked = Some(Instant::now());
        }
        tokio::time::sleep(POLL * 5).await;
    }
}

/// The first ten of `partitions` as `topic-partition`, then `…` if there are more.
fn some_partitions<'a>(partitions: impl ExactSizeIterator<Item = &'a (String, i32)>) -> String {
    let total = partitions.len();
    let shown: Vec<String> = partitions
        .take(10)
        .map(|(t, p)| format!("{t}-{p}"))
        .collect();
    let more = if total > shown.len() { ", …" } else { "" };
    format!("{}{more}", shown.join(", "))
}
