//! The transaction a client request belongs to, and whether an EndTxn answer ended it: what a
//! forward listener needs to let the transactions open at a switchover's hold finish on the
//! source while everything else waits.
//!
//! Owns: reading the producer id of AddPartitionsToTxn (client versions 0–3), AddOffsetsToTxn,
//! TxnOffsetCommit and EndTxn requests, and the error of an EndTxn answer. Must not touch: what
//! the caller does with them (the forward listener), Produce (its batches carry the id).

use bytes::Bytes;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, EndTxnRequest, EndTxnResponse,
    ResponseHeader, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::Decodable;

/// The producer id of transactional request `api` at `version` (`body`: after its header);
/// `None` for another API, a broker's batched AddPartitionsToTxn (v4+), or a body that does
/// not decode.
pub fn producer_of(api: ApiKey, version: i16, body: &Bytes) -> Option<i64> {
    let mut b = body.clone();
    let id = match api {
        ApiKey::AddPartitionsToTxn if version <= 3 => {
            AddPartitionsToTxnRequest::decode(&mut b, version)
                .ok()?
                .v3_and_below_producer_id
        }
        ApiKey::AddOffsetsToTxn => {
            AddOffsetsToTxnRequest::decode(&mut b, version)
                .ok()?
                .producer_id
        }
        ApiKey::TxnOffsetCommit => {
            TxnOffsetCommitRequest::decode(&mut b, version)
                .ok()?
                .producer_id
        }
        ApiKey::EndTxn => EndTxnRequest::decode(&mut b, version).ok()?.producer_id,
        _ => return None,
    };
    Some(id.0)
}

/// Whether the EndTxn answer `frame` (length prefix included) at `version` says its transaction
/// is over: committed or aborted (error 0), or refused for good (the producer fenced, its epoch
/// or state invalid). A retriable error (the coordinator moving or loading, a concurrent
/// transaction still ending, a timeout) leaves it open: the client sends it again. `None`: not
/// readable.
pub fn end_txn_ended(version: i16, frame: &Bytes) -> Option<bool> {
    let mut body = frame.slice(4.min(frame.len())..);
    ResponseHeader::decode(&mut body, ApiKey::EndTxn.response_header_version(version)).ok()?;
    let resp = EndTxnResponse::decode(&mut body, version).ok()?;
    // REQUEST_TIMED_OUT 7, COORDINATOR_LOAD_IN_PROGRESS 14, COORDINATOR_NOT_AVAILABLE 15,
    // NOT_COORDINATOR 16, CONCURRENT_TRANSACTIONS 51.
    const RETRIABLE: [i16; 5] = [7, 14, 15, 16, 51];
    Some(!RETRIABLE.contains(&resp.error_code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ProducerId, ResponseHeader, TransactionalId};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encode<M: Encodable>(m: &M, version: i16) -> Bytes {
        let mut b = bytes::BytesMut::new();
        m.encode(&mut b, version).expect("encode");
        b.freeze()
    }

    fn end_txn_answer(error_code: i16, version: i16) -> Bytes {
        let mut b = bytes::BytesMut::new();
        b.extend_from_slice(&[0, 0, 0, 0]);
        ResponseHeader::default()
            .encode(&mut b, ApiKey::EndTxn.response_header_version(version))
            .expect("header");
        EndTxnResponse::default()
            .with_error_code(error_code)
            .encode(&mut b, version)
            .expect("body");
        b.freeze()
    }

    #[test]
    fn the_producer_of_an_end_txn_and_an_add_offsets_to_txn_request_is_read() {
        let end = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("t")))
            .with_producer_id(ProducerId(42))
            .with_committed(true);
        for v in [0, 3, 5] {
            assert_eq!(producer_of(ApiKey::EndTxn, v, &encode(&end, v)), Some(42));
        }
        let add = AddOffsetsToTxnRequest::default().with_producer_id(ProducerId(7));
        assert_eq!(
            producer_of(ApiKey::AddOffsetsToTxn, 4, &encode(&add, 4)),
            Some(7)
        );
    }

    #[test]
    fn other_apis_a_brokers_batched_add_partitions_and_garbage_have_no_producer() {
        let add = AddPartitionsToTxnRequest::default();
        assert_eq!(
            producer_of(ApiKey::AddPartitionsToTxn, 4, &encode(&add, 4)),
            None
        );
        assert_eq!(
            producer_of(ApiKey::Metadata, 12, &Bytes::from_static(b"x")),
            None
        );
        assert_eq!(
            producer_of(ApiKey::EndTxn, 3, &Bytes::from_static(&[1, 2])),
            None
        );
    }

    #[test]
    fn an_end_txn_answer_ends_the_transaction_unless_its_error_is_retriable() {
        assert_eq!(end_txn_ended(3, &end_txn_answer(0, 3)), Some(true));
        assert_eq!(
            end_txn_ended(3, &end_txn_answer(90, 3)),
            Some(true),
            "fenced"
        );
        assert_eq!(end_txn_ended(3, &end_txn_answer(51, 3)), Some(false));
        assert_eq!(end_txn_ended(5, &end_txn_answer(16, 5)), Some(false));
        assert_eq!(end_txn_ended(3, &Bytes::from_static(&[0, 0])), None);
    }
}
