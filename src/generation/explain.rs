//! `--explain K` on a generation: where a target's first divergent token comes from. The part
//! call that produced the divergent step's logits is audited layer by layer (`compare --layers`,
//! isolated runs included) on exactly the inputs the target fed it there (its own key/value
//! state), against the reference spec's part of the same name on the same inputs and against the
//! `cpu:noopt` baseline: the first layer that departs at each level.

use anyhow::Result;

use super::{GenerationOptions, Specs};
use crate::compare::{run_compare, Audited, CompareOptions, Execution, GoldenSource, Measured};
use crate::exec::PlannedTarget;
use crate::inputs::{InputOptions, MemoryInputs};
use crate::layers::LayerOptions;
use crate::report::eval::FlipExplanation;
use crate::tensor::Tensor;
use crate::userfile::Outputs;

/// The inputs a target fed a part at its first divergence, kept for the per-layer audit.
#[derive(Debug, Clone)]
pub struct DivergentCall {
    /// The sample's position in the set.
    pub sample: usize,
    pub part: &'static str,
    pub inputs: Vec<(String, Tensor)>,
}

/// The per-layer audit of one divergent call on `planned`.
pub fn explain(
    opts: &GenerationOptions,
    specs: &Specs,
    planned: &PlannedTarget,
    call: &DivergentCall,
    id: &str,
) -> FlipExplanation {
    match audit(opts, specs, planned, call) {
        Ok(x) => FlipExplanation {
            samples: vec![id.to_string()],
            ..x
        },
        Err(e) => FlipExplanation {
            samples: vec![id.to_string()],
            first_code_difference: None,
            first_beyond_rounding: None,
            first_sqnr_loss: None,
            error: Some(crate::error::one_line(&e)),
        },
    }
}

fn audit(
    opts: &GenerationOptions,
    specs: &Specs,
    planned: &PlannedTarget,
    call: &DivergentCall,
) -> Result<FlipExplanation> {
    let model = specs.audited.part(call.part).path.clone();
    let reference = specs
        .reference()
        .parts
        .iter()
        .find(|p| p.name == call.part)
        .map(|p| p.path.clone())
        .ok_or_else(|| {
            crate::error::bad_input(format!(
                "the reference spec has no part {} (its form is another): the layers cannot be matched",
                call.part
            ))
        })?;
    crate::console::note(format!(
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
    let row = report.targets.iter().find(|t| t.id == planned.spec.id);
    let summary = row.and_then(|t| t.layer_summary.clone());
    let problems = report.layer_audit.map(|l| l.problems).unwrap_or_default();
    Ok(FlipExplanation {
        samples: Vec::new(),
        first_code_difference: summary.as_ref().and_then(|s| s.first_code_difference.clone()),
        first_beyond_rounding: summary.as_ref().and_then(|s| s.first_beyond_rounding.clone()),
        first_sqnr_loss: summary.as_ref().and_then(|s| s.first_sqnr_loss.clone()),
        error: row
            .and_then(|t| t.error.clone())
            .or_else(|| summary.and_then(|s| s.error))
            .or_else(|| (!problems.is_empty()).then(|| problems.join("; "))),
    })
}
