use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::*;
use crate::protocol::batch::BatchHeader;
use crate::protocol::txn_marker::one_record_batch_for_tests;

/// A batch of `n` records at `offset` by producer `pid` (-1: none).
pub(crate) fn data(offset: i64, n: i64, pid: i64, transactional: bool) -> Bytes {
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: if pid < 0 { -1 } else { 0 },
            timestamp_type: TimestampType::Creation,
            offset: offset + i,
            sequence: if pid < 0 {
                i as i32 - 1
            } else {
                (offset + i) as i32
            },
            timestamp: 1_000 + offset + i,
            key: Some(Bytes::from(format!("k{}", offset + i))),
            value: Some(Bytes::from(format!("v{}", offset + i))),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encodes");
    out.freeze()
}

/// A COMMIT (or ABORT) marker of `pid` at `offset`.
pub(crate) fn marker(offset: i64, pid: i64, commit: bool) -> Bytes {
    one_record_batch_for_tests(offset, pid, Some(i16::from(commit)), true)
}

fn scan(from: i64, end: i64, batches: &[Bytes]) -> Tail {
    scan_reaching_back(from, end, &[], batches)
}

#[test]
fn plain_committed_aborted_and_open_records_are_told_apart() {
    let t = scan(
        0,
        14,
        &[
            data(0, 3, -1, false),
            data(3, 2, 7, true),
            data(5, 2, 8, true),
            marker(7, 7, true),
            marker(8, 8, false),
            data(9, 4, 9, true),
            data(13, 1, 5, false),
        ],
    );
    let s = &t.summary;
    assert_eq!(
        (
            s.records,
            s.non_transactional,
            s.committed,
            s.aborted,
            s.open
        ),
        (12, 4, 2, 2, 4)
    );
    assert_eq!(s.recoverable_records, 6);
    assert_eq!(s.producer_ids, vec![5, 7, 8, 9]);
    assert_eq!(t.excluded, [5, 9].into_iter().collect());
    assert_eq!(s.first_timestamp_ms, Some(1_000));
    assert_eq!(s.last_timestamp_ms, Some(1_013));
}

#[test]
fn a_batch_before_the_tail_is_not_counted_and_one_across_its_start_only_from_it() {
    let t = scan(
        4,
        8,
        &[
            data(0, 2, -1, false),
            data(2, 4, -1, false),
            data(6, 2, -1, false),
        ],
    );
    assert_eq!(t.summary.records, 4, "offsets 4, 5, 6, 7");
}

#[test]
fn a_marker_for_a_transaction_begun_before_the_tail_changes_nothing() {
    let t = scan(2, 3, &[marker(2, 7, false)]);
    assert_eq!((t.summary.records, t.summary.aborted), (0, 0));
    assert!(t.excluded.is_empty());
}

fn scan_reaching_back(from: i64, end: i64, aborted: &[(i64, i64)], batches: &[Bytes]) -> Tail {
    let mut s = TailScan::new("t", 0, from, 0, end).reaching_back(aborted.iter().copied());
    for b in batches {
        let h = BatchHeader::parse(b).expect("header");
        s.push(&h, b).expect("readable");
    }
    s.finish()
}

#[test]
fn a_transaction_the_failover_aborted_reaches_back_before_the_tail() {
    let batches = [
        data(0, 2, -1, false),
        data(2, 3, 7, true),
        data(5, 2, 8, true),
        data(7, 2, -1, false),
        marker(9, 7, true),
    ];
    let t = scan_reaching_back(7, 10, &[(7, 2)], &batches);
    let s = &t.summary;
    assert_eq!(
        (
            s.records,
            s.committed,
            s.non_transactional,
            s.recoverable_records
        ),
        (5, 3, 2, 5),
        "producer 7's 3 records and the 2 plain ones; not producer 8's, nor the plain ones before"
    );
    assert_eq!(s.reach_back_offset, Some(2));
    assert_eq!(t.reached, [2].into_iter().collect());
    assert_eq!(t.start(), 2);
    assert!(t.holds(2, 3) && !t.holds(5, 5) && t.holds(7, 7));
}

#[test]
fn a_reached_back_transaction_the_source_aborted_or_left_open_is_not_recoverable() {
    let aborted = scan_reaching_back(5, 6, &[(7, 2)], &[data(2, 3, 7, true), marker(5, 7, false)]);
    assert_eq!(
        (aborted.summary.aborted, aborted.summary.recoverable_records),
        (3, 0)
    );
    assert!(aborted.excluded.contains(&2));
    let open = scan_reaching_back(5, 5, &[(7, 2)], &[data(2, 3, 7, true)]);
    assert_eq!(
        (open.summary.open, open.summary.recoverable_records),
        (3, 0)
    );
}

#[test]
fn without_an_aborted_transaction_nothing_reaches_back() {
    let t = scan_reaching_back(5, 6, &[(7, 5)], &[data(2, 3, 7, true), marker(5, 7, true)]);
    assert_eq!((t.summary.records, t.summary.reach_back_offset), (0, None));
    assert_eq!(t.start(), 5);
}

#[test]
fn offsets_below_the_log_start_are_counted_as_removed() {
    let s = TailScan::new("t", 0, 10, 25, 40);
    assert_eq!(s.start(), 25);
    assert_eq!(s.finish().summary.offsets_removed, 15);
}

#[test]
fn provenance_headers_come_after_the_records_own_and_are_read_back() {
    let r = crate::protocol::records::decode(&data(40, 1, 3, false)).unwrap()[0].clone();
    let mut own = r.clone();
    own.headers
        .push((Bytes::from_static(b"mirrorgate.failover.id"), None));
    let o = Origin {
        failover_id: "f-1",
        topic: "orders",
        partition: 2,
        producer_id: 3,
        producer_epoch: 0,
    };
    let q = with_provenance(&own, o);
    assert_eq!(q.headers.len(), 1 + PROVENANCE.len());
    let p = provenance_of(&q).expect("provenance");
    assert_eq!(
        (
            p.failover_id.as_str(),
            p.topic.as_str(),
            p.partition,
            p.offset
        ),
        ("f-1", "orders", 2, 40)
    );
    assert_eq!(
        p.original, own,
        "the record's own headers kept, even one named like ours"
    );
    assert!(provenance_of(&own).is_none());
}

#[test]
fn the_digest_depends_on_order_and_content() {
    let recs = crate::protocol::records::decode(&data(0, 2, -1, false)).unwrap();
    let (mut a, mut b) = (Digest::default(), Digest::default());
    a.add(&recs[0]);
    a.add(&recs[1]);
    b.add(&recs[1]);
    b.add(&recs[0]);
    assert_eq!(a.records, 2);
    assert_ne!(a, b);
}
