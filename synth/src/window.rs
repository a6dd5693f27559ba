//! Pass 1: GS Patterns' windows, per instruction address (DESIGN §4).
//!
//! Two windows, loads and stores, of up to `window_rows` rows, one row per instruction
//! address. A row collects the element indices (address / access size) of its instruction.
//! When a row reaches `row_bytes` of indices, or a window has no room for a new row, every row
//! of both windows is analysed and both windows reset; a row whose consecutive distances are
//! not all in {-1, 0, +1} marks its instruction as a gather (load window) or scatter (store
//! window) candidate for that window. The final partial window is analysed too.
//!
//! A row's verdict only needs its previous index and whether a large step was seen, so rows
//! store no indices, and a reset touches only the rows in use (generation tags), not all
//! `window_rows` slots: the cost is constant per access.

use std::collections::HashMap;

use mgbench_capture::trace::{Access, AccessKind};

use crate::record::Recorder;

/// Speculative recording of an (instruction, kind) from its first access (see [`Windows`]).
#[derive(Debug)]
pub enum Speculation {
    /// Not started (no access of this kind yet).
    None,
    /// Recording since the first access; decided when its first window is analysed.
    /// (Boxed: the per-instruction table stays small, so checking the state is one load.)
    Pending(Box<Recorder>),
    /// Its first window was irregular: recording every index since instance 0.
    Recording(Box<Recorder>),
    /// Regular in its first window, or over the budget: pass 2 records it if it is kept.
    Dropped,
}

/// What pass 1 learnt: per-instruction statistics (by id), the accesses seen, and per id and
/// kind (0 loads, 1 stores) the speculative recorders and filter 5's numbers.
pub struct Pass1 {
    pub stats: Vec<IpStats>,
    pub accesses: u64,
    pub spec: Vec<[Speculation; 2]>,
    pub dists: Vec<[DistStats; 2]>,
}

/// Per-instruction counts gathered in pass 1.
#[derive(Debug, Clone, Default)]
pub struct IpStats {
    pub ip: u64,
    pub loads: u64,
    pub stores: u64,
    /// Windows in which the instruction's load row was irregular.
    pub gather_windows: u64,
    /// Windows in which its store row was irregular.
    pub scatter_windows: u64,
    /// Access size of its first access (element size).
    pub element_size: u8,
    /// Its loads and stores in the stack of the thread that made them (see
    /// [`Windows::set_stack`]).
    pub stack_loads: u64,
    pub stack_stores: u64,
}

/// Most distinct distances [`DistStats`] tracks: filter 5 can be decided in pass 1 when
/// `--min-unique-distances` is at most this.
pub const MAX_PREFILTER_DISTANCES: usize = 8;

/// Filter 5's numbers for one (instruction, kind) over its whole stream, gathered in pass 1
/// so that candidates the filter drops need no recording (and no second pass): how many
/// distances are far (|d| >= the oob distance) and the first few distinct distances.
#[derive(Debug, Clone, Copy, Default)]
pub struct DistStats {
    last: u64,
    /// The [`Windows`] epoch of `last`: a distance to an index of an earlier epoch (another
    /// sample window or thread) is not one.
    epoch: u32,
    /// Far distances (counted until the tracking limit is reached: then the filter keeps
    /// the instruction whatever this says).
    pub far: u64,
    distinct: [i64; MAX_PREFILTER_DISTANCES],
    /// Distinct distances seen, up to the tracking limit.
    pub distinct_len: u8,
}

impl DistStats {
    #[inline(always)]
    fn push(&mut self, index: u64, first: bool, epoch: u32, oob: u64, limit: usize) {
        // With `limit` distinct distances the filter keeps the instruction whatever its far
        // jumps: nothing more to count.
        if usize::from(self.distinct_len) >= limit {
            return;
        }
        if !first && self.epoch == epoch {
            let d = index.wrapping_sub(self.last) as i64;
            self.far += u64::from(d.unsigned_abs() >= oob);
            let n = usize::from(self.distinct_len);
            // Strided streams repeat their last distance: skip the scan then.
            if (n == 0 || self.distinct[n - 1] != d) && !self.distinct[..n].contains(&d) {
                self.distinct[n] = d;
                self.distinct_len += 1;
            }
        }
        self.last = index;
        self.epoch = epoch;
    }

