//! Produce-request peeks and a zero-allocation walker that do not decode the request.
//!
//! [`peek_acks`] reads only `acks`. [`ProduceWalker`] walks a whole Produce body (v3..=13,
//! after the request header) and yields each partition's topic, index and the position of its
//! `records` bytes, without copying or allocating. [`ProduceView`] is the one walk the gateway
//! makes of a Produce request: every partition with its topic resolved once per topic (by the
//! caller) and, where asked for, the facts of its record batches ([`BatchFacts`]), for the
//! enforcement, the PSM tap and the barrier count to read.
//!
//! Owns: reading Produce request bodies. Must not touch: what the gateway decides about a
//! partition (the caller's), the PSM, metrics.

use std::borrow::Cow;
use std::ops::Range;

use super::batch::{BatchHeader, BatchWalker, ClientBatchError};

use thiserror::Error;

use super::frame::{read_uvarint, FrameError};

/// The `acks` field of a Produce request, read from the body that follows the request header.
///
/// Layout (v3+): `transactional_id` (nullable string: i16 length before v9, compact
/// unsigned-varint length+1 from v9), then `acks: i16`.
pub fn peek_acks(version: i16, body: &[u8]) -> Result<i16, FrameError> {
    let pos = if version >= 9 {
        let (len_plus_one, p) = read_uvarint(body, 0)?;
        if len_plus_one == 0 {
            p
        } else {
            p + (len_plus_one as usize - 1)
        }
    } else {
        if body.len() < 2 {
            return Err(FrameError::BadHeader("produce request too short"));
        }
        let len = i16::from_be_bytes([body[0], body[1]]);
        if len < -1 {
            return Err(FrameError::BadHeader("negative transactional id length"));
        }
        2 + len.max(0) as usize
    };
    match body.get(pos..pos + 2) {
        Some(b) => Ok(i16::from_be_bytes([b[0], b[1]])),
        None => Err(FrameError::BadHeader("produce request ends before acks")),
    }
}

/// Lowest and highest Produce version [`ProduceWalker`] understands.
pub const PRODUCE_MIN_VERSION: i16 = 3;
pub const PRODUCE_MAX_VERSION: i16 = 13;

/// A topic as a Produce request names it: by name up to v12, by topic id from v13.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRef<'a> {
    Name(&'a str),
    Id(uuid::Uuid),
}

/// One partition of a Produce request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartition<'a> {
    pub topic: TopicRef<'a>,
    pub partition: i32,
    /// The `records` field; `None` when it is null.
    pub records: Option<&'a [u8]>,
    /// Where `records` lies in the body (empty, at the field's end, when null).
    pub records_range: Range<usize>,
}

/// A malformed Produce body. `pos` is the byte position in the body where reading failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProduceError {
    #[error("produce version {0} is not supported (3..=13)")]
    UnsupportedVersion(i16),
    #[error("produce body ends inside {what} at byte {pos}")]
    Truncated { what: &'static str, pos: usize },
    #[error("invalid length {len} for {what} at byte {pos}")]
    BadLength {
        what: &'static str,
        pos: usize,
        len: i64,
    },
    #[error("malformed varint at byte {pos}")]
    BadVarint { pos: usize },
    #[error("topic name at byte {pos} is not UTF-8")]
    BadUtf8 { pos: usize },
}

/// Walks a Produce request body. Construction reads `transactional_id`, `acks` and
/// `timeout_ms`; iteration yields one [`ProducePartition`] per partition and stops after the
/// first error. Tagged fields (v9+) are skipped.
#[derive(Debug, Clone)]
pub struct ProduceWalker<'a> {
    body: &'a [u8],
    flexible: bool,
    v13: bool,
    pos: usize,
    transactional_id: Option<&'a str>,
    acks: i16,
    timeout_ms: i32,
    topics_left: u32,
    partitions_left: u32,
    topic: TopicRef<'a>,
    done: bool,
}

