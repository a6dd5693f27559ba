//! Spatter-compatible run configurations: JSON parsing, defaults and validation.
//!
//! A pattern file is a JSON array of objects (a single object is accepted too). Keys and defaults
//! follow Spatter 2.1: `kernel` ("gather"; also scatter, gs/sg, multigather, multiscatter,
//! case-insensitive), `pattern`, `pattern-gather`, `pattern-scatter`, `delta` (8), `delta-gather`
//! (8), `delta-scatter` (8), `count` (1024), `wrap` (1), `pattern-size` (truncate), `boundary`
//! (index modulo), `nruns` (10), `name`, `local-work-size`. Unknown keys are ignored.
//!
//! mgbench adds the kernel `apex` (Apex-MAP, see [`crate::apex`]): keys `L` (block length in
//! words, required), `K` (locality exponent in (0, 1], required), `M` (memory size in words,
//! default 2^24), `seed` (default 1) and `count` (blocks per run, default 2^23 / L); the key
//! names are case-insensitive.
//!
//! Deltas may be negative (real traces walk arrays downwards): the base of iteration `i` is
//! `delta * i` moved up by `|delta| * (count - 1)`, so the sparse buffer covers every index of
//! every iteration and none is ever negative or wrapped (Spatter 2.1 refuses such configs with
//! "Invalid Delta"). Indices too large for this machine are refused with an error that names
//! the file and the config's index, before anything runs (see `crate::plan` and
//! `crate::compact` for the opt-in way to run them).

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::apex::{ApexParams, DEFAULT_M, DEFAULT_SEED, DEFAULT_WORDS_PER_RUN};
use crate::pattern::{GeneratorDelta, Pattern, PatternError};

pub const DEFAULT_DELTA: i64 = 8;
pub const DEFAULT_COUNT: usize = 1024;
pub const DEFAULT_WRAP: usize = 1;
pub const DEFAULT_NRUNS: usize = 10;

/// The replay kernels (Spatter's names).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum KernelKind {
    Gather,
    Scatter,
    #[serde(rename = "gs")]
    GatherScatter,
    MultiGather,
    MultiScatter,
    /// Apex-MAP blocks (mgbench's addition).
    Apex,
}

