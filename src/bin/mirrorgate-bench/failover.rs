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

/// The failover of `topics × partitions` partitions with `instances` gateways in front of the
/// destination (sharing a state topic when more than one). With several, the same failover with
/// one instance runs first, in the same run, for the ratio.
pub fn run(topics: usize, partitions: i32, instances: usize) -> Result<serde_json::Value, String> {
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let destination = crate::cluster_brokers(&addrs, "destination")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let total = topics as i64 * i64::from(partitions);
    let (seconds, everywhere) =
        rt.block_on(one_failover(&destination, topics, partitions, instances))?;
    if instances <= 1 {
        return Ok(
            json!({ "bench": "failover", "instances": 1, "partitions": total,
                          "seconds": seconds, "topics": topics }),
        );
    }
    let (single, _) = rt.block_on(one_failover(&destination, topics, partitions, 1))?;
    let takeover = rt.block_on(crate::takeover::run(
        &destination,
        topics,
        partitions,
        instances,
    ))?;
    Ok(json!({
        "bench": "failover", "instances": instances, "partitions": total, "seconds": seconds,
        "all_instances_stopped_seconds": everywhere,
        "single_instance_seconds": single, "ratio_to_single_instance": seconds / single,
        "takeover_seconds": takeover.seconds,
        "takeover_session_timeout_seconds": takeover.session_timeout_s,
        "topics": topics,
    }))
}

/// Seconds from the failover call on the first instance to every partition STOPPED there, and
/// to every partition STOPPED on every instance (each adopts the first one's handover).
async fn one_failover(
    destination: &[String],
    topics: usize,
    partitions: i32,
    instances: usize,
) -> Result<(f64, f64), String> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let prefix = format!("bench-fo-{stamp}");
    let names: Vec<String> = (0..topics).map(|i| format!("{prefix}-{i}")).collect();
    let state_topic = format!("{prefix}-state");
    let total = topics as i64 * i64::from(partitions);
    let mut gws = Vec::new();
    let mut admins = Vec::new();
    let mut states = Vec::new();
    {
        let specs: Vec<(String, i32)> = names.iter().map(|n| (n.clone(), partitions)).collect();
        crate::topics::create(&destination[0], &specs).await?;
    }
    for i in 0..instances.max(1) {
        let base = 17192u16 + 100 * i as u16;
        let state = std::env::temp_dir().join(format!("mirrorgate-bench-failover-{stamp}-{i}"));
        let peers = if instances > 1 {
            format!("instances:\n  id: bench-{i}\n  state_topic: {state_topic}\n")
        } else {
            String::new()
        };
        let cfg = crate::bench_config(
            destination,
            base,
            &state,
            &format!("mirrors:\n  - name: bench\n    topics: [\"regex:{prefix}-[0-9]+\"]\n{peers}"),
        )?;
        if i == 0 && instances > 1 {
            mirrorgate::app::peers::init_state_topic(&cfg).await?;
        }
        gws.push(
            mirrorgate::app::Gateway::start(cfg)
                .await
                .map_err(|e| e.to_string())?,
        );
        admins.push(format!("127.0.0.1:{}", base + 20));
        states.push(state);
    }
    let (gw, admin_addr) = (&gws[0], admins[0].clone());
    let base = 17192u16;
    // Wait until the mirror has every partition, every instance is ready (PSM rebuilt, lease
    // held) and the first sees the others.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (_, m) = admin(&admin_addr, hyper::Method::GET, "/v1/mirrors/bench").await?;
        let (_, peers) = admin(&admin_addr, hyper::Method::GET, "/v1/instances").await?;
        let others = peers["others_alive"].as_array().map(Vec::len).unwrap_or(0);
        if m["states"]["MIRRORING"].as_i64() == Some(total)
            && gws.iter().all(|g| g.readiness().ready)
            && others + 1 == instances.max(1)
        {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "mirror not ready: {m}; {peers}; {:?}",
                gw.readiness().reasons
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Mirrored data of 3 producers in every partition, through the mirror listener.
    let mirror_ports = [base + 10, base + 11];
    write_mirrored(&topic_leaders(gw, &names), mirror_ports).await?;
    let started = Instant::now();
    let (s, body) = admin(
        &admin_addr,
        hyper::Method::POST,
        "/v1/mirrors/bench/failover",
    )
    .await?;
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
    wait_stopped(&admins, total, started).await?;
    let everywhere = started.elapsed().as_secs_f64();
    if instances > 1 {
        // Every other instance fenced before the barrier (else the failover could not end).
        let (_, peers) = admin(&admin_addr, hyper::Method::GET, "/v1/instances").await?;
        let fenced = peers["failovers"][0]["fenced"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0);
        if fenced + 1 != instances {
            return Err(format!("not every instance fenced: {peers}"));
        }
    }
    for g in &gws {
        g.shutdown().await;
    }
    for s in &states {
        let _ = std::fs::remove_dir_all(s);
    }
    Ok((seconds, everywhere))
}

/// Wait until mirror `bench` has `total` partitions STOPPED on every gateway of `admins` (300 s
/// after `started` at most).
pub(crate) async fn wait_stopped(
    admins: &[String],
    total: i64,
    started: Instant,
) -> Result<(), String> {
    for a in admins {
        loop {
            let (_, m) = admin(a, hyper::Method::GET, "/v1/mirrors/bench").await?;
            if m["states"]["STOPPED"].as_i64() == Some(total) {
                break;
            }
            if started.elapsed() > Duration::from_secs(300) {
                return Err(format!("failover did not complete on {a}: {m}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}

/// The leaders of every partition of `names`, as the gateway `gw` knows them.
pub(crate) fn topic_leaders(
    gw: &mirrorgate::app::Gateway,
    names: &[String],
) -> Vec<(String, Vec<i32>)> {
    names
        .iter()
        .map(|n| {
            (
                n.clone(),
                gw.cluster.topic(n).map(|t| t.leaders).unwrap_or_default(),
            )
        })
        .collect()
}

/// Mirrored batches of 3 producers (2 each) into every partition of `info`, through the mirror
/// listener ports of nodes 1 and 2.
pub(crate) async fn write_mirrored(
    info: &[(String, Vec<i32>)],
    mirror_ports: [u16; 2],
) -> Result<(), String> {
    for (node, port) in [(1, mirror_ports[0]), (2, mirror_ports[1])] {
        let mut c = KafkaClient::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(10))
            .await
            .map_err(|e| e.to_string())?;
        for seq in 0..2 {
            for pid in 0..3i64 {
                let mut data = Vec::new();
                for (t, leaders) in info {
                    let parts: Vec<PartitionProduceData> = leaders
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| **l == node)
                        .map(|(p, _)| {
                            PartitionProduceData::default()
                                .with_index(p as i32)
                                .with_records(Some(batch(5_000_000 + pid, seq)))
                        })
                        .collect();
                    if !parts.is_empty() {
                        data.push(
                            TopicProduceData::default()
                                .with_name(StrBytes::from_string(t.clone()).into())
                                .with_partition_data(parts),
                        );
                    }
                }
                let r = c
                    .send(
                        &ProduceRequest::default()
                            .with_acks(-1)
                            .with_timeout_ms(30_000)
                            .with_topic_data(data),
                        9,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                if let Some(p) = r
                    .responses
                    .iter()
                    .flat_map(|t| t.partition_responses.iter())
                    .find(|p| p.error_code != 0)
                {
                    return Err(format!("mirror produce failed: error {}", p.error_code));
                }
            }
        }
    }
    Ok(())
}
