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
    /// Manage the state directory (`state_dir` of the configuration).
    State {
        #[command(subcommand)]
        action: StateAction,
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
        #[command(flatten)]
        call: AdminCall,
        /// Change nothing: print the preflight (verdict go / no-go, its reasons and the checks);
        /// exit 0 for go, 2 for no-go.
        #[arg(long)]
        dry_run: bool,
        /// Refuse the failover when a partition is more records behind the source than this.
        #[arg(long)]
        max_lag_records: Option<i64>,
        /// Refuse the failover when a partition is more seconds behind the source than this.
        #[arg(long)]
        max_lag_seconds: Option<f64>,
        /// Fail over even when a guard is exceeded.
        #[arg(long)]
        force: bool,
        /// Print the preflight as JSON instead of a table (with --dry-run).
        #[arg(long)]
        json: bool,
    },
    /// Switch mirror NAME's forward listener to the destination: hold it, let the source
    /// connections finish, let the agent mirror the source's log end, fail over. Its clients
    /// keep their sessions (docs/forward-mode.md). Waits until every partition is STOPPED.
    Switchover {
        #[command(flatten)]
        call: AdminCall,
        /// Change nothing: print the forward listener's side, its forwarded producers, its
        /// source connections and each partition's lag, as JSON.
        #[arg(long)]
        dry_run: bool,
    },
    /// Switch mirror NAME's forward listener back to the old source, after a switchover,
    /// through the failback gateway in front of it. Its clients keep their sessions
    /// (docs/forward-mode.md).
    Switchback(mirrorgate::admin::cli::SwitchbackArgs),
    /// A completed failover's un-mirrored tail on the old source (via the admin API): list
    /// it, or copy its recoverable records into the quarantine topics exactly once (--recover).
    Unmirrored {
        /// The mirror's name and the failover's id (GET /v1/mirrors/NAME/failovers lists them).
        name: String,
        failover_id: String,
        /// Admin API address.
        #[arg(long, default_value = "127.0.0.1:9180")]
        admin: String,
        /// Environment variable holding the admin token (when the gateway requires one).
        #[arg(long, default_value = "MIRRORGATE_ADMIN_TOKEN")]
        token_env: String,
        /// Copy the recoverable records into the quarantine topics.
        #[arg(long)]
        recover: bool,
        /// Once they are recovered: delete the old source's topics and create them again empty
        /// (before a failback mirrors the destination back).
        #[arg(long, conflicts_with = "recover")]
        realign: bool,
        /// With --recover or --realign: say what would be done, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Offsets of a mirror's partitions (via the admin API).
    Offsets {
        #[command(subcommand)]
        action: OffsetsAction,
    },
}

/// What `failover` and `switchover` share: the mirror, the admin API, the wait.
#[derive(clap::Args)]
struct AdminCall {
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
}

impl AdminCall {
    fn run(self, options: serde_json::Value, json: bool, switchover: bool) -> ExitCode {
        init_logging(None);
        let token = std::env::var(&self.token_env).ok();
        runtime().block_on(mirrorgate::admin::cli::failover(
            &self.admin,
            &self.name,
            token.as_deref(),
            mirrorgate::admin::cli::FailoverCall {
                options,
                no_wait: self.no_wait,
                timeout: Duration::from_secs(self.timeout),
                json,
                switchover,
            },
        ))
    }
}

#[derive(Subcommand)]
enum OffsetsAction {
    /// Translate a source offset into the destination offset the built-in agent wrote it at
    /// (or back, with --to-source), through the agent's exact offset map.
    Translate {
        /// The mirror's name.
        #[arg(long)]
        mirror: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        offset: i64,
        /// Translate a destination offset into the source offset instead.
        #[arg(long)]
        to_source: bool,
        /// Admin API address.
        #[arg(long, default_value = "127.0.0.1:9180")]
        admin: String,
    },
}

