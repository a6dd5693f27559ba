//! Pattern specifications: explicit index lists and Spatter's generator strings.
//!
//! A pattern is a list of element indices (8-byte words). Spatter accepts either a JSON integer
//! list, a comma-separated string of integers, or one of three generators:
//!
//! * `UNIFORM:len:stride[:delta|:NR]` gives `i * stride`; a third field sets the delta, and `NR`
//!   ("no reuse") sets `delta = len * stride` so that consecutive iterations never overlap.
//! * `MS1:len:locations:gaps` ("mostly stride 1") starts at -1 and adds 1 per element, except at
//!   the listed locations where it adds the gap (one gap for all, or one per location).
//! * `LAPLACIAN:dim:order:n` is the `2*dim*order + 1` point stencil of an `n^dim` grid; its delta
//!   is forced to 1 (the stencil slides one element per iteration).

use std::fmt;

/// Longest pattern a generator may produce (2^28 indices = 2 GiB of indices).
pub const MAX_GENERATED_LEN: usize = 1 << 28;

/// Why a pattern specification could not be turned into indices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("the pattern is empty")]
    Empty,
    #[error("negative index {0} in pattern: indices are element offsets and must be >= 0")]
    Negative(String),
    #[error("{0:?} is not an integer index")]
    NotAnInteger(String),
    #[error("index {0} does not fit in 64 bits")]
    TooLarge(String),
    #[error("unknown generator {0:?}: expected UNIFORM:len:stride[:delta|:NR], MS1:len:locations:gaps or LAPLACIAN:dim:order:n")]
    UnknownGenerator(String),
    #[error("malformed {generator} generator {spec:?}: {why}; expected {usage}")]
    Malformed {
        generator: &'static str,
        spec: String,
        why: String,
        usage: &'static str,
    },
    #[error("{generator} generator {spec:?} would produce more than {max} indices")]
    TooLong {
        generator: &'static str,
        spec: String,
        max: usize,
    },
}

/// How a generator fixes the delta between iterations, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeneratorDelta {
    /// `UNIFORM:len:stride:D`: delta D.
    Explicit(usize),
    /// `UNIFORM:len:stride:NR`: delta = len * stride (no reuse between iterations).
    NoReuse(usize),
    /// `LAPLACIAN`: delta forced to 1.
    Stencil,
}

impl GeneratorDelta {
    /// The delta in elements.
    pub fn value(self) -> usize {
        match self {
            GeneratorDelta::Explicit(d) | GeneratorDelta::NoReuse(d) => d,
            GeneratorDelta::Stencil => 1,
        }
    }
}

impl GeneratorDelta {
    /// Short machine-readable name, used in results' `delta_source`.
    pub fn source_name(self) -> &'static str {
        match self {
            GeneratorDelta::Explicit(_) => "generator:UNIFORM",
            GeneratorDelta::NoReuse(_) => "generator:UNIFORM:NR",
            GeneratorDelta::Stencil => "generator:LAPLACIAN",
        }
    }
}

impl fmt::Display for GeneratorDelta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeneratorDelta::Explicit(d) => write!(f, "delta {d} from the UNIFORM generator"),
            GeneratorDelta::NoReuse(d) => write!(f, "delta {d} from UNIFORM's NR (len*stride)"),
            GeneratorDelta::Stencil => write!(f, "delta 1 forced by LAPLACIAN"),
        }
    }
}

/// A pattern expanded to its indices, with the delta its generator implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub indices: Vec<usize>,
    pub generator_delta: Option<GeneratorDelta>,
    /// The specification as the user wrote it (a generator string, or "list").
    pub spec: String,
}

impl Pattern {
    /// An explicit index list.
    pub fn from_list(indices: Vec<usize>) -> Result<Pattern, PatternError> {
        if indices.is_empty() {
            return Err(PatternError::Empty);
        }
        Ok(Pattern {
            indices,
            generator_delta: None,
            spec: "list".to_string(),
        })
    }