impl KernelKind {
    /// Parses a kernel name, case-insensitively; `sg` is Spatter's other name for `gs`.
    pub fn parse(name: &str) -> Option<KernelKind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "gather" => Some(KernelKind::Gather),
            "scatter" => Some(KernelKind::Scatter),
            "gs" | "sg" => Some(KernelKind::GatherScatter),
            "multigather" => Some(KernelKind::MultiGather),
            "multiscatter" => Some(KernelKind::MultiScatter),
            "apex" | "apex-map" => Some(KernelKind::Apex),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KernelKind::Gather => "gather",
            KernelKind::Scatter => "scatter",
            KernelKind::GatherScatter => "gs",
            KernelKind::MultiGather => "multigather",
            KernelKind::MultiScatter => "multiscatter",
            KernelKind::Apex => "apex",
        }
    }

    /// True for kernels whose writes land in a shared sparse buffer.
    pub fn is_scatter_like(self) -> bool {
        matches!(
            self,
            KernelKind::Scatter | KernelKind::GatherScatter | KernelKind::MultiScatter
        )
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kernel with its patterns; each variant holds exactly what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kernel {
    /// `dense[j + len*(i%wrap)] = sparse[pattern[j] + delta*i]`
    Gather { pattern: Vec<usize>, delta: i64 },
    /// `sparse[pattern[j] + delta*i] = dense[j + len*(i%wrap)]`
    Scatter { pattern: Vec<usize>, delta: i64 },
    /// `sparse_s[scatter[j] + delta_scatter*i] = sparse_g[gather[j] + delta_gather*i]`
    GatherScatter {
        gather: Vec<usize>,
        scatter: Vec<usize>,
        delta_gather: i64,
        delta_scatter: i64,
    },
    /// `dense[j + len*(i%wrap)] = sparse[outer[inner[j]] + delta*i]`
    MultiGather {
        outer: Vec<usize>,
        inner: Vec<usize>,
        delta: i64,
    },
    /// `sparse[outer[inner[j]] + delta*i] = dense[j + len*(i%wrap)]`
    MultiScatter {
        outer: Vec<usize>,
        inner: Vec<usize>,
        delta: i64,
    },
    /// `sum += sparse[starts[i] + j]` for j < L: Apex-MAP's block reads.
    Apex(ApexKernel),
}

/// An Apex-MAP run: the parameters and the block starts (drawn when the config is parsed, so
/// the timed loop only reads memory).
#[derive(Debug, Clone)]
pub struct ApexKernel {
    pub params: ApexParams,
    pub seed: u64,
    pub starts: Vec<usize>,
}

impl PartialEq for ApexKernel {
    fn eq(&self, o: &ApexKernel) -> bool {
        self.params.m == o.params.m
            && self.params.l == o.params.l
            && self.params.k.to_bits() == o.params.k.to_bits()
            && self.seed == o.seed
            && self.starts == o.starts
    }
}

impl Eq for ApexKernel {}

impl Kernel {
    pub fn kind(&self) -> KernelKind {
        match self {
            Kernel::Gather { .. } => KernelKind::Gather,
            Kernel::Scatter { .. } => KernelKind::Scatter,
            Kernel::GatherScatter { .. } => KernelKind::GatherScatter,
            Kernel::MultiGather { .. } => KernelKind::MultiGather,
            Kernel::MultiScatter { .. } => KernelKind::MultiScatter,
            Kernel::Apex(_) => KernelKind::Apex,
        }
    }

    /// Number of elements moved per iteration of the count loop on each side: the pattern for
    /// gather/scatter, the inner pattern for multi-kernels, one side for gs.
    pub fn pattern_len(&self) -> usize {
        match self {
            Kernel::Gather { pattern, .. } | Kernel::Scatter { pattern, .. } => pattern.len(),
            Kernel::GatherScatter { gather, .. } => gather.len(),
            Kernel::MultiGather { inner, .. } | Kernel::MultiScatter { inner, .. } => inner.len(),
            Kernel::Apex(a) => a.params.l as usize,
        }
    }

    /// The delta reported in results: the gather delta for gs (0 for apex).
    pub fn delta(&self) -> i64 {
        match self {
            Kernel::Gather { delta, .. }
            | Kernel::Scatter { delta, .. }
            | Kernel::MultiGather { delta, .. }
            | Kernel::MultiScatter { delta, .. } => *delta,
            Kernel::GatherScatter { delta_gather, .. } => *delta_gather,
            Kernel::Apex(_) => 0,
        }
    }

    /// Elements counted as moved per iteration: Spatter counts both sides of gs.
    pub fn elements_per_iteration(&self) -> usize {
        match self {
            Kernel::GatherScatter {
                gather, scatter, ..
            } => gather.len() + scatter.len(),
            _ => self.pattern_len(),
        }
    }

    /// The same kernel keeping only pattern positions `range` (clamped to the pattern): both
    /// sides of gs, the inner pattern of multi-kernels (the outer table stays whole). Apex
    /// has no pattern and is returned unchanged.
    pub fn slice_indices(&self, range: std::ops::Range<usize>) -> Kernel {
        let cut = |p: &Vec<usize>| {
            let end = range.end.min(p.len());
            p[range.start.min(end)..end].to_vec()
        };
        match self {
            Kernel::Gather { pattern, delta } => Kernel::Gather {
                pattern: cut(pattern),
                delta: *delta,
            },
            Kernel::Scatter { pattern, delta } => Kernel::Scatter {
                pattern: cut(pattern),
                delta: *delta,
            },
            Kernel::GatherScatter {
                gather,
                scatter,
                delta_gather,
                delta_scatter,
            } => Kernel::GatherScatter {
                gather: cut(gather),
                scatter: cut(scatter),
                delta_gather: *delta_gather,
                delta_scatter: *delta_scatter,
            },
            Kernel::MultiGather {
                outer,
                inner,
                delta,
            } => Kernel::MultiGather {
                outer: outer.clone(),
                inner: cut(inner),
                delta: *delta,
            },
            Kernel::MultiScatter {
                outer,
                inner,
                delta,
            } => Kernel::MultiScatter {
                outer: outer.clone(),
                inner: cut(inner),
                delta: *delta,
            },
            Kernel::Apex(a) => Kernel::Apex(a.clone()),
        }
    }

    /// The effective index pattern applied to the sparse buffer (for multi-kernels,
    /// `outer[inner[j]]`), with its delta; for gs, the gather side; for apex, one block
    /// (0..L) with delta 0 (its starts are random).
    pub fn effective_pattern(&self) -> (Vec<usize>, i64) {
        match self {
            Kernel::Gather { pattern, delta } | Kernel::Scatter { pattern, delta } => {
                (pattern.clone(), *delta)
            }
            Kernel::GatherScatter {
                gather,
                delta_gather,
                ..
            } => (gather.clone(), *delta_gather),
            Kernel::MultiGather {
                outer,
                inner,
                delta,
            }
            | Kernel::MultiScatter {
                outer,
                inner,
                delta,
            } => (inner.iter().map(|&k| outer[k]).collect(), *delta),
            Kernel::Apex(a) => ((0..a.params.l as usize).collect(), 0),
        }
    }
}

/// Where a configuration came from, for error messages and results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The pattern file, or "<command line>" for inline specs.
    pub source: String,
    /// Position in the file's array, from 0.
    pub index: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: config #{}", self.source, self.index)
    }
}

