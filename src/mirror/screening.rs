//! The PID screening set: the producer ids mirrored traffic left in the destination brokers'
//! state (`screen/pids.json`), until the brokers have certainly expired them.
//!
//! The set has one writer at a time: every change is serialised and written while the set's lock
//! is held, so a file never holds an older set than a write that finished after it (review F10).
//! A failover makes the entries of its partitions durable *before* it records BARRIER_PERSISTED
//! (review F8): after that record a restart rebuilds the PSM only from the barrier on, so the
//! entries could not be found again. A set that cannot be read is never started empty nor
//! rewritten: the gateway is not ready and the mirror topics stay read-only on the client
//! listener until the operator recovers it (docs/failover.md#recovering-the-pid-screening-set).
//!
//! Owns: `screen/pids.json` in the state store, [`ScreenEntry`] and its expiry rule, the rules
//! by which a local write collides with a screened producer id ([`Collision`]). Must not touch:
//! the PSM's contents (callers hand in the producers they found), mirror records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::psm::registry::PsmRegistry;
use crate::state::{StateError, StateStore};

/// State-store area of the PID screening set.
pub const SCREEN_AREA: &str = "screen";
pub(crate) const SCREEN_FILE: &str = "pids.json";

pub(crate) fn now_ms() -> i64 {
    #[cfg(test)]
    if let Some(ms) = sim_clock::now_ms() {
        return ms;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The wall clock of a simulation (unit tests only): while set on this thread, [`now_ms`] answers
/// it instead of the system clock, so a simulated run is the same on every machine.
#[cfg(test)]
pub(crate) mod sim_clock {
    use std::cell::Cell;

    thread_local! {
        static NOW_MS: Cell<Option<i64>> = const { Cell::new(None) };
    }

    pub(crate) fn now_ms() -> Option<i64> {
        NOW_MS.with(Cell::get)
    }

    /// Set (or, with `None`, clear) this thread's simulated wall clock.
    pub(crate) fn set(ms: Option<i64>) {
        NOW_MS.with(|c| c.set(ms));
    }
}

/// A producer id that mirrored traffic left in the destination brokers' state.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScreenEntry {
    pub max_epoch: i16,
    pub last_timestamp: i64,
    /// When the gateway last added or refreshed this entry (ms; 0 in files of older versions):
    /// a broker keeps a producer id until its first expiry check after the append, even when
    /// the record's timestamp is old (review F11b).
    #[serde(default)]
    pub added_ms: i64,
    /// The highest transaction coordinator epoch the mirrored transaction markers of this
    /// producer id left in the brokers' producer state ([`NO_COORDINATOR_EPOCH`]: none, or
    /// unknown in files and handovers of older versions, where the field is absent; it is not
    /// written then either). A broker refuses a marker with a lower coordinator epoch for the
    /// id (review G11).
    #[serde(
        default = "no_coordinator_epoch",
        skip_serializing_if = "is_no_coordinator_epoch"
    )]
    pub coordinator_epoch: i32,
}

/// How a local write with a screened producer id collides with what mirrored traffic left in
/// the brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collision {
    /// Its epoch is not above the mirrored one (review F12): the broker would take its batch
    /// for a duplicate or out of order.
    Epoch(ScreenEntry),
    /// A transaction of a transactional id whose coordinator's epoch (`local`, as last read from
    /// the destination's metadata; `None`: unknown) is below the coordinator epoch mirrored
    /// markers left for the producer id (review G11): its markers would be refused and the
    /// transaction hang.
    Coordinator {
        entry: ScreenEntry,
        local: Option<i32>,
    },
}

impl Collision {
    /// The collision with screened `entry`, if any, of a data batch at `epoch` (`None`: not a
    /// data batch, e.g. a partition added to a transaction, which the epoch rule does not
    /// concern), of a transaction when `coordinator` is `Some` (its coordinator's epoch, if
    /// known). A coordinator epoch of 0 or less is never above a coordinator's.
    pub fn of(
        entry: ScreenEntry,
        epoch: Option<i16>,
        coordinator: Option<Option<i32>>,
    ) -> Option<Self> {
        match coordinator {
            Some(local)
                if entry.coordinator_epoch > 0
                    && local.is_none_or(|l| l < entry.coordinator_epoch) =>
            {
                Some(Collision::Coordinator { entry, local })
            }
            _ if epoch.is_some_and(|e| e <= entry.max_epoch) => Some(Collision::Epoch(entry)),
            _ => None,
        }
    }

