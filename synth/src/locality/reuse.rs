//! Exact reuse distance (Olken 1981): the number of distinct addresses touched between two
//! uses of an address, for every access.
//!
//! Every address's last-use time is kept; the set of live last-use times (one per distinct
//! address) is a bitmap over time, and the distance of a reuse is the number of live times
//! after the previous use. Olken counts them with a balanced tree; here a Fenwick tree over
//! 512-time blocks plus the popcount of one block (a single cache line of the bitmap) does it,
//! so the counting structure is 1/4096 of the bitmap's bits and stays in cache. Last-use times
//! live in shadow chunks of 16 words (one 64-byte line of times), found through a hash map with
//! a one-entry cache, so unit-stride sweeps touch memory sequentially and a scattered stream
//! costs at most one line per distinct word (2048-word regions were faster on random streams,
//! but made sparse ones, such as the Apex-MAP grid's, allocate and zero 8 KiB of shadow per
//! access). [`ReuseDistance::batch`]
//! looks up a batch of addresses' times and bitmap words with independent loads before
//! processing them in order, so the cache misses of random streams overlap. When time
//! reaches the bitmap's capacity the live times are renumbered densely (in time order, by one
//! linear scan of the bitmap, no sort) and the capacity set to twice the distinct addresses,
//! so memory is proportional to the distinct addresses and the cost per access is constant.
//!
//! [`Shards`] samples addresses by hash (SHARDS, Waldspurger et al., FAST'15): only addresses
//! whose hash falls below `rate` are tracked, and their distances are scaled by `1 / rate`.

use std::collections::HashMap;

use crate::fasthash;

/// Words per shadow chunk of last-use times.
const REGION: u64 = 16;
/// Accesses looked up together by [`ReuseDistance::batch`].
pub const BATCH: usize = 32;
/// Times per counted block (8 words of bitmap: one cache line).
const BLOCK_TIMES: usize = 512;
const MIN_CAPACITY: usize = 1 << 16;
/// Largest number of distinct addresses tracked (times are 32-bit and need 2x headroom).
pub const MAX_DISTINCT: u64 = (u32::MAX / 2 - BLOCK_TIMES as u32) as u64;

/// Exact reuse distances.
pub struct ReuseDistance {
    /// Address / REGION -> index of its region in `last`.
    regions: HashMap<u64, u32, fasthash::Build>,
    /// Last-use time per word (0 = never used), REGION words per region.
    last: Vec<u32>,
    /// The most recently used region: (key, index).
    cached: (u64, u32),
    /// Time -> slot in `last` (meaningful where the time's bit is set).
    owner: Vec<u32>,
    /// Bit t set: t is the last-use time of some address.
    bits: Vec<u64>,
    /// Fenwick tree over the live counts of BLOCK_TIMES-time blocks, 1-based.
    tree: Vec<u32>,
    /// Next time stamp (1-based; 0 means "never").
    now: u32,
    /// Live times = distinct addresses seen.
    live: u64,
    /// Accesses to addresses beyond MAX_DISTINCT were counted as first uses.
    saturated: bool,
}

impl Default for ReuseDistance {
    fn default() -> Self {
        ReuseDistance::new()
    }
}

impl ReuseDistance {
    pub fn new() -> ReuseDistance {
        ReuseDistance {
            regions: HashMap::default(),
            last: Vec::new(),
            cached: (u64::MAX, 0),
            owner: vec![0; MIN_CAPACITY],
            bits: vec![0; MIN_CAPACITY / 64],
            tree: vec![0; MIN_CAPACITY / BLOCK_TIMES + 1],
            now: 1,
            live: 0,
            saturated: false,
        }
    }

    /// Distinct addresses seen so far.
    pub fn distinct(&self) -> u64 {
        self.live
    }

    /// True when more than [`MAX_DISTINCT`] addresses were seen (the rest counted as first uses).
    pub fn saturated(&self) -> bool {
        self.saturated
    }

    #[inline]
    fn tree_add(&mut self, block: usize, v: i32) {
        let mut i = block + 1;
        let n = self.tree.len();
        while i < n {
            self.tree[i] = self.tree[i].wrapping_add_signed(v);
            i += i & i.wrapping_neg();
        }
    }

    /// Live times in blocks 0..block.
    #[inline]
    fn tree_prefix(&self, block: usize) -> u64 {
        let mut i = block;
        let mut s = 0u64;
        while i > 0 {
            s += u64::from(self.tree[i]);
            i &= i - 1;
        }
        s
    }

