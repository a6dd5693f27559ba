//! The inverse Apex-MAP map: from an application's locality scores to the (L, K) of the
//! Apex-MAP stream ([`mgbench_replay::apex`], which also runs it) with the same scores, so the
//! application can be stood in for by a two-number benchmark.
//!
//! Weinberg et al. read (L, K) for an application off a plot by hand; here the map is computed:
//! streams over a grid of L (1..1024) and K (0.001..1) are scored by the same code that scores
//! traces ([`crate::locality::Scorer`]), the map is inverted cell by cell (see
//! [`ApexGrid::fit`]), and the fitted stream is scored again so users see the residual: how
//! good the proxy is.

use serde::{Deserialize, Serialize};

pub use mgbench_replay::apex::{ApexParams, Rng, DEFAULT_M};

use crate::locality::{ReuseMethod, Scorer};

/// Block lengths of the grid (words).
pub const GRID_L: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
/// Locality exponents of the grid.
pub const GRID_K: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];
/// Accesses generated per grid point.
pub const GRID_ACCESSES: u64 = 1 << 17;

/// Spatial and temporal scores of an Apex-MAP stream.
pub fn score(p: ApexParams, n: u64, seed: u64) -> (f64, f64) {
    let mut s = Scorer::new(ReuseMethod::Exact, false);
    for w in p.stream(n, seed) {
        s.reference(w * 8);
    }
    (s.spatial(), s.temporal())
}

/// One scored grid point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GridPoint {
    pub l: u64,
    pub k: f64,
    pub spatial: f64,
    pub temporal: f64,
}

/// The scored grid for memory size `m`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApexGrid {
    pub m: u64,
    pub points: Vec<GridPoint>,
}

/// Scores every grid point (on `threads` threads).
pub fn grid(m: u64, accesses: u64, threads: usize) -> ApexGrid {
    let params: Vec<(u64, f64)> = GRID_L
        .iter()
        .flat_map(|&l| GRID_K.iter().map(move |&k| (l, k)))
        .collect();
    let threads = threads.clamp(1, params.len());
    let mut points = vec![None; params.len()];
    std::thread::scope(|s| {
        let chunks: Vec<&mut [Option<GridPoint>]> =
            points.chunks_mut(params.len().div_ceil(threads)).collect();
        let mut start = 0;
        for chunk in chunks {
            let ps = &params[start..start + chunk.len()];
            start += chunk.len();
            s.spawn(move || {
                for (slot, &(l, k)) in chunk.iter_mut().zip(ps) {
                    let (spatial, temporal) = score(ApexParams { m, l, k }, accesses, 0xA9E7 ^ l);
                    *slot = Some(GridPoint {
                        l,
                        k,
                        spatial,
                        temporal,
                    });
                }
            });
        }
    });
    ApexGrid {
        m,
        points: points.into_iter().flatten().collect(),
    }
}

/// The proxy for an application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApexFit {
    pub l: u64,
    pub k: f64,
    pub m: u64,
    /// Scores of the fitted Apex-MAP stream (generated and scored again).
    pub spatial: f64,
    pub temporal: f64,
    /// Euclidean distance in (spatial, temporal) between the application and the proxy.
    pub residual: f64,
    /// "interpolated" (solved inside a grid cell) or "nearest" (a grid point).
    pub method: String,
}

impl ApexGrid {
    fn at(&self, li: usize, ki: usize) -> Option<&GridPoint> {
        self.points.get(li * GRID_K.len() + ki)
    }

