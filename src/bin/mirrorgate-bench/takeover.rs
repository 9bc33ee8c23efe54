//! `takeover_seconds` of `mirrorgate-bench failover --instances N`: the instance driving the
//! failover aborts right after writing its barriers (as SIGKILL would end it:
//! `MIRRORGATE_CRASH_AFTER=barrier_written`); the other instances wait it out, one claims the
//! failover and completes it. Timed from the failover call to every partition STOPPED on every
//! surviving instance, with the default session timeout.
//!
//! Owns: that scenario. Must not touch: the single-driver measurement (`failover.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::failover_fixture::{fresh_topics, leaders, write_mirrored, Measured};
use crate::fleet::{admin, ports, wait_stopped, Fleet};

/// The takeover over fresh topics of `sizes` with `instances` gateways of `bin`: seconds from
/// the call to every partition STOPPED on every survivor.
pub(crate) async fn run(
    destination: &[String],
    bin: &Path,
    sizes: &[i32],
    instances: usize,
) -> Result<Measured, String> {
    let (prefix, names) = fresh_topics(destination, "to", sizes).await?;
    let r = async {
        let total: i64 = sizes.iter().map(|p| i64::from(*p)).sum();
        let crash = [("MIRRORGATE_CRASH_AFTER", "barrier_written")];
        let mut fleet = Fleet::start(bin, destination, &prefix, instances, &crash)?;
        fleet
            .wait_ready(0..instances, total, Duration::from_secs(600))
            .await?;
        let survivors = fleet.admins[1..].to_vec();
        let (_, peers) = admin(&survivors[0], hyper::Method::GET, "/v1/instances").await?;
        let session = peers["session_timeout_ms"].as_f64().map(|ms| ms / 1000.0);
        let (_, mirror, _) = ports(1);
        write_mirrored(&leaders(destination, &names).await?, [mirror, mirror + 1]).await?;
        let started = Instant::now();
        fleet.call_failover(0).await?;
        wait_stopped(&survivors, total, started).await?;
        let seconds = started.elapsed().as_secs_f64();
        if fleet.gateways[0].exited().is_none() {
            return Err("the driver did not end after writing its barriers".into());
        }
        Ok(Measured {
            seconds,
            everywhere: seconds,
            steps: fleet.timeline(1).await,
            session_timeout_s: session,
        })
    }
    .await;
    let mut all = names;
    all.push(format!("{prefix}-state"));
    crate::topics::delete(&destination[0], &all).await;
    r
}
