//! The JSON rendering: to stdout, or to a file written atomically (a temporary file in the same
//! directory, renamed into place) so a failed run never leaves a half-written report.

use std::io::Write;
use std::path::Path;

use anyhow::Result;

use super::model::Report;
use crate::error::usage;

/// The report as pretty-printed JSON.
pub fn to_string(report: &Report) -> Result<String> {
    Ok(serde_json::to_string_pretty(report)?)
}

/// Writes bytes to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
    tmp.write_all(bytes)
        .map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
    tmp.persist(path)
        .map_err(|e| usage(format!("cannot write {}: {}", path.display(), e.error)))?;
    Ok(())
}
