//! LEB128 variable-length integers and zigzag signed encoding.

/// Appends `v` as unsigned LEB128.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a signed value zigzag-encoded (small magnitudes of either sign stay short).
#[inline]
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    put_u64(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// A cursor over encoded bytes; every read fails cleanly on truncated or overlong input.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    #[inline(always)]
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    #[inline(always)]
    pub fn u64(&mut self) -> Option<u64> {
        // Fast paths: most values (deltas, residuals of gathers within a few MB) take one to
        // three bytes.
        let b = self.bytes;
        let p = self.pos;
        if let Some(&b0) = b.get(p) {
            if b0 < 0x80 {
                self.pos = p + 1;
                return Some(u64::from(b0));
            }
            if let (Some(&b1), Some(&b2)) = (b.get(p + 1), b.get(p + 2)) {
                let v = u64::from(b0 & 0x7f) | u64::from(b1 & 0x7f) << 7;
                if b1 < 0x80 {
                    self.pos = p + 2;
                    return Some(v);
                }
                if b2 < 0x80 {
                    self.pos = p + 3;
                    return Some(v | u64::from(b2) << 14);
                }
            }
        }
        self.u64_slow()
    }

    #[inline(never)]
    fn u64_slow(&mut self) -> Option<u64> {
        // Longer values: up to 8 bytes (56 bits) at once from one little-endian word. The
        // first byte without a continuation bit ends the value; the 7-bit groups are then
        // packed together in three shift-and-mask steps.
        let p = self.pos;
        if let Some(w) = self.bytes.get(p..p + 8) {
            let word = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            let ends = !word & 0x8080_8080_8080_8080;
            if ends != 0 {
                let len = (ends.trailing_zeros() as usize + 1) / 8;
                let keep = if len == 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * len)) - 1
                };
                let mut x = word & keep & 0x7f7f_7f7f_7f7f_7f7f;
                x = ((x & 0x7f00_7f00_7f00_7f00) >> 1) | (x & 0x007f_007f_007f_007f);
                x = ((x & 0x3fff_0000_3fff_0000) >> 2) | (x & 0x0000_3fff_0000_3fff);
                x = ((x & 0x0fff_ffff_0000_0000) >> 4) | (x & 0x0000_0000_0fff_ffff);
                self.pos = p + len;
                return Some(x);
            }
        }
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                // The tenth byte may only carry the top bit.
                if shift == 63 && b > 1 {
                    return None;
                }
                return Some(v);
            }
        }
        None
    }

    #[inline(always)]
    pub fn i64(&mut self) -> Option<i64> {
        let z = self.u64()?;
        Some(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_extremes() {
        let mut out = Vec::new();
        let us = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        let is = [0i64, -1, 1, -64, 64, i64::MIN, i64::MAX];
        for &u in &us {
            put_u64(&mut out, u);
        }
        for &i in &is {
            put_i64(&mut out, i);
        }
        let mut c = Cursor::new(&out);
        for &u in &us {
            assert_eq!(c.u64(), Some(u));
        }
        for &i in &is {
            assert_eq!(c.i64(), Some(i));
        }
        assert!(c.is_empty());
        assert_eq!(c.u8(), None);
    }

    #[test]
    fn every_length_decodes_with_and_without_a_full_word_after_it() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for bits in 0..=64u32 {
            for _ in 0..20 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = if bits == 0 {
                    0
                } else {
                    (x >> (64 - bits)) | (1u64 << (bits - 1))
                };
                // Then 0..10 trailing bytes, so values end both inside a readable word and
                // near the end of the buffer.
                for tail in 0..10 {
                    let mut out = Vec::new();
                    put_u64(&mut out, v);
                    let n = out.len();
                    out.extend(std::iter::repeat_n(0x01u8, tail));
                    let mut c = Cursor::new(&out);
                    assert_eq!(c.u64(), Some(v), "{v:#x} tail {tail}");
                    assert_eq!(c.position(), n);
                }
            }
        }
    }

    #[test]
    fn rejects_truncated_and_overlong() {
        assert_eq!(Cursor::new(&[0x80]).u64(), None);
        assert_eq!(Cursor::new(&[0xff; 11]).u64(), None);
        assert_eq!(
            Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).u64(),
            None
        );
    }
}
