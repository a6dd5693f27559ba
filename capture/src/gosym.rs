//! Function names from a Go program's own table (`.gopclntab`), which the Go runtime needs
//! for stack traces and so keeps when the symbol table is stripped (Debian's Go programs
//! are): the entry of every function and its name.
//!
//! Read as laid out by Go 1.16 to 1.2x (magic `0xfffffffa`, then `0xfffffff0` from 1.18 and
//! `0xfffffff1` from 1.20): a header (magic, two pad bytes, the instruction size quantum, the
//! pointer size, then pointer-sized fields: the function count, the file count, from 1.18 the
//! text start, then the offsets of the name table, the compilation-unit table, the file table,
//! the pc tables and the function table); the function table holds `nfunc + 1` pairs of an
//! entry and the offset of the function's record (whose second word is the offset of its
//! name in the name table); the last entry is the end of the last function.

/// The functions of a Go program: (entry, end, name), sorted by entry.
#[derive(Debug, Default)]
pub struct GoFunctions {
    functions: Vec<(u64, u64, String)>,
}

impl GoFunctions {
    /// Reads `table`, the contents of a `.gopclntab` section; `text` is the address of the
    /// program's `.text` section, for a table whose own text start is 0 (a position-
    /// independent program's, filled by a relocation at load). None where the table is not
    /// one of the layouts above or does not hold together.
    pub fn parse(table: &[u8], text: u64) -> Option<GoFunctions> {
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(table.get(at..at + 4)?.try_into().ok()?))
        };
        let magic = u32_at(0)?;
        let ptr = usize::from(*table.get(7)?);
        if ptr != 8 || table.get(4..6)? != [0, 0] {
            return None;
        }
        let word = |i: usize| -> Option<u64> {
            let at = 8 + i * ptr;
            Some(u64::from_le_bytes(table.get(at..at + 8)?.try_into().ok()?))
        };
        let (new_layout, text_start, names, functab) = match magic {
            0xffff_fff0 | 0xffff_fff1 => {
                let start = match word(2)? {
                    0 => text,
                    s => s,
                };
                (true, start, word(3)?, word(7)?)
            }
            0xffff_fffa => (false, 0, word(2)?, word(6)?),
            _ => return None,
        };
        let nfunc = usize::try_from(word(0)?).ok()?;
        let names = usize::try_from(names).ok()?;
        let functab = usize::try_from(functab).ok()?;
        // Each function-table pair: two u32 (entry offset, record offset) from 1.18, two
        // pointers (entry address, record offset) before.
        let pair = if new_layout { 8 } else { 2 * ptr };
        if nfunc == 0 || functab.checked_add((nfunc + 1).checked_mul(pair)?)? > table.len() {
            return None;
        }
        let entry = |k: usize| -> Option<(u64, usize)> {
            let at = functab + k * pair;
            if new_layout {
                Some((
                    text_start.checked_add(u64::from(u32_at(at)?))?,
                    u32_at(at + 4)? as usize,
                ))
            } else {
                let e = u64::from_le_bytes(table.get(at..at + 8)?.try_into().ok()?);
                let f = u64::from_le_bytes(table.get(at + 8..at + 16)?.try_into().ok()?);
                Some((e, usize::try_from(f).ok()?))
            }
        };
        let mut functions = Vec::with_capacity(nfunc);
        for k in 0..nfunc {
            let (start, record) = entry(k)?;
            let (end, _) = entry(k + 1)?;
            // The record's name offset: after a u32 entry offset from 1.18, after a pointer
            // entry before.
            let name_at = functab + record + if new_layout { 4 } else { ptr };
            let off = usize::try_from(u32_at(name_at)?).ok()?;
            let bytes = table.get(names.checked_add(off)?..)?;
            let len = bytes.iter().position(|&b| b == 0)?;
            let name = std::str::from_utf8(&bytes[..len]).ok()?;
            if end < start {
                return None;
            }
            functions.push((start, end, name.to_string()));
        }
        functions.sort_by_key(|f| f.0);
        Some(GoFunctions { functions })
    }

    /// The table of the ELF file `file`, if it is a Go program that has one (see [`parse`]).
    ///
    /// [`parse`]: GoFunctions::parse
    pub fn of(file: &object::File) -> Option<GoFunctions> {
        use object::{Object, ObjectSection};
        let table = file.section_by_name(".gopclntab")?;
        let text = file.section_by_name(".text").map_or(0, |t| t.address());
        GoFunctions::parse(table.data().ok()?, text)
    }

    /// The name of the function that holds `addr`.
    pub fn find(&self, addr: u64) -> Option<&str> {
        let i = self
            .functions
            .partition_point(|f| f.0 <= addr)
            .checked_sub(1)?;
        let (start, end, name) = self.functions.get(i)?;
        (*start <= addr && addr < *end).then_some(name.as_str())
    }

    /// Every function: (entry, end, name), by entry.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, &str)> {
        self.functions.iter().map(|(s, e, n)| (*s, *e, n.as_str()))
    }

    pub fn len(&self) -> usize {
        self.functions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go 1.18 table of `functions` (entry offset from `text`, name), laid out as the
    /// linker does, the last entry ending at `end`.
    fn table_118(text: u64, functions: &[(u32, &str)], end: u32) -> Vec<u8> {
        let header = 8 + 8 * 8;
        let mut names = Vec::new();
        let mut name_offs = Vec::new();
        for (_, n) in functions {
            name_offs.push(names.len() as u32);
            names.extend_from_slice(n.as_bytes());
            names.push(0);
        }
        let names_at = header;
        let functab_at = names_at + names.len();
        let n = functions.len();
        let records_at = (n + 1) * 8; // relative to the function table
        let mut t = Vec::new();
        t.extend_from_slice(&0xffff_fff0u32.to_le_bytes());
        t.extend_from_slice(&[0, 0, 1, 8]);
        for w in [
            n as u64,
            0,
            text,
            names_at as u64,
            0,
            0,
            0,
            functab_at as u64,
        ] {
            t.extend_from_slice(&w.to_le_bytes());
        }
        t.extend_from_slice(&names);
        for (k, (off, _)) in functions.iter().enumerate() {
            t.extend_from_slice(&off.to_le_bytes());
            t.extend_from_slice(&((records_at + k * 8) as u32).to_le_bytes());
        }
        t.extend_from_slice(&end.to_le_bytes());
        t.extend_from_slice(&0u32.to_le_bytes());
        for (k, (off, _)) in functions.iter().enumerate() {
            t.extend_from_slice(&off.to_le_bytes());
            t.extend_from_slice(&name_offs[k].to_le_bytes());
        }
        t
    }

    #[test]
    fn functions_are_found_by_their_entries_and_ends() {
        let t = table_118(
            0x40_1000,
            &[
                (0, "runtime.text"),
                (0x40, "main.gather"),
                (0x100, "main.main"),
            ],
            0x180,
        );
        let go = GoFunctions::parse(&t, 0x40_0000).unwrap();
        assert_eq!(go.len(), 3);
        assert_eq!(go.find(0x40_1000), Some("runtime.text"));
        assert_eq!(go.find(0x40_103f), Some("runtime.text"));
        assert_eq!(go.find(0x40_1040), Some("main.gather"));
        assert_eq!(go.find(0x40_117f), Some("main.main"));
        assert_eq!(go.find(0x40_1180), None);
        assert_eq!(go.find(0x40_0fff), None);
        // A position-independent program's table says text 0: the .text section's address
        // stands in.
        let pie = table_118(0, &[(0x10, "main.f")], 0x20);
        let go = GoFunctions::parse(&pie, 0x2000).unwrap();
        assert_eq!(go.find(0x2015), Some("main.f"));
    }

    #[test]
    fn what_is_not_a_table_gives_nothing() {
        assert!(GoFunctions::parse(b"", 0).is_none());
        assert!(GoFunctions::parse(&[0xfb, 0xff, 0xff, 0xff, 0, 0, 1, 8], 0).is_none());
        let mut t = table_118(0x1000, &[(0, "a"), (8, "b")], 16);
        // Cut short: the function table runs past the end.
        t.truncate(t.len() - 12);
        assert!(GoFunctions::parse(&t, 0).is_none());
        // A name that runs off the table.
        let mut t = table_118(0x1000, &[(0, "a")], 16);
        let names_at = 8 + 8 * 8;
        t[names_at + 1] = b'x';
        let len = t.len();
        t[len - 4..].copy_from_slice(&100_000u32.to_le_bytes());
        assert!(GoFunctions::parse(&t, 0).is_none());
    }
}
