//! Reports as JSON: written pretty-printed, and read back from another run. Every report says
//! what it is in its header (`schema_version`, `kind`, `tool`); a reader reads the kind, refuses a
//! layout it does not know, and brings a report of the previous layout of its kind up to the
//! current one before parsing it as that kind's contract.

use std::path::Path;

use anyhow::Result;
use serde_json::{json, Value};

use super::common::{ReportKind, TOOL_NAME};
use super::compare::Report;
use crate::foundation::error::bad_report;

/// The report as pretty-printed JSON.
pub fn to_string(report: &Report) -> Result<String> {
    Ok(serde_json::to_string_pretty(report)?)
}

/// Reads a compare report another run wrote (`merge`, baseline mode). Errors name the file and,
/// for malformed JSON or a field of the wrong kind, the line and column.
pub fn read(path: &Path) -> Result<Report> {
    let shown = crate::foundation::userfile::shown(path);
    let bytes = crate::foundation::userfile::read_user_file(path)
        .map_err(|e| bad_report(format!("{shown}: cannot read: {e}")))?;
    from_bytes(bytes, &shown)
}

/// Parses the bytes of a compare report another run wrote; `shown` names where they came from.
/// A report of another kind is refused, named.
pub fn from_bytes(bytes: Vec<u8>, shown: &str) -> Result<Report> {
    match any_from_bytes(bytes, shown)? {
        AnyReport::Compare(r) => Ok(*r),
        other => Err(bad_report(format!(
            "{shown}: {}, not a compare report",
            other.kind().noun()
        ))),
    }
}

