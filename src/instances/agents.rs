//! The link's side of the built-in agent's ownership ([`super::agent_owner`] holds the rules):
//! the mirrors this instance could run the agent for, its claims after each heartbeat, the
//! turn asked by the agent, and the offset maps published and read back.
//!
//! Owns: those records' I/O on the state topic. Must not touch: the rules, the agent.

use super::agent_owner::AgentTurn;
use super::view::PeerRecord;
use super::PeerLink;

impl PeerLink {
    /// The mirrors this instance could run the built-in agent for (their `source:` is
    /// configured here); announced in its heartbeats.
    pub fn set_agents(&self, mirrors: Vec<String>) {
        let _ = self.agents.set(mirrors);
    }

    /// What this instance does with `mirror`'s built-in agent now.
    pub fn agent_turn(&self, mirror: &str) -> AgentTurn {
        self.view().agent_turn(mirror, super::clock::now())
    }

    /// Each mirror whose built-in agent this instance could run, and whether it runs it now.
    pub fn agents_here(&self) -> Vec<(String, bool)> {
        let v = self.view();
        let now = super::clock::now();
        self.agents
            .get()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m.clone(),
                    matches!(v.agent_turn(m, now), AgentTurn::Run { .. }),
                )
            })
            .collect()
    }

    /// The agent's offset maps of `mirror` as its owner last published them.
    pub fn agent_offsets(&self, mirror: &str) -> Option<serde_json::Value> {
        self.view().agent_offsets(mirror).cloned()
    }

    /// Publish the agent's offset maps of `mirror` (this instance owns it at `epoch`).
    pub async fn publish_agent_offsets(
        &self,
        mirror: &str,
        epoch: u32,
        offsets: serde_json::Value,
    ) -> Result<(), String> {
        let rec = PeerRecord::AgentOffsets {
            mirror: mirror.to_string(),
            by: self.me(),
            epoch,
            offsets,
        };
        self.log.append(&rec).await
    }

    /// Claim the agent of each mirror whose turn it is here (after a heartbeat).
    pub(super) async fn claim_agents(&self) {
        let me = self.me();
        for mirror in self.agents.get().into_iter().flatten() {
            let AgentTurn::Claim { epoch } = self.agent_turn(mirror) else {
                continue;
            };
            let rec = PeerRecord::AgentOwner {
                mirror: mirror.clone(),
                owner: me.clone(),
                epoch,
                at_ms: self.now_ms(),
            };
            if self.hold_claim(&rec) {
                continue;
            }
            match self.log.append(&rec).await {
                Ok(()) => {
                    tracing::info!(target: "mirrorgate::peers", mirror = %mirror, epoch, "claimed the built-in agent on the state topic; it runs here once the claim is read back as the first of its epoch")
                }
                Err(e) => {
                    tracing::warn!(target: "mirrorgate::peers", mirror = %mirror, error = %e, "cannot claim the built-in agent on the state topic")
                }
            }
        }
    }

    /// Test hook (environment, read once): while the file named by
    /// `MIRRORGATE_TEST_HOLD_AGENT_CLAIM_WHILE` exists, a claim is held back and appended once
    /// the file is gone, as a claim the broker appends late would be (the window of defect S3:
    /// a former owner back from a pause has its lease again before the new claim is in the
    /// log). One claim is held at a time; heartbeats go on meanwhile. Unset in production:
    /// returns false.
    fn hold_claim(&self, rec: &PeerRecord) -> bool {
        static HOLD: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
        static HELD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let hold = HOLD.get_or_init(|| {
            std::env::var_os("MIRRORGATE_TEST_HOLD_AGENT_CLAIM_WHILE").map(Into::into)
        });
        let Some(path) = hold.clone().filter(|p| p.exists()) else {
            return false;
        };
        if HELD.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return true;
        }
        let (log, rec) = (self.log.clone(), rec.clone());
        tokio::spawn(async move {
            while path.exists() {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let r = log.append(&rec).await;
            tracing::info!(target: "mirrorgate::peers", result = ?r, "test hook: the held agent claim appended");
            HELD.store(false, std::sync::atomic::Ordering::SeqCst);
        });
        true
    }
}
