//! Native live RDX: the library preloaded into the program itself (`LD_PRELOAD`), no QEMU.
//!
//! This is RDX as published: the PMU samples one memory access every `period` (PEBS on
//! Intel, IBS op on AMD) with its data address (PERF_SAMPLE_ADDR); the sample's signal lands
//! on the program's main thread before it runs on, and its handler picks a debug register by
//! RDX's reservoir and arms it on the sampled word (perf breakpoints, as under QEMU); the
//! register's SIGTRAP reads the access counter. Events go to the same file, in the same
//! format, as the QEMU path's (`rdx`), and mgbench rebuilds the histograms the same way.
//!
//! mgbench sets `MGBENCH_RDX_NATIVE=period=P,watch=W,seed=S,jitter=J,sampler=K,events=PATH`
//! and preloads this library; the constructor below removes the variable (programs the
//! program starts are not measured) and starts sampling on the main thread only. Samplers:
//!
//! - `pebs`: Intel MEM_INST_RETIRED.ANY (event 0xd0, umask 0x83), precise, sampled and
//!   counted by the same event: the time is in memory instructions, as in RDX;
//! - `ibs`: AMD IBS op (the `ibs_op` PMU, counting dispatched ops), with the time from
//!   ls_dispatch (event 0x29, umask 0x07: loads, stores and load-stores dispatched); IBS picks
//!   ops, not accesses, so the period is in ops and samples without a data address are
//!   dropped;
//! - `page-faults`: the kernel's page-fault software event, sampled and counted, at a fixed
//!   period (no jitter: see `Running::jitter`). It measures nothing useful (times in page
//!   faults) but runs every other part of the native path on a machine without a PMU:
//!   mgbench's tests use it.
//!
//! Only `page-faults` has run here (an AMD EPYC VM without PMU access); the PMU encodings
//! follow the vendors' manuals and are untested.

use std::ffi::c_int;
use std::sync::Mutex;

use mgbench_capture::native_rdx::{NativeSampler, ENV};

use crate::rdx::{self, RdxArgs};
use crate::sys::{self, EventSpec, PerfCounter, PerfSampler};
use mgbench_capture::perf::{PERF_TYPE_RAW, PERF_TYPE_SOFTWARE};

/// The sampler's overflow signal.
const SIGNAL: c_int = libc::SIGIO;
const PERF_COUNT_SW_PAGE_FAULTS: u64 = 2;

/// The sampling event and, when the time comes from another one, the counting event.
fn events(sampler: NativeSampler) -> Result<(EventSpec, Option<EventSpec>), String> {
    Ok(match sampler {
        NativeSampler::Pebs => (
            EventSpec {
                kind: PERF_TYPE_RAW,
                config: 0x83d0,
                precise_ip: 2,
            },
            None,
        ),
        NativeSampler::Ibs => {
            let path = "/sys/bus/event_source/devices/ibs_op/type";
            let kind = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .ok_or_else(|| format!("no AMD IBS op PMU ({path} unreadable)"))?;
            (
                EventSpec {
                    kind,
                    // cnt_ctl: count dispatched ops, not cycles.
                    config: 1 << 19,
                    precise_ip: 0,
                },
                Some(EventSpec {
                    kind: PERF_TYPE_RAW,
                    config: 0x0729,
                    precise_ip: 0,
                }),
            )
        }
        NativeSampler::PageFaults => (
            EventSpec {
                kind: PERF_TYPE_SOFTWARE,
                config: PERF_COUNT_SW_PAGE_FAULTS,
                precise_ip: 0,
            },
            None,
        ),
    })
}

/// The native path's settings, from [`ENV`].
#[derive(Clone, Debug, PartialEq)]
pub struct NativeConfig {
    pub events: String,
    pub args: RdxArgs,
    pub sampler: NativeSampler,
}

impl NativeConfig {
    pub fn parse(text: &str) -> Result<NativeConfig, String> {
        let mut events = None;
        let mut sampler = None;
        let mut args = RdxArgs {
            period: 0,
            watch: rdx::MAX_WATCH,
            seed: 1,
            jitter: 0.5,
            adaptive: false,
            // Natively the program's own mappings are not seen (no system call hook).
            prefault: false,
        };
        let num = |k: &str, v: &str| -> Result<u64, String> {
            v.parse().map_err(|_| format!("{k}={v}: not a number"))
        };
        // The events path comes last and may hold commas.
        let (head, path) = match text.split_once("events=") {
            Some((h, p)) => (h.trim_end_matches(','), Some(p)),
            None => (text, None),
        };
        if let Some(p) = path {
            events = Some(p.to_string());
        }
        for a in head.split(',').filter(|a| !a.is_empty()) {
            let (k, v) = a
                .split_once('=')
                .ok_or_else(|| format!("{ENV}: {a:?} is not key=value"))?;
            match k {
                "period" => args.period = num(k, v)?,
                "watch" => args.watch = num(k, v)? as usize,
                "seed" => args.seed = num(k, v)?,
                "jitter" => args.jitter = rdx::parse_jitter(k, v)?,
                "adaptive" => args.adaptive = num(k, v)? != 0,
                "sampler" => {
                    sampler =
                        Some(NativeSampler::from_name(v).ok_or_else(|| {
                            format!("sampler={v}: expected pebs, ibs or page-faults")
                        })?)
                }
                _ => return Err(format!("{ENV}: unknown setting {k:?}")),
            }
        }
        let events = events.ok_or_else(|| format!("{ENV}: missing events=PATH (last)"))?;
        let sampler = sampler.ok_or_else(|| format!("{ENV}: missing sampler="))?;
        if args.period == 0 {
            return Err(format!("{ENV}: missing period="));
        }
        Ok(NativeConfig {
            events,
            args,
            sampler,
        })
    }
}

