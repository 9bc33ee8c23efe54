//! The on-disk state store: a directory of small files, each written atomically (write to a
//! temporary file of its own, fsync it, rename over the target, fsync the directory), so that a
//! crash leaves either the old or the new content, never a mix. Concurrent writers of one file
//! each leave a whole file (the last rename wins); ordering them is the caller's business.
//!
//! The directory carries an identity file ([`IDENTITY_FILE`]) written by `mirrorgate state init`.
//! A directory without it (missing, or an empty mount point after a lost volume) is never written
//! to: the gateway cannot tell a first start from lost state, so it does not guess.
//!
//! Owns: the layout of `state_dir`, its identity file and atomic file I/O. Must not touch: what
//! the files mean (callers encode and decode their own content) or any network state.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A state-store failure, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot create state directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid state file name {0:?}")]
    BadName(String),
    #[error(
        "state directory {path} {what}: the gateway cannot tell a first start from lost state. \
         First start: run `mirrorgate state init --config <file>`. Lost state: restore the \
         directory from a backup and restart (docs/failover.md#recovering-mirror-state)"
    )]
    NotInitialised { path: PathBuf, what: &'static str },
}

/// Counter that makes each write's temporary file name unique within the process.
static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The identity file of an initialised state directory.
pub const IDENTITY_FILE: &str = "mirrorgate.state";

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateStore {
    root: PathBuf,
}

impl StateStore {
    /// Open the state directory without creating anything. Whether it can be used is
    /// [`Self::check`]; reads of a missing directory find nothing, writes are refused.
    /// A directory with files but no identity file (written by an older mirrorgate) is adopted:
    /// its identity file is written now.
    pub fn open(root: &Path) -> Result<Self, StateError> {
        let store = StateStore {
            root: root.to_path_buf(),
        };
        if !store.identity().exists() && store.has_entries() {
            store.write_identity()?;
        }
        Ok(store)
    }

    /// Create the directory (and its parents) and its identity file; a no-op for an initialised
    /// directory. `mirrorgate state init`.
    pub fn init(root: &Path) -> Result<Self, StateError> {
        fs::create_dir_all(root).map_err(|source| StateError::CreateDir {
            path: root.to_path_buf(),
            source,
        })?;
        let store = StateStore {
            root: root.to_path_buf(),
        };
        if !store.identity().exists() {
            store.write_identity()?;
        }
        Ok(store)
    }

