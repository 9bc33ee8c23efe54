//! The agent's exact source → destination offset map of each mirrored partition, and its
//! persisted form (state store area `agent`, file `<mirror>.json`).
//!
//! Every mirrored batch adds `(source base offset, destination base offset, record count)`;
//! consecutive batches whose source and destination offsets both continue are merged into one
//! range, so a partition mirrored without gaps is one range. A range of count 0 marks a source
//! position without a record: where mirroring starts (source log start ↔ destination offset 0)
//! and where the agent continues after source offsets compaction removed (the tail of a gapped
//! or empty batch, [`PartitionMap::skip_to`]).
//!
//! Gaps (compacted sources): the destination assigns contiguous offsets, so a gapped source
//! batch becomes runs of consecutive source offsets, each its own range; the source offsets
//! between ranges hold no record. [`PartitionMap::to_destination`] of such an offset is the
//! destination offset of the next mirrored record (consumer-offset semantics: "the next record
//! at or after"); [`PartitionMap::to_source`] is exact (every destination offset is a record).
//!
//! Tainted producers: the `(producer id, epoch)` pairs whose batches the agent writes without
//! their producer id in this partition (see `partition/gapped.rs`), persisted with the map so a
//! restart treats the same batches the same way. Files without them (older files) read as none.
//!
//! Owns: the map and its JSON format (the agent writes it; the group sync, the admin API and the
//! failover read it). Must not touch: sockets, the controller.

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

