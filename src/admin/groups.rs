//! The admin API of the group offset sync (docs/moving-applications.md):
//! `GET /v1/mirrors/{name}/groups` and `GET /v1/mirrors/{name}/offsets/translate`.
//!
//! Owns: parsing those requests (bad input is a 400 with the reason) and rendering the answers.
//! Must not touch: the sync or the offset map (it asks the [`AdminBackend`]).

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde_json::json;

use crate::config::is_valid_topic_name;
use crate::controller::MirrorController;
use crate::sync::groups::policy::{translate, translate_back};

use super::{error_reply, json_reply, AdminBackend};

fn known(ctl: &MirrorController, name: &str) -> bool {
    ctl.records().iter().any(|(r, _)| r.name == name)
}

/// `GET /v1/mirrors/{name}/groups`.
pub(super) fn groups(
    gw: &dyn AdminBackend,
    ctl: &MirrorController,
    name: &str,
) -> Response<Full<Bytes>> {
    if !known(ctl, name) {
        return error_reply(StatusCode::NOT_FOUND, &format!("no mirror named {name:?}"));
    }
    match gw.group_sync(name) {
        Some(status) => json_reply(StatusCode::OK, &status),
        None => error_reply(
            StatusCode::NOT_FOUND,
            &format!(
                "mirror {name:?} has no group offset sync (it has no `source:`, or \
                 `groups.enabled: false`)"
            ),
        ),
    }
}

/// Which way a translation goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToDestination,
    ToSource,
}

struct TranslateQuery {
    topic: String,
    partition: i32,
    offset: i64,
    direction: Direction,
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad percent-encoding in {s:?}"))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

fn parse_query(query: Option<&str>) -> Result<TranslateQuery, String> {
    let (mut topic, mut partition, mut offset, mut direction) = (None, None, None, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v)?;
        match k {
            "topic" => topic = Some(v),
            "partition" => partition = Some(v),
            "offset" => offset = Some(v),
            "direction" => direction = Some(v),
            other => {
                return Err(format!(
                    "unknown parameter {other:?} (expected topic, partition, offset, direction)"
                ))
            }
        }
    }
    let topic = topic.ok_or("missing parameter `topic`")?;
    if !is_valid_topic_name(&topic) {
        return Err(format!("{topic:?} is not a valid topic name"));
    }
    let partition = partition.ok_or("missing parameter `partition`")?;
    let partition = match partition.parse::<i32>() {
        Ok(p) if p >= 0 => p,
        _ => {
            return Err(format!(
                "partition {partition:?} is not a partition number (0 or more)"
            ))
        }
    };
    let offset = offset.ok_or("missing parameter `offset`")?;
    let offset = match offset.parse::<i64>() {
        Ok(o) if o >= 0 => o,
        _ => return Err(format!("offset {offset:?} is not an offset (0 or more)")),
    };
    let direction = match direction.as_deref() {
        None | Some("to_destination") => Direction::ToDestination,
        Some("to_source") => Direction::ToSource,
        Some(d) => {
            return Err(format!(
                "direction {d:?} is not `to_destination` (default) or `to_source`"
            ))
        }
    };
    Ok(TranslateQuery {
        topic,
        partition,
        offset,
        direction,
    })
}

/// `GET /v1/mirrors/{name}/offsets/translate?topic=&partition=&offset=[&direction=]`.
pub(super) fn translate_offset(
    gw: &dyn AdminBackend,
    ctl: &MirrorController,
    name: &str,
    query: Option<&str>,
) -> Response<Full<Bytes>> {
    let q = match parse_query(query) {
        Ok(q) => q,
        Err(e) => return error_reply(StatusCode::BAD_REQUEST, &e),
    };
    if !known(ctl, name) {
        return error_reply(StatusCode::NOT_FOUND, &format!("no mirror named {name:?}"));
    }
    let (topic, partition) = (q.topic.as_str(), q.partition);
    let Some(map) = gw.offset_map(name, topic, partition) else {
        return error_reply(
            StatusCode::NOT_FOUND,
            &format!(
                "mirror {name:?} has no offset map for {topic}-{partition} (not one of its \
                 partitions, not mirrored by the built-in agent, or nothing mirrored yet)"
            ),
        );
    };
    let (next_src, next_dst) = map.next().unwrap_or((0, 0));
    let mirrored_end = json!({ "source": next_src, "destination": next_dst });
    match q.direction {
        Direction::ToDestination => match translate(&map, q.offset) {
            Some(t) => json_reply(
                StatusCode::OK,
                &json!({
                    "mirror": name, "topic": topic, "partition": partition,
                    "direction": "to_destination",
                    "source_offset": q.offset,
                    "destination_offset": t.destination,
                    "not_mirrored": t.not_mirrored,
                    "mirrored_end": mirrored_end,
                }),
            ),
            None => error_reply(
                StatusCode::NOT_FOUND,
                &format!("nothing of {topic}-{partition} is mirrored yet"),
            ),
        },
        Direction::ToSource => match translate_back(&map, q.offset) {
            Some(s) => json_reply(
                StatusCode::OK,
                &json!({
                    "mirror": name, "topic": topic, "partition": partition,
                    "direction": "to_source",
                    "destination_offset": q.offset,
                    "source_offset": s,
                    "mirrored_end": mirrored_end,
                }),
            ),
            None => error_reply(
                StatusCode::NOT_FOUND,
                &format!(
                    "destination offset {} of {topic}-{partition} is not a record the agent \
                     mirrored (mirrored end: destination offset {next_dst})",
                    q.offset
                ),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_query_parses() {
        let q = parse_query(Some("topic=orders&partition=2&offset=17")).unwrap();
        assert_eq!((q.topic.as_str(), q.partition, q.offset), ("orders", 2, 17));
    }

    #[test]
    fn a_missing_offset_is_refused_by_name() {
        let e = parse_query(Some("topic=orders&partition=2")).err().unwrap();
        assert!(e.contains("offset"), "{e}");
    }

    #[test]
    fn a_negative_partition_is_refused() {
        assert!(parse_query(Some("topic=t&partition=-1&offset=0")).is_err());
    }

    #[test]
    fn a_non_numeric_offset_is_refused() {
        assert!(parse_query(Some("topic=t&partition=0&offset=abc")).is_err());
    }

    #[test]
    fn an_unknown_direction_is_refused() {
        assert!(parse_query(Some("topic=t&partition=0&offset=1&direction=up")).is_err());
    }

    #[test]
    fn broken_percent_encoding_is_refused() {
        assert!(parse_query(Some("topic=%zz&partition=0&offset=1")).is_err());
    }
}
