//! The failback gateway as a switch back sees it: the gateway in front of the old source whose
//! mirror copies the destination back onto it, reached through its admin API.
//!
//! Owns: the two calls a switch back makes there (its mirror's partitions, its failover) and
//! what their answers say ([`Stage`]). Must not touch: the steps of the switch back, the route.

use std::time::Duration;

use hyper::Method;

/// How long one call to the failback gateway's admin API may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the failback gateway is, as the switch back's call names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct FailbackTarget {
    /// Its admin API, `host:port`.
    pub gateway: String,
    /// Its mirror whose source is this gateway's destination.
    pub mirror: String,
    /// Its admin token, when it requires one.
    #[serde(default)]
    pub token: Option<String>,
}

/// What the switch back asks of the failback gateway (a trait: the policy is unit-tested
/// against a fake).
pub trait FailbackGateway {
    /// Its mirror's partitions: topic, partition, state (`MIRRORING`, `STOPPED`, …).
    async fn partitions(&self) -> Result<Vec<(String, i32, String)>, String>;
    /// Start its mirror's failover; `Ok(true)` when started or joined, `Ok(false)` when it had
    /// failed over already.
    async fn fail_over(&self) -> Result<bool, String>;
}

/// How far the failback gateway's mirror is, for the partitions the switch back moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Every one of them is mirrored (the old source follows the destination).
    Mirroring,
    /// Its failover runs: some are STOPPING, none FAILED.
    FailingOver,
    /// Every one of them is STOPPED: the old source takes writes.
    FailedOver,
}

impl Stage {
    pub fn as_str(&self) -> &'static str {
        match self {
            Stage::Mirroring => "mirroring",
            Stage::FailingOver => "failing_over",
            Stage::FailedOver => "failed_over",
        }
    }
}

/// The stage the failback gateway's `theirs` partitions are in for `ours` (the partitions of
/// this gateway's mirror), or why a switch back cannot go on.
pub fn stage(ours: &[(String, i32)], theirs: &[(String, i32, String)]) -> Result<Stage, String> {
    let state_of = |t: &str, p: i32| {
        theirs
            .iter()
            .find(|(tt, pp, _)| tt == t && *pp == p)
            .map(|x| x.2.as_str())
    };
    let missing: Vec<String> = ours
        .iter()
        .filter(|(t, p)| state_of(t, *p).is_none())
        .map(|(t, p)| format!("{t}-{p}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the failback gateway's mirror does not mirror {}: the old source would lack them",
            missing.join(", ")
        ));
    }
    let states: Vec<(String, &str)> = ours
        .iter()
        .map(|(t, p)| (format!("{t}-{p}"), state_of(t, *p).unwrap_or("")))
        .collect();
    let odd: Vec<String> = states
        .iter()
        .filter(|(_, s)| !matches!(*s, "MIRRORING" | "STOPPING" | "STOPPED"))
        .map(|(k, s)| format!("{k} ({s})"))
        .collect();
    if !odd.is_empty() {
        return Err(format!(
            "the failback gateway's mirror has partitions neither mirroring nor failing over: {}",
            odd.join(", ")
        ));
    }
    if states.iter().all(|(_, s)| *s == "MIRRORING") {
        Ok(Stage::Mirroring)
    } else if states.iter().all(|(_, s)| *s == "STOPPED") {
        Ok(Stage::FailedOver)
    } else if states
        .iter()
        .any(|(_, s)| *s == "STOPPING" || *s == "STOPPED")
    {
        Ok(Stage::FailingOver)
    } else {
        Err("the failback gateway's mirror is in no stage a switch back knows".into())
    }
}

/// The failback gateway through its admin API (plain HTTP, as the admin API serves).
pub struct Http<'a>(pub &'a FailbackTarget);

