//! `mirrorgate-bench chaos`: a seeded chaos run against real processes, judged afterwards by a
//! checker over the history of every client operation and the logs read straight from the
//! brokers (docs/reliability.md, "The chaos run").
//!
//! The cluster under test, all on this machine: an isolated rig (run directory
//! `target/chaos/rig`, ports +1500) with a source (one broker) and a destination (three
//! brokers), and three gateway instances sharing a state topic, each configured with the
//! mirror's built-in agent (one runs it at a time); or, with `--profile mm2`, configured
//! `mirroring: external` behind MirrorMaker 2, which copies through the three mirror listeners
//! and syncs the group's offsets, and runs on after the failover (its writes must be refused
//! then). The workload: idempotent producers on the
//! source (the Java client, librdkafka, kafka-python), a transactional Java producer, the moved
//! producer and, after the failover call, local producers through every instance and the late
//! mirror writer (`probes.rs`); the application's consumer group, on the source until it stops
//! before the failover and through the gateways once the mirror is STOPPED (`group.rs`). The
//! nemesis (`plan.rs`, drawn from the seed): SIGSTOP/SIGCONT and SIGKILL/restart of instances,
//! SIGKILL and restart of a destination broker, a full disk under an instance's state directory
//! (`disk.rs`), an instance cut off from the brokers or losing packets to them (`net.rs`), a
//! planned failover or one with the source killed, through a random instance
//! after a dry run, and a pause of another instance or a kill of the driver while it runs. At a
//! planned failover's quiet point the agent's PSM is compared with the leaders' producer state
//! (`psm.rs`). If the seed draws a failback (the agent's profile), the old source is realigned
//! and mirrored back into by a fourth gateway under faults of its own (`failback.rs`). When
//! everything is quiet again the checker (`check.rs`) reads both logs and decides.
//!
//! Output: `target/chaos/seed-S/` holds `schedule.json` (`--replay` reads it back),
//! `history.jsonl` (one operation a line), `verdict.json`, the instances' and clients' logs; a
//! short summary goes to stderr and the JSON verdict is the last line of stdout. With
//! `--sabotage NAME` the instances run with one protection off
//! (`MIRRORGATE_TEST_SABOTAGE`): the run then succeeds only if the checker fails it.
//!
//! Owns: the run's phases and the verdict's JSON. Must not touch: the shared rig's clusters
//! (the run's own rig only), the rules (`check.rs`), the schedule's drawing (`plan.rs`).

pub(crate) mod check;
pub(crate) mod clients;
mod disk;
mod failback;
mod gateways;
mod group;
mod lock;
mod logs;
mod mm2;
mod net;
mod output;
mod plan;
mod probes;
mod psm;
mod world;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{cluster_brokers, repo, Clusters, Rig};
use check::{check, GroupReads, Inputs, Origin, Tool};
use clients::Shared;
use gateways::{client_addr, mirror_addr, Instance, Topology};
use lock::RunLock;
use output::{summary, verdict_json};
use plan::{AtFailover, Fault, Mode, Schedule, INSTANCES};
use world::World;

/// The run's own rig: ports shifted by this much (source 127.0.0.1:20592, destination 28592,
/// 28594 and 28596), free in the shared rig's layout and below the ephemeral port range.
const PORT_OFFSET: i32 = 1500;
const TOPIC: &str = "chaos-events";
/// The destination: the rig's `wide` cluster (three brokers, internal topics replicated three
/// times).
const DESTINATION: &str = "wide";
const PARTITIONS: i32 = 3;
/// The instances' session timeout: pauses of the schedule go past it.
const SESSION_MS: u64 = 6_000;