impl<'a> ProduceWalker<'a> {
    pub fn new(version: i16, body: &'a [u8]) -> Result<Self, ProduceError> {
        if !(PRODUCE_MIN_VERSION..=PRODUCE_MAX_VERSION).contains(&version) {
            return Err(ProduceError::UnsupportedVersion(version));
        }
        #[cfg(test)]
        super::frame::counts::bump(super::frame::counts::Event::BodyWalk);
        let mut w = ProduceWalker {
            body,
            flexible: version >= 9,
            v13: version >= 13,
            pos: 0,
            transactional_id: None,
            acks: 0,
            timeout_ms: 0,
            topics_left: 0,
            partitions_left: 0,
            topic: TopicRef::Name(""),
            done: false,
        };
        w.transactional_id = w.string(true, "transactional_id")?;
        w.acks = i16::from_be_bytes(w.fixed::<2>("acks")?);
        w.timeout_ms = i32::from_be_bytes(w.fixed::<4>("timeout_ms")?);
        w.topics_left = w.array_len("topic_data")?;
        Ok(w)
    }

    pub fn transactional_id(&self) -> Option<&'a str> {
        self.transactional_id
    }

    pub fn acks(&self) -> i16 {
        self.acks
    }

    pub fn timeout_ms(&self) -> i32 {
        self.timeout_ms
    }

    /// Position reached in the body (after a complete walk: the end of the request).
    pub fn position(&self) -> usize {
        self.pos
    }

    fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProduceError> {
        let end = self.pos.checked_add(N).filter(|e| *e <= self.body.len());
        let Some(end) = end else {
            return Err(ProduceError::Truncated {
                what,
                pos: self.pos,
            });
        };
        let mut out = [0u8; N];
        out.copy_from_slice(&self.body[self.pos..end]);
        self.pos = end;
        Ok(out)
    }

    fn uvarint(&mut self) -> Result<u32, ProduceError> {
        let at = self.pos;
        let (v, p) = read_uvarint(self.body, at).map_err(|_| {
            if at >= self.body.len() {
                ProduceError::Truncated {
                    what: "varint",
                    pos: at,
                }
            } else {
                ProduceError::BadVarint { pos: at }
            }
        })?;
        self.pos = p;
        Ok(v)
    }

    /// Length of a string/bytes field: `None` for null.
    fn length(
        &mut self,
        nullable: bool,
        what: &'static str,
        short: bool,
    ) -> Result<Option<usize>, ProduceError> {
        let at = self.pos;
        let len: i64 = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else if short {
            i64::from(i16::from_be_bytes(self.fixed::<2>(what)?))
        } else {
            i64::from(i32::from_be_bytes(self.fixed::<4>(what)?))
        };
        if len == -1 && nullable {
            return Ok(None);
        }
        if len < 0 {
            return Err(ProduceError::BadLength { what, pos: at, len });
        }
        if len as u64 > (self.body.len() - self.pos) as u64 {
            return Err(ProduceError::Truncated {
                what,
                pos: self.pos,
            });
        }
        Ok(Some(len as usize))
    }

    fn string(
        &mut self,
        nullable: bool,
        what: &'static str,
    ) -> Result<Option<&'a str>, ProduceError> {
        let Some(len) = self.length(nullable, what, true)? else {
            return Ok(None);
        };
        let at = self.pos;
        let s = std::str::from_utf8(&self.body[at..at + len])
            .map_err(|_| ProduceError::BadUtf8 { pos: at })?;
        self.pos += len;
        Ok(Some(s))
    }

    fn array_len(&mut self, what: &'static str) -> Result<u32, ProduceError> {
        let at = self.pos;
        let len: i64 = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(i32::from_be_bytes(self.fixed::<4>(what)?))
        };
        // Every element takes at least one byte, so a count above the bytes left is malformed.
        if len < 0 || len as u64 > (self.body.len() - self.pos) as u64 {
            return Err(ProduceError::BadLength { what, pos: at, len });
        }
        Ok(len as u32)
    }

    fn skip_tagged_fields(&mut self) -> Result<(), ProduceError> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let at = self.pos;
            let size = self.uvarint()? as usize;
            let end = self.pos.checked_add(size).filter(|e| *e <= self.body.len());
            let Some(end) = end else {
                return Err(ProduceError::BadLength {
                    what: "tagged field",
                    pos: at,
                    len: size as i64,
                });
            };
            self.pos = end;
        }
        Ok(())
    }

    fn next_partition(&mut self) -> Result<Option<ProducePartition<'a>>, ProduceError> {
        while self.partitions_left == 0 {
            if self.topics_left == 0 {
                self.skip_tagged_fields()?;
                return Ok(None);
            }
            self.topics_left -= 1;
            self.topic = if self.v13 {
                TopicRef::Id(uuid::Uuid::from_bytes(self.fixed::<16>("topic_id")?))
            } else {
                TopicRef::Name(self.string(false, "topic name")?.unwrap_or(""))
            };
            self.partitions_left = self.array_len("partition_data")?;
            if self.partitions_left == 0 {
                self.skip_tagged_fields()?;
            }
        }
        self.partitions_left -= 1;
        let partition = i32::from_be_bytes(self.fixed::<4>("partition index")?);
        let (records, records_range) = match self.length(true, "records", false)? {
            None => (None, self.pos..self.pos),
            Some(len) => {
                let range = self.pos..self.pos + len;
                self.pos += len;
                (Some(&self.body[range.clone()]), range)
            }
        };
        self.skip_tagged_fields()?;
        if self.partitions_left == 0 {
            // End of this topic's struct.
            self.skip_tagged_fields()?;
        }
        Ok(Some(ProducePartition {
            topic: self.topic,
            partition,
            records,
            records_range,
        }))
    }
}

