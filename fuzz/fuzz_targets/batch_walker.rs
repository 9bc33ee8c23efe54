//! Record batch walker (strict client mode with and without CRC, tolerant fetched mode),
//! `single_client_batch` and `control_marker`: never panic; yielded batches tile the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::batch::{
    control_marker, single_client_batch, BatchWalker, BATCH_HEADER_SIZE,
};
use mirrorgate_fuzz::fix_batch_crcs;

fn walk(bytes: &[u8], mut walker: BatchWalker<'_>, crc: bool) {
    let mut pos = 0usize;
    for item in walker.by_ref() {
        let Ok((header, batch)) = item else { break };
        assert!(batch.len() >= BATCH_HEADER_SIZE);
        assert_eq!(batch.len(), header.total_size());
        assert_eq!(batch, &bytes[pos..pos + batch.len()]);
        if crc {
            assert_eq!(crc32c::crc32c(&batch[21..]), header.crc);
        }
        pos += batch.len();
        if header.is_control() {
            let _ = control_marker(&header, batch);
        }
        let _ = header.last_sequence();
        let _ = header.last_offset();
        let _ = header.compression();
        let _ = header.timestamp_type();
    }
    assert_eq!(walker.position(), pos);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 != 0 {
        fix_batch_crcs(&mut bytes);
    }
    let bytes = &bytes[..];
    walk(bytes, BatchWalker::new(bytes, false), false);
    walk(bytes, BatchWalker::new(bytes, true), true);
    walk(bytes, BatchWalker::fetched(bytes), false);
    walk(bytes, BatchWalker::fetched(bytes).with_crc(true), true);
    for crc in [false, true] {
        if let Ok((header, batch)) = single_client_batch(bytes, crc) {
            assert_eq!(batch.len(), bytes.len());
            assert_eq!(header.base_offset, 0);
            if header.is_control() {
                let _ = control_marker(&header, batch);
            }
        }
    }
});
