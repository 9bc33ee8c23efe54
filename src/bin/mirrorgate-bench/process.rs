//! Processes a benchmark starts and measures: the gateway binary run as its own process, and
//! what `/proc` says about any process (CPU time, resident memory).
//!
//! Owns: building/locating `target/<profile>/mirrorgate`, the gateway child's temp directory,
//! config and log, and the `/proc` readings. Must not touch: clusters (the rig, in `main.rs`) or
//! what a benchmark does with the gateway.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::repo;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// `target/release/mirrorgate` next to this executable, rebuilt when cargo is at hand (a
/// `cargo run --bin mirrorgate-bench` does not build the gateway binary), into the target
/// directory this executable lives in (so that a bench run straight from another target
/// directory does not build one binary and start another). Set `MIRRORGATE_BENCH_NO_BUILD=1`
/// to use the binary as it is.
pub fn gateway_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(err)?;
    let dir = exe.parent().ok_or("no executable directory")?;
    let bin = dir.join("mirrorgate");
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if std::env::var_os("MIRRORGATE_BENCH_NO_BUILD").is_none() {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(repo())
            .args(["build", "--bin", "mirrorgate"]);
        if profile == "release" {
            cmd.arg("--release");
        }
        if let Some(target) = dir
            .parent()
            .filter(|_| matches!(profile, "release" | "debug"))
        {
            cmd.arg("--target-dir").arg(target);
        }
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(format!("building the gateway binary failed ({s})")),
            Err(e) if bin.exists() => {
                eprintln!("cannot run {cargo} ({e}); using {}", bin.display())
            }
            Err(e) => return Err(format!("cannot run {cargo} to build the gateway: {e}")),
        }
    }
    if !bin.exists() {
        return Err(format!(
            "{} not found; run `cargo build --release`",
            bin.display()
        ));
    }
    Ok(bin)
}

/// Makes the child started by `cmd` receive SIGKILL when this process dies, so a benchmark
/// that is interrupted (Ctrl-C, a timeout's kill) leaves no proxy behind; on a normal end the
/// owners' `Drop` stops them first.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl, which is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}

/// The gateway process; killed (and its temp directory removed) on drop.
pub struct GatewayProcess {
    pub child: Child,
    pub dir: PathBuf,
    pub admin: u16,
}

/// The mirror of a benchmark gateway: a mirror listener from `port_base`, one mirror `bench`
/// (fed by an external tool) of the topics matching `topics_regex`, and with `instances: Some((id,
/// state_topic))` one instance of several sharing a state topic. With `forward: Some(port)`, a
/// second mirror `bench-forward` whose source is the destination cluster itself, of a topic that
/// never exists, with a forward listener from `port`: every topic written through it goes to
/// its source, the path (and cost) of a forward listener before a switchover.
pub struct Mirrors {
    pub port_base: u16,
    pub topics_regex: String,
    pub instances: Option<(String, String)>,
    pub forward: Option<u16>,
}

/// A benchmark gateway's configuration: the client listener on 127.0.0.1 from `base`, admin on
/// `admin`, state in `state`, warnings only, and `mirrors` when given.
pub fn gateway_yaml(
    destination: &[String],
    base: u16,
    admin: u16,
    state: &Path,
    mirrors: Option<&Mirrors>,
) -> String {
    let (mirror_listener, mirrors) = match mirrors {
        Some(m) => (
            format!(
                "  mirror: {{ bind: 127.0.0.1, port_base: {}, max_brokers: 4 }}\n",
                m.port_base
            ),
            format!(
                "mirrors:\n  - {{ name: bench, topics: [\"regex:{}\"] }}\n{}{}",
                m.topics_regex,
                m.forward.map(|port| format!(
                    "  - {{ name: bench-forward, topics: [\"bench-forward-never-created\"], source: {{ bootstrap: [{}] }}, forward: {{ listener: {{ bind: 127.0.0.1, port_base: {port}, max_brokers: 4 }} }} }}\n",
                    yaml_list(destination)
                )).unwrap_or_default(),
                m.instances
                    .as_ref()
                    .map(|(id, topic)| format!("instances:\n  id: {id}\n  state_topic: {topic}\n"))
                    .unwrap_or_default()
            ),
        ),
        None => (String::new(), String::new()),
    };
    format!(
        "destination: {{ bootstrap: [{}] }}\n\
         listeners:\n  client: {{ bind: 127.0.0.1, port_base: {base}, max_brokers: 4 }}\n\
         {mirror_listener}\
         admin: {{ bind: \"127.0.0.1:{admin}\" }}\n\
         state_dir: {}\n\
         logging: {{ level: warn }}\n\
         {mirrors}{extra}",
        yaml_list(destination),
        state.display(),
        extra = extra_yaml(),
    )
}

