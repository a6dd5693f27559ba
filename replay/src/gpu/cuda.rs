//! The CUDA driver side of `replay --cuda`, through cudarc with dynamic loading: the binary
//! builds and starts without CUDA, and this module checks for `libcuda` and `libnvrtc` before
//! calling into either. cudarc panics where a library or symbol is missing; every call into it
//! runs under [`guarded`], which turns such a panic into an error.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError, LaunchArgs,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileError, CompileOptions};

use super::{
    DeviceInfo, GpuDevice, GpuError, GpuJob, StreamRun, BABELSTREAM_SOURCE, DOT_BLOCK,
    SPATTER_SOURCE, STREAM_INIT, STREAM_SCALAR,
};
use crate::config::{iteration_origin, Kernel};

pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    spatter: Arc<CudaModule>,
    babel: Arc<CudaModule>,
    info: DeviceInfo,
}

/// Runs `f`, turning a panic inside cudarc into [`GpuError::Driver`] (the default panic
/// message is silenced meanwhile).
fn guarded<T>(doing: &str, f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(previous);
    result.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the CUDA bindings panicked".into());
        Err(GpuError::Driver {
            doing: doing.into(),
            message,
        })
    })
}

fn driver(doing: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| GpuError::Driver {
        doing: doing.into(),
        message: e.to_string(),
    }
}

