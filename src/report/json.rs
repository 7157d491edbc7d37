//! The report as JSON: written pretty-printed, and read back from another run (with the schema
//! version checked).

use crate::foundation::error::bad_report;
use std::path::Path;

use anyhow::Result;

use super::compare::Report;

/// The report as pretty-printed JSON.
pub fn to_string(report: &Report) -> Result<String> {
    Ok(serde_json::to_string_pretty(report)?)
}

/// Reads a report another run wrote (`merge`, `render`, baseline mode). Errors name the file
/// and, for malformed JSON or a field of the wrong kind, the line and column.
pub fn read(path: &Path) -> Result<Report> {
    let shown = crate::foundation::userfile::shown(path);
    let bytes = crate::foundation::userfile::read_user_file(path)
        .map_err(|e| bad_report(format!("{shown}: cannot read: {e}")))?;
    from_bytes(bytes, &shown)
}

/// Parses the bytes of a report another run wrote; `shown` names where they came from.
pub fn from_bytes(bytes: Vec<u8>, shown: &str) -> Result<Report> {
    let (text, value) = json_text(bytes, shown)?;
    compare_from(&text, &value, shown)
}

/// The bytes as UTF-8 text and its JSON value, or the one line that says why they are neither.
fn json_text(bytes: Vec<u8>, shown: &str) -> Result<(String, serde_json::Value)> {
    let text = String::from_utf8(bytes).map_err(|e| {
        bad_report(format!(
            "{shown}: not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let value = serde_json::from_str(&text)
        .map_err(|e| bad_report(format!("{shown}:{}:{}: not JSON: {e}", e.line(), e.column())))?;
    Ok((text, value))
}

/// A compare report from its text, once its JSON `value` says it is one of this layout version.
fn compare_from(text: &str, value: &serde_json::Value, shown: &str) -> Result<Report> {
    if value.get("tool").and_then(|t| t.get("name")).and_then(|n| n.as_str()) != Some("npu-audit") {
        return Err(bad_report(format!(
            "{shown}: not an npu-audit compare report (no tool.name \"npu-audit\")"
        )));
    }
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(super::compare::SCHEMA_VERSION) => {}
        Some(v) => {
            return Err(bad_report(format!(
                "{shown}: report schema version {v}, this npu-audit reads version {}",
                super::compare::SCHEMA_VERSION
            )))
        }
        None => {
            return Err(bad_report(format!(
                "{shown}: no schema_version; not an npu-audit compare report"
            )))
        }
    }
    serde_json::from_str(text).map_err(|e| {
        bad_report(format!(
            "{shown}:{}:{}: {}",
            e.line(),
            e.column(),
            crate::foundation::error::plain_serde_message(&e.to_string())
        ))
    })
}

/// Every kind of report the tool writes, read back by `render`: which command wrote it follows
/// from the JSON itself (see [`kind_of`]), and each is parsed as its own contract.
#[derive(Debug)]
pub enum AnyReport {
    /// `compare`, `layers` and `merge` of compare shards.
    Compare(Box<Report>),
    /// `eval`, and `merge` of eval shards.
    Eval(Box<super::eval::EvalReport>),
    /// `triage`.
    Triage(Box<super::triage::Triage>),
    /// `matrix`.
    Matrix(Box<super::matrix::Matrix>),
    /// `pipeline`.
    Pipeline(Box<super::pipeline::PipelineReport>),
    /// `eval --task transcribe|generate` on a generation spec.
    Generation(Box<super::generation::GenerationReport>),
    /// `repro --report`.
    Repro(Box<super::repro::ReproReport>),
}

/// The kinds of report [`AnyReport`] holds, named as their commands are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Compare,
    Eval,
    Triage,
    Matrix,
    Pipeline,
    Repro,
    Generation,
}

impl Kind {
    /// The report named as the user knows it (`an eval report`).
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Compare => "a compare report",
            Kind::Eval => "an eval report",
            Kind::Triage => "a triage report",
            Kind::Matrix => "a matrix report",
            Kind::Pipeline => "a pipeline report",
            Kind::Repro => "a repro report",
            Kind::Generation => "a generation report",
        }
    }

    /// The layout version this release writes and reads (`None`: the kind carries none).
    fn schema_version(self) -> Option<u32> {
        match self {
            Kind::Compare => Some(super::compare::SCHEMA_VERSION),
            Kind::Eval => Some(super::eval::EVAL_SCHEMA_VERSION),
            Kind::Triage => Some(super::triage::TRIAGE_SCHEMA_VERSION),
            Kind::Matrix => Some(super::matrix::MATRIX_SCHEMA_VERSION),
            Kind::Repro => Some(super::repro::REPRO_SCHEMA_VERSION),
            Kind::Pipeline => None,
            Kind::Generation => Some(super::generation::GENERATION_SCHEMA_VERSION),
        }
    }
}

