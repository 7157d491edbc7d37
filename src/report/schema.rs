//! The JSON Schemas of the tool's outputs, derived from their types (`schemars`), so they cannot
//! drift from what the code writes: one per [`Contract`], committed under `docs/` (checked by
//! tests) and printed by `npu-audit schema`.

use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use schemars::Schema;

use super::compare::{Report, SCHEMA_VERSION};
use super::matrix::{Matrix, MATRIX_SCHEMA_VERSION};
use super::pipeline::PipelineReport;
use super::triage::{Triage, TRIAGE_SCHEMA_VERSION};

/// The outputs whose JSON layout is a published contract other tools parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// The report of `compare`, `layers` and `merge`.
    Compare,
    /// The JSON of `triage`.
    Triage,
    /// The JSON of `matrix`.
    Matrix,
    /// The JSON of `pipeline`.
    Pipeline,
    /// The JSON of `eval`.
    Eval,
    /// The JSON of `repro`.
    Repro,
    /// The JSON of `eval --task transcribe|generate`.
    Generation,
}

impl Contract {
    /// Every contract.
    pub const ALL: [Contract; 4] = [
        Contract::Compare,
        Contract::Triage,
        Contract::Matrix,
        Contract::Pipeline,
    ];

    /// The committed file that holds its schema, relative to the repository.
    pub fn file(self) -> &'static str {
        match self {
            Contract::Compare => "docs/report.schema.json",
            Contract::Triage => "docs/triage.schema.json",
            Contract::Matrix => "docs/matrix.schema.json",
            Contract::Pipeline => "docs/pipeline.schema.json",
            Contract::Eval => "docs/eval.schema.json",
            Contract::Repro => "docs/repro.schema.json",
            Contract::Generation => "docs/generation.schema.json",
        }
    }
}

/// Every object with fixed fields forbids unknown ones: a field added to the code without being
/// described is a schema change, not a silent extra.
#[derive(Clone)]
struct ClosedObjects;

impl Transform for ClosedObjects {
    fn transform(&mut self, schema: &mut Schema) {
        if let Some(obj) = schema.as_object_mut() {
            if obj.contains_key("properties") && !obj.contains_key("additionalProperties") {
                obj.insert("additionalProperties".into(), false.into());
            }
        }
    }
}

/// The schema (draft 2020-12) of `T` as the code serializes it, every object closed, with its
/// title and description: the one derivation every published schema goes through.
pub fn derived_schema<T: schemars::JsonSchema>(title: String, description: &str) -> serde_json::Value {
    let generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(RecursiveTransform(ClosedObjects))
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    schema.insert("title".into(), title.into());
    schema.insert("description".into(), description.into());
    schema.to_value()
}

/// The schema (draft 2020-12) of one contract, as the code serializes it.
pub fn schema(contract: Contract) -> serde_json::Value {
    match contract {
        Contract::Compare => derived_schema::<Report>(
            format!("npu-audit report, schema version {SCHEMA_VERSION}"),
            "The JSON report of `npu-audit compare --format json` (and `--out FILE`, `merge`): derived from the \
             report's types in src/report/compare.rs. Prose in docs/report-schema.md, metric definitions in docs/metrics.md.",
        ),
        Contract::Triage => derived_schema::<Triage>(
            format!("npu-audit triage, schema version {TRIAGE_SCHEMA_VERSION}"),
            "The JSON of `npu-audit triage --format json` (and `--out FILE`): derived from the types in \
             src/report/triage.rs. Prose in docs/device-reports.md.",
        ),
        Contract::Matrix => derived_schema::<Matrix>(
            format!("npu-audit matrix, schema version {MATRIX_SCHEMA_VERSION}"),
            "The JSON of `npu-audit matrix --format json` (and `--out FILE`): derived from the types in \
             src/report/matrix.rs. Prose in docs/matrix.md.",
        ),
        Contract::Eval => derived_schema::<super::eval::EvalReport>(
            format!("npu-audit eval, schema version {}", super::eval::EVAL_SCHEMA_VERSION),
            "The JSON of `npu-audit eval --format json` (and `--out FILE`): derived from the types in \
             src/report/eval.rs. Prose in docs/eval.md.",
        ),
        Contract::Repro => derived_schema::<super::repro::ReproReport>(
            format!("npu-audit repro, schema version {}", super::repro::REPRO_SCHEMA_VERSION),
            "The JSON of `npu-audit repro --format json` (and `--report FILE`, and `repro.json` in the bundle): derived \
             from the types in src/report/repro.rs. Prose in docs/repro.md.",
        ),
        Contract::Generation => derived_schema::<super::generation::GenerationReport>(
            format!(
                "npu-audit generation, schema version {}",
                super::generation::GENERATION_SCHEMA_VERSION
            ),
            "The JSON of `npu-audit eval SPEC.toml --task transcribe|generate --format json` (and `--out FILE`): derived \
             from the types in src/report/generation.rs. Prose in docs/generation.md.",
        ),
        Contract::Pipeline => derived_schema::<PipelineReport>(
            "npu-audit pipeline".to_string(),
            "The JSON of `npu-audit pipeline --format json` (and `--out FILE`): derived from the types in \
             src/report/pipeline.rs. Prose in docs/streams.md.",
        ),
    }
}

/// [`schema`] as the committed file holds it: pretty JSON and a final line break.
pub fn schema_text(contract: Contract) -> String {
    serde_json::to_string_pretty(&schema(contract)).unwrap_or_default() + "\n"
}