    /// Inverts the map: the (L, K) whose Apex-MAP stream has these scores. In each grid cell
    /// that encloses the target, the cell's bilinear interpolation is solved for its cell
    /// coordinates and L, K are interpolated on a log scale; the nearest grid points are
    /// candidates too. Each candidate stream is generated and scored again, and the one that
    /// lands closest to the target is the fit; distances are taken after [`warp`], and the
    /// residual reported is the plain (spatial, temporal) distance of the regenerated stream.
    pub fn fit(&self, spatial: f64, temporal: f64) -> Option<ApexFit> {
        let target = warp(spatial, temporal);
        // The map folds (several cells can contain the target), so every solution is a
        // candidate, with the three nearest grid points; the candidate whose regenerated stream
        // lands closest to the target wins.
        let mut candidates: Vec<(u64, f64, &'static str)> = Vec::new();
        for li in 0..GRID_L.len() - 1 {
            for ki in 0..GRID_K.len() - 1 {
                let (Some(a), Some(b), Some(c), Some(d)) = (
                    self.at(li, ki),
                    self.at(li + 1, ki),
                    self.at(li, ki + 1),
                    self.at(li + 1, ki + 1),
                ) else {
                    continue;
                };
                let corners = [
                    warp(a.spatial, a.temporal),
                    warp(b.spatial, b.temporal),
                    warp(c.spatial, c.temporal),
                    warp(d.spatial, d.temporal),
                ];
                if let Some((u, v)) = invert_bilinear(corners, target) {
                    let log_l =
                        (GRID_L[li] as f64).log2() * (1.0 - u) + (GRID_L[li + 1] as f64).log2() * u;
                    let k = (GRID_K[ki].ln() * (1.0 - v) + GRID_K[ki + 1].ln() * v).exp();
                    candidates.push((
                        log_l.exp2().round().max(1.0) as u64,
                        round_k(k),
                        "interpolated",
                    ));
                }
            }
        }
        let mut by_distance: Vec<&GridPoint> = self.points.iter().collect();
        by_distance.sort_by(|a, b| {
            warped_distance(warp(a.spatial, a.temporal), target)
                .total_cmp(&warped_distance(warp(b.spatial, b.temporal), target))
        });
        candidates.extend(by_distance.iter().take(3).map(|p| (p.l, p.k, "nearest")));
        candidates.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        candidates
            .into_iter()
            .map(|(l, k, method)| {
                let (s, t) = score(ApexParams { m: self.m, l, k }, GRID_ACCESSES, 0xF17);
                ApexFit {
                    l,
                    k,
                    m: self.m,
                    spatial: s,
                    temporal: t,
                    residual: ((s - spatial).powi(2) + (t - temporal).powi(2)).sqrt(),
                    method: method.to_string(),
                }
            })
            .min_by(|a, b| {
                warped_distance(warp(a.spatial, a.temporal), target)
                    .total_cmp(&warped_distance(warp(b.spatial, b.temporal), target))
            })
    }
}

/// The space the map is inverted in: spatial scores crowd towards 1 for long blocks (1 - 1/L
/// for L >= 64), where they still tell L apart precisely while the temporal score alone cannot
/// separate L from K; `-ln(1 - spatial)` spreads them out (and is about `spatial` near 0).
fn warp(spatial: f64, temporal: f64) -> (f64, f64) {
    (-(1.0 - spatial.clamp(0.0, 1.0) + 1e-3).ln(), temporal)
}

fn warped_distance(a: (f64, f64), b: (f64, f64)) -> f64 {
    (a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)
}

/// K to four significant figures (enough for the map's resolution, readable in a config).
fn round_k(k: f64) -> f64 {
    let k = k.clamp(1e-4, 1.0);
    let scale = 10f64.powi(3 - k.log10().floor() as i32);
    (k * scale).round() / scale
}

/// Solves `P(u, v) = target` for the bilinear patch with corners p00, p10, p01, p11
/// (`P = (1-u)(1-v) p00 + u(1-v) p10 + (1-u) v p01 + u v p11`); `Some((u, v))` when the solution
/// lies in the unit square.
fn invert_bilinear(p: [(f64, f64); 4], target: (f64, f64)) -> Option<(f64, f64)> {
    let [p00, p10, p01, p11] = p;
    let f = |u: f64, v: f64| {
        let x = (1.0 - u) * (1.0 - v) * p00.0
            + u * (1.0 - v) * p10.0
            + (1.0 - u) * v * p01.0
            + u * v * p11.0;
        let y = (1.0 - u) * (1.0 - v) * p00.1
            + u * (1.0 - v) * p10.1
            + (1.0 - u) * v * p01.1
            + u * v * p11.1;
        (x - target.0, y - target.1)
    };
    let (mut u, mut v) = (0.5, 0.5);
    for _ in 0..30 {
        let (fx, fy) = f(u, v);
        if fx.abs() < 1e-9 && fy.abs() < 1e-9 {
            break;
        }
        // Jacobian.
        let dxu = (1.0 - v) * (p10.0 - p00.0) + v * (p11.0 - p01.0);
        let dxv = (1.0 - u) * (p01.0 - p00.0) + u * (p11.0 - p10.0);
        let dyu = (1.0 - v) * (p10.1 - p00.1) + v * (p11.1 - p01.1);
        let dyv = (1.0 - u) * (p01.1 - p00.1) + u * (p11.1 - p10.1);
        let det = dxu * dyv - dxv * dyu;
        if det.abs() < 1e-15 {
            return None;
        }
        u -= (fx * dyv - fy * dxv) / det;
        v -= (fy * dxu - fx * dyu) / det;
        if !u.is_finite() || !v.is_finite() {
            return None;
        }
    }
    let (fx, fy) = f(u, v);
    let inside = (-1e-6..=1.0 + 1e-6).contains(&u) && (-1e-6..=1.0 + 1e-6).contains(&v);
    (inside && fx.abs() < 1e-6 && fy.abs() < 1e-6).then_some((u.clamp(0.0, 1.0), v.clamp(0.0, 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_move_with_l_and_k() {
        let m = 1 << 20;
        let (s1, _) = score(ApexParams { m, l: 1, k: 1.0 }, 1 << 15, 3);
        let (s64, _) = score(ApexParams { m, l: 64, k: 1.0 }, 1 << 15, 3);
        assert!(s1 < 0.05 && s64 > 0.9, "{s1} {s64}");
        let (_, t_wide) = score(ApexParams { m, l: 1, k: 1.0 }, 1 << 15, 3);
        let (_, t_tight) = score(ApexParams { m, l: 1, k: 0.001 }, 1 << 15, 3);
        assert!(t_tight > t_wide + 0.5, "{t_tight} {t_wide}");
    }
}

#[cfg(test)]
mod fit_tests {
    use super::*;

    /// Index distance between two grid values.
    fn steps<T: PartialOrd + Copy>(grid: &[T], a: T, b: T) -> usize {
        let i = grid.iter().position(|&g| g >= a).unwrap_or(grid.len() - 1);
        let j = grid.iter().position(|&g| g >= b).unwrap_or(grid.len() - 1);
        i.abs_diff(j)
    }

    #[test]
    fn fits_round_trip_within_one_grid_step() {
        let t = std::time::Instant::now();
        let g = grid(DEFAULT_M, GRID_ACCESSES, 2);
        let built = t.elapsed();
        assert_eq!(g.points.len(), GRID_L.len() * GRID_K.len());
        // On grid: the same stream, another seed.
        for &(l, k) in &[
            (1u64, 1.0f64),
            (8, 0.05),
            (64, 0.01),
            (256, 0.5),
            (4, 0.002),
            (128, 0.01),
            (512, 0.002),
            (1024, 0.1),
        ] {
            let (s, tt) = score(ApexParams { m: DEFAULT_M, l, k }, GRID_ACCESSES, 99);
            let f = g.fit(s, tt).unwrap();
            assert!(
                steps(&GRID_L, l, f.l) <= 1 && steps(&GRID_K, k, f.k) <= 1,
                "({l}, {k}) fitted as ({}, {}) residual {} {}",
                f.l,
                f.k,
                f.residual,
                f.method
            );
        }
        // Off grid: between grid points, fitted to a neighbour.
        for &(l, k) in &[(6u64, 0.03f64), (48, 0.3), (3, 0.007)] {
            let (s, tt) = score(ApexParams { m: DEFAULT_M, l, k }, GRID_ACCESSES, 7);
            let f = g.fit(s, tt).unwrap();
            // Within one grid step: between the grid values that bracket the true value.
            let lo_l = GRID_L[GRID_L.iter().rposition(|&g| g <= l).unwrap()];
            let hi_l = GRID_L[GRID_L.iter().position(|&g| g >= l).unwrap()];
            let lo_k = GRID_K[GRID_K.iter().rposition(|&g| g <= k).unwrap()];
            let hi_k = GRID_K[GRID_K.iter().position(|&g| g >= k).unwrap()];
            assert!(
                f.l >= lo_l / 2 && f.l <= hi_l * 2,
                "L {l} -> {} ({})",
                f.l,
                f.method
            );
            assert!(
                f.k >= lo_k / 2.5 && f.k <= hi_k * 2.5,
                "K {k} -> {} ({})",
                f.k,
                f.method
            );
            assert!(f.residual < 0.05, "residual {}", f.residual);
        }
        eprintln!("grid of {} points scored in {:?}", g.points.len(), built);
    }
}