/// The bytes as UTF-8 text and its JSON value, or the one line that says why they are neither.
fn json_text(bytes: Vec<u8>, shown: &str) -> Result<(String, Value)> {
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

/// Every kind of report the tool writes, read back by `render`: which command wrote it follows
/// from the report's `kind`, and each is parsed as its own contract.
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

impl AnyReport {
    /// Which kind of report it is.
    pub fn kind(&self) -> ReportKind {
        match self {
            AnyReport::Compare(_) => ReportKind::Compare,
            AnyReport::Eval(_) => ReportKind::Eval,
            AnyReport::Triage(_) => ReportKind::Triage,
            AnyReport::Matrix(_) => ReportKind::Matrix,
            AnyReport::Pipeline(_) => ReportKind::Pipeline,
            AnyReport::Repro(_) => ReportKind::Repro,
            AnyReport::Generation(_) => ReportKind::Generation,
        }
    }
}

/// The layout version of `kind` that this release writes and reads.
pub fn current_version(kind: ReportKind) -> u32 {
    match kind {
        ReportKind::Compare => super::compare::SCHEMA_VERSION,
        ReportKind::Eval => super::eval::EVAL_SCHEMA_VERSION,
        ReportKind::Generation => super::generation::GENERATION_SCHEMA_VERSION,
        ReportKind::Triage => super::triage::TRIAGE_SCHEMA_VERSION,
        ReportKind::Matrix => super::matrix::MATRIX_SCHEMA_VERSION,
        ReportKind::Pipeline => super::pipeline::PIPELINE_SCHEMA_VERSION,
        ReportKind::Repro => super::repro::REPRO_SCHEMA_VERSION,
    }
}

/// The fields only one kind's report holds at its top level, by which a report of the layout
/// before `kind` was written is told (`tool_version` beside them; a compare report by its
/// `tool.name`). Only reports without `kind` are read this way.
const LEGACY_FIELDS: [(ReportKind, &[&str]); 5] = [
    (
        ReportKind::Eval,
        &["dataset", "task", "statistics", "reference_metrics"],
    ),
    (ReportKind::Triage, &["candidate_runs", "reports", "thresholds"]),
    (
        ReportKind::Matrix,
        &["cells", "cost_order", "dispatch", "recommendations"],
    ),
    (ReportKind::Pipeline, &["file", "stages", "samples"]),
    (
        ReportKind::Repro,
        &["criterion", "candidates_tried", "minimality", "against"],
    ),
];

/// The kind and layout version a report's header states. A report without `kind` is of a layout
/// before the header (compare 1, eval 2, triage, matrix and repro 1, pipeline 0): its kind is
/// told by its fields, and only such an older layout is read so.
pub fn header_of(value: &Value, shown: &str) -> Result<(ReportKind, u32)> {
    let obj = value
        .as_object()
        .ok_or_else(|| bad_report(format!("{shown}: not a report npu-audit writes (not a JSON object)")))?;
    let version = obj.get("schema_version").and_then(Value::as_u64).map(|v| v as u32);
    match obj.get("kind") {
        Some(Value::String(k)) => {
            let kind = ReportKind::parse(k).ok_or_else(|| {
                let kinds: Vec<&str> = ReportKind::ALL.iter().map(|k| k.as_str()).collect();
                bad_report(format!(
                    "{shown}: kind '{k}' is not a kind of report npu-audit writes ({})",
                    kinds.join(", ")
                ))
            })?;
            let version =
                version.ok_or_else(|| bad_report(format!("{shown}: {} without a schema_version", kind.noun())))?;
            Ok((kind, version))
        }
        Some(_) => Err(bad_report(format!("{shown}: kind is not a string"))),
        None => legacy_header(obj, version, shown),
    }
}

/// The kind of a report written before reports stated it, from its fields.
fn legacy_header(obj: &serde_json::Map<String, Value>, version: Option<u32>, shown: &str) -> Result<(ReportKind, u32)> {
    let unknown = || {
        bad_report(format!(
            "{shown}: not a report npu-audit writes (no kind; compare, eval, generation, triage, matrix, pipeline or repro)"
        ))
    };
    let kind = if obj.get("tool").and_then(|t| t.get("name")).and_then(Value::as_str) == Some(TOOL_NAME) {
        ReportKind::Compare
    } else if obj.get("tool_version").is_some_and(Value::is_string) {
        LEGACY_FIELDS
            .iter()
            .find(|(_, fields)| fields.iter().all(|f| obj.contains_key(*f)))
            .map(|(kind, _)| *kind)
            .ok_or_else(unknown)?
    } else {
        return Err(unknown());
    };
    let version = match (kind, version) {
        (ReportKind::Pipeline, None) => 0,
        (_, Some(v)) => v,
        (_, None) => return Err(bad_report(format!("{shown}: {} without a schema_version", kind.noun()))),
    };
    if version >= current_version(kind) {
        return Err(bad_report(format!(
            "{shown}: {} of schema version {version} without a kind: not a report npu-audit wrote",
            kind.noun()
        )));
    }
    Ok((kind, version))
}

/// A report of the layout before the current one of its kind, brought up to the current layout:
/// the header each kind now carries (`kind`, `tool` for `tool_version`), and a generation
/// report's gate as every kind's. `None` for a layout no release of this one reads.
fn upgrade(kind: ReportKind, version: u32, mut value: Value) -> Option<Value> {
    let previous = current_version(kind).checked_sub(1)?;
    if version != previous {
        return None;
    }
    let obj = value.as_object_mut()?;
    let tool_version = obj.remove("tool_version");
    if let Some(Value::String(v)) = tool_version {
        obj.insert("tool".into(), json!({ "name": TOOL_NAME, "version": v }));
    }
    obj.insert("kind".into(), json!(kind.as_str()));
    obj.insert("schema_version".into(), json!(current_version(kind)));
    if kind == ReportKind::Generation {
        let rules = obj.remove("gate").unwrap_or(Value::Array(Vec::new()));
        obj.insert("gate".into(), generation_gate(rules)?);
    }
    Some(value)
}

/// A generation report's gate of layout 1 (a list of `max_accuracy_drop` rules) as every kind's.
fn generation_gate(rules: Value) -> Option<Value> {
    let rules: Vec<Value> = rules
        .as_array()?
        .iter()
        .map(|r| {
            let wer = r.get("measure").and_then(Value::as_str) == Some("wer_increase");
            json!({
                "rule": "max_accuracy_drop",
                "target": r.get("target"),
                "output": "(set)",
                "measured": r.get("upper"),
                "limit": r.get("limit"),
                "pass": r.get("pass"),
                "origin": r.get("origin"),
                "measure": if wer { "wer_increase" } else { "text_disagreement" },
                "estimate": r.get("estimate"),
                "bound": if wer { "bootstrap_upper" } else { "wilson_upper" },
            })
        })
        .collect();
    let verdict = if rules.is_empty() {
        "none"
    } else if rules.iter().all(|r| r.get("pass") == Some(&Value::Bool(true))) {
        "pass"
    } else {
        "fail"
    };
    Some(json!({ "verdict": verdict, "rules": rules }))
}

/// Parses the bytes of a report of any kind; `shown` names where they came from. The kind is read
/// from the report's header, its layout version checked (the previous one brought up to date),
/// then it is parsed as that kind's contract.
pub fn any_from_bytes(bytes: Vec<u8>, shown: &str) -> Result<AnyReport> {
    let (text, value) = json_text(bytes, shown)?;
    let (kind, version) = header_of(&value, shown)?;
    let expected = current_version(kind);
    if version > expected {
        return Err(bad_report(format!(
            "{shown}: {} of schema version {version}; this npu-audit reads version {expected}",
            kind.noun()
        )));
    }
    if version == expected {
        return parse(kind, &Input::Text(&text), shown);
    }
    let upgraded = upgrade(kind, version, value).ok_or_else(|| {
        bad_report(format!(
            "{shown}: {} of schema version {version}; this npu-audit reads versions {} and {expected}",
            kind.noun(),
            expected.saturating_sub(1)
        ))
    })?;
    parse(kind, &Input::Value(&upgraded), shown)
}

/// What a report is parsed from: its text (errors then name a line and column), or the value a
/// report of the previous layout was brought up to.
enum Input<'a> {
    Text(&'a str),
    Value(&'a Value),
}

/// A contract parsed from `input`, or the error's tail (`:line:col: message` for text).
fn read_as<T: serde::de::DeserializeOwned>(input: &Input<'_>) -> std::result::Result<Box<T>, String> {
    let plain = |e: &serde_json::Error| crate::foundation::error::plain_serde_message(&e.to_string());
    match input {
        Input::Text(text) => serde_json::from_str(text)
            .map(Box::new)
            .map_err(|e| format!(":{}:{}: {}", e.line(), e.column(), plain(&e))),
        Input::Value(value) => T::deserialize(*value)
            .map(Box::new)
            .map_err(|e| format!(": {} (read as the current layout)", plain(&e))),
    }
}

/// Parses a report as `kind`'s contract.
fn parse(kind: ReportKind, input: &Input<'_>, shown: &str) -> Result<AnyReport> {
    let typed = |e: String| bad_report(format!("{shown}{e} ({})", kind.noun()));
    Ok(match kind {
        ReportKind::Compare => AnyReport::Compare(read_as(input).map_err(typed)?),
        ReportKind::Eval => AnyReport::Eval(read_as(input).map_err(typed)?),
        ReportKind::Triage => AnyReport::Triage(read_as(input).map_err(typed)?),
        ReportKind::Matrix => AnyReport::Matrix(read_as(input).map_err(typed)?),
        ReportKind::Pipeline => AnyReport::Pipeline(read_as(input).map_err(typed)?),
        ReportKind::Repro => AnyReport::Repro(read_as(input).map_err(typed)?),
        ReportKind::Generation => AnyReport::Generation(read_as(input).map_err(typed)?),
    })
}
