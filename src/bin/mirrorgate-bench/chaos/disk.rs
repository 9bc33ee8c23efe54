//! The chaos run's small disks: each instance's state directory lives on a tmpfs of its own
//! (`gw-i/disk`, 16 MiB), so that the nemesis can fill it (`Fault::FullDisk`): the instance's
//! next state writes fail with ENOSPC until the filler is removed. Mounting needs root (or
//! CAP_SYS_ADMIN); without it the state directories stay on the ordinary disk, the run says so
//! once, and full-disk faults are waited out without effect.
//!
//! Owns: the mounts, the filler files, and unmounting what an interrupted run left behind.
//! Must not touch: what the gateway writes into its state directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bytes of each instance's tmpfs: ample for a state directory of a few tens of KiB.
const SIZE: &str = "16m";

/// The mount of one instance's disk (`None` where mounting is not possible).
pub struct Disk {
    mount: Option<PathBuf>,
    /// The state directory, on the mount when there is one.
    pub state_dir: PathBuf,
}

impl Disk {
    /// Mounts a tmpfs at `dir/disk` (state directory `dir/disk/state`); where that fails, the
    /// state directory is `dir/disk/state` on the ordinary disk and `why` says why.
    pub fn mount(dir: &Path) -> (Disk, Option<String>) {
        let mount = dir.join("disk");
        let state_dir = mount.join("state");
        if let Err(e) = std::fs::create_dir_all(&mount) {
            return (
                Disk {
                    mount: None,
                    state_dir,
                },
                Some(e.to_string()),
            );
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={SIZE}"), "tmpfs"])
            .arg(&mount)
            .output();
        let why = match out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Some(format!("cannot run mount: {e}")),
        };
        let mounted = why.is_none().then_some(mount);
        (
            Disk {
                mount: mounted,
                state_dir,
            },
            why,
        )
    }

    /// Fills the disk until a write fails (ENOSPC): whether it is full now.
    pub fn fill(&self) -> bool {
        let Some(m) = &self.mount else {
            return false;
        };
        let Ok(mut f) = std::fs::File::create(m.join("filler")) else {
            return false;
        };
        let block = vec![0u8; 64 * 1024];
        // The mount's size bounds the loop; the cap guards against a mount that is not one.
        for _ in 0..(64 * 1024 * 1024 / block.len()) {
            if f.write_all(&block).is_err() {
                return true;
            }
        }
        f.sync_all().is_err()
    }

    /// Removes the filler.
    pub fn free(&self) {
        if let Some(m) = &self.mount {
            let _ = std::fs::remove_file(m.join("filler"));
        }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if let Some(m) = &self.mount {
            unmount(m);
        }
    }
}

fn unmount(p: &Path) {
    let _ = Command::new("umount").arg("-l").arg(p).output();
}

/// Unmounts every mount under `dir` (left by a run that was killed), deepest first.
pub fn unmount_under(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let Ok(dir) = dir.canonicalize() else {
        return;
    };
    let mut under: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(&dir))
        .collect();
    under.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in under {
        unmount(&p);
    }
}
