//! `compare` as a pipeline of typed stages, each a function from the previous stage's result:
//!
//! ```text
//! CompareOptions -> Plan (AuditPlan) -> Execute (Executed) -> Analyze (Analysis)
//!                -> rows (TargetReport per target) -> Judge (Judgement) -> Report
//! ```
//!
//! Nothing is mutated after it is built: each target's row is assembled once from everything the
//! analyses found, and the report once from the plan, the analysis and the judgement. Rendering
//! and writing the report are the caller's (see `render`). `golden create` lives here too.

pub mod analyze;
pub mod assemble;
pub mod execute;
pub mod facts;
pub mod files;
pub mod golden;
pub mod plan;
pub mod reference;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;

use crate::analyses::metrics::ClassAxisFlag;
use crate::data::inputs::InputOptions;
use crate::data::target::{TargetPattern, TargetSpec};
use crate::data::tensor::Tensor;
use crate::execution::exec::{ExecOptions, Executor};
use crate::foundation::timings;
use crate::foundation::userfile::{InputFiles, Outputs, Reads};
use crate::judge::gate::Previous;
use crate::judge::policy::Policy;
use crate::report::compare::Report;
use crate::report::RunStatus;

/// Where `--save-outputs` keeps every run's outputs, and how a shard report records it.
#[derive(Debug, Clone)]
pub struct SavedOutputs {
    pub dir: PathBuf,
    /// The flag or default it comes from, for messages (`--save-outputs`, or the directory
    /// beside a shard's `--out`).
    pub flag: String,
    /// The directory as the shard report names it: its file name when it sits beside the report
    /// (so the two can move together as CI artifacts), else the path as given.
    pub recorded_as: Option<String>,
}

/// Where the golden run comes from: a reference model run now (`--reference`, else derived from
/// the audited model), or a stored golden run (`--golden`).
#[derive(Debug, Clone, Default)]
pub struct GoldenSource {
    /// The fp32 reference model (`None`: derived from the audited model).
    pub reference: Option<PathBuf>,
    /// A stored golden run's directory.
    pub stored: Option<PathBuf>,
    /// Compare against the stored run even when `reference` is not the model it was made with.
    pub allow_mismatch: bool,
}

impl Reads for GoldenSource {
    fn declare(&self, set: &mut InputFiles) {
        let GoldenSource {
            reference,
            stored,
            allow_mismatch: _,
        } = self;
        set.add_all(reference).add_all(stored);
    }
}

/// What is audited: the model, its golden run, the inputs every target is fed.
#[derive(Debug, Clone)]
pub struct Audited {
    pub model: PathBuf,
    pub golden: GoldenSource,
    pub inputs: InputOptions,
}

impl Reads for Audited {
    fn declare(&self, set: &mut InputFiles) {
        let Audited { model, golden, inputs } = self;
        set.add(model).with(golden).with(inputs);
    }
}

/// How the audit executes: the targets and which must succeed, the shard, the worker
/// processes, the repeated runs.
#[derive(Debug, Clone)]
pub struct Execution {
    /// The targets asked for (`None`: every target this machine can run).
    pub targets: Option<Vec<TargetSpec>>,
    /// Targets whose failure does not fail the audit.
    pub allow_failure: Vec<TargetPattern>,
    /// Add the `cpu:noopt` baseline (unless a target already).
    pub baseline: bool,
    /// With `--shard i/n`: run the i-th of n parts of the targets.
    pub shard: Option<crate::commands::shard::Shard>,
    pub exec: ExecOptions,
    /// Runs of every sample on every target (runs after the first are checked bit for bit).
    pub repeat: usize,
    /// With `repeat` > 1: the intra-op threads of the extra run that shows which outputs depend
    /// on the thread count.
    pub thread_probe: usize,
    /// Whether the audited model is one the user audits whole (its compiled QNN contexts stored)
    /// or a temporary model built from one (a `matrix --search` candidate: compiled, not stored).
    pub scope: crate::execution::exec::ModelScope,
}

