//! `compare` and `golden create`: inputs -> golden run and targets (each in its own process) ->
//! comparison core -> one report.

pub mod assemble;
pub mod plan;
pub mod reference;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::compare::{compare as compare_outputs, ClassAxisPolicy, RunOutputs};
use crate::error::{environment, usage, ExitCode};
use crate::gate::{evaluate, Thresholds};
use crate::golden::{self, GoldenWrite, RuntimeEntry};
use crate::inputs::{prepare, InputOptions, InputSet};
use crate::model::derive::{pin_input_shapes, write_model};
use crate::model::load::sha256_hex;
use crate::model::signature::TensorSummary;
use crate::model::{load_model, LoadedModel, Signature};
use crate::report::model::{
    ChipsetInfo, InputTensorInfo, InputsInfo, ModelInfo, OutputMetrics, ReferenceInfo, Report,
    TargetReport, ToolInfo, SCHEMA_VERSION,
};
use crate::runtime::wheel::sha256_file;
use crate::runtime::{ep_setup, Build, Provisioner, Runtime, TargetRuntime};
use crate::target::OptLevel;
use crate::worker::{run_all, EpSetup, InputFile, Job, Outcome, OutputFile, PoolConfig, RunStatus};
use plan::BASELINE_ID;
use reference::ReferencePlan;

/// How workers are run.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    pub timeout: Duration,
    pub jobs: Option<usize>,
    pub threads: Option<usize>,
    pub runtime_flags: Vec<String>,
    pub keep_work: bool,
}

/// Everything `compare` was asked to do.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub model: PathBuf,
    pub reference: Option<PathBuf>,
    pub golden: Option<PathBuf>,
    pub targets: Vec<String>,
    pub allow_failure: Vec<String>,
    pub no_baseline: bool,
    pub inputs: InputOptions,
    pub class_axis: Vec<String>,
    pub thresholds: Thresholds,
    pub exec: ExecOptions,
    pub save_outputs: Option<PathBuf>,
}

/// Everything `golden create` was asked to do.
#[derive(Debug, Clone)]
pub struct GoldenOptions {
    pub model: PathBuf,
    pub out: PathBuf,
    pub force: bool,
    pub inputs: InputOptions,
    pub exec: ExecOptions,
}

