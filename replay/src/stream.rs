//! The STREAM baseline (McCalpin): Copy, Scale, Add and Triad on three arrays of doubles.
//!
//! STREAM's rules, as the reference code applies them: each array holds at least four times the
//! last-level cache; Copy and Scale count 2 words per element, Add and Triad 3; every kernel runs
//! `ntimes` (10) times, the first iteration is dropped, and the best (minimum) time gives the
//! bandwidth in MB/s (1e6 bytes). The arrays start as a=1, b=2, c=0 with a doubled once, and the
//! final values are checked against the same recurrence computed on scalars.

use crate::buffer::{AllocError, Buffer};
use crate::kernel::{split, split_mut};
use crate::measure::{bandwidth_mbs, Measurement, Summary, WallClock};
use crate::plan::human_bytes;
use crate::pool::Pool;
use crate::record::{
    mgbench_version, now_rfc3339, Host, StreamKernel, StreamRecord, SCHEMA_VERSION,
};
use crate::simd;

/// STREAM's NTIMES.
pub const DEFAULT_NTIMES: usize = 10;
/// STREAM's scalar for Scale and Triad.
const SCALAR: f64 = 3.0;
/// Used when the cache size cannot be read: 2^25 elements (256 MiB per array).
const FALLBACK_ELEMENTS: usize = 1 << 25;
/// Never fewer than STREAM's historical minimum of 10 M elements (80 MB per array).
const MIN_DEFAULT_ELEMENTS: usize = 10_000_000;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// Elements per array.
    pub elements: usize,
    /// Iterations of the four kernels; the first is not counted.
    pub ntimes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("--size must be at least 1 element per thread ({threads} threads)")]
    TooSmall { threads: usize },
    #[error("STREAM needs at least 2 iterations (the first is dropped); got {0}")]
    TooFewRuns(usize),
    #[error("STREAM arrays of {elements} elements need {} in all but only {} is available: lower --size (or --stream-size)", human_bytes(*.need as u128), human_bytes(*.available as u128))]
    OutOfMemory {
        elements: usize,
        need: u64,
        available: u64,
    },
    #[error("--size {0} elements overflows this machine's address space")]
    Overflow(usize),
    #[error("STREAM arrays: {0}")]
    Alloc(AllocError),
}

/// Default elements per array: 4x the last-level cache, at least 10 M; and a note saying how.
pub fn default_elements(llc_bytes: Option<u64>) -> (usize, String) {
    match llc_bytes {
        Some(llc) => {
            let four_x = usize::try_from(llc.saturating_mul(4) / 8).unwrap_or(usize::MAX);
            let elements = four_x.max(MIN_DEFAULT_ELEMENTS);
            (
                elements,
                format!(
                    "arrays of {elements} elements ({}): at least 4x the {} last-level cache",
                    human_bytes(elements as u128 * 8),
                    human_bytes(llc as u128)
                ),
            )
        }
        None => (
            FALLBACK_ELEMENTS,
            format!(
                "last-level cache size unknown: arrays of {FALLBACK_ELEMENTS} elements ({}); \
                 set --size to at least 4x your last-level cache",
                human_bytes(FALLBACK_ELEMENTS as u128 * 8)
            ),
        ),
    }
}

