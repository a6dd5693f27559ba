//! `--compact-gaps BYTES`: run patterns whose indices are too far apart for this machine's
//! memory (a real trace held index 8,795,795,864,437, a 70 TB buffer) by shrinking only the
//! gaps that no cache or TLB can tell apart.
//!
//! The distinct indices of a pattern, sorted, are `v_0 < v_1 < ...`. A distance
//! `g = v_k - v_(k-1)` of at most `B = BYTES / 8` elements is kept as it is; a longer one
//! becomes `B + (g mod B)`, which lies in `[B, 2B)`. The first index is treated as a distance
//! from 0. Every index then keeps its offset inside a `BYTES`-aligned block (`new ≡ old mod B`),
//! so with `BYTES` a multiple of the page size (the default is a 2 MiB huge page) the cache-line
//! offsets, page offsets and the order of the indices are all preserved, and two indices share
//! a line, a page or a huge page after compaction exactly when they did before. Only distances
//! beyond `BYTES` shrink, and the hardware sees those as "far" either way.
//!
//! Each side is compacted on its own: the pattern of gather/scatter, both sides of gs, the
//! outer table of the multi-kernels (the indices into the sparse buffer). Deltas and counts
//! are unchanged.

use serde::{Deserialize, Serialize};

use crate::config::{Kernel, RunConfig};

/// The default bound: one 2 MiB huge page.
pub const DEFAULT_GAP_BYTES: u64 = 2 << 20;

/// What compaction did to one configuration (in the record's `compaction` key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    /// The bound: distances up to this many bytes were kept.
    pub max_gap_bytes: u64,
    /// Distances between consecutive distinct indices that were longer and were shrunk.
    pub gaps_shrunk: u64,
    /// Elements the patterns spanned before (largest index + 1, summed over the sides).
    pub original_span_elems: u64,
    /// Elements they span now.
    pub span_elems: u64,
}

/// Parses a size: a number of bytes with an optional unit (`4096`, `64KiB`, `2MiB`, `1G`;
/// K/M/G and KiB/MiB/GiB are all powers of 1024, KB/MB/GB powers of 1000).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 4096, 64KiB, 2MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?}: use B, KiB, MiB or GiB"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Checks a `--compact-gaps` bound: a whole number of 64-byte cache lines.
pub fn check_bound(bytes: u64) -> Result<(), String> {
    if bytes < 64 || bytes % 64 != 0 {
        return Err(format!(
            "--compact-gaps {bytes}: the bound must be a positive multiple of 64 bytes (a cache \
             line) so line offsets survive; a page multiple (4KiB, 2MiB) also keeps page offsets"
        ));
    }
    Ok(())
}

/// Result of compacting one index array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Side {
    shrunk: u64,
    before: u64,
    after: u64,
}

/// Compacts `indices` in place with a bound of `b` elements (see the module docs).
fn compact_side(indices: &mut [usize], b: usize) -> Side {
    let mut distinct = indices.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let Some(&top) = distinct.last() else {
        return Side::default();
    };
    let mut mapped = Vec::with_capacity(distinct.len());
    let (mut prev_old, mut prev_new) = (0usize, 0usize);
    let mut shrunk = 0u64;
    for &v in &distinct {
        let g = v - prev_old;
        let g = if g > b {
            shrunk += 1;
            b + g % b
        } else {
            g
        };
        prev_new += g;
        prev_old = v;
        mapped.push(prev_new);
    }
    for x in indices.iter_mut() {
        if let Ok(k) = distinct.binary_search(x) {
            *x = mapped[k];
        }
    }
    Side {
        shrunk,
        before: top as u64 + 1,
        after: prev_new as u64 + 1,
    }
}

/// Compacts every index array of `config` with a bound of `bytes` (a multiple of 64). Returns
/// what was done, or None when no distance exceeded the bound (the config is then unchanged).
/// Adds a note to the config when it changed, naming the flag that asked for it (`label`).
pub fn compact(config: &mut RunConfig, bytes: u64, label: &str) -> Option<Compaction> {
    let b = usize::try_from(bytes / 8).unwrap_or(usize::MAX).max(1);
    let mut sides: Vec<(&str, Side)> = Vec::new();
    match &mut config.kernel {
        Kernel::Gather { pattern, .. } | Kernel::Scatter { pattern, .. } => {
            sides.push(("pattern", compact_side(pattern, b)));
        }
        Kernel::GatherScatter {
            gather, scatter, ..
        } => {
            sides.push(("pattern-gather", compact_side(gather, b)));
            sides.push(("pattern-scatter", compact_side(scatter, b)));
        }
        Kernel::MultiGather { outer, .. } | Kernel::MultiScatter { outer, .. } => {
            sides.push(("pattern", compact_side(outer, b)));
        }
        Kernel::Apex(_) => return None,
    }
    let shrunk: u64 = sides.iter().map(|(_, s)| s.shrunk).sum();
    if shrunk == 0 {
        return None;
    }
    let c = Compaction {
        max_gap_bytes: bytes,
        gaps_shrunk: shrunk,
        original_span_elems: sides.iter().map(|(_, s)| s.before).sum(),
        span_elems: sides.iter().map(|(_, s)| s.after).sum(),
    };
    for (key, s) in sides.iter().filter(|(_, s)| s.shrunk > 0) {
        config.notes.push(format!(
            "\"{key}\" compacted by {label}: {} distance(s) longer than {} shrunk (offsets \
             within {}-byte blocks kept); span {} -> {}",
            s.shrunk,
            crate::plan::human_bytes(u128::from(bytes)),
            bytes,
            crate::plan::human_bytes(u128::from(s.before) * 8),
            crate::plan::human_bytes(u128::from(s.after) * 8),
        ));
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_gaps_stay_long_ones_shrink_keeping_block_offsets() {
        // Bound 8 elements (64 bytes).
        let mut p = vec![0, 3, 100, 5, 1000, 100];
        let s = compact_side(&mut p, 8);
        // Distinct: 0 3 5 100 1000. Gaps 0 3 2 | 95 -> 8 + 7 = 15 | 900 -> 8 + 4 = 12.
        assert_eq!(p, vec![0, 3, 20, 5, 32, 20]);
        assert_eq!(s.shrunk, 2);
        assert_eq!((s.before, s.after), (1001, 33));
        for (old, new) in [(100usize, 20usize), (1000, 32)] {
            assert_eq!(old % 8, new % 8);
        }
    }

    #[test]
    fn huge_index_from_a_real_trace_fits() {
        let huge = 8_795_795_864_437usize;
        let mut p = vec![6, 8, 2, huge, 28, 0];
        let b = (DEFAULT_GAP_BYTES / 8) as usize;
        let s = compact_side(&mut p, b);
        assert_eq!(s.shrunk, 1);
        assert_eq!(&p[..3], &[6, 8, 2]);
        assert!(p[3] > 28 && p[3] < 28 + 2 * b);
        assert_eq!(p[3] % b, huge % b);
        // Order is kept.
        assert!(p[3] > p[4]);
    }

    #[test]
    fn leading_gap_counts_from_zero() {
        let mut p = vec![1 << 40, (1 << 40) + 1];
        let s = compact_side(&mut p, 512);
        assert_eq!(p, vec![512, 513]);
        assert_eq!(s.shrunk, 1);
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert!(parse_size("2 parsecs").is_err());
        assert!(parse_size("-4").is_err());
        assert!(check_bound(100).is_err());
        assert!(check_bound(0).is_err());
        assert!(check_bound(4096).is_ok());
    }
}
