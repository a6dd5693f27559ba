//! `mgbench reuse --rdx TRACE`: RDX's sampling run over a recorded full trace as if it were
//! live (see [`crate::locality::rdx`]), with its time and converted stack-distance
//! histograms, the use/reuse pairs per instruction, and, unless turned off, the exact
//! histograms of the same trace and RDX's accuracy against them.

use std::collections::HashMap;
use std::path::Path;

use mgbench_capture::symbols::{Preloaded, Symbolizer};
use mgbench_capture::trace::{Access, Frame, JitSymbol, Mapping, Mode};
use serde::{Deserialize, Serialize};

use crate::apex::Rng;
use crate::fasthash;
use crate::locality::rdx::{
    accuracy, bin_label, convert, convert_phased, effective, estimate_distinct, fine_bins, parting,
    rdx_bins, Exact, Granularity, Histogram, Pair, RdxConfig, Sampler, Timeline,
};
use crate::SynthError;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ReuseConfig {
    pub rdx: RdxConfig,
    /// Also compute the exact histograms (a full pass of Olken's method per granularity).
    pub exact: bool,
    /// Use/reuse instruction pairs listed.
    pub top_pairs: usize,
    pub threads: usize,
    pub allow_damaged: bool,
    pub progress: mgbench_capture::progress::Progress,
}

impl Default for ReuseConfig {
    fn default() -> Self {
        ReuseConfig {
            rdx: RdxConfig::default(),
            exact: true,
            top_pairs: 20,
            threads: 1,
            allow_damaged: false,
            progress: Default::default(),
        }
    }
}

/// One bin of a report histogram: fractions of the finite reuses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bin {
    pub label: String,
    pub lo: f64,
    /// Upper bound (exclusive); null for the last, open bin.
    pub hi: Option<f64>,
    /// RDX's sampled time distances.
    pub time: f64,
    /// RDX's time distances converted to stack distances.
    pub stack: f64,
    /// Exact (full traces, unless --no-exact).
    pub exact_time: Option<f64>,
    pub exact_stack: Option<f64>,
    /// The exact time histogram converted (the model alone).
    pub converted_exact_time: Option<f64>,
    /// Where `time` and `stack` fall over bootstrap replicates of the sampled uses (their
    /// 10th and 90th percentiles: see [`Spread`]); absent where the spread is, and from
    /// reports written before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_range: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_range: Option<[f64; 2]>,
}

/// What the samples' own spread says of the histograms: each thread's sampled uses drawn
/// again with their weights (a Poisson bootstrap), converted as the run's were, [`REPLICATES`]
/// times; the median of RDX's S between the run's histogram and a replicate's. It needs no
/// exact histogram, so a live run has it too; it sees the sampling's variance (a reservoir
/// whose heavy traps could have been others) and not its bias (a run converted as one phase
/// where it has two, reuses that outlast every watch). Only with at least
/// [`STEADY_EFFECTIVE`] effective samples: on fewer, the replicates draw the same few heavy
/// uses again and look steadier than the run is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub replicates: usize,
    /// Over RDX's bins: the time and the stack histograms.
    pub time_s: f64,
    pub stack_s: f64,
    /// Over mgbench's bins.
    pub fine_time_s: f64,
    pub fine_stack_s: f64,
}

/// RDX's accuracy S and S^ against the exact histogram.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    pub s: f64,
    pub s_hat: f64,
}

/// Accuracy of the three comparisons over one set of bins.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Accuracies {
    /// RDX's sampled time histogram against the exact one.
    pub time: Accuracy,
    /// RDX's converted stack histogram against the exact one (end to end).
    pub stack: Accuracy,
    /// The exact time histogram converted, against the exact stack one (the model alone).
    pub conversion: Accuracy,
}

/// The histograms at one granularity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GranularityReport {
    pub granularity: Granularity,
    /// Samples taken, dropped (every register busy and not replaced), registers that trapped.
    pub samples: u64,
    pub dropped: u64,
    pub traps: u64,
    /// Reuses the traps stand for (sum of attribution weights), and uses with no reuse.
    pub attributed_reuses: f64,
    pub no_reuse: f64,
    /// Distinct locations: RDX's estimate (uses without reuse x accesses) and the exact count.
    pub distinct_estimate: f64,
    pub distinct_exact: Option<u64>,
    /// Phases the run was cut into for the conversion (each with its own reuse times; the
    /// most over threads); 1: the whole run as one, Shen et al.'s model.
    #[serde(default = "one")]
    pub phases: usize,
    /// The same for the exact times (the model alone), with the exact pass.
    #[serde(default)]
    pub exact_phases: Option<usize>,
    /// Where several threads were converted as one phase each: the groups of threads with
    /// alike reuse times they were pooled in (1: all together); None with one thread or
    /// where threads were converted phase by phase.
    #[serde(default)]
    pub thread_groups: Option<usize>,
    /// The sampled uses' effective number, `(sum w)^2 / sum w^2` over their weights: the
    /// samples the histograms rest on (all of them when every weight is equal; a handful
    /// when a few long-watched samples stand for most of the reuses).
    /// (Absent from reports written before it was added.)
    #[serde(default)]
    pub effective_samples: Option<f64>,
    /// The same over the uses without reuse alone: what `distinct_estimate` rests on (a
    /// handful makes it rough; 0: it is the floor W(D_max)). (Absent from reports written
    /// before it was added.)
    #[serde(default)]
    pub no_reuse_effective: Option<f64>,
    /// RDX's 20 bins ([0, 4K), [4K, 8K), ..., [1G, infinity)).
    pub rdx_bins: Vec<Bin>,
    /// mgbench's bins: 0, [1, 2), [2, 4), ... [2^31, infinity).
    pub fine_bins: Vec<Bin>,
    pub accuracy_rdx_bins: Option<Accuracies>,
    pub accuracy_fine_bins: Option<Accuracies>,
    /// The samples' spread (absent under [`STEADY_EFFECTIVE`] effective samples, and from
    /// reports written before it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
}

fn one() -> usize {
    1
}

/// One pair of instructions: a use sampled at `use_ip` and reused at `reuse_ip`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstructionPair {
    pub use_ip: String,
    pub use_source: String,
    /// None: uses that saw no reuse before the end (`mean_time` null), or, in a live run,
    /// reuses whose instruction is not known (the watchpoint reports QEMU's code).
    pub reuse_ip: Option<String>,
    pub reuse_source: Option<String>,
    pub traps: u64,
    /// Reuses they stand for.
    pub weight: f64,
    pub mean_time: Option<f64>,
}

/// What `mgbench reuse --rdx` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReuseReport {
    /// The trace, or for a live run the command line.
    pub trace: String,
    /// Measured while the program ran (`mgbench reuse -- PROGRAM`), not from a trace.
    #[serde(default)]
    pub live: bool,
    pub program: Option<String>,
    pub accesses: u64,
    pub threads: usize,
    pub config: RdxConfig,
    pub words: GranularityReport,
    /// Cache lines: simulated from a trace; absent from live runs (x86 watchpoints cover at
    /// most 8 bytes).
    pub lines: Option<GranularityReport>,
    pub pairs: Vec<InstructionPair>,
    pub notes: Vec<String>,
    /// A live run's adaptive period (the default there): `config.period` is its first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive_period: Option<AdaptivePeriod>,
    /// A live run under QEMU: pages of the program's large new anonymous memory that a
    /// helper thread touched first, so that the kernel cleared them away from the armed
    /// debug registers (`--no-prefault` turns it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefaulted_pages: Option<u64>,
}

/// The periods a live run's samples were drawn from, where the period adapted to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptivePeriod {
    pub min: u64,
    pub max: u64,
    /// Blocks QEMU translated again over the run (after the switches samples make).
    pub retranslated_blocks: Option<u64>,
}

