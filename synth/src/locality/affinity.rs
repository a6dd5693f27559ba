//! Spatial-temporal affinity between the blocks of one region (MemFriend, Suriyakumar et
//! al.; DESIGN.md section 9): how often, and how soon, an access to a reference block i is
//! followed by an access to a block j near it (offsets within +-R blocks) or to one of a few
//! absolute "significant locations" (the hottest lines of the whole trace).
//!
//! Definitions, as computed here (time = index of an access in its thread's sequence):
//! - A(b): accesses to b; AI(b) = A(b) / max A in the region.
//! - Lifetime L(b) = last - first access time of b (summed over sequences).
//! - RI(b): mean reuse interval (t - previous t); RD(b): mean reuse distance in distinct
//!   blocks of the same region (Olken), both over b's reuses.
//! - Spatial interval, DESIGN 9: an access to j at time t closes at most one interval of the
//!   directional pair (i, j), the one opened by the *first* access to i after the previous
//!   access to j (no interval when i was not accessed since). Its length SI_1 is the number of
//!   accesses strictly between the two, not counting further accesses to i in between (the
//!   accesses to i and j are excluded). SI(i, j) is the mean length, |SI(i, j)| the count.
//!   For j = i the intervals are the reuse intervals minus one.
//! - Anticipation SA(j|i) = |SI(i, j)| / A(i) (paper Eq. 3).
//! - Density SD(j|i) = A(j within i's lifetime) / L(i): the accesses to j at times in
//!   (first_i, last_i], over L(i) (the paper's Eq. 5 approximation; the union of i's
//!   self-intervals is its lifetime). A block seen once has no lifetime and SD = 0.
//! - Goodness rank g = min(n_r, floor(SI / n_si) + 1), gamma = (n_r - g + 1) / n_r;
//!   SA* = gamma SA, SD* = gamma SD, both weighted by AI(i) of the reference block only.
//! - Per block: SA*(i) = sum over j != i of AI(i) gamma SA(j|i); SD*(i) = sum over j
//!   (self included) of AI(i) gamma SD(j|i). Realized scores keep j in {+1, +2, hot lines}
//!   (SA*) and {-1, +1, self, hot lines} (SD*); potential scores keep every location.
//!
//! Cost: an access to j walks the region accesses since j's previous access when there were
//! few (a ring of [`RING`]), and otherwise scans the 2R+1 neighbours' last-access times;
//! pair counters live in one row of 2R+1 per touched block, written by the closing block so
//! that an access touches one contiguous row. O(N R) in the worst case, never O(A^2).
//! Rows are mostly cold (16 MiB of them for 4096 blocks), so their updates go through a
//! short delay line ([`Pending`]) that requests each cell when the update is made and writes
//! it 64 updates later, and the rows ask for transparent huge pages (one TLB entry per 2 MiB).

use serde::{Deserialize, Serialize};

use super::reuse::ReuseDistance;
use crate::sys::prefetch;

/// Region accesses remembered for short walks back to a block's previous access.
const RING: usize = 64;

/// The knobs of the affinity metrics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AffinityParams {
    /// Block size in bytes (a power of two; 64 = cache lines).
    pub block: u64,
    /// Affinity offsets considered: -radius..=+radius blocks.
    pub radius: u32,
    /// Goodness ranks n_r.
    pub ranks: u32,
    /// Load-queue entries assumed (loads in flight); n_si is a quarter of it.
    pub load_queue: u32,
}

impl Default for AffinityParams {
    fn default() -> Self {
        AffinityParams {
            block: 64,
            radius: 256,
            ranks: 5,
            // AMD Zen 3's load queue (this machine's EPYC class): n_si = 18.
            load_queue: 72,
        }
    }
}

impl AffinityParams {
    pub fn validate(&self) -> Result<(), String> {
        if !self.block.is_power_of_two() || !(8..=1 << 20).contains(&self.block) {
            return Err(format!(
                "--block {} is not a power of two between 8 and 1048576 bytes",
                self.block
            ));
        }
        if self.radius == 0 || self.radius > 4096 {
            return Err(format!(
                "--radius {} must be between 1 and 4096 blocks",
                self.radius
            ));
        }
        if self.ranks == 0 || self.ranks > 100 {
            return Err(format!("--ranks {} must be between 1 and 100", self.ranks));
        }
        if self.load_queue < 4 {
            return Err(format!(
                "--load-queue {} must be at least 4 entries (n_si is a quarter of it)",
                self.load_queue
            ));
        }
        Ok(())
    }

