//! The report host's cache sizes (for markers on reuse-distance curves), read from sysfs.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

/// Data and unified caches of CPU 0 as ("L1d", bytes), ("L2", bytes), ("L3", bytes), in
/// level order; empty where sysfs does not say.
pub fn caches() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache") else {
        return out;
    };
    let mut entries: Vec<_> = dir.flatten().map(|e| e.path()).collect();
    entries.sort();
    for e in entries {
        let read = |f: &str| {
            std::fs::read_to_string(e.join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let (level, kind, size) = (read("level"), read("type"), read("size"));
        if kind == "Instruction" || level.is_empty() {
            continue;
        }
        let bytes = parse_size(&size);
        if bytes == 0 {
            continue;
        }
        let name = if kind == "Data" {
            format!("L{level}d")
        } else {
            format!("L{level}")
        };
        if !out.iter().any(|(n, _)| *n == name) {
            out.push((name, bytes));
        }
    }
    out.sort_by_key(|(_, b)| *b);
    out
}

/// "32K", "1024K", "32768K", "2M" in bytes.
fn parse_size(s: &str) -> u64 {
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1024),
        Some('M') => (&s[..s.len() - 1], 1024 * 1024),
        Some('G') => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().map_or(0, |n| n * mult)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse_size("32K"), 32768);
        assert_eq!(super::parse_size("2M"), 2 << 20);
        assert_eq!(super::parse_size("junk"), 0);
    }
}
