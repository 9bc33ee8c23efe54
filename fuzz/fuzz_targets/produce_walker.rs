//! Produce request walker and acks peek over any body and version: never panic, every
//! partition's records slice lies inside the body, and the walker agrees with `peek_acks`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::produce::{peek_acks, ProduceWalker};

fuzz_target!(|data: &[u8]| {
    let Some((&v, body)) = data.split_first() else {
        return;
    };
    // Mostly 3..=13, sometimes outside the supported range.
    let version = (v % 16) as i16;
    let acks = peek_acks(version, body);
    let Ok(walker) = ProduceWalker::new(version, body) else {
        return;
    };
    assert_eq!(
        acks.ok(),
        Some(walker.acks()),
        "walker and peek_acks disagree"
    );
    let mut last_end = 0usize;
    let mut walker = walker;
    for item in walker.by_ref() {
        let Ok(p) = item else { break };
        let r = p.records_range.clone();
        assert!(r.start <= r.end && r.end <= body.len());
        assert!(r.start >= last_end, "partitions out of order");
        last_end = r.end;
        match p.records {
            Some(records) => assert_eq!(records, &body[r]),
            None => assert!(r.is_empty()),
        }
    }
    assert!(walker.position() <= body.len());
});
