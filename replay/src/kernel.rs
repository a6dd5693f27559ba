//! The gather/scatter kernels: buffers, one timed execution, and a serial reference.
//!
//! Each kernel works on one thread's static block of the outer `count` loop
//! ([`crate::pool::static_range`]), exactly Spatter's loops:
//!
//! ```text
//! gather        dense[j + len*(i%wrap)]       = sparse[pattern[j] + delta*i]
//! scatter       sparse[pattern[j] + delta*i]  = dense[j + len*(i%wrap)]
//! gs            sparse_s[ps[j] + dS*i]        = sparse_g[pg[j] + dG*i]
//! multigather   dense[j + len*(i%wrap)]       = sparse[outer[inner[j]] + delta*i]
//! multiscatter  sparse[outer[inner[j]] + delta*i] = dense[j + len*(i%wrap)]
//! apex          sum += sparse[starts[i] + j]  for j < L      (reads only)
//! ```
//!
//! A delta may be negative: the base of iteration `i` is then `origin + delta * i` with
//! `origin = |delta| * (count - 1)` ([`iteration_origin`]), so the bases walk down from the top
//! of the sparse buffer to element 0 ([`Walk`]).
//!
//! Gathers read a shared sparse buffer and write a dense buffer per thread. Scatters write a
//! shared sparse buffer from several threads at once; those writes go through `AtomicU64` with
//! relaxed ordering, which compiles to the same plain 8-byte stores as C, so a racy scatter is
//! well-defined (last writer wins) rather than undefined behaviour. With `--atomic`, writes become
//! atomic read-modify-write additions (`sparse[k] += value`), whose result does not depend on
//! the thread interleaving.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::buffer::{AllocError, Buffer};
use crate::config::{iteration_origin, Kernel, RunConfig};
use crate::plan::Footprint;
use crate::pool::{static_range, Pool};

/// How scatter-like kernels write the sparse buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Plain stores; concurrent writes to one element race (last writer wins).
    Store,
    /// Atomic `+=` (a compare-and-swap loop on the f64 bits).
    AtomicAdd,
}

// `as_atomic` reinterprets f64 storage as AtomicU64: equal size, and f64 at least as aligned.
const _: () = assert!(std::mem::size_of::<f64>() == std::mem::size_of::<AtomicU64>());
const _: () = assert!(std::mem::align_of::<f64>() >= std::mem::align_of::<AtomicU64>());

/// Views an exclusively borrowed f64 slice as atomics that several threads may write.
pub(crate) fn as_atomic(values: &mut [f64]) -> &[AtomicU64] {
    // SAFETY: size and alignment match (checked at compile time above); every bit pattern is a
    // valid u64; and the &mut borrow guarantees no other reference sees the memory while the
    // returned shared atomic view lives. This is what `AtomicU64::from_mut_slice` does.
    unsafe { &*(values as *mut [f64] as *const [AtomicU64]) }
}

/// Initial value of sparse element `k` (distinct, exactly representable, cheap).
pub fn sparse_init(k: usize) -> f64 {
    (k % (1 << 20)) as f64
}

/// Initial value of dense element `k`.
pub fn dense_init(k: usize) -> f64 {
    (k % 1024) as f64 + 0.5
}

/// The buffers one configuration needs, allocated and first-touched by the pool's threads.
pub struct Buffers {
    /// The sparse buffer (gs: the gather side).
    pub sparse: Buffer,
    /// gs only: the scatter side.
    pub sparse_scatter: Buffer,
    /// One dense buffer per thread (empty for gs).
    pub dense: Vec<Buffer>,
}

impl Buffers {
    /// Allocates zeroed buffers and initialises them in parallel so each thread first-touches
    /// the part it mostly uses (pages land on its NUMA node).
    pub fn allocate(pool: &Pool, footprint: &Footprint) -> Result<Buffers, AllocError> {
        let threads = pool.threads();
        let mut sparse = Buffer::zeroed(footprint.sparse_elems)?;
        let mut sparse_scatter = Buffer::zeroed(footprint.sparse_scatter_elems)?;
        let mut dense = (0..threads)
            .map(|_| Buffer::zeroed(footprint.dense_elems_per_thread))
            .collect::<Result<Vec<_>, _>>()?;
        parallel_fill(pool, &mut sparse, sparse_init);
        parallel_fill(pool, &mut sparse_scatter, sparse_init);
        pool.broadcast_mut(&mut dense, |_, d| {
            for (k, x) in d.iter_mut().enumerate() {
                *x = dense_init(k);
            }
        });
        Ok(Buffers {
            sparse,
            sparse_scatter,
            dense,
        })
    }
}

