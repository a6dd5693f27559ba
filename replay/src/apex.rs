//! Apex-MAP (Strohmaier and Shan, 2005): a synthetic access stream with two locality knobs.
//!
//! The stream reads an array of `M` words in blocks of `L` contiguous words (spatial locality);
//! each block starts at `floor(r^(1/K) * (M/L - 1)) * L` with `r` uniform in [0, 1) (temporal
//! locality: `K = 1` spreads the starts uniformly, small `K` crowds them towards the start of the
//! array, so the same words come back often). The replay kernel reads the blocks and sums them;
//! `mgbench analyze` and `synth --apex` fit (L, K) to an application's locality scores.

use serde::{Deserialize, Serialize};

/// Default memory size in words: 2^24 words = 128 MiB, beyond every last-level cache.
pub const DEFAULT_M: u64 = 1 << 24;
/// Default seed of the block-start generator.
pub const DEFAULT_SEED: u64 = 1;
/// Words a run reads by default: `count` defaults to this divided by L (at least 1).
pub const DEFAULT_WORDS_PER_RUN: u64 = 1 << 23;

/// SplitMix64, the project's seedable generator (the same sequence on every platform).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Apex-MAP parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ApexParams {
    /// Memory size in words.
    pub m: u64,
    /// Block length in words (1 <= L <= M).
    pub l: u64,
    /// Locality exponent in (0, 1].
    pub k: f64,
}

impl ApexParams {
    /// Start (word index) of a block for a uniform `r` in [0, 1).
    #[inline]
    pub fn block_start(&self, r: f64) -> u64 {
        let blocks = (self.m / self.l.max(1)).max(1);
        let x = r.powf(1.0 / self.k.max(1e-9));
        ((x * (blocks - 1) as f64).floor() as u64).min(blocks - 1) * self.l
    }

    /// The first `count` block starts of the stream with this seed.
    pub fn block_starts(&self, count: usize, seed: u64) -> Vec<usize> {
        let mut rng = Rng::new(seed);
        (0..count)
            .map(|_| self.block_start(rng.unit()) as usize)
            .collect()
    }

    /// Word indices of a stream of at least `n` accesses (whole blocks).
    pub fn stream(self, n: u64, seed: u64) -> impl Iterator<Item = u64> {
        let mut rng = Rng::new(seed);
        let blocks = n.div_ceil(self.l.max(1));
        (0..blocks).flat_map(move |_| {
            let start = self.block_start(rng.unit());
            start..start + self.l
        })
    }
}

/// Sums the blocks `data[s..s + l]` for every start; what one thread of the apex kernel does.
/// Four independent accumulators let the loads of a long block overlap.
#[inline]
pub fn sum_blocks(data: &[f64], starts: &[usize], l: usize) -> f64 {
    let mut acc = [0.0f64; 4];
    for &s in starts {
        let block = &data[s..s + l];
        let mut chunks = block.chunks_exact(4);
        for c in &mut chunks {
            acc[0] += c[0];
            acc[1] += c[1];
            acc[2] += c[2];
            acc[3] += c[3];
        }
        for &x in chunks.remainder() {
            acc[0] += x;
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_starts_follow_the_definition() {
        let p = ApexParams {
            m: 1024,
            l: 4,
            k: 1.0,
        };
        assert_eq!(p.block_start(0.0), 0);
        assert_eq!(p.block_start(0.5), 127 * 4); // floor(0.5 * 255) * 4
        assert!(p.block_start(0.999_999) <= 1020);
        // Small K crowds starts towards 0.
        let q = ApexParams { k: 0.01, ..p };
        assert_eq!(q.block_start(0.5), 0);
        let s: Vec<u64> = p.stream(8, 1).collect();
        assert_eq!(s.len(), 8);
        assert_eq!(s[1], s[0] + 1);
        let starts = p.block_starts(2, 1);
        assert_eq!(starts, vec![s[0] as usize, s[4] as usize]);
    }

    #[test]
    fn sums_match_a_plain_loop() {
        let data: Vec<f64> = (0..1000).map(|i| i as f64).collect();
        let starts = [0usize, 7, 990, 3];
        for l in [1usize, 3, 4, 5, 10] {
            let want: f64 = starts
                .iter()
                .map(|&s| data[s..s + l].iter().sum::<f64>())
                .sum();
            assert_eq!(sum_blocks(&data, &starts, l), want, "l={l}");
        }
    }
}