/// One validated run: a kernel, its loop parameters and how often to time it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    pub name: String,
    pub kernel: Kernel,
    pub count: usize,
    pub wrap: usize,
    pub nruns: usize,
    pub local_work_size: Option<usize>,
    pub origin: Origin,
    /// Where the delta came from: "default", "config", or "generator:UNIFORM",
    /// "generator:UNIFORM:NR", "generator:LAPLACIAN"; for gs "gather=...,scatter=...".
    pub delta_source: String,
    /// Remarks users should see (truncation, boundary, a generator overriding "delta").
    pub notes: Vec<String>,
    /// What `--compact-gaps` did to the patterns, if anything.
    pub compaction: Option<crate::compact::Compaction>,
    /// The generator the (gather-side, or outer) pattern came from, as written
    /// ("UNIFORM:8:4:NR"); None for index lists.
    pub pattern_spec: Option<String>,
}

impl RunConfig {
    /// Bytes moved by one run of the whole count loop: 8 * elements * count (Spatter's rule).
    pub fn bytes(&self) -> u64 {
        8u64.saturating_mul(self.kernel.elements_per_iteration() as u64)
            .saturating_mul(self.count as u64)
    }
}

#[cfg(test)]
impl RunConfig {
    /// A configuration for unit tests: wrap 1, one run, origin "t" #0, no notes.
    pub(crate) fn test(kernel: Kernel, count: usize) -> RunConfig {
        RunConfig {
            name: "t".into(),
            kernel,
            count,
            wrap: 1,
            nruns: 1,
            local_work_size: None,
            origin: Origin {
                source: "t".into(),
                index: 0,
            },
            delta_source: "config".into(),
            notes: vec![],
            compaction: None,
            pattern_spec: None,
        }
    }
}

/// The sparse element where iteration 0's base lies: 0 for a delta >= 0; for a negative delta,
/// `|delta| * (count - 1)`, so that the base of the last iteration is element 0. Iteration `i`
/// then reads `origin + delta * i + pattern[j]`, never below 0 (the plan sized the buffer).
pub fn iteration_origin(delta: i64, count: usize) -> usize {
    if delta >= 0 {
        0
    } else {
        (delta.unsigned_abs() as usize).saturating_mul(count.saturating_sub(1))
    }
}

/// Values that apply to every config unless the config says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    pub delta: i64,
    pub count: usize,
    pub wrap: usize,
    pub nruns: usize,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            delta: DEFAULT_DELTA,
            count: DEFAULT_COUNT,
            wrap: DEFAULT_WRAP,
            nruns: DEFAULT_NRUNS,
        }
    }
}

/// What is wrong with a pattern file or one of its configs.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read pattern file {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path} is a Git LFS pointer, not a pattern file: run `git lfs pull` (or fetch the real file) and try again")]
    LfsPointer { path: PathBuf },
    #[error("{path}: malformed JSON at line {line}, column {column}: {message}")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: expected a JSON array of config objects, found {found}")]
    NotAnArray { path: PathBuf, found: &'static str },
    #[error("{path}: the file holds no configs (an empty array)")]
    NoConfigs { path: PathBuf },
    #[error("{origin}{}: {problem}", name_suffix(.name))]
    Invalid {
        origin: Origin,
        name: Option<String>,
        problem: String,
    },
}

fn name_suffix(name: &Option<String>) -> String {
    match name {
        Some(n) if !n.is_empty() => format!(" ({n:?})"),
        _ => String::new(),
    }
}

/// Loads and validates every config of one pattern file.
pub fn load_file(path: &Path, defaults: &Defaults) -> Result<Vec<RunConfig>, ConfigError> {
    let bytes = std::fs::read(path).map_err(|cause| ConfigError::Read {
        path: path.to_path_buf(),
        cause,
    })?;
    parse_bytes(&bytes, path, defaults)
}