/// Fills `values[k] = f(k)`, each thread its static block.
pub(crate) fn parallel_fill(pool: &Pool, values: &mut [f64], f: fn(usize) -> f64) {
    let threads = pool.threads();
    let total = values.len();
    let mut blocks = split_mut(values, threads);
    pool.broadcast_mut(&mut blocks, |tid, block| {
        let start = static_range(total, threads, tid).start;
        for (k, x) in block.iter_mut().enumerate() {
            *x = f(start + k);
        }
    });
}

/// Splits a slice into the static blocks of `threads` threads.
pub(crate) fn split_mut<T>(mut values: &mut [T], threads: usize) -> Vec<&mut [T]> {
    let total = values.len();
    let mut out = Vec::with_capacity(threads);
    for t in 0..threads {
        let r = static_range(total, threads, t);
        let (head, tail) = std::mem::take(&mut values).split_at_mut(r.len());
        out.push(head);
        values = tail;
    }
    out
}

/// Splits a shared slice into the static blocks of `threads` threads.
pub(crate) fn split<T>(values: &[T], threads: usize) -> Vec<&[T]> {
    (0..threads)
        .map(|t| &values[static_range(values.len(), threads, t)])
        .collect()
}

/// Runs the whole count loop of `config` once on the pool.
pub fn execute(pool: &Pool, config: &RunConfig, buffers: &mut Buffers, mode: WriteMode) {
    let threads = pool.threads();
    let count = config.count;
    let wrap = config.wrap;
    match &config.kernel {
        Kernel::Gather { pattern, delta } => {
            let sparse = &buffers.sparse;
            let walk = Walk::new(*delta, count);
            pool.broadcast_mut(&mut buffers.dense, |tid, dense| {
                let iters = static_range(count, threads, tid);
                gather(sparse, dense, pattern, walk, wrap, iters);
            });
        }
        Kernel::MultiGather {
            outer,
            inner,
            delta,
        } => {
            let sparse = &buffers.sparse;
            let walk = Walk::new(*delta, count);
            pool.broadcast_mut(&mut buffers.dense, |tid, dense| {
                let iters = static_range(count, threads, tid);
                multi_gather(sparse, dense, outer, inner, walk, wrap, iters);
            });
        }
        Kernel::Scatter { pattern, delta } => {
            let sparse = as_atomic(&mut buffers.sparse);
            let dense = &buffers.dense;
            let walk = Walk::new(*delta, count);
            pool.broadcast(|tid| {
                let iters = static_range(count, threads, tid);
                scatter(sparse, &dense[tid], pattern, walk, wrap, iters, mode);
            });
        }
        Kernel::MultiScatter {
            outer,
            inner,
            delta,
        } => {
            let sparse = as_atomic(&mut buffers.sparse);
            let dense = &buffers.dense;
            let walk = Walk::new(*delta, count);
            pool.broadcast(|tid| {
                let iters = static_range(count, threads, tid);
                multi_scatter(sparse, &dense[tid], outer, inner, walk, wrap, iters, mode);
            });
        }
        Kernel::GatherScatter {
            gather: pg,
            scatter: ps,
            delta_gather,
            delta_scatter,
        } => {
            let src = &buffers.sparse;
            let dst = as_atomic(&mut buffers.sparse_scatter);
            let (wg, ws) = (
                Walk::new(*delta_gather, count),
                Walk::new(*delta_scatter, count),
            );
            pool.broadcast(|tid| {
                let iters = static_range(count, threads, tid);
                gather_scatter(src, dst, pg, ps, wg, ws, iters, mode);
            });
        }
        Kernel::Apex(a) => {
            let sparse = &buffers.sparse;
            let l = a.params.l as usize;
            pool.broadcast(|tid| {
                let starts = &a.starts[static_range(a.starts.len(), threads, tid)];
                // The sum is the kernel's only output: keep it alive so the reads stay.
                std::hint::black_box(crate::apex::sum_blocks(sparse, starts, l));
            });
        }
    }
}

