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

fn no_apex() -> GpuError {
    GpuError::Driver {
        doing: "choosing a kernel".into(),
        message: "the apex kernel has no CUDA version".into(),
    }
}

fn no_buffer() -> GpuError {
    GpuError::Driver {
        doing: "launching a kernel".into(),
        message: "a buffer the kernel takes was not allocated".into(),
    }
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
            // Buffers of the last job are freed on the stream: wait for that, or they would
            // still count as used.
            self.stream
                .synchronize()
                .map_err(driver("waiting for the device"))?;
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

/// A job's buffers on the device: the sparse side (gather side of `gs`), the scatter side of
/// `gs`, the dense buffer of the other kernels, and the index tables.
struct JobBuffers {
    sparse: CudaSlice<f64>,
    /// What gathers compare each value they read with, storing it only when it differs
    /// (spatter.cu): the sparse side's fill value in replay, so nothing is stored; NaN for
    /// given contents, so everything is.
    fill: f64,
    sparse_s: Option<CudaSlice<f64>>,
    dense: Option<CudaSlice<f64>>,
    tables: Vec<CudaSlice<u64>>,
}

/// The value replay fills sparse sides with (dense buffers hold 2.0, the scatter side of `gs`
/// 0.0).
const SPARSE_FILL: f64 = 1.0;

/// Contents for a job's buffers, copied to the device instead of replay's constants; the
/// hardware tests use them to check results. A buffer the kernel does not take is empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Contents {
    pub sparse: Vec<f64>,
    pub sparse_s: Vec<f64>,
    pub dense: Vec<f64>,
}

impl CudaDevice {
    fn time_job(&self, job: &GpuJob<'_>) -> Result<Vec<f64>, GpuError> {
        let f = self.function(&self.spatter, job.function)?;
        let mut bufs = self.job_buffers(job, None)?;
        let cfg = config(job.shape.grid, job.shape.block);
        self.timed(job.warmup, job.nruns, &mut || {
            self.launch_job(&f, job, &mut bufs, cfg)
        })
    }

    /// Runs `job`'s kernel once over buffers holding `given`, and returns what they hold
    /// afterwards.
    #[cfg(test)]
    pub fn run_once(&self, job: &GpuJob<'_>, given: &Contents) -> Result<Contents, GpuError> {
        let f = self.function(&self.spatter, job.function)?;
        let mut bufs = self.job_buffers(job, Some(given))?;
        self.launch_job(&f, job, &mut bufs, config(job.shape.grid, job.shape.block))?;
        let back = |x: Option<&CudaSlice<f64>>| match x {
            Some(x) => self
                .stream
                .clone_dtoh(x)
                .map_err(driver("copying results to the host")),
            None => Ok(Vec::new()),
        };
        Ok(Contents {
            sparse: back(Some(&bufs.sparse))?,
            sparse_s: back(bufs.sparse_s.as_ref())?,
            dense: back(bufs.dense.as_ref())?,
        })
    }

    /// Allocates a job's buffers (as the footprint sizes them) and fills them, with replay's
    /// constants or, in tests, with given contents.
    fn job_buffers(
        &self,
        job: &GpuJob<'_>,
        given: Option<&Contents>,
    ) -> Result<JobBuffers, GpuError> {
        let fp = &job.footprint;
        let filled = |n: usize, value: f64| -> Result<CudaSlice<f64>, GpuError> {
            let mut x = self.zeros(n)?;
            if value != 0.0 {
                self.fill(&mut x, value)?;
            }
            Ok(x)
        };
        let gs = matches!(job.config.kernel, Kernel::GatherScatter { .. });
        if let Some(g) = given {
            let copied = |v: &[f64], n: usize| -> Result<Option<CudaSlice<f64>>, GpuError> {
                if n == 0 {
                    return Ok(None);
                }
                if v.len() != n {
                    return Err(GpuError::Driver {
                        doing: "copying contents to the device".into(),
                        message: format!("{} values for a buffer of {n}", v.len()),
                    });
                }
                self.stream
                    .clone_htod(v)
                    .map(Some)
                    .map_err(driver("copying contents to the device"))
            };
            return Ok(JobBuffers {
                fill: f64::NAN,
                sparse: copied(&g.sparse, fp.sparse_elems)?.ok_or_else(no_buffer)?,
                sparse_s: copied(&g.sparse_s, fp.sparse_scatter_elems)?,
                dense: if gs {
                    None
                } else {
                    copied(&g.dense, fp.dense_elems_per_thread)?
                },
                tables: self.tables(job)?,
            });
        }
        Ok(JobBuffers {
            fill: SPARSE_FILL,
            sparse: filled(fp.sparse_elems, SPARSE_FILL)?,
            sparse_s: if gs {
                Some(filled(fp.sparse_scatter_elems, 0.0)?)
            } else {
                None
            },
            dense: if gs {
                None
            } else {
                Some(filled(fp.dense_elems_per_thread, 2.0)?)
            },
            tables: self.tables(job)?,
        })
    }

