//! Zooming in location and time (MemGaze sec. 5.3; DESIGN.md section 9), from one pass.
//!
//! [`Census`] takes every access once: per 64-byte line an access count, per 4 KiB page the
//! instructions that touch it and how often (exact) and the sampled reuse distances
//! (SHARDS) of its lines, per instruction its count and address span, and per line the last
//! time interval that touched it, which gives every node of the execution-interval tree its
//! exact footprint.
//!
//! - Location zoom ([`zoom_range`]): a segment is cut into `chunks` chunks; runs of
//!   contiguous chunks that each hold at least `threshold` of the parent's accesses become
//!   sub-regions (hot-contiguous), zoomed again with smaller chunks, down to `min_region`
//!   bytes. A parent with no hot chunk, or whose hot run is the parent itself, is final.
//! - Execution-interval tree: the trace is cut into `leaves` intervals of equal access count;
//!   they are merged pairwise bottom-up; each node knows its accesses, its footprint (distinct
//!   lines touched within it), the lines it touched first in the whole run (footprint growth)
//!   and its reuse, 1 - footprint / accesses.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::reuse::Shards;
use crate::fasthash;

pub const LINE: u64 = 64;
pub const PAGE: u64 = 4096;
const LINES_PER_PAGE: usize = (PAGE / LINE) as usize;
/// Instructions counted in a page's own slots; more go to [`Census::more_ips`].
const PAGE_IPS: usize = 4;
/// An empty slot.
const NO_IP: u32 = u32::MAX;

/// Knobs of the zoom.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ZoomParams {
    /// Chunks a region is cut into at each level.
    pub chunks: u32,
    /// A chunk is hot when it holds at least this share of its parent's accesses (0..1).
    pub threshold: f64,
    /// Regions this small (bytes) are not cut further.
    pub min_region: u64,
    /// The hottest instructions whose targets become hot-access regions.
    pub hot_instructions: usize,
    /// Leaves of the execution-interval tree (a power of two).
    pub leaves: usize,
    /// SHARDS rate of the per-region reuse distance.
    pub shards_rate: f64,
}

impl Default for ZoomParams {
    fn default() -> Self {
        ZoomParams {
            chunks: 8,
            threshold: 0.10,
            min_region: 4096,
            hot_instructions: 5,
            leaves: 256,
            shards_rate: 0.05,
        }
    }
}

impl ZoomParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(2..=4096).contains(&self.chunks) {
            return Err(format!(
                "--chunks {} must be between 2 and 4096",
                self.chunks
            ));
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(format!(
                "--threshold {} must be a percentage in (0, 100]",
                self.threshold * 100.0
            ));
        }
        if self.min_region < LINE {
            return Err(format!(
                "--min-region {} must be at least {LINE} bytes (one line)",
                self.min_region
            ));
        }
        if !self.leaves.is_power_of_two() || !(2..=1 << 14).contains(&self.leaves) {
            return Err(format!(
                "--leaves {} must be a power of two between 2 and 16384",
                self.leaves
            ));
        }
        Ok(())
    }
}

#[derive(Clone)]
struct PageStats {
    lines: [u32; LINES_PER_PAGE],
    /// Per line: 1 + the last interval leaf that touched it (0: never).
    last_leaf: [u16; LINES_PER_PAGE],
    total: u64,
    /// The first instructions that touched the page (by number) and their accesses.
    ips: [(u32, u64); PAGE_IPS],
    /// Sampled reuse distances (lines) of the page's lines: sum and count.
    d_sum: f64,
    d_n: u64,
}

impl Default for PageStats {
    fn default() -> Self {
        PageStats {
            lines: [0; LINES_PER_PAGE],
            last_leaf: [0; LINES_PER_PAGE],
            total: 0,
            ips: [(NO_IP, 0); PAGE_IPS],
            d_sum: 0.0,
            d_n: 0,
        }
    }
}

