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

/// The persisted maps of one mirror.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorOffsets {
    pub version: u32,
    pub mirror: String,
    /// topic → partition → map.
    pub partitions: BTreeMap<String, BTreeMap<i32, PartitionMap>>,
}

impl MirrorOffsets {
    pub fn new(mirror: &str) -> Self {
        MirrorOffsets {
            version: OFFSETS_VERSION,
            mirror: mirror.to_string(),
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
}
