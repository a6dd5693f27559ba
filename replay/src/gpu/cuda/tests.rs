//! Tests on a real NVIDIA GPU. They are ignored by default (CI machines have no GPU); run them
//! where the driver and NVRTC are installed with
//! `cargo test -p mgbench-replay gpu::cuda -- --ignored`, or through scripts/gpu-check.sh,
//! which also runs `mgbench stream --cuda` and `mgbench replay --cuda` there.

use super::*;
use crate::config::{Origin, RunConfig};
use crate::gpu::{self, kernel_function, replay_gpu, GpuOptions, LaunchShape};
use crate::plan;
use crate::{Input, ReplayConfig, StreamSize};

const WHY: &str = "needs an NVIDIA GPU with its driver and NVRTC (scripts/gpu-check.sh)";

fn device() -> CudaDevice {
    CudaDevice::open(0).unwrap_or_else(|e| panic!("{WHY}: {e}"))
}

fn run_config(name: &str, kernel: Kernel, count: usize, wrap: usize) -> RunConfig {
    RunConfig {
        name: name.into(),
        kernel,
        count,
        wrap,
        nruns: 1,
        local_work_size: None,
        origin: Origin {
            source: "<test>".into(),
            index: 0,
        },
        delta_source: "config".into(),
        notes: Vec::new(),
        compaction: None,
        pattern_spec: None,
    }
}

/// What the kernels compute, one access after another on the host: gathers copy into the
/// dense rows, scatters store (or with `atomic`, add) into the sparse side.
fn reference(c: &RunConfig, atomic: bool, given: &Contents) -> Contents {
    let mut out = given.clone();
    let len = c.kernel.pattern_len();
    let wrap = c.wrap.max(1);
    let at = |p: usize, delta: i64, i: usize| {
        (iteration_origin(delta, c.count) as i64 + p as i64 + delta * i as i64) as usize
    };
    let store = |x: &mut f64, v: f64| {
        if atomic {
            *x += v
        } else {
            *x = v
        }
    };
    for i in 0..c.count {
        for j in 0..len {
            let row = j + len * (i % wrap);
            match &c.kernel {
                Kernel::Gather { pattern, delta } => {
                    out.dense[row] = given.sparse[at(pattern[j], *delta, i)]
                }
                Kernel::MultiGather {
                    outer,
                    inner,
                    delta,
                } => out.dense[row] = given.sparse[at(outer[inner[j]], *delta, i)],
                Kernel::Scatter { pattern, delta } => {
                    store(&mut out.sparse[at(pattern[j], *delta, i)], given.dense[row])
                }
                Kernel::MultiScatter {
                    outer,
                    inner,
                    delta,
                } => store(
                    &mut out.sparse[at(outer[inner[j]], *delta, i)],
                    given.dense[row],
                ),
                Kernel::GatherScatter {
                    gather,
                    scatter,
                    delta_gather,
                    delta_scatter,
                } => store(
                    &mut out.sparse_s[at(scatter[j], *delta_scatter, i)],
                    given.sparse[at(gather[j], *delta_gather, i)],
                ),
                Kernel::Apex(_) => unreachable!("no CUDA apex"),
            }
        }
    }
    out
}

/// Runs `c` once on the device over distinct integer values (exact in doubles, also when
/// atomics add them) and compares every buffer with the host's answer.
fn check(dev: &CudaDevice, c: &RunConfig, shape: LaunchShape) -> &'static str {
    let footprint = plan::footprint(c).unwrap();
    let (function, atomic) = kernel_function(c, false).unwrap();
    let job = GpuJob {
        config: c,
        footprint,
        function,
        shape,
        warmup: 0,
        nruns: 1,
    };
    let gs = matches!(c.kernel, Kernel::GatherScatter { .. });
    let given = Contents {
        sparse: (0..footprint.sparse_elems).map(|k| k as f64).collect(),
        sparse_s: (0..footprint.sparse_scatter_elems)
            .map(|k| -(k as f64))
            .collect(),
        dense: if gs {
            Vec::new()
        } else {
            (0..footprint.dense_elems_per_thread)
                .map(|k| 1e6 + k as f64)
                .collect()
        },
    };
    let got = dev
        .run_once(&job, &given)
        .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    let want = reference(c, atomic, &given);
    for (side, g, w) in [
        ("sparse", &got.sparse, &want.sparse),
        ("sparse_s", &got.sparse_s, &want.sparse_s),
        ("dense", &got.dense, &want.dense),
    ] {
        assert_eq!(g.len(), w.len(), "{}: {side} length", c.name);
        if let Some(k) = (0..g.len()).find(|&k| g[k] != w[k]) {
            panic!(
                "{} ({function}): {side}[{k}] is {}, the host computed {}",
                c.name, g[k], w[k]
            );
        }
    }
    function
}

