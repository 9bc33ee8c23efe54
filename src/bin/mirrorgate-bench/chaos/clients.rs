//! The chaos run's client processes: real producers (the Java client, librdkafka through
//! confluent-kafka, kafka-python) run as children, whose output lines (one JSON event per
//! record: send, ack, err) become the history the checker reads.
//!
//! Owns: the child processes, their stdin (the stop line), stdout and log, and their part of
//! the history. Must not touch: the gateways, the clusters, the rules.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::check::{Op, Origin, Outcome};
use crate::process::die_with_parent;
use crate::repo;

/// Which client library a producer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    Java,
    /// The Java client in transactions of four records, every fifth aborted
    /// (ChaosTxnProducer.java).
    JavaTransactional,
    Librdkafka,
    KafkaPython,
}

impl Library {
    pub fn as_str(self) -> &'static str {
        match self {
            Library::Java => "java",
            Library::JavaTransactional => "java-transactional",
            Library::Librdkafka => "librdkafka",
            Library::KafkaPython => "kafka-python",
        }
    }
}

/// The history of the run: every record every client tried, in the order they were sent.
#[derive(Default)]
pub struct History {
    ops: Vec<Op>,
    by_key: HashMap<String, usize>,
}

impl History {
    /// A record handed to a client at `t`.
    pub fn sent(&mut self, client: &str, origin: Origin, key: &str, t: i64) {
        let n = key
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        self.by_key.insert(key.to_string(), self.ops.len());
        self.ops.push(Op {
            client: client.to_string(),
            origin,
            key: key.to_string(),
            n,
            sent_ms: t,
            answered_ms: None,
            outcome: Outcome::Unknown,
        });
    }

    /// The answer for `key` at `t`.
    pub fn answered(&mut self, key: &str, outcome: Outcome, t: i64) {
        if let Some(&i) = self.by_key.get(key) {
            self.ops[i].answered_ms = Some(t);
            self.ops[i].outcome = outcome;
        }
    }

    /// Takes one output line of a client (ignored when not an event).
    fn absorb(&mut self, client: &str, origin: Origin, line: &str) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let (Some(e), Some(t)) = (v["e"].as_str(), v["t"].as_i64()) else {
            return;
        };
        let key = v["k"].as_str().unwrap_or_default();
        match e {
            "send" => self.sent(client, origin, key, t),
            "ack" => {
                let (Some(p), Some(o)) = (v["p"].as_i64(), v["o"].as_i64()) else {
                    return;
                };
                let outcome = Outcome::Acked {
                    partition: p as i32,
                    offset: o,
                };
                self.answered(key, outcome, t)
            }
            "err" => {
                let reason = v["r"].as_str().unwrap_or_default().to_string();
                self.answered(key, Outcome::Failed { reason }, t)
            }
            _ => {}
        }
    }

    pub fn ops(&self) -> &[Op] {
        &self.ops
    }
}

pub type Shared = Arc<Mutex<History>>;

/// Runs `f` on the history.
pub fn with<T>(h: &Shared, f: impl FnOnce(&mut History) -> T) -> T {
    match h.lock() {
        Ok(mut g) => f(&mut g),
        Err(poisoned) => f(&mut poisoned.into_inner()),
    }
}

/// One producer of the workload: `name` of `library` writing `topic` through `bootstrap` at
/// `per_second` records a second.
#[derive(Clone, Copy)]
pub struct Spec<'a> {
    pub library: Library,
    pub name: &'a str,
    pub origin: Origin,
    pub bootstrap: &'a str,
    pub topic: &'a str,
    pub per_second: u32,
}

/// A producer child process.
pub struct Producer {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    reader: Option<std::thread::JoinHandle<()>>,
    done: Arc<Mutex<bool>>,
}

