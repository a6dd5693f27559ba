//! `analyze` on generated traces: scores of known streams, sampled traces, the Apex-MAP fit of
//! a trace, and bad input.

use mgbench_capture::trace::{
    Access, AccessKind, Chunk, EndInfo, Mode, SampleHeader, TraceMeta, TraceWriter,
};
use mgbench_synth::analyze::{analyze, AnalyzeConfig, LocalityReport};
use mgbench_synth::apex::{ApexParams, DEFAULT_M, GRID_K, GRID_L};
use mgbench_synth::locality::ReuseMethod;
use mgbench_synth::SynthError;

use crate::common::{load, meta, randoms, temp, write_trace};

fn no_apex() -> AnalyzeConfig {
    AnalyzeConfig {
        apex: false,
        ..AnalyzeConfig::default()
    }
}

fn run(accesses: &[Access], name: &str, cfg: &AnalyzeConfig) -> LocalityReport {
    let path = temp(name);
    write_trace(&path, accesses, 4096);
    analyze(&path, cfg).unwrap()
}

#[test]
fn unit_stride_half_stride_and_random_streams() {
    let unit: Vec<Access> = (0..200_000).map(|i| load(0x401000, i)).collect();
    let r = run(&unit, "unit.mgbt", &no_apex());
    assert!(
        (r.program_locality.spatial_score - 1.0).abs() < 1e-4,
        "{}",
        r.program_locality.spatial_score
    );
    assert!(r.program_locality.temporal_score < 1e-3);
    let f = &r.program_locality.footprint;
    // 1024-access windows of unit-stride 8-byte loads touch 128 blocks each, all strided.
    assert_eq!(f.windows, 200_000u64.div_ceil(1024));
    assert!(
        (f.per_window[0].blocks as f64 - 128.0).abs() < 1.0,
        "{:?}",
        f.per_window[0]
    );
    assert!(f.strided_pct > 99.0 && f.irregular_pct < 1.0);
    assert_eq!(f.observed_blocks, 200_000 / 8);

    let half: Vec<Access> = (0..200_000).map(|i| load(0x401000, 2 * i)).collect();
    let r = run(&half, "half.mgbt", &no_apex());
    assert!((r.program_locality.spatial_score - 0.5).abs() < 1e-3);

    let random: Vec<Access> = randoms(200_000, 1 << 26, 3)
        .into_iter()
        .map(|i| load(0x401000, i))
        .collect();
    let r = run(&random, "random.mgbt", &no_apex());
    assert!(
        r.program_locality.spatial_score < 0.01,
        "{}",
        r.program_locality.spatial_score
    );
    assert!(r.program_locality.temporal_score < 0.01);
    assert!(r.program_locality.footprint.irregular_pct > 95.0);
    // A loop over 1000 words: every reuse at distance 999 (reuse_1024 jumps to ~1).
    let small: Vec<Access> = (0..100_000).map(|i| load(0x401000, i % 1000)).collect();
    let r = run(&small, "small.mgbt", &no_apex());
    let below_1024 = r
        .program_locality
        .reuse_histogram
        .below
        .iter()
        .find(|p| p.distance == 1024)
        .unwrap();
    let below_512 = r
        .program_locality
        .reuse_histogram
        .below
        .iter()
        .find(|p| p.distance == 512)
        .unwrap();
    assert!(
        below_1024.fraction > 0.98 && below_512.fraction < 0.001,
        "{below_512:?} {below_1024:?}"
    );
    // In 64-byte lines the same loop reuses at distance 124: below 128.
    let lines = r.program_locality.reuse_histogram_lines.as_ref().unwrap();
    assert!(
        lines
            .below
            .iter()
            .find(|p| p.distance == 128)
            .unwrap()
            .fraction
            > 0.98
    );
}

#[test]
fn gups_updates_score_near_zero_on_both_axes() {
    // Load + store of one instruction to one random address: one reference each.
    let mut v = Vec::new();
    for i in randoms(100_000, 1 << 24, 9) {
        v.push(load(0x402000, i));
        v.push(Access {
            kind: AccessKind::Store,
            ..load(0x402000, i)
        });
    }
    let r = run(&v, "gups.mgbt", &no_apex());
    assert_eq!(r.accesses, 200_000);
    assert_eq!(r.program_locality.references, 100_000);
    assert!(r.program_locality.spatial_score < 0.01 && r.program_locality.temporal_score < 0.01);
}

/// Writes a sampled trace: windows of `window` accesses of a unit-stride stream, `skip`
/// accesses skipped before each.
fn write_sampled(path: &std::path::Path, windows: usize, window: u32, skip: u64) {
    write_sampled_with(path, windows, window, skip, |i| i);
}

