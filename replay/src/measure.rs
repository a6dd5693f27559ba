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

/// What the note on a run too short to time says first (`table` and `compare` flag the
/// records that carry it).
pub const SHORT_RUN: &str = "too short to time";

/// A run is too short to time when starting it takes this share of its time or more: the
/// bandwidth then comes out at least that much low.
const START_SHARE: f64 = 0.1;

/// A run takes about this long at the count [`short_run`] suggests.
const LONG_ENOUGH_S: f64 = 1e-3;

/// For a configuration of `count` iterations whose fastest run took `min_s` seconds, where
/// starting a run (waking the threads, launching a kernel) takes `start_s`: `None` when the
/// start is under a tenth of the run, else what to say, with the count that would take
/// about a millisecond.
pub fn short_run(min_s: f64, count: usize, start_s: f64) -> Option<String> {
    if min_s.is_nan() || start_s.is_nan() || min_s >= start_s / START_SHARE {
        return None;
    }
    let factor = if min_s > 0.0 {
        LONG_ENOUGH_S / min_s
    } else {
        1e3
    };
    let suggested = (count as f64 * factor).round().min(u64::MAX as f64) as u64;
    let low = if start_s < min_s {
        format!(
            "so the bandwidth is {:.0}% low or more",
            (100.0 * start_s / min_s).floor()
        )
    } else {
        "so the bandwidth says nothing of memory".to_string()
    };
    Some(format!(
        "{SHORT_RUN}: the fastest run took {}, and starting a run alone takes about {} here, {low}; a count of about {suggested} (\"count\" in the config, -l inline) takes about a millisecond",
        seconds(min_s),
        seconds(start_s),
    ))
}

/// Seconds in the unit that suits them: "2.1 us", "35 ms", "1.20 s".
pub fn seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_too_short_to_time_say_which_count_would_do() {
        // Starting takes under a tenth of the run: timed.
        assert_eq!(short_run(2e-3, 16, 2e-7), None);
        assert_eq!(short_run(2e-6, 16, 2e-7), None);
        assert_eq!(
            short_run(f64::NAN, 16, 2e-7),
            None,
            "no runs: nothing timed"
        );
        let note = short_run(2e-6, 3, 4e-7).expect("a fifth of the run is its start");
        assert!(note.starts_with(SHORT_RUN), "{note}");
        assert!(
            note.contains("took 2.0 us") && note.contains("about 0.4 us"),
            "{note}"
        );
        assert!(note.contains("20% low"), "{note}");
        assert!(note.contains("a count of about 1500 "), "{note}");
        // A zero-time run (a coarse clock) still gets advice, not a division by zero.
        let zero = short_run(0.0, 1, 1e-6).unwrap();
        assert!(
            zero.contains("about 1000 ") && zero.contains("says nothing"),
            "{zero}"
        );
        // No longer than its start (a GPU launch timed at 5.9 us against 6 us).
        let launch = short_run(5.9e-6, 1, 6e-6).unwrap();
        assert!(launch.contains("says nothing of memory"), "{launch}");
        assert_eq!(seconds(0.035), "35.00 ms");
        assert_eq!(seconds(2.0), "2.00 s");
    }

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
