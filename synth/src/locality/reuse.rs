//! Exact reuse distance (Olken 1981): the number of distinct addresses touched between two
//! uses of an address, for every access.
//!
//! Every address's last-use time is kept; the set of live last-use times (one per distinct
//! address) is a bitmap over time, and the distance of a reuse is the number of live times
//! after the previous use. Olken counts them with a balanced tree; here a Fenwick tree of the
//! *dead* times per 512-time block plus the popcount of one block (a single cache line of the
//! bitmap) does it, so the counting structure is 1/4096 of the bitmap's bits and stays in
//! cache, and only a reuse updates it (a new time is always the latest and dead counts before
//! it do not change). Last-use times
//! live in shadow pages of 2^15 addresses (128 KiB of times), found through a two-level page
//! table (a leaf of 2^16 page entries covers 2^31 addresses; leaves are kept in a small map
//! with a one-entry cache): one lookup in a table that stays in cache, then the time itself.
//! (An earlier design mapped every 16-word chunk through one large hash map; that lookup
//! missed the cache on random streams and took a third of analyze's time.)
//! [`ReuseDistance::batch`]
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
use crate::sys::prefetch;

/// Words per shadow page of last-use times (2^15: 128 KiB of times per 256 KiB of words).
const PAGE_BITS: u32 = 15;
const PAGE: usize = 1 << PAGE_BITS;
/// Shadow pages the slot numbering can address (slots are u32: page << PAGE_BITS | offset).
const MAX_PAGES: usize = 1 << (32 - PAGE_BITS);
/// Accesses a caller should collect before calling [`ReuseDistance::batch`] (any number
/// works; fewer than a few dozen leave the prefetch pipeline short).
pub const BATCH: usize = 1024;
/// Times per counted block (8 words of bitmap: one cache line).
const BLOCK_TIMES: usize = 512;
const MIN_CAPACITY: usize = 1 << 16;
/// Largest number of distinct addresses tracked (times are 32-bit and need 3x headroom).
pub const MAX_DISTINCT: u64 = (u32::MAX / 3 - BLOCK_TIMES as u32) as u64;

/// Exact reuse distances.
pub struct ReuseDistance {
    /// Address >> PAGE_BITS -> 1 + index of its shadow page in `pages` (0: none yet), in
    /// leaves of LEAF entries found by address >> (PAGE_BITS + LEAF_BITS); one leaf spans
    /// 2^31 addresses, so a program's arrays almost always share the last leaf used.
    leaf_of: HashMap<u64, usize, fasthash::Build>,
    leaves: Vec<Box<[u32]>>,
    /// The last leaf used: (address >> (PAGE_BITS + LEAF_BITS), index in `leaves`).
    last_leaf: (u64, usize),
    /// Last-use time per address (0 = never used), PAGE addresses per page, allocated on
    /// first touch (zero pages come from the allocator lazily).
    pages: Vec<Box<[u32]>>,
    /// Time -> slot (page << PAGE_BITS | offset), meaningful where the time's bit is set.
    owner: Vec<u32>,
    /// Bit t set: t is the last-use time of some address.
    bits: Bitmap,
    /// Fenwick tree over the dead-time counts of BLOCK_TIMES-time blocks, 1-based. Counting
    /// the dead (rather than the live) times means a new time, always the latest, changes no
    /// count: only a reuse (its previous time dies) updates the tree.
    tree: Vec<u32>,
    /// Next time stamp (1-based; 0 means "never").
    now: u32,
    /// Live times = distinct addresses seen.
    live: u64,
    /// Accesses to addresses beyond MAX_DISTINCT (or beyond MAX_PAGES shadow pages) were
    /// counted as first uses.
    saturated: bool,
}

impl Default for ReuseDistance {
    fn default() -> Self {
        ReuseDistance::new()
    }
}

/// One block of BLOCK_TIMES time bits, exactly one 64-byte cache line, so counting a block
/// touches the one line that was prefetched.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Block([u64; BLOCK_TIMES / 64]);

/// The bitmap of live times, in cache-line blocks.
struct Bitmap {
    blocks: Vec<Block>,
}

impl Bitmap {
    fn with_times(times: usize) -> Bitmap {
        Bitmap {
            blocks: vec![Block::default(); times.div_ceil(BLOCK_TIMES)],
        }
    }

