//! Unit tests of [`super`]: for every guarded API and every version kafka-protocol reads, a
//! request naming only allowed entries is forwarded untouched, one naming only refused entries
//! is answered locally, and a mixed one is split and its answer merged; malformed input is an
//! error, never a panic.

use super::*;
use kafka_protocol::messages::{
    add_partitions_to_txn_request as aptq, add_partitions_to_txn_response as aptr,
    alter_configs_request as acq, alter_configs_response as acr, create_partitions_request as cpq,
    create_partitions_response as cpr, delete_records_request as drq,
    delete_records_response as drr, delete_topics_request as dtq, delete_topics_response as dtr,
    elect_leaders_request as elq, elect_leaders_response as elr,
    incremental_alter_configs_request as iacq, incremental_alter_configs_response as iacr,
    offset_commit_request as ocq, offset_commit_response as ocr, offset_delete_request as odq,
    offset_delete_response as odr, txn_offset_commit_request as tocq,
    txn_offset_commit_response as tocr, write_txn_markers_request as wtmq,
    write_txn_markers_response as wtmr, AddPartitionsToTxnResponse, AlterConfigsResponse,
    CreatePartitionsResponse, DeleteRecordsResponse, DeleteTopicsResponse, ElectLeadersResponse,
    IncrementalAlterConfigsResponse, OffsetCommitResponse, OffsetDeleteResponse, RequestHeader,
    TopicName, TxnOffsetCommitResponse, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::HeaderVersion;

const MIRROR: &str = "mirror";
const PLAIN: &str = "plain";
const MIRROR_ID: uuid::Uuid = uuid::Uuid::from_u128(0x1234);
const PLAIN_ID: uuid::Uuid = uuid::Uuid::from_u128(0x5678);
const CORR: i32 = 4242;

fn tn(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Refuses everything of the topic `mirror` (by name or id) and "every partition".
fn decide(t: Target<'_>) -> Option<Rejection> {
    let refused = match t {
        Target::Topic(n) | Target::Partition(n, _) | Target::TxnPartition(n, _, _) => n == MIRROR,
        Target::TopicId(id) => id == MIRROR_ID,
        Target::AllPartitions => true,
    };
    refused.then(|| Rejection::new(44, format!("refused {t:?}")))
}

fn request_frame<R: Request + Encodable>(req: &R, version: i16) -> (Bytes, usize) {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(CORR)
        .with_client_id(Some(sb("test-client")))
        .encode(&mut out, R::header_version(version))
        .unwrap();
    req.encode(&mut out, version).unwrap();
    let frame = frame_with_length(out).unwrap();
    let h = crate::protocol::parse_request_header(&frame[4..]).unwrap();
    (frame, h.header_len)
}

fn response_frame<M: Encodable>(api: ApiKey, version: i16, resp: &M) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(CORR)
        .encode(&mut out, api.response_header_version(version))
        .unwrap();
    resp.encode(&mut out, version).unwrap();
    frame_with_length(out).unwrap()
}

fn decode_response<R: Request>(frame: &Bytes, version: i16) -> R::Response
where
    R::Response: Decodable,
{
    let mut b = frame.slice(4..);
    let h = ResponseHeader::decode(
        &mut b,
        <R::Response as HeaderVersion>::header_version(version),
    )
    .unwrap();
    assert_eq!(h.correlation_id, CORR);
    let r = R::Response::decode(&mut b, version).unwrap();
    assert!(b.is_empty(), "trailing bytes in the response");
    r
}

fn decode_request<R: Request + Decodable>(frame: &Bytes, header_len: usize, version: i16) -> R {
    let mut b = frame.slice(4 + header_len..);
    let r = R::decode(&mut b, version).unwrap();
    assert!(b.is_empty());
    r
}

fn versions<M: Message>() -> std::ops::RangeInclusive<i16> {
    M::VERSIONS.min..=M::VERSIONS.max
}

fn plan_of<R: Request + Encodable>(req: &R, version: i16) -> (AdminDecision, Bytes, usize) {
    let (frame, hl) = request_frame(req, version);
    let api = ApiKey::try_from(R::KEY).unwrap();
    let d = plan(&frame, api, hl, version, CORR, &mut decide).unwrap();
    (d, frame, hl)
}

/// The forwarded frame keeps the original header bytes.
fn rewritten(d: AdminDecision, original: &Bytes, header_len: usize) -> (Bytes, Refused) {
    match d {
        AdminDecision::Rewritten { frame, refused } => {
            assert_eq!(frame[4..4 + header_len], original[4..4 + header_len]);
            assert!(!refused.messages.is_empty());
            (frame, refused)
        }
        other => panic!("expected a split request, got {other:?}"),
    }
}

fn all_refused(d: AdminDecision) -> Bytes {
    match d {
        AdminDecision::AllRefused { response, messages } => {
            assert!(!messages.is_empty());
            response
        }
        other => panic!("expected a local answer, got {other:?}"),
    }
}

fn has_message(m: &Option<StrBytes>) -> bool {
    m.as_ref().is_some_and(|m| m.contains("refused"))
}

// ------------------------------------------------------------------ DeleteRecords

fn delete_records(topics: &[&str]) -> DeleteRecordsRequest {
    DeleteRecordsRequest::default()
        .with_timeout_ms(1000)
        .with_topics(
            topics
                .iter()
                .map(|t| {
                    drq::DeleteRecordsTopic::default()
                        .with_name(tn(t))
                        .with_partitions(vec![
                            drq::DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(5),
                            drq::DeleteRecordsPartition::default()
                                .with_partition_index(1)
                                .with_offset(6),
                        ])
                })
                .collect(),
        )
}

#[test]
fn delete_records_every_version() {
    for v in versions::<DeleteRecordsRequest>() {
        assert_eq!(
            plan_of(&delete_records(&[PLAIN]), v).0,
            AdminDecision::Forward
        );

        let r: DeleteRecordsResponse = decode_response::<DeleteRecordsRequest>(
            &all_refused(plan_of(&delete_records(&[MIRROR]), v).0),
            v,
        );
        assert_eq!(r.topics.len(), 1);
        assert_eq!(r.topics[0].name, tn(MIRROR));
        assert!(r.topics[0]
            .partitions
            .iter()
            .all(|p| p.error_code == 44 && p.low_watermark == -1));
        assert_eq!(r.topics[0].partitions.len(), 2);

        let (d, f, hl) = plan_of(&delete_records(&[MIRROR, PLAIN]), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: DeleteRecordsRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, delete_records(&[PLAIN]));
        let broker = DeleteRecordsResponse::default().with_topics(vec![
            drr::DeleteRecordsTopicResult::default()
                .with_name(tn(PLAIN))
                .with_partitions(vec![drr::DeleteRecordsPartitionResult::default()
                    .with_partition_index(0)
                    .with_low_watermark(5)]),
        ]);
        let merged = merge(&response_frame(ApiKey::DeleteRecords, v, &broker), &refused).unwrap();
        let r: DeleteRecordsResponse = decode_response::<DeleteRecordsRequest>(&merged, v);
        assert_eq!(r.topics.len(), 2);
        assert_eq!(r.topics[0].partitions[0].low_watermark, 5);
        assert_eq!(r.topics[1].name, tn(MIRROR));
        assert_eq!(r.topics[1].partitions.len(), 2);
    }
}

// ------------------------------------------------------------------ DeleteTopics

fn delete_topics(v: i16, topics: &[&str]) -> DeleteTopicsRequest {
    let r = DeleteTopicsRequest::default().with_timeout_ms(1000);
    if v >= 6 {
        r.with_topics(
            topics
                .iter()
                .map(|t| dtq::DeleteTopicState::default().with_name(Some(tn(t))))
                .collect(),
        )
    } else {
        r.with_topic_names(topics.iter().map(|t| tn(t)).collect())
    }
}

#[test]
fn delete_topics_every_version() {
    for v in versions::<DeleteTopicsRequest>() {
        assert_eq!(
            plan_of(&delete_topics(v, &[PLAIN]), v).0,
            AdminDecision::Forward
        );

        let r: DeleteTopicsResponse = decode_response::<DeleteTopicsRequest>(
            &all_refused(plan_of(&delete_topics(v, &[MIRROR]), v).0),
            v,
        );
        assert_eq!(r.responses.len(), 1);
        assert_eq!(r.responses[0].name, Some(tn(MIRROR)));
        assert_eq!(r.responses[0].error_code, 44);
        assert_eq!(has_message(&r.responses[0].error_message), v >= 5);

        let (d, f, hl) = plan_of(&delete_topics(v, &[PLAIN, MIRROR]), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: DeleteTopicsRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, delete_topics(v, &[PLAIN]));
        let broker = DeleteTopicsResponse::default().with_responses(vec![
            dtr::DeletableTopicResult::default().with_name(Some(tn(PLAIN))),
        ]);
        let merged = merge(&response_frame(ApiKey::DeleteTopics, v, &broker), &refused).unwrap();
        let r: DeleteTopicsResponse = decode_response::<DeleteTopicsRequest>(&merged, v);
        let codes: Vec<_> = r
            .responses
            .iter()
            .map(|x| (x.name.clone(), x.error_code))
            .collect();
        assert_eq!(codes, vec![(Some(tn(PLAIN)), 0), (Some(tn(MIRROR)), 44)]);
    }
}

#[test]
fn delete_topics_by_id_asks_about_the_id() {
    let req = DeleteTopicsRequest::default().with_topics(vec![
        dtq::DeleteTopicState::default().with_topic_id(PLAIN_ID),
        dtq::DeleteTopicState::default().with_topic_id(MIRROR_ID),
    ]);
    let (d, f, hl) = plan_of(&req, 6);
    let (fwd, refused) = rewritten(d, &f, hl);
    let kept: DeleteTopicsRequest = decode_request(&fwd, hl, 6);
    assert_eq!(kept.topics.len(), 1);
    assert_eq!(kept.topics[0].topic_id, PLAIN_ID);
    let broker = DeleteTopicsResponse::default().with_responses(vec![
        dtr::DeletableTopicResult::default().with_topic_id(PLAIN_ID),
    ]);
    let merged = merge(&response_frame(ApiKey::DeleteTopics, 6, &broker), &refused).unwrap();
    let r: DeleteTopicsResponse = decode_response::<DeleteTopicsRequest>(&merged, 6);
    assert_eq!(r.responses[1].topic_id, MIRROR_ID);
    assert_eq!(r.responses[1].name, None);
    assert_eq!(r.responses[1].error_code, 44);
}

// ------------------------------------------------------------------ CreatePartitions

fn create_partitions(topics: &[&str]) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_timeout_ms(1000)
        .with_topics(
            topics
                .iter()
                .map(|t| {
                    cpq::CreatePartitionsTopic::default()
                        .with_name(tn(t))
                        .with_count(3)
                })
                .collect(),
        )
}

