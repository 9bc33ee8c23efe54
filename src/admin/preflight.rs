//! The failover call's options (`dry_run`, `force`, `max_lag_records`, `max_lag_seconds`, in
//! the query string or the JSON body) and the facts a preflight judges, gathered from the mirror
//! controller, the built-in agent, the PSM and the cluster view.
//!
//! Owns: reading the options (bad ones are a 400 with the reason) and gathering the facts.
//! Must not touch: the verdict (`crate::failover::preflight::assess`), the failover.

use serde::Deserialize;

use crate::controller::MirrorController;
use crate::failover::preflight::{Guards, MirrorFacts, PartitionFacts};
use crate::mirror::report::{FailedAtCall, FailoverReport, PartitionLag};
use crate::mirror::screening::now_ms;

use super::AdminBackend;

/// What a failover call asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverOptions {
    /// Answer the preflight, change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Fail over even when a guard is exceeded.
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub max_lag_records: Option<i64>,
    #[serde(default)]
    pub max_lag_seconds: Option<f64>,
}

impl FailoverOptions {
    /// The options of a call: the JSON body (an object, or empty) and the query string; a key
    /// given in both must agree.
    pub fn read(query: Option<&str>, body: &[u8]) -> Result<Self, String> {
        let mut o = if body.iter().all(|b| b.is_ascii_whitespace()) {
            FailoverOptions::default()
        } else {
            let v: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| format!("malformed JSON body: {e}"))?;
            if !v.is_object() {
                return Err("the body must be a JSON object (or empty)".into());
            }
            serde_json::from_value(v)
                .map_err(|e| format!("bad failover option in the body: {e}"))?
        };
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
            let bad = |what: &str| format!("query parameter {k}={v:?}: {what}");
            match k {
                "dry_run" | "force" => {
                    let b = match v {
                        "true" | "1" | "" => true,
                        "false" | "0" => false,
                        _ => return Err(bad("expected true or false")),
                    };
                    if k == "dry_run" {
                        o.dry_run |= b;
                    } else {
                        o.force |= b;
                    }
                }
                "max_lag_records" => {
                    o.max_lag_records =
                        Some(v.parse().map_err(|_| bad("expected a whole number"))?)
                }
                "max_lag_seconds" => {
                    let s: f64 = v.parse().map_err(|_| bad("expected a number"))?;
                    if !s.is_finite() {
                        return Err(bad("expected a finite number"));
                    }
                    o.max_lag_seconds = Some(s);
                }
                _ => return Err(format!("unknown query parameter {k:?} (dry_run, force, max_lag_records, max_lag_seconds)")),
            }
        }
        if o.max_lag_records.is_some_and(|n| n < 0) || o.max_lag_seconds.is_some_and(|s| s < 0.0) {
            return Err("max_lag_records and max_lag_seconds cannot be negative".into());
        }
        Ok(o)
    }

    pub fn guards(&self) -> Guards {
        Guards {
            max_lag_records: self.max_lag_records,
            max_lag_seconds: self.max_lag_seconds,
        }
    }
}