fn tried(lib: &str) -> String {
    cudarc::get_lib_name_candidates(lib)
        .into_iter()
        .filter(|n| !n.contains("64"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn compile(source: &str, file: &str, arch: &str) -> Result<cudarc::nvrtc::Ptx, GpuError> {
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{arch}")],
        name: Some(file.to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| GpuError::Compile {
        file: file.into(),
        arch: arch.into(),
        log: match e {
            CompileError::CompileError { log, .. } => log.to_string_lossy().trim().to_string(),
            other => other.to_string(),
        },
    })
}

impl CudaDevice {
    pub fn open(ordinal: usize) -> Result<CudaDevice, GpuError> {
        // SAFETY: only tries to dlopen the library and drops it.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver {
                tried: tried("cuda"),
            });
        }
        // SAFETY: as above.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(GpuError::NoNvrtc {
                tried: tried("nvrtc"),
            });
        }
        guarded("opening the device", || {
            let count = match CudaContext::device_count() {
                Ok(n) => usize::try_from(n).unwrap_or(0),
                // A driver without a GPU (or with none visible: CUDA_VISIBLE_DEVICES).
                Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => 0,
                Err(e) => return Err(driver("counting devices")(e)),
            };
            if ordinal >= count {
                return Err(GpuError::NoDevice {
                    asked: ordinal,
                    count,
                });
            }
            let ctx = CudaContext::new(ordinal).map_err(driver("creating a context"))?;
            // SAFETY: everything runs on one stream, so cudarc's cross-stream event tracking
            // (an event record per buffer per launch) is not needed.
            unsafe { ctx.disable_event_tracking() };
            let (major, minor) = ctx
                .compute_capability()
                .map_err(driver("reading the compute capability"))?;
            let sm_count = ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(driver("reading the SM count"))?;
            let mut version = 0i32;
            // SAFETY: writes one int.
            unsafe { sys::cuDriverGetVersion(&mut version) }
                .result()
                .map_err(driver("reading the driver version"))?;
            let info = DeviceInfo {
                ordinal,
                name: ctx.name().map_err(driver("reading the device name"))?,
                memory_bytes: ctx.total_mem().map_err(driver("reading the memory size"))? as u64,
                sm_count: u32::try_from(sm_count).unwrap_or(1),
                compute_capability: format!("{major}.{minor}"),
                driver_version: format!("{}.{}", version / 1000, (version % 1000) / 10),
            };
            let arch = format!("{major}{minor}");
            let spatter = ctx
                .load_module(compile(SPATTER_SOURCE, "spatter.cu", &arch)?)
                .map_err(driver("loading spatter.cu"))?;
            let babel = ctx
                .load_module(compile(BABELSTREAM_SOURCE, "babelstream.cu", &arch)?)
                .map_err(driver("loading babelstream.cu"))?;
            let stream = ctx.default_stream();
            Ok(CudaDevice {
                ctx,
                stream,
                spatter,
                babel,
                info,
            })
        })
    }

    fn function(&self, module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction, GpuError> {
        module.load_function(name).map_err(|e| GpuError::Driver {
            doing: format!("finding kernel {name}"),
            message: e.to_string(),
        })
    }

    fn zeros(&self, n: usize) -> Result<CudaSlice<f64>, GpuError> {
        self.stream
            .alloc_zeros::<f64>(n.max(1))
            .map_err(driver("allocating device memory"))
    }

    fn indices(&self, v: &[usize]) -> Result<CudaSlice<u64>, GpuError> {
        let v: Vec<u64> = if v.is_empty() {
            vec![0]
        } else {
            v.iter().map(|&x| x as u64).collect()
        };
        self.stream
            .clone_htod(&v)
            .map_err(driver("copying indices to the device"))
    }

    fn fill(&self, x: &mut CudaSlice<f64>, value: f64) -> Result<(), GpuError> {
        let f = self.function(&self.spatter, "fill")?;
        let n = x.len() as u64;
        let shape =
            super::launch_shape(n, None, self.info.sm_count).unwrap_or(super::LaunchShape {
                block: 256,
                grid: 1,
            });
        let mut b = self.stream.launch_builder(&f);
        b.arg(x).arg(&value).arg(&n);
        // SAFETY: fill(double*, double, u64) over exactly x.len() elements.
        unsafe { b.launch(config(shape.grid, shape.block)) }
            .map(|_| ())
            .map_err(driver("initialising a buffer"))
    }

    /// Times `launch` `runs` times with events, after `warmup` untimed launches.
    fn timed(
        &self,
        warmup: usize,
        runs: usize,
        launch: &mut dyn FnMut() -> Result<(), GpuError>,
    ) -> Result<Vec<f64>, GpuError> {
        for _ in 0..warmup {
            launch()?;
        }
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self
            .ctx
            .new_event(flags)
            .map_err(driver("creating events"))?;
        let end = self
            .ctx
            .new_event(flags)
            .map_err(driver("creating events"))?;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            start
                .record(&self.stream)
                .map_err(driver("recording an event"))?;
            launch()?;
            end.record(&self.stream)
                .map_err(driver("recording an event"))?;
            end.synchronize().map_err(driver("running a kernel"))?;
            let ms = start.elapsed_ms(&end).map_err(driver("reading an event"))?;
            times.push(f64::from(ms) / 1e3);
        }
        Ok(times)
    }
}

/// Launches a kernel whose arguments are pushed.
///
/// # Safety
/// The arguments must match the kernel's parameters, and every buffer must be large enough for
/// the indices the launch computes.
unsafe fn launch(b: &mut LaunchArgs<'_>, cfg: LaunchConfig) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(driver("launching a kernel"))
}

fn config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl GpuDevice for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory(&mut self) -> Result<(u64, u64), GpuError> {
        guarded("reading free memory", || {
            let (free, total) = self
                .ctx
                .mem_get_info()
                .map_err(driver("reading free memory"))?;
            Ok((free as u64, total as u64))
        })
    }

    fn time(&mut self, job: &GpuJob<'_>) -> Result<Vec<f64>, GpuError> {
        guarded("running a pattern", || self.time_job(job))
    }

    fn stream(&mut self, elements: usize, ntimes: usize) -> Result<StreamRun, GpuError> {
        guarded("running GPU STREAM", || self.babelstream(elements, ntimes))
    }
}

