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
    fn rejects_truncated_and_overlong() {
        assert_eq!(Cursor::new(&[0x80]).u64(), None);
        assert_eq!(Cursor::new(&[0xff; 11]).u64(), None);
        assert_eq!(
            Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).u64(),
            None
        );
    }
}