/// Extra top-level configuration for the benchmark gateways, for experiments
/// (`MIRRORGATE_BENCH_GATEWAY_YAML='limits: {connection_threads: 1}'`): appended as given.
fn extra_yaml() -> String {
    match std::env::var("MIRRORGATE_BENCH_GATEWAY_YAML") {
        Ok(y) if !y.trim().is_empty() => format!("{}\n", y.trim_end()),
        _ => String::new(),
    }
}

/// Runs `BIN state init --config CONFIG`: the state directory and, with instances, the state
/// topic, ready before the gateway starts.
pub fn state_init(bin: &Path, config: &Path) -> Result<(), String> {
    let out = Command::new(bin)
        .args(["state", "init", "--config"])
        .arg(config)
        .output()
        .map_err(|e| format!("cannot run {} state init: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} state init failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// `["a", "b"]`'s inside for a YAML flow sequence: each address quoted, comma-separated.
pub fn yaml_list(addrs: &[String]) -> String {
    addrs
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How [`GatewayProcess::spawn`] starts a gateway.
pub struct ProcessSpec<'a> {
    /// Part of its temp directory's name.
    pub name: &'a str,
    /// Its admin port.
    pub admin: u16,
    /// Run `bin state init --config` first.
    pub init_state: bool,
    /// Environment variables of the process.
    pub env: &'a [(&'a str, &'a str)],
}

impl GatewayProcess {
    /// Starts `bin run` with a client listener on 127.0.0.1 from `base` (node n on
    /// `base + n - 1`), admin on `admin`, warnings only, a fresh temp state directory.
    pub fn start(
        bin: &Path,
        destination: &[String],
        base: u16,
        admin: u16,
        name: &str,
    ) -> Result<GatewayProcess, String> {
        Self::start_with(bin, destination, base, admin, name, None)
    }

    /// As [`GatewayProcess::start`], and with `mirror: Some((port_base, topics, forward))` also a
    /// mirror listener on 127.0.0.1 from `port_base` and one mirror `bench` fed by an external
    /// tool (no source cluster) holding the topics matched by the regex `topics` (and the
    /// `bench-forward` mirror of [`Mirrors`] with a forward listener from `forward`).
    pub fn start_with(
        bin: &Path,
        destination: &[String],
        base: u16,
        admin: u16,
        name: &str,
        mirror: Option<(u16, &str, Option<u16>)>,
    ) -> Result<GatewayProcess, String> {
        let mirrors = mirror.map(|(port, topics, forward)| Mirrors {
            port_base: port,
            topics_regex: topics.to_string(),
            instances: None,
            forward,
        });
        let spec = ProcessSpec {
            name,
            admin,
            init_state: mirror.is_some(),
            env: &[],
        };
        Self::spawn(bin, &spec, |state| {
            gateway_yaml(destination, base, admin, state, mirrors.as_ref())
        })
    }

    /// Starts `bin run` with the configuration `yaml(state directory)` in a fresh temp directory
    /// (`spec`: its name, admin port, environment, and whether `bin state init` runs first, as
    /// an operator would before a gateway with mirrors or instances starts).
    pub fn spawn(
        bin: &Path,
        spec: &ProcessSpec<'_>,
        yaml: impl FnOnce(&Path) -> String,
    ) -> Result<GatewayProcess, String> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("mirrorgate-bench-{}-{stamp}", spec.name));
        std::fs::create_dir_all(&dir).map_err(err)?;
        let config = dir.join("mirrorgate.yaml");
        std::fs::write(&config, yaml(&dir.join("state"))).map_err(err)?;
        if spec.init_state {
            if let Err(e) = state_init(bin, &config) {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        }
        let log = std::fs::File::create(dir.join("gateway.log")).map_err(err)?;
        let child = die_with_parent(&mut Command::new(bin))
            .arg("run")
            .arg("--config")
            .arg(&config)
            .envs(spec.env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(err)?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        Ok(GatewayProcess {
            child,
            dir,
            admin: spec.admin,
        })
    }

    /// How the process ended, when it did.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/readyz` answers 200 (destination discovered, listeners bound).
    pub async fn wait_ready(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while !readyz(self.admin).await {
            if Instant::now() > deadline {
                self.print_log_tail();
                return Err(format!("gateway not ready on /readyz within {limit:?}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// The last lines of the gateway's log, to stderr (after a failure).
    pub fn print_log_tail(&self) {
        let log = std::fs::read_to_string(self.dir.join("gateway.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        eprintln!("gateway log (last lines):");
        for l in tail.iter().rev() {
            eprintln!("  {l}");
        }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // MIRRORGATE_BENCH_LOG_DIR keeps every gateway's log (e.g. run with RUST_LOG=info to
        // read a failover's steps from its timestamps).
        if let Some(keep) = std::env::var_os("MIRRORGATE_BENCH_LOG_DIR") {
            let keep = PathBuf::from(keep);
            let name = self.dir.file_name().map(|n| n.to_os_string());
            if let (Ok(()), Some(name)) = (std::fs::create_dir_all(&keep), name) {
                let _ = std::fs::copy(
                    self.dir.join("gateway.log"),
                    keep.join(name).with_extension("log"),
                );
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// GET /readyz on the admin port within one second; true on 200.
pub async fn readyz(admin: u16) -> bool {
    let probe = async {
        let mut s = TcpStream::connect(("127.0.0.1", admin)).await.ok()?;
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = [0u8; 64];
        let mut n = 0;
        while n < 12 {
            let r = s.read(&mut buf[n..]).await.ok()?;
            if r == 0 {
                break;
            }
            n += r;
        }
        Some(buf[..n].starts_with(b"HTTP/1.1 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), probe).await,
        Ok(Some(true))
    )
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`) in KiB.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Resident memory of `pid` now, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// The peak resident memory of `pid` since it started, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// CPU time (user + system, all threads) `pid` has used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat).map(|ticks| ticks as f64 / clock_ticks_per_second())
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may contain spaces, so fields are counted after its closing `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11); // field 3 is the first after ')'
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU time used by a process between two points: `start()` then `stop()`.
pub struct CpuMeter {
    pid: u32,
    start: f64,
}

impl CpuMeter {
    pub fn start(pid: u32) -> CpuMeter {
        CpuMeter {
            pid,
            start: cpu_seconds(pid).unwrap_or(0.0),
        }
    }

    /// CPU seconds since `start`.
    pub fn stop(&self) -> f64 {
        (cpu_seconds(self.pid).unwrap_or(self.start) - self.start).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_a_command_name_with_spaces() {
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 1000 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
    }

    #[test]
    fn this_process_reads_its_own_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        let rss = rss_kib(me).expect("VmRSS");
        assert!(rss > 0);
        assert!(peak_rss_kib(me).expect("VmHWM") >= rss);
    }
}
