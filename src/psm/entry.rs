//! One producer's state in one partition (docs/psm.md, E1–E5): epoch, the last five batches in a
//! fixed ring, last timestamp, coordinator epoch and the open transaction's first offset.

use crate::protocol::batch::{decrement_sequence, NO_PRODUCER_EPOCH, NO_SEQUENCE};

/// Batches kept per producer (`ProducerStateEntry.NUM_BATCHES_TO_RETAIN`).
pub const NUM_BATCHES_TO_RETAIN: usize = 5;

/// What is remembered of one appended batch (E2, `BatchMetadata`). The first sequence and first
/// offset are derived, as the broker derives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchMetadata {
    pub last_seq: i32,
    /// `last_offset - first_offset` (= the batch's `last_offset_delta`).
    pub offset_delta: i32,
    pub last_offset: i64,
    /// The batch's max timestamp.
    pub timestamp: i64,
}

impl BatchMetadata {
    /// First sequence, wrapping below 0 back to `i32::MAX` (B11).
    #[inline]
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }

    #[inline]
    pub fn first_offset(&self) -> i64 {
        self.last_offset - i64::from(self.offset_delta)
    }
}

/// Per-producer state. 152 bytes, no heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub(crate) producer_id: i64,
    pub(crate) last_timestamp: i64,
    /// −1 = no open transaction (offsets are never negative).
    pub(crate) txn_first_offset: i64,
    pub(crate) coordinator_epoch: i32,
    pub(crate) epoch: i16,
    /// Index of the oldest batch in `batches`.
    pub(crate) head: u8,
    pub(crate) len: u8,
    pub(crate) batches: [BatchMetadata; NUM_BATCHES_TO_RETAIN],
}

impl ProducerEntry {
    /// The template for a producer with no state (E7): epoch −1, coordinator epoch −1,
    /// last timestamp −1, no transaction, no batches.
    pub fn empty(producer_id: i64) -> ProducerEntry {
        ProducerEntry {
            producer_id,
            last_timestamp: -1,
            txn_first_offset: -1,
            coordinator_epoch: -1,
            epoch: NO_PRODUCER_EPOCH,
            head: 0,
            len: 0,
            batches: [BatchMetadata::default(); NUM_BATCHES_TO_RETAIN],
        }
    }

    #[inline]
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    #[inline]
    pub fn epoch(&self) -> i16 {
        self.epoch
    }

    #[inline]
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    #[inline]
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }

    /// First offset of the open transaction, if any.
    #[inline]
    pub fn current_txn_first_offset(&self) -> Option<i64> {
        (self.txn_first_offset >= 0).then_some(self.txn_first_offset)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of cached batches (0..=5).
    #[inline]
    pub fn batch_count(&self) -> usize {
        self.len as usize
    }

    /// The `i`-th cached batch, oldest first.
    #[inline]
    pub fn batch(&self, i: usize) -> Option<&BatchMetadata> {
        if i < self.len as usize {
            Some(&self.batches[(self.head as usize + i) % NUM_BATCHES_TO_RETAIN])
        } else {
            None
        }
    }

    /// Cached batches, oldest first.
    pub fn batches(&self) -> impl ExactSizeIterator<Item = &BatchMetadata> + '_ {
        (0..self.len as usize)
            .map(move |i| &self.batches[(self.head as usize + i) % NUM_BATCHES_TO_RETAIN])
    }

    /// Last sequence of the newest cached batch, or −1 (E3).
    #[inline]
    pub fn last_seq(&self) -> i32 {
        match self.len {
            0 => NO_SEQUENCE,
            n => {
                self.batches[(self.head as usize + n as usize - 1) % NUM_BATCHES_TO_RETAIN].last_seq
            }
        }
    }

    /// First sequence of the oldest cached batch, or −1 (E3).
    pub fn first_seq(&self) -> i32 {
        self.batch(0).map_or(NO_SEQUENCE, BatchMetadata::first_seq)
    }

    /// Last offset of the newest cached batch, or −1 (E3).
    pub fn last_data_offset(&self) -> i64 {
        self.len
            .checked_sub(1)
            .and_then(|i| self.batch(i as usize))
            .map_or(-1, |b| b.last_offset)
    }

    /// Index (oldest = 0) of the cached batch with exactly this sequence range (D2).
    #[inline]
    pub fn find_batch(&self, first_seq: i32, last_seq: i32) -> Option<(usize, &BatchMetadata)> {
        for i in 0..self.len as usize {
            let b = &self.batches[(self.head as usize + i) % NUM_BATCHES_TO_RETAIN];
            if b.last_seq == last_seq && b.first_seq() == first_seq {
                return Some((i, b));
            }
        }
        None
    }

    /// E4/E5: a different epoch empties the ring and replaces the epoch.
    #[inline]
    pub(crate) fn maybe_update_epoch(&mut self, epoch: i16) -> bool {
        if self.epoch != epoch {
            self.epoch = epoch;
            self.head = 0;
            self.len = 0;
            true
        } else {
            false
        }
    }

    /// E4: add a batch, evicting the oldest when five are cached.
    #[inline]
    pub(crate) fn push_batch(&mut self, b: BatchMetadata) {
        let n = NUM_BATCHES_TO_RETAIN;
        if self.len as usize == n {
            self.batches[self.head as usize] = b;
            self.head = ((self.head as usize + 1) % n) as u8;
        } else {
            self.batches[(self.head as usize + self.len as usize) % n] = b;
            self.len += 1;
        }
    }

    /// Keeps only the newest cached batch: what a broker holds after loading its own snapshot
    /// (X7: one `BatchMetadata` per producer), e.g. after a broker restart (row 40).
    pub fn retain_last_batch(&mut self) {
        if self.len > 1 {
            let last =
                self.batches[(self.head as usize + self.len as usize - 1) % NUM_BATCHES_TO_RETAIN];
            self.batches[0] = last;
            self.head = 0;
            self.len = 1;
        }
    }
}