    /// The live times, in increasing order.
    fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        let mut words = self.blocks.iter().flat_map(|b| b.0).enumerate();
        let (mut w, mut x) = (0, 0u64);
        std::iter::from_fn(move || {
            while x == 0 {
                (w, x) = words.next()?;
            }
            let t = w * 64 + x.trailing_zeros() as usize;
            x &= x - 1;
            Some(t)
        })
    }

    #[inline(always)]
    fn set(&mut self, t: usize) {
        self.blocks[t / BLOCK_TIMES].0[(t / 64) % 8] |= 1u64 << (t % 64);
    }

    #[inline(always)]
    fn clear(&mut self, t: usize) {
        self.blocks[t / BLOCK_TIMES].0[(t / 64) % 8] &= !(1u64 << (t % 64));
    }

    /// All bits cleared, room for `times` times (never shrinks).
    fn reset(&mut self, times: usize) {
        let n = times.div_ceil(BLOCK_TIMES).max(self.blocks.len());
        self.blocks.clear();
        self.blocks.resize(n, Block::default());
    }
}

const _: () = assert!(BLOCK_TIMES == 512, "a block is one 64-byte line of bits");

/// `n` zeros whose memory pages are written now. A lazily zeroed allocation (calloc, which
/// the compiler also makes of an allocation followed by a zero fill) is first mapped to the
/// shared read-only zero page when the batch loop reads before it writes; the copy on the
/// first write then shoots down the TLBs of every other thread of the process (a sixth of
/// the analysis threads' time, measured).
fn written_zeros(n: usize) -> Box<[u32]> {
    let mut v = vec![0u32; n].into_boxed_slice();
    for i in (0..n).step_by(1024) {
        // Through black_box the store cannot be proven redundant and removed.
        *std::hint::black_box(&mut v[i]) = 0;
    }
    v
}

/// Shadow pages a thread keeps for its next engines (64 MiB): an engine that scores a
/// short stream over much memory (the Apex-MAP grid: 110 streams of 2^17 accesses over
/// 2^24 words, up to 512 pages each) spent half its time having fresh pages zeroed and
/// faulted in. A dropped engine's pages come back cleared, and the thread's next engines
/// take them first.
const SPARE_PAGES: usize = 512;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Box<[u32]>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A zeroed shadow page: one a dropped engine of this thread left, else a new one.
fn shadow_page() -> Box<[u32]> {
    SPARE
        .try_with(|spare| spare.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| written_zeros(PAGE))
}

/// Page entries per leaf of the page table.
const LEAF_BITS: u32 = 16;
const LEAF: usize = 1 << LEAF_BITS;

/// Slot value meaning "no shadow page could be given" (saturated).
const NO_SLOT: usize = usize::MAX;

