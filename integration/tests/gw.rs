//! An in-process gateway for integration tests: started on free ports in front of a real
//! destination cluster, on its own runtime thread, stopped when dropped.
//!
//! Failures the gateway hides from its clients fail the test instead:
//! - a panic on a [`TestGateway`]'s runtime threads (named `test-gateway-<id>`) is counted by a
//!   process-wide panic hook, and dropping that gateway fails the test;
//! - a [`ProcessGateway`] whose log says `panicked at` fails the test when it is dropped;
//! - every panic of the test process (a test's failed assertion too) is written at once on its
//!   standard error, in one line: libtest prints a failed test's message only at the end.
//!
//! Scratch directories (state directories, the process gateway's config and log) are removed
//! when the test process exits, and kept (their path printed) when a test using them failed.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use mirrorgate::app::Gateway;
use mirrorgate::config::Config;

/// A running in-process gateway.
pub struct TestGateway {
    pub gateway: Arc<Gateway>,
    pub config: Config,
    rt: Option<tokio::runtime::Runtime>,
    /// Names its runtime threads `test-gateway-<id>`, the key of its panic count.
    id: u64,
}

static NEXT_BASE: Mutex<u16> = Mutex::new(0);

/// Ports handed out by [`free_port_range`]: below Linux's ephemeral range (32768-60999), so an
/// outgoing connection cannot take one between the check and the bind, and clear of every
/// fixed port of the repository: the demo config (9092-9107, 9180, 9192-9207), the benchmarks
/// (17092-17610), the rig (19092-29094, and +1000/+1100 for the isolated rigs of rig_tests.rs).
const PORTS_FROM: u16 = 10000;
/// One slice of this many ports per test process (slices are taken with a lock file, so test
/// processes of several worktrees running at once never share a slice).
const PORTS_PER_SLICE: u16 = 600;
const PORT_SLICES: u16 = 10;

/// The first port of this process's slice: the first slice whose lock file
/// (`$TMPDIR/mirrorgate-test-ports-<n>.lock`) this process could lock; the lock is held until
/// the process exits. When every slice is taken, one chosen by process id (shared, but still
/// checked port by port).
fn slice_start() -> u16 {
    static START: OnceLock<u16> = OnceLock::new();
    *START.get_or_init(|| {
        use std::os::fd::AsRawFd;
        for n in 0..PORT_SLICES {
            let path = std::env::temp_dir().join(format!("mirrorgate-test-ports-{n}.lock"));
            let Ok(file) = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
            else {
                continue;
            };
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                // Held for the life of the process (released by the kernel at exit).
                std::mem::forget(file);
                return PORTS_FROM + n * PORTS_PER_SLICE;
            }
        }
        let n = (std::process::id() % u32::from(PORT_SLICES)) as u16;
        eprintln!("gw: every port slice is locked; sharing slice {n}");
        PORTS_FROM + n * PORTS_PER_SLICE
    })
}

/// A forward listener on free ports of its own (up to 4 brokers), with a switchover's hold
/// bound `hold_ms`; and its bootstrap address.
pub fn forward_listener(hold_ms: u64) -> (mirrorgate::config::ForwardConfig, String) {
    let port = free_port_range(4);
    let forward = mirrorgate::config::ForwardConfig {
        listener: mirrorgate::config::ListenerConfig {
            bind: "127.0.0.1".into(),
            advertised_host: None,
            port_base: port,
            node_id_base: 1,
            max_brokers: 4,
            tls: None,
            allowed_principals: None,
        },
        cluster_id: None,
        hold_ms,
    };
    (forward, format!("127.0.0.1:{port}"))
}

