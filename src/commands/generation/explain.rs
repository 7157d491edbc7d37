//! `--explain K` on a generation: where a target's first divergent token comes from. The part
//! call that produced the divergent step's logits is audited layer by layer (`compare --layers`,
//! isolated runs included) on exactly the inputs the target fed it there (its own key/value
//! state), against the reference spec's part of the same name on the same inputs and against the
//! `cpu:noopt` baseline: the layer that introduces the most error by itself, and the first layer
//! that departs from the baseline at each level.

use anyhow::Result;

use super::spec::PartKind;
use super::{GenerationOptions, Specs};
use crate::analyses::layers::LayerOptions;
use crate::commands::compare::{run_compare, Audited, CompareOptions, Execution, GoldenSource, Measured};
use crate::data::inputs::{InputOptions, MemoryInputs};
use crate::data::tensor::Tensor;
use crate::execution::exec::PlannedTarget;
use crate::foundation::userfile::Outputs;
use crate::report::compare::TargetReport;
use crate::report::generation::{IntroducedLayer, StepExplanation};

/// The inputs a target fed a part at its first divergence, kept for the per-layer audit.
#[derive(Debug, Clone)]
pub struct DivergentCall {
    /// The sample's position in the set.
    pub sample: usize,
    pub part: PartKind,
    pub inputs: Vec<(String, Tensor)>,
}

/// The per-layer audit of one divergent call on `planned`; a failure is the explanation's error.
pub fn explain(
    opts: &GenerationOptions,
    specs: &Specs,
    planned: &PlannedTarget,
    call: &DivergentCall,
) -> StepExplanation {
    match audit(opts, specs, planned, call) {
        Ok(row) => explanation(call.part, &row),
        Err(e) => StepExplanation {
            part: call.part.name().into(),
            worst_introduced: None,
            first_code_difference: None,
            first_beyond_rounding: None,
            first_sqnr_loss: None,
            error: Some(crate::foundation::error::one_line(&e)),
        },
    }
}

/// What a target's row of the per-layer audit says of the step.
fn explanation(part: PartKind, row: &TargetReport) -> StepExplanation {
    let summary = row.layer_summary.clone();
    let worst = row
        .layers
        .iter()
        .filter_map(|l| l.introduced_sqnr_db.filter(|v| !v.0.is_nan()).map(|v| (l, v)))
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
        .map(|(l, v)| IntroducedLayer {
            index: l.index,
            node: l.node.clone(),
            op_type: l.op_type.clone(),
            introduced_sqnr_db: v,
        });
    StepExplanation {
        part: part.name().into(),
        worst_introduced: worst,
        first_code_difference: summary.as_ref().and_then(|s| s.first_code_difference.clone()),
        first_beyond_rounding: summary.as_ref().and_then(|s| s.first_beyond_rounding.clone()),
        first_sqnr_loss: summary.as_ref().and_then(|s| s.first_sqnr_loss.clone()),
        error: row.error.clone().or_else(|| summary.and_then(|s| s.error)),
    }
}

/// The file of a part of one file; a part split into several is not audited layer by layer here
/// (each file is a model `compare --layers` audits on its own).
fn single_file(part: &super::spec::Part) -> Result<std::path::PathBuf> {
    match part.files.as_slice() {
        [f] => Ok(f.path.clone()),
        files => Err(crate::foundation::error::bad_input(format!(
            "part {} is split into {} files ({}): audit each with `npu-audit compare --layers`",
            part.kind,
            files.len(),
            part.file_names()
        ))),
    }
}

fn audit(
    opts: &GenerationOptions,
    specs: &Specs,
    planned: &PlannedTarget,
    call: &DivergentCall,
) -> Result<TargetReport> {
    let model = single_file(specs.audited.part(call.part))?;
    let reference = specs
        .reference()
        .find_part(call.part)
        .ok_or_else(|| {
            crate::foundation::error::bad_input(format!(
                "the reference spec has no part {} (its form is another): the layers cannot be matched",
                call.part
            ))
        })
        .and_then(single_file)?;
    crate::foundation::console::note(format!(
        "generation: per-layer audit of {}'s part {} at sample {}'s first divergence",
        planned.spec.id,
        call.part,
        call.sample + 1
    ));
    let options = CompareOptions {
        execution: Execution {
            baseline: true,
            ..Execution::findings(vec![planned.spec.clone()], opts.exec.clone())
        },
        measured: Measured {
            layers: Some(LayerOptions::isolated_taps()),
            ..Measured::outputs_only()
        },
        ..CompareOptions::findings(
            Audited {
                model,
                golden: GoldenSource {
                    reference: Some(reference),
                    stored: None,
                    allow_mismatch: false,
                },
                inputs: InputOptions {
                    samples: 1,
                    memory: Some(MemoryInputs {
                        label: format!(
                            "the inputs {} fed part {} at its first divergence",
                            planned.spec.id, call.part
                        ),
                        samples: vec![call.inputs.clone()],
                    }),
                    ..InputOptions::default()
                },
            },
            Vec::new(),
            opts.exec.clone(),
        )
    };
    let report = run_compare(&options, &mut Outputs::none())?;
    let problems = report
        .layer_audit
        .as_ref()
        .map(|l| l.problems.clone())
        .unwrap_or_default();
    let mut row = report
        .targets
        .into_iter()
        .find(|t| t.id == planned.spec.id)
        .ok_or_else(|| crate::foundation::error::bad_input("the per-layer audit has no row for the target"))?;
    if row.error.is_none() && !problems.is_empty() && row.layers.is_empty() {
        row.error = Some(problems.join("; "));
    }
    Ok(row)
}
