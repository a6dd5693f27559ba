use super::*;
use crate::config::{Defaults, KernelKind};
use crate::{Input, ReplayConfig};

fn info() -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        name: "Fake GPU".into(),
        memory_bytes: 1 << 34,
        sm_count: 100,
        compute_capability: "9.0".into(),
        driver_version: "13.0".into(),
    }
}

/// A device whose kernels take 1 us of launch overhead plus bytes at 1 TB/s, so bandwidth
/// rises with size and then plateaus; it records what it was asked to run.
struct FakeDevice {
    info: DeviceInfo,
    free: u64,
    jobs: Vec<(String, usize, LaunchShape, usize)>,
    stream_calls: usize,
    /// What `launch_cost` says (None: the trait's probe, through `stream`).
    launch: Option<f64>,
}

impl FakeDevice {
    fn new(free: u64) -> FakeDevice {
        FakeDevice {
            info: info(),
            free,
            jobs: Vec::new(),
            stream_calls: 0,
            launch: None,
        }
    }
}

impl GpuDevice for FakeDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn memory(&mut self) -> Result<(u64, u64), GpuError> {
        Ok((self.free, self.info.memory_bytes))
    }
    fn time(&mut self, job: &GpuJob<'_>) -> Result<Vec<f64>, GpuError> {
        self.jobs.push((
            job.function.to_string(),
            job.config.count,
            job.shape,
            job.nruns,
        ));
        let t = 1e-6 + job.config.bytes() as f64 / 1e12;
        Ok((0..job.nruns)
            .map(|k| t * (1.0 + k as f64 * 0.01))
            .collect())
    }
    fn stream(&mut self, elements: usize, ntimes: usize) -> Result<StreamRun, GpuError> {
        self.stream_calls += 1;
        let (a, b, c, dot) = stream_gold(ntimes);
        let n = elements as f64;
        let t = |words: f64| vec![words * 8.0 * n / 2e12; ntimes - 1];
        Ok(StreamRun {
            times: [t(2.0), t(2.0), t(3.0), t(3.0), t(2.0)],
            sums: [a * n, b * n, c * n],
            dot: dot * n,
        })
    }
    fn launch_cost(&mut self) -> Result<f64, GpuError> {
        match self.launch {
            Some(l) => Ok(l),
            None => probe_launch(self),
        }
    }
}

fn inline(json: &str) -> Input {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let o = v.as_object().unwrap();
    let s = |k: &str| {
        o.get(k)
            .map(|x| x.to_string().trim_matches('"').to_string())
    };
    let u = |k: &str| o.get(k).and_then(|x| x.as_u64()).map(|x| x as usize);
    let i = |k: &str| o.get(k).and_then(|x| x.as_i64());
    Input::Inline(Box::new(crate::InlineSpec {
        kernel: s("kernel"),
        pattern: s("pattern"),
        pattern_gather: s("pattern-gather"),
        pattern_scatter: s("pattern-scatter"),
        delta: i("delta"),
        delta_gather: i("delta-gather"),
        delta_scatter: i("delta-scatter"),
        count: u("count"),
        apex_l: u("L"),
        apex_k: o.get("K").and_then(|x| x.as_f64()),
        ..Default::default()
    }))
}

fn config(inputs: Vec<Input>, stream: bool) -> ReplayConfig {
    let mut c = ReplayConfig::new(inputs);
    c.threads = 1;
    c.runs = Some(3);
    c.stream_elements = stream.then_some(StreamSize::Elements(1 << 20));
    c.out_dir = None;
    c
}

#[test]
fn launch_shape_defaults_caps_and_refuses_bad_block_sizes() {
    // One thread per element while that is below four full waves of every SM.
    assert_eq!(
        launch_shape(1000, None, 100).unwrap(),
        LaunchShape {
            block: 256,
            grid: 4
        }
    );
    assert_eq!(launch_shape(0, None, 100).unwrap().grid, 1);
    // 100 SMs x (2048 / 256) blocks x 4 waves.
    assert_eq!(launch_shape(1 << 40, None, 100).unwrap().grid, 3200);
    let s = launch_shape(1 << 20, Some(1024), 10).unwrap();
    assert_eq!((s.block, s.grid), (1024, 80));
    assert_eq!(s.threads(), 81920);
    assert_eq!(launch_shape(100, Some(32), 1).unwrap().grid, 4);
    assert!(launch_shape(1, Some(0), 1)
        .unwrap_err()
        .contains("local-work-size"));
    assert!(launch_shape(1, Some(1025), 1).unwrap_err().contains("1024"));
}