    /// n_si: spatial-interval length per goodness rank.
    pub fn n_si(&self) -> f64 {
        (self.load_queue / 4) as f64
    }

    /// Goodness rank g of a mean spatial interval (1 = best).
    pub fn rank(&self, si: f64) -> u32 {
        let g = (si / self.n_si()).floor().max(0.0) + 1.0;
        (g.min(self.ranks as f64)) as u32
    }

    /// gamma = (n_r - g + 1) / n_r.
    pub fn gamma(&self, si: f64) -> f64 {
        f64::from(self.ranks - self.rank(si) + 1) / f64::from(self.ranks)
    }

    fn width(&self) -> usize {
        2 * self.radius as usize + 1
    }
}

/// Counters of one directional pair (i, j).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PairCounts {
    /// |SI(i, j)|: intervals closed.
    pub intervals: u64,
    /// Sum of their lengths.
    pub si_sum: u64,
    /// Accesses to j within i's lifetime.
    pub in_lifetime: u64,
}

/// A pair's metrics, before weighting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairMetrics {
    /// Mean spatial interval (None: no interval).
    pub si: Option<f64>,
    pub sa: f64,
    pub sd: f64,
    pub gamma: f64,
}

/// One thread's sequence in the region (intervals never cross a sequence boundary).
struct Seq {
    /// Time of each block's last access in this sequence (0: none).
    last: Vec<u32>,
    /// Every access time of each block in this sequence.
    times: Vec<Vec<u32>>,
    /// First access time and access count of each block in this sequence (flat copies of
    /// `times[b][0]` and `times[b].len()`: neighbours are contiguous here).
    first: Vec<u32>,
    count: Vec<u32>,
    /// Blocks with accesses in this sequence.
    touched: Vec<u32>,
    /// The last RING region accesses: (block, time).
    ring: Vec<(u32, u32)>,
    ring_head: usize,
    /// Access times of each absolute location in this sequence.
    hot_times: Vec<Vec<u32>>,
    /// Open interval of (block, location): time of the access to the block that opened it.
    open: Vec<u32>,
    /// Scratch for walks: stamp, occurrences and earliest time per block.
    stamp: Vec<u32>,
    occ: Vec<u32>,
    earliest: Vec<u32>,
    found: Vec<u32>,
    rd: ReuseDistance,
}

impl Seq {
    fn new(blocks: usize, hot: usize) -> Seq {
        Seq {
            last: vec![0; blocks],
            times: vec![Vec::new(); blocks],
            first: vec![0; blocks],
            count: vec![0; blocks],
            touched: Vec::new(),
            ring: Vec::with_capacity(RING),
            ring_head: 0,
            hot_times: vec![Vec::new(); hot],
            open: vec![0; blocks * hot],
            stamp: vec![0; blocks],
            occ: vec![0; blocks],
            earliest: vec![0; blocks],
            found: Vec::new(),
            rd: ReuseDistance::new(),
        }
    }

    fn push_ring(&mut self, block: u32, t: u32) {
        if self.ring.len() < RING {
            self.ring.push((block, t));
        } else {
            self.ring[self.ring_head] = (block, t);
            self.ring_head = (self.ring_head + 1) % RING;
        }
    }
}

/// Region accesses in `ring` (RING entries at most, the oldest at `head` once full) after
/// time `after`, newest first; None where the ring does not reach back that far.
fn ring_since(
    ring: &[(u32, u32)],
    head: usize,
    after: u32,
) -> Option<impl Iterator<Item = (u32, u32)> + '_> {
    let n = ring.len();
    if n == 0 || (n == RING && ring[head].1 > after) {
        return None;
    }
    let start = if n < RING { 0 } else { head };
    Some(
        (0..n)
            .map(move |k| ring[(start + n - 1 - k) % n])
            .take_while(move |&(_, t)| t > after),
    )
}

/// A pair's interval count (low 28 bits) and length sum (high 36 bits) in one word, so that
/// closing an interval touches one cache line; both saturate (2^28 intervals, 2^36 summed
/// accesses of one pair: beyond any trace this reads in reasonable time).
const COUNT_BITS: u32 = 28;

#[inline(always)]
fn cell_add(cell: &mut u64, len: u32) {
    let (n, sum) = (*cell & ((1 << COUNT_BITS) - 1), *cell >> COUNT_BITS);
    let n = (n + 1).min((1 << COUNT_BITS) - 1);
    let sum = (sum + u64::from(len)).min((1 << (64 - COUNT_BITS)) - 1);
    *cell = sum << COUNT_BITS | n;
}

