//! What synthesis finds and keeps.

use mgbench_synth::{synthesize, to_spatter_json, PatternKind, SynthConfig, Verdict};

use crate::common::{
    load, randoms, store, temp, write_trace, write_trace_mapped, write_trace_threads,
};

fn cfg() -> SynthConfig {
    SynthConfig {
        keep_unsymbolized: true,
        ..SynthConfig::default()
    }
}

/// An SpMV-like loop: unit-stride column and value loads, the gather, a unit-stride store;
/// `sweeps` times over the same columns.
fn spmv(cols: &[u64], sweeps: usize) -> Vec<mgbench_capture::trace::Access> {
    let mut v = Vec::new();
    for _ in 0..sweeps {
        for (j, &c) in cols.iter().enumerate() {
            v.push(load(0x401000, 1_000_000 + j as u64)); // col[j]
            v.push(load(0x401004, 2_000_000 + j as u64)); // val[j]
            v.push(load(0x401008, c)); // x[col[j]]
            if j % 8 == 7 {
                v.push(store(0x40100c, (j / 8) as u64)); // y[row]
            }
        }
    }
    v
}

#[test]
fn spmv_gather_comes_out_as_columns_with_count_recovered() {
    let cols = randoms(4000, 4096, 1);
    let path = temp("spmv.mgbt");
    write_trace(&path, &spmv(&cols, 5), 3000);
    let r = synthesize(&path, &cfg()).unwrap();
    assert_eq!(r.patterns.len(), 1, "{:?}", r.candidates);
    let p = &r.patterns[0];
    assert_eq!(p.kernel, PatternKind::Gather);
    let min = *cols.iter().min().unwrap();
    assert_eq!(p.pattern, cols.iter().map(|c| c - min).collect::<Vec<_>>());
    assert_eq!((p.delta, p.count), (0, 5));
    assert_eq!(p.instances, 20_000);
    assert_eq!(p.element_size, 8);
    assert!(
        p.compression.contains("repeated 5 times"),
        "{}",
        p.compression
    );
    // The unit-stride loads and the store stream are not kept: their windows are regular except
    // at sweep boundaries (a jump back), and filter 5 drops them for their two distances.
    // (The store has too few entries per window to ever look irregular: it is no candidate.)
    for ip in ["0x401000", "0x401004", "0x40100c"] {
        if let Some(c) = r.candidates.iter().find(|c| c.ip == ip) {
            assert!(
                matches!(
                    c.verdict,
                    Verdict::FewDistances {
                        unique_distances: 2,
                        ..
                    }
                ),
                "{ip}: {:?}",
                c.verdict
            );
        }
    }
    // Filter 5's numbers are exact although pass 1 decided it (nothing was recorded): the
    // column loads step +1 except for the 4 jumps back between the 5 sweeps.
    let c = r.candidates.iter().find(|c| c.ip == "0x401000").unwrap();
    match c.verdict {
        Verdict::FewDistances { oob_fraction, .. } => {
            assert_eq!(oob_fraction, 4.0 / 19_999.0)
        }
        ref other => panic!("{other:?}"),
    }
    assert!(r.regular >= 1);
    // replay accepts the output unchanged.
    let json = to_spatter_json(&r.patterns).unwrap();
    let configs = mgbench_replay::config::parse_bytes(
        json.as_bytes(),
        std::path::Path::new("s.json"),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(configs[0].count, 5);
    assert_eq!(configs[0].kernel.effective_pattern().0.len(), 4000);
}

#[test]
fn histogram_scatter_comes_out_as_keys() {
    let keys = randoms(5000, 65536, 2);
    let mut v = Vec::new();
    for (i, &k) in keys.iter().enumerate() {
        v.push(load(0x402000, 3_000_000 + i as u64)); // keys[i]
        v.push(load(0x402004, k)); // hist[k] load
        v.push(store(0x402008, k)); // hist[k] store
    }
    let path = temp("hist.mgbt");
    write_trace(&path, &v, 4096);
    let r = synthesize(&path, &cfg()).unwrap();
    let s = r
        .patterns
        .iter()
        .find(|p| p.kernel == PatternKind::Scatter)
        .expect("scatter");
    let min = *keys.iter().min().unwrap();
    assert_eq!(s.pattern, keys.iter().map(|k| k - min).collect::<Vec<_>>());
    assert_eq!(s.count, 1);
    // The read half of the update is a gather of the same keys.
    let g = r
        .patterns
        .iter()
        .find(|p| p.kernel == PatternKind::Gather)
        .expect("gather");
    assert_eq!(g.pattern, s.pattern);
}

#[test]
fn stencils_and_strides_are_filtered_out() {
    // 5-point stencil on a 256-wide grid: distances 0, +-1 within rows, then jumps of 256 at row
    // ends for the up/down neighbours, which look irregular only once per row.
    let n = 256u64;
    let mut v = Vec::new();
    for i in 1..n - 1 {
        for j in 1..n - 1 {
            v.push(load(0x403000, (i - 1) * n + j));
            v.push(load(0x403004, (i + 1) * n + j));
            v.push(load(0x403008, i * n + j - 1));
            v.push(load(0x40300c, i * n + j + 1));
            v.push(store(0x403010, 100_000 + i * n + j));
        }
    }
    let path = temp("stencil.mgbt");
    write_trace(&path, &v, 8192);
    let r = synthesize(&path, &cfg()).unwrap();
    assert!(
        r.patterns.is_empty(),
        "{:?}",
        r.patterns.iter().map(|p| &p.name).collect::<Vec<_>>()
    );
    // Whatever was flagged (row-end jumps) is dropped for its few distinct distances.
    assert!(r.candidates.iter().all(|c| matches!(
        c.verdict,
        Verdict::FewDistances { .. } | Verdict::FewInstances { .. }
    )));
    assert!(r.filter_summary().contains("regular"));
}

/// The top N are ranked among candidates the other filters keep: an instruction flagged in
/// more windows that filter 5 drops (two distances, back and forth) takes no place from a real
/// gather flagged in fewer (NumPy's `x[idx]` gather came 12th of a script's, and was lost).
#[test]
fn the_top_n_are_ranked_among_the_kept() {
    let cols = randoms(6000, 1 << 20, 7);
    let mut v = Vec::new();
    for (j, &c) in cols.iter().enumerate() {
        v.push(load(0x405000, 100 * (j as u64 % 2))); // flagged everywhere, two distances
        if j >= 3000 {
            v.push(load(0x405004, c)); // the gather, in the second half only
        }
    }
    let path = temp("top-kept.mgbt");
    write_trace(&path, &v, 2048);
    let r = synthesize(&path, &SynthConfig { top: 1, ..cfg() }).unwrap();
    let seesaw = r.candidates.iter().find(|c| c.ip == "0x405000").unwrap();
    let gather = r.candidates.iter().find(|c| c.ip == "0x405004").unwrap();
    assert!(
        seesaw.flagged_windows > gather.flagged_windows,
        "{:?}",
        r.candidates
    );
    assert!(
        matches!(
            seesaw.verdict,
            Verdict::FewDistances {
                unique_distances: 2,
                ..
            }
        ),
        "{:?}",
        seesaw.verdict
    );
    assert_eq!(gather.verdict, Verdict::Kept);
    assert_eq!(r.patterns.len(), 1);
    assert_eq!(r.patterns[0].source.ip, "0x405004");
}

#[test]
fn thresholds_change_results_as_documented() {
    let cols = randoms(3000, 1 << 20, 3);
    let keys = randoms(3000, 1 << 20, 4);
    let mut v = Vec::new();
    for (j, (&c, &k)) in cols.iter().zip(&keys).enumerate() {
        v.push(load(0x404000, c));
        v.push(store(0x404004, k));
        if j < 500 {
            v.push(load(0x404008, k / 2)); // a rare gather: 500 instances
        }
    }
    let path = temp("thresholds.mgbt");
    write_trace(&path, &v, 2048);
    let r = synthesize(&path, &cfg()).unwrap();
    assert_eq!(r.patterns.len(), 2, "the rare gather has < 1024 instances");
    let rare = r.candidates.iter().find(|c| c.ip == "0x404008").unwrap();
    assert!(matches!(
        rare.verdict,
        Verdict::FewInstances {
            instances: 500,
            min: 1024
        }
    ));
    // Lower the bar: it is kept.
    let r = synthesize(
        &path,
        &SynthConfig {
            min_instances: 100,
            ..cfg()
        },
    )
    .unwrap();
    assert_eq!(r.patterns.len(), 3);
    // --top 1 keeps one.
    let r = synthesize(&path, &SynthConfig { top: 1, ..cfg() }).unwrap();
    assert_eq!(r.patterns.len(), 1);
    assert!(r
        .candidates
        .iter()
        .any(|c| matches!(c.verdict, Verdict::NotInTop { rank: 2, top: 1 })));
    // Without --keep-unsymbolized, these symbol-less instructions are all dropped.
    let r = synthesize(&path, &SynthConfig::default()).unwrap();
    assert!(r.patterns.is_empty());
    assert!(r
        .candidates
        .iter()
        .all(|c| c.verdict == Verdict::Unsymbolized));
    // A huge OOB distance and many required unique distances drop everything.
    let r = synthesize(
        &path,
        &SynthConfig {
            min_unique_distances: 1_000_000,
            oob_distance: u64::MAX,
            ..cfg()
        },
    )
    .unwrap();
    assert!(r.patterns.is_empty());
    // A larger row makes windows longer, so fewer windows are flagged.
    let a = synthesize(&path, &cfg()).unwrap();
    let b = synthesize(
        &path,
        &SynthConfig {
            row_bytes: 512,
            ..cfg()
        },
    )
    .unwrap();
    let fw = |r: &mgbench_synth::SynthReport| {
        r.candidates
            .iter()
            .find(|c| c.ip == "0x404000")
            .unwrap()
            .flagged_windows
    };
    assert!(fw(&b) < fw(&a), "{} vs {}", fw(&b), fw(&a));
}

#[test]
fn long_patterns_are_truncated_and_say_so() {
    let idx = randoms(5000, 1 << 20, 5);
    let v: Vec<_> = idx.iter().map(|&i| load(0x405000, i)).collect();
    let path = temp("long.mgbt");
    write_trace(&path, &v, 1024);
    let r = synthesize(
        &path,
        &SynthConfig {
            max_pattern: 1000,
            ..cfg()
        },
    )
    .unwrap();
    let p = &r.patterns[0];
    assert_eq!(p.pattern.len(), 1000);
    assert!(p.compression.starts_with("truncated"), "{}", p.compression);
    assert!(r.notes.iter().any(|n| n.contains("truncated")));
}

#[test]
fn thread_selection() {
    use mgbench_capture::trace::{Chunk, SampleHeader, TraceWriter};
    let path = temp("threads.mgbt");
    let f = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::create(f, &crate::common::meta()).unwrap();
    for (t, ip) in [(0u32, 0x406000u64), (1, 0x406100)] {
        let acc: Vec<_> = randoms(2000, 1 << 16, u64::from(t) + 9)
            .into_iter()
            .map(|i| load(ip, i))
            .collect();
        w.write_chunk(&Chunk {
            thread: t,
            samples: vec![SampleHeader {
                id: 0,
                skipped_before: 0,
                len: 2000,
            }],
            accesses: acc,
        })
        .unwrap();
    }
    drop(w);
    let all = synthesize(&path, &cfg()).unwrap();
    assert_eq!(all.patterns.len(), 2);
    let one = synthesize(
        &path,
        &SynthConfig {
            thread: Some(1),
            ..cfg()
        },
    )
    .unwrap();
    assert_eq!(one.patterns.len(), 1);
    assert_eq!(one.patterns[0].source.ip, "0x406100");
}

/// An instruction whose every access is in the main thread's stack (a push at call depths
/// that vary) is no data structure's scatter: dropped, unless `keep_stack`; the heap gather
/// beside it is kept.
#[test]
fn stack_only_candidates_are_dropped() {
    use mgbench_capture::trace::{Access, AccessKind, Mapping};
    let stack = Mapping {
        start: 0x7000_0000,
        end: 0x7080_0000,
        offset: 0,
        path: "[stack]".into(),
        perms: "rw-p".into(),
    };
    // QEMU's own stack is listed too, far above: the lowest [stack] is the guest's.
    let host_stack = Mapping {
        start: 0x7ffc_0000_0000,
        end: 0x7ffc_0002_1000,
        path: "[stack]".into(),
        ..stack.clone()
    };
    let depths = randoms(20_000, 4096, 7);
    let cols = randoms(20_000, 4096, 3);
    let mut v = Vec::new();
    for (&d, &c) in depths.iter().zip(&cols) {
        // push rbp at a depth of d frames of 64 bytes below the stack's top.
        v.push(Access {
            ip: 0x402000,
            addr: stack.end - 8 - 64 * d,
            size: 8,
            kind: AccessKind::Store,
        });
        v.push(load(0x402010, c));
    }
    let path = temp("stack.mgbt");
    write_trace_mapped(&path, &[stack, host_stack], &v, 4096);
    let r = synthesize(&path, &cfg()).unwrap();
    assert_verdicts(
        &r,
        &[("0x402000", Verdict::Stack), ("0x402010", Verdict::Kept)],
    );
    assert_eq!(r.patterns.len(), 1);
    assert!(
        r.filter_summary().contains("1 in the stack only"),
        "{}",
        r.filter_summary()
    );
    let keep = SynthConfig {
        keep_stack: true,
        ..cfg()
    };
    let r = synthesize(&path, &keep).unwrap();
    assert_eq!(r.patterns.len(), 2, "{:?}", r.candidates);
}

/// Other threads' stacks count too: a capture names each `[thread stack]` inside the
/// anonymous memory that holds it (its TLS above stays anonymous). The same push, run by two
/// threads on their own stacks, is dropped; a gather from the memory above the thread's
/// stack, and one from the other thread's stack (a shared local), are kept.
#[test]
fn thread_stacks_count_as_stacks() {
    use mgbench_capture::trace::{Access, AccessKind, Mapping};
    let main = Mapping {
        start: 0x7000_0000,
        end: 0x7080_0000,
        offset: 0,
        path: "[stack]".into(),
        perms: "rw-p".into(),
    };
    let anon = Mapping {
        start: 0x5000_1000,
        end: 0x5080_0000,
        path: String::new(),
        ..main.clone()
    };
    let thread = Mapping {
        end: 0x507f_0000,
        path: "[thread stack]".into(),
        ..anon.clone()
    };
    let depths = randoms(20_000, 4096, 7);
    let cols = randoms(20_000, 4096, 3);
    let push = |top: u64, d: u64| Access {
        ip: 0x402000,
        addr: top - 8 - 64 * d,
        size: 8,
        kind: AccessKind::Store,
    };
    let (mut t0, mut t1) = (Vec::new(), Vec::new());
    for (&d, &c) in depths.iter().zip(&cols) {
        t0.push(push(main.end, d));
        t1.push(push(thread.end, d));
        // Above the thread's stack (TLS, anonymous), and in the main thread's stack.
        t1.push(Access {
            ip: 0x402010,
            addr: thread.end + 8 * c,
            size: 8,
            kind: AccessKind::Load,
        });
        t1.push(Access {
            ip: 0x402020,
            addr: main.start + 64 * c,
            size: 8,
            kind: AccessKind::Load,
        });
    }
    let mut chunks = Vec::new();
    for (a, b) in t0.chunks(4096).zip(t1.chunks(4096 * 3)) {
        chunks.push((0, a));
        chunks.push((1, b));
    }
    let path = temp("thread-stack.mgbt");
    // The anonymous memory, then its named part (both are in a capture's mappings).
    write_trace_threads(&path, &[main, anon, thread], &chunks);
    let r = synthesize(&path, &cfg()).unwrap();
    assert_verdicts(
        &r,
        &[
            ("0x402000", Verdict::Stack),
            ("0x402010", Verdict::Kept),
            ("0x402020", Verdict::Kept),
        ],
    );
}

/// The dynamic loader's start-up work (relocations, symbol lookups, which a debug file names)
/// is not the program's: dropped unless `keep_loader`, next to the same gather elsewhere.
#[test]
fn dynamic_loader_candidates_are_dropped() {
    use mgbench_capture::trace::Mapping;
    let code = |start: u64, path: &str| Mapping {
        start,
        end: start + 0x1000,
        offset: 0,
        path: path.into(),
        perms: "r-xp".into(),
    };
    let maps = [
        code(0x7000_0000, "/nowhere/ld-linux-x86-64.so.2"),
        code(0x6000_0000, "/nowhere/libwork.so"),
    ];
    let cols = randoms(20_000, 4096, 3);
    let v: Vec<_> = cols
        .iter()
        .flat_map(|&c| [load(0x7000_0010, c), load(0x6000_0010, c)])
        .collect();
    let path = temp("loader.mgbt");
    write_trace_mapped(&path, &maps, &v, 4096);
    // (No symbols in files that do not exist: kept as unsymbolized to reach the filter.)
    let unsym = SynthConfig {
        keep_unsymbolized: true,
        ..cfg()
    };
    let r = synthesize(&path, &unsym).unwrap();
    assert_verdicts(
        &r,
        &[
            ("0x70000010", Verdict::Loader),
            ("0x60000010", Verdict::Kept),
        ],
    );
    assert!(r.filter_summary().contains("1 in the dynamic loader"));
    let keep = SynthConfig {
        keep_loader: true,
        ..unsym
    };
    let r = synthesize(&path, &keep).unwrap();
    assert_verdicts(
        &r,
        &[("0x70000010", Verdict::Kept), ("0x60000010", Verdict::Kept)],
    );
}

/// A gather in code without a symbol (a stripped library's internal function): dropped by
/// default with a note that says where it is and how to keep it, and named by its file and
/// its address there, which stay the same from run to run, when kept.
#[test]
fn unnamed_candidates_are_placed_in_their_file() {
    use mgbench_capture::trace::Mapping;
    // This test's own executable: its first page holds headers, which no function covers.
    let exe = std::env::current_exe().unwrap();
    let file = exe.file_name().unwrap().to_str().unwrap().to_string();
    let maps = [Mapping {
        start: 0x7000_0000,
        end: 0x7000_1000,
        offset: 0,
        path: exe.display().to_string(),
        perms: "r-xp".into(),
    }];
    let v: Vec<_> = randoms(20_000, 4096, 3)
        .into_iter()
        .map(|c| load(0x7000_0100, c))
        .collect();
    let path = temp("unnamed.mgbt");
    write_trace_mapped(&path, &maps, &v, 4096);
    let r = synthesize(&path, &SynthConfig::default()).unwrap();
    assert!(r.patterns.is_empty(), "{:?}", r.candidates);
    let place = format!("{file}+0x100");
    assert!(
        r.notes.iter().any(
            |n| n.contains("1 candidate(s) were dropped for having no symbol")
                && n.contains("no named one is left")
                && n.contains(&place)
                && n.contains("--keep-unsymbolized")
        ),
        "{:?}",
        r.notes
    );
    // (The tests' configuration keeps them.)
    let r = synthesize(&path, &cfg()).unwrap();
    assert_eq!(r.patterns.len(), 1);
    assert_eq!(r.patterns[0].name, format!("{place}-gather"));
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

/// Each candidate instruction got its verdict.
fn assert_verdicts(r: &mgbench_synth::SynthReport, want: &[(&str, Verdict)]) {
    for (ip, verdict) in want {
        let got = r
            .candidates
            .iter()
            .find(|c| c.ip == *ip)
            .map(|c| &c.verdict);
        assert_eq!(got, Some(verdict), "{ip}: {:?}", r.candidates);
    }
}