#[test]
fn create_partitions_every_version() {
    for v in versions::<CreatePartitionsRequest>() {
        assert_eq!(
            plan_of(&create_partitions(&[PLAIN]), v).0,
            AdminDecision::Forward
        );

        let r: CreatePartitionsResponse = decode_response::<CreatePartitionsRequest>(
            &all_refused(plan_of(&create_partitions(&[MIRROR]), v).0),
            v,
        );
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0].error_code, 44);
        assert!(has_message(&r.results[0].error_message));

        let (d, f, hl) = plan_of(&create_partitions(&[MIRROR, PLAIN]), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: CreatePartitionsRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, create_partitions(&[PLAIN]));
        let broker = CreatePartitionsResponse::default().with_results(vec![
            cpr::CreatePartitionsTopicResult::default().with_name(tn(PLAIN)),
        ]);
        let merged = merge(
            &response_frame(ApiKey::CreatePartitions, v, &broker),
            &refused,
        )
        .unwrap();
        let r: CreatePartitionsResponse = decode_response::<CreatePartitionsRequest>(&merged, v);
        let codes: Vec<_> = r
            .results
            .iter()
            .map(|x| (x.name.clone(), x.error_code))
            .collect();
        assert_eq!(codes, vec![(tn(PLAIN), 0), (tn(MIRROR), 44)]);
    }
}

