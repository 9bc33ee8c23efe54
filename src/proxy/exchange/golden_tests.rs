//! The per-API exchanges give the frames the gateway's handling gave before them: Produce on both
//! listeners (mirror partitions, plain ones, unknown topic ids, barriers, garbage records, acks 0,
//! 1 and all, broker errors, KIP-951 node endpoints, unknown tagged fields) and rewritten Metadata
//! responses. The cases were recorded once from that earlier handling (`golden/*.jsonl`: the
//! frames in, the frame forwarded, answered or written to the client, whether the request was
//! refused, and the counters it moved) and are replayed here through today's exchanges, so the
//! earlier code no longer needs to exist beside the live one.

use bytes::Bytes;
use serde::Deserialize;

use super::tests::{counters, fixture, handle, unhex};

const PRODUCE: &str = include_str!("golden/produce.jsonl");
const METADATA: &str = include_str!("golden/metadata.jsonl");

/// One recorded case.
#[derive(Deserialize)]
struct Case {
    listener: String,
    request: String,
    response: String,
    forwarded: Option<String>,
    answered: Option<String>,
    written: Option<String>,
    error: Option<String>,
    counters: Vec<String>,
}

fn cases(text: &str) -> Vec<Case> {
    text.lines()
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("golden line {}: {e}", n + 1))
        })
        .collect()
}

/// Replay every case of `text` through the exchanges; the differences, one line per case.
fn replay(text: &str) -> Vec<String> {
    let mut diffs = Vec::new();
    for (n, c) in cases(text).iter().enumerate() {
        let f = fixture();
        let ctx = match c.listener.as_str() {
            "mirror" => f.mirror.clone(),
            _ => f.client.clone(),
        };
        let now = handle(&ctx, unhex(&c.request), unhex(&c.response));
        let frame = |h: &Option<String>| h.as_deref().map(unhex);
        let mut differs = Vec::new();
        if now.forwarded != frame(&c.forwarded) {
            differs.push("forwarded frame");
        }
        if now.answered != frame(&c.answered) {
            differs.push("answered frame");
        }
        if now.response != frame(&c.written) {
            differs.push("frame written to the client");
        }
        if now.error.is_some() != c.error.is_some() {
            differs.push("refusal");
        }
        if counters(&ctx) != c.counters {
            differs.push("counters");
        }
        if !differs.is_empty() {
            diffs.push(format!(
                "case {} ({} listener): {} differ (now: error {:?}; recorded: {:?})",
                n + 1,
                c.listener,
                differs.join(", "),
                now.error,
                c.error
            ));
        }
    }
    diffs
}

#[test]
fn produce_frames_are_the_golden_frames_recorded_before_the_exchanges() {
    let diffs = replay(PRODUCE);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn rewritten_metadata_responses_are_the_golden_frames_recorded_before_the_exchanges() {
    let diffs = replay(METADATA);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn the_golden_produce_cases_cover_forwarding_local_answers_refusals_and_both_listeners() {
    let all = cases(PRODUCE);
    let count = |f: &dyn Fn(&Case) -> bool| all.iter().filter(|c| f(c)).count();
    assert!(count(&|c| c.listener == "mirror") > 0, "mirror listener");
    assert!(count(&|c| c.listener == "client") > 0, "client listener");
    assert!(
        count(&|c| c.written.is_some()) > 0,
        "forwarded and answered"
    );
    assert!(
        count(&|c| c.answered.is_some()) > 0,
        "answered by the gateway"
    );
    assert!(
        count(&|c| c.forwarded.is_some() && c.written.is_none() && c.error.is_none()) > 0,
        "acks=0"
    );
    assert!(count(&|c| c.error.is_some()) > 0, "refused");
    assert!(count(&|c| !c.counters.is_empty()) > 0, "counters moved");
    let metadata = cases(METADATA);
    assert!(
        metadata
            .iter()
            .any(|c| c.written.as_ref() != Some(&c.response)),
        "a rewritten Metadata response"
    );
    // Every frame decodes as hex of a whole frame (a length prefix that matches).
    for c in all.iter().chain(&metadata) {
        let req: Bytes = unhex(&c.request);
        let len = i32::from_be_bytes([req[0], req[1], req[2], req[3]]) as usize;
        assert_eq!(len + 4, req.len());
    }
}
