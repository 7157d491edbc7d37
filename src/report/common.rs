//! What every report shares: the header that says what a report is (its layout version, its
//! kind, the tool that wrote it), and the number that may be infinite or NaN.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number that may be infinite or NaN. JSON has neither, so they are written as the strings
/// `"inf"`, `"-inf"` and `"nan"`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Num(pub f64);

impl Num {
    /// Not a number: a figure that could not be computed (also the default of a field that
    /// older layouts lack).
    pub fn nan() -> Num {
        Num(f64::NAN)
    }
}

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("nan")
        } else if v == f64::INFINITY {
            s.serialize_str("inf")
        } else if v == f64::NEG_INFINITY {
            s.serialize_str("-inf")
        } else {
            s.serialize_f64(v)
        }
    }
}

impl JsonSchema for Num {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Num".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A number that may be infinite or NaN: a JSON number when finite, else the string \"inf\", \"-inf\" or \"nan\".",
            "anyOf": [{ "type": "number" }, { "enum": ["inf", "-inf", "nan"] }]
        })
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Number(f64),
            Text(String),
        }
        match Repr::deserialize(d)? {
            Repr::Number(v) => Ok(Num(v)),
            Repr::Text(t) => match t.as_str() {
                "inf" => Ok(Num(f64::INFINITY)),
                "-inf" => Ok(Num(f64::NEG_INFINITY)),
                "nan" => Ok(Num(f64::NAN)),
                other => Err(serde::de::Error::custom(format!("'{other}' is not a number"))),
            },
        }
    }
}

/// The tool that wrote a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolInfo {
    /// Always `npu-audit`.
    pub name: String,
    /// The version of the tool.
    pub version: String,
}

impl ToolInfo {
    /// This build of the tool.
    pub fn this() -> ToolInfo {
        ToolInfo {
            name: TOOL_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// The name every report's `tool.name` holds.
pub const TOOL_NAME: &str = "npu-audit";

/// The kind of a report: which command wrote it, so that a reader parses it as that contract.
/// Every report states it in `kind`, beside `schema_version` and `tool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    /// `compare`, `layers` and `merge` of compare shards.
    Compare,
    /// `eval`, and `merge` of eval shards.
    Eval,
    /// `eval SPEC.toml --task transcribe|generate`.
    Generation,
    /// `triage`.
    Triage,
    /// `matrix`.
    Matrix,
    /// `pipeline`.
    Pipeline,
    /// `repro --report`.
    Repro,
}

impl ReportKind {
    /// Every kind, in the order the help lists them.
    pub const ALL: [ReportKind; 7] = [
        ReportKind::Compare,
        ReportKind::Eval,
        ReportKind::Generation,
        ReportKind::Triage,
        ReportKind::Matrix,
        ReportKind::Pipeline,
        ReportKind::Repro,
    ];

    /// The kind as `kind` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportKind::Compare => "compare",
            ReportKind::Eval => "eval",
            ReportKind::Generation => "generation",
            ReportKind::Triage => "triage",
            ReportKind::Matrix => "matrix",
            ReportKind::Pipeline => "pipeline",
            ReportKind::Repro => "repro",
        }
    }

    /// The kind spelled as `kind` spells it, if it is one.
    pub fn parse(text: &str) -> Option<ReportKind> {
        ReportKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The report named as the user knows it (`an eval report`).
    pub fn noun(self) -> &'static str {
        match self {
            ReportKind::Compare => "a compare report",
            ReportKind::Eval => "an eval report",
            ReportKind::Triage => "a triage report",
            ReportKind::Matrix => "a matrix report",
            ReportKind::Pipeline => "a pipeline report",
            ReportKind::Repro => "a repro report",
            ReportKind::Generation => "a generation report",
        }
    }
}

impl std::fmt::Display for ReportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