/// Per granularity and thread: the sampler, its pairs by when their use was, the thread's
/// accesses, and the exact engine.
struct Track {
    sampler: Sampler,
    timeline: Timeline,
    len: u64,
    exact: Option<Exact>,
}

impl Track {
    fn new(sampler: Sampler, exact: Option<Exact>) -> Track {
        Track {
            sampler,
            timeline: Timeline::default(),
            len: 0,
            exact,
        }
    }

    /// One chunk of the thread's accesses, in order: to the sampler (its pairs to `on_pair`)
    /// and to the exact pass.
    fn feed(&mut self, accesses: &[Access], on_pair: &mut impl FnMut(Pair)) {
        self.sampler
            .access_all(accesses, &mut kept(&mut self.timeline, on_pair));
        self.len = self.sampler.accesses();
        if let Some(e) = &mut self.exact {
            for a in accesses {
                e.access(a.addr);
            }
        }
    }

    /// The end of the thread: the registers still armed are uses without reuse.
    fn finish(&mut self, on_pair: &mut impl FnMut(Pair)) {
        self.sampler.finish(&mut kept(&mut self.timeline, on_pair));
    }
}

/// `on_pair`, with each pair kept in `timeline` too.
fn kept<'a>(
    timeline: &'a mut Timeline,
    on_pair: &'a mut impl FnMut(Pair),
) -> impl FnMut(Pair) + 'a {
    move |p| {
        timeline.add_pair(&p);
        on_pair(p)
    }
}

/// How several threads' reuse times are converted ([`plan`]).
enum Plan {
    /// Each thread over its own run, phase by phase ([`convert_phased`]).
    Phased,
    /// Groups of threads whose reuse times are alike, each group's histogram as one phase.
    Groups(Vec<Histogram>),
}

/// Where some thread has phases (or there is one thread), each is converted over its own
/// run, phase by phase. Where none has, a thread's few samples alone, its handful of uses
/// without reuse above all, give a less steady `W` than all of them (measured on a 3-thread
/// SpMV: stack S 0.60-0.93 over seeds per thread, 0.87-0.93 together), but threads that
/// behave differently (a main thread that fills the data alone, workers that walk it) bias
/// each other's `W` when pooled: so the threads are pooled in groups that the
/// Kolmogorov-Smirnov test ([`parting`]) cannot tell apart. Heaviest thread first, each joins
/// the group it parts least from, where the test finds no difference, or starts its own;
/// threads with no uses are left out.
fn plan(runs: &[(&Timeline, u64, f64)]) -> Plan {
    if runs.len() <= 1 || runs.iter().any(|r| r.0.phases(r.1) > 1) {
        return Plan::Phased;
    }
    let mut order: Vec<(Histogram, (f64, f64))> = runs
        .iter()
        .map(|r| (r.0.histogram(), r.0.weights()))
        .filter(|(_, w)| w.0 > 0.0)
        .collect();
    order.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    let mut groups: Vec<(Histogram, (f64, f64))> = Vec::new();
    for (h, w) in order {
        let m = effective(&[w]);
        let closest = groups
            .iter()
            .map(|g| parting(&g.0, effective(&[g.1]), &h, m))
            .enumerate()
            .filter(|(_, p)| *p <= 1.0)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match closest {
            Some((k, _)) => {
                let g = &mut groups[k];
                g.0.merge(&h);
                g.1 = (g.1 .0 + w.0, g.1 .1 + w.1);
            }
            None => groups.push((h, w)),
        }
    }
    Plan::Groups(groups.into_iter().map(|g| g.0).collect())
}

/// The stack-distance fractions over `bins` of several threads' reuse times (`all`: their
/// histograms added up), as `plan` says: each part converted alone and weighted by its share
/// of the reuses.
fn convert_threads(
    runs: &[(&Timeline, u64, f64)],
    plan: &Plan,
    all: &Histogram,
    bins: &[(f64, f64)],
) -> Vec<f64> {
    let parts: Vec<(Vec<f64>, f64)> = match plan {
        Plan::Groups(groups) if groups.len() <= 1 => return convert(all, bins),
        Plan::Groups(groups) => groups
            .iter()
            .map(|g| (convert(g, bins), g.finite()))
            .collect(),
        Plan::Phased => runs
            .iter()
            .map(|&(tl, len, finite)| (convert_phased(tl, len, bins), finite))
            .collect(),
    };
    let total: f64 = parts.iter().map(|p| p.1).sum();
    let mut out = vec![0.0; bins.len()];
    for (fractions, finite) in parts {
        if finite <= 0.0 || total <= 0.0 {
            continue;
        }
        for (o, x) in out.iter_mut().zip(fractions) {
            *o += x * finite / total;
        }
    }
    out
}

/// Bootstrap replicates behind [`Spread`] and each bin's range.
const REPLICATES: usize = 100;
/// The quantiles of the replicates a bin's range spans.
const RANGE: (f64, f64) = (0.1, 0.9);

/// A replicate's time and stack fractions.
type Replicate = (Vec<f64>, Vec<f64>);

/// A Poisson(1) draw: a use's copies in a bootstrap replicate.
fn poisson1(rng: &mut Rng) -> u32 {
    let u = rng.unit();
    let mut p = (-1f64).exp();
    let (mut k, mut cdf) = (0u32, p);
    while u > cdf && k < 24 {
        k += 1;
        p /= f64::from(k);
        cdf += p;
    }
    k
}

/// Bootstrap replicates of the sampled histograms over [`fine_bins`]: each thread's uses
/// drawn again ([`Timeline::resampler`]) and converted as the run's are ([`plan`],
/// [`convert_threads`]). Per replicate: the time and the stack fractions.
fn replicates(tracks: &[Track], seed: u64) -> Vec<Replicate> {
    let bins = fine_bins();
    let mut rng = Rng::new(seed ^ 0xb007_57a9);
    let resamplers: Vec<_> = tracks.iter().map(|t| t.timeline.resampler()).collect();
    let mut drawn: Vec<Timeline> = tracks.iter().map(|_| Timeline::default()).collect();
    (0..REPLICATES)
        .map(|_| {
            let mut all = Histogram::default();
            for (r, d) in resamplers.iter().zip(&mut drawn) {
                r.draw(d, || poisson1(&mut rng));
                all.merge(&d.histogram());
            }
            let runs: Vec<(&Timeline, u64, f64)> = drawn
                .iter()
                .zip(tracks)
                .map(|(d, t)| (d, t.len, d.finite()))
                .collect();
            let how = plan(&runs);
            (
                all.fractions(&bins),
                convert_threads(&runs, &how, &all, &bins),
            )
        })
        .collect()
}

/// Per bin of [`fine_bins`], the bin of `bins` that holds it (their edges are edges of the
/// fine bins).
fn folding(bins: &[(f64, f64)]) -> Vec<Option<usize>> {
    fine_bins()
        .iter()
        .map(|&(lo, _)| bins.iter().position(|&(a, b)| a <= lo && lo < b))
        .collect()
}

/// Fractions over [`fine_bins`] added up over `n` bins as `folding` maps them.
fn fold(fine: &[f64], folding: &[Option<usize>], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n];
    for (i, x) in folding.iter().zip(fine) {
        if let Some(i) = i {
            out[*i] += x;
        }
    }
    out
}

/// The `q` quantile of `v` (sorted in place).
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// The replicates over one set of bins.
struct BinSpread {
    /// Per bin: the range of the time and of the stack fractions.
    time: Vec<[f64; 2]>,
    stack: Vec<[f64; 2]>,
    /// The median S of the replicates against the run, time and stack.
    time_s: f64,
    stack_s: f64,
}