/// A base port such that `base..base+n` are all free right now, from this process's slice.
pub fn free_port_range(n: u16) -> u16 {
    let start = slice_start();
    let end = start + PORTS_PER_SLICE;
    assert!(n < PORTS_PER_SLICE, "{n} ports do not fit in a slice");
    for _ in 0..200 {
        let base = {
            let mut next = NEXT_BASE.lock().unwrap_or_else(|p| p.into_inner());
            if *next < start || *next + n > end {
                // First call, or the slice is used up: start it again (ports of gateways that
                // are gone are free again; the bind check below skips those still in use).
                *next = start;
            }
            let base = *next;
            *next += n + 1;
            base
        };
        if (base..base + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no free range of {n} ports found on 127.0.0.1 in {start}..{end}");
}

// ------------------------------------------------------------------ scratch directories

/// Scratch directories of this process: path → whether to keep it (a test using it failed).
fn scratch_dirs() -> &'static Mutex<HashMap<PathBuf, bool>> {
    static DIRS: OnceLock<Mutex<HashMap<PathBuf, bool>>> = OnceLock::new();
    DIRS.get_or_init(|| {
        extern "C" fn remove_scratch_dirs() {
            let dirs = scratch_dirs().lock().unwrap_or_else(|p| p.into_inner());
            for (dir, keep) in dirs.iter() {
                if !keep {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
        }
        // SAFETY: registers a plain function to run at process exit.
        unsafe { libc::atexit(remove_scratch_dirs) };
        Mutex::new(HashMap::new())
    })
}

/// A new empty directory, removed when the test process exits unless [`keep_scratch_dir`] was
/// called for it (or for a path inside it). State directories are removed at exit rather than
/// with a gateway because tests start several gateways on one state directory in turn.
pub fn scratch_dir() -> PathBuf {
    let dir = tempfile::Builder::new()
        .prefix("mirrorgate-test-")
        .tempdir()
        .expect("tempdir")
        .keep();
    scratch_dirs()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(dir.clone(), false);
    dir
}

/// Keep the scratch directory that holds `path` (after a failure, for the post-mortem).
pub fn keep_scratch_dir(path: &Path) {
    let mut dirs = scratch_dirs().lock().unwrap_or_else(|p| p.into_inner());
    for (dir, keep) in dirs.iter_mut() {
        if path.starts_with(dir) {
            *keep = true;
        }
    }
}

// ------------------------------------------------------------------ panics on gateway threads

const THREAD_PREFIX: &str = "test-gateway-";

fn gateway_panics() -> &'static Mutex<HashMap<u64, usize>> {
    static PANICS: OnceLock<Mutex<HashMap<u64, usize>>> = OnceLock::new();
    PANICS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Install (once per process) a panic hook that counts panics on `test-gateway-<id>` threads
/// per gateway id, then runs the previous hook (which prints the message as before).
pub(crate) fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let id = thread
                .name()
                .and_then(|n| n.strip_prefix(THREAD_PREFIX))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(id) = id {
                *gateway_panics()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(id)
                    .or_default() += 1;
            }
            report_at_once(thread.name().unwrap_or("unnamed"), info);
            previous(info);
        }));
    });
}

/// A panic's first line, written at once on the process's standard error, past libtest's
/// capture: a failed test's message is otherwise printed only in the summary at the end of the
/// run, far from its `FAILED` line (and after whatever a CI system keeps of the output).
fn report_at_once(thread: &str, info: &std::panic::PanicHookInfo<'_>) {
    use std::io::Write;
    let message = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let first: String = message
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(400)
        .collect();
    let at = info
        .location()
        .map(|l| format!("{}:{}", l.file(), l.line()))
        .unwrap_or_default();
    let _ = writeln!(std::io::stderr(), "PANIC [{thread}] at {at}: {first}");
}

/// Panics counted so far on the runtime threads of gateway `id`.
fn panics_of(id: u64) -> usize {
    gateway_panics()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .copied()
        .unwrap_or(0)
}

/// A gateway config in front of `destination` (comma-separated bootstrap addresses) with
/// client, mirror and admin on free ports.
pub fn test_config(destination: &str) -> Config {
    let bootstrap: Vec<String> = destination
        .split(',')
        .map(|a| format!("\"{}\"", a.trim()))
        .collect();
    let bootstrap = bootstrap.join(", ");
    let client = free_port_range(4);
    let mirror = free_port_range(4);
    let admin = free_port_range(1);
    let state = scratch_dir();
    mirrorgate::state::StateStore::init(&state).expect("initialise the state directory");
    let yaml = format!(
        r#"
destination:
  bootstrap: [{bootstrap}]
  metadata_refresh_ms: 2000
listeners:
  client: {{ bind: 127.0.0.1, port_base: {client}, node_id_base: 1, max_brokers: 4 }}
  mirror: {{ bind: 127.0.0.1, port_base: {mirror}, node_id_base: 1, max_brokers: 4 }}
admin:
  bind: 127.0.0.1:{admin}
state_dir: {state}
limits:
  max_frame_bytes: 10485760
  idle_timeout_ms: 60000
  shutdown_grace_ms: 5000
"#,
        state = state.display()
    );
    mirrorgate::config::load_str(&yaml, "test-config").expect("test config is valid")
}

