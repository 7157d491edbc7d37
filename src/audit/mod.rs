//! `compare` and `golden create`: inputs -> golden run and targets (each in its own process) ->
//! comparison core -> one report.

pub mod assemble;

pub mod files;
pub mod reference;
pub mod shard;
pub mod targets;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::compare::{compare as compare_outputs, ClassAxisPolicy, RunOutputs};
use crate::error::{environment, usage};
use crate::exec::job::Phase;
use crate::exec::{Job, JobResult, Outcome, OutputFile, RunStatus};
use crate::gate::{evaluate, Previous};
use crate::golden::{self, GoldenWrite, RuntimeEntry};
use crate::hash::{sha256_file, sha256_hex};
use crate::inputs::{prepare, InputOptions, InputSet};
use crate::model::{load_model, Signature};
use crate::policy::Policy;
use crate::report::model::{InputTensorInfo, InputsInfo, ReferenceInfo, Report, ToolInfo, SCHEMA_VERSION};
use crate::runtime::{Provisioner, TargetRuntime};
use crate::target::TargetRole;

use crate::exec::executor::{cpu_runtime, model_for_workers, reference_job, target_job};
use crate::exec::plan::{self, BASELINE_ID};
use crate::exec::{ExecOptions, Executor};
use crate::placement::targets as placement;
use reference::ReferencePlan;

/// Everything `compare` was asked to do.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub model: PathBuf,
    pub reference: Option<PathBuf>,
    pub golden: Option<PathBuf>,
    /// Compare against the golden run even when `reference` is not the model it was made with.
    pub allow_golden_mismatch: bool,
    pub targets: Vec<String>,
    pub allow_failure: Vec<String>,
    pub no_baseline: bool,
    pub inputs: InputOptions,
    pub class_axis: Vec<String>,
    /// The release policy (file and flags); its default targets and allowed failures are
    /// already merged into `targets` and `allow_failure`.
    pub policy: Policy,
    /// With `--shard i/n`: run the i-th of n parts of the targets.
    pub shard: Option<shard::Shard>,
    pub exec: ExecOptions,
    pub save_outputs: Option<PathBuf>,
    /// Where each target's runtime log is kept (`DIR/<target>.log`).
    pub logs: Option<PathBuf>,
    /// Runs of every sample on every target (runs after the first are checked bit for bit).
    pub repeat: usize,
    /// Whether to show each target's arithmetic fingerprint and read its drift with it.
    pub fingerprint: crate::drift::FingerprintMode,
    /// The per-layer audit, when asked for.
    pub layers: Option<crate::layers::LayerOptions>,
}

/// Everything `golden create` was asked to do.
#[derive(Debug, Clone)]
pub struct GoldenOptions {
    pub model: PathBuf,
    pub out: PathBuf,
    pub force: bool,
    pub inputs: InputOptions,
    pub exec: ExecOptions,
    /// Also store every float activation of the reference (and a copy of the model).
    pub layers: bool,
}

/// Checks that the reference model accepts every sample fed to the audited model.
fn check_reference_accepts(reference: &Signature, inputs: &InputSet) -> Result<()> {
    for sample in &inputs.samples {
        for info in &reference.inputs {
            let Some(nt) = sample.iter().find(|nt| nt.name == info.name) else {
                return Err(usage(format!(
                    "the reference model takes an input '{}' that the audited model does not have (audited inputs: {})",
                    info.name,
                    sample.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
                )));
            };
            crate::inputs::check_tensor(info, &nt.tensor, None)
                .map_err(|e| usage(format!("the reference model does not accept the inputs: {e:#}")))?;
        }
    }
    Ok(())
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
    Err(usage(format!(
        "the model's outputs ({}) do not match the golden run's ({})",
        audited.join(", "),
        golden.join(", ")
    )))
}