/// As [`write_sampled`], the executed stream's i-th access going to word `index(i)`.
fn write_sampled_with(
    path: &std::path::Path,
    windows: usize,
    window: u32,
    skip: u64,
    index: impl Fn(u64) -> u64,
) {
    let meta = TraceMeta {
        mode: Mode::Sampled {
            window: u64::from(window),
            period: u64::from(window) + skip,
        },
        ..meta()
    };
    let f = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::create(f, &meta).unwrap();
    let mut next = 0u64;
    for id in 0..windows as u64 {
        next += skip;
        let accesses: Vec<Access> = (0..u64::from(window))
            .map(|k| load(0x401000, index(next + k)))
            .collect();
        next += u64::from(window);
        w.write_chunk(&Chunk {
            thread: 0,
            samples: vec![SampleHeader {
                id,
                skipped_before: skip,
                len: window,
            }],
            accesses,
        })
        .unwrap();
    }
    w.write_end(&EndInfo {
        exit_code: Some(0),
        skipped: skip * windows as u64,
        ..EndInfo::default()
    })
    .unwrap();
}

#[test]
fn sampled_traces_window_by_sample_and_scale_the_footprint() {
    let path = temp("sampled.mgbt");
    write_sampled(&path, 50, 512, 4608);
    let r = analyze(&path, &no_apex()).unwrap();
    assert!((r.sample_ratio - 10.0).abs() < 1e-9, "{}", r.sample_ratio);
    let f = &r.program_locality.footprint;
    assert_eq!(f.windows, 50);
    assert_eq!(f.per_window[0].accesses, 512);
    assert_eq!(f.per_window[0].blocks, 64);
    // Observed 50 x 64 distinct blocks; the execution streamed 10x as many accesses, each
    // block once: no window sees another's blocks, so Chao2 is unbounded. The estimate is the
    // span of the seen blocks (gaps of 576 blocks filled): the stream from the first window
    // on, 32000 blocks less the 576 skipped before it. The upper estimate (growth x executed
    // accesses) is the whole stream.
    assert_eq!(f.observed_blocks, 3200);
    assert_eq!(f.estimate.method, "chao2 capped");
    assert_eq!((f.estimate.seen_once, f.estimate.seen_twice), (3200, 0));
    assert_eq!(f.estimate.span_blocks, 32_000 - 576);
    assert_eq!(f.estimated_blocks, (32_000 - 576) as f64);
    assert!((f.estimate.upper_blocks.unwrap() - 32_000.0).abs() < 1.0);
    assert!(f.total_summary().contains("Chao2 is not used"));
}

/// A word of a program that touches `blocks` 64-byte blocks at random: its i-th access.
fn random_block(i: u64, blocks: u64) -> u64 {
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x % blocks) * 8
}

#[test]
fn a_sampled_footprint_is_estimated_from_how_often_windows_see_a_block() {
    // 100 windows of 256 random accesses over 60000 blocks, 1 in 40 accesses recorded: the
    // windows see ~25000 distinct blocks, some in two or three windows; Chao2 recovers the
    // 60000 the run touched, where observed x the sample ratio would say 40 times that.
    let path = temp("sampled-random.mgbt");
    write_sampled_with(&path, 100, 256, 39 * 256, |i| random_block(i, 60_000));
    let r = analyze(&path, &no_apex()).unwrap();
    let f = &r.program_locality.footprint;
    let e = &f.estimate;
    assert_eq!(e.method, "chao2");
    assert_eq!(e.windows, 100);
    assert_eq!(e.seen_blocks, f.observed_blocks);
    assert!(e.seen_twice > 0 && e.seen_once > e.seen_twice, "{e:?}");
    let want = mgbench_synth::locality::chao2(e.seen_blocks, e.seen_once, e.seen_twice, 100);
    assert!((f.estimated_blocks - want).abs() < 1e-6);
    assert!(
        (f.estimated_blocks / 60_000.0 - 1.0).abs() < 0.1,
        "{} blocks estimated for 60000",
        f.estimated_blocks
    );
    assert!(f.estimated_blocks < e.upper_blocks.unwrap());
    let text = f.total_summary();
    assert!(
        text.contains("Chao2") && text.contains("100 sample windows"),
        "{text}"
    );
}

#[test]
fn a_single_sample_window_is_estimated_by_its_span() {
    let path = temp("sampled-one.mgbt");
    write_sampled_with(&path, 1, 512, 100_000, |i| random_block(i, 60_000));
    let r = analyze(&path, &no_apex()).unwrap();
    let f = &r.program_locality.footprint;
    // 512 random blocks of 60000: their span (gaps under 2048 filled) covers the table.
    assert_eq!(f.estimate.method, "one window");
    assert!(
        f.estimated_blocks > 55_000.0 && f.estimated_blocks <= 60_000.0,
        "{}",
        f.estimated_blocks
    );
    assert_eq!(f.estimated_blocks, f.estimate.span_blocks as f64);
    assert!(f.total_summary().contains("only sample window"));
}