    pub fn entry(&self) -> ScreenEntry {
        match self {
            Collision::Epoch(e) | Collision::Coordinator { entry: e, .. } => *e,
        }
    }
}

/// [`ScreenEntry::coordinator_epoch`] of a producer id no mirrored marker named.
pub const NO_COORDINATOR_EPOCH: i32 = -1;

fn no_coordinator_epoch() -> i32 {
    NO_COORDINATOR_EPOCH
}

fn is_no_coordinator_epoch(e: &i32) -> bool {
    *e == NO_COORDINATOR_EPOCH
}

impl ScreenEntry {
    /// Until when the brokers may still hold this producer id (ms): the later of its last
    /// timestamp plus `expiration_ms` and the time it was added, plus one expiry check
    /// interval.
    pub fn protected_until(&self, expiration_ms: i64, check_interval_ms: i64) -> i64 {
        self.last_timestamp
            .saturating_add(expiration_ms)
            .max(self.added_ms)
            .saturating_add(check_interval_ms)
    }
}

/// Why the PID screening set cannot be changed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScreenError {
    /// The file could not be read or decoded at start: it is left as it is for the operator.
    #[error(
        "the PID screening set {path} cannot be read ({reason}); mirror topics stay read-only on the \
         client listener; recovery: docs/failover.md#recovering-the-pid-screening-set"
    )]
    Unreadable { path: String, reason: String },
    #[error("cannot persist the PID screening set: {0}")]
    Persist(String),
}

impl From<StateError> for ScreenError {
    fn from(e: StateError) -> Self {
        ScreenError::Persist(e.to_string())
    }
}

/// The screening set, in memory and in the state store.
pub struct Screening {
    /// The set. Its lock is held across serialising and writing the file.
    set: Mutex<HashMap<i64, ScreenEntry>>,
    /// Set when `screen/pids.json` could not be read at start (fail closed, never rewritten).
    unreadable: Option<ScreenError>,
    store: StateStore,
    /// Where the brokers' expiry settings come from (none: entries never expire).
    psm: Option<Arc<PsmRegistry>>,
    /// `psm.clock_skew_margin_ms` (review F11d).
    clock_skew_margin_ms: i64,
}

impl Screening {
    /// Read the set from `store` (`store_unusable`: the store as a whole cannot be read, which
    /// already makes every mirror read-only: the set starts empty and is not reported).
    pub fn load(
        store: StateStore,
        store_unusable: bool,
        psm: Option<Arc<PsmRegistry>>,
        clock_skew_margin_ms: i64,
    ) -> Screening {
        let (set, unreadable) = if store_unusable {
            (HashMap::new(), None)
        } else {
            load_file(&store)
        };
        if let Some(e) = &unreadable {
            tracing::error!(error = %e, "PID screening set unreadable: not ready, mirror topics read-only on the client listener");
        }
        Screening {
            set: Mutex::new(set),
            unreadable,
            store,
            psm,
            clock_skew_margin_ms,
        }
    }

