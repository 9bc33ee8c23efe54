//! Kafka's record-level varints: zig-zag signed varints and varlongs, and unsigned LEB128, as
//! the record format v2 uses them inside a batch.
//!
//! Owns: those encodings. Must not touch: anything that gives the numbers a meaning.

pub(crate) fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

pub(crate) fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn uvarint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

pub(crate) fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_uvarint(out, u64::from(zigzag32(v)));
}

pub(crate) fn put_varlong(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, zigzag64(v));
}

pub(crate) fn read_varlong(b: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    None
}

pub(crate) fn read_varint(b: &[u8], pos: &mut usize) -> Option<i32> {
    i32::try_from(read_varlong(b, pos)?).ok()
}

/// `len` varint-prefixed bytes; `Some(None)` for a null (−1) field.
pub(crate) fn read_nullable_bytes<'b>(b: &'b [u8], pos: &mut usize) -> Option<Option<&'b [u8]>> {
    let len = read_varint(b, pos)?;
    if len < 0 {
        return (len == -1).then_some(None);
    }
    let end = pos.checked_add(len as usize).filter(|e| *e <= b.len())?;
    let out = &b[*pos..end];
    *pos = end;
    Some(Some(out))
}
