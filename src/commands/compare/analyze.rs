//! The Analyze stage of `compare`: from what ran, each target's end (with its placement), the
//! golden outputs, the comparison of every output (with the baseline's error beside each
//! target's), the fingerprints and drift readings, and the per-layer audit when asked for.

use std::collections::HashMap;

use anyhow::{Context, Result};

use super::execute::Executed;
use super::plan::AuditPlan;
use super::reference::ReferencePlan;
use super::CompareOptions;
use crate::analyses::drift::TargetDrift;
use crate::analyses::layers::LayerResults;
use crate::analyses::metrics::{compare as compare_outputs, Comparison, RunOutputs};
use crate::analyses::outcome::TargetEnd;
use crate::analyses::placement::targets::{self as placement, Probe};
use crate::data::model::load_model;
use crate::data::tensor::Tensor;
use crate::execution::exec::job::Phase;
use crate::execution::exec::selection::BASELINE_ID;
use crate::execution::exec::{Executor, JobResult, Outcome, OutputFile};
use crate::execution::runtime::{Runtime, TargetRuntime};
use crate::foundation::error::{bad_model, run_error};
use crate::foundation::hash::sha256_hex;
use crate::report::common::Num;
use crate::report::compare::{BaselineDelta, OutputMetrics, ReferenceInfo, TargetStream};
use crate::report::RunStatus;

/// What the audit found.
pub struct Analysis<'e> {
    /// The golden run's outputs per sample.
    pub golden_samples: Vec<Vec<OutputFile>>,
    /// For each audited output (in the model's order), the golden run's output it is compared with.
    pub golden_names: Vec<String>,
    pub reference_info: ReferenceInfo,
    /// Per planned target: how it ended, with its placement.
    pub ends: Vec<TargetEnd<'e>>,
    /// Metrics per target id (the baseline's error beside each other target's), agreement
    /// between targets, bit-exact groups.
    pub comparison: Comparison,
    /// Whether the baseline ran (the three-run view exists).
    pub has_baseline: bool,
    /// Per planned target: fingerprint, determinism, code differences read with them.
    pub drift: Vec<TargetDrift>,
    /// The per-layer audit, when asked for.
    pub layers: Option<LayerResults>,
    /// With `--stream`: per planned target that ran, its figures step by step.
    pub streams: Vec<Option<TargetStream>>,
    pub notes: Vec<String>,
}

/// Analyses an audit's runs.
pub fn run<'e>(
    plan: &AuditPlan,
    executed: &'e Executed,
    executor: &Executor,
    opts: &CompareOptions,
) -> Result<Analysis<'e>> {
    let mut notes = Vec::new();
    let (golden_samples, golden_names, reference_info) =
        golden_side(&plan.reference, executed.golden(), executed.cpu.as_ref())?;
    let golden_map = golden_output_names(&plan.output_names, &golden_names, &mut notes)?;
    notes.extend(golden_notes(plan, &golden_samples, &golden_map, &golden_names)?);
    let probe_cpu = executed
        .cpu
        .clone()
        .or_else(|| crate::execution::exec::executor::cpu_runtime(&plan.provisioner).ok());
    let ends = target_ends(plan, executed, executor, probe_cpu.clone(), &mut notes);
    let mut comparison = crate::foundation::timings::time(crate::foundation::timings::Phase::Compare, || {
        compare_targets(plan, &ends, &golden_samples, &golden_map)
    })?;
    notes.append(&mut comparison.notes);
    let has_baseline = attach_baseline(&mut comparison.metrics, BASELINE_ID);
    let (fingerprints, fingerprint_notes) =
        crate::analyses::drift::fingerprints(&plan.targets, &ends, executor, opts.measured.fingerprint);
    notes.extend(fingerprint_notes);
    let ops = plan
        .model
        .proto
        .graph
        .as_ref()
        .map(crate::analyses::drift::ModelOps::of)
        .unwrap_or_default();
    let drift = crate::analyses::drift::per_target(
        &plan.targets,
        &ends,
        &fingerprints,
        &comparison.agreement,
        has_baseline.then_some(BASELINE_ID),
        &crate::analyses::drift::DeterminismRuns {
            repeat: opts.execution.repeat,
            thread_probe: opts.execution.thread_probe,
            probes: (0..plan.targets.len()).map(|i| executed.probe(i)).collect(),
        },
        &ops,
    );
    let layers = match &opts.measured.layers {
        Some(lo) => Some(layer_audit(plan, executed, executor, &ends, probe_cpu.as_ref(), lo)?),
        None => None,
    };
    let streams = match &plan.stream {
        Some(spec) => {
            let golden = crate::analyses::stream::Golden {
                steps: &golden_samples,
                names: &golden_map,
                outputs: &plan.output_names,
            };
            stream_figures(plan, executed, &ends, &golden, spec)?
        }
        None => Vec::new(),
    };
    Ok(Analysis {
        golden_samples,
        golden_names: golden_map,
        reference_info,
        ends,
        comparison,
        has_baseline,
        drift,
        layers,
        streams,
        notes,
    })
}