    /// Why the set could not be read at start, if it could not.
    pub fn unreadable(&self) -> Option<&ScreenError> {
        self.unreadable.as_ref()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<i64, ScreenEntry>> {
        self.set.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The screening entry of a producer id, if mirrored traffic left it in the brokers and it
    /// has not certainly expired there.
    pub fn screened(&self, producer_id: i64) -> Option<ScreenEntry> {
        let e = self.lock().get(&producer_id).copied()?;
        let (expiration, interval) = self.expiry_settings();
        (now_ms() <= e.protected_until(expiration, interval)).then_some(e)
    }

    /// Whether any producer id is screened.
    pub fn is_active(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The screened producer ids.
    pub fn ids(&self) -> Vec<i64> {
        self.lock().keys().copied().collect()
    }

    /// Drop entries the brokers have certainly expired.
    pub fn expire(&self) {
        if self.unreadable.is_some() {
            return;
        }
        let (expiration, interval) = self.expiry_settings();
        let now = now_ms();
        let mut s = self.lock();
        let before = s.len();
        s.retain(|_, e| now <= e.protected_until(expiration, interval));
        if s.len() != before {
            // The file keeps the expired entries until a write succeeds: screening more is safe.
            if let Err(e) = self.persist_locked(&s) {
                tracing::warn!(error = %e, "cannot persist the expired PID screening entries; retried");
            }
        }
    }

    /// The brokers' `producer.id.expiration.ms` and expiry check interval as the PSM knows them,
    /// the interval widened by `psm.clock_skew_margin_ms`: the brokers expire by their clock,
    /// the gateway compares with its own (review F11d). Without a PSM: unbounded.
    fn expiry_settings(&self) -> (i64, i64) {
        self.psm
            .as_ref()
            .map(|p| {
                (
                    p.expiration_ms(),
                    p.check_interval_ms()
                        .saturating_add(self.clock_skew_margin_ms),
                )
            })
            .unwrap_or((i64::MAX / 4, 0))
    }

    /// Until when producers of failed-over topics must stay behind the gateway (ms since the
    /// epoch): the latest time any screened (mirrored) producer id can still be live in the
    /// brokers. `None` while nothing is screened. With an unreadable set: unknown, reported as
    /// `Some(i64::MAX)`.
    pub fn protection_needed_until_ms(&self) -> Option<i64> {
        if self.unreadable.is_some() {
            return Some(i64::MAX);
        }
        let (expiration, interval) = self.expiry_settings();
        self.lock()
            .values()
            .map(|e| e.protected_until(expiration, interval))
            .max()
    }

    /// Merge producers into the set in memory (made durable by the next [`Self::persist`]).
    pub fn merge(&self, found: Vec<(i64, ScreenEntry)>) {
        merge(&mut self.lock(), found);
    }

    /// Merge producers into the set and persist it. Idempotent.
    pub fn merge_and_persist(&self, found: Vec<(i64, ScreenEntry)>) -> Result<(), ScreenError> {
        let mut s = self.lock();
        merge(&mut s, found);
        self.persist_locked(&s)
    }

    /// Write the set as it is in memory.
    pub fn persist(&self) -> Result<(), ScreenError> {
        self.persist_locked(&self.lock())
    }

    /// Write the set `s`. The caller holds the set's lock across this call, so writes land in
    /// the order of the changes (one writer at a time). Refused when the set could not be read
    /// at start: rewriting it would drop the entries it held.
    fn persist_locked(&self, s: &HashMap<i64, ScreenEntry>) -> Result<(), ScreenError> {
        if let Some(e) = &self.unreadable {
            return Err(e.clone());
        }
        let bytes = serde_json::to_vec(s).map_err(|e| ScreenError::Persist(e.to_string()))?;
        self.store.write(SCREEN_AREA, SCREEN_FILE, &bytes)?;
        Ok(())
    }
}

/// Read `screen/pids.json`: the set, or why it cannot be read (a missing file is an empty set).
fn load_file(store: &StateStore) -> (HashMap<i64, ScreenEntry>, Option<ScreenError>) {
    let path = store.root().join(SCREEN_AREA).join(SCREEN_FILE);
    let unreadable = |reason: String| ScreenError::Unreadable {
        path: path.display().to_string(),
        reason,
    };
    match store.read(SCREEN_AREA, SCREEN_FILE) {
        Ok(None) => (HashMap::new(), None),
        Ok(Some(b)) => match serde_json::from_slice(&b) {
            Ok(s) => (s, None),
            Err(e) => (HashMap::new(), Some(unreadable(format!("corrupt: {e}")))),
        },
        Err(e) => (HashMap::new(), Some(unreadable(e.to_string()))),
    }
}

/// Merge producers into a set, keeping the highest epoch, coordinator epoch and latest
/// timestamp.
fn merge(screen: &mut HashMap<i64, ScreenEntry>, found: Vec<(i64, ScreenEntry)>) {
    let now = now_ms();
    for (pid, e) in found {
        let entry = screen.entry(pid).or_insert(e);
        entry.max_epoch = entry.max_epoch.max(e.max_epoch);
        entry.last_timestamp = entry.last_timestamp.max(e.last_timestamp);
        entry.added_ms = entry.added_ms.max(e.added_ms).max(now);
        entry.coordinator_epoch = entry.coordinator_epoch.max(e.coordinator_epoch);
    }
}