fn cell_get(cell: u64) -> (u64, u64) {
    (cell & ((1 << COUNT_BITS) - 1), cell >> COUNT_BITS)
}

/// The interval of a reference block opened at time `f` and closed by the first access to
/// a hot line after it: its length (accesses strictly between, not counting the block's own,
/// from its sorted `times`), or None while the hot line (`hot_times`) has not come.
fn hot_interval(hot_times: &[u32], times: &[u32], f: u32) -> Option<u32> {
    let c = *hot_times.get(hot_times.partition_point(|&x| x <= f))?;
    Some(c - f - 1 - count_in(times, f, c - 1))
}

/// Whether block number `x` is one of block `b`'s offsets (within `radius` blocks).
fn within_radius(x: u64, b: u64, radius: u32) -> bool {
    x.abs_diff(b) <= u64::from(radius)
}

/// Number of times in the sorted `times` within (lo, hi].
fn count_in(times: &[u32], lo: u32, hi: u32) -> u32 {
    (times.partition_point(|&x| x <= hi) - times.partition_point(|&x| x <= lo)) as u32
}

/// Updates of packed cells ([`cell_add`]) held back for [`Pending::DEPTH`] updates: each
/// cell is requested from memory when its update arrives and written when it leaves, so
/// that the misses of many accesses overlap (a closing block's row is usually cold).
#[derive(Default)]
struct Pending {
    /// (cell index, interval length), a ring once full.
    cells: Vec<(usize, u32)>,
    head: usize,
}

impl Pending {
    const DEPTH: usize = 64;

    #[inline(always)]
    fn push(&mut self, si: &mut [u64], k: usize, len: u32) {
        prefetch(&si[k]);
        if self.cells.len() < Self::DEPTH {
            self.cells.push((k, len));
            return;
        }
        let (old, old_len) = std::mem::replace(&mut self.cells[self.head], (k, len));
        cell_add(&mut si[old], old_len);
        self.head = (self.head + 1) % Self::DEPTH;
    }

    /// Writes every held update (before `si` is read).
    fn flush(&mut self, si: &mut [u64]) {
        for (k, len) in self.cells.drain(..) {
            cell_add(&mut si[k], len);
        }
        self.head = 0;
    }
}

/// The affinity state of one region of `blocks` blocks starting at block `first`.
pub struct RegionAffinity {
    params: AffinityParams,
    /// First block number (address / block) of the region.
    pub first: u64,
    blocks: usize,
    /// Absolute locations: first block number of each (hot lines).
    hot_block: Vec<u64>,
    /// Per block.
    accesses: Vec<u64>,
    lifetime: Vec<u64>,
    ri_sum: Vec<u64>,
    rd_sum: Vec<f64>,
    reuses: Vec<u64>,
    /// Interval count and length sum of pair (i, j), packed ([`Cell`]), in the row of the
    /// *closing* block j at (j - i) + R: an access updates one contiguous row. Rows for
    /// every block (zeroed pages cost nothing until touched).
    si: Vec<u64>,
    /// Accesses to j within i's lifetime, in the row of the *reference* block i at
    /// (j - i) + R.
    sd_count: Vec<u32>,
    /// Per reference block and absolute location: packed intervals and lengths, lifetime
    /// accesses.
    hot_si: Vec<u64>,
    hot_sd: Vec<u32>,
    /// Interval lengths on their way to `si`.
    pending: Pending,
    seqs: Vec<(u32, Seq)>,
}

impl RegionAffinity {
    /// A region of `blocks` blocks from block number `first`, with absolute locations at the
    /// block numbers `hot`.
    pub fn new(params: AffinityParams, first: u64, blocks: usize, hot: Vec<u64>) -> Self {
        let h = hot.len();
        let mut si = vec![0; blocks * params.width()];
        let mut sd_count = vec![0; blocks * params.width()];
        crate::sys::advise_huge_pages(&mut si);
        crate::sys::advise_huge_pages(&mut sd_count);
        RegionAffinity {
            params,
            first,
            blocks,
            accesses: vec![0; blocks],
            lifetime: vec![0; blocks],
            ri_sum: vec![0; blocks],
            rd_sum: vec![0.0; blocks],
            reuses: vec![0; blocks],
            si,
            sd_count,
            hot_si: vec![0; blocks * h],
            hot_sd: vec![0; blocks * h],
            hot_block: hot,
            pending: Pending::default(),
            seqs: Vec::new(),
        }
    }

    pub fn blocks(&self) -> usize {
        self.blocks
    }

    pub fn hot_blocks(&self) -> &[u64] {
        &self.hot_block
    }

