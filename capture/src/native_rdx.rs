//! What mgbench and its preloaded library agree on for native live RDX (`mgbench reuse
//! --backend pmu`): the environment variable that carries the settings and the samplers'
//! names. The library (capture/qemu-plugin, `native`) is built without the backends, so this
//! lives outside them.

use std::path::Path;

/// The environment variable mgbench sets for the preloaded library:
/// `period=P,watch=W,seed=S,jitter=J,sampler=NAME,events=PATH` (the path last: it may hold
/// commas).
pub const ENV: &str = "MGBENCH_RDX_NATIVE";

/// Where native live RDX takes its samples (the library's `native` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeSampler {
    /// Intel PEBS (MEM_INST_RETIRED.ANY), as RDX.
    Pebs,
    /// AMD IBS op, with ls_dispatch as the access counter.
    Ibs,
    /// The kernel's page-fault software event: times in page faults, not accesses. It runs
    /// every part of the native path on a machine without a PMU (a self-test).
    PageFaults,
}

impl NativeSampler {
    /// The name the library takes (`sampler=`).
    pub fn name(self) -> &'static str {
        match self {
            NativeSampler::Pebs => "pebs",
            NativeSampler::Ibs => "ibs",
            NativeSampler::PageFaults => "page-faults",
        }
    }

    /// The sampler called `name` (as [`NativeSampler::name`] gives it).
    pub fn from_name(name: &str) -> Option<NativeSampler> {
        [
            NativeSampler::Pebs,
            NativeSampler::Ibs,
            NativeSampler::PageFaults,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// What it is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            NativeSampler::Pebs => "Intel PEBS mem-loads",
            NativeSampler::Ibs => "AMD IBS op",
            NativeSampler::PageFaults => "the page-fault software event",
        }
    }

    /// The PMU sampler this machine has, if any (IBS op or PEBS mem-loads in sysfs).
    pub fn detect() -> Option<NativeSampler> {
        let dir = Path::new("/sys/bus/event_source/devices");
        if dir.join("ibs_op").exists() {
            Some(NativeSampler::Ibs)
        } else if dir.join("cpu/events/mem-loads").exists() {
            Some(NativeSampler::Pebs)
        } else {
            None
        }
    }
}
