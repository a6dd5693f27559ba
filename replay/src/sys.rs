//! Operating-system queries and the few raw calls replay needs: CPU affinity, available memory,
//! cache sizes and host facts. Everything here reads `/proc` and `/sys` or calls libc; callers
//! get plain values and `Option`s, never raw handles.

use std::fs;

/// CPUs this process may run on, in ascending order (honours taskset/cgroup masks).
///
/// Read once and cached: the pool later pins the calling thread to one CPU, and Linux reports
/// a pinned thread's own mask, which would make a second read return a single CPU.
pub fn allowed_cpus() -> Vec<usize> {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(read_allowed_cpus).clone()
}

#[cfg(target_os = "linux")]
fn read_allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is its documented empty state, and
    // sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 means the calling thread; the pointer and size describe `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return fallback_cpus();
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i < CPU_SETSIZE, the capacity of `set`.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect();
    if cpus.is_empty() {
        fallback_cpus()
    } else {
        cpus
    }
}

#[cfg(not(target_os = "linux"))]
fn read_allowed_cpus() -> Vec<usize> {
    fallback_cpus()
}

fn fallback_cpus() -> Vec<usize> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n).collect()
}

/// The calling thread's current affinity mask, to restore later.
#[cfg(target_os = "linux")]
pub fn current_affinity() -> Option<Vec<usize>> {
    let cpus = read_allowed_cpus();
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(not(target_os = "linux"))]
pub fn current_affinity() -> Option<Vec<usize>> {
    None
}

/// Pins the calling thread to the given CPUs. Returns false when the kernel refuses.
#[cfg(target_os = "linux")]
pub fn pin_current_thread(cpus: &[usize]) -> bool {
    // SAFETY: see allowed_cpus; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: c < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cpus: &[usize]) -> bool {
    false
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn available_memory_bytes() -> Option<u64> {
    meminfo_field("MemAvailable:")
}

/// `MemTotal` from /proc/meminfo, in bytes.
pub fn total_memory_bytes() -> Option<u64> {
    meminfo_field("MemTotal:")
}

fn meminfo_field(key: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Total size of the last-level caches, summed over distinct cache instances (STREAM's rule
/// sizes arrays against all of them).
pub fn last_level_cache_bytes() -> Option<u64> {
    let base = "/sys/devices/system/cpu";
    let mut best_level = 0u32;
    let mut instances: Vec<(String, u64)> = Vec::new();
    for cpu in fs::read_dir(base).ok()?.flatten() {
        let name = cpu.file_name().to_string_lossy().into_owned();
        if !name.starts_with("cpu") || !name[3..].chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(caches) = fs::read_dir(cpu.path().join("cache")) else {
            continue;
        };
        for idx in caches.flatten() {
            let p = idx.path();
            let read = |f: &str| {
                fs::read_to_string(p.join(f))
                    .ok()
                    .map(|s| s.trim().to_string())
            };
            let (Some(level), Some(kind), Some(size), shared) = (
                read("level").and_then(|l| l.parse::<u32>().ok()),
                read("type"),
                read("size").and_then(|s| parse_cache_size(&s)),
                read("shared_cpu_list").unwrap_or_else(|| name.clone()),
            ) else {
                continue;
            };
            if kind == "Instruction" {
                continue;
            }
            if level > best_level {
                best_level = level;
                instances.clear();
            }
            if level == best_level && !instances.iter().any(|(s, _)| *s == shared) {
                instances.push((shared, size));
            }
        }
    }
    let total: u64 = instances.iter().map(|(_, s)| s).sum();
    (total > 0).then_some(total)
}

fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1024),
        'M' | 'm' => (&s[..s.len() - 1], 1024 * 1024),
        'G' | 'g' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// The CPU model name from /proc/cpuinfo.
pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// This machine's host name.
pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// The 1-minute load average, to record how busy the machine was.
pub fn load_average_1m() -> Option<f64> {
    fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn this_machine_has_cpus_and_memory() {
        assert!(!allowed_cpus().is_empty());
        if cfg!(target_os = "linux") {
            assert!(available_memory_bytes().unwrap() > 0);
        }
    }
}