    /// Parses a pattern string: a generator, or comma-separated integers.
    pub fn parse(spec: &str) -> Result<Pattern, PatternError> {
        let spec = spec.trim().trim_matches('"').trim();
        if spec.is_empty() {
            return Err(PatternError::Empty);
        }
        let starts_alpha = spec.starts_with(|c: char| c.is_ascii_alphabetic());
        if !starts_alpha {
            let indices = spec
                .split(|c: char| c == ',' || c.is_ascii_whitespace())
                .filter(|s| !s.is_empty())
                .map(parse_index)
                .collect::<Result<Vec<_>, _>>()?;
            let mut p = Pattern::from_list(indices)?;
            p.spec = "list".to_string();
            return Ok(p);
        }
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        let fields: Vec<&str> = if args.is_empty() {
            Vec::new()
        } else {
            args.split(':').map(str::trim).collect()
        };
        let (indices, generator_delta) = match name.to_ascii_uppercase().as_str() {
            "UNIFORM" => uniform(spec, &fields)?,
            "MS1" => (ms1(spec, &fields)?, None),
            "LAPLACIAN" => (laplacian(spec, &fields)?, Some(GeneratorDelta::Stencil)),
            _ => return Err(PatternError::UnknownGenerator(spec.to_string())),
        };
        if indices.is_empty() {
            return Err(PatternError::Empty);
        }
        Ok(Pattern {
            indices,
            generator_delta,
            spec: spec.to_string(),
        })
    }
}

/// Parses one non-negative index, with errors that say what was wrong.
pub fn parse_index(s: &str) -> Result<usize, PatternError> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('-') {
        if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()) {
            return Err(PatternError::Negative(s.to_string()));
        }
        return Err(PatternError::NotAnInteger(s.to_string()));
    }
    if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) {
        return Err(PatternError::NotAnInteger(s.to_string()));
    }
    s.parse::<usize>()
        .map_err(|_| PatternError::TooLarge(s.to_string()))
}

const UNIFORM_USAGE: &str = "UNIFORM:len:stride[:delta|:NR]";
const MS1_USAGE: &str = "MS1:len:locations:gaps (locations and gaps comma-separated)";
const LAPLACIAN_USAGE: &str = "LAPLACIAN:dim:order:n";

fn malformed(
    generator: &'static str,
    usage: &'static str,
    spec: &str,
    why: String,
) -> PatternError {
    PatternError::Malformed {
        generator,
        spec: spec.to_string(),
        why,
        usage,
    }
}

fn field(
    generator: &'static str,
    usage: &'static str,
    spec: &str,
    what: &str,
    s: &str,
) -> Result<usize, PatternError> {
    parse_index(s).map_err(|e| malformed(generator, usage, spec, format!("{what}: {e}")))
}

fn check_len(generator: &'static str, spec: &str, len: usize) -> Result<(), PatternError> {
    if len > MAX_GENERATED_LEN {
        return Err(PatternError::TooLong {
            generator,
            spec: spec.to_string(),
            max: MAX_GENERATED_LEN,
        });
    }
    Ok(())
}

fn overflow(generator: &'static str, usage: &'static str, spec: &str) -> PatternError {
    malformed(
        generator,
        usage,
        spec,
        "indices overflow 64 bits".to_string(),
    )
}

fn uniform(
    spec: &str,
    fields: &[&str],
) -> Result<(Vec<usize>, Option<GeneratorDelta>), PatternError> {
    let g = "UNIFORM";
    if fields.len() < 2 || fields.len() > 3 {
        return Err(malformed(
            g,
            UNIFORM_USAGE,
            spec,
            format!("{} fields", fields.len()),
        ));
    }
    let len = field(g, UNIFORM_USAGE, spec, "length", fields[0])?;
    let stride = field(g, UNIFORM_USAGE, spec, "stride", fields[1])?;
    check_len(g, spec, len)?;
    if len > 0 && (len - 1).checked_mul(stride).is_none() {
        return Err(overflow(g, UNIFORM_USAGE, spec));
    }
    let delta = match fields.get(2) {
        None => None,
        Some(f) if f.eq_ignore_ascii_case("NR") => Some(GeneratorDelta::NoReuse(
            len.checked_mul(stride)
                .ok_or_else(|| overflow(g, UNIFORM_USAGE, spec))?,
        )),
        Some(f) => Some(GeneratorDelta::Explicit(field(
            g,
            UNIFORM_USAGE,
            spec,
            "delta",
            f,
        )?)),
    };
    Ok(((0..len).map(|i| i * stride).collect(), delta))
}