/// Runs STREAM on the pool. `available` is the memory that may be used (None: unchecked).
pub fn run(
    pool: &Pool,
    config: &StreamConfig,
    available: Option<u64>,
    mut notes: Vec<String>,
) -> Result<StreamRecord, StreamError> {
    let threads = pool.threads();
    let n = config.elements;
    if n < threads {
        return Err(StreamError::TooSmall { threads });
    }
    if config.ntimes < 2 {
        return Err(StreamError::TooFewRuns(config.ntimes));
    }
    let need = n
        .checked_mul(3 * 8)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(StreamError::Overflow(n))? as u64;
    if let Some(available) = available {
        if need > available {
            return Err(StreamError::OutOfMemory {
                elements: n,
                need,
                available,
            });
        }
    }

    let mut a = Buffer::zeroed(n).map_err(StreamError::Alloc)?;
    let mut b = Buffer::zeroed(n).map_err(StreamError::Alloc)?;
    let mut c = Buffer::zeroed(n).map_err(StreamError::Alloc)?;
    // First touch in parallel, as STREAM's OpenMP initialisation does.
    {
        let mut work: Vec<_> = split_mut(&mut a, threads)
            .into_iter()
            .zip(split_mut(&mut b, threads))
            .zip(split_mut(&mut c, threads))
            .collect();
        pool.broadcast_mut(&mut work, |_, ((a, b), c)| {
            simd::fill(a, 1.0);
            simd::fill(b, 2.0);
            simd::fill(c, 0.0);
        });
        pool.broadcast_mut(&mut work, |_, ((a, _), _)| {
            for x in a.iter_mut() {
                *x *= 2.0;
            }
        });
    }

    let mut clock = WallClock;
    let mut times = [
        Vec::with_capacity(config.ntimes),
        Vec::with_capacity(config.ntimes),
        Vec::with_capacity(config.ntimes),
        Vec::with_capacity(config.ntimes),
    ];
    for _ in 0..config.ntimes {
        // Copy: c = a
        let mut work: Vec<_> = split(&a, threads)
            .into_iter()
            .zip(split_mut(&mut c, threads))
            .collect();
        times[0].push(clock.measure(&mut || {
            pool.broadcast_mut(&mut work, |_, (src, dst)| simd::copy(dst, src));
        }));
        // Scale: b = s * c
        let mut work: Vec<_> = split(&c, threads)
            .into_iter()
            .zip(split_mut(&mut b, threads))
            .collect();
        times[1].push(clock.measure(&mut || {
            pool.broadcast_mut(&mut work, |_, (src, dst)| simd::scale(dst, src, SCALAR));
        }));
        // Add: c = a + b
        let mut work: Vec<_> = split(&a, threads)
            .into_iter()
            .zip(split(&b, threads))
            .zip(split_mut(&mut c, threads))
            .collect();
        times[2].push(clock.measure(&mut || {
            pool.broadcast_mut(&mut work, |_, ((x, y), dst)| simd::add(dst, x, y));
        }));
        // Triad: a = b + s * c
        let mut work: Vec<_> = split(&b, threads)
            .into_iter()
            .zip(split(&c, threads))
            .zip(split_mut(&mut a, threads))
            .collect();
        times[3].push(clock.measure(&mut || {
            pool.broadcast_mut(&mut work, |_, ((y, z), dst)| simd::triad(dst, y, z, SCALAR));
        }));
    }

    let validated = match validate(&a, &b, &c, config.ntimes) {
        Ok(()) => true,
        Err(why) => {
            notes.push(format!("validation failed: {why}"));
            false
        }
    };
    let words = [2u64, 2, 3, 3];
    let names = ["copy", "scale", "add", "triad"];
    let kernels: Vec<StreamKernel> = (0..4)
        .map(|k| {
            let bytes = words[k] * 8 * n as u64;
            // STREAM drops the first iteration.
            let s = Summary::of(&times[k][1..]).unwrap_or(Summary {
                min: f64::NAN,
                median: f64::NAN,
                max: f64::NAN,
                mean: f64::NAN,
            });
            StreamKernel {
                name: names[k].to_string(),
                bytes,
                best_time_s: s.min,
                avg_time_s: s.mean,
                max_time_s: s.max,
                bandwidth_mbs: bandwidth_mbs(bytes, s.min),
            }
        })
        .collect();
    if pool.is_oversubscribed() {
        notes.push(format!(
            "{threads} threads share fewer CPUs: bandwidth is not representative"
        ));
    }
    Ok(StreamRecord {
        schema_version: SCHEMA_VERSION,
        copy_mbs: kernels[0].bandwidth_mbs,
        scale_mbs: kernels[1].bandwidth_mbs,
        add_mbs: kernels[2].bandwidth_mbs,
        triad_mbs: kernels[3].bandwidth_mbs,
        elements: n,
        array_bytes: 8 * n as u64,
        threads,
        ntimes: config.ntimes,
        kernels,
        validated,
        pinned: pool.is_pinned(),
        notes,
        ranks: 1,
        host: Host::detect(),
        mgbench_version: mgbench_version(),
        time: now_rfc3339(),
    })
}

/// STREAM's check: replay the recurrence on scalars and compare average absolute errors.
fn validate(a: &[f64], b: &[f64], c: &[f64], ntimes: usize) -> Result<(), String> {
    let (mut aj, mut bj, mut cj) = (1.0f64, 2.0f64, 0.0f64);
    aj *= 2.0;
    for _ in 0..ntimes {
        cj = aj;
        bj = SCALAR * cj;
        cj = aj + bj;
        aj = bj + SCALAR * cj;
    }
    const EPSILON: f64 = 1e-13;
    let n = a.len() as f64;
    for (name, values, expected) in [("a", a, aj), ("b", b, bj), ("c", c, cj)] {
        let avg_err = values.iter().map(|v| (v - expected).abs()).sum::<f64>() / n;
        if (avg_err / expected).abs() > EPSILON {
            return Err(format!(
                "array {name}: average error {avg_err:e} relative to expected {expected:e} exceeds {EPSILON:e}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Placement;

    #[test]
    fn default_size_is_four_times_llc() {
        let (n, note) = default_elements(Some(32 << 20));
        assert_eq!(n, (4 * (32usize << 20)) / 8);
        assert!(note.contains("4x"));
        assert_eq!(default_elements(Some(1 << 20)).0, MIN_DEFAULT_ELEMENTS);
        assert_eq!(default_elements(None).0, FALLBACK_ELEMENTS);
    }

    #[test]
    fn small_stream_validates() {
        let pool = Pool::new(2, Placement::Unpinned).unwrap();
        let r = run(
            &pool,
            &StreamConfig {
                elements: 10_001,
                ntimes: 4,
            },
            None,
            vec![],
        )
        .unwrap();
        assert!(r.validated, "{:?}", r.notes);
        assert_eq!(r.kernels[0].bytes, 2 * 8 * 10_001);
        assert_eq!(r.kernels[3].bytes, 3 * 8 * 10_001);
        assert!(r.copy_mbs > 0.0 && r.triad_mbs > 0.0);
    }

    #[test]
    fn validation_catches_wrong_values() {
        let n = 100;
        let (a, b, c) = (vec![1.0; n], vec![1.0; n], vec![1.0; n]);
        assert!(validate(&a, &b, &c, 3).is_err());
    }

    #[test]
    fn bad_sizes_are_errors() {
        let pool = Pool::new(2, Placement::Unpinned).unwrap();
        let cfg = |elements, ntimes| StreamConfig { elements, ntimes };
        assert!(matches!(
            run(&pool, &cfg(1, 10), None, vec![]),
            Err(StreamError::TooSmall { .. })
        ));
        assert!(matches!(
            run(&pool, &cfg(100, 1), None, vec![]),
            Err(StreamError::TooFewRuns(1))
        ));
        assert!(matches!(
            run(&pool, &cfg(1000, 10), Some(100), vec![]),
            Err(StreamError::OutOfMemory { .. })
        ));
    }
}
