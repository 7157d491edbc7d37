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
pub mod files;
pub mod golden;
pub mod plan;
pub mod reference;
pub mod shard;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;

use crate::exec::{ExecOptions, Executor, RunStatus};
use crate::gate::Previous;
use crate::inputs::InputOptions;
use crate::policy::Policy;
use crate::report::model::Report;
use crate::tensor::Tensor;
use crate::timings;
use crate::userfile::Outputs;

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
    pub save_outputs: Option<SavedOutputs>,
    /// Where each target's runtime log is kept (`DIR/<target>.log`).
    pub logs: Option<PathBuf>,
    /// Runs of every sample on every target (runs after the first are checked bit for bit).
    pub repeat: usize,
    /// With `repeat` > 1: the intra-op threads of the extra run that shows which outputs depend
    /// on the thread count.
    pub thread_probe: usize,
    /// Accept a previous report made with other intra-op thread counts.
    pub allow_other_threads: bool,
    /// Whether to show each target's arithmetic fingerprint and read its drift with it.
    pub fingerprint: crate::drift::FingerprintMode,
    /// The per-layer audit, when asked for.
    pub layers: Option<crate::layers::LayerOptions>,
    /// `--stream`: run every sample as a step of one stream, outputs fed back.
    pub stream: Option<crate::stream::StreamSpec>,
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
        let executor = Executor::new(&opts.exec)?;
        executor.expect_model_bytes(plan.model.total_bytes());
        if let reference::ReferencePlan::Model { model, .. } = &plan.reference {
            executor.expect_model_bytes(model.total_bytes());
        }
        (plan, executor)
    };
    let repeat = execute::Repeat {
        runs: opts.repeat,
        thread_probe: opts.thread_probe,
    };
    let executed = {
        let _stage = timings::stage("golden and outputs");
        execute::run(&plan, &executor, repeat)?
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
    crate::interrupt::check()?;
    let rows = assemble::target_rows(&plan.targets, &mut analysis, &persisted.logs);
    let previous = plan.previous.as_ref().map(|(report, label)| Previous {
        report,
        label: label.clone(),
    });
    let judgement = crate::gate::judge(&opts.policy, &rows, &analysis.comparison.agreement, previous.as_ref());
    let report = assemble::report(plan, &executed, analysis, rows, judgement, persisted.output_files)?;
    Ok((report, tensors))
}

/// Reads the golden run's and every successful target's outputs before the work directory goes.
fn run_tensors(plan: &plan::AuditPlan, analysis: &analyze::Analysis<'_>) -> Result<RunTensors> {
    let read = |samples: &[Vec<crate::exec::OutputFile>]| -> Result<Vec<Vec<(String, Tensor)>>> {
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
