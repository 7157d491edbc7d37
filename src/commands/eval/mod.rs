//! `npu-audit eval`: task accuracy on the user's labelled set, per target, with the statistics to
//! trust it. The set streams through one warm serving session per run (the reference on the CPU,
//! every target; several per run when the machine has the cores), sample after sample; each
//! answer is reduced at once to a per-sample [`Record`] (kept in a checkpoint, so an interrupted
//! run resumes without counting a sample twice), and every figure is computed from the records.

pub mod assemble;
mod broken_layers;
mod checkpoint;
pub mod feed;
pub mod records_cache;
mod sessions;
pub mod shard;
pub mod sizing;
pub mod summary;

use std::path::PathBuf;

use anyhow::Result;

use crate::analyses::accuracy::task::{Task, TaskSpec};
use crate::analyses::accuracy::StatOptions;
use crate::analyses::metrics::{ClassAxisFlag, ClassAxisPolicy};
use crate::commands::compare::GoldenSource;
use crate::commands::shard::{Costs, Shard};
use crate::data::dataset::Dataset;
use crate::data::target::{TargetPattern, TargetSpec};
use crate::execution::exec::ExecOptions;
use crate::foundation::error::{bad_flag, bad_input};
use crate::foundation::userfile::{InputFiles, Outputs, Reads};
use crate::judge::policy::Policy;
use crate::report::eval::EvalReport;
use crate::report::RunStatus;

/// Where the set is and which part of it is evaluated.
#[derive(Debug, Clone)]
pub struct DatasetOptions {
    pub path: PathBuf,
    /// `--labels FILE`, instead of the set's own.
    pub labels: Option<PathBuf>,
    /// `--limit N`: the first N samples.
    pub limit: Option<usize>,
}

/// Everything `eval` was asked to do.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    pub model: PathBuf,
    pub golden: GoldenSource,
    pub dataset: DatasetOptions,
    pub task: TaskSpec,
    pub class_axis: Vec<ClassAxisFlag>,
    /// The targets asked for (`None`: every target this machine can run).
    pub targets: Option<Vec<TargetSpec>>,
    pub allow_failure: Vec<TargetPattern>,
    /// Add the `cpu:noopt` baseline, the reference integer implementation.
    pub baseline: bool,
    pub exec: ExecOptions,
    pub stats: StatOptions,
    /// Limits (`min_accuracy`, `max_accuracy_drop`) from the policy file and the flags.
    pub policy: Policy,
    /// `--explain K`: the per-layer audit of up to K samples each target broke.
    pub explain: usize,
    /// Where the per-sample records (the checkpoint) are kept.
    pub records: Records,
    /// The files the task was read from (`--classes`, `--vocab`).
    pub task_files: Vec<PathBuf>,
    /// `--shard i/n`: run only this part of the work units (the shard's file is for `merge`).
    pub shard: Option<Shard>,
    /// `--costs`: each target's weight per sample in the split into shards.
    pub costs: Costs,
}

/// Where an eval keeps its per-sample records, the checkpoint that makes a killed eval resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Records {
    /// `--records DIR`: the user's directory, kept as it is.
    Named(PathBuf),
    /// A directory of the tool's cache named by the digest of the eval's records context
    /// (`eval --out FILE`): the same command run again resumes there, nothing is left beside the
    /// report, and `runtime gc` sweeps what is no longer used (`checkpoint::cached_dir`).
    Cached,
    /// The work directory, gone with it (an eval whose report is only printed).
    Work,
}

impl Reads for EvalOptions {
    fn declare(&self, set: &mut InputFiles) {
        let EvalOptions {
            model,
            golden,
            dataset,
            class_axis: _,
            targets: _,
            allow_failure: _,
            baseline: _,
            exec,
            stats: _,
            policy,
            explain: _,
            records: _,
            task: _,
            task_files,
            shard: _,
            costs: _,
        } = self;
        set.add(model).with(golden).with(exec).with(policy);
        set.add(&dataset.path).add_all(&dataset.labels).add_all(task_files);
    }
}

/// Runs the eval and returns its report (its `exit_code` says how the process should end). The
/// records directory is staged in `outputs` with the report's files.
pub fn run(opts: &EvalOptions, outputs: &mut Outputs) -> Result<EvalReport> {
    let mut dataset = open_set(opts)?;
    let mut plan = sessions::plan(opts, &dataset)?;
    if let Some(sequential) = opts.stats.sequential {
        check_sequential(opts, &plan)?;
        dataset.shuffle(sequential.order_seed);
        for note in too_few_to_pass(opts, &plan, dataset.len()) {
            crate::foundation::console::note(format!("eval: {note}"));
            plan.notes.push(note);
        }
    }
    outputs.add_inputs(InputFiles::new().add_all(&plan.model.external_data_paths()));
    let runs = feed::run(opts, &plan, &dataset, (0..dataset.len(), &opts.records))?;
    crate::foundation::interrupt::check()?;
    assemble::report(opts, &plan, &dataset, runs)
}

/// A sequential eval decides limits: at least one target asked for must have one, and a drop of
/// the CER (a ratio over the whole set) is not a mean a confidence sequence bounds.
fn check_sequential(opts: &EvalOptions, plan: &sessions::EvalPlan) -> Result<()> {
    let limits: Vec<_> = plan
        .targets
        .iter()
        .filter(|t| t.role == crate::data::target::TargetRole::Target)
        .map(|t| opts.policy.limits(&t.spec.id, None))
        .collect();
    if !limits
        .iter()
        .any(|l| l.max_accuracy_drop.is_some() || l.min_accuracy.is_some())
    {
        return Err(bad_flag(
            "--until-decided stops each target when its limits are decided: give --max-accuracy-drop or --min-accuracy (or max_accuracy_drop / min_accuracy in the policy)",
        ));
    }
    let ctc = matches!(opts.task, TaskSpec::Ctc { .. });
    if ctc && limits.iter().any(|l| l.max_accuracy_drop.is_some()) {
        return Err(bad_flag(
            "--until-decided decides accuracy limits; the CER drop of --task ctc is a ratio over the whole set that no confidence sequence here bounds: run the whole set without --until-decided",
        ));
    }
    Ok(())
}

