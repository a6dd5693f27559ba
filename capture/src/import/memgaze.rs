//! MemGaze text traces (see the module docs of `import`).

use std::io::{BufRead, Write};

use super::{ChunkBuilder, ImportError, ImportSummary};
use crate::trace::{Access, AccessKind, TraceWriter};

fn number(s: &str, line: u64, what: &str) -> Result<u64, ImportError> {
    let t = s.trim();
    let parsed = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.chars().any(|c| c.is_ascii_alphabetic()) {
        u64::from_str_radix(t, 16)
    } else {
        t.parse()
    };
    parsed.map_err(|_| ImportError::Parse {
        line,
        what: format!("{what} {s:?} is not a number"),
    })
}

/// A timestamp: MemGaze writes seconds with a fraction (`13963977.121160038`); integers are
/// accepted too. The value is only checked (accesses keep their order in the file).
fn timestamp(s: &str, line: u64) -> Result<f64, ImportError> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| ImportError::Parse {
            line,
            what: format!(
                "time {s:?} is not a non-negative number (seconds, e.g. 13963977.121160038)"
            ),
        })
}

/// Imports a MemGaze text trace. MemGaze lines carry no load/store flag: every access is
/// recorded as a load of 8 bytes, and the trace says so in its notes. Lines have five fields,
/// or six with the dso (`[app]`, a library path); anything else is an error naming the line.
pub fn import_memgaze<W: Write>(
    input: impl BufRead,
    w: &mut TraceWriter<W>,
) -> Result<ImportSummary, ImportError> {
    let mut b = ChunkBuilder::new();
    let mut last_sample: std::collections::BTreeMap<u32, u64> = Default::default();
    for (n, line) in input.lines().enumerate() {
        let line_no = n as u64 + 1;
        let line = line.map_err(ImportError::Io)?;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        if f.len() != 5 && f.len() != 6 {
            return Err(ImportError::Parse {
                line: line_no,
                what: format!(
                    "expected `ip addr cpu time sample [dso]` (5 or 6 fields), found {} in {t:?}",
                    f.len()
                ),
            });
        }
        let ip = number(f[0], line_no, "ip")?;
        let addr = number(f[1], line_no, "address")?;
        let cpu = number(f[2], line_no, "cpu")?;
        timestamp(f[3], line_no)?;
        let sample = number(f[4], line_no, "sample")?;
        let thread = u32::try_from(cpu).map_err(|_| ImportError::Parse {
            line: line_no,
            what: format!("cpu {cpu} is out of range"),
        })?;
        if last_sample.get(&thread) != Some(&sample) {
            b.start_sample(thread, Some(sample), 0);
            last_sample.insert(thread, sample);
        }
        b.push(
            thread,
            Access {
                ip,
                addr,
                size: 8,
                kind: AccessKind::Load,
            },
            w,
        )?;
    }
    b.finish(w)
}
