//! A consumer group member run as a child process: the Java consumer
//! (integration/clients/java/FollowGroup.java, run through `integration/rig java`), whose output
//! lines, one record or event each, are collected as they come. `consumer-failover` and `chaos`
//! both run their applications' groups with it.
//!
//! Owns: the child process, its stdin, stdout and log, and the parse of its lines. Must not
//! touch: clusters, gateways, what the reads mean (each benchmark's figures or checker).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::process::die_with_parent;
use crate::repo;

/// A record a group member read: partition, offset, key, and when (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub at_ms: i64,
}

/// What a group member printed so far.
#[derive(Debug, Default)]
pub struct Output {
    pub reads: Vec<Read>,
    /// `{"ready":T}`: the resume member's consumer exists and waits for `go`.
    pub ready: bool,
    /// Partitions assigned (the last assignment).
    pub assigned: Vec<i32>,
    /// `{"done":N}`: the member ended on its own.
    pub done: Option<u64>,
}

impl Output {
    fn absorb(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            return;
        };
        if let (Some(p), Some(o), Some(k), Some(t)) = (
            v["p"].as_i64(),
            v["o"].as_i64(),
            v["k"].as_str(),
            v["t"].as_i64(),
        ) {
            self.reads.push(Read {
                partition: p as i32,
                offset: o,
                key: k.to_string(),
                at_ms: t,
            });
        } else if v.get("ready").is_some() {
            self.ready = true;
        } else if let Some(a) = v["assigned"].as_array() {
            self.assigned = a
                .iter()
                .filter_map(|p| p.as_i64())
                .map(|p| p as i32)
                .collect();
        } else if let Some(n) = v["done"].as_u64() {
            self.done = Some(n);
        }
    }
}

/// A consumer group member (FollowGroup.java); killed on drop.
pub struct Member {
    child: Child,
    stdin: Option<ChildStdin>,
    output: Arc<Mutex<Output>>,
    reader: Option<std::thread::JoinHandle<()>>,
    log: PathBuf,
}

/// How a member runs: `follow` (reads and auto-commits until killed) or `resume` (waits for
/// [`Member::go`], reads to the end, commits).
pub struct MemberArgs<'a> {
    pub mode: &'a str,
    pub bootstrap: &'a str,
    pub topic: &'a str,
    pub group: &'a str,
    pub commit_ms: u64,
    pub timeout: Duration,
}

impl Member {
    /// Starts the member; its stderr goes to `log`.
    pub fn start(a: &MemberArgs, log: &Path) -> Result<Member, String> {
        let class = repo().join("integration/clients/java/FollowGroup.java");
        let err = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let mut child = die_with_parent(&mut Command::new(repo().join("integration/rig")))
            .arg("java")
            .arg(&class)
            .args([a.mode, a.bootstrap, a.topic, a.group])
            .arg(a.commit_ms.to_string())
            .arg(a.timeout.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("cannot start FollowGroup.java: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let output = Arc::new(Mutex::new(Output::default()));
        let sink = output.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(mut o) = sink.lock() {
                    o.absorb(&line);
                }
            }
        });
        Ok(Member {
            stdin: child.stdin.take(),
            child,
            output,
            reader: Some(reader),
            log: log.to_path_buf(),
        })
    }

    /// Runs `f` on what the member printed so far.
    pub fn with<T>(&self, f: impl FnOnce(&Output) -> T) -> T {
        match self.output.lock() {
            Ok(o) => f(&o),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    /// Waits until `cond` holds for the output; fails (with the log's tail) after `limit` or when
    /// the member exits first.
    pub fn wait(
        &mut self,
        what: &str,
        limit: Duration,
        cond: impl Fn(&Output) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if self.with(&cond) {
                return Ok(());
            }
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            if exited {
                // Let the reader take the last lines.
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                if self.with(&cond) {
                    return Ok(());
                }
            }
            if exited || Instant::now() > deadline {
                return Err(format!(
                    "{what}: {} (log: {})",
                    if exited {
                        "the consumer exited"
                    } else {
                        "timed out"
                    },
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Tells a `resume` member to start reading.
    pub fn go(&mut self) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin already closed")?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("cannot signal the consumer: {e}"))
    }

    /// SIGKILL (an application that dies with its region), then the rest of its output.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }

    /// The last lines of the member's stderr.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(8).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// Everything the member printed (after [`Member::kill`] or its end).
    pub fn into_output(mut self) -> Output {
        self.kill();
        match self.output.lock() {
            Ok(mut o) => std::mem::take(&mut *o),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_line_is_a_record_or_an_event_and_anything_else_is_ignored() {
        let mut o = Output::default();
        for line in [
            r#"{"ready":1700000000000}"#,
            r#"{"assigned":[0,2]}"#,
            r#"{"p":2,"o":41,"k":"r7","t":1700000000123}"#,
            "not json",
            r#"{"p":"x"}"#,
            r#"{"done":1}"#,
        ] {
            o.absorb(line);
        }
        assert!(o.ready);
        assert_eq!(o.assigned, vec![0, 2]);
        assert_eq!(
            o.reads,
            vec![Read {
                partition: 2,
                offset: 41,
                key: "r7".into(),
                at_ms: 1_700_000_000_123
            }]
        );
        assert_eq!(o.done, Some(1));
    }
}