impl ReuseDistance {
    pub fn new() -> ReuseDistance {
        ReuseDistance {
            leaf_of: HashMap::default(),
            leaves: Vec::new(),
            last_leaf: (u64::MAX, 0),
            pages: Vec::new(),
            owner: vec![0; MIN_CAPACITY],
            bits: Bitmap::with_times(MIN_CAPACITY),
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

    /// Bytes this engine holds: shadow pages, page table, time owners, bitmap, tree.
    pub fn memory_bytes(&self) -> u64 {
        let pages = self.pages.len() * PAGE * 4;
        let leaves = self.leaves.len() * LEAF * 4;
        let owner = self.owner.capacity() * 4;
        let bits = self.bits.blocks.capacity() * std::mem::size_of::<Block>();
        let tree = self.tree.capacity() * 4;
        (pages + leaves + owner + bits + tree) as u64
    }

    /// Bytes per distinct address in a densely used region (time, three owner slots,
    /// three bits), the figure analyze states before it starts.
    pub const BYTES_PER_DISTINCT: u64 = 4 + 3 * 4 + 1;

    /// True when more than [`MAX_DISTINCT`] addresses were seen (the rest counted as first uses).
    pub fn saturated(&self) -> bool {
        self.saturated
    }

    /// One more dead time in `block`.
    #[inline(always)]
    fn tree_kill(&mut self, block: usize) {
        let mut i = block + 1;
        let n = self.tree.len();
        while i < n {
            self.tree[i] += 1;
            i += i & i.wrapping_neg();
        }
    }

    /// Dead times in blocks 0..block.
    #[inline(always)]
    fn dead_before(&self, block: usize) -> u64 {
        let mut i = block;
        let mut s = 0u64;
        while i > 0 {
            s += u64::from(self.tree[i]);
            i &= i - 1;
        }
        s
    }

    /// Live times <= t (t < now). Every time 1..now was given out once, so the live times
    /// before t's block are the times given out there less the dead ones; within the block the
    /// bitmap is counted directly.
    #[inline(always)]
    fn live_upto(&self, t: usize) -> u64 {
        let block = t / BLOCK_TIMES;
        let first_time = (block * BLOCK_TIMES).max(1);
        let words = &self.bits.blocks[block].0;
        let w = (t / 64) % 8;
        let mut n = (first_time as u64 - 1) - self.dead_before(block);
        for &x in &words[..w] {
            n += u64::from(x.count_ones());
        }
        let mask = u64::MAX >> (63 - (t % 64));
        n + u64::from((words[w] & mask).count_ones())
    }

    /// The slot of `addr`'s last-use time, creating its shadow page on first touch.
    #[inline(always)]
    fn slot(&mut self, addr: u64) -> usize {
        let key = addr >> PAGE_BITS;
        let top = key >> LEAF_BITS;
        if top != self.last_leaf.0 {
            let next = self.leaves.len();
            let li = *self.leaf_of.entry(top).or_insert(next);
            if li == next {
                self.leaves.push(vec![0u32; LEAF].into_boxed_slice());
            }
            self.last_leaf = (top, li);
        }
        let ki = key as usize & (LEAF - 1);
        let mut entry = self.leaves[self.last_leaf.1][ki];
        if entry == 0 {
            if self.pages.len() >= MAX_PAGES {
                self.saturated = true;
                return NO_SLOT;
            }
            self.pages.push(shadow_page());
            entry = self.pages.len() as u32;
            self.leaves[self.last_leaf.1][ki] = entry;
        }
        ((entry - 1) as usize) << PAGE_BITS | (addr as usize & (PAGE - 1))
    }

    /// The slot of `addr`, with its shadow time's cache line on the way.
    #[inline(always)]
    fn slot_prefetched(&mut self, addr: u64) -> usize {
        let s = self.slot(addr);
        if s != NO_SLOT {
            prefetch(&self.pages[s >> PAGE_BITS][s & (PAGE - 1)]);
        }
        s
    }

    #[inline(always)]
    fn time_at(&self, slot: usize) -> u32 {
        self.pages[slot >> PAGE_BITS][slot & (PAGE - 1)]
    }

    #[inline(always)]
    fn set_time(&mut self, slot: usize, t: u32) {
        self.pages[slot >> PAGE_BITS][slot & (PAGE - 1)] = t;
    }

    /// Records an access to `addr`; returns its reuse distance, or `None` on first use.
    #[inline]
    pub fn access(&mut self, addr: u64) -> Option<u64> {
        let slot = self.slot(addr);
        self.access_slot(slot)
    }

    /// Records accesses to `addrs` (any number) in order, calling `f` with each distance.
    /// Same results as [`access`](Self::access) one by one, but the memory of later accesses
    /// is fetched while earlier ones are processed: the shadow time of access `i + 2 x AHEAD`
    /// and the bitmap line of access `i + AHEAD` are prefetched while access `i` runs, so the
    /// cache misses of random streams overlap instead of stalling one after another.
    pub fn batch(&mut self, addrs: &[u64], f: impl FnMut(Option<u64>)) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has the instruction batch_popcnt was compiled for.
            return unsafe { self.batch_popcnt(addrs, f) };
        }
        self.batch_impl(addrs, f)
    }

    /// The batch loop compiled with the POPCNT instruction (the baseline x86-64 target has
    /// none, and counting the bitmap is on the hot path).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn batch_popcnt(&mut self, addrs: &[u64], f: impl FnMut(Option<u64>)) {
        self.batch_impl(addrs, f)
    }

    #[inline(always)]
    fn batch_impl(&mut self, addrs: &[u64], mut f: impl FnMut(Option<u64>)) {
        const AHEAD: usize = 16;
        const RING: usize = 64; // > 2 x AHEAD, a power of two
        let n = addrs.len();
        let mut slots = [NO_SLOT; RING];
        // Stage 1 (2 x AHEAD ahead): the slot, and a prefetch of its shadow time.
        for k in 0..n.min(2 * AHEAD) {
            slots[k % RING] = self.slot_prefetched(addrs[k]);
        }
        for i in 0..n {
            if i + 2 * AHEAD < n {
                slots[(i + 2 * AHEAD) % RING] = self.slot_prefetched(addrs[i + 2 * AHEAD]);
            }
            // Stage 2 (AHEAD ahead): the time (arrived by now), and a prefetch of its bitmap
            // word. The time may be stale when access i + AHEAD is processed (the same
            // address again in between, a compaction); processing reads it again.
            if i + AHEAD < n {
                let s = slots[(i + AHEAD) % RING];
                if s != NO_SLOT {
                    let t = self.time_at(s) as usize;
                    prefetch(&self.bits.blocks[(t / BLOCK_TIMES).min(self.bits.blocks.len() - 1)]);
                }
            }
            f(self.access_slot(slots[i % RING]));
        }
    }

    #[inline(always)]
    fn access_slot(&mut self, slot: usize) -> Option<u64> {
        if slot == NO_SLOT {
            return None;
        }
        let t = self.time_at(slot) as usize;
        if t == 0 && self.live >= MAX_DISTINCT {
            self.saturated = true;
            return None;
        }
        // (No closure here: it would be compiled apart from batch_popcnt, without POPCNT.)
        let d = if t != 0 {
            // Live times after t (t's own bit is among those up to t).
            let d = self.live - self.live_upto(t);
            self.bits.clear(t);
            self.tree_kill(t / BLOCK_TIMES);
            self.live -= 1;
            Some(d)
        } else {
            None
        };
        if self.now as usize == self.owner.len() {
            self.compact();
        }
        let now = self.now as usize;
        self.set_time(slot, now as u32);
        self.owner[now] = slot as u32;
        self.bits.set(now);
        self.live += 1;
        self.now += 1;
        d
    }

    /// Renumbers the live times 1..=live in time order, in place, and makes room for at least
    /// three times that: the next compaction comes after at least twice as many accesses as
    /// there are live addresses, so its cost (one scattered write per live address) is at most
    /// half a write per access. Arrays only grow: freeing and re-allocating them made the
    /// kernel shoot down the TLBs of the other analysis threads at every compaction.
    fn compact(&mut self) {
        let live = self.live as usize;
        let cap = (3 * live + 2)
            .next_multiple_of(BLOCK_TIMES)
            .max(MIN_CAPACITY)
            .max(self.owner.len());
        let mut next = 1usize;
        for t in self.bits.ones() {
            // next <= t: renumbering in increasing time order never overwrites an entry that
            // is still to be read.
            let slot = self.owner[t] as usize;
            self.pages[slot >> PAGE_BITS][slot & (PAGE - 1)] = next as u32;
            self.owner[next] = slot as u32;
            next += 1;
        }
        debug_assert_eq!(next, live + 1);
        self.owner.resize(cap, 0);
        self.bits.reset(cap);
        for t in 1..=live {
            self.bits.set(t);
        }
        // Times 1..=live are all live again: no dead times anywhere.
        self.tree.clear();
        self.tree.resize(cap / BLOCK_TIMES + 1, 0);
        self.now = live as u32 + 1;
    }
}

