//! A minimal Kafka client for gateway-originated requests (metadata refresh, barrier writes,
//! producer-state queries, the mirror agent's fetches and appends). One connection, one request
//! (or one pipelined burst) at a time, correlation ids of its own.
//!
//! Owns: encoding a request with its header and length prefix, matching the response by
//! correlation id and decoding it, the per-request timeout, and the partition-level helpers
//! (ListOffsets, Fetch of one partition).
//! Must not touch: how the connection is opened (that is [`super::Connector`]), retries, or
//! any gateway state.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::AsyncWriteExt;

use crate::net::Stream;
use crate::protocol::frame::{read_frame, FrameError};

use super::{ConnectError, Connector};

/// Why a gateway-originated request failed: the connection could not be opened, or a request
/// on it failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Request(#[from] RequestError),
}

/// Why a request on an open connection failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{what} to {addr} timed out after {after:?}")]
    Timeout {
        what: &'static str,
        addr: String,
        after: Duration,
    },
    #[error("connection to {addr} failed: {source}")]
    Frame { addr: String, source: FrameError },
    #[error("connection to {addr} closed by the broker")]
    Closed { addr: String },
    #[error("cannot encode {api:?} v{version}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot decode {api:?} v{version} response from {addr}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        addr: String,
        reason: String,
    },
    #[error("response from {addr} has correlation id {got}, expected {want}")]
    Correlation { addr: String, got: i32, want: i32 },
}

/// One connection to one broker.
pub struct KafkaClient {
    stream: Stream,
    addr: String,
    buf: BytesMut,
    next_correlation: i32,
    timeout: Duration,
}

impl KafkaClient {
    /// Connect to `addr` (`host:port`) over plain TCP within `timeout`; the same timeout
    /// bounds each request. For tools and tests; the gateway uses [`Self::connect_with`].
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Self, ClientError> {
        Self::connect_with(&Connector::plain(), addr, timeout).await
    }

    /// Connect to `addr` through `connector` (the cluster's transport security) within
    /// `timeout`; the same timeout bounds each request.
    pub async fn connect_with(
        connector: &Connector,
        addr: &str,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let stream = connector.connect(addr, timeout).await?;
        Ok(Self::over(stream, addr, timeout))
    }

    /// A client over an already connected `stream` to `addr` (used while the connection is set
    /// up, e.g. for its SASL exchanges); `timeout` bounds each request.
    pub fn over(stream: Stream, addr: &str, timeout: Duration) -> Self {
        KafkaClient {
            stream,
            addr: addr.to_string(),
            buf: BytesMut::new(),
            next_correlation: 1,
            timeout,
        }
    }

    /// The underlying stream. Only between requests: the broker sends nothing unasked, so no
    /// buffered bytes are lost.
    pub fn into_stream(self) -> Stream {
        self.stream
    }

    /// The address this client is connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Send `req` at `version` and wait for its response.
    pub async fn send<R: Request>(
        &mut self,
        req: &R,
        version: i16,
    ) -> Result<R::Response, ClientError> {
        Ok(self.request(req, version).await?)
    }

    /// [`Self::send`], with the error of a request on an open connection (no connect error
    /// can happen here).
    pub async fn request<R: Request>(
        &mut self,
        req: &R,
        version: i16,
    ) -> Result<R::Response, RequestError> {
        let mut v = self.pipelined(req, version, 1).await?;
        v.pop().ok_or_else(|| RequestError::Closed {
            addr: self.addr.clone(),
        })
    }

    /// Write `n` copies of `req` at `version` before reading any answer (pipelining: the broker
    /// answers a connection's requests in order), then read the `n` responses. The client's
    /// timeout bounds the whole exchange.
    pub async fn send_pipelined<R: Request>(
        &mut self,
        req: &R,
        version: i16,
        n: usize,
    ) -> Result<Vec<R::Response>, ClientError> {
        Ok(self.pipelined(req, version, n).await?)
    }

