//! One chaos run at a time on a checkout: two runs would share the run's rig (its ports and its
//! directory) and kill each other's processes.
//!
//! Owns: the lock file `target/chaos/run.lock`. Must not touch: anything the run starts.

use std::path::{Path, PathBuf};

/// One chaos run at a time on this checkout: two would share the run's rig and each other's
/// processes. The lock file holds the owner's pid; a lock whose owner is gone is taken over.
pub struct RunLock(PathBuf);

impl RunLock {
    pub fn take(path: &Path) -> Result<RunLock, String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(mut f) => {
                    use std::io::Write;
                    write!(f, "{}", std::process::id()).map_err(|e| e.to_string())?;
                    return Ok(RunLock(path.to_path_buf()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(path).unwrap_or_default();
                    let alive = owner
                        .trim()
                        .parse::<u32>()
                        .is_ok_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
                    if alive {
                        return Err(format!(
                            "another chaos run (pid {}) is using target/chaos/rig; wait for it or stop it",
                            owner.trim()
                        ));
                    }
                    let _ = std::fs::remove_file(path);
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Err(format!("{}: cannot be taken", path.display()))
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
