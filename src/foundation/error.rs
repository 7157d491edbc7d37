//! The errors of each subsystem, as types (`thiserror`), and the one place that decides which
//! documented exit code each ends the process with ([`exit_code_of`]; README "Exit codes").
//! They live here, at the bottom of the layering, so that every module can raise its own and
//! the mapping can see them all. Every error renders as one line ([`one_line`]).

use std::fmt;

/// Documented process exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// The audit ran and every gate passed.
    Success = 0,
    /// The audit ran and a drift threshold was exceeded.
    DriftExceeded = 1,
    /// Bad command line or bad input (model, inputs, golden directory, output path).
    Usage = 2,
    /// A required target did not run to completion (failed, crashed, timed out, unavailable).
    TargetFailed = 3,
    /// The audit itself could not run: no ONNX Runtime could be provisioned, the golden
    /// reference run failed, or the machine ran out of something (disk, work directory).
    Environment = 4,
    /// Interrupted by Ctrl-C, SIGTERM or SIGHUP.
    Interrupted = 130,
}

impl serde::Serialize for ExitCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(*self as i32)
    }
}

impl schemars::JsonSchema for ExitCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ExitCode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "The documented process exit code the run ends with (README, \"Exit codes\").",
            "enum": [0, 1, 2, 3, 4, 130]
        })
    }
}

impl<'de> serde::Deserialize<'de> for ExitCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ExitCode, D::Error> {
        let code = i32::deserialize(d)?;
        ExitCode::from_code(code)
            .ok_or_else(|| serde::de::Error::custom(format!("{code} is not a documented exit code")))
    }
}

impl ExitCode {
    /// The documented code with this number.
    pub fn from_code(code: i32) -> Option<ExitCode> {
        [
            ExitCode::Success,
            ExitCode::DriftExceeded,
            ExitCode::Usage,
            ExitCode::TargetFailed,
            ExitCode::Environment,
            ExitCode::Interrupted,
        ]
        .into_iter()
        .find(|c| *c as i32 == code)
    }
}

/// A flag, or a value given on the command line, that the tool cannot use (a target spec, a
/// shard, a class axis, a probe, a tap selection).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(pub String);

/// A model that cannot be audited: missing, not ONNX, truncated, refused by ONNX Runtime, or
/// not the model a reference or golden run belongs to.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ModelError(pub String);

/// Inputs that cannot be fed: unreadable files, arrays the model does not take, shapes or types
/// that do not fit, generators that make no sense for an input.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

/// A golden directory that cannot be used or written: missing, altered (a hash differs), or a
/// destination that is not a golden run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GoldenError(pub String);

/// A policy file (`npu-audit.toml`) that cannot be used, named at `file:line:col`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// A report read back (`merge`, `render`, baseline mode) that cannot be used: not a report of
/// this tool, another schema version, or shards that are not parts of one audit.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReportError(pub String);

/// A file or directory the user asked to be written that cannot be, or must not be.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The destination is unusable (a directory, a device, one of the run's inputs).
    #[error("{0}")]
    Destination(String),
    /// The machine ran out of room while writing it.
    #[error("{0}")]
    NoSpace(String),
}

/// An ONNX Runtime build that cannot be found or fetched.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The user pointed at a runtime that is not one (`--runtime`, `NPU_AUDIT_RUNTIME_*`).
    #[error("{0}")]
    BadChoice(String),
    /// None could be found or fetched on this machine.
    #[error("{0}")]
    Unavailable(String),
}

/// The audit could not run on this machine: the golden run crashed, the work directory cannot
/// be made or filled.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunError(pub String);

/// The user interrupted the audit (Ctrl-C, SIGTERM, SIGHUP).
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// The exit code an error ends the process with: the first typed error in its chain decides;
/// an error of no known type (a bug, or a failure nobody classified) is an environment error.
pub fn exit_code_of(err: &anyhow::Error) -> ExitCode {
    for cause in err.chain() {
        let usage = cause.is::<FlagError>()
            || cause.is::<ModelError>()
            || cause.is::<InputError>()
            || cause.is::<GoldenError>()
            || cause.is::<PolicyError>()
            || cause.is::<ReportError>()
            || matches!(cause.downcast_ref::<OutputError>(), Some(OutputError::Destination(_)))
            || matches!(cause.downcast_ref::<RuntimeError>(), Some(RuntimeError::BadChoice(_)));
        if usage {
            return ExitCode::Usage;
        }
        if cause.is::<Interrupted>() {
            return ExitCode::Interrupted;
        }
        let environment = cause.is::<RunError>() || cause.is::<OutputError>() || cause.is::<RuntimeError>();
        if environment {
            return ExitCode::Environment;
        }
    }
    ExitCode::Environment
}

/// A flag the tool cannot use (exit code 2).
pub fn bad_flag(message: impl Into<String>) -> anyhow::Error {
    FlagError(message.into()).into()
}