/// Where each iteration's base lies in the sparse buffer: `origin + delta * i`. The plan sized
/// the buffer so that every base (plus every pattern index) is inside it, whatever the sign of
/// delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    pub origin: usize,
    pub delta: isize,
}

impl Walk {
    /// The walk of a `count`-iteration loop with `delta`.
    pub fn new(delta: i64, count: usize) -> Walk {
        Walk {
            origin: iteration_origin(delta, count),
            delta: delta as isize,
        }
    }

    /// Base of iteration `i`. Wrapping arithmetic gives the exact result whenever it is a valid
    /// index, which `block_fits` (or a slice bound check) verifies before it is used.
    #[inline(always)]
    pub fn base(self, i: usize) -> usize {
        self.origin
            .wrapping_add((self.delta as usize).wrapping_mul(i))
    }

    /// Lowest and highest base over the iterations `iters` (not empty).
    fn base_range(self, iters: &std::ops::Range<usize>) -> (i128, i128) {
        let at = |i: usize| self.origin as i128 + self.delta as i128 * i as i128;
        let (a, b) = (at(iters.start), at(iters.end - 1));
        (a.min(b), a.max(b))
    }
}

/// Row of the dense buffer for iteration `i`, advanced without a division per iteration.
#[derive(Clone, Copy)]
struct WrapRow {
    row: usize,
    wrap: usize,
}

impl WrapRow {
    fn at(i: usize, wrap: usize) -> WrapRow {
        WrapRow {
            row: i % wrap,
            wrap,
        }
    }
    #[inline(always)]
    fn advance(&mut self) {
        self.row += 1;
        if self.row == self.wrap {
            self.row = 0;
        }
    }
}

#[inline(always)]
fn store(slot: &AtomicU64, value: f64, mode: WriteMode) {
    match mode {
        WriteMode::Store => slot.store(value.to_bits(), Ordering::Relaxed),
        WriteMode::AtomicAdd => {
            let mut current = slot.load(Ordering::Relaxed);
            loop {
                let next = (f64::from_bits(current) + value).to_bits();
                match slot.compare_exchange_weak(
                    current,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(seen) => current = seen,
                }
            }
        }
    }
}

/// Checks, once per block, every sparse index the block will use (lowest and highest base plus
/// the pattern's extremes), so the inner loops may skip bounds checks. Returns false for an
/// empty block. Panics on a planning bug rather than touch memory out of bounds (the plan
/// already refused configurations that do not fit).
fn block_fits(
    what: &str,
    pattern: &[usize],
    walk: Walk,
    iters: &std::ops::Range<usize>,
    sparse_len: usize,
) -> bool {
    if iters.is_empty() {
        return false;
    }
    let (Some(&lo), Some(&hi)) = (pattern.iter().min(), pattern.iter().max()) else {
        return false;
    };
    let (first, last) = walk.base_range(iters);
    let (bottom, top) = (first + lo as i128, last + hi as i128);
    assert!(
        bottom >= 0 && top < sparse_len as i128,
        "{what}: block reaches sparse indices {bottom}..={top} of {sparse_len} (planning bug)"
    );
    true
}

/// Calls `body(i, row)` for each iteration with its dense row; with wrap 1 the row is fixed,
/// so the loop carries no modulo or re-slicing.
///
/// After each iteration the row's address goes through `black_box`: otherwise the compiler may
/// prove that iteration i+1 overwrites everything iteration i stored (wrap 1, nobody reads the
/// row in between) and delete all but the last iteration, loads included. It did exactly that
/// for 8-element patterns, reporting petabytes per second. The barrier emits no instruction.
#[inline(always)]
fn for_each_row<F: FnMut(usize, &mut [f64])>(
    dense: &mut [f64],
    len: usize,
    wrap: usize,
    iters: std::ops::Range<usize>,
    mut body: F,
) {
    if wrap == 1 {
        let dst = &mut dense[..len];
        for i in iters {
            body(i, dst);
            std::hint::black_box(dst.as_mut_ptr());
        }
    } else {
        let mut row = WrapRow::at(iters.start, wrap);
        for i in iters {
            let dst = &mut dense[len * row.row..len * (row.row + 1)];
            body(i, dst);
            std::hint::black_box(dst.as_mut_ptr());
            row.advance();
        }
    }
}