#[test]
fn chao2_on_counts_whose_answer_is_known() {
    use mgbench_synth::locality::chao2;
    // Every block in every window: nothing unseen.
    assert_eq!(chao2(100, 0, 0, 10), 100.0);
    // Fewer than two windows: the observed blocks.
    assert_eq!(chao2(100, 100, 0, 1), 100.0);
    // 10 windows, Q1 = 41, Q2 = 20: 100 + 0.9 x 41 x 40 / 42.
    assert!((chao2(100, 41, 20, 10) - (100.0 + 0.9 * 41.0 * 40.0 / 42.0)).abs() < 1e-9);
}

#[test]
fn span_fills_gaps_below_its_threshold_only() {
    use mgbench_synth::locality::span_blocks;
    assert_eq!(span_blocks(&[], 10), 0);
    assert_eq!(span_blocks(&[5], 10), 1);
    // 0..=20 in one range (gaps of 10), then 40 alone (gap 20 > 10).
    assert_eq!(span_blocks(&[0, 10, 20, 40], 10), 21 + 1);
}

#[test]
fn apex_streams_in_a_trace_are_fitted_back() {
    for &(l, k) in &[(16u64, 0.05f64), (1, 1.0), (128, 0.01)] {
        let p = ApexParams { m: DEFAULT_M, l, k };
        let v: Vec<Access> = p
            .stream(1 << 17, 21)
            .map(|w| Access {
                ip: 0x401000,
                addr: 8 * w,
                size: 8,
                kind: AccessKind::Load,
            })
            .collect();
        let r = run(&v, &format!("apex-{l}-{k}.mgbt"), &AnalyzeConfig::default());
        let fit = r.program_locality.apex.unwrap();
        let li = GRID_L.iter().position(|&g| g == l).unwrap();
        let ki = GRID_K.iter().position(|&g| g == k).unwrap();
        let fl = GRID_L
            .iter()
            .position(|&g| g >= fit.l)
            .unwrap_or(GRID_L.len() - 1);
        let fk = GRID_K
            .iter()
            .position(|&g| g >= fit.k)
            .unwrap_or(GRID_K.len() - 1);
        assert!(
            li.abs_diff(fl) <= 1 && ki.abs_diff(fk) <= 1,
            "({l}, {k}) fitted as {fit:?}"
        );
        assert!(fit.residual < 0.05, "{fit:?}");
    }
}

#[test]
fn shards_reports_its_reliability() {
    let random: Vec<Access> = randoms(300_000, 1 << 22, 5)
        .into_iter()
        .map(|i| load(0x401000, i))
        .collect();
    let path = temp("shards.mgbt");
    write_trace(&path, &random, 4096);
    let exact = analyze(&path, &no_apex()).unwrap();
    let cfg = AnalyzeConfig {
        method: ReuseMethod::Shards { rate: 0.05 },
        ..no_apex()
    };
    let est = analyze(&path, &cfg).unwrap();
    assert!(
        (exact.program_locality.temporal_score - est.program_locality.temporal_score).abs() < 0.05
    );
    assert!(
        est.notes
            .iter()
            .any(|n| n.contains("SHARDS") && !n.contains("UNRELIABLE")),
        "{:?}",
        est.notes
    );
    // A hot word taking half the references defeats address sampling, and the note says so.
    let hot: Vec<Access> = randoms(300_000, 1 << 22, 6)
        .into_iter()
        .enumerate()
        .map(|(k, i)| load(0x401000, if k % 2 == 0 { 12345 } else { i }))
        .collect();
    let path = temp("shards-hot.mgbt");
    write_trace(&path, &hot, 4096);
    let est = analyze(&path, &cfg).unwrap();
    let exact = analyze(&path, &no_apex()).unwrap();
    let flagged = est.notes.iter().any(|n| n.contains("UNRELIABLE"));
    let close =
        (exact.program_locality.temporal_score - est.program_locality.temporal_score).abs() < 0.05;
    assert!(flagged || close, "{:?}", est.notes);
}

