//! The chaos run's producer-state probe. At the planned failover's quiet point (the source's
//! producers stopped, the agent caught up, every instance running) the producer state that the
//! instance running the agent keeps for each partition (its PSM:
//! `GET /v1/partitions/{topic}/{p}/producers`) must be what the partition's leader keeps
//! (DescribeProducers): the same producer ids, epochs, last sequences and open transactions.
//! The failover reads the PSM, so a PSM that drifted from the brokers would be a failover
//! deciding on wrong facts.
//!
//! Owns: those two readings and their comparison. Must not touch: the history's rules
//! (`check.rs`), the instances' processes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hyper::Method;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::DescribeProducersRequest;
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;

use super::gateways::{self, admin_addr, MIRROR};
use super::plan::INSTANCES;
use super::{PARTITIONS, TOPIC};
use crate::fleet::admin;

/// What one side keeps of a producer: epoch, last sequence, first offset of its open
/// transaction (−1: none).
pub type State = (i16, i32, i64);

/// Producer id → its state, for one partition.
pub type Producers = BTreeMap<i64, State>;

/// The differences between the PSM and the leader for partition `p`, one line each.
pub fn compare(p: i32, psm: &Producers, broker: &Producers) -> Vec<String> {
    let mut out = Vec::new();
    for (pid, b) in broker {
        match psm.get(pid) {
            None => out.push(format!(
                "partition {p}: producer {pid} {b:?} (epoch, last sequence, open transaction) is on the leader, not in the PSM"
            )),
            Some(s) if s != b => out.push(format!(
                "partition {p}: producer {pid}: PSM {s:?}, leader {b:?} (epoch, last sequence, open transaction)"
            )),
            Some(_) => {}
        }
    }
    for (pid, s) in psm {
        if !broker.contains_key(pid) {
            out.push(format!(
                "partition {p}: producer {pid} {s:?} is in the PSM, not on the leader"
            ));
        }
    }
    out
}

/// The instance whose agent runs (its `mirrorgate_agent_runs_here` gauge is 1).
async fn agent_instance() -> Result<usize, String> {
    let wanted = format!("mirrorgate_agent_runs_here{{mirror=\"{MIRROR}\"}} 1");
    for i in 0..INSTANCES {
        let Ok((200, body)) =
            mirrorgate::admin::client::call(&admin_addr(i), Method::GET, "/metrics", None, None)
                .await
        else {
            continue;
        };
        if body.lines().any(|l| l.trim() == wanted) {
            return Ok(i);
        }
    }
    Err("no instance says it runs the agent".into())
}

/// The PSM of partition `p` on instance `i`.
async fn psm(i: usize, p: i32) -> Result<Producers, String> {
    let path = format!("/v1/partitions/{TOPIC}/{p}/producers");
    let (status, v) = admin(&admin_addr(i), Method::GET, &path).await?;
    if status != 200 {
        return Err(format!("instance {i}: {path}: {status} {v}"));
    }
    let list = v["producers"]
        .as_array()
        .ok_or_else(|| format!("instance {i}: {path}: no producers in {v}"))?;
    Ok(list
        .iter()
        .map(|e| {
            (
                e["producer_id"].as_i64().unwrap_or(-2),
                (
                    e["epoch"].as_i64().unwrap_or(-2) as i16,
                    e["last_sequence"].as_i64().unwrap_or(-2) as i32,
                    e["current_txn_start_offset"].as_i64().unwrap_or(-2),
                ),
            )
        })
        .collect())
}

/// What the leader of partition `p` keeps.
async fn leader(leader: &str, p: i32) -> Result<Producers, String> {
    let mut c = KafkaClient::connect(leader, Duration::from_secs(5))
        .await
        .map_err(|e| format!("{leader}: {e}"))?;
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(StrBytes::from_static_str(TOPIC).into())
        .with_partition_indexes(vec![p])]);
    let resp = c.send(&req, 0).await.map_err(|e| e.to_string())?;
    let part = resp
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|x| x.partition_index == p)
        .ok_or_else(|| format!("{TOPIC}-{p}: no DescribeProducers answer"))?;
    if part.error_code != 0 {
        return Err(format!(
            "{TOPIC}-{p}: DescribeProducers error {}",
            part.error_code
        ));
    }
    Ok(part
        .active_producers
        .iter()
        .map(|a| {
            (
                a.producer_id.0,
                (
                    a.producer_epoch as i16,
                    a.last_sequence,
                    a.current_txn_start_offset,
                ),
            )
        })
        .collect())
}

/// Compares the agent's instance's PSM with the leaders of `destination`: the differences
/// (empty: the same), and which instance was asked.
pub async fn probe(destination: &str) -> Result<(usize, Vec<String>), String> {
    let i = agent_instance().await?;
    let leaders = super::logs::leaders(destination, TOPIC, PARTITIONS).await?;
    let mut out = Vec::new();
    for (p, addr) in leaders.iter().enumerate() {
        let p = p as i32;
        out.extend(compare(p, &psm(i, p).await?, &leader(addr, p).await?));
    }
    Ok((i, out))
}

/// Once every instance is ready, the differences between the agent's PSM and the leaders; asked
/// again for up to 30 s while the agent may be changing hands. A probe that never answers is a
/// difference too.
pub async fn quiet(destination: &str) -> Vec<String> {
    for i in 0..INSTANCES {
        if let Err(e) = gateways::wait_ready(i, Duration::from_secs(120)).await {
            return vec![format!("not compared: {e}")];
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let last = match probe(destination).await {
            Ok((i, d)) if d.is_empty() => {
                eprintln!(
                    "chaos: the PSM of instance {i} (the agent's) is the leaders' producer state"
                );
                return d;
            }
            Ok((i, d)) => d
                .into_iter()
                .map(|x| format!("instance {i}: {x}"))
                .collect(),
            Err(e) => vec![format!("not compared: {e}")],
        };
        if Instant::now() > deadline {
            return last;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_producers_on_both_sides_differ_in_nothing() {
        let both: Producers = [(7, (0, 41, -1)), (9, (2, 3, 120))].into();
        assert!(compare(0, &both, &both).is_empty());
    }

    #[test]
    fn a_producer_missing_or_different_on_either_side_is_one_difference_each() {
        let psm: Producers = [(7, (0, 40, -1)), (8, (0, 1, -1))].into();
        let broker: Producers = [(7, (0, 41, -1)), (9, (0, 5, -1))].into();
        let d = compare(2, &psm, &broker);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].contains("producer 7: PSM (0, 40, -1), leader (0, 41, -1)"));
        assert!(d[1].contains("producer 9"));
        assert!(d[2].contains("producer 8") && d[2].contains("not on the leader"));
    }
}
