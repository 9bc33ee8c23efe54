//! The producer state of one partition: classification of client batches and the updates the
//! broker makes on append, marker, replay, expiry and clear.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::protocol::batch::{increment_sequence, BatchHeader, NO_PRODUCER_EPOCH};

use super::entry::{BatchMetadata, ProducerEntry};
use super::verdict::{
    AppendContext, Appended, CompletedTxn, InvalidRecordReason, Marker, TxnStateReason, Verdict,
};

/// A fast hasher for producer ids: one 64×64→128 multiply folded to 64 bits.
#[derive(Default, Clone, Copy)]
pub struct PidHasher(u64);

impl Hasher for PidHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }

    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        let m = u128::from(i ^ self.0) * 0x9E37_79B9_7F4A_7C15_u128;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

type PidMap = HashMap<i64, u32, BuildHasherDefault<PidHasher>>;

/// `S4`: `next` follows `last`, computed without overflow, or wraps from `i32::MAX` to 0.
#[inline]
fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// A producer as DescribeProducers describes it (the fields markers change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerTxnState {
    pub epoch: i16,
    pub coordinator_epoch: i32,
    /// The open transaction's first offset, −1 for none.
    pub txn_start_offset: i64,
    pub last_timestamp: i64,
}

/// Per-partition producer state, keyed by producer id.
///
/// Storage: entries live in a dense `Vec` (grown by 25% at a time) and a `HashMap<i64, u32>`
/// maps producer id to slot, so the per-producer cost stays near `size_of::<ProducerEntry>()`
/// plus ~17–39 bytes of map (see [`PartitionPsm::memory_bytes`]).
#[derive(Debug, Clone, Default)]
pub struct PartitionPsm {
    entries: Vec<ProducerEntry>,
    index: PidMap,
}