/// Parses a pattern file's contents; `path` is only used in messages and origins.
pub fn parse_bytes(
    bytes: &[u8],
    path: &Path,
    defaults: &Defaults,
) -> Result<Vec<RunConfig>, ConfigError> {
    if bytes.starts_with(b"version https://git-lfs.github.com/spec/") {
        return Err(ConfigError::LfsPointer {
            path: path.to_path_buf(),
        });
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ConfigError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    let items = match value {
        Value::Array(items) => items,
        obj @ Value::Object(_) => vec![obj],
        other => {
            return Err(ConfigError::NotAnArray {
                path: path.to_path_buf(),
                found: json_type(&other),
            })
        }
    };
    if items.is_empty() {
        return Err(ConfigError::NoConfigs {
            path: path.to_path_buf(),
        });
    }
    let source = path.display().to_string();
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let origin = Origin {
                source: source.clone(),
                index,
            };
            parse_config(item, origin, defaults)
        })
        .collect()
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses one config object.
pub fn parse_config(
    item: &Value,
    origin: Origin,
    defaults: &Defaults,
) -> Result<RunConfig, ConfigError> {
    let obj = match item {
        Value::Object(obj) => obj,
        other => {
            return Err(ConfigError::Invalid {
                origin,
                name: None,
                problem: format!("expected a config object, found {}", json_type(other)),
            })
        }
    };
    let name = obj.get("name").and_then(Value::as_str).map(str::to_string);
    let fail = |problem: String| ConfigError::Invalid {
        origin: origin.clone(),
        name: name.clone(),
        problem,
    };
    let fields = ConfigFields::read(obj).map_err(fail)?;
    build(fields, defaults, origin.clone(), name.clone()).map_err(fail)
}

/// The raw keys of one config, before defaults and validation.
#[derive(Debug, Default)]
struct ConfigFields {
    name: Option<String>,
    kernel: Option<String>,
    pattern: Option<Pattern>,
    pattern_gather: Option<Pattern>,
    pattern_scatter: Option<Pattern>,
    delta: Option<i64>,
    delta_gather: Option<i64>,
    delta_scatter: Option<i64>,
    count: Option<usize>,
    wrap: Option<usize>,
    pattern_size: Option<usize>,
    boundary: Option<usize>,
    nruns: Option<usize>,
    local_work_size: Option<usize>,
    /// mgbench synth's `element_size`: the bytes of the accesses the indices count in.
    element_size: Option<usize>,
    /// The apex kernel's keys, kept raw: other kernels ignore them, as Spatter ignores
    /// unknown keys, so they are only validated for apex.
    apex: Map<String, Value>,
}

impl ConfigFields {
    fn read(obj: &Map<String, Value>) -> Result<ConfigFields, String> {
        Ok(ConfigFields {
            name: match obj.get("name") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            },
            kernel: match obj.get("kernel") {
                None => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => {
                    return Err(format!(
                        "\"kernel\" must be a string, found {}",
                        json_type(other)
                    ))
                }
            },
            pattern: read_pattern(obj, "pattern")?,
            pattern_gather: read_pattern(obj, "pattern-gather")?,
            pattern_scatter: read_pattern(obj, "pattern-scatter")?,
            delta: read_int(obj, "delta")?,
            delta_gather: read_int(obj, "delta-gather")?,
            delta_scatter: read_int(obj, "delta-scatter")?,
            count: read_uint(obj, "count")?,
            wrap: read_uint(obj, "wrap")?,
            pattern_size: read_uint(obj, "pattern-size")?,
            boundary: read_uint(obj, "boundary")?,
            nruns: read_uint(obj, "nruns")?,
            local_work_size: read_uint(obj, "local-work-size")?,
            // A key of mgbench's own, ignored as Spatter would where it is no size.
            element_size: obj.get("element_size").and_then(|v| json_uint(v).ok()),
            apex: obj
                .iter()
                .filter(|(k, _)| matches!(k.as_str(), "L" | "l" | "K" | "k" | "M" | "m" | "seed"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}

/// The value of `key` in either case (`L` or `l`); both present is an error.
fn get_ci<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a Value>, String> {
    let (upper, lower) = (key.to_ascii_uppercase(), key.to_ascii_lowercase());
    match (obj.get(&upper), obj.get(&lower)) {
        (Some(_), Some(_)) => Err(format!(
            "both \"{upper}\" and \"{lower}\" are given: keep one"
        )),
        (a, b) => Ok(a.or(b)),
    }
}

fn read_uint_ci(obj: &Map<String, Value>, key: &str) -> Result<Option<usize>, String> {
    get_ci(obj, key)?
        .map(|v| json_uint(v).map_err(|why| format!("\"{key}\": {why}")))
        .transpose()
}

fn read_float_ci(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    get_ci(obj, key)?
        .map(|v| match v {
            Value::Number(n) => n
                .as_f64()
                .ok_or_else(|| format!("\"{key}\": {n} is not a number")),
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("\"{key}\": {s:?} is not a number")),
            other => Err(format!(
                "\"{key}\": expected a number, found {}",
                json_type(other)
            )),
        })
        .transpose()
}

/// Reads a non-negative integer key. Integral floats (`1e6`) are accepted; negative values,
/// fractions and non-numbers are errors.
fn read_uint(obj: &Map<String, Value>, key: &str) -> Result<Option<usize>, String> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    json_uint(v)
        .map(Some)
        .map_err(|why| format!("\"{key}\": {why}"))
}

/// Reads a signed integer key (deltas): integral floats accepted, fractions refused.
fn read_int(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    let magnitude = |v: &Value| -> Result<i64, String> {
        let u = json_uint(v)?;
        i64::try_from(u).map_err(|_| format!("{u} does not fit in 63 bits"))
    };
    let parsed = match v {
        Value::Number(n) if n.as_i64().is_some_and(|i| i < 0) => Ok(n.as_i64().unwrap_or(0)),
        Value::Number(n) if n.as_f64().is_some_and(|f| f < 0.0) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() != 0.0 || !f.is_finite() {
                Err(format!("{n} is not an integer"))
            } else if f < -9.2e18 {
                Err(format!("{n} does not fit in 64 bits"))
            } else {
                Ok(f as i64)
            }
        }
        Value::String(s) if s.trim().starts_with('-') => {
            magnitude(&Value::String(s.trim()[1..].to_string())).map(|m| -m)
        }
        other => magnitude(other),
    };
    parsed.map(Some).map_err(|why| format!("\"{key}\": {why}"))
}

fn json_uint(v: &Value) -> Result<usize, String> {
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                usize::try_from(u).map_err(|_| format!("{u} does not fit in this machine's usize"))
            } else if let Some(i) = n.as_i64() {
                Err(format!("negative value {i}"))
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f < 0.0 {
                    Err(format!("negative value {n}"))
                } else if f.fract() != 0.0 || !f.is_finite() {
                    Err(format!("{n} is not an integer"))
                } else if f >= 18446744073709551615.0 {
                    Err(format!("{n} does not fit in 64 bits"))
                } else {
                    Ok(f as usize)
                }
            }
        }
        Value::String(s) => crate::pattern::parse_index(s).map_err(|e| e.to_string()),
        other => Err(format!("expected an integer, found {}", json_type(other))),
    }
}