// ------------------------------------------------------------------ AlterConfigs

fn alter_configs(resources: &[(i8, &str)]) -> AlterConfigsRequest {
    AlterConfigsRequest::default().with_resources(
        resources
            .iter()
            .map(|(ty, n)| {
                acq::AlterConfigsResource::default()
                    .with_resource_type(*ty)
                    .with_resource_name(sb(n))
                    .with_configs(vec![acq::AlterableConfig::default()
                        .with_name(sb("retention.ms"))
                        .with_value(Some(sb("1")))])
            })
            .collect(),
    )
}

#[test]
fn alter_configs_every_version() {
    for v in versions::<AlterConfigsRequest>() {
        // A broker resource named like a mirror topic is not a topic.
        let req = alter_configs(&[(2, PLAIN), (4, MIRROR)]);
        assert_eq!(plan_of(&req, v).0, AdminDecision::Forward);

        let r: AlterConfigsResponse = decode_response::<AlterConfigsRequest>(
            &all_refused(plan_of(&alter_configs(&[(2, MIRROR)]), v).0),
            v,
        );
        assert_eq!(r.responses.len(), 1);
        assert_eq!(r.responses[0].error_code, 44);
        assert_eq!(r.responses[0].resource_type, 2);
        assert!(has_message(&r.responses[0].error_message));

        let (d, f, hl) = plan_of(&alter_configs(&[(2, MIRROR), (4, "1"), (2, PLAIN)]), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: AlterConfigsRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, alter_configs(&[(4, "1"), (2, PLAIN)]));
        let broker = AlterConfigsResponse::default().with_responses(vec![
            acr::AlterConfigsResourceResponse::default()
                .with_resource_type(4)
                .with_resource_name(sb("1")),
            acr::AlterConfigsResourceResponse::default()
                .with_resource_type(2)
                .with_resource_name(sb(PLAIN)),
        ]);
        let merged = merge(&response_frame(ApiKey::AlterConfigs, v, &broker), &refused).unwrap();
        let r: AlterConfigsResponse = decode_response::<AlterConfigsRequest>(&merged, v);
        let codes: Vec<_> = r
            .responses
            .iter()
            .map(|x| (x.resource_name.to_string(), x.error_code))
            .collect();
        assert_eq!(
            codes,
            vec![("1".into(), 0), (PLAIN.into(), 0), (MIRROR.into(), 44)]
        );
    }
}