/// Over `bins`, the replicates (`reps`, over fine bins) against the run's `time` and `stack`
/// fractions (None without replicates).
fn spread_over(
    reps: &[Replicate],
    bins: &[(f64, f64)],
    time: &[f64],
    stack: &[f64],
) -> Option<BinSpread> {
    if reps.is_empty() {
        return None;
    }
    let (map, n) = (folding(bins), bins.len());
    let folded: Vec<Replicate> = reps
        .iter()
        .map(|(t, s)| (fold(t, &map, n), fold(s, &map, n)))
        .collect();
    let range = |pick: &dyn Fn(&Replicate) -> f64| {
        let mut v: Vec<f64> = folded.iter().map(pick).collect();
        [quantile(&mut v, RANGE.0), quantile(&mut v, RANGE.1)]
    };
    let mut ts: Vec<f64> = folded.iter().map(|r| accuracy(time, &r.0).0).collect();
    let mut ss: Vec<f64> = folded.iter().map(|r| accuracy(stack, &r.1).0).collect();
    Some(BinSpread {
        time: (0..n).map(|i| range(&|r| r.0[i])).collect(),
        stack: (0..n).map(|i| range(&|r| r.1[i])).collect(),
        time_s: quantile(&mut ts, 0.5),
        stack_s: quantile(&mut ss, 0.5),
    })
}

#[derive(Default)]
struct PairStats {
    traps: u64,
    weight: f64,
    time_sum: f64,
}

/// The `top` instruction pairs by the reuses they stand for.
fn top_pairs<K>(pairs: HashMap<K, PairStats, fasthash::Build>, top: usize) -> Vec<(K, PairStats)> {
    let mut list: Vec<(K, PairStats)> = pairs.into_iter().collect();
    list.sort_by(|a, b| b.1.weight.total_cmp(&a.1.weight));
    list.truncate(top);
    list
}

/// What a scoped thread returned; its panic goes on where it was joined.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn bins_of(
    bins: &[(f64, f64)],
    time: &[f64],
    stack: &[f64],
    exact: Option<(&[f64], &[f64], &[f64])>,
) -> Vec<Bin> {
    bins.iter()
        .enumerate()
        .map(|(i, &(lo, hi))| Bin {
            label: bin_label(lo, hi),
            lo,
            hi: hi.is_finite().then_some(hi),
            time: time[i],
            stack: stack[i],
            exact_time: exact.map(|e| e.0[i]),
            exact_stack: exact.map(|e| e.1[i]),
            converted_exact_time: exact.map(|e| e.2[i]),
            time_range: None,
            stack_range: None,
        })
        .collect()
}

fn acc(a: (f64, f64)) -> Accuracy {
    Accuracy { s: a.0, s_hat: a.1 }
}

fn granularity_report(
    g: Granularity,
    tracks: &mut [Track],
    time: &Histogram,
    accesses: u64,
    seed: u64,
) -> GranularityReport {
    let (mut samples, mut dropped, mut traps) = (0, 0, 0);
    for t in tracks.iter() {
        samples += t.sampler.samples;
        dropped += t.sampler.dropped;
        traps += t.sampler.traps;
    }
    let distinct_estimate = estimate_distinct(time, accesses);
    let mut exact_time = Histogram::default();
    let mut exact_stack = Histogram::default();
    let mut distinct_exact = None;
    for t in tracks.iter_mut() {
        if let Some(e) = &mut t.exact {
            e.finish();
            exact_time.merge(&e.time);
            exact_stack.merge(&e.distance);
            *distinct_exact.get_or_insert(0) += e.distinct();
        }
    }
    // Per thread: its pairs, its accesses and its reuses (sampled, then exact).
    let sampled: Vec<(&Timeline, u64, f64)> = tracks
        .iter()
        .map(|t| (&t.timeline, t.len, t.timeline.finite()))
        .collect();
    let exact_runs: Vec<(&Timeline, u64, f64)> = tracks
        .iter()
        .filter_map(|t| t.exact.as_ref())
        .map(|e| (&e.timeline, e.accesses(), e.timeline.finite()))
        .collect();
    let phases = tracks
        .iter()
        .map(|t| t.timeline.phases(t.len))
        .max()
        .unwrap_or(1);
    let exact_phases = tracks
        .iter()
        .filter_map(|t| t.exact.as_ref())
        .map(|e| e.timeline.phases(e.accesses()))
        .max();
    let weights: Vec<(f64, f64)> = tracks.iter().map(|t| t.timeline.weights()).collect();
    let effective_samples = effective(&weights);
    let last_uses: Vec<(f64, f64)> = tracks
        .iter()
        .map(|t| t.timeline.no_reuse_weights())
        .collect();
    let no_reuse_effective = effective(&last_uses);
    let (sampled_plan, exact_plan) = (plan(&sampled), plan(&exact_runs));
    // On fewer effective samples the replicates draw the same few heavy uses again and
    // look steadier than the run is (measured, README: RDX, "The samples' own spread").
    let reps = if effective_samples >= STEADY_EFFECTIVE {
        replicates(tracks, seed ^ g.bytes())
    } else {
        Vec::new()
    };
    let per = |bins: &[(f64, f64)]| {
        let t = time.fractions(bins);
        let s = convert_threads(&sampled, &sampled_plan, time, bins);
        let spread = spread_over(&reps, bins, &t, &s);
        let exact = distinct_exact.is_some().then(|| {
            (
                exact_time.fractions(bins),
                exact_stack.fractions(bins),
                convert_threads(&exact_runs, &exact_plan, &exact_time, bins),
            )
        });
        let accs = exact.as_ref().map(|(et, es, ec)| Accuracies {
            time: acc(accuracy(et, &t)),
            stack: acc(accuracy(es, &s)),
            conversion: acc(accuracy(es, ec)),
        });
        let mut list = bins_of(
            bins,
            &t,
            &s,
            exact
                .as_ref()
                .map(|(a, b, c)| (a.as_slice(), b.as_slice(), c.as_slice())),
        );
        let spread_s = spread.map(|sp| {
            for ((b, tr), sr) in list.iter_mut().zip(sp.time).zip(sp.stack) {
                (b.time_range, b.stack_range) = (Some(tr), Some(sr));
            }
            (sp.time_s, sp.stack_s)
        });
        (list, accs, spread_s)
    };
    let (rdx, acc_rdx, spread_rdx) = per(&rdx_bins());
    let (fine, acc_fine, spread_fine) = per(&fine_bins());
    let spread = spread_rdx.zip(spread_fine).map(|(r, f)| Spread {
        replicates: REPLICATES,
        time_s: r.0,
        stack_s: r.1,
        fine_time_s: f.0,
        fine_stack_s: f.1,
    });
    GranularityReport {
        granularity: g,
        samples,
        dropped,
        traps,
        attributed_reuses: time.finite(),
        no_reuse: time.infinite,
        distinct_estimate,
        distinct_exact,
        phases,
        exact_phases,
        thread_groups: match &sampled_plan {
            Plan::Groups(g) => Some(g.len()),
            Plan::Phased => None,
        },
        effective_samples: Some(effective_samples),
        no_reuse_effective: Some(no_reuse_effective),
        rdx_bins: rdx,
        fine_bins: fine,
        accuracy_rdx_bins: acc_rdx,
        accuracy_fine_bins: acc_fine,
        spread,
    }
}

/// The note for a run with too few samples for a steady histogram.
fn few_samples(samples: u64) -> Option<String> {
    match samples {
        0 => Some("no sample was taken: the run ended before its first sample point (about one --period in; each gap is drawn from period x [1 - jitter, 1 + jitter]): lower --period".into()),
        1..100 => Some(format!(
            "only {samples} samples: lower --period for a steadier histogram"
        )),
        _ => None,
    }
}