    async fn pipelined<R: Request>(
        &mut self,
        req: &R,
        version: i16,
        n: usize,
    ) -> Result<Vec<R::Response>, RequestError> {
        let api = ApiKey::try_from(R::KEY).unwrap_or(ApiKey::ApiVersions);
        let enc = |e: anyhow::Error| RequestError::Encode {
            api,
            version,
            reason: e.to_string(),
        };
        let first = self.next_correlation;
        let mut out = BytesMut::new();
        for _ in 0..n {
            let correlation = self.next_correlation;
            self.next_correlation = self.next_correlation.wrapping_add(1);
            let header = RequestHeader::default()
                .with_request_api_key(R::KEY)
                .with_request_api_version(version)
                .with_correlation_id(correlation)
                .with_client_id(Some(StrBytes::from_static_str("mirrorgate")));
            let start = out.len();
            out.put_i32(0);
            header
                .encode(&mut out, R::header_version(version))
                .map_err(enc)?;
            req.encode(&mut out, version).map_err(enc)?;
            let len = (out.len() - start - 4) as i32;
            out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        }

        let timeout = self.timeout;
        let addr = self.addr.clone();
        let fut = async {
            let sent = match self.stream.write_all(&out).await {
                Ok(()) => self.stream.flush().await,
                Err(e) => Err(e),
            };
            sent.map_err(|e| RequestError::Frame {
                addr: addr.clone(),
                source: e.into(),
            })?;
            let mut frames = Vec::with_capacity(n);
            for _ in 0..n {
                let frame = read_frame(&mut self.stream, &mut self.buf, 256 * 1024 * 1024)
                    .await
                    .map_err(|source| RequestError::Frame {
                        addr: addr.clone(),
                        source,
                    })?
                    .ok_or_else(|| RequestError::Closed { addr: addr.clone() })?;
                frames.push(frame);
            }
            Ok::<_, RequestError>(frames)
        };
        let frames =
            tokio::time::timeout(timeout, fut)
                .await
                .map_err(|_| RequestError::Timeout {
                    what: "request",
                    addr: self.addr.clone(),
                    after: timeout,
                })??;
        let dec = |e: anyhow::Error| RequestError::Decode {
            api,
            version,
            addr: self.addr.clone(),
            reason: e.to_string(),
        };
        let mut out = Vec::with_capacity(n);
        for (i, frame) in frames.into_iter().enumerate() {
            let want = first.wrapping_add(i as i32);
            let mut body = frame.slice(4..);
            let rh = ResponseHeader::decode(
                &mut body,
                <R::Response as HeaderVersion>::header_version(version),
            )
            .map_err(dec)?;
            if rh.correlation_id != want {
                return Err(RequestError::Correlation {
                    addr: self.addr.clone(),
                    got: rh.correlation_id,
                    want,
                });
            }
            out.push(R::Response::decode(&mut body, version).map_err(dec)?);
        }
        Ok(out)
    }
}

/// One partition of a Fetch response.
#[derive(Debug, Clone)]
pub struct FetchedPartition {
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Record batches (may end with a partial batch).
    pub records: bytes::Bytes,
}

/// A partition-level error answered by the broker.
#[derive(Debug, thiserror::Error)]
#[error("{api:?} for {topic}-{partition} failed with error code {error_code}")]
pub struct PartitionError {
    pub api: ApiKey,
    pub topic: String,
    pub partition: i32,
    pub error_code: i16,
}

/// Errors of the partition-level helpers.
#[derive(Debug, thiserror::Error)]
pub enum PartitionRequestError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error("{api:?} response from {addr} has no entry for {topic}-{partition}")]
    Missing {
        api: ApiKey,
        addr: String,
        topic: String,
        partition: i32,
    },
}

/// ListOffsets timestamp for the log start offset.
pub const EARLIEST: i64 = -2;
/// ListOffsets timestamp for the log end offset (high watermark for READ_UNCOMMITTED).
pub const LATEST: i64 = -1;

impl KafkaClient {
    /// The entry for `topic`-`partition` of a response, or why there is none usable.
    fn partition_result<T>(
        &self,
        api: ApiKey,
        topic: &str,
        partition: i32,
        found: Option<T>,
        error_code: impl Fn(&T) -> i16,
    ) -> Result<T, PartitionRequestError> {
        let p = found.ok_or_else(|| PartitionRequestError::Missing {
            api,
            addr: self.addr.clone(),
            topic: topic.to_string(),
            partition,
        })?;
        match error_code(&p) {
            0 => Ok(p),
            code => Err(PartitionError {
                api,
                topic: topic.to_string(),
                partition,
                error_code: code,
            }
            .into()),
        }
    }

    /// The offset for `timestamp` ([`EARLIEST`], [`LATEST`] or a time) of one partition.
    pub async fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<i64, PartitionRequestError> {
        let req = list_offsets_request([(topic, partition)], timestamp, 0);
        let resp = self.send(&req, 7).await?;
        let p = resp
            .topics
            .iter()
            .filter(|t| t.name.0.as_str() == topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition);
        let p =
            self.partition_result(ApiKey::ListOffsets, topic, partition, p, |p| p.error_code)?;
        Ok(p.offset)
    }