impl<'a> Iterator for ProduceWalker<'a> {
    type Item = Result<ProducePartition<'a>, ProduceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_partition() {
            Ok(Some(p)) => Some(Ok(p)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// One topic of a [`ProduceView`], resolved once.
#[derive(Debug, Clone)]
pub struct TopicView<'a> {
    /// The topic as the request names it.
    pub topic: TopicRef<'a>,
    /// Its name: the request's (up to v12) or the one the caller resolved the id to (v13);
    /// `None` for a topic id the caller does not know.
    pub name: Option<Cow<'a, str>>,
    /// The caller's per-topic flag (the gateway: the topic belongs to a mirror).
    pub mirror: bool,
}

/// What one walk over a partition's record batches found ([`scan_batches`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchFacts {
    /// The single batch a Produce v3+ partition must carry, checked as
    /// [`super::batch::single_client_batch`] checks it; `None` when not asked for.
    pub single: Option<Result<BatchHeader, ClientBatchError>>,
    /// Barrier batches among the readable batches (counted when asked for, else 0).
    pub barriers: usize,
}

/// One partition of a [`ProduceView`].
#[derive(Debug, Clone)]
pub struct PartitionView<'a> {
    /// Index of its topic in [`ProduceView::topics`].
    pub topic: usize,
    pub partition: i32,
    /// The `records` field; `None` when it is null.
    pub records: Option<&'a [u8]>,
    /// Where `records` lies in the body.
    pub records_range: Range<usize>,
    /// Its batches, when the caller asked for them.
    pub batches: BatchFacts,
}

/// A Produce request body read in one walk: `acks`, the transactional id, and every partition
/// in request order with its topic resolved once per topic. A malformed partition ends the walk:
/// the partitions before it are kept and [`ProduceView::error`] says why.
#[derive(Debug, Clone)]
pub struct ProduceView<'a> {
    pub version: i16,
    pub acks: i16,
    pub transactional_id: Option<&'a str>,
    pub topics: Vec<TopicView<'a>>,
    pub partitions: Vec<PartitionView<'a>>,
    pub error: Option<ProduceError>,
}

/// What the walk asks about each partition's batches.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchQuestions {
    /// Check the single client batch (with a CRC-32C check when `verify_crc`).
    pub single: bool,
    pub verify_crc: bool,
    /// Count barrier batches.
    pub barriers: bool,
}

impl<'a> ProduceView<'a> {
    /// Walks `body` (after the request header) once. `resolve` is called once per topic entry
    /// and gives its name and flag; `questions` says, per partition of a resolved topic, what to
    /// learn about its batches.
    pub fn build(
        version: i16,
        body: &'a [u8],
        resolve: &mut dyn FnMut(TopicRef<'a>) -> (Option<Cow<'a, str>>, bool),
        questions: &dyn Fn(&TopicView<'a>) -> BatchQuestions,
    ) -> Result<ProduceView<'a>, ProduceError> {
        let walker = ProduceWalker::new(version, body)?;
        let mut view = ProduceView {
            version,
            acks: walker.acks(),
            transactional_id: walker.transactional_id(),
            topics: Vec::new(),
            partitions: Vec::new(),
            error: None,
        };
        let mut asked = BatchQuestions::default();
        for item in walker {
            let p = match item {
                Ok(p) => p,
                Err(e) => {
                    view.error = Some(e);
                    break;
                }
            };
            if view.topics.last().is_none_or(|t| t.topic != p.topic) {
                let (name, mirror) = resolve(p.topic);
                view.topics.push(TopicView {
                    topic: p.topic,
                    name,
                    mirror,
                });
                asked = view.topics.last().map(questions).unwrap_or_default();
            }
            let batches = match p.records {
                Some(records) if asked.single || asked.barriers => scan_batches(records, asked),
                _ => BatchFacts {
                    single: None,
                    barriers: 0,
                },
            };
            view.partitions.push(PartitionView {
                topic: view.topics.len() - 1,
                partition: p.partition,
                records: p.records,
                records_range: p.records_range,
                batches,
            });
        }
        Ok(view)
    }

