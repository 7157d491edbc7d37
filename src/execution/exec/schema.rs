//! The JSON Schema of the worker protocol: the job file a worker reads and the `result.json` it
//! writes (also the JSON of a serving worker's ready frame), derived from [`super::job`]'s types.
//! The Rust worker and the Python one (`emulated_worker.py`) are two statements of one protocol;
//! the schema is the part of it a machine can check (committed as `docs/worker.schema.json`, kept
//! fresh and checked against both workers' results by `tests/it/worker_protocol.rs`).

use schemars::generate::SchemaSettings;
use schemars::transform::{RecursiveTransform, Transform};
use schemars::Schema;

use super::job::{Job, JobResult};

/// The committed file that holds [`worker_schema`], relative to the repository.
pub const WORKER_SCHEMA_FILE: &str = "docs/worker.schema.json";

/// Every object with fixed fields forbids unknown ones, as the published report schemas do
/// (`report::schema` sits above this layer, so the rule is restated here): a field a worker adds
/// that the other does not is a protocol change, not a silent extra.
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

/// The schema (draft 2020-12) of both documents of the protocol as the code writes them: a value
/// is one of `#/$defs/Job` and `#/$defs/JobResult` (each names its own required fields, so no
/// value is both).
pub fn worker_schema() -> serde_json::Value {
    let mut generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(RecursiveTransform(ClosedObjects))
        .into_generator();
    let job = generator.subschema_for::<Job>().to_value();
    let result = generator.subschema_for::<JobResult>().to_value();
    let defs = generator.take_definitions(true);
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "npu-audit worker protocol",
        "description": "The job file of `npu-audit __worker JOB.json [--serve]` (and of src/execution/exec/emulated_worker.py, \
                        the same protocol in Python) and the result.json it writes beside its outputs (also the JSON of a \
                        serving worker's ready frame, src/execution/exec/wire.rs): derived from the types in src/execution/exec/job.rs. \
                        Internal to the tool, not a published contract; both workers are checked against it by \
                        tests/it/worker_protocol.rs.",
        "oneOf": [job, result],
        "$defs": defs,
    })
}

/// [`worker_schema`] as the committed file holds it: pretty JSON and a final line break.
pub fn worker_schema_text() -> String {
    serde_json::to_string_pretty(&worker_schema()).unwrap_or_default() + "\n"
}
