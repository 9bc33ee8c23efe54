//! Per-partition enforcement in Produce requests and responses. Byte 0: mode (0 filter a
//! request, 1 merge rejections into a response, 2 turn acknowledgements into errors); byte 1:
//! version (3..=13 mostly); byte 2: which partitions are rejected; the rest is the request or
//! response body. Never panics; a rewritten request keeps exactly the accepted partitions and
//! the synthesized / merged responses decode. The gateway's Produce exchange runs the same steps
//! on one `ProduceView` and one `Edited` response: each mode also checks that those give the
//! same bytes as the whole-frame functions.
#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::ProduceResponse;
use libfuzzer_sys::fuzz_target;
use mirrorgate::protocol::enforce::{
    add_rejections, all_rejected_response, check_readback, check_request, filter_produce,
    mark_partition_errors, merge_rejections, rejected_partition, rewrite_partition_errors,
    trim_request, ProduceDecision, RejectedPartition, Rejection,
};
use mirrorgate::protocol::frame::{parse_request_header, Edited};
use mirrorgate::protocol::produce::{
    BatchQuestions, ProducePartition, ProduceView, ProduceWalker, TopicRef,
};
use mirrorgate_fuzz::{framed, Choices};

fn request_frame(version: i16, body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i32(0);
    b.put_i16(ApiKey::Produce as i16);
    b.put_i16(version);
    b.put_i32(7);
    b.put_i16(-1); // null client id
    if ApiKey::Produce.request_header_version(version) >= 2 {
        b.put_u8(0); // no tagged fields
    }
    b.extend_from_slice(body);
    let len = (b.len() - 4) as i32;
    b[0..4].copy_from_slice(&len.to_be_bytes());
    b.freeze()
}

fn rejects(seed: u8, topic: TopicRef<'_>, partition: i32) -> bool {
    let t = match topic {
        TopicRef::Name(n) => n.len() as u8,
        TopicRef::Id(id) => id.as_bytes()[0],
    };
    (partition as u8 ^ t ^ seed) % 3 == 0
}

fn decoded(frame: &Bytes, version: i16) {
    let r = rewrite_partition_errors(frame, version, &mut |_, _, _, _, _| None);
    assert!(
        matches!(r, Ok(None)),
        "synthesized response does not decode: {r:?}"
    );
}

/// The exchange's request steps: one view, the pieces of enforcement. Same result as
/// `filter_produce` (None: the view or a step refused the request).
fn by_view(frame: &Bytes, header_len: usize, version: i16, seed: u8) -> Option<ProduceDecision> {
    let start = check_request(frame, header_len, version).ok()?;
    let view = ProduceView::build(
        version,
        &frame[start..],
        &mut |t| {
            let name = match t {
                TopicRef::Name(n) => Some(std::borrow::Cow::Borrowed(n)),
                TopicRef::Id(_) => None,
            };
            (name, true)
        },
        &|_| BatchQuestions::default(),
    )
    .ok()?;
    if view.error.is_some() {
        return None;
    }
    let mut rejected = Vec::new();
    let mut at = Vec::new();
    for (i, p) in view.partitions.iter().enumerate() {
        let topic = view.topic_of(p).topic;
        if rejects(seed, topic, p.partition) {
            let rej = Rejection::new(87, "mirror topic is read-only");
            rejected.push(rejected_partition(topic, p.partition, rej));
            at.push(i);
        }
    }
    let total = view.partitions.len();
    Some(if rejected.is_empty() {
        ProduceDecision::Forward
    } else if rejected.len() == total {
        let response = if view.acks == 0 {
            None
        } else {
            Some(all_rejected_response(version, 7, &rejected).ok()?)
        };
        ProduceDecision::AllRejected { response, rejected }
    } else {
        let frame = trim_request(frame, start, version, &at, total).ok()?;
        ProduceDecision::Rewritten { frame, rejected }
    })
}

/// The exchange's response: decoded once, checked, edited, encoded once.
fn edited(
    frame: &Bytes,
    version: i16,
    edit: impl FnOnce(&mut ProduceResponse) -> bool,
) -> Option<Bytes> {
    let hv = ApiKey::Produce.response_header_version(version);
    let mut e = Edited::<ProduceResponse>::new(frame.clone(), hv, version);
    let d = e.get().ok()?;
    check_readback(frame, version, d).ok()?;
    e.edit_with(edit).ok()?;
    e.into_frame().ok()
}