/// A note per gated target whose limits the set is too small to show met even with every sample
/// right and none flipped: such a target passes only by fixing more samples than it breaks (a
/// drop limit), or not at all (an accuracy limit alone).
fn too_few_to_pass(opts: &EvalOptions, plan: &sessions::EvalPlan, samples: usize) -> Vec<String> {
    use crate::analyses::accuracy::decide::{fewest_to_pass, Limits};
    let mut notes = Vec::new();
    for t in plan
        .targets
        .iter()
        .filter(|t| t.role == crate::data::target::TargetRole::Target)
    {
        let l = opts.policy.limits(&t.spec.id, None);
        let limits = Limits {
            max_drop_points: l.max_accuracy_drop.map(|l| l.value),
            min_accuracy: l.min_accuracy.map(|l| l.value),
        };
        if !limits.any() {
            continue;
        }
        let outlook = if limits.max_drop_points.is_some() {
            "it can pass only by fixing more samples than it breaks"
        } else {
            "it cannot pass on this set"
        };
        let note = match fewest_to_pass(limits) {
            Some(n) if n <= samples => continue,
            Some(n) => format!(
                "{}: --until-decided needs {n} samples to show its limits met even with every sample right and none flipped, and the set has {samples}: {outlook}",
                t.spec.id
            ),
            None => format!(
                "{}: no number of samples shows its limits met (a minimum accuracy of 1 needs a lower bound of 100%): it cannot pass",
                t.spec.id
            ),
        };
        notes.push(note);
    }
    notes
}

/// Each planned target's limits a sequential eval decides (`None`: not gated, or not sequential),
/// as the report's basis holds them.
fn decided_limits(
    opts: &EvalOptions,
    plan: &sessions::EvalPlan,
    dataset: &Dataset,
    task: &Task,
) -> Vec<Option<crate::analyses::accuracy::decide::Limits>> {
    if opts.stats.sequential.is_none() {
        return vec![None; plan.targets.len()];
    }
    let basis = assemble::Basis::of(opts, plan, dataset, task);
    basis
        .targets
        .iter()
        .map(assemble::TargetBasis::decided_limits)
        .collect()
}

/// The set, checked to have labels unless the task needs none.
fn open_set(opts: &EvalOptions) -> Result<Dataset> {
    let dataset = Dataset::open(&opts.dataset.path, opts.dataset.labels.as_deref(), opts.dataset.limit)?;
    let needs_labels = !matches!(opts.task, TaskSpec::Agree { .. });
    if needs_labels && dataset.labels.is_none() {
        return Err(bad_input(format!(
            "--dataset {}: no labels (labels.csv, labels.jsonl, a 'labels' array, or --labels FILE); without labels, --task agree",
            dataset.path.display()
        )));
    }
    Ok(dataset)
}

/// The records of one run, with how it ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunEnd {
    pub status: RunStatus,
    pub error: Option<String>,
}

/// Checks a task against the reference's first answer and every label: the output exists and
/// suits the task, each label means something to it (a class within range).
pub fn check_task(
    spec: &TaskSpec,
    sig: &crate::data::model::Signature,
    classes: &ClassAxisPolicy,
    first: &[(String, crate::data::tensor::Tensor)],
    dataset: &Dataset,
) -> Result<(Task, Vec<Option<crate::analyses::accuracy::task::Truth>>)> {
    let shape_of = |name: &str| first.iter().find(|(n, _)| n == name).map(|(_, t)| t.shape.clone());
    let output = match spec {
        TaskSpec::Classify { output, .. } | TaskSpec::Ctc { output, .. } | TaskSpec::Agree { output } => output.clone(),
        TaskSpec::Decide { decision } => Some(decision.output().to_string()),
    };
    let name = output.or_else(|| (sig.outputs.len() == 1).then(|| sig.outputs[0].name.clone()));
    let shape = name.as_deref().and_then(shape_of).unwrap_or_default();
    let task = Task::check(spec, sig, classes, &shape).map_err(|e| bad_flag(format!("--task: {e}")))?;
    let Some(labels) = dataset.labels.as_ref().filter(|_| !task.labels_from_reference()) else {
        return Ok((task, vec![None; dataset.len()]));
    };
    let classes_out = class_count(&task, classes, &shape);
    let mut truths = Vec::with_capacity(labels.len());
    for (k, label) in labels.iter().enumerate() {
        let truth = task.truth(label).map_err(|e| {
            bad_input(format!(
                "--dataset {}: sample {}: label {label}: {e}",
                dataset.path.display(),
                dataset.ids[k]
            ))
        })?;
        if let (crate::analyses::accuracy::task::Truth::Class(c), Some(n)) = (&truth, classes_out) {
            if *c >= n {
                return Err(bad_input(format!(
                    "--dataset {}: sample {}: class {c} is outside the output's {n} classes",
                    dataset.path.display(),
                    dataset.ids[k]
                )));
            }
        }
        truths.push(Some(truth));
    }
    Ok((task, truths))
}

/// How many classes a classifier's output has (its class axis's length).
fn class_count(task: &Task, classes: &ClassAxisPolicy, shape: &[usize]) -> Option<usize> {
    let axis = classes.resolve(&task.output, shape, crate::data::tensor::DType::Float32)?;
    shape.get(axis).copied()
}