fn incremental(resources: &[(i8, &str)]) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default().with_resources(
        resources
            .iter()
            .map(|(ty, n)| {
                iacq::AlterConfigsResource::default()
                    .with_resource_type(*ty)
                    .with_resource_name(sb(n))
                    .with_configs(vec![iacq::AlterableConfig::default()
                        .with_name(sb("compression.type"))
                        .with_config_operation(0)
                        .with_value(Some(sb("gzip")))])
            })
            .collect(),
    )
}

#[test]
fn incremental_alter_configs_every_version() {
    for v in versions::<IncrementalAlterConfigsRequest>() {
        assert_eq!(
            plan_of(&incremental(&[(2, PLAIN), (8, MIRROR)]), v).0,
            AdminDecision::Forward
        );

        let r: IncrementalAlterConfigsResponse = decode_response::<IncrementalAlterConfigsRequest>(
            &all_refused(plan_of(&incremental(&[(2, MIRROR)]), v).0),
            v,
        );
        assert_eq!(r.responses[0].error_code, 44);
        assert!(has_message(&r.responses[0].error_message));

        let (d, f, hl) = plan_of(&incremental(&[(2, PLAIN), (2, MIRROR)]), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: IncrementalAlterConfigsRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, incremental(&[(2, PLAIN)]));
        let broker = IncrementalAlterConfigsResponse::default().with_responses(vec![
            iacr::AlterConfigsResourceResponse::default()
                .with_resource_type(2)
                .with_resource_name(sb(PLAIN)),
        ]);
        let merged = merge(
            &response_frame(ApiKey::IncrementalAlterConfigs, v, &broker),
            &refused,
        )
        .unwrap();
        let r: IncrementalAlterConfigsResponse =
            decode_response::<IncrementalAlterConfigsRequest>(&merged, v);
        let codes: Vec<_> = r
            .responses
            .iter()
            .map(|x| (x.resource_name.to_string(), x.error_code))
            .collect();
        assert_eq!(codes, vec![(PLAIN.into(), 0), (MIRROR.into(), 44)]);
    }
}

// ------------------------------------------------------------------ AddPartitionsToTxn

fn txn_topics(topics: &[&str]) -> Vec<aptq::AddPartitionsToTxnTopic> {
    topics
        .iter()
        .map(|t| {
            aptq::AddPartitionsToTxnTopic::default()
                .with_name(tn(t))
                .with_partitions(vec![0, 1])
        })
        .collect()
}

