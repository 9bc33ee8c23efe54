//! Bounded decompression of the records section of a small compressed batch, for recognising a
//! barrier that a broker recompressed (review F7: a topic or broker `compression.type` of gzip,
//! snappy, lz4 or zstd makes the broker re-encode the gateway's uncompressed barrier batch).
//!
//! Owns: turning the bytes after a batch header into the bytes of its records, for the four
//! codecs Kafka defines, with a hard limit on the output, and a way to stop after a prefix.
//! Must not touch: what the records mean (the caller parses them), batch headers, I/O.
//!
//! Framing, as Kafka writes it (read in the codecs' documentation; nothing copied):
//! - gzip: one RFC 1952 member (Java's `GZIPOutputStream`).
//! - snappy: the xerial stream framing — a 16-byte header (`\x82SNAPPY\0`, version 1,
//!   compatible version 1), then blocks of a 4-byte big-endian length and a raw snappy block.
//!   A stream without that header is read as one raw snappy block, as Kafka's reader does.
//! - lz4: one LZ4 frame (Kafka's own block stream writes a standard frame since magic 1).
//! - zstd: one zstd frame.
//!
//! Never panics and never allocates more than the limit (plus the decoders' own state) on any
//! input: output beyond the limit, a truncated stream or garbage is `None`.

use std::io::Read;

use super::batch::Compression;

/// Upper bound on the decompressed bytes [`Decompressed::finish`] accepts.
pub const MAX_DECOMPRESSED: usize = 64 * 1024;

const SNAPPY_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const SNAPPY_HEADER_LEN: usize = 16;

/// A decompressing reader over one compressed records section, read at most up to its limit
/// ([`MAX_DECOMPRESSED`] bytes unless made with [`Decompressed::within`]).
pub struct Decompressed<'a> {
    reader: Box<dyn Read + 'a>,
    out: Vec<u8>,
    limit: usize,
}

impl<'a> Decompressed<'a> {
    /// A reader for `data` compressed with `codec`; `None` for no or an unknown codec, or when
    /// the stream's header is already unreadable.
    pub fn new(codec: Compression, data: &'a [u8]) -> Option<Decompressed<'a>> {
        Self::within(codec, data, MAX_DECOMPRESSED)
    }

    /// [`Decompressed::new`] with another limit on the output (`limit` bytes): for whole
    /// batches whose records are copied one by one (`protocol::records`).
    pub fn within(codec: Compression, data: &'a [u8], limit: usize) -> Option<Decompressed<'a>> {
        let reader: Box<dyn Read + 'a> = match codec {
            Compression::Gzip => Box::new(flate2::read::GzDecoder::new(data)),
            Compression::Lz4 => Box::new(lz4::Decoder::new(data).ok()?),
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(data).ok()?),
            Compression::Snappy => Box::new(std::io::Cursor::new(snappy(data, limit)?)),
            Compression::None | Compression::Unknown(_) => return None,
        };
        Some(Decompressed {
            reader,
            out: Vec::new(),
            limit,
        })
    }

    /// The first `n` decompressed bytes (fewer when the stream is shorter), `None` when the
    /// stream cannot be read that far.
    pub fn prefix(&mut self, n: usize) -> Option<&[u8]> {
        let n = n.min(self.limit);
        if self.out.len() < n {
            let want = (n - self.out.len()) as u64;
            self.out.reserve(n - self.out.len());
            (&mut self.reader)
                .take(want)
                .read_to_end(&mut self.out)
                .ok()?;
        }
        Some(&self.out[..n.min(self.out.len())])
    }

    /// All decompressed bytes: `None` when the stream is corrupt, truncated, or decompresses to
    /// more than the limit (decoding stops right after it).
    pub fn finish(mut self) -> Option<Vec<u8>> {
        let limit = self.limit.saturating_add(1);
        let want = limit.saturating_sub(self.out.len()) as u64;
        (&mut self.reader)
            .take(want)
            .read_to_end(&mut self.out)
            .ok()?;
        if self.out.len() > self.limit {
            return None;
        }
        Some(self.out)
    }
}