impl Execution {
    /// The targets of an audit run inside another command: all of them may fail (a failure is
    /// a finding there), no baseline, no shard, one run each.
    pub fn findings(targets: Vec<TargetSpec>, exec: ExecOptions) -> Execution {
        Execution {
            targets: Some(targets),
            allow_failure: vec![TargetPattern::all()],
            baseline: false,
            shard: None,
            exec,
            repeat: 1,
            thread_probe: 4,
            scope: crate::execution::exec::ModelScope::Whole,
        }
    }
}

/// What is measured and judged besides every output's figures.
#[derive(Debug, Clone)]
pub struct Measured {
    /// `--class-axis`: which outputs are score vectors.
    pub class_axis: Vec<ClassAxisFlag>,
    /// The release policy (file and flags); its default targets and allowed failures are
    /// already merged into the [`Execution`].
    pub policy: Policy,
    /// Whether to show each target's arithmetic fingerprint and read its drift with it.
    pub fingerprint: crate::analyses::drift::FingerprintMode,
    /// The per-layer audit, when asked for.
    pub layers: Option<crate::analyses::layers::LayerOptions>,
    /// `--stream`: run every sample as a step of one stream, outputs fed back.
    pub stream: Option<crate::analyses::stream::StreamSpec>,
    /// Accept a previous report made with other intra-op thread counts.
    pub allow_other_threads: bool,
    /// Accept a previous report made on a host of another instruction-set class.
    pub allow_other_hosts: bool,
}

impl Measured {
    /// Every output's figures and nothing else: no policy, fingerprint, per-layer audit or
    /// stream (what an audit inside another command measures unless it adds one).
    pub fn outputs_only() -> Measured {
        Measured {
            class_axis: Vec::new(),
            policy: Policy::empty(),
            fingerprint: crate::analyses::drift::FingerprintMode::Off,
            layers: None,
            stream: None,
            allow_other_threads: false,
            allow_other_hosts: false,
        }
    }
}

impl Reads for Measured {
    fn declare(&self, set: &mut InputFiles) {
        let Measured {
            class_axis: _,
            policy,
            fingerprint: _,
            layers,
            stream: _,
            allow_other_threads: _,
            allow_other_hosts: _,
        } = self;
        set.with(policy).with(layers);
    }
}

/// A directory the audit writes files into, and the flag (or default) it comes from.
#[derive(Debug, Clone)]
pub struct KeptDir {
    pub dir: PathBuf,
    pub flag: String,
}

/// What the audit keeps besides its report (none of it is read).
#[derive(Debug, Clone, Default)]
pub struct Kept {
    pub save_outputs: Option<SavedOutputs>,
    /// Where each target's runtime log is kept (`DIR/<target>.log`).
    pub logs: Option<KeptDir>,
}

/// Everything `compare` was asked to do.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub audited: Audited,
    pub execution: Execution,
    pub measured: Measured,
    pub kept: Kept,
}

impl CompareOptions {
    /// The audit a command runs inside its own work (matrix cells, triage groups, pipeline
    /// stages, release bisection): `audited` on `targets`, every failure a finding, outputs
    /// measured against the golden run and nothing kept. The command adds what it needs
    /// (a policy, a per-layer audit) to the parts it builds itself.
    pub fn findings(audited: Audited, targets: Vec<TargetSpec>, exec: ExecOptions) -> CompareOptions {
        CompareOptions {
            audited,
            execution: Execution::findings(targets, exec),
            measured: Measured::outputs_only(),
            kept: Kept::default(),
        }
    }
}

impl Reads for CompareOptions {
    fn declare(&self, set: &mut InputFiles) {
        let CompareOptions {
            audited,
            execution,
            measured,
            kept: _,
        } = self;
        set.with(audited).with(&execution.exec).with(measured);
    }
}

/// Runs `compare` and returns the report (its `exit_code` says how the process should end). The
/// saved outputs and logs are staged in `outputs`, to be committed with the report's files.
pub fn run_compare(opts: &CompareOptions, outputs: &mut Outputs) -> Result<Report> {
    run_compare_keeping(opts, outputs, false).map(|(report, _)| report)
}