/// Per instruction: accesses and the span of its targets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IpStats {
    pub accesses: u64,
    pub min: u64,
    pub max: u64,
}

/// What one pass over the accesses learns.
pub struct Census {
    params: ZoomParams,
    index: HashMap<u64, u32, fasthash::Build>,
    keys: Vec<u64>,
    pages: Vec<PageStats>,
    last: (u64, usize),
    /// Per instruction: its statistics and its number.
    ips: HashMap<u64, (IpStats, u32), fasthash::Build>,
    /// The instructions by number.
    ip_of: Vec<u64>,
    /// Accesses of the instructions beyond a page's own slots, key `page << 32 | instruction
    /// number`: with the slots, every page's count per instruction is exact. (Four
    /// space-saving slots per page, which replaced the least counted, made up the code of a
    /// page that more instructions shared: LAMMPS's pair loop, ten instructions on a 3 KiB
    /// table, came out as the exit-time `free` that touched it last.)
    more_ips: HashMap<u64, u64, fasthash::MixedBuild>,
    shards: Shards,
    /// Accesses per interval leaf.
    leaf_size: u64,
    now: u64,
    /// Footprint and first touches per tree node: level 0 = leaves.
    footprint: Vec<Vec<u64>>,
    first_touch: Vec<u64>,
    leaf_accesses: Vec<u64>,
}

impl Census {
    /// A census for about `expected` accesses (sizes the interval leaves).
    pub fn new(params: ZoomParams, expected: u64) -> Census {
        let leaves = params.leaves;
        let levels = leaves.trailing_zeros() as usize + 1;
        Census {
            params,
            index: HashMap::default(),
            keys: Vec::new(),
            pages: Vec::new(),
            last: (u64::MAX, 0),
            ips: HashMap::default(),
            ip_of: Vec::new(),
            more_ips: HashMap::default(),
            shards: Shards::new(params.shards_rate),
            leaf_size: expected.div_ceil(leaves as u64).max(1),
            now: 0,
            footprint: (0..levels).map(|l| vec![0; leaves >> l]).collect(),
            first_touch: vec![0; leaves],
            leaf_accesses: vec![0; leaves],
        }
    }

    #[inline]
    fn page(&mut self, p: u64) -> usize {
        if self.last.0 == p {
            return self.last.1;
        }
        let k = match self.index.get(&p) {
            Some(&k) => k as usize,
            None => {
                let k = self.pages.len();
                self.index.insert(p, k as u32);
                self.keys.push(p);
                self.pages.push(PageStats::default());
                k
            }
        };
        self.last = (p, k);
        k
    }

