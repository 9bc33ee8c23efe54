//! Property test: the PSM against a reference model that keeps every producer's full history
//! and recomputes each decision from it (no ring, no incremental state, 64-bit sequence math).

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::protocol::batch::BatchHeader;

const MAX: i64 = i32::MAX as i64;

#[derive(Debug, Clone, Copy)]
enum Ev {
    Data {
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        first_off: i64,
        last_off: i64,
        ts: i64,
        txn: bool,
    },
    Marker {
        epoch: i16,
        coord: i32,
        ts: i64,
    },
}

impl Ev {
    fn epoch(&self) -> i16 {
        match *self {
            Ev::Data { epoch, .. } | Ev::Marker { epoch, .. } => epoch,
        }
    }
    fn ts(&self) -> i64 {
        match *self {
            Ev::Data { ts, .. } | Ev::Marker { ts, .. } => ts,
        }
    }
}

/// Sequence after adding `delta`, modulo 2^31.
fn seq_add(seq: i32, delta: i64) -> i32 {
    ((i64::from(seq) + delta).rem_euclid(MAX + 1)) as i32
}

#[derive(Default)]
struct Model {
    hist: HashMap<i64, Vec<Ev>>,
}

impl Model {
    fn epoch(&self, pid: i64) -> Option<i16> {
        self.hist.get(&pid).and_then(|h| h.last()).map(Ev::epoch)
    }

    /// Data batches since the last epoch change, newest five (epochs only grow on this path).
    fn cached(&self, pid: i64) -> Vec<Ev> {
        let Some(h) = self.hist.get(&pid) else {
            return vec![];
        };
        let Some(cur) = self.epoch(pid) else {
            return vec![];
        };
        let start = h
            .iter()
            .rposition(|e| e.epoch() != cur)
            .map_or(0, |i| i + 1);
        let data: Vec<Ev> = h[start..]
            .iter()
            .copied()
            .filter(|e| matches!(e, Ev::Data { .. }))
            .collect();
        data[data.len().saturating_sub(5)..].to_vec()
    }

    fn open_txn(&self, pid: i64) -> Option<i64> {
        let h = self.hist.get(&pid)?;
        let after = h
            .iter()
            .rposition(|e| matches!(e, Ev::Marker { .. }))
            .map_or(0, |i| i + 1);
        h[after..].iter().find_map(|e| match *e {
            Ev::Data {
                txn: true,
                first_off,
                ..
            } => Some(first_off),
            _ => None,
        })
    }

    fn coord(&self, pid: i64) -> i32 {
        self.hist
            .get(&pid)
            .and_then(|h| {
                h.iter().rev().find_map(|e| {
                    if let Ev::Marker { coord, .. } = *e {
                        Some(coord)
                    } else {
                        None
                    }
                })
            })
            .unwrap_or(-1)
    }

    fn last_seq(&self, pid: i64) -> i32 {
        match self.cached(pid).last() {
            Some(Ev::Data { last_seq, .. }) => *last_seq,
            _ => -1,
        }
    }

    fn verdict(&self, b: &BatchHeader) -> Verdict {
        let pid = b.producer_id;
        let first = b.base_sequence;
        let last = seq_add(first, i64::from(b.last_offset_delta));
        let cur = self.epoch(pid);
        if cur == Some(b.producer_epoch) {
            for (i, e) in self.cached(pid).iter().enumerate() {
                if let Ev::Data {
                    first_seq,
                    last_seq,
                    first_off,
                    last_off,
                    ts,
                    ..
                } = *e
                {
                    if first_seq == first && last_seq == last {
                        return Verdict::Duplicate {
                            first_offset: first_off,
                            last_offset: last_off,
                            cached_index: i,
                            timestamp: ts,
                        };
                    }
                }
            }
        }
        if let Some(c) = cur {
            if b.producer_epoch < c {
                return Verdict::InvalidProducerEpoch {
                    current: c,
                    got: b.producer_epoch,
                };
            }
            if b.producer_epoch > c {
                if first != 0 {
                    return Verdict::OutOfOrderSequence {
                        expected: 0,
                        got: first,
                    };
                }
            } else {
                let l = i64::from(self.last_seq(pid));
                let ok = i64::from(first) == l + 1 || (first == 0 && l == MAX);
                if !ok {
                    return Verdict::OutOfOrderSequence {
                        expected: seq_add(l as i32, 1),
                        got: first,
                    };
                }
            }
        }
        if self.open_txn(pid).is_some() && !b.is_transactional() {
            return Verdict::InvalidTxnState(TxnStateReason::NonTransactionalInOpenTxn);
        }
        Verdict::Accept {
            epoch_bump: cur.is_some_and(|c| c != b.producer_epoch),
        }
    }

