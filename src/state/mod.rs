//! The on-disk state store: a directory of small files, each written atomically (write to a
//! temporary file, fsync it, rename over the target, fsync the directory), so that a crash
//! leaves either the old or the new content, never a mix.
//!
//! Owns: the layout of `state_dir` and atomic file I/O. Must not touch: what the files mean
//! (callers encode and decode their own content) or any network state.

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
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateStore {
    root: PathBuf,
}

impl StateStore {
    /// Open (and create if needed) the state directory.
    pub fn open(root: &Path) -> Result<Self, StateError> {
        fs::create_dir_all(root).map_err(|source| StateError::CreateDir {
            path: root.to_path_buf(),
            source,
        })?;
        Ok(StateStore {
            root: root.to_path_buf(),
        })
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

    /// Atomically replace `area/name` with `bytes`.
    pub fn write(&self, area: &str, name: &str, bytes: &[u8]) -> Result<(), StateError> {
        let path = self.path(area, name)?;
        let dir = self.root.join(area);
        fs::create_dir_all(&dir).map_err(|source| StateError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        let tmp = dir.join(format!(".{name}.tmp"));
        let werr = |source| StateError::Write {
            path: path.clone(),
            source,
        };
        {
            let mut f = fs::File::create(&tmp).map_err(werr)?;
            f.write_all(bytes).map_err(werr)?;
            f.sync_all().map_err(werr)?;
        }
        fs::rename(&tmp, &path).map_err(werr)?;
        // Make the rename itself durable.
        fs::File::open(&dir)
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
        let s = StateStore::open(dir.path()).unwrap();
        s.write("psm", "t-0", b"abc").unwrap();
        assert_eq!(s.read("psm", "t-0").unwrap().as_deref(), Some(&b"abc"[..]));
    }

    #[test]
    fn a_rewrite_replaces_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(dir.path()).unwrap();
        s.write("a", "f", b"a much longer first content").unwrap();
        s.write("a", "f", b"short").unwrap();
        assert_eq!(s.read("a", "f").unwrap().as_deref(), Some(&b"short"[..]));
    }

    #[test]
    fn a_missing_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(dir.path()).unwrap();
        assert_eq!(s.read("a", "nope").unwrap(), None);
    }

    #[test]
    fn listing_skips_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(dir.path()).unwrap();
        s.write("a", "x", b"1").unwrap();
        std::fs::write(dir.path().join("a/.y.tmp"), b"partial").unwrap();
        assert_eq!(s.list("a").unwrap(), vec!["x".to_string()]);
    }

    #[test]
    fn names_that_escape_the_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(dir.path()).unwrap();
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
        let err = StateStore::open(&file.join("sub")).unwrap_err();
        assert!(err.to_string().contains("plain-file"), "{err}");
    }
}
