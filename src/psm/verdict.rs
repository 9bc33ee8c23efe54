//! What the PSM decides about a batch or marker, and what an append reports.

/// Kafka error codes the verdicts map to.
pub mod codes {
    pub const NONE: i16 = 0;
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const INVALID_TXN_STATE: i16 = 48;
    pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
    pub const INVALID_RECORD: i16 = 87;
}

/// Why a client batch is an INVALID_RECORD before it reaches the producer state (V7, V8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidRecordReason {
    /// V7: a client v2 batch must carry base offset 0 (row 13).
    NonZeroBaseOffset,
    /// V8: `last_offset_delta + 1 <= 0`, `record_count <= 0`, or the two disagree (row 16).
    BadRecordCount,
    /// V8/M1: clients may not write control batches (row 14).
    ControlBatch,
    /// V8: producer id >= 0 with base sequence < 0 (row 15).
    MissingSequence,
}

/// Why a batch is INVALID_TXN_STATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStateReason {
    /// T2: a non-transactional batch while the producer has an open transaction (row 28).
    NonTransactionalInOpenTxn,
    /// T5: a transactional batch with no ongoing transaction for (pid, epoch) and no matching
    /// verification, while verification is enabled.
    NotPartOfOngoingTxn,
}

/// The broker's decision for one batch (or marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Appended and tracked. `epoch_bump`: the producer was known with a lower epoch, so its
    /// cached batches are dropped (S2/E4).
    Accept { epoch_bump: bool },
    /// No producer id (row 1): appended, producer state untouched.
    NotIdempotent,
    /// D1–D3: an exact retry of a cached batch. Not appended; the broker answers NONE with the
    /// cached batch's offsets, and LogAppendTimeMs = the cached batch's `timestamp`.
    /// `cached_index` counts from the oldest cached batch (0) to the newest (4).
    Duplicate {
        first_offset: i64,
        last_offset: i64,
        cached_index: usize,
        timestamp: i64,
    },
    /// S1 / M2 / T5 [4.1+]: epoch below the producer's current epoch (47).
    InvalidProducerEpoch { current: i16, got: i16 },
    /// S2–S6, KAFKA-18202: sequence not acceptable (45). `expected` is the sequence the broker
    /// would have accepted (for S6: the lowest sequence under verification).
    OutOfOrderSequence { expected: i32, got: i32 },
    /// T2 / T5 (48).
    InvalidTxnState(TxnStateReason),
    /// V7/V8 (87).
    InvalidRecord(InvalidRecordReason),
    /// M3: marker coordinator epoch below the producer's (52).
    CoordinatorFenced { current: i32, got: i32 },
}

impl Verdict {
    /// The partition error code of the Produce (or WriteTxnMarkers) response.
    pub fn error_code(&self) -> i16 {
        match self {
            Verdict::Accept { .. } | Verdict::NotIdempotent | Verdict::Duplicate { .. } => {
                codes::NONE
            }
            Verdict::InvalidProducerEpoch { .. } => codes::INVALID_PRODUCER_EPOCH,
            Verdict::OutOfOrderSequence { .. } => codes::OUT_OF_ORDER_SEQUENCE_NUMBER,
            Verdict::InvalidTxnState(_) => codes::INVALID_TXN_STATE,
            Verdict::InvalidRecord(_) => codes::INVALID_RECORD,
            Verdict::CoordinatorFenced { .. } => codes::TRANSACTION_COORDINATOR_FENCED,
        }
    }

    /// True when the broker appends the batch.
    pub fn appends(&self) -> bool {
        matches!(self, Verdict::Accept { .. } | Verdict::NotIdempotent)
    }
}

/// Result of a successful [`super::PartitionPsm::append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The producer was tracked with a lower epoch; its cached batches were dropped.
    pub epoch_bump: bool,
    /// The producer had no entry before this batch.
    pub new_producer: bool,
    /// The batch opened a transaction (T1).
    pub started_txn: bool,
    /// The batch had no producer id; nothing was tracked.
    pub untracked: bool,
}

/// Kind of end-transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Commit,
    Abort,
}

/// A transaction closed by a marker (M4: only for a producer with an open transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the marker.
    pub last_offset: i64,
    pub aborted: bool,
}

/// KIP-890 verification state of the request for this producer, as far as the caller knows it
/// (`VerificationStateEntry`). The PSM cannot observe it; by default it is not judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationState {
    /// Lowest sequence seen while verifying (S6).
    pub lowest_sequence: i32,
    /// Set for TV2 verification (Produce v12+, transaction.version 2): KAFKA-18202 [4.1+].
    pub supports_epoch_bump: bool,
}

/// Request-level context for [`super::PartitionPsm::classify_with`].
///
/// [`AppendContext::default`] judges nothing about verification: it is what the broker does with
/// `transaction.partition.verification.enable=false`, and for non-transactional batches it is
/// exactly the broker's decision in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppendContext {
    /// `transaction.partition.verification.enable` (T3/T5).
    pub verification_enabled: bool,
    /// The partition's verification entry for this producer whose guard matches the request's,
    /// or `None` (no verification was done, or its guard does not match).
    pub verification: Option<VerificationState>,
}
