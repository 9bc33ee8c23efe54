//! The audit topic writer: takes events from the trail's queue and appends them, as JSON
//! records keyed by mirror, to partition 0 of `admin.audit_topic` on the destination cluster,
//! through the gateway's own client (its TLS and SASL settings).
//!
//! Owns: the writer loop (batching, retry with back-off, the flush at shutdown) over a small
//! [`AuditSink`] seam, and [`TopicSink`], the sink that talks to the brokers (creating the topic
//! once when it is missing). Must not touch: how events are made ([`super::AuditEvent`]) or the
//! admin API.
//!
//! The topic, when missing, is created with one partition (one partition keeps the events of
//! every gateway instance in the order the brokers took them), `cleanup.policy=delete`, and a
//! replication factor of 3, or the number of brokers when there are fewer.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{AuditEvent, AuditMetrics};
use crate::client::{ops, KafkaClient};
use crate::cluster::ClusterView;

/// Events written in one Produce request at most.
pub const BATCH: usize = 500;
/// How long the writer keeps trying to flush queued events once the gateway stops.
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Where the writer appends a batch of events.
pub trait AuditSink: Send {
    /// Append `events` durably (acks=all), all or none; the error says why not.
    fn write(
        &mut self,
        events: &[AuditEvent],
    ) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

/// Take events from `rx` and write them to `sink` until `shutdown` fires (then flush for at
/// most `flush`, [`SHUTDOWN_FLUSH`] in the gateway) or every sender is gone. A failed write is retried with back-off;
/// events keep their order.
pub async fn run<S: AuditSink>(
    mut rx: mpsc::Receiver<AuditEvent>,
    mut sink: S,
    metrics: Arc<AuditMetrics>,
    mut shutdown: watch::Receiver<bool>,
    flush: Duration,
) {
    let mut batch: Vec<AuditEvent> = Vec::with_capacity(BATCH);
    let mut backoff = BACKOFF_MIN;
    let mut flush_until: Option<tokio::time::Instant> = None;
    loop {
        if batch.is_empty() {
            if flush_until.is_some() {
                // Stopping: write what is queued now, then stop.
                match rx.try_recv() {
                    Ok(e) => batch.push(e),
                    Err(_) => return,
                }
            } else {
                tokio::select! {
                    got = rx.recv() => match got {
                        Some(e) => batch.push(e),
                        None => return,
                    },
                    _ = shutdown.changed() => {
                        flush_until = Some(tokio::time::Instant::now() + flush);
                        continue;
                    }
                }
            }
        }
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        let attempt = match flush_until {
            Some(deadline) => match tokio::time::timeout_at(deadline, sink.write(&batch)).await {
                Ok(r) => r,
                Err(_) => Err("the shutdown flush ran out of time".into()),
            },
            None => sink.write(&batch).await,
        };
        match attempt {
            Ok(()) => {
                metrics
                    .events
                    .with_label_values(&["written"])
                    .inc_by(batch.len() as u64);
                metrics.pending.sub(batch.len() as i64);
                batch.clear();
                backoff = BACKOFF_MIN;
            }
            Err(why) => {
                metrics.events.with_label_values(&["failed"]).inc();
                if let Some(deadline) = flush_until {
                    if tokio::time::Instant::now() >= deadline {
                        let left = batch.len() + rx.len();
                        tracing::error!(target: "mirrorgate::audit", error = %why, events = left,
                            "audit events not written to the topic before shutdown (they are in the log)");
                        return;
                    }
                }
                tracing::warn!(target: "mirrorgate::audit", error = %why, events = batch.len(),
                    retry_in_ms = backoff.as_millis() as u64, "cannot write audit events to the topic; retrying");
                let wait = match flush_until {
                    Some(deadline) => {
                        backoff.min(deadline.saturating_duration_since(tokio::time::Instant::now()))
                    }
                    None => backoff,
                };
                let sleep = tokio::time::sleep(wait);
                tokio::pin!(sleep);
                tokio::select! {
                    _ = &mut sleep => {}
                    _ = shutdown.changed(), if flush_until.is_none() => {
                        flush_until = Some(tokio::time::Instant::now() + flush);
                    }
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// The sink on the destination cluster.
pub struct TopicSink {
    view: Arc<ClusterView>,
    topic: String,
    timeout: Duration,
    client: Option<KafkaClient>,
}

impl TopicSink {
    pub fn new(view: Arc<ClusterView>, topic: String, timeout: Duration) -> Self {
        TopicSink {
            view,
            topic,
            timeout,
            client: None,
        }
    }

    /// The address of partition 0's leader, creating the topic first when the cluster does not
    /// have it.
    async fn leader(&mut self) -> Result<String, String> {
        if self.view.topic(&self.topic).is_none() {
            let _ = self.view.refresh().await;
        }
        if self.view.topic(&self.topic).is_none() {
            self.create().await?;
            self.view.refresh().await.map_err(|e| e.to_string())?;
        }
        let info = self
            .view
            .topic(&self.topic)
            .ok_or_else(|| format!("topic {:?} is not in the metadata yet", self.topic))?;
        let node = info.leaders.first().copied().unwrap_or(-1);
        self.view
            .broker_addr(node)
            .ok_or_else(|| format!("no leader known for {}-0", self.topic))
    }

    async fn create(&self) -> Result<(), String> {
        let brokers = self.view.brokers();
        let Some((_, addr)) = brokers.first() else {
            return Err("no destination broker known".into());
        };
        let rf = brokers.len().clamp(1, 3) as i16;
        let mut c = self
            .view
            .client(addr, self.timeout)
            .await
            .map_err(|e| e.to_string())?;
        ops::create_topic(
            &mut c,
            &self.topic,
            1,
            rf,
            &[("cleanup.policy".into(), "delete".into())],
        )
        .await?;
        tracing::info!(target: "mirrorgate::audit", topic = %self.topic, replication_factor = rf,
            "created the audit topic");
        Ok(())
    }
}

/// Encode events as one batch of JSON records keyed by mirror (v2, uncompressed, no producer id).
pub fn encode(events: &[AuditEvent]) -> Result<bytes::Bytes, String> {
    let records = events
        .iter()
        .map(|e| {
            let value = serde_json::to_vec(e).map_err(|x| x.to_string())?;
            Ok((
                bytes::Bytes::from(e.mirror.clone()),
                bytes::Bytes::from(value),
                e.at_ms,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    ops::plain_batch(records.into_iter()).map_err(|e| format!("the audit batch: {e}"))
}

impl AuditSink for TopicSink {
    async fn write(&mut self, events: &[AuditEvent]) -> Result<(), String> {
        let batch = encode(events)?;
        let leader = self.leader().await?;
        if self
            .client
            .as_ref()
            .map(|c| c.addr() != leader)
            .unwrap_or(true)
        {
            self.client = Some(
                self.view
                    .client(&leader, self.timeout)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let Some(c) = self.client.as_mut() else {
            return Err("no connection".into());
        };
        match ops::produce_one(c, &self.topic, 0, batch, None).await {
            Ok((0, _, _)) => Ok(()),
            Ok((code, _, msg)) => {
                // NOT_LEADER and friends: ask the metadata again before the retry.
                self.client = None;
                let _ = self.view.refresh().await;
                Err(format!(
                    "Produce to {}-0 answered error code {code}{}",
                    self.topic,
                    msg.map(|m| format!(" ({m})")).unwrap_or_default()
                ))
            }
            Err(e) => {
                self.client = None;
                Err(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditNote, AuditTrail};
    use std::sync::Mutex;

    /// A sink that fails its first `fail` writes, then keeps what it is given.
    #[derive(Clone, Default)]
    struct FakeSink {
        fail: Arc<Mutex<usize>>,
        written: Arc<Mutex<Vec<AuditEvent>>>,
        attempts: Arc<Mutex<usize>>,
    }

    impl AuditSink for FakeSink {
        async fn write(&mut self, events: &[AuditEvent]) -> Result<(), String> {
            *self.attempts.lock().unwrap() += 1;
            let mut f = self.fail.lock().unwrap();
            if *f > 0 {
                *f -= 1;
                return Err("broker away".into());
            }
            self.written.lock().unwrap().extend_from_slice(events);
            Ok(())
        }
    }

    fn event(action: &str) -> AuditEvent {
        AuditEvent::new(
            "i",
            &format!("/v1/mirrors/m/{action}"),
            "p",
            200,
            AuditNote::default(),
        )
    }

    fn metrics() -> Arc<AuditMetrics> {
        Arc::new(AuditMetrics::new().expect("metrics"))
    }

    const FLUSH: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn events_reach_the_sink_in_order_after_failed_writes_are_retried() {
        let m = metrics();
        let (trail, rx) = AuditTrail::with_topic(m.clone());
        let sink = FakeSink::default();
        *sink.fail.lock().unwrap() = 3;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(rx, sink.clone(), m.clone(), stop_rx, FLUSH));
        let sent: Vec<AuditEvent> = ["pause", "resume", "failover"]
            .iter()
            .map(|a| event(a))
            .collect();
        for e in &sent {
            trail.record(e.clone());
        }
        // Three failures back off 0.2 + 0.4 + 0.8 s.
        for _ in 0..100 {
            if sink.written.lock().unwrap().len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(*sink.written.lock().unwrap(), sent);
        assert_eq!(m.events.with_label_values(&["failed"]).get(), 3);
        assert_eq!(m.events.with_label_values(&["written"]).get(), 3);
        assert_eq!(m.pending.get(), 0);
        let _ = stop.send(true);
        task.await.expect("writer stops");
    }

    #[tokio::test]
    async fn events_queued_at_shutdown_are_flushed_before_the_writer_stops() {
        let m = metrics();
        let (trail, rx) = AuditTrail::with_topic(m.clone());
        let sink = FakeSink::default();
        let (stop, stop_rx) = watch::channel(false);
        trail.record(event("pause"));
        trail.record(event("resume"));
        let _ = stop.send(true);
        run(rx, sink.clone(), m.clone(), stop_rx, FLUSH).await;
        assert_eq!(sink.written.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_sink_that_never_recovers_does_not_hold_the_shutdown_past_its_bound() {
        let m = metrics();
        let (trail, rx) = AuditTrail::with_topic(m.clone());
        let sink = FakeSink::default();
        *sink.fail.lock().unwrap() = usize::MAX;
        let (stop, stop_rx) = watch::channel(false);
        trail.record(event("failover"));
        let started = tokio::time::Instant::now();
        let task = tokio::spawn(run(rx, sink.clone(), m.clone(), stop_rx, FLUSH));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = stop.send(true);
        task.await.expect("writer stops");
        // Not a timing check: a writer that ignored its bound would retry for ever.
        assert!(started.elapsed() < Duration::from_secs(30));
        assert!(sink.written.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn many_queued_events_are_written_in_batches_of_at_most_batch() {
        let m = metrics();
        let (trail, rx) = AuditTrail::with_topic(m.clone());
        let sink = FakeSink::default();
        for _ in 0..(BATCH * 2 + 1) {
            trail.record(event("pause"));
        }
        let (stop, stop_rx) = watch::channel(false);
        let _ = stop.send(true);
        run(rx, sink.clone(), m, stop_rx, FLUSH).await;
        assert_eq!(sink.written.lock().unwrap().len(), BATCH * 2 + 1);
        assert_eq!(*sink.attempts.lock().unwrap(), 3);
    }

    #[test]
    fn a_batch_of_events_encodes_as_json_records_keyed_by_mirror() {
        use kafka_protocol::records::RecordBatchDecoder;
        let events = vec![event("pause"), event("resume")];
        let mut b = encode(&events).expect("encode");
        let recs = RecordBatchDecoder::decode(&mut b).expect("decode").records;
        assert!(b.is_empty(), "one batch holds every event");
        assert_eq!(recs.len(), 2);
        assert_eq!(
            recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![0, 1],
            "offsets count up within the batch"
        );
        let back: AuditEvent =
            serde_json::from_slice(recs[1].value.as_ref().expect("value")).expect("json");
        assert_eq!(back, events[1]);
        assert_eq!(recs[0].key.as_deref(), Some(&b"m"[..]));
    }
}