impl CudaDevice {
    fn time_job(&self, job: &GpuJob<'_>) -> Result<Vec<f64>, GpuError> {
        let c = job.config;
        let f = self.function(&self.spatter, job.function)?;
        let fp = &job.footprint;
        let cfg = config(job.shape.grid, job.shape.block);
        let len = c.kernel.pattern_len() as u64;
        let count = c.count as u64;
        let wrap = c.wrap.max(1) as u64;
        let mut sparse = self.zeros(fp.sparse_elems)?;
        self.fill(&mut sparse, 1.0)?;
        // Gather, scatter and the multi-kernels take (dense, sparse) or (sparse, dense), their
        // index tables (the pattern; or outer, inner), then len, delta, origin, count, wrap
        // (origin lifts a negative delta's bases above 0: config::iteration_origin).
        let (tables, delta, gather): (Vec<&[usize]>, i64, bool) = match &c.kernel {
            Kernel::Gather { pattern, delta } => (vec![pattern], *delta, true),
            Kernel::Scatter { pattern, delta } => (vec![pattern], *delta, false),
            Kernel::MultiGather {
                outer,
                inner,
                delta,
            } => (vec![outer, inner], *delta, true),
            Kernel::MultiScatter {
                outer,
                inner,
                delta,
            } => (vec![outer, inner], *delta, false),
            Kernel::GatherScatter {
                gather,
                scatter,
                delta_gather,
                delta_scatter,
            } => {
                let mut sparse_s = self.zeros(fp.sparse_scatter_elems)?;
                let pg = self.indices(gather)?;
                let ps = self.indices(scatter)?;
                let (dg, ds) = (*delta_gather, *delta_scatter);
                let og = iteration_origin(dg, c.count) as u64;
                let os = iteration_origin(ds, c.count) as u64;
                return self.timed(job.warmup, job.nruns, &mut || {
                    let mut b = self.stream.launch_builder(&f);
                    b.arg(&mut sparse_s)
                        .arg(&sparse)
                        .arg(&ps)
                        .arg(&pg)
                        .arg(&len)
                        .arg(&ds)
                        .arg(&os)
                        .arg(&dg)
                        .arg(&og)
                        .arg(&count);
                    // SAFETY: matches gs(_atomic) in spatter.cu; buffers sized by the plan.
                    unsafe { launch(&mut b, cfg) }
                });
            }
            Kernel::Apex(_) => {
                return Err(GpuError::Driver {
                    doing: "choosing a kernel".into(),
                    message: "the apex kernel has no CUDA version".into(),
                })
            }
        };
        let mut dense = self.zeros(fp.dense_elems_per_thread)?;
        self.fill(&mut dense, 2.0)?;
        let tables = tables
            .into_iter()
            .map(|t| self.indices(t))
            .collect::<Result<Vec<_>, _>>()?;
        let origin = iteration_origin(delta, c.count) as u64;
        self.timed(job.warmup, job.nruns, &mut || {
            let mut b = self.stream.launch_builder(&f);
            if gather {
                b.arg(&mut dense).arg(&sparse);
            } else {
                b.arg(&mut sparse).arg(&dense);
            }
            for t in &tables {
                b.arg(t);
            }
            b.arg(&len).arg(&delta).arg(&origin).arg(&count).arg(&wrap);
            // SAFETY: matches gather/scatter/multigather/multiscatter(_atomic) in spatter.cu,
            // and the buffers hold the footprint plan::footprint computed for them.
            unsafe { launch(&mut b, cfg) }
        })
    }

