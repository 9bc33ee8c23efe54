//! Loading: YAML text → [`Config`], with every error located by key path and position.

use super::error::{ConfigError, ConfigIssue};
use super::positions::{join_key, parent_path, Pos, PosIndex};
use super::validate::semantic_issues;
use super::Config;
use std::path::Path;

/// Reads, parses and validates a configuration file.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    load_str(&text, &path.display().to_string())
}

/// Parses and validates configuration text; `origin` names it in errors (usually the file name).
pub fn load_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let index = PosIndex::build(text);
    let de = serde_yaml::Deserializer::from_str(text);
    let cfg: Config = match serde_path_to_error::deserialize(de) {
        Ok(cfg) => cfg,
        Err(err) => {
            let issue = serde_issue(&err, &index);
            return Err(ConfigError::Invalid {
                origin: origin.to_string(),
                issues: vec![issue],
            });
        }
    };
    let issues = locate(semantic_issues(&cfg), &index);
    if issues.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigError::Invalid {
            origin: origin.to_string(),
            issues,
        })
    }
}

/// Validates a configuration built in code (no file positions).
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    let issues = semantic_issues(cfg);
    if issues.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            origin: "<config>".to_string(),
            issues,
        })
    }
}

/// Attaches positions to semantic issues and orders them as they appear in the file.
fn locate(mut issues: Vec<ConfigIssue>, index: &PosIndex) -> Vec<ConfigIssue> {
    for issue in &mut issues {
        let pos = index
            .lookup(&issue.path)
            .unwrap_or(Pos { line: 1, column: 1 });
        issue.line = Some(pos.line);
        issue.column = Some(pos.column);
    }
    issues.sort_by_key(|i| (i.line, i.column));
    issues
}

/// The path of a `serde_path_to_error` error, in our syntax.
fn p2e_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = join_key(&out, key),
            Segment::Enum { variant } => out = join_key(&out, variant),
            Segment::Unknown => {}
        }
    }
    out
}

/// The text between the first pair of backticks: "missing field `x`" → "x".
fn backticked(msg: &str) -> Option<&str> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    Some(&msg[start..start + len])
}

fn serde_issue(
    err: &serde_path_to_error::Error<serde_yaml::Error>,
    index: &PosIndex,
) -> ConfigIssue {
    let inner = err.inner();
    let mut path = p2e_path(err.path());
    let mut message = inner.to_string();

    // serde_yaml appends " at line L column C" and prefixes its own path ("a.b: "); strip both,
    // the position and path are reported separately.
    if inner.location().is_some() {
        if let Some(i) = message.rfind(" at line ") {
            message.truncate(i);
        }
    }
    for prefix in [path.as_str(), parent_path(&path)] {
        if prefix.is_empty() {
            continue;
        }
        if let Some(rest) = message.strip_prefix(&format!("{prefix}: ")) {
            message = rest.to_string();
            break;
        }
    }

    let mut pos = inner.location().map(|l| Pos {
        line: l.line(),
        column: l.column(),
    });

    if message.starts_with("missing field") {
        // Point at the missing key; the position is that of the parent mapping.
        if let Some(field) = backticked(&message) {
            let parent = path.clone();
            path = join_key(&parent, field);
            if let Some(p) = index.value_pos(&parent) {
                pos = Some(p);
            }
        }
    } else if message.starts_with("duplicate field") {
        if let Some(field) = backticked(&message) {
            path = join_key(&path, field);
            // The index keeps the last occurrence, the duplicate.
            if let Some(p) = index.lookup_exact(&path) {
                pos = Some(p);
            }
        }
    } else if path.is_empty() {
        // Syntax errors and the like: recover the path from where the YAML parser stopped.
        if let Some((spath, spos, _)) = &index.syntax_error {
            path = spath.clone();
            pos = pos.or(Some(*spos));
        } else if let Some(p) = pos.and_then(|p| index.path_at(p)) {
            path = p.to_string();
        }
    }

    if (path.starts_with("admin.token") || path.contains(".sasl.password"))
        && !message.starts_with("unknown field")
    {
        // Do not echo (part of) a secret in an error.
        message = "invalid type or value (contents not shown: it may be a secret)".to_string();
    }

    let pos = pos
        .or_else(|| index.lookup(&path))
        .unwrap_or(Pos { line: 1, column: 1 });
    ConfigIssue {
        path,
        line: Some(pos.line),
        column: Some(pos.column),
        message,
    }
}

/// The effective configuration (defaults filled in) as YAML, inline secret values replaced by
/// `<redacted>`.
pub fn render_effective(cfg: &Config) -> String {
    let mut shown = cfg.clone();
    if let Some(t) = &shown.admin.token {
        shown.admin.token = Some(t.redacted());
    }
    let clusters = std::iter::once(&mut shown.destination)
        .chain(shown.mirrors.iter_mut().filter_map(|m| m.source.as_mut()));
    for c in clusters {
        if let Some(s) = &c.sasl {
            c.sasl = Some(s.redacted());
        }
    }
    serde_yaml::to_string(&shown)
        .unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"))
}