    pub fn params(&self) -> &AffinityParams {
        &self.params
    }

    fn seq(&mut self, thread: u32) -> usize {
        if let Some(k) = self.seqs.iter().position(|s| s.0 == thread) {
            return k;
        }
        self.seqs
            .push((thread, Seq::new(self.blocks, self.hot_block.len())));
        self.seqs.len() - 1
    }

    /// Whether absolute location `k` is already one of block `b`'s offsets.
    fn near(&self, b: usize, k: usize) -> bool {
        within_radius(self.hot_block[k], self.first + b as u64, self.params.radius)
    }

    /// An access of `thread` at time `t` (1-based, increasing within the sequence) to
    /// absolute location `k`.
    pub fn hot_access(&mut self, thread: u32, t: u32, k: usize) {
        let s = self.seq(thread);
        self.seqs[s].1.hot_times[k].push(t);
    }

    /// An access of `thread` at time `t` (1-based, increasing within the sequence) to the
    /// region's block `b` (0-based within the region).
    pub fn access(&mut self, thread: u32, t: u32, b: usize) {
        let s = self.seq(thread);
        let r = self.params.radius as usize;
        let w = self.params.width();
        let h = self.hot_block.len();
        let row = b;
        self.accesses[b] += 1;
        let (_, seq) = &mut self.seqs[s];
        let prev = seq.last[b];
        if let Some(d) = seq.rd.access(b as u64) {
            self.rd_sum[b] += d as f64;
        }
        if prev != 0 {
            // Self pair: the reuse interval.
            self.reuses[b] += 1;
            self.ri_sum[b] += u64::from(t - prev);
            self.pending.push(&mut self.si, row * w + r, t - prev - 1);
        }
        // Intervals (i, b) closed by this access: every i accessed since b's previous
        // access, from the first such access to i.
        let lo = b.saturating_sub(r);
        let hi = (b + r).min(self.blocks - 1);
        let Seq {
            ring,
            ring_head,
            stamp,
            occ,
            earliest,
            found,
            ..
        } = seq;
        let walked = match ring_since(ring, *ring_head, prev) {
            Some(it) if prev != 0 => {
                found.clear();
                for (i, ti) in it {
                    let i = i as usize;
                    if i < lo || i > hi || i == b {
                        continue;
                    }
                    if stamp[i] != t {
                        stamp[i] = t;
                        occ[i] = 0;
                        found.push(i as u32);
                    }
                    occ[i] += 1;
                    earliest[i] = ti;
                }
                for &i in found.iter() {
                    let i = i as usize;
                    let f = earliest[i];
                    let k = row * w + (b + r - i);
                    self.pending.push(&mut self.si, k, t - f - 1 - (occ[i] - 1));
                }
                true
            }
            _ => false,
        };
        if !walked {
            // Candidates: the blocks touched in this sequence when they are fewer than the
            // 2R + 1 neighbours, else the neighbours.
            let mut close = |i: usize| {
                if i == b || seq.last[i] <= prev {
                    return;
                }
                // The first access to i after b's previous one (its first of the sequence
                // when b has none), and the accesses to i after it.
                let (f, between) = if prev == 0 {
                    (seq.first[i], seq.count[i] - 1)
                } else {
                    let ts = &seq.times[i];
                    let idx = ts.partition_point(|&x| x <= prev);
                    (ts[idx], (ts.len() - idx - 1) as u32)
                };
                let k = row * w + (b + r - i);
                self.pending.push(&mut self.si, k, t - f - 1 - between);
            };
            if seq.touched.len() < hi - lo + 1 {
                for &i in &seq.touched {
                    let i = i as usize;
                    if i >= lo && i <= hi {
                        close(i);
                    }
                }
            } else {
                for i in lo..=hi {
                    close(i);
                }
            }
        }
        // Absolute locations, lazily: an interval (b, k) opened at f closed at the first
        // access to k after f, if k has been accessed since; this access then opens the next.
        for k in 0..h {
            if within_radius(self.hot_block[k], self.first + b as u64, self.params.radius) {
                continue;
            }
            let f = seq.open[b * h + k];
            if f == 0 {
                seq.open[b * h + k] = t;
            } else if let Some(len) = hot_interval(&seq.hot_times[k], &seq.times[b], f) {
                cell_add(&mut self.hot_si[row * h + k], len);
                seq.open[b * h + k] = t;
            }
        }
        if prev == 0 {
            seq.touched.push(b as u32);
            seq.first[b] = t;
        }
        seq.count[b] += 1;
        seq.last[b] = t;
        seq.times[b].push(t);
        seq.push_ring(b as u32, t);
    }

