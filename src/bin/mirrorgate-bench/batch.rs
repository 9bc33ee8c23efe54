//! Record batches the benchmarks produce themselves (the load and latency drivers).
//!
//! Owns: building one uncompressed v2 batch. Must not touch: requests or connections.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// The producer fields of an idempotent batch: producer id, epoch, base sequence.
#[derive(Debug, Clone, Copy)]
pub struct Producer {
    pub id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

/// One batch of `n` records with `value`, keys from `key(i)`, stamped now; idempotent when
/// `producer` is given (sequences from its base), otherwise without a producer id.
pub fn encode(
    n: usize,
    value: &Bytes,
    key: impl Fn(usize) -> Option<Bytes>,
    producer: Option<Producer>,
) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.map_or(-1, |p| p.id),
            producer_epoch: producer.map_or(-1, |p| p.epoch),
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // Without a producer id the base sequence is -1. The encoder starts a new batch
            // whenever offset - sequence changes, so the sequence follows the offset.
            sequence: match producer {
                Some(p) => p.base_sequence.wrapping_add(i as i32),
                None => i as i32 - 1,
            },
            timestamp: now,
            key: key(i),
            value: Some(value.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::with_capacity(n * (value.len() + 32) + 64);
    let opts = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    // Encoding plain records without compression does not fail.
    let _ = RecordBatchEncoder::encode(&mut buf, recs.iter(), &opts);
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mirrorgate::protocol::batch::BatchWalker;

    #[test]
    fn an_idempotent_batch_carries_the_producer_and_its_sequence() {
        let p = Producer {
            id: 42,
            epoch: 3,
            base_sequence: 100,
        };
        let b = encode(4, &Bytes::from_static(b"v"), |_| None, Some(p));
        let (h, _) = BatchWalker::new(&b, true)
            .next()
            .expect("one batch")
            .expect("well formed, CRC included");
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (42, 3, 100)
        );
        assert_eq!((h.last_offset_delta, h.record_count), (3, 4));
    }

    #[test]
    fn a_batch_without_producer_is_one_batch_with_keys() {
        let b = encode(
            5,
            &Bytes::from_static(b"value"),
            |i| Some(Bytes::from(format!("k{i}"))),
            None,
        );
        let batches: Vec<_> = BatchWalker::new(&b, true).collect();
        assert_eq!(batches.len(), 1);
        let (h, _) = batches[0].as_ref().expect("well formed");
        assert_eq!(
            (h.producer_id, h.base_sequence, h.record_count),
            (-1, -1, 5)
        );
    }
}
