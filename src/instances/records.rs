//! The records of the state topic: their JSON format and their compaction keys. Records
//! whose latest value is all that matters share a key; records whose order decides get a key
//! per append ([`PeerRecord::key`], `compaction_tests.rs`).
//!
//! Owns: the record format and keys. Must not touch: what a reader concludes from them
//! ([`super::view`]), the state topic's I/O ([`super::log`]).

use serde::{Deserialize, Serialize};

use crate::mirror::report::FailoverReport;
use crate::mirror::screening::{ScreenEntry, Screening};
use crate::mirror::state::{BarrierKind, BarrierProducer, PartitionRecord};

/// One record of the state topic (JSON value; the key is [`PeerRecord::key`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PeerRecord {
    /// An instance is alive (written every session timeout / 4); `agents`: the mirrors it
    /// could run the built-in agent for.
    Heartbeat {
        instance: String,
        /// The writer's wall clock: shown, never compared (review G5).
        at_ms: i64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        agents: Vec<String>,
        /// A random id of the writing process, new at each start: two processes started with
        /// one instance id are told apart by it (review G12). Absent in records of older
        /// versions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        incarnation: Option<String>,
        /// The mirrors it has a forward listener for: a switchover waits for each of them to
        /// hold it. Absent in records of older versions.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        forward: Vec<String>,
    },
    /// `owner` claims the built-in agent of `mirror` at `epoch` ([`super::agent_owner`]).
    AgentOwner {
        mirror: String,
        owner: String,
        epoch: u32,
        at_ms: i64,
    },
    /// The agent's offset maps of `mirror` as its owner `by` last published them (the agent's
    /// own JSON format), so that the next owner resumes from them.
    AgentOffsets {
        mirror: String,
        by: String,
        epoch: u32,
        offsets: serde_json::Value,
    },
    /// A failover of `mirror` was started on instance `by` (`failover_id` `None`: the mirror
    /// was started again, mirroring).
    ///
    /// `epoch` counts who drives a failover: 1 for the instance it was called on, one more
    /// for each instance that took it over. Of the records of one failover, only the first
    /// of each next epoch in the log counts, so when two instances claim it at once the log's
    /// order decides, the same for every reader.
    Failover {
        mirror: String,
        failover_id: Option<String>,
        by: String,
        at_ms: i64,
        #[serde(default)]
        epoch: u32,
    },
    /// The producer id of failover `failover_id`'s control barriers, appended before any
    /// marker is written with it: an instance that takes the failover over finds them.
    BarrierProducer {
        mirror: String,
        failover_id: String,
        producer: BarrierProducer,
        by: String,
    },
    /// Where each partition's log ended before failover `failover_id` wrote a barrier to it
    /// (cumulative: the latest record of a failover holds every partition, each with the first
    /// end recorded). The barrier lies at or after it: an instance that takes the failover over
    /// looks for it from there, however much was written after it (review G3).
    BarrierFrom {
        mirror: String,
        failover_id: String,
        by: String,
        partitions: Vec<LogPosition>,
    },
    /// `instance` fenced and drained its mirror writes for that failover.
    Fenced {
        mirror: String,
        failover_id: String,
        instance: String,
        at_ms: i64,
    },
    /// `instance` has every partition of `mirror` STOPPED at failover `failover_id`'s barriers
    /// (or has nothing of the mirror to stop): a failback waits for every instance alive to
    /// say so (review G4).
    Adopted {
        mirror: String,
        failover_id: String,
        instance: String,
        at_ms: i64,
    },
    /// The partitions the failover STOPPED so far, with their barriers and the producer ids
    /// it screened (cumulative: the latest record of a failover holds all of them).
    Stopped(Stopped),
    /// A failover's report as the instance driving it last saved it (opened at the call,
    /// completed once every partition is STOPPED): readable through every instance.
    Report(Box<FailoverReport>),
    /// A switchover of `mirror` through instance `by` holds the forward listener of every
    /// instance (`held`), or gave up before its failover and releases them (`!held`); with
    /// `back`, a switch back to the old source does (its release also ends it once through).
    ForwardHold {
        mirror: String,
        hold_id: String,
        by: String,
        held: bool,
        /// The driver's bound on the hold up to its failover (`forward.hold_ms`).
        hold_ms: u64,
        /// The agent mirrored the source's log end under this hold: the destination holds
        /// every batch any instance forwarded (recorded just before the failover).
        #[serde(default)]
        caught_up: bool,
        /// A switch back's hold: the listeners are held on their way back to the source, and
        /// `caught_up` says the old source reached the destination's ends (its failover
        /// follows: the hold then stands until released).
        #[serde(default)]
        back: bool,
        at_ms: i64,
    },
    /// `instance` holds its forward listener of `mirror` for hold `hold_id`, none of its
    /// connections to the source left: nothing it forwards reaches the source until the hold ends.
    ForwardHeld {
        mirror: String,
        hold_id: String,
        instance: String,
        at_ms: i64,
    },
    /// What `instance`'s forward listener of `mirror` passed of the source's acknowledgements
    /// that the destination lacks after failover `failover_id`, at the positions its completed
    /// report names: the report read through any instance adds it.
    ForwardedLoss {
        mirror: String,
        failover_id: String,
        instance: String,
        loss: crate::mirror::forwarded_acks::ForwardedLoss,
        at_ms: i64,
    },
    /// `mirror` was paused (`paused`) or resumed through instance `by`: every instance's
    /// MIRRORING partitions of it follow. A later failover or failback of the mirror ends it.
    Paused {
        mirror: String,
        paused: bool,
        by: String,
        at_ms: i64,
    },
}