    /// Ends `thread`'s sequence: closes the intervals still pending on absolute locations,
    /// adds up lifetimes and the accesses within them, and forgets the sequence's times.
    pub fn end_sequence(&mut self, thread: u32) {
        let Some(s) = self.seqs.iter().position(|s| s.0 == thread) else {
            return;
        };
        self.pending.flush(&mut self.si);
        let r = self.params.radius as usize;
        let w = self.params.width();
        let h = self.hot_block.len();
        if self.seqs[s].1.touched.is_empty() {
            for ht in &mut self.seqs[s].1.hot_times {
                ht.clear();
            }
            return;
        }
        // Out of the list while it is read (order does not matter: looked up by thread).
        let (thread, mut seq) = self.seqs.swap_remove(s);
        seq.touched.sort_unstable();
        let touched = std::mem::take(&mut seq.touched);
        let mut from = 0usize;
        for &i in &touched {
            let i = i as usize;
            let row = i;
            let ti = &seq.times[i];
            let (first, last) = (ti[0], ti[ti.len() - 1]);
            self.lifetime[i] += u64::from(last - first);
            while (touched[from] as usize) + r < i {
                from += 1;
            }
            if last > first {
                for &j in touched[from..].iter().take_while(|&&j| j as usize <= i + r) {
                    let j = j as usize;
                    // A pair with accesses to j in i's lifetime has an interval (i, j): skip
                    // the search where it has none.
                    if j != i && self.si[j * w + (j + r - i)] == 0 {
                        continue;
                    }
                    let c = count_in(&seq.times[j], first, last);
                    self.sd_count[row * w + (j + r - i)] += c;
                }
            }
            for k in 0..h {
                if self.near(i, k) {
                    continue;
                }
                let ht = &seq.hot_times[k];
                if last > first {
                    self.hot_sd[row * h + k] += count_in(ht, first, last);
                }
                let f = seq.open[i * h + k];
                if f != 0 {
                    if let Some(len) = hot_interval(ht, ti, f) {
                        cell_add(&mut self.hot_si[row * h + k], len);
                    }
                }
            }
        }
        // Reset only what the sequence touched.
        for &i in &touched {
            let i = i as usize;
            seq.last[i] = 0;
            seq.count[i] = 0;
            seq.times[i].clear();
            seq.open[i * h..(i + 1) * h].fill(0);
        }
        for ht in &mut seq.hot_times {
            ht.clear();
        }
        seq.ring.clear();
        seq.ring_head = 0;
        seq.touched = touched;
        seq.touched.clear();
        self.seqs.push((thread, seq));
    }

    /// Ends every thread's sequence.
    pub fn finish(&mut self) {
        let threads: Vec<u32> = self.seqs.iter().map(|s| s.0).collect();
        for t in threads {
            self.end_sequence(t);
        }
        self.pending.flush(&mut self.si);
    }

    /// A(b).
    pub fn accesses(&self, b: usize) -> u64 {
        self.accesses[b]
    }

    pub fn lifetime(&self, b: usize) -> u64 {
        self.lifetime[b]
    }

    /// Mean reuse interval and mean reuse distance of block b (None: never reused).
    pub fn reuse(&self, b: usize) -> (Option<f64>, Option<f64>) {
        let n = self.reuses[b];
        if n == 0 {
            return (None, None);
        }
        (
            Some(self.ri_sum[b] as f64 / n as f64),
            Some(self.rd_sum[b] / n as f64),
        )
    }

    /// Reuses of block b and the sums behind [`reuse`](Self::reuse).
    pub fn reuse_sums(&self, b: usize) -> (u64, u64, f64) {
        (self.reuses[b], self.ri_sum[b], self.rd_sum[b])
    }

    /// The counters of pair (i, i + off), |off| <= radius, i + off inside the region.
    pub fn pair(&self, i: usize, off: i64) -> PairCounts {
        let r = self.params.radius as i64;
        let j = i as i64 + off;
        if off.abs() > r || j < 0 || j >= self.blocks as i64 {
            return PairCounts::default();
        }
        let j = j as usize;
        let w = self.params.width();
        let mut p = PairCounts::default();
        (p.intervals, p.si_sum) = cell_get(self.si[j * w + (r + off) as usize]);
        p.in_lifetime = u64::from(self.sd_count[i * w + (r + off) as usize]);
        p
    }