    /// Distinct distances, exact while below the tracking limit.
    pub fn unique(&self) -> usize {
        usize::from(self.distinct_len)
    }

    /// Fraction of the `instances - 1` distances that are far.
    pub fn far_fraction(&self, instances: u64) -> f64 {
        if instances <= 1 {
            0.0
        } else {
            self.far as f64 / (instances - 1) as f64
        }
    }
}

#[derive(Clone, Copy)]
struct Row {
    id: u32,
    len: u32,
    cap: u32,
    last: u64,
    irregular: bool,
}

/// One window (loads or stores).
struct Window {
    generation: u32,
    /// Per instruction id: generation of its current row, and its row index.
    /// (generation, row index), side by side: one cache line per lookup.
    row_of: Vec<(u32, u32)>,
    rows: Vec<Row>,
}

impl Window {
    fn new() -> Window {
        Window {
            generation: 1,
            row_of: Vec::new(),
            rows: Vec::new(),
        }
    }
}

/// Pass-1 state: windows plus per-instruction statistics.
///
/// It also records index streams speculatively so that a second pass over the trace is
/// usually unnecessary: every (instruction, kind) records from its first access; when its
/// first window is analysed the recorder is kept if that window was irregular (a real gather
/// nearly always is) and dropped otherwise. A kept recorder is exact from instance 0. At most
/// `budget` recorders are kept; candidates without one are recorded by pass 2.
pub struct Windows {
    /// The stack of the thread whose accesses come now: its start and length (0: unknown).
    stack: (u64, u64),
    rows_per_window: usize,
    row_bytes: usize,
    ids: HashMap<u64, u32, crate::fasthash::Build>,
    /// Small direct-mapped cache in front of `ids` (accesses cycle over few instructions).
    cache: Vec<(u64, u32)>,
    stats: Vec<IpStats>,
    windows: [Window; 2],
    accesses: u64,
    /// Per instruction id and kind (0 loads, 1 stores).
    spec: Vec<[Speculation; 2]>,
    /// Per instruction id and kind: filter 5's numbers (when `dist_limit` > 0).
    dists: Vec<[DistStats; 2]>,
    dist_limit: usize,
    spec_cap: usize,
    oob_distance: u64,
    spec_budget: usize,
    spec_kept: usize,
    /// Bumped at each [`Windows::boundary`].
    epoch: u32,
}

/// 16384 entries (256 KiB, in L2): programs cycle over hundreds to thousands of memory
/// instructions, and a miss costs a hash-map probe.
const CACHE_BITS: u32 = 14;

impl Windows {
    pub fn new(rows_per_window: usize, row_bytes: usize) -> Windows {
        Windows {
            rows_per_window,
            row_bytes,
            ids: HashMap::default(),
            cache: vec![(u64::MAX, 0); 1 << CACHE_BITS],
            stats: Vec::new(),
            windows: [Window::new(), Window::new()],
            accesses: 0,
            spec: Vec::new(),
            dists: Vec::new(),
            dist_limit: 0,
            spec_cap: 0,
            oob_distance: 0,
            spec_budget: 0,
            spec_kept: 0,
            epoch: 0,
            stack: (0, 0),
        }
    }

    /// The stack of the thread whose accesses come next (`start..end`, see [`Stacks`]):
    /// accesses there are counted per instruction (`IpStats::stack_loads`, `stack_stores`).
    pub fn set_stack(&mut self, (start, end): (u64, u64)) {
        self.stack = (start, end.saturating_sub(start));
    }