/// Blocks translated per sample above which the live report says what sampling costs. Here
/// (scripts/bench-rdx-live.py): the demo kernels translate 13-101 blocks per sample and pay
/// under 1.5 ms per sample; Debian's gzip 175-306 and 3.3-5.6 ms.
const COSTLY_BLOCKS_PER_SAMPLE: f64 = 150.0;

/// The note for a live run whose samples each made QEMU translate many blocks again.
fn retranslation(blocks: u64, samples: u64) -> Option<String> {
    let per = blocks as f64 / samples.max(1) as f64;
    (samples > 0 && per >= COSTLY_BLOCKS_PER_SAMPLE).then(|| {
        format!(
            "live: QEMU translated {blocks} blocks, about {per:.0} per sample: each sample switches QEMU's instrumentation and back, and the program's hot code was translated again (gzip: about 300 blocks and 4 ms per sample where each switch flushes QEMU's translations, as on QEMU other than 7.2, or new code each time, as JIT-compiled code); if the run was much slower than expected, a longer --period cuts that cost"
        )
    })
}

/// The note of a live run whose period adapted: what it did and what it cost.
fn adaptive_note(a: &AdaptivePeriod, samples: u64, effective: Option<f64>) -> String {
    let blocks = match a.retranslated_blocks {
        Some(b) if samples > 0 => {
            // "about 0 per sample" beside 80 blocks read as a contradiction.
            let per = b as f64 / samples as f64;
            let per = if per >= 1.0 || b == 0 {
                format!("{per:.0}")
            } else {
                format!("{per:.2}")
            };
            format!("; QEMU translated {b} blocks again, about {per} per sample")
        }
        _ => String::new(),
    };
    let thin = if effective.is_some_and(|e| e < STEADY_EFFECTIVE) {
        format!(
            "; the long periods' few samples carry most of the weight: a fixed --period (e.g. {}) takes more of them, at more cost",
            (a.max / 16).max(1)
        )
    } else {
        String::new()
    };
    format!(
        "live: adaptive period, {} to {} accesses over {samples} samples (dense at first, so that short runs get samples, then doubling, and longer where each sample made QEMU translate much code again{blocks}); each sample stands for its period's accesses; --period P fixes it{thin}",
        a.min, a.max
    )
}

/// Effective samples below which a histogram changes much from seed to seed (over 5 seeds of
/// scripts/rdx-accuracy.py, words: hotcold at 4-5 effective samples ranged over stack S
/// 0.06-0.90, rowcol at 8-13 over 0.66-0.94; from 28 on, spmv 0.76-0.90, reuse_loops
/// 0.96-1.00).
pub const STEADY_EFFECTIVE: f64 = 25.0;

/// The note for a granularity whose weights leave few effective samples: a few samples
/// watched for long stand for most of the reuses.
fn thin_samples(g: &GranularityReport) -> Option<String> {
    let effective = g.effective_samples?;
    (g.samples >= 100 && effective < STEADY_EFFECTIVE).then(|| {
        format!(
            "{}: the histograms rest on about {:.0} effective samples of {} (a few samples watched for long stand for most of the reuses): the long-distance bins can change much with --seed, and the samples' own spread would look steadier than the run is, so no range is given; a run that repeats its long reuses more often (more iterations, a longer input) steadies them",
            g.granularity.unit(),
            effective,
            g.samples
        )
    })
}

/// Runs RDX over the full trace at `path`.
pub fn reuse(path: &Path, cfg: &ReuseConfig) -> Result<ReuseReport, SynthError> {
    cfg.rdx.validate().map_err(SynthError::Invalid)?;
    let p = path.display().to_string();
    let reader = crate::open(path, &cfg.progress, "RDX sampling")?;
    let meta = reader.meta().clone();
    if !matches!(meta.mode, Mode::Full) {
        return Err(SynthError::Invalid(format!(
            "{p} is a {} trace: RDX needs every access to know how far apart a use and its reuse are; capture with --full (or run RDX live: mgbench reuse -- PROGRAM)",
            meta.mode.name()
        )));
    }
    let mut words: HashMap<u32, Track, fasthash::Build> = HashMap::default();
    let mut lines: HashMap<u32, Track, fasthash::Build> = HashMap::default();
    let mut word_time = Histogram::default();
    let mut line_time = Histogram::default();
    let mut pairs: HashMap<(u64, Option<u64>), PairStats, fasthash::Build> = HashMap::default();
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut accesses = 0u64;
    let new_track = |g: Granularity, thread: u32| {
        Track::new(
            Sampler::new(
                RdxConfig {
                    granularity: g,
                    ..cfg.rdx
                },
                cfg.rdx.seed ^ (u64::from(thread) << 32) ^ g.bytes(),
            ),
            cfg.exact.then(|| Exact::new(g)),
        )
    };
    // A word pair is tallied by its instruction pair too; uses left armed at the end come
    // back from `finish` as pairs without reuse (time None: infinite).
    let mut on_word = |pr: Pair| {
        word_time.add(pr.time, pr.weight);
        let st = pairs.entry((pr.use_ip, pr.reuse_ip)).or_default();
        st.traps += 1;
        st.weight += pr.weight;
        st.time_sum += pr.time.unwrap_or(0) as f64 * pr.weight;
    };
    let mut on_line = |pr: Pair| line_time.add(pr.time, pr.weight);
    let mut jit = Vec::new();
    let damage = crate::read_frames(reader, path, cfg.threads, |frame| match frame {
        Frame::Mappings(m) => mappings.extend(m.iter().cloned()),
        Frame::JitSymbols(j) => jit.extend(j.iter().cloned()),
        Frame::Chunk(c) => {
            let w = words
                .entry(c.thread)
                .or_insert_with(|| new_track(Granularity::Word, c.thread));
            w.feed(&c.accesses, &mut on_word);
            let l = lines
                .entry(c.thread)
                .or_insert_with(|| new_track(Granularity::Line, c.thread));
            l.feed(&c.accesses, &mut on_line);
            accesses += c.accesses.len() as u64;
        }
        _ => {}
    })?;
    crate::check_read(
        &p,
        damage.as_ref(),
        cfg.allow_damaged,
        accesses,
        &meta,
        None,
    )?;
    let threads = words.len();
    let mut word_tracks: Vec<Track> = words.into_values().collect();
    let mut line_tracks: Vec<Track> = lines.into_values().collect();
    for t in &mut word_tracks {
        t.finish(&mut on_word);
    }
    for t in &mut line_tracks {
        t.finish(&mut on_line);
    }
    let mut notes = Vec::new();
    if damage.is_some() {
        notes.push("the trace is damaged: only the accesses before the damage were used".into());
    }
    if threads > 1 {
        notes.push(format!(
            "{threads} threads: each is sampled with its own registers and access counter, as per-thread hardware would; the histograms add them up"
        ));
    }
    notes
        .push("line granularity is a simulation: x86 debug registers watch at most 8 bytes".into());
    // The two granularities' conversions and the naming of the instruction pairs (which may
    // inflate a library's debug information: libc's takes ~45 ms) are independent.
    let seed = cfg.rdx.seed;
    let (words_report, lines_report, pairs) = std::thread::scope(|s| {
        let words = s.spawn(|| {
            granularity_report(
                Granularity::Word,
                &mut word_tracks,
                &word_time,
                accesses,
                seed,
            )
        });
        let lines = s.spawn(|| {
            granularity_report(
                Granularity::Line,
                &mut line_tracks,
                &line_time,
                accesses,
                seed,
            )
        });
        let mut sym = Symbolizer::new(mappings);
        sym.add_jit_symbols(&jit);
        let pairs = top_pairs(pairs, cfg.top_pairs)
            .into_iter()
            .map(|((u, r), st)| InstructionPair {
                use_ip: format!("{u:#x}"),
                use_source: sym.resolve(u).describe_instruction(),
                reuse_ip: r.map(|r| format!("{r:#x}")),
                reuse_source: r.map(|r| sym.resolve(r).describe_instruction()),
                traps: st.traps,
                weight: st.weight,
                mean_time: r.map(|_| st.time_sum / st.weight.max(1e-300)),
            })
            .collect();
        (joined(words), joined(lines), pairs)
    });
    notes.extend(few_samples(words_report.samples));
    notes.extend(thin_samples(&words_report));
    notes.extend(thin_samples(&lines_report));
    Ok(ReuseReport {
        trace: p,
        live: false,
        program: meta.command.first().cloned(),
        accesses,
        threads,
        config: cfg.rdx,
        words: words_report,
        lines: Some(lines_report),
        pairs,
        notes,
        adaptive_period: None,
        prefaulted_pages: None,
    })
}

