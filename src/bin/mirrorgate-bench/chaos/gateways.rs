//! The chaos run's gateway instances: three processes of the gateway binary sharing a state
//! topic, each configured with the mirror and its built-in agent (one runs it at a time; or,
//! behind MirrorMaker 2, `mirroring: external` and no agent), each
//! with its own state directory that outlives a kill; and the failback gateway (index
//! [`FAILBACK`]), alone in front of the old source with the mirror back from the destination.
//! Instance `i` listens from port `BASE + 100 i` (client), `+ 10` (mirror) and `+ 20` (admin).
//!
//! Owns: the instances' configuration, processes and signals (SIGKILL, SIGTERM, SIGSTOP, SIGCONT), and the
//! admin calls of the run. Must not touch: the clusters (the rig), the clients, the rules.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::Value;

use super::check::{Barrier, Tool};
use super::disk::Disk;
use super::plan::{FAILBACK, INSTANCES};
use crate::fleet::admin;
use crate::process::{die_with_parent, readyz};

/// Instance 0's client listener port.
const BASE: u16 = 18192;
pub const MIRROR: &str = "chaos";
/// The failback gateway's mirror: from the destination back to the old source.
pub const MIRROR_BACK: &str = "chaos-back";
pub const STATE_TOPIC: &str = "chaos-state";
/// How often the agent's owner syncs the application group's offsets: often, so that rounds
/// meet the faults.
const GROUP_SYNC_MS: u64 = 1_000;

/// One instance.
pub struct Instance {
    pub index: usize,
    dir: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Extra environment (the sabotage).
    env: Vec<(String, String)>,
    /// The disk its state directory lives on (`disk.rs`).
    disk: Disk,
    /// The `cgroup.procs` of its cgroup, which it joins as it starts (`net.rs`).
    cgroup: Option<std::ffi::CString>,
}

/// The client, mirror and admin ports of instance `i`.
pub fn ports(i: usize) -> (u16, u16, u16) {
    let base = BASE + 100 * i as u16;
    (base, base + 10, base + 20)
}

pub fn client_addr(i: usize) -> String {
    format!("127.0.0.1:{}", ports(i).0)
}

pub fn mirror_addr(i: usize) -> String {
    format!("127.0.0.1:{}", ports(i).1)
}

pub fn admin_addr(i: usize) -> String {
    format!("127.0.0.1:{}", ports(i).2)
}

/// What every instance of a run shares: the clusters, the mirrored topic and the session timeout.
pub struct Topology {
    pub source: String,
    pub destination: Vec<String>,
    pub topic: String,
    pub session_ms: u64,
    /// What mirrors: the built-in agent, or MirrorMaker 2 (`mirroring: external`).
    pub tool: Tool,
}

/// The mirror instance `i` serves.
pub fn mirror_of(i: usize) -> &'static str {
    if i == FAILBACK {
        MIRROR_BACK
    } else {
        MIRROR
    }
}

fn yaml(i: usize, t: &Topology, state: &Path) -> String {
    let (client, mirror, admin) = ports(i);
    if i == FAILBACK {
        // In front of the old source, alone (no state topic), with the built-in agent copying
        // the destination back.
        return format!(
            "destination: {{ bootstrap: [\"{}\"] }}\n\
             listeners:\n  client: {{ bind: 127.0.0.1, port_base: {client}, max_brokers: 4 }}\n  mirror: {{ bind: 127.0.0.1, port_base: {mirror}, max_brokers: 4 }}\n\
             admin: {{ bind: \"127.0.0.1:{admin}\" }}\n\
             state_dir: {}\n\
             logging: {{ level: warn }}\n\
             mirrors:\n  - name: {MIRROR_BACK}\n    topics: [\"{}\"]\n    source: {{ bootstrap: [{}] }}\n",
            t.source,
            state.display(),
            t.topic,
            crate::process::yaml_list(&t.destination),
        );
    }
    let (source, destination, topic, session_ms) =
        (&t.source, &t.destination, &t.topic, t.session_ms);
    // The agent syncs the groups; behind another tool, that tool does (and no agent runs).
    let mirroring = match t.tool {
        Tool::Agent => format!("groups: {{ sync_interval_ms: {GROUP_SYNC_MS} }}"),
        Tool::MirrorMaker2 => "mirroring: external".to_string(),
    };
    format!(
        "destination: {{ bootstrap: [{}] }}\n\
         listeners:\n  client: {{ bind: 127.0.0.1, port_base: {client}, max_brokers: 4 }}\n  mirror: {{ bind: 127.0.0.1, port_base: {mirror}, max_brokers: 4 }}\n\
         admin: {{ bind: \"127.0.0.1:{admin}\" }}\n\
         state_dir: {}\n\
         logging: {{ level: warn }}\n\
         instances:\n  id: gw-{i}\n  state_topic: {STATE_TOPIC}\n  session_timeout_ms: {session_ms}\n\
         mirrors:\n  - name: {MIRROR}\n    topics: [\"{topic}\"]\n    source: {{ bootstrap: [\"{source}\"] }}\n    {mirroring}\n",
        crate::process::yaml_list(destination),
        state.display()
    )
}