impl TestGateway {
    /// Start a gateway with `config` and wait until it is ready (30 s at most).
    pub fn start(config: Config) -> TestGateway {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        install_panic_hook();
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name_fn(move || format!("{THREAD_PREFIX}{id}"))
            .build()
            .expect("runtime");
        let gateway = rt.block_on(async {
            let gw = Gateway::start(config.clone())
                .await
                .expect("gateway starts");
            if let Err(r) = gw.wait_ready(Duration::from_secs(30)).await {
                panic!("gateway not ready after 30 s: {:?}", r.reasons);
            }
            gw
        });
        TestGateway {
            gateway,
            config,
            rt: Some(rt),
            id,
        }
    }

    /// Start in front of the rig's destination cluster.
    pub fn in_front_of(destination: &str) -> TestGateway {
        Self::start(test_config(destination))
    }

    /// Client-listener bootstrap address.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.config.listeners.client.port_base)
    }

    /// Mirror-listener bootstrap address.
    pub fn mirror_bootstrap(&self) -> String {
        let m = self
            .config
            .listeners
            .mirror
            .as_ref()
            .expect("mirror listener configured");
        format!("127.0.0.1:{}", m.port_base)
    }

    /// Gateway port that serves destination broker `node`.
    pub fn port_for(&self, node: i32) -> u16 {
        self.config
            .listeners
            .client
            .port_for_node(node)
            .expect("node in range")
    }

    /// Mirror-listener port that serves destination broker `node`.
    pub fn mirror_port_for(&self, node: i32) -> u16 {
        self.config
            .listeners
            .mirror
            .as_ref()
            .and_then(|m| m.port_for_node(node))
            .expect("node in range")
    }

    /// Admin address.
    pub fn admin(&self) -> String {
        self.gateway.admin_addr().to_string()
    }

    /// Rendered metrics.
    pub fn metrics(&self) -> String {
        self.gateway.metrics.render()
    }

    /// Value of one sample line `name{labels} value` in the metrics output, or 0 when the
    /// series has no sample yet. Panics when the family `name` is not one the gateway declares
    /// (a misspelt name would otherwise read as 0).
    pub fn metric(&self, series: &str) -> f64 {
        let family = series.split(['{', ' ']).next().unwrap_or(series);
        let declared = self.gateway.metrics.declared_families();
        let known = declared.contains(family)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| family.strip_suffix(s).is_some_and(|f| declared.contains(f)));
        assert!(
            known,
            "metric family {family:?} is not declared by the gateway; declared: {declared:?}"
        );
        self.metrics()
            .lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0)
    }

    /// Run a future on the gateway's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.as_ref().expect("runtime").block_on(f)
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            let gw = self.gateway.clone();
            rt.block_on(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), gw.shutdown()).await;
            });
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        let panics = panics_of(self.id);
        if std::thread::panicking() || panics > 0 {
            keep_scratch_dir(&self.config.state_dir);
            eprintln!(
                "gw: state directory kept: {}",
                self.config.state_dir.display()
            );
        }
        if panics > 0 && !std::thread::panicking() {
            panic!(
                "{panics} panic(s) on the gateway's runtime threads (test-gateway-{}); the \
                 message is printed above",
                self.id
            );
        }
    }
}

/// The gateway as a separate process (`mirrorgate run`), for kill -9 and crash-at-step tests.
///
/// Its config and log are in a scratch directory, kept when the test fails. The child gets
/// SIGKILL when the test dies (`PR_SET_PDEATHSIG`): note that the kernel sends it when the
/// *thread* that spawned the child exits, not the process. Tests start and restart their
/// gateway on the test's own thread, which lives as long as the test; a gateway (re)started on a
/// helper thread is killed when that helper thread ends.
pub struct ProcessGateway {
    pub config: Config,
    pub config_path: std::path::PathBuf,
    child: Option<std::process::Child>,
    pub log_path: std::path::PathBuf,
}

impl ProcessGateway {
    /// Start `mirrorgate run` with `config` (and extra environment), wait until ready.
    pub fn start(config: Config, env: &[(&str, &str)]) -> ProcessGateway {
        let g = Self::start_unready(config, env);
        g.wait_ready(Duration::from_secs(60));
        g
    }