    fn marker(
        &self,
        pid: i64,
        epoch: i16,
        coord: i32,
        off: i64,
        abort: bool,
    ) -> Result<Option<CompletedTxn>, Verdict> {
        if let Some(c) = self.epoch(pid) {
            if epoch < c {
                return Err(Verdict::InvalidProducerEpoch {
                    current: c,
                    got: epoch,
                });
            }
            if coord < self.coord(pid) {
                return Err(Verdict::CoordinatorFenced {
                    current: self.coord(pid),
                    got: coord,
                });
            }
        }
        Ok(self.open_txn(pid).map(|first_offset| CompletedTxn {
            producer_id: pid,
            first_offset,
            last_offset: off,
            aborted: abort,
        }))
    }

    fn expire(&mut self, now: i64, exp: i64) -> usize {
        let dead: Vec<i64> = self
            .hist
            .iter()
            .filter(|(pid, h)| {
                self.open_txn(**pid).is_none() && now - h.last().map_or(-1, Ev::ts) >= exp
            })
            .map(|(p, _)| *p)
            .collect();
        for p in &dead {
            self.hist.remove(p);
        }
        dead.len()
    }
}

fn header(pid: i64, epoch: i16, seq: i32, count: i32, ts: i64, txn: bool) -> BatchHeader {
    BatchHeader {
        base_offset: 0,
        batch_length: 49,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: if txn { 0x10 } else { 0 },
        last_offset_delta: count - 1,
        base_timestamp: ts,
        max_timestamp: ts,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        record_count: count,
    }
}

