//! What a partition task reads of the two logs: the destination leader (direct connection,
//! reads only) and the gateway's mirror-listener port for it, the source leader (one kept
//! connection), their offsets, the batch found at an offset and a window of batches.
//!
//! Owns: these connections and the mapping of their errors to retry / fail.
//! Must not touch: the offset map and appends (the parent's loop).

use std::time::Duration;

use crate::client::{KafkaClient, EARLIEST, LATEST};
use crate::protocol::batch::{BatchHeader, BatchWalker};

use super::{Halt, Step, Task, FETCH_WAIT};
use crate::client::mirror_ops;

/// How long a task starting to mirror waits for the destination's high watermark to reach its
/// leader's log end before it tries again later.
const SETTLE_HIGH_WATERMARK: Duration = Duration::from_secs(60);

impl Task {
    // ------------------------------------------------------------------ destination side

    pub(super) fn dest_leader(&self) -> Option<i32> {
        self.m
            .cluster
            .topic(&self.topic)
            .and_then(|t| t.leaders.get(self.partition as usize).copied())
            .filter(|l| *l >= 0)
    }

    /// A direct connection to the destination leader (reads only).
    pub(super) async fn dest_reader(&self) -> Step<KafkaClient> {
        let addr = self
            .dest_leader()
            .and_then(|l| self.m.cluster.broker_addr(l))
            .ok_or_else(|| {
                Halt::Retry(format!("no destination leader known for {}", self.label()))
            })?;
        self.m
            .cluster
            .client(&addr, self.m.dest_timeout)
            .await
            .map_err(|e| Halt::Retry(e.to_string()))
    }

    /// The gateway's mirror-listener port of the destination leader.
    pub(super) fn gateway_addr(&self) -> Step<String> {
        let leader = self.dest_leader().ok_or_else(|| {
            Halt::Retry(format!("no destination leader known for {}", self.label()))
        })?;
        let port = self.m.mirror_listener.port_for_node(leader).ok_or_else(|| {
            Halt::Fail(format!(
                "destination broker {leader} has no port on the mirror listener (node_id_base/max_brokers)"
            ))
        })?;
        Ok(format!("{}:{port}", self.m.mirror_host))
    }

    pub(super) async fn dest_end(&self) -> Step<i64> {
        let mut c = self.dest_reader().await?;
        c.list_offset(&self.topic, self.partition, LATEST)
            .await
            .map_err(|e| Halt::Retry(e.to_string()))
    }

    /// The destination's log end once every record its leader appended is readable: an append
    /// of an agent owner that was replaced may sit at the leader above the high watermark
    /// (a follower slow but in sync), invisible to a read, and the destination would get the
    /// batch twice if it were mirrored again (review G2). Waits (bounded) until the high
    /// watermark reaches the leader's log end.
    pub(super) async fn dest_settled_end(&mut self) -> Step<i64> {
        let deadline = std::time::Instant::now() + SETTLE_HIGH_WATERMARK;
        loop {
            let mut c = self.dest_reader().await?;
            let hw = c
                .list_offset(&self.topic, self.partition, LATEST)
                .await
                .map_err(|e| Halt::Retry(e.to_string()))?;
            let leo = crate::client::ops::log_end_offset(&mut c, &self.topic, self.partition)
                .await
                .map_err(Halt::Retry)?;
            if hw >= leo {
                return Ok(hw);
            }
            if std::time::Instant::now() >= deadline {
                return Err(Halt::Retry(format!(
                    "the destination's high watermark {hw} stays below its leader's log end {leo} (a follower lags): \
                     mirroring waits until what the leader holds is readable"
                )));
            }
            tracing::debug!(topic = %self.topic, partition = self.partition, hw, leo, "waiting for the destination's high watermark to reach its log end");
            self.sleep(Duration::from_millis(200)).await?;
        }
    }

    pub(super) async fn dest_start(&self) -> Step<i64> {
        let mut c = self.dest_reader().await?;
        c.list_offset(&self.topic, self.partition, crate::client::EARLIEST)
            .await
            .map_err(|e| Halt::Retry(e.to_string()))
    }

