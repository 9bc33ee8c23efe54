//! `mirrorgate-bench profile`: where the gateway's CPU goes under a steady produce load (the
//! fixed-rate producer of `latency.rs`, by default at 50 % of the direct saturation rate measured
//! first with the Java producer), recorded with `perf` and drawn as a flame graph with inferno.
//!
//! Owns: the load, the recording and its summary. Must not touch: how the gateway runs
//! (`process.rs`). Needs `perf` (Debian: `apt-get install linux-perf`); inferno is installed
//! from crates.io into `target/tools/` on first use (`cargo install inferno`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::process::{gateway_binary, CpuMeter, GatewayProcess};
use crate::{java, latency, repo, Clusters};

const BASE: u16 = 17592;
const ADMIN: u16 = 17602;

fn command_exists(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// inferno's two tools, installed into `target/tools/bin` when not on PATH or there already.
fn inferno() -> Result<(PathBuf, PathBuf), String> {
    if command_exists("inferno-flamegraph") && command_exists("inferno-collapse-perf") {
        return Ok(("inferno-collapse-perf".into(), "inferno-flamegraph".into()));
    }
    let root = repo().join("target/tools");
    let bin = root.join("bin");
    let (collapse, graph) = (
        bin.join("inferno-collapse-perf"),
        bin.join("inferno-flamegraph"),
    );
    if !(collapse.exists() && graph.exists()) {
        eprintln!(
            "installing inferno into {} (about 2 minutes)…",
            root.display()
        );
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["install", "--locked", "--quiet", "inferno", "--root"])
            .arg(&root)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err("cannot install inferno (`cargo install inferno`)".into());
        }
    }
    Ok((collapse, graph))
}

/// The stacks of folded output (`frame;frame;leaf count` per line) with their counts; lines
/// that do not parse are skipped.
fn folded_stacks(folded: &str) -> impl Iterator<Item = (&str, u64)> {
    folded.lines().filter_map(|line| {
        let (stack, count) = line.rsplit_once(' ')?;
        Some((stack, count.parse::<u64>().ok()?))
    })
}

/// The functions with the most samples at the top of the stack, from folded stacks:
/// `[(leaf, share of all samples)]`.
fn top_leaves(folded: &str, n: usize) -> Vec<(String, f64)> {
    let mut by_leaf: std::collections::HashMap<&str, u64> = Default::default();
    let mut total = 0u64;
    for (stack, count) in folded_stacks(folded) {
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        *by_leaf.entry(leaf).or_default() += count;
        total += count;
    }
    let mut v: Vec<(String, f64)> = by_leaf
        .into_iter()
        .map(|(k, c)| (k.to_string(), c as f64 / total.max(1) as f64))
        .collect();
    v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    v.truncate(n);
    v
}

