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

/// Reads a report another run wrote (`merge`, `render`, baseline mode). Errors name the file
/// and, for malformed JSON or a field of the wrong kind, the line and column.
pub fn read(path: &Path) -> Result<Report> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| usage(format!("{shown}: cannot read: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{shown}:{}:{}: not JSON: {e}", e.line(), e.column())))?;
    if value.get("tool").and_then(|t| t.get("name")).and_then(|n| n.as_str()) != Some("npu-audit") {
        return Err(usage(format!(
            "{shown}: not an npu-audit compare report (no tool.name \"npu-audit\")"
        )));
    }
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(super::model::SCHEMA_VERSION) => {}
        Some(v) => {
            return Err(usage(format!(
                "{shown}: report schema version {v}, this npu-audit reads version {}",
                super::model::SCHEMA_VERSION
            )))
        }
        None => {
            return Err(usage(format!(
                "{shown}: no schema_version; not an npu-audit compare report"
            )))
        }
    }
    serde_json::from_str(&text).map_err(|e| usage(format!("{shown}:{}:{}: {e}", e.line(), e.column())))
}
