//! The command line's admin calls that do more than one request (`mirrorgate failover`).
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
    } = call_opts;
    let dry_run = options["dry_run"] == true;
    let path = format!("/v1/mirrors/{name}/failover");
    let body = options.to_string();
    let (status, body) = match call(admin, Method::POST, &path, token, Some(body)).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
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
        eprintln!("failover of {name} refused ({status}): {}", body.trim());
        if status == 409 {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if v["preflight"].is_object() {
                eprint!("{}", super::render::preflight_table(&v["preflight"]));
            }
        }
        return ExitCode::from(2);
    }
    println!("failover accepted: {}", body.trim());
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