/// Snappy in Kafka's (xerial) framing, or one raw block without it. Every block's declared
/// length is checked against the limit before anything is allocated for it.
fn snappy(data: &[u8], limit: usize) -> Option<Vec<u8>> {
    let mut dec = snap::raw::Decoder::new();
    let mut out = Vec::new();
    let mut push = |block: &[u8], out: &mut Vec<u8>| -> Option<()> {
        let len = snap::raw::decompress_len(block).ok()?;
        let end = out.len().checked_add(len)?;
        if end > limit {
            return None;
        }
        let start = out.len();
        out.resize(end, 0);
        let n = dec.decompress(block, &mut out[start..]).ok()?;
        out.truncate(start + n);
        Some(())
    };
    if data.len() < SNAPPY_HEADER_LEN || data[..SNAPPY_MAGIC.len()] != SNAPPY_MAGIC[..] {
        push(data, &mut out)?;
        return Some(out);
    }
    let mut rest = &data[SNAPPY_HEADER_LEN..];
    while !rest.is_empty() {
        let len_bytes: [u8; 4] = rest.get(..4)?.try_into().ok()?;
        let len = u32::from_be_bytes(len_bytes) as usize;
        let block = rest.get(4..4usize.checked_add(len)?)?;
        push(block, &mut out)?;
        rest = &rest[4 + len..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    use proptest::prelude::*;

    fn compress(codec: Compression, plain: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        let fill = |b: &mut BytesMut| {
            b.extend_from_slice(plain);
            Ok(())
        };
        match codec {
            Compression::Gzip => Gzip::compress(&mut out, fill),
            Compression::Snappy => Snappy::compress(&mut out, fill),
            Compression::Lz4 => Lz4::compress(&mut out, fill),
            Compression::Zstd => Zstd::compress(&mut out, fill),
            _ => unreachable!(),
        }
        .unwrap();
        out.to_vec()
    }

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn every_codec_round_trips_and_a_prefix_can_be_read_first() {
        let plain: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for codec in CODECS {
            let c = compress(codec, &plain);
            let mut d = Decompressed::new(codec, &c).unwrap();
            assert_eq!(d.prefix(46).unwrap(), &plain[..46], "{codec:?}");
            assert_eq!(d.prefix(10).unwrap(), &plain[..10], "{codec:?}");
            assert_eq!(d.finish().unwrap(), plain, "{codec:?}");
            let d = Decompressed::new(codec, &c).unwrap();
            assert_eq!(d.finish().unwrap(), plain, "{codec:?}");
        }
    }

    #[test]
    fn raw_snappy_without_the_xerial_header_is_read() {
        let plain = b"a raw snappy block, as an old producer may have written it".repeat(3);
        let raw = snap::raw::Encoder::new().compress_vec(&plain).unwrap();
        let d = Decompressed::new(Compression::Snappy, &raw).unwrap();
        assert_eq!(d.finish().unwrap(), plain);
    }

    #[test]
    fn output_beyond_the_limit_is_refused_without_decoding_it_all() {
        // Highly compressible: a small input that expands far past the limit.
        let plain = vec![0u8; 4 * MAX_DECOMPRESSED];
        for codec in CODECS {
            let c = compress(codec, &plain);
            assert!(c.len() < MAX_DECOMPRESSED, "{codec:?}: {} bytes", c.len());
            // Snappy declares each block's length up front: refused before decoding anything.
            let Some(mut d) = Decompressed::new(codec, &c) else {
                assert_eq!(codec, Compression::Snappy);
                continue;
            };
            assert_eq!(d.prefix(8).unwrap(), &[0u8; 8], "{codec:?}");
            assert!(d.finish().is_none(), "{codec:?}");
        }
        // Exactly at the limit is fine.
        let plain = vec![1u8; MAX_DECOMPRESSED];
        for codec in CODECS {
            let c = compress(codec, &plain);
            let d = Decompressed::new(codec, &c).unwrap();
            assert_eq!(
                d.finish().map(|v| v.len()),
                Some(MAX_DECOMPRESSED),
                "{codec:?}"
            );
        }
    }

    #[test]
    fn a_truncated_stream_never_gives_more_than_it_holds() {
        // A cut stream is refused or gives a prefix of the data (an lz4 frame cut in its end
        // mark still holds every byte): never other bytes, never a panic.
        let plain = b"__mirrorgate_barrier and a value that is long enough".repeat(4);
        for codec in CODECS {
            let c = compress(codec, &plain);
            for cut in 0..c.len() {
                if let Some(got) =
                    Decompressed::new(codec, &c[..cut]).and_then(Decompressed::finish)
                {
                    assert!(plain.starts_with(&got), "{codec:?} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn no_codec_is_not_decompressed() {
        assert!(Decompressed::new(Compression::None, b"x").is_none());
        assert!(Decompressed::new(Compression::Unknown(5), b"x").is_none());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(codec in 1u8..=4, bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let codec = CODECS[codec as usize - 1];
            if let Some(mut d) = Decompressed::new(codec, &bytes) {
                let _ = d.prefix(46);
                if let Some(out) = d.finish() {
                    prop_assert!(out.len() <= MAX_DECOMPRESSED);
                }
            }
        }

        #[test]
        fn mutated_streams_never_panic(codec in 1u8..=4, at in any::<prop::sample::Index>(), xor in 1u8..=255) {
            let codec = CODECS[codec as usize - 1];
            let mut c = compress(codec, &b"__mirrorgate_barrier MGBR value bytes".repeat(5));
            let i = at.index(c.len());
            c[i] ^= xor;
            let got = Decompressed::new(codec, &c).and_then(Decompressed::finish);
            prop_assert!(got.is_none_or(|out| out.len() <= MAX_DECOMPRESSED));
        }
    }
}