/// What the instance that ran a failover hands to the others: every other instance makes a
/// partition writable only once it has read it here, and screens the same producer ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stopped {
    pub mirror: String,
    pub failover_id: String,
    pub by: String,
    pub at_ms: i64,
    pub partitions: Vec<StoppedPartition>,
    pub screened: Vec<ScreenedProducer>,
}

/// One STOPPED partition, as the instance that wrote its barrier recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoppedPartition {
    pub topic: String,
    pub partition: i32,
    pub barrier_offset: i64,
    pub kind: BarrierKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<BarrierProducer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirrored_offset: Option<i64>,
    /// The producers the barrier expired, as the instance that wrote it counted them (the
    /// brokers' and its PSM's, review G15). Absent in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producers_expired: Option<u32>,
}

impl ScreenedProducer {
    /// Every producer id of the screening set `s`, as a handover carries them.
    pub fn all_of(s: &Screening) -> Vec<ScreenedProducer> {
        s.ids()
            .into_iter()
            .filter_map(|id| {
                s.screened(id).map(|entry| ScreenedProducer {
                    producer_id: id,
                    entry,
                })
            })
            .collect()
    }
}

impl StoppedPartition {
    /// The partition as its STOPPED record has it (`None` without a barrier offset).
    pub fn of(p: &PartitionRecord) -> Option<StoppedPartition> {
        Some(StoppedPartition {
            topic: p.topic.clone(),
            partition: p.partition,
            barrier_offset: p.barrier_offset?,
            kind: p.barrier_kind.unwrap_or(BarrierKind::Data),
            producer: p.barrier_producer,
            topic_id: p.barrier_topic_id.clone(),
            last_mirrored_offset: p.last_mirrored_offset,
            producers_expired: Some(p.producers_expired),
        })
    }
}

/// A partition and an offset of its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A producer id a failover screened (mirrored traffic left it in the brokers).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScreenedProducer {
    pub producer_id: i64,
    #[serde(flatten)]
    pub entry: ScreenEntry,
}

impl PeerRecord {
    /// The compaction key. Records whose meaning is their latest value (a heartbeat, the
    /// maps, a fence, a handover) share a key per instance, mirror, or mirror and instance.
    /// Records whose *order* decides (the claims of a failover or an agent: the first of an
    /// epoch wins) get a key of their own per append, so compaction keeps every one of them
    /// where it was written and a reader of the compacted topic concludes what a reader of the
    /// whole log did (`compaction_tests.rs`).
    pub fn key(&self) -> String {
        match self {
            PeerRecord::Heartbeat { instance, .. } => format!("instance/{instance}"),
            PeerRecord::AgentOwner {
                mirror,
                owner,
                epoch,
                at_ms,
            } => format!("agent_owner/{mirror}/{epoch}/{owner}/{at_ms}"),
            // Per epoch: a reader keeps the highest epoch's latest maps, and compaction keeps
            // each epoch's latest, so a later owner's maps survive a former owner's late ones.
            PeerRecord::AgentOffsets { mirror, epoch, .. } => {
                format!("agent_offsets/{mirror}/{epoch}")
            }
            PeerRecord::Failover {
                mirror,
                failover_id,
                by,
                at_ms,
                epoch,
            } => format!(
                "failover/{mirror}/{}/{epoch}/{by}/{at_ms}",
                failover_id.as_deref().unwrap_or("-")
            ),
            PeerRecord::Fenced {
                mirror, instance, ..
            } => format!("fenced/{mirror}/{instance}"),
            PeerRecord::Adopted {
                mirror, instance, ..
            } => format!("adopted/{mirror}/{instance}"),
            PeerRecord::Stopped(s) => format!("stopped/{}", s.mirror),
            PeerRecord::Paused { mirror, .. } => format!("paused/{mirror}"),
            PeerRecord::ForwardHold { mirror, .. } => format!("forward_hold/{mirror}"),
            PeerRecord::ForwardHeld {
                mirror, instance, ..
            } => format!("forward_held/{mirror}/{instance}"),
            PeerRecord::ForwardedLoss {
                mirror,
                failover_id,
                instance,
                ..
            } => format!("forwarded_loss/{mirror}/{failover_id}/{instance}"),
            // Per status: a completed report wins over an open one, whichever compaction
            // keeps last.
            PeerRecord::Report(r) => format!("report/{}/{}/{}", r.mirror, r.failover_id, r.status),
            PeerRecord::BarrierProducer { mirror, .. } => format!("barrier_producer/{mirror}"),
            PeerRecord::BarrierFrom { mirror, .. } => format!("barrier_from/{mirror}"),
        }
    }
}
