//! The command line's admin calls that do more than one request or print more than an answer
//! (`mirrorgate failover`, `switchover`, `switchback`, `status`, `unmirrored`).
//!
//! Owns: the sequence of calls and the exit codes. Must not touch: the gateway (only its admin
//! API, through [`super::client`]).

use std::process::ExitCode;
use std::time::Duration;

/// How the CLI calls a failover.
pub struct FailoverCall {
    /// The JSON body: dry_run, force, guards.
    pub options: serde_json::Value,
    pub no_wait: bool,
    pub timeout: Duration,
    /// Print a dry run's answer as JSON.
    pub json: bool,
    /// A switchover (`POST .../switchover`: a forward listener's planned switch) rather than a
    /// failover; its dry run is printed as JSON and exits 0.
    pub switchover: bool,
}

/// `mirrorgate failover`: call it (or its dry run), wait until every partition is STOPPED,
/// print the failover's report.
pub async fn failover(
    admin: &str,
    name: &str,
    token: Option<&str>,
    call_opts: FailoverCall,
) -> ExitCode {
    use super::client::call;
    use hyper::Method;
    let FailoverCall {
        options,
        no_wait,
        timeout,
        json,
        switchover,
    } = call_opts;
    let dry_run = options["dry_run"] == true;
    let what = if switchover { "switchover" } else { "failover" };
    let path = format!("/v1/mirrors/{name}/{what}");
    let body = options.to_string();
    let (status, body) = match call(admin, Method::POST, &path, token, Some(body)).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    if dry_run && status == 200 && switchover {
        println!("{}", body.trim());
        return ExitCode::SUCCESS;
    }
    if dry_run && status == 200 {
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if json {
            println!("{}", body.trim());
        } else {
            print!("{}", super::render::preflight_table(&v));
        }
        return if v["verdict"] == "go" {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        };
    }
    if status != 202 {
        eprintln!("{what} of {name} refused ({status}): {}", body.trim());
        if status == 409 {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if v["preflight"].is_object() {
                eprint!("{}", super::render::preflight_table(&v["preflight"]));
            }
        }
        return ExitCode::from(2);
    }
    println!("{what} accepted: {}", body.trim());
    let failover_id = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["failover_id"].as_str().map(str::to_string));
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
                if let Some(id) = &failover_id {
                    print_report(admin, name, id).await;
                }
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

/// `mirrorgate switchback`: hold the forward listener, let the destination connections
/// finish, wait until the failback gateway in front of the old source mirrored the
/// destination's log end, fail that gateway's mirror over, start this mirror again.
#[derive(clap::Args)]
pub struct SwitchbackArgs {
    /// The mirror's name.
    name: String,
    /// Admin API address.
    #[arg(long, default_value = "127.0.0.1:9180")]
    admin: String,
    /// Environment variable holding the admin token (when the gateway requires one).
    #[arg(long, default_value = "MIRRORGATE_ADMIN_TOKEN")]
    token_env: String,
    /// The failback gateway's admin API (HOST:PORT): the gateway in front of the old source.
    #[arg(long)]
    via: String,
    /// The failback gateway's mirror whose source is this gateway's destination.
    #[arg(long)]
    via_mirror: String,
    /// Environment variable holding the failback gateway's admin token, when it needs one.
    #[arg(long)]
    via_token_env: Option<String>,
    /// Change nothing: print what a switch back would find now, as JSON.
    #[arg(long)]
    dry_run: bool,
}

