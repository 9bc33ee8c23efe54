//! Barrier codec: value decode/encode, barrier batch detection and parsing, hiding barriers
//! in fetched records. Mode byte: 0 value, 1 batch, 2 hide over raw records, 3 hide over raw
//! records with a real barrier batch spliced in. Never panics.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::barrier::{
    encode_barrier_batch, hide_barriers, is_barrier_batch, parse_barrier, BarrierValue,
};
use mirrorgate::protocol::batch::BatchWalker;
use mirrorgate_fuzz::{fix_batch_crcs, Choices};

fn barriers(records: &[u8]) -> usize {
    BatchWalker::fetched(records)
        .map_while(Result::ok)
        .filter(|(_, b)| is_barrier_batch(b))
        .count()
}

fn check_hide(records: Bytes) {
    let before: Vec<(i64, i32)> = BatchWalker::fetched(&records)
        .map_while(Result::ok)
        .map(|(h, _)| (h.base_offset, h.last_offset_delta))
        .collect();
    let Some(new) = hide_barriers(&records) else {
        return;
    };
    // Same batches at the same offsets, fewer barriers, and nothing left to hide.
    let after: Vec<(i64, i32)> = BatchWalker::fetched(&new)
        .map_while(Result::ok)
        .map(|(h, _)| (h.base_offset, h.last_offset_delta))
        .collect();
    assert_eq!(before, after, "hiding changed the batch offsets");
    assert!(barriers(&new) < barriers(&records));
    assert!(hide_barriers(&new).is_none(), "a barrier survived hiding");
    for (_, b) in BatchWalker::fetched(&new)
        .with_crc(true)
        .map_while(Result::ok)
    {
        assert!(parse_barrier(b).is_ok());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Choices::new(data);
    let mode = c.byte();
    match mode % 4 {
        0 => {
            let bytes = c.rest();
            if let Ok(v) = BarrierValue::decode(bytes) {
                let enc = v.encode();
                assert_eq!(BarrierValue::decode(&enc).as_ref(), Ok(&v));
            }
        }
        1 => {
            let mut bytes = c.rest().to_vec();
            if mode & 4 != 0 {
                fix_batch_crcs(&mut bytes);
            }
            let is = is_barrier_batch(&bytes);
            match parse_barrier(&bytes) {
                Ok(Some(v)) => {
                    assert!(is);
                    let _ = v.encode();
                }
                Ok(None) => assert!(!is),
                Err(_) => assert!(is),
            }
        }
        2 => {
            let mut bytes = c.rest().to_vec();
            if mode & 4 != 0 {
                fix_batch_crcs(&mut bytes);
            }
            check_hide(Bytes::from(bytes));
        }
        _ => {
            let split = c.byte() as usize;
            let len = c.byte() as usize % 40;
            let rest = c.rest();
            let (name, rest) = rest.split_at(len.min(rest.len()));
            let value = BarrierValue {
                version: 1,
                mirror: String::from_utf8_lossy(name).into_owned(),
                failover_id: format!("f{split}"),
                source_cluster_id: (split % 2 == 0).then(|| "src".to_string()),
                time_ms: split as i64 * 1000,
                producers_expired: len as u32,
                last_mirrored_offset: split as i64 - 1,
            };
            let batch = encode_barrier_batch(&value, 1_700_000_000_000 + split as i64);
            assert_eq!(parse_barrier(&batch), Ok(Some(value)));
            let at = split.min(rest.len());
            let mut bytes = rest[..at].to_vec();
            bytes.extend_from_slice(&batch);
            bytes.extend_from_slice(&rest[at..]);
            if mode & 4 != 0 {
                fix_batch_crcs(&mut bytes);
            }
            check_hide(Bytes::from(bytes));
        }
    }
});