    /// One access (all threads in trace order).
    #[inline]
    pub fn access(&mut self, ip: u64, addr: u64) {
        let leaf = ((self.now / self.leaf_size) as usize).min(self.params.leaves - 1);
        self.now += 1;
        self.leaf_accesses[leaf] += 1;
        let k = self.page(addr / PAGE);
        let line = ((addr % PAGE) / LINE) as usize;
        let d = self.shards.access(addr / LINE);
        let ps = &mut self.pages[k];
        ps.lines[line] = ps.lines[line].saturating_add(1);
        ps.total += 1;
        if let Some(Some(d)) = d {
            ps.d_sum += d as f64;
            ps.d_n += 1;
        }
        // Interval footprints: the first access of a line within a leaf counts for every
        // node that starts after the line's previous leaf.
        let prev = ps.last_leaf[line] as usize;
        if prev != leaf + 1 {
            ps.last_leaf[line] = (leaf + 1) as u16;
            if prev == 0 {
                self.first_touch[leaf] += 1;
            }
            for (lvl, fp) in self.footprint.iter_mut().enumerate() {
                let node = leaf >> lvl;
                if prev != 0 && prev > node << lvl {
                    break;
                }
                fp[node] += 1;
            }
        }
        let (st, id) = match self.ips.entry(ip) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                self.ip_of.push(ip);
                let id = u32::try_from(self.ip_of.len() - 1).unwrap_or(NO_IP - 1);
                let st = IpStats {
                    accesses: 0,
                    min: addr,
                    max: addr,
                };
                e.insert((st, id))
            }
        };
        st.accesses += 1;
        st.min = st.min.min(addr);
        st.max = st.max.max(addr);
        let id = *id;
        let slots = &mut self.pages[k].ips;
        match slots.iter_mut().find(|s| s.0 == id || s.0 == NO_IP) {
            Some(slot) => *slot = (id, slot.1 + 1),
            None => {
                *self
                    .more_ips
                    .entry((k as u64) << 32 | u64::from(id))
                    .or_default() += 1
            }
        }
    }

    pub fn accesses(&self) -> u64 {
        self.now
    }

    /// Instructions by accesses, most first.
    pub fn hottest_instructions(&self, n: usize) -> Vec<(u64, IpStats)> {
        let mut v: Vec<(u64, IpStats)> = self.ips.iter().map(|(&k, &(v, _))| (k, v)).collect();
        v.sort_by(|a, b| b.1.accesses.cmp(&a.1.accesses).then(a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }

    /// The `n` hottest lines: (address, accesses).
    pub fn hottest_lines(&self, n: usize) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for (k, ps) in self.pages.iter().enumerate() {
            for (l, &c) in ps.lines.iter().enumerate() {
                if c > 0 {
                    v.push((self.keys[k] * PAGE + l as u64 * LINE, u64::from(c)));
                }
            }
        }
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }

    /// Sorted pages for range queries.
    pub fn layout(&self) -> Layout<'_> {
        let mut order: Vec<usize> = (0..self.keys.len()).collect();
        order.sort_unstable_by_key(|&k| self.keys[k]);
        let ip = |id: u32| self.ip_of[id as usize];
        let mut page_ips: Vec<(u32, u64, u64)> = self
            .more_ips
            .iter()
            .map(|(&key, &c)| ((key >> 32) as u32, ip((key & 0xffff_ffff) as u32), c))
            .collect();
        for (k, ps) in self.pages.iter().enumerate() {
            for &(id, c) in ps.ips.iter().filter(|s| s.0 != NO_IP) {
                page_ips.push((k as u32, ip(id), c));
            }
        }
        page_ips.sort_unstable();
        Layout {
            census: self,
            order,
            page_ips,
        }
    }

    /// The execution-interval tree (level 0 = leaves; the last level is the whole run).
    pub fn interval_tree(&self) -> Vec<Vec<IntervalNode>> {
        let mut levels = Vec::new();
        let mut acc = self.leaf_accesses.clone();
        let mut first = self.first_touch.clone();
        for (lvl, fp) in self.footprint.iter().enumerate() {
            let nodes = fp
                .iter()
                .enumerate()
                .map(|(i, &f)| IntervalNode {
                    level: lvl as u32,
                    index: i as u32,
                    first_access: ((i as u64) << lvl) * self.leaf_size,
                    accesses: acc[i],
                    footprint_lines: f,
                    new_lines: first[i],
                    reuse: if acc[i] > 0 {
                        1.0 - f as f64 / acc[i] as f64
                    } else {
                        0.0
                    },
                })
                .collect();
            levels.push(nodes);
            acc = acc.chunks(2).map(|c| c.iter().sum()).collect();
            first = first.chunks(2).map(|c| c.iter().sum()).collect();
        }
        levels
    }
}

/// One node of the execution-interval tree.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalNode {
    /// 0 for leaves.
    pub level: u32,
    pub index: u32,
    /// Index of its first access in the trace.
    pub first_access: u64,
    pub accesses: u64,
    /// Distinct 64-byte lines touched within the interval.
    pub footprint_lines: u64,
    /// Lines touched for the first time in the whole run (footprint growth).
    pub new_lines: u64,
    /// 1 - footprint / accesses: the share of accesses to a line already touched in it.
    pub reuse: f64,
}

