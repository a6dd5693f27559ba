//! gs_patterns / DynamoRIO memtrace records (see the module docs of `import`).

use std::io::{BufRead, Write};

use super::{ChunkBuilder, ImportError, ImportSummary};
use crate::trace::{Access, AccessKind, TraceWriter};

const RECORD: usize = 12;

fn is_instruction(kind: u16) -> bool {
    (0xa..=0x10).contains(&kind) || kind == 0x1e
}

/// Imports a gs_patterns record stream (already decompressed).
pub fn import_gspin<W: Write>(
    mut input: impl BufRead,
    w: &mut TraceWriter<W>,
) -> Result<ImportSummary, ImportError> {
    let mut b = ChunkBuilder::new();
    let mut pc = 0u64;
    let mut rec = [0u8; RECORD];
    let mut index = 0u64;
    loop {
        let mut got = 0;
        while got < RECORD {
            let n = input.read(&mut rec[got..]).map_err(ImportError::Io)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got == 0 {
            break;
        }
        if got < RECORD {
            return Err(ImportError::Record {
                offset: index * RECORD as u64,
                what: format!(
                    "record {index} is truncated ({got} of 12 bytes): the input ends mid-record"
                ),
            });
        }
        let kind = u16::from_le_bytes([rec[0], rec[1]]);
        let size = u16::from_le_bytes([rec[2], rec[3]]);
        let addr = u64::from_le_bytes(rec[4..12].try_into().unwrap_or([0; 8]));
        match kind {
            0 | 1 => {
                let access = Access {
                    ip: pc,
                    addr,
                    size: u8::try_from(size).unwrap_or(u8::MAX),
                    kind: if kind == 0 {
                        AccessKind::Load
                    } else {
                        AccessKind::Store
                    },
                };
                if size > 255 {
                    b.ignore("accesses larger than 255 bytes (size clamped)");
                }
                b.push(0, access, w)?;
            }
            k if is_instruction(k) => pc = addr,
            _ => b.ignore(&format!("record type {kind:#x}")),
        }
        index += 1;
    }
    b.finish(w)
}