    /// The destination's batches from the one holding `offset` on, as much as one fetch
    /// returns (up to 1 MiB; may end with a partial batch).
    pub(super) async fn dest_fetch(&self, offset: i64) -> Step<bytes::Bytes> {
        let mut c = self.dest_reader().await?;
        let f = c
            .fetch_partition(&self.topic, self.partition, offset, 1 << 20)
            .await
            .map_err(|e| Halt::Retry(e.to_string()))?;
        Ok(f.records)
    }

    /// The first batch (header and CRC) of the destination at `offset`.
    pub(super) async fn dest_batch_at(&self, offset: i64) -> Step<Option<BatchHeader>> {
        let records = self.dest_fetch(offset).await?;
        for item in BatchWalker::fetched(&records) {
            let (h, _) = item.map_err(|e| Halt::Fail(format!("corrupt destination batch: {e}")))?;
            if h.last_offset() >= offset {
                return Ok(Some(h));
            }
        }
        Ok(None)
    }

    // ------------------------------------------------------------------ source side

    pub(super) async fn source_client(&mut self) -> Step<()> {
        if self.src.is_some() {
            return Ok(());
        }
        let addr = self
            .m
            .source_meta
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|m| m.leader_addr(&self.topic, self.partition))
            .ok_or_else(|| Halt::Retry("no source leader known".into()))?;
        let timeout = Duration::from_millis(self.m.source.connect_timeout_ms).max(FETCH_WAIT * 4);
        let connect = KafkaClient::connect_with(&self.m.source_connector, &addr, timeout);
        let c = tokio::select! {
            c = connect => c.map_err(|e| Halt::Retry(e.to_string()))?,
            _ = self.stop.changed() => return Err(Halt::Stop),
        };
        self.src = Some(c);
        Ok(())
    }

    pub(super) async fn source_offset(&mut self, which: i64) -> Step<i64> {
        self.source_client().await?;
        let Some(c) = self.src.as_mut() else {
            return Err(Halt::Retry("no source connection".into()));
        };
        let r = tokio::select! {
            r = c.list_offset(&self.topic, self.partition, which) => r,
            _ = self.stop.changed() => return Err(Halt::Stop),
        };
        r.map_err(|e| {
            self.src = None;
            self.m.refresh.notify_one();
            Halt::Retry(format!("source ListOffsets: {e}"))
        })
    }

    pub(super) async fn source_fetch(
        &mut self,
        offset: i64,
    ) -> Step<crate::client::FetchedPartition> {
        self.source_client().await?;
        let Some(c) = self.src.as_mut() else {
            return Err(Halt::Retry("no source connection".into()));
        };
        let r = tokio::select! {
            r = mirror_ops::fetch(c, &self.topic, self.partition, offset, self.max_bytes, FETCH_WAIT) => r,
            _ = self.stop.changed() => return Err(Halt::Stop),
        };
        match r {
            Ok(f) if f.error_code == 0 => Ok(f),
            Ok(f) if f.error_code == 1 => {
                // OFFSET_OUT_OF_RANGE.
                let start = self.source_offset(EARLIEST).await?;
                let end = self.source_offset(LATEST).await?;
                if offset < start {
                    Err(Halt::Fail(format!(
                        "source records {offset}..{start} were deleted (retention) before they were mirrored; \
                         the destination can no longer equal the source: recreate the destination topic to mirror from the source log start"
                    )))
                } else if offset > end {
                    Err(Halt::Fail(format!(
                        "the source log end {end} is below the next offset to mirror {offset}: the source lost records \
                         (unclean leader election or a recreated topic); recreate the destination topic"
                    )))
                } else {
                    Err(Halt::Retry(format!(
                        "offset {offset} out of range on the source"
                    )))
                }
            }
            Ok(f) => {
                self.src = None;
                self.m.refresh.notify_one();
                Err(Halt::Retry(format!(
                    "source fetch error code {}",
                    f.error_code
                )))
            }
            Err(e) => {
                self.src = None;
                self.m.refresh.notify_one();
                Err(Halt::Retry(format!("source fetch: {e}")))
            }
        }
    }
}
