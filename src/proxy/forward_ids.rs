//! The producer ids the source handed out through a forward listener (its InitProducerId
//! answers), kept across restarts: a switchover after a restart of the gateway still lets them
//! go on with their sessions.
//!
//! Each id keeps when it was last noted. Ids restored from the state directory are told apart
//! from those noted by this process: the ledger of acknowledgements
//! ([`crate::mirror::forwarded_acks`]) lives in memory, so only an id noted since this process
//! started has all its acknowledgements in it, which the exemption after an unplanned failover
//! needs. A process that stops cleanly hands its ledger and the ids it noted to the next one
//! ([`ForwardedIds::take_over`]): those count as noted there. An id not noted for [`FORWARDED_ID_TTL_MS`] is dropped: the brokers have expired its
//! state long before (`producer.id.expiration.ms` is a day by default).
//!
//! Owns: the set, its expiry and its encoding. Must not touch: the state directory (the caller
//! reads and writes the bytes), the route's side.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// How long an id is kept after it was last noted: a week.
pub const FORWARDED_ID_TTL_MS: i64 = 7 * 24 * 3600 * 1000;

/// The set (see the module doc).
#[derive(Debug, Default)]
pub struct ForwardedIds {
    /// Producer id → when it was last noted (ms since the epoch).
    ids: HashMap<i64, i64>,
    /// The ids noted by this process.
    here: HashSet<i64>,
    /// The highest epoch seen of each id, in memory (its InitProducerId answer, its batches).
    epochs: HashMap<i64, i16>,
    /// Changed since the last [`ForwardedIds::take_changed`].
    changed: bool,
}

/// The persisted form.
#[derive(Debug, Serialize, Deserialize)]
struct Persisted {
    version: u32,
    /// `[producer id, last noted ms]`.
    producers: Vec<(i64, i64)>,
}

/// The persisted set could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the forwarded producer ids are not readable: {0}")]
pub struct DecodeError(String);

impl ForwardedIds {
    /// `producer_id` was handed out through the listener at `now_ms`, at `epoch`.
    pub fn note(&mut self, producer_id: i64, epoch: i16, now_ms: i64) {
        if producer_id < 0 {
            return;
        }
        self.ids.insert(producer_id, now_ms);
        self.here.insert(producer_id);
        self.note_epoch(producer_id, epoch);
        self.changed = true;
    }

    /// A batch of `producer_id` at `epoch` passed the listener (an id it does not hold is left
    /// alone).
    pub fn note_epoch(&mut self, producer_id: i64, epoch: i16) {
        if self.ids.contains_key(&producer_id) {
            let e = self.epochs.entry(producer_id).or_insert(epoch);
            *e = (*e).max(epoch);
        }
    }

    /// Every id with the highest epoch seen of it (0 when none was seen: restored, not used
    /// since).
    pub fn with_epochs(&self) -> Vec<(i64, i16)> {
        let mut out: Vec<(i64, i16)> = self
            .ids
            .keys()
            .map(|id| (*id, self.epochs.get(id).copied().unwrap_or(0)))
            .collect();
        out.sort_unstable();
        out
    }

    /// Whether the source handed `producer_id` out through the listener (this process or one
    /// before it).
    pub fn contains(&self, producer_id: i64) -> bool {
        self.ids.contains_key(&producer_id)
    }