pub struct Options {
    pub seed: Option<u64>,
    pub seeds: u64,
    pub smoke: bool,
    pub minutes: Option<f64>,
    pub sabotage: Option<String>,
    pub replay: bool,
    /// `agent` or `mm2`.
    pub profile: String,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn run(o: Options) -> Result<Value, String> {
    if let Some(s) = &o.sabotage {
        if mirrorgate::mirror::fault_hooks::Sabotage::parse(s).is_none() {
            return Err(format!(
                "--sabotage {s}: unknown; one of barrier, fence, screening, groups"
            ));
        }
    }
    let tool = match o.profile.as_str() {
        "agent" => Tool::Agent,
        "mm2" => Tool::MirrorMaker2,
        other => return Err(format!("--profile {other}: unknown; one of agent, mm2")),
    };
    match (tool, o.sabotage.as_deref()) {
        (Tool::MirrorMaker2, Some("groups")) => return Err(
            "--sabotage groups switches off the agent's group sync: behind MirrorMaker 2 it syncs the groups itself; use --profile agent".into(),
        ),
        (Tool::MirrorMaker2, Some("screening")) => return Err(
            "--sabotage screening shows nothing behind MirrorMaker 2: its producer ids come from the destination's own allocator, which hands none of them to a local producer, and the run's producers collide with them only by chance; use --profile agent".into(),
        ),
        _ => {}
    }
    if o.replay && o.seed.is_none() {
        return Err("--replay needs --seed S (the run whose schedule.json to replay)".into());
    }
    let (before_ms, after_ms) = match (o.smoke, o.minutes) {
        (_, Some(m)) if m > 0.0 => ((m * 36_000.0) as u64, (m * 24_000.0) as u64),
        (_, Some(m)) => return Err(format!("--minutes {m}: must be above 0")),
        (true, None) => (35_000, 25_000),
        (false, None) => (90_000, 60_000),
    };
    let _lock = RunLock::take(&repo().join("target/chaos/run.lock"))?;
    let first = o.seed.unwrap_or_else(|| now_ms() as u64 % 1_000_000);
    let bin = crate::process::gateway_binary()?;
    let started = Instant::now();
    let mut runs = Vec::new();
    let mut failed = Vec::new();
    for seed in first..first + o.seeds.max(1) {
        let profile = match tool {
            Tool::Agent => "",
            Tool::MirrorMaker2 => "-mm2",
        };
        let dir = repo().join("target/chaos").join(match &o.sabotage {
            Some(s) => format!("seed-{seed}{profile}-sabotage-{s}"),
            None => format!("seed-{seed}{profile}"),
        });
        let schedule = if o.replay {
            let text = std::fs::read_to_string(dir.join("schedule.json"))
                .map_err(|e| format!("--replay: {}: {e}", dir.join("schedule.json").display()))?;
            serde_json::from_str(&text).map_err(|e| format!("--replay: schedule.json: {e}"))?
        } else {
            Schedule::draw(seed, before_ms, after_ms, SESSION_MS)
        };
        // A run that could not be carried out (an instance never ready, a cluster that would
        // not start) is recorded and fails the campaign, which goes on with the next seed.
        // A runtime per seed: a run that ends early leaves no task of its own to the next.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let v = match rt.block_on(run_one(&bin, &dir, &schedule, tool, o.sabotage.as_deref())) {
            Ok(v) => v,
            Err(e) => {
                rt.shutdown_timeout(Duration::from_secs(5));
                eprintln!("chaos: seed {seed}: the run could not be carried out: {e}");
                json!({"bench": "chaos", "seed": seed, "verdict": "error", "error": e})
            }
        };
        let passed = v["verdict"] == "pass";
        let expected = passed == o.sabotage.is_none() && v["verdict"] != "error";
        if !expected {
            failed.push(seed);
        }
        runs.push(v);
    }
    let minutes = (started.elapsed().as_secs_f64() / 60.0 * 100.0).round() / 100.0;
    let out = if runs.len() == 1 {
        let mut v = runs.remove(0);
        v["minutes"] = json!(minutes);
        v
    } else {
        json!({
            "bench": "chaos",
            "seeds": runs.len(),
            "first_seed": first,
            "minutes": minutes,
            "sabotage": o.sabotage,
            "profile": tool,
            "unexpected": failed,
            "runs": runs,
            "verdict": if failed.is_empty() { "pass" } else { "fail" },
        })
    };
    if failed.is_empty() {
        Ok(out)
    } else {
        println!("{out}");
        Err(match &o.sabotage {
            Some(s) => format!(
                "the checker did not catch --sabotage {s} (seeds {failed:?}): a green run would not be evidence"
            ),
            None => format!(
                "the checker failed seeds {failed:?}; replay with --seed S --replay (target/chaos/seed-S/)"
            ),
        })
    }
}