    fn babelstream(&self, elements: usize, ntimes: usize) -> Result<StreamRun, GpuError> {
        let n = elements as u64;
        let mut a = self.zeros(elements)?;
        let mut b = self.zeros(elements)?;
        let mut c = self.zeros(elements)?;
        let shape =
            super::launch_shape(n, None, self.info.sm_count).map_err(|m| GpuError::Driver {
                doing: "sizing GPU STREAM".into(),
                message: m,
            })?;
        let cfg = config(shape.grid, shape.block);
        let dot_shape = super::launch_shape(n, Some(DOT_BLOCK as usize), self.info.sm_count)
            .map_err(|m| GpuError::Driver {
                doing: "sizing GPU STREAM".into(),
                message: m,
            })?;
        let mut partial = self.zeros(dot_shape.grid as usize)?;
        let f = |name| self.function(&self.babel, name);
        let (init, copy, mul, add, triad, dot) = (
            f("stream_init")?,
            f("stream_copy")?,
            f("stream_mul")?,
            f("stream_add")?,
            f("stream_triad")?,
            f("stream_dot")?,
        );
        let (va, vb, vc) = STREAM_INIT;
        let scalar = STREAM_SCALAR;
        let launch_err = driver("launching a GPU STREAM kernel");
        {
            let mut l = self.stream.launch_builder(&init);
            l.arg(&mut a)
                .arg(&mut b)
                .arg(&mut c)
                .arg(&va)
                .arg(&vb)
                .arg(&vc)
                .arg(&n);
            // SAFETY: stream_init over n elements of a, b, c.
            unsafe { l.launch(cfg) }.map_err(&launch_err)?;
        }
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let events: Vec<_> = (0..6)
            .map(|_| self.ctx.new_event(flags))
            .collect::<Result<_, _>>()
            .map_err(driver("creating events"))?;
        let mut times: [Vec<f64>; 5] = Default::default();
        for iter in 0..ntimes {
            let record = |k: usize| {
                events[k]
                    .record(&self.stream)
                    .map_err(driver("recording an event"))
            };
            record(0)?;
            {
                let mut l = self.stream.launch_builder(&copy);
                l.arg(&a).arg(&mut c).arg(&n);
                // SAFETY: stream_copy(a, c, n).
                unsafe { l.launch(cfg) }.map_err(&launch_err)?;
            }
            record(1)?;
            {
                let mut l = self.stream.launch_builder(&mul);
                l.arg(&mut b).arg(&c).arg(&scalar).arg(&n);
                // SAFETY: stream_mul(b, c, scalar, n).
                unsafe { l.launch(cfg) }.map_err(&launch_err)?;
            }
            record(2)?;
            {
                let mut l = self.stream.launch_builder(&add);
                l.arg(&a).arg(&b).arg(&mut c).arg(&n);
                // SAFETY: stream_add(a, b, c, n).
                unsafe { l.launch(cfg) }.map_err(&launch_err)?;
            }
            record(3)?;
            {
                let mut l = self.stream.launch_builder(&triad);
                l.arg(&mut a).arg(&b).arg(&c).arg(&scalar).arg(&n);
                // SAFETY: stream_triad(a, b, c, scalar, n).
                unsafe { l.launch(cfg) }.map_err(&launch_err)?;
            }
            record(4)?;
            {
                let mut l = self.stream.launch_builder(&dot);
                l.arg(&a).arg(&b).arg(&mut partial).arg(&n);
                // SAFETY: stream_dot(a, b, partial, n) with DOT_BLOCK threads per block and
                // one partial per block.
                unsafe { l.launch(config(dot_shape.grid, DOT_BLOCK)) }.map_err(&launch_err)?;
            }
            record(5)?;
            events[5]
                .synchronize()
                .map_err(driver("running GPU STREAM"))?;
            if iter == 0 {
                continue; // STREAM's rule: the first iteration is dropped.
            }
            for (k, t) in times.iter_mut().enumerate() {
                let ms = events[k]
                    .elapsed_ms(&events[k + 1])
                    .map_err(driver("reading an event"))?;
                t.push(f64::from(ms) / 1e3);
            }
        }
        let back = |x: &CudaSlice<f64>| {
            self.stream
                .clone_dtoh(x)
                .map_err(driver("copying results to the host"))
        };
        let sum = |v: Vec<f64>| v.iter().take(elements).sum::<f64>();
        Ok(StreamRun {
            times,
            sums: [sum(back(&a)?), sum(back(&b)?), sum(back(&c)?)],
            dot: back(&partial)?.iter().sum(),
        })
    }
}