fn list_field(spec: &str, what: &str, s: &str) -> Result<Vec<usize>, PatternError> {
    s.split(',')
        .map(|v| field("MS1", MS1_USAGE, spec, what, v))
        .collect()
}

fn ms1(spec: &str, fields: &[&str]) -> Result<Vec<usize>, PatternError> {
    let g = "MS1";
    if fields.len() != 3 {
        return Err(malformed(
            g,
            MS1_USAGE,
            spec,
            format!("{} fields", fields.len()),
        ));
    }
    let len = field(g, MS1_USAGE, spec, "length", fields[0])?;
    check_len(g, spec, len)?;
    let locations = list_field(spec, "gap location", fields[1])?;
    let gaps = list_field(spec, "gap", fields[2])?;
    if gaps.len() != 1 && gaps.len() != locations.len() {
        return Err(malformed(
            g,
            MS1_USAGE,
            spec,
            format!(
                "{} gaps for {} locations (give one gap, or one per location)",
                gaps.len(),
                locations.len()
            ),
        ));
    }
    if let Some(w) = locations.windows(2).find(|w| w[0] >= w[1]) {
        return Err(malformed(
            g,
            MS1_USAGE,
            spec,
            format!(
                "gap locations must increase strictly ({} then {})",
                w[0], w[1]
            ),
        ));
    }
    if let Some(&last) = locations.last() {
        if last >= len {
            return Err(malformed(
                g,
                MS1_USAGE,
                spec,
                format!("gap location {last} is not below the length {len}"),
            ));
        }
    }
    // The running value starts at -1: track it as "value + 1" so it stays unsigned.
    let mut next = 0usize; // value + 1
    let mut out = Vec::with_capacity(len);
    let mut loc = 0;
    for i in 0..len {
        if loc < locations.len() && locations[loc] == i {
            let gap = if gaps.len() == 1 { gaps[0] } else { gaps[loc] };
            loc += 1;
            next = next
                .checked_add(gap)
                .ok_or_else(|| overflow(g, MS1_USAGE, spec))?;
            if next == 0 {
                return Err(malformed(
                    g,
                    MS1_USAGE,
                    spec,
                    "a gap of 0 at location 0 gives index -1".to_string(),
                ));
            }
        } else {
            next = next
                .checked_add(1)
                .ok_or_else(|| overflow(g, MS1_USAGE, spec))?;
        }
        out.push(next - 1);
    }
    Ok(out)
}

