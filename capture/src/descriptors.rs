//! What mgbench and its QEMU plugin (or preloaded library) agree on about descriptor numbers.
//!
//! The plugin's files share the program's descriptor table, so it keeps them at
//! [`floor`] and up, far above the numbers programs open or name. A table that has to grow
//! that far once the process has threads (QEMU's run from its start) waits for an RCU grace
//! period in the kernel: 10-19 ms of every run here. So mgbench grows the table in the child
//! before it execs QEMU, single-threaded, where growing is free, by [`reserve`] numbers.

/// The lowest number the plugin gives its own descriptors under a soft descriptor limit of
/// `limit` (`ulimit -n`): half of it (512 under the usual 1024, 10000 under 20000), far above
/// what programs open or name (`exec 3>f`, bash's 10 and 255, and a shell that finds a
/// number in use saves and restores it), and below the limit so that it stays valid.
pub fn floor(limit: u64) -> u64 {
    (limit / 2).clamp(10, 1 << 16)
}

/// The highest number mgbench opens (and closes again) in the child before exec so that the
/// table covers the plugin's: [`floor`] plus room for its files and a few threads' watchpoints
/// (the kernel rounds the table up to a power of two), below the limit. None when the limit
/// leaves no room above the floor.
pub fn reserve(limit: u64) -> Option<u64> {
    let top = limit.checked_sub(1)?;
    let want = floor(limit).saturating_add(64).min(top);
    (want > floor(limit)).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserved_number_covers_the_floor_below_the_limit() {
        assert_eq!(floor(1024), 512);
        assert_eq!(reserve(1024), Some(576));
        assert_eq!(floor(20000), 10000);
        assert_eq!(reserve(20000), Some(10064));
        // A tight limit: up to the last valid number, or nothing above the floor.
        assert_eq!(reserve(100), Some(99));
        assert_eq!(floor(12), 10);
        assert_eq!(reserve(11), None);
        assert_eq!(reserve(0), None);
        assert_eq!(floor(u64::MAX), 1 << 16);
    }
}
