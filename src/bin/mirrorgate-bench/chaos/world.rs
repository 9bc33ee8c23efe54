//! The chaos run's processes and the nemesis acting on them: the gateway instances (pause,
//! kill, start again) and the run's rig (a destination broker killed and started again).
//!
//! Owns: carrying out a fault and undoing it, and bringing every process back before the
//! checker reads. Must not touch: which faults happen when (`plan.rs`), the clients.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::gateways::Instance;
use super::plan::{Fault, Timed};
use crate::Rig;

/// The processes of one run and what they share.
pub struct World {
    pub bin: PathBuf,
    pub rig: Rig,
    pub instances: Mutex<Vec<Instance>>,
    /// Instances that ended on their own (not killed by the nemesis): how.
    pub crashes: Mutex<Vec<String>>,
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