    /// `Ok` when the directory is initialised; otherwise why not, with the recovery command.
    pub fn check(&self) -> Result<(), StateError> {
        match fs::metadata(&self.root) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StateError::NotInitialised {
                path: self.root.clone(),
                what: "does not exist",
            }),
            Err(source) => Err(StateError::Read {
                path: self.root.clone(),
                source,
            }),
            Ok(m) if !m.is_dir() => Err(StateError::NotInitialised {
                path: self.root.clone(),
                what: "is not a directory",
            }),
            Ok(_) if !self.identity().exists() => Err(StateError::NotInitialised {
                path: self.root.clone(),
                what: "has no identity file (mirrorgate.state)",
            }),
            Ok(_) => Ok(()),
        }
    }

    fn identity(&self) -> PathBuf {
        self.root.join(IDENTITY_FILE)
    }

    fn has_entries(&self) -> bool {
        fs::read_dir(&self.root)
            .map(|mut rd| rd.next().is_some())
            .unwrap_or(false)
    }

    fn write_identity(&self) -> Result<(), StateError> {
        let created_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let body = format!("{{\"format\":1,\"created_ms\":{created_ms}}}\n");
        self.write_file(&self.root, &self.identity(), IDENTITY_FILE, body.as_bytes())
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, area: &str, name: &str) -> Result<PathBuf, StateError> {
        for part in [area, name] {
            if part.is_empty() || part.contains('/') || part.contains('\\') || part.starts_with('.')
            {
                return Err(StateError::BadName(part.to_string()));
            }
        }
        Ok(self.root.join(area).join(name))
    }

    /// Atomically replace `area/name` with `bytes`. Refused while the directory is not
    /// initialised ([`Self::check`]).
    pub fn write(&self, area: &str, name: &str, bytes: &[u8]) -> Result<(), StateError> {
        let path = self.path(area, name)?;
        self.check()?;
        let dir = self.root.join(area);
        fs::create_dir_all(&dir).map_err(|source| StateError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        self.write_file(&dir, &path, name, bytes)
    }

    fn write_file(
        &self,
        dir: &Path,
        path: &Path,
        name: &str,
        bytes: &[u8],
    ) -> Result<(), StateError> {
        // A temporary name of its own per write (process id and a counter): two writers of the
        // same file never share, truncate or rename each other's temporary file (review F10).
        let seq = TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{seq}.tmp", std::process::id()));
        let werr = |source| StateError::Write {
            path: path.to_path_buf(),
            source,
        };
        let written = fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
        if let Err(e) = written {
            // A full disk must not keep a partial temporary file around.
            let _ = fs::remove_file(&tmp);
            return Err(werr(e));
        }
        fs::rename(&tmp, path).map_err(werr)?;
        // Make the rename itself durable.
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(werr)?;
        Ok(())
    }

    /// Read `area/name`; `Ok(None)` when it does not exist.
    pub fn read(&self, area: &str, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        let path = self.path(area, name)?;
        match fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StateError::Read { path, source }),
        }
    }

    /// Remove `area/name` if it exists.
    pub fn remove(&self, area: &str, name: &str) -> Result<(), StateError> {
        let path = self.path(area, name)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Write { path, source }),
        }
    }

    /// Names of the files in `area` (temporary files excluded), sorted.
    pub fn list(&self, area: &str) -> Result<Vec<String>, StateError> {
        let dir = self.root.join(area);
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StateError::Read { path: dir, source }),
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_content_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::init(dir.path()).unwrap();
        s.write("psm", "t-0", b"abc").unwrap();
        assert_eq!(s.read("psm", "t-0").unwrap().as_deref(), Some(&b"abc"[..]));
    }

    #[test]
    fn a_rewrite_replaces_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::init(dir.path()).unwrap();
        s.write("a", "f", b"a much longer first content").unwrap();
        s.write("a", "f", b"short").unwrap();
        assert_eq!(s.read("a", "f").unwrap().as_deref(), Some(&b"short"[..]));
    }

    #[test]
    fn a_missing_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::init(dir.path()).unwrap();
        assert_eq!(s.read("a", "nope").unwrap(), None);
    }

    #[test]
    fn listing_skips_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::init(dir.path()).unwrap();
        s.write("a", "x", b"1").unwrap();
        std::fs::write(dir.path().join("a/.y.tmp"), b"partial").unwrap();
        assert_eq!(s.list("a").unwrap(), vec!["x".to_string()]);
    }

    #[test]
    fn names_that_escape_the_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::init(dir.path()).unwrap();
        assert!(matches!(
            s.write("a", "../x", b"1"),
            Err(StateError::BadName(_))
        ));
        assert!(matches!(
            s.write("..", "x", b"1"),
            Err(StateError::BadName(_))
        ));
    }

    #[test]
    fn an_unwritable_directory_is_a_named_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, b"").unwrap();
        let err = StateStore::init(&file.join("sub")).unwrap_err();
        assert!(err.to_string().contains("plain-file"), "{err}");
    }

    #[test]
    fn a_missing_directory_is_not_initialised_and_is_not_created_by_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("gone");
        let s = StateStore::open(&root).unwrap();
        let err = s.check().unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(err.to_string().contains("mirrorgate state init"), "{err}");
        assert!(matches!(
            s.write("mirrors", "m.json", b"{}"),
            Err(StateError::NotInitialised { .. })
        ));
        assert!(!root.exists());
        assert_eq!(s.read("mirrors", "m.json").unwrap(), None);
    }

    #[test]
    fn an_empty_directory_is_not_initialised() {
        // An empty mount point after a lost volume looks exactly like this.
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(dir.path()).unwrap();
        let err = s.check().unwrap_err();
        assert!(err.to_string().contains("no identity file"), "{err}");
        assert!(s.write("psm", "t-0", b"x").is_err());
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_directory_written_by_an_older_version_is_adopted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("mirrors")).unwrap();
        std::fs::write(dir.path().join("mirrors/m.json"), b"{}").unwrap();
        let s = StateStore::open(dir.path()).unwrap();
        s.check().unwrap();
        assert!(dir.path().join(IDENTITY_FILE).exists());
    }

    #[test]
    fn concurrent_writers_of_one_file_never_leave_a_torn_file_or_fail() {
        // Each writer's content is one byte repeated: a torn or interleaved file would mix bytes
        // or have the wrong length.
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::init(dir.path()).unwrap();
        const LEN: usize = 64 * 1024;
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut errors = Vec::new();
                    for i in 0..40u8 {
                        let b = vec![b'a' + t * 5 + i % 5; LEN];
                        if let Err(e) = s.write("screen", "pids.json", &b) {
                            errors.push(e.to_string());
                        }
                        let read = s.read("screen", "pids.json").unwrap().unwrap();
                        assert_eq!(read.len(), LEN, "torn file read by writer {t}");
                        assert!(read.iter().all(|x| *x == read[0]), "interleaved bytes");
                    }
                    errors
                })
            })
            .collect();
        for t in threads {
            let errors = t.join().unwrap();
            assert!(errors.is_empty(), "concurrent writes failed: {errors:?}");
        }
        let read = s.read("screen", "pids.json").unwrap().unwrap();
        assert_eq!(read.len(), LEN);
        assert!(read.iter().all(|x| *x == read[0]));
        assert_eq!(s.list("screen").unwrap(), vec!["pids.json".to_string()]);
        let left: Vec<_> = std::fs::read_dir(dir.path().join("screen"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "temporary files left behind: {left:?}");
    }

    #[test]
    fn init_creates_the_directory_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("a/b");
        StateStore::init(&root).unwrap().check().unwrap();
        let first = std::fs::read(root.join(IDENTITY_FILE)).unwrap();
        StateStore::init(&root).unwrap();
        assert_eq!(std::fs::read(root.join(IDENTITY_FILE)).unwrap(), first);
    }
}