    /// The topic of `p`.
    pub fn topic_of(&self, p: &PartitionView<'a>) -> &TopicView<'a> {
        &self.topics[p.topic]
    }
}

/// One walk over the batches of `records`: the single client batch (as
/// [`super::batch::single_client_batch`] reads it) and the number of barrier batches among the
/// batches before the first unreadable one, as asked.
pub fn scan_batches(records: &[u8], asked: BatchQuestions) -> BatchFacts {
    let mut walker = BatchWalker::new(records, false);
    let first = walker.next();
    let single = asked.single.then(|| {
        let (header, batch) = first.clone().ok_or(ClientBatchError::NoBatch)??;
        if asked.verify_crc {
            let computed = crc32c::crc32c(&batch[super::batch::ATTRIBUTES_OFFSET..]);
            if computed != header.crc {
                return Err(ClientBatchError::Batch(
                    super::batch::BatchError::CrcMismatch {
                        index: 0,
                        pos: 0,
                        stored: header.crc,
                        computed,
                    },
                ));
            }
        }
        if batch.len() < records.len() {
            return Err(ClientBatchError::MoreThanOneBatch);
        }
        if header.base_offset != 0 {
            return Err(ClientBatchError::NonZeroBaseOffset(header.base_offset));
        }
        Ok(header)
    });
    let barriers = if asked.barriers {
        first
            .into_iter()
            .chain(walker)
            .map_while(Result::ok)
            .filter(|(_, b)| super::barrier::is_barrier_batch(b))
            .count()
    } else {
        0
    };
    BatchFacts { single, barriers }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::ProduceRequest;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encoded(version: i16, acks: i16, txn: Option<&str>) -> Vec<u8> {
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(1000)
            .with_transactional_id(txn.map(|t| StrBytes::from_string(t.to_string()).into()));
        let mut buf = BytesMut::new();
        req.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    #[test]
    fn reads_acks_for_every_produce_version() {
        for version in 3..=13 {
            for acks in [-1i16, 0, 1] {
                for txn in [None, Some("tx-1")] {
                    let body = encoded(version, acks, txn);
                    assert_eq!(
                        peek_acks(version, &body).unwrap(),
                        acks,
                        "v{version} {txn:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn truncated_body_is_an_error() {
        assert!(peek_acks(3, &[0]).is_err());
        assert!(peek_acks(9, &[5, b'a']).is_err());
    }

    fn walk_all(version: i16, body: &[u8]) -> Result<Vec<ProducePartition<'_>>, ProduceError> {
        ProduceWalker::new(version, body)?.collect()
    }

    type Expected = Vec<(String, uuid::Uuid, i32, Option<Vec<u8>>)>;

    fn sample_request(version: i16, txn: Option<&str>) -> (ProduceRequest, Expected) {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::TopicName;
        let mut expected = Vec::new();
        let mut topics = Vec::new();
        for t in 0..3u8 {
            let name = format!("topic-{t}");
            let id = uuid::Uuid::from_bytes([t + 1; 16]);
            let mut parts = Vec::new();
            for p in 0..(t as i32 + 1) {
                let records = if p == 1 {
                    None
                } else {
                    Some(vec![t; 70 + p as usize * 13])
                };
                parts.push(
                    PartitionProduceData::default()
                        .with_index(p * 3)
                        .with_records(records.clone().map(bytes::Bytes::from)),
                );
                expected.push((name.clone(), id, p * 3, records));
            }
            let mut topic = TopicProduceData::default().with_partition_data(parts);
            if version >= 13 {
                topic = topic.with_topic_id(id);
            } else {
                topic = topic.with_name(TopicName(StrBytes::from_string(name)));
            }
            if version >= 9 && t == 1 {
                topic = topic.with_unknown_tagged_field(3, bytes::Bytes::from_static(b"tag"));
            }
            topics.push(topic);
        }
        // A topic without partitions.
        let empty = if version >= 13 {
            TopicProduceData::default().with_topic_id(uuid::Uuid::from_bytes([9; 16]))
        } else {
            TopicProduceData::default().with_name(TopicName(StrBytes::from_static_str("empty")))
        };
        topics.insert(1, empty);
        let mut req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(1234)
            .with_transactional_id(txn.map(|t| StrBytes::from_string(t.to_string()).into()))
            .with_topic_data(topics);
        if version >= 9 {
            req = req.with_unknown_tagged_field(1, bytes::Bytes::from_static(b"top"));
        }
        (req, expected)
    }

    #[test]
    fn walker_yields_what_kafka_protocol_encoded_for_every_version() {
        for version in 3..=13i16 {
            for txn in [None, Some("tx-1")] {
                let (req, expected) = sample_request(version, txn);
                let mut buf = BytesMut::new();
                req.encode(&mut buf, version).unwrap();
                let body = buf.to_vec();
                let w = ProduceWalker::new(version, &body).unwrap();
                assert_eq!(w.transactional_id(), txn, "v{version}");
                assert_eq!(w.acks(), -1);
                assert_eq!(w.timeout_ms(), 1234);
                let mut w2 = w.clone();
                let got: Vec<_> = w.collect::<Result<_, _>>().unwrap();
                assert_eq!(got.len(), expected.len(), "v{version}");
                for (g, (name, id, part, records)) in got.iter().zip(&expected) {
                    if version >= 13 {
                        assert_eq!(g.topic, TopicRef::Id(*id));
                    } else {
                        assert_eq!(g.topic, TopicRef::Name(name.as_str()));
                    }
                    assert_eq!(g.partition, *part);
                    assert_eq!(g.records, records.as_deref(), "v{version}");
                    if let Some(r) = records {
                        assert_eq!(&body[g.records_range.clone()], r.as_slice());
                    } else {
                        assert!(g.records_range.is_empty());
                    }
                }
                while w2.next().is_some() {}
                assert_eq!(
                    w2.position(),
                    body.len(),
                    "v{version} consumed the whole body"
                );
            }
        }
    }

    #[test]
    fn walker_rejects_unsupported_versions() {
        assert_eq!(
            ProduceWalker::new(2, &[]).err(),
            Some(ProduceError::UnsupportedVersion(2))
        );
        assert_eq!(
            ProduceWalker::new(14, &[]).err(),
            Some(ProduceError::UnsupportedVersion(14))
        );
    }

    #[test]
    fn walker_reports_truncation_at_every_cut() {
        for version in [3i16, 8, 9, 12, 13] {
            let (req, _) = sample_request(version, Some("t"));
            let mut buf = BytesMut::new();
            req.encode(&mut buf, version).unwrap();
            for cut in 0..buf.len() - 1 {
                let r = walk_all(version, &buf[..cut]);
                // Only a cut inside the final top-level tagged fields could look complete; none
                // of the cuts may panic, and cuts before the last partition must fail.
                if cut < buf.len() - 8 {
                    assert!(r.is_err(), "v{version} cut {cut}");
                }
            }
        }
    }

    #[test]
    fn walker_rejects_negative_lengths() {
        // v3: txn id null, acks, timeout, 1 topic with name length -2.
        let mut body = vec![0xff, 0xff, 0, 1, 0, 0, 0, 10, 0, 0, 0, 1];
        body.extend_from_slice(&(-2i16).to_be_bytes());
        assert!(matches!(
            walk_all(3, &body),
            Err(ProduceError::BadLength {
                what: "topic name",
                ..
            })
        ));
        let body = [0xff, 0xff, 0, 1, 0, 0, 0, 10, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            ProduceWalker::new(3, &body),
            Err(ProduceError::BadLength {
                what: "topic_data",
                ..
            })
        ));
    }

    proptest::proptest! {
        #[test]
        fn walker_never_panics_on_random_bytes(version in 3i16..=13, body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(w) = ProduceWalker::new(version, &body) {
                for p in w.flatten() {
                    proptest::prop_assert!(p.records_range.end <= body.len());
                }
            }
        }
    }
}
