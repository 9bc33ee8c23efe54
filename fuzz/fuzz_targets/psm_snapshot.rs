//! PSM snapshot decoder: never panics; a decoded snapshot re-encodes to the same size and
//! decodes again to the same producers and offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mirrorgate::psm::PartitionPsm;
use mirrorgate_fuzz::fix_snapshot_header;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 != 0 {
        // Repair magic, version, length and CRC so the payload decoder is reached.
        fix_snapshot_header(&mut bytes);
    }
    let Ok((psm, last)) = PartitionPsm::decode_snapshot(&bytes) else {
        return;
    };
    let again = psm.encode_snapshot(last);
    assert_eq!(
        again.len(),
        bytes.len(),
        "re-encoded snapshot has another size"
    );
    let (back, last2) = PartitionPsm::decode_snapshot(&again).expect("re-encoded snapshot decodes");
    assert_eq!(last, last2);
    assert_eq!(back.len(), psm.len());
    for e in psm.iter() {
        let b = back.get(e.producer_id()).expect("producer kept");
        assert_eq!(
            b.batches().collect::<Vec<_>>(),
            e.batches().collect::<Vec<_>>()
        );
    }
});
