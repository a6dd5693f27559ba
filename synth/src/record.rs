//! Pass 2: every dynamic element index of a kept instruction, with the statistics of GS
//! Patterns' last filter, and delta/count recovery.
//!
//! Memory stays bounded: a recorder keeps at most `cap` indices (the prefix) plus counters.
//! Delta/count recovery looks for the smallest period `p` of the index *differences* in the
//! prefix (a stream is one base pattern repeated with a constant shift `d` exactly when its
//! differences are periodic: `S[i + p] = S[i] + d`), then checks every later index against
//! `S[i] = S[i mod p] + (i / p) * d` while streaming, so streams longer than the prefix are
//! verified in full.

use std::collections::HashSet;

/// Distinct distances tracked before we stop counting (enough for any threshold).
const MAX_TRACKED_DISTANCES: usize = 4096;

/// How a pattern was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compression {
    /// The whole stream, as one long pattern (count 1).
    Full,
    /// The first `kept` indices of a longer stream that does not repeat (count 1).
    Truncated { kept: usize, total: u64 },
    /// One base pattern repeated `count` times, shifted by `delta` each time (negative when
    /// the stream walks downwards; replay runs such deltas as they are).
    Repeated {
        period: usize,
        count: u64,
        delta: i64,
        /// Indices after the last whole repetition, not represented.
        dropped_tail: u64,
    },
}

/// Result of recording one instruction.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Indices minus their minimum (the base pattern when repeated).
    pub pattern: Vec<u64>,
    pub delta: i64,
    pub count: u64,
    pub compression: Compression,
    pub instances: u64,
    pub unique_distances: usize,
    /// Fraction of distances with |d| >= the OOB threshold.
    pub oob_fraction: f64,
}

/// State of the periodicity check on indices beyond the prefix.
#[derive(Debug, Clone)]
enum Periodicity {
    /// Prefix not full yet.
    Pending,
    /// Candidate period and shift, still holding; `at` is the position in the period and
    /// `shift` the accumulated shift of the next index (kept incrementally: no division per
    /// index).
    Holds {
        p: usize,
        d: i128,
        at: usize,
        shift: i128,
    },
    /// No period, or a later index broke it.
    Broken,
}

/// Records one instruction's element indices.
#[derive(Debug, Clone)]
pub struct Recorder {
    cap: usize,
    oob: u64,
    prefix: Vec<u64>,
    total: u64,
    last: Option<u64>,
    distances: HashSet<i64, crate::fasthash::Build>,
    saturated: bool,
    dist_count: u64,
    oob_count: u64,
    periodicity: Periodicity,
}

impl Recorder {
    pub fn new(cap: usize, oob_distance: u64) -> Recorder {
        Recorder {
            cap: cap.max(2),
            oob: oob_distance,
            prefix: Vec::new(),
            total: 0,
            last: None,
            distances: HashSet::default(),
            saturated: false,
            dist_count: 0,
            oob_count: 0,
            periodicity: Periodicity::Pending,
        }
    }

    #[inline]
    pub fn push(&mut self, index: u64) {
        if let Some(last) = self.last {
            let d = index.wrapping_sub(last) as i64;
            self.dist_count += 1;
            if d.unsigned_abs() >= self.oob {
                self.oob_count += 1;
            }
            if !self.saturated {
                self.distances.insert(d);
                self.saturated = self.distances.len() >= MAX_TRACKED_DISTANCES;
            }
        }
        self.last = Some(index);
        self.total += 1;
        if self.prefix.len() < self.cap {
            self.prefix.push(index);
            if self.prefix.len() == self.cap {
                let n = self.cap;
                self.periodicity = match find_period(&self.prefix) {
                    // The next index is number n: position n % p, shift (n / p) * d.
                    Some((p, d)) => Periodicity::Holds {
                        p,
                        d,
                        at: n % p,
                        shift: (n / p) as i128 * d,
                    },
                    None => Periodicity::Broken,
                };
            }
            return;
        }
        if let Periodicity::Holds { p, d, at, shift } = &mut self.periodicity {
            // Index i must equal S[i mod p] + (i / p) * d.
            if i128::from(self.prefix[*at]) + *shift != i128::from(index) {
                self.periodicity = Periodicity::Broken;
                return;
            }
            *at += 1;
            if *at == *p {
                *at = 0;
                *shift += *d;
            }
        }
    }

    pub fn instances(&self) -> u64 {
        self.total
    }

    pub fn unique_distances(&self) -> usize {
        self.distances.len()
    }

    pub fn oob_fraction(&self) -> f64 {
        if self.dist_count == 0 {
            0.0
        } else {
            self.oob_count as f64 / self.dist_count as f64
        }
    }

    /// Builds the pattern.
    pub fn finish(self) -> Recorded {
        let periodic = match self.periodicity {
            Periodicity::Pending => find_period(&self.prefix),
            Periodicity::Holds { p, d, .. } => Some((p, d)),
            Periodicity::Broken => None,
        };
        let unique_distances = self.distances.len();
        let oob_fraction = if self.dist_count == 0 {
            0.0
        } else {
            self.oob_count as f64 / self.dist_count as f64
        };
        let base = |s: &[u64]| {
            let min = s.iter().copied().min().unwrap_or(0);
            s.iter().map(|&x| x - min).collect::<Vec<u64>>()
        };
        if let Some((p, d)) = periodic {
            if let Ok(d) = i64::try_from(d) {
                let count = self.total / p as u64;
                return Recorded {
                    pattern: base(&self.prefix[..p]),
                    delta: d,
                    count,
                    compression: Compression::Repeated {
                        period: p,
                        count,
                        delta: d,
                        dropped_tail: self.total - count * p as u64,
                    },
                    instances: self.total,
                    unique_distances,
                    oob_fraction,
                };
            }
        }
        let compression = if self.total as usize > self.prefix.len() {
            Compression::Truncated {
                kept: self.prefix.len(),
                total: self.total,
            }
        } else {
            Compression::Full
        };
        Recorded {
            pattern: base(&self.prefix),
            delta: 0,
            count: 1,
            compression,
            instances: self.total,
            unique_distances,
            oob_fraction,
        }
    }
}

