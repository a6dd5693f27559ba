//! Timing: a [`Measurement`] turns one execution of a workload into seconds, and
//! [`time_series`] runs warm-up executions followed by the timed ones.
//!
//! Replay follows Spatter and STREAM: untimed warm-up runs first (they also fault pages in),
//! then `nruns` timed runs of the whole count loop; the figure of merit is the minimum time, and
//! every run time is kept so users can see the spread. Other clocks (MPI-reduced time, CUDA
//! events) implement the same trait.

use std::time::Instant;

/// A way to time one execution of a workload.
pub trait Measurement {
    /// Name written into results ("wall-clock", ...).
    fn name(&self) -> &'static str;
    /// Seconds taken by one call of `work`.
    fn measure(&mut self, work: &mut dyn FnMut()) -> f64;
}

/// Monotonic wall-clock time on the calling thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct WallClock;

impl Measurement for WallClock {
    fn name(&self) -> &'static str {
        "wall-clock"
    }

    fn measure(&mut self, work: &mut dyn FnMut()) -> f64 {
        let start = Instant::now();
        work();
        start.elapsed().as_secs_f64()
    }
}

/// Runs `warmup` untimed executions, then `runs` timed ones; returns the timed seconds.
pub fn time_series(
    clock: &mut dyn Measurement,
    warmup: usize,
    runs: usize,
    work: &mut dyn FnMut(),
) -> Vec<f64> {
    for _ in 0..warmup {
        work();
    }
    (0..runs).map(|_| clock.measure(work)).collect()
}

/// Summary statistics of a series of run times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub mean: f64,
}

impl Summary {
    /// Summarises a non-empty series; `None` for an empty one.
    pub fn of(times: &[f64]) -> Option<Summary> {
        if times.is_empty() {
            return None;
        }
        let mut sorted = times.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Summary {
            min: sorted[0],
            median,
            max: sorted[n - 1],
            mean: sorted.iter().sum::<f64>() / n as f64,
        })
    }
}

/// Bandwidth in MB/s (1 MB = 1e6 bytes, as Spatter and STREAM count).
pub fn bandwidth_mbs(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.mean), (1.0, 2.5, 10.0, 4.0));
        assert_eq!(Summary::of(&[5.0]).unwrap().median, 5.0);
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn series_runs_warmups_untimed() {
        let mut calls = 0;
        let times = time_series(&mut WallClock, 2, 3, &mut || calls += 1);
        assert_eq!(calls, 5);
        assert_eq!(times.len(), 3);
    }

    #[test]
    fn megabytes_are_decimal() {
        assert_eq!(bandwidth_mbs(2_000_000, 0.5), 4.0);
    }
}