/// Naive reference: does any element get written twice?
fn repeats_naive(p: &[usize], delta: i64, count: usize) -> bool {
    let mut seen = std::collections::HashSet::new();
    for i in 0..count {
        for &x in p {
            if !seen.insert(x as i64 + delta * i as i64) {
                return true;
            }
        }
    }
    false
}

#[test]
fn repeated_writes_are_detected_exactly() {
    assert!(!writes_repeat(&[0, 1, 2, 3], 4, 100));
    assert!(writes_repeat(&[0, 1, 2, 3], 3, 2));
    assert!(writes_repeat(&[5, 2, 5], 100, 1));
    assert!(writes_repeat(&[0], 0, 2));
    assert!(!writes_repeat(&[0], 0, 1));
    assert!(writes_repeat(&[0, 8], 4, 3));
    assert!(!writes_repeat(&[0, 8], 4, 2));
    assert!(writes_repeat(&[0, 8], -4, 3));
    assert!(!writes_repeat(&[0, 1, 2, 3], -4, 100));
    let mut x = 12345u64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m) as usize
    };
    for _ in 0..2000 {
        let len = 1 + next(6);
        let p: Vec<usize> = (0..len).map(|_| next(40)).collect();
        let delta = next(23) as i64 - 11;
        let count = 1 + next(6);
        assert_eq!(
            writes_repeat(&p, delta, count),
            repeats_naive(&p, delta, count),
            "{p:?} delta {delta} count {count}"
        );
    }
}

#[test]
fn kernel_functions_follow_kind_and_repeats() {
    let f = |k: Kernel, count: usize, atomic: bool| {
        kernel_function(&RunConfig::test(k, count), atomic).map(|(name, _)| name)
    };
    let g = Kernel::Gather {
        pattern: vec![0, 0],
        delta: 0,
    };
    assert_eq!(f(g, 8, true), Ok("gather"));
    let distinct = Kernel::Scatter {
        pattern: vec![0, 1, 2],
        delta: 3,
    };
    assert_eq!(f(distinct.clone(), 8, false), Ok("scatter"));
    assert_eq!(f(distinct, 8, true), Ok("scatter_atomic"));
    let overlapping = Kernel::Scatter {
        pattern: vec![0, 1, 2],
        delta: 1,
    };
    assert_eq!(f(overlapping, 8, false), Ok("scatter_atomic"));
    let gs = Kernel::GatherScatter {
        gather: vec![0, 0],
        scatter: vec![0, 4],
        delta_gather: 0,
        delta_scatter: 8,
    };
    assert_eq!(f(gs, 4, false), Ok("gs"));
    let ms = Kernel::MultiScatter {
        outer: vec![0, 5, 5],
        inner: vec![1, 2],
        delta: 10,
    };
    assert_eq!(f(ms, 2, false), Ok("multiscatter_atomic"));
    let apex = crate::config::parse_config(
        &serde_json::json!({"kernel": "apex", "L": 4, "K": 0.5, "M": 1024}),
        Origin {
            source: "x".into(),
            index: 0,
        },
        &Defaults::default(),
    )
    .unwrap();
    assert!(kernel_function(&apex, false)
        .unwrap_err()
        .contains("without --cuda"));
}

