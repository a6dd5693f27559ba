//! A multiplicative hasher for instruction-address keys: std's SipHash costs more than the
//! rest of the per-access work, and these keys are not attacker-controlled.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct Fast(u64);

impl Hasher for Fast {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

pub type Build = BuildHasherDefault<Fast>;

/// A hasher for keys whose parts sit in their high bits (`page << 32 | n`): [`Fast`]'s
/// multiply carries a key's low bits up but never its high bits down, and the table picks
/// buckets by the low bits, so all pages of one `n` fell in one bucket. This one ends
/// [`Fast`] with MurmurHash3's 64-bit finalizer, which mixes every bit into every other.
#[derive(Default, Clone, Copy)]
pub struct Mixed(Fast);

impl Hasher for Mixed {
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0.finish();
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0.write_u64(v);
    }
}

pub type MixedBuild = BuildHasherDefault<Mixed>;