/// Pages in address order, with range sums.
pub struct Layout<'a> {
    census: &'a Census,
    order: Vec<usize>,
    /// (page, instruction, accesses), by page.
    page_ips: Vec<(u32, u64, u64)>,
}

/// What a byte range holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeStats {
    pub accesses: u64,
    pub lines: u64,
    /// First and one-past-last accessed byte (line granularity).
    pub lo: u64,
    pub hi: u64,
    pub d_sum: f64,
    pub d_n: u64,
    /// Instructions and their accesses in the range, most first (exact in whole pages; a page
    /// the range cuts lends each in proportion to the accesses inside).
    pub ips: Vec<(u64, u64)>,
}

impl Layout<'_> {
    fn pages_in(&self, lo: u64, hi: u64) -> &[usize] {
        let c = self.census;
        let a = self.order.partition_point(|&k| c.keys[k] < lo / PAGE);
        let b = self
            .order
            .partition_point(|&k| c.keys[k] < hi.div_ceil(PAGE));
        &self.order[a..b]
    }

    /// Accesses per line-aligned range [lo, hi), cut into `n` equal chunks of `chunk` bytes.
    fn chunk_counts(&self, lo: u64, chunk: u64, n: usize) -> Vec<u64> {
        let mut out = vec![0u64; n];
        let hi = lo + chunk * n as u64;
        for &k in self.pages_in(lo, hi) {
            let ps = &self.census.pages[k];
            let base = self.census.keys[k] * PAGE;
            if chunk % PAGE == 0 && base >= lo && base + PAGE <= hi {
                out[((base - lo) / chunk) as usize] += ps.total;
                continue;
            }
            for (l, &c) in ps.lines.iter().enumerate() {
                let a = base + l as u64 * LINE;
                if c > 0 && a >= lo && a < hi {
                    out[((a - lo) / chunk) as usize] += u64::from(c);
                }
            }
        }
        out
    }

    /// Everything known about the lines in [lo, hi).
    pub fn stats(&self, lo: u64, hi: u64) -> RangeStats {
        let mut s = RangeStats {
            lo: u64::MAX,
            ..Default::default()
        };
        let mut ips: HashMap<u64, u64, fasthash::Build> = HashMap::default();
        for &k in self.pages_in(lo, hi) {
            let ps = &self.census.pages[k];
            let base = self.census.keys[k] * PAGE;
            let whole = base >= lo && base + PAGE <= hi;
            let mut page_acc = 0;
            for (l, &c) in ps.lines.iter().enumerate() {
                let a = base + l as u64 * LINE;
                if c > 0 && a >= lo && a < hi {
                    s.accesses += u64::from(c);
                    page_acc += u64::from(c);
                    s.lines += 1;
                    s.lo = s.lo.min(a);
                    s.hi = s.hi.max(a + LINE);
                }
            }
            if page_acc == 0 {
                continue;
            }
            // A page cut by the range lends its sampled distances and instructions in
            // proportion to the accesses inside.
            let share = if whole {
                1.0
            } else {
                page_acc as f64 / ps.total as f64
            };
            s.d_sum += ps.d_sum * share;
            s.d_n += (ps.d_n as f64 * share).round() as u64;
            let page = k as u32;
            let a = self.page_ips.partition_point(|x| x.0 < page);
            let b = self.page_ips.partition_point(|x| x.0 <= page);
            for &(_, ip, c) in &self.page_ips[a..b] {
                *ips.entry(ip).or_default() += (c as f64 * share).round() as u64;
            }
        }
        if s.lo == u64::MAX {
            s.lo = lo;
            s.hi = lo;
        }
        s.ips = ips.into_iter().collect();
        s.ips.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        s
    }

    /// All accessed line-aligned extents, cut where `gap` bytes or more are never accessed.
    pub fn extents(&self, gap: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &k in &self.order {
            let ps = &self.census.pages[k];
            let base = self.census.keys[k] * PAGE;
            for (l, &c) in ps.lines.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let a = base + l as u64 * LINE;
                match out.last_mut() {
                    Some(e) if a < e.1 + gap => e.1 = a + LINE,
                    _ => out.push((a, a + LINE)),
                }
            }
        }
        out
    }

    /// The densest window of `len` bytes (line-aligned) in [lo, hi).
    pub fn densest(&self, lo: u64, hi: u64, len: u64) -> u64 {
        let lines = (hi - lo).div_ceil(LINE) as usize;
        let w = (len / LINE) as usize;
        if w >= lines {
            return lo;
        }
        let counts = self.chunk_counts(lo, LINE, lines);
        let mut sum: u64 = counts[..w].iter().sum();
        let (mut best, mut at) = (sum, 0usize);
        for s in 1..=lines - w {
            sum = sum + counts[s + w - 1] - counts[s - 1];
            if sum > best {
                best = sum;
                at = s;
            }
        }
        lo + at as u64 * LINE
    }
}