fn read_pattern(obj: &Map<String, Value>, key: &str) -> Result<Option<Pattern>, String> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    let parsed = match v {
        Value::String(s) => Pattern::parse(s),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| {
                json_uint(x)
                    .map_err(|why| PatternError::NotAnInteger(format!("element {i} ({x}): {why}")))
            })
            .collect::<Result<Vec<_>, _>>()
            .and_then(Pattern::from_list),
        other => {
            return Err(format!(
                "\"{key}\" must be an integer list or a generator string, found {}",
                json_type(other)
            ))
        }
    };
    parsed
        .map(Some)
        .map_err(|e| format!("\"{key}\": {}", pattern_problem(e)))
}

fn pattern_problem(e: PatternError) -> String {
    match e {
        PatternError::NotAnInteger(s) if s.starts_with("element ") => {
            if s.contains("negative") {
                format!("{s}: indices must be >= 0")
            } else {
                s
            }
        }
        other => other.to_string(),
    }
}

/// Which keys a kernel needs, for messages.
fn required_keys(kind: KernelKind) -> &'static str {
    match kind {
        KernelKind::Gather | KernelKind::Scatter => "\"pattern\"",
        KernelKind::GatherScatter => "\"pattern-gather\" and \"pattern-scatter\"",
        KernelKind::MultiGather => "\"pattern\" (outer) and \"pattern-gather\" (inner)",
        KernelKind::MultiScatter => "\"pattern\" (outer) and \"pattern-scatter\" (inner)",
        KernelKind::Apex => "\"L\" and \"K\"",
    }
}

/// Applies pattern-size and boundary, and resolves the delta from key, generator and default.
struct Prepared {
    indices: Vec<usize>,
    generator_delta: Option<GeneratorDelta>,
}

fn prepare(
    key: &str,
    pattern: Pattern,
    pattern_size: Option<usize>,
    boundary: Option<usize>,
    notes: &mut Vec<String>,
) -> Result<Prepared, String> {
    let mut indices = pattern.indices;
    if let Some(size) = pattern_size.filter(|&s| s > 0) {
        if size > indices.len() {
            return Err(format!(
                "\"pattern-size\" {size} is larger than \"{key}\", which has {} indices",
                indices.len()
            ));
        }
        if size < indices.len() {
            notes.push(format!(
                "\"{key}\" truncated from {} to {size} indices by pattern-size",
                indices.len()
            ));
            indices.truncate(size);
        }
    }
    if let Some(b) = boundary.filter(|&b| b > 0) {
        if indices.iter().any(|&i| i >= b) {
            notes.push(format!("\"{key}\" indices taken modulo boundary {b}"));
            for i in &mut indices {
                *i %= b;
            }
        }
    }
    Ok(Prepared {
        indices,
        generator_delta: pattern.generator_delta,
    })
}