    /// Enables speculative recording: patterns capped at `cap`, at most `budget` kept.
    pub fn with_speculation(mut self, cap: usize, oob_distance: u64, budget: usize) -> Windows {
        self.spec_cap = cap;
        self.oob_distance = oob_distance;
        self.spec_budget = budget;
        self
    }

    /// Tracks filter 5's numbers per (instruction, kind): up to `limit` distinct distances
    /// (at most [`MAX_PREFILTER_DISTANCES`]) and how many are at least `oob_distance` long.
    pub fn with_distance_stats(mut self, limit: usize, oob_distance: u64) -> Windows {
        self.dist_limit = limit.min(MAX_PREFILTER_DISTANCES);
        self.oob_distance = oob_distance;
        self
    }

    #[inline]
    fn id(&mut self, ip: u64, size: u8) -> u32 {
        let slot = (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_BITS)) as usize;
        let (cip, cid) = self.cache[slot];
        if cip == ip {
            return cid;
        }
        let next = self.stats.len() as u32;
        let id = *self.ids.entry(ip).or_insert(next);
        if id == next {
            self.stats.push(IpStats {
                ip,
                element_size: size.max(1),
                ..IpStats::default()
            });
            for w in &mut self.windows {
                w.row_of.push((0, 0));
            }
            self.spec.push([Speculation::None, Speculation::None]);
            self.dists.push([DistStats::default(); 2]);
        }
        self.cache[slot] = (ip, id);
        id
    }

    /// Feeds one access.
    #[inline]
    pub fn push(&mut self, a: &Access) {
        self.accesses += 1;
        let id = self.id(a.ip, a.size);
        let st = &mut self.stats[id as usize];
        let in_stack = u64::from(a.addr.wrapping_sub(self.stack.0) < self.stack.1);
        let (w, first) = match a.kind {
            AccessKind::Load => {
                st.loads += 1;
                st.stack_loads += in_stack;
                (0, st.loads == 1)
            }
            AccessKind::Store => {
                st.stores += 1;
                st.stack_stores += in_stack;
                (1, st.stores == 1)
            }
        };
        let size = u64::from(st.element_size);
        // A 64-bit division costs more than the rest of this function: element sizes are
        // nearly always powers of two.
        let index = if size.is_power_of_two() {
            a.addr >> size.trailing_zeros()
        } else {
            a.addr / size
        };
        if self.dist_limit > 0 {
            let epoch = self.epoch;
            self.dists[id as usize][w].push(
                index,
                first,
                epoch,
                self.oob_distance,
                self.dist_limit,
            );
        }
        if self.spec_budget > 0 {
            match &mut self.spec[id as usize][w] {
                s @ Speculation::None => {
                    let mut r = Box::new(Recorder::new(self.spec_cap, self.oob_distance));
                    r.push(index);
                    *s = Speculation::Pending(r);
                }
                Speculation::Pending(r) | Speculation::Recording(r) => r.push(index),
                Speculation::Dropped => {}
            }
        }
        let win = &self.windows[w];
        let has_row = win.row_of[id as usize].0 == win.generation;
        if !has_row && win.rows.len() >= self.rows_per_window {
            self.flush();
        }
        let win = &mut self.windows[w];
        if win.row_of[id as usize].0 != win.generation {
            let cap = (self.row_bytes as u64 / size).max(1) as u32;
            win.row_of[id as usize] = (win.generation, win.rows.len() as u32);
            win.rows.push(Row {
                id,
                len: 1,
                cap,
                last: index,
                irregular: false,
            });
            if cap == 1 {
                self.flush();
            }
            return;
        }
        let row = &mut win.rows[win.row_of[id as usize].1 as usize];
        let d = index.wrapping_sub(row.last) as i64;
        if !(-1..=1).contains(&d) {
            row.irregular = true;
        }
        row.last = index;
        row.len += 1;
        if row.len >= row.cap {
            self.flush();
        }
    }

    /// The accesses pushed next do not follow the ones before in program order (another
    /// sample window, or another thread): the windows are analysed and reset, and no
    /// distance spans the boundary. Without it a sampled trace's streams jumped at every
    /// window and came out as gathers and scatters (a STREAM triad gave five).
    pub fn boundary(&mut self) {
        self.flush();
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Analyses every row of both windows and resets them.
    pub fn flush(&mut self) {
        for (w, win) in self.windows.iter_mut().enumerate() {
            for row in &win.rows {
                if row.irregular {
                    let st = &mut self.stats[row.id as usize];
                    if w == 0 {
                        st.gather_windows += 1;
                    } else {
                        st.scatter_windows += 1;
                    }
                }
                if self.spec_budget > 0 {
                    let s = &mut self.spec[row.id as usize][w];
                    if matches!(s, Speculation::Pending(_)) {
                        let keep = row.irregular && self.spec_kept < self.spec_budget;
                        *s = match std::mem::replace(s, Speculation::Dropped) {
                            Speculation::Pending(r) if keep => {
                                self.spec_kept += 1;
                                Speculation::Recording(r)
                            }
                            _ => Speculation::Dropped,
                        };
                    }
                }
            }
            win.rows.clear();
            win.generation = win.generation.wrapping_add(1).max(1);
        }
    }

    /// Analyses the final partial window and returns what pass 1 learnt.
    pub fn finish(mut self) -> Pass1 {
        self.flush();
        Pass1 {
            stats: self.stats,
            accesses: self.accesses,
            spec: self.spec,
            dists: self.dists,
        }
    }
}