/// A model the tool cannot audit (exit code 2).
pub fn bad_model(message: impl Into<String>) -> anyhow::Error {
    ModelError(message.into()).into()
}

/// Inputs the tool cannot feed (exit code 2).
pub fn bad_input(message: impl Into<String>) -> anyhow::Error {
    InputError(message.into()).into()
}

/// A golden directory the tool cannot use or write (exit code 2).
pub fn bad_golden(message: impl Into<String>) -> anyhow::Error {
    GoldenError(message.into()).into()
}

/// A policy file the tool cannot use (exit code 2).
pub fn bad_policy(message: impl Into<String>) -> anyhow::Error {
    PolicyError(message.into()).into()
}

/// A report read back that the tool cannot use (exit code 2).
pub fn bad_report(message: impl Into<String>) -> anyhow::Error {
    ReportError(message.into()).into()
}

/// An output destination that cannot or must not be written (exit code 2).
pub fn bad_output(message: impl Into<String>) -> anyhow::Error {
    OutputError::Destination(message.into()).into()
}

/// A runtime the user pointed at that is not one (exit code 2).
pub fn bad_runtime_choice(message: impl Into<String>) -> anyhow::Error {
    RuntimeError::BadChoice(message.into()).into()
}

/// No runtime could be found or fetched here (exit code 4).
pub fn runtime_unavailable(message: impl Into<String>) -> anyhow::Error {
    RuntimeError::Unavailable(message.into()).into()
}

/// The audit could not run here (exit code 4).
pub fn run_error(message: impl Into<String>) -> anyhow::Error {
    RunError(message.into()).into()
}

/// The audit was interrupted (exit code 130).
pub fn interrupted() -> anyhow::Error {
    Interrupted.into()
}

/// A JSON parser's message in the user's words: the Rust type names serde puts in it
/// (`expected struct GateLimit`, `expected enum RunStatus`) said as what the file must hold.
pub fn plain_serde_message(text: &str) -> String {
    static TYPES: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = TYPES.get_or_init(|| {
        regex::Regex::new(r"(tuple struct|struct|enum|map) [A-Z][A-Za-z0-9_]*(<[^>]*>)?").expect("a valid pattern")
    });
    re.replace_all(text, |c: &regex::Captures| match &c[1] {
        "enum" => "one of its values".to_string(),
        "tuple struct" => "an array".to_string(),
        _ => "an object".to_string(),
    })
    .into_owned()
}

/// Any text on one line (runtime errors span several).
pub fn one_line_str(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Renders an error chain on one line (runtime messages can contain newlines).
pub fn one_line(err: &anyhow::Error) -> String {
    one_line_str(&format!("{err:#}"))
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", *self as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn serde_messages_name_what_the_file_must_hold_not_rust_types() {
        assert_eq!(
            plain_serde_message("invalid type: integer `5`, expected struct GateLimit at line 3 column 9"),
            "invalid type: integer `5`, expected an object at line 3 column 9"
        );
        assert_eq!(
            plain_serde_message("invalid type: string \"x\", expected enum RunStatus"),
            "invalid type: string \"x\", expected one of its values"
        );
        assert_eq!(plain_serde_message("missing field `units`"), "missing field `units`");
    }

    #[test]
    fn every_kind_of_error_maps_to_its_documented_code() {
        assert_eq!(exit_code_of(&bad_flag("x")), ExitCode::Usage);
        assert_eq!(exit_code_of(&bad_model("x")), ExitCode::Usage);
        assert_eq!(exit_code_of(&bad_input("x")), ExitCode::Usage);
        assert_eq!(exit_code_of(&bad_golden("x")), ExitCode::Usage);
        assert_eq!(exit_code_of(&bad_policy("x")), ExitCode::Usage);
        assert_eq!(exit_code_of(&bad_report("x")), ExitCode::Usage);
        assert_eq!(exit_code_of(&bad_output("x")), ExitCode::Usage);
        assert_eq!(
            exit_code_of(&OutputError::NoSpace("x".into()).into()),
            ExitCode::Environment
        );
        assert_eq!(
            exit_code_of(&RuntimeError::BadChoice("x".into()).into()),
            ExitCode::Usage
        );
        assert_eq!(
            exit_code_of(&RuntimeError::Unavailable("x".into()).into()),
            ExitCode::Environment
        );
        assert_eq!(exit_code_of(&run_error("x")), ExitCode::Environment);
        assert_eq!(exit_code_of(&interrupted()), ExitCode::Interrupted);
        assert_eq!(exit_code_of(&anyhow::anyhow!("unclassified")), ExitCode::Environment);
        // Context added on the way up does not hide the kind.
        let wrapped = Err::<(), _>(bad_input("bad")).context("while reading").unwrap_err();
        assert_eq!(exit_code_of(&wrapped), ExitCode::Usage);
        assert_eq!(one_line(&wrapped), "while reading: bad");
    }
}
