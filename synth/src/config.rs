//! Synthesis thresholds: GS Patterns' Table 1, every one configurable.

/// What `mgbench synth` keeps and how it windows the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthConfig {
    /// Rows per window (one per instruction address); a window that would need more is
    /// analysed and reset first.
    pub window_rows: usize,
    /// A row is analysed when it holds this many bytes of indices (8 x 8 B, 16 x 4 B).
    pub row_bytes: usize,
    /// Keep the top N, by flagged windows, of the candidates the other filters keep.
    pub top: usize,
    /// Drop candidates with fewer dynamic instances.
    pub min_instances: u64,
    /// Drop candidates with fewer unique index distances than this...
    pub min_unique_distances: usize,
    /// ...unless at least half their distances are this far or farther (|d| >= oob_distance).
    pub oob_distance: u64,
    /// Keep candidates whose instruction has no symbol.
    pub keep_unsymbolized: bool,
    /// Keep candidates whose every access is in the stack of the thread that made it.
    pub keep_stack: bool,
    /// Keep candidates in the dynamic loader's code (start-up relocation, symbol lookup).
    pub keep_loader: bool,
    /// Only this thread's accesses.
    pub thread: Option<u32>,
    /// Longest pattern written; longer streams are truncated (and say so).
    pub max_pattern: usize,
    /// Mine a damaged trace up to the damage instead of refusing it.
    pub allow_damaged: bool,
    /// Threads decoding the trace (1: decode on the mining thread).
    pub threads: usize,
    /// Advanced as the trace is read (bytes of the file), for a progress display.
    pub progress: mgbench_capture::progress::Progress,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            window_rows: 1024,
            row_bytes: 64,
            top: 10,
            min_instances: 1024,
            min_unique_distances: 6,
            oob_distance: 513,
            keep_unsymbolized: false,
            keep_stack: false,
            keep_loader: false,
            thread: None,
            max_pattern: 1 << 20,
            allow_damaged: false,
            threads: 1,
            progress: Default::default(),
        }
    }
}

/// Why synthesis cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("cannot open trace {path}: {cause}")]
    Open { path: String, cause: std::io::Error },
    #[error("{path}: {cause}")]
    Read {
        path: String,
        cause: mgbench_capture::trace::ReadError,
    },
    #[error("{path} holds no memory accesses{why}: capture again (without --roi, or with a ROI the program enters)")]
    Empty { path: String, why: String },
    #[error("{path} is damaged at byte {offset} ({reason}); {recovered} accesses before it are readable: rerun with --allow-damaged to mine them")]
    Damaged {
        path: String,
        offset: u64,
        reason: String,
        recovered: u64,
    },
    #[error("{0}")]
    Invalid(String),
}

impl SynthConfig {
    /// Checks the thresholds make sense.
    pub fn validate(&self) -> Result<(), SynthError> {
        if self.window_rows == 0 {
            return Err(SynthError::Invalid(
                "--window-rows must be at least 1".into(),
            ));
        }
        if self.row_bytes == 0 {
            return Err(SynthError::Invalid("--row-bytes must be at least 1".into()));
        }
        if self.top == 0 {
            return Err(SynthError::Invalid("--top must be at least 1".into()));
        }
        if self.max_pattern < 2 {
            return Err(SynthError::Invalid(
                "--max-pattern must be at least 2".into(),
            ));
        }
        Ok(())
    }
}