#[test]
fn sweep_truncates_then_expands_count() {
    let c = RunConfig::test(
        Kernel::Gather {
            pattern: (0..1000).collect(),
            delta: 1000,
        },
        3,
    );
    let (steps, from) = sweep_configs(&c, 256);
    assert_eq!(from, Some(1000));
    assert_eq!(steps.len(), 10);
    let counts: Vec<usize> = steps.iter().map(|s| s.count).collect();
    assert_eq!(counts, [3, 6, 12, 24, 48, 96, 192, 384, 768, 1536]);
    for s in &steps {
        assert_eq!(s.kernel.pattern_len(), 256);
        assert_eq!(s.kernel.effective_pattern().0, (0..256).collect::<Vec<_>>());
        assert_eq!(s.bytes(), 8 * 256 * s.count as u64);
    }
    // Short patterns stay whole; multi-kernels keep the outer table and cut the inner one.
    let m = RunConfig::test(
        Kernel::MultiGather {
            outer: vec![0, 10, 20, 30],
            inner: vec![3, 2, 1, 0],
            delta: 40,
        },
        1,
    );
    let (steps, from) = sweep_configs(&m, 2);
    assert_eq!(from, Some(4));
    assert_eq!(steps[0].kernel.effective_pattern().0, vec![30, 20]);
    let (_, from) = sweep_configs(&m, 256);
    assert_eq!(from, None);
    // Counts that would overflow are left out.
    let big = RunConfig::test(
        Kernel::Gather {
            pattern: vec![0],
            delta: 0,
        },
        usize::MAX / 4,
    );
    assert_eq!(sweep_configs(&big, 8).0.len(), 3);
}

#[test]
fn plateau_is_where_bandwidth_stops_growing() {
    assert_eq!(plateau(&[1.0, 2.0, 4.0, 8.0, 9.0, 9.5, 9.4]), Some(4));
    assert_eq!(plateau(&[10.0, 9.5, 9.8]), Some(0));
    assert_eq!(plateau(&[1.0, 2.0, 4.0, 8.0]), None);
    assert_eq!(plateau(&[3.0]), Some(0));
    assert_eq!(plateau(&[]), None);
    // A late dip below 90% moves the plateau past it.
    assert_eq!(plateau(&[9.0, 10.0, 5.0, 10.0, 10.0]), Some(3));
    // Falling at larger counts (seen on an H100: a random gather whose footprint outgrows
    // the L2 as the count grows): no plateau either, and the note says which way.
    let falling = [
        377.0, 375.0, 366.0, 356.0, 346.0, 337.0, 325.0, 316.0, 304.0, 297.0,
    ];
    assert_eq!(plateau(&falling), None);
    let steps: Vec<(usize, f64)> = falling
        .iter()
        .enumerate()
        .map(|(k, &b)| (1024 << k, b))
        .collect();
    let note = no_plateau(&steps);
    assert!(note.contains("falls at larger counts"), "{note}");
    assert!(note.contains("best 377 MB/s at count 1024"), "{note}");
    assert!(note.contains("79% of it"), "{note}");
    let rising = no_plateau(&[(1, 1.0), (2, 2.0), (4, 4.0)]);
    assert!(rising.contains("still rising"), "{rising}");
}

#[test]
fn stream_accounting_and_validation() {
    let host = crate::record::Host::detect();
    let mut dev = FakeDevice::new(1 << 40);
    let r = run_gpu_stream(&mut dev, StreamSize::Elements(1000), 10, &host).unwrap();
    assert!(r.validated, "{:?}", r.notes);
    assert_eq!(r.backend, "cuda");
    assert_eq!(r.elements, 1000);
    // Fake rates: 2e12 bytes/s for every kernel = 2e6 MB/s.
    for mbs in [r.copy_mbs, r.mul_mbs, r.add_mbs, r.triad_mbs, r.dot_mbs] {
        assert!((mbs - 2e6).abs() < 1e-3, "{mbs}");
    }
    assert!((r.min_times_s[0] - 16.0 * 1000.0 / 2e12).abs() < 1e-15);
    assert!((r.min_times_s[2] - 24.0 * 1000.0 / 2e12).abs() < 1e-15);
    assert!(r.table().contains("Triad:"));
    assert_eq!(r.csv().lines().count(), 6);
    // Wrong results fail validation and say which array.
    let mut bad = dev.stream(1000, 10).unwrap();
    bad.sums[1] *= 1.01;
    let r = stream_record(&bad, 1000, 10, &info(), &host);
    assert!(!r.validated);
    assert!(r.notes[0].contains("mean of b"), "{:?}", r.notes);
    // Too large for the device: refused before running, with sizes.
    let mut small = FakeDevice::new(1 << 20);
    let e = run_gpu_stream(&mut small, StreamSize::Auto, 10, &host).unwrap_err();
    assert!(e.to_string().contains("--stream-size"), "{e}");
    assert_eq!(small.stream_calls, 0);
    let e = run_gpu_stream(&mut small, StreamSize::Elements(0), 10, &host).unwrap_err();
    assert!(e.to_string().contains("at least 1 element"), "{e}");
}

