//! Result export: each format (table, JSON, CSV) is one module implementing [`Exporter`] for
//! replay records and STREAM records alike.

mod csv;
mod json;
mod table;

pub use self::csv::{
    CsvExporter, REPLAY_COLUMNS as REPLAY_CSV_COLUMNS, STREAM_COLUMNS as STREAM_CSV_COLUMNS,
};
pub use self::json::JsonExporter;
pub use self::table::{cut_middle, truncate, TableExporter};

use crate::record::{ReplayRecord, StreamRecord};

/// Output formats users can pick with `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Table,
    Json,
    Csv,
}

impl ExportFormat {
    pub fn exporter(self) -> Box<dyn Exporter> {
        match self {
            ExportFormat::Table => Box::new(TableExporter),
            ExportFormat::Json => Box::new(JsonExporter),
            ExportFormat::Csv => Box::new(CsvExporter),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot encode results as JSON: {0}")]
    Json(String),
    #[error("cannot encode results as CSV: {0}")]
    Csv(String),
}

// Messages carry the underlying error's text, so no `source()` chain repeats it.
impl From<serde_json::Error> for ExportError {
    fn from(e: serde_json::Error) -> Self {
        ExportError::Json(e.to_string())
    }
}

impl From<::csv::Error> for ExportError {
    fn from(e: ::csv::Error) -> Self {
        ExportError::Csv(e.to_string())
    }
}

/// Turns records into the bytes of one output format.
pub trait Exporter {
    /// All replay records, as one document (JSON array, CSV with header, table).
    fn replay(&self, records: &[ReplayRecord]) -> Result<Vec<u8>, ExportError>;
    /// One STREAM result.
    fn stream(&self, record: &StreamRecord) -> Result<Vec<u8>, ExportError>;
}