/// The work directory of one audit; removed at the end unless asked to keep it.
struct WorkDir {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl WorkDir {
    fn new(keep: bool) -> Result<WorkDir> {
        let dir = tempfile::Builder::new()
            .prefix("npu-audit-")
            .tempdir()
            .map_err(|e| environment(format!("cannot create a work directory: {e}")))?;
        let path = dir.path().to_path_buf();
        if keep {
            eprintln!("npu-audit: keeping the work directory {}", path.display());
            Ok(WorkDir {
                path: dir.keep(),
                dir: None,
            })
        } else {
            Ok(WorkDir {
                dir: Some(dir),
                path,
            })
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = d.close();
        }
    }
}

fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn pool_config(exec: &ExecOptions, jobs: usize) -> (PoolConfig, usize) {
    let cores = available_cores();
    let parallel = exec.jobs.unwrap_or(cores).clamp(1, jobs.max(1));
    let threads = exec.threads.unwrap_or((cores / parallel).max(1));
    (
        PoolConfig {
            max_parallel: parallel,
            timeout: exec.timeout,
        },
        threads,
    )
}

fn progress(total: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}/{len} sessions  {msg}")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Fails early, before any work, when the report cannot be written where asked.
pub fn check_writable(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if path.is_dir() {
        return Err(usage(format!("--out {} is a directory", path.display())));
    }
    if !parent.is_dir() {
        return Err(usage(format!(
            "--out {}: directory {} does not exist",
            path.display(),
            parent.display()
        )));
    }
    tempfile::NamedTempFile::new_in(&parent)
        .map(|_| ())
        .map_err(|e| {
            usage(format!(
                "--out {}: cannot write into {}: {e}",
                path.display(),
                parent.display()
            ))
        })
}

/// The model file workers load: the original, or a copy with its dynamic input dimensions pinned.
fn model_for_workers(
    model: &LoadedModel,
    inputs: &InputSet,
    dir: &Path,
    name: &str,
    notes: &mut Vec<String>,
) -> Result<PathBuf> {
    let shapes: HashMap<String, Vec<usize>> = inputs
        .samples
        .first()
        .map(|s| {
            s.iter()
                .map(|nt| (nt.name.clone(), nt.tensor.shape.clone()))
                .collect()
        })
        .unwrap_or_default();
    let (pinned, count) = pin_input_shapes(&model.proto, &shapes);
    if count == 0 && !model.modified {
        return Ok(model.path.clone());
    }
    let dest = dir.join(name);
    write_model(&pinned, model, &dest)?;
    if count > 0 {
        notes.push(format!(
            "{}: {count} dynamic input dimension(s) pinned to the shapes fed, in a copy of the model (static shapes for every backend)",
            model.path.display()
        ));
    }
    Ok(dest)
}

fn input_tensor_info(inputs: &InputSet) -> Result<Vec<InputTensorInfo>> {
    let mut out = Vec::new();
    for (k, sample) in inputs.samples.iter().enumerate() {
        for nt in sample {
            out.push(InputTensorInfo {
                sample: k,
                name: nt.name.clone(),
                dtype: nt.tensor.dtype().name().into(),
                shape: nt.tensor.shape.clone(),
                sha256: sha256_hex(&nt.tensor.to_npy_bytes()?),
            });
        }
    }
    Ok(out)
}

/// The reference job: the golden model on the CPU EP with graph optimizations off, one thread
/// per op so results do not depend on the machine's core count.
fn reference_job(
    cpu: &Runtime,
    model: PathBuf,
    samples: &[Vec<InputFile>],
    out: PathBuf,
    free_dims: &[(String, i64)],
) -> Job {
    Job {
        target_id: "golden".into(),
        ort_library: cpu.library.clone(),
        ep: EpSetup::Cpu,
        opt: OptLevel::Disable,
        model,
        samples: samples.to_vec(),
        output_dir: out,
        intra_threads: 1,
        free_dims: free_dims.to_vec(),
        session_config: vec![],
    }
}

fn cpu_runtime(provisioner: &Provisioner) -> Result<Runtime> {
    let build = Build::get("cpu").context("no cpu build in the catalogue")?;
    provisioner.get(build).map_err(|e| {
        environment(format!(
            "the golden run needs {}: {}",
            build.label(),
            crate::error::one_line(&e)
        ))
    })
}

/// Checks that the inputs also fit the reference model (its inputs must have the same names).
fn check_reference_inputs(reference: &Signature, inputs: &InputSet) -> Result<()> {
    let Some(first) = inputs.samples.first() else {
        return Ok(());
    };
    for info in &reference.inputs {
        let Some(nt) = first.iter().find(|nt| nt.name == info.name) else {
            return Err(usage(format!(
                "the reference model takes an input '{}' that the audited model does not have (audited inputs: {})",
                info.name,
                first.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
            )));
        };
        crate::inputs::check_tensor(info, &nt.tensor, None).map_err(|e| {
            usage(format!(
                "the reference model does not accept the inputs: {e:#}"
            ))
        })?;
    }
    Ok(())
}

/// Maps the audited model's outputs to the golden run's, by name or else by position.
fn golden_output_names(
    audited: &[String],
    golden: &[String],
    notes: &mut Vec<String>,
) -> Result<Vec<String>> {
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

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn save_outputs(dir: &Path, runs: &[(&str, &[Vec<OutputFile>])]) -> Result<()> {
    for (id, samples) in runs {
        let tdir = dir.join(sanitize(id));
        std::fs::create_dir_all(&tdir)
            .with_context(|| format!("cannot create {}", tdir.display()))?;
        for (k, files) in samples.iter().enumerate() {
            let tensors = files
                .iter()
                .map(|f| crate::tensor::Tensor::read_npy(&f.path).map(|t| (f.name.clone(), t)))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<(String, &crate::tensor::Tensor)> =
                tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
            crate::tensor::write_npz(&tdir.join(format!("s{k}.npz")), &refs)?;
        }
    }
    Ok(())
}

/// How one target ended, after the silent-fallback check.
#[derive(Clone)]
struct TargetEnd<'o> {
    outcome: Option<&'o Outcome>,
    status: RunStatus,
    error: Option<String>,
    placement: Option<crate::report::model::PlacementSummary>,
}

/// Runs `compare` and returns the report (its `exit_code` says how the process should end).
pub fn run_compare(opts: &CompareOptions) -> Result<Report> {
    let mut notes = Vec::new();
    let model = load_model(&opts.model)?;
    let signature = Signature::of(&model)?;
    let reference = reference::plan(
        &model,
        opts.reference.as_ref(),
        opts.golden.as_ref(),
        &mut notes,
    )?;
    let inputs = match &reference {
        ReferencePlan::Stored { golden, .. } => {
            let inputs = golden.inputs()?;
            check_reference_inputs(&signature, &inputs).map_err(|e| {
                usage(format!(
                    "the golden run's inputs do not fit the model: {e:#}"
                ))
            })?;
            inputs
        }
        ReferencePlan::Model {
            signature: ref_sig, ..
        } => {
            let inputs = prepare(&signature, &opts.inputs)?;
            check_reference_inputs(ref_sig, &inputs)?;
            inputs
        }
    };
    let mut softmax = signature.softmax_axes.clone();
    if let ReferencePlan::Model {
        signature: ref_sig, ..
    } = &reference
    {
        for (k, v) in &ref_sig.softmax_axes {
            softmax.entry(k.clone()).or_insert(*v);
        }
    }
    let classes = ClassAxisPolicy::parse(&opts.class_axis, softmax)?;
    let targets = plan::targets(&opts.targets, &opts.allow_failure, !opts.no_baseline)?;
    if opts.targets.is_empty() {
        notes.push(format!(
            "no --target given: auditing every target this machine can run ({})",
            targets
                .iter()
                .filter(|(_, r, _)| *r == "target")
                .map(|(s, _, _)| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let provisioner = Provisioner::new(&opts.exec.runtime_flags)?;
    let planned = plan::provision(targets, &provisioner)?;
    let work = WorkDir::new(opts.exec.keep_work)?;
    let input_files = inputs.write(&work.path.join("inputs"))?;
    let audited_path = model_for_workers(&model, &inputs, &work.path, "model.onnx", &mut notes)?;

    let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
    let cpu_for_reference = match &reference {
        ReferencePlan::Model {
            model: ref_model, ..
        } => {
            let cpu = cpu_runtime(&provisioner)?;
            let ref_path = model_for_workers(
                ref_model,
                &inputs,
                &work.path,
                "reference.onnx",
                &mut Vec::new(),
            )?;
            let dir = work.path.join("golden");
            jobs.push((
                reference_job(
                    &cpu,
                    ref_path,
                    &input_files,
                    dir.join("out"),
                    &inputs.free_dims,
                ),
                dir,
            ));
            Some(cpu)
        }
        ReferencePlan::Stored { .. } => None,
    };
    let reference_jobs = jobs.len();
    let mut target_job: Vec<Option<usize>> = Vec::with_capacity(planned.len());
    let (config, threads) = pool_config(&opts.exec, planned.len() + reference_jobs);
    for (i, t) in planned.iter().enumerate() {
        let Ok(rt) = &t.runtime else {
            target_job.push(None);
            continue;
        };
        let dir = work
            .path
            .join("targets")
            .join(format!("{i}-{}", sanitize(&t.spec.id)));
        let job = Job {
            target_id: t.spec.id.clone(),
            ort_library: rt.host.library.clone(),
            ep: ep_setup(&t.spec, rt),
            opt: t.spec.opt,
            model: audited_path.clone(),
            samples: input_files.clone(),
            output_dir: dir.join("out"),
            intra_threads: threads,
            free_dims: inputs.free_dims.clone(),
            session_config: t
                .spec
                .options
                .iter()
                .filter(|(k, _)| k.starts_with("session."))
                .cloned()
                .collect(),
        };
        target_job.push(Some(jobs.len()));
        jobs.push((job, dir));
    }

    let bar = progress(jobs.len());
    let outcomes = run_all(&jobs, config, &|job, outcome| {
        bar.inc(1);
        bar.set_message(format!("{} {}", job.target_id, outcome.status.as_str()));
    });
    bar.finish_and_clear();

    // The golden outputs.
    let (golden_samples, golden_names, reference_info) = match &reference {
        ReferencePlan::Stored {
            golden,
            description,
        } => (
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
        ),
        ReferencePlan::Model {
            model: ref_model,
            kind,
            description,
            removed_pairs,
            ..
        } => {
            let outcome = &outcomes[0];
            if outcome.status != RunStatus::Ok {
                return Err(environment(format!(
                    "the golden reference run failed ({}): {}",
                    outcome.status.as_str(),
                    outcome.error.clone().unwrap_or_default()
                )));
            }
            let result = outcome
                .result
                .as_ref()
                .context("golden run without result")?;
            let names = result
                .outputs
                .first()
                .map(|o| o.iter().map(|f| f.name.clone()).collect())
                .unwrap_or_default();
            let cpu = cpu_for_reference.as_ref().context("no cpu runtime")?;
            let info = ReferenceInfo {
                kind: kind.to_string(),
                path: ref_model.path.display().to_string(),
                sha256: if *kind == "derived" {
                    sha256_hex(&prost::Message::encode_to_vec(&ref_model.proto))
                } else {
                    ref_model.sha256.clone()
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
            (result.outputs.clone(), names, info)
        }
    };
    let output_names: Vec<String> = signature.outputs.iter().map(|o| o.name.clone()).collect();
    let golden_map = golden_output_names(&output_names, &golden_names, &mut notes)?;

    // How each target ended, after checking that its EP really ran the graph.
    let ends: Vec<TargetEnd> = planned
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let outcome = target_job[i].map(|j| &outcomes[j]);
            let ep = t.spec.backend.ep_name();
            let placement = outcome.and_then(|o| assemble::placement(o, ep));
            let (mut status, mut error) = match (&t.runtime, outcome) {
                (Err(reason), _) => (RunStatus::Unavailable, Some(reason.clone())),
                (Ok(_), Some(o)) => (o.status, o.error.clone()),
                (Ok(_), None) => (RunStatus::Unavailable, Some("not run".into())),
            };
            if let Some(reason) = placement
                .as_ref()
                .and_then(|p| {
                    assemble::silent_fallback(
                        p,
                        ep,
                        &outcome.map(|o| o.log.clone()).unwrap_or_default(),
                    )
                })
                .filter(|_| status == RunStatus::Ok)
            {
                status = RunStatus::Failed;
                error = Some(reason);
            }
            TargetEnd {
                outcome,
                status,
                error,
                placement,
            }
        })
        .collect();
    let runs: Vec<RunOutputs<'_>> = planned
        .iter()
        .zip(&ends)
        .filter(|(_, e)| e.status == RunStatus::Ok)
        .filter_map(|(t, e)| {
            e.outcome
                .and_then(|o| o.result.as_ref())
                .map(|r| RunOutputs {
                    id: t.spec.id.as_str(),
                    samples: &r.outputs,
                })
        })
        .collect();
    let comparison = compare_outputs(
        &output_names,
        &golden_map,
        &RunOutputs {
            id: "golden",
            samples: &golden_samples,
        },
        &runs,
        &classes,
    )?;

    if let Some(dir) = &opts.save_outputs {
        let mut all: Vec<(&str, &[Vec<OutputFile>])> = vec![("golden", &golden_samples)];
        all.extend(runs.iter().map(|r| (r.id, r.samples)));
        save_outputs(dir, &all)
            .map_err(|e| usage(format!("--save-outputs {}: {e:#}", dir.display())))?;
    }

    let mut hashes: HashMap<PathBuf, Option<String>> = HashMap::new();
    let mut hash = |rt: &Runtime| -> Option<String> {
        if rt.sha256.is_some() {
            return rt.sha256.clone();
        }
        hashes
            .entry(rt.library.clone())
            .or_insert_with(|| sha256_file(&rt.library).ok())
            .clone()
    };
    let mut reports: Vec<TargetReport> = Vec::with_capacity(planned.len());
    let mut metrics_iter = comparison.metrics.into_iter();
    for (i, t) in planned.iter().enumerate() {
        let TargetEnd {
            outcome,
            status,
            error,
            placement,
        } = ends[i].clone();
        let outputs: Vec<OutputMetrics> = if status == RunStatus::Ok {
            metrics_iter.next().unwrap_or_default()
        } else {
            vec![]
        };
        let mut options: BTreeMap<String, String> = t.spec.options.iter().cloned().collect();
        if let Some(chip) = t.spec.chipset() {
            options
                .entry("htp_arch".into())
                .or_insert(chip.htp_arch.to_string());
            options
                .entry("soc_model".into())
                .or_insert(chip.soc_model.to_string());
        }
        reports.push(TargetReport {
            id: t.spec.id.clone(),
            ep: t.spec.backend.ep_name().into(),
            role: t.role.into(),
            required: t.required,
            chipset: t.spec.chipset().map(|c| ChipsetInfo {
                sm: c.sm.to_uppercase(),
                name: format!("Snapdragon {}", c.marketing),
                soc_model: c.soc_model,
                htp_arch: c.htp_arch,
            }),
            options,
            runtime: t
                .runtime
                .as_ref()
                .ok()
                .map(|rt| assemble::target_runtime_info(rt, outcome, &mut hash)),
            status,
            error,
            failed_at: outcome
                .and_then(|o| o.result.as_ref())
                .filter(|r| !r.ok)
                .map(|r| r.phase),
            timing: outcome.and_then(assemble::timing),
            placement,
            log: outcome
                .map(|o| o.log.display().to_string())
                .filter(|_| opts.exec.keep_work),
            outputs,
        });
    }
    let has_baseline = assemble::attach_baseline(&mut reports, BASELINE_ID);
    let tolerances = assemble::tolerances(&output_names, &reports);
    let gate = evaluate(&opts.thresholds, &reports);
    let required_failed = reports
        .iter()
        .any(|t| t.required && t.status != RunStatus::Ok);
    let exit = if required_failed {
        ExitCode::TargetFailed
    } else if gate.verdict == "fail" {
        ExitCode::DriftExceeded
    } else {
        ExitCode::Success
    };
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo {
            name: "npu-audit".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        model: ModelInfo {
            path: model.path.display().to_string(),
            sha256: model.sha256.clone(),
            size_bytes: model.size,
            ir_version: model.proto.ir_version.unwrap_or(0),
            opset: model.opset(),
            producer: format!(
                "{} {}",
                model.proto.producer_name.clone().unwrap_or_default(),
                model.proto.producer_version.clone().unwrap_or_default()
            )
            .trim()
            .to_string(),
            inputs: signature.inputs.iter().map(TensorSummary::from).collect(),
            outputs: signature.outputs.iter().map(TensorSummary::from).collect(),
        },
        reference: reference_info,
        inputs: InputsInfo {
            provenance: inputs.provenance.clone(),
            tensors: input_tensor_info(&inputs)?,
        },
        baseline: has_baseline.then(|| BASELINE_ID.to_string()),
        targets: reports,
        agreement: comparison.agreement,
        bit_exact_groups: comparison.groups,
        tolerances,
        gate,
        metric_definitions: crate::report::definitions(),
        notes,
        exit_code: exit as i32,
    })
}

/// Runs the reference model once on the CPU and stores a golden directory.
pub fn run_golden_create(opts: &GoldenOptions) -> Result<PathBuf> {
    let model = load_model(&opts.model)?;
    let signature = Signature::of(&model)?;
    let inputs = prepare(&signature, &opts.inputs)?;
    if opts.out.exists()
        && !opts.force
        && opts
            .out
            .read_dir()
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(usage(format!(
            "{} already exists; pass --force to replace it",
            opts.out.display()
        )));
    }
    let provisioner = Provisioner::new(&opts.exec.runtime_flags)?;
    let cpu = cpu_runtime(&provisioner)?;
    let work = WorkDir::new(opts.exec.keep_work)?;
    let input_files = inputs.write(&work.path.join("inputs"))?;
    let mut notes = Vec::new();
    let model_path = model_for_workers(&model, &inputs, &work.path, "reference.onnx", &mut notes)?;
    let dir = work.path.join("golden");
    let job = reference_job(
        &cpu,
        model_path,
        &input_files,
        dir.join("out"),
        &inputs.free_dims,
    );
    let (config, _) = pool_config(&opts.exec, 1);
    let outcomes = run_all(&[(job, dir)], config, &|_, _| {});
    let outcome = &outcomes[0];
    let result = match (&outcome.status, &outcome.result) {
        (RunStatus::Ok, Some(r)) => r,
        _ => {
            return Err(environment(format!(
                "the reference run failed ({}): {}",
                outcome.status.as_str(),
                outcome.error.clone().unwrap_or_default()
            )))
        }
    };
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
                library_sha256: cpu
                    .sha256
                    .clone()
                    .or_else(|| sha256_file(&cpu.library).ok()),
                optimization: "disable".into(),
                intra_threads: 1,
            },
            input_spec: serde_json::to_value(&inputs.provenance)?,
            inputs: &input_files,
            outputs: &result.outputs,
        },
        opts.force,
    )?;
    for n in notes {
        eprintln!("npu-audit: {n}");
    }
    Ok(opts.out.clone())
}