/// When no target's output has the golden run's shape, the reference is not a reference of this
/// model: say so instead of reporting a comparison that compared nothing.
fn check_output_shapes(
    outputs: &[String],
    metrics: &std::collections::HashMap<String, Vec<crate::report::model::OutputMetrics>>,
) -> Result<()> {
    for (k, name) in outputs.iter().enumerate() {
        let cells: Vec<_> = metrics.values().filter_map(|m| m.get(k)).collect();
        if !cells.is_empty() && cells.iter().all(|c| c.shape_mismatch) {
            return Err(usage(format!(
                "output '{name}': {} for every target; the reference does not compute this model's output",
                cells[0].error.clone().unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// The inputs of an audit: a golden run's, or loaded/generated and checked against both models.
fn audit_inputs(reference: &ReferencePlan, signature: &Signature, opts: &InputOptions) -> Result<InputSet> {
    match reference {
        ReferencePlan::Stored { golden, .. } => {
            let given = !opts.npz.is_empty() || !opts.npy.is_empty() || !opts.gen.is_empty() || !opts.shapes.is_empty();
            if given || opts.samples != 1 || opts.seed != 0 {
                return Err(usage(
                    "--golden supplies the inputs: drop --inputs, --input, --gen, --seed, --samples and --input-shape",
                ));
            }
            golden
                .inputs(signature)
                .map_err(|e| usage(format!("the golden run's inputs do not fit the model: {e:#}")))
        }
        ReferencePlan::Model { signature: ref_sig, .. } => {
            let inputs = prepare(signature, opts)?;
            check_reference_accepts(ref_sig, &inputs)?;
            Ok(inputs)
        }
    }
}

/// The result of the golden run. ONNX Runtime refusing the reference model (session creation, or
/// a run on these inputs) is a problem of the input (exit 2); a crash or a timeout is not.
fn golden_result(outcome: &Outcome) -> Result<&JobResult> {
    match (&outcome.status, &outcome.result) {
        (RunStatus::Ok, Some(r)) => Ok(r),
        (RunStatus::Failed, Some(r)) if matches!(r.phase, Phase::CreateSession | Phase::Run) => Err(usage(format!(
            "ONNX Runtime {} cannot run the reference model: {}",
            r.ort_version.clone().unwrap_or_default(),
            outcome.error.clone().unwrap_or_default()
        ))),
        _ => Err(environment(format!(
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
    cpu: Option<&crate::runtime::Runtime>,
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
                runtime: Some(assemble::target_runtime_info(
                    &TargetRuntime {
                        host: cpu.clone(),
                        plugin: None,
                    },
                    Some(outcome),
                    &mut |_| None,
                )),
                timing: assemble::timing(outcome),
            };
            Ok((result.outputs.clone(), names, info))
        }
    }
}

/// Runs `compare` and returns the report (its `exit_code` says how the process should end).
pub fn run_compare(opts: &CompareOptions) -> Result<Report> {
    if let Some(dir) = &opts.save_outputs {
        files::check_save_dir(dir)?;
    }
    let mut notes = Vec::new();
    // Target specs first: a typo there should not wait for the model to load.
    let all_targets = plan::targets(&opts.targets, &opts.allow_failure, !opts.no_baseline)?;
    let (targets, shard) = match &opts.shard {
        Some(s) => {
            let (mine, info) = s.split(all_targets);
            (mine, Some(info))
        }
        None => (all_targets, None),
    };
    if opts.targets.is_empty() {
        let ids: Vec<&str> = targets
            .iter()
            .filter(|r| r.role == TargetRole::Target)
            .map(|r| r.spec.id.as_str())
            .collect();
        notes.push(format!(
            "no --target given: auditing every target this machine can run ({})",
            ids.join(", ")
        ));
    }

    let provisioner = Provisioner::new(&opts.exec.runtime_flags)?;

    let model = load_model(&opts.model)?;
    let signature = Signature::of(&model)?;
    let output_names: Vec<String> = signature.outputs.iter().map(|o| o.name.clone()).collect();
    opts.policy.check_outputs(&output_names)?;
    let reference = reference::plan(
        &model,
        opts.reference.as_ref(),
        opts.golden.as_ref(),
        opts.allow_golden_mismatch,
        &mut notes,
    )?;
    let inputs = audit_inputs(&reference, &signature, &opts.inputs)?;
    let input_info = assemble::input_tensor_info(&inputs)?;
    // The previous report of baseline mode is checked before anything runs.
    let previous = match &opts.policy.baseline_report {
        Some((path, at)) => Some(previous_report(path, at, &input_info)?),
        None => None,
    };
    let mut softmax = signature.softmax_axes.clone();
    if let ReferencePlan::Model { signature: ref_sig, .. } = &reference {
        for (k, v) in &ref_sig.softmax_axes {
            softmax.entry(k.clone()).or_insert(*v);
        }
    }
    let classes = ClassAxisPolicy::parse(&opts.class_axis, softmax, &signature.outputs)?;
    // Runtimes, files and jobs: the golden run first, then one job per target that can run.
    let planned = plan::provision(targets, &provisioner)?;
    let executor = Executor::new(&opts.exec)?;
    let work = executor.work();
    let input_files = inputs.write(&work.join("inputs"))?;
    let audited_path = model_for_workers(&model, &inputs, work, "model.onnx", &mut notes)?;
    let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
    let cpu = match &reference {
        ReferencePlan::Model { model: ref_model, .. } => {
            let cpu = cpu_runtime(&provisioner)?;
            let path = model_for_workers(ref_model, &inputs, work, "reference.onnx", &mut Vec::new())?;
            jobs.push(reference_job(
                &cpu,
                path,
                &input_files,
                &work.join("golden"),
                &inputs.free_dims,
            ));
            Some(cpu)
        }
        ReferencePlan::Stored { .. } => None,
    };
    let golden_jobs = jobs.len();
    let threads = executor.threads(planned.len() + golden_jobs);
    let inspect = model.total_bytes() < placement::INSPECT_LIMIT_BYTES;
    if !inspect {
        notes.push(
            "the model is over 1 GiB: placement is read from the assignment alone, without the runtime's partitioned graph"
                .into(),
        );
    }
    let mut job_of: Vec<Option<usize>> = Vec::with_capacity(planned.len());
    for (i, t) in planned.iter().enumerate() {
        let job =
            target_job(i, t, &audited_path, &input_files, work, threads, &inputs.free_dims).map(|(mut job, dir)| {
                job.inspect_placement = inspect && !matches!(t.spec.backend, crate::target::Backend::Cpu);
                job.repeat = opts.repeat.max(1);
                (job, dir)
            });
        job_of.push(job.map(|j| {
            jobs.push(j);
            jobs.len() - 1
        }));
    }
    let outcomes = executor.run(&jobs)?;

    let (golden_samples, golden_names, reference_info) =
        golden_side(&reference, outcomes.first().filter(|_| golden_jobs > 0), cpu.as_ref())?;
    let golden_map = golden_output_names(&output_names, &golden_names, &mut notes)?;
    let input_types: HashMap<String, (i32, Vec<usize>)> = inputs
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
    let topology = placement::model_topology(&model.proto, &input_types);
    let probe_cpu = cpu.clone().or_else(|| cpu_runtime(&provisioner).ok());
    let (placements, placement_notes) = placement::placements(
        &planned,
        &job_of,
        &outcomes,
        &topology,
        &placement::Probe {
            model: &model,
            proto: &model.proto,
            cpu: probe_cpu.clone(),
            sample: input_files.first().map(|s| s.as_slice()).unwrap_or(&[]),
            free_dims: &inputs.free_dims,
            dir: &work.join("probe"),
            executor: &executor,
        },
    );
    notes.extend(placement_notes);
    let ends = crate::outcome::ends(&planned, &job_of, &outcomes, placements);
    let runs: Vec<RunOutputs<'_>> = planned
        .iter()
        .zip(&ends)
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
        samples: &golden_samples,
    };
    let lsbs = crate::model::constant::output_steps(
        model.proto.graph.as_ref().context("model has no graph")?,
        &signature.outputs,
    );
    let comparison = compare_outputs(&output_names, &lsbs, &golden_map, &golden_run, &runs, &classes)?;
    check_output_shapes(&output_names, &comparison.metrics)?;
    if let Some(dir) = &opts.save_outputs {
        let mut all: Vec<(&str, &[Vec<OutputFile>])> = vec![("golden", &golden_samples)];
        all.extend(runs.iter().map(|r| (r.id, r.samples)));
        files::save_outputs(dir, &all).map_err(|e| usage(format!("--save-outputs {}: {e:#}", dir.display())))?;
    }

    let logs: Vec<(&str, &std::path::Path)> = planned
        .iter()
        .zip(&job_of)
        .filter_map(|(t, j)| j.map(|j| (t.spec.id.as_str(), outcomes[j].log.as_path())))
        .collect();
    let kept_logs = match &opts.logs {
        Some(dir) => files::save_logs(dir, &logs).map_err(|e| usage(format!("--logs {}: {e:#}", dir.display())))?,
        None if opts.exec.keep_work => logs.iter().map(|(id, p)| (id.to_string(), p.to_path_buf())).collect(),
        None => HashMap::new(),
    };
    let mut reports = targets::reports(&planned, &ends, comparison.metrics, &kept_logs);
    let has_baseline = assemble::attach_baseline(&mut reports, BASELINE_ID);
    let (fingerprints, fingerprint_notes) = crate::drift::fingerprints(&planned, &ends, &executor, opts.fingerprint);
    notes.extend(fingerprint_notes);
    crate::drift::attach(
        &mut reports,
        &ends,
        &fingerprints,
        &comparison.agreement,
        has_baseline.then_some(BASELINE_ID),
        opts.repeat,
        &model
            .proto
            .graph
            .as_ref()
            .map(crate::drift::ModelOps::of)
            .unwrap_or_default(),
    );
    // A stored golden run with activations keeps a copy of its reference, verified on load.
    let stored_copy = match (&reference, &opts.layers) {
        (ReferencePlan::Stored { golden, .. }, Some(_)) => {
            golden.reference_copy().map(|p| load_model(&p)).transpose()?
        }
        _ => None,
    };
    let layer_audit = opts.layers.as_ref().map(|lo| {
        let (reference_model, stored) = match &reference {
            ReferencePlan::Model { model, .. } => (Some(&**model), None),
            ReferencePlan::Stored { golden, .. } => (stored_copy.as_ref(), stored_copy.as_ref().map(|_| &**golden)),
        };
        let ctx = crate::layers::run::Context {
            model: &model,
            reference: reference_model,
            stored,
            planned: &planned,
            untapped: planned
                .iter()
                .zip(&ends)
                .map(|(_, e)| {
                    e.outcome
                        .and_then(|o| o.result.as_ref())
                        .filter(|_| e.status == RunStatus::Ok)
                })
                .collect(),
            baseline: planned
                .iter()
                .zip(&ends)
                .position(|(t, e)| t.spec.id == BASELINE_ID && e.status == RunStatus::Ok),
            cpu: probe_cpu.as_ref(),
            inputs: &inputs,
            input_files: &input_files,
            work,
            executor: &executor,
        };
        let results = crate::layers::audit(&ctx, lo);
        for (report, per_target) in reports.iter_mut().zip(results.targets) {
            if let Some((layers, summary)) = per_target {
                report.layers = layers;
                report.layer_summary = Some(summary);
            }
        }
        results.info
    });
    crate::interrupt::check()?;
    let tolerances = assemble::tolerances(&output_names, &reports);
    let previous = previous.as_ref().map(|(report, label)| Previous {
        report,
        label: label.clone(),
    });
    let (gate, gate_notes) = evaluate(&opts.policy, &reports, previous.as_ref());
    notes.extend(gate_notes);
    let exit = crate::gate::exit_code(&reports, gate.verdict);
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo {
            name: "npu-audit".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        model: assemble::model_info(&model, &signature)?,
        reference: reference_info,
        inputs: InputsInfo {
            provenance: inputs.provenance.clone(),
            tensors: input_info,
        },
        baseline: has_baseline.then(|| BASELINE_ID.to_string()),
        targets: reports,
        agreement: comparison.agreement,
        bit_exact_groups: comparison.groups,
        tolerances,
        gate,
        metric_definitions: crate::report::definitions(),
        layer_audit,
        notes,
        shard: shard.map(|mut info| {
            info.outputs_dir = opts.save_outputs.as_ref().map(|d| d.display().to_string());
            info
        }),
        merged_from: Vec::new(),
        exit_code: exit,
    })
}

/// Reads the previous report of baseline mode and checks it was made on the same inputs: a
/// regression measured on other data would mean nothing.
fn previous_report(path: &Path, at: &str, inputs: &[InputTensorInfo]) -> Result<(Report, String)> {
    let report = crate::report::json::read(path).map_err(|e| usage(format!("{at}: previous report {e:#}")))?;
    let label = path.display().to_string();
    let key = |t: &InputTensorInfo| (t.sample, t.name.clone(), t.sha256.clone());
    let now: Vec<_> = inputs.iter().map(key).collect();
    let then: Vec<_> = report.inputs.tensors.iter().map(key).collect();
    if now != then {
        let what = match now.iter().zip(&then).find(|(a, b)| a != b) {
            Some((a, _)) => format!("sample {} input '{}' differs", a.0, a.1),
            None => format!("{} input tensors now, {} then", now.len(), then.len()),
        };
        return Err(usage(format!(
            "{at}: the previous report {label} was made on other inputs ({what}); regressions need the same inputs (use a stored golden run)"
        )));
    }
    Ok((report, label))
}

/// Runs the reference model once on the CPU and stores a golden directory.
pub fn run_golden_create(opts: &GoldenOptions) -> Result<PathBuf> {
    let model = load_model(&opts.model)?;
    let signature = Signature::of(&model)?;
    let inputs = prepare(&signature, &opts.inputs)?;
    golden::check_destination(&opts.out, opts.force)?;
    let provisioner = Provisioner::new(&opts.exec.runtime_flags)?;
    let cpu = cpu_runtime(&provisioner)?;
    let executor = Executor::new(&opts.exec)?;
    let work = executor.work();
    let input_files = inputs.write(&work.join("inputs"))?;
    let mut notes = Vec::new();
    let model_path = if opts.layers {
        // Every tensor the graph computes becomes an output; the float ones are stored.
        let mut proto = model.proto.clone();
        crate::model::rewrite::pin_input_shapes(&mut proto, &inputs.shapes());
        let taps: Vec<String> = proto
            .graph
            .iter()
            .flat_map(|g| &g.node)
            .flat_map(|n| &n.output)
            .filter(|t| !t.is_empty())
            .cloned()
            .collect();
        let path = work.join("reference-tapped.onnx");
        crate::model::rewrite::write_model(&crate::layers::tap::tapped(&proto, &taps), &model, &path)?;
        path
    } else {
        model_for_workers(&model, &inputs, work, "reference.onnx", &mut notes)?
    };
    let job = reference_job(&cpu, model_path, &input_files, &work.join("golden"), &inputs.free_dims);
    let outcomes = executor.run(&[job])?;
    let outcome = &outcomes[0];
    let result = golden_result(outcome)?;
    crate::interrupt::check()?;
    // The model's own outputs, in its order (a tapped run returns more).
    let model_outputs: Vec<Vec<OutputFile>> = result
        .outputs
        .iter()
        .map(|sample| {
            signature
                .outputs
                .iter()
                .filter_map(|o| sample.iter().find(|f| f.name == o.name).cloned())
                .collect()
        })
        .collect();
    golden::write(
        &opts.out,
        GoldenWrite {
            reference: &model,
            runtime: RuntimeEntry {
                package: cpu.package.clone(),
                version: result
                    .ort_version
                    .clone()
                    .or(cpu.version.clone())
                    .unwrap_or_else(|| "unknown".into()),
                library_sha256: cpu.sha256.clone().or_else(|| sha256_file(&cpu.library).ok()),
                optimization: "disable".into(),
                intra_threads: 1,
            },
            input_spec: serde_json::to_value(&inputs.provenance)?,
            inputs: &input_files,
            outputs: &model_outputs,
            activations: opts.layers.then_some(result.outputs.as_slice()),
        },
        opts.force,
    )?;
    for n in notes {
        eprintln!("npu-audit: {n}");
    }
    Ok(opts.out.clone())
}
