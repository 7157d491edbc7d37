//! `--explain K` on a generation: where a target's first divergent token comes from. The part
//! call that produced the divergent step's logits is audited layer by layer (`compare --layers`)
//! on exactly the inputs the target fed it there (its own key/value state), against the
//! reference spec's part of the same name on the same inputs and against the `cpu:noopt`
//! baseline: first one run with every layer tapped (the first overflow, the first layer that
//! departs from the baseline at each level), then the layers around the first of them run alone
//! (the layer that introduces the most error by itself).

use anyhow::Result;

use super::spec::PartKind;
use super::{GenerationOptions, Specs};
use crate::analyses::layers::select::Selection;
use crate::analyses::layers::LayerOptions;
use crate::commands::compare::{run_compare, Audited, CompareOptions, Execution, GoldenSource, Measured};
use crate::data::inputs::{InputOptions, MemoryInputs};
use crate::data::tensor::Tensor;
use crate::execution::exec::PlannedTarget;
use crate::foundation::pattern::Pattern;
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

/// Layers on each side of the first departure that are run alone: what `--explain` isolates.
const ISOLATED_AROUND: usize = 8;

/// The per-layer audit of one divergent call on `planned`; a failure is the explanation's error.
/// One run with every layer tapped finds the first overflow and departures; only the layers
/// around the first of them are then run alone.
pub fn explain(
    opts: &GenerationOptions,
    specs: &Specs,
    planned: &PlannedTarget,
    call: &DivergentCall,
) -> StepExplanation {
    let tapped = LayerOptions {
        isolate: false,
        ..LayerOptions::isolated_taps()
    };
    let outcome = audit(opts, specs, planned, call, tapped).and_then(|row| {
        let around = around_departure(&row);
        if around.is_empty() {
            return Ok((row, None));
        }
        let alone = LayerOptions {
            selection: Selection {
                tensors: around,
                ..Selection::default()
            },
            ..LayerOptions::isolated_taps()
        };
        let isolated = audit(opts, specs, planned, call, alone)?;
        Ok((row, Some(isolated)))
    });
    match outcome {
        Ok((row, isolated)) => explanation(call.part, &row, isolated.as_ref()),
        Err(e) => StepExplanation {
            part: call.part.name().into(),
            worst_introduced: None,
            first_code_difference: None,
            first_beyond_rounding: None,
            first_sqnr_loss: None,
            first_overflow: None,
            error: Some(crate::foundation::error::one_line(&e)),
        },
    }
}

/// The tapped tensors of the layers within [`ISOLATED_AROUND`] of the first overflow or
/// departure (overflow first, then beyond rounding, SQNR loss, code difference) or, on a target
/// that departs nowhere from the baseline (the quantized model's own error), of the layer whose
/// SQNR drop against the golden run is the largest; as exact patterns.
fn around_departure(row: &TargetReport) -> Vec<Pattern> {
    let Some(summary) = &row.layer_summary else {
        return Vec::new();
    };
    let costliest = || {
        row.layers
            .iter()
            .filter_map(|l| l.sqnr_drop_db.filter(|d| d.0.is_finite()).map(|d| (l.index, d.0)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i)
    };
    let first = summary
        .first_overflow
        .as_ref()
        .map(|o| o.index)
        .or_else(|| {
            [
                &summary.first_beyond_rounding,
                &summary.first_sqnr_loss,
                &summary.first_code_difference,
            ]
            .into_iter()
            .find_map(|p| p.as_ref().map(|p| p.index))
        })
        .or_else(costliest);
    let Some(at) = first.and_then(|i| row.layers.iter().position(|l| l.index == i)) else {
        return Vec::new();
    };
    let window = at.saturating_sub(ISOLATED_AROUND)..(at + ISOLATED_AROUND + 1).min(row.layers.len());
    row.layers[window]
        .iter()
        .filter_map(|l| Pattern::parse(&format!("/^{}$/", regex::escape(&l.tensor))).ok())
        .collect()
}

/// What the target's rows of the per-layer audit say of the step: the tapped run's first
/// overflow and departures, the isolated run's worst layer.
fn explanation(part: PartKind, row: &TargetReport, isolated: Option<&TargetReport>) -> StepExplanation {
    let summary = row.layer_summary.clone();
    let worst = isolated
        .into_iter()
        .flat_map(|r| &r.layers)
        .filter_map(|l| l.introduced_sqnr_db.filter(|v| !v.0.is_nan()).map(|v| (l, v)))
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
        .map(|(l, v)| IntroducedLayer {
            index: l.index,
            node: l.node.clone(),
            op_type: l.op_type.clone(),
            introduced_sqnr_db: v,
        });
    let isolated_error = isolated
        .and_then(|r| r.error.clone())
        .map(|e| format!("isolated runs: {e}"));
    StepExplanation {
        part: part.name().into(),
        worst_introduced: worst,
        first_code_difference: summary.as_ref().and_then(|s| s.first_code_difference.clone()),
        first_beyond_rounding: summary.as_ref().and_then(|s| s.first_beyond_rounding.clone()),
        first_sqnr_loss: summary.as_ref().and_then(|s| s.first_sqnr_loss.clone()),
        first_overflow: summary.as_ref().and_then(|s| s.first_overflow.clone()),
        error: row
            .error
            .clone()
            .or_else(|| summary.and_then(|s| s.error))
            .or(isolated_error),
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

/// One per-layer audit of the divergent call with `layers`: the target's row.
fn audit(
    opts: &GenerationOptions,
    specs: &Specs,
    planned: &PlannedTarget,
    call: &DivergentCall,
    layers: LayerOptions,
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
        "generation: per-layer audit of {}'s part {} at sample {}'s first divergence ({})",
        planned.spec.id,
        call.part,
        call.sample + 1,
        if layers.isolate {
            "the layers around the first departure, alone"
        } else {
            "every layer tapped"
        }
    ));
    let options = CompareOptions {
        execution: Execution {
            baseline: true,
            ..Execution::findings(vec![planned.spec.clone()], opts.exec.clone())
        },
        measured: Measured {
            layers: Some(layers),
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
