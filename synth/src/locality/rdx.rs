//! Featherlight reuse distance (RDX, Wang, Liu and Chabbi): reuse-distance histograms from
//! sampled use-reuse pairs instead of a full trace, and the conversion of reuse *times* into
//! reuse (stack) *distances*.
//!
//! **Sampling** ([`Sampler`], one per thread). Every `period` accesses (with jitter) the access
//! being made is a *use*: its location is watched, as a hardware debug register would watch
//! it (x86: 1, 2, 4 or 8 bytes, aligned; a 64-byte line can only be watched in a simulation).
//! The next access that touches the watched bytes is the *reuse*: its time distance is the
//! number of accesses from the use to the reuse. At most `watchpoints` (x86: 4) locations are
//! watched at once. An empty register takes a new sample; with all busy, the registers are
//! visited in random order and register k takes the sample with probability `1/n_k`, `n_k`
//! being the samples taken since k was last empty or trapped, so each register holds a
//! uniformly random one of them (a reservoir); a trap empties the register and resets `n_k`.
//! Where samples stand for different numbers of accesses (live RDX's adaptive period: a
//! sample stands for its period, its *scale*), the reservoir is weighted: register k takes
//! a sample of scale `s` with probability `s / S_k`, `S_k` the scales of its interval's
//! samples, this one included (the same as `1/n_k` at one scale). A uniform reservoir there
//! let a late sample (a long period) land in a register busy since the dense start with
//! probability `1/n_k`, and its Horvitz-Thompson weight (`scale / probability`) alone stood
//! for 76% of a run's reuses (Debian's sqlite3: 2 effective samples of 1316).
//! **Proportional attribution** (Wen et al.): a trap counts as many reuses as samples were
//! taken at the use's instruction since the register was armed, standing in for the samples
//! the full registers could not watch. "Armed" is when the register last went from empty to
//! watching: a replacement keeps the register's reservoir interval, whose samples the held
//! one represents (counting only from the replacement would lose the displaced samples; with
//! one register and one instruction the weights then add up to the samples exactly, tested).
//! A register still armed at the end saw no reuse.
//!
//! **Time to stack distance** ([`convert`]). With `Pt(d)` the fraction of uses whose reuse
//! comes `d` accesses later (no reuse: `d = infinity`), a random window of `D` consecutive
//! accesses holds on average `W(D) = sum_{d <= D} Pt(d) d + D sum_{d > D} Pt(d)` distinct
//! locations: location x is missing from a window exactly when the window fits inside one of
//! x's gaps, a gap of length d holds `d - D` such windows, and the gaps of every location
//! together tile the run once per location. A reuse with time distance `D` spans a window of
//! `D` accesses that starts with the reused location itself, so its reuse distance is
//! `k = W(D) - 1` other locations, rounded (each fine bin of times at its mean time). Shen et
//! al. (POPL'07) take the mean from `p(D) = [sum_{d=2..D} Pt(d)(d-1) + sum_{d>D} Pt(d) D] /
//! (N-1)`, which differs from ours by `1 - sum_{d <= D} Pt(d)` in the numerator and matters
//! only for short times (ours gives exactly 0 for `D = 1` and `N - 1` for a cyclic scan of N
//! locations, both tested), and spread k as `Binomial(N - 1, p(D))`, as if each other
//! location appeared in the window independently. mgbench does not spread: the time
//! histogram says nothing of how much the count varies between windows of one length (not
//! at all in a loop; with variance about `N p^2 / 2` among random accesses), and the binomial's
//! `N p (1 - p)` moved reuses across bin edges: a scan of 4096 words, distance 4095, went
//! half into RDX's [4K, 8K) bin (S 0.5), and the fine bins lost up to a third of their
//! accuracy on the demo programs, while on uniformly random streams the point gives the same
//! S (measured: README, RDX). N, the distinct locations, is estimated from the uses that saw
//! no reuse (each location has exactly one last use): `N ~ Pt(infinity) x T`; the
//! conversion does not use it; reports give it.
//!
//! **Phases** ([`convert_phased`], [`Timeline`]). The model takes the run as one phase: a
//! long window of a program that builds a structure and then walks it is judged by the
//! walk's many short reuses and looks nearly free of new locations. Cut into phases, each
//! with its own `W_s`, a window counts its distinct locations phase by phase; the number of
//! phases follows how many effective uses the weights leave, and a run is cut only where
//! some phase's reuse times differ from the rest's ([`parting`]): a steady loop cut into
//! phases only gets each phase's sampling noise. Threads are alike or not in the same way:
//! [`parting`] tests whether two threads' reuse times could come from one behaviour, so that
//! threads with too few uses for phases are pooled only with their like.
//!
//! **Accuracy** ([`accuracy`]): `S = 1 - sum_i |B_i - B^_i| / 2` over histograms of fractions
//! (RDX's Eq. 1); `S^` is the same over averages of adjacent bins (Eq. 2), which forgives a
//! reuse counted one bin off.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::apex::Rng;
use crate::fasthash;

/// Sub-bins per octave of the fine time histogram.
const SUB: u32 = 8;
/// Octaves of the fine histogram (distances up to 2^48).
const OCTAVES: u32 = 48;

/// What a watchpoint covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// The aligned 8-byte word of the sampled access (one x86 debug register, length 8).
    Word,
    /// The aligned 64-byte line (a simulation: x86 debug registers watch at most 8 bytes).
    Line,
}

impl Granularity {
    pub fn bytes(self) -> u64 {
        match self {
            Granularity::Word => 8,
            Granularity::Line => 64,
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Granularity::Word => "words",
            Granularity::Line => "lines",
        }
    }
}

/// What a trap stands for (proportional attribution).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Attribution {
    /// The samples taken at the use's instruction since the register last went from empty
    /// to watching (replacements keep the interval): RDX's proportional attribution.
    IpInterval,
    /// The samples taken at the use's instruction since the register was last (re)armed,
    /// replacements included: the displaced samples are lost.
    IpArmed,
    /// Every sample taken since the register went from empty to watching, whatever its
    /// instruction (the plain reservoir weight).
    All,
    /// 1: no attribution.
    One,
    /// Horvitz-Thompson: a trap counts 1 / (the probability that its sample was chosen by
    /// the reservoir and survived every later replacement until its reuse), computed along
    /// the way from the registers' counts, and divided by the registers that could have
    /// taken the sample: a sample that comes while all W are busy could end in any of
    /// them, and each one's weight counts it once on average, so undivided it counted W
    /// times where a sample taken by a free register counts once (the long-reuse stretches
    /// that keep the registers busy weighed up to W times too much). Unbiased whatever the
    /// reuse times and phases.
    Ht,
    /// Kaplan-Meier: every watched sample counts, the ones a replacement ended too. A sample
    /// stands for `1 / (the chance it was watched when it came)` uses; one replaced after
    /// watching for `t` accesses says only that its reuse is longer than `t`, and its weight
    /// goes to the watched samples whose reuse (or end) came later, in proportion to theirs
    /// (Efron's redistribution to the right: the product-limit estimate of the reuse times,
    /// for censoring that is independent of them, as the reservoir's choices are). A register
    /// that watches a sample to the end of the run saw it never reused. The trap weights come
    /// at [`Sampler::finish`]. The default: measured against Horvitz-Thompson on 8 programs
    /// x 15 seeds, as good or better on the median of each but one (see the README).
    Km,
}

/// How RDX samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RdxConfig {
    /// Accesses between samples on average (RDX used 500K..10M loads and stores).
    pub period: u64,
    /// Each gap is drawn uniformly from `period x [1 - jitter, 1 + jitter]`.
    pub jitter: f64,
    /// Locations watched at once (x86: 4 debug registers).
    pub watchpoints: usize,
    pub granularity: Granularity,
    pub seed: u64,
    #[serde(default = "default_attribution")]
    pub attribution: Attribution,
}

fn default_attribution() -> Attribution {
    Attribution::Ht
}

impl Default for RdxConfig {
    fn default() -> Self {
        RdxConfig {
            period: 1 << 16,
            jitter: 0.5,
            watchpoints: 4,
            granularity: Granularity::Word,
            seed: 1,
            attribution: Attribution::Km,
        }
    }
}

impl RdxConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.period == 0 {
            return Err("--period must be at least 1".into());
        }
        if !(0.0..1.0).contains(&self.jitter) {
            return Err(format!(
                "--jitter {}: give a fraction in [0, 1) (0.5: gaps of 0.5 to 1.5 periods)",
                self.jitter
            ));
        }
        if self.watchpoints == 0 || self.watchpoints > 64 {
            return Err(format!(
                "--watchpoints {}: give 1 to 64 (x86 CPUs have 4 debug registers)",
                self.watchpoints
            ));
        }
        Ok(())
    }

    /// [`validate`](Self::validate) for a live run, which arms the CPU's own debug registers:
    /// at most [`DEBUG_REGISTERS`](mgbench_capture::native_rdx::DEBUG_REGISTERS) watchpoints.
    pub fn validate_live(&self) -> Result<(), String> {
        self.validate()?;
        let most = mgbench_capture::native_rdx::DEBUG_REGISTERS;
        if self.watchpoints > most {
            return Err(format!(
                "--watchpoints {}: a live run arms the CPU's debug registers, and x86 has {most}: give 1 to {most} (more are simulated over a trace: mgbench reuse --rdx TRACE --watchpoints N)",
                self.watchpoints
            ));
        }
        Ok(())
    }
}

/// A fine histogram of positive distances: `SUB` bins per octave, each with its weight and
/// the weighted sum of its distances (so the conversion uses each bin's mean), plus the
/// weight at distance "infinite" (no reuse) and, for stack distances, at 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub weights: Vec<f64>,
    pub sums: Vec<f64>,
    pub zero: f64,
    pub infinite: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            weights: vec![0.0; (SUB * OCTAVES) as usize],
            sums: vec![0.0; (SUB * OCTAVES) as usize],
            zero: 0.0,
            infinite: 0.0,
        }
    }
}

/// Fine bin of a distance >= 1.
#[inline]
fn fine_bin(d: u64) -> usize {
    let o = 63 - d.leading_zeros(); // d in [2^o, 2^(o+1))
    let frac = if o >= SUB.trailing_zeros() {
        ((d >> (o - SUB.trailing_zeros())) as u32) & (SUB - 1)
    } else {
        ((d << (SUB.trailing_zeros() - o)) as u32) & (SUB - 1)
    };
    ((o * SUB + frac) as usize).min((SUB * OCTAVES) as usize - 1)
}

/// The smallest distance of fine bin `b`.
fn fine_lower(b: usize) -> f64 {
    let o = b as u32 / SUB;
    let f = b as u32 % SUB;
    2f64.powi(o as i32) * (1.0 + f as f64 / SUB as f64)
}

