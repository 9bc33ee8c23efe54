//! Produce request walker, the gateway's one-walk `ProduceView` and the acks peek over any body
//! and version: never panic, every partition's records slice lies inside the body, the walker
//! agrees with `peek_acks`, and the view holds the walker's partitions (up to its first error)
//! with the batch facts `single_client_batch` gives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::batch::single_client_batch;
use mirrorgate::protocol::produce::{peek_acks, BatchQuestions, ProduceView, ProduceWalker};

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

    let crc = v & 0x80 != 0;
    let view = ProduceView::build(version, body, &mut |_| (None, true), &|_| BatchQuestions {
        single: true,
        verify_crc: crc,
        barriers: true,
    })
    .expect("the walker was built");
    let walked: Vec<_> = ProduceWalker::new(version, body)
        .expect("built above")
        .map_while(Result::ok)
        .collect();
    assert_eq!(view.partitions.len(), walked.len());
    for (p, w) in view.partitions.iter().zip(&walked) {
        assert_eq!(view.topic_of(p).topic, w.topic);
        assert_eq!((p.partition, p.records), (w.partition, w.records));
        match w.records {
            Some(records) => {
                let single = single_client_batch(records, crc).map(|(h, _)| h);
                assert_eq!(p.batches.single.as_ref(), Some(&single));
            }
            None => assert_eq!(p.batches.single, None),
        }
    }
});
