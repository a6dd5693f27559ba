//! Intel Processor Trace with ptwrite (MemGaze's method): detection.
//!
//! MemGaze records memory addresses by instrumenting loads with `ptwrite` and collecting the
//! packets with Intel PT through perf_event_open. That needs an Intel CPU with PT and the
//! ptwrite capability, exposed at /sys/bus/event_source/devices/intel_pt/caps/ptwrite.

use std::path::Path;

use super::CaptureError;

const PT_DEVICE: &str = "/sys/bus/event_source/devices/intel_pt";

/// What this machine offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtSupport {
    /// No intel_pt PMU: not an Intel CPU, or a VM that hides it.
    NoPt,
    /// Intel PT without ptwrite.
    NoPtwrite,
    Available,
}

/// Probes the perf PMU description in sysfs.
pub fn detect() -> PtSupport {
    detect_in(Path::new(PT_DEVICE))
}

pub(crate) fn detect_in(dev: &Path) -> PtSupport {
    if !dev.exists() {
        return PtSupport::NoPt;
    }
    match std::fs::read_to_string(dev.join("caps/ptwrite")) {
        Ok(s) if s.trim() == "1" => PtSupport::Available,
        _ => PtSupport::NoPtwrite,
    }
}

/// The error `--backend pt` gives on this machine.
pub fn unavailable() -> CaptureError {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "this CPU".into());
    let why = match detect() {
        PtSupport::NoPt => format!(
            "{cpu} exposes no Intel PT ({PT_DEVICE} is missing; AMD CPUs and most VMs have none): use --backend qemu (default) or --backend ptrace"
        ),
        PtSupport::NoPtwrite => format!(
            "{cpu} has Intel PT but not the ptwrite capability ({PT_DEVICE}/caps/ptwrite): use --backend qemu or ptrace"
        ),
        PtSupport::Available => "Intel PT with ptwrite is present, but recording it needs binaries instrumented with ptwrite (MemGaze's method), which mgbench does not do: use --backend qemu or ptrace".to_string(),
    };
    CaptureError::Unavailable { backend: "pt", why }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_reads_sysfs_layout() {
        let dir = std::env::temp_dir().join(format!("mgb-pt-{}", std::process::id()));
        assert_eq!(detect_in(&dir), PtSupport::NoPt);
        std::fs::create_dir_all(dir.join("caps")).unwrap();
        assert_eq!(detect_in(&dir), PtSupport::NoPtwrite);
        std::fs::write(dir.join("caps/ptwrite"), "1\n").unwrap();
        assert_eq!(detect_in(&dir), PtSupport::Available);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_machine_says_why() {
        let e = unavailable().to_string();
        assert!(e.contains("pt backend is not available"), "{e}");
    }
}
