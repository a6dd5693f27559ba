//! Valgrind lackey `--trace-mem=yes` text (see the module docs of `import`).

use std::io::{BufRead, Write};

use super::{ChunkBuilder, ImportError, ImportSummary};
use crate::trace::{Access, AccessKind, TraceWriter};

fn parse_pair(s: &str, line: u64) -> Result<(u64, u8), ImportError> {
    let bad = || ImportError::Parse {
        line,
        what: format!("expected `hexaddr,size`, found {s:?}"),
    };
    let (a, n) = s.trim().split_once(',').ok_or_else(bad)?;
    let addr = u64::from_str_radix(a.trim(), 16).map_err(|_| bad())?;
    let size: u64 = n.trim().parse().map_err(|_| bad())?;
    Ok((addr, u8::try_from(size).unwrap_or(u8::MAX)))
}

/// Imports lackey output.
pub fn import_lackey<W: Write>(
    input: impl BufRead,
    w: &mut TraceWriter<W>,
) -> Result<ImportSummary, ImportError> {
    let mut b = ChunkBuilder::new();
    let mut ip = 0u64;
    for (n, line) in input.lines().enumerate() {
        let line_no = n as u64 + 1;
        let line = line.map_err(ImportError::Io)?;
        if line.starts_with("==") || line.trim().is_empty() {
            continue;
        }
        let (tag, rest) = match line.get(..2) {
            Some(t) => (t, &line[2..]),
            None => {
                return Err(ImportError::Parse {
                    line: line_no,
                    what: format!("unrecognised line {line:?}"),
                })
            }
        };
        match tag {
            "I " => ip = parse_pair(rest, line_no)?.0,
            " L" | " S" | " M" => {
                let (addr, size) = parse_pair(rest, line_no)?;
                let mut push = |kind| {
                    b.push(
                        0,
                        Access {
                            ip,
                            addr,
                            size,
                            kind,
                        },
                        w,
                    )
                };
                match tag {
                    " L" => push(AccessKind::Load)?,
                    " S" => push(AccessKind::Store)?,
                    _ => {
                        push(AccessKind::Load)?;
                        push(AccessKind::Store)?;
                    }
                }
            }
            _ => {
                return Err(ImportError::Parse {
                    line: line_no,
                    what: format!(
                    "unrecognised line {line:?}: expected lackey's `I`, ` L`, ` S` or ` M` records"
                ),
                })
            }
        }
    }
    b.finish(w)
}
