//! Every kernel against the plain serial reference, over deltas, wraps, counts and threads.

use mgbench_replay::config::KernelKind;
use mgbench_replay::kernel::{execute, reference, Buffers, WriteMode};
use mgbench_replay::plan::{footprint, scatter_may_race};
use mgbench_replay::pool::{static_range, Placement, Pool};

use crate::common::config;

/// Runs `json` once on `threads` threads and compares with the reference.
fn check(json: &str, threads: usize, mode: WriteMode) {
    let c = config(json);
    let f = footprint(&c).unwrap();
    let pool = Pool::new(threads, Placement::Unpinned).unwrap();
    let mut b = Buffers::allocate(&pool, &f).unwrap();
    execute(&pool, &c, &mut b, mode);
    let kind = c.kernel.kind();
    if kind.is_scatter_like() {
        // Deterministic unless plain stores race across threads.
        if mode == WriteMode::Store && scatter_may_race(&c, threads) {
            return;
        }
        let (sparse, sparse_s, _) = reference(&c, &f, mode, 0..c.count);
        if kind == KernelKind::GatherScatter {
            assert_eq!(&b.sparse_scatter[..], &sparse_s[..], "{json} t={threads}");
            assert_eq!(&b.sparse[..], &sparse[..], "gather side untouched: {json}");
        } else {
            assert_eq!(&b.sparse[..], &sparse[..], "{json} t={threads} {mode:?}");
        }
    } else {
        // Each thread's dense buffer holds the rows of its own block of iterations.
        for t in 0..threads {
            let iters = static_range(c.count, threads, t);
            let (_, _, dense) = reference(&c, &f, mode, iters.clone());
            assert_eq!(
                &b.dense[t][..],
                &dense[..],
                "{json} t={t}/{threads} {iters:?}"
            );
        }
        let (sparse, _, _) = reference(&c, &f, mode, 0..0);
        assert_eq!(
            &b.sparse[..],
            &sparse[..],
            "gathers must not write sparse: {json}"
        );
    }
}

const SHAPES: &[(i64, usize, usize)] = &[
    // (delta, wrap, count)
    (8, 1, 1),
    (8, 1, 100),
    (0, 1, 37),
    (1, 3, 50),
    (3, 4, 64),
    (13, 2, 9),
    // Negative deltas: the bases walk down from the top of the sparse buffer.
    (-8, 1, 100),
    (-1, 3, 50),
    (-5, 2, 1),
    (-13, 4, 33),
];

#[test]
fn gather_matches_reference() {
    for pattern in [
        "[0, 5, 2, 9]",
        "\"UNIFORM:8:3\"",
        "\"UNIFORM:16:1\"",
        "\"MS1:11:3,7:5\"",
    ] {
        for &(d, w, n) in SHAPES {
            for t in 1..=3 {
                check(
                    &format!(
                        r#"{{"kernel":"gather","pattern":{pattern},"delta":{d},"wrap":{w},"count":{n}}}"#
                    ),
                    t,
                    WriteMode::Store,
                );
            }
        }
    }
}

#[test]
fn scatter_matches_reference() {
    for pattern in [
        "[0, 5, 2, 9]",
        "\"UNIFORM:8:1\"",
        "\"UNIFORM:16:2\"",
        "[4, 4, 1]",
    ] {
        for &(d, w, n) in SHAPES {
            for t in 1..=3 {
                for mode in [WriteMode::Store, WriteMode::AtomicAdd] {
                    check(
                        &format!(
                            r#"{{"kernel":"scatter","pattern":{pattern},"delta":{d},"wrap":{w},"count":{n}}}"#
                        ),
                        t,
                        mode,
                    );
                }
            }
        }
    }
}

#[test]
fn gs_matches_reference() {
    for &(dg, ds, n) in &[
        (8, 8, 40),
        (1, 3, 17),
        (0, 5, 12),
        (4, 0, 9),
        (-4, 8, 21),
        (6, -1, 13),
        (-3, -7, 30),
    ] {
        for t in 1..=3 {
            for mode in [WriteMode::Store, WriteMode::AtomicAdd] {
                check(
                    &format!(
                        r#"{{"kernel":"gs","pattern-gather":[3,1,7,0],"pattern-scatter":"UNIFORM:4:2","delta-gather":{dg},"delta-scatter":{ds},"count":{n}}}"#
                    ),
                    t,
                    mode,
                );
            }
        }
    }
}

#[test]
fn multi_kernels_match_reference() {
    for &(d, w, n) in SHAPES {
        for t in 1..=3 {
            check(
                &format!(
                    r#"{{"kernel":"multigather","pattern":[10,20,30,40,50],"pattern-gather":[4,0,2,2,1],"delta":{d},"wrap":{w},"count":{n}}}"#
                ),
                t,
                WriteMode::Store,
            );
            for mode in [WriteMode::Store, WriteMode::AtomicAdd] {
                check(
                    &format!(
                        r#"{{"kernel":"multiscatter","pattern":"UNIFORM:6:3","pattern-scatter":[5,1,3],"delta":{d},"wrap":{w},"count":{n}}}"#
                    ),
                    t,
                    mode,
                );
            }
        }
    }
}