    /// The counters of pair (i, absolute location k); None where k is one of i's offsets.
    pub fn hot_pair(&self, i: usize, k: usize) -> Option<PairCounts> {
        if self.near(i, k) {
            return None;
        }
        let h = self.hot_block.len();
        let x = i * h + k;
        let (intervals, si_sum) = cell_get(self.hot_si[x]);
        Some(PairCounts {
            intervals,
            si_sum,
            in_lifetime: u64::from(self.hot_sd[x]),
        })
    }

    /// SA, SD, SI and gamma of a pair of reference block i.
    pub fn metrics(&self, i: usize, p: PairCounts) -> PairMetrics {
        let a = self.accesses[i];
        let l = self.lifetime[i];
        let si = (p.intervals > 0).then(|| p.si_sum as f64 / p.intervals as f64);
        PairMetrics {
            si,
            sa: if a > 0 {
                p.intervals as f64 / a as f64
            } else {
                0.0
            },
            sd: if l > 0 {
                p.in_lifetime as f64 / l as f64
            } else {
                0.0
            },
            gamma: si.map_or(0.0, |s| self.params.gamma(s)),
        }
    }

    /// Scores of reference block i: (realized SA*, realized SD*, potential SA*, potential
    /// SD*), already weighted by AI(i) = A(i) / `max_a`.
    pub fn block_scores(&self, i: usize, max_a: u64) -> BlockScores {
        self.block_scores_with(i, max_a, |_, _, _| {})
    }

    /// [`block_scores`](Self::block_scores), also handing every location of block i to
    /// `each` with its counters and metrics (offsets -R..=R, then the hot lines that are not
    /// offsets), so that callers listing pairs need not compute them again.
    pub fn block_scores_with(
        &self,
        i: usize,
        max_a: u64,
        mut each: impl FnMut(Location, PairCounts, PairMetrics),
    ) -> BlockScores {
        let ai = if max_a > 0 {
            self.accesses[i] as f64 / max_a as f64
        } else {
            0.0
        };
        let r = self.params.radius as i64;
        let mut s = BlockScores::default();
        for off in -r..=r {
            let p = self.pair(i, off);
            let m = self.metrics(i, p);
            each(Location::Offset(off), p, m);
            let sa = ai * m.gamma * m.sa;
            let sd = ai * m.gamma * m.sd;
            if off != 0 {
                s.sa_potential += sa;
                if off == 1 || off == 2 {
                    s.sa_realized += sa;
                }
            }
            s.sd_potential += sd;
            if (-1..=1).contains(&off) {
                s.sd_realized += sd;
            }
            match off {
                1 => {
                    s.sa_next = sa;
                    s.sd_next = sd;
                }
                0 => {
                    s.sa_self = sa;
                    s.sd_self = sd;
                }
                _ => {}
            }
        }
        for k in 0..self.hot_block.len() {
            if let Some(p) = self.hot_pair(i, k) {
                let m = self.metrics(i, p);
                each(Location::Hot(k), p, m);
                s.sa_potential += ai * m.gamma * m.sa;
                s.sa_realized += ai * m.gamma * m.sa;
                s.sd_potential += ai * m.gamma * m.sd;
                s.sd_realized += ai * m.gamma * m.sd;
            }
        }
        s
    }
}

/// An affinity location of a reference block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// j = i + offset.
    Offset(i64),
    /// Absolute location (hot line) k.
    Hot(usize),
}

