//! `mirrorgate-bench`: benchmarks that need real clusters. Each subcommand starts the clusters
//! it needs through the rig when they are not running (and stops those it started), and prints
//! its figures as one JSON object on its last line.
//!
//! - `proxy`: the Java producer and consumer perf tools against the destination directly, through
//!   a byte relay, through the gateway and through a peer proxy, interleaved in one run:
//!   saturation throughput, latency at fixed rates, CPU per MiB and memory of each proxy.
//! - `relay` (internal): the byte-relay floor that `proxy` starts as a process of its own.
//! - `psm`: producer-state update cost, batch-header walk throughput, memory per producer.
//! - `mirror` (`--transactional`): the built-in agent against MirrorMaker 2 (in exactly-once mode
//!   for transactional data), through the gateway, in one run.
//! - `failover`, `load`: see their modules.
//! - `consumer-failover`: a consumer group across a failover with the source killed.
//! - `chaos`: a seeded chaos run of three instances with a history checker.
//! - `switchover`: producers through a forward listener across a planned switchover.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
mod batch;
mod chaos;
mod committed_view;
mod consumer_failover;
mod failover;
mod failover_fixture;
mod fleet;
mod group_member;
mod handover;
mod latency;
mod load;
mod mirror;
mod mirror_txn;
mod peer;
mod process;
mod profile;
mod proxy;
mod proxy_report;
mod psm;
mod relay;
mod switchover;
mod takeover;
mod topics;