/// The stacks of a trace's threads (the mappings named `[stack]` and `[thread stack]`), and
/// which one each thread uses: accesses to a thread's own stack are counted for the stack
/// filter with one comparison each (see [`Windows::set_stack`]).
#[derive(Debug, Default)]
pub struct Stacks {
    /// Start and end, in address order.
    ranges: Vec<(u64, u64)>,
    /// The stack each thread used last.
    of_thread: HashMap<u32, (u64, u64)>,
}

impl Stacks {
    /// Accesses of a chunk looked at to tell which stack is its thread's.
    const PROBE: usize = 256;

    /// Adds the stacks among `maps` (a mappings frame).
    pub fn add(&mut self, maps: &[mgbench_capture::trace::Mapping]) {
        let new = maps
            .iter()
            .filter(|m| mgbench_capture::trace::is_stack(&m.path))
            .map(|m| (m.start, m.end));
        self.ranges.extend(new);
        self.ranges.sort_unstable();
        // Copies of one stack that grew overlap: one range. (Stacks of different threads
        // never do: a guard page lies between them.)
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.ranges.len());
        for &(s, e) in &self.ranges {
            match merged.last_mut() {
                Some(last) if s < last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.ranges = merged;
    }

    /// The stack of the thread that made `accesses` (one chunk): the stack that most of its
    /// first accesses in any stack fall in, or, where none does, the one that thread used
    /// last ((0, 0): none known). A thread's stack is found anew in each chunk, since
    /// captures may give a new thread the number of one that ended.
    pub fn of(&mut self, thread: u32, accesses: &[Access]) -> (u64, u64) {
        if self.ranges.is_empty() {
            return (0, 0);
        }
        let mut hits: Vec<((u64, u64), u32)> = Vec::new();
        for a in accesses.iter().take(Self::PROBE) {
            let i = self.ranges.partition_point(|&(s, _)| s <= a.addr);
            let Some(&r) = i.checked_sub(1).map(|i| &self.ranges[i]) else {
                continue;
            };
            if a.addr >= r.1 {
                continue;
            }
            match hits.iter_mut().find(|(h, _)| *h == r) {
                Some((_, n)) => *n += 1,
                None => hits.push((r, 1)),
            }
        }
        match hits.iter().max_by_key(|&&(_, n)| n) {
            Some(&(r, _)) => {
                self.of_thread.insert(thread, r);
                r
            }
            None => self.of_thread.get(&thread).copied().unwrap_or((0, 0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(ip: u64, index: u64) -> Access {
        Access {
            ip,
            addr: index * 8,
            size: 8,
            kind: AccessKind::Load,
        }
    }

    #[test]
    fn unit_stride_is_never_flagged_random_is() {
        let mut w = Windows::new(1024, 64);
        let mut state = 1u64;
        for i in 0..10_000u64 {
            w.push(&load(0x10, i)); // unit stride
            w.push(&load(0x20, i / 3)); // repeats and +1: still regular
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            w.push(&load(0x30, state >> 40)); // random
        }
        let Pass1 {
            stats, accesses: n, ..
        } = w.finish();
        assert_eq!(n, 30_000);
        let by_ip = |ip| stats.iter().find(|s| s.ip == ip).unwrap().clone();
        assert_eq!(by_ip(0x10).gather_windows, 0);
        assert_eq!(by_ip(0x20).gather_windows, 0);
        // 8 entries of 8 bytes per row: about one window per 8 accesses of the hottest ip.
        assert!(by_ip(0x30).gather_windows > 1000);
        assert_eq!(by_ip(0x30).scatter_windows, 0);
    }

    #[test]
    fn distance_stats_count_distinct_up_to_the_limit_and_far_jumps() {
        let mut w = Windows::new(1024, 64).with_distance_stats(3, 100);
        for i in [0u64, 1, 2, 3, 500, 501, 0, 1, 7] {
            w.push(&load(0x10, i));
        }
        let Pass1 { stats, dists, .. } = w.finish();
        let d = &dists[0][0];
        // Distances 1, 1, 1, 497, 1, -501, 1, 6: distinct {1, 497, -501, 6}, tracked to 3.
        assert_eq!(d.unique(), 3);
        assert_eq!(d.far, 2);
        assert_eq!(d.far_fraction(stats[0].loads), 2.0 / 8.0);
        assert_eq!(dists[0][1].unique(), 0);
    }

    #[test]
    fn no_distance_spans_a_boundary() {
        // Unit-stride runs far apart, as a sampled trace's windows of one stream are.
        let run = |boundaries: bool| {
            let mut w = Windows::new(1024, 64).with_distance_stats(3, 100);
            for start in [0u64, 1_000_000, 5_000_000] {
                if boundaries {
                    w.boundary();
                }
                for i in start..start + 3 {
                    w.push(&load(0x10, i));
                }
            }
            let Pass1 { stats, dists, .. } = w.finish();
            (
                stats[0].gather_windows,
                dists[0][0].unique(),
                dists[0][0].far,
            )
        };
        assert_eq!(run(true), (0, 1, 0));
        // Without them: the jumps flag the row and count as far distances.
        assert_eq!(run(false), (1, 3, 2));
    }

    #[test]
    fn stores_flag_scatters() {
        let mut w = Windows::new(1024, 64);
        for i in 0..100u64 {
            w.push(&Access {
                ip: 0x40,
                addr: (i * 37 % 101) * 4,
                size: 4,
                kind: AccessKind::Store,
            });
        }
        let stats = w.finish().stats;
        assert!(stats[0].scatter_windows > 0);
        assert_eq!(stats[0].element_size, 4);
    }

    #[test]
    fn window_full_of_rows_flushes_and_partial_window_counts() {
        // 3 rows of capacity 8, window of 2 rows: the third instruction forces a flush.
        let mut w = Windows::new(2, 64);
        w.push(&load(1, 0));
        w.push(&load(1, 100)); // irregular
        w.push(&load(2, 0));
        w.push(&load(3, 0)); // window full: flush, then row for 3
        w.push(&load(3, 50)); // irregular, analysed by finish()
        let stats = w.finish().stats;
        assert_eq!(stats[0].gather_windows, 1);
        assert_eq!(stats[1].gather_windows, 0);
        assert_eq!(stats[2].gather_windows, 1);
    }
}