#[derive(Subcommand)]
enum StateAction {
    /// Create the state directory and its identity file (first start). A no-op when it is
    /// already initialised. Never run it to "fix" a lost directory: restore the backup instead.
    Init {
        /// Configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// With `instances`: keep trying to create the state topic for this long while the
        /// destination cluster cannot be reached (e.g. it is still starting); 0 tries once.
        #[arg(long, default_value_t = 0, value_name = "SECONDS")]
        wait_seconds: u64,
    },
    /// Say whether the state directory can be used; exit 1 (with the reason) when it cannot.
    Check {
        /// Configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// With `instances`: move what the state directory holds and the state topic does not (a
    /// failover completed here, a pause, the failover reports, the agent's offset maps) into
    /// the state topic, so that every instance knows it. Run it once on a gateway that ran alone
    /// before `instances` was configured. Appends nothing when run again; exit 1 when something
    /// could not be moved (each is named, with what to do).
    Migrate {
        /// Configuration file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Say what would be moved, and move nothing.
        #[arg(long)]
        dry_run: bool,
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
        Command::State { action } => {
            let (StateAction::Init { config, .. }
            | StateAction::Check { config }
            | StateAction::Migrate { config, .. }) = &action;
            let cfg = match load(config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let dir = cfg.state_dir.display();
            let result = match action {
                StateAction::Init { wait_seconds, .. } => {
                    mirrorgate::state::StateStore::init(&cfg.state_dir)
                        .map_err(|e| e.to_string())
                        .and_then(|_| {
                            let topic = runtime().block_on(init_state_topic_within(
                                &cfg,
                                std::time::Duration::from_secs(wait_seconds),
                            ))?;
                            Ok(format!("state directory {dir} is initialised")
                                + &topic.map(|t| format!("\n{t}")).unwrap_or_default())
                        })
                }
                StateAction::Check { .. } => mirrorgate::state::StateStore::open(&cfg.state_dir)
                    .and_then(|s| s.check())
                    .map_err(|e| e.to_string())
                    .map(|_| format!("state directory {dir} is initialised")),
                StateAction::Migrate { dry_run, .. } => {
                    match runtime().block_on(mirrorgate::app::peers::migrate_state(&cfg, dry_run)) {
                        Ok((done, true)) => Ok(done),
                        Ok((done, false)) => Err(format!("not everything was moved\n{done}")),
                        Err(e) => Err(e),
                    }
                }
            };
            match result {
                Ok(msg) => {
                    println!("{msg}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("mirrorgate: {e}");
                    ExitCode::from(1)
                }
            }
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
            runtime().block_on(mirrorgate::admin::cli::status(&admin))
        }
        Command::Failover {
            call,
            dry_run,
            max_lag_records,
            max_lag_seconds,
            force,
            json,
        } => {
            let options = serde_json::json!({
                "dry_run": dry_run,
                "force": force,
                "max_lag_records": max_lag_records,
                "max_lag_seconds": max_lag_seconds,
            });
            call.run(options, json, false)
        }
        Command::Switchover { call, dry_run } => {
            call.run(serde_json::json!({ "dry_run": dry_run }), true, true)
        }
        Command::Switchback(args) => {
            init_logging(None);
            runtime().block_on(args.run())
        }
        Command::Unmirrored {
            name,
            failover_id,
            admin,
            token_env,
            recover,
            realign,
            dry_run,
        } => {
            init_logging(None);
            use mirrorgate::admin::cli::TailAction;
            let action = match (recover, realign) {
                (true, _) => TailAction::Recover,
                (_, true) => TailAction::Realign,
                _ => TailAction::List,
            };
            let token = std::env::var(&token_env).ok();
            runtime().block_on(mirrorgate::admin::cli::unmirrored(
                &admin,
                (&name, &failover_id),
                token.as_deref(),
                action,
                dry_run,
            ))
        }
        Command::Offsets {
            action:
                OffsetsAction::Translate {
                    mirror,
                    topic,
                    partition,
                    offset,
                    to_source,
                    admin,
                },
        } => {
            init_logging(None);
            if !config::is_valid_topic_name(&topic) || partition < 0 || offset < 0 {
                eprintln!(
                    "mirrorgate: give a valid topic name, a partition >= 0 and an offset >= 0"
                );
                return ExitCode::from(2);
            }
            let direction = if to_source {
                "to_source"
            } else {
                "to_destination"
            };
            let query = format!(
                "topic={topic}&partition={partition}&offset={offset}&direction={direction}"
            );
            match runtime().block_on(mirrorgate::admin::client::translate(
                &admin, &mirror, &query,
            )) {
                Ok(body) => {
                    println!("{body}");
                    ExitCode::SUCCESS
                }
                Err((code, msg)) => {
                    eprintln!("mirrorgate: {msg}");
                    ExitCode::from(code)
                }
            }
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
    let demo_source = banner.as_ref().and_then(|_| demo_target(&cfg));
    let local = format!(
        "{}:{}",
        cfg.listeners.client.advertised(),
        cfg.listeners.client.port_base
    );
    let gw = match Gateway::start(cfg).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("mirrorgate: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(b) = banner {
        if let Some((bootstrap, topic)) = demo_source {
            tokio::spawn(mirrorgate::app::demo::source_producers(
                bootstrap,
                topic.clone(),
            ));
            tokio::spawn(mirrorgate::app::demo::local_producer(local, topic));
        }
        match gw.wait_ready(Duration::from_secs(60)).await {
            Ok(()) => println!("{b}"),
            Err(r) => eprintln!("mirrorgate: not ready after 60 s: {}", r.reasons.join("; ")),
        }
    }
    let signal = mirrorgate::app::signals::stop_signal().await;
    tracing::info!(signal, "shutting down: draining in-flight requests");
    gw.shutdown().await;
    ExitCode::SUCCESS
}

/// The demo's source topic: the first exact topic of the first mirror with a source.
fn demo_target(cfg: &Config) -> Option<(String, String)> {
    let m = cfg.mirrors.iter().find(|m| m.agent_source().is_some())?;
    let topic = m.topics.iter().find(|t| !t.starts_with("regex:"))?.clone();
    Some((m.agent_source()?.bootstrap.first()?.clone(), topic))
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

fn demo(mut cfg: Config) -> ExitCode {
    // A fresh state directory per demo run: the rig's clusters start with fresh storage, so
    // mirror states and the agent's offset map from an earlier run would not match them.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    cfg.state_dir = repo_dir().join(format!("target/demo-state/{stamp}"));
    if let Err(e) = mirrorgate::state::StateStore::init(&cfg.state_dir) {
        eprintln!("mirrorgate demo: {e}");
        return ExitCode::from(1);
    }
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
    if let Some((source, topic)) = demo_target(&cfg) {
        banner.push_str(&mirrorgate::app::demo::guide(
            &cfg.admin.bind,
            &source,
            &topic,
        ));
    }
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

/// `state init`'s state topic, tried again every second for up to `wait` while it fails.
async fn init_state_topic_within(
    cfg: &mirrorgate::config::Config,
    wait: std::time::Duration,
) -> Result<Option<String>, String> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match mirrorgate::app::peers::init_state_topic(cfg).await {
            Ok(done) => return Ok(done),
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("state topic not created yet ({e}); trying again");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
