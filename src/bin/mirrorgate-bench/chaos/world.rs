//! The chaos run's processes and the nemesis acting on them: the gateway instances (pause,
//! kill, start again, cut off from the brokers) and the run's rig (a destination broker killed
//! and started again); and
//! the operator's operations (a rolling restart, a pause of the mirror).
//!
//! Owns: carrying out a fault and undoing it, carrying out an operation, and bringing every
//! process back before the checker reads. Must not touch: which faults and operations happen
//! when (`plan.rs`), the clients.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::gateways::{post_through, wait_ready, Instance, MIRROR};
use super::net::Net;
use super::plan::{Fault, Operation, Timed, INSTANCES};
use crate::Rig;

/// The processes of one run and what they share.
pub struct World {
    pub bin: PathBuf,
    pub rig: Rig,
    pub instances: Mutex<Vec<Instance>>,
    /// Instances that ended on their own (not killed by the nemesis): how.
    pub crashes: Mutex<Vec<String>>,
    /// The gateways' extra environment (the sabotage), for a gateway started later.
    pub env: Vec<(String, String)>,
    /// The instances' cgroups and the network faults' rules.
    pub net: Net,
}

impl World {
    pub fn with<T>(&self, f: impl FnOnce(&mut Vec<Instance>) -> T) -> T {
        match self.instances.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    pub async fn rig(&self, args: &[&str]) -> Result<String, String> {
        let rig = self.rig.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            rig.run(&a)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// Carries out one fault and undoes it.
    pub async fn fault(&self, f: Fault) -> Result<(), String> {
        eprintln!("chaos: {f:?}");
        match f {
            Fault::PauseGateway { instance, ms } => {
                self.with(|v| v[instance].pause());
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.with(|v| v[instance].resume());
            }
            Fault::KillGateway { instance, ms } => {
                self.with(|v| v[instance].kill());
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.with(|v| v[instance].start(&self.bin))?;
            }
            Fault::FullDisk { instance, ms } => {
                if !self.with(|v| v[instance].fill_disk()) {
                    eprintln!("chaos: the disk of instance {instance} could not be filled");
                }
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.with(|v| v[instance].free_disk());
            }
            Fault::KillBroker { node, ms } => {
                let node = node.to_string();
                self.rig(&["kill-node", super::DESTINATION, &node]).await?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.rig(&["start-node", super::DESTINATION, &node]).await?;
            }
            Fault::Network {
                instance,
                loss_percent,
                ms,
            } => {
                let cut = self.net.cut(instance, loss_percent)?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                drop(cut);
            }
        }
        Ok(())
    }

    /// The faults of a phase, each at its time from `t0`.
    pub async fn faults(&self, t0: Instant, faults: &[Timed]) -> Result<(), String> {
        for t in faults {
            let at = t0 + Duration::from_millis(t.at_ms);
            tokio::time::sleep_until(at.into()).await;
            self.fault(t.fault).await?;
        }
        Ok(())
    }

    /// The operations, each at its time from `t0` (beside the faults).
    pub async fn operations(&self, t0: Instant, ops: &[Operation]) -> Result<(), String> {
        for op in ops {
            tokio::time::sleep_until((t0 + Duration::from_millis(op.at_ms())).into()).await;
            eprintln!("chaos: {op:?}");
            match *op {
                Operation::RollingRestart { gap_ms, .. } => {
                    for i in 0..INSTANCES {
                        self.restart(i).await?;
                        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
                    }
                }
                Operation::PauseMirror { through, ms, .. } => {
                    self.pause_mirror(through, true).await?;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    self.pause_mirror((through + 1) % INSTANCES, false).await?;
                }
            }
        }
        Ok(())
    }

    /// One step of a rolling restart: instance `i` is stopped (SIGTERM; SIGKILL after 30 s),
    /// started again, and waited for until ready (60 s at most; a fault may hold it back, and
    /// the operator then goes on).
    async fn restart(&self, i: usize) -> Result<(), String> {
        self.with(|v| v[i].terminate());
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.with(|v| v[i].running()) {
            if Instant::now() > deadline {
                eprintln!("chaos: instance {i} did not end within 30 s of SIGTERM: SIGKILL");
                self.with(|v| v[i].kill());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.with(|v| v[i].forget_exit());
        self.with(|v| v[i].start(&self.bin))?;
        if let Err(e) = wait_ready(i, Duration::from_secs(60)).await {
            eprintln!("chaos: rolling restart goes on: {e}");
        }
        Ok(())
    }

    /// Pause (or resume) the mirror through instance `first`, or the next instance when one
    /// cannot be asked (down or paused by a fault), for 60 s at most.
    async fn pause_mirror(&self, first: usize, pause: bool) -> Result<(), String> {
        let action = if pause { "pause" } else { "resume" };
        let path = format!("/v1/mirrors/{MIRROR}/{action}");
        post_through(
            first,
            &path,
            Duration::from_secs(5),
            Duration::from_secs(60),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("the mirror could not be {action}d: {e}"))
    }

    /// Every instance running and not paused.
    pub fn all_up(&self) -> Result<(), String> {
        let bin = self.bin.clone();
        let mut crashed = Vec::new();
        let r = self.with(|v| {
            for i in v.iter_mut() {
                if let Some(how) = i.exited() {
                    crashed.push(format!("instance {} ended on its own: {how}", i.index));
                }
                if i.is_paused() {
                    i.resume();
                }
                if !i.running() {
                    i.start(&bin)?;
                }
            }
            Ok(())
        });
        if let Ok(mut c) = self.crashes.lock() {
            c.extend(crashed);
        }
        r
    }
}
