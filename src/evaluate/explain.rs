//! `eval --explain K`: where a target's flips come from. The per-layer audit (`compare --layers
//! all`, isolated runs included) of up to K samples the target broke (the reference right, the
//! target wrong), against the baseline: the first layer that departs at each level.

use anyhow::Result;

use super::sessions::EvalPlan;
use super::stream::RunRecords;
use super::EvalOptions;
use crate::audit::{run_compare, Audited, CompareOptions, Execution, GoldenSource, Measured};
use crate::dataset::Dataset;
use crate::exec::PlannedTarget;
use crate::inputs::{InputOptions, MemoryInputs};
use crate::layers::LayerOptions;
use crate::report::eval::FlipExplanation;
use crate::userfile::Outputs;

/// The explanation of `run`'s broken samples (`None` when it broke none).
pub fn explain(
    opts: &EvalOptions,
    plan: &EvalPlan,
    dataset: &Dataset,
    planned: &PlannedTarget,
    run: &RunRecords,
    reference: &RunRecords,
) -> Result<Option<FlipExplanation>> {
    let right: std::collections::HashSet<usize> = reference
        .records
        .iter()
        .filter(|r| r.judged.correct)
        .map(|r| r.index)
        .collect();
    let broken: Vec<usize> = run
        .records
        .iter()
        .filter(|r| !r.judged.correct && r.error.is_none() && right.contains(&r.index))
        .map(|r| r.index)
        .take(opts.explain)
        .collect();
    if broken.is_empty() || planned.runtime.is_err() {
        return Ok(None);
    }
    crate::console::note(format!(
        "eval: per-layer audit of {} sample(s) {} broke",
        broken.len(),
        planned.spec.id
    ));
    let mut ids = Vec::with_capacity(broken.len());
    let mut samples = Vec::with_capacity(broken.len());
    for sample in dataset.samples(&plan.signature, 0)? {
        let sample = sample?;
        if broken.contains(&sample.index) {
            ids.push(sample.id.clone());
            samples.push(sample.inputs);
        }
        if samples.len() == broken.len() {
            break;
        }
    }
    let audit = CompareOptions {
        execution: Execution {
            baseline: true,
            ..Execution::findings(vec![planned.spec.clone()], opts.exec.clone())
        },
        measured: Measured {
            class_axis: opts.class_axis.clone(),
            layers: Some(LayerOptions::isolated_taps()),
            ..Measured::outputs_only()
        },
        ..CompareOptions::findings(
            Audited {
                model: opts.model.clone(),
                // The samples' activations: the reference model runs again (a stored golden run
                // holds only its final outputs).
                golden: GoldenSource {
                    stored: None,
                    ..opts.golden.clone()
                },
                inputs: InputOptions {
                    samples: 1,
                    memory: Some(MemoryInputs {
                        label: format!("samples {} broke", planned.spec.id),
                        samples,
                    }),
                    ..InputOptions::default()
                },
            },
            Vec::new(),
            opts.exec.clone(),
        )
    };
    let report = run_compare(&audit, &mut Outputs::none())?;
    let row = report.targets.iter().find(|t| t.id == planned.spec.id);
    let summary = row.and_then(|t| t.layer_summary.clone());
    let problems = report.layer_audit.map(|l| l.problems).unwrap_or_default();
    Ok(Some(FlipExplanation {
        samples: ids,
        first_code_difference: summary.as_ref().and_then(|s| s.first_code_difference.clone()),
        first_beyond_rounding: summary.as_ref().and_then(|s| s.first_beyond_rounding.clone()),
        first_sqnr_loss: summary.as_ref().and_then(|s| s.first_sqnr_loss.clone()),
        error: row
            .and_then(|t| t.error.clone())
            .or_else(|| summary.and_then(|s| s.error))
            .or_else(|| (!problems.is_empty()).then(|| problems.join("; "))),
    }))
}