/// One reference block's weighted scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockScores {
    pub sa_realized: f64,
    pub sd_realized: f64,
    pub sa_potential: f64,
    pub sd_potential: f64,
    /// AI gamma SA and SD of offset +1 and of the block itself (the affinity signal).
    pub sa_next: f64,
    pub sd_next: f64,
    pub sa_self: f64,
    pub sd_self: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> AffinityParams {
        AffinityParams {
            block: 64,
            radius: 4,
            ranks: 5,
            load_queue: 8, // n_si = 2
        }
    }

    /// Runs a block sequence (one thread, one sequence) through a region of `n` blocks.
    fn run(seq: &[usize], n: usize, hot: Vec<u64>) -> RegionAffinity {
        let mut r = RegionAffinity::new(params(), 100, n, hot);
        for (t, &b) in seq.iter().enumerate() {
            let t = t as u32 + 1;
            if b >= 1000 {
                let k = r.hot_blocks().iter().position(|&h| h == b as u64).unwrap();
                r.hot_access(0, t, k);
            } else {
                r.access(0, t, b);
            }
        }
        r.finish();
        r
    }

    #[test]
    fn rank_and_gamma_boundaries() {
        let p = params(); // n_si = 2, n_r = 5
        assert_eq!(p.rank(0.0), 1);
        assert_eq!(p.rank(1.99), 1);
        assert_eq!(p.rank(2.0), 2);
        assert_eq!(p.rank(7.99), 4);
        assert_eq!(p.rank(8.0), 5);
        assert_eq!(p.rank(1e9), 5);
        assert_eq!(p.gamma(0.0), 1.0);
        assert_eq!(p.gamma(2.0), 0.8);
        assert_eq!(p.gamma(8.0), 0.2);
        assert_eq!(AffinityParams::default().n_si(), 18.0);
    }

    #[test]
    fn spatial_interval_first_previous_access_and_exclusion() {
        // Blocks: i = 0, j = 1, others 2, 3. Sequence (times 1..):
        //  1:i 2:x 3:i 4:x 5:j 6:i 7:j 8:j 9:x 10:i 11:x 12:j
        // (i, j) intervals: opened at 1 (first i after start), closed at 5: between are
        // 2:x 3:i 4:x; the i at 3 is excluded -> 2. Next: first i after 5 is 6, closed at 7:
        // 0. Access 8 closes nothing (no i since 7). First i after 8 is 10, closed at 12:
        // 11:x -> 1. |SI| = 3, SI = (2 + 0 + 1) / 3 = 1.
        let seq = [0, 2, 0, 3, 1, 0, 1, 1, 2, 0, 3, 1];
        let r = run(&seq, 4, vec![]);
        let p = r.pair(0, 1);
        assert_eq!((p.intervals, p.si_sum), (3, 3));
        // A(i) = 4 -> SA = 3/4; SI = 1 < n_si = 2 -> rank 1, gamma 1.
        let m = r.metrics(0, p);
        assert_eq!(m.sa, 0.75);
        assert_eq!(m.si, Some(1.0));
        assert_eq!(m.gamma, 1.0);
        // Reverse direction (j -> i): opened at 5, closed at 6 (0); opened at 7 (first j
        // after 6), closed at 10: between 8:j (excluded) 9:x -> 1. Access 12 (j) is last.
        let q = r.pair(1, -1);
        assert_eq!((q.intervals, q.si_sum), (2, 1));
        // Lifetime of i: 1..10 -> L = 9; j within (1, 10]: 5, 7, 8 -> SD = 3/9.
        assert_eq!(r.lifetime(0), 9);
        assert_eq!(p.in_lifetime, 3);
        assert!((r.metrics(0, p).sd - 3.0 / 9.0).abs() < 1e-12);
        // Self pair of i: reuse intervals 3-1, 6-3, 10-6 -> lengths 1, 2, 3.
        let s = r.pair(0, 0);
        assert_eq!((s.intervals, s.si_sum), (3, 6));
        assert_eq!(r.reuse(0).0, Some(3.0));
    }

    #[test]
    fn long_walks_and_scans_agree() {
        // The same sequence, with the j reuse far enough back that the ring does not reach:
        // 70 accesses to a block outside the radius (5 with radius 4 from block 0) between.
        let mut seq = vec![1, 0];
        seq.extend(std::iter::repeat_n(9, 70));
        seq.extend([0, 1]);
        // (0, 1): opened at 2 (first i after j at 1), closed at 74; between: 70 x 9 and the
        // i at 73 (excluded) -> 70.
        let r = run(&seq, 10, vec![]);
        let p = r.pair(0, 1);
        assert_eq!((p.intervals, p.si_sum), (1, 70));
        // Same answer through the ring (short) path: 30 accesses between.
        let mut seq = vec![1, 0];
        seq.extend(std::iter::repeat_n(9, 30));
        seq.extend([0, 1]);
        let r = run(&seq, 10, vec![]);
        assert_eq!(r.pair(0, 1).si_sum, 30);
        assert_eq!(r.metrics(0, r.pair(0, 1)).gamma, 0.2);
    }

    #[test]
    fn realized_versus_potential() {
        // 0 then 1 then 3, repeated: +1 and +3 follow 0 at once; +3 is potential only.
        let seq: Vec<usize> = (0..10).flat_map(|_| [0, 1, 3]).collect();
        let r = run(&seq, 4, vec![]);
        let max_a = 10;
        let s = r.block_scores(0, max_a);
        // (0, 1): 10 intervals of length 0 -> SA = 1, gamma 1.
        // (0, 3): 10 intervals of length 1 (the access to 1 between) -> SA 1, gamma 1.
        assert!((s.sa_next - 1.0).abs() < 1e-12);
        assert!((s.sa_realized - 1.0).abs() < 1e-12);
        assert!(s.sa_potential > 1.99 && s.sa_potential < 2.01 + 1e-9);
        // SD: lifetime of 0 = 28 - 1 = 27 accesses; 1 and 3 appear 9 times each in (1, 28],
        // 0 itself 9 times. The self pair's intervals have length 2 (rank 2, gamma 0.8).
        // Realized SD* = self + +1 = (0.8 x 9 + 9) / 27; potential adds +3's 9 / 27.
        assert!((s.sd_realized - 16.2 / 27.0).abs() < 1e-12);
        assert!((s.sd_potential - 25.2 / 27.0).abs() < 1e-12);
        assert!((s.sd_self - 7.2 / 27.0).abs() < 1e-12);
        // Weighting by AI: a block with half the accesses of the hottest has half the score.
        let half = r.block_scores(0, 20);
        assert!((half.sa_realized - 0.5).abs() < 1e-12);
    }

    #[test]
    fn absolute_locations_are_closed_lazily() {
        // Hot location 1000 (far from the region). Sequence:
        //  1:0 2:H 3:0 4:0 5:x 6:H 7:0
        // (0, H): opened at 1, closed at 2 (0); opened at 3, closed at 6: between 4:0
        // (excluded) and 5:x -> 1. Opened at 7: never closed.
        let seq = [0, 1000, 0, 0, 2, 1000, 0];
        let r = run(&seq, 4, vec![1000]);
        let p = r.hot_pair(0, 0).unwrap();
        assert_eq!((p.intervals, p.si_sum), (2, 1));
        // Lifetime of 0: 1..7 = 6; H within (1, 7]: 2 and 6.
        assert_eq!(p.in_lifetime, 2);
        // A location within the radius is an offset, not a second copy.
        let r = run(&[0, 1], 4, vec![101]);
        assert!(r.hot_pair(0, 0).is_none());
    }

    #[test]
    fn sequences_do_not_share_intervals() {
        let mut r = RegionAffinity::new(params(), 0, 4, vec![]);
        r.access(0, 1, 0);
        r.end_sequence(0);
        r.access(0, 1, 1);
        r.finish();
        assert_eq!(r.pair(0, 1).intervals, 0);
        assert_eq!(r.accesses(0), 1);
    }

    /// The definition run literally on one pair: per access, open or close its interval.
    fn naive(seq: &[usize], i: usize, j: usize) -> (u64, u64, u64) {
        let (mut open, mut n, mut sum) = (None::<usize>, 0u64, 0u64);
        for (t, &b) in seq.iter().enumerate() {
            if b == j && i != j {
                if let Some(f) = open.take() {
                    let between = seq[f + 1..t].iter().filter(|&&x| x == i).count();
                    n += 1;
                    sum += (t - f - 1 - between) as u64;
                }
            }
            if b == i && open.is_none() && i != j {
                open = Some(t);
            }
        }
        let first = seq.iter().position(|&x| x == i);
        let last = seq.iter().rposition(|&x| x == i);
        let in_life = match (first, last) {
            (Some(f), Some(l)) if l > f => seq[f + 1..=l].iter().filter(|&&x| x == j).count(),
            _ => 0,
        };
        (n, sum, in_life as u64)
    }

    #[test]
    fn random_sequences_match_the_definition() {
        // Long reuses (past the ring) and short ones, 12 blocks, radius 4, and one
        // absolute location (block 1000).
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20 {
            let mut seq = Vec::new();
            for _ in 0..1500 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let hot_share = if round % 2 == 0 { 10 } else { 60 };
                // Blocks 5..12 are rare: their reuses reach past the ring (the scan path).
                seq.push(if x % 100 < hot_share {
                    1000
                } else if (x >> 8) % 10 == 0 {
                    5 + (x >> 16) as usize % 7
                } else {
                    (x >> 16) as usize % 5
                });
            }
            let r = run(&seq, 12, vec![1000]);
            for i in 0..12 {
                for off in -4i64..=4 {
                    let j = i as i64 + off;
                    if !(0..12).contains(&j) || off == 0 {
                        continue;
                    }
                    let p = r.pair(i, off);
                    let (n, sum, life) = naive(&seq, i, j as usize);
                    assert_eq!(
                        (p.intervals, p.si_sum, p.in_lifetime),
                        (n, sum, life),
                        "round {round} pair ({i}, {j})"
                    );
                }
                let p = r.hot_pair(i, 0).unwrap();
                let (n, sum, life) = naive(&seq, i, 1000);
                assert_eq!((p.intervals, p.si_sum, p.in_lifetime), (n, sum, life));
            }
        }
    }
}
