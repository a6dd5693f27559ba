//! Buffer sizes and pre-flight checks for a configuration, done before anything is allocated.
//!
//! Sparse size = max index + |delta| * (count - 1) + 1 elements (gs: one per side; a negative
//! delta walks the same span downwards, see `config::iteration_origin`); dense size =
//! pattern length * wrap elements per thread. Real traces hold indices like 8.8e12, whose sparse
//! buffer would need 70 TB: we compute sizes in 128-bit arithmetic and refuse configurations
//! that do not fit in the memory this machine has available, saying which keys bound them.

use crate::config::{Kernel, RunConfig};

/// Elements of each buffer a configuration needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub sparse_elems: usize,
    pub sparse_scatter_elems: usize,
    pub dense_elems_per_thread: usize,
    /// Index arrays (patterns), which also live in memory during the run.
    pub index_elems: usize,
}

impl Footprint {
    /// Total bytes for `threads` threads.
    pub fn bytes(&self, threads: usize) -> u128 {
        8 * (self.sparse_elems as u128
            + self.sparse_scatter_elems as u128
            + self.dense_elems_per_thread as u128 * threads as u128
            + self.index_elems as u128)
    }

    /// Bytes of the sparse buffer(s).
    pub fn sparse_bytes(&self) -> u64 {
        8 * (self.sparse_elems as u64 + self.sparse_scatter_elems as u64)
    }

    /// Bytes of one thread's dense buffer.
    pub fn dense_bytes(&self) -> u64 {
        8 * self.dense_elems_per_thread as u64
    }
}

/// Why a configuration cannot be run on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// Number of sparse elements a pattern needs: max + |delta|*(count-1) + 1, in 128 bits.
fn sparse_len(pattern: impl IntoIterator<Item = usize>, delta: i64, count: usize) -> (u128, u128) {
    let max = pattern.into_iter().max().unwrap_or(0) as u128;
    (
        max,
        max + u128::from(delta.unsigned_abs()) * (count as u128 - 1) + 1,
    )
}

/// Computes the footprint, refusing sizes that overflow this machine's address space.
pub fn footprint(config: &RunConfig) -> Result<Footprint, PlanError> {
    let count = config.count.max(1);
    let k = &config.kernel;
    if let Kernel::Apex(a) = k {
        // M words to read, the block starts; no dense buffer (the kernel only sums).
        let m = usize::try_from(a.params.m)
            .ok()
            .filter(|&m| m as u128 <= (isize::MAX as u128) / 8)
            .ok_or_else(|| {
                PlanError(format!(
                    "\"M\" = {} words is beyond this machine's address space; lower \"M\"",
                    a.params.m
                ))
            })?;
        return Ok(Footprint {
            sparse_elems: m,
            sparse_scatter_elems: 0,
            dense_elems_per_thread: 0,
            index_elems: a.starts.len(),
        });
    }
    let (max, delta, sparse, sparse_s) = match k {
        Kernel::GatherScatter {
            gather,
            scatter,
            delta_gather,
            delta_scatter,
        } => {
            let (mg, g) = sparse_len(gather.iter().copied(), *delta_gather, count);
            let (_, s) = sparse_len(scatter.iter().copied(), *delta_scatter, count);
            (mg, *delta_gather, g, s)
        }
        _ => {
            let (p, delta) = k.effective_pattern();
            let (m, s) = sparse_len(p, delta, count);
            (m, delta, s, 0)
        }
    };
    let dense = match k {
        Kernel::GatherScatter { .. } => 0,
        _ => k.pattern_len() as u128 * config.wrap as u128,
    };
    let index = match k {
        Kernel::Gather { pattern, .. } | Kernel::Scatter { pattern, .. } => pattern.len(),
        Kernel::GatherScatter {
            gather, scatter, ..
        } => gather.len() + scatter.len(),
        Kernel::MultiGather { outer, inner, .. } | Kernel::MultiScatter { outer, inner, .. } => {
            outer.len() + inner.len()
        }
        Kernel::Apex(a) => a.starts.len(),
    };
    let limit = (isize::MAX as u128) / 8;
    let too_big = |what: &str, elems: u128| {
        PlanError(format!(
            "the {what} would need {elems} elements ({}), beyond this machine's address space \
             (largest index {max}, delta {delta}, count {count}); {}",
            human_bytes(elems.saturating_mul(8)),
            BOUND_HINT
        ))
    };
    if sparse > limit {
        return Err(too_big("sparse buffer", sparse));
    }
    if sparse_s > limit {
        return Err(too_big("scatter-side sparse buffer", sparse_s));
    }
    if dense > limit {
        return Err(too_big("dense buffer", dense));
    }
    Ok(Footprint {
        sparse_elems: sparse as usize,
        sparse_scatter_elems: sparse_s as usize,
        dense_elems_per_thread: dense as usize,
        index_elems: index,
    })
}

const BOUND_HINT: &str = "run it with --compact-gaps (keeps every distance up to 2 MiB and shrinks \
                          longer ones; --compact-gaps-if-needed leaves the configs that fit as \
                          they are), or bound it with \"boundary\" (indices taken modulo N) or \
                          \"pattern-size\" (keep the first N indices), or lower \"count\" or \"delta\"";