impl PartitionPsm {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        PartitionPsm {
            entries: Vec::with_capacity(n),
            index: PidMap::with_capacity_and_hasher(n, Default::default()),
        }
    }

    /// Number of tracked producers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in no particular order.
    pub fn iter(&self) -> std::slice::Iter<'_, ProducerEntry> {
        self.entries.iter()
    }

    #[inline]
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.index
            .get(&producer_id)
            .map(|&i| &self.entries[i as usize])
    }

    /// Forgets every producer (X5, and the gateway's barrier); returns how many were tracked.
    pub fn clear(&mut self) -> usize {
        let n = self.entries.len();
        self.entries.clear();
        self.index.clear();
        n
    }

    /// Heap bytes held: the entry vector's capacity plus an estimate of the map's table
    /// (hashbrown: a power-of-two bucket count with a 7/8 load factor; each bucket holds one
    /// `(i64, u32)` slot and one control byte, plus 16 trailing control bytes).
    pub fn memory_bytes(&self) -> usize {
        let entries = self.entries.capacity() * std::mem::size_of::<ProducerEntry>();
        let cap = self.index.capacity();
        let buckets = if cap == 0 {
            0
        } else if cap < 8 {
            (cap + 1).next_power_of_two()
        } else {
            (cap * 8 / 7).next_power_of_two()
        };
        let table = if buckets == 0 {
            0
        } else {
            buckets * (std::mem::size_of::<(i64, u32)>() + 1) + 16
        };
        entries + table + std::mem::size_of::<Self>()
    }

    #[inline]
    fn slot_or_insert(&mut self, producer_id: i64) -> (usize, bool) {
        if let Some(&i) = self.index.get(&producer_id) {
            return (i as usize, false);
        }
        if self.entries.len() == self.entries.capacity() {
            self.entries.reserve_exact((self.entries.len() / 4).max(16));
        }
        let i = self.entries.len();
        self.entries.push(ProducerEntry::empty(producer_id));
        self.index.insert(producer_id, i as u32);
        (i, true)
    }

    pub(crate) fn insert_entry(&mut self, entry: ProducerEntry) -> bool {
        let (i, new) = self.slot_or_insert(entry.producer_id);
        self.entries[i] = entry;
        new
    }

    fn remove_at(&mut self, i: usize) {
        let pid = self.entries[i].producer_id;
        self.index.remove(&pid);
        self.entries.swap_remove(i);
        if let Some(moved) = self.entries.get(i) {
            self.index.insert(moved.producer_id, i as u32);
        }
    }

    /// The broker's decision for a client batch on the leader, with no verification context
    /// (see [`AppendContext::default`]). Does not change anything.
    #[inline]
    pub fn classify(&self, batch: &BatchHeader) -> Verdict {
        self.classify_with(batch, &AppendContext::default())
    }

    /// The broker's decision for a client-origin batch on the leader, in the broker's order
    /// (docs/psm.md: V7, V8, then V11), as of Kafka 4.1.1:
    ///
    /// 1. V7/V8 (rows 13–16): base offset ≠ 0, bad record count, control batch, producer id with
    ///    a negative base sequence → `InvalidRecord`.
    /// 2. E8 (row 1): no producer id → `NotIdempotent`.
    /// 3. D1/D2 (rows 7, 8, 9): same epoch and a cached batch with exactly this first and last
    ///    sequence → `Duplicate` (checked against the committed entry, before anything else).
    /// 4. T5 (`UnifiedLog.analyzeAndValidateProducerState`): a transactional batch without an
    ///    ongoing transaction for (pid, epoch): first, [4.1+] KAFKA-18042, an epoch below the
    ///    entry's → `InvalidProducerEpoch` (row 30); then, if verification is enabled and the
    ///    context holds no verification → `InvalidTxnState(NotPartOfOngoingTxn)`.
    /// 5. S1 (row 10): epoch below the entry's → `InvalidProducerEpoch`.
    /// 6. Sequence (`ProducerAppendInfo.checkSequence`):
    ///    - [4.1+] KAFKA-18202 (row 31): TV2 verification, entry without cached batches,
    ///      sequence ≠ 0 → 45;
    ///    - S6: verification, sequence above its lowest sequence → 45;
    ///    - S2 (rows 11, 12): new epoch on a known producer needs sequence 0; an unknown producer
    ///      (epoch −1) takes any sequence (S5, rows 2, 3; the [4.5] never-written rule of row 3a
    ///      is not in 4.1.1);
    ///    - S3/S4 (rows 4, 5, 6, 9): same epoch must continue the last sequence (wrapping
    ///      `i32::MAX` → 0); the committed entry with epoch −1 takes anything.
    /// 7. T2 (row 28): non-transactional batch while a transaction is open → `InvalidTxnState`.
    /// 8. `Accept { epoch_bump }`.
    pub fn classify_with(&self, batch: &BatchHeader, ctx: &AppendContext) -> Verdict {
        if batch.base_offset != 0 {
            return Verdict::InvalidRecord(InvalidRecordReason::NonZeroBaseOffset);
        }
        if batch.last_offset_delta < 0
            || batch.record_count <= 0
            || i64::from(batch.last_offset_delta) + 1 != i64::from(batch.record_count)
        {
            return Verdict::InvalidRecord(InvalidRecordReason::BadRecordCount);
        }
        if batch.is_control() {
            return Verdict::InvalidRecord(InvalidRecordReason::ControlBatch);
        }
        if !batch.has_producer_id() {
            return Verdict::NotIdempotent;
        }
        if batch.base_sequence < 0 {
            return Verdict::InvalidRecord(InvalidRecordReason::MissingSequence);
        }
        self.check_data(batch, ctx)
    }

    #[inline]
    fn check_data(&self, batch: &BatchHeader, ctx: &AppendContext) -> Verdict {
        let entry = self.get(batch.producer_id);
        let epoch = batch.producer_epoch;
        let base_seq = batch.base_sequence;

        // D1/D2.
        if let Some(e) = entry {
            if e.epoch == epoch {
                if let Some((i, b)) = e.find_batch(base_seq, batch.last_sequence()) {
                    return Verdict::Duplicate {
                        first_offset: b.first_offset(),
                        last_offset: b.last_offset,
                        cached_index: i,
                        timestamp: b.timestamp,
                    };
                }
            }
        }

        let (entry_epoch, entry_empty, entry_last_seq, txn_open) = match entry {
            Some(e) => (e.epoch, e.is_empty(), e.last_seq(), e.txn_first_offset >= 0),
            None => (NO_PRODUCER_EPOCH, true, -1, false),
        };

        // T5, with the [4.1+] stale-epoch check first.
        if batch.is_transactional() && !(txn_open && entry_epoch == epoch) {
            if entry.is_some() && epoch < entry_epoch {
                return Verdict::InvalidProducerEpoch {
                    current: entry_epoch,
                    got: epoch,
                };
            }
            if ctx.verification_enabled && ctx.verification.is_none() {
                return Verdict::InvalidTxnState(TxnStateReason::NotPartOfOngoingTxn);
            }
        }

        // S1.
        if epoch < entry_epoch {
            return Verdict::InvalidProducerEpoch {
                current: entry_epoch,
                got: epoch,
            };
        }

        // Sequence checks.
        if let Some(v) = ctx.verification {
            if v.supports_epoch_bump && base_seq != 0 && entry_empty {
                return Verdict::OutOfOrderSequence {
                    expected: 0,
                    got: base_seq,
                };
            }
            if base_seq > v.lowest_sequence {
                return Verdict::OutOfOrderSequence {
                    expected: v.lowest_sequence,
                    got: base_seq,
                };
            }
        }
        if epoch != entry_epoch {
            if base_seq != 0 && entry_epoch != NO_PRODUCER_EPOCH {
                return Verdict::OutOfOrderSequence {
                    expected: 0,
                    got: base_seq,
                };
            }
        } else if entry_epoch != NO_PRODUCER_EPOCH && !in_sequence(entry_last_seq, base_seq) {
            return Verdict::OutOfOrderSequence {
                expected: increment_sequence(entry_last_seq, 1),
                got: base_seq,
            };
        }

        // T2.
        if txn_open && !batch.is_transactional() {
            return Verdict::InvalidTxnState(TxnStateReason::NonTransactionalInOpenTxn);
        }

        Verdict::Accept {
            epoch_bump: entry_epoch != NO_PRODUCER_EPOCH && epoch != entry_epoch,
        }
    }

    /// The broker appended `batch` (client origin) at `first_offset`: validates it as
    /// [`classify`](Self::classify) does and, when accepted, updates the producer as the broker
    /// does (E4, T1). A rejected or duplicate batch changes nothing and is returned as `Err`.
    #[inline]
    pub fn append(&mut self, batch: &BatchHeader, first_offset: i64) -> Result<Appended, Verdict> {
        self.append_with(batch, first_offset, &AppendContext::default())
    }

    /// [`append`](Self::append) with a verification context.
    pub fn append_with(
        &mut self,
        batch: &BatchHeader,
        first_offset: i64,
        ctx: &AppendContext,
    ) -> Result<Appended, Verdict> {
        match self.classify_with(batch, ctx) {
            Verdict::Accept { .. } => Ok(self.apply_data(batch, first_offset)),
            Verdict::NotIdempotent => Ok(Appended {
                first_offset,
                last_offset: first_offset + i64::from(batch.last_offset_delta),
                epoch_bump: false,
                new_producer: false,
                started_txn: false,
                untracked: true,
            }),
            other => Err(other),
        }
    }

    /// Rebuild path (origin REPLICATION: follower fetch, log recovery): applies a data batch read
    /// from the log at `first_offset` without duplicate, epoch or sequence validation. A lower
    /// epoch is applied as the broker applies it (it only logs it). Control batches go through
    /// [`replay_control`](Self::replay_control). Returns `None` for batches without producer id
    /// or control batches.
    pub fn replay(&mut self, batch: &BatchHeader, first_offset: i64) -> Option<Appended> {
        if !batch.has_producer_id() || batch.is_control() {
            return None;
        }
        Some(self.apply_data(batch, first_offset))
    }

    #[inline]
    fn apply_data(&mut self, batch: &BatchHeader, first_offset: i64) -> Appended {
        let (i, new_producer) = self.slot_or_insert(batch.producer_id);
        let e = &mut self.entries[i];
        let previous = e.epoch;
        let epoch_bump =
            e.maybe_update_epoch(batch.producer_epoch) && previous != NO_PRODUCER_EPOCH;
        let last_offset = first_offset + i64::from(batch.last_offset_delta);
        e.push_batch(BatchMetadata {
            last_seq: batch.last_sequence(),
            offset_delta: batch.last_offset_delta,
            last_offset,
            timestamp: batch.max_timestamp,
        });
        e.last_timestamp = batch.max_timestamp;
        let started_txn = batch.is_transactional() && e.txn_first_offset < 0;
        if started_txn {
            e.txn_first_offset = first_offset;
        }
        Appended {
            first_offset,
            last_offset,
            epoch_bump,
            new_producer,
            started_txn,
            untracked: false,
        }
    }

    /// A transaction marker appended at `offset` by the coordinator (WriteTxnMarkers, origin
    /// COORDINATOR), Kafka 4.1.1 rules:
    /// - M2 (row 35): marker epoch below the producer's → `InvalidProducerEpoch`. The TV2
    ///   "strictly greater" rule and its same-epoch retry exception (row 36) are [4.2+]
    ///   (KIP-1228, KAFKA-19999) and not applied.
    /// - M3 (row 37): coordinator epoch below the producer's → `CoordinatorFenced`.
    /// - M4/E5: closes the open transaction (returned as [`CompletedTxn`]), sets the coordinator
    ///   epoch and last timestamp; a changed epoch empties the cached batches (TV2 bump, row 32),
    ///   the same epoch keeps them (TV1, row 34). An unknown producer gets an entry.
    pub fn apply_control(
        &mut self,
        producer_id: i64,
        epoch: i16,
        marker: Marker,
        coordinator_epoch: i32,
        offset: i64,
        timestamp: i64,
    ) -> Result<Option<CompletedTxn>, Verdict> {
        if let Some(e) = self.get(producer_id) {
            if epoch < e.epoch {
                return Err(Verdict::InvalidProducerEpoch {
                    current: e.epoch,
                    got: epoch,
                });
            }
            if coordinator_epoch < e.coordinator_epoch {
                return Err(Verdict::CoordinatorFenced {
                    current: e.coordinator_epoch,
                    got: coordinator_epoch,
                });
            }
        }
        Ok(self.replay_control(
            producer_id,
            epoch,
            marker,
            coordinator_epoch,
            offset,
            timestamp,
        ))
    }

    /// A marker read from the log (origin REPLICATION): applied without epoch checks.
    pub fn replay_control(
        &mut self,
        producer_id: i64,
        epoch: i16,
        marker: Marker,
        coordinator_epoch: i32,
        offset: i64,
        timestamp: i64,
    ) -> Option<CompletedTxn> {
        let (i, _) = self.slot_or_insert(producer_id);
        let e = &mut self.entries[i];
        let completed = e
            .current_txn_first_offset()
            .map(|first_offset| CompletedTxn {
                producer_id,
                first_offset,
                last_offset: offset,
                aborted: marker == Marker::Abort,
            });
        e.maybe_update_epoch(epoch);
        e.coordinator_epoch = coordinator_epoch;
        e.txn_first_offset = -1;
        e.last_timestamp = timestamp;
        completed
    }

    /// Review F11f: the broker's word on a producer whose transaction this state holds open.
    /// Markers are written by the transaction coordinator straight to the leader, so the
    /// gateway never sees them pass; DescribeProducers says what they did. Applied only when
    /// the entry is as it was when the broker was asked (`seen_txn_first`, `seen_last_offset`:
    /// no batch arrived since) and the broker's transaction differs: it then takes the broker's
    /// open transaction (−1: none), epoch (a changed one empties the cached batches, as the
    /// broker does), coordinator epoch and last timestamp. Returns whether it changed anything.
    pub fn settle_transaction(
        &mut self,
        producer_id: i64,
        seen_txn_first: i64,
        seen_last_offset: i64,
        broker: BrokerTxnState,
    ) -> bool {
        let Some(&i) = self.index.get(&producer_id) else {
            return false;
        };
        let e = &mut self.entries[i as usize];
        if e.txn_first_offset != seen_txn_first
            || e.last_data_offset() != seen_last_offset
            || broker.txn_start_offset == seen_txn_first
            || broker.epoch < e.epoch
        {
            return false;
        }
        e.maybe_update_epoch(broker.epoch);
        e.txn_first_offset = broker.txn_start_offset.max(-1);
        e.coordinator_epoch = e.coordinator_epoch.max(broker.coordinator_epoch);
        e.last_timestamp = e.last_timestamp.max(broker.last_timestamp);
        true
    }

    /// X2: removes every producer without an open transaction whose last timestamp is at least
    /// `producer_id_expiration_ms` before `now_ms`. Returns how many were removed.
    pub fn expire(&mut self, now_ms: i64, producer_id_expiration_ms: i64) -> usize {
        let before = self.entries.len();
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if e.txn_first_offset < 0
                && now_ms.saturating_sub(e.last_timestamp) >= producer_id_expiration_ms
            {
                self.remove_at(i);
            } else {
                i += 1;
            }
        }
        before - self.entries.len()
    }

    /// Adds the producers of `previous` this state does not have whose last batch lies before
    /// `removed_below` and not before `cleared_below` (the partition's barrier, −1 without):
    /// their batches left the log (retention, DeleteRecords) after `previous` saw them, and the
    /// broker keeps such producers until they expire (review F11e), so a state rebuilt from what
    /// is still in the log must keep them too. Returns how many were kept.
    pub fn keep_removed_producers(
        &mut self,
        previous: &PartitionPsm,
        removed_below: i64,
        cleared_below: i64,
    ) -> usize {
        let mut kept = 0;
        for e in previous.iter() {
            let last = e.last_data_offset();
            if last < removed_below && last >= cleared_below && self.get(e.producer_id).is_none() {
                self.insert_entry(e.clone());
                kept += 1;
            }
        }
        kept
    }

    /// Keeps only the newest cached batch of every producer: the broker's state right after it
    /// loaded its own snapshot (X7, D6), e.g. after a broker restart (row 40).
    pub fn retain_last_batches(&mut self) {
        for e in &mut self.entries {
            e.retain_last_batch();
        }
    }
}
