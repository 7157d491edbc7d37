//! `eval --explain K`: where a target's flips come from. The per-layer audit (`compare --layers
//! all`, isolated runs included) of up to K samples the target broke (the reference right, the
//! target wrong), against the baseline: the first layer that departs at each level.

use anyhow::Result;

use super::sessions::EvalPlan;
use super::summary::RunSummary;
use super::EvalOptions;
use crate::analyses::layers::LayerOptions;
use crate::commands::compare::{run_compare, Audited, CompareOptions, Execution, GoldenSource, Measured};
use crate::data::dataset::Dataset;
use crate::data::inputs::{InputOptions, MemoryInputs};
use crate::execution::exec::PlannedTarget;
use crate::foundation::userfile::Outputs;
use crate::report::eval::FlipExplanation;

/// The explanation of `run`'s broken samples (`None` when it broke none).
pub fn explain(
    opts: &EvalOptions,
    plan: &EvalPlan,
    dataset: &Dataset,
    planned: &PlannedTarget,
    run: &RunSummary,
    reference: &RunSummary,
) -> Result<Option<FlipExplanation>> {
    let broken = broken_samples(run, reference, opts.explain);
    if broken.is_empty() || planned.runtime.is_err() {
        return Ok(None);
    }
    if opts.golden.reference.is_none() && opts.golden.stored.is_some() {
        // A stored golden run holds only its final outputs, and a reference derived from the
        // quantized model would be another reference than the eval's.
        return Ok(Some(FlipExplanation {
            samples: Vec::new(),
            first_code_difference: None,
            first_beyond_rounding: None,
            first_sqnr_loss: None,
            error: Some("the per-layer audit runs the reference model on the broken samples: give --reference FP32.onnx with --golden".into()),
        }));
    }
    crate::foundation::console::note(format!(
        "eval: per-layer audit of {} sample(s) {} broke",
        broken.len(),
        planned.spec.id
    ));
    let (ids, samples) = read_samples(dataset, plan, &broken)?;
    let report = run_compare(&layer_audit(opts, planned, samples), &mut Outputs::none())?;
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

/// Up to `k` samples `run` broke: the reference right, the run wrong (and answering).
fn broken_samples(run: &RunSummary, reference: &RunSummary, k: usize) -> Vec<usize> {
    let right: std::collections::HashSet<usize> = reference
        .records
        .iter()
        .filter(|r| r.judged.correct)
        .map(|r| r.index)
        .collect();
    run.records
        .iter()
        .filter(|r| !r.judged.correct && r.error.is_none() && right.contains(&r.index))
        .map(|r| r.index)
        .take(k)
        .collect()
}

/// The ids and inputs of the samples at `indices`, read again from the set.
fn read_samples(
    dataset: &Dataset,
    plan: &EvalPlan,
    indices: &[usize],
) -> Result<(Vec<String>, Vec<Vec<NamedTensorPair>>)> {
    let mut ids = Vec::with_capacity(indices.len());
    let mut samples = Vec::with_capacity(indices.len());
    for sample in dataset.samples(&plan.signature, 0)? {
        let sample = sample?;
        if indices.contains(&sample.index) {
            ids.push(sample.id.clone());
            samples.push(sample.inputs);
        }
        if samples.len() == indices.len() {
            break;
        }
    }
    Ok((ids, samples))
}

/// A sample's inputs by name, as the set gives them.
type NamedTensorPair = (String, crate::data::tensor::Tensor);

/// The per-layer audit of `planned` on `samples`, against the baseline, with the reference model
/// run again for the samples' activations.
fn layer_audit(opts: &EvalOptions, planned: &PlannedTarget, samples: Vec<Vec<NamedTensorPair>>) -> CompareOptions {
    CompareOptions {
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
                // A stored golden run holds only its final outputs: the reference runs again.
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
    }
}