fn add_v3(topics: &[&str]) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(sb("tx").into())
        .with_v3_and_below_producer_id(7.into())
        .with_v3_and_below_producer_epoch(1)
        .with_v3_and_below_topics(txn_topics(topics))
}

fn add_v4(txns: &[(&str, &[&str])]) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default().with_transactions(
        txns.iter()
            .map(|(id, topics)| {
                aptq::AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(sb(id).into())
                    .with_producer_id(7.into())
                    .with_producer_epoch(1)
                    .with_topics(txn_topics(topics))
            })
            .collect(),
    )
}

#[test]
fn add_partitions_to_txn_client_versions_are_refused_whole() {
    for v in 0..=3 {
        assert_eq!(plan_of(&add_v3(&[PLAIN]), v).0, AdminDecision::Forward);
        // A mixed request is refused whole: the coordinator adds partitions atomically.
        let r: AddPartitionsToTxnResponse = decode_response::<AddPartitionsToTxnRequest>(
            &all_refused(plan_of(&add_v3(&[PLAIN, MIRROR]), v).0),
            v,
        );
        let codes: Vec<_> = r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(move |p| (t.name.clone(), p.partition_index, p.partition_error_code))
            })
            .collect();
        assert_eq!(
            codes,
            vec![
                (tn(PLAIN), 0, OPERATION_NOT_ATTEMPTED),
                (tn(PLAIN), 1, OPERATION_NOT_ATTEMPTED),
                (tn(MIRROR), 0, 44),
                (tn(MIRROR), 1, 44),
            ]
        );
    }
}

#[test]
fn add_partitions_to_txn_batched_versions_are_split_per_transaction() {
    for v in 4..=AddPartitionsToTxnRequest::VERSIONS.max {
        assert_eq!(
            plan_of(&add_v4(&[("a", &[PLAIN])]), v).0,
            AdminDecision::Forward
        );
        let r: AddPartitionsToTxnResponse = decode_response::<AddPartitionsToTxnRequest>(
            &all_refused(plan_of(&add_v4(&[("a", &[MIRROR, PLAIN])]), v).0),
            v,
        );
        assert_eq!(r.error_code, 0);
        assert_eq!(r.results_by_transaction.len(), 1);

        let (d, f, hl) = plan_of(&add_v4(&[("a", &[PLAIN]), ("b", &[PLAIN, MIRROR])]), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: AddPartitionsToTxnRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, add_v4(&[("a", &[PLAIN])]));
        let broker = AddPartitionsToTxnResponse::default().with_results_by_transaction(vec![
            aptr::AddPartitionsToTxnResult::default().with_transactional_id(sb("a").into()),
        ]);
        let merged = merge(
            &response_frame(ApiKey::AddPartitionsToTxn, v, &broker),
            &refused,
        )
        .unwrap();
        let r: AddPartitionsToTxnResponse =
            decode_response::<AddPartitionsToTxnRequest>(&merged, v);
        let ids: Vec<_> = r
            .results_by_transaction
            .iter()
            .map(|t| t.transactional_id.to_string())
            .collect();
        assert_eq!(ids, vec!["a", "b"]);
        let b = &r.results_by_transaction[1].topic_results;
        assert_eq!(
            b[0].results_by_partition[0].partition_error_code,
            OPERATION_NOT_ATTEMPTED
        );
        assert_eq!(b[1].results_by_partition[0].partition_error_code, 44);
    }
}

// ------------------------------------------------------------------ ElectLeaders

fn elect(election_type: i8, topics: Option<&[&str]>) -> ElectLeadersRequest {
    ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_timeout_ms(1000)
        .with_topic_partitions(topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    elq::TopicPartitions::default()
                        .with_topic(tn(t))
                        .with_partitions(vec![0, 1])
                })
                .collect()
        }))
}