impl Http<'_> {
    async fn call(&self, method: Method, path: &str) -> Result<(u16, String), String> {
        let t = self.0;
        let call = crate::admin::client::call(&t.gateway, method, path, t.token.as_deref(), None);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(format!("the failback gateway: {e}")),
            Err(_) => Err(format!(
                "the failback gateway at {} did not answer within {CALL_TIMEOUT:?}",
                t.gateway
            )),
        }
    }
}

impl FailbackGateway for Http<'_> {
    async fn partitions(&self) -> Result<Vec<(String, i32, String)>, String> {
        let path = format!("/v1/mirrors/{}/partitions", self.0.mirror);
        let (status, body) = self.call(Method::GET, &path).await?;
        if status != 200 {
            return Err(format!(
                "the failback gateway answered GET {path} with {status}: {body}"
            ));
        }
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| format!("the failback gateway's answer to GET {path} is not JSON: {e}"))?;
        let list = v["partitions"].as_array().ok_or_else(|| {
            format!("the failback gateway's answer to GET {path} has no partitions")
        })?;
        list.iter()
            .map(|p| {
                let topic = p["topic"].as_str();
                let partition = p["partition"].as_i64();
                let state = p["state"].as_str();
                match (topic, partition, state) {
                    (Some(t), Some(n), Some(s)) => Ok((t.to_string(), n as i32, s.to_string())),
                    _ => Err(format!(
                        "the failback gateway's answer to GET {path} has a partition without topic, partition or state: {p}"
                    )),
                }
            })
            .collect()
    }

    async fn fail_over(&self) -> Result<bool, String> {
        let path = format!("/v1/mirrors/{}/failover", self.0.mirror);
        match self.call(Method::POST, &path).await? {
            (202, _) => Ok(true),
            (409, body) if body.contains("is already stopped") => Ok(false),
            (status, body) => Err(format!(
                "the failback gateway refused its failover ({status}): {body}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> Vec<(String, i32)> {
        vec![("orders".into(), 0), ("orders".into(), 1)]
    }

    fn theirs(states: &[&str]) -> Vec<(String, i32, String)> {
        states
            .iter()
            .enumerate()
            .map(|(i, s)| ("orders".to_string(), i as i32, s.to_string()))
            .collect()
    }

    #[test]
    fn a_failback_mirror_mirroring_every_partition_is_ready_for_the_catch_up() {
        assert_eq!(
            stage(&ours(), &theirs(&["MIRRORING", "MIRRORING"])),
            Ok(Stage::Mirroring)
        );
    }

    #[test]
    fn a_failback_mirror_with_every_partition_stopped_has_failed_over() {
        assert_eq!(
            stage(&ours(), &theirs(&["STOPPED", "STOPPED"])),
            Ok(Stage::FailedOver)
        );
        assert_eq!(
            stage(&ours(), &theirs(&["STOPPING", "STOPPED"])),
            Ok(Stage::FailingOver)
        );
        assert_eq!(
            stage(&ours(), &theirs(&["MIRRORING", "STOPPING"])),
            Ok(Stage::FailingOver)
        );
    }

    #[test]
    fn a_partition_the_failback_mirror_lacks_refuses_the_switch_back() {
        let err = stage(&ours(), &theirs(&["MIRRORING"])).expect_err("orders-1 is not mirrored");
        assert!(err.contains("orders-1"), "{err}");
    }

    #[test]
    fn a_failed_or_paused_failback_partition_refuses_the_switch_back() {
        for odd in ["FAILED", "PAUSED"] {
            let err = stage(&ours(), &theirs(&["MIRRORING", odd])).expect_err(odd);
            assert!(err.contains(&format!("orders-1 ({odd})")), "{err}");
        }
    }

    #[test]
    fn the_failback_mirror_may_mirror_more_than_the_partitions_switched_back() {
        let mut more = theirs(&["MIRRORING", "MIRRORING"]);
        more.push(("audit".into(), 0, "PAUSED".into()));
        assert_eq!(stage(&ours(), &more), Ok(Stage::Mirroring));
    }
}
