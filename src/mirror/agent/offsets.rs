//! The agent's exact source → destination offset map of each mirrored partition, and its
//! persisted form (state store area `agent`, file `<mirror>.json`).
//!
//! Every mirrored batch adds `(source base offset, destination base offset, record count)`;
//! consecutive batches whose source and destination offsets both continue are merged into one
//! range, so a partition mirrored without gaps is one range. A range of count 0 marks where
//! mirroring starts (source log start ↔ destination offset 0) before anything was appended.
//!
//! Owns: the map and its JSON format. Must not touch: sockets, the controller.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// State-store area of the offset maps.
pub const AGENT_AREA: &str = "agent";
/// Format version of the file.
pub const OFFSETS_VERSION: u32 = 1;

/// `count` offsets starting at `source` in the source log are `destination..` in the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub source: i64,
    pub destination: i64,
    pub count: i64,
}

/// The offset map of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMap {
    pub ranges: Vec<Range>,
}

impl PartitionMap {
    /// A map that starts mirroring source offset `source` into destination offset `destination`.
    pub fn starting_at(source: i64, destination: i64) -> Self {
        PartitionMap {
            ranges: vec![Range {
                source,
                destination,
                count: 0,
            }],
        }
    }

    /// Record one mirrored batch.
    pub fn record(&mut self, source: i64, destination: i64, count: i64) {
        if let Some(last) = self.ranges.last_mut() {
            if last.source + last.count == source && last.destination + last.count == destination {
                last.count += count;
                return;
            }
            if last.count == 0 {
                *last = Range {
                    source,
                    destination,
                    count,
                };
                return;
            }
        }
        self.ranges.push(Range {
            source,
            destination,
            count,
        });
    }

    /// (next source offset, next destination offset) after the last mirrored batch.
    pub fn next(&self) -> Option<(i64, i64)> {
        self.ranges
            .last()
            .map(|r| (r.source + r.count, r.destination + r.count))
    }

    /// The destination offset of a mirrored source offset.
    pub fn to_destination(&self, source: i64) -> Option<i64> {
        self.ranges
            .iter()
            .find(|r| source >= r.source && source < r.source + r.count)
            .map(|r| r.destination + (source - r.source))
    }

    /// The source offset of a mirrored destination offset.
    pub fn to_source(&self, destination: i64) -> Option<i64> {
        self.ranges
            .iter()
            .find(|r| destination >= r.destination && destination < r.destination + r.count)
            .map(|r| r.source + (destination - r.destination))
    }
}

/// What a topic's maps were mirrored from and into: the source and destination topic ids.
/// Absent in files written before they were recorded (the agent then adopts the current ids).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicIdentity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_topic_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_topic_id: Option<String>,
}

/// How a recorded id compares with the one seen now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdCheck {
    /// The same, or nothing is known now (the check waits).
    Same,
    /// Nothing recorded yet: record the current id.
    Adopt(String),
    /// A different id: (recorded, current).
    Changed(String, String),
}

/// Compare a recorded id with the current one.
pub fn check_id(recorded: Option<&str>, current: Option<&str>) -> IdCheck {
    match (recorded, current) {
        (_, None) => IdCheck::Same,
        (None, Some(c)) => IdCheck::Adopt(c.to_string()),
        (Some(r), Some(c)) if r == c => IdCheck::Same,
        (Some(r), Some(c)) => IdCheck::Changed(r.to_string(), c.to_string()),
    }
}

/// The persisted maps of one mirror.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorOffsets {
    pub version: u32,
    pub mirror: String,
    /// The source cluster id the maps were mirrored from (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_cluster_id: Option<String>,
    /// topic → its source and destination topic ids (absent in older files).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topics: BTreeMap<String, TopicIdentity>,
    /// topic → partition → map.
    pub partitions: BTreeMap<String, BTreeMap<i32, PartitionMap>>,
}

