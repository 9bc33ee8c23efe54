//! The clients of `consumer-failover`: the producer that writes the source topic under load (this
//! process, records keyed `r<N>`), and the consumer group members, Java consumers run through
//! `integration/rig java` (integration/clients/java/FollowGroup.java) whose output lines are
//! collected as they come.
//!
//! Owns: the Produce requests to the source and what was acknowledged; the Java child processes,
//! their stdin, stdout and log. Must not touch: the gateway, the rig's clusters, the figures.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use mirrorgate::client::KafkaClient;

use super::figures::Read;
use crate::process::die_with_parent;
use crate::repo;

/// Time between two Produce requests (one batch per partition each).
const TICK: Duration = Duration::from_millis(20);
/// Bytes of each record's value.
const VALUE_BYTES: usize = 100;

/// What the producer wrote and the source acknowledged.
#[derive(Debug, Default)]
pub struct Produced {
    /// `(partition, key)` of every acknowledged record.
    pub acked: Vec<(i32, String)>,
    /// Produce requests that failed (the last ones: the source was killed).
    pub errors: u64,
    pub last_error: Option<String>,
}

fn produce_request(
    topic: &str,
    partitions: i32,
    per_partition: usize,
    next: u64,
) -> ProduceRequest {
    let value = Bytes::from(vec![b'v'; VALUE_BYTES]);
    let data = (0..partitions)
        .map(|p| {
            let first = next + (p as u64) * per_partition as u64;
            let batch = crate::batch::encode(
                per_partition,
                &value,
                |i| Some(Bytes::from(format!("r{}", first + i as u64))),
                None,
            );
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(batch))
        })
        .collect();
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(data)])
}

/// Writes `per_partition` records to every partition of `topic` on `source` (a one-broker cluster:
/// its broker leads every partition) each [`TICK`] until `stop`; after a failed request it
/// reconnects, and once `stop` is set it ends.
pub async fn produce(
    source: String,
    topic: String,
    partitions: i32,
    per_partition: usize,
    stop: Arc<AtomicBool>,
) -> Produced {
    let mut out = Produced::default();
    let mut next = 0u64;
    let mut client: Option<KafkaClient> = None;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let c = match client.as_mut() {
            Some(c) => c,
            None => match KafkaClient::connect(&source, Duration::from_secs(2)).await {
                Ok(c) => client.insert(c),
                Err(e) => {
                    out.errors += 1;
                    out.last_error = Some(e.to_string());
                    continue;
                }
            },
        };
        let req = produce_request(&topic, partitions, per_partition, next);
        let sent = next;
        next += partitions as u64 * per_partition as u64;
        match c.send(&req, 9).await {
            Ok(resp) => {
                for pr in resp
                    .responses
                    .iter()
                    .flat_map(|t| t.partition_responses.iter())
                {
                    if pr.error_code != 0 {
                        out.errors += 1;
                        out.last_error =
                            Some(format!("partition {}: error {}", pr.index, pr.error_code));
                        continue;
                    }
                    let first = sent + (pr.index as u64) * per_partition as u64;
                    out.acked.extend(
                        (0..per_partition as u64).map(|i| (pr.index, format!("r{}", first + i))),
                    );
                }
            }
            Err(e) => {
                out.errors += 1;
                out.last_error = Some(e.to_string());
                client = None;
            }
        }
    }
    out
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

    #[test]
    fn each_partition_of_a_produce_request_gets_its_own_run_of_keys() {
        let req = produce_request("t", 2, 3, 10);
        let keys: Vec<Vec<String>> = req.topic_data[0]
            .partition_data
            .iter()
            .map(|p| {
                let mut b = p.records.clone().expect("records");
                kafka_protocol::records::RecordBatchDecoder::decode(&mut b)
                    .expect("decodes")
                    .records
                    .iter()
                    .map(|r| {
                        String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned()
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            keys,
            vec![vec!["r10", "r11", "r12"], vec!["r13", "r14", "r15"]]
        );
    }
}