type Op = (u8, u8, u8, u8, u8, bool);

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut psm = PartitionPsm::new();
    let mut model = Model::default();
    let mut off = 0i64;
    let mut clock = 1_000_000i64;
    let npids = 2 + (ops.first().map_or(0, |o| o.1) % 3) as i64;
    for &(kind, p, a, b, c, txn) in ops {
        let pid = 100 + i64::from(p) % npids;
        clock += i64::from(a % 3) * 700;
        let cur = model.epoch(pid);
        let epoch = match a % 4 {
            0 => cur.unwrap_or(0),
            1 => cur.map_or(0, |e| e + 1),
            2 => cur.map_or(0, |e| (e - 1).max(0)),
            _ => i16::from(c % 3),
        };
        match kind % 10 {
            0..=7 => {
                let mut count = 1 + i32::from(c % 4);
                let next = seq_add(model.last_seq(pid), 1);
                let seq = match b % 8 {
                    1 => 0,
                    2 | 3 => {
                        let data: Vec<Ev> = model.hist.get(&pid).map_or(vec![], |h| {
                            h.iter()
                                .copied()
                                .filter(|e| matches!(e, Ev::Data { .. }))
                                .collect()
                        });
                        let back = if b % 8 == 2 {
                            1 + usize::from(c % 5)
                        } else {
                            6 + usize::from(c % 3)
                        };
                        match data.len().checked_sub(back).map(|i| data[i]) {
                            Some(Ev::Data {
                                first_seq,
                                first_off,
                                last_off,
                                ..
                            }) => {
                                count = (last_off - first_off + 1) as i32;
                                first_seq
                            }
                            _ => next,
                        }
                    }
                    4 => seq_add(next, 1),
                    5 => i32::MAX - i32::from(c % 4),
                    6 => i32::from(c) * 1000,
                    _ => next,
                };
                let h = header(pid, epoch, seq, count, clock, txn);
                let want = model.verdict(&h);
                let got = psm.classify(&h);
                prop_assert_eq!(got, want, "batch {:?}", h);
                match psm.append(&h, off) {
                    Ok(app) => {
                        let accepted = matches!(want, Verdict::Accept { .. });
                        prop_assert!(accepted, "model rejected {:?}", want);
                        model.hist.entry(pid).or_default().push(Ev::Data {
                            epoch,
                            first_seq: seq,
                            last_seq: seq_add(seq, i64::from(count - 1)),
                            first_off: off,
                            last_off: app.last_offset,
                            ts: clock,
                            txn,
                        });
                        off = app.last_offset + 1;
                    }
                    Err(v) => prop_assert_eq!(v, want),
                }
            }
            8 => {
                let coord = (model.coord(pid) + i32::from(c % 3) - 1).max(0);
                let want = model.marker(pid, epoch, coord, off, txn);
                let marker = if txn { Marker::Abort } else { Marker::Commit };
                let got = psm.apply_control(pid, epoch, marker, coord, off, clock);
                prop_assert_eq!(got, want);
                if got.is_ok() {
                    model.hist.entry(pid).or_default().push(Ev::Marker {
                        epoch,
                        coord,
                        ts: clock,
                    });
                    off += 1;
                }
            }
            _ => {
                let exp = 700 * (1 + i64::from(c % 5));
                prop_assert_eq!(psm.expire(clock, exp), model.expire(clock, exp));
            }
        }
    }
    prop_assert_eq!(psm.len(), model.hist.len());
    for pid in model.hist.keys() {
        let e = psm
            .get(*pid)
            .ok_or_else(|| TestCaseError::fail(format!("pid {pid} missing")))?;
        prop_assert_eq!(Some(e.epoch()), model.epoch(*pid));
        prop_assert_eq!(e.coordinator_epoch(), model.coord(*pid));
        prop_assert_eq!(e.current_txn_first_offset(), model.open_txn(*pid));
        prop_assert_eq!(
            e.last_timestamp(),
            model.hist[pid].last().map_or(-1, Ev::ts)
        );
        let ours: Vec<(i32, i32, i64, i64, i64)> = e
            .batches()
            .map(|b| {
                (
                    b.first_seq(),
                    b.last_seq,
                    b.first_offset(),
                    b.last_offset,
                    b.timestamp,
                )
            })
            .collect();
        let theirs: Vec<(i32, i32, i64, i64, i64)> = model
            .cached(*pid)
            .iter()
            .filter_map(|ev| match *ev {
                Ev::Data {
                    first_seq,
                    last_seq,
                    first_off,
                    last_off,
                    ts,
                    ..
                } => Some((first_seq, last_seq, first_off, last_off, ts)),
                Ev::Marker { .. } => None,
            })
            .collect();
        prop_assert_eq!(ours, theirs, "pid {}", pid);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn psm_matches_full_history_reference_model(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>(), any::<bool>()), 1..120)
    ) {
        run(&ops)?;
    }
}

/// A deterministic walk through wrap-around, retries and markers, so the interesting paths are
/// exercised even if proptest's shrinking or seeds change.
#[test]
fn model_agrees_on_a_fixed_script() {
    let mut ops = Vec::new();
    for i in 0..200u8 {
        ops.push((
            i % 10,
            i % 3,
            i.wrapping_mul(7),
            i.wrapping_mul(13),
            i.wrapping_mul(29),
            i % 4 == 0,
        ));
    }
    run(&ops).unwrap();
}
