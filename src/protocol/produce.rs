//! Produce-request peeks that do not decode the request.

use super::frame::{read_uvarint, FrameError};

/// The `acks` field of a Produce request, read from the body that follows the request header.
///
/// Layout (v3+): `transactional_id` (nullable string: i16 length before v9, compact
/// unsigned-varint length+1 from v9), then `acks: i16`.
pub fn peek_acks(version: i16, body: &[u8]) -> Result<i16, FrameError> {
    let pos = if version >= 9 {
        let (len_plus_one, p) = read_uvarint(body, 0)?;
        if len_plus_one == 0 {
            p
        } else {
            p + (len_plus_one as usize - 1)
        }
    } else {
        if body.len() < 2 {
            return Err(FrameError::BadHeader("produce request too short"));
        }
        let len = i16::from_be_bytes([body[0], body[1]]);
        if len < -1 {
            return Err(FrameError::BadHeader("negative transactional id length"));
        }
        2 + len.max(0) as usize
    };
    match body.get(pos..pos + 2) {
        Some(b) => Ok(i16::from_be_bytes([b[0], b[1]])),
        None => Err(FrameError::BadHeader("produce request ends before acks")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::ProduceRequest;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encoded(version: i16, acks: i16, txn: Option<&str>) -> Vec<u8> {
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(1000)
            .with_transactional_id(txn.map(|t| StrBytes::from_string(t.to_string()).into()));
        let mut buf = BytesMut::new();
        req.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    #[test]
    fn reads_acks_for_every_produce_version() {
        for version in 3..=13 {
            for acks in [-1i16, 0, 1] {
                for txn in [None, Some("tx-1")] {
                    let body = encoded(version, acks, txn);
                    assert_eq!(peek_acks(version, &body).unwrap(), acks, "v{version} {txn:?}");
                }
            }
        }
    }

    #[test]
    fn truncated_body_is_an_error() {
        assert!(peek_acks(3, &[0]).is_err());
        assert!(peek_acks(9, &[5, b'a']).is_err());
    }
}
