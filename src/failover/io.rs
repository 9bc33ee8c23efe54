//! The failover executor's seam: [`FailoverIo`], everything a failover does outside its records
//! (the agent, the brokers, the PSM), and the values that cross it. The real implementation is
//! `failover/barrier_io.rs`; the unit tests use a fake.
//!
//! Owns: the trait and its value types. Must not touch: any I/O itself.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use crate::mirror::screening::ScreenEntry;
use crate::mirror::state::{BarrierKind, BarrierProducer};

/// A partition: topic and index.
pub type PartitionKey = (String, i32);

/// A barrier of the failover being run, written or found in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundBarrier {
    pub offset: i64,
    pub kind: BarrierKind,
    /// The producer id of a control barrier.
    pub producer_id: Option<i64>,
}

/// The barriers of a failover pass, per partition.
pub type Found = HashMap<PartitionKey, FoundBarrier>;

/// One batch of a partition's log (after a barrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailBatch {
    pub base_offset: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub max_timestamp: i64,
    /// A barrier of the failover being run, and its form.
    pub own_barrier: Option<BarrierKind>,
    /// The batch's last offset.
    pub last_offset: i64,
    /// Mirrored records: neither a control batch nor a barrier of any failover.
    pub is_data: bool,
}

/// Mirror writes of a partition as the drain and the settle see them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Admitted and not yet answered.
    pub in_flight: i64,
    /// Ended without the broker's answer.
    pub unknown: u64,
    /// When the last of those ended (ms since the epoch; 0: never).
    pub last_unknown_ms: i64,
}

/// The outcome of writing barriers: per partition written or failed.
#[derive(Debug, Default)]
pub struct BarrierWrites {
    pub written: Found,
    pub failed: Vec<PartitionKey>,
    /// Why (the last failure).
    pub reason: String,
}

/// A mirrored transaction a failover aborted before the partition's barrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortedTxn {
    pub partition: PartitionKey,
    pub producer_id: i64,
    pub epoch: i16,
    pub coordinator_epoch: i32,
    /// The transaction's first offset in the destination partition.
    pub first_offset: i64,
}

/// The outcome of aborting the open transactions of partitions: those aborted, and the
/// partitions where it could not be done (with why).
#[derive(Debug, Default)]
pub struct OpenTxnAborts {
    pub aborted: Vec<AbortedTxn>,
    pub failed: Vec<PartitionKey>,
    /// Why (the last failure).
    pub reason: String,
}

/// The producer ids a control barrier's id must differ from, and the partitions whose leader
/// could not be asked (with why).
#[derive(Debug, Default)]
pub struct InUse {
    pub taken: HashSet<i64>,
    pub unreachable: Vec<PartitionKey>,
    pub why: String,
}

/// A producer id for control barriers, and the partitions whose leader could not be asked.
#[derive(Debug)]
pub struct NewProducer {
    pub producer: BarrierProducer,
    pub unreachable: Vec<PartitionKey>,
    pub why: String,
}

/// Why no producer id for a control barrier could be had.
#[derive(Debug)]
pub struct ProducerIdError {
    pub reason: String,
    /// The data barrier is the answer (`auto`): not authorized, or no free producer id; else the
    /// partitions fail and are retried.
    pub fallback: bool,
}

impl ProducerIdError {
    pub fn retry(reason: String) -> Self {
        ProducerIdError {
            reason,
            fallback: false,
        }
    }

    /// An error code answered: authorization refusals (29, 31) and UNSUPPORTED_VERSION (35)
    /// fall back.
    pub fn of_code(reason: String, code: i16) -> Self {
        ProducerIdError {
            reason,
            fallback: matches!(code, 29 | 31 | 35),
        }
    }
}

pub use crate::instances::view::NotDriving;

