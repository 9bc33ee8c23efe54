//! The entry rules of the guarded APIs: for each request type, which entries name what
//! ([`super::Target`]), how a refused entry is answered, and how refused entries merge into the
//! broker's response ([`super::Guarded`]).
//!
//! Owns: the per-API granularity described in the parent module (per partition, per topic or
//! resource, per transaction) and the error codes of refused entries.
//! Must not touch: decoding, encoding and framing (the parent's generic machinery), which
//! topics are read-only (the caller's `decide`).

use kafka_protocol::messages::{
    add_partitions_to_txn_response as aptr, alter_configs_response as acr,
    create_partitions_response as cpr, delete_records_response as drr,
    delete_topics_response as dtr, elect_leaders_response as elr,
    incremental_alter_configs_response as iacr, offset_commit_response as ocr,
    offset_delete_response as odr, txn_offset_commit_response as tocr,
    write_txn_markers_response as wtmr, AddPartitionsToTxnRequest, AlterConfigsRequest,
    CreatePartitionsRequest, DeleteRecordsRequest, DeleteTopicsRequest, ElectLeadersRequest,
    IncrementalAlterConfigsRequest, OffsetCommitRequest, OffsetDeleteRequest,
    TxnOffsetCommitRequest, WriteTxnMarkersRequest,
};

use super::{
    msg, Decide, Guarded, Split, Target, TxnProducer, ELECTION_UNCLEAN, OPERATION_NOT_ATTEMPTED,
    RESOURCE_TOPIC,
};

// ------------------------------------------------------------------ DeleteTopics

impl Guarded for DeleteTopicsRequest {
    type Resp = kafka_protocol::messages::DeleteTopicsResponse;

    fn split(&mut self, version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp> {
        let mut s = Split::<Self::Resp>::new();
        if version >= 6 {
            self.topics.retain(|t| {
                let target = match &t.name {
                    Some(n) => Target::Topic(n.as_str()),
                    None => Target::TopicId(t.topic_id),
                };
                match decide(target) {
                    Some(r) => {
                        s.refuse(&r);
                        s.response.responses.push(
                            dtr::DeletableTopicResult::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_error_code(r.error_code)
                                .with_error_message(msg(&r.message)),
                        );
                        false
                    }
                    None => {
                        s.kept += 1;
                        true
                    }
                }
            });
        } else {
            self.topic_names
                .retain(|n| match decide(Target::Topic(n.as_str())) {
                    Some(r) => {
                        s.refuse(&r);
                        s.response.responses.push(
                            dtr::DeletableTopicResult::default()
                                .with_name(Some(n.clone()))
                                .with_error_code(r.error_code)
                                .with_error_message(msg(&r.message)),
                        );
                        false
                    }
                    None => {
                        s.kept += 1;
                        true
                    }
                });
        }
        s
    }

    fn merge(resp: &mut Self::Resp, part: Self::Resp) {
        resp.responses.extend(part.responses);
    }
}

// ------------------------------------------------------------------ CreatePartitions

impl Guarded for CreatePartitionsRequest {
    type Resp = kafka_protocol::messages::CreatePartitionsResponse;

    fn split(&mut self, _version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp> {
        let mut s = Split::<Self::Resp>::new();
        self.topics
            .retain(|t| match decide(Target::Topic(t.name.as_str())) {
                Some(r) => {
                    s.refuse(&r);
                    s.response.results.push(
                        cpr::CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(r.error_code)
                            .with_error_message(msg(&r.message)),
                    );
                    false
                }
                None => {
                    s.kept += 1;
                    true
                }
            });
        s
    }

    fn merge(resp: &mut Self::Resp, part: Self::Resp) {
        resp.results.extend(part.results);
    }
}

// ------------------------------------------------------------------ AlterConfigs (both forms)

macro_rules! alter_configs {
    ($req:ty, $resp:ty, $m:ident) => {
        impl Guarded for $req {
            type Resp = $resp;

            fn split(&mut self, _version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp> {
                let mut s = Split::<Self::Resp>::new();
                self.resources.retain(|res| {
                    let refusal = if res.resource_type == RESOURCE_TOPIC {
                        decide(Target::Topic(res.resource_name.as_str()))
                    } else {
                        None
                    };
                    match refusal {
                        Some(r) => {
                            s.refuse(&r);
                            s.response.responses.push(
                                $m::AlterConfigsResourceResponse::default()
                                    .with_error_code(r.error_code)
                                    .with_error_message(msg(&r.message))
                                    .with_resource_type(res.resource_type)
                                    .with_resource_name(res.resource_name.clone()),
                            );
                            false
                        }
                        None => {
                            s.kept += 1;
                            true
                        }
                    }
                });
                s
            }

            fn merge(resp: &mut Self::Resp, part: Self::Resp) {
                resp.responses.extend(part.responses);
            }
        }
    };
}

alter_configs!(
    AlterConfigsRequest,
    kafka_protocol::messages::AlterConfigsResponse,
    acr
);
alter_configs!(
    IncrementalAlterConfigsRequest,
    kafka_protocol::messages::IncrementalAlterConfigsResponse,
    iacr
);

// ------------------------------------------------------------------ AddPartitionsToTxn

/// Per-topic results of one transaction's partitions (of `txn`): `refused` answers, the rest
/// OPERATION_NOT_ATTEMPTED. `None` when nothing of it is refused.
fn txn_results(
    txn: TxnProducer<'_>,
    topics: &[kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic],
    decide: &mut Decide<'_>,
    s: &mut Split<kafka_protocol::messages::AddPartitionsToTxnResponse>,
) -> Option<Vec<aptr::AddPartitionsToTxnTopicResult>> {
    let mut any = false;
    let results = topics
        .iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| {
                    let code = match decide(Target::TxnPartition(t.name.as_str(), *p, txn)) {
                        Some(r) => {
                            any = true;
                            s.refuse(&r);
                            r.error_code
                        }
                        None => OPERATION_NOT_ATTEMPTED,
                    };
                    aptr::AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(code)
                })
                .collect();
            aptr::AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(parts)
        })
        .collect();
    any.then_some(results)
}

