//! `takeover_seconds` of `mirrorgate-bench failover --instances N`: the instance driving the
//! failover is a `mirrorgate run` process that aborts right after writing its barriers (as
//! SIGKILL would end it: `MIRRORGATE_CRASH_AFTER=barrier_written`); the other instances wait
//! it out, one claims the failover and completes it. Timed from the failover call to every
//! partition STOPPED on every surviving instance, with the default session timeout.
//!
//! Owns: that scenario. Must not touch: the single-driver measurement (`failover.rs`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::failover::{admin, topic_leaders, wait_stopped, write_mirrored};
use crate::process::{die_with_parent, gateway_binary};

/// What the takeover run measured.
pub struct Takeover {
    pub seconds: f64,
    pub session_timeout_s: f64,
}

/// Kills the driver process (if it still runs) and removes the state directories.
struct Cleanup {
    child: Option<std::process::Child>,
    dirs: Vec<std::path::PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

pub async fn run(
    destination: &[String],
    topics: usize,
    partitions: i32,
    instances: usize,
) -> Result<Takeover, String> {
    let bin = gateway_binary()?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let prefix = format!("bench-to-{stamp}");
    let names: Vec<String> = (0..topics).map(|i| format!("{prefix}-{i}")).collect();
    let total = topics as i64 * i64::from(partitions);
    let specs: Vec<(String, i32)> = names.iter().map(|n| (n.clone(), partitions)).collect();
    crate::topics::create(&destination[0], &specs).await?;
    let mut cleanup = Cleanup {
        child: None,
        dirs: Vec::new(),
    };
    let mut session = Duration::ZERO;
    let mut gws = Vec::new();
    let mut admins = Vec::new();
    for i in 0..instances {
        let base = 17192u16 + 100 * i as u16;
        let state = std::env::temp_dir().join(format!("mirrorgate-bench-takeover-{stamp}-{i}"));
        cleanup.dirs.push(state.clone());
        let cfg = crate::bench_config(
            destination,
            base,
            &state,
            &format!(
                "mirrors:\n  - name: bench\n    topics: [\"regex:{prefix}-[0-9]+\"]\n\
                 instances:\n  id: bench-{i}\n  state_topic: {prefix}-state\n"
            ),
        )?;
        session = Duration::from_millis(
            cfg.instances
                .as_ref()
                .map(|i| i.session_timeout_ms)
                .unwrap_or(0),
        );
        let admin_addr = format!("127.0.0.1:{}", base + 20);
        if i == 0 {
            mirrorgate::app::peers::init_state_topic(&cfg).await?;
            let file = state.join("bench-driver.yaml");
            std::fs::write(&file, mirrorgate::config::render_effective(&cfg))
                .map_err(|e| e.to_string())?;
            let mut cmd = Command::new(&bin);
            cmd.args(["run", "--config"])
                .arg(&file)
                .env("MIRRORGATE_CRASH_AFTER", "barrier_written")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            die_with_parent(&mut cmd);
            cleanup.child = Some(cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?);
        } else {
            gws.push(
                mirrorgate::app::Gateway::start(cfg)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        admins.push(admin_addr);
    }
    let (driver, survivors) = (admins[0].clone(), admins[1..].to_vec());
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (_, m) = admin(&survivors[0], hyper::Method::GET, "/v1/mirrors/bench").await?;
        let (_, peers) = admin(&survivors[0], hyper::Method::GET, "/v1/instances").await?;
        let others = peers["others_alive"].as_array().map(Vec::len).unwrap_or(0);
        let driver_ready = matches!(
            admin(&driver, hyper::Method::GET, "/readyz").await,
            Ok((200, _))
        );
        if m["states"]["MIRRORING"].as_i64() == Some(total)
            && gws.iter().all(|g| g.readiness().ready)
            && driver_ready
            && others + 1 == instances
        {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("takeover run not ready: {m}; {peers}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let first = 17192u16 + 100;
    write_mirrored(&topic_leaders(&gws[0], &names), [first + 10, first + 11]).await?;
    let started = Instant::now();
    let (s, body) = admin(&driver, hyper::Method::POST, "/v1/mirrors/bench/failover").await?;
    if s != 202 {
        return Err(format!("failover call answered {s}: {body}"));
    }
    wait_stopped(&survivors, total, started).await?;
    let seconds = started.elapsed().as_secs_f64();
    let crashed = cleanup
        .child
        .as_mut()
        .and_then(|c| c.try_wait().ok().flatten())
        .is_some();
    if !crashed {
        return Err("the driver did not end after writing its barriers".into());
    }
    for g in &gws {
        g.shutdown().await;
    }
    Ok(Takeover {
        seconds,
        session_timeout_s: session.as_secs_f64(),
    })
}