async fn run_one(
    bin: &Path,
    dir: &Path,
    schedule: &Schedule,
    tool: Tool,
    sabotage: Option<&str>,
) -> Result<Value, String> {
    disk::unmount_under(dir);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let text = serde_json::to_string_pretty(schedule).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("schedule.json"), text).map_err(|e| e.to_string())?;
    eprintln!(
        "chaos: seed {} ({:?}, {:?} failover through instance {}, {} faults, operations {:?}){}",
        schedule.seed,
        tool,
        schedule.mode,
        schedule.driver,
        schedule.fault_count(),
        schedule.operations,
        sabotage
            .map(|s| format!(", sabotage {s}"))
            .unwrap_or_default()
    );
    let rig_dir = repo().join("target/chaos/rig");
    let rig = Rig::isolated(&rig_dir, PORT_OFFSET);
    // A rig left behind by an interrupted run is stopped first: every run starts clean.
    let _ = rig.run(&["down"]);
    let _ = std::fs::remove_dir_all(rig_dir.join("source"));
    let _ = std::fs::remove_dir_all(rig_dir.join(DESTINATION));
    let (clusters, addrs) = Clusters::ensure_in(rig.clone(), &["source", DESTINATION], true)?;
    let source = cluster_brokers(&addrs, "source")?.remove(0);
    let destination = cluster_brokers(&addrs, DESTINATION)?;
    crate::topics::create(&source, &[(TOPIC.to_string(), PARTITIONS)]).await?;
    // The destination topic as production runs it: three replicas, two in sync for acks=all,
    // so that a broker killed moves leaders (the agent would copy the source's one replica).
    let mut admin_client =
        mirrorgate::client::KafkaClient::connect(&destination[0], Duration::from_secs(10))
            .await
            .map_err(|e| format!("destination: {e}"))?;
    mirrorgate::client::ops::create_topic(
        &mut admin_client,
        TOPIC,
        PARTITIONS,
        3,
        &[("min.insync.replicas".to_string(), "2".to_string())],
    )
    .await?;

    let env: Vec<(String, String)> = sabotage
        .map(|s| vec![("MIRRORGATE_TEST_SABOTAGE".to_string(), s.to_string())])
        .unwrap_or_default();
    let topology = Topology {
        source: source.clone(),
        destination: destination.clone(),
        topic: TOPIC.to_string(),
        session_ms: SESSION_MS,
        tool,
    };
    let net = net::Net::for_brokers(destination.iter().chain([&source]));
    let mut instances = Vec::new();
    for i in 0..INSTANCES {
        let net_group = net.cgroup_procs(i);
        let mut inst = Instance::configure(bin, i, dir, &topology, env.clone(), net_group)?;
        inst.start(bin)?;
        instances.push(inst);
    }
    let world = World {
        bin: bin.to_path_buf(),
        rig,
        instances: Mutex::new(instances),
        crashes: Mutex::default(),
        env,
        net,
    };
    let result = drive(&world, dir, schedule, &source, &destination, tool, sabotage).await;
    world.with(|v| v.clear());
    drop(clusters);
    result
}

