//! What a switchover reads of the source under its hold (step 3): every partition's log end and
//! the transactions still open in it, from the partitions' leaders.
//!
//! The two reads of one leader are not atomic, and a transaction's coordinator writes its
//! COMMIT or ABORT markers after it answered the producer (also while the listener holds: a
//! commit sent before the hold, or one the hold lets through, ends that way). The open
//! transactions are therefore read first and the log ends after them: a transaction found
//! closed has its marker below the end read next, and one that closes in between is still
//! reported open, so the caller reads again. Read the other way round, a marker written
//! between the two reads is above the end the agent mirrors to and out of the open list: the
//! switch would leave it on the source, and the failover would abort on the destination a
//! transaction the source committed and acknowledged.
//!
//! Owns: those reads and their order. Must not touch: what the caller does with the facts
//! (waiting, refusing), the hold.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::client::{KafkaClient, LATEST};
use crate::cluster::ClusterView;

/// What a switchover reads of the source under its hold.
pub(in crate::admin) struct SourceFacts {
    /// The log end of every partition.
    pub ends: BTreeMap<(String, i32), i64>,
    /// The transactions open in them, described for the refusal.
    pub open: Vec<String>,
}

/// The two reads of one source broker, for the partitions it leads (a trait, so that the
/// order of the reads is unit-tested against a fake whose transaction commits between them).
pub(super) trait LeaderReads {
    /// The transactions open in `parts`, described for a refusal.
    async fn open_transactions(&mut self, parts: &[(String, i32)]) -> Result<Vec<String>, String>;
    /// The log end of each of `parts`.
    async fn log_ends(
        &mut self,
        parts: &[(String, i32)],
    ) -> Result<BTreeMap<(String, i32), i64>, String>;
}

/// The source's log end and open transactions of every partition, read from its leaders: per
/// leader, one DescribeProducers and then one ListOffsets request for all its partitions.
pub(super) async fn source_facts(
    source: &ClusterView,
    partitions: &[(String, i32)],
) -> Result<SourceFacts, String> {
    facts_of_cluster(source, partitions, "source").await
}

/// The same reads of the cluster `side` names in errors (a switch back reads the destination,
/// which is then where the clients write).
pub(in crate::admin) async fn facts_of_cluster(
    source: &ClusterView,
    partitions: &[(String, i32)],
    side: &'static str,
) -> Result<SourceFacts, String> {
    source
        .refresh()
        .await
        .map_err(|e| format!("the {side}'s metadata could not be read: {e}"))?;
    let by_leader = source
        .by_leader(partitions)
        .map_err(|e| format!("on the {side}: {e}"))?;
    let mut facts = SourceFacts {
        ends: BTreeMap::new(),
        open: Vec::new(),
    };
    for (addr, parts) in by_leader {
        let client = source
            .client(&addr, Duration::from_secs(5))
            .await
            .map_err(|e| format!("cannot reach {side} broker {addr}: {e}"))?;
        read_leader(&mut Leader { client, addr, side }, &parts, &mut facts).await?;
    }
    Ok(facts)
}

/// Why [`facts_once_closed`] gave up.
pub(in crate::admin) enum NotClosed {
    /// A read failed.
    Read(String),
    /// `deadline` passed: with the transactions still open at the last read (none: the read
    /// itself did not finish in time).
    Deadline(Vec<String>),
}

/// How often [`facts_once_closed`] reads again while transactions are open.
const CLOSED_EVERY: Duration = Duration::from_millis(100);

/// The facts of `cluster` (`side`, for errors) once no transaction is open in `partitions`,
/// read again every [`CLOSED_EVERY`] until `deadline`.
pub(in crate::admin) async fn facts_once_closed(
    cluster: &ClusterView,
    partitions: &[(String, i32)],
    side: &'static str,
    deadline: tokio::time::Instant,
) -> Result<SourceFacts, NotClosed> {
    let mut open = Vec::new();
    loop {
        let read = tokio::time::timeout_at(deadline, facts_of_cluster(cluster, partitions, side));
        let facts = match read.await {
            Ok(facts) => facts.map_err(NotClosed::Read)?,
            Err(_) => return Err(NotClosed::Deadline(open)),
        };
        if facts.open.is_empty() {
            return Ok(facts);
        }
        open = facts.open;
        if tokio::time::Instant::now() + CLOSED_EVERY >= deadline {
            return Err(NotClosed::Deadline(open));
        }
        tokio::time::sleep(CLOSED_EVERY).await;
    }
}

/// One leader's part of the facts, in the order the module's comment gives.
async fn read_leader(
    leader: &mut impl LeaderReads,
    parts: &[(String, i32)],
    facts: &mut SourceFacts,
) -> Result<(), String> {
    facts.open.extend(leader.open_transactions(parts).await?);
    hold_between_reads_while_the_test_says_so().await;
    facts.ends.extend(leader.log_ends(parts).await?);
    Ok(())
}

