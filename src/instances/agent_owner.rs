//! Which instance runs the built-in agent of each mirror: exactly one at a time, chosen and
//! fenced through the state topic. Pure, like the view that holds it.
//!
//! The rules:
//! - Each instance's heartbeat lists the mirrors it could run the agent for (a `source:` is
//!   configured there).
//! - Ownership is claimed with an `agent_owner` record carrying an epoch; of the claims of one
//!   epoch only the first in the log counts, and a claim of a lower or equal epoch than the
//!   current one counts for nothing. Every reader therefore agrees on the owner.
//! - Ownership is sticky: an owner alive keeps the agent, whoever else starts. A new claim
//!   (epoch + 1) is made only when there is no owner or the owner is no longer alive (no
//!   heartbeat read for the session timeout plus the margin), and only by the lowest instance
//!   alive that could run it, this one included.
//! - An instance runs the agent only while it holds its lease and the view says it owns it. An
//!   owner that was paused or cut off loses its lease (its own agent's appends are refused)
//!   before the others stop counting it alive, so two agents never append at once.
//! - An owner runs the agent only in the lease during which it read its claim (a *lease term*,
//!   counted by the view). Once its lease has lapsed — a pause, a cut, a restart — its epoch is
//!   over for it: another instance may have seen it gone and claimed the next epoch, and that
//!   claim may reach the log only after this one has its lease back (defect S3). It claims the
//!   next epoch itself (whichever instance is lowest: the others still see it as the owner) and
//!   runs again only once that claim is read back as the first of its epoch; of two instances
//!   claiming after a lapse, the log's order decides.
//!
//! Owns: those rules. Must not touch: the state topic's I/O, the agent itself.

use std::collections::HashMap;

/// What this instance does with a mirror's agent now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentTurn {
    /// It owns the agent (at `epoch`): run it.
    Run { epoch: u32 },
    /// No owner alive and this is the lowest instance alive that could run it: claim `epoch`.
    Claim { epoch: u32 },
    /// Another instance owns it, or will claim it: do not run (why, for the status).
    Standby(String),
}

/// The owners claimed on the state topic and who could run each mirror's agent.
#[derive(Debug, Default)]
pub struct AgentOwners {
    /// Mirror → (owner, epoch): the first claim of the highest epoch.
    owners: HashMap<String, (String, u32)>,
    /// Instance → the mirrors it could run the agent for (from its latest heartbeat).
    capable: HashMap<String, Vec<String>>,
    /// Mirror → this instance's lease term when the counting claim was read (S3).
    read_in: HashMap<String, u64>,
}

impl AgentOwners {
    /// A heartbeat of `instance` listing `agents`.
    pub fn heartbeat(&mut self, instance: &str, agents: Vec<String>) {
        self.capable.insert(instance.to_string(), agents);
    }

    /// A claim of `mirror`'s agent by `owner` at `epoch`, read in this instance's lease term
    /// `term`: counts only above the current epoch.
    pub fn claim(&mut self, mirror: &str, owner: &str, epoch: u32, term: u64) {
        if self.owners.get(mirror).is_some_and(|(_, e)| *e >= epoch) {
            return;
        }
        self.owners
            .insert(mirror.to_string(), (owner.to_string(), epoch));
        self.read_in.insert(mirror.to_string(), term);
    }

    /// The owners and who could run each agent, in a stable order (compaction tests).
    #[cfg(test)]
    pub fn conclusions(&self) -> String {
        let mut owners: Vec<_> = self.owners.iter().collect();
        owners.sort();
        let mut capable: Vec<_> = self.capable.iter().collect();
        capable.sort();
        format!("owners {owners:?} capable {capable:?}")
    }

    /// The lease term in which the counting claim of `mirror` was read (the simulation's
    /// control for S3).
    #[cfg(test)]
    pub fn read_in(&self, mirror: &str) -> Option<u64> {
        self.read_in.get(mirror).copied()
    }

    /// The owner of `mirror`'s agent and its epoch.
    pub fn owner(&self, mirror: &str) -> Option<(&str, u32)> {
        self.owners.get(mirror).map(|(o, e)| (o.as_str(), *e))
    }