/// A thread of a live run, while its events are read.
struct LiveThread {
    sampler: Sampler,
    timeline: Timeline,
    /// The latest time its events name.
    last: u64,
    /// Its accesses at its end (`E`), when it ended under QEMU.
    end: Option<u64>,
}

impl LiveThread {
    /// A thread sampled as the header (`H`: the configuration and seed) says.
    fn new((cfg, seed): (RdxConfig, u64)) -> LiveThread {
        LiveThread {
            sampler: Sampler::new(cfg, seed),
            timeline: Timeline::default(),
            last: 0,
            end: None,
        }
    }
}

/// Reads the events file of a live run (`mgbench reuse -- PROGRAM`; see the QEMU plugin's
/// `rdx` module) and builds the report: the samples with the registers the plugin's reservoir
/// chose and the traps go through the same bookkeeping as a trace-driven run, one sampler per
/// thread. `command` is the program's command line; `symbols`, where given, names the
/// instructions (its files loaded while the program ran, see [`Preloaded`]).
///
/// Lines (times are the thread's own access counts; a missing thread number is 0):
/// `H period jitter watchpoints seed [adaptive]`, `S ip addr time register|- period thread`,
/// `T register time thread`, `E time thread` (the thread's end), `X time thread path` (an
/// execve), `C children` (the child processes started so far), `M` (a /proc/self/maps line),
/// `B blocks` (retranslated), `P pages` (populated ahead of the program), `N note`, `J start
/// size name` (a line of the runtime's perf map: names of JIT-compiled code, hex as there).
pub fn reuse_live(
    events: &Path,
    command: &str,
    cfg: &ReuseConfig,
    symbols: Option<Preloaded>,
) -> Result<ReuseReport, SynthError> {
    let p = events.display().to_string();
    let text = std::fs::read_to_string(events).map_err(|cause| SynthError::Open {
        path: p.clone(),
        cause,
    })?;
    let bad = |n: usize, line: &str| {
        SynthError::Invalid(format!(
            "{p}, line {}: cannot read live RDX event {line:?}",
            n + 1
        ))
    };
    let mut rdx = RdxConfig {
        granularity: Granularity::Word,
        ..cfg.rdx
    };
    let mut header: Option<(RdxConfig, u64)> = None;
    // Per thread (its number in the events): its track and the last time it was seen at.
    let mut threads: std::collections::BTreeMap<u32, LiveThread> = Default::default();
    let mut time = Histogram::default();
    let mut pairs: HashMap<(u64, bool), PairStats, fasthash::Build> = HashMap::default();
    let mut on_pair = |pr: Pair, timeline: &mut Timeline| {
        time.add(pr.time, pr.weight);
        timeline.add_pair(&pr);
        let st = pairs.entry((pr.use_ip, pr.time.is_some())).or_default();
        st.traps += 1;
        st.weight += pr.weight;
        st.time_sum += pr.time.unwrap_or(0) as f64 * pr.weight;
    };
    let mut maps = String::new();
    let mut jit = String::new();
    let mut notes = Vec::new();
    let mut blocks = None;
    let mut prefaulted: Option<u64> = None;
    let mut adaptive = false;
    let mut periods: Option<(u64, u64)> = None;
    let mut exec: Option<(u64, String)> = None;
    let mut children = 0u64;
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
    // A thread's number: the field at `i`, 0 when absent (one-thread runs).
    let thread_at = |f: &[&str], i: usize| f.get(i).map_or(Some(0), |v| v.parse::<u32>().ok());
    for (n, line) in text.lines().enumerate() {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        let f: Vec<&str> = rest.split_whitespace().collect();
        match kind {
            "H" => {
                let (Some(period), Some(jitter), Some(watch), Some(seed)) = (
                    f.first().and_then(|v| v.parse().ok()),
                    f.get(1).and_then(|v| v.parse().ok()),
                    f.get(2).and_then(|v| v.parse().ok()),
                    f.get(3).and_then(|v| v.parse().ok()),
                ) else {
                    return Err(bad(n, line));
                };
                rdx.period = period;
                rdx.jitter = jitter;
                rdx.watchpoints = watch;
                rdx.seed = seed;
                adaptive = f.get(4) == Some(&"adaptive");
                header = Some((rdx, seed));
            }
            "S" => {
                let (Some(first), Some(ip), Some(addr), Some(now), Some(thread)) = (
                    header.as_ref(),
                    f.first().and_then(|v| hex(v)),
                    f.get(1).and_then(|v| hex(v)),
                    f.get(2).and_then(|v| v.parse::<u64>().ok()),
                    thread_at(&f, 5),
                ) else {
                    return Err(bad(n, line));
                };
                let register = match f.get(3) {
                    Some(&"-") => None,
                    Some(k) => Some(k.parse::<usize>().map_err(|_| bad(n, line))?),
                    None => return Err(bad(n, line)),
                };
                // The mean gap this sample was drawn from (an adaptive run's own; else the
                // header's).
                let period = match f.get(4) {
                    Some(v) => v
                        .parse::<u64>()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| bad(n, line))?,
                    None => rdx.period,
                };
                periods = Some(periods.map_or((period, period), |(lo, hi): (u64, u64)| {
                    (lo.min(period), hi.max(period))
                }));
                let t = threads
                    .entry(thread)
                    .or_insert_with(|| LiveThread::new(*first));
                t.sampler.sample_placed(ip, addr, now, register, period);
                t.last = t.last.max(now);
            }
            "T" => {
                let (Some(k), Some(now), Some(thread)) = (
                    f.first().and_then(|v| v.parse::<usize>().ok()),
                    f.get(1).and_then(|v| v.parse::<u64>().ok()),
                    thread_at(&f, 2),
                ) else {
                    return Err(bad(n, line));
                };
                // A trap without its thread's sample before it cannot be placed.
                let Some(t) = threads.get_mut(&thread) else {
                    return Err(bad(n, line));
                };
                let timeline = &mut t.timeline;
                t.sampler.trap(k, now, &mut |pr| on_pair(pr, timeline));
                t.last = t.last.max(now);
            }
            "M" => {
                maps.push_str(rest);
                maps.push('\n');
            }
            "J" => {
                jit.push_str(rest);
                jit.push('\n');
            }
            "N" => notes.push(rest.to_string()),
            "C" => {
                let c = f.first().and_then(|v| v.parse::<u64>().ok());
                children = children.max(c.ok_or_else(|| bad(n, line))?);
            }
            "B" => blocks = f.first().and_then(|v| v.parse::<u64>().ok()),
            "P" => {
                let pages = f.first().and_then(|v| v.parse::<u64>().ok());
                prefaulted = Some(prefaulted.max(pages).ok_or_else(|| bad(n, line))?);
            }
            "E" => {
                let (Some(first), Some(now), Some(thread)) = (
                    header.as_ref(),
                    f.first().and_then(|v| v.parse::<u64>().ok()),
                    thread_at(&f, 1),
                ) else {
                    return Err(bad(n, line));
                };
                let t = threads
                    .entry(thread)
                    .or_insert_with(|| LiveThread::new(*first));
                t.end = Some(now);
            }
            // An execve: the run leaves QEMU there if no exit (`E`) follows.
            "X" => {
                let mut parts = rest.splitn(3, ' ');
                let now = parts.next().and_then(|v| v.parse::<u64>().ok());
                let thread = parts.next().and_then(|v| v.parse::<u32>().ok());
                let (Some(now), Some(thread), Some(path)) = (now, thread, parts.next()) else {
                    return Err(bad(n, line));
                };
                if let Some(t) = threads.get_mut(&thread) {
                    t.last = t.last.max(now);
                }
                exec = Some((now, path.to_string()));
            }
            _ => return Err(bad(n, line)),
        }
    }
    let Some(first) = header else {
        return Err(SynthError::Invalid(format!(
            "{p} holds no live RDX run (QEMU did not start the plugin?)"
        )));
    };
    if threads.is_empty() {
        threads.insert(0, LiveThread::new(first));
    }
    let unended = threads.values().any(|t| t.end.is_none());
    let mut tracks = Vec::with_capacity(threads.len());
    for (_, mut t) in threads {
        let timeline = &mut t.timeline;
        let end = t.end.unwrap_or(t.last);
        t.sampler.finish_at(end, &mut |pr| on_pair(pr, timeline));
        tracks.push(Track {
            sampler: t.sampler,
            timeline: t.timeline,
            len: end,
            exact: None,
        });
    }
    let accesses: u64 = tracks.iter().map(|t| t.len).sum();
    if unended {
        notes.push(match &exec {
            Some((at, path)) => format!(
                "the program replaced itself with {path} (execve) at access {at}: QEMU user mode runs the new program natively, so the histograms cover the accesses before it (to measure that program: mgbench reuse -- {path} ...)"
            ),
            None => format!(
                "the program did not exit normally: the histograms cover its first {accesses} accesses"
            ),
        });
    }
    if children > 0 {
        notes.push(format!(
            "the program started {children} child process(es) (fork): QEMU runs each in a copy of itself whose accesses are not measured here; to measure a child's work, run its program on its own (mgbench reuse -- PROGRAM)"
        ));
    }
    let nthreads = tracks.len();
    if nthreads > 1 {
        notes.push(format!(
            "{nthreads} threads: each was sampled with its own access count, period and registers, as per-thread hardware would (a reuse is the same thread's next touch); the histograms add them up; between samples each thread counts inline with a counter of its own where QEMU switches instrumentation in place (QEMU 7.2, up to 31 threads at once; the others count in callbacks), and elsewhere every thread counts in callbacks, at about what an empty memory callback costs"
        ));
    }
    // The conversion and the naming of the instruction pairs (which may inflate a library's
    // debug information: libc's takes ~45 ms) are independent.
    let (words, pairs) = std::thread::scope(|s| {
        let words = s.spawn(|| {
            granularity_report(Granularity::Word, &mut tracks, &time, accesses, rdx.seed)
        });
        let top = top_pairs(pairs, cfg.top_pairs);
        let mappings = Mapping::parse_proc_maps(&maps);
        let jit = JitSymbol::parse_perf_map(&jit);
        let ips: Vec<u64> = top.iter().map(|&((u, _), _)| u).collect();
        let sources = match symbols {
            Some(preloaded) => preloaded.resolve(mappings, jit, ips),
            None => Symbolizer::resolve_all(mappings, &jit, &ips),
        };
        let pairs = top
            .into_iter()
            .zip(sources)
            .map(|(((u, reused), st), source)| InstructionPair {
                use_ip: format!("{u:#x}"),
                use_source: source.describe_instruction(),
                reuse_ip: None,
                reuse_source: None,
                traps: st.traps,
                weight: st.weight,
                mean_time: reused.then(|| st.time_sum / st.weight.max(1e-300)),
            })
            .collect::<Vec<_>>();
        (joined(words), pairs)
    });
    notes.extend(few_samples(words.samples));
    notes.extend(thin_samples(&words));
    let adaptive_period = adaptive.then(|| {
        let (min, max) = periods.unwrap_or((rdx.period, rdx.period));
        AdaptivePeriod {
            min,
            max,
            retranslated_blocks: blocks,
        }
    });
    match adaptive_period {
        Some(a) => notes.push(adaptive_note(&a, words.samples, words.effective_samples)),
        None => notes.extend(blocks.and_then(|b| retranslation(b, words.samples))),
    }
    notes.push(
        "live: the reusing instruction is not recorded (under QEMU the watchpoint fires in generated code); cache lines need a trace (mgbench reuse --rdx)".into(),
    );
    notes.extend(prefaulted.map(prefault_note));
    Ok(ReuseReport {
        trace: command.to_string(),
        live: true,
        program: command.split_whitespace().next().map(str::to_string),
        accesses,
        threads: nthreads,
        config: rdx,
        words,
        lines: None,
        pairs,
        notes,
        adaptive_period,
        prefaulted_pages: prefaulted,
    })
}