fn laplacian(spec: &str, fields: &[&str]) -> Result<Vec<usize>, PatternError> {
    let g = "LAPLACIAN";
    if fields.len() != 3 {
        return Err(malformed(
            g,
            LAPLACIAN_USAGE,
            spec,
            format!("{} fields", fields.len()),
        ));
    }
    let dim = field(g, LAPLACIAN_USAGE, spec, "dimension", fields[0])?;
    let order = field(g, LAPLACIAN_USAGE, spec, "order", fields[1])?;
    let n = field(g, LAPLACIAN_USAGE, spec, "problem size", fields[2])?;
    if dim == 0 || order == 0 || n == 0 {
        return Err(malformed(
            g,
            LAPLACIAN_USAGE,
            spec,
            "dimension, order and problem size must all be >= 1".to_string(),
        ));
    }
    let len = dim
        .checked_mul(order)
        .and_then(|x| x.checked_mul(2))
        .and_then(|x| x.checked_add(1))
        .ok_or_else(|| overflow(g, LAPLACIAN_USAGE, spec))?;
    check_len(g, spec, len)?;
    // Offsets of the neighbours on one side: (j+1) * n^d for each dimension d.
    let mut side = Vec::with_capacity(dim * order);
    for d in 0..dim {
        let stride = u32::try_from(d)
            .ok()
            .and_then(|d| n.checked_pow(d))
            .ok_or_else(|| overflow(g, LAPLACIAN_USAGE, spec))?;
        for j in 0..order {
            side.push(
                (j + 1)
                    .checked_mul(stride)
                    .ok_or_else(|| overflow(g, LAPLACIAN_USAGE, spec))?,
            );
        }
    }
    // The centre sits at the largest offset so every index is non-negative.
    let centre = side.iter().copied().max().unwrap_or(0);
    let mut out = Vec::with_capacity(len);
    out.extend(side.iter().rev().map(|&o| centre - o));
    out.push(centre);
    for &o in &side {
        out.push(
            centre
                .checked_add(o)
                .ok_or_else(|| overflow(g, LAPLACIAN_USAGE, spec))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(spec: &str) -> Vec<usize> {
        Pattern::parse(spec).unwrap().indices
    }

    #[test]
    fn design_examples() {
        assert_eq!(idx("MS1:8:4:32"), vec![0, 1, 2, 3, 35, 36, 37, 38]);
        assert_eq!(idx("MS1:8:2,3:20"), vec![0, 1, 21, 41, 42, 43, 44, 45]);
        assert_eq!(
            idx("LAPLACIAN:2:2:100"),
            vec![0, 100, 198, 199, 200, 201, 202, 300, 400]
        );
        assert_eq!(idx("UNIFORM:4:3"), vec![0, 3, 6, 9]);
    }

    #[test]
    fn ms1_gap_per_location() {
        assert_eq!(idx("MS1:6:1,4:10,100"), vec![0, 10, 11, 12, 112, 113]);
    }

    #[test]
    fn laplacian_3d_and_1d() {
        assert_eq!(idx("LAPLACIAN:1:1:100"), vec![0, 1, 2]);
        let p = idx("LAPLACIAN:3:1:10");
        assert_eq!(p, vec![0, 90, 99, 100, 101, 110, 200]);
        assert_eq!(
            Pattern::parse("LAPLACIAN:3:1:10").unwrap().generator_delta,
            Some(GeneratorDelta::Stencil)
        );
    }

    #[test]
    fn uniform_deltas() {
        let p = Pattern::parse("UNIFORM:8:4:NR").unwrap();
        assert_eq!(p.generator_delta, Some(GeneratorDelta::NoReuse(32)));
        assert_eq!(p.generator_delta.unwrap().value(), 32);
        let p = Pattern::parse("UNIFORM:8:4:5").unwrap();
        assert_eq!(p.generator_delta, Some(GeneratorDelta::Explicit(5)));
        assert_eq!(Pattern::parse("UNIFORM:8:4").unwrap().generator_delta, None);
    }

    #[test]
    fn lists() {
        assert_eq!(idx("1,2,3"), vec![1, 2, 3]);
        assert_eq!(idx(" 4, 5 ,6 "), vec![4, 5, 6]);
        assert_eq!(
            Pattern::parse("1,-2"),
            Err(PatternError::Negative("-2".into()))
        );
        assert!(matches!(
            Pattern::parse("1,x"),
            Err(PatternError::NotAnInteger(_))
        ));
        assert_eq!(Pattern::parse(""), Err(PatternError::Empty));
    }

    #[test]
    fn malformed_generators() {
        for bad in [
            "UNIFORM:8",
            "UNIFORM:8:1:2:3",
            "UNIFORM:x:1",
            "MS1:8:4",
            "MS1:8:4,2:1",
            "MS1:8:9:1",
            "MS1:8:1,2:1,2,3",
            "LAPLACIAN:0:1:10",
            "LAPLACIAN:2:2",
            "UNIFORM:8:-1",
            "UNIFORM:99999999999:1",
            "UNIFORM:4:9223372036854775807",
            "LAPLACIAN:64:1:1000",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad} should be rejected");
        }
        assert!(matches!(
            Pattern::parse("RANDOM:8"),
            Err(PatternError::UnknownGenerator(_))
        ));
    }

    #[test]
    fn generator_names_are_case_insensitive() {
        assert_eq!(idx("uniform:2:2"), vec![0, 2]);
    }
}