/// Checks that the configuration's buffers fit in `available` bytes (None: unknown, skip).
pub fn check_memory(
    config: &RunConfig,
    footprint: &Footprint,
    threads: usize,
    available: Option<u64>,
) -> Result<(), PlanError> {
    let Some(available) = available else {
        return Ok(());
    };
    let need = footprint.bytes(threads);
    if need > available as u128 {
        if let Kernel::Apex(a) = &config.kernel {
            return Err(PlanError(format!(
                "needs {} (M = {} words and {} block starts) but only {} is available; lower \"M\" \
                 or \"count\"",
                human_bytes(need),
                a.params.m,
                a.starts.len(),
                human_bytes(available as u128),
            )));
        }
        let (max, delta) = {
            let (p, d) = config.kernel.effective_pattern();
            (p.into_iter().max().unwrap_or(0), d)
        };
        return Err(PlanError(format!(
            "needs {} (a sparse buffer of {} elements = largest index {max} + |delta {delta}| x \
             (count {} - 1) + 1, and {} dense elements x {threads} threads) but only {} is \
             available; {BOUND_HINT}",
            human_bytes(need),
            footprint.sparse_elems as u128 + footprint.sparse_scatter_elems as u128,
            config.count,
            footprint.dense_elems_per_thread,
            human_bytes(available as u128),
        )));
    }
    Ok(())
}

/// Formats a byte count with a binary unit.
pub fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Largest amount of pairwise work spent proving a scatter race-free before assuming it races.
const RACE_CHECK_BUDGET: u128 = 1 << 24;

/// Whether two threads may write the same sparse element: some index is written by two
/// iterations that different threads own. Exact for small patterns, conservative (true) when
/// the check would cost more than a few milliseconds.
pub fn scatter_may_race(config: &RunConfig, threads: usize) -> bool {
    if threads < 2 || config.count < 2 || !config.kernel.kind().is_scatter_like() {
        return false;
    }
    let (pattern, delta) = match &config.kernel {
        Kernel::GatherScatter {
            scatter,
            delta_scatter,
            ..
        } => (scatter.clone(), *delta_scatter),
        k => k.effective_pattern(),
    };
    // Iterations i and i+s collide for delta d exactly when they do for -d (the bases are the
    // same set, walked the other way), so only |delta| matters.
    let delta = usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX);
    if delta == 0 {
        return true;
    }
    let mut uniq = pattern;
    uniq.sort_unstable();
    uniq.dedup();
    let span = uniq.last().copied().unwrap_or(0) - uniq.first().copied().unwrap_or(0);
    // Iterations i and i+s collide iff some p[a] - p[b] = s * delta; s ranges up to span/delta.
    let max_shift = (span / delta).min(config.count - 1);
    if max_shift == 0 {
        return false;
    }
    if max_shift as u128 * uniq.len() as u128 > RACE_CHECK_BUDGET {
        return true;
    }
    let set: std::collections::HashSet<usize> = uniq.iter().copied().collect();
    // A collision at shift s only races if the two iterations can belong to different threads;
    // with static blocks any shift < count can straddle a block boundary, so any s counts.
    (1..=max_shift).any(|s| uniq.iter().any(|&p| set.contains(&(p + s * delta))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kernel: Kernel, count: usize, wrap: usize) -> RunConfig {
        RunConfig {
            wrap,
            ..RunConfig::test(kernel, count)
        }
    }

    #[test]
    fn sizes_follow_spatter() {
        let c = cfg(
            Kernel::Gather {
                pattern: vec![0, 5, 2],
                delta: 8,
            },
            10,
            3,
        );
        let f = footprint(&c).unwrap();
        assert_eq!(f.sparse_elems, 5 + 8 * 9 + 1);
        assert_eq!(f.dense_elems_per_thread, 9);
        let c = cfg(
            Kernel::GatherScatter {
                gather: vec![4],
                scatter: vec![1],
                delta_gather: 2,
                delta_scatter: 3,
            },
            5,
            1,
        );
        let f = footprint(&c).unwrap();
        assert_eq!((f.sparse_elems, f.sparse_scatter_elems), (13, 14));
        assert_eq!(f.dense_elems_per_thread, 0);
    }

    #[test]
    fn huge_indices_are_refused_with_hint() {
        let c = cfg(
            Kernel::Gather {
                pattern: vec![0, 8_800_000_000_000],
                delta: 8,
            },
            1024,
            1,
        );
        let f = footprint(&c).unwrap();
        let e = check_memory(&c, &f, 2, Some(24 << 30)).unwrap_err().0;
        assert!(e.contains("boundary") && e.contains("pattern-size"), "{e}");
        assert!(e.contains("64.0 TiB"), "{e}");
        let c = cfg(
            Kernel::Gather {
                pattern: vec![usize::MAX - 1],
                delta: i64::MIN,
            },
            1024,
            1,
        );
        assert!(footprint(&c).is_err());
    }

    #[test]
    fn race_detection() {
        let scatter = |pattern: Vec<usize>, delta: i64| Kernel::Scatter { pattern, delta };
        // Stride-1 rows of 8 with delta 8 never overlap.
        assert!(!scatter_may_race(
            &cfg(scatter((0..8).collect(), 8), 100, 1),
            2
        ));
        // Delta 4 with span 7: iterations i and i+1 overlap.
        assert!(scatter_may_race(
            &cfg(scatter((0..8).collect(), 4), 100, 1),
            2
        ));
        assert!(scatter_may_race(&cfg(scatter(vec![0], 0), 100, 1), 2));
        assert!(!scatter_may_race(&cfg(scatter(vec![0], 0), 100, 1), 1));
        // Gathers never race.
        assert!(!scatter_may_race(
            &cfg(
                Kernel::Gather {
                    pattern: vec![0],
                    delta: 0
                },
                100,
                1
            ),
            2
        ));
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
