//! A switchover's catch-up with another mirroring tool (`mirroring: external`, MirrorMaker 2
//! say): the tool writes the source's records under its own producer ids and offsets, so the
//! agent's offset map has no counterpart. Under the hold the source no longer moves; the tool
//! has copied a partition to its end once the destination's last data records are the
//! source's last data records: same key, value and headers, and the same timestamp where both
//! keep the producer's (CreateTime). Up to [`TAIL_RECORDS`] records are compared, so a run of
//! identical records at the end is the only case the comparison can take for copied early.
//! A tool that copies at least once may have written some twice: the destination's tail still
//! ends with the source's.
//!
//! Owns: reading both tails and comparing them. Must not touch: the hold, the failover.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::client::KafkaClient;
use crate::cluster::ClusterView;
use crate::protocol::batch::{BatchWalker, TimestampType};
use crate::protocol::records::{self, StoredRecord};

/// How many of a partition's last data records are compared.
pub const TAIL_RECORDS: usize = 8;
/// How many fetches one tail may take, each a batch further back (control batches, small
/// batches).
const MAX_STEPS: usize = 16;
/// Bytes asked for per fetch (a broker answers at least one whole batch).
const FETCH_BYTES: i32 = 1024 * 1024;
/// Kafka's error for an offset outside the log.
const OFFSET_OUT_OF_RANGE: i16 = 1;
/// How often the destination's ends are read again while a partition is behind.
const POLL: Duration = Duration::from_millis(100);

/// A data record as the comparison sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TailRecord {
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(Bytes, Option<Bytes>)>,
    /// The producer's timestamp; `None` where the batch keeps the broker's (LogAppendTime).
    create_time: Option<i64>,
}

impl TailRecord {
    fn of(r: StoredRecord, t: TimestampType) -> TailRecord {
        TailRecord {
            key: r.key,
            value: r.value,
            headers: r.headers,
            create_time: (t == TimestampType::CreateTime).then_some(r.timestamp),
        }
    }

    fn same(&self, other: &TailRecord) -> bool {
        self.key == other.key
            && self.value == other.value
            && self.headers == other.headers
            && match (self.create_time, other.create_time) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

/// Whether the destination's tail `dest` ends with the source's tail `source` (oldest first).
fn ends_with(dest: &[TailRecord], source: &[TailRecord]) -> bool {
    dest.len() >= source.len()
        && dest[dest.len() - source.len()..]
            .iter()
            .zip(source)
            .all(|(d, s)| d.same(s))
}

/// The last data records (at most `want`, oldest first) of `topic`-`partition` before `end`,
/// read from the broker `client` is connected to, stepping back a batch at a time.
async fn tail(
    client: &mut KafkaClient,
    topic: &str,
    partition: i32,
    end: i64,
    want: usize,
) -> Result<Vec<TailRecord>, String> {
    let mut out: Vec<TailRecord> = Vec::new();
    let mut before = end;
    for _ in 0..MAX_STEPS {
        if before <= 0 || out.len() >= want {
            break;
        }
        let fetched = match client
            .fetch_partition(topic, partition, before - 1, FETCH_BYTES)
            .await
        {
            Ok(f) => f,
            // Below the log start (retention): nothing older to read.
            Err(crate::client::PartitionRequestError::Partition(e))
                if e.error_code == OFFSET_OUT_OF_RANGE =>
            {
                break
            }
            Err(e) => return Err(format!("{topic}-{partition}: {e}")),
        };
        let mut first_base = None;
        let mut found = Vec::new();
        for b in BatchWalker::fetched(&fetched.records) {
            let Ok((h, bytes)) = b else { break };
            if h.base_offset >= before {
                break;
            }
            first_base.get_or_insert(h.base_offset);
            if h.is_control() {
                continue;
            }
            let batch = Bytes::copy_from_slice(bytes);
            let recs = records::decode(&batch).map_err(|e| format!("{topic}-{partition}: {e}"))?;
            let t = h.timestamp_type();
            found.extend(
                recs.into_iter()
                    .filter(|r| r.offset < before)
                    .map(|r| TailRecord::of(r, t)),
            );
        }
        let Some(base) = first_base else { break };
        found.append(&mut out);
        out = found;
        before = base;
    }
    let skip = out.len().saturating_sub(want);
    Ok(out.split_off(skip))
}

/// Where a partition is led, and a connection to that broker kept for the round.
struct Leaders<'a> {
    cluster: &'a ClusterView,
    clients: HashMap<String, KafkaClient>,
}

impl<'a> Leaders<'a> {
    fn new(cluster: &'a ClusterView) -> Self {
        Leaders {
            cluster,
            clients: HashMap::new(),
        }
    }