impl Histogram {
    /// Adds `w` at distance `d` (None: no reuse).
    #[inline]
    pub fn add(&mut self, d: Option<u64>, w: f64) {
        match d {
            None => self.infinite += w,
            Some(0) => self.zero += w,
            Some(d) => {
                let b = fine_bin(d);
                self.weights[b] += w;
                self.sums[b] += w * d as f64;
            }
        }
    }

    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.weights.iter_mut().zip(&o.weights) {
            *a += b;
        }
        for (a, b) in self.sums.iter_mut().zip(&o.sums) {
            *a += b;
        }
        self.zero += o.zero;
        self.infinite += o.infinite;
    }

    /// This histogram less `o` (a part of it), no bin below 0.
    fn less(&self, o: &Histogram) -> Histogram {
        let mut h = self.clone();
        for (a, b) in h.weights.iter_mut().zip(&o.weights) {
            *a = (*a - b).max(0.0);
        }
        for (a, b) in h.sums.iter_mut().zip(&o.sums) {
            *a = (*a - b).max(0.0);
        }
        h.zero = (h.zero - o.zero).max(0.0);
        h.infinite = (h.infinite - o.infinite).max(0.0);
        h
    }

    /// Weight of the finite distances (0 included).
    pub fn finite(&self) -> f64 {
        self.zero + self.weights.iter().sum::<f64>()
    }

    /// (mean distance, weight) of every non-empty positive bin, in order.
    fn points(&self) -> Vec<(f64, f64)> {
        self.weights
            .iter()
            .zip(&self.sums)
            .filter(|(w, _)| **w > 0.0)
            .map(|(w, s)| (s / w, *w))
            .collect()
    }

    /// Fractions of the finite distances falling in `bins` (each `[lo, hi)`, hi may be
    /// infinite). A fine bin straddling a boundary is split in proportion to its log range.
    pub fn fractions(&self, bins: &[(f64, f64)]) -> Vec<f64> {
        let total = self.finite();
        let mut out = vec![0.0; bins.len()];
        if total <= 0.0 {
            return out;
        }
        for (i, &(lo, hi)) in bins.iter().enumerate() {
            if lo <= 0.0 && hi > 0.0 {
                out[i] += self.zero;
            }
        }
        for (b, &w) in self.weights.iter().enumerate() {
            if w <= 0.0 {
                continue;
            }
            let (a, z) = (fine_lower(b), fine_lower(b + 1));
            for (i, &(lo, hi)) in bins.iter().enumerate() {
                let (l, h) = (a.max(lo), z.min(hi));
                if h > l {
                    out[i] += w * (h.ln() - l.ln()) / (z.ln() - a.ln());
                }
            }
        }
        out.iter().map(|x| x / total).collect()
    }
}

/// RDX's 20 bins of a histogram: [0, 4K), [4K, 8K), ..., [512M, 1G), [1G, infinity).
pub fn rdx_bins() -> Vec<(f64, f64)> {
    let mut v = vec![(0.0, 4096.0)];
    let mut lo = 4096.0;
    while lo < (1u64 << 30) as f64 {
        v.push((lo, lo * 2.0));
        lo *= 2.0;
    }
    v.push((lo, f64::INFINITY));
    v
}

/// mgbench's bins: 0, then [1, 2), [2, 4), ..., [2^31, infinity).
pub fn fine_bins() -> Vec<(f64, f64)> {
    let mut v = vec![(0.0, 1.0)];
    for k in 0..31 {
        v.push(((1u64 << k) as f64, (1u64 << (k + 1)) as f64));
    }
    v.push(((1u64 << 31) as f64, f64::INFINITY));
    v
}

/// Label of a bin, "4K-8K", "1G+".
pub fn bin_label(lo: f64, hi: f64) -> String {
    let f = |v: f64| {
        let v = v as u64;
        if v >= 1 << 30 && v % (1 << 30) == 0 {
            format!("{}G", v >> 30)
        } else if v >= 1 << 20 && v % (1 << 20) == 0 {
            format!("{}M", v >> 20)
        } else if v >= 1 << 10 && v % (1 << 10) == 0 {
            format!("{}K", v >> 10)
        } else {
            v.to_string()
        }
    };
    if hi.is_infinite() {
        format!("{}+", f(lo))
    } else if lo == 0.0 && hi == 1.0 {
        "0".into()
    } else {
        format!("{}-{}", f(lo), f(hi))
    }
}

/// RDX's accuracy of `est` against `exact` (both fractions over the same bins): S, and S^
/// over the averages of adjacent bins.
pub fn accuracy(exact: &[f64], est: &[f64]) -> (f64, f64) {
    let s = 1.0
        - exact
            .iter()
            .zip(est)
            .map(|(a, b)| (a - b).abs())
            .sum::<f64>()
            / 2.0;
    let avg = |v: &[f64]| -> Vec<f64> { v.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect() };
    let (a, b) = (avg(exact), avg(est));
    let s_hat = 1.0 - a.iter().zip(&b).map(|(x, y)| (x - y).abs()).sum::<f64>() / 2.0;
    (s, s_hat)
}

/// `W(v)` of one histogram of reuse times: the mean number of distinct locations in a window
/// of `v` accesses, `sum_{d <= v} Pt(d) d + v sum_{d > v} Pt(d)`, with each fine bin at its
/// mean distance and `Pt` over every use (no reuse included).
struct Windows {
    /// Mean distance of each non-empty bin, increasing.
    d: Vec<f64>,
    /// Prefix sums over the bins up to and including i: weight, weight x distance.
    below_w: Vec<f64>,
    below_wd: Vec<f64>,
    zero: f64,
    total: f64,
}

impl Windows {
    /// None when the histogram is empty.
    fn of(time: &Histogram) -> Option<Windows> {
        let pts = time.points();
        let total = time.finite() + time.infinite;
        if total <= 0.0 {
            return None;
        }
        let (mut w, mut wd) = (time.zero, 0.0);
        let (mut below_w, mut below_wd) = (Vec::new(), Vec::new());
        for &(d, x) in &pts {
            w += x;
            wd += x * d;
            below_w.push(w);
            below_wd.push(wd);
        }
        Some(Windows {
            d: pts.iter().map(|p| p.0).collect(),
            below_w,
            below_wd,
            zero: time.zero,
            total,
        })
    }

    /// `W(D_max)`: the mean distinct locations in the window of the longest reuse time.
    fn longest(&self) -> f64 {
        self.d.last().map_or(0.0, |&d| self.at(d))
    }

    /// `W(v)` (0 for `v <= 0`).
    fn at(&self, v: f64) -> f64 {
        if v <= 0.0 {
            return 0.0;
        }
        let c = self.d.partition_point(|&d| d <= v);
        let (w, wd) = match c {
            0 => (self.zero, 0.0),
            c => (self.below_w[c - 1], self.below_wd[c - 1]),
        };
        (wd + v * (self.total - w).max(0.0)) / self.total
    }
}

/// Adds `share` of reuses at reuse distance `k` (rounded) to `out`, in the bin that holds it.
fn place(out: &mut [f64], share: f64, k: f64, bins: &[(f64, f64)]) {
    let k = k.round().max(0.0);
    if let Some(i) = bins.iter().position(|&(lo, hi)| lo <= k && k < hi) {
        out[i] += share;
    }
}

/// Converts a histogram of reuse times (weights of uses; `infinite`: uses with no reuse) into
/// one of reuse (stack) distances over `bins`, as fractions of the finite reuses: each reuse
/// time `D` (each fine bin at its mean time) at distance `W(D) - 1` (see the module docs).
/// The run is taken as one phase (Shen et al.); [`convert_phased`] lets the phases of a run
/// differ. Returns the fractions.
pub fn convert(time: &Histogram, bins: &[(f64, f64)]) -> Vec<f64> {
    let finite = time.finite();
    let mut out = vec![0.0; bins.len()];
    let Some(windows) = Windows::of(time).filter(|_| finite > 0.0) else {
        return out;
    };
    for (d, w) in time.points() {
        // The window starts with the reused location itself.
        place(&mut out, w / finite, windows.at(d) - 1.0, bins);
    }
    place(&mut out, time.zero / finite, 0.0, bins);
    out
}

/// Positions of uses are kept in at most this many equal buckets.
const BUCKETS: u64 = 256;
/// Phases of a run at most.
const MAX_PHASES: usize = 64;
/// Effective uses (see [`Timeline::effective`]) per phase, and the weight, in effective
/// uses, of the whole run's histogram in each phase's (the phase's own is trusted as far as
/// it has uses behind it).
const USES_PER_PHASE: f64 = 64.0;
const PRIOR: f64 = 64.0;

/// The phases `effective` uses allow ([`USES_PER_PHASE`] each; see [`Timeline::phases`]):
/// under 2, a run is converted as one phase whatever its phases are like.
pub fn phases_allowed(effective: f64) -> usize {
    (effective / USES_PER_PHASE) as usize
}

/// Reuse times by where in the run their use was, for [`convert_phased`]: per bucket of use
/// positions (at most [`BUCKETS`]; their width doubles as the run grows) and fine time bin,
/// the weight of the uses, their weighted time, weighted position and squared weights. A
/// bucket's cells are an array as long as its longest time needs (at most 12 KiB), so the
/// exact pass adds to an array.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// Buckets are `1 << shift` accesses wide.
    shift: u32,
    /// Per bucket: its cells, indexed by [`cell`].
    cells: Vec<Vec<[f64; 4]>>,
    /// The uses added as pairs ([`Timeline::add_pair`]: sampled ones, not the exact pass's):
    /// position, time, weight, for [`Timeline::resampler`].
    uses: Vec<(u64, Option<u64>, f64)>,
    /// A bootstrap replicate's cells ([`Resampler::draw`]), in order: (bucket, cell index,
    /// cell); `cells` is then empty. A sampled run's few thousand uses fill a few thousand of
    /// its buckets' cells, and every pass over the timeline (its histogram, its weights, its
    /// phases, the conversion) would otherwise scan them all.
    drawn: Vec<(u32, u32, [f64; 4])>,
}

/// A timeline's uses added as pairs, grouped by cell: draws bootstrap replicates of them.
pub struct Resampler<'a> {
    of: &'a Timeline,
    /// The cells the uses fall in, in order, and each use's index among them.
    cells: Vec<(u32, u32)>,
    slot: Vec<u32>,
}

impl Resampler<'_> {
    /// A bootstrap replicate: `into` (emptied, its buffers kept) gets each use `copies()`
    /// times over (Poisson(1) draws make a Poisson bootstrap, which resamples each thread's
    /// uses apart).
    pub fn draw(&self, into: &mut Timeline, mut copies: impl FnMut() -> u32) {
        into.shift = self.of.shift;
        into.cells.clear();
        into.uses.clear();
        into.drawn.clear();
        into.drawn
            .extend(self.cells.iter().map(|&(b, c)| (b, c, [0.0; 4])));
        for (&(pos, time, weight), &slot) in self.of.uses.iter().zip(&self.slot) {
            let k = copies();
            if k > 0 {
                sum_cells(
                    &mut into.drawn[slot as usize].2,
                    &cell_values(pos, time, weight, f64::from(k)),
                );
            }
        }
    }
}

/// Cells of a bucket: "no reuse", time 0, then the fine bins of a time distance from
/// [`FIRST_FINE`] on.
const NO_REUSE_CELL: u32 = 0;
const ZERO_CELL: u32 = 1;
const FIRST_FINE: u32 = 2;

/// The cell of a time distance.
fn cell(time: Option<u64>) -> u32 {
    match time {
        None => NO_REUSE_CELL,
        Some(0) => ZERO_CELL,
        Some(d) => FIRST_FINE + fine_bin(d) as u32,
    }
}

impl Histogram {
    /// Adds a [`Timeline`] cell (`cell` its index, see [`cell`]; `v` its weight and weighted
    /// time first).
    fn add_cell(&mut self, cell: u32, v: &[f64; 4]) {
        match cell {
            NO_REUSE_CELL => self.infinite += v[0],
            ZERO_CELL => self.zero += v[0],
            c => {
                let fine = (c - FIRST_FINE) as usize;
                self.weights[fine] += v[0];
                self.sums[fine] += v[1];
            }
        }
    }
}

/// What `copies` uses at `pos`, reused `time` later, each standing for `weight`, add to their
/// cell: weight, weighted time, weighted position, squared weights (k copies of w add k w^2).
#[inline]
fn cell_values(pos: u64, time: Option<u64>, weight: f64, copies: f64) -> [f64; 4] {
    let w = weight * copies;
    [w, w * time.unwrap_or(0) as f64, w * pos as f64, weight * w]
}

/// Adds cell `v` into `c`, field by field.
fn sum_cells(c: &mut [f64; 4], v: &[f64; 4]) {
    for (a, b) in c.iter_mut().zip(v) {
        *a += b;
    }
}

impl Timeline {
    /// A use at access `pos` (of its thread), reused `time` accesses later (None: never),
    /// standing for `weight` uses.
    #[inline]
    pub fn add(&mut self, pos: u64, time: Option<u64>, weight: f64) {
        while pos >> self.shift >= BUCKETS {
            self.widen();
        }
        let c = cell(time) as usize;
        let b = (pos >> self.shift) as usize;
        if self.cells.len() <= b {
            self.cells.resize(b + 1, Vec::new());
        }
        let bucket = &mut self.cells[b];
        if bucket.len() <= c {
            bucket.resize(c + 1, [0.0; 4]);
        }
        sum_cells(&mut bucket[c], &cell_values(pos, time, weight, 1.0));
    }

