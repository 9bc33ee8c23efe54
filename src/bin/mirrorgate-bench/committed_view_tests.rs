use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::{visible_records, Aborted};

fn record(pid: i64, offset: i64, txn: bool, control: bool, key: &[u8], value: &[u8]) -> Record {
    Record {
        transactional: txn,
        control,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: pid,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: if control { -1 } else { offset as i32 },
        timestamp: 1_000,
        key: Some(Bytes::copy_from_slice(key)),
        value: Some(Bytes::copy_from_slice(value)),
        headers: Default::default(),
    }
}

/// A log of batches, each one record at consecutive offsets from 0.
struct Log(BytesMut, i64);

impl Log {
    fn new() -> Log {
        Log(BytesMut::new(), 0)
    }
    fn push(&mut self, pid: i64, txn: bool, control: bool, key: &[u8], value: &[u8]) -> i64 {
        let at = self.1;
        let rec = record(pid, at, txn, control, key, value);
        let opts = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut self.0, std::iter::once(&rec), &opts)
            .expect("encodable batch");
        self.1 += 1;
        at
    }
    fn data(&mut self, pid: i64, txn: bool, value: &str) -> i64 {
        self.push(pid, txn, false, b"k", value.as_bytes())
    }
    /// End-transaction marker: key (version 0, type 0 abort / 1 commit), value (version 0,
    /// coordinator epoch 0).
    fn marker(&mut self, pid: i64, commit: bool) -> i64 {
        self.push(
            pid,
            true,
            true,
            &[0, 0, 0, commit as u8],
            &[0, 0, 0, 0, 0, 0],
        )
    }
    fn visible(&self, aborted: &[Aborted]) -> (Vec<String>, Option<i64>) {
        let mut out = Vec::new();
        let next = visible_records(&self.0.clone().freeze(), aborted, &mut |r| {
            out.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        })
        .expect("well-formed log");
        (out, next)
    }
}

#[test]
fn committed_transactions_and_plain_records_are_visible_in_order() {
    let mut log = Log::new();
    log.data(7, true, "t1");
    log.data(-1, false, "plain");
    log.data(7, true, "t2");
    log.marker(7, true);
    assert_eq!(log.visible(&[]).0, ["t1", "plain", "t2"]);
}

#[test]
fn an_aborted_transaction_is_hidden_from_its_first_offset_to_its_abort_marker() {
    let mut log = Log::new();
    log.data(7, true, "before");
    log.marker(7, true);
    let first = log.data(7, true, "aborted-1");
    log.data(7, true, "aborted-2");
    log.marker(7, false);
    log.data(7, true, "after");
    log.marker(7, true);
    let aborted = [Aborted {
        producer_id: 7,
        first_offset: first,
    }];
    assert_eq!(log.visible(&aborted).0, ["before", "after"]);
}

#[test]
fn an_aborted_transaction_hides_only_its_own_producers_records() {
    let mut log = Log::new();
    let first = log.data(7, true, "aborted");
    log.data(8, true, "other");
    log.marker(7, false);
    log.marker(8, true);
    let aborted = [Aborted {
        producer_id: 7,
        first_offset: first,
    }];
    assert_eq!(log.visible(&aborted).0, ["other"]);
}

#[test]
fn control_batches_are_never_visible_and_the_next_offset_follows_the_last_batch() {
    let mut log = Log::new();
    log.data(7, true, "x");
    let end = log.marker(7, true);
    assert_eq!(log.visible(&[]), (vec!["x".to_string()], Some(end + 1)));
}

#[test]
fn a_partial_trailing_batch_is_left_for_the_next_fetch() {
    let mut log = Log::new();
    let first = log.data(-1, false, "whole");
    let whole = log.0.len();
    log.data(-1, false, "cut");
    let cut = Bytes::copy_from_slice(&log.0[..whole + 20]);
    let mut out = 0;
    let next = visible_records(&cut, &[], &mut |_| out += 1).expect("walks the whole batch");
    assert_eq!((out, next), (1, Some(first + 1)));
}