impl MirrorOffsets {
    pub fn new(mirror: &str) -> Self {
        MirrorOffsets {
            version: OFFSETS_VERSION,
            mirror: mirror.to_string(),
            source_cluster_id: None,
            topics: BTreeMap::new(),
            partitions: BTreeMap::new(),
        }
    }

    pub fn file_name(mirror: &str) -> String {
        format!("{mirror}.json")
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<&PartitionMap> {
        self.partitions.get(topic).and_then(|m| m.get(&partition))
    }

    pub fn entry(&mut self, topic: &str, partition: i32) -> &mut PartitionMap {
        self.partitions
            .entry(topic.to_string())
            .or_default()
            .entry(partition)
            .or_default()
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let m: MirrorOffsets = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if m.version != OFFSETS_VERSION {
            return Err(format!(
                "offset map version {} is not supported (this build reads {OFFSETS_VERSION})",
                m.version
            ));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_batches_merge_into_one_range() {
        let mut m = PartitionMap::starting_at(100, 0);
        assert_eq!(m.next(), Some((100, 0)));
        m.record(100, 0, 5);
        m.record(105, 5, 3);
        assert_eq!(m.ranges.len(), 1);
        assert_eq!(m.next(), Some((108, 8)));
        assert_eq!(m.to_destination(106), Some(6));
        assert_eq!(m.to_source(7), Some(107));
        assert_eq!(m.to_destination(108), None);
    }

    #[test]
    fn a_gap_starts_a_new_range_and_the_start_marker_is_replaced() {
        let mut m = PartitionMap::starting_at(10, 0);
        m.record(12, 0, 2); // source gap before the first batch
        assert_eq!(
            m.ranges,
            vec![Range {
                source: 12,
                destination: 0,
                count: 2
            }]
        );
        m.record(20, 2, 1);
        assert_eq!(m.ranges.len(), 2);
        assert_eq!(m.to_source(2), Some(20));
        assert_eq!(m.to_destination(13), Some(1));
        assert_eq!(m.next(), Some((21, 3)));
    }

    #[test]
    fn the_file_round_trips_and_refuses_other_versions() {
        let mut o = MirrorOffsets::new("m");
        o.entry("t", 0).record(0, 0, 4);
        let back = MirrorOffsets::decode(&o.encode()).unwrap();
        assert_eq!(back, o);
        let mut bad = o.clone();
        bad.version = 9;
        assert!(MirrorOffsets::decode(&bad.encode()).is_err());
        assert!(MirrorOffsets::decode(b"{").is_err());
    }

    #[test]
    fn a_map_file_without_identity_is_read_and_the_identity_round_trips() {
        let old = br#"{"version":1,"mirror":"m","partitions":{"t":{"0":{"ranges":[{"source":0,"destination":0,"count":3}]}}}}"#;
        let o = MirrorOffsets::decode(old).unwrap();
        assert_eq!(o.source_cluster_id, None);
        assert!(o.topics.is_empty());
        assert_eq!(o.get("t", 0).and_then(|m| m.next()), Some((3, 3)));
        let mut n = o.clone();
        n.source_cluster_id = Some("cluster-a".into());
        n.topics.insert(
            "t".into(),
            TopicIdentity {
                source_topic_id: Some("s-id".into()),
                destination_topic_id: Some("d-id".into()),
            },
        );
        assert_eq!(MirrorOffsets::decode(&n.encode()).unwrap(), n);
    }

    #[test]
    fn an_id_is_adopted_when_none_was_recorded_and_a_different_one_is_a_change() {
        assert_eq!(check_id(None, Some("a")), IdCheck::Adopt("a".into()));
        assert_eq!(check_id(Some("a"), Some("a")), IdCheck::Same);
        assert_eq!(check_id(Some("a"), None), IdCheck::Same);
        assert_eq!(
            check_id(Some("a"), Some("b")),
            IdCheck::Changed("a".into(), "b".into())
        );
    }
}