/// Resolves a delta: a generator's delta (UNIFORM's third field or NR, LAPLACIAN's forced 1)
/// takes precedence over the config key, which takes precedence over the default. Returns the
/// delta and where it came from.
fn resolve_delta(
    key: &str,
    explicit: Option<i64>,
    generator: Option<GeneratorDelta>,
    default: i64,
    notes: &mut Vec<String>,
) -> (i64, &'static str) {
    match (generator, explicit) {
        (Some(g), Some(e)) if e != g.value() as i64 => {
            notes.push(format!(
                "{g} overrides \"{key}\": {e} (the generator's delta takes precedence)"
            ));
            (g.value() as i64, g.source_name())
        }
        (Some(g), _) => (g.value() as i64, g.source_name()),
        (None, Some(e)) => (e, "config"),
        (None, None) => (default, "default"),
    }
}

/// What replaying 8-byte elements does to a pattern `mgbench synth` mined from accesses of
/// `size` bytes (its indices count in them): Spatter's kernels move doubles, so GROMACS's
/// 16-byte SSE gathers replay as half their bytes over half their span, a float code's as
/// twice; said rather than left to be found.
fn element_size_note(size: usize) -> Option<String> {
    let (more, k) = match size {
        0 | 8 => return None,
        s if s < 8 && 8 % s == 0 => (true, 8 / s),
        s if s > 8 && s % 8 == 0 => (false, s / 8),
        _ => return None,
    };
    let scale = if more {
        format!("{k}x")
    } else {
        format!("1/{k} of")
    };
    Some(format!(
        "mined from {size}-byte accesses (\"element_size\" {size}); replayed, as Spatter does, \
         as 8-byte elements at the same indices: {scale} the bytes the program's accesses \
         moved, over {scale} their span"
    ))
}

fn build(
    f: ConfigFields,
    defaults: &Defaults,
    origin: Origin,
    name: Option<String>,
) -> Result<RunConfig, String> {
    let kind = match &f.kernel {
        None => KernelKind::Gather,
        Some(k) => KernelKind::parse(k).ok_or_else(|| {
            format!(
                "unknown kernel {k:?}: expected gather, scatter, gs, multigather, multiscatter or apex"
            )
        })?,
    };
    let mut notes = Vec::new();
    if let Some(note) = f.element_size.and_then(element_size_note) {
        notes.push(note);
    }
    let delta_source;
    let need = |p: Option<Pattern>, key: &str| -> Result<Pattern, String> {
        p.ok_or_else(|| {
            format!(
                "kernel {kind} needs {}; \"{key}\" is missing",
                required_keys(kind)
            )
        })
    };
    let (ps, b) = (f.pattern_size, f.boundary);
    let shared = f.shared();
    let main = if kind == KernelKind::GatherScatter {
        &f.pattern_gather
    } else {
        &f.pattern
    };
    let pattern_spec = main
        .as_ref()
        .map(|p| p.spec.clone())
        .filter(|s| s != "list");
    if kind == KernelKind::Apex {
        return build_apex(f, defaults, origin, name);
    }
    let kernel = match kind {
        KernelKind::Gather | KernelKind::Scatter => {
            let p = prepare("pattern", need(f.pattern, "pattern")?, ps, b, &mut notes)?;
            let (delta, source) = resolve_delta(
                "delta",
                f.delta,
                p.generator_delta,
                defaults.delta,
                &mut notes,
            );
            delta_source = source.to_string();
            if kind == KernelKind::Gather {
                Kernel::Gather {
                    pattern: p.indices,
                    delta,
                }
            } else {
                Kernel::Scatter {
                    pattern: p.indices,
                    delta,
                }
            }
        }
        KernelKind::GatherScatter => {
            let g = prepare(
                "pattern-gather",
                need(f.pattern_gather, "pattern-gather")?,
                ps,
                b,
                &mut notes,
            )?;
            let s = prepare(
                "pattern-scatter",
                need(f.pattern_scatter, "pattern-scatter")?,
                ps,
                b,
                &mut notes,
            )?;
            if g.indices.len() != s.indices.len() {
                return Err(format!(
                    "kernel gs needs \"pattern-gather\" and \"pattern-scatter\" of the same length, \
                     found {} and {}",
                    g.indices.len(),
                    s.indices.len()
                ));
            }
            let (delta_gather, source_g) = resolve_delta(
                "delta-gather",
                f.delta_gather,
                g.generator_delta,
                defaults.delta,
                &mut notes,
            );
            let (delta_scatter, source_s) = resolve_delta(
                "delta-scatter",
                f.delta_scatter,
                s.generator_delta,
                defaults.delta,
                &mut notes,
            );
            delta_source = format!("gather={source_g},scatter={source_s}");
            Kernel::GatherScatter {
                gather: g.indices,
                scatter: s.indices,
                delta_gather,
                delta_scatter,
            }
        }
        KernelKind::MultiGather | KernelKind::MultiScatter => {
            let inner_key = if kind == KernelKind::MultiGather {
                "pattern-gather"
            } else {
                "pattern-scatter"
            };
            let inner_raw = if kind == KernelKind::MultiGather {
                f.pattern_gather
            } else {
                f.pattern_scatter
            };
            let outer = prepare("pattern", need(f.pattern, "pattern")?, ps, b, &mut notes)?;
            let inner = prepare(inner_key, need(inner_raw, inner_key)?, ps, b, &mut notes)?;
            let max_inner = inner.indices.iter().copied().max().unwrap_or(0);
            if max_inner >= outer.indices.len() {
                return Err(format!(
                    "kernel {kind}: \"{inner_key}\" (inner) holds index {max_inner} but \"pattern\" \
                     (outer) has only {} entries; inner indices must be below the outer length",
                    outer.indices.len()
                ));
            }
            let (delta, source) = resolve_delta(
                "delta",
                f.delta,
                outer.generator_delta,
                defaults.delta,
                &mut notes,
            );
            delta_source = source.to_string();
            if kind == KernelKind::MultiGather {
                Kernel::MultiGather {
                    outer: outer.indices,
                    inner: inner.indices,
                    delta,
                }
            } else {
                Kernel::MultiScatter {
                    outer: outer.indices,
                    inner: inner.indices,
                    delta,
                }
            }
        }
        KernelKind::Apex => unreachable!("apex configs are built by build_apex"),
    };
    let count = f.count.unwrap_or(defaults.count);
    let (wrap, nruns, name) = common(shared, count, kind, defaults, &origin, name)?;
    Ok(RunConfig {
        name,
        kernel,
        count,
        wrap,
        nruns,
        local_work_size: f.local_work_size,
        origin,
        delta_source,
        notes,
        compaction: None,
        pattern_spec,
    })
}