/// What sampling holds open while the program runs.
struct Running {
    sampler: PerfSampler,
    /// Each sample sets the distance to the next (RDX's jitter). Not for software events:
    /// after PERF_EVENT_IOC_PERIOD the kernel overflows one at the very next event.
    jitter: bool,
    _counter: Option<PerfCounter>,
    pid: i32,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// The sampler's descriptor, for the signal hook (which must not lock).
static SAMPLER_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The sampler's signal: take every sample in its ring buffer. Runs on the main thread,
/// before it goes on with the program.
fn on_sample(fd: c_int) -> bool {
    if fd != SAMPLER_FD.load(std::sync::atomic::Ordering::Acquire) {
        return false;
    }
    // The handler owns the sampler while sampling runs: RUNNING is only locked outside it
    // while sampling starts and stops (`start`, `finish_here`); a sample then is dropped.
    let Ok(guard) = RUNNING.try_lock() else {
        return true;
    };
    let Some(run) = guard.as_ref() else {
        return true;
    };
    let mut next = None;
    run.sampler.drain(|ip, addr| {
        if addr != 0 {
            next = rdx::native_sample(ip, addr).or(next);
        }
    });
    if let (Some(gap), true) = (next, run.jitter) {
        run.sampler.set_period(gap);
    }
    true
}

fn start(cfg: &NativeConfig) -> Result<(), String> {
    rdx::init(&cfg.events, cfg.args)?;
    let (sample_spec, count_spec) = events(cfg.sampler)?;
    let anchor = &SAMPLER_FD as *const _ as u64;
    rdx::native_start(
        anchor,
        &format!(
            "native: sampler {} on the main thread only (other threads are not sampled)",
            cfg.sampler.name()
        ),
    )?;
    let counter = match count_spec {
        Some(spec) => Some(
            PerfCounter::open(spec)
                .map_err(|e| format!("cannot open the access counter ({spec:?}): {e}"))?,
        ),
        None => None,
    };
    let sampler = PerfSampler::open(sample_spec, rdx::native_first_gap(), SIGNAL).map_err(|e| {
        format!(
            "cannot open the {:?} sampler ({sample_spec:?}): {e}",
            cfg.sampler
        )
    })?;
    rdx::use_native_counter(counter.as_ref().map_or(sampler.fd(), |c| c.fd()));
    SAMPLER_FD.store(sampler.fd(), std::sync::atomic::Ordering::Release);
    sys::install_sample_hook(SIGNAL, on_sample)?;
    let enabled = sampler.enable();
    *RUNNING.lock().map_err(|_| "lock poisoned".to_string())? = Some(Running {
        sampler,
        jitter: cfg.sampler != NativeSampler::PageFaults,
        _counter: counter,
        pid: sys::pid(),
    });
    if !enabled {
        return Err(format!(
            "cannot enable the sampler: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The library's constructor: starts native RDX when mgbench asked for it.
extern "C" fn native_init() {
    let Ok(text) = std::env::var(ENV) else {
        return;
    };
    // Programs this program starts are not measured.
    std::env::remove_var(ENV);
    let cfg = match NativeConfig::parse(&text) {
        Ok(c) => c,
        Err(e) => {
            eprintln_native(&e);
            return;
        }
    };
    if let Err(e) = start(&cfg) {
        eprintln_native(&e);
        rdx::native_stop(&e);
    }
}

fn eprintln_native(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "mgbench (native RDX): {msg}");
}

/// The library's destructor (at exit): stops sampling and logs the end.
extern "C" fn native_fini() {
    finish_here();
}

/// Stops sampling and logs the end, once, in the process that started it: a child (fork, or
/// vfork, which shares this memory with its parent) leaves the parent's run alone.
fn finish_here() {
    let Ok(mut g) = RUNNING.try_lock() else {
        return;
    };
    if g.as_ref().map(|r| r.pid) != Some(sys::pid()) {
        return;
    }
    let Some(run) = g.take() else {
        return;
    };
    run.sampler.disable();
    sys::block_sample_signal();
    rdx::finish();
    drop(run);
}

/// `_exit` for the program the library is preloaded into (its calls bind here first): a
/// program that ends with `_exit` (dash does) runs no destructors, so the end and the
/// mappings are logged here, then the process exits as asked.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    finish_here();
    sys::exit_group(status)
}

/// C99's name for `_exit`.
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = native_init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = native_fini;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parsing() {
        let c = NativeConfig::parse(
            "period=4096,adaptive=1,watch=2,seed=9,jitter=0.25,sampler=page-faults,events=/tmp/a,b.txt",
        )
        .unwrap();
        assert_eq!(c.events, "/tmp/a,b.txt");
        assert_eq!(
            c.args,
            RdxArgs {
                period: 4096,
                watch: 2,
                seed: 9,
                jitter: 0.25,
                adaptive: true,
                prefault: false,
            }
        );
        assert_eq!(c.sampler, NativeSampler::PageFaults);
        assert!(NativeConfig::parse("period=1,sampler=pebs").is_err());
        assert!(NativeConfig::parse("period=1,sampler=x,events=/e").is_err());
        assert!(NativeConfig::parse("sampler=ibs,events=/e").is_err());
        assert!(NativeConfig::parse("period=1,jitter=2,sampler=ibs,events=/e").is_err());
    }
}