impl SwitchbackArgs {
    /// One call (it answers once the listener is back on the source, or why not). Exit 0 when
    /// it is; 2 when refused with nothing changed; 3 when it stopped with the listener held
    /// (call again to resume); 1 when the admin API cannot be reached.
    pub async fn run(self) -> ExitCode {
        let token = std::env::var(&self.token_env).ok();
        let via_token = self.via_token_env.and_then(|v| std::env::var(v).ok());
        let body = serde_json::json!({
            "gateway": self.via, "mirror": self.via_mirror, "token": via_token,
            "dry_run": self.dry_run,
        });
        let (name, path) = (&self.name, format!("/v1/mirrors/{}/switchback", self.name));
        let answer = super::client::call(
            &self.admin,
            hyper::Method::POST,
            &path,
            token.as_deref(),
            Some(body.to_string()),
        );
        let (status, body) = match answer.await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(1);
            }
        };
        if status == 200 {
            println!("{}", body.trim());
            return ExitCode::SUCCESS;
        }
        eprintln!("switch back of {name} ({status}): {}", body.trim());
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if v["side"] == "returning" {
            ExitCode::from(3)
        } else {
            ExitCode::from(2)
        }
    }
}

/// Print the failover's report once it is complete (it is completed a moment after the last
/// partition is STOPPED; waits up to 15 s).
async fn print_report(admin: &str, name: &str, id: &str) {
    use hyper::Method;
    let path = format!("/v1/mirrors/{name}/failovers/{id}");
    for _ in 0..60 {
        if let Ok((200, body)) = super::client::call(admin, Method::GET, &path, None, None).await {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if v["status"] == "complete" {
                print!("{}", super::render::report_text(&v));
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("the failover report is not complete yet: GET {path}");
}

/// What `mirrorgate unmirrored` does with the tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailAction {
    List,
    Recover,
    Realign,
}

/// `mirrorgate unmirrored`: list a completed failover's un-mirrored tail, copy its recoverable
/// records into the quarantine topics, or realign the old source once they are there
/// (`dry_run`: say what would be done). Prints a summary, then the answer as JSON. Exit 0; 1
/// when the gateway or a cluster cannot be reached; 2 when the call is refused; 3 when a
/// recovery could not verify every partition.
pub async fn unmirrored(
    admin: &str,
    (name, failover_id): (&str, &str),
    token: Option<&str>,
    action: TailAction,
    dry_run: bool,
) -> ExitCode {
    use hyper::Method;
    let base = format!("/v1/mirrors/{name}/failovers/{failover_id}/unmirrored");
    let recover = action == TailAction::Recover;
    let r = if action != TailAction::List {
        let verb = if recover { "recover" } else { "realign" };
        let path = format!("{base}/{verb}?dry_run={dry_run}");
        super::client::call(admin, Method::POST, &path, token, None).await
    } else {
        super::client::call(admin, Method::GET, &base, None, None).await
    };
    let (status, body) = match r {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    if status != 200 {
        eprintln!("refused ({status}): {}", body.trim());
        return ExitCode::from(if status == 503 { 1 } else { 2 });
    }
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let listing = if v["plan"].is_object() {
        &v["plan"]
    } else {
        &v
    };
    if listing["totals"].is_object() {
        let t = &listing["totals"];
        println!(
            "failover {failover_id} of {name}: {} records not mirrored ({} recoverable: {} committed in transactions; {} aborted, {} open never copied); {} recovered, {} to recover",
            t["records"], t["recoverable_records"], t["committed"], t["aborted"], t["open"],
            t["recovered_records"], t["remaining_records"]
        );
        for w in listing["warnings"].as_array().into_iter().flatten() {
            println!("warning: {}", w.as_str().unwrap_or_default());
        }
    }
    if recover && !dry_run {
        println!(
            "copied {} records; {} of {} recoverable records are in the quarantine topics; verified: {}",
            v["copied"], v["recovered_records"], v["recoverable_records"], v["verified"]
        );
    }
    if action == TailAction::Realign {
        println!(
            "old source topics{}: {}",
            if dry_run { " (dry run)" } else { "" },
            v["actions"]
        );
    }
    println!("{}", serde_json::to_string_pretty(&v).unwrap_or(body));
    if recover && !dry_run && v["verified"] != true {
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

/// `mirrorgate status`: readiness, upstream brokers and mirrors; exit 1 when the admin API
/// cannot be reached, 3 when the gateway is not ready.
pub async fn status(admin: &str) -> ExitCode {
    use super::client::call;
    use hyper::Method;
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