/// Smallest period `p` (with at least two whole repetitions) such that the stream is its first
/// `p` values repeated with a constant shift; returns `(p, shift)`.
pub fn find_period(s: &[u64]) -> Option<(usize, i128)> {
    let n = s.len();
    if n < 2 {
        return None;
    }
    // Differences D[i] = S[i+1] - S[i]; S repeats with shift iff D is periodic.
    let d: Vec<i128> = s
        .windows(2)
        .map(|w| i128::from(w[1]) - i128::from(w[0]))
        .collect();
    // KMP failure function: smallest period of D is len - fail[len-1].
    let m = d.len();
    let mut fail = vec![0usize; m];
    let mut k = 0usize;
    for i in 1..m {
        while k > 0 && d[i] != d[k] {
            k = fail[k - 1];
        }
        if d[i] == d[k] {
            k += 1;
        }
        fail[i] = k;
    }
    let p = m - fail[m - 1];
    // The period of S is p (D of length n-1 has period p, so S[i+p] - S[i] is constant), and
    // we want at least two whole repetitions of S's base.
    if p == 0 || 2 * p > n {
        return None;
    }
    Some((p, i128::from(s[p]) - i128::from(s[0])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(s: &[u64], cap: usize) -> Recorded {
        let mut r = Recorder::new(cap, 513);
        for &x in s {
            r.push(x);
        }
        r.finish()
    }

    #[test]
    fn repeated_sweeps_have_shift_zero() {
        let base = [17u64, 3, 9, 3, 40, 22, 1];
        let s: Vec<u64> = (0..5).flat_map(|_| base).collect();
        let r = record(&s, 1 << 20);
        assert_eq!(r.pattern, vec![16, 2, 8, 2, 39, 21, 0]);
        assert_eq!((r.delta, r.count), (0, 5));
        assert!(matches!(
            r.compression,
            Compression::Repeated {
                period: 7,
                dropped_tail: 0,
                ..
            }
        ));
        assert_eq!(r.instances, 35);
    }

    #[test]
    fn shifted_repetitions_give_the_delta() {
        let base = [5u64, 1, 8, 2];
        let s: Vec<u64> = (0..100u64).flat_map(|i| base.map(|b| b + 16 * i)).collect();
        let r = record(&s, 64); // the prefix holds 16 repetitions; the rest is verified
        assert_eq!(r.pattern, vec![4, 0, 7, 1]);
        assert_eq!((r.delta, r.count), (16, 100));
    }

    #[test]
    fn a_late_break_is_detected_beyond_the_prefix() {
        let base = [5u64, 1, 8, 2];
        let mut s: Vec<u64> = (0..100).flat_map(|_| base).collect();
        s[300] = 999;
        let r = record(&s, 64);
        assert_eq!(
            r.compression,
            Compression::Truncated {
                kept: 64,
                total: 400
            }
        );
        assert_eq!(r.count, 1);
        assert_eq!(r.pattern.len(), 64);
    }

    #[test]
    fn random_streams_stay_lists_and_partial_tails_are_dropped() {
        let mut state = 9u64;
        let s: Vec<u64> = (0..500)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                state >> 44
            })
            .collect();
        let r = record(&s, 1 << 20);
        assert_eq!(r.compression, Compression::Full);
        assert_eq!(r.pattern.len(), 500);
        assert!(r.unique_distances > 100);
        let base = [3u64, 0, 7];
        let mut s: Vec<u64> = (0..4).flat_map(|_| base).collect();
        s.extend([3, 0]);
        let r = record(&s, 1 << 20);
        assert_eq!(r.count, 4);
        assert!(matches!(
            r.compression,
            Compression::Repeated {
                dropped_tail: 2,
                ..
            }
        ));
    }

    #[test]
    fn negative_shifts_give_a_negative_delta() {
        let s: Vec<u64> = (0..10u64)
            .flat_map(|i| [1000 - 10 * i, 1003 - 10 * i])
            .collect();
        let r = record(&s, 1 << 20);
        assert_eq!((r.pattern.clone(), r.delta, r.count), (vec![0, 3], -10, 10));
        // Replay's iteration i reads origin + pattern + delta * i with origin = 10 * 9: the
        // same indices as the stream, less its minimum (910).
        let min = s.iter().min().unwrap();
        for (i, w) in s.chunks(2).enumerate() {
            let base = 90 - 10 * i as u64;
            assert_eq!([w[0] - min, w[1] - min], [base, base + 3]);
        }
    }

    #[test]
    fn oob_and_unique_distances() {
        let s = [0u64, 600, 0, 600, 1, 2];
        let r = record(&s, 1 << 20);
        // Distances +600, -600, +600, -599, +1: four distinct, four of five far (>= 513).
        assert_eq!(r.unique_distances, 4);
        assert!((r.oob_fraction - 0.8).abs() < 1e-9);
    }
}