async fn drive(
    world: &World,
    dir: &Path,
    schedule: &Schedule,
    source: &str,
    destination: &[String],
    tool: Tool,
    sabotage: Option<&str>,
) -> Result<Value, String> {
    for i in 0..INSTANCES {
        gateways::wait_ready(i, Duration::from_secs(120)).await?;
        gateways::wait_state(i, "MIRRORING", PARTITIONS as i64, Duration::from_secs(120)).await?;
    }
    // Behind MirrorMaker 2, it copies through every instance's mirror listener until the end of
    // the run (its writes after the barrier must all be refused); it syncs the group's offsets.
    let _mm2 = match tool {
        Tool::Agent => None,
        Tool::MirrorMaker2 => Some(mm2::start(dir, source)?),
    };
    let history: Shared = Arc::default();

    // Before the failover: the source under load, mirrored by the agent, under the nemesis.
    let source_producers = clients::start_producers(&clients::source_specs(source), &history, dir)?;
    // The application's group reads the source until it stops, some time before the failover
    // (at 70 % of the time before it): what it had not read by then it must read on the
    // destination, from the offsets the agent synced.
    let source_member = group::start_member(source, dir, "source")?;
    let group_stops = Duration::from_millis(schedule.before_ms * 7 / 10);
    let source_group = tokio::spawn(async move {
        tokio::time::sleep(group_stops).await;
        tokio::task::spawn_blocking(move || source_member.into_output().reads).await
    });
    let stop_probes = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicBool::new(false));
    let hold_moved = Arc::new(AtomicBool::new(false));
    let moved_task = tokio::spawn(probes::moved_producer(
        probes::Moved {
            source: source.to_string(),
            gateways: (0..INSTANCES).map(client_addr).collect(),
            topic: TOPIC.to_string(),
            partitions: PARTITIONS,
            moved: moved.clone(),
            hold: hold_moved.clone(),
            target: Arc::new(AtomicUsize::new(schedule.driver)),
            stop: stop_probes.clone(),
            every: Duration::from_millis(150),
        },
        history.clone(),
    ));
    // Short-lived producers, one every 1.5 s until the failover: the ids a local producer must
    // not be handed as they are.
    let stop_one_shots = Arc::new(AtomicBool::new(false));
    let one_shot_task = tokio::spawn(probes::one_shot_producers(
        source.to_string(),
        TOPIC.to_string(),
        PARTITIONS,
        schedule.before_ms / 1_500,
        stop_one_shots.clone(),
        Duration::from_millis(1_500),
        history.clone(),
    ));
    // MirrorMaker 2 takes a while to start copying (a JVM, a Connect group, its tasks): the
    // schedule's clock starts once it copies, so that its faults meet the copying.
    if tool == Tool::MirrorMaker2 {
        logs::wait_copying(&destination[0], Duration::from_secs(120)).await?;
    }
    let t0 = Instant::now();
    let (faults, operations, network) = tokio::join!(
        world.faults(t0, &schedule.before),
        world.operations(t0, &schedule.operations),
        world.faults(t0, &schedule.network)
    );
    faults.and(operations).and(network)?;
    tokio::time::sleep_until((t0 + Duration::from_millis(schedule.before_ms)).into()).await;

    // The failover.
    hold_moved.store(true, Ordering::Relaxed);
    stop_one_shots.store(true, Ordering::Relaxed);
    let _ = one_shot_task.await;
    let mut caught_up = None;
    match schedule.mode {
        Mode::Planned => {
            clients::stop_producers(source_producers).await;
            caught_up = Some(logs::wait_caught_up(tool, source, &destination[0]).await);
        }
        Mode::Unplanned => {
            world.rig(&["kill-node", "source", "1"]).await?;
            // The source's producers go on against a dead cluster until the end.
            let keep = source_producers;
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                clients::stop_producers(keep).await;
            });
        }
    }
    world.all_up()?;
    // Planned: nothing is written any more, so the agent's PSM must be what the leaders keep.
    // Behind another tool no instance sees every mirror write (each follows its own listener's):
    // there is no PSM that must equal the leaders'.
    let psm_diff = match (schedule.mode, tool) {
        (Mode::Planned, Tool::Agent) => Some(psm::quiet(&destination[0]).await),
        _ => None,
    };
    let source_reads = source_group
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let local_producers = clients::start_producers(
        &clients::local_specs(schedule.driver, client_addr),
        &history,
        dir,
    )?;
    let late_task = tokio::spawn(probes::late_mirror_writer(
        (0..INSTANCES).map(mirror_addr).collect(),
        TOPIC.to_string(),
        PARTITIONS,
        stop_probes.clone(),
        Duration::from_millis(300),
        history.clone(),
    ));
    if let AtFailover::PauseOther { instance, .. } = schedule.at_failover {
        world.with(|v| v[instance].pause());
    }
    let called = Instant::now();
    let called_ms = now_ms();
    let (failover_id, driver) = gateways::call_failover(schedule.driver).await?;
    eprintln!("chaos: failover {failover_id} through instance {driver}");
    let at_failover = async {
        match schedule.at_failover {
            AtFailover::Nothing => Ok(()),
            AtFailover::PauseOther { instance, ms } => {
                tokio::time::sleep_until((called + Duration::from_millis(ms)).into()).await;
                world.with(|v| v[instance].resume());
                Ok(())
            }
            AtFailover::KillDriver { after_ms, ms } => {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                eprintln!("chaos: killing the driver, instance {driver}");
                world
                    .fault(Fault::KillGateway {
                        instance: driver,
                        ms,
                    })
                    .await
            }
        }
    };
    // The moved producer and the application's group go to the gateways once the mirror is
    // STOPPED somewhere (the producer's first write there carries the source's producer id).
    let release_moved = async {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            for i in 0..INSTANCES {
                if let Ok(s) = gateways::states(i).await {
                    if s["STOPPED"].as_i64() == Some(PARTITIONS as i64) {
                        moved.store(true, Ordering::Relaxed);
                        hold_moved.store(false, Ordering::Relaxed);
                        let gateways: Vec<String> = (0..INSTANCES).map(client_addr).collect();
                        return group::start_member(&gateways.join(","), dir, "destination")
                            .map(Some);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(None)
    };
    let t1 = Instant::now();
    let (a, b, member) = tokio::join!(
        at_failover,
        world.faults(t1, &schedule.after),
        release_moved
    );
    a?;
    b?;
    let destination_member = member?;
    tokio::time::sleep_until((t1 + Duration::from_millis(schedule.after_ms)).into()).await;
    // The failback, if drawn (the agent's profile): the old source read as the failover left it,
    // realigned, and mirrored back into while the local producers go on.
    let back = match (&schedule.failback, tool) {
        (Some(plan), Tool::Agent) => Some(
            failback::start(
                world,
                dir,
                plan,
                schedule.mode,
                (source, destination),
                (&failover_id, driver),
            )
            .await?,
        ),
        _ => None,
    };

    // Quiet: clients stop, every process runs, the source is back to be read.
    clients::stop_producers(local_producers).await;
    stop_probes.store(true, Ordering::Relaxed);
    let _ = tokio::join!(moved_task, late_task);
    world.all_up()?;
    if schedule.mode == Mode::Unplanned && back.is_none() {
        world.rig(&["start-node", "source", "1"]).await?;
    }
    let mut converged = true;
    for i in 0..INSTANCES {
        if let Err(e) =
            gateways::wait_state(i, "STOPPED", PARTITIONS as i64, Duration::from_secs(120)).await
        {
            eprintln!("chaos: {e}");
            converged = false;
        }
    }
    let mut barriers: Vec<Vec<Option<check::Barrier>>> = vec![Vec::new(); PARTITIONS as usize];
    for i in 0..INSTANCES {
        let b = gateways::barriers(i, PARTITIONS).await?;
        for (p, x) in b.into_iter().enumerate() {
            barriers[p].push(x);
        }
    }
    let mut report = None;
    for i in (0..INSTANCES).map(|k| (driver + k) % INSTANCES) {
        match gateways::report(i, &failover_id, PARTITIONS).await {
            Ok(r) => {
                report = Some(r);
                break;
            }
            Err(e) => eprintln!("chaos: {e}"),
        }
    }
    let report = report.ok_or("no instance has the failover's report")?;
    let rpo = report.rpo;
    let source_raw = match &back {
        Some(b) => b.source_before.clone(),
        None => logs::read_settled(source).await?,
    };
    let destination_log = logs::read_settled(&destination[0]).await?;
    std::fs::write(dir.join("source.tsv"), logs::dump(&source_raw)).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("destination.tsv"), logs::dump(&destination_log))
        .map_err(|e| e.to_string())?;
    let source_records = logs::source_records(source_raw.clone());
    let (ops, history_lines) = clients::with(&history, |h| {
        let lines: Vec<String> = h
            .ops()
            .iter()
            .filter_map(|o| serde_json::to_string(o).ok())
            .collect();
        (h.ops().to_vec(), lines)
    });
    std::fs::write(dir.join("history.jsonl"), history_lines.join("\n") + "\n")
        .map_err(|e| e.to_string())?;
    // The group reads on until it has reached the end of every partition (a minute at most).
    let destination_reads = match destination_member {
        Some(m) => {
            group::wait_caught_up(&m, &destination_log).await;
            m.into_output().reads
        }
        None => Vec::new(),
    };
    group::write_reads(dir, &source_reads, &destination_reads)?;
    let verdict = check(&Inputs {
        mode: schedule.mode,
        tool,
        ops: &ops,
        source: &source_records,
        source_log: &source_raw,
        destination: &destination_log,
        barriers: &barriers,
        rpo: &rpo,
        group: Some(GroupReads {
            source: &source_reads,
            destination: &destination_reads,
        }),
    });
    world.all_up()?;
    let mut panics: Vec<String> = world.with(|v| v.iter().flat_map(|i| i.panics()).collect());
    if let Ok(c) = world.crashes.lock() {
        panics.extend(c.iter().cloned());
    }
    let back = match &back {
        Some(b) => Some(failback::check(b, dir, source, (&destination[0], &destination_log)).await),
        None => None,
    };
    let psm_ok = psm_diff.as_ref().is_none_or(Vec::is_empty);
    let back_ok = back.as_ref().is_none_or(|b| b.ok);
    let ok = verdict.ok() && converged && panics.is_empty() && psm_ok && back_ok;
    summary(schedule, &verdict, converged, &panics, caught_up);
    for d in psm_diff.iter().flatten().take(10) {
        eprintln!("chaos:   PSM: {d}");
    }
    let first_local_ack_ms = ops
        .iter()
        .filter(|o| o.origin == Origin::Local)
        .filter(|o| matches!(o.outcome, check::Outcome::Acked { .. }))
        .filter_map(|o| o.answered_ms)
        .min();
    let mut v = verdict_json(schedule, &verdict, &rpo, converged, &panics, sabotage, ok);
    v["profile"] = json!(tool);
    v["tool_copies"] = json!(verdict.tool_copies);
    v["rto_seconds"] = json!(report.rto_seconds);
    v["psm_mismatch"] = json!(psm_diff.as_ref().map(Vec::len));
    if let Some(d) = psm_diff.filter(|d| !d.is_empty()) {
        if let Some(list) = v["violations"].as_array_mut() {
            list.extend(d.into_iter().take(10).map(|x| json!(format!("PSM: {x}"))));
        }
    }
    if let Some(b) = back {
        v["failback"] = b.json;
        if let Some(list) = v["violations"].as_array_mut() {
            list.extend(b.violations.into_iter().map(Value::from));
        }
    }
    v["first_local_ack_s"] =
        json!(first_local_ack_ms.map(|t| ((t - called_ms) as f64 / 100.0).round() / 10.0));
    std::fs::write(dir.join("verdict.json"), v.to_string()).map_err(|e| e.to_string())?;
    Ok(v)
}
