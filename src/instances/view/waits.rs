//! Whom a failover or failback still waits for, and whose writes may still land: the
//! acknowledgements and the instances gone or restarted lately, as this view read them.
//!
//! Owns: those queries. Must not touch: the records' application ([`super::PeerView::apply`]).

use std::time::{Duration, Instant};

use super::{PeerView, MARGIN};

impl PeerView {
    /// The other instances alive at `now` that have not said they have every partition of
    /// `mirror` STOPPED for failover `fid`: a failback of it waits for them (review G4).
    pub fn not_adopted(&self, mirror: &str, fid: &str, now: Instant) -> Vec<String> {
        self.alive(now)
            .into_iter()
            .map(|(i, _)| i)
            .filter(|i| !self.has_adopted(mirror, i, fid))
            .collect()
    }

    /// Whether `instance` said it has every partition of `mirror` STOPPED for failover `fid`.
    pub fn has_adopted(&self, mirror: &str, instance: &str, fid: &str) -> bool {
        self.adopted
            .get(&(mirror.to_string(), instance.to_string()))
            .is_some_and(|f| f == fid)
    }

    /// The other instances restarted lately, with when their previous process was last seen:
    /// its lease may have run until a session after that, and mirror writes it sent before then
    /// may land up to `settle` later. Listed while that may still happen.
    pub fn replaced_lately(&self, now: Instant, settle: Duration) -> Vec<(String, Instant)> {
        let mut v: Vec<(String, Instant)> = self
            .replaced
            .iter()
            .filter(|(_, seen)| now < **seen + self.session + settle)
            .map(|(i, seen)| (i.clone(), *seen))
            .collect();
        v.sort();
        v
    }

    /// The other instances gone lately that did not acknowledge failover `fid` of `mirror`: no
    /// longer alive at `now`, so no barrier waits for them, yet their lease ended only a moment
    /// before, and mirror writes they sent before it ended may land up to `settle` later.
    pub fn gone_lately(
        &self,
        mirror: &str,
        fid: &str,
        now: Instant,
        settle: Duration,
    ) -> Vec<(String, Instant)> {
        let acked = self.acknowledged(mirror, fid);
        let mut v: Vec<(String, Instant)> = self
            .seen
            .iter()
            .filter(|(_, seen)| {
                now >= **seen + self.session + MARGIN && now < **seen + self.session + settle
            })
            .filter(|(i, _)| !acked.contains(*i))
            .map(|(i, seen)| (i.clone(), *seen))
            .collect();
        v.sort();
        v
    }

    /// When this instance last read a heartbeat of `instance`.
    pub fn last_seen(&self, instance: &str) -> Option<Instant> {
        self.seen.get(instance).copied()
    }

    /// The instances that drove failover `fid` of `mirror` before this one and are gone (not
    /// alive at `now`) without having acknowledged that their own mirror writes were drained,
    /// each with when it was last seen: what they admitted may still land (review G1).
    pub fn undrained_drivers(
        &self,
        mirror: &str,
        fid: &str,
        now: Instant,
    ) -> Vec<(String, Instant)> {
        let alive: Vec<String> = self.alive(now).into_iter().map(|(i, _)| i).collect();
        self.drivers
            .get(&(mirror.to_string(), fid.to_string()))
            .into_iter()
            .flatten()
            .filter(|d| **d != self.me && !alive.contains(d))
            .filter(|d| {
                self.fenced
                    .get(&(mirror.to_string(), (*d).clone()))
                    .map(String::as_str)
                    != Some(fid)
            })
            .map(|d| (d.clone(), self.seen.get(d).copied().unwrap_or(now)))
            .collect()
    }

    /// Who acknowledged the fence of failover `fid` of `mirror`.
    pub fn acknowledged(&self, mirror: &str, fid: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .fenced
            .iter()
            .filter(|((m, _), f)| m == mirror && f.as_str() == fid)
            .map(|((_, i), _)| i.clone())
            .collect();
        v.sort();
        v
    }
}
