//! What the state topic asks this instance to follow ([`Follow`]): another instance's
//! handover, its own failover to drive (a claim won, or records lost), a failover whose driver
//! is gone to claim, a failback, a pause.
//!
//! Owns: the choice of what to follow from the view. Must not touch: how it is followed (the
//! controller's hook), the records' meaning (the parent).

use std::time::Instant;

use super::{PeerView, Stopped};

/// What another instance's records ask this one to follow.
#[derive(Debug, Clone, PartialEq)]
pub enum Follow {
    /// Make the partitions another instance STOPPED writable here too (after screening).
    Stopped(std::sync::Arc<Stopped>),
    /// `mirror` was started mirroring again (failback, through any instance, this one
    /// included): its STOPPED partitions here follow.
    Mirroring {
        mirror: String,
        by: String,
        at_ms: i64,
    },
    /// `mirror` was paused or resumed (through any instance): its partitions here follow.
    Paused {
        mirror: String,
        paused: bool,
        by: String,
        at_ms: i64,
    },
    /// The instance driving failover `failover_id` is gone: this one claims it (epoch
    /// `epoch`) and, if its claim comes first, drives it from the recorded steps.
    TakeOver {
        mirror: String,
        failover_id: String,
        from: String,
        epoch: u32,
    },
    /// This instance's claim came first: it drives failover `failover_id` (epoch `epoch`).
    Drive {
        mirror: String,
        failover_id: String,
        epoch: u32,
    },
}

impl Follow {
    /// Tells one record to follow from another (a new record is followed again).
    pub fn key(&self) -> String {
        match self {
            Follow::Stopped(s) => format!(
                "stopped/{}/{}/{}/{}",
                s.mirror,
                s.failover_id,
                s.at_ms,
                s.partitions.len()
            ),
            Follow::Mirroring { mirror, by, at_ms } => format!("mirroring/{mirror}/{by}/{at_ms}"),
            Follow::Paused {
                mirror,
                paused,
                by,
                at_ms,
            } => format!("paused/{mirror}/{paused}/{by}/{at_ms}"),
            Follow::TakeOver {
                mirror,
                failover_id,
                epoch,
                ..
            } => format!("takeover/{mirror}/{failover_id}/{epoch}"),
            Follow::Drive {
                mirror,
                failover_id,
                epoch,
            } => format!("drive/{mirror}/{failover_id}/{epoch}"),
        }
    }

    pub fn mirror(&self) -> &str {
        match self {
            Follow::Stopped(s) => &s.mirror,
            Follow::Mirroring { mirror, .. }
            | Follow::Paused { mirror, .. }
            | Follow::TakeOver { mirror, .. }
            | Follow::Drive { mirror, .. } => mirror,
        }
    }
}

impl PeerView {
    /// What this instance must follow of the state topic: it is the state of record, so
    /// every instance follows it, the one whose call appended a record included (its own
    /// records usually know it already, and the follower then has nothing to do; they do not
    /// when its state directory was lost):
    /// - the STOPPED partitions handed over for the failover announced now for a mirror;
    /// - the failover announced now, to drive when this instance is its driver;
    /// - a mirror started mirroring again (failback), paused or resumed.
    ///
    /// A failover whose driver is gone (not alive at `now`) is taken over by the instance of
    /// the lowest id among those alive, this one included, once it holds its lease.
    pub fn to_follow(&self, now: Instant) -> Vec<Follow> {
        let mut out = Vec::new();
        let alive: Vec<String> = self.alive(now).into_iter().map(|(i, _)| i).collect();
        let first = alive.iter().all(|i| *i > self.me);
        let lease = self.lease_problem(now).is_none();
        for (mirror, a) in &self.failovers {
            match a {
                Some(a) => {
                    if let Some(s) = self
                        .stopped
                        .get(mirror)
                        .filter(|s| s.failover_id == a.failover_id && s.by == a.by)
                    {
                        out.push(Follow::Stopped(s.clone()));
                    }
                    if a.by == self.me {
                        out.push(Follow::Drive {
                            mirror: mirror.clone(),
                            failover_id: a.failover_id.clone(),
                            epoch: a.epoch,
                        });
                    } else if lease && first && !alive.contains(&a.by) {
                        out.push(Follow::TakeOver {
                            mirror: mirror.clone(),
                            failover_id: a.failover_id.clone(),
                            from: a.by.clone(),
                            epoch: a.epoch + 1,
                        });
                    }
                }
                None => {
                    if let Some((by, at_ms)) = self.mirroring.get(mirror) {
                        out.push(Follow::Mirroring {
                            mirror: mirror.clone(),
                            by: by.clone(),
                            at_ms: *at_ms,
                        });
                    }
                }
            }
        }
        for (mirror, (paused, by, at_ms)) in &self.paused {
            out.push(Follow::Paused {
                mirror: mirror.clone(),
                paused: *paused,
                by: by.clone(),
                at_ms: *at_ms,
            });
        }
        out
    }
}
