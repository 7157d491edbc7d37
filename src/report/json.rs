//! The report as JSON: written pretty-printed, and read back from another run (with the schema
//! version checked).

use crate::error::bad_report;
use std::path::Path;

use anyhow::Result;

use super::model::Report;

/// The report as pretty-printed JSON.
pub fn to_string(report: &Report) -> Result<String> {
    Ok(serde_json::to_string_pretty(report)?)
}

/// Reads a report another run wrote (`merge`, `render`, baseline mode). Errors name the file
/// and, for malformed JSON or a field of the wrong kind, the line and column.
pub fn read(path: &Path) -> Result<Report> {
    let shown = crate::userfile::shown(path);
    let bytes = crate::userfile::read_user_file(path).map_err(|e| bad_report(format!("{shown}: cannot read: {e}")))?;
    from_bytes(bytes, &shown)
}

/// Parses the bytes of a report another run wrote; `shown` names where they came from.
pub fn from_bytes(bytes: Vec<u8>, shown: &str) -> Result<Report> {
    let text = String::from_utf8(bytes).map_err(|e| {
        bad_report(format!(
            "{shown}: not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| bad_report(format!("{shown}:{}:{}: not JSON: {e}", e.line(), e.column())))?;
    if value.get("tool").and_then(|t| t.get("name")).and_then(|n| n.as_str()) != Some("npu-audit") {
        return Err(bad_report(format!(
            "{shown}: not an npu-audit compare report (no tool.name \"npu-audit\")"
        )));
    }
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(super::model::SCHEMA_VERSION) => {}
        Some(v) => {
            return Err(bad_report(format!(
                "{shown}: report schema version {v}, this npu-audit reads version {}",
                super::model::SCHEMA_VERSION
            )))
        }
        None => {
            return Err(bad_report(format!(
                "{shown}: no schema_version; not an npu-audit compare report"
            )))
        }
    }
    serde_json::from_str(&text).map_err(|e| {
        bad_report(format!(
            "{shown}:{}:{}: {}",
            e.line(),
            e.column(),
            crate::error::plain_serde_message(&e.to_string())
        ))
    })
}