/// Everything a failover does outside its records: the agent, the brokers, the PSM.
pub trait FailoverIo: Send + Sync + 'static {
    /// Stop the mirror's built-in agent; ends once its appends in flight are answered.
    fn stop_agent(&self, mirror: &str) -> impl Future<Output = ()> + Send;
    /// The mirror writes of a partition (in flight, of unknown outcome).
    fn writes(&self, topic: &str, partition: i32) -> WriteCounts;
    /// This failover's last barrier in the partition's log: a data barrier carrying `fid`, or an
    /// ABORT marker of `producer_id`, looked for from `from` (the log end recorded before any
    /// barrier of the failover was written) or, without it, in the log's last few batches.
    fn find_barrier(
        &self,
        topic: &str,
        partition: i32,
        fid: &str,
        producer_id: Option<i64>,
        from: Option<i64>,
    ) -> impl Future<Output = Option<FoundBarrier>> + Send;
    /// Several instances: the partitions a failover STOPPED become writable only once they are
    /// handed over on the state topic (its commit point, review G3). False for one instance.
    fn hands_over(&self) -> bool {
        false
    }
    /// The log ends of `parts` now (their leaders asked; one request per leader), and the
    /// partitions whose leader could not be asked, with why.
    fn log_ends(
        &self,
        parts: &[PartitionKey],
    ) -> impl Future<Output = (HashMap<PartitionKey, i64>, Vec<PartitionKey>, String)> + Send;
    /// Record on the state topic, before any barrier of failover `fid` is written to them,
    /// where each of `from` partitions' log ended: an instance that takes the failover over
    /// looks for its barriers from there. `Err`: not recorded (no barrier is written).
    fn publish_barrier_from(
        &self,
        mirror: &str,
        fid: &str,
        from: &HashMap<PartitionKey, i64>,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Where each partition's log ended before failover `fid` wrote a barrier to it, as recorded
    /// on the state topic (empty for one instance).
    fn announced_barrier_from(&self, _mirror: &str, _fid: &str) -> HashMap<PartitionKey, i64> {
        HashMap::new()
    }
    /// The batches of a partition from `from` to its end that are not this failover's barrier.
    fn late_batches(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        fid: &str,
        producer_id: Option<i64>,
    ) -> impl Future<Output = Result<Vec<TailBatch>, String>> + Send;
    /// [`Self::find_barrier`] of many partitions, each with its control barrier's producer id:
    /// the barriers found. The real I/O asks each leader once for all its partitions.
    fn find_barriers(
        &self,
        fid: &str,
        parts: &[(PartitionKey, Option<i64>, Option<i64>)],
    ) -> impl Future<Output = Found> + Send {
        async move {
            let mut found = Found::new();
            for (k, pid, from) in parts {
                if let Some(b) = self.find_barrier(&k.0, k.1, fid, *pid, *from).await {
                    found.insert(k.clone(), b);
                }
            }
            found
        }
    }
    /// [`Self::late_batches`] of many partitions, each from its offset with its control
    /// barrier's producer id. The real I/O asks each leader once for all its partitions.
    fn late_batches_of(
        &self,
        fid: &str,
        parts: &[(PartitionKey, i64, Option<i64>)],
    ) -> impl Future<Output = HashMap<PartitionKey, Result<Vec<TailBatch>, String>>> + Send {
        async move {
            let mut out = HashMap::new();
            for (k, from, pid) in parts {
                let late = self.late_batches(&k.0, k.1, *from, fid, *pid).await;
                out.insert(k.clone(), late);
            }
            out
        }
    }
    /// Abort every transaction still open in `parts` (an ABORT marker for each producer the
    /// leader describes with one): mirrored transactions the source never finished (H14).
    fn abort_open_transactions(
        &self,
        mirror: &str,
        parts: &[PartitionKey],
    ) -> impl Future<Output = OpenTxnAborts> + Send;
    /// The producer ids a barrier producer id must differ from in `parts`.
    fn producer_ids_in_use(
        &self,
        parts: &[PartitionKey],
    ) -> impl Future<Output = Result<InUse, ProducerIdError>> + Send;
    /// A new producer id (idempotent InitProducerId) no producer of `parts` uses.
    fn new_barrier_producer(
        &self,
        parts: &[PartitionKey],
    ) -> impl Future<Output = Result<NewProducer, ProducerIdError>> + Send;
    /// Write one barrier to each of `parts`: a control batch with `producer`, else a data
    /// barrier carrying `fid`.
    fn write_barriers(
        &self,
        mirror: &str,
        fid: &str,
        producer: Option<BarrierProducer>,
        parts: &[PartitionKey],
    ) -> impl Future<Output = BarrierWrites> + Send;
    /// Whether the partition's PSM is rebuilt (its producers can be read).
    fn psm_ready(&self, topic: &str, partition: i32) -> bool;
    /// The producers the PSM holds for `parts`, except the ids `own`.
    fn psm_producers(&self, parts: &[PartitionKey], own: &[i64]) -> Vec<(i64, ScreenEntry)>;
    /// The last mirrored offset of a partition whose barrier of failover `fid` is `barrier`:
    /// the last offset of the last data batch before it in the log (-1: none), whoever
    /// mirrored it (review G15). `Err`: the log could not be read.
    fn last_mirrored_offset(
        &self,
        topic: &str,
        partition: i32,
        fid: &str,
        barrier: FoundBarrier,
    ) -> impl Future<Output = Result<i64, String>> + Send;
    /// [`Self::last_mirrored_offset`] of many partitions. The real I/O asks each leader once
    /// for all its partitions.
    fn last_mirrored_offsets(
        &self,
        fid: &str,
        found: &Found,
    ) -> impl Future<Output = HashMap<PartitionKey, Result<i64, String>>> + Send {
        async move {
            let mut out = HashMap::new();
            for (k, b) in found {
                out.insert(
                    k.clone(),
                    self.last_mirrored_offset(&k.0, k.1, fid, *b).await,
                );
            }
            out
        }
    }
    /// The destination topic's id now.
    fn topic_id(&self, topic: &str) -> Option<uuid::Uuid>;
    /// Clear the partition's PSM at `barrier`, adding its producers (but `own`) to the screening
    /// set in memory. Returns how many producers the barrier expired.
    fn clear_psm_at(&self, topic: &str, partition: i32, barrier: i64, own: Option<i64>) -> usize;
    /// Advance every destination broker's producer-id allocator past `screened` (never fails).
    fn advance_pid_allocators(
        &self,
        mirror: &str,
        screened: Vec<i64>,
    ) -> impl Future<Output = ()> + Send;
    /// The producers the destination brokers hold for `parts` (but `own`), each with its
    /// partition, where several instances run: mirrored traffic through the others passed no
    /// PSM of this instance. Empty for a single instance. `Err`: a leader could not be asked.
    fn broker_producers(
        &self,
        parts: &[PartitionKey],
        own: &[i64],
    ) -> impl Future<Output = Result<Vec<(PartitionKey, i64, ScreenEntry)>, String>> + Send;
    /// Tell the other instances (if any) that failover `fid` of `mirror` runs here, so they
    /// fence their mirror writes. `Err`: not told (the partitions fail and are retried).
    fn announce_failover(
        &self,
        mirror: &str,
        fid: &str,
    ) -> impl Future<Output = Result<(), NotDriving>> + Send;
    /// Whether this instance may write barriers for failover `fid` or hand it over now (it
    /// holds its lease and no other instance took the failover over). Always for one instance.
    fn check_driving(&self, mirror: &str, fid: &str) -> Result<(), NotDriving>;
    /// Tell the other instances the producer id of failover `fid`'s control barriers, before
    /// any marker is written with it. `Err`: not told (no marker is written).
    fn publish_barrier_producer(
        &self,
        mirror: &str,
        fid: &str,
        producer: BarrierProducer,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// The producer id of failover `fid`'s control barriers as announced on the state topic
    /// (several instances; `None` when none is, or this is the only instance).
    fn announced_barrier_producer(&self, _mirror: &str, _fid: &str) -> Option<BarrierProducer> {
        None
    }
    /// Wait until every other instance alive has fenced and drained its mirror writes for
    /// failover `fid` (or was waited out). `Ok(Some(ms))`: instances were waited out (or an
    /// earlier driver is gone undrained) whose leases certainly ended at that time (ms since the
    /// epoch): what they sent before may still land after the barrier (review G1). `Err`: one
    /// is alive and did not fence, in time.
    fn wait_peers_fenced(
        &self,
        mirror: &str,
        fid: &str,
    ) -> impl Future<Output = Result<Option<i64>, String>> + Send;
    /// This instance, driving failover `fid`, drained its own mirror writes: tell the others
    /// (an instance taking the failover over then need not wait for them). Several instances
    /// only; `Err` is logged, never fatal.
    fn ack_own_drain(
        &self,
        _mirror: &str,
        _fid: &str,
    ) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }
    /// Hand the partitions a failover STOPPED here to the other instances (if any), so they
    /// make them writable too. `Err`: not handed over yet (retried).
    fn publish_stopped(
        &self,
        stopped: crate::instances::view::Stopped,
    ) -> impl Future<Output = Result<(), String>> + Send;
}
