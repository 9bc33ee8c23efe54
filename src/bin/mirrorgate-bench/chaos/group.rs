//! The application's consumer group of the chaos run: its members (the Java consumer of
//! `crate::group_member`, group `chaos-app`), how long the run waits for it at the end, and the
//! file of what it read. The checker's rule for it is in `check.rs` ("groups never skip").
//!
//! Owns: the members' arguments and `reads.jsonl`. Must not touch: the rules, the gateways.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::check::Entry;
use super::TOPIC;
use crate::group_member::{Member, MemberArgs, Read};

/// The application's consumer group.
const GROUP: &str = "chaos-app";

/// The application's consumer group member on `bootstrap` (`side` names its log): it reads the
/// topic from the group's committed offsets (else the earliest) and commits every 500 ms until
/// it is killed.
pub fn start_member(bootstrap: &str, dir: &Path, side: &str) -> Result<Member, String> {
    Member::start(
        &MemberArgs {
            mode: "follow",
            bootstrap,
            topic: TOPIC,
            group: GROUP,
            commit_ms: 500,
            timeout: Duration::from_secs(3_600),
        },
        &dir.join(format!("group-{side}.log")),
    )
}

/// Waits until `member` has read each partition up to the last data record of `log`: whether
/// it got there within a minute.
pub async fn wait_caught_up(member: &Member, log: &[Vec<Entry>]) -> bool {
    let last: Vec<Option<i64>> = log
        .iter()
        .map(|p| {
            p.iter()
                .filter_map(|e| match e {
                    Entry::Data { offset, .. } => Some(*offset),
                    _ => None,
                })
                .max()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let there = member.with(|o| {
            last.iter().enumerate().all(|(p, end)| {
                end.is_none_or(|end| {
                    o.reads
                        .iter()
                        .any(|r| r.partition == p as i32 && r.offset >= end)
                })
            })
        });
        if there {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "chaos: the application's group did not reach the end of the destination's log within 60 s"
    );
    false
}

/// `reads.jsonl`: every record the application's group read, side by side.
pub fn write_reads(dir: &Path, source: &[Read], destination: &[Read]) -> Result<(), String> {
    let lines: Vec<String> = [("source", source), ("destination", destination)]
        .iter()
        .flat_map(|(side, reads)| {
            reads.iter().map(move |r| {
                json!({"side": side, "p": r.partition, "o": r.offset, "k": r.key, "t": r.at_ms})
                    .to_string()
            })
        })
        .collect();
    std::fs::write(dir.join("reads.jsonl"), lines.join("\n") + "\n").map_err(|e| e.to_string())
}
