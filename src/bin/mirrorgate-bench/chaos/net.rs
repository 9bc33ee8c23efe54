//! The chaos run's network faults between a gateway instance and the brokers. Each instance
//! runs in a cgroup (v2) of its own, which it joins before it executes (so every socket it ever
//! opens is in it); while a fault lasts, an iptables rule drops that cgroup's packets to the
//! brokers' ports: all of them (a partition: the instance is cut off from both clusters, the
//! state topic included, while its clients still reach it) or a share drawn at random (loss:
//! TCP retransmits, requests stall for their timeouts). Delay is not injected: this machine's
//! kernel has no netem queueing discipline (`tc ... netem` answers "Specified qdisc kind is
//! unknown"). Needs root, a cgroup2 mount and iptables with the `cgroup` match; without them the
//! run says so once and network faults are waited out without effect.
//!
//! Owns: the run's cgroups and rules (tagged `mirrorgate-chaos-PID`, PID this process), and
//! removing what an interrupted run left. Must not touch: the processes (an instance joins its
//! cgroup as it starts: [`Net::cgroup_procs`]), the other rules of the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

const TAG: &str = "mirrorgate-chaos-";

/// The cgroups and the rules of one run.
pub struct Net {
    /// The run's cgroup under the cgroup2 mount, and its path relative to that mount (what
    /// the `cgroup` match takes); `None` when faults cannot be injected here.
    root: Option<(PathBuf, String)>,
    /// The brokers' ports: the instances' packets to them are what a fault drops.
    ports: String,
}

/// One fault's rule, removed when dropped.
pub struct Cut(Vec<String>);

impl Net {
    /// [`Net::set_up`] for the brokers at `addrs` (`host:port`); says once on stderr when
    /// network faults cannot be injected.
    pub fn for_brokers<'a>(addrs: impl Iterator<Item = &'a String>) -> Net {
        let ports: Vec<u16> = addrs
            .filter_map(|a| a.rsplit(':').next()?.parse().ok())
            .collect();
        let (net, why) = Net::set_up(&ports);
        match why {
            Some(why) => eprintln!(
                "chaos: no network faults in this run ({why}): they are waited out without effect"
            ),
            None => eprintln!("chaos: network faults drop the instances' packets to the brokers (ports {}) with iptables; no delay (no netem here)", net.ports),
        }
        net
    }

    /// The run's cgroup, once what interrupted runs left is removed; `why` says why faults
    /// cannot be injected (`None`: they can).
    pub fn set_up(broker_ports: &[u16]) -> (Net, Option<String>) {
        let ports = broker_ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mount = match cgroup2_mount() {
            Some(m) => m,
            None => return (Net { root: None, ports }, Some("no cgroup2 mount".into())),
        };
        remove_stale(&mount);
        let rel = format!("{TAG}{}", std::process::id());
        let dir = mount.join(&rel);
        let probe = std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create a cgroup ({}): {e}", dir.display()))
            .and_then(|()| {
                // A rule that matches nothing (no port), added and removed: iptables and its
                // cgroup match work here.
                let rule = rule_args(&rel, "1", 100);
                iptables("-A", &rule)?;
                iptables("-D", &rule)
            });
        match probe {
            Ok(()) => (
                Net {
                    root: Some((dir, rel)),
                    ports,
                },
                None,
            ),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                (Net { root: None, ports }, Some(e))
            }
        }
    }

    /// The `cgroup.procs` file instance `i` writes itself into as it starts (created on first
    /// use); `None` when faults cannot be injected.
    pub fn cgroup_procs(&self, i: usize) -> Option<PathBuf> {
        let (dir, _) = self.root.as_ref()?;
        let group = dir.join(format!("gw-{i}"));
        std::fs::create_dir_all(&group).ok()?;
        Some(group.join("cgroup.procs"))
    }

    /// Drops `loss_percent` % of instance `i`'s packets to the brokers until the cut is dropped
    /// (`None` when faults cannot be injected here).
    pub fn cut(&self, i: usize, loss_percent: u64) -> Result<Option<Cut>, String> {
        let Some((_, rel)) = &self.root else {
            return Ok(None);
        };
        let rule = rule_args(&format!("{rel}/gw-{i}"), &self.ports, loss_percent);
        iptables("-A", &rule)?;
        Ok(Some(Cut(rule)))
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        if let Err(e) = iptables("-D", &self.0) {
            eprintln!("chaos: a network fault's rule could not be removed: {e}");
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some((dir, rel)) = &self.root {
            remove_rules(rel);
            if let Some(mount) = dir.parent() {
                remove_cgroup(mount, dir);
            }
        }
    }
}

/// The arguments of the rule dropping `loss_percent` % of the TCP packets of cgroup `path` to
/// `ports` (comma-separated).
fn rule_args(path: &str, ports: &str, loss_percent: u64) -> Vec<String> {
    let mut a: Vec<String> = ["OUTPUT", "-p", "tcp", "-m", "cgroup", "--path", path]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(["-m", "multiport", "--dports", ports].map(String::from));
    if loss_percent < 100 {
        let p = format!("{:.2}", loss_percent as f64 / 100.0);
        a.extend(["-m", "statistic", "--mode", "random", "--probability", &p].map(String::from));
    }
    let tag = path.split('/').next().unwrap_or(path);
    a.extend(["-m", "comment", "--comment", tag, "-j", "DROP"].map(String::from));
    a
}

fn iptables(op: &str, rule: &[String]) -> Result<(), String> {
    let out = Command::new("iptables")
        .arg("-w")
        .arg(op)
        .args(rule)
        .output()
        .map_err(|e| format!("cannot run iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {op} {}: {}",
            rule.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Where cgroup2 is mounted (`/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a
/// hybrid one).
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
    })
}

/// Removes the rules tagged `tag` (every one of them, whatever its fault).
fn remove_rules(tag: &str) {
    let Ok(out) = Command::new("iptables")
        .args(["-w", "-S", "OUTPUT"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rule) = line.strip_prefix("-A ") else {
            continue;
        };
        if rule.split_whitespace().any(|w| w.trim_matches('"') == tag) {
            let args: Vec<String> = rule
                .split_whitespace()
                .map(|w| w.trim_matches('"').to_string())
                .collect();
            let _ = iptables("-D", &args);
        }
    }
}

/// Moves what still runs in `dir`'s cgroups to the root one, then removes them.
fn remove_cgroup(mount: &Path, dir: &Path) {
    let children: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    for group in children.iter().map(PathBuf::as_path).chain([dir]) {
        if let Ok(pids) = std::fs::read_to_string(group.join("cgroup.procs")) {
            for pid in pids.lines() {
                let _ = std::fs::write(mount.join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(group);
    }
}

/// The rules and cgroups of runs whose process is gone (killed before it could remove them).
fn remove_stale(mount: &Path) {
    let Ok(entries) = std::fs::read_dir(mount) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix(TAG).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_rules(&name);
            remove_cgroup(mount, &e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_drops_every_packet_and_loss_a_random_share_both_tagged_with_the_run() {
        let all = rule_args("mirrorgate-chaos-7/gw-1", "29092,29094", 100).join(" ");
        assert_eq!(all, "OUTPUT -p tcp -m cgroup --path mirrorgate-chaos-7/gw-1 -m multiport --dports 29092,29094 -m comment --comment mirrorgate-chaos-7 -j DROP");
        let loss = rule_args("mirrorgate-chaos-7/gw-0", "1", 30).join(" ");
        assert!(
            loss.contains("-m statistic --mode random --probability 0.30 "),
            "{loss}"
        );
    }
}