    /// A pair: its use, when it came and what it stands for.
    pub fn add_pair(&mut self, p: &Pair) {
        self.add(p.use_time, p.time, p.weight);
        self.uses.push((p.use_time, p.time, p.weight));
    }

    /// Draws bootstrap replicates of the uses added as pairs.
    pub fn resampler(&self) -> Resampler<'_> {
        let keys: Vec<(u32, u32)> = self
            .uses
            .iter()
            .map(|&(pos, time, _)| ((pos >> self.shift) as u32, cell(time)))
            .collect();
        let mut cells = keys.clone();
        cells.sort_unstable();
        cells.dedup();
        let slot = keys
            .iter()
            .map(|k| cells.binary_search(k).unwrap_or(0) as u32)
            .collect();
        Resampler {
            of: self,
            cells,
            slot,
        }
    }

    /// Doubles the buckets' width, merging neighbours.
    fn widen(&mut self) {
        self.shift += 1;
        let old = std::mem::take(&mut self.cells);
        self.cells = vec![Vec::new(); old.len().div_ceil(2)];
        for (b, bucket) in old.into_iter().enumerate() {
            let into = &mut self.cells[b / 2];
            if into.len() < bucket.len() {
                into.resize(bucket.len(), [0.0; 4]);
            }
            for (c, v) in into.iter_mut().zip(&bucket) {
                sum_cells(c, v);
            }
        }
    }

    /// The non-empty cells: (bucket, cell index (see [`cell`]), cell).
    fn each(&self) -> impl Iterator<Item = (u32, u32, &[f64; 4])> {
        let drawn = self.drawn.iter().map(|(b, c, v)| (*b, *c, v));
        self.cells
            .iter()
            .enumerate()
            .flat_map(|(b, bucket)| {
                bucket
                    .iter()
                    .enumerate()
                    .map(move |(bin, v)| (b as u32, bin as u32, v))
            })
            .chain(drawn)
            .filter(|(_, _, v)| v[0] != 0.0 || v[3] != 0.0)
    }

    /// Weight of the uses with a reuse.
    pub fn finite(&self) -> f64 {
        self.each()
            .filter(|c| c.1 != NO_REUSE_CELL)
            .map(|c| c.2[0])
            .sum()
    }

    /// The uses' effective number, `(sum w)^2 / sum w^2`: the uses themselves when every
    /// weight is 1 (an exact pass), far fewer when a few sampled uses carry large weights.
    pub fn effective(&self) -> f64 {
        effective(&[self.weights()])
    }

    /// The total weight and sum of squared weights of the uses without reuse (the last
    /// uses, on which the distinct-location estimate rests).
    pub fn no_reuse_weights(&self) -> (f64, f64) {
        self.each()
            .filter(|c| c.1 == NO_REUSE_CELL)
            .fold((0.0, 0.0), |(a, b), c| (a + c.2[0], b + c.2[3]))
    }

    /// The uses' total weight and sum of squared weights.
    pub fn weights(&self) -> (f64, f64) {
        self.each()
            .fold((0.0, 0.0), |(a, b), c| (a + c.2[0], b + c.2[3]))
    }

    /// The reuse times of all its uses, wherever in the run they came.
    pub fn histogram(&self) -> Histogram {
        let mut h = Histogram::default();
        for (_, c, v) in self.each() {
            h.add_cell(c, v);
        }
        h
    }

    /// Buckets a run of `len` accesses spans.
    fn buckets(&self, len: u64) -> usize {
        len.div_ceil(1 << self.shift).clamp(1, BUCKETS) as usize
    }

    /// The phases a run of `len` accesses is cut into: as many equal ones (whole buckets,
    /// at most [`MAX_PHASES`]) as its effective uses allow, [`USES_PER_PHASE`] each, where
    /// some of them differ from the rest of the run ([`parting`] at [`ALIKE_LEVEL`] over
    /// their number); where none does, one. Cut into phases, a run that behaves alike
    /// throughout only gets each phase's sampling noise in its `W_s`.
    pub fn phases(&self, len: u64) -> usize {
        let most = phases_allowed(self.effective()).clamp(1, MAX_PHASES.min(self.buckets(len)));
        if most > 1 && self.phases_differ(len, most) {
            most
        } else {
            1
        }
    }

    /// Per phase of `phases` (bucket b in phase `b * phases / buckets`): its histogram and
    /// its uses' total weight and sum of squared weights.
    fn split(&self, len: u64, phases: usize) -> Vec<(Histogram, (f64, f64))> {
        let buckets = self.buckets(len);
        let mut per = vec![(Histogram::default(), (0.0, 0.0)); phases];
        for (b, bin, v) in self.each() {
            let p = &mut per[((b as usize * phases) / buckets).min(phases - 1)];
            p.0.add_cell(bin, v);
            p.1 = (p.1 .0 + v[0], p.1 .1 + v[3]);
        }
        per
    }

    /// Whether some of `phases` phases parts from the rest of the run.
    fn phases_differ(&self, len: u64, phases: usize) -> bool {
        let per = self.split(len, phases);
        let level = ALIKE_LEVEL / phases as f64;
        let mut whole = Histogram::default();
        let mut whole_w = (0.0, 0.0);
        for (h, w) in &per {
            whole.merge(h);
            whole_w = (whole_w.0 + w.0, whole_w.1 + w.1);
        }
        (0..phases).any(|s| {
            let (h, w) = &per[s];
            // The rest of the run: the whole less this phase (one pass, not phases - 1).
            let rest = whole.less(h);
            let rest_w = (whole_w.0 - w.0, whole_w.1 - w.1);
            parting_at(h, effective(&[*w]), &rest, effective(&[rest_w]), level) > 1.0
        })
    }
}

/// The effective number of uses of several timelines' [`Timeline::weights`] together:
/// `(sum w)^2 / sum w^2`.
pub fn effective(weights: &[(f64, f64)]) -> f64 {
    let (w, w2) = weights
        .iter()
        .fold((0.0, 0.0), |(a, b), c| (a + c.0, b + c.1));
    if w2 > 0.0 {
        w * w / w2
    } else {
        0.0
    }
}

/// The level of [`parting`]'s test: alike threads are told apart in at most 1% of runs (a
/// test at 5% split alike threads often enough to cost a 4-thread SpMV up to 0.22 of stack S
/// on its worst seed of 15; measured, README, RDX).
const ALIKE_LEVEL: f64 = 0.01;

/// How far apart two histograms of reuse times are, against what chance alone would part
/// them: the two-sample Kolmogorov-Smirnov statistic on the distributions of the times (time
/// 0 first, no reuse last), `a` and `b` standing for `ma` and `mb` uses (their effective
/// numbers, [`effective`]), over its critical value at the 1% level,
/// `sqrt(-ln(level / 2) / 2) x sqrt((ma + mb) / (ma mb))`. Above 1 the two differ (the test
/// rejects that they come from one behaviour); an empty side gives 0.
pub fn parting(a: &Histogram, ma: f64, b: &Histogram, mb: f64) -> f64 {
    parting_at(a, ma, b, mb, ALIKE_LEVEL)
}

/// [`parting`] at another level.
fn parting_at(a: &Histogram, ma: f64, b: &Histogram, mb: f64, level: f64) -> f64 {
    let (ta, tb) = (a.finite() + a.infinite, b.finite() + b.infinite);
    if ta <= 0.0 || tb <= 0.0 || ma <= 0.0 || mb <= 0.0 {
        return 0.0;
    }
    let (mut fa, mut fb) = (a.zero / ta, b.zero / tb);
    let mut gap = (fa - fb).abs();
    for (x, y) in a.weights.iter().zip(&b.weights) {
        fa += x / ta;
        fb += y / tb;
        gap = gap.max((fa - fb).abs());
    }
    gap / ((-(level / 2.0).ln() / 2.0).sqrt() * ((ma + mb) / (ma * mb)).sqrt())
}

/// [`convert`] for a run whose phases differ (Shen et al.'s model takes the whole run as
/// one): the run (`len` accesses) is cut into [`Timeline::phases`] equal phases, each with
/// its own histogram of reuse times and so its own `W_s`. A reuse `D` accesses after its use
/// at `a` spans the window `[a, a + D)`; location x is counted in it once, at its last access
/// there: the access at `y` whose next access comes at least `a + D - y` later. Summed over
/// the window, the part `[y0, y1)` of it in phase s holds `W_s(a + D - y0) - W_s(a + D - y1)`
/// distinct locations (`W(v)` is the sum over lags `1..=v` of the chance that a use's reuse
/// comes at that lag or later). With one phase this is `W(D)`: [`convert`]. A phase's `W_s` is
/// its own blended with the run's, `(m_s W_s + PRIOR W) / (m_s + PRIOR)`, `m_s` its effective
/// uses: few sampled uses with large weights lean on the run. Each cell of the timeline
/// (bucket of use positions x fine time bin) is converted at its mean position and time.
pub fn convert_phased(tl: &Timeline, len: u64, bins: &[(f64, f64)]) -> Vec<f64> {
    let mut out = vec![0.0; bins.len()];
    let phases = tl.phases(len);
    let buckets = tl.buckets(len);
    // Phase s starts at the first bucket b >= s * buckets / phases.
    let per = tl.split(len, phases);
    let mut whole = Histogram::default();
    for (h, _) in &per {
        whole.merge(h);
    }
    let finite = whole.finite();
    let Some(run) = Windows::of(&whole).filter(|_| finite > 0.0) else {
        return out;
    };
    // Each phase's windows and the weight its own histogram gets against the run's.
    let own: Vec<Option<(Windows, f64)>> = per
        .iter()
        .map(|(h, w)| {
            let m = effective(&[*w]);
            Windows::of(h).map(|x| (x, m / (m + PRIOR)))
        })
        .collect();
    let edges: Vec<f64> = (0..=phases)
        .map(|s| (((s * buckets).div_ceil(phases) as u64) << tl.shift).min(len) as f64)
        .collect();
    for (_, bin, v) in tl.each() {
        if bin == NO_REUSE_CELL {
            continue;
        }
        if bin == ZERO_CELL {
            place(&mut out, v[0] / finite, 0.0, bins);
            continue;
        }
        let (d, a) = (v[1] / v[0], v[2] / v[0]);
        let end = a + d;
        let mut distinct = 0.0;
        for s in 0..phases {
            let (y0, y1) = (a.max(edges[s]), end.min(edges[s + 1]));
            if y1 <= y0 {
                continue;
            }
            let r = run.at(end - y0) - run.at(end - y1);
            distinct += match &own[s] {
                Some((w, trust)) => trust * (w.at(end - y0) - w.at(end - y1)) + (1.0 - trust) * r,
                None => r,
            };
        }
        // The window starts with the reused location itself.
        place(&mut out, v[0] / finite, distinct - 1.0, bins);
    }
    out
}

/// The number of distinct locations estimated from the uses that saw no reuse: every
/// location has exactly one last use, so `N ~ T x Pt(infinity)`. It is at least `W(D_max)`,
/// the distinct locations the window of the longest reuse time holds on average: when every
/// sampled use saw a reuse, `Pt(infinity)` says nothing.
pub fn estimate_distinct(time: &Histogram, accesses: u64) -> f64 {
    let finite = time.finite();
    if finite + time.infinite <= 0.0 {
        return 1.0;
    }
    let from_last_uses = distinct_from_last_uses(finite, time.infinite, accesses);
    let window_max = Windows::of(time).map_or(0.0, |w| w.longest());
    from_last_uses.max(window_max).max(1.0)
}

/// `N ~ T x Pt(infinity)` alone, from the weights of the uses with a reuse and without
/// (0 without uses).
pub fn distinct_from_last_uses(reuses: f64, last_uses: f64, accesses: u64) -> f64 {
    let all = reuses + last_uses;
    if all > 0.0 {
        accesses as f64 * last_uses / all
    } else {
        0.0
    }
}