/// The note for a live run whose large new memory a helper thread touched first.
fn prefault_note(pages: u64) -> String {
    format!(
        "live: {pages} pages ({:.0} MiB) of the program's new memory were touched first by a helper thread without debug registers, where the kernel clears them at full speed (an armed register slows that clearing about 20x on some CPUs), a window of 16 MiB ahead of where the program writes: its accesses are the same, its resident memory may run up to a window ahead; --no-prefault leaves them to the program",
        pages as f64 * 4096.0 / 1048576.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adaptive_note_gives_blocks_per_sample_to_two_places_under_one() {
        let note = |blocks: u64, samples: u64| {
            let a = AdaptivePeriod {
                min: 4096,
                max: 1 << 22,
                retranslated_blocks: Some(blocks),
            };
            adaptive_note(&a, samples, Some(400.0))
        };
        assert!(note(80, 1503).contains("80 blocks again, about 0.05 per sample"));
        assert!(note(0, 1503).contains("0 blocks again, about 0 per sample"));
        assert!(note(4500, 1500).contains("4500 blocks again, about 3 per sample"));
    }

    /// Reads the live run whose events file holds `text` (written under `name`, removed
    /// after) as the program `command`.
    fn live(
        name: &str,
        text: &str,
        command: &str,
        cfg: &ReuseConfig,
    ) -> Result<ReuseReport, SynthError> {
        let p = std::env::temp_dir().join(format!(
            "mgbench-rdx-events-{}-{name}.txt",
            std::process::id()
        ));
        std::fs::write(&p, text).unwrap();
        let r = reuse_live(&p, command, cfg, None);
        std::fs::remove_file(&p).ok();
        r
    }

    #[test]
    fn a_live_run_is_read_from_its_events() {
        // Two registers: two uses reused 5 and 20 accesses later, one dropped sample, one
        // use never reused; the program's mapping names the instructions.
        let cfg = ReuseConfig {
            exact: false,
            ..ReuseConfig::default()
        };
        let r = live(
            "ok",
            "H 10 0.5 2 7\n\
             M 400000-401000 r-xp 00000000 00:00 0 /bin/prog\n\
             S 0x400010 0x1000 10 0\n\
             S 0x400020 0x2000 20 1\n\
             T 0 15\n\
             S 0x400010 0x3000 30 0\n\
             T 1 40\n\
             N a note from the plugin\n\
             E 100\n",
            "/bin/prog --x",
            &cfg,
        )
        .unwrap();
        assert!(r.live && r.lines.is_none());
        assert_eq!((r.accesses, r.threads), (100, 1));
        assert_eq!(
            (r.config.period, r.config.watchpoints, r.config.seed),
            (10, 2, 7)
        );
        assert_eq!((r.words.samples, r.words.traps), (3, 2));
        assert_eq!(r.words.no_reuse, 1.0, "the use at 30 is never reused");
        // Distances 5 and 20 both fall in RDX's first bin [0, 4K).
        assert!((r.words.rdx_bins[0].time - 1.0).abs() < 1e-9);
        let fine: Vec<f64> = r.words.fine_bins.iter().map(|b| b.time).collect();
        assert!((fine.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(r.notes.iter().any(|n| n == "a note from the plugin"));
        let reused = r.pairs.iter().find(|p| p.use_ip == "0x400020").unwrap();
        assert_eq!(reused.mean_time, Some(20.0));
        assert!(reused.reuse_ip.is_none());
    }

    #[test]
    fn an_adaptive_live_run_weighs_each_sample_by_its_period() {
        // Two uses reused after 5 accesses at a period of 10, one reused after 5000 at a
        // period of 40: the long reuse stands for 4 uses, so it is 4/6 of the reuses, where
        // counting traps would make it 1/3.
        let cfg = ReuseConfig {
            exact: false,
            ..ReuseConfig::default()
        };
        let r = live(
            "adaptive",
            "H 10 0.5 1 3 adaptive\n\
             S 0x1 0x1000 10 0 10\n\
             T 0 15\n\
             S 0x1 0x2000 20 0 10\n\
             T 0 25\n\
             S 0x1 0x3000 60 0 40\n\
             T 0 5060\n\
             B 12\n\
             E 6000\n",
            "prog",
            &cfg,
        )
        .unwrap();
        assert_eq!(r.config.period, 10, "the first period");
        assert_eq!(
            r.adaptive_period,
            Some(AdaptivePeriod {
                min: 10,
                max: 40,
                retranslated_blocks: Some(12)
            })
        );
        // 5 lies in RDX's first bin [0, 4K), 5000 in the second [4K, 8K).
        let time: Vec<f64> = r.words.rdx_bins.iter().map(|b| b.time).collect();
        assert!((time[0] - 2.0 / 6.0).abs() < 1e-9, "{time:?}");
        assert!((time[1] - 4.0 / 6.0).abs() < 1e-9, "{time:?}");
        let note = r
            .notes
            .iter()
            .find(|n| n.contains("adaptive period"))
            .unwrap_or_else(|| panic!("{:?}", r.notes));
        assert!(note.contains("10 to 40 accesses over 3 samples"), "{note}");
        assert!(
            note.contains("12 blocks again") && note.contains("--period"),
            "{note}"
        );
        // A sample line with a period of 0 is refused.
        let e = live(
            "adaptive-bad",
            "H 10 0.5 1 3 adaptive\nS 0x1 0x1000 10 0 0\n",
            "prog",
            &cfg,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn pages_touched_ahead_of_a_live_run_are_reported() {
        let cfg = ReuseConfig {
            exact: false,
            ..ReuseConfig::default()
        };
        let text = |p: &str| format!("H 10 0.5 1 1\nS 0x1 0x1000 10 0\nT 0 12\n{p}E 30\n");
        // An execve logs the pages so far, the exit all of them: the larger counts.
        let r = live("prefault", &text("P 8192\nP 32768\n"), "prog", &cfg).unwrap();
        assert_eq!(r.prefaulted_pages, Some(32768));
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("32768 pages (128 MiB)") && n.contains("--no-prefault")),
            "{:?}",
            r.notes
        );
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"prefaulted_pages\":32768"), "{json}");
        let none = live("no-prefault", &text(""), "prog", &cfg).unwrap();
        assert_eq!(none.prefaulted_pages, None);
        assert!(!serde_json::to_string(&none).unwrap().contains("prefaulted"));
        assert!(live("bad-prefault", &text("P many\n"), "prog", &cfg).is_err());
    }

    #[test]
    fn a_live_run_that_retranslated_much_per_sample_says_so() {
        let cfg = ReuseConfig {
            exact: false,
            ..ReuseConfig::default()
        };
        let run = |blocks: u64| {
            let r = live(&format!("blocks-{blocks}"),
                &format!("H 10 0.5 1 1\nS 0x1 0x1000 10 0\nT 0 12\nS 0x1 0x1000 20 0\nB {blocks}\nE 30\n"), "prog", &cfg).unwrap();
            r.notes
        };
        // Two samples: 1000 blocks are 500 per sample, over the threshold; 200 are 100.
        let notes = run(1000);
        let note = notes.iter().find(|n| n.contains("QEMU translated"));
        assert!(
            note.is_some_and(
                |n| n.contains("1000 blocks, about 500 per sample") && n.contains("--period")
            ),
            "{notes:?}"
        );
        assert!(!run(200).iter().any(|n| n.contains("QEMU translated")));
    }

    #[test]
    fn a_live_run_with_threads_keeps_each_threads_time() {
        // Thread 0 and thread 1 sample and trap with their own registers (both register 0)
        // and their own access counts: thread 1's trap at its access 25 is 5 after its use
        // at 20, thread 0's at 5010 is 5000 after its use at 10. One sampler for both would
        // have let thread 1's sample take thread 0's register. Thread 1 exits first.
        let cfg = ReuseConfig {
            exact: false,
            ..ReuseConfig::default()
        };
        let r = live(
            "threads",
            "H 10 0 1 7\n\
             S 0x400010 0x1000 10 0 10 0\n\
             S 0x400020 0x2000 20 0 10 1\n\
             T 0 25 1\n\
             E 40 1\n\
             T 0 5010 0\n\
             B 0\n\
             E 6000 0\n",
            "/bin/prog",
            &cfg,
        )
        .unwrap();
        assert_eq!((r.accesses, r.threads), (6040, 2));
        let w = &r.words;
        assert_eq!((w.samples, w.traps), (2, 2));
        // One reuse 5 accesses long (0-4K), one 5000 long (4K-8K).
        let time: Vec<f64> = w.rdx_bins.iter().map(|b| b.time).collect();
        assert!((time[0] - 0.5).abs() < 1e-9, "{time:?}");
        assert!((time[1] - 0.5).abs() < 1e-9, "{time:?}");
        assert!(
            r.notes.iter().any(|n| n.starts_with("2 threads")),
            "{:?}",
            r.notes
        );
        assert!(!r.notes.iter().any(|n| n.contains("did not exit normally")));
        // A thread whose end was never logged (the program died): its last event bounds it.
        let r = live(
            "threads-cut",
            "H 10 0 1 7\nS 0x1 0x1000 10 0 10 0\nS 0x1 0x2000 20 0 10 1\nT 0 25 1\nE 50 0\n",
            "prog",
            &cfg,
        )
        .unwrap();
        assert_eq!((r.accesses, r.threads), (75, 2));
        assert!(r.notes.iter().any(|n| n.contains("did not exit normally")));
        // A trap of a thread that never sampled is an error, named by its line.
        let e = live(
            "threads-bad",
            "H 10 0 1 7\nS 0x1 0x1000 10 0 10 0\nT 0 25 3\n",
            "prog",
            &cfg,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn a_live_run_cut_short_or_garbled_is_reported() {
        let cfg = ReuseConfig::default();
        // No end line: the program died; the histograms cover what was logged.
        let r = live(
            "cut",
            "H 10 0.5 1 1\nS 0x1 0x1000 10 0\nT 0 12\n",
            "prog",
            &cfg,
        )
        .unwrap();
        assert_eq!(r.accesses, 12);
        assert!(r.notes.iter().any(|n| n.contains("did not exit normally")));
        // An execve that left QEMU (the shell's failed try first): the run ends there.
        let text =
            "H 10 0.5 1 1\nS 0x1 0x1000 10 0\nX 15 0 /nope/true\nT 0 12\nX 20 0 /bin/my prog\n";
        let r = live("exec", text, "prog", &cfg).unwrap();
        assert_eq!(r.accesses, 20);
        let note = r.notes.iter().find(|n| n.contains("execve")).unwrap();
        assert!(
            note.contains("replaced itself with /bin/my prog (execve) at access 20"),
            "{note}"
        );
        assert!(!r.notes.iter().any(|n| n.contains("did not exit normally")));
        // A failed execve followed by a normal exit changes nothing.
        let r = live(
            "exec-failed",
            "H 10 0.5 1 1\nS 0x1 0x1000 10 0\nX 11 0 /nope\nT 0 12\nE 30\n",
            "prog",
            &cfg,
        )
        .unwrap();
        assert_eq!(r.accesses, 30);
        assert!(
            !r.notes.iter().any(|n| n.contains("execve")),
            "{:?}",
            r.notes
        );
        let e = live("bad", "H 10 0.5 1 1\nS zz 0x1000 10 0\n", "prog", &cfg)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = live("empty", "", "prog", &cfg).unwrap_err().to_string();
        assert!(e.contains("no live RDX run"), "{e}");
    }

    /// A thread's timeline: `n` uses, one every 1000 accesses, reused `time` accesses later,
    /// then `last` uses never reused, each standing for `weight` uses.
    fn thread(n: u64, time: u64, last: u64, weight: f64) -> (Timeline, u64) {
        let mut t = Timeline::default();
        for i in 0..n {
            t.add(i * 1000, Some(time), weight);
        }
        for i in 0..last {
            t.add((n + i) * 1000, None, weight);
        }
        (t, (n + last) * 1000)
    }

    #[test]
    fn threads_that_differ_are_converted_apart() {
        // A main thread whose reuses come 8 accesses later (a cycle over 8 words) and two
        // workers cycling over 2^14 words (each reuse at distance 2^14 - 1, RDX's [8K, 16K)
        // bin), each with too few uses for phases; the main thread's uses stand for 4 each (it
        // ran longer).
        let main = thread(100, 8, 5, 4.0);
        let (w1, w2) = (thread(50, 1 << 14, 5, 1.0), thread(50, 1 << 14, 5, 1.0));
        let threads = [&main, &w1, &w2];
        let runs: Vec<(&Timeline, u64, f64)> = threads
            .iter()
            .map(|(t, len)| (t, *len, t.finite()))
            .collect();
        assert!(runs.iter().all(|r| r.0.phases(r.1) == 1));
        let mut all = Histogram::default();
        for r in &runs {
            all.merge(&r.0.histogram());
        }
        let bins = rdx_bins();
        let far = bins.iter().position(|b| b.0 == 8192.0).unwrap();
        let p = plan(&runs);
        assert!(matches!(&p, Plan::Groups(g) if g.len() == 2), "main apart");
        let got = convert_threads(&runs, &p, &all, &bins);
        let mut want = vec![0.0; bins.len()];
        (want[0], want[far]) = (0.8, 0.2);
        assert_eq!(got, want, "main's reuses at 7, the workers' in [8K, 16K)");
        // Pooled, the main thread's short reuses made the workers' windows look emptier.
        assert!(
            convert(&all, &bins)[far] < 0.1,
            "{:?}",
            convert(&all, &bins)
        );
        // Alike threads are pooled: one group, the histogram of them all.
        let (runs, mut all) = (&runs[1..], Histogram::default());
        for r in runs {
            all.merge(&r.0.histogram());
        }
        let p = plan(runs);
        assert!(matches!(&p, Plan::Groups(g) if g.len() == 1));
        assert_eq!(convert_threads(runs, &p, &all, &bins), convert(&all, &bins));
        assert_eq!(convert(&all, &bins)[far], 1.0);
    }

    /// The words report of one thread whose sampled uses are `uses` (position, reuse time,
    /// weight) over `len` accesses.
    fn sampled_report(uses: &[(u64, Option<u64>, f64)], len: u64) -> GranularityReport {
        let mut track = Track::new(Sampler::new(RdxConfig::default(), 1), None);
        let mut time = Histogram::default();
        for &(pos, t, weight) in uses {
            let p = Pair {
                use_ip: 1,
                use_time: pos,
                reuse_ip: None,
                time: t,
                weight,
            };
            track.timeline.add_pair(&p);
            time.add(t, weight);
        }
        track.len = len;
        granularity_report(Granularity::Word, &mut [track], &time, len, 7)
    }

    #[test]
    fn the_spread_is_narrow_on_many_samples_and_wide_on_a_few_heavy_ones() {
        assert_eq!(poisson1(&mut Rng::new(1)), poisson1(&mut Rng::new(1)));
        let draws: Vec<f64> = {
            let mut rng = Rng::new(3);
            (0..100_000)
                .map(|_| f64::from(poisson1(&mut rng)))
                .collect()
        };
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        assert!(
            (mean - 1.0).abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );

        // 2000 uses of equal weight, half reused 100 accesses later, half 100 K later.
        let len = 2_000_000;
        let even: Vec<_> = (0..2000u64)
            .map(|i| (i * 1000, Some(if i % 2 == 0 { 100 } else { 100_000 }), 1.0))
            .collect();
        let g = sampled_report(&even, len);
        let sp = g.spread.unwrap();
        assert_eq!(sp.replicates, REPLICATES);
        assert!(sp.stack_s > 0.97 && sp.time_s > 0.97, "{sp:?}");
        for b in g.rdx_bins.iter().chain(&g.fine_bins) {
            let ([tl, th], [sl, sh]) = (b.time_range.unwrap(), b.stack_range.unwrap());
            assert!(tl <= b.time + 1e-12 && b.time <= th + 1e-12, "{b:?}");
            assert!(sl <= b.stack + 1e-12 && b.stack <= sh + 1e-12, "{b:?}");
            assert!(th - tl < 0.06 && sh - sl < 0.06, "{b:?}");
        }

        // The same short reuses, and the long ones stood for by eight heavy uses (32
        // effective samples in all): the long bins rest on eight samples, and their ranges
        // say so.
        let heavy = |n: u64, w: f64| {
            let mut v: Vec<_> = (0..1000u64).map(|i| (i * 2000, Some(100), 1.0)).collect();
            v.extend((0..n).map(|i| (i * 200_000 + 7, Some(100_000 * (1 + i)), w)));
            v
        };
        let h = sampled_report(&heavy(8, 125.0), len);
        assert!(h.effective_samples.unwrap() >= STEADY_EFFECTIVE);
        let hs = h.spread.unwrap();
        assert!(hs.stack_s < sp.stack_s - 0.05, "{hs:?} against {sp:?}");
        let long = h
            .rdx_bins
            .iter()
            .find(|b| b.stack > 0.1 && b.lo > 0.0)
            .unwrap();
        let [lo, hi] = long.stack_range.unwrap();
        assert!(hi - lo > 0.2, "{long:?}");

        // Three heavy uses (12 effective samples): no spread, since the replicates would
        // draw the same three again and look steadier than the run is; nor without uses.
        let thin = sampled_report(&heavy(3, 333.0), len);
        assert!(thin.effective_samples.unwrap() < STEADY_EFFECTIVE);
        for g in [thin, sampled_report(&[], len)] {
            assert!(g.spread.is_none(), "{:?}", g.spread);
            assert!(g
                .rdx_bins
                .iter()
                .all(|b| b.stack_range.is_none() && b.time_range.is_none()));
        }
    }
}
