//! Configuration errors: an unreadable file, or a list of issues each naming a key path and a
//! position in the file.

use std::fmt;
use std::path::PathBuf;

/// One problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Key path, like `listeners.mirror.port_base` or `mirrors[1].topics[0]`; empty for the
    /// document root (displayed as `(root)`).
    pub path: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// What is wrong, in words.
    pub message: String,
}

impl ConfigIssue {
    /// An issue at a path with no position yet.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ConfigIssue {
        ConfigIssue {
            path: path.into(),
            line: None,
            column: None,
            message: message.into(),
        }
    }

    /// The path as displayed: `(root)` for the document itself.
    pub fn display_path(&self) -> &str {
        if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        }
    }
}

/// `LINE:COL: KEY.PATH: message` (without the file name; [`ConfigError`] prefixes it).
impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{l}:{c}: ")?,
            (Some(l), None) => write!(f, "{l}: ")?,
            _ => {}
        }
        write!(f, "{}: {}", self.display_path(), self.message)
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read configuration file: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration. Displayed one issue per line as
    /// `ORIGIN:LINE:COL: KEY.PATH: message`.
    #[error("{}", render_issues(origin, issues))]
    Invalid {
        /// The file name (or another label) the text came from.
        origin: String,
        /// Every problem found, in file order.
        issues: Vec<ConfigIssue>,
    },
}

impl ConfigError {
    /// The issues, empty for an I/O error.
    pub fn issues(&self) -> &[ConfigIssue] {
        match self {
            ConfigError::Io { .. } => &[],
            ConfigError::Invalid { issues, .. } => issues,
        }
    }
}

fn render_issues(origin: &str, issues: &[ConfigIssue]) -> String {
    let mut out = String::new();
    for (i, issue) in issues.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(origin);
        out.push_str(if issue.line.is_some() { ":" } else { ": " });
        out.push_str(&issue.to_string());
    }
    out
}