/// The keys every kernel shares.
struct Shared {
    wrap: Option<usize>,
    nruns: Option<usize>,
    name: Option<String>,
}

impl ConfigFields {
    fn shared(&self) -> Shared {
        Shared {
            wrap: self.wrap,
            nruns: self.nruns,
            name: self.name.clone(),
        }
    }
}

/// Checks the keys every kernel shares; returns (wrap, nruns, name).
fn common(
    f: Shared,
    count: usize,
    kind: KernelKind,
    defaults: &Defaults,
    origin: &Origin,
    name: Option<String>,
) -> Result<(usize, usize, String), String> {
    if count == 0 {
        return Err("\"count\" is 0: the kernel would move nothing; use count >= 1".to_string());
    }
    let wrap = f.wrap.unwrap_or(defaults.wrap);
    if wrap == 0 {
        return Err("\"wrap\" is 0: use wrap >= 1 (1 = one dense buffer row)".to_string());
    }
    let nruns = f.nruns.unwrap_or(defaults.nruns);
    if nruns == 0 {
        return Err("\"nruns\" is 0: at least one timed run is needed".to_string());
    }
    let name = name.or(f.name).unwrap_or_default();
    let name = if name.is_empty() {
        format!("{}#{}", kind, origin.index)
    } else {
        name
    };
    Ok((wrap, nruns, name))
}

/// Largest Apex-MAP block count drawn per config (the starts live in memory: 8 bytes each).
const MAX_APEX_COUNT: usize = 1 << 26;