#[test]
fn gold_values_follow_babelstream_sequence() {
    let (a, b, c, dot) = stream_gold(1);
    assert!((c - (0.1 + 0.04)).abs() < 1e-15);
    assert!((b - 0.04).abs() < 1e-15);
    assert!((a - (0.04 + 0.4 * 0.14)).abs() < 1e-15);
    assert!((dot - a * b).abs() < 1e-15);
}

#[test]
fn replay_gpu_accounts_bytes_like_the_cpu() {
    let inputs = vec![
        inline(r#"{"kernel": "gather", "pattern": "UNIFORM:8:1", "delta": 8, "count": 1024}"#),
        inline(
            r#"{"kernel": "gs", "pattern-gather": "0,1,2,3", "pattern-scatter": "0,1,2,3", "delta-gather": 4, "delta-scatter": 4, "count": 100}"#,
        ),
        inline(r#"{"kernel": "scatter", "pattern": "0,1,2,3", "delta": 1, "count": 64}"#),
        // Negative delta: same bytes, same buffer span as +4, and no repeated writes.
        inline(r#"{"kernel": "scatter", "pattern": "0,1,2,3", "delta": -4, "count": 64}"#),
    ];
    let mut dev = FakeDevice::new(1 << 40);
    let cfg = config(inputs, true);
    let mut streams = 0;
    let records = replay_gpu(&cfg, &GpuOptions::default(), &mut dev, &mut |e| {
        if let Event::GpuStream(_) = e {
            streams += 1;
        }
    })
    .unwrap();
    assert_eq!(streams, 1);
    assert_eq!(records.len(), 4);
    let [g, gs, sc, down] = &records[..] else {
        panic!()
    };
    assert_eq!((down.delta, down.bytes), (-4, 8 * 4 * 64));
    assert_eq!(down.sparse_bytes, 8 * (3 + 4 * 63 + 1));
    assert_eq!(down.gpu.as_ref().unwrap().function, "scatter");
    assert_eq!(g.bytes, 8 * 8 * 1024);
    assert_eq!(gs.bytes, 8 * (4 + 4) * 100);
    assert_eq!(sc.bytes, 8 * 4 * 64);
    for r in &records {
        assert_eq!(r.backend, "cuda");
        assert_eq!(r.timer, "cuda-event");
        assert_eq!(r.run_times_s.len(), 3);
        let want = r.bytes as f64 / r.min_time_s / 1e6;
        assert!((r.bandwidth_mbs - want).abs() < 1e-6 * want);
        assert_eq!(r.device.as_ref().unwrap().name, "Fake GPU");
        let pct = 100.0 * r.bandwidth_mbs / 2e6;
        assert!((r.pct_of_stream.unwrap() - pct).abs() < 1e-9 * pct);
        let gpu = r.gpu.as_ref().unwrap();
        assert_eq!(r.threads as u64, u64::from(gpu.block) * u64::from(gpu.grid));
    }
    // The overlapping scatter (delta 1 < pattern span) ran atomically and says so.
    assert_eq!(sc.gpu.as_ref().unwrap().function, "scatter_atomic");
    assert!(sc.atomic);
    assert!(sc.notes.iter().any(|n| n.contains("atomic kernel")));
    assert_eq!(gs.gpu.as_ref().unwrap().function, "gs");
    assert_eq!(g.kernel, KernelKind::Gather);
    let (_, _, shape, nruns) = &dev.jobs[0];
    assert_eq!(*nruns, 3);
    assert_eq!(shape.grid, 32); // 8 x 1024 elements / 256 per block
}

/// The launch cost is probed once per replay; a configuration whose runs are not ten times
/// longer than a launch says so, a long one does not.
#[test]
fn runs_little_longer_than_a_launch_are_too_short_to_time() {
    let inputs = vec![
        // The fake times 1 us plus a byte per picosecond: 64 B, 1 us; 1 GiB, 1.07 ms.
        inline(r#"{"kernel": "gather", "pattern": "0,1", "count": 4}"#),
        inline(r#"{"kernel": "gather", "pattern": "UNIFORM:8:1", "count": 16777216}"#),
    ];
    let mut dev = FakeDevice::new(1 << 40);
    dev.launch = Some(6e-6);
    let records = replay_gpu(
        &config(inputs.clone(), false),
        &GpuOptions::default(),
        &mut dev,
        &mut |_| {},
    )
    .unwrap();
    assert!(records[0].too_short_to_time(), "{:?}", records[0].notes);
    let note = &records[0].notes[0];
    assert!(
        note.contains("starting a run alone takes about 6.0 us"),
        "{note}"
    );
    assert!(!records[1].too_short_to_time(), "{:?}", records[1].notes);
    // The trait's own probe: GPU STREAM on one element, once for the whole replay.
    let mut dev = FakeDevice::new(1 << 40);
    replay_gpu(
        &config(inputs, false),
        &GpuOptions::default(),
        &mut dev,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(dev.stream_calls, 1);
}

#[test]
fn sweep_reports_every_step_and_the_plateau() {
    let inputs = vec![inline(
        r#"{"kernel": "gather", "pattern": "UNIFORM:512:1", "delta": 512, "count": 16}"#,
    )];
    let mut dev = FakeDevice::new(1 << 40);
    let opts = GpuOptions {
        sweep: true,
        ..GpuOptions::default()
    };
    let records = replay_gpu(&config(inputs, false), &opts, &mut dev, &mut |_| {}).unwrap();
    assert_eq!(records.len(), 10);
    let counts: Vec<usize> = records.iter().map(|r| r.count).collect();
    assert_eq!(counts, (0..10).map(|k| 16 << k).collect::<Vec<_>>());
    let bw: Vec<f64> = records.iter().map(|r| r.bandwidth_mbs).collect();
    let at = plateau(&bw).unwrap();
    for (k, r) in records.iter().enumerate() {
        assert_eq!(r.pattern_len, 256, "truncated to the default sweep length");
        assert_eq!(r.bytes, 8 * 256 * r.count as u64);
        assert!(r.stream_copy_mbs.is_none());
        let s = r.gpu.as_ref().unwrap().sweep.as_ref().unwrap();
        assert_eq!((s.step, s.steps, s.factor), (k, 10, 1 << k));
        assert_eq!(s.truncated_from, Some(512));
        assert_eq!(s.plateau_count, Some(records[at].count));
    }
    assert!(records[at].notes.iter().any(|n| n.contains("plateaus")));
    assert!(bw[9] > bw[0] * 5.0, "fake device saturates: {bw:?}");
}

#[test]
fn sweep_stops_at_the_first_step_that_does_not_fit() {
    // Delta 1024 elements and count 16 x 2^k: step k needs just under 128 KiB x 2^k on the
    // device, so steps 0..=3 fit in 1 MiB and step 4 does not.
    let inputs = vec![inline(
        r#"{"kernel": "gather", "pattern": "UNIFORM:16:1", "delta": 1024, "count": 16}"#,
    )];
    let mut dev = FakeDevice::new(1 << 20);
    let opts = GpuOptions {
        sweep: true,
        sweep_len: Some(16),
        ..GpuOptions::default()
    };
    let records = replay_gpu(&config(inputs, false), &opts, &mut dev, &mut |_| {}).unwrap();
    assert_eq!(records.len(), 4);
    let last = records.last().unwrap();
    assert!(
        last.notes.iter().any(|n| n.contains("sweep stopped")),
        "{:?}",
        last.notes
    );
    assert_eq!(last.gpu.as_ref().unwrap().sweep.as_ref().unwrap().steps, 4);
}

#[test]
fn too_large_for_the_device_is_refused_with_sizes() {
    let inputs = vec![inline(
        r#"{"kernel": "gather", "pattern": "0,1", "delta": 1000000, "count": 1000}"#,
    )];
    let mut dev = FakeDevice::new(1 << 30);
    let e = replay_gpu(
        &config(inputs, false),
        &GpuOptions::default(),
        &mut dev,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("<command line>: config #0"), "{e}");
    assert!(e.contains("7.4 GiB") && e.contains("Fake GPU"), "{e}");
    assert!(e.contains("boundary"), "{e}");
    assert!(dev.jobs.is_empty());
}

#[test]
fn apex_and_bad_block_sizes_are_refused_before_anything_runs() {
    let inputs = vec![
        inline(r#"{"kernel": "gather", "pattern": "0,1", "count": 4}"#),
        inline(r#"{"kernel": "apex", "L": 4, "K": 0.5}"#),
    ];
    let mut dev = FakeDevice::new(1 << 40);
    let e = replay_gpu(
        &config(inputs, true),
        &GpuOptions::default(),
        &mut dev,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("apex kernel has no CUDA version"), "{e}");
    assert!(dev.jobs.is_empty() && dev.stream_calls == 0);

    let dir = std::env::temp_dir().join(format!("mgbench-gpu-lws-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("p.json");
    std::fs::write(
        &file,
        r#"[{"kernel": "gather", "pattern": [0, 1], "local-work-size": 2048}]"#,
    )
    .unwrap();
    let e = replay_gpu(
        &config(vec![Input::File(file)], false),
        &GpuOptions::default(),
        &mut dev,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("p.json: config #0") && e.contains("1024 threads"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn results_files_hold_gpu_records_and_gpu_stream() {
    let dir = std::env::temp_dir().join(format!("mgbench-gpu-results-{}", std::process::id()));
    let mut cfg = config(
        vec![inline(
            r#"{"kernel": "gather", "pattern": "UNIFORM:8:1", "count": 64}"#,
        )],
        true,
    );
    cfg.out_dir = Some(dir.clone());
    let mut dev = FakeDevice::new(1 << 40);
    replay_gpu(&cfg, &GpuOptions::default(), &mut dev, &mut |_| {}).unwrap();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let json = names
        .iter()
        .find(|n| n.ends_with(".json") && !n.contains("stream"))
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(json)).unwrap()).unwrap();
    assert_eq!(v[0]["backend"], "cuda");
    assert_eq!(v[0]["device"]["sm_count"], 100);
    assert_eq!(v[0]["gpu"]["function"], "gather");
    let stream = names
        .iter()
        .find(|n| n.ends_with("-gpu-stream.json"))
        .unwrap();
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(stream)).unwrap()).unwrap();
    assert_eq!(s["validated"], true);
    assert_eq!(s["device"]["name"], "Fake GPU");
    let csv = names.iter().find(|n| n.ends_with(".csv")).unwrap();
    let text = std::fs::read_to_string(dir.join(csv)).unwrap();
    assert!(text
        .lines()
        .next()
        .unwrap()
        .contains("device_name,device_memory_bytes"));
    assert!(text.contains("Fake GPU"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Parameters of each kernel as the host (cuda.rs) passes them.
const ARITY: [(&str, usize); 15] = [
    ("gather", 9),
    ("scatter", 8),
    ("scatter_atomic", 8),
    ("gs", 10),
    ("gs_atomic", 10),
    ("multigather", 10),
    ("multiscatter", 9),
    ("multiscatter_atomic", 9),
    ("fill", 3),
    ("stream_init", 7),
    ("stream_copy", 3),
    ("stream_mul", 4),
    ("stream_add", 4),
    ("stream_triad", 5),
    ("stream_dot", 4),
];

#[test]
fn kernel_sources_define_every_launched_function() {
    for (source, names) in [
        (SPATTER_SOURCE, &SPATTER_FUNCTIONS[..]),
        (BABELSTREAM_SOURCE, &BABELSTREAM_FUNCTIONS[..]),
    ] {
        for name in names {
            let head = format!("extern \"C\" __global__ void {name}(");
            let at = source
                .find(&head)
                .unwrap_or_else(|| panic!("{name} missing from the kernel sources"));
            let params = &source[at + head.len()..];
            let params = &params[..params.find(')').unwrap()];
            let arity = ARITY.iter().find(|(n, _)| n == name).unwrap().1;
            assert_eq!(params.split(',').count(), arity, "{name}: {params}");
        }
    }
    assert!(BABELSTREAM_SOURCE.contains(&format!("#define MG_DOT_BLOCK {DOT_BLOCK}")));
}

#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_feature_cuda_says_how_to_get_it() {
    let e = open_device(0).err().unwrap().to_string();
    assert!(e.contains("--features cuda"), "{e}");
}

#[cfg(feature = "cuda")]
#[test]
fn without_a_driver_open_fails_cleanly() {
    // SAFETY: only tries to load the library.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    let e = open_device(0).err().unwrap().to_string();
    assert!(e.contains("no CUDA driver found"), "{e}");
    assert!(e.contains("libcuda.so.1"), "{e}");
    assert!(e.contains("without --cuda"), "{e}");
}