    /// The turn of instance `me` (which could run `mirror`'s agent) in its lease term `term`,
    /// given the other instances `alive` now.
    pub fn turn(&self, mirror: &str, me: &str, alive: &[String], term: u64) -> AgentTurn {
        let current = self.owners.get(mirror);
        match current {
            Some((o, epoch)) if o == me => {
                return if self.read_in.get(mirror) == Some(&term) {
                    AgentTurn::Run { epoch: *epoch }
                } else {
                    // Its lease lapsed since the claim was read: the epoch is over here (S3).
                    AgentTurn::Claim { epoch: epoch + 1 }
                };
            }
            Some((o, epoch)) if alive.contains(o) => {
                return AgentTurn::Standby(format!(
                    "instance {o} runs the agent (ownership epoch {epoch})"
                ))
            }
            _ => {}
        }
        let epoch = current.map(|(_, e)| *e).unwrap_or(0) + 1;
        let lowest = alive
            .iter()
            .filter(|i| {
                self.capable
                    .get(*i)
                    .is_some_and(|m| m.iter().any(|m| m == mirror))
            })
            .map(String::as_str)
            .chain(std::iter::once(me))
            .min()
            .unwrap_or(me);
        if lowest == me {
            AgentTurn::Claim { epoch }
        } else {
            AgentTurn::Standby(format!(
                "instance {lowest} is to claim the agent (ownership epoch {epoch})"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn without_an_owner_the_lowest_instance_alive_that_could_run_the_agent_claims_it() {
        let mut o = AgentOwners::default();
        o.heartbeat("a", vec!["m".into()]);
        o.heartbeat("b", vec!["m".into()]);
        o.heartbeat("aa", vec!["other".into()]);
        assert_eq!(
            o.turn("m", "a", &alive(&["aa", "b"]), 1),
            AgentTurn::Claim { epoch: 1 }
        );
        assert!(matches!(
            o.turn("m", "b", &alive(&["a", "aa"]), 1),
            AgentTurn::Standby(why) if why.contains("instance a is to claim")
        ));
    }

    #[test]
    fn of_two_claims_of_one_epoch_the_first_counts_for_every_reader() {
        let mut o = AgentOwners::default();
        o.claim("m", "b", 1, 1);
        o.claim("m", "a", 1, 1);
        assert_eq!(o.owner("m"), Some(("b", 1)));
        assert_eq!(
            o.turn("m", "b", &alive(&["a"]), 1),
            AgentTurn::Run { epoch: 1 }
        );
        assert!(matches!(
            o.turn("m", "a", &alive(&["b"]), 1),
            AgentTurn::Standby(_)
        ));
    }

    #[test]
    fn an_owner_alive_keeps_the_agent_when_a_lower_instance_starts() {
        let mut o = AgentOwners::default();
        o.heartbeat("a", vec!["m".into()]);
        o.claim("m", "b", 3, 1);
        assert!(matches!(
            o.turn("m", "a", &alive(&["b"]), 1),
            AgentTurn::Standby(why) if why.contains("instance b runs the agent")
        ));
    }

    #[test]
    fn when_the_owner_is_no_longer_alive_the_next_epoch_is_claimed() {
        let mut o = AgentOwners::default();
        o.heartbeat("c", vec!["m".into()]);
        o.claim("m", "a", 2, 1);
        assert_eq!(
            o.turn("m", "b", &alive(&["c"]), 1),
            AgentTurn::Claim { epoch: 3 }
        );
        o.claim("m", "b", 3, 1);
        o.claim("m", "c", 3, 1);
        o.claim("m", "a", 2, 1);
        assert_eq!(o.owner("m"), Some(("b", 3)));
    }

    #[test]
    fn an_owner_whose_lease_lapsed_since_its_claim_was_read_claims_the_next_epoch_before_running() {
        // Defect S3: a, the owner at epoch 1, was paused past its session; c saw it gone and
        // claimed epoch 2, but that claim was not in the log yet when a had its lease back.
        let mut o = AgentOwners::default();
        o.heartbeat("c", vec!["m".into()]);
        o.claim("m", "a", 1, 1);
        assert_eq!(
            o.turn("m", "a", &alive(&["c"]), 1),
            AgentTurn::Run { epoch: 1 }
        );
        assert_eq!(
            o.turn("m", "a", &alive(&["c"]), 2),
            AgentTurn::Claim { epoch: 2 },
            "a new lease: the epoch read in the last one is over, whoever is lowest"
        );
        o.claim("m", "c", 2, 2);
        o.claim("m", "a", 2, 2);
        assert!(matches!(
            o.turn("m", "a", &alive(&["c"]), 2),
            AgentTurn::Standby(why) if why.contains("instance c runs the agent")
        ));
    }

    #[test]
    fn a_lapsed_owner_whose_new_claim_comes_first_runs_at_the_new_epoch() {
        let mut o = AgentOwners::default();
        o.claim("m", "a", 1, 1);
        o.claim("m", "a", 2, 2);
        o.claim("m", "c", 2, 2);
        assert_eq!(
            o.turn("m", "a", &alive(&["c"]), 2),
            AgentTurn::Run { epoch: 2 }
        );
    }
}