fn build_apex(
    f: ConfigFields,
    defaults: &Defaults,
    origin: Origin,
    name: Option<String>,
) -> Result<RunConfig, String> {
    let mut notes = Vec::new();
    let l = read_uint_ci(&f.apex, "L")?
        .ok_or("kernel apex needs \"L\" (block length in words) and \"K\"; \"L\" is missing")?;
    let k = read_float_ci(&f.apex, "K")?.ok_or(
        "kernel apex needs \"L\" and \"K\" (locality exponent in (0, 1]); \"K\" is missing",
    )?;
    let m = read_uint_ci(&f.apex, "M")?.unwrap_or(DEFAULT_M as usize);
    let seed = read_uint(&f.apex, "seed")?.unwrap_or(DEFAULT_SEED as usize) as u64;
    if l == 0 {
        return Err("\"L\" is 0: the block length must be at least 1 word".to_string());
    }
    if !(k > 0.0 && k <= 1.0) {
        return Err(format!(
            "\"K\" is {k}: the locality exponent must be in (0, 1] (1 = uniform random block starts, \
             smaller = more reuse)"
        ));
    }
    if m < l {
        return Err(format!(
            "\"M\" ({m} words) is smaller than \"L\" ({l}): the memory must hold at least one block"
        ));
    }
    for key in ["pattern", "pattern-gather", "pattern-scatter"] {
        let given = match key {
            "pattern" => f.pattern.is_some(),
            "pattern-gather" => f.pattern_gather.is_some(),
            _ => f.pattern_scatter.is_some(),
        };
        if given {
            notes.push(format!("\"{key}\" is ignored by the apex kernel"));
        }
    }
    if f.delta.is_some() {
        notes.push("\"delta\" is ignored by the apex kernel (block starts are random)".to_string());
    }
    let count = f
        .count
        .unwrap_or_else(|| (DEFAULT_WORDS_PER_RUN as usize).div_ceil(l).max(1));
    if count > MAX_APEX_COUNT {
        return Err(format!(
            "\"count\" {count} is more than {MAX_APEX_COUNT} blocks per run: lower it (the block starts are kept in memory)"
        ));
    }
    let (wrap, nruns, name) = common(f.shared(), count, KernelKind::Apex, defaults, &origin, name)?;
    let params = ApexParams {
        m: m as u64,
        l: l as u64,
        k,
    };
    Ok(RunConfig {
        name,
        kernel: Kernel::Apex(ApexKernel {
            params,
            seed,
            starts: params.block_starts(count, seed),
        }),
        count,
        wrap,
        nruns,
        local_work_size: f.local_work_size,
        origin,
        delta_source: "apex".to_string(),
        notes,
        compaction: None,
        pattern_spec: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(v: Value) -> Result<RunConfig, ConfigError> {
        parse_config(
            &v,
            Origin {
                source: "t.json".into(),
                index: 3,
            },
            &Defaults::default(),
        )
    }

    #[test]
    fn defaults_follow_spatter() {
        let c = one(json!({"pattern": [0, 1, 2]})).unwrap();
        assert_eq!(c.kernel.kind(), KernelKind::Gather);
        assert_eq!(c.kernel.delta(), 8);
        assert_eq!((c.count, c.wrap, c.nruns), (1024, 1, 10));
        assert_eq!(c.name, "gather#3");
    }

    #[test]
    fn a_synth_element_size_other_than_8_is_said() {
        let note = |size: Value| {
            one(json!({"pattern": [0, 5, 2], "element_size": size}))
                .unwrap()
                .notes
                .into_iter()
                .find(|n| n.contains("element_size"))
        };
        let sse = note(json!(16)).unwrap();
        assert!(
            sse.contains("16-byte accesses") && sse.contains("1/2 of the bytes"),
            "{sse}"
        );
        let float = note(json!(4)).unwrap();
        assert!(float.contains("2x the bytes"), "{float}");
        // 8 bytes is what replay moves; a size that is no size is ignored, as Spatter would.
        for quiet in [json!(8), json!(0), json!(12), json!("x")] {
            assert_eq!(note(quiet.clone()), None, "{quiet}");
        }
    }

    #[test]
    fn errors_name_file_index_and_config() {
        let e = one(json!({"name": "x", "kernel": "gahter", "pattern": [1]}))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("t.json: config #3 (\"x\"): unknown kernel"),
            "{e}"
        );
    }

    #[test]
    fn kernel_names_case_insensitive_and_sg_alias() {
        let c =
            one(json!({"kernel": "SG", "pattern-gather": [0], "pattern-scatter": [1]})).unwrap();
        assert_eq!(c.kernel.kind(), KernelKind::GatherScatter);
        let c = one(json!({"kernel": "MultiGather", "pattern": [5, 6], "pattern-gather": [1, 0]}))
            .unwrap();
        assert_eq!(c.kernel.effective_pattern().0, vec![6, 5]);
    }

    #[test]
    fn unknown_keys_are_ignored() {
        assert!(one(json!({"pattern": [1], "frobnicate": true, "seed": 4})).is_ok());
    }

    #[test]
    fn float_integers_accepted_fractions_rejected() {
        let c = one(json!({"pattern": [1.0, 2e3], "count": 1e2})).unwrap();
        assert_eq!(c.kernel.effective_pattern().0, vec![1, 2000]);
        assert_eq!(c.count, 100);
        assert!(one(json!({"pattern": [1.5]})).is_err());
        assert!(one(json!({"pattern": [1], "count": 2.5})).is_err());
    }
}
