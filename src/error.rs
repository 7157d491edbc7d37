//! Error kinds that decide the process exit code, so every failure path ends with one clear line
//! and a documented code (see README "Exit codes").

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
    /// The audit itself could not run: no ONNX Runtime could be provisioned, or the golden
    /// reference run failed.
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

/// An error that carries the exit code it must end the process with.
#[derive(Debug)]
pub struct Failure {
    pub code: ExitCode,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// A usage or input error (exit code 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        code: ExitCode::Usage,
        message: message.into(),
    })
}

/// An environment error (exit code 4).
pub fn environment(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        code: ExitCode::Environment,
        message: message.into(),
    })
}

/// The audit was interrupted (exit code 130).
pub fn interrupted() -> anyhow::Error {
    anyhow::Error::new(Failure {
        code: ExitCode::Interrupted,
        message: "interrupted".into(),
    })
}

/// The exit code an error should end the process with; unclassified errors are environment
/// errors.
pub fn exit_code_of(err: &anyhow::Error) -> ExitCode {
    err.chain()
        .find_map(|e| e.downcast_ref::<Failure>())
        .map(|f| f.code)
        .unwrap_or(ExitCode::Environment)
}

/// Renders an error chain on one line (runtime messages can contain newlines).
/// Any text on one line (runtime errors span several).
pub fn one_line_str(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn one_line(err: &anyhow::Error) -> String {
    let text = format!("{err:#}");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