/// Each run's outputs per sample, read into memory: `golden` (under the audited model's output
/// names) and every target that ran, by id.
pub type RunTensors = BTreeMap<String, Vec<Vec<(String, Tensor)>>>;

/// [`run_compare`], also returning every run's outputs (for analyses of outputs that came from
/// elsewhere, such as device reports, against the same runs).
pub fn run_compare_with_outputs(opts: &CompareOptions, outputs: &mut Outputs) -> Result<(Report, RunTensors)> {
    run_compare_keeping(opts, outputs, true)
}

fn run_compare_keeping(opts: &CompareOptions, outputs: &mut Outputs, keep: bool) -> Result<(Report, RunTensors)> {
    let (plan, executor) = {
        let _stage = timings::stage("plan");
        let _span = timings::span(timings::Phase::Prepare);
        let plan = plan::AuditPlan::new(opts, outputs)?;
        let executor = Executor::new(&opts.execution.exec)?;
        executor.expect_model_bytes(plan.model.total_bytes());
        if let reference::ReferencePlan::Model { model, .. } = &plan.reference {
            executor.expect_model_bytes(model.total_bytes());
        }
        (plan, executor)
    };
    let repeat = execute::Repeat {
        runs: opts.execution.repeat,
        thread_probe: opts.execution.thread_probe,
    };
    let executed = {
        let _stage = timings::stage("golden and outputs");
        execute::run(&plan, &executor, repeat, opts.execution.scope)?
    };
    let mut analysis = {
        let _stage = timings::stage("analysis");
        analyze::run(&plan, &executed, &executor, opts)?
    };
    let tensors = if keep {
        run_tensors(&plan, &analysis)?
    } else {
        RunTensors::new()
    };
    let persisted = {
        let _stage = timings::stage("report");
        let _span = timings::span(timings::Phase::Persist);
        files::persist(opts, &plan, &executed, &analysis, &executor, outputs)?
    };
    crate::foundation::interrupt::check()?;
    let rows = assemble::target_rows(&plan.targets, &mut analysis, &persisted.logs);
    let previous = plan.previous.as_ref().map(|(report, label)| Previous {
        report,
        label: label.clone(),
    });
    let judgement = crate::judge::gate::judge(
        &opts.measured.policy,
        &rows,
        &analysis.comparison.agreement,
        previous.as_ref(),
    );
    let report = assemble::report(plan, &executed, analysis, rows, judgement, persisted.output_files)?;
    Ok((report, tensors))
}

/// Reads the golden run's and every successful target's outputs before the work directory goes.
fn run_tensors(plan: &plan::AuditPlan, analysis: &analyze::Analysis<'_>) -> Result<RunTensors> {
    let read = |samples: &[Vec<crate::execution::exec::OutputFile>]| -> Result<Vec<Vec<(String, Tensor)>>> {
        samples
            .iter()
            .map(|files| {
                files
                    .iter()
                    .map(|f| Tensor::read_npy(&f.path).map(|t| (f.name.clone(), t)))
                    .collect()
            })
            .collect()
    };
    let mut out = RunTensors::new();
    // The golden run's outputs under the audited model's names, in its order.
    let golden = read(&analysis.golden_samples)?
        .into_iter()
        .map(|sample| {
            plan.output_names
                .iter()
                .zip(&analysis.golden_names)
                .filter_map(|(name, g)| {
                    sample
                        .iter()
                        .find(|(n, _)| n == g)
                        .map(|(_, t)| (name.clone(), t.clone()))
                })
                .collect()
        })
        .collect();
    out.insert("golden".into(), golden);
    for (t, end) in plan.targets.iter().zip(&analysis.ends) {
        let ok = end
            .outcome
            .and_then(|o| o.result.as_ref())
            .filter(|_| end.status == RunStatus::Ok);
        if let Some(r) = ok {
            out.insert(t.spec.id.clone(), read(&r.outputs)?);
        }
    }
    Ok(out)
}