fn rejected_list(seed: u8) -> Vec<RejectedPartition> {
    (0..(seed % 4) as i32)
        .map(|i| RejectedPartition {
            topic: if i % 2 == 0 {
                "mirror.a".into()
            } else {
                String::new()
            },
            topic_id: uuid::Uuid::from_u128(i as u128 + 1),
            partition: i,
            error_code: 87,
            message: "read-only".into(),
            log_start_offset: -1,
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let mut c = Choices::new(data);
    let mode = c.byte();
    let version = (c.byte() % 16) as i16;
    let seed = c.byte();
    let body = c.rest();
    match mode % 3 {
        0 => {
            let frame = request_frame(version, body);
            let Ok(info) = parse_request_header(&frame[4..]) else {
                return;
            };
            let mut decide = |pp: &ProducePartition<'_>| {
                rejects(seed, pp.topic, pp.partition)
                    .then(|| Rejection::new(87, "mirror topic is read-only"))
            };
            let filtered = filter_produce(&frame, info.header_len, version, 7, &mut decide);
            let viewed = by_view(&frame, info.header_len, version, seed);
            assert_eq!(
                filtered.as_ref().ok(),
                viewed.as_ref(),
                "the view's steps and filter_produce disagree"
            );
            let Ok(decision) = filtered else {
                return;
            };
            match decision {
                ProduceDecision::Forward => {}
                ProduceDecision::Rewritten {
                    frame: new,
                    rejected,
                } => {
                    assert!(!rejected.is_empty());
                    let len = i32::from_be_bytes([new[0], new[1], new[2], new[3]]);
                    assert_eq!(len as usize, new.len() - 4);
                    let info2 = parse_request_header(&new[4..]).expect("header kept");
                    assert_eq!(info2.header_len, info.header_len);
                    assert_eq!(&new[4..4 + info.header_len], &frame[4..4 + info.header_len]);
                    let kept: Vec<_> = ProduceWalker::new(version, &new[4 + info.header_len..])
                        .expect("rewritten request walks")
                        .map(|p| p.expect("rewritten partition walks"))
                        .collect();
                    assert!(!kept.is_empty());
                    for p in &kept {
                        assert!(
                            !rejects(seed, p.topic, p.partition),
                            "rejected partition kept"
                        );
                    }
                    let total = ProduceWalker::new(version, &frame[4 + info.header_len..])
                        .expect("original walks")
                        .count();
                    assert_eq!(kept.len() + rejected.len(), total);
                    let again = filter_produce(&new, info.header_len, version, 7, &mut decide)
                        .expect("rewritten request filters");
                    assert_eq!(again, ProduceDecision::Forward);
                }
                ProduceDecision::AllRejected { response, rejected } => {
                    assert!(!rejected.is_empty());
                    let acks = ProduceWalker::new(version, body)
                        .expect("walked once")
                        .acks();
                    assert_eq!(response.is_some(), acks != 0);
                    if let Some(r) = response {
                        decoded(&r, version);
                    }
                }
            }
        }
        1 => {
            let frame = framed(body);
            let rejected = rejected_list(seed);
            let merged = merge_rejections(&frame, version, &rejected).ok();
            let by_edit = edited(&frame, version, |r| {
                add_rejections(r, version, &rejected);
                true
            });
            assert_eq!(
                merged, by_edit,
                "Edited merge and merge_rejections disagree"
            );
            if let Some(merged) = merged {
                decoded(&merged, version);
            }
        }
        _ => {
            let frame = framed(body);
            let mut change = |_: &str, _: uuid::Uuid, p: i32, code: i16, _: i64| {
                (code == 0 && (p as u8 ^ seed) % 2 == 0).then(|| (45, "duplicate".to_string()))
            };
            let whole = rewrite_partition_errors(&frame, version, &mut change);
            let by_edit = edited(&frame, version, |r| {
                mark_partition_errors(r, version, &mut change)
            });
            match &whole {
                Ok(Some(new)) => assert_eq!(Some(new), by_edit.as_ref()),
                Ok(None) => assert_eq!(Some(&frame), by_edit.as_ref()),
                Err(_) => assert_eq!(None, by_edit),
            }
            if let Ok(Some(new)) = whole {
                let again = rewrite_partition_errors(&new, version, &mut change)
                    .expect("rewritten response decodes");
                assert!(again.is_none(), "second pass changed the response");
            }
        }
    }
});