#[test]
fn by_function_and_thread_selection() {
    let mut v: Vec<Access> = (0..5000).map(|i| load(0x401000, i)).collect();
    v.extend(
        randoms(5000, 1 << 24, 4)
            .into_iter()
            .map(|i| load(0x402000, i)),
    );
    let path = temp("byfn.mgbt");
    write_trace(&path, &v, 1000);
    let r = analyze(
        &path,
        &AnalyzeConfig {
            by_function: true,
            ..no_apex()
        },
    )
    .unwrap();
    // No symbols for these addresses: one "??" row holding everything.
    assert_eq!(r.functions.len(), 1);
    assert_eq!(r.functions[0].function, "??");
    assert_eq!(r.functions[0].locality.references, 10_000);
    let e = analyze(
        &path,
        &AnalyzeConfig {
            thread: Some(7),
            ..no_apex()
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, SynthError::Empty { .. }) && e.to_string().contains("thread 7"),
        "{e}"
    );
}

#[test]
fn bad_traces_are_refused_with_the_file_named() {
    let path = temp("loc-notatrace.json");
    std::fs::write(&path, "[]").unwrap();
    let e = analyze(&path, &no_apex()).unwrap_err().to_string();
    assert!(
        e.contains("not an mgbench trace") && e.contains("loc-notatrace.json"),
        "{e}"
    );
    let e = analyze(std::path::Path::new("/nonexistent.mgbt"), &no_apex())
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot open trace /nonexistent.mgbt"), "{e}");
    let empty = temp("loc-empty.mgbt");
    write_trace(&empty, &[], 10);
    let e = analyze(&empty, &no_apex()).unwrap_err().to_string();
    assert!(e.contains("no memory accesses"), "{e}");
    let v: Vec<Access> = randoms(20_000, 1 << 20, 8)
        .into_iter()
        .map(|i| load(0x407000, i))
        .collect();
    let full = temp("loc-full.mgbt");
    write_trace(&full, &v, 2000);
    let bytes = std::fs::read(&full).unwrap();
    let cut = temp("loc-cut.mgbt");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = analyze(&cut, &no_apex()).unwrap_err().to_string();
    assert!(
        e.contains("damaged at byte") && e.contains("--allow-damaged"),
        "{e}"
    );
    let r = analyze(
        &cut,
        &AnalyzeConfig {
            allow_damaged: true,
            ..no_apex()
        },
    )
    .unwrap();
    assert!(r.accesses > 0 && r.accesses < 20_000);
    assert!(r.notes.iter().any(|n| n.contains("damaged")));
}

#[test]
fn sweeps_the_windows_rarely_see_twice_are_flagged() {
    // A stream sweeping 20000 blocks; windows of 512 accesses (64 blocks), one every 19456
    // accesses, drifting along the sweeps until the 75th lands where the first did. Over 100
    // windows many blocks are seen twice and Chao2 comes close; over 78, 97% of the seen
    // blocks are seen once, Chao2 says 4.5 times the truth, and the estimate is flagged.
    let sweep = |windows: usize| {
        let path = temp(&format!("sampled-sweeps-{windows}.mgbt"));
        write_sampled_with(&path, windows, 512, 37 * 512, |i| i % 160_000);
        analyze(&path, &no_apex())
            .unwrap()
            .program_locality
            .footprint
    };
    let f = sweep(100);
    assert_eq!(f.estimate.method, "chao2", "{:?}", f.estimate);
    assert!(
        (f.estimated_blocks / 20_000.0 - 1.0).abs() < 0.1,
        "{}",
        f.estimated_blocks
    );
    let f = sweep(78);
    assert_eq!(f.estimate.method, "chao2 sweeping", "{:?}", f.estimate);
    assert!(f.total_summary().contains("Chao2 is not used"));
    // The windows fall at 74 positions along the sweep, about 270 blocks apart: the span
    // fills the gaps.
    assert_eq!(f.estimated_blocks, f.estimate.span_blocks as f64);
    assert!(
        (f.estimated_blocks / 20_000.0 - 1.0).abs() < 0.05,
        "{}",
        f.estimated_blocks
    );
}

#[test]
fn one_line_per_page_keeps_chao2_where_the_span_overshoots() {
    // Random accesses to the first line of each of 4096 pages (64 blocks apart): the span
    // fills every gap and says 64 times too much; Chao2, the estimate here, comes close.
    let path = temp("sampled-pages.mgbt");
    write_sampled_with(&path, 100, 256, 39 * 256, |i| random_block(i, 4096) * 64);
    let r = analyze(&path, &no_apex()).unwrap();
    let f = &r.program_locality.footprint;
    assert_eq!(f.estimate.method, "chao2", "{:?}", f.estimate);
    assert!(
        (f.estimated_blocks / 4096.0 - 1.0).abs() < 0.1,
        "{}",
        f.estimated_blocks
    );
    assert!(f.estimate.span_blocks > 60 * 4096, "{:?}", f.estimate);
}