/// The facts of mirror `name` now; `None` for an unknown mirror.
pub fn facts(gw: &dyn AdminBackend, ctl: &MirrorController, name: &str) -> Option<MirrorFacts> {
    let (record, unreadable) = ctl.records().into_iter().find(|(r, _)| r.name == name)?;
    let cluster = gw.cluster();
    let partitions = record
        .partitions
        .iter()
        .map(|p| {
            let lag = gw.agent_lag(name, &p.topic, p.partition);
            let view = gw
                .psm()
                .and_then(|psm| psm.producers(&p.topic, p.partition));
            PartitionFacts {
                topic: p.topic.clone(),
                partition: p.partition,
                state: p.state.as_str().to_string(),
                last_error: p.last_error.clone(),
                lag_records: lag.map(|l| l.0),
                lag_seconds: lag.map(|l| l.1),
                lag_bytes_estimate: gw.agent_lag_bytes(name, &p.topic, p.partition),
                source_end_moved_ms: gw.agent_source_end_moved_ms(name, &p.topic, p.partition),
                leader: cluster
                    .topic(&p.topic)
                    .and_then(|t| t.leaders.get(p.partition as usize).copied())
                    .filter(|l| *l >= 0),
                psm_ready: view.as_ref().is_some_and(|v| v.slot.ready),
                psm_producers: view.as_ref().map_or(0, |v| v.producers.len()),
                open_transactions: view.as_ref().map_or(0, |v| {
                    v.producers
                        .iter()
                        .filter(|e| e.current_txn_first_offset().is_some())
                        .count()
                }),
            }
        })
        .collect();
    let missing = gw.permissions_missing();
    Some(MirrorFacts {
        mirror: name.to_string(),
        state_unreadable: unreadable,
        source: gw.agent_source(name),
        partitions,
        barrier_permission: (!missing.is_empty()).then(|| missing.join("; ")),
        screened_ids: gw.screened_ids(),
        final_group_sync: gw.group_sync(name).is_some(),
        last_failover: gw.failover_reports(name).ok().and_then(|list| {
            list.iter()
                .rev()
                .find_map(|r| Some((r.rto_seconds?, r.partitions.len())))
        }),
        now_ms: now_ms(),
    })
}

/// The report of a failover just called by `caller` with `options`, with the lag the agent
/// knew at the call (`at_call`: the facts read just before).
pub fn open_report(
    name: &str,
    failover_id: &str,
    caller: &str,
    options: &FailoverOptions,
    at_call: Option<MirrorFacts>,
) -> FailoverReport {
    let failed: Vec<FailedAtCall> = at_call
        .iter()
        .flat_map(|f| f.partitions.iter())
        .filter(|p| p.state == "FAILED")
        .map(|p| FailedAtCall {
            topic: p.topic.clone(),
            partition: p.partition,
            error: p.last_error.clone(),
        })
        .collect();
    let (lag, reachable) = match at_call {
        Some(f) => (
            f.partitions
                .iter()
                .map(|p| PartitionLag {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    lag_records: p.lag_records,
                    lag_seconds: p.lag_seconds,
                })
                .collect(),
            f.source.map(|s| s.reachable),
        ),
        None => (Vec::new(), None),
    };
    let mut report = FailoverReport::open(
        name,
        failover_id,
        caller.to_string(),
        now_ms(),
        (
            options.max_lag_records,
            options.max_lag_seconds,
            options.force,
        ),
        lag,
        reachable,
    );
    report.failed_at_call = failed;
    report
}

#[cfg(test)]
mod tests {
    use super::FailoverOptions;

    #[test]
    fn options_come_from_the_query_string_and_the_body() {
        let o = FailoverOptions::read(Some("dry_run=true&max_lag_records=10"), b"").unwrap();
        assert!(o.dry_run && !o.force);
        assert_eq!(o.max_lag_records, Some(10));
        let o = FailoverOptions::read(None, br#"{"force": true, "max_lag_seconds": 2.5}"#).unwrap();
        assert!(o.force && !o.dry_run);
        assert_eq!(o.max_lag_seconds, Some(2.5));
        let o = FailoverOptions::read(Some("dry_run"), b"  ").unwrap();
        assert!(o.dry_run);
    }

    #[test]
    fn bad_options_are_refused_with_the_reason() {
        for (q, body, want) in [
            (Some("dry_run=maybe"), &b""[..], "expected true or false"),
            (Some("max_lag_records=ten"), b"", "whole number"),
            (Some("max_lag_seconds=inf"), b"", "finite"),
            (Some("speed=fast"), b"", "unknown query parameter"),
            (None, br#"{"max_lag": 3}"#, "bad failover option"),
            (None, b"[1]", "JSON object"),
            (None, b"{", "malformed JSON"),
            (Some("max_lag_records=-1"), b"", "negative"),
        ] {
            let e = FailoverOptions::read(q, body).unwrap_err();
            assert!(e.contains(want), "{q:?} {body:?}: {e}");
        }
    }
}