#[test]
fn elect_leaders_every_version() {
    for v in versions::<ElectLeadersRequest>() {
        // Preferred elections pass, mirror partitions or not.
        assert_eq!(
            plan_of(&elect(0, Some(&[MIRROR])), v).0,
            AdminDecision::Forward
        );
        assert_eq!(plan_of(&elect(0, None), v).0, AdminDecision::Forward);
        if v == 0 {
            continue; // v0 has no election type: always preferred.
        }
        assert_eq!(
            plan_of(&elect(1, Some(&[PLAIN])), v).0,
            AdminDecision::Forward
        );

        let r: ElectLeadersResponse = decode_response::<ElectLeadersRequest>(
            &all_refused(plan_of(&elect(1, Some(&[MIRROR])), v).0),
            v,
        );
        assert_eq!(r.replica_election_results.len(), 1);
        let p = &r.replica_election_results[0].partition_result;
        assert!(p
            .iter()
            .all(|p| p.error_code == 44 && has_message(&p.error_message)));

        // Every partition of the cluster: refused whole with a top-level error.
        let r: ElectLeadersResponse =
            decode_response::<ElectLeadersRequest>(&all_refused(plan_of(&elect(1, None), v).0), v);
        assert_eq!(r.error_code, 44);

        let (d, f, hl) = plan_of(&elect(1, Some(&[PLAIN, MIRROR])), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: ElectLeadersRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, elect(1, Some(&[PLAIN])));
        let broker = ElectLeadersResponse::default().with_replica_election_results(vec![
            elr::ReplicaElectionResult::default()
                .with_topic(tn(PLAIN))
                .with_partition_result(vec![elr::PartitionResult::default()
                    .with_partition_id(0)
                    .with_error_code(84)]),
        ]);
        let merged = merge(&response_frame(ApiKey::ElectLeaders, v, &broker), &refused).unwrap();
        let r: ElectLeadersResponse = decode_response::<ElectLeadersRequest>(&merged, v);
        assert_eq!(r.error_code, 0);
        assert_eq!(r.replica_election_results.len(), 2);
        assert_eq!(r.replica_election_results[1].topic, tn(MIRROR));
    }
}

// ------------------------------------------------------------------ WriteTxnMarkers

