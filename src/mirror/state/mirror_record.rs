//! The persisted record of one mirror ([`MirrorRecord`]) and its versioned JSON encoding (the
//! format is described in the doc of `mirror/state.rs`).
//!
//! Owns: `MirrorRecord`, its encoding and decoding and the checks of a decoded record. Must not
//! touch: I/O (callers read and write the bytes).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{required, PartitionRecord, PartitionState, MIRROR_STATE_VERSION};

/// The persisted state of one mirror: its partitions and the current failover, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRecord {
    pub name: String,
    /// The current (or last completed) failover.
    pub failover_id: Option<String>,
    pub partitions: Vec<PartitionRecord>,
    /// When the failover started.
    pub started_ms: Option<i64>,
    /// When every partition reached STOPPED.
    pub completed_ms: Option<i64>,
    /// The instance whose failover this one follows (several instances): its barriers are
    /// adopted from the state topic, none is written here, and a restart does not resume it
    /// as this instance's own.
    pub adopted_from: Option<String>,
    /// A pause of the whole mirror is in force (called here or followed from the state topic):
    /// a partition added while it is (a topic created or grown on the source) is added PAUSED.
    /// Ended by a resume, a failover's start and a failback.
    pub paused: bool,
}

/// Why persisted mirror state cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StateDecodeError {
    #[error("mirror state is not valid: {0}")]
    Json(String),
    #[error("mirror state has no \"version\" field")]
    MissingVersion,
    #[error("mirror state version {0} is not a non-negative integer")]
    BadVersion(String),
    #[error("mirror state version {0} is not supported (this build reads version {MIRROR_STATE_VERSION})")]
    UnsupportedVersion(u64),
    #[error("mirror state is inconsistent: {0}")]
    Inconsistent(String),
}

#[derive(Serialize)]
struct WireOut<'a> {
    version: u64,
    name: &'a str,
    failover_id: &'a Option<String>,
    started_ms: &'a Option<i64>,
    completed_ms: &'a Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    adopted_from: &'a Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    paused: bool,
    partitions: &'a [PartitionRecord],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireInV1 {
    #[allow(dead_code)]
    version: u64,
    name: String,
    #[serde(deserialize_with = "required")]
    failover_id: Option<String>,
    #[serde(deserialize_with = "required")]
    started_ms: Option<i64>,
    #[serde(deserialize_with = "required")]
    completed_ms: Option<i64>,
    #[serde(default)]
    adopted_from: Option<String>,
    #[serde(default)]
    paused: bool,
    partitions: Vec<PartitionRecord>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Deserialize)]
struct VersionProbe {
    #[serde(default)]
    version: Option<serde_json::Value>,
}

impl MirrorRecord {
    /// A mirror whose partitions are all MIRRORING.
    pub fn new(
        name: impl Into<String>,
        partitions: impl IntoIterator<Item = (String, i32)>,
        now_ms: i64,
    ) -> Self {
        MirrorRecord {
            name: name.into(),
            failover_id: None,
            partitions: partitions
                .into_iter()
                .map(|(t, p)| PartitionRecord::new(t, p, now_ms))
                .collect(),
            started_ms: None,
            completed_ms: None,
            adopted_from: None,
            paused: false,
        }
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRecord> {
        self.partitions
            .iter()
            .find(|p| p.topic == topic && p.partition == partition)
    }

    pub fn partition_mut(&mut self, topic: &str, partition: i32) -> Option<&mut PartitionRecord> {
        self.partitions
            .iter_mut()
            .find(|p| p.topic == topic && p.partition == partition)
    }

    /// Whether every partition is STOPPED.
    pub fn all_stopped(&self) -> bool {
        self.partitions
            .iter()
            .all(|p| p.state == PartitionState::Stopped)
    }

    /// Versioned JSON (module doc).
    pub fn encode(&self) -> Vec<u8> {
        let wire = WireOut {
            version: MIRROR_STATE_VERSION,
            name: &self.name,
            failover_id: &self.failover_id,
            started_ms: &self.started_ms,
            completed_ms: &self.completed_ms,
            adopted_from: &self.adopted_from,
            paused: self.paused,
            partitions: &self.partitions,
        };
        // Serialising plain structs with string keys into a Vec cannot fail.
        serde_json::to_vec(&wire).expect("mirror state serialises to JSON")
    }

    /// Reads [`MirrorRecord::encode`]'s output; rejects anything corrupt, unknown or impossible.
    pub fn decode(bytes: &[u8]) -> Result<MirrorRecord, StateDecodeError> {
        let probe: VersionProbe =
            serde_json::from_slice(bytes).map_err(|e| StateDecodeError::Json(e.to_string()))?;
        let version = match probe.version {
            None | Some(serde_json::Value::Null) => return Err(StateDecodeError::MissingVersion),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| StateDecodeError::BadVersion(v.to_string()))?,
        };
        if version != MIRROR_STATE_VERSION {
            return Err(StateDecodeError::UnsupportedVersion(version));
        }
        let wire: WireInV1 =
            serde_json::from_slice(bytes).map_err(|e| StateDecodeError::Json(e.to_string()))?;
        let record = MirrorRecord {
            name: wire.name,
            failover_id: wire.failover_id,
            partitions: wire.partitions,
            started_ms: wire.started_ms,
            completed_ms: wire.completed_ms,
            adopted_from: wire.adopted_from,
            paused: wire.paused,
        };
        record.validate().map_err(StateDecodeError::Inconsistent)?;
        Ok(record)
    }

    /// Checks the combination of fields of the mirror and of every partition.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("empty mirror name".into());
        }
        if self.failover_id.as_deref() == Some("") {
            return Err("empty failover id".into());
        }
        if self.failover_id.is_some() != self.started_ms.is_some() {
            return Err("a failover id and its start time go together".into());
        }
        if self.completed_ms.is_some() && (self.failover_id.is_none() || !self.all_stopped()) {
            return Err(
                "a completed failover needs a failover id and every partition STOPPED".into(),
            );
        }
        let mut seen = HashSet::with_capacity(self.partitions.len());
        for p in &self.partitions {
            let at = |what: &str| format!("{}-{}: {what}", p.topic, p.partition);
            p.validate().map_err(at)?;
            if !seen.insert((p.topic.as_str(), p.partition)) {
                return Err(at("listed twice"));
            }
            if p.failover_id.is_some() && p.failover_id != self.failover_id {
                return Err(at("failover id differs from the mirror's"));
            }
        }
        Ok(())
    }
}
