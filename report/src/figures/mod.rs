//! The report's figures, one module per family. Each builds [`Section`]s of [`Figure`]s from
//! the inputs; a figure is an SVG plus the table of the numbers it draws (shown under it in a
//! `<details>` element, with the same values the results' CSV holds).

pub mod affinity;
pub mod gpu;
pub mod locality;
pub mod machine;
pub mod machines;
pub mod mpi;
pub mod pattern;
pub mod rdx;

use crate::svg::Svg;

/// The numbers behind a figure (or a table of its own).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }
}

/// One figure.
pub struct Figure {
    /// Unique in the report; also the SVG's `data-fig`.
    pub id: String,
    pub title: String,
    /// What the figure shows and how to read it.
    pub caption: String,
    pub svg: Svg,
    pub table: Table,
    pub notes: Vec<String>,
}

/// A titled group of figures (and tables) in the report and its table of contents.
pub struct Section {
    pub id: String,
    pub title: String,
    pub intro: String,
    pub figures: Vec<Figure>,
    /// Tables shown as tables (the pattern x machine comparison).
    pub tables: Vec<(String, Table)>,
}

/// An id usable in HTML and `data-fig`: letters, digits and '-'.
pub fn slug(s: &str) -> String {
    let mut o = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            o.push(c.to_ascii_lowercase());
        } else if !o.ends_with('-') {
            o.push('-');
        }
    }
    o.trim_matches('-').to_string()
}

/// A value as the CSV writes it (Rust's shortest round-trip form), or "" when absent.
/// A series longer than this is drawn per pixel column (one min-max segment each).
pub const COLUMNS: usize = 560;

/// A series of more than [`COLUMNS`] values downsampled per column: for each of the
/// `COLUMNS` consecutive runs of positions `[a, b)`, `(a, b, smallest, largest)`.
pub fn column_ranges(ys: &[f64]) -> Vec<(usize, usize, f64, f64)> {
    let n = ys.len();
    (0..COLUMNS)
        .map(|col| {
            let a = col * n / COLUMNS;
            let b = ((col + 1) * n / COLUMNS).max(a + 1).min(n);
            let (lo, hi) = ys[a..b]
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                    (l.min(v), h.max(v))
                });
            (a, b, lo, hi)
        })
        .collect()
}

pub fn num(v: f64) -> String {
    v.to_string()
}

pub fn opt(v: Option<f64>) -> String {
    v.map(num).unwrap_or_default()
}

/// MB/s as GB/s for axis ticks.
pub fn gbs(v: f64) -> String {
    crate::svg::fmt_num(v / 1000.0)
}

/// Unique figure ids: `base`, then `base-2`, `base-3` ...
#[derive(Default)]
pub struct Ids(std::collections::BTreeMap<String, usize>);

impl Ids {
    pub fn make(&mut self, base: &str) -> String {
        let base = slug(base);
        let n = self.0.entry(base.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            base
        } else {
            format!("{base}-{n}")
        }
    }
}