/// A use being watched.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Watched bytes [lo, hi).
    lo: u64,
    hi: u64,
    use_time: u64,
    use_ip: u64,
    /// Number of the first sample since the register was last empty: the register's
    /// reservoir holds one of the samples from there on, and its trap stands for those taken
    /// at the use's instruction.
    interval_start: u64,
    /// Number of this (replacing) sample.
    armed_at: u64,
    /// Probability that this sample was chosen and has survived so far (Horvitz-Thompson),
    /// times the registers that could have taken it (see [`Attribution::Ht`]).
    pi: f64,
    /// The sample's period over the configured one: a live run with an adaptive period
    /// samples some stretches more densely, and a sample stands for its period's accesses.
    scale: f64,
    /// `scale` over the chance that the sample was watched when it came (1 where a register
    /// was free): the uses it stands for under [`Attribution::Km`].
    entry: f64,
}

impl Slot {
    /// The watched use's pair: reused by `reuse_ip` after `time` (None: no reuse seen),
    /// standing for `weight` uses.
    fn pair(&self, reuse_ip: Option<u64>, time: Option<u64>, weight: f64) -> Pair {
        Pair {
            use_ip: self.use_ip,
            use_time: self.use_time,
            reuse_ip,
            time,
            weight,
        }
    }
}

/// For busy registers that accept a new sample with probabilities `a[k]` (`1 / n_k` with
/// `n_k` samples in the reservoir interval, this one included; `scale / S_k` weighted):
/// the probability that the sample ends in register k when the registers are visited in a
/// uniformly random order and k accepts with `a[k]`. Over random orders, the registers
/// visited before k are a random subset of the others, of uniform size s (0..W-1) and
/// uniform given s, so the chance they all declined is the average over s of the elementary
/// symmetric polynomial of degree s of their (1 - 1/n_i), divided by C(W-1, s).
fn take_probabilities(a: &[f64]) -> Vec<f64> {
    let w = a.len();
    (0..w)
        .map(|k| {
            // e[s]: elementary symmetric polynomials of (1 - a_i), i != k.
            let mut e = vec![0.0; w];
            e[0] = 1.0;
            let mut m = 0;
            for (i, &ai) in a.iter().enumerate() {
                if i == k {
                    continue;
                }
                m += 1;
                for s in (1..=m).rev() {
                    e[s] += e[s - 1] * (1.0 - ai);
                }
            }
            let mut declined = 0.0;
            let mut binom = 1.0; // C(w-1, s)
            for (s, es) in e.iter().enumerate().take(w) {
                declined += es / binom;
                binom = binom * (w - 1 - s) as f64 / (s + 1) as f64;
            }
            a[k] * declined / w as f64
        })
        .collect()
}

/// One reuse observed (or not) for one watched use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    pub use_ip: u64,
    /// When the use was: its access number in its thread.
    pub use_time: u64,
    /// None: no reuse before the end.
    pub reuse_ip: Option<u64>,
    pub time: Option<u64>,
    /// Reuses this pair stands for (proportional attribution).
    pub weight: f64,
}

/// RDX's sampler for one thread. Feed every access with [`Sampler::access`].
pub struct Sampler {
    cfg: RdxConfig,
    rng: Rng,
    counter: u64,
    next_sample: u64,
    slots: Vec<Option<Slot>>,
    /// The scales of the samples since each slot was last empty or trapped (the weighted
    /// reservoir's `S_k`; their count at one scale).
    since_scale: Vec<f64>,
    /// The samples taken at each instruction, in order: (number, the sum of their scales
    /// up to and including it).
    samples_at: HashMap<u64, Vec<(u64, f64)>, fasthash::Build>,
    /// The sum of the scales of samples 0..n, at n (one entry per sample and a leading 0).
    scale_sums: Vec<f64>,
    order: Vec<usize>,
    /// [`Attribution::Km`]: the watched samples' outcomes, weighed at the end.
    held: Vec<Watched>,
    pub samples: u64,
    pub dropped: u64,
    pub traps: u64,
}

/// What became of a watched sample ([`Attribution::Km`]): its pair (the weight its entry's),
/// how long it was watched (to its trap, its replacement or the run's end), and whether a
/// replacement ended the watch.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Watched {
    pair: Pair,
    watched: u64,
    replaced: bool,
    /// The octave of its sample's period (0 at the configured period): see [`redistribute`].
    stratum: i32,
}

/// The octave of a sample's period over the configured one (its `scale`).
fn stratum(scale: f64) -> i32 {
    scale.max(1e-300).log2().round() as i32
}

/// Watches (indices into [`Sampler`]'s held ones) and their weights.
type Masses = Vec<(usize, f64)>;

/// The product-limit (Kaplan-Meier) masses of watches `items` (indices into `held`), by
/// redistribution to the right: in order of how long they were watched (at equal lengths a
/// trap or the run's end before a replacement, which says the outcome is later), each
/// replaced watch hands its weight to those after it in proportion to theirs. What is
/// estimated is the distribution of the time to a use's outcome, its reuse or the run's end
/// (then "no reuse", as the exact histogram counts it): a use watched to the end of the run
/// comes at the length it was watched, not after every reuse, or the replaced watches of
/// long reuses would hand it weight that belongs to them. Returns each item's mass (0 for a
/// replaced one) and the replaced ones left with nothing after them (index, mass).
fn product_limit(held: &[Watched], mut items: Vec<usize>) -> (Masses, Masses) {
    items.sort_by_key(|&i| (held[i].watched, held[i].replaced));
    let mut right: f64 = items.iter().map(|&i| held[i].pair.weight).sum();
    let mut factor = 1.0;
    let (mut masses, mut stranded) = (Vec::with_capacity(items.len()), Vec::new());
    for i in items {
        let w = held[i].pair.weight;
        right -= w;
        if !held[i].replaced {
            masses.push((i, w * factor));
        } else if right > 1e-12 * w.max(1e-300) {
            factor *= 1.0 + w / right;
        } else {
            stranded.push((i, w * factor));
        }
    }
    (masses, stranded)
}

/// Kaplan-Meier weights of watched samples ([`Attribution::Km`]): the pairs of the traps and
/// of the uses watched to the run's end, with the weights they end with (the total weight
/// is kept). The product limit runs within each octave of periods ([`Watched::stratum`]): a
/// live run's adaptive period samples its start densely, where a watch is soon replaced, and
/// its later stretches sparsely, where watches last; pooled, the long watches came mostly
/// from the later stretches and spoke for the whole run (on RDX's Listing 2, live, the uses
/// without reuse of its last sweep came out at 2.4% of the uses instead of 1.7%). A replaced
/// watch that outlasted everything else of its octave hands its weight to the watches of any
/// octave that lasted longer, in proportion to their pooled weights (on gzip, live, such
/// watches of the dense start, replaced by late samples millions of accesses on, otherwise
/// came out as uses without reuse and put the distinct words at 8-15 times the truth); with
/// none longer it stays a use without reuse.
fn redistribute(held: Vec<Watched>) -> Vec<Pair> {
    let mut strata: std::collections::BTreeMap<i32, Vec<usize>> = Default::default();
    for (i, w) in held.iter().enumerate() {
        strata.entry(w.stratum).or_default().push(i);
    }
    // With one octave (every trace-driven run) the pooled watches are that octave's: none
    // outlasts what outlasted it.
    let octaves = strata.len();
    let mut weight = vec![0.0; held.len()];
    let mut stranded = Vec::new();
    for items in strata.into_values() {
        let (masses, left) = product_limit(&held, items);
        for (i, m) in masses {
            weight[i] = m;
        }
        stranded.extend(left);
    }
    // The pooled watches by length, with the pooled masses of those longer than each.
    let pooled = (octaves > 1 && !stranded.is_empty()).then(|| {
        let (mut pooled, _) = product_limit(&held, (0..held.len()).collect());
        pooled.sort_by_key(|&(i, _)| held[i].watched);
        let mut longer = vec![0.0; pooled.len() + 1];
        for k in (0..pooled.len()).rev() {
            longer[k] = longer[k + 1] + pooled[k].1;
        }
        (pooled, longer)
    });
    let mut out = Vec::new();
    for (i, m) in stranded {
        let c = held[i].watched;
        let after = pooled.as_ref().and_then(|(pooled, longer)| {
            let first = pooled.partition_point(|&(j, _)| held[j].watched <= c);
            (longer[first] > 0.0).then(|| (&pooled[first..], longer[first]))
        });
        match after {
            Some((after, total)) => {
                for &(j, pm) in after {
                    weight[j] += m * pm / total;
                }
            }
            None => {
                let mut pair = held[i].pair;
                (pair.time, pair.reuse_ip, pair.weight) = (None, None, m);
                out.push(pair);
            }
        }
    }
    for (w, m) in held.iter().zip(weight) {
        if !w.replaced {
            out.push(Pair {
                weight: m,
                ..w.pair
            });
        }
    }
    out
}

impl Sampler {
    pub fn new(cfg: RdxConfig, seed: u64) -> Sampler {
        let mut rng = Rng::new(seed);
        let first = Self::gap(&cfg, &mut rng);
        Sampler {
            slots: vec![None; cfg.watchpoints],
            since_scale: vec![0.0; cfg.watchpoints],
            order: (0..cfg.watchpoints).collect(),
            held: Vec::new(),
            cfg,
            rng,
            counter: 0,
            next_sample: first,
            samples_at: HashMap::default(),
            scale_sums: vec![0.0],
            samples: 0,
            dropped: 0,
            traps: 0,
        }
    }