/// A producer id and epoch of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Producer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// The offset map of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMap {
    pub ranges: Vec<Range>,
    /// Source producers whose batches are written without producer id (module doc).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tainted: Vec<Producer>,
    /// Transactional batches or markers were mirrored into the partition: the group offset
    /// sync's consistent cut covers it (kept with the map, so it outlives the partition's task
    /// and a restart).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transactional: bool,
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
            tainted: Vec::new(),
            transactional: false,
        }
    }

    /// Record `count` mirrored records: source offsets `source..` are destination `destination..`.
    /// A count-0 marker at the same position is filled; a skip marker
    /// ([`PartitionMap::skip_to`]) before it is replaced (the offsets between ranges hold no
    /// record); the start marker is kept when the first record comes after it (a gap at the
    /// source log start), so the log start still translates.
    pub fn record(&mut self, source: i64, destination: i64, count: i64) {
        let only = self.ranges.len() == 1;
        if let Some(last) = self.ranges.last_mut() {
            if last.source + last.count == source && last.destination + last.count == destination {
                last.count += count;
                return;
            }
            if last.count == 0 && !only {
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

    /// The source offsets up to `next_source` (exclusive) after the last mirrored record hold no
    /// record (removed by compaction, or an empty batch): mirroring continues at `next_source`,
    /// still into the next destination offset.
    pub fn skip_to(&mut self, next_source: i64) {
        let Some((next_src, next_dst)) = self.next() else {
            return;
        };
        if next_source <= next_src {
            return;
        }
        let only = self.ranges.len() == 1;
        match self.ranges.last_mut() {
            Some(last) if last.count == 0 && !only => last.source = next_source,
            _ => self.ranges.push(Range {
                source: next_source,
                destination: next_dst,
                count: 0,
            }),
        }
    }

    /// Whether batches of this producer are written without their producer id.
    pub fn is_tainted(&self, producer_id: i64, producer_epoch: i16) -> bool {
        self.tainted
            .iter()
            .any(|p| p.producer_id == producer_id && p.producer_epoch == producer_epoch)
    }

    /// From now on, write this producer's batches without their producer id. Older epochs of
    /// the same producer id are forgotten (a new epoch starts at sequence 0, which the
    /// destination accepts again, so only the newest tainted epoch can still come).
    pub fn taint(&mut self, producer_id: i64, producer_epoch: i16) {
        if self.is_tainted(producer_id, producer_epoch) {
            return;
        }
        self.tainted.retain(|p| p.producer_id != producer_id);
        self.tainted.push(Producer {
            producer_id,
            producer_epoch,
        });
    }

    /// (next source offset, next destination offset) after the last mirrored batch.
    pub fn next(&self) -> Option<(i64, i64)> {
        self.ranges
            .last()
            .map(|r| (r.source + r.count, r.destination + r.count))
    }

    /// The destination offset of a mirrored source offset; for a source offset without a record
    /// (compacted away, between ranges) the destination offset of the next mirrored record, or
    /// the next destination offset when none is mirrored yet. `None` outside what was mirrored:
    /// before the first range, at or after [`PartitionMap::next`].
    pub fn to_destination(&self, source: i64) -> Option<i64> {
        let first = self.ranges.first()?;
        let (next_src, next_dst) = self.next()?;
        if source < first.source || source >= next_src {
            return None;
        }
        if let Some(r) = self
            .ranges
            .iter()
            .find(|r| source >= r.source && source < r.source + r.count)
        {
            return Some(r.destination + (source - r.source));
        }
        Some(
            self.ranges
                .iter()
                .find(|r| r.source > source && r.count > 0)
                .map_or(next_dst, |r| r.destination),
        )
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

    /// Take from `published` (the maps another instance published when it ran this mirror's
    /// agent) every partition it mirrored further than this map, except `busy` ones (a task
    /// runs them here), and the identities this map lacks. Each map is a prefix of the same
    /// exact mapping, so the longer one holds the shorter. Returns the partitions taken.
    pub fn adopt_published(
        &mut self,
        published: MirrorOffsets,
        busy: impl Fn(&str, i32) -> bool,
    ) -> Vec<(String, i32)> {
        if self.source_cluster_id.is_none() {
            self.source_cluster_id = published.source_cluster_id;
        }
        for (topic, id) in published.topics {
            self.topics.entry(topic).or_insert(id);
        }
        let mut taken = Vec::new();
        for (topic, maps) in published.partitions {
            for (p, map) in maps {
                if busy(&topic, p) {
                    continue;
                }
                let here = self.partitions.entry(topic.clone()).or_default();
                let further = match (here.get(&p).and_then(PartitionMap::next), map.next()) {
                    (None, Some(_)) => true,
                    (Some((_, mine)), Some((_, theirs))) => theirs > mine,
                    _ => false,
                };
                if further {
                    here.insert(p, map);
                    taken.push((topic.clone(), p));
                }
            }
        }
        taken
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

    #[test]
    fn published_maps_survive_the_state_topics_json_and_the_longer_map_is_taken() {
        let mut theirs = MirrorOffsets::new("m");
        let mut map = PartitionMap::starting_at(5, 0);
        map.record(5, 0, 10);
        theirs
            .partitions
            .entry("t".into())
            .or_default()
            .insert(0, map);
        let v = serde_json::to_value(&theirs).expect("value");
        let back: MirrorOffsets = serde_json::from_value(v).expect("from value");
        assert_eq!(back, theirs);
        let mut mine = MirrorOffsets::new("m");
        mine.partitions
            .entry("t".into())
            .or_default()
            .insert(0, PartitionMap::starting_at(5, 0));
        assert_eq!(mine.adopt_published(back.clone(), |_, _| false).len(), 1);
        assert_eq!(
            mine.get("t", 0).and_then(PartitionMap::next),
            Some((15, 10))
        );
        assert!(
            mine.adopt_published(back.clone(), |_, _| false).is_empty(),
            "not further"
        );
        let mut busy = MirrorOffsets::new("m");
        assert!(
            busy.adopt_published(back, |_, _| true).is_empty(),
            "a task runs it here"
        );
    }
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
    fn a_gap_starts_a_new_range_and_the_start_marker_is_kept() {
        let mut m = PartitionMap::starting_at(10, 0);
        m.record(12, 0, 2); // source gap before the first batch
        assert_eq!(
            m.ranges,
            vec![
                Range {
                    source: 10,
                    destination: 0,
                    count: 0
                },
                Range {
                    source: 12,
                    destination: 0,
                    count: 2
                }
            ]
        );
        assert_eq!(m.to_destination(10), Some(0), "the log start translates");
        m.record(20, 2, 1);
        assert_eq!(m.ranges.len(), 3);
        assert_eq!(m.to_source(2), Some(20));
        assert_eq!(m.to_destination(13), Some(1));
        assert_eq!(m.next(), Some((21, 3)));
    }

    /// A compacted batch 100..=110 with records at 103, 107, 108 into destination 0..3, then
    /// an empty batch 111..=115, then a full batch 116..=117.
    fn compacted() -> PartitionMap {
        let mut m = PartitionMap::starting_at(100, 0);
        m.record(103, 0, 1);
        m.record(107, 1, 2);
        m.skip_to(111);
        m.skip_to(116);
        m.record(116, 3, 2);
        m
    }

    #[test]
    fn a_source_offset_compaction_removed_translates_to_the_next_mirrored_record() {
        let m = compacted();
        let dst: Vec<_> = (99..119).map(|s| m.to_destination(s)).collect();
        let mut want = vec![None];
        want.extend([0, 0, 0, 0, 1, 1, 1, 1, 2].map(Some)); // 100..=108
        want.extend([3; 7].map(Some)); // 109..=115: removed, then the empty batch
        want.extend([Some(3), Some(4), None]); // 116, 117, then past the end
        assert_eq!(dst, want);
        assert_eq!(m.next(), Some((118, 5)));
    }

    #[test]
    fn every_destination_offset_of_a_compacted_source_translates_back_exactly() {
        let m = compacted();
        let src: Vec<_> = (0..6).map(|d| m.to_source(d)).collect();
        assert_eq!(
            src,
            vec![Some(103), Some(107), Some(108), Some(116), Some(117), None]
        );
        for d in 0..5 {
            let s = m.to_source(d).unwrap();
            assert_eq!(m.to_destination(s), Some(d), "round trip of {d}");
        }
    }

    #[test]
    fn a_skipped_tail_moves_the_next_source_offset_but_not_the_destination() {
        let mut m = PartitionMap::starting_at(0, 0);
        m.record(0, 0, 3);
        m.skip_to(10);
        assert_eq!(m.next(), Some((10, 3)));
        assert_eq!(
            m.to_destination(5),
            Some(3),
            "the next record is not mirrored yet"
        );
        m.skip_to(12);
        assert_eq!(m.ranges.len(), 2, "consecutive skips share one marker");
        m.skip_to(11);
        assert_eq!(m.next(), Some((12, 3)), "a skip never goes back");
        m.record(12, 3, 1);
        assert_eq!(m.ranges.len(), 2, "the marker is filled in place");
        assert_eq!(m.next(), Some((13, 4)));
    }

    #[test]
    fn tainted_producers_persist_and_a_new_taint_replaces_older_epochs_of_the_producer() {
        let mut o = MirrorOffsets::new("m");
        let e = o.entry("t", 0);
        e.record(0, 0, 4);
        e.taint(7, 0);
        e.taint(7, 0);
        e.taint(8, 2);
        e.taint(7, 1);
        let back = MirrorOffsets::decode(&o.encode()).unwrap();
        let p = back.get("t", 0).unwrap();
        assert!(p.is_tainted(7, 1) && p.is_tainted(8, 2));
        assert!(!p.is_tainted(7, 0), "the older epoch is forgotten");
        assert_eq!(p.tainted.len(), 2);
    }

    #[test]
    fn a_map_file_without_taints_or_skips_reads_as_before() {
        let old = br#"{"version":1,"mirror":"m","partitions":{"t":{"0":{"ranges":[{"source":5,"destination":0,"count":3}]}}}}"#;
        let o = MirrorOffsets::decode(old).unwrap();
        let p = o.get("t", 0).unwrap();
        assert!(p.tainted.is_empty());
        assert_eq!(p.next(), Some((8, 3)));
        assert_eq!(p.to_destination(6), Some(1));
        let untainted = String::from_utf8(o.encode()).unwrap();
        assert!(!untainted.contains("tainted"), "{untainted}");
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
    fn a_partition_that_carried_transactions_says_so_after_a_reload_and_older_files_say_not() {
        let mut o = MirrorOffsets::new("m");
        o.entry("t", 0).record(0, 0, 4);
        o.entry("t", 0).transactional = true;
        o.entry("t", 1).record(0, 0, 4);
        let back = MirrorOffsets::decode(&o.encode()).unwrap();
        assert!(back.get("t", 0).is_some_and(|m| m.transactional));
        assert!(back.get("t", 1).is_some_and(|m| !m.transactional));
        let old = br#"{"version":1,"mirror":"m","partitions":{"t":{"0":{"ranges":[{"source":0,"destination":0,"count":3}]}}}}"#;
        let o = MirrorOffsets::decode(old).unwrap();
        assert!(o.get("t", 0).is_some_and(|m| !m.transactional));
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
