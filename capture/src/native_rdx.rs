//! What mgbench and its preloaded library agree on for native live RDX (`mgbench reuse
//! --backend pmu`): the environment variable that carries the settings and the samplers'
//! names. The library (capture/qemu-plugin, `native`) is built without the backends, so this
//! lives outside them.

use std::path::Path;

/// Debug registers a live run arms at most per thread (x86 has 4; perf may give fewer), under
/// QEMU and natively; a trace-driven run simulates as many as it is given.
pub const DEBUG_REGISTERS: usize = 4;

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

/// The glibc tunables above which memcpy (and memmove) and memset use `rep movsb` and
/// `rep stosb`.
pub const REP_STRING_TUNABLES: [&str; 2] = [
    "glibc.cpu.x86_rep_movsb_threshold",
    "glibc.cpu.x86_rep_stosb_threshold",
];

/// A string instruction this many times slower with a watchpoint armed than without counts
/// as slowed. An AMD EPYC measured 23-41x (there glibc's vector loops, unslowed, win); an
/// Intel Xeon 1.4-2.2x, two modes near 1.65 and 2.15 over 40 timings, where the vector
/// loops are slowed as much and the tunables made an armed 4 KiB copy slower (91 -> 62
/// GB/s). Well between the two, so that neither CPU's timing noise flips the choice.
pub const SLOWED_STRINGS: f64 = 5.0;

/// `GLIBC_TUNABLES` for a program measured natively where an armed watchpoint slows string
/// instructions: `old` (the user's value, if any) with each of [`REP_STRING_TUNABLES`] it
/// does not set raised out of reach (glibc then copies and clears with vector loops).
/// Returns the value and the tunables added; the user's own settings win.
pub fn without_rep_strings(old: Option<&str>) -> (String, Vec<&'static str>) {
    let old = old.unwrap_or("");
    let set: Vec<&str> = old
        .split(':')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
        .collect();
    let added: Vec<&'static str> = REP_STRING_TUNABLES
        .into_iter()
        .filter(|t| !set.contains(t))
        .collect();
    let mut value: Vec<String> = old
        .split(':')
        .filter(|kv| !kv.is_empty())
        .map(str::to_string)
        .collect();
    value.extend(added.iter().map(|t| format!("{t}={}", i64::MAX)));
    (value.join(":"), added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rep_string_tunables_join_the_users_own() {
        let max = i64::MAX;
        let (v, added) = without_rep_strings(None);
        assert_eq!(
            v,
            format!(
                "glibc.cpu.x86_rep_movsb_threshold={max}:glibc.cpu.x86_rep_stosb_threshold={max}"
            )
        );
        assert_eq!(added, REP_STRING_TUNABLES);
        // The user's other tunables stay, and a threshold they set is theirs.
        let (v, added) = without_rep_strings(Some(
            "glibc.malloc.check=3:glibc.cpu.x86_rep_movsb_threshold=4096",
        ));
        assert_eq!(
            v,
            format!(
                "glibc.malloc.check=3:glibc.cpu.x86_rep_movsb_threshold=4096:glibc.cpu.x86_rep_stosb_threshold={max}"
            )
        );
        assert_eq!(added, ["glibc.cpu.x86_rep_stosb_threshold"]);
        let both = "glibc.cpu.x86_rep_movsb_threshold=1:glibc.cpu.x86_rep_stosb_threshold=1";
        assert_eq!(without_rep_strings(Some(both)), (both.to_string(), vec![]));
        assert_eq!(without_rep_strings(Some("")).1.len(), 2);
    }
}