    fn gap(cfg: &RdxConfig, rng: &mut Rng) -> u64 {
        let p = cfg.period as f64;
        let lo = p * (1.0 - cfg.jitter);
        let g = lo + (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 * p * cfg.jitter;
        (g.round() as u64).max(1)
    }

    /// Accesses seen so far.
    pub fn accesses(&self) -> u64 {
        self.counter
    }

    /// One access; `on_pair` gets each trap.
    #[inline]
    pub fn access(&mut self, ip: u64, addr: u64, size: u8, on_pair: &mut impl FnMut(Pair)) {
        let end = addr.wrapping_add(u64::from(size.max(1)));
        for k in 0..self.slots.len() {
            if let Some(s) = self.slots[k] {
                if addr < s.hi && end > s.lo {
                    // A trap: the time distance, attributed to the samples taken at the use's
                    // instruction since the register was armed.
                    let time = self.counter - s.use_time;
                    self.ended(&s, Some(ip), (Some(time), time), on_pair);
                    self.slots[k] = None;
                    self.since_scale[k] = 0.0;
                    self.traps += 1;
                }
            }
        }
        let now = self.counter;
        self.counter += 1;
        if now == self.next_sample {
            self.sample(ip, addr, now);
            self.next_sample = now + Self::gap(&self.cfg, &mut self.rng);
        }
    }

    /// A run of accesses (one thread's, in order): the same as [`Sampler::access`] on each,
    /// with the watched ranges in a flat list scanned per access and the samples' positions
    /// jumped to, so the common access (no trap, no sample) costs a few compares.
    pub fn access_all(
        &mut self,
        accesses: &[mgbench_capture::trace::Access],
        on_pair: &mut impl FnMut(Pair),
    ) {
        let mut watch: Vec<(u64, u64)> = Vec::with_capacity(self.slots.len());
        let refresh = |slots: &[Option<Slot>], watch: &mut Vec<(u64, u64)>| {
            watch.clear();
            watch.extend(slots.iter().flatten().map(|s| (s.lo, s.hi)));
        };
        refresh(&self.slots, &mut watch);
        let mut i = 0;
        while i < accesses.len() {
            // Accesses up to and including the next sample (or the run's end).
            let to_sample = self.next_sample - self.counter;
            let stop = (i as u64 + to_sample).min(accesses.len() as u64 - 1) as usize;
            let mut j = i;
            if watch.is_empty() {
                j = stop;
            } else if watch.len() <= 4 {
                // Up to 4 registers (x86's count): branch-free compares over a fixed
                // width, empty lanes never match.
                let (mut lo, mut hi) = ([u64::MAX; 4], [0u64; 4]);
                for (k, &(l, h)) in watch.iter().enumerate() {
                    (lo[k], hi[k]) = (l, h);
                }
                while j < stop {
                    let a = &accesses[j];
                    let end = a.addr.wrapping_add(u64::from(a.size.max(1)));
                    let hit = (0..4).fold(false, |h, k| h | ((a.addr < hi[k]) & (end > lo[k])));
                    if hit {
                        break;
                    }
                    j += 1;
                }
            } else {
                while j < stop {
                    let a = &accesses[j];
                    let end = a.addr.wrapping_add(u64::from(a.size.max(1)));
                    if watch.iter().any(|&(lo, hi)| a.addr < hi && end > lo) {
                        break;
                    }
                    j += 1;
                }
            }
            // accesses[i..j] neither trap nor sample.
            self.counter += (j - i) as u64;
            let a = &accesses[j];
            self.access(a.ip, a.addr, a.size, on_pair);
            refresh(&self.slots, &mut watch);
            i = j + 1;
        }
    }

    /// Samples taken at the slot's use instruction since its register was last empty
    /// (proportional attribution: the trap stands for all of them).
    /// Each sample counts its scale (1 at a fixed period).
    fn attributed(&self, s: &Slot) -> f64 {
        // A trap stands for at least its own sample.
        let at_least_own = |sum: f64| if sum > 0.0 { sum } else { s.scale };
        let since = |start: u64| {
            let log = self
                .samples_at
                .get(&s.use_ip)
                .map_or(&[][..], Vec::as_slice);
            let first = log.partition_point(|&(n, _)| n < start);
            let before = if first > 0 { log[first - 1].1 } else { 0.0 };
            at_least_own(log.last().map_or(0.0, |l| l.1) - before)
        };
        match self.cfg.attribution {
            Attribution::IpInterval => since(s.interval_start),
            Attribution::IpArmed => since(s.armed_at),
            Attribution::All => at_least_own(
                self.scale_sums[self.samples as usize] - self.scale_sums[s.interval_start as usize],
            ),
            Attribution::One => s.scale,
            Attribution::Ht => s.scale / s.pi.max(1e-300),
            Attribution::Km => s.entry,
        }
    }

    fn sample(&mut self, ip: u64, addr: u64, now: u64) {
        self.place(ip, addr, now, None, 1.0);
    }

    /// A sample taken live, where the plugin's reservoir already chose its register
    /// (`register`; `None`: dropped), `period` the mean gap it was drawn from (a live run's
    /// adaptive period; the configured one otherwise). The bookkeeping (attribution,
    /// Horvitz-Thompson probabilities) is the same as for the samples this sampler takes
    /// itself; a sample stands for `period / config.period` times as many uses.
    pub fn sample_placed(
        &mut self,
        ip: u64,
        addr: u64,
        now: u64,
        register: Option<usize>,
        period: u64,
    ) {
        let scale = period as f64 / self.cfg.period.max(1) as f64;
        self.place(ip, addr, now, Some(register), scale);
    }

    /// A trap of `register` at access `now` (live: the reusing instruction is not known).
    pub fn trap(&mut self, register: usize, now: u64, on_pair: &mut impl FnMut(Pair)) {
        let Some(s) = self.slots.get_mut(register).and_then(Option::take) else {
            return;
        };
        self.since_scale[register] = 0.0;
        self.traps += 1;
        let time = now.saturating_sub(s.use_time);
        self.ended(&s, None, (Some(time), time), on_pair);
    }

    /// The end of a watch by a trap (`time` Some) or the run's end (None) after `watched`
    /// accesses: its pair to `on_pair`, or held for [`Attribution::Km`]'s weights.
    fn ended(
        &mut self,
        s: &Slot,
        reuse_ip: Option<u64>,
        (time, watched): (Option<u64>, u64),
        on_pair: &mut impl FnMut(Pair),
    ) {
        let pair = s.pair(reuse_ip, time, self.attributed(s));
        if self.cfg.attribution == Attribution::Km {
            self.hold(s, pair, watched, false);
        } else {
            on_pair(pair);
        }
    }

    /// Keeps what became of the watch of `s` for [`Attribution::Km`]'s weights.
    fn hold(&mut self, s: &Slot, pair: Pair, watched: u64, replaced: bool) {
        self.held.push(Watched {
            pair,
            watched,
            replaced,
            stratum: stratum(s.scale),
        });
    }

    /// Places a new sample: `given` is the live reservoir's choice, `None` to choose here.
    fn place(&mut self, ip: u64, addr: u64, now: u64, given: Option<Option<usize>>, scale: f64) {
        let number = self.samples;
        self.samples += 1;
        let at = self.samples_at.entry(ip).or_default();
        let sum = at.last().map_or(0.0, |l| l.1) + scale;
        at.push((number, sum));
        let total = self.scale_sums.last().copied().unwrap_or(0.0) + scale;
        self.scale_sums.push(total);
        let g = self.cfg.granularity.bytes();
        let mut slot = Slot {
            lo: addr & !(g - 1),
            hi: (addr & !(g - 1)) + g,
            use_time: now,
            use_ip: ip,
            interval_start: number,
            armed_at: number,
            pi: 1.0,
            scale,
            entry: scale,
        };
        for k in 0..self.since_scale.len() {
            if self.slots[k].is_some() {
                self.since_scale[k] += scale;
            }
        }
        // A free register takes the sample (the live plugin takes the first free one too).
        let free = match given {
            None => self.slots.iter().position(Option::is_none),
            Some(g) => g.filter(|&k| self.slots.get(k).is_some_and(Option::is_none)),
        };
        if let Some(k) = free {
            self.slots[k] = Some(slot);
            self.since_scale[k] = scale;
            return;
        }
        // All busy: visit in random order; register k takes the sample with scale / S_k
        // (1 / n_k at one scale). Horvitz-Thompson bookkeeping first: the chance q_k that
        // this sample lands in k (k accepts and every register visited before it declined,
        // over random orders).
        let accept: Vec<f64> = self
            .since_scale
            .iter()
            .map(|&total| (scale / total).min(1.0))
            .collect();
        let q = take_probabilities(&accept);
        for (k, s) in self.slots.iter_mut().enumerate() {
            if let Some(s) = s {
                s.pi *= 1.0 - q[k];
            }
        }
        let chosen = match given {
            Some(g) => g.filter(|&k| k < self.slots.len()),
            None => {
                // Only trace-driven runs choose here, and their samples all have scale 1:
                // the acceptance is 1 / n_k, drawn as an integer.
                debug_assert!(scale == 1.0);
                let n = self.order.len();
                for i in (1..n).rev() {
                    let j = (self.rng.next_u64() % (i as u64 + 1)) as usize;
                    self.order.swap(i, j);
                }
                let mut taken = None;
                for idx in 0..n {
                    let k = self.order[idx];
                    let nk = (self.since_scale[k] as u64).max(1);
                    if self.rng.next_u64() % nk == 0 {
                        taken = Some(k);
                        break;
                    }
                }
                taken
            }
        };
        match chosen {
            Some(k) => {
                // Replaced within the register's reservoir interval, which goes on.
                slot.interval_start = self.slots[k].map_or(number, |o| o.interval_start);
                slot.entry = scale / q.iter().sum::<f64>().max(1e-300);
                if let (Some(o), Attribution::Km) = (self.slots[k], self.cfg.attribution) {
                    let pair = o.pair(None, None, o.entry);
                    self.hold(&o, pair, now.saturating_sub(o.use_time), true);
                }
                // Every busy register could have taken it, and each one's Horvitz-Thompson
                // weight counts it once on average: divided among them, it counts once.
                let takers = q.iter().filter(|&&x| x > 0.0).count().max(1);
                slot.pi = q[k] * takers as f64;
                self.slots[k] = Some(slot);
            }
            None => self.dropped += 1,
        }
    }

    /// Reports the registers still armed at the end as uses without a reuse.
    pub fn finish(&mut self, on_pair: &mut impl FnMut(Pair)) {
        self.finish_at(self.counter, on_pair);
    }

    /// [`Sampler::finish`] for a run whose end is at access `end` of the thread (a live run,
    /// whose sampler is told of samples and traps, not of every access).
    pub fn finish_at(&mut self, end: u64, on_pair: &mut impl FnMut(Pair)) {
        for k in 0..self.slots.len() {
            if let Some(s) = self.slots[k].take() {
                let watched = end.saturating_sub(s.use_time);
                self.ended(&s, None, (None, watched), on_pair);
            }
        }
        for pair in redistribute(std::mem::take(&mut self.held)) {
            on_pair(pair);
        }
    }
}

/// Exact time and stack histograms of one stream (the reference RDX is judged against).
pub struct Exact {
    last: HashMap<u64, u64, fasthash::Build>,
    stack: super::reuse::ReuseDistance,
    pending: Vec<u64>,
    times: Vec<Option<u64>>,
    pub time: Histogram,
    /// The reuse times by the position of their use (for the phased conversion).
    pub timeline: Timeline,
    pub distance: Histogram,
    counter: u64,
    shift: u32,
    finished: bool,
}

impl Exact {
    pub fn new(g: Granularity) -> Exact {
        Exact {
            last: HashMap::default(),
            stack: super::reuse::ReuseDistance::new(),
            pending: Vec::with_capacity(super::reuse::BATCH),
            times: Vec::with_capacity(super::reuse::BATCH),
            time: Histogram::default(),
            timeline: Timeline::default(),
            distance: Histogram::default(),
            counter: 0,
            shift: g.bytes().trailing_zeros(),
            finished: false,
        }
    }

    /// Distinct locations seen.
    pub fn distinct(&self) -> u64 {
        self.last.len() as u64
    }

    pub fn accesses(&self) -> u64 {
        self.counter
    }