#[derive(Parser)]
#[command(name = "mirrorgate-bench")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Producer/consumer perf tools: destination directly, through a byte relay, through the
    /// gateway and through a peer proxy (Kroxylicious), interleaved: saturation, latency at 25,
    /// 50 and 75 % of the direct rate, CPU per MiB and memory.
    Proxy {
        /// A short run: 50,000 records per saturation run, 6 s per fixed-rate run.
        #[arg(long)]
        quick: bool,
        /// Repetitions per mode and phase (at least 3).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// One repetition per mode and phase, to check that every mode runs (the test
        /// command's smoke run); its figures are not comparable.
        #[arg(long)]
        smoke: bool,
        /// Records per saturation run (default 200000, or 50000 with --quick).
        #[arg(long)]
        records: Option<u64>,
        /// Measured seconds per fixed-rate run, after a 2 s warm-up (default 15, or 6 with
        /// --quick).
        #[arg(long)]
        rate_seconds: Option<u64>,
        /// Leave the peer proxy out.
        #[arg(long)]
        no_peer: bool,
        /// Another gateway binary (e.g. a release build of an earlier commit) measured side by
        /// side with this one: modes `baseline` and `baseline-mirror`, and `*_vs_baseline`
        /// ratios in the JSON line.
        #[arg(long)]
        baseline: Option<std::path::PathBuf>,
    },
    /// A CPU profile of the gateway under a steady produce load (perf + inferno flame graph in
    /// target/profile/).
    Profile {
        /// Seconds of load (perf records all but the first 3 and last 1).
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Records per second (default: half the direct saturation rate, measured first).
        #[arg(long)]
        rate: Option<i64>,
    },
    /// The byte-relay floor used by `proxy` (runs until killed).
    #[command(hide = true)]
    Relay {
        /// First local port; node at position i of --brokers is served on port_base + i.
        #[arg(long)]
        port_base: u16,
        /// `NODE_ID=HOST:PORT,…`
        #[arg(long)]
        brokers: String,
    },
    /// A failover's handover of many screened producer ids over a state topic with the brokers'
    /// default max.message.bytes: appended in parts, read back by a fresh reader.
    Handover {
        /// How many screened producer ids the handover names.
        #[arg(long, default_value_t = 1_000_000)]
        ids: u64,
    },
    /// Producer-state manager and batch walker micro-figures (no cluster needed).
    Psm {
        /// A short run.
        #[arg(long)]
        quick: bool,
    },
    /// Mirroring throughput of the built-in agent and of MirrorMaker 2 (through the mirror
    /// listener) on the same compressed data, and the agent's lag p99 at a fixed produce rate.
    Mirror {
        /// A short run (under 5 minutes).
        #[arg(long)]
        quick: bool,
        /// Transactional data instead (committed and aborted transactions over 3 partitions),
        /// MirrorMaker 2 in exactly-once mode, and the destination's `read_committed` view
        /// compared with the source's.
        #[arg(long)]
        transactional: bool,
    },
    /// Failover of a mirror with many partitions: time from the call to every partition STOPPED
    /// (gateway processes; with --baseline, an earlier build measured the same way in the same
    /// run).
    Failover {
        /// Topics, each with `--partitions` partitions; without, `--partitions` is the total,
        /// over topics of up to 100 partitions each.
        #[arg(long)]
        topics: Option<usize>,
        /// Partitions per topic (with `--topics`), else in total.
        #[arg(long, default_value_t = 1000)]
        partitions: i32,
        /// A short run (2 topics × 50 partitions).
        #[arg(long)]
        quick: bool,
        /// Gateway instances sharing a state topic; above 1 the single-instance failover and
        /// the takeover of a killed driver run too.
        #[arg(long, default_value_t = 1)]
        instances: usize,
        /// Another gateway binary (e.g. a release build of an earlier commit) measured the same
        /// way, interleaved (repeatable); `*_vs_baseline` ratios to the first.
        #[arg(long)]
        baseline: Vec<std::path::PathBuf>,
        /// Repetitions (medians are reported).
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Leave the takeover out.
        #[arg(long)]
        no_takeover: bool,
    },
    /// Many concurrent client connections producing and consuming through a gateway process:
    /// errors, gateway RSS, latency, `/readyz` responsiveness, one slow consumer.
    Load {
        /// A short run (200 connections, 30 s).
        #[arg(long)]
        quick: bool,
        /// Concurrent client connections (default 1000, or 200 with --quick).
        #[arg(long)]
        connections: Option<usize>,
        /// Run time in seconds (default 180, or 30 with --quick).
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// Producers (Java at half its direct saturation, librdkafka, kafka-python) and a Java
    /// consumer group use a mirror's forward listener while a planned switchover moves them to
    /// the destination: the produce latency while the listener was held, errors, lost,
    /// duplicated, reordered, skipped and re-read.
    Switchover {
        /// A short run (100 partitions, 10 s before and after; the full run: 1,000, 30 s).
        #[arg(long)]
        quick: bool,
        /// Without the consumer group (the producers alone, as runs before 2026-12-06 measured).
        #[arg(long)]
        no_group: bool,
        /// The Java producer's rate in records/s, instead of half its saturation (no probe):
        /// for runs side by side at the same load.
        #[arg(long)]
        java_rate: Option<u32>,
    },
    /// A consumer group reads a mirrored topic on the source under load, the source is killed,
    /// the mirror fails over and the group resumes through the gateway: records skipped and
    /// re-read (against the bound of the last sync), time to the first record on the destination.
    ConsumerFailover {
        /// A short run (3 partitions, 25 s of load; the full run: 6 partitions, 60 s).
        #[arg(long)]
        quick: bool,
        /// The group sync's interval (`groups.sync_interval_ms`; default: the product's).
        #[arg(long, default_value_t = mirrorgate::config::DEFAULT_GROUP_SYNC_INTERVAL_MS)]
        sync_interval_ms: u64,
    },
    /// A seeded chaos run: three gateway instances, the built-in agent, real producers, faults
    /// drawn from the seed, a failover; a checker over the history and the brokers' logs
    /// (docs/reliability.md). The JSON verdict is the last line.
    Chaos {
        /// The seed (default: drawn from the clock, and printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Run this many seeds, one after the other from --seed (a campaign).
        #[arg(long, default_value_t = 1)]
        seeds: u64,
        /// The test command's bounded run: 35 s before the failover, 25 s after.
        #[arg(long)]
        smoke: bool,
        /// Minutes of load per seed (60 % before the failover); default 2.5.
        #[arg(long)]
        minutes: Option<f64>,
        /// Switch one protection off in the instances (barrier, fence, screening, groups): the run
        /// succeeds only if the checker then fails it (a positive control).
        #[arg(long)]
        sabotage: Option<String>,
        /// Carry out target/chaos/seed-S/schedule.json again instead of drawing the schedule.
        #[arg(long)]
        replay: bool,
        /// What mirrors: `agent` (the built-in agent) or `mm2` (MirrorMaker 2 through the mirror
        /// listeners, the instances configured `mirroring: external`).
        #[arg(long, default_value = "agent")]
        profile: String,
    },
}