/// Gather for the iterations `iters`. Indices were validated against `sparse.len()` by the plan
/// and are checked again once per block (block_fits) before the unchecked inner loops.
pub(crate) fn gather(
    sparse: &[f64],
    dense: &mut [f64],
    pattern: &[usize],
    walk: Walk,
    wrap: usize,
    iters: std::ops::Range<usize>,
) {
    if !block_fits("gather", pattern, walk, &iters, sparse.len()) {
        return;
    }
    // Short patterns are the common case (UNIFORM:8:x, 16-wide vector gathers in traces): a
    // fixed length unrolls the inner loop completely.
    if let Ok(p) = <&[usize; 8]>::try_from(pattern) {
        gather_fixed(sparse, dense, p, walk, wrap, iters);
    } else if let Ok(p) = <&[usize; 16]>::try_from(pattern) {
        gather_fixed(sparse, dense, p, walk, wrap, iters);
    } else {
        let src = sparse.as_ptr();
        for_each_row(dense, pattern.len(), wrap, iters, |i, dst| {
            let base = walk.base(i);
            for (d, &p) in dst.iter_mut().zip(pattern) {
                // SAFETY: every base + p of the block lies in 0..sparse.len(), checked by
                // block_fits in gather().
                *d = unsafe { *src.add(base + p) };
            }
        });
    }
}

#[inline(always)]
fn gather_fixed<const N: usize>(
    sparse: &[f64],
    dense: &mut [f64],
    pattern: &[usize; N],
    walk: Walk,
    wrap: usize,
    iters: std::ops::Range<usize>,
) {
    let src = sparse.as_ptr();
    for_each_row(dense, N, wrap, iters, |i, dst| {
        let base = walk.base(i);
        if let Ok(dst) = <&mut [f64; N]>::try_from(dst) {
            for j in 0..N {
                // SAFETY: as in gather(): every base + pattern[j] was checked by block_fits.
                dst[j] = unsafe { *src.add(base + pattern[j]) };
            }
        }
    });
}

pub(crate) fn multi_gather(
    sparse: &[f64],
    dense: &mut [f64],
    outer: &[usize],
    inner: &[usize],
    walk: Walk,
    wrap: usize,
    iters: std::ops::Range<usize>,
) {
    for_each_row(dense, inner.len(), wrap, iters, |i, dst| {
        let src = &sparse[walk.base(i)..];
        for (d, &k) in dst.iter_mut().zip(inner) {
            *d = src[outer[k]];
        }
    });
}

/// Calls `body(i, row)` for each iteration with the dense row it reads (scatter side).
#[inline(always)]
fn for_each_source_row<F: FnMut(usize, &[f64])>(
    dense: &[f64],
    len: usize,
    wrap: usize,
    iters: std::ops::Range<usize>,
    mut body: F,
) {
    let mut row = WrapRow::at(iters.start, wrap);
    for i in iters {
        body(i, &dense[len * row.row..len * (row.row + 1)]);
        row.advance();
    }
}

