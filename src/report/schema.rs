//! The JSON Schema of the report, derived from the report's types (`schemars`), so it cannot
//! drift from what the code writes. `docs/report.schema.json` is this schema, checked by a test;
//! `npu-audit schema` prints it.

use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use schemars::Schema;

use super::model::{Report, SCHEMA_VERSION};

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

/// The schema of the JSON report (draft 2020-12), as the code serializes it.
pub fn report_schema() -> serde_json::Value {
    derived_schema::<Report>(
        format!("npu-audit report, schema version {SCHEMA_VERSION}"),
        "The JSON report of `npu-audit compare --format json` (and `--out FILE`, `merge`): derived from the report's \
         types in src/report/model.rs. Prose in docs/report-schema.md, metric definitions in docs/metrics.md.",
    )
}

/// A schema as a committed file holds it: pretty JSON and a final line break.
pub fn schema_text(schema: &serde_json::Value) -> String {
    serde_json::to_string_pretty(schema).unwrap_or_default() + "\n"
}

/// [`report_schema`] as the committed file holds it: pretty JSON and a final line break.
pub fn report_schema_text() -> String {
    schema_text(&report_schema())
}
