//! Length-prefixed framing and the request-header peek.
//!
//! Every Kafka frame is `i32 length` followed by `length` bytes. A request body starts with
//! `api_key: i16, api_version: i16, correlation_id: i32, client_id: nullable i16-string`, then,
//! for flexible header versions, a tagged-field section. A response body starts with
//! `correlation_id: i32` (then a tagged-field section for flexible response headers).
//!
//! Frames handed out by [`read_frame`] *include* their 4-byte length prefix so that forwarding
//! is a single write of the same bytes.
//!
//! This is also the gateway's one codec of whole messages: [`decode_response`] and
//! [`encode_response`] (length prefix + response header + body), [`encode_request_behind`] (a
//! request body re-encoded behind the original header bytes), and [`Edited`], a response held
//! raw, decoded at most once and encoded at most once, only when something changed it.
//!
//! Owns: frame boundaries, request-header peeks, message encode/decode. Must not touch: what a
//! message means (the per-API code decides), sockets other than the one [`read_frame`] reads.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why a frame or request header was refused.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix announces more than the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum frame size of {max} bytes")]
    TooLarge { size: u64, max: u32 },
    /// The length prefix is negative.
    #[error("negative frame length {0}")]
    NegativeLength(i32),
    /// The stream ended inside a frame.
    #[error("connection closed inside a frame ({got} of {want} bytes received)")]
    Truncated { got: usize, want: usize },
    /// The frame is too short to hold the fixed part of a request header.
    #[error("frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    /// The api key is not one the gateway knows.
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    /// The request header does not parse.
    #[error("malformed request header: {0}")]
    BadHeader(&'static str),
    /// The response does not parse.
    #[error("malformed response: {0}")]
    BadResponse(String),
    /// Reading from the socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Read one frame (length prefix included) from `reader`, using `buf` as the read buffer.
///
/// Returns `Ok(None)` on a clean end of stream at a frame boundary. Bytes read past the frame
/// stay in `buf` for the next call. Never allocates more than `max + 4` bytes for one frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    max: u32,
) -> Result<Option<Bytes>, FrameError> {
    loop {
        if buf.len() >= 4 {
            let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if len < 0 {
                return Err(FrameError::NegativeLength(len));
            }
            if len as u32 > max {
                return Err(FrameError::TooLarge {
                    size: len as u64,
                    max,
                });
            }
            let total = 4 + len as usize;
            if buf.len() >= total {
                return Ok(Some(buf.split_to(total).freeze()));
            }
            buf.reserve((total - buf.len()).max(8 * 1024));
        } else {
            buf.reserve(64 * 1024);
        }
        let n = reader.read_buf(buf).await?;
        if n == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            let want = if buf.len() >= 4 {
                4 + i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]).max(0) as usize
            } else {
                4
            };
            return Err(FrameError::Truncated {
                got: buf.len(),
                want,
            });
        }
    }
}

/// What the gateway learns from a request header without decoding the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeaderInfo {
    /// The API.
    pub api_key: ApiKey,
    /// The raw api key (same as `api_key as i16`).
    pub api_key_raw: i16,
    /// The request version.
    pub api_version: i16,
    /// The client's correlation id.
    pub correlation_id: i32,
    /// Length of the whole request header, so that `&body[header_len..]` is the request body.
    pub header_len: usize,
    /// Byte range of the client id within the body, if it is not null.
    pub client_id: Option<(usize, usize)>,
}

/// Peek the fixed fields of a request frame body (the frame *without* its length prefix).
pub fn peek_request(body: &[u8]) -> Result<(i16, i16, i32), FrameError> {
    if body.len() < 8 {
        return Err(FrameError::TooShort(body.len()));
    }
    Ok((
        i16::from_be_bytes([body[0], body[1]]),
        i16::from_be_bytes([body[2], body[3]]),
        i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
    ))
}

/// Parse and validate a request header (the frame body, without the length prefix).
///
/// Allocation-free. Checks that the api key is known, that the client id fits, and that a
/// flexible header's tagged-field section is well formed.
pub fn parse_request_header(body: &[u8]) -> Result<RequestHeaderInfo, FrameError> {
    let (key_raw, version, correlation_id) = peek_request(body)?;
    let api_key = ApiKey::try_from(key_raw).map_err(|_| FrameError::UnknownApiKey(key_raw))?;
    if body.len() < 10 {
        return Err(FrameError::TooShort(body.len()));
    }
    let cid_len = i16::from_be_bytes([body[8], body[9]]);
    let mut pos = 10usize;
    let client_id = if cid_len < -1 {
        return Err(FrameError::BadHeader("client id length below -1"));
    } else if cid_len == -1 {
        None
    } else {
        let end = pos + cid_len as usize;
        if end > body.len() {
            return Err(FrameError::BadHeader(
                "client id runs past the end of the frame",
            ));
        }
        let r = (pos, end);
        pos = end;
        Some(r)
    };
    if api_key.request_header_version(version) >= 2 {
        pos = skip_tagged_fields(body, pos)?;
    }
    Ok(RequestHeaderInfo {
        api_key,
        api_key_raw: key_raw,
        api_version: version,
        correlation_id,
        header_len: pos,
        client_id,
    })
}