    /// Whether this process noted `producer_id`.
    pub fn noted_here(&self, producer_id: i64) -> bool {
        self.here.contains(&producer_id)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The ids this process noted: (id, when last noted, highest epoch seen). What a gateway
    /// that stops cleanly hands to the next one with its ledger (see
    /// `crate::proxy::forward`, the handover).
    pub fn noted_here_entries(&self) -> Vec<(i64, i64, i16)> {
        let mut out: Vec<(i64, i64, i16)> = self
            .here
            .iter()
            .filter_map(|id| {
                let at = *self.ids.get(id)?;
                Some((*id, at, self.epochs.get(id).copied().unwrap_or(0)))
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Take over ids an earlier process noted and handed over with every acknowledgement of
    /// theirs it had not seen mirrored: they count as noted here. Expired ones are left out;
    /// how many were taken over.
    pub fn take_over(&mut self, entries: &[(i64, i64, i16)], now_ms: i64) -> usize {
        let mut n = 0;
        for &(id, at, epoch) in entries {
            if !self.merge_live(id, at, now_ms) {
                continue;
            }
            self.here.insert(id);
            self.note_epoch(id, epoch);
            self.changed = true;
            n += 1;
        }
        n
    }

    /// Merge the ids a previous process persisted (`bytes`), dropping the expired ones.
    pub fn restore(&mut self, bytes: &[u8], now_ms: i64) -> Result<usize, DecodeError> {
        let p: Persisted = serde_json::from_slice(bytes).map_err(|e| DecodeError(e.to_string()))?;
        if p.version != 1 {
            return Err(DecodeError(format!("unknown version {}", p.version)));
        }
        let before = self.ids.len();
        for (id, at) in p.producers {
            self.merge_live(id, at, now_ms);
        }
        Ok(self.ids.len() - before)
    }

    /// Note `id`, last handed out at `at`, unless it is not an id or has expired by `now_ms`
    /// (the later of two times kept); whether it was noted.
    fn merge_live(&mut self, id: i64, at: i64, now_ms: i64) -> bool {
        if id < 0 || now_ms - at >= FORWARDED_ID_TTL_MS {
            return false;
        }
        let e = self.ids.entry(id).or_insert(at);
        *e = (*e).max(at);
        true
    }

    /// Hands the set to `write` when it changed since the last write that succeeded (expired
    /// ids dropped): `Ok(true)` written, `Ok(false)` nothing to write. A write that fails
    /// leaves the set to write at the next call.
    pub fn persist<E>(
        &mut self,
        now_ms: i64,
        write: impl FnOnce(&[u8]) -> Result<(), E>,
    ) -> Result<bool, E> {
        let Some(bytes) = self.take_changed(now_ms) else {
            return Ok(false);
        };
        write(&bytes).inspect_err(|_| self.changed = true)?;
        Ok(true)
    }

    /// The bytes to persist when the set changed since the last call (expired ids dropped).
    fn take_changed(&mut self, now_ms: i64) -> Option<Vec<u8>> {
        if !std::mem::take(&mut self.changed) {
            return None;
        }
        self.ids.retain(|_, at| now_ms - *at < FORWARDED_ID_TTL_MS);
        let ids = &self.ids;
        self.here.retain(|id| ids.contains_key(id));
        self.epochs.retain(|id, _| ids.contains_key(id));
        let mut producers: Vec<(i64, i64)> = self.ids.iter().map(|(k, v)| (*k, *v)).collect();
        producers.sort_unstable();
        serde_json::to_vec(&Persisted {
            version: 1,
            producers,
        })
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noted_ids_are_persisted_once_and_restored_as_not_noted_here() {
        let mut a = ForwardedIds::default();
        a.note(7, 0, 1_000);
        a.note(-1, 0, 1_000);
        let bytes = a.take_changed(2_000).expect("changed");
        assert!(a.take_changed(2_000).is_none(), "nothing changed since");
        let mut b = ForwardedIds::default();
        assert_eq!(b.restore(&bytes, 3_000).expect("readable"), 1);
        assert!(b.contains(7));
        assert!(!b.noted_here(7), "restored, not noted by this process");
        b.note(7, 0, 4_000);
        assert!(b.noted_here(7));
    }

    #[test]
    fn ids_handed_over_by_a_clean_stop_count_as_noted_here_with_their_epochs() {
        let mut a = ForwardedIds::default();
        a.note(7, 0, 1_000);
        a.note_epoch(7, 2);
        a.note(8, 0, 0);
        let bytes = a.take_changed(1_500).expect("changed");
        let mut restored = ForwardedIds::default();
        restored.restore(&bytes, 1_600).expect("readable");
        restored.note(9, 0, 1_700);
        // The second process hands over only what it noted itself.
        assert_eq!(restored.noted_here_entries(), vec![(9, 1_700, 0)]);
        let mut b = ForwardedIds::default();
        let handed = a.noted_here_entries();
        assert_eq!(handed, vec![(7, 1_000, 2), (8, 0, 0)]);
        assert_eq!(b.take_over(&handed, FORWARDED_ID_TTL_MS), 1, "8 expired");
        assert!(b.noted_here(7) && !b.contains(8));
        assert_eq!(b.with_epochs(), vec![(7, 2)]);
    }

    #[test]
    fn an_id_not_noted_for_a_week_is_dropped() {
        let mut a = ForwardedIds::default();
        a.note(7, 0, 0);
        a.note(8, 0, FORWARDED_ID_TTL_MS);
        let bytes = a.take_changed(FORWARDED_ID_TTL_MS + 1).expect("changed");
        assert!(!a.contains(7));
        let mut b = ForwardedIds::default();
        b.restore(&bytes, FORWARDED_ID_TTL_MS + 2)
            .expect("readable");
        assert!(b.contains(8) && !b.contains(7));
    }

    #[test]
    fn each_id_keeps_the_highest_epoch_its_batches_used_and_unknown_ids_none() {
        let mut a = ForwardedIds::default();
        a.note(7, 0, 1_000);
        a.note_epoch(7, 3);
        a.note_epoch(7, 1);
        a.note_epoch(9, 5);
        let bytes = a.take_changed(2_000).expect("changed");
        assert_eq!(a.with_epochs(), vec![(7, 3)]);
        let mut b = ForwardedIds::default();
        b.restore(&bytes, 3_000).expect("readable");
        assert_eq!(
            b.with_epochs(),
            vec![(7, 0)],
            "restored: epoch not known, 0"
        );
    }

    #[test]
    fn a_set_whose_write_failed_is_written_at_the_next_call() {
        let mut a = ForwardedIds::default();
        a.note(7, 0, 1_000);
        let failed: Result<bool, &str> = a.persist(2_000, |_| Err("disk full"));
        assert_eq!(failed, Err("disk full"));
        let mut written = Vec::new();
        let again: Result<bool, &str> = a.persist(3_000, |b| {
            written = b.to_vec();
            Ok(())
        });
        assert_eq!(again, Ok(true), "the failed write is tried again");
        let mut b = ForwardedIds::default();
        b.restore(&written, 4_000).expect("readable");
        assert!(b.contains(7));
        assert_eq!(a.persist(5_000, |_| Ok::<(), &str>(())), Ok(false));
    }

    #[test]
    fn an_unreadable_file_is_an_error_not_an_empty_set() {
        let mut b = ForwardedIds::default();
        assert!(b.restore(b"{not json", 0).is_err());
        assert!(b.restore(br#"{"version":9,"producers":[]}"#, 0).is_err());
    }
}