impl AnyReport {
    /// Which kind of report it is.
    pub fn kind(&self) -> Kind {
        match self {
            AnyReport::Compare(_) => Kind::Compare,
            AnyReport::Eval(_) => Kind::Eval,
            AnyReport::Triage(_) => Kind::Triage,
            AnyReport::Matrix(_) => Kind::Matrix,
            AnyReport::Pipeline(_) => Kind::Pipeline,
            AnyReport::Repro(_) => Kind::Repro,
            AnyReport::Generation(_) => Kind::Generation,
        }
    }
}

/// The fields only one kind's report holds at its top level (every one of them required by its
/// schema), beside `tool_version`; a compare report is told by its `tool.name`.
const KIND_FIELDS: [(Kind, &[&str]); 5] = [
    (Kind::Eval, &["dataset", "task", "statistics", "reference_metrics"]),
    (Kind::Triage, &["candidate_runs", "reports", "thresholds"]),
    (Kind::Matrix, &["cells", "cost_order", "dispatch", "recommendations"]),
    (Kind::Pipeline, &["file", "stages", "samples"]),
    (Kind::Repro, &["criterion", "candidates_tried", "minimality", "against"]),
];

/// The kind of report a JSON value is, from the fields that tell the contracts apart; `None`
/// when it is none of them.
pub fn kind_of(value: &serde_json::Value) -> Option<Kind> {
    let obj = value.as_object()?;
    // A generation report names its kind (its `tool` is the compare report's shape).
    if obj.get("kind").and_then(|k| k.as_str()) == Some("generation") {
        return Some(Kind::Generation);
    }
    if obj.get("tool").and_then(|t| t.get("name")).and_then(|n| n.as_str()) == Some("npu-audit") {
        return Some(Kind::Compare);
    }
    if !obj.get("tool_version").is_some_and(serde_json::Value::is_string) {
        return None;
    }
    KIND_FIELDS
        .iter()
        .find(|(_, fields)| fields.iter().all(|f| obj.contains_key(*f)))
        .map(|(kind, _)| *kind)
}

/// Parses the bytes of a report of any kind; `shown` names where they came from. The kind is read
/// from the JSON, its schema version checked, then it is parsed as that kind's contract.
pub fn any_from_bytes(bytes: Vec<u8>, shown: &str) -> Result<AnyReport> {
    let (text, value) = json_text(bytes, shown)?;
    let kind = kind_of(&value).ok_or_else(|| {
        bad_report(format!(
            "{shown}: not a report npu-audit writes (compare, eval, generation, triage, matrix, pipeline or repro)"
        ))
    })?;
    check_version(kind, &value, shown)?;
    let typed = |e: serde_json::Error| {
        bad_report(format!(
            "{shown}:{}:{}: {} ({})",
            e.line(),
            e.column(),
            crate::foundation::error::plain_serde_message(&e.to_string()),
            kind.noun()
        ))
    };
    Ok(match kind {
        Kind::Compare => AnyReport::Compare(Box::new(compare_from(&text, &value, shown)?)),
        Kind::Eval => AnyReport::Eval(serde_json::from_str(&text).map_err(typed)?),
        Kind::Triage => AnyReport::Triage(serde_json::from_str(&text).map_err(typed)?),
        Kind::Matrix => AnyReport::Matrix(serde_json::from_str(&text).map_err(typed)?),
        Kind::Pipeline => AnyReport::Pipeline(serde_json::from_str(&text).map_err(typed)?),
        Kind::Repro => AnyReport::Repro(serde_json::from_str(&text).map_err(typed)?),
        Kind::Generation => AnyReport::Generation(serde_json::from_str(&text).map_err(typed)?),
    })
}

/// Refuses a report of another layout version than this release reads.
fn check_version(kind: Kind, value: &serde_json::Value, shown: &str) -> Result<()> {
    let Some(expected) = kind.schema_version() else {
        return Ok(());
    };
    match value.get("schema_version").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(expected) => Ok(()),
        Some(v) => Err(bad_report(format!(
            "{shown}: {} of schema version {v}; this npu-audit reads version {expected}",
            kind.noun()
        ))),
        None => Err(bad_report(format!("{shown}: {} without a schema_version", kind.noun()))),
    }
}
