//! An in-process gateway for integration tests: started on free ports in front of a real
//! destination cluster, on its own runtime thread, stopped when dropped.

#![allow(dead_code)]

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mirrorgate::app::Gateway;
use mirrorgate::config::Config;

/// A running in-process gateway.
pub struct TestGateway {
    pub gateway: Arc<Gateway>,
    pub config: Config,
    rt: Option<tokio::runtime::Runtime>,
}

static NEXT_BASE: AtomicU16 = AtomicU16::new(0);

/// A base port such that `base..base+n` are all free right now.
pub fn free_port_range(n: u16) -> u16 {
    if NEXT_BASE.load(Ordering::SeqCst) == 0 {
        let seed = 41000 + (std::process::id() % 200) as u16 * 40;
        let _ = NEXT_BASE.compare_exchange(0, seed, Ordering::SeqCst, Ordering::SeqCst);
    }
    for _ in 0..200 {
        let base = NEXT_BASE.fetch_add(n + 1, Ordering::SeqCst);
        if base > 60000 {
            NEXT_BASE.store(41000, Ordering::SeqCst);
            continue;
        }
        if (base..base + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no free range of {n} ports found on 127.0.0.1");
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
    let state = tempfile::tempdir().expect("tempdir").keep();
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
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("test-gateway")
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

    /// Value of one sample line `name{labels} value` in the metrics output, or 0.
    pub fn metric(&self, series: &str) -> f64 {
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
    }
}

/// The gateway as a separate process (`mirrorgate run`), for kill -9 and crash-at-step tests.
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
        let dir = tempfile::tempdir().expect("tempdir").keep();
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

    fn wait_ready(&self, timeout: Duration) {
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