#[test]
fn atomic_scatter_sums_every_contribution_under_races() {
    // delta 0: every iteration writes the same 3 elements; 4 threads race on them.
    let c = config(r#"{"kernel":"scatter","pattern":[0,1,2],"delta":0,"count":1000}"#);
    assert!(scatter_may_race(&c, 4));
    let f = footprint(&c).unwrap();
    let pool = Pool::new(4, Placement::Unpinned).unwrap();
    let mut b = Buffers::allocate(&pool, &f).unwrap();
    execute(&pool, &c, &mut b, WriteMode::AtomicAdd);
    // sparse[k] starts at k and gains dense[k] = k + 0.5 per iteration.
    for k in 0..3 {
        assert_eq!(b.sparse[k], k as f64 + 1000.0 * (k as f64 + 0.5));
    }
}

#[test]
fn runs_are_repeatable_on_the_same_buffers() {
    // Timed runs reuse buffers: a second pass of a gather gives the same dense values.
    let c = config(r#"{"kernel":"gather","pattern":"UNIFORM:8:2","delta":4,"count":333,"wrap":5}"#);
    let f = footprint(&c).unwrap();
    let pool = Pool::new(2, Placement::Pinned).unwrap();
    let mut b = Buffers::allocate(&pool, &f).unwrap();
    execute(&pool, &c, &mut b, WriteMode::Store);
    let first: Vec<Vec<f64>> = b.dense.iter().map(|d| d.to_vec()).collect();
    execute(&pool, &c, &mut b, WriteMode::Store);
    let second: Vec<Vec<f64>> = b.dense.iter().map(|d| d.to_vec()).collect();
    assert_eq!(first, second);
}

/// Runs `json` on `threads` threads and returns (sparse, sparse_scatter, dense of thread 0).
fn run(json: &str, threads: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let c = config(json);
    let f = footprint(&c).unwrap();
    let pool = Pool::new(threads, Placement::Unpinned).unwrap();
    let mut b = Buffers::allocate(&pool, &f).unwrap();
    execute(&pool, &c, &mut b, WriteMode::Store);
    (
        b.sparse.to_vec(),
        b.sparse_scatter.to_vec(),
        b.dense[0].to_vec(),
    )
}

/// Negative deltas, worked out by hand (sparse element k starts as k, dense element k as
/// k + 0.5): iteration i's base is |delta| * (count - 1) + delta * i, so the buffer spans
/// exactly the indices used and the last iteration's base is element 0.
#[test]
fn negative_deltas_hand_computed() {
    // gather [0, 2], delta -3, count 3: bases 6, 3, 0 -> reads 6 8 | 3 5 | 0 2.
    let (sparse, _, dense) = run(
        r#"{"kernel":"gather","pattern":[0,2],"delta":-3,"count":3,"wrap":3}"#,
        1,
    );
    assert_eq!(sparse.len(), 9);
    assert_eq!(dense, vec![6.0, 8.0, 3.0, 5.0, 0.0, 2.0]);
    // scatter [1, 0], delta -2, count 2, wrap 2: bases 2, 0 -> writes 3 2 | 1 0.
    let (sparse, _, _) = run(
        r#"{"kernel":"scatter","pattern":[1,0],"delta":-2,"count":2,"wrap":2}"#,
        1,
    );
    assert_eq!(sparse, vec![3.5, 2.5, 1.5, 0.5]);
    // gs: gather [0] delta -1 reads 2, 1, 0; scatter [0] delta 2 writes 0, 2, 4.
    let (gathered, scattered, _) = run(
        r#"{"kernel":"gs","pattern-gather":[0],"pattern-scatter":[0],"delta-gather":-1,"delta-scatter":2,"count":3}"#,
        1,
    );
    assert_eq!(gathered, vec![0.0, 1.0, 2.0]);
    assert_eq!(scattered, vec![2.0, 1.0, 1.0, 3.0, 0.0]);
    // multigather: outer [10, 0], inner [1, 0] = indices 0, 10; delta -5, count 2:
    // bases 5, 0 -> reads 5 15 | 0 10.
    let (sparse, _, dense) = run(
        r#"{"kernel":"multigather","pattern":[10,0],"pattern-gather":[1,0],"delta":-5,"count":2,"wrap":2}"#,
        1,
    );
    assert_eq!(sparse.len(), 16);
    assert_eq!(dense, vec![5.0, 15.0, 0.0, 10.0]);
    // multiscatter: outer [0, 3], inner [1], delta -4, count 3: bases 8, 4, 0 -> writes
    // element 11, 7, 3 with dense rows 0, 1, 0 (wrap 2).
    let (sparse, _, _) = run(
        r#"{"kernel":"multiscatter","pattern":[0,3],"pattern-scatter":[1],"delta":-4,"count":3,"wrap":2}"#,
        1,
    );
    assert_eq!(sparse.len(), 12);
    let changed: Vec<(usize, f64)> = sparse
        .iter()
        .enumerate()
        .filter(|&(k, &v)| v != k as f64)
        .map(|(k, &v)| (k, v))
        .collect();
    assert_eq!(changed, vec![(3, 0.5), (7, 1.5), (11, 0.5)]);
    // Two threads split the count loop: thread 0 runs iterations 0..2 of 4 (bases 6, 4).
    let (_, _, dense) = run(
        r#"{"kernel":"gather","pattern":[1],"delta":-2,"count":4,"wrap":2}"#,
        2,
    );
    assert_eq!(dense, vec![7.0, 5.0]);
}