/// Read an unsigned varint at `pos`; returns the value and the position after it.
pub fn read_uvarint(buf: &[u8], mut pos: usize) -> Result<(u32, usize), FrameError> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let b = *buf
            .get(pos)
            .ok_or(FrameError::BadHeader("varint runs past the end"))?;
        pos += 1;
        value |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((value, pos));
        }
    }
    Err(FrameError::BadHeader("varint longer than 5 bytes"))
}

/// Skip a tagged-field section starting at `pos`; returns the position after it.
pub fn skip_tagged_fields(buf: &[u8], pos: usize) -> Result<usize, FrameError> {
    let (count, mut pos) = read_uvarint(buf, pos)?;
    for _ in 0..count {
        let (_tag, p) = read_uvarint(buf, pos)?;
        let (size, p) = read_uvarint(buf, p)?;
        pos = p
            .checked_add(size as usize)
            .filter(|end| *end <= buf.len())
            .ok_or(FrameError::BadHeader("tagged field runs past the end"))?;
    }
    Ok(pos)
}

/// The correlation id of a response frame body (without the length prefix).
pub fn response_correlation_id(body: &[u8]) -> Result<i32, FrameError> {
    if body.len() < 4 {
        return Err(FrameError::BadResponse(format!(
            "response of {} bytes",
            body.len()
        )));
    }
    Ok(i32::from_be_bytes([body[0], body[1], body[2], body[3]]))
}

/// Prefix `body` with its length, producing a frame.
pub fn frame_from_body(body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(body);
    out.freeze()
}

/// A response as decoded by [`decode_response`]: its header, its body, and how many bytes
/// followed the body in the frame (re-encoding would drop them).
#[derive(Debug, Clone)]
pub struct Decoded<M> {
    pub header: ResponseHeader,
    pub body: M,
    pub trailing: usize,
}

/// Decodes a whole response frame (length prefix included): header at `header_version`, body at
/// `version`. Bytes after the body are counted, not refused (see [`Decoded::trailing`]).
pub fn decode_response<M: Decodable>(
    frame: &Bytes,
    header_version: i16,
    version: i16,
) -> Result<Decoded<M>, FrameError> {
    #[cfg(test)]
    counts::bump(counts::Event::ResponseDecode);
    if frame.len() < 8 {
        return Err(FrameError::BadResponse(format!(
            "response of {} bytes",
            frame.len()
        )));
    }
    let mut body = frame.slice(4..);
    let header = ResponseHeader::decode(&mut body, header_version).map_err(bad_response)?;
    let msg = M::decode(&mut body, version).map_err(bad_response)?;
    Ok(Decoded {
        header,
        body: msg,
        trailing: body.len(),
    })
}

fn bad_response(e: impl std::fmt::Display) -> FrameError {
    FrameError::BadResponse(e.to_string())
}

/// Encodes `header` (at `header_version`) and `msg` (at `version`) into a whole frame, length
/// prefix included. `size_hint`: the expected size, to allocate once.
pub fn encode_response<M: Encodable>(
    header: &ResponseHeader,
    header_version: i16,
    msg: &M,
    version: i16,
    size_hint: usize,
) -> Result<Bytes, FrameError> {
    #[cfg(test)]
    counts::bump(counts::Event::ResponseEncode);
    let mut out = BytesMut::with_capacity(size_hint + 16);
    out.put_i32(0);
    header
        .encode(&mut out, header_version)
        .map_err(bad_response)?;
    msg.encode(&mut out, version).map_err(bad_response)?;
    let len = i32::try_from(out.len() - 4)
        .map_err(|_| FrameError::BadResponse("larger than 2 GiB".into()))?;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

/// The gateway's own answer to request `api`/`version`/`correlation_id`: a whole frame.
pub fn answer<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    msg: &M,
    size_hint: usize,
) -> Result<Bytes, FrameError> {
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    encode_response(
        &header,
        api.response_header_version(version),
        msg,
        version,
        size_hint,
    )
}

