//! `mirrorgate-bench failover`: a mirror of `topics × partitions` partitions on the rig's
//! destination, each holding mirrored batches of a few producers; the failover is called through
//! the admin API and timed until every partition is STOPPED (barrier written, PSM cleared).

use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use mirrorgate::client::KafkaClient;
use serde_json::json;

use crate::Clusters;

fn batch(pid: i64, seq: i32) -> bytes::Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let rec = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp: now,
        key: Some(bytes::Bytes::from_static(b"k")),
        value: Some(bytes::Bytes::from_static(b"mirrored")),
        headers: Default::default(),
    };
    let mut buf = bytes::BytesMut::new();
    let _ = RecordBatchEncoder::encode(
        &mut buf,
        [&rec],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    );
    buf.freeze()
}

/// An admin API call of the gateway at `addr`: the status and the JSON body (null when not JSON).
pub(crate) async fn admin(
    addr: &str,
    method: hyper::Method,
    path: &str,
) -> Result<(u16, serde_json::Value), String> {
    let (s, b) = mirrorgate::admin::client::call(addr, method, path, None, None)
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        s,
        serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
    ))
}

pub fn run(topics: usize, partitions: i32) -> Result<serde_json::Value, String> {
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let destination = crate::cluster_brokers(&addrs, "destination")?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let prefix = format!("bench-fo-{stamp}");
    let names: Vec<String> = (0..topics).map(|i| format!("{prefix}-{i}")).collect();
    let state = std::env::temp_dir().join(format!("mirrorgate-bench-failover-{stamp}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let base = 17192u16;
    let cfg = crate::bench_config(
        &destination,
        base,
        &state,
        &format!("mirrors:\n  - name: bench\n    topics: [\"regex:{prefix}-.*\"]\n"),
    )?;
    let admin_addr = format!("127.0.0.1:{}", base + 20);
    let total = topics as i64 * i64::from(partitions);
    rt.block_on(async {
        let specs: Vec<(String, i32)> = names.iter().map(|n| (n.clone(), partitions)).collect();
        crate::topics::create(&destination[0], &specs).await?;
        let gw = mirrorgate::app::Gateway::start(cfg).await.map_err(|e| e.to_string())?;
        // Wait until the mirror has every partition and the PSM of each is rebuilt.
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let (_, m) = admin(&admin_addr, hyper::Method::GET, "/v1/mirrors/bench").await?;
            if m["states"]["MIRRORING"].as_i64() == Some(total) && gw.readiness().ready {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("mirror not ready: {m}; {:?}", gw.readiness().reasons));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Mirrored data of 3 producers in every partition, through the mirror listener.
        let mirror_ports: Vec<u16> = (1..=2).map(|n| base + 10 + n as u16 - 1).collect();
        let info: Vec<(String, Vec<i32>)> = names.iter().map(|n| (n.clone(), gw.cluster.topic(n).map(|t| t.leaders).unwrap_or_default())).collect();
        for (node, port) in [(1, mirror_ports[0]), (2, mirror_ports[1])] {
            let mut c = KafkaClient::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(10)).await.map_err(|e| e.to_string())?;
            for seq in 0..2 {
                for pid in 0..3i64 {
                    let mut data = Vec::new();
                    for (t, leaders) in &info {
                        let parts: Vec<PartitionProduceData> = leaders
                            .iter()
                            .enumerate()
                            .filter(|(_, l)| **l == node)
                            .map(|(p, _)| PartitionProduceData::default().with_index(p as i32).with_records(Some(batch(5_000_000 + pid, seq))))
                            .collect();
                        if !parts.is_empty() {
                            data.push(TopicProduceData::default().with_name(StrBytes::from_string(t.clone()).into()).with_partition_data(parts));
                        }
                    }
                    let r = c.send(&ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(data), 9).await.map_err(|e| e.to_string())?;
                    if let Some(p) = r.responses.iter().flat_map(|t| t.partition_responses.iter()).find(|p| p.error_code != 0) {
                        return Err(format!("mirror produce failed: error {}", p.error_code));
                    }
                }
            }
        }
        let started = Instant::now();
        let (s, body) = admin(&admin_addr, hyper::Method::POST, "/v1/mirrors/bench/failover").await?;
        if s != 202 {
            return Err(format!("failover call answered {s}: {body}"));
        }
        loop {
            let (_, m) = admin(&admin_addr, hyper::Method::GET, "/v1/mirrors/bench").await?;
            if m["states"]["STOPPED"].as_i64() == Some(total) {
                break;
            }
            if started.elapsed() > Duration::from_secs(300) {
                return Err(format!("failover did not complete: {m}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        gw.shutdown().await;
        let _ = std::fs::remove_dir_all(&state);
        Ok(json!({ "bench": "failover", "partitions": total, "seconds": seconds, "topics": topics }))
    })
}