    /// Live times <= t.
    #[inline]
    fn live_upto(&self, t: usize) -> u64 {
        let block = t / BLOCK_TIMES;
        let w = t / 64;
        let first = block * (BLOCK_TIMES / 64);
        let mut n = self.tree_prefix(block);
        for &x in &self.bits[first..w] {
            n += u64::from(x.count_ones());
        }
        let mask = u64::MAX >> (63 - (t % 64));
        n + u64::from((self.bits[w] & mask).count_ones())
    }

    /// The slot of `addr`'s last-use time, creating its region on first touch.
    #[inline]
    fn slot(&mut self, addr: u64) -> usize {
        let key = addr / REGION;
        let ri = if key == self.cached.0 {
            self.cached.1
        } else {
            let next = (self.last.len() as u64 / REGION) as u32;
            let ri = *self.regions.entry(key).or_insert(next);
            if ri == next {
                self.last.resize(self.last.len() + REGION as usize, 0);
            }
            self.cached = (key, ri);
            ri
        };
        ri as usize * REGION as usize + (addr % REGION) as usize
    }

    /// Records an access to `addr`; returns its reuse distance, or `None` on first use.
    #[inline]
    pub fn access(&mut self, addr: u64) -> Option<u64> {
        let slot = self.slot(addr);
        self.access_slot(slot)
    }

    /// Records accesses to `addrs` (at most [`BATCH`]) in order, calling `f` with each
    /// distance. Same results as [`access`](Self::access) one by one; faster on random streams.
    pub fn batch(&mut self, addrs: &[u64], mut f: impl FnMut(Option<u64>)) {
        let mut slots = [0usize; BATCH];
        let n = addrs.len().min(BATCH);
        for (s, &a) in slots.iter_mut().zip(&addrs[..n]) {
            *s = self.slot(a);
        }
        // Independent loads: the misses of the whole batch are in flight together. A time read
        // here may be stale by the time its access is processed (the same word twice in one
        // batch); processing reads it again, so this only warms the caches.
        let mut warm = 0u64;
        for &s in &slots[..n] {
            let t = self.last[s] as usize;
            warm ^= self.bits[(t / 64).min(self.bits.len() - 1)];
        }
        std::hint::black_box(warm);
        for &s in &slots[..n] {
            f(self.access_slot(s));
        }
        for &a in &addrs[n..] {
            f(self.access(a));
        }
    }

    #[inline]
    fn access_slot(&mut self, slot: usize) -> Option<u64> {
        let t = self.last[slot] as usize;
        if t == 0 && self.live >= MAX_DISTINCT {
            self.saturated = true;
            return None;
        }
        let d = (t != 0).then(|| {
            // Live times after t (t's own bit is among those up to t).
            let d = self.live - self.live_upto(t);
            self.bits[t / 64] &= !(1u64 << (t % 64));
            self.tree_add(t / BLOCK_TIMES, -1);
            self.live -= 1;
            d
        });
        if self.now as usize == self.owner.len() {
            self.compact();
        }
        let now = self.now as usize;
        self.last[slot] = now as u32;
        self.owner[now] = slot as u32;
        self.bits[now / 64] |= 1u64 << (now % 64);
        self.tree_add(now / BLOCK_TIMES, 1);
        self.live += 1;
        self.now += 1;
        d
    }

    /// Renumbers the live times 1..=live in time order and resizes to twice that.
    fn compact(&mut self) {
        let live = self.live as usize;
        let cap = (2 * live + 2)
            .next_multiple_of(BLOCK_TIMES)
            .max(MIN_CAPACITY);
        let mut owner = vec![0u32; cap];
        let mut next = 1usize;
        for (w, &word) in self.bits.iter().enumerate() {
            let mut x = word;
            while x != 0 {
                let t = w * 64 + x.trailing_zeros() as usize;
                let slot = self.owner[t];
                self.last[slot as usize] = next as u32;
                owner[next] = slot;
                next += 1;
                x &= x - 1;
            }
        }
        debug_assert_eq!(next, live + 1);
        self.owner = owner;
        self.bits.clear();
        self.bits.resize(cap / 64, 0);
        for t in 1..=live {
            self.bits[t / 64] |= 1 << (t % 64);
        }
        // Fenwick tree from the block counts, in linear time.
        let blocks = cap / BLOCK_TIMES;
        self.tree.clear();
        self.tree.resize(blocks + 1, 0);
        for b in 0..blocks {
            let first = b * BLOCK_TIMES;
            // Live times are exactly 1..=live.
            let ones = (first + BLOCK_TIMES)
                .min(live + 1)
                .saturating_sub(first.max(1));
            self.tree[b + 1] += ones as u32;
            let j = (b + 1) + ((b + 1) & (b + 1).wrapping_neg());
            if j <= blocks {
                let v = self.tree[b + 1];
                self.tree[j] += v;
            }
        }
        self.now = live as u32 + 1;
    }
}