impl Drop for ReuseDistance {
    /// Gives its shadow pages, cleared, to the thread's next engines, where all of them fit
    /// in the thread's [`SPARE_PAGES`] (so that clearing costs at most a few milliseconds:
    /// a large engine's pages are simply freed). The only times written are those of live
    /// addresses (a reuse overwrites the address's own), so sparsely used pages are cleared
    /// through the live times, densely used ones whole.
    fn drop(&mut self) {
        // (try_with: at the thread's exit its spare pages may be gone already.)
        let Ok(room) = SPARE.try_with(|spare| SPARE_PAGES.saturating_sub(spare.borrow().len()))
        else {
            return;
        };
        if self.pages.is_empty() || self.pages.len() > room {
            return;
        }
        if self.live as usize > self.pages.len() * (PAGE / 16) {
            for page in &mut self.pages {
                page.fill(0);
            }
        } else {
            for t in self.bits.ones() {
                let slot = self.owner[t] as usize;
                self.pages[slot >> PAGE_BITS][slot & (PAGE - 1)] = 0;
            }
        }
        let _ = SPARE.try_with(|spare| spare.borrow_mut().append(&mut self.pages));
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

    pub fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
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

    /// An engine's pages go to the thread's next engine cleared, however the first used
    /// them (a few addresses per page, or every address of its pages), and the next one
    /// measures as a fresh engine does.
    #[test]
    fn pages_of_a_dropped_engine_are_given_back_cleared() {
        let spare = || SPARE.with(|s| s.borrow().len());
        let all_zero = || SPARE.with(|s| s.borrow().iter().all(|p| p.iter().all(|&t| t == 0)));
        SPARE.with(|s| s.borrow_mut().clear());
        let sparse: Vec<u64> = (0..20_000u64).map(|i| (i * 7919 % 600) << 14).collect();
        let dense: Vec<u64> = (0..3 * PAGE as u64).chain(0..3 * PAGE as u64).collect();
        let mut want = Vec::new();
        for s in [&sparse, &dense] {
            SPARE.with(|s| s.borrow_mut().clear());
            let mut r = ReuseDistance::new();
            want.push(s.iter().map(|&a| r.access(a)).collect::<Vec<_>>());
            let pages = r.pages.len();
            drop(r);
            assert_eq!(spare(), pages);
            assert!(all_zero());
        }
        // Now from spare pages (the dense stream's, then all): the same distances.
        for (s, want) in [(&sparse, &want[0]), (&dense, &want[1])] {
            let before = spare();
            let mut r = ReuseDistance::new();
            let got: Vec<_> = s.iter().map(|&a| r.access(a)).collect();
            assert!(spare() < before, "took spare pages");
            assert_eq!(&got, want);
        }
        // An engine with more pages than the spares hold frees them instead.
        SPARE.with(|s| s.borrow_mut().clear());
        let mut r = ReuseDistance::new();
        for p in 0..SPARE_PAGES as u64 + 1 {
            r.access(p << PAGE_BITS);
        }
        drop(r);
        assert_eq!(spare(), 0);
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