/// A node of the location zoom.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoomNode {
    pub lo: u64,
    pub hi: u64,
    pub accesses: u64,
    pub children: Vec<ZoomNode>,
}

/// Zooms into [lo, hi) (line-aligned, trimmed to its accessed lines) holding `accesses`.
pub fn zoom_range(layout: &Layout, p: &ZoomParams, lo: u64, hi: u64, accesses: u64) -> ZoomNode {
    let mut node = ZoomNode {
        lo,
        hi,
        accesses,
        children: Vec::new(),
    };
    let size = hi - lo;
    if size <= p.min_region || accesses == 0 {
        return node;
    }
    let n = p.chunks as usize;
    let mut chunk = size.div_ceil(n as u64).next_multiple_of(LINE);
    if chunk >= PAGE {
        chunk = chunk.next_multiple_of(PAGE);
    }
    let n = size.div_ceil(chunk) as usize;
    let counts = layout.chunk_counts(lo, chunk, n);
    let hot = |c: u64| c as f64 >= p.threshold * accesses as f64;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (k, &c) in counts.iter().enumerate() {
        if !hot(c) {
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.1 == k => r.1 = k + 1,
            _ => runs.push((k, k + 1)),
        }
    }
    for (a, b) in runs {
        let s = layout.stats(lo + a as u64 * chunk, (lo + b as u64 * chunk).min(hi));
        if s.accesses == 0 || (s.lo == lo && s.hi == hi) {
            continue;
        }
        node.children
            .push(zoom_range(layout, p, s.lo, s.hi, s.accesses));
    }
    node
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ZoomParams {
        ZoomParams {
            leaves: 4,
            ..ZoomParams::default()
        }
    }

    #[test]
    fn interval_tree_footprints_are_exact() {
        // 4 leaves of 4 accesses: lines A A B B | A C C C | D D D D | A B C D.
        let (a, b, c, d) = (0x10000u64, 0x10040, 0x10080, 0x100c0);
        let seq = [a, a, b, b, a, c, c, c, d, d, d, d, a, b, c, d];
        let mut cs = Census::new(params(), seq.len() as u64);
        for &x in &seq {
            cs.access(0x400000, x);
        }
        let t = cs.interval_tree();
        let fp = |l: usize| t[l].iter().map(|n| n.footprint_lines).collect::<Vec<_>>();
        assert_eq!(fp(0), vec![2, 2, 1, 4]);
        assert_eq!(fp(1), vec![3, 4]);
        assert_eq!(fp(2), vec![4]);
        let new = |l: usize| t[l].iter().map(|n| n.new_lines).collect::<Vec<_>>();
        assert_eq!(new(0), vec![2, 1, 1, 0]);
        assert_eq!(new(2), vec![4]);
        assert_eq!(t[0][2].reuse, 0.75);
        assert_eq!(t[1][1].first_access, 8);
    }

    /// A page that ten instructions share (LAMMPS's pair loop on its small tables), and then
    /// one that touches it once at exit: each is counted exactly, where four space-saving slots
    /// gave the last one the most.
    #[test]
    fn every_instruction_of_a_shared_page_is_counted_exactly() {
        let base = 0x5000_0000u64;
        let mut cs = Census::new(ZoomParams::default(), 0);
        for r in 0..1000u64 {
            for ip in 0..10u64 {
                cs.access(0x1000 + ip, base + ((r + ip) % 64) * 64);
            }
        }
        cs.access(0x9999, base);
        // Another page, its instructions in their slots only; and many pages of one
        // instruction beyond the slots (all keys with the same instruction number).
        cs.access(0x1000, base + PAGE);
        for p in 2..2000u64 {
            for ip in 0..6u64 {
                cs.access(0x2000 + ip, base + p * PAGE);
            }
        }
        let layout = cs.layout();
        let s = layout.stats(base, base + PAGE);
        assert_eq!(s.accesses, 10_001);
        assert_eq!(s.ips.len(), 11);
        assert!(s.ips[..10]
            .iter()
            .all(|&(ip, c)| (0x1000..0x100a).contains(&ip) && c == 1000));
        assert_eq!(s.ips[10], (0x9999, 1));
        assert_eq!(
            layout.stats(base + PAGE, base + 2 * PAGE).ips,
            vec![(0x1000, 1)]
        );
        let s = layout.stats(base + 2 * PAGE, base + 2000 * PAGE);
        assert_eq!(
            s.ips,
            (0..6).map(|ip| (0x2000 + ip, 1998)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn zoom_finds_the_hot_part_of_a_segment() {
        // A 64 KiB array: its first 4 KiB take 90% of the accesses, the rest is touched once
        // per line.
        let base = 0x7000_0000u64;
        let mut cs = Census::new(ZoomParams::default(), 0);
        for k in 0..(60 * 1024 / 64) {
            cs.access(1, base + 4096 + k * 64);
        }
        for r in 0..130 {
            for k in 0..64 {
                cs.access(2, base + k * 64 + (r % 8) * 8);
            }
        }
        let layout = cs.layout();
        let ext = layout.extents(1 << 20);
        assert_eq!(ext, vec![(base, base + 65536)]);
        let s = layout.stats(base, base + 65536);
        assert_eq!(s.accesses, 960 + 130 * 64);
        assert_eq!(s.lines, 1024);
        let root = zoom_range(
            &layout,
            &ZoomParams::default(),
            base,
            base + 65536,
            s.accesses,
        );
        // 8 KiB chunks: the first holds 90%; zoomed again in 1 KiB chunks, its first four.
        assert_eq!(root.children.len(), 1);
        assert_eq!(
            (root.children[0].lo, root.children[0].hi),
            (base, base + 8192)
        );
        assert_eq!(root.children[0].children.len(), 1);
        let hot = &root.children[0].children[0];
        assert!(hot.children.is_empty());
        assert_eq!((hot.lo, hot.hi), (base, base + 4096));
        assert_eq!(hot.accesses, 130 * 64);
        // The instruction behind it, and the densest 4 KiB window.
        assert_eq!(layout.stats(base, base + 4096).ips[0], (2, 130 * 64));
        assert_eq!(layout.densest(base, base + 65536, 4096), base);
        // A uniform array is final at once.
        let mut cs = Census::new(ZoomParams::default(), 0);
        for k in 0..4096 {
            cs.access(1, base + k * 64);
        }
        let layout = cs.layout();
        let root = zoom_range(
            &layout,
            &ZoomParams::default(),
            base,
            base + 4096 * 64,
            4096,
        );
        assert!(root.children.is_empty());
    }
}