    async fn client(&mut self, topic: &str, partition: i32) -> Result<&mut KafkaClient, String> {
        let leader = self
            .cluster
            .topic(topic)
            .and_then(|i| i.leaders.get(partition as usize).copied())
            .filter(|l| *l >= 0)
            .ok_or_else(|| format!("{topic}-{partition} has no leader"))?;
        let addr = self.cluster.broker_addr(leader).ok_or_else(|| {
            format!("broker {leader} (leader of {topic}-{partition}) is not known")
        })?;
        if !self.clients.contains_key(&addr) {
            let c = self
                .cluster
                .client(&addr, Duration::from_secs(5))
                .await
                .map_err(|e| format!("cannot reach broker {addr}: {e}"))?;
            self.clients.insert(addr.clone(), c);
        }
        self.clients
            .get_mut(&addr)
            .ok_or_else(|| format!("broker {addr} not connected"))
    }

    /// The log end of `topic`-`partition`.
    async fn end(&mut self, topic: &str, partition: i32) -> Result<i64, String> {
        let c = self.client(topic, partition).await?;
        let ends = c
            .list_offsets(&[(topic.to_string(), partition)], crate::client::LATEST)
            .await
            .map_err(|e| format!("{topic}-{partition}: log end not read: {e}"))?;
        ends.get(&(topic.to_string(), partition))
            .copied()
            .ok_or_else(|| format!("{topic}-{partition}: no log end in the answer"))
    }
}

/// Wait until the destination's tail of every partition of `ends` (the source's log ends
/// under the hold) ends with the source's tail, before `deadline`; the partitions still behind
/// otherwise.
pub async fn wait_copied(
    source: &ClusterView,
    destination: &ClusterView,
    ends: &BTreeMap<(String, i32), i64>,
    deadline: Instant,
) -> Result<(), String> {
    // The source does not move under the hold: its tails are read once.
    let mut wanted: BTreeMap<(String, i32), Vec<TailRecord>> = BTreeMap::new();
    let mut src = Leaders::new(source);
    for ((t, p), end) in ends {
        let c = src
            .client(t, *p)
            .await
            .map_err(|e| format!("the source: {e}"))?;
        let tail = tail(c, t, *p, *end, TAIL_RECORDS)
            .await
            .map_err(|e| format!("the source's tail of {e}"))?;
        if !tail.is_empty() {
            wanted.insert((t.clone(), *p), tail);
        }
    }
    // The destination's end at which each partition was last found behind.
    let mut looked: HashMap<(String, i32), i64> = HashMap::new();
    // The destination may move leaders meanwhile: a read that fails is tried again at the
    // next look, and named if the bound passes.
    let mut last_error: Option<String> = None;
    loop {
        if let Err(e) = destination.refresh().await {
            last_error = Some(format!("the destination's metadata could not be read: {e}"));
        }
        let mut dst = Leaders::new(destination);
        let mut behind = Vec::new();
        for ((t, p), want) in &wanted {
            let key = (t.clone(), *p);
            let have = async {
                let end = dst.end(t, *p).await?;
                if looked.get(&key) == Some(&end) {
                    return Ok((end, None));
                }
                let c = dst.client(t, *p).await?;
                let have = tail(c, t, *p, end, want.len())
                    .await
                    .map_err(|e| format!("the destination's tail of {e}"))?;
                Ok::<_, String>((end, Some(have)))
            };
            match have.await {
                Ok((_, Some(have))) if ends_with(&have, want) => {}
                Ok((end, _)) => {
                    looked.insert(key.clone(), end);
                    behind.push(key);
                }
                Err(e) => {
                    last_error = Some(e);
                    behind.push(key);
                }
            }
        }
        wanted.retain(|k, _| behind.contains(k));
        if wanted.is_empty() {
            return Ok(());
        }
        if Instant::now() + POLL >= deadline {
            let why = last_error.map_or(String::new(), |e| format!("; last error: {e}"));
            return Err(format!(
                "the mirroring tool had not copied the source's last records of {} partitions ({}){why}",
                wanted.len(),
                super::some_partitions(wanted.keys())
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: &str, ts: Option<i64>) -> TailRecord {
        TailRecord {
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Vec::new(),
            create_time: ts,
        }
    }

    #[test]
    fn a_destination_that_ends_with_the_sources_last_records_has_copied_them() {
        let source = [rec("b", Some(2)), rec("c", Some(3))];
        let dest = [rec("a", Some(1)), rec("b", Some(2)), rec("c", Some(3))];
        assert!(ends_with(&dest, &source));
    }

    #[test]
    fn records_copied_twice_at_least_once_still_end_with_the_sources() {
        let source = [rec("b", Some(2)), rec("c", Some(3))];
        let dest = [
            rec("b", Some(2)),
            rec("c", Some(3)),
            rec("b", Some(2)),
            rec("c", Some(3)),
        ];
        assert!(ends_with(&dest, &source));
    }

    #[test]
    fn a_destination_missing_the_last_record_is_behind() {
        let source = [rec("b", Some(2)), rec("c", Some(3))];
        let dest = [rec("a", Some(1)), rec("b", Some(2))];
        assert!(!ends_with(&dest, &source));
        assert!(!ends_with(&[], &source));
    }

    #[test]
    fn timestamps_compare_only_where_both_keep_the_producers() {
        let source = [rec("c", Some(3))];
        assert!(!ends_with(&[rec("c", Some(4))], &source));
        assert!(ends_with(&[rec("c", None)], &source));
    }
}