/// `MIRRORGATE_TEST_HOLD_BETWEEN_SOURCE_READS_WHILE=PATH`: while PATH exists, a switchover waits
/// between its two reads of a source broker, after creating `PATH.reached` (a test commits a
/// transaction there). Unset in production: it never waits.
async fn hold_between_reads_while_the_test_says_so() {
    static HOLD: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let hold = HOLD.get_or_init(|| {
        std::env::var_os("MIRRORGATE_TEST_HOLD_BETWEEN_SOURCE_READS_WHILE").map(Into::into)
    });
    if let Some(path) = hold.as_deref().filter(|p| p.exists()) {
        let mut reached = path.as_os_str().to_owned();
        reached.push(".reached");
        if let Err(e) = std::fs::write(&reached, b"") {
            tracing::warn!(error = %e, "test hook: cannot write {reached:?}");
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while path.exists() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A broker's connection (`side`: which cluster, for errors).
struct Leader {
    client: KafkaClient,
    addr: String,
    side: &'static str,
}

impl LeaderReads for Leader {
    async fn open_transactions(&mut self, parts: &[(String, i32)]) -> Result<Vec<String>, String> {
        use kafka_protocol::messages::describe_producers_request::TopicRequest;
        use kafka_protocol::messages::DescribeProducersRequest;
        use kafka_protocol::protocol::StrBytes;
        let (addr, side) = (&self.addr, self.side);
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in parts {
            topics.entry(t.as_str()).or_default().push(*p);
        }
        let req = DescribeProducersRequest::default().with_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    TopicRequest::default()
                        .with_name(StrBytes::from_string(t.to_string()).into())
                        .with_partition_indexes(ps.clone())
                })
                .collect(),
        );
        let resp =
            self.client.send(&req, 0).await.map_err(|e| {
                format!("the producers could not be read on {side} broker {addr}: {e}")
            })?;
        let mut open = Vec::new();
        for topic in &resp.topics {
            for part in &topic.partitions {
                let (t, p) = (topic.name.0.as_str(), part.partition_index);
                if part.error_code != 0 {
                    return Err(format!(
                        "the {side} answered DescribeProducers of {t}-{p} with error {}",
                        part.error_code
                    ));
                }
                for a in part
                    .active_producers
                    .iter()
                    .filter(|a| a.current_txn_start_offset >= 0)
                {
                    open.push(format!(
                        "{t}-{p} (producer id {}, from offset {})",
                        a.producer_id.0, a.current_txn_start_offset
                    ));
                }
            }
        }
        Ok(open)
    }

    async fn log_ends(
        &mut self,
        parts: &[(String, i32)],
    ) -> Result<BTreeMap<(String, i32), i64>, String> {
        let (addr, side) = (&self.addr, self.side);
        self.client
            .list_offsets(parts, LATEST)
            .await
            .map_err(|e| format!("the log ends could not be read on {side} broker {addr}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leader of one partition holding records 0..5 of a transaction that commits (its marker
    /// at offset 5) right after the first of the two reads, whichever it is.
    struct CommitsBetweenReads {
        reads: u32,
    }

    impl CommitsBetweenReads {
        fn committed(&self) -> bool {
            self.reads > 1
        }
    }

    impl LeaderReads for CommitsBetweenReads {
        async fn open_transactions(
            &mut self,
            parts: &[(String, i32)],
        ) -> Result<Vec<String>, String> {
            self.reads += 1;
            Ok(if self.committed() {
                Vec::new()
            } else {
                parts.iter().map(|(t, p)| format!("{t}-{p}")).collect()
            })
        }

        async fn log_ends(
            &mut self,
            parts: &[(String, i32)],
        ) -> Result<BTreeMap<(String, i32), i64>, String> {
            self.reads += 1;
            let end = if self.committed() { 6 } else { 5 };
            Ok(parts.iter().map(|k| (k.clone(), end)).collect())
        }
    }

    fn facts_of(leader: &mut CommitsBetweenReads) -> SourceFacts {
        let mut facts = SourceFacts {
            ends: BTreeMap::new(),
            open: Vec::new(),
        };
        let parts = [("t".to_string(), 0)];
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(read_leader(leader, &parts, &mut facts))
            .expect("reads");
        facts
    }

    #[test]
    fn a_commit_marker_written_between_the_two_reads_is_below_the_end_or_the_transaction_is_open() {
        let facts = facts_of(&mut CommitsBetweenReads { reads: 0 });
        let end = facts.ends[&("t".to_string(), 0)];
        assert!(
            end == 6 || !facts.open.is_empty(),
            "the facts say no transaction is open and the end is {end}: the marker at 5 would be left on the source"
        );
    }

    #[test]
    fn a_transaction_closed_before_the_reads_leaves_its_marker_below_the_end() {
        let facts = facts_of(&mut CommitsBetweenReads { reads: 1 });
        assert!(facts.open.is_empty());
        assert_eq!(facts.ends[&("t".to_string(), 0)], 6);
    }
}