    /// Start `mirrorgate run` and wait only until the admin API answers (it may stay unready).
    pub fn start_unready(config: Config, env: &[(&str, &str)]) -> ProcessGateway {
        let dir = scratch_dir();
        let config_path = dir.join("mirrorgate.yaml");
        std::fs::write(&config_path, mirrorgate::config::render_effective(&config))
            .expect("write config");
        let mut g = ProcessGateway {
            config,
            config_path,
            child: None,
            log_path: dir.join("gateway.log"),
        };
        g.spawn(env);
        g.wait_admin();
        g
    }

    /// The process id (None when it is not running).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The process's resident set size, KiB (None when it is not running).
    pub fn rss_kib(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    fn spawn(&mut self, env: &[(&str, &str)]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("log file");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mirrorgate"));
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: runs in the forked child before exec and only calls prctl, which is
            // async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        cmd.args(["run", "--config"])
            .arg(&self.config_path)
            .env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start mirrorgate");
        self.child = Some(child);
    }

    /// Restart (after a kill or a crash), wait until ready.
    pub fn restart(&mut self, env: &[(&str, &str)]) {
        self.restart_unready(env);
        self.wait_ready(Duration::from_secs(60));
    }

    /// Restart and wait only until the admin API answers (the gateway may stay unready).
    pub fn restart_unready(&mut self, env: &[(&str, &str)]) {
        self.wait_exit(Duration::from_secs(5));
        self.spawn(env);
        self.wait_admin();
    }

    fn wait_admin(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while try_admin_call(&self.admin(), hyper::Method::GET, "/healthz", None).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "admin API not up; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until the process exits by itself (e.g. a crash hook); returns whether it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while let Some(c) = self.child.as_mut() {
            if c.try_wait().expect("wait").is_some() {
                self.child = None;
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }

    /// Wait until the process exits; its exit status (`None`: still running at `timeout`).
    pub fn wait_exit_status(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let c = self.child.as_mut()?;
            if let Some(status) = c.try_wait().expect("wait") {
                self.child = None;
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, as a rolling restart stops it; its exit status (`None`: still running after
    /// `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.pid()?;
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        self.wait_exit_status(timeout)
    }

    /// kill -9.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn admin(&self) -> String {
        self.config.admin.bind.clone()
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.config.listeners.client.port_base)
    }

    pub fn mirror_bootstrap(&self) -> String {
        format!(
            "127.0.0.1:{}",
            self.config
                .listeners
                .mirror
                .as_ref()
                .expect("mirror listener")
                .port_base
        )
    }

    pub fn port_for(&self, node: i32) -> u16 {
        self.config
            .listeners
            .client
            .port_for_node(node)
            .expect("node in range")
    }

    /// GET/POST on the admin API: (status, body).
    pub fn call(&self, method: hyper::Method, path: &str) -> (u16, String) {
        admin_call(&self.admin(), method, path, None)
    }

    /// The log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok((200, _)) = try_admin_call(&self.admin(), hyper::Method::GET, "/readyz", None)
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "gateway process not ready; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ProcessGateway {
    fn drop(&mut self) {
        self.kill9();
        let log = self.log();
        let panicked = log.contains("panicked at");
        if std::thread::panicking() || panicked {
            keep_scratch_dir(&self.log_path);
            keep_scratch_dir(&self.config.state_dir);
            eprintln!(
                "gw: gateway log kept: {} (state directory {})",
                self.log_path.display(),
                self.config.state_dir.display()
            );
        }
        if panicked && !std::thread::panicking() {
            let at = log.find("panicked at").unwrap_or(0);
            let from = log[..at].rfind('\n').map_or(0, |i| i + 1);
            let excerpt: String = log[from..].lines().take(10).collect::<Vec<_>>().join("\n");
            panic!(
                "the gateway process panicked (log {}):\n{excerpt}",
                self.log_path.display()
            );
        }
    }
}

pub fn try_admin_call(
    admin: &str,
    method: hyper::Method,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(mirrorgate::admin::client::call(
        admin, method, path, token, None,
    ))
    .map_err(|e| e.to_string())
}

/// An admin call from a test: (status, body); panics when the admin API is unreachable.
pub fn admin_call(
    admin: &str,
    method: hyper::Method,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    try_admin_call(admin, method, path, token).unwrap_or_else(|e| panic!("admin call {path}: {e}"))
}

/// An admin call with a raw body.
pub fn admin_call_body(
    admin: &str,
    method: hyper::Method,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(mirrorgate::admin::client::call(
        admin,
        method,
        path,
        token,
        Some(body.to_string()),
    ))
    .unwrap_or_else(|e| panic!("admin call {path}: {e}"))
}