#[test]
#[ignore = "needs an NVIDIA GPU with its driver and NVRTC (scripts/gpu-check.sh)"]
fn every_kernel_computes_what_the_host_computes() {
    let dev = device();
    let p = vec![0, 9, 3, 17, 5, 12, 1, 30];
    let q = vec![2, 7, 11, 4, 19, 0, 23, 6];
    let cases = vec![
        (
            "gather",
            run_config(
                "gather",
                Kernel::Gather {
                    pattern: p.clone(),
                    delta: 8,
                },
                300,
                300,
            ),
        ),
        (
            "gather",
            run_config(
                "gather, negative delta",
                Kernel::Gather {
                    pattern: p.clone(),
                    delta: -5,
                },
                300,
                300,
            ),
        ),
        (
            "scatter",
            run_config(
                "scatter without repeats",
                Kernel::Scatter {
                    pattern: (0..8).map(|k| 3 * k).collect(),
                    delta: 24,
                },
                300,
                7,
            ),
        ),
        (
            "scatter_atomic",
            run_config(
                "scatter with repeated writes",
                Kernel::Scatter {
                    pattern: p.clone(),
                    delta: 2,
                },
                300,
                3,
            ),
        ),
        (
            "gs",
            run_config(
                "gs",
                Kernel::GatherScatter {
                    gather: p.clone(),
                    scatter: (0..8).map(|k| 2 * k).collect(),
                    delta_gather: 3,
                    delta_scatter: -16,
                },
                300,
                1,
            ),
        ),
        (
            "gs_atomic",
            run_config(
                "gs with repeated writes",
                Kernel::GatherScatter {
                    gather: p.clone(),
                    scatter: q.clone(),
                    delta_gather: 1,
                    delta_scatter: 4,
                },
                300,
                1,
            ),
        ),
        (
            "multigather",
            run_config(
                "multigather",
                Kernel::MultiGather {
                    outer: q.clone(),
                    inner: vec![7, 0, 3, 3, 5],
                    delta: 24,
                },
                300,
                300,
            ),
        ),
        (
            "multiscatter",
            run_config(
                "multiscatter without repeats",
                Kernel::MultiScatter {
                    outer: q.clone(),
                    inner: vec![0, 1, 2, 3],
                    delta: 24,
                },
                300,
                5,
            ),
        ),
        (
            "multiscatter_atomic",
            run_config(
                "multiscatter with repeated writes",
                Kernel::MultiScatter {
                    outer: q.clone(),
                    inner: vec![5, 5, 1, 0],
                    delta: -3,
                },
                300,
                5,
            ),
        ),
    ];
    let sm = dev.info.sm_count;
    for (expect, c) in &cases {
        let elements = (c.kernel.pattern_len() * c.count) as u64;
        // The launch replay would use, then a small grid of 111 threads, so the grid-stride
        // loop wraps, and its step is no multiple of the pattern's length (8, 5 or 4): the
        // position carries into the iteration.
        for shape in [
            gpu::launch_shape(elements, None, sm).unwrap(),
            LaunchShape { block: 37, grid: 3 },
        ] {
            assert_eq!(check(&dev, c, shape), *expect, "{}", c.name);
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU with its driver and NVRTC (scripts/gpu-check.sh)"]
fn the_device_describes_itself_and_stream_validates() {
    let mut dev = device();
    let info = dev.info().clone();
    assert!(info.sm_count > 0 && info.memory_bytes > 0, "{info:?}");
    assert!(info.compute_capability.contains('.'), "{info:?}");
    let (free, total) = dev.memory().unwrap();
    assert!(free > 0 && free <= total, "{free} of {total}");
    let host = crate::record::Host::detect();
    let s = gpu::run_gpu_stream(&mut dev, StreamSize::Elements(1 << 22), 5, &host).unwrap();
    assert!(s.validated, "{:?}", s.notes);
    assert!(s.rates().iter().all(|r| *r > 0.0), "{:?}", s.rates());
    eprintln!(
        "{} (cc {}, {} SMs, driver {}): GPU STREAM at 2^22 doubles, MB/s {:?}",
        info.name,
        info.compute_capability,
        info.sm_count,
        info.driver_version,
        s.rates()
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU with its driver and NVRTC (scripts/gpu-check.sh)"]
fn replay_runs_a_sweep_on_the_device() {
    let mut dev = device();
    let mut config = ReplayConfig::new(vec![Input::Inline(Box::new(crate::InlineSpec {
        kernel: Some("gather".into()),
        pattern: Some("UNIFORM:8:1".into()),
        delta: Some(8),
        count: Some(1 << 12),
        ..Default::default()
    }))]);
    config.runs = Some(3);
    config.stream_elements = None;
    config.out_dir = None;
    let opts = GpuOptions {
        sweep: true,
        ..Default::default()
    };
    let records = replay_gpu(&config, &opts, &mut dev, &mut |_| {}).unwrap();
    assert_eq!(records.len(), gpu::SWEEP_FACTORS.len());
    for r in &records {
        assert_eq!(r.backend, "cuda");
        assert!(r.bandwidth_mbs > 0.0, "{r:?}");
    }
    let bw: Vec<f64> = records.iter().map(|r| r.bandwidth_mbs).collect();
    eprintln!("gather UNIFORM:8:1 sweep, MB/s: {bw:?}");
}