pub fn repo() -> PathBuf {
    std::env::var_os("MIRRORGATE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// Which rig a benchmark drives: the shared one (`target/rig`, the ports of docs/test-rig.md) or
/// an isolated instance with its own run directory and port offset, whose clusters no other run
/// uses (a benchmark may kill them).
#[derive(Clone, Default)]
pub struct Rig {
    env: Vec<(String, String)>,
}

impl Rig {
    /// An isolated rig: run directory `dir`, every port shifted by `port_offset`.
    pub fn isolated(dir: &std::path::Path, port_offset: i32) -> Rig {
        Rig {
            env: vec![
                ("MIRRORGATE_RIG_DIR".into(), dir.display().to_string()),
                ("MIRRORGATE_RIG_PORT_OFFSET".into(), port_offset.to_string()),
            ],
        }
    }

    /// `integration/rig ARGS` on this rig; its stdout.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(repo().join("integration/rig"))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .map_err(|e| format!("cannot run integration/rig: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "integration/rig {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Clusters started by this process, stopped on drop.
pub struct Clusters {
    rig: Rig,
    started: Vec<String>,
}

impl Clusters {
    /// The shared rig's clusters `names`, started when not running.
    pub fn ensure(names: &[&str]) -> Result<(Clusters, Vec<(String, String)>), String> {
        Clusters::ensure_in(Rig::default(), names, false)
    }

    /// As [`Clusters::ensure`] on `rig`; with `owned`, the rig's watchdog also stops the clusters
    /// this call starts when this process exits without stopping them (a killed benchmark).
    pub fn ensure_in(
        rig: Rig,
        names: &[&str],
        owned: bool,
    ) -> Result<(Clusters, Vec<(String, String)>), String> {
        let before = rig.run(&["status"])?;
        let running: Vec<&str> = before
            .lines()
            .filter_map(|l| l.split_once('=').map(|(n, _)| n))
            .collect();
        let started: Vec<String> = names
            .iter()
            .filter(|n| !running.contains(n))
            .map(|s| s.to_string())
            .collect();
        if !started.is_empty() {
            eprintln!("starting clusters: {}", started.join(" "));
            let owner = std::process::id().to_string();
            let mut args = vec!["up"];
            if owned {
                args.extend(["--owner-pid", owner.as_str()]);
            }
            args.extend(names.iter().copied());
            rig.run(&args)?;
        }
        let status = rig.run(&["status"])?;
        let addrs = status
            .lines()
            .filter_map(|l| {
                l.split_once('=')
                    .map(|(n, a)| (n.to_string(), a.to_string()))
            })
            .collect();
        Ok((Clusters { rig, started }, addrs))
    }

    /// Whether this process started cluster `name`.
    pub fn started(&self, name: &str) -> bool {
        self.started.iter().any(|s| s == name)
    }

    /// The rig these clusters run on.
    pub fn rig(&self) -> &Rig {
        &self.rig
    }
}

/// The broker addresses of cluster `name` in the rig's status lines (`NAME=host:port,…`).
pub fn cluster_brokers(addrs: &[(String, String)], name: &str) -> Result<Vec<String>, String> {
    addrs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| a.split(',').map(str::to_string).collect())
        .ok_or_else(|| format!("{name} cluster not running"))
}

impl Drop for Clusters {
    fn drop(&mut self) {
        if !self.started.is_empty() {
            let mut args = vec!["down"];
            args.extend(self.started.iter().map(|s| s.as_str()));
            if let Err(e) = self.rig.run(&args) {
                eprintln!("{e}");
            }
        }
    }
}

pub fn java(class: &str, args: &[String], timeout: Duration) -> Result<String, String> {
    let mut child = process::die_with_parent(&mut Command::new(repo().join("integration/rig")))
        .arg("java")
        .arg(class)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {class}: {e}"))?;
    let start = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().map_err(|e| e.to_string())? {
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if !out.status.success() {
                return Err(format!(
                    "{class} failed: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            return Ok(text);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{class} did not finish within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The gateway configuration of a benchmark: client listener at `base`, mirror listener at
/// `base + 10`, admin at `base + 20`, warnings only, and the given `mirrors:` YAML block.
pub fn bench_config(
    destination: &[String],
    base: u16,
    state: &std::path::Path,
    mirrors: &str,
) -> Result<mirrorgate::config::Config, String> {
    mirrorgate::state::StateStore::init(state).map_err(|e| e.to_string())?;
    let yaml = format!(
        "destination: {{ bootstrap: [{}] }}\n\
         listeners:\n  client: {{ port_base: {base}, max_brokers: 4 }}\n  mirror: {{ port_base: {}, max_brokers: 4 }}\n\
         admin: {{ bind: \"127.0.0.1:{}\" }}\n\
         state_dir: {}\n\
         logging: {{ level: warn }}\n{mirrors}",
        destination.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", "),
        base + 10,
        base + 20,
        state.display()
    );
    mirrorgate::config::load_str(&yaml, "bench").map_err(|e| e.to_string())
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The in-process gateway's logs, when asked for (`RUST_LOG=mirrorgate=info`): on stderr,
    // so the JSON on stdout's last line stays the verdict.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let result = match cli.command {
        Bench::Proxy {
            quick,
            runs,
            smoke,
            records,
            rate_seconds,
            no_peer,
            baseline,
        } => proxy::run(proxy::Options {
            quick,
            runs,
            smoke,
            records,
            rate_seconds,
            peer: !no_peer,
            baseline,
        }),
        Bench::Profile { seconds, rate } => profile::run(seconds.max(8), rate),
        Bench::Relay { port_base, brokers } => {
            relay::parse_brokers(&brokers).and_then(|b| relay::serve(port_base, &b))
        }
        Bench::Psm { quick } => psm::run(quick),
        Bench::Handover { ids } => handover::run(ids),
        Bench::Mirror {
            quick,
            transactional: false,
        } => mirror::run(quick),
        Bench::Mirror {
            quick,
            transactional: true,
        } => mirror_txn::run(quick),
        Bench::Failover {
            topics,
            partitions,
            quick,
            instances,
            baseline,
            runs,
            no_takeover,
        } => failover::run(failover::Options {
            topics,
            partitions,
            quick,
            instances,
            baselines: baseline,
            runs,
            no_takeover,
        }),
        Bench::Load {
            quick,
            connections,
            seconds,
        } => load::run(quick, connections, seconds),
        Bench::Switchover {
            quick,
            no_group,
            java_rate,
        } => switchover::run(quick, !no_group, java_rate),
        Bench::ConsumerFailover {
            quick,
            sync_interval_ms,
        } => consumer_failover::run(consumer_failover::Options {
            quick,
            sync_interval_ms,
        }),
        Bench::Chaos {
            seed,
            seeds,
            smoke,
            minutes,
            sabotage,
            replay,
            profile,
        } => chaos::run(chaos::Options {
            seed,
            seeds,
            smoke,
            minutes,
            sabotage,
            replay,
            profile,
        }),
    };
    match result {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mirrorgate-bench: {e}");
            ExitCode::from(1)
        }
    }
}