impl Guarded for AddPartitionsToTxnRequest {
    type Resp = kafka_protocol::messages::AddPartitionsToTxnResponse;

    fn split(&mut self, version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp> {
        let mut s = Split::<Self::Resp>::new();
        if version <= 3 {
            // One transaction, added atomically by the coordinator: refused whole.
            let txn = TxnProducer {
                transactional_id: self.v3_and_below_transactional_id.as_str(),
                producer_id: self.v3_and_below_producer_id.0,
                producer_epoch: self.v3_and_below_producer_epoch,
            };
            match txn_results(txn, &self.v3_and_below_topics, decide, &mut s) {
                Some(results) => s.response.results_by_topic_v3_and_below = results,
                None => s.kept = 1,
            }
        } else {
            let transactions = std::mem::take(&mut self.transactions);
            for tx in transactions {
                let txn = TxnProducer {
                    transactional_id: tx.transactional_id.as_str(),
                    producer_id: tx.producer_id.0,
                    producer_epoch: tx.producer_epoch,
                };
                match txn_results(txn, &tx.topics, decide, &mut s) {
                    Some(results) => s.response.results_by_transaction.push(
                        aptr::AddPartitionsToTxnResult::default()
                            .with_transactional_id(tx.transactional_id.clone())
                            .with_topic_results(results),
                    ),
                    None => {
                        s.kept += 1;
                        self.transactions.push(tx);
                    }
                }
            }
        }
        s
    }

    fn merge(resp: &mut Self::Resp, part: Self::Resp) {
        resp.results_by_transaction
            .extend(part.results_by_transaction);
        resp.results_by_topic_v3_and_below
            .extend(part.results_by_topic_v3_and_below);
    }
}

// ------------------------------------------------------------------ ElectLeaders

impl Guarded for ElectLeadersRequest {
    type Resp = kafka_protocol::messages::ElectLeadersResponse;

    fn split(&mut self, version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp> {
        let mut s = Split::<Self::Resp>::new();
        // v0 has no election type: it is always a preferred election.
        if version < 1 || self.election_type != ELECTION_UNCLEAN {
            s.kept = 1;
            return s;
        }
        let Some(topics) = self.topic_partitions.as_mut() else {
            // Every partition: refused whole when any mirror partition is read-only.
            match decide(Target::AllPartitions) {
                Some(r) => {
                    s.refuse(&r);
                    s.response.error_code = r.error_code;
                }
                None => s.kept = 1,
            }
            return s;
        };
        topics.retain_mut(|t| {
            let originally_empty = t.partitions.is_empty();
            let mut refused = Vec::new();
            t.partitions
                .retain(|p| match decide(Target::Partition(t.topic.as_str(), *p)) {
                    Some(r) => {
                        s.refuse(&r);
                        refused.push(
                            elr::PartitionResult::default()
                                .with_partition_id(*p)
                                .with_error_code(r.error_code)
                                .with_error_message(msg(&r.message)),
                        );
                        false
                    }
                    None => true,
                });
            if !refused.is_empty() {
                s.response.replica_election_results.push(
                    elr::ReplicaElectionResult::default()
                        .with_topic(t.topic.clone())
                        .with_partition_result(refused),
                );
            }
            let keep = originally_empty || !t.partitions.is_empty();
            s.kept += usize::from(keep);
            keep
        });
        s
    }

    fn merge(resp: &mut Self::Resp, part: Self::Resp) {
        if resp.error_code == 0 {
            resp.error_code = part.error_code;
        }
        for t in part.replica_election_results {
            match resp
                .replica_election_results
                .iter_mut()
                .find(|x| x.topic == t.topic)
            {
                Some(x) => x.partition_result.extend(t.partition_result),
                None => resp.replica_election_results.push(t),
            }
        }
    }
}

// ------------------------------------------------------------------ WriteTxnMarkers

impl Guarded for WriteTxnMarkersRequest {
    type Resp = kafka_protocol::messages::WriteTxnMarkersResponse;