/// Encodes `msg` (at `version`) behind `header_bytes` (a request header exactly as the client
/// sent it) into a whole request frame, length prefix included.
pub fn encode_request_behind<M: Encodable>(
    header_bytes: &[u8],
    msg: &M,
    version: i16,
    size_hint: usize,
) -> Result<Bytes, FrameError> {
    let mut out = BytesMut::with_capacity(size_hint + 16);
    out.put_i32(0);
    out.extend_from_slice(header_bytes);
    msg.encode(&mut out, version).map_err(bad_response)?;
    let len = i32::try_from(out.len() - 4)
        .map_err(|_| FrameError::BadResponse("request larger than 2 GiB".into()))?;
    out[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

/// A response on its way to the client: the bytes the broker sent, decoded at most once (on the
/// first [`Edited::get`] or [`Edited::edit`]), encoded at most once (by [`Edited::into_frame`],
/// only after an [`Edited::edit`]). Every step that reads or changes the response shares it.
#[derive(Debug)]
pub struct Edited<M> {
    raw: Bytes,
    header_version: i16,
    version: i16,
    decoded: Option<Result<Decoded<M>, String>>,
    dirty: bool,
}

impl<M: Decodable + Encodable> Edited<M> {
    /// The broker's frame (length prefix included) of a response at `version` whose header is at
    /// `header_version`. Nothing is decoded yet.
    pub fn new(raw: Bytes, header_version: i16, version: i16) -> Self {
        Edited {
            raw,
            header_version,
            version,
            decoded: None,
            dirty: false,
        }
    }

    /// The bytes as the broker sent them.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The decoded response (decoded now if this is the first look).
    pub fn get(&mut self) -> Result<&Decoded<M>, FrameError> {
        if self.decoded.is_none() {
            let d = decode_response(&self.raw, self.header_version, self.version);
            self.decoded = Some(d.map_err(|e| e.to_string()));
        }
        match &self.decoded {
            Some(Ok(d)) => Ok(d),
            Some(Err(e)) => Err(FrameError::BadResponse(e.clone())),
            None => Err(FrameError::BadResponse("not decoded".into())),
        }
    }

    /// The decoded body, to change: the response will be encoded again.
    pub fn edit(&mut self) -> Result<&mut M, FrameError> {
        self.get()?;
        match &mut self.decoded {
            Some(Ok(d)) => {
                self.dirty = true;
                Ok(&mut d.body)
            }
            _ => Err(FrameError::BadResponse("not decoded".into())),
        }
    }

    /// Lets `f` change the decoded body; the response is encoded again only if `f` says it
    /// changed something (returns true).
    pub fn edit_with(&mut self, f: impl FnOnce(&mut M) -> bool) -> Result<bool, FrameError> {
        self.get()?;
        match &mut self.decoded {
            Some(Ok(d)) => {
                let changed = f(&mut d.body);
                self.dirty |= changed;
                Ok(changed)
            }
            _ => Err(FrameError::BadResponse("not decoded".into())),
        }
    }

    /// Whether some step changed the response.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// The frame to send: the broker's bytes when nothing changed, else the one encode.
    pub fn into_frame(self) -> Result<Bytes, FrameError> {
        match (self.dirty, self.decoded) {
            (true, Some(Ok(d))) => encode_response(
                &d.header,
                self.header_version,
                &d.body,
                self.version,
                self.raw.len() + 64,
            ),
            _ => Ok(self.raw),
        }
    }
}

/// Test-only counters of how often one thread walked or decoded what (the walk counts of
/// docs/architecture.md's Produce walk-through are asserted with them). Not compiled into the
/// gateway.
#[cfg(test)]
pub mod counts {
    use std::cell::Cell;

    /// What is counted.
    #[derive(Debug, Clone, Copy)]
    pub enum Event {
        /// A full walk of a Produce request body (a `ProduceWalker` built).
        BodyWalk,
        /// A walk over one partition's record batches (a `BatchWalker` built on produce data).
        BatchWalk,
        /// A full decode of a Produce request (kafka-protocol).
        RequestDecode,
        /// A full decode of a response (kafka-protocol).
        ResponseDecode,
        /// An encode of a response (kafka-protocol).
        ResponseEncode,
    }

    thread_local! {
        static COUNTS: [Cell<u32>; 5] = const { [const { Cell::new(0) }; 5] };
    }

    /// Count one `event` on this thread.
    pub fn bump(event: Event) {
        COUNTS.with(|c| c[event as usize].set(c[event as usize].get() + 1));
    }

    /// This thread's counts since the last call, in [`Event`] order; resets them.
    pub fn take() -> [u32; 5] {
        COUNTS.with(|c| std::array::from_fn(|i| c[i].replace(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(key: i16, version: i16, corr: i32, client: Option<&str>, tagged: bool) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&key.to_be_bytes());
        v.extend_from_slice(&version.to_be_bytes());
        v.extend_from_slice(&corr.to_be_bytes());
        match client {
            Some(c) => {
                v.extend_from_slice(&(c.len() as i16).to_be_bytes());
                v.extend_from_slice(c.as_bytes());
            }
            None => v.extend_from_slice(&(-1i16).to_be_bytes()),
        }
        if tagged {
            v.push(0);
        }
        v
    }

    #[test]
    fn peeks_key_version_and_correlation_id_of_a_flexible_header() {
        let body = header(3, 12, 77, Some("cli"), true);
        let h = parse_request_header(&body).unwrap();
        assert_eq!(h.api_key, ApiKey::Metadata);
        assert_eq!(h.api_version, 12);
        assert_eq!(h.correlation_id, 77);
        assert_eq!(h.header_len, body.len());
        assert_eq!(h.client_id, Some((10, 13)));
    }

    #[test]
    fn non_flexible_header_has_no_tagged_section() {
        let body = header(0, 3, 1, None, false);
        let h = parse_request_header(&body).unwrap();
        assert_eq!(h.header_len, 10);
        assert_eq!(h.client_id, None);
    }

    #[test]
    fn unknown_api_key_is_refused() {
        let body = header(9999, 0, 1, None, false);
        assert!(matches!(
            parse_request_header(&body),
            Err(FrameError::UnknownApiKey(9999))
        ));
    }

    #[test]
    fn client_id_past_the_end_is_refused() {
        let mut body = header(18, 0, 1, None, false);
        body[8..10].copy_from_slice(&100i16.to_be_bytes());
        assert!(matches!(
            parse_request_header(&body),
            Err(FrameError::BadHeader(_))
        ));
    }

    #[test]
    fn short_frame_is_refused() {
        assert!(matches!(
            parse_request_header(&[0, 1, 2]),
            Err(FrameError::TooShort(3))
        ));
    }

    #[test]
    fn truncated_tagged_section_is_refused() {
        let mut body = header(3, 12, 1, None, false);
        body.extend_from_slice(&[1, 0, 9, 1]); // one tagged field claiming 9 bytes, 1 present
        assert!(matches!(
            parse_request_header(&body),
            Err(FrameError::BadHeader(_))
        ));
    }

    #[tokio::test]
    async fn read_frame_splits_frames_and_keeps_the_rest() {
        let mut data = Vec::new();
        data.extend_from_slice(&3i32.to_be_bytes());
        data.extend_from_slice(b"abc");
        data.extend_from_slice(&1i32.to_be_bytes());
        data.extend_from_slice(b"z");
        let mut r = &data[..];
        let mut buf = BytesMut::new();
        let f1 = read_frame(&mut r, &mut buf, 1024).await.unwrap().unwrap();
        assert_eq!(&f1[..], &data[..7]);
        let f2 = read_frame(&mut r, &mut buf, 1024).await.unwrap().unwrap();
        assert_eq!(&f2[4..], b"z");
        assert!(read_frame(&mut r, &mut buf, 1024).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn read_frame_refuses_an_oversized_length_before_reading_it() {
        let data = 2_000_000i32.to_be_bytes();
        let mut r = &data[..];
        let mut buf = BytesMut::new();
        let err = read_frame(&mut r, &mut buf, 1_000_000).await.unwrap_err();
        assert!(matches!(
            err,
            FrameError::TooLarge {
                size: 2_000_000,
                max: 1_000_000
            }
        ));
    }

    #[tokio::test]
    async fn read_frame_reports_a_truncated_frame() {
        let mut data = 10i32.to_be_bytes().to_vec();
        data.extend_from_slice(b"abc");
        let mut r = &data[..];
        let mut buf = BytesMut::new();
        let err = read_frame(&mut r, &mut buf, 1024).await.unwrap_err();
        assert!(matches!(err, FrameError::Truncated { got: 7, want: 14 }));
    }

    #[tokio::test]
    async fn read_frame_refuses_a_negative_length() {
        let data = (-5i32).to_be_bytes();
        let mut r = &data[..];
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_frame(&mut r, &mut buf, 1024).await,
            Err(FrameError::NegativeLength(-5))
        ));
    }

    proptest::proptest! {
        #[test]
        fn header_parse_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = parse_request_header(&bytes);
        }

        #[test]
        fn header_peek_reads_what_was_written(key in 0i16..80, version in 0i16..20, corr in proptest::prelude::any::<i32>(),
                                              client in proptest::option::of("[a-z]{0,20}")) {
            let flexible = ApiKey::try_from(key).map(|k| k.request_header_version(version) >= 2);
            if let Ok(flexible) = flexible {
                let body = header(key, version, corr, client.as_deref(), flexible);
                let h = parse_request_header(&body).unwrap();
                proptest::prop_assert_eq!(h.api_key_raw, key);
                proptest::prop_assert_eq!(h.api_version, version);
                proptest::prop_assert_eq!(h.correlation_id, corr);
                proptest::prop_assert_eq!(h.header_len, body.len());
            }
        }
    }
}