    /// The job's index tables on the device, in the order its kernel takes them.
    fn tables(&self, job: &GpuJob<'_>) -> Result<Vec<CudaSlice<u64>>, GpuError> {
        let tables: Vec<&[usize]> = match &job.config.kernel {
            Kernel::Gather { pattern, .. } | Kernel::Scatter { pattern, .. } => vec![pattern],
            Kernel::MultiGather { outer, inner, .. }
            | Kernel::MultiScatter { outer, inner, .. } => {
                vec![outer, inner]
            }
            // gs takes the scatter side's table first.
            Kernel::GatherScatter {
                gather, scatter, ..
            } => vec![scatter, gather],
            Kernel::Apex(_) => return Err(no_apex()),
        };
        tables.into_iter().map(|t| self.indices(t)).collect()
    }

    /// Launches the job's kernel once over its buffers.
    fn launch_job(
        &self,
        f: &CudaFunction,
        job: &GpuJob<'_>,
        bufs: &mut JobBuffers,
        cfg: LaunchConfig,
    ) -> Result<(), GpuError> {
        let c = job.config;
        let len = c.kernel.pattern_len() as u64;
        let count = c.count as u64;
        let wrap = c.wrap.max(1) as u64;
        let mut b = self.stream.launch_builder(f);
        // Gather, scatter and the multi-kernels take (dense, sparse) or (sparse, dense), their
        // index tables (the pattern; or outer, inner), then len, delta, origin, count, wrap,
        // and for gathers the value they do not store;
        // gs takes (sparse_s, sparse_g, ps, pg, len, delta_s, origin_s, delta_g, origin_g,
        // count). An origin lifts a negative delta's bases above 0
        // (config::iteration_origin).
        let (delta, gather) = match &c.kernel {
            Kernel::Gather { delta, .. } | Kernel::MultiGather { delta, .. } => (*delta, true),
            Kernel::Scatter { delta, .. } | Kernel::MultiScatter { delta, .. } => (*delta, false),
            Kernel::GatherScatter {
                delta_gather,
                delta_scatter,
                ..
            } => {
                let (dg, ds) = (*delta_gather, *delta_scatter);
                let og = iteration_origin(dg, c.count) as u64;
                let os = iteration_origin(ds, c.count) as u64;
                let sparse_s = bufs.sparse_s.as_mut().ok_or_else(no_buffer)?;
                b.arg(sparse_s).arg(&bufs.sparse);
                for t in &bufs.tables {
                    b.arg(t);
                }
                b.arg(&len).arg(&ds).arg(&os).arg(&dg).arg(&og).arg(&count);
                // SAFETY: matches gs(_atomic) in spatter.cu; buffers sized by the plan.
                return unsafe { launch(&mut b, cfg) };
            }
            Kernel::Apex(_) => return Err(no_apex()),
        };
        let dense = bufs.dense.as_mut().ok_or_else(no_buffer)?;
        if gather {
            b.arg(dense).arg(&bufs.sparse);
        } else {
            b.arg(&mut bufs.sparse).arg(&*dense);
        }
        for t in &bufs.tables {
            b.arg(t);
        }
        let origin = iteration_origin(delta, c.count) as u64;
        b.arg(&len).arg(&delta).arg(&origin).arg(&count).arg(&wrap);
        if gather {
            b.arg(&bufs.fill);
        }
        // SAFETY: matches gather/scatter/multigather/multiscatter(_atomic) in spatter.cu, and
        // the buffers hold the footprint plan::footprint computed for them.
        unsafe { launch(&mut b, cfg) }
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

#[cfg(test)]
mod tests;