pub(crate) fn scatter(
    sparse: &[AtomicU64],
    dense: &[f64],
    pattern: &[usize],
    walk: Walk,
    wrap: usize,
    iters: std::ops::Range<usize>,
    mode: WriteMode,
) {
    if !block_fits("scatter", pattern, walk, &iters, sparse.len()) {
        return;
    }
    for_each_source_row(dense, pattern.len(), wrap, iters, |i, src| {
        let base = walk.base(i);
        for (&v, &p) in src.iter().zip(pattern) {
            // SAFETY: base + p lies in 0..sparse.len(), checked by block_fits above.
            store(unsafe { sparse.get_unchecked(base + p) }, v, mode);
        }
    });
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn multi_scatter(
    sparse: &[AtomicU64],
    dense: &[f64],
    outer: &[usize],
    inner: &[usize],
    walk: Walk,
    wrap: usize,
    iters: std::ops::Range<usize>,
    mode: WriteMode,
) {
    for_each_source_row(dense, inner.len(), wrap, iters, |i, src| {
        let dst = &sparse[walk.base(i)..];
        for (&v, &k) in src.iter().zip(inner) {
            store(&dst[outer[k]], v, mode);
        }
    });
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn gather_scatter(
    src: &[f64],
    dst: &[AtomicU64],
    pg: &[usize],
    ps: &[usize],
    walk_gather: Walk,
    walk_scatter: Walk,
    iters: std::ops::Range<usize>,
    mode: WriteMode,
) {
    for i in iters {
        let s = &src[walk_gather.base(i)..];
        let d = &dst[walk_scatter.base(i)..];
        for (&g, &p) in pg.iter().zip(ps) {
            store(&d[p], s[g], mode);
        }
    }
}

/// Serial reference: the DESIGN formulas, written as plainly as possible, applied to freshly
/// initialised buffers for the iterations `iters` (the whole loop is `0..count`). Returns
/// (sparse, sparse_scatter, dense) afterwards. For tests.
pub fn reference(
    config: &RunConfig,
    footprint: &Footprint,
    mode: WriteMode,
    iters: std::ops::Range<usize>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut sparse: Vec<f64> = (0..footprint.sparse_elems).map(sparse_init).collect();
    let mut sparse_s: Vec<f64> = (0..footprint.sparse_scatter_elems)
        .map(sparse_init)
        .collect();
    let mut dense: Vec<f64> = (0..footprint.dense_elems_per_thread)
        .map(dense_init)
        .collect();
    let put = |slot: &mut f64, v: f64| match mode {
        WriteMode::Store => *slot = v,
        WriteMode::AtomicAdd => *slot += v,
    };
    let wrap = config.wrap;
    let count = config.count;
    // index = origin + pattern value + delta * i, in signed arithmetic (origin lifts negative
    // deltas: see iteration_origin).
    let at = |p: usize, delta: i64, i: usize| -> usize {
        let x = iteration_origin(delta, count) as i128 + p as i128 + delta as i128 * i as i128;
        usize::try_from(x).expect("reference: index below 0 (planning bug)")
    };
    match &config.kernel {
        Kernel::Gather { pattern, delta } => {
            let len = pattern.len();
            for i in iters.clone() {
                for j in 0..len {
                    dense[j + len * (i % wrap)] = sparse[at(pattern[j], *delta, i)];
                }
            }
        }
        Kernel::Scatter { pattern, delta } => {
            let len = pattern.len();
            for i in iters.clone() {
                for j in 0..len {
                    put(
                        &mut sparse[at(pattern[j], *delta, i)],
                        dense[j + len * (i % wrap)],
                    );
                }
            }
        }
        Kernel::GatherScatter {
            gather,
            scatter,
            delta_gather,
            delta_scatter,
        } => {
            for i in iters.clone() {
                for j in 0..gather.len() {
                    let v = sparse[at(gather[j], *delta_gather, i)];
                    put(&mut sparse_s[at(scatter[j], *delta_scatter, i)], v);
                }
            }
        }
        Kernel::MultiGather {
            outer,
            inner,
            delta,
        } => {
            let len = inner.len();
            for i in iters.clone() {
                for j in 0..len {
                    dense[j + len * (i % wrap)] = sparse[at(outer[inner[j]], *delta, i)];
                }
            }
        }
        Kernel::MultiScatter {
            outer,
            inner,
            delta,
        } => {
            let len = inner.len();
            for i in iters.clone() {
                for j in 0..len {
                    put(
                        &mut sparse[at(outer[inner[j]], *delta, i)],
                        dense[j + len * (i % wrap)],
                    );
                }
            }
        }
        // Reads only: the buffers are unchanged.
        Kernel::Apex(_) => {}
    }
    (sparse, sparse_s, dense)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_mut_matches_static_ranges() {
        let mut v: Vec<u32> = (0..10).collect();
        let parts = split_mut(&mut v, 3);
        let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
        assert_eq!(lens, vec![4, 3, 3]);
        assert_eq!(parts[1][0], 4);
    }

    #[test]
    fn wrap_row_advances_modulo() {
        let mut r = WrapRow::at(5, 3);
        let mut seen = vec![];
        for _ in 0..5 {
            seen.push(r.row);
            r.advance();
        }
        assert_eq!(seen, vec![2, 0, 1, 2, 0]);
    }

    #[test]
    fn atomic_add_accumulates() {
        let mut v = vec![1.5f64];
        let a = as_atomic(&mut v);
        store(&a[0], 2.0, WriteMode::AtomicAdd);
        store(&a[0], 0.25, WriteMode::AtomicAdd);
        assert_eq!(v[0], 3.75);
    }
}