/// SHARDS: reuse distances of a hash-sampled subset of addresses, scaled to estimate the
/// whole stream's. With rate R, about R of the accesses are tracked; each counts 1/R.
pub struct Shards {
    inner: ReuseDistance,
    threshold: u64,
    pub rate: f64,
}

impl Shards {
    pub fn new(rate: f64) -> Shards {
        let rate = rate.clamp(1e-6, 1.0);
        Shards {
            inner: ReuseDistance::new(),
            threshold: (rate * u64::MAX as f64) as u64,
            rate,
        }
    }

    pub fn saturated(&self) -> bool {
        self.inner.saturated()
    }

    /// Distinct sampled addresses (divide by `rate` for an estimate of all).
    pub fn distinct(&self) -> u64 {
        self.inner.distinct()
    }

    /// `None` if the address is not sampled; `Some(None)` for a sampled first use;
    /// `Some(Some(d))` for a sampled reuse, `d` already scaled.
    #[inline]
    pub fn access(&mut self, addr: u64) -> Option<Option<u64>> {
        let h = addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (addr >> 29);
        let h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        if h > self.threshold {
            return None;
        }
        Some(
            self.inner
                .access(addr)
                .map(|d| (d as f64 / self.rate).round() as u64),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: distinct addresses strictly between the two uses, by brute force.
    fn naive(s: &[u64]) -> Vec<Option<u64>> {
        (0..s.len())
            .map(|i| {
                let prev = (0..i).rev().find(|&j| s[j] == s[i])?;
                let mut set = std::collections::HashSet::new();
                for &x in &s[prev + 1..i] {
                    set.insert(x);
                }
                Some(set.len() as u64)
            })
            .collect()
    }

    #[test]
    fn hand_computed_distances() {
        // a b c b d d a: b -> 1 (c), d -> 0, a -> 3 (b, c, d).
        let s = [1u64, 2, 3, 2, 4, 4, 1];
        let mut r = ReuseDistance::new();
        let got: Vec<Option<u64>> = s.iter().map(|&a| r.access(a)).collect();
        assert_eq!(got, vec![None, None, None, Some(1), None, Some(0), Some(3)]);
    }

    #[test]
    fn matches_brute_force_across_compactions() {
        let mut state = 3u64;
        let s: Vec<u64> = (0..200_000)
            .map(|i| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                // A mix of a hot set and a wide random set, to force compactions.
                if i % 3 == 0 {
                    (state >> 60) % 16
                } else {
                    (state >> 33) % 5000
                }
            })
            .collect();
        let mut r = ReuseDistance::new();
        let got: Vec<Option<u64>> = s.iter().map(|&a| r.access(a)).collect();
        // Brute force on a prefix (quadratic), and spot checks further on.
        let want = naive(&s[..3000]);
        assert_eq!(&got[..3000], &want[..]);
        for i in (100_000..200_000).step_by(9973) {
            let prev = (0..i).rev().find(|&j| s[j] == s[i]);
            let d = prev.map(|p| {
                s[p + 1..i]
                    .iter()
                    .collect::<std::collections::HashSet<_>>()
                    .len() as u64
            });
            assert_eq!(got[i], d, "at {i}");
        }
    }

    #[test]
    fn batches_match_single_accesses() {
        // Repeats inside one batch, far-apart regions, and enough distinct words to compact.
        let mut state = 9u64;
        let s: Vec<u64> = (0..300_000u64)
            .map(|i| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                match i % 4 {
                    0 => (state >> 58) % 8,
                    1 => (state >> 20) % 100_000,
                    2 => u64::MAX / 8 - (state >> 40) % 5000,
                    _ => i,
                }
            })
            .collect();
        let mut one = ReuseDistance::new();
        let want: Vec<Option<u64>> = s.iter().map(|&a| one.access(a)).collect();
        let mut many = ReuseDistance::new();
        let mut got = Vec::new();
        for part in s.chunks(BATCH) {
            many.batch(part, |d| got.push(d));
        }
        assert_eq!(got, want);
        assert_eq!(many.distinct(), one.distinct());
    }

    #[test]
    fn shards_estimates_scale() {
        // A cyclic scan over 10000 addresses: every reuse distance is 9999.
        let mut s = Shards::new(0.1);
        let mut ds = Vec::new();
        for round in 0..5 {
            for a in 0..10_000u64 {
                if let Some(Some(d)) = s.access(a) {
                    if round > 0 {
                        ds.push(d);
                    }
                }
            }
        }
        assert!(!ds.is_empty());
        let mean = ds.iter().sum::<u64>() as f64 / ds.len() as f64;
        assert!((mean - 9999.0).abs() < 2000.0, "{mean}");
    }
}