    fn split(&mut self, _version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp> {
        let mut s = Split::<Self::Resp>::new();
        self.markers.retain_mut(|m| {
            let marker_empty = m.topics.is_empty();
            let mut refused_topics = Vec::new();
            m.topics.retain_mut(|t| {
                let originally_empty = t.partition_indexes.is_empty();
                let mut refused = Vec::new();
                t.partition_indexes.retain(|p| {
                    match decide(Target::Partition(t.name.as_str(), *p)) {
                        Some(r) => {
                            s.refuse(&r);
                            refused.push(
                                wtmr::WritableTxnMarkerPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_error_code(r.error_code),
                            );
                            false
                        }
                        None => true,
                    }
                });
                if !refused.is_empty() {
                    refused_topics.push(
                        wtmr::WritableTxnMarkerTopicResult::default()
                            .with_name(t.name.clone())
                            .with_partitions(refused),
                    );
                }
                originally_empty || !t.partition_indexes.is_empty()
            });
            if !refused_topics.is_empty() {
                s.response.markers.push(
                    wtmr::WritableTxnMarkerResult::default()
                        .with_producer_id(m.producer_id)
                        .with_topics(refused_topics),
                );
            }
            let keep = marker_empty || !m.topics.is_empty();
            s.kept += usize::from(keep);
            keep
        });
        s
    }

    fn merge(resp: &mut Self::Resp, part: Self::Resp) {
        for m in part.markers {
            match resp
                .markers
                .iter_mut()
                .find(|x| x.producer_id == m.producer_id)
            {
                Some(x) => {
                    for t in m.topics {
                        match x.topics.iter_mut().find(|y| y.name == t.name) {
                            Some(y) => y.partitions.extend(t.partitions),
                            None => x.topics.push(t),
                        }
                    }
                }
                None => resp.markers.push(m),
            }
        }
    }
}

// ------------------------------------------------------------------ per-partition requests

/// DeleteRecords and the group-offset requests (OffsetCommit, TxnOffsetCommit, OffsetDelete)
/// name partitions by topic, and the broker answers each partition on its own: split per
/// partition; a refused partition is answered `$refused` (a partition result with its index and
/// error code set).
macro_rules! per_partition {
    ($req:ty, $resp:ty, $m:ident, $topic:ident, $partition:ident, $refused:expr) => {
        impl Guarded for $req {
            type Resp = $resp;

            fn split(&mut self, _version: i16, decide: &mut Decide<'_>) -> Split<Self::Resp> {
                let refused_partition: fn($m::$partition) -> $m::$partition = $refused;
                let mut s = Split::<Self::Resp>::new();
                self.topics.retain_mut(|t| {
                    let originally_empty = t.partitions.is_empty();
                    let mut refused = Vec::new();
                    t.partitions.retain(|p| {
                        match decide(Target::Partition(t.name.as_str(), p.partition_index)) {
                            Some(r) => {
                                s.refuse(&r);
                                refused.push(refused_partition(
                                    $m::$partition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(r.error_code),
                                ));
                                false
                            }
                            None => true,
                        }
                    });
                    if !refused.is_empty() {
                        s.response.topics.push(
                            $m::$topic::default()
                                .with_name(t.name.clone())
                                .with_partitions(refused),
                        );
                    }
                    let keep = originally_empty || !t.partitions.is_empty();
                    s.kept += usize::from(keep);
                    keep
                });
                s
            }

            fn merge(resp: &mut Self::Resp, part: Self::Resp) {
                for t in part.topics {
                    match resp.topics.iter_mut().find(|x| x.name == t.name) {
                        Some(x) => x.partitions.extend(t.partitions),
                        None => resp.topics.push(t),
                    }
                }
            }
        }
    };
}

per_partition!(
    DeleteRecordsRequest,
    kafka_protocol::messages::DeleteRecordsResponse,
    drr,
    DeleteRecordsTopicResult,
    DeleteRecordsPartitionResult,
    |p| p.with_low_watermark(-1)
);
per_partition!(
    OffsetCommitRequest,
    kafka_protocol::messages::OffsetCommitResponse,
    ocr,
    OffsetCommitResponseTopic,
    OffsetCommitResponsePartition,
    |p| p
);
per_partition!(
    TxnOffsetCommitRequest,
    kafka_protocol::messages::TxnOffsetCommitResponse,
    tocr,
    TxnOffsetCommitResponseTopic,
    TxnOffsetCommitResponsePartition,
    |p| p
);
per_partition!(
    OffsetDeleteRequest,
    kafka_protocol::messages::OffsetDeleteResponse,
    odr,
    OffsetDeleteResponseTopic,
    OffsetDeleteResponsePartition,
    |p| p
);
