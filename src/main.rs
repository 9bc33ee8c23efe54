//! The `mirrorgate` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mirrorgate::app::Gateway;
use mirrorgate::config::{self, Config};

#[derive(Parser)]
#[command(
    name = "mirrorgate",
    version,
    about = "Kafka-wire gateway for the destination cluster of a mirrored Kafka deployment"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Run {
        /// Configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a configuration file: print the effective configuration or every error.
    CheckConfig {
        /// Configuration file (YAML).
        file: PathBuf,
    },
    /// Start local source and destination clusters with the rig and the gateway in front of the
    /// destination (config/mirrorgate.yaml); runs until Ctrl-C, then stops what it started.
    Demo {
        /// Configuration file (default: config/mirrorgate.yaml of the repository).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Show the gateway's readiness, upstream brokers and mirrors (via the admin API).
    Status {
        /// Admin API address.
        #[arg(long, default_value = "127.0.0.1:9180")]
        admin: String,
    },
    /// Fail over mirror NAME: fence mirror traffic, write a barrier into every partition, open
    /// the topics for writes. Waits until every partition is STOPPED (or --no-wait).
    Failover {
        /// The mirror's name.
        name: String,
        /// Admin API address.
        #[arg(long, default_value = "127.0.0.1:9180")]
        admin: String,
        /// Environment variable holding the admin token (when the gateway requires one).
        #[arg(long, default_value = "MIRRORGATE_ADMIN_TOKEN")]
        token_env: String,
        /// Return once the failover is accepted.
        #[arg(long)]
        no_wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
}

fn init_logging(cfg: Option<&Config>) {
    use tracing_subscriber::{fmt, prelude::*, EnvFilter};
    let level = cfg
        .map(|c| c.logging.level.clone())
        .unwrap_or_else(|| "info".into());
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let reg = tracing_subscriber::registry().with(filter);
    if cfg.map(|c| c.logging.format == "json").unwrap_or(false) {
        let _ = reg
            .with(
                fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_writer(std::io::stderr),
            )
            .try_init();
    } else {
        use std::io::IsTerminal;
        let ansi = std::io::stderr().is_terminal();
        let _ = reg
            .with(fmt::layer().with_writer(std::io::stderr).with_ansi(ansi))
            .try_init();
    }
}

fn load(path: &Path) -> Result<Config, ExitCode> {
    config::load_file(path).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

fn repo_dir() -> PathBuf {
    std::env::var_os("MIRRORGATE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => match config::load_file(&file) {
            Ok(cfg) => {
                print!("{}", config::render_effective(&cfg));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Run { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_logging(Some(&cfg));
            runtime().block_on(run(cfg, None))
        }
        Command::Demo { config } => {
            let path = config.unwrap_or_else(|| repo_dir().join("config/mirrorgate.yaml"));
            let cfg = match load(&path) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_logging(Some(&cfg));
            demo(cfg)
        }
        Command::Status { admin } => {
            init_logging(None);
            runtime().block_on(status(&admin))
        }
        Command::Failover {
            name,
            admin,
            token_env,
            no_wait,
            timeout,
        } => {
            init_logging(None);
            let token = std::env::var(&token_env).ok();
            runtime().block_on(failover(
                &admin,
                &name,
                token.as_deref(),
                no_wait,
                Duration::from_secs(timeout),
            ))
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(cfg: Config, banner: Option<String>) -> ExitCode {
    let gw = match Gateway::start(cfg).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("mirrorgate: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(b) = banner {
        match gw.wait_ready(Duration::from_secs(60)).await {
            Ok(()) => println!("{b}"),
            Err(r) => eprintln!("mirrorgate: not ready after 60 s: {}", r.reasons.join("; ")),
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("shutting down: draining in-flight requests");
    gw.shutdown().await;
    ExitCode::SUCCESS
}

fn rig(args: &[&str]) -> Result<String, String> {
    let rig = repo_dir().join("integration/rig");
    let out = std::process::Command::new(&rig)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", rig.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{} {}` failed:\n{}{}",
            rig.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn running_clusters() -> Vec<String> {
    rig(&["status"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.to_string()))
        .collect()
}

fn demo(cfg: Config) -> ExitCode {
    let before = running_clusters();
    println!(
        "mirrorgate demo: starting the local source and destination clusters (integration/rig up)…"
    );
    if let Err(e) = rig(&["up", "source", "destination"]) {
        eprintln!("{e}");
        return ExitCode::from(1);
    }
    let started: Vec<String> = ["source", "destination"]
        .iter()
        .filter(|c| !before.iter().any(|b| b == *c))
        .map(|s| s.to_string())
        .collect();
    let clusters = rig(&["status"]).unwrap_or_default();
    let client = &cfg.listeners.client;
    let mut banner = String::new();
    banner.push_str("\nmirrorgate is ready.\n");
    banner.push_str(&format!(
        "  clusters (rig):      {}\n",
        clusters.trim().replace('\n', "\n                       ")
    ));
    banner.push_str(&format!(
        "  Kafka clients:       {}:{}  (bootstrap through the gateway)\n",
        client.advertised(),
        client.port_base
    ));
    if let Some(m) = &cfg.listeners.mirror {
        banner.push_str(&format!(
            "  mirror listener:     {}:{}\n",
            m.advertised(),
            m.port_base
        ));
    }
    banner.push_str(&format!(
        "  admin API:           http://{}/v1/upstreams\n",
        cfg.admin.bind
    ));
    banner.push_str(&format!(
        "  metrics:             http://{}/metrics\n",
        cfg.admin.bind
    ));
    banner.push_str(&format!(
        "  readiness:           http://{}/readyz\n",
        cfg.admin.bind
    ));
    banner.push_str("Press Ctrl-C to stop the gateway and the clusters this demo started.");
    let code = runtime().block_on(run(cfg, Some(banner)));
    if !started.is_empty() {
        println!(
            "stopping clusters started by the demo: {}",
            started.join(" ")
        );
        let mut args = vec!["down"];
        args.extend(started.iter().map(|s| s.as_str()));
        if let Err(e) = rig(&args) {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    }
    code
}

async fn status(admin: &str) -> ExitCode {
    use hyper::Method;
    use mirrorgate::admin::client::call;
    let ready = match call(admin, Method::GET, "/readyz", None, None).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    println!("readiness ({}): {}", ready.0, ready.1.trim());
    match call(admin, Method::GET, "/v1/upstreams", None, None).await {
        Ok((_, body)) => println!("upstreams: {}", body.trim()),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    }
    if let Ok((200, body)) = call(admin, Method::GET, "/v1/mirrors", None, None).await {
        println!("mirrors: {}", body.trim());
    }
    if ready.0 == 200 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

async fn failover(
    admin: &str,
    name: &str,
    token: Option<&str>,
    no_wait: bool,
    timeout: Duration,
) -> ExitCode {
    use hyper::Method;
    use mirrorgate::admin::client::call;
    let path = format!("/v1/mirrors/{name}/failover");
    let (status, body) = match call(admin, Method::POST, &path, token, None).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    if status != 202 {
        eprintln!("failover of {name} refused ({status}): {}", body.trim());
        return ExitCode::from(2);
    }
    println!("failover accepted: {}", body.trim());
    if no_wait {
        return ExitCode::SUCCESS;
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok((200, body)) = call(
            admin,
            Method::GET,
            &format!("/v1/mirrors/{name}"),
            None,
            None,
        )
        .await
        {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let total = v["partitions"].as_u64().unwrap_or(0);
            let stopped = v["states"]["STOPPED"].as_u64().unwrap_or(0);
            let failed = v["states"]["FAILED"].as_u64().unwrap_or(0);
            if total > 0 && stopped == total {
                println!("mirror {name}: all {total} partitions STOPPED; the topics are writable");
                return ExitCode::SUCCESS;
            }
            eprintln!("mirror {name}: {stopped}/{total} STOPPED, {failed} FAILED (retried)");
        }
        if tokio::time::Instant::now() >= deadline {
            eprintln!("mirror {name}: failover not complete after {timeout:?}; see GET /v1/mirrors/{name}/partitions");
            return ExitCode::from(3);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