    #[inline]
    pub fn access(&mut self, addr: u64) {
        let key = addr >> self.shift;
        let t = self.counter;
        self.counter += 1;
        let prev = self.last.insert(key, t);
        // Uses are counted at their reuse; the last uses are added at the end (infinite).
        if let Some(p) = prev {
            self.time.add(Some(t - p), 1.0);
            self.timeline.add(p, Some(t - p), 1.0);
        }
        self.pending.push(key);
        if self.pending.len() == super::reuse::BATCH {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let hist = &mut self.distance;
        self.stack.batch(&self.pending, |d| {
            if let Some(d) = d {
                hist.add(Some(d), 1.0);
            }
        });
        self.pending.clear();
        self.times.clear();
    }

    /// Closes the stream: every location's last use has no reuse.
    pub fn finish(&mut self) {
        self.flush();
        if self.finished {
            return;
        }
        self.finished = true;
        for &p in self.last.values() {
            self.timeline.add(p, None, 1.0);
        }
        self.time.infinite = self.last.len() as f64;
        self.distance.infinite = self.last.len() as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample at every access (no jitter), words, Horvitz-Thompson weights.
    fn every_access(watchpoints: usize) -> RdxConfig {
        RdxConfig {
            period: 1,
            jitter: 0.0,
            watchpoints,
            granularity: Granularity::Word,
            seed: 1,
            attribution: Attribution::Ht,
        }
    }

    /// Exact time histogram of a stream of locations.
    fn times_of(s: &[u64]) -> Histogram {
        let mut e = Exact::new(Granularity::Word);
        for &x in s {
            e.access(x * 8);
        }
        e.finish();
        e.time
    }

    fn stack_of(s: &[u64], bins: &[(f64, f64)]) -> Vec<f64> {
        let mut e = Exact::new(Granularity::Word);
        for &x in s {
            e.access(x * 8);
        }
        e.finish();
        e.distance.fractions(bins)
    }

    #[test]
    fn fine_bins_are_ordered_and_cover() {
        let mut last = 0;
        for d in 1..100_000u64 {
            let b = fine_bin(d);
            assert!(b >= last, "{d}");
            assert!(
                fine_lower(b) <= d as f64 && (d as f64) < fine_lower(b + 1),
                "{d} {b}"
            );
            last = b;
        }
        assert_eq!(rdx_bins().len(), 20);
        assert_eq!(bin_label(4096.0, 8192.0), "4K-8K");
        assert_eq!(bin_label(1073741824.0, f64::INFINITY), "1G+");
    }

    #[test]
    fn conversion_is_exact_on_a_cyclic_scan() {
        // 0..N repeated: every reuse has time N and distance N - 1.
        for n in [10u64, 1000, 50_000] {
            let s: Vec<u64> = (0..20 * n).map(|i| i % n).collect();
            let t = times_of(&s);
            let bins = fine_bins();
            let est = convert(&t, &bins);
            let exact = stack_of(&s, &bins);
            let (acc, _) = accuracy(&exact, &est);
            assert!(acc > 0.999, "N {n}: S {acc}: {est:?}");
        }
    }

    #[test]
    fn a_scan_of_a_power_of_two_stays_below_its_bin_edge() {
        // 0..N repeated with N a power of two: every reuse has distance N - 1, the last
        // distance of a bin ([0, 4K) for 4096 words). Every window holds exactly N locations,
        // so no reuse may spill into the next bin (a binomial count over N locations, Shen et
        // al.'s spread, put half of them there: S 0.5).
        for n in [64u64, 4096, 8192] {
            let s: Vec<u64> = (0..8 * n).map(|i| i % n).collect();
            let t = times_of(&s);
            for bins in [rdx_bins(), fine_bins()] {
                let (acc, _) = accuracy(&stack_of(&s, &bins), &convert(&t, &bins));
                assert!(acc > 0.999, "N {n}: S {acc}");
            }
        }
    }

    #[test]
    fn distinct_locations_are_estimated_even_when_every_use_saw_a_reuse() {
        // A cyclic scan of 1000 locations, and only the uses with a reuse kept (as when every
        // sampled use trapped): Pt(infinity) is 0, yet each window of 1000 accesses holds all
        // 1000 locations.
        let s: Vec<u64> = (0..20_000u64).map(|i| i % 1000).collect();
        let mut t = times_of(&s);
        t.infinite = 0.0;
        let n = estimate_distinct(&t, s.len() as u64);
        assert!((n - 1000.0).abs() < 1.0, "{n}");
        // With the last uses kept, the estimate is T x Pt(infinity) = 1000 too.
        let n = estimate_distinct(&times_of(&s), s.len() as u64);
        assert!((n - 1000.0).abs() < 1.0, "{n}");
    }

    #[test]
    fn immediate_reuse_has_distance_zero() {
        // Pairs a a b b c c ...: half the reuses at time 1 (distance 0), the rest far.
        let s: Vec<u64> = (0..40_000u64).map(|i| (i / 2) % 5000).collect();
        let t = times_of(&s);
        let bins = fine_bins();
        let est = convert(&t, &bins);
        let exact = stack_of(&s, &bins);
        assert!(
            (exact[0] - est[0]).abs() < 1e-6,
            "{} vs {}",
            exact[0],
            est[0]
        );
        let (acc, _) = accuracy(&exact, &est);
        assert!(acc > 0.99, "{acc}");
    }

    /// The exact pass over a stream of locations (finished).
    fn exact_of(s: &[u64]) -> Exact {
        let mut e = Exact::new(Granularity::Word);
        for &x in s {
            e.access(x * 8);
        }
        e.finish();
        e
    }

    #[test]
    fn phased_conversion_follows_the_phases_of_a_run() {
        // A large set A scanned a few times, then a small set B scanned many times, then A
        // once more: A's reuses across B's phase come 10^5 accesses later but have only
        // |A| - 1 + |B| other locations between them. Taken as one phase, the run's many
        // short reuses make those long windows look nearly empty of new locations.
        let (a, b) = (2000u64, 96u64);
        let mut s: Vec<u64> = (0..10 * a).map(|i| i % a).collect();
        s.extend((0..100_000).map(|i| a + i % b));
        s.extend(0..a);
        let e = exact_of(&s);
        let bins = fine_bins();
        let exact = e.distance.fractions(&bins);
        let len = e.accesses();
        assert!(e.timeline.phases(len) > 8, "{}", e.timeline.phases(len));
        let (phased, _) = accuracy(&exact, &convert_phased(&e.timeline, len, &bins));
        let (whole, _) = accuracy(&exact, &convert(&e.time, &bins));
        assert!(phased > 0.99, "phased S {phased}");
        assert!(
            whole < 0.9,
            "one phase S {whole}: the test no longer shows phases"
        );
        // The fractions still add up to 1.
        let sum: f64 = convert_phased(&e.timeline, len, &bins).iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
    }

    /// Sampled uses of a loop that behaves alike throughout (RDX's Listing 2: two thirds
    /// short reuses, a third 5% of the run long, reuses past the end lost), weighted as a
    /// reservoir leaves them (a long watch carries the replaced ones' weight); with
    /// `changing`, the long reuses all in the run's second half instead.
    fn sampled_loop(seed: u64, changing: bool) -> Timeline {
        let (len, uses) = (6_000_000u64, 300u64);
        let mut rng = Rng::new(seed);
        let mut t = Timeline::default();
        for i in 0..uses {
            let pos = i * (len / uses) + rng.next_u64() % 1000;
            let long = if changing {
                pos >= len / 2
            } else {
                rng.next_u64() % 3 == 0
            };
            let (time, weight) = if long { (300_000, 1.5) } else { (3, 1.0) };
            t.add(pos, (pos + time < len).then_some(time), weight);
        }
        t
    }

    #[test]
    fn sampled_phases_are_cut_only_where_they_differ() {
        let len = 6_000_000;
        let bins = fine_bins();
        // Effective uses for several phases, but none parts from the rest: one phase, the
        // one-phase model exactly, in all but about the test's level of runs.
        let split = (0..200)
            .filter(|&seed| {
                let t = sampled_loop(seed, false);
                assert!(t.effective() >= 3.0 * USES_PER_PHASE, "{}", t.effective());
                t.phases(len) > 1
            })
            .count();
        assert!(split <= 6, "{split} of 200 steady runs cut into phases");
        let t = sampled_loop(1, false);
        assert_eq!(t.phases(len), 1);
        let (phased, one) = (
            convert_phased(&t, len, &bins),
            convert(&t.histogram(), &bins),
        );
        assert!(phased.iter().zip(&one).all(|(a, b)| (a - b).abs() < 1e-9));
        // A run whose second half differs is cut, every time.
        for seed in 0..20 {
            let t = sampled_loop(seed, true);
            assert!(t.phases(len) > 1, "seed {seed}");
        }
    }

    #[test]
    fn phased_conversion_of_a_steady_run_is_the_one_phase_model() {
        // Uniformly random over N: every phase looks like the whole run.
        let mut rng = Rng::new(11);
        let s: Vec<u64> = (0..300_000).map(|_| rng.next_u64() % 4096).collect();
        let e = exact_of(&s);
        let bins = fine_bins();
        let len = e.accesses();
        assert_eq!(e.timeline.phases(len), MAX_PHASES);
        let one = convert(&e.time, &bins);
        let phased = convert_phased(&e.timeline, len, &bins);
        let (agree, _) = accuracy(&one, &phased);
        assert!(agree > 0.97, "{agree}");
        let (acc, _) = accuracy(&e.distance.fractions(&bins), &phased);
        assert!(acc > 0.95, "{acc}");
    }

    #[test]
    fn effective_uses_count_equal_weights_and_discount_heavy_ones() {
        let mut t = Timeline::default();
        for i in 0..100 {
            t.add(i * 10, Some(5), 1.0);
        }
        assert!((t.effective() - 100.0).abs() < 1e-9);
        // One use standing for 900 others: the 101 uses count about as one.
        let mut heavy = t.clone();
        heavy.add(5000, None, 900.0);
        let e = heavy.effective();
        assert!(
            (e - 1000.0 * 1000.0 / (100.0 + 810_000.0)).abs() < 1e-9,
            "{e}"
        );
        // Several timelines (threads) together: their sums, not the mean of their counts.
        let together = effective(&[t.weights(), heavy.weights()]);
        assert!((together - 1100.0 * 1100.0 / (200.0 + 810_000.0)).abs() < 1e-9);
        assert_eq!(effective(&[]), 0.0);
    }

    #[test]
    fn timeline_keeps_its_weights_as_it_widens() {
        let mut t = Timeline::default();
        for i in 0..10_000u64 {
            t.add(i * 1000, Some(1 + i % 50), 1.0);
        }
        t.add(5, None, 1.0);
        assert!(1u64 << t.shift >= 10_000 * 1000 / BUCKETS);
        assert!(t.cells.len() as u64 <= BUCKETS);
        assert_eq!(t.finite(), 10_000.0);
        assert!((t.effective() - 10_001.0).abs() < 1e-6);
        // The mean position and time of all cells together are those added.
        let (w, wt, wp) = t
            .each()
            .filter(|c| c.1 != NO_REUSE_CELL)
            .fold((0.0f64, 0.0f64, 0.0f64), |a, (_, _, v)| {
                (a.0 + v[0], a.1 + v[1], a.2 + v[2])
            });
        assert!((wt / w - 25.5).abs() < 1e-9, "{}", wt / w);
        assert!((wp / w - 4_999_500.0).abs() < 1e-3, "{}", wp / w);
        // Two uses, one with 99 times the other's weight: about one effective use, so one
        // phase.
        let mut t = Timeline::default();
        t.add(0, Some(3), 1.0);
        t.add(1_000_000, Some(3), 99.0);
        assert!((t.effective() - 100.0 * 100.0 / 9802.0).abs() < 1e-9);
        assert_eq!(t.phases(2_000_000), 1);
    }

    #[test]
    fn conversion_matches_random_streams() {
        // Uniformly random over N: the distances of one reuse time vary around W(t) - 1 (their
        // variance is about N p^2 / 2), and placing them at it still matches the exact histogram.
        let mut rng = Rng::new(3);
        for n in [64u64, 4096] {
            let s: Vec<u64> = (0..400_000).map(|_| rng.next_u64() % n).collect();
            let t = times_of(&s);
            let bins = fine_bins();
            let est = convert(&t, &bins);
            let exact = stack_of(&s, &bins);
            let (acc, hat) = accuracy(&exact, &est);
            assert!(acc > 0.95 && hat > 0.97, "N {n}: S {acc} S^ {hat}");
            // No reuse is lost: the fractions sum to 1, in RDX's bins too.
            for b in [bins, rdx_bins()] {
                let sum: f64 = convert(&t, &b).iter().sum();
                assert!((sum - 1.0).abs() < 1e-9, "N {n}: {sum}");
            }
        }
    }

    /// `n` uses drawn from `shares` (reuse times, None: no reuse), each of weight 1.
    fn drawn(rng: &mut Rng, shares: &[(Option<u64>, f64)], n: usize) -> Histogram {
        let mut h = Histogram::default();
        for _ in 0..n {
            let mut u = rng.next_u64() as f64 / u64::MAX as f64;
            let pick = shares.iter().find(|(_, p)| {
                u -= p;
                u < 0.0
            });
            h.add(pick.unwrap_or(&shares[shares.len() - 1]).0, 1.0);
        }
        h
    }

    #[test]
    fn the_parting_test_keeps_its_level_and_sees_a_difference() {
        // Workers walking the data (most reuses 2^20 later) and a main thread filling it (short
        // reuses), as an OpenMP program's threads.
        let workers = [(Some(3), 0.3), (Some(1 << 20), 0.6), (None, 0.1)];
        let main = [
            (Some(3), 0.2),
            (Some(12), 0.5),
            (Some(1 << 20), 0.2),
            (None, 0.1),
        ];
        let mut rng = Rng::new(7);
        let trials = 2000;
        let rate = |rng: &mut Rng, a: &[(Option<u64>, f64)], b: &[(Option<u64>, f64)], n: usize| {
            let split = (0..trials)
                .filter(|_| {
                    let (x, y) = (drawn(rng, a, n), drawn(rng, b, 2 * n));
                    parting(&x, n as f64, &y, 2.0 * n as f64) > 1.0
                })
                .count();
            split as f64 / trials as f64
        };
        // Alike: told apart in at most the test's 1% (fewer: the times are discrete).
        for n in [10, 30, 100] {
            let r = rate(&mut rng, &workers, &workers, n);
            assert!(r <= 0.015, "alike, {n} uses: split in {r}");
        }
        // Different: told apart nearly always from 60 and 120 uses, in about two runs of
        // three from 30 and 60 (their shares part by 0.4; the test needs 0.36 there), why a
        // sampled OpenMP gather's threads are sometimes still pooled (README, RDX).
        let r = rate(&mut rng, &workers, &main, 60);
        assert!(r >= 0.95, "different, 60 uses: split in {r}");
        let r = rate(&mut rng, &workers, &main, 30);
        assert!((0.5..0.85).contains(&r), "different, 30 uses: split in {r}");
        // The same histograms standing for 4 effective uses each (a few heavy samples): the
        // test cannot tell them apart, whatever they show.
        let (x, y) = (drawn(&mut rng, &workers, 100), drawn(&mut rng, &main, 100));
        assert!(parting(&x, 100.0, &y, 100.0) > 1.0);
        assert!(parting(&x, 4.0, &y, 4.0) <= 1.0);
        // An empty side parts from nothing.
        assert_eq!(parting(&Histogram::default(), 0.0, &y, 100.0), 0.0);
    }

    #[test]
    fn accuracy_formulas() {
        assert_eq!(accuracy(&[0.5, 0.5], &[0.5, 0.5]), (1.0, 1.0));
        let (s, h) = accuracy(&[1.0, 0.0, 0.0], &[0.0, 1.0, 0.0]);
        assert!((s - 0.0).abs() < 1e-12);
        // Adjacent averages: [0.5, 0] vs [0.5, 0.5]: S^ = 1 - 0.5 / 2.
        assert!((h - 0.75).abs() < 1e-12, "{h}");
    }

    #[test]
    fn live_events_replayed_give_the_pairs_of_the_trace_driven_run() {
        // A trace-driven sampler over a random stream; its choices (which register each
        // sample took, which register trapped) are read off its registers and replayed into
        // a second sampler as the live plugin reports them: the pairs must be the same.
        let cfg = RdxConfig {
            period: 7,
            jitter: 0.5,
            watchpoints: 3,
            granularity: Granularity::Word,
            seed: 5,
            attribution: Attribution::Ht,
        };
        let mut a = Sampler::new(cfg, 9);
        let mut b = Sampler::new(cfg, 12345);
        let (mut pa, mut pb) = (Vec::new(), Vec::new());
        let mut rng = Rng::new(3);
        for now in 0..20_000u64 {
            let ip = 0x400 + rng.next_u64() % 5;
            let addr = 0x10_0000 + 8 * (rng.next_u64() % 40);
            let before: Vec<Option<Slot>> = a.slots.clone();
            let (traps_before, samples_before) = (a.traps, a.samples);
            a.access(ip, addr, 8, &mut |p| pa.push(p));
            // Traps first (they happen before the access is counted), in register order.
            if a.traps > traps_before {
                for (k, slot) in before.iter().enumerate() {
                    let trapped = slot.is_some_and(|s| addr < s.hi && addr + 8 > s.lo);
                    if trapped {
                        b.trap(k, now, &mut |mut p: Pair| {
                            p.reuse_ip = Some(ip);
                            pb.push(p)
                        });
                    }
                }
            }
            if a.samples > samples_before {
                let k = (0..3).find(|&k| a.slots[k].is_some_and(|s| s.use_time == now));
                b.sample_placed(ip, addr, now, k, cfg.period);
            }
        }
        a.finish(&mut |p| pa.push(p));
        b.finish(&mut |p| pb.push(p));
        assert!(pa.len() > 1000, "{} pairs", pa.len());
        assert_eq!(a.dropped, b.dropped);
        assert!(a.dropped > 0, "the reservoir was exercised");
        assert_eq!(pa, pb);
    }

    #[test]
    fn samples_of_a_longer_period_stand_for_more_uses() {
        // Two halves of 400,000 accesses: a cycle over 10 words (reuse time 10), then over
        // 1000 words (reuse time 1000). A live run samples the first half every 1000
        // accesses and the second every 4000 (an adaptive period): 400 and 100 samples. Each
        // half holds half of the uses, so the weights must split evenly, whatever the
        // attribution, where counting traps would give 80% to the short reuses.
        for attribution in [
            Attribution::Ht,
            Attribution::Km,
            Attribution::IpInterval,
            Attribution::All,
            Attribution::One,
        ] {
            let cfg = RdxConfig {
                period: 1000,
                jitter: 0.0,
                watchpoints: 4,
                granularity: Granularity::Word,
                seed: 1,
                attribution,
            };
            let mut s = Sampler::new(cfg, 1);
            let mut by_time: HashMap<u64, f64> = HashMap::new();
            let mut watched: Option<u64> = None;
            let half = 400_000u64;
            for now in 0..2 * half {
                let addr = if now < half {
                    0x1000 + 8 * (now % 10)
                } else {
                    0x10_0000 + 8 * (now % 1000)
                };
                if watched == Some(addr) {
                    s.trap(0, now, &mut |p| {
                        *by_time.entry(p.time.unwrap()).or_default() += p.weight
                    });
                    watched = None;
                }
                let period = if now < half { 1000 } else { 4000 };
                if now % period == 0 {
                    assert!(
                        watched.is_none(),
                        "each use is reused before the next sample"
                    );
                    s.sample_placed(0x400, addr, now, Some(0), period);
                    watched = Some(addr);
                }
            }
            // Kaplan-Meier's weights come at the end.
            s.finish(&mut |p| {
                if let Some(t) = p.time {
                    *by_time.entry(t).or_default() += p.weight
                }
            });
            assert_eq!(s.samples, 500);
            let (short, long) = (by_time[&10], by_time[&1000]);
            assert!(
                (short - long).abs() < 1e-9 * short,
                "{attribution:?}: short {short}, long {long}"
            );
            assert!((short - 400.0).abs() < 1e-9, "{attribution:?}: {short}");
        }
    }

    #[test]
    fn reservoir_keeps_every_sample_equally_likely() {
        // One register, samples at every access of distinct locations never reused: the
        // register must end holding each of the last samples with equal probability.
        let cfg = every_access(1);
        let mut held = [0u32; 8];
        for seed in 0..4000 {
            let mut s = Sampler::new(cfg, seed);
            let mut pairs = Vec::new();
            for i in 0..8u64 {
                s.access(0x100 + i, 1 << 20 | (i * 64), 8, &mut |p| pairs.push(p));
            }
            assert!(pairs.is_empty());
            s.finish(&mut |p| held[(p.use_ip - 0x100) as usize] += 1);
        }
        // The first sample is taken at access 1 (the first gap is one period), so accesses
        // 1..=7 are samples: each should be held 1/7 of the time.
        assert_eq!(held[0], 0);
        for (i, &h) in held.iter().enumerate().skip(1) {
            assert!(
                (h as f64 / 4000.0 - 1.0 / 7.0).abs() < 0.025,
                "sample {i}: {h}"
            );
        }
    }

    #[test]
    fn samples_taken_while_every_register_is_busy_count_once() {
        // Two registers, 400 samples of locations never reused: the registers fill with the
        // first two, and the other 398 come while both are busy. The weights of the two held
        // at the end must add up to the 400 samples on average (each register's weight alone
        // stands for all of them: undivided, the two added up to about 800).
        for attribution in [Attribution::Ht, Attribution::Km] {
            let cfg = RdxConfig {
                attribution,
                ..every_access(2)
            };
            let runs = 2000;
            let mut total = 0.0;
            for seed in 0..runs {
                let mut s = Sampler::new(cfg, seed);
                for i in 0..=400u64 {
                    s.access(0x100, 1 << 20 | (i * 64), 8, &mut |_| panic!("no reuse"));
                }
                assert_eq!(s.samples, 400);
                s.finish(&mut |p| {
                    assert_eq!(p.time, None);
                    total += p.weight
                });
            }
            let mean = total / runs as f64;
            assert!(
                (mean - 400.0).abs() < 20.0,
                "{attribution:?}: mean total weight {mean}"
            );
        }
    }

    #[test]
    fn redistribution_hands_a_replaced_samples_weight_to_the_later_ones() {
        // (reuse time, or None for no reuse / a replacement; how long it was watched;
        // weight; replaced).
        let watched = |time: Option<u64>, watched: u64, weight: f64, replaced: bool| Watched {
            pair: Pair {
                use_ip: 0x400,
                use_time: 99,
                reuse_ip: None,
                time,
                weight,
            },
            watched,
            replaced,
            stratum: 0,
        };
        // By time, no reuse last.
        let outcome = |out: Vec<Pair>| -> Vec<(Option<u64>, f64)> {
            let mut v: Vec<(Option<u64>, f64)> = out.iter().map(|p| (p.time, p.weight)).collect();
            v.sort_by_key(|x| x.0.unwrap_or(u64::MAX));
            v
        };
        // Reuses at 1 and 3, a watch replaced at 2, one watched to the run's end 10 accesses
        // on; weights 1, 1, 2, 1: the replaced one's 2 goes to the two after it, 1 each.
        let out = redistribute(vec![
            watched(Some(3), 3, 1.0, false),
            watched(None, 2, 2.0, true),
            watched(None, 10, 1.0, false),
            watched(Some(1), 1, 1.0, false),
        ]);
        assert_eq!(outcome(out), [(Some(1), 1.0), (Some(3), 2.0), (None, 2.0)]);
        // A use that the run's end left without reuse after 4 accesses gets nothing of a watch
        // replaced after 6: that use's outcome is later than 6 accesses.
        let out = redistribute(vec![
            watched(None, 4, 1.0, false),
            watched(None, 6, 2.0, true),
            watched(Some(9), 9, 1.0, false),
        ]);
        assert_eq!(outcome(out), [(Some(9), 3.0), (None, 1.0)]);
        // In proportion to the later weights; a reuse at the length of a replacement counts
        // before it (the replaced one's outcome is later).
        let out = redistribute(vec![
            watched(None, 5, 1.0, true),
            watched(Some(5), 5, 1.0, false),
            watched(Some(8), 8, 3.0, false),
            watched(None, 20, 1.0, false),
        ]);
        assert_eq!(
            outcome(out),
            [(Some(5), 1.0), (Some(8), 3.75), (None, 1.25)]
        );
        // Nothing watched longer: the weight stays, as a use without reuse.
        let out = redistribute(vec![
            watched(Some(4), 4, 1.0, false),
            watched(None, 9, 2.0, true),
        ]);
        assert_eq!(outcome(out), [(Some(4), 1.0), (None, 2.0)]);
        assert!(redistribute(Vec::new()).is_empty());
    }

    #[test]
    fn kaplan_meier_weighs_each_octave_of_periods_apart() {
        // Watches of samples at the configured period (octave 0): reuses after 5 and 50
        // accesses, watches replaced after 10 and 60; of samples at 4 times the period
        // (octave 2): reuses after 20 and 100 (weight 4 each), a watch replaced after 200.
        // Within octave 0 the watch replaced at 10 hands its weight to the reuse at 50 alone
        // (pooled, octave 2's reuses would take most of it); the one replaced at 60 outlasted
        // its octave, so its weight (1.5 by then) goes to the longer watches of any octave,
        // the reuse at 100; the one replaced at 200 outlasted every watch and stays a use
        // without reuse.
        let cfg = RdxConfig {
            attribution: Attribution::Km,
            ..every_access(1)
        };
        let mut s = Sampler::new(cfg, 1);
        let watch = |time: Option<u64>, watched: u64, weight: f64, stratum: i32| Watched {
            pair: Pair {
                use_ip: 0x400,
                use_time: 0,
                reuse_ip: None,
                time,
                weight,
            },
            watched,
            replaced: time.is_none(),
            stratum,
        };
        s.held = vec![
            watch(Some(100), 100, 4.0, 2),
            watch(None, 10, 1.0, 0),
            watch(Some(5), 5, 1.0, 0),
            watch(None, 200, 1.0, 2),
            watch(Some(50), 50, 1.0, 0),
            watch(Some(20), 20, 4.0, 2),
            watch(None, 60, 1.0, 0),
        ];
        let mut got = Vec::new();
        s.finish_at(1000, &mut |p| got.push((p.time, p.weight)));
        got.sort_by_key(|g| g.0.unwrap_or(u64::MAX));
        assert_eq!(
            got,
            [
                (Some(5), 1.0),
                (Some(20), 4.0),
                (Some(50), 1.5),
                (Some(100), 5.5),
                (None, 1.0)
            ]
        );
        assert_eq!((stratum(1.0), stratum(4.0), stratum(0.5)), (0, 2, -1));
    }

    #[test]
    fn kaplan_meier_keeps_the_long_reuses_that_replacements_cut_short() {
        // Even accesses cycle over 3 words (reuse time 6), odd ones over 2500 (reuse time
        // 5000): half the uses are reused 50 sample periods later, and two registers are
        // replaced long before most of those reuses. The share of the long reuses among the
        // reuses, averaged over seeds, must be right both ways (Horvitz-Thompson from the
        // traps alone, Kaplan-Meier from every watch); Kaplan-Meier, which also learns from
        // the watches that replacements ended, must spread less from seed to seed. The uses
        // without reuse (the last 2503, 2.5%) must keep their share: a use that the run's
        // end leaves unreused after fewer than 5000 accesses must not take the weight of the
        // long reuses' replaced watches.
        let n = 100_000u64;
        let truth = (n / 2 - 2500) as f64 / (n - 2500 - 3) as f64;
        let truth_none = 2503.0 / n as f64;
        let mut spread = Vec::new();
        for attribution in [Attribution::Ht, Attribution::Km] {
            let cfg = RdxConfig {
                period: 100,
                jitter: 0.5,
                watchpoints: 2,
                granularity: Granularity::Word,
                seed: 1,
                attribution,
            };
            let mut none_share = 0.0;
            let shares: Vec<f64> = (0..60)
                .map(|seed| {
                    let mut s = Sampler::new(cfg, seed);
                    let (mut short, mut long, mut none) = (0.0, 0.0, 0.0);
                    let mut add = |p: Pair| match p.time {
                        Some(6) => short += p.weight,
                        Some(5000) => long += p.weight,
                        Some(t) => panic!("reuse time {t}"),
                        None => none += p.weight,
                    };
                    for i in 0..n {
                        let addr = if i % 2 == 0 {
                            8 * (i / 2 % 3)
                        } else {
                            0x10_0000 + 8 * (i / 2 % 2500)
                        };
                        s.access(0x400 + i % 2, addr, 8, &mut add);
                    }
                    s.finish(&mut add);
                    none_share += none / (short + long + none) / 60.0;
                    long / (short + long)
                })
                .collect();
            assert!(
                (none_share - truth_none).abs() < 0.01,
                "{attribution:?}: no-reuse share {none_share:.4}, truly {truth_none:.4}"
            );
            let mean = shares.iter().sum::<f64>() / shares.len() as f64;
            let sd = (shares.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / shares.len() as f64)
                .sqrt();
            assert!(
                (mean - truth).abs() < 0.03,
                "{attribution:?}: long share {mean:.3} (sd {sd:.3}), truly {truth:.3}"
            );
            spread.push(sd);
        }
        assert!(
            spread[1] < 0.8 * spread[0],
            "Kaplan-Meier sd {:.4}, Horvitz-Thompson {:.4}",
            spread[1],
            spread[0]
        );
    }

    #[test]
    fn a_long_period_sample_is_weighed_by_its_period() {
        // Live RDX's adaptive period: 100 samples of period 1, then 10 of period 1024, all of
        // locations never reused, one register. The plugin's reservoir takes a sample with
        // period / (the periods since the register was last empty); the one held at the end
        // then stands for every period's accesses, whichever it is. With a uniform reservoir
        // (1 / n), a late sample held with probability 1/110 stood for 110 x 1024 accesses
        // and an early one for 110: right on average, wrong in every run.
        let cfg = every_access(1);
        let total = 100.0 + 10.0 * 1024.0;
        let mut late = 0;
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let mut s = Sampler::new(cfg, seed);
            let mut since = 0u64;
            for i in 0..110u64 {
                let period = if i < 100 { 1 } else { 1024 };
                since += period;
                let register = (i == 0 || rng.next_u64() % since < period).then_some(0);
                s.sample_placed(0x400 + i, 1 << 20 | (i * 64), i, register, period);
            }
            let mut pairs = Vec::new();
            s.finish(&mut |p| pairs.push(p));
            assert_eq!(pairs.len(), 1);
            assert!(
                (pairs[0].weight - total).abs() < 1e-9 * total,
                "seed {seed}: {} for {total} accesses",
                pairs[0].weight
            );
            late += usize::from(pairs[0].use_ip >= 0x400 + 100);
        }
        // The late samples hold 10240 of the 10340 accesses' weight.
        assert!(late > 190, "{late} of 200 runs end on a late sample");
    }

    #[test]
    fn proportional_attribution_counts_unwatched_samples() {
        // RDX's Listing 2: one loop instruction touches a location every iteration, reused
        // after 3 accesses; with one register, samples taken while it is busy are not
        // watched, but each trap stands for all samples at that instruction since arming.
        let cfg = RdxConfig {
            seed: 7,
            ..every_access(1)
        };
        let mut s = Sampler::new(cfg, 7);
        let mut pairs = Vec::new();
        for i in 0..3000u64 {
            s.access(0x400, 8 * (i % 3), 8, &mut |p| pairs.push(p));
        }
        s.finish(&mut |p| pairs.push(p));
        let traps: Vec<&Pair> = pairs.iter().filter(|p| p.time.is_some()).collect();
        assert!(traps.iter().all(|p| p.time == Some(3)));
        // Every sample was taken at the one instruction: the weights add up to the samples.
        let total: f64 = pairs.iter().map(|p| p.weight).sum();
        assert_eq!(total as u64, s.samples);
        assert!(
            traps.len() as u64 * 2 < s.samples,
            "the register was busy for most samples"
        );
    }

    #[test]
    fn batches_give_the_same_pairs_as_single_accesses() {
        use mgbench_capture::trace::{Access, AccessKind};
        let mut rng = Rng::new(11);
        let accesses: Vec<Access> = (0..200_000)
            .map(|i| Access {
                ip: 0x400 + (i % 3),
                addr: 0x10_000 + 8 * (rng.next_u64() % 3000) + (i % 2) * 4,
                size: [1u8, 2, 4, 8][(i % 4) as usize],
                kind: AccessKind::Load,
            })
            .collect();
        for (period, w) in [(1u64, 4usize), (7, 1), (300, 4), (5000, 2), (50, 6)] {
            for g in [Granularity::Word, Granularity::Line] {
                let cfg = RdxConfig {
                    period,
                    watchpoints: w,
                    granularity: g,
                    ..RdxConfig::default()
                };
                let (mut one, mut all) = (Vec::new(), Vec::new());
                let mut a = Sampler::new(cfg, 5);
                for x in &accesses {
                    a.access(x.ip, x.addr, x.size, &mut |p| one.push(p));
                }
                let mut b = Sampler::new(cfg, 5);
                // Uneven batches, one of them empty.
                let mut at = 0;
                for len in [0usize, 1, 999, 65_536, 3, 200_000].iter().cycle() {
                    let end = (at + len).min(accesses.len());
                    b.access_all(&accesses[at..end], &mut |p| all.push(p));
                    at = end;
                    if at == accesses.len() {
                        break;
                    }
                }
                assert_eq!(one, all, "period {period}, {w} registers, {g:?}");
                assert_eq!((a.samples, a.traps), (b.samples, b.traps));
                assert_eq!(a.accesses(), b.accesses());
            }
        }
    }

    #[test]
    fn take_probabilities_match_a_simulation() {
        let n = [3u64, 1, 7, 2];
        let q = take_probabilities(&n.map(|x| 1.0 / x as f64));
        // Simulate random orders and acceptances.
        let mut rng = Rng::new(9);
        let mut got = [0u64; 4];
        let trials = 400_000;
        for _ in 0..trials {
            let mut order = [0usize, 1, 2, 3];
            for i in (1..4).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            for k in order {
                if rng.next_u64() % n[k] == 0 {
                    got[k] += 1;
                    break;
                }
            }
        }
        for k in 0..4 {
            let sim = got[k] as f64 / trials as f64;
            assert!(
                (sim - q[k]).abs() < 0.003,
                "register {k}: {sim} vs {}",
                q[k]
            );
        }
        // One register: 1 / n.
        assert!((take_probabilities(&[0.2])[0] - 0.2).abs() < 1e-12);
    }

    #[test]
    fn watch_granularity_and_alignment() {
        let cfg = every_access(4);
        let mut s = Sampler::new(cfg, 1);
        let mut pairs = Vec::new();
        // Access 0 (not sampled), access 1 at 0x1004 (sampled: watches 0x1000..0x1008).
        s.access(1, 0x5000, 8, &mut |p| pairs.push(p));
        s.access(2, 0x1004, 4, &mut |p| pairs.push(p));
        // A 2-byte access at 0x1006 touches the watched word: trap at time 1.
        s.access(3, 0x1006, 2, &mut |p| pairs.push(p));
        assert_eq!(pairs.len(), 1);
        assert_eq!((pairs[0].time, pairs[0].reuse_ip), (Some(1), Some(3)));
        // 0x1008 is the next word: no trap.
        s.access(4, 0x1008, 8, &mut |p| pairs.push(p));
        assert_eq!(pairs.len(), 1);
    }

    /// Pairs of a run: `n` uses 1000 accesses apart, each reused `time(i)` later (None: not
    /// reused), of weight `weight(i)`.
    fn sampled(n: u64, time: impl Fn(u64) -> Option<u64>, weight: impl Fn(u64) -> f64) -> Timeline {
        let mut t = Timeline::default();
        for i in 0..n {
            t.add_pair(&Pair {
                use_ip: 1,
                use_time: i * 1000,
                reuse_ip: None,
                time: time(i),
                weight: weight(i),
            });
        }
        t
    }

    #[test]
    fn a_replicate_holds_each_use_as_often_as_it_was_drawn() {
        // Uses over 300 K accesses (the buckets widen past 256 of them), reuse times of
        // several octaves, weights of a reservoir's spread, some without reuse.
        let t = sampled(
            300,
            |i| (i % 7 != 0).then_some(1 + (i * 7919) % 100_000),
            |i| 1.0 + (i % 13) as f64,
        );
        let len = 300_000;
        let r = t.resampler();
        let mut once = Timeline::default();
        r.draw(&mut once, || 1);
        assert_eq!(once.histogram(), t.histogram());
        assert_eq!(once.weights(), t.weights());
        assert_eq!(once.phases(len), t.phases(len));
        let bins = rdx_bins();
        assert_eq!(
            convert_phased(&once, len, &bins),
            convert_phased(&t, len, &bins)
        );
        // Twice each: twice the weight and twice the effective uses (k copies of w add
        // k w^2, not (k w)^2), the same fractions.
        let mut twice = Timeline::default();
        r.draw(&mut twice, || 2);
        assert_eq!(twice.weights().0, 2.0 * t.weights().0);
        assert!((twice.effective() - 2.0 * t.effective()).abs() < 1e-9 * t.effective());
        assert_eq!(
            twice.histogram().fractions(&bins),
            t.histogram().fractions(&bins)
        );
        // Every other use left out: the replicate is the timeline of the others, and a
        // draw empties what the last one left.
        let mut k = 0;
        r.draw(&mut twice, || {
            k += 1;
            k % 2
        });
        let even = sampled(
            300,
            |i| (i % 2 == 0 && i % 7 != 0).then_some(1 + (i * 7919) % 100_000),
            |i| {
                if i % 2 == 0 {
                    1.0 + (i % 13) as f64
                } else {
                    0.0
                }
            },
        );
        assert_eq!(twice.histogram(), even.histogram());
        assert_eq!(twice.weights(), even.weights());
    }
}