/// Each target's stream against the golden stream: running free, and teacher-forced when it was.
fn stream_figures(
    plan: &AuditPlan,
    executed: &Executed,
    ends: &[TargetEnd<'_>],
    golden: &crate::analyses::stream::Golden<'_>,
    spec: &crate::analyses::stream::StreamSpec,
) -> Result<Vec<Option<TargetStream>>> {
    let first: Vec<Tensor> = match golden.steps.first() {
        Some(files) => golden
            .names
            .iter()
            .map(|n| {
                let f = files
                    .iter()
                    .find(|f| &f.name == n)
                    .context("the golden run lost an output")?;
                Tensor::read_npy(&f.path)
            })
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    let decisions = spec.decisions(&plan.output_names, &first, &plan.classes);
    let mut out = Vec::with_capacity(ends.len());
    for (i, end) in ends.iter().enumerate() {
        let Some(result) = end
            .outcome
            .and_then(|o| o.result.as_ref())
            .filter(|_| end.status == RunStatus::Ok)
        else {
            out.push(None);
            continue;
        };
        let free = crate::analyses::stream::measure(golden, &result.outputs, spec, &decisions)?;
        let forced = executed.teacher_forced.get(i).and_then(Option::as_ref);
        let (teacher_forced, teacher_forced_error) = match forced {
            Some(o) if o.status == crate::execution::exec::RunStatus::Ok => match &o.result {
                Some(r) => (
                    Some(crate::analyses::stream::measure(golden, &r.outputs, spec, &decisions)?),
                    None,
                ),
                None => (None, Some("the teacher-forced run wrote no result".to_string())),
            },
            Some(o) => (
                None,
                Some(format!(
                    "{}: {}",
                    o.status.as_str(),
                    o.error.clone().unwrap_or_default()
                )),
            ),
            None => (None, None),
        };
        out.push(Some(TargetStream {
            free,
            teacher_forced,
            teacher_forced_error,
        }));
    }
    Ok(out)
}

/// How each target ended, with its placement analysed (and crossing sizes probed on the CPU
/// when the recorded types leave them unknown).
fn target_ends<'e>(
    plan: &AuditPlan,
    executed: &'e Executed,
    executor: &Executor,
    cpu: Option<Runtime>,
    notes: &mut Vec<String>,
) -> Vec<TargetEnd<'e>> {
    let input_types: HashMap<String, (i32, Vec<usize>)> = plan
        .inputs
        .samples
        .first()
        .map(|s| {
            s.iter()
                .map(|nt| {
                    (
                        nt.name.clone(),
                        (nt.tensor.dtype().onnx_code(), nt.tensor.shape.clone()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let topology = placement::model_topology(&plan.model.proto, &input_types);
    let (placements, placement_notes) = placement::placements(
        &plan.targets,
        &executed.job_of,
        &executed.outcomes,
        &topology,
        &Probe {
            model: &plan.model,
            proto: &plan.model.proto,
            cpu,
            sample: executed.input_files.first().map(|s| s.as_slice()).unwrap_or(&[]),
            free_dims: &plan.inputs.free_dims,
            dir: &executor.work().join("probe"),
            executor,
        },
    );
    notes.extend(placement_notes);
    crate::analyses::outcome::ends(&plan.targets, &executed.job_of, &executed.outcomes, placements)
}

/// Every output of every target that ran against the golden run, and targets against each other.
fn compare_targets(
    plan: &AuditPlan,
    ends: &[TargetEnd<'_>],
    golden_samples: &[Vec<OutputFile>],
    golden_map: &[String],
) -> Result<Comparison> {
    let runs: Vec<RunOutputs<'_>> = plan
        .targets
        .iter()
        .zip(ends)
        .filter(|(_, e)| e.status == RunStatus::Ok)
        .filter_map(|(t, e)| {
            e.outcome.and_then(|o| o.result.as_ref()).map(|r| RunOutputs {
                id: t.spec.id.as_str(),
                samples: &r.outputs,
            })
        })
        .collect();
    let golden_run = RunOutputs {
        id: "golden",
        samples: golden_samples,
    };
    let graph = plan.model.proto.graph.as_ref().context("model has no graph")?;
    let lsbs = crate::data::model::constant::output_steps(graph, &plan.signature.outputs);
    let comparison = compare_outputs(&plan.output_names, &lsbs, golden_map, &golden_run, &runs, &plan.classes)?;
    check_output_shapes(&plan.output_names, &comparison.metrics)?;
    Ok(comparison)
}

/// `a - b` for dB values that may be infinite: equal infinities differ by 0.
fn db_difference(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        a - b
    }
}

/// Puts the baseline's error next to every other target's (the three-run view); `metrics`
/// holds the targets that ran. Returns whether the baseline ran.
pub fn attach_baseline(metrics: &mut HashMap<String, Vec<OutputMetrics>>, baseline_id: &str) -> bool {
    let Some(base_outputs) = metrics.get(baseline_id).cloned() else {
        return false;
    };
    for (_, outputs) in metrics.iter_mut().filter(|(id, _)| id.as_str() != baseline_id) {
        for out in outputs.iter_mut() {
            let Some(b) = base_outputs.iter().find(|b| b.name == out.name) else {
                continue;
            };
            out.baseline = Some(BaselineDelta {
                target: baseline_id.to_string(),
                sqnr_db: b.sqnr_db,
                max_abs: b.max_abs,
                excess_db: Num(db_difference(b.sqnr_db.0, out.sqnr_db.0)),
            });
        }
    }
    true
}

/// The per-layer audit, on the model, the reference (or a stored golden run's copy of it) and
/// the targets that ran.
fn layer_audit(
    plan: &AuditPlan,
    executed: &Executed,
    executor: &Executor,
    ends: &[TargetEnd<'_>],
    cpu: Option<&Runtime>,
    options: &crate::analyses::layers::LayerOptions,
) -> Result<LayerResults> {
    // A stored golden run with activations keeps a copy of its reference, verified on load.
    let stored_copy = match &plan.reference {
        ReferencePlan::Stored { golden, .. } => golden.reference_copy().map(|p| load_model(&p)).transpose()?,
        ReferencePlan::Model { .. } => None,
    };
    let (reference, stored) = match &plan.reference {
        ReferencePlan::Model { model, .. } => (Some(&**model), None),
        ReferencePlan::Stored { golden, .. } => (stored_copy.as_ref(), stored_copy.as_ref().map(|_| &**golden)),
    };
    let ran = |e: &TargetEnd<'_>| e.status == RunStatus::Ok;
    let ctx = crate::analyses::layers::run::Context {
        model: &plan.model,
        reference,
        stored,
        planned: &plan.targets,
        untapped: ends
            .iter()
            .map(|e| e.outcome.and_then(|o| o.result.as_ref()).filter(|_| ran(e)))
            .collect(),
        baseline: plan
            .targets
            .iter()
            .zip(ends)
            .position(|(t, e)| t.spec.id == options.baseline.as_deref().unwrap_or(BASELINE_ID) && ran(e)),
        cpu,
        inputs: &plan.inputs,
        input_files: &executed.input_files,
        work: executor.work(),
        executor,
    };
    Ok(crate::analyses::layers::audit(&ctx, options))
}

/// The result of the golden run. ONNX Runtime refusing the reference model (session creation, or
/// a run on these inputs) is a problem of the input (exit 2); a crash or a timeout is not.
pub fn golden_result(outcome: &Outcome) -> Result<&JobResult> {
    match (&outcome.status, &outcome.result) {
        (crate::execution::exec::RunStatus::Ok, Some(r)) => Ok(r),
        (crate::execution::exec::RunStatus::Failed, Some(r))
            if matches!(r.phase, Phase::CreateSession | Phase::Run) =>
        {
            Err(bad_model(format!(
                "ONNX Runtime {} cannot run the reference model: {}",
                r.ort_version.clone().unwrap_or_default(),
                outcome.error.clone().unwrap_or_default()
            )))
        }
        _ => Err(run_error(format!(
            "the golden reference run {}: {}",
            outcome.status.as_str(),
            outcome.error.clone().unwrap_or_default()
        ))),
    }
}

/// The golden outputs (per sample), their names, and the report's reference section.
fn golden_side(
    reference: &ReferencePlan,
    golden_outcome: Option<&Outcome>,
    cpu: Option<&Runtime>,
) -> Result<(Vec<Vec<OutputFile>>, Vec<String>, ReferenceInfo)> {
    match reference {
        ReferencePlan::Stored { golden, description } => Ok((
            golden.outputs(),
            golden.output_names(),
            ReferenceInfo {
                kind: "golden".into(),
                path: golden.dir.display().to_string(),
                sha256: golden.manifest.reference_model.sha256.clone(),
                description: description.clone(),
                removed_qdq_pairs: None,
                runtime: None,
                intra_op_threads: Some(golden.manifest.runtime.intra_threads),
                timing: None,
            },
        )),
        ReferencePlan::Model {
            model,
            kind,
            description,
            removed_pairs,
            ..
        } => {
            let outcome = golden_outcome.context("no golden run")?;
            let result = golden_result(outcome)?;
            let names = result
                .outputs
                .first()
                .map(|o| o.iter().map(|f| f.name.clone()).collect())
                .unwrap_or_default();
            let cpu = cpu.context("no cpu runtime")?;
            let info = ReferenceInfo {
                kind: kind.to_string(),
                path: model.path.display().to_string(),
                // A derived reference exists only in memory: its hash is that of its encoding.
                sha256: if model.modified {
                    sha256_hex(&prost::Message::encode_to_vec(&model.proto))
                } else {
                    model.sha256.clone()
                },
                description: description.clone(),
                removed_qdq_pairs: *removed_pairs,
                runtime: Some(super::facts::target_runtime_info(
                    &TargetRuntime {
                        host: cpu.clone(),
                        plugin: None,
                        emulation: None,
                    },
                    Some(outcome),
                    &mut |_| None,
                )),
                intra_op_threads: result.intra_threads,
                timing: super::facts::timing(outcome),
            };
            Ok((result.outputs.clone(), names, info))
        }
    }
}

/// Maps the audited model's outputs to the golden run's, by name or else by position.
fn golden_output_names(audited: &[String], golden: &[String], notes: &mut Vec<String>) -> Result<Vec<String>> {
    if audited.iter().all(|a| golden.contains(a)) {
        return Ok(audited.to_vec());
    }
    if audited.len() == golden.len() {
        notes.push(format!(
            "output names differ from the golden run's; matched by position: {}",
            audited
                .iter()
                .zip(golden)
                .map(|(a, g)| format!("{a} ~ {g}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return Ok(golden.to_vec());
    }
    Err(bad_model(format!(
        "the model's outputs ({}) do not match the golden run's ({})",
        audited.join(", "),
        golden.join(", ")
    )))
}

/// What the user should know about the golden run itself: outputs it has that the model does
/// not (ignored), outputs of another element type than the model's (compared as numbers, never
/// bit for bit), and NaN or Inf in it (a reference that produces them is usually broken, and
/// positions where both sides are NaN count as agreeing).
fn golden_notes(
    plan: &AuditPlan,
    golden: &[Vec<OutputFile>],
    golden_map: &[String],
    golden_names: &[String],
) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let extra: Vec<&str> = golden_names
        .iter()
        .filter(|g| !golden_map.contains(g))
        .map(String::as_str)
        .collect();
    if !extra.is_empty() {
        notes.push(format!(
            "the golden run has outputs the model does not ({}): ignored",
            extra.join(", ")
        ));
    }
    for (info, gname) in plan.signature.outputs.iter().zip(golden_map) {
        let files: Vec<&OutputFile> = golden
            .iter()
            .filter_map(|s| s.iter().find(|f| &f.name == gname))
            .collect();
        if let Some(f) = files.first().filter(|f| f.dtype != info.dtype) {
            notes.push(format!(
                "output '{}': the golden run's is {}, the model's {}: compared as numbers, with no bit-exact or ULP figures",
                info.name, f.dtype, info.dtype
            ));
        }
        let (mut nan, mut inf) = (0u64, 0u64);
        for f in &files {
            let t = Tensor::read_npy(&f.path)?;
            let (n, i) = t.data.nonfinite_counts();
            nan += n;
            inf += i;
        }
        if nan + inf > 0 {
            notes.push(format!(
                "output '{}': the golden run itself has {nan} NaN and {inf} Inf value(s); a reference that produces them is usually broken (positions where both sides are NaN count as agreeing)",
                info.name
            ));
        }
    }
    Ok(notes)
}

/// When no target's output has the golden run's shape, the reference is not a reference of this
/// model: say so instead of reporting a comparison that compared nothing.
fn check_output_shapes(outputs: &[String], metrics: &HashMap<String, Vec<OutputMetrics>>) -> Result<()> {
    for (k, name) in outputs.iter().enumerate() {
        let cells: Vec<_> = metrics.values().filter_map(|m| m.get(k)).collect();
        if !cells.is_empty() && cells.iter().all(|c| c.shape_mismatch) {
            return Err(bad_model(format!(
                "output '{name}': {} for every target; the reference does not compute this model's output",
                cells[0].error.clone().unwrap_or_default()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infinite_db_differences() {
        assert_eq!(db_difference(f64::INFINITY, f64::INFINITY), 0.0);
        assert_eq!(db_difference(f64::INFINITY, 30.0), f64::INFINITY);
        assert_eq!(db_difference(40.0, 30.0), 10.0);
    }
}