fn markers(m: &[(i64, &[&str])]) -> WriteTxnMarkersRequest {
    WriteTxnMarkersRequest::default().with_markers(
        m.iter()
            .map(|(pid, topics)| {
                wtmq::WritableTxnMarker::default()
                    .with_producer_id((*pid).into())
                    .with_producer_epoch(3)
                    .with_coordinator_epoch(1)
                    .with_topics(
                        topics
                            .iter()
                            .map(|t| {
                                wtmq::WritableTxnMarkerTopic::default()
                                    .with_name(tn(t))
                                    .with_partition_indexes(vec![0, 1])
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

#[test]
fn write_txn_markers_every_version() {
    for v in versions::<WriteTxnMarkersRequest>() {
        assert_eq!(
            plan_of(&markers(&[(1, &[PLAIN])]), v).0,
            AdminDecision::Forward
        );

        let r: WriteTxnMarkersResponse = decode_response::<WriteTxnMarkersRequest>(
            &all_refused(plan_of(&markers(&[(1, &[MIRROR]), (2, &[MIRROR])]), v).0),
            v,
        );
        assert_eq!(r.markers.len(), 2);
        assert!(r
            .markers
            .iter()
            .all(|m| m.topics[0].partitions.iter().all(|p| p.error_code == 44)));

        let (d, f, hl) = plan_of(&markers(&[(1, &[PLAIN, MIRROR]), (2, &[MIRROR])]), v);
        let (fwd, refused) = rewritten(d, &f, hl);
        let req: WriteTxnMarkersRequest = decode_request(&fwd, hl, v);
        assert_eq!(req, markers(&[(1, &[PLAIN])]));
        let broker = WriteTxnMarkersResponse::default().with_markers(vec![
            wtmr::WritableTxnMarkerResult::default()
                .with_producer_id(1.into())
                .with_topics(vec![wtmr::WritableTxnMarkerTopicResult::default()
                    .with_name(tn(PLAIN))
                    .with_partitions(vec![
                        wtmr::WritableTxnMarkerPartitionResult::default(),
                    ])]),
        ]);
        let merged = merge(
            &response_frame(ApiKey::WriteTxnMarkers, v, &broker),
            &refused,
        )
        .unwrap();
        let r: WriteTxnMarkersResponse = decode_response::<WriteTxnMarkersRequest>(&merged, v);
        assert_eq!(r.markers.len(), 2);
        let names: Vec<_> = r.markers[0].topics.iter().map(|t| t.name.clone()).collect();
        assert_eq!(names, vec![tn(PLAIN), tn(MIRROR)]);
        assert_eq!(r.markers[1].producer_id.0, 2);
    }
}

// ------------------------------------------------------------------ group offsets

/// For every version of a group-offset request: a request naming only the plain topic is
/// forwarded, one naming only the mirror topic answered locally (44 for each partition), and a
/// mixed one split per partition and merged.
macro_rules! group_offsets_every_version {
    ($req:ty, $resp:ty, $api:expr, $r:ident, $rt:ident, $rp:ident, $build:expr) => {{
        let build: fn(&[&str]) -> $req = $build;
        for v in versions::<$req>() {
            assert_eq!(plan_of(&build(&[PLAIN]), v).0, AdminDecision::Forward);
            let r: $resp =
                decode_response::<$req>(&all_refused(plan_of(&build(&[MIRROR]), v).0), v);
            assert_eq!(r.topics.len(), 1);
            assert_eq!(r.topics[0].name, tn(MIRROR));
            let codes: Vec<(i32, i16)> = r.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.error_code))
                .collect();
            assert_eq!(codes, vec![(0, 44), (1, 44)], "v{v}");

            let (d, f, hl) = plan_of(&build(&[MIRROR, PLAIN]), v);
            let (fwd, refused) = rewritten(d, &f, hl);
            let req: $req = decode_request(&fwd, hl, v);
            assert_eq!(req, build(&[PLAIN]), "v{v}");
            let broker = <$resp>::default().with_topics(vec![$r::$rt::default()
                .with_name(tn(PLAIN))
                .with_partitions(vec![$r::$rp::default().with_partition_index(0)])]);
            let merged = merge(&response_frame($api, v, &broker), &refused).unwrap();
            let r: $resp = decode_response::<$req>(&merged, v);
            let names: Vec<TopicName> = r.topics.iter().map(|t| t.name.clone()).collect();
            assert_eq!(names, vec![tn(PLAIN), tn(MIRROR)], "v{v}");
            assert_eq!(r.topics[1].partitions.len(), 2);
        }
    }};
}

#[test]
fn offset_commit_every_version() {
    group_offsets_every_version!(
        OffsetCommitRequest,
        OffsetCommitResponse,
        ApiKey::OffsetCommit,
        ocr,
        OffsetCommitResponseTopic,
        OffsetCommitResponsePartition,
        |topics| {
            OffsetCommitRequest::default()
                .with_group_id(sb("g").into())
                .with_generation_id_or_member_epoch(-1)
                .with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            ocq::OffsetCommitRequestTopic::default()
                                .with_name(tn(t))
                                .with_partitions(
                                    (0..2)
                                        .map(|p| {
                                            ocq::OffsetCommitRequestPartition::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(7)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        }
    );
}

#[test]
fn txn_offset_commit_every_version() {
    group_offsets_every_version!(
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
        ApiKey::TxnOffsetCommit,
        tocr,
        TxnOffsetCommitResponseTopic,
        TxnOffsetCommitResponsePartition,
        |topics| {
            TxnOffsetCommitRequest::default()
                .with_transactional_id(sb("tx").into())
                .with_group_id(sb("g").into())
                .with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            tocq::TxnOffsetCommitRequestTopic::default()
                                .with_name(tn(t))
                                .with_partitions(
                                    (0..2)
                                        .map(|p| {
                                            tocq::TxnOffsetCommitRequestPartition::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(7)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        }
    );
}

#[test]
fn offset_delete_every_version() {
    group_offsets_every_version!(
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        ApiKey::OffsetDelete,
        odr,
        OffsetDeleteResponseTopic,
        OffsetDeleteResponsePartition,
        |topics| {
            OffsetDeleteRequest::default()
                .with_group_id(sb("g").into())
                .with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            odq::OffsetDeleteRequestTopic::default()
                                .with_name(tn(t))
                                .with_partitions(
                                    (0..2)
                                        .map(|p| {
                                            odq::OffsetDeleteRequestPartition::default()
                                                .with_partition_index(p)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        }
    );
}

// ------------------------------------------------------------------ bad input

#[test]
fn truncated_or_padded_requests_are_errors_not_panics() {
    let cases: Vec<(Bytes, usize, ApiKey, i16)> = vec![
        {
            let (f, h) = request_frame(&delete_records(&[MIRROR, PLAIN]), 2);
            (f, h, ApiKey::DeleteRecords, 2)
        },
        {
            let (f, h) = request_frame(&delete_topics(6, &[MIRROR, PLAIN]), 6);
            (f, h, ApiKey::DeleteTopics, 6)
        },
        {
            let (f, h) = request_frame(&add_v3(&[MIRROR]), 3);
            (f, h, ApiKey::AddPartitionsToTxn, 3)
        },
        {
            let (f, h) = request_frame(&markers(&[(1, &[MIRROR, PLAIN])]), 1);
            (f, h, ApiKey::WriteTxnMarkers, 1)
        },
    ];
    for (frame, hl, api, v) in cases {
        for cut in 4 + hl..frame.len() {
            let mut t = BytesMut::from(&frame[..cut]);
            let len = (cut - 4) as i32;
            t[0..4].copy_from_slice(&len.to_be_bytes());
            let t = t.freeze();
            assert!(
                plan(&t, api, hl, v, CORR, &mut decide).is_err(),
                "{api:?} cut at {cut}"
            );
        }
        let mut padded = BytesMut::from(&frame[..]);
        padded.put_u8(0);
        let len = (padded.len() - 4) as i32;
        padded[0..4].copy_from_slice(&len.to_be_bytes());
        assert!(matches!(
            plan(&padded.freeze(), api, hl, v, CORR, &mut decide),
            Err(AdminRefusalError::Trailing { .. })
        ));
        // A length prefix that lies, a wrong api key, a version the crate cannot read.
        let mut lying = BytesMut::from(&frame[..]);
        lying[3] ^= 1;
        assert!(plan(&lying.freeze(), api, hl, v, CORR, &mut decide).is_err());
        assert!(
            plan(&frame, ApiKey::DeleteRecords, hl, v, CORR, &mut decide).is_err()
                || api == ApiKey::DeleteRecords
        );
        assert!(matches!(
            plan(&frame, api, hl, 99, CORR, &mut decide),
            Err(AdminRefusalError::UnsupportedVersion { .. })
        ));
    }
}

#[test]
fn random_bytes_never_panic() {
    use proptest::prelude::*;
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 512,
        ..Default::default()
    });
    runner
        .run(
            &(
                proptest::sample::select(
                    GUARDED
                        .iter()
                        .chain(GROUP_OFFSETS)
                        .copied()
                        .collect::<Vec<_>>(),
                ),
                proptest::collection::vec(any::<u8>(), 0..200),
            ),
            |(api, body)| {
                let (min, max) = readable_versions(api).unwrap();
                for v in min..=max {
                    let mut out = BytesMut::new();
                    out.put_i32(0);
                    RequestHeader::default()
                        .with_request_api_key(api as i16)
                        .with_request_api_version(v)
                        .with_correlation_id(CORR)
                        .encode(&mut out, api.request_header_version(v))
                        .unwrap();
                    let hl = out.len() - 4;
                    out.extend_from_slice(&body);
                    let frame = frame_with_length(out).unwrap();
                    let _ = plan(&frame, api, hl, v, CORR, &mut decide);
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn a_broker_response_that_cannot_be_read_is_an_error() {
    let (d, f, hl) = plan_of(&delete_records(&[MIRROR, PLAIN]), 2);
    let (_, refused) = rewritten(d, &f, hl);
    let good = response_frame(ApiKey::DeleteRecords, 2, &DeleteRecordsResponse::default());
    assert!(merge(&good, &refused).is_ok());
    for cut in 0..good.len() {
        assert!(merge(&good.slice(..cut), &refused).is_err(), "cut at {cut}");
    }
}

#[test]
fn other_apis_are_not_guarded() {
    assert!(!is_guarded(ApiKey::Produce));
    assert!(!is_guarded(ApiKey::CreateTopics));
    // Group offsets are the consumers' own on the client listener; on the mirror listener the
    // markers are mirror writes (admitted like Produce, not guarded here).
    assert!(!is_guarded(ApiKey::OffsetCommit) && is_guarded_on_mirror(ApiKey::OffsetCommit));
    assert!(!is_guarded_on_mirror(ApiKey::WriteTxnMarkers));
    assert!(!is_guarded_on_mirror(ApiKey::AlterPartitionReassignments));
    let (f, hl) = request_frame(&delete_records(&[MIRROR]), 2);
    assert!(matches!(
        plan(&f, ApiKey::Fetch, hl, 2, CORR, &mut decide),
        Err(AdminRefusalError::NotGuarded(ApiKey::Fetch))
    ));
}