/// Share of samples whose stack contains a frame matching each of `groups` (first match wins,
/// in order), e.g. kernel networking vs the gateway's own code.
fn stack_groups(folded: &str, groups: &[(&'static str, &[&str])]) -> Vec<(&'static str, f64)> {
    let mut counts = vec![0u64; groups.len() + 1];
    let mut total = 0u64;
    for (stack, count) in folded_stacks(folded) {
        total += count;
        let leafward: Vec<&str> = stack.rsplit(';').collect();
        let g = groups
            .iter()
            .position(|(_, pats)| {
                leafward
                    .iter()
                    .take(12)
                    .any(|f| pats.iter().any(|p| f.contains(p)))
            })
            .unwrap_or(groups.len());
        counts[g] += count;
    }
    groups
        .iter()
        .map(|(name, _)| *name)
        .chain(std::iter::once("other"))
        .zip(counts)
        .map(|(n, c)| (n, c as f64 / total.max(1) as f64))
        .collect()
}

pub fn run(seconds: u64, rate: Option<i64>) -> Result<Value, String> {
    if !command_exists("perf") {
        return Err("`perf` not found: install it (Debian: apt-get install linux-perf)".into());
    }
    let (collapse, graph) = inferno()?;
    let bin = gateway_binary()?;
    let (_clusters, addrs) = Clusters::ensure(&["destination"])?;
    let brokers = crate::cluster_brokers(&addrs, "destination")?;
    let gateway = GatewayProcess::start(&bin, &brokers, BASE, ADMIN, "profile")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(gateway.wait_ready(Duration::from_secs(60)))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let topic = format!("bench-profile-{stamp}");
    java(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server".into(),
            brokers[0].clone(),
            "--create".into(),
            "--topic".into(),
            topic.clone(),
            "--replica-assignment".into(),
            "1,2".into(),
        ],
        Duration::from_secs(60),
    )?;
    let rate = match rate {
        Some(r) => r,
        None => {
            eprintln!("measuring the direct saturation rate…");
            let out = java(
                "org.apache.kafka.tools.ProducerPerformance",
                &[
                    "--topic".into(),
                    topic.clone(),
                    "--num-records".into(),
                    "50000".into(),
                    "--record-size".into(),
                    "1024".into(),
                    "--throughput".into(),
                    "-1".into(),
                    "--producer-props".into(),
                    format!("bootstrap.servers={}", brokers[0]),
                    "acks=all".into(),
                    "enable.idempotence=true".into(),
                    "linger.ms=5".into(),
                ],
                Duration::from_secs(300),
            )?;
            let rps: f64 = out
                .lines()
                .rev()
                .find(|l| l.contains("records sent"))
                .and_then(|l| l.split(',').nth(1)?.split_whitespace().next()?.parse().ok())
                .ok_or_else(|| format!("cannot parse producer output: {out}"))?;
            (rps / 2.0).round() as i64
        }
    };
    let out_dir = repo().join("target/profile");
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let data = out_dir.join("gateway.perf.data");
    eprintln!("producing {rate} records/s through the gateway for {seconds} s under perf…");
    let bootstrap = format!("127.0.0.1:{BASE}");
    let load_topic = topic.clone();
    // The fixed-rate producer of the proxy benchmark, on its own thread: 3 s of warm-up, then
    // `seconds` measured; perf records the middle of it.
    let load = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(latency::fixed_rate(
            &bootstrap,
            &load_topic,
            rate as f64,
            Duration::from_secs(3),
            seconds,
        ))
    });
    std::thread::sleep(Duration::from_secs(4));
    let cpu = CpuMeter::start(gateway.pid());
    let rec_seconds = seconds.saturating_sub(2).max(2);
    let perf = Command::new("perf")
        .args(["record", "-F", "499", "--call-graph", "dwarf,16384", "-o"])
        .arg(&data)
        .arg("-p")
        .arg(gateway.pid().to_string())
        .arg("--")
        .args(["sleep", &rec_seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run perf: {e}"))?;
    let cpu_s = cpu.stop();
    let produced = load
        .join()
        .map_err(|_| "producer thread panicked".to_string())??;
    if !perf.status.success() {
        return Err(format!(
            "perf record failed: {}",
            String::from_utf8_lossy(&perf.stderr)
        ));
    }
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("perf script: {e}"))?;
    let folded_out = {
        let mut child = Command::new(&collapse)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", collapse.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin
                .write_all(&script.stdout)
                .map_err(|e| format!("collapsing stacks: {e}"))?;
        }
        child
            .wait_with_output()
            .map_err(|e| format!("collapsing stacks: {e}"))?
    };
    let folded = String::from_utf8_lossy(&folded_out.stdout).into_owned();
    let folded_path = out_dir.join("gateway.folded");
    std::fs::write(&folded_path, &folded).map_err(|e| e.to_string())?;
    let svg_path = out_dir.join("gateway.svg");
    let svg = Command::new(&graph)
        .arg(&folded_path)
        .output()
        .map_err(|e| format!("{}: {e}", graph.display()))?;
    std::fs::write(&svg_path, &svg.stdout).map_err(|e| e.to_string())?;
    // perf's cpu-clock event weighs each sample by its period in nanoseconds, and the folded
    // counts carry that weight: their sum is the CPU time sampled.
    let weight: u64 = folded_stacks(&folded).map(|(_, c)| c).sum();
    let groups = stack_groups(
        &folded,
        &[
            (
                "kernel: socket send/receive",
                &[
                    "tcp_",
                    "sock_",
                    "__sys_sendto",
                    "__sys_recvfrom",
                    "do_writev",
                    "do_readv",
                ],
            ),
            (
                "kernel: epoll and wakeups",
                &["epoll", "futex", "try_to_wake_up", "schedule"],
            ),
            (
                "gateway: protocol",
                &["mirrorgate::protocol", "kafka_protocol"],
            ),
            ("gateway: proxy", &["mirrorgate::proxy", "mirrorgate::net"]),
            (
                "allocator and copies",
                &["malloc", "free", "realloc", "memcpy", "memmove"],
            ),
            ("tokio runtime", &["tokio::"]),
        ],
    );
    // Records produced while perf recorded (the producer runs at `rate` throughout).
    let mib = rate as f64 * rec_seconds as f64 * 1024.0 / (1024.0 * 1024.0);
    Ok(json!({
        "bench": "profile",
        "rate_records_per_s": rate,
        "seconds": seconds,
        "recorded_seconds": rec_seconds,
        "gateway_cpu_s_recorded": (cpu_s * 100.0).round() / 100.0,
        "gateway_cpu_ms_per_mib": ((cpu_s * 1000.0 / mib) * 100.0).round() / 100.0,
        "sampled_cpu_ms": weight / 1_000_000,
        "produce_p50_ms": produced.p50_ms,
        "produce_p99_ms": produced.p99_ms,
        "groups": groups.iter().map(|(n, s)| json!({"group": n, "share": (s * 1000.0).round() / 1000.0})).collect::<Vec<_>>(),
        "top_leaves": top_leaves(&folded, 15).iter().map(|(n, s)| json!({"function": n, "share": (s * 1000.0).round() / 1000.0})).collect::<Vec<_>>(),
        "flamegraph": svg_path.display().to_string(),
        "folded": folded_path.display().to_string(),
        "perf_data": data.display().to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOLDED: &str = "main;tokio::run;mirrorgate::proxy::conn;tcp_sendmsg 6\n\
                          main;tokio::run;mirrorgate::protocol::peek 3\n\
                          main;tokio::run;epoll_wait 1\n";

    #[test]
    fn leaves_are_ranked_by_their_share_of_samples() {
        let top = top_leaves(FOLDED, 2);
        assert_eq!(top[0], ("tcp_sendmsg".to_string(), 0.6));
        assert_eq!(top[1], ("mirrorgate::protocol::peek".to_string(), 0.3));
    }

    #[test]
    fn each_sample_counts_in_the_first_group_its_stack_matches() {
        let g = stack_groups(
            FOLDED,
            &[
                ("kernel", &["tcp_"]),
                ("protocol", &["mirrorgate::protocol"]),
            ],
        );
        assert_eq!(g, vec![("kernel", 0.6), ("protocol", 0.3), ("other", 0.1)]);
    }
}
