//! Secrets: resolving a [`SecretSource`] and keeping its value out of logs.

use super::SecretSource;
use std::fmt;
use std::path::PathBuf;

/// Why a secret could not be resolved. Never contains the secret itself.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// None or several of `value`, `env`, `file` are set.
    #[error("exactly one of value, env or file must be set (found {0})")]
    Ambiguous(usize),
    /// The environment variable is not set (or not valid Unicode).
    #[error("environment variable {var} is not set")]
    EnvMissing { var: String },
    /// The file could not be read.
    #[error("cannot read secret file {}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The secret resolved to an empty string.
    #[error("the secret from {origin} is empty")]
    Empty { origin: String },
}

impl SecretSource {
    /// How many of `value`, `env`, `file` are set (a valid source has exactly one).
    pub fn fields_set(&self) -> usize {
        usize::from(self.value.is_some())
            + usize::from(self.env.is_some())
            + usize::from(self.file.is_some())
    }

    /// Reads the secret: the inline value, the environment variable, or the file contents.
    /// Trailing newlines (`\n`, `\r\n`) are removed. An empty result is an error.
    pub fn resolve(&self) -> Result<String, SecretError> {
        let n = self.fields_set();
        if n != 1 {
            return Err(SecretError::Ambiguous(n));
        }
        let (raw, origin) = if let Some(v) = &self.value {
            (v.clone(), "the inline value".to_string())
        } else if let Some(var) = &self.env {
            let v = std::env::var(var).map_err(|_| SecretError::EnvMissing { var: var.clone() })?;
            (v, format!("environment variable {var}"))
        } else if let Some(path) = &self.file {
            let v = std::fs::read_to_string(path).map_err(|source| SecretError::File {
                path: path.clone(),
                source,
            })?;
            (v, format!("file {}", path.display()))
        } else {
            return Err(SecretError::Ambiguous(0));
        };
        let trimmed = raw.trim_end_matches(['\n', '\r']).to_string();
        if trimmed.is_empty() {
            return Err(SecretError::Empty { origin });
        }
        Ok(trimmed)
    }

    /// A copy with an inline value replaced by `<redacted>`.
    pub fn redacted(&self) -> SecretSource {
        SecretSource {
            value: self.value.as_ref().map(|_| REDACTED.to_string()),
            env: self.env.clone(),
            file: self.file.clone(),
        }
    }
}

/// What an inline secret is replaced with in rendered output.
pub const REDACTED: &str = "<redacted>";

/// Debug output never shows an inline secret value.
impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretSource")
            .field("value", &self.value.as_ref().map(|_| REDACTED))
            .field("env", &self.env)
            .field("file", &self.file)
            .finish()
    }
}