    /// The offsets for `timestamp` of many partitions this broker leads, in one request.
    pub async fn list_offsets(
        &mut self,
        partitions: &[(String, i32)],
        timestamp: i64,
    ) -> Result<std::collections::BTreeMap<(String, i32), i64>, PartitionRequestError> {
        let req = list_offsets_request(
            partitions.iter().map(|(t, p)| (t.as_str(), *p)),
            timestamp,
            0,
        );
        let resp = self.send(&req, 7).await?;
        let mut out = std::collections::BTreeMap::new();
        for (t, p) in partitions {
            let found = resp
                .topics
                .iter()
                .filter(|x| x.name.0.as_str() == t)
                .flat_map(|x| x.partitions.iter())
                .find(|x| x.partition_index == *p);
            let found =
                self.partition_result(ApiKey::ListOffsets, t, *p, found, |x| x.error_code)?;
            out.insert((t.clone(), *p), found.offset);
        }
        Ok(out)
    }

    /// Fetch one partition from `offset` (READ_UNCOMMITTED, no waiting), up to `max_bytes`.
    pub async fn fetch_partition(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<FetchedPartition, PartitionRequestError> {
        let req = single_partition_fetch(topic, partition, offset, max_bytes, 0);
        let resp = self.send(&req, 12).await?;
        let p = resp
            .responses
            .into_iter()
            .filter(|t| t.topic.0.as_str() == topic)
            .flat_map(|t| t.partitions.into_iter())
            .find(|p| p.partition_index == partition);
        let p = self.partition_result(ApiKey::Fetch, topic, partition, p, |p| p.error_code)?;
        Ok(FetchedPartition {
            error_code: p.error_code,
            high_watermark: p.high_watermark,
            log_start_offset: p.log_start_offset,
            records: p.records.unwrap_or_default(),
        })
    }
}

impl KafkaClient {
    /// Fetch one partition of the topic with id `topic_id` from `offset` (Fetch v13: by topic
    /// id, so a topic deleted and created again under the same name answers UNKNOWN_TOPIC_ID
    /// instead of the new topic's records), at once, up to `max_bytes`.
    pub async fn fetch_partition_by_id(
        &mut self,
        topic_id: uuid::Uuid,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<FetchedPartition, PartitionRequestError> {
        let mut req = single_partition_fetch("", partition, offset, max_bytes, 0);
        for t in &mut req.topics {
            t.topic_id = topic_id;
        }
        let resp = self.send(&req, 13).await?;
        let p = resp
            .responses
            .into_iter()
            .filter(|t| t.topic_id == topic_id)
            .flat_map(|t| t.partitions.into_iter())
            .find(|p| p.partition_index == partition);
        let name = topic_id.to_string();
        let p = self.partition_result(ApiKey::Fetch, &name, partition, p, |p| p.error_code)?;
        Ok(FetchedPartition {
            error_code: p.error_code,
            high_watermark: p.high_watermark,
            log_start_offset: p.log_start_offset,
            records: p.records.unwrap_or_default(),
        })
    }
}

/// A ListOffsets request (as a consumer, no leader epoch) for `timestamp` ([`EARLIEST`],
/// [`LATEST`] or a time) of `partitions`, each topic named once in the order first seen, at
/// `isolation_level` (0 READ_UNCOMMITTED: the log end; 1 READ_COMMITTED: the last stable
/// offset).
pub fn list_offsets_request<'a>(
    partitions: impl IntoIterator<Item = (&'a str, i32)>,
    timestamp: i64,
    isolation_level: i8,
) -> kafka_protocol::messages::ListOffsetsRequest {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let mut topics: Vec<ListOffsetsTopic> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = Default::default();
    for (t, p) in partitions {
        let i = *at.entry(t).or_insert_with(|| {
            topics.push(
                ListOffsetsTopic::default().with_name(StrBytes::from_string(t.to_string()).into()),
            );
            topics.len() - 1
        });
        topics[i].partitions.push(
            ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_current_leader_epoch(-1)
                .with_timestamp(timestamp),
        );
    }
    kafka_protocol::messages::ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation_level)
        .with_topics(topics)
}

/// A Fetch (version 12 and below: by topic name) of one partition from `offset` that answers at
/// once (no wait), as a replica-less consumer at `isolation_level` (0 READ_UNCOMMITTED,
/// 1 READ_COMMITTED).
pub fn single_partition_fetch(
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    isolation_level: i8,
) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    kafka_protocol::messages::FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_isolation_level(isolation_level)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(StrBytes::from_string(topic.to_string()).into())
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(offset)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(max_bytes)])])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_offsets_request_names_each_topic_once_in_first_seen_order_at_its_isolation() {
        let req = list_offsets_request([("b", 1), ("a", 0), ("b", 0)], LATEST, 1);
        let shown: Vec<(&str, Vec<i32>)> = req
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.0.as_str(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        assert_eq!(shown, vec![("b", vec![1, 0]), ("a", vec![0])]);
        assert_eq!(req.isolation_level, 1);
        assert_eq!(req.replica_id.0, -1);
        let p = &req.topics[0].partitions[0];
        assert_eq!((p.timestamp, p.current_leader_epoch), (LATEST, -1));
    }
}