impl Instance {
    /// Configures instance `i` in `work/gw-i` (state initialised) without starting it.
    pub fn configure(
        bin: &Path,
        i: usize,
        work: &Path,
        topology: &Topology,
        env: Vec<(String, String)>,
        cgroup: Option<PathBuf>,
    ) -> Result<Instance, String> {
        let dir = work.join(format!("gw-{i}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (disk, why) = Disk::mount(&dir);
        if let (Some(why), 0) = (why, i) {
            eprintln!("chaos: no disk of their own for the state directories ({why}): full-disk faults have no effect in this run");
        }
        let config = dir.join("mirrorgate.yaml");
        let text = yaml(i, topology, &disk.state_dir);
        std::fs::write(&config, text).map_err(|e| e.to_string())?;
        crate::process::state_init(bin, &config).map_err(|e| format!("instance {i}: {e}"))?;
        Ok(Instance {
            index: i,
            dir,
            child: None,
            paused: false,
            env,
            disk,
            cgroup: cgroup.and_then(|p| {
                use std::os::unix::ffi::OsStringExt;
                std::ffi::CString::new(p.into_os_string().into_vec()).ok()
            }),
        })
    }

    /// Starts the process (its log appended to `gateway.log`); nothing to do while it runs (two
    /// faults of one instance may overlap: the first to end starts it again).
    pub fn start(&mut self, bin: &Path) -> Result<(), String> {
        if self.running() {
            return Ok(());
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("gateway.log"))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        if let Some(procs) = self.cgroup.clone() {
            join_cgroup(&mut cmd, procs);
        }
        let child = die_with_parent(&mut cmd)
            .arg("run")
            .arg("--config")
            .arg(self.dir.join("mirrorgate.yaml"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start instance {}: {e}", self.index))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, sig);
            }
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGTERM (a rolling restart's graceful stop); SIGCONT first if a fault paused it.
    pub fn terminate(&mut self) {
        if self.paused {
            self.resume();
        }
        self.signal(libc::SIGTERM);
    }

    /// After a stop the run asked for: the process is no longer counted as ended on its own.
    pub fn forget_exit(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
        self.paused = true;
    }

    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
        self.paused = false;
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// How the process ended, if it did on its own (not killed by the run).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(status))) => Some(status.to_string()),
            _ => None,
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Lines of its log that say it panicked.
    pub fn panics(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("gateway.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked"))
            .map(str::to_string)
            .collect()
    }
}

impl Instance {
    /// Fills the disk of the state directory: whether it is full.
    pub fn fill_disk(&self) -> bool {
        self.disk.fill()
    }

    /// Frees the disk of the state directory.
    pub fn free_disk(&self) {
        self.disk.free()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

/// Waits until instance `i` answers `/readyz` with 200.
pub async fn wait_ready(i: usize, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !readyz(ports(i).2).await {
        if Instant::now() > deadline {
            return Err(format!("instance {i} not ready within {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The mirror's partition counts per state on instance `i`.
pub async fn states(i: usize) -> Result<Value, String> {
    let (_, m) = admin(
        &admin_addr(i),
        Method::GET,
        &format!("/v1/mirrors/{}", mirror_of(i)),
    )
    .await?;
    Ok(m["states"].clone())
}

/// Waits until instance `i` counts `n` partitions in `state`.
pub async fn wait_state(i: usize, state: &str, n: i64, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        let s = states(i).await;
        if s.as_ref().ok().and_then(|s| s[state].as_i64()) == Some(n) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "instance {i}: not {n} partitions {state} within {limit:?}: {s:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The barrier of each partition as instance `i` reports it.
pub async fn barriers(i: usize, partitions: i32) -> Result<Vec<Option<Barrier>>, String> {
    let (_, v) = admin(
        &admin_addr(i),
        Method::GET,
        &format!("/v1/mirrors/{}/partitions", mirror_of(i)),
    )
    .await?;
    let list = v["partitions"]
        .as_array()
        .or_else(|| v.as_array())
        .ok_or_else(|| format!("instance {i}: partitions: {v}"))?;
    Ok((0..partitions)
        .map(|p| {
            let e = list
                .iter()
                .find(|e| e["partition"].as_i64() == Some(p as i64))?;
            Some(Barrier {
                offset: e["barrier_offset"].as_i64()?,
                producer_id: e["barrier_producer_id"].as_i64(),
            })
        })
        .collect())
}

/// What the chaos run reads of a failover report: `rpo_records` per partition, `rto_seconds`.
pub struct Report {
    pub rpo: Vec<Option<i64>>,
    pub rto_seconds: Option<f64>,
}

/// The failover report of `id` as instance `i` has it.
pub async fn report(i: usize, id: &str, partitions: i32) -> Result<Report, String> {
    let (status, v) = admin(
        &admin_addr(i),
        Method::GET,
        &format!("/v1/mirrors/{}/failovers/{id}", mirror_of(i)),
    )
    .await?;
    if status != 200 {
        return Err(format!(
            "failover report {id} on instance {i}: {status} {v}"
        ));
    }
    let list = v["partitions"]
        .as_array()
        .ok_or_else(|| format!("failover report {id}: no partitions: {v}"))?;
    let rpo = (0..partitions)
        .map(|p| {
            list.iter()
                .find(|e| e["partition"].as_i64() == Some(p as i64))
                .and_then(|e| e["rpo_records"].as_i64())
        })
        .collect();
    Ok(Report {
        rpo,
        rto_seconds: v["rto_seconds"].as_f64(),
    })
}

/// POSTs `path` through instance `first`, or the next instances while one cannot answer 200
/// (down, paused, refusing), each call bounded by `per_call`, for `limit` at most: the answer.
pub async fn post_through(
    first: usize,
    path: &str,
    per_call: Duration,
    limit: Duration,
) -> Result<Value, String> {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    for i in (0..).map(|n| (first + n) % INSTANCES) {
        let addr = admin_addr(i);
        match tokio::time::timeout(per_call, admin(&addr, Method::POST, path)).await {
            Ok(Ok((200, v))) => return Ok(v),
            Ok(Ok((status, v))) => last = format!("instance {i}: {status} {v}"),
            Ok(Err(e)) => last = format!("instance {i}: {e}"),
            Err(_) => last = format!("instance {i}: no answer within {per_call:?}"),
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("POST {path} within {limit:?}: {last}"))
}

/// Calls the failover (after a dry run) through instance `driver`, or the next instances while
/// it cannot answer: the failover id.
pub async fn call_failover(driver: usize) -> Result<(String, usize), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    let mut i = driver;
    while Instant::now() < deadline {
        let base = format!("/v1/mirrors/{MIRROR}/failover");
        let dry = admin(
            &admin_addr(i),
            Method::POST,
            &format!("{base}?dry_run=true"),
        )
        .await;
        match dry {
            Ok((200, _)) => {}
            other => {
                last = format!("dry run through instance {i}: {other:?}");
                i = (i + 1) % INSTANCES;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        }
        match admin(&admin_addr(i), Method::POST, &base).await {
            Ok((202, v)) => {
                let id = v["failover_id"].as_str().unwrap_or_default().to_string();
                return Ok((id, i));
            }
            other => last = format!("failover through instance {i}: {other:?}"),
        }
        i = (i + 1) % INSTANCES;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("no instance took the failover call: {last}"))
}

/// Makes the process `cmd` starts write itself into the cgroup whose `cgroup.procs` is `procs`
/// before it executes, so that every socket it opens belongs to that cgroup. A process that
/// cannot join runs outside it (its network faults then have no effect).
fn join_cgroup(cmd: &mut Command, procs: std::ffi::CString) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls open, write and
    // close (async-signal-safe) on a path prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                // "0": the writing process itself.
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
            Ok(())
        });
    }
}