impl Producer {
    /// Starts the producer `spec` describes; its events go to `history` as `spec.origin`, its
    /// stderr to `log_dir/NAME.log`.
    pub fn start(spec: &Spec, history: &Shared, log_dir: &Path) -> Result<Producer, String> {
        let Spec {
            library,
            name,
            origin,
            bootstrap,
            topic,
            per_second,
        } = *spec;
        let log = std::fs::File::create(log_dir.join(format!("{name}.log")))
            .map_err(|e| e.to_string())?;
        let rate = per_second.to_string();
        let mut cmd = match library {
            Library::Java | Library::JavaTransactional => {
                let class = match library {
                    Library::JavaTransactional => "ChaosTxnProducer.java",
                    _ => "ChaosProducer.java",
                };
                let mut c = Command::new(repo().join("integration/rig"));
                c.arg("java")
                    .arg(repo().join("integration/clients/java").join(class));
                c
            }
            Library::Librdkafka | Library::KafkaPython => {
                let python = python()?;
                let mut c = Command::new(python);
                c.arg(repo().join("integration/clients/python_chaos_produce.py"))
                    .arg(library.as_str());
                c
            }
        };
        cmd.args([bootstrap, topic, name, rate.as_str()]);
        let mut child = die_with_parent(&mut cmd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot start producer {name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let done = Arc::new(Mutex::new(false));
        let (h, d, client) = (history.clone(), done.clone(), name.to_string());
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("\"e\":\"done\"") {
                    if let Ok(mut d) = d.lock() {
                        *d = true;
                    }
                }
                with(&h, |h| h.absorb(&client, origin, &line));
            }
        });
        Ok(Producer {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child,
            reader: Some(reader),
            done,
        })
    }

    /// Asks the producer to stop, waits for its last answers (`limit` at most), then ends it.
    pub fn stop(mut self, limit: Duration) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"stop\n");
        }
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !self.done.lock().map(|d| *d).unwrap_or(false) {
            eprintln!("chaos: producer {} did not finish cleanly", self.name);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python interpreter of the client environment (integration/clients/setup-python).
fn python() -> Result<std::path::PathBuf, String> {
    let out = Command::new(repo().join("integration/clients/setup-python"))
        .output()
        .map_err(|e| format!("cannot run integration/clients/setup-python: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "integration/clients/setup-python failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(std::path::PathBuf::from(
        String::from_utf8_lossy(&out.stdout).trim(),
    ))
}

pub fn start_producers(
    specs: &[(Library, &str, Origin, String, u32)],
    history: &Shared,
    dir: &Path,
) -> Result<Vec<Producer>, String> {
    specs
        .iter()
        .map(|(lib, name, origin, bootstrap, rate)| {
            let spec = Spec {
                library: *lib,
                name,
                origin: *origin,
                bootstrap,
                topic: super::TOPIC,
                per_second: *rate,
            };
            Producer::start(&spec, history, dir)
        })
        .collect()
}

/// Stops producers side by side.
pub async fn stop_producers(ps: Vec<Producer>) {
    let handles: Vec<_> = ps
        .into_iter()
        .map(|p| tokio::task::spawn_blocking(move || p.stop(Duration::from_secs(40))))
        .collect();
    for h in handles {
        let _ = h.await;
    }
}

/// What [`start_producers`] starts: library, name, where it writes, its bootstrap, records per
/// second.
pub type Specs = Vec<(Library, &'static str, Origin, String, u32)>;

/// The producers on the source until the failover: one of each library, and the transactional
/// one.
pub fn source_specs(source: &str) -> Specs {
    let s = || source.to_string();
    vec![
        (Library::Java, "sj", Origin::Source, s(), 30),
        (Library::Librdkafka, "sr", Origin::Source, s(), 30),
        (Library::KafkaPython, "sp", Origin::Source, s(), 15),
        (Library::JavaTransactional, "tx", Origin::Source, s(), 20),
    ]
}

/// The local producers after the failover call, one of each library, each through another
/// instance (`client` gives an instance's client listener; `driver` takes the failover).
pub fn local_specs(driver: usize, client: impl Fn(usize) -> String) -> Specs {
    let n = super::plan::INSTANCES;
    vec![
        (
            Library::Java,
            "lj",
            Origin::Local,
            client((driver + 1) % n),
            20,
        ),
        (
            Library::Librdkafka,
            "lr",
            Origin::Local,
            client((driver + 2) % n),
            20,
        ),
        (
            Library::KafkaPython,
            "lp",
            Origin::Local,
            client(driver),
            10,
        ),
    ]
}
