//! JSON: replay records as a pretty-printed array, a STREAM result as one object.

use super::{ExportError, Exporter};
use crate::record::{ReplayRecord, StreamRecord};

pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn replay(&self, records: &[ReplayRecord]) -> Result<Vec<u8>, ExportError> {
        let mut out = serde_json::to_vec_pretty(records)?;
        out.push(b'\n');
        Ok(out)
    }

    fn stream(&self, record: &StreamRecord) -> Result<Vec<u8>, ExportError> {
        let mut out = serde_json::to_vec_pretty(record)?;
        out.push(b'\n');
        Ok(out)
    }
}
