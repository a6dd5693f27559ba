//! `perf_event_open`'s attribute record, shared by mgbench (its debug-register calibration,
//! `backend::sys`) and its QEMU plugin and preloaded library (watchpoints, PMU samplers and
//! counters). No system calls here: each side opens events from its own `sys` module.

/// `struct perf_event_attr` as of Linux 5.13 (`PERF_ATTR_SIZE_VER7`): the fields mgbench's
/// events use, and the rest zero.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct PerfEventAttr {
    pub kind: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub bp_addr: u64,
    pub bp_len: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
}

pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_RAW: u32 = 4;
pub const PERF_TYPE_BREAKPOINT: u32 = 5;
pub const HW_BREAKPOINT_RW: u32 = 3;
/// `perf_event_open`'s flags argument: the descriptor is close-on-exec.
pub const PERF_FLAG_FD_CLOEXEC: u64 = 1 << 3;
/// Bits of [`PerfEventAttr::flags`].
pub const FLAG_DISABLED: u64 = 1 << 0;
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
pub const FLAG_PRECISE_IP_SHIFT: u64 = 15;
pub const FLAG_REMOVE_ON_EXEC: u64 = 1 << 36;
pub const FLAG_SIGTRAP: u64 = 1 << 37;

/// A hardware watchpoint (an x86 debug register) on the `len` bytes at `addr`, read or
/// write, user code only, enabled.
pub fn breakpoint(addr: u64, len: u64) -> PerfEventAttr {
    PerfEventAttr {
        kind: PERF_TYPE_BREAKPOINT,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        sample_period: 1,
        flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
        bp_type: HW_BREAKPOINT_RW,
        bp_addr: addr,
        bp_len: len,
        ..PerfEventAttr::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_has_the_kernels_ver7_layout() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 128);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, bp_addr), 56);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, sig_data), 120);
        let b = breakpoint(0x1000, 8);
        assert_eq!((b.kind, b.size, b.bp_len), (PERF_TYPE_BREAKPOINT, 128, 8));
    }
}
