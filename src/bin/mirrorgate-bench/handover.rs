//! `mirrorgate-bench handover`: how a failover's handover naming many screened producer ids
//! travels over the state topic (review G9). The handover (`stopped/<mirror>`, every screened id
//! with its epoch, timestamp and coordinator epoch, ids and times scattered as real ones are) is
//! appended to a state topic created on the rig's `destination` cluster with the brokers'
//! default `max.message.bytes` (1 MiB), then read back from the topic's start by a fresh reader
//! and put back together.
//!
//! Figures (last line, JSON): `ids`, `json_bytes` (the record as one JSON value), `records`
//! (parts and head appended), `append_seconds`, `read_seconds` (the fresh reader, to the
//! reassembled record), `ids_read` (must equal `ids`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorgate::client::{ops, KafkaClient};
use mirrorgate::cluster::ClusterView;
use mirrorgate::config::ClusterConfig;
use mirrorgate::instances::log::{parts, KafkaStateLog, StateLog};
use mirrorgate::instances::records::{ScreenedProducer, Stopped};
use mirrorgate::instances::view::PeerRecord;
use mirrorgate::mirror::screening::ScreenEntry;
use serde_json::json;

use super::Clusters;

/// A handover of `ids` screened producer ids.
fn handover(ids: u64) -> PeerRecord {
    PeerRecord::Stopped(Stopped {
        mirror: "bench".into(),
        failover_id: "bench-f1".into(),
        by: "bench".into(),
        at_ms: 1,
        partitions: vec![],
        screened: (0..ids)
            .map(|i| {
                let x = i.wrapping_mul(6_364_136_223_846_793_005) >> 20;
                ScreenedProducer {
                    producer_id: (x % 4_000_000_000) as i64,
                    entry: ScreenEntry {
                        max_epoch: (x % 7) as i16,
                        last_timestamp: 1_796_000_000_000 + (x % 86_400_000) as i64,
                        added_ms: 1_796_000_000_000,
                        coordinator_epoch: -1,
                    },
                }
            })
            .collect(),
    })
}

pub fn run(ids: u64) -> Result<serde_json::Value, String> {
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let bootstrap: Vec<String> = addrs
        .iter()
        .find(|(n, _)| n == "destination")
        .map(|(_, a)| a.split(',').map(str::to_string).collect())
        .ok_or("no destination cluster")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let topic = format!("__mirrorgate_bench_handover_{}", std::process::id());
        let mut c = KafkaClient::connect(&bootstrap[0], Duration::from_secs(10))
            .await
            .map_err(|e| e.to_string())?;
        // The brokers' default max.message.bytes (1 MiB): only compaction is set.
        ops::create_topic(
            &mut c,
            &topic,
            1,
            1,
            &[("cleanup.policy".into(), "compact".into())],
        )
        .await?;
        let result = measure(&bootstrap, &topic, ids).await;
        super::topics::delete(&bootstrap[0], std::slice::from_ref(&topic)).await;
        result
    })
}

async fn measure(bootstrap: &[String], topic: &str, ids: u64) -> Result<serde_json::Value, String> {
    let view = || -> Result<Arc<ClusterView>, String> {
        let cfg: ClusterConfig =
            serde_json::from_value(json!({ "bootstrap": bootstrap })).map_err(|e| e.to_string())?;
        Ok(ClusterView::new(
            cfg,
            mirrorgate::client::Connector::plain(),
            mirrorgate::metrics::Metrics::new(),
        ))
    };
    let record = handover(ids);
    let json_bytes = serde_json::to_vec(&record)
        .map_err(|e| e.to_string())?
        .len();
    let records = parts::split(&record)?.len();
    let writer_view = view()?;
    writer_view.refresh().await.map_err(|e| e.to_string())?;
    let writer = KafkaStateLog::new(writer_view, topic.to_string(), Duration::from_secs(30));
    let t = Instant::now();
    writer.append(&record).await?;
    let append_seconds = t.elapsed().as_secs_f64();

    let reader_view = view()?;
    reader_view.refresh().await.map_err(|e| e.to_string())?;
    let reader = KafkaStateLog::new(reader_view, topic.to_string(), Duration::from_secs(30));
    let t = Instant::now();
    let mut next = 0;
    let mut ids_read = None;
    while ids_read.is_none() {
        if t.elapsed() > Duration::from_secs(300) {
            return Err("the handover was not read back within 300 s".into());
        }
        let r = reader.read(next).await?;
        for rec in r.records {
            if let PeerRecord::Stopped(s) = rec {
                ids_read = Some(s.screened.len());
            }
        }
        if r.next >= r.high_watermark && ids_read.is_none() && r.next == next {
            return Err(format!("read to the end ({}) without the handover", r.next));
        }
        next = r.next;
    }
    let read_seconds = t.elapsed().as_secs_f64();
    Ok(json!({
        "bench": "handover",
        "ids": ids,
        "json_bytes": json_bytes,
        "records": records,
        "append_seconds": (append_seconds * 1000.0).round() / 1000.0,
        "read_seconds": (read_seconds * 1000.0).round() / 1000.0,
        "ids_read": ids_read,
        "max_message_bytes": "broker default (1 MiB)",
    }))
}
