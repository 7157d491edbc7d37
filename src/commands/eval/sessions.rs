//! What an eval runs on: the targets with their runtimes, the model and its reference, and the
//! serving sessions that stream the set (the reference on the CPU and every target, each with the
//! model's inputs pinned to the set's shapes).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::{EvalOptions, RunEnd};
use crate::analyses::metrics::ClassAxisPolicy;
use crate::commands::compare::reference::{self, ReferencePlan};
use crate::data::dataset::{Dataset, Sample};
use crate::data::inputs::{InputProvenance, InputSet, NamedTensor};
use crate::data::model::{load_model, LoadedModel, Signature};
use crate::execution::exec::executor::{
    cpu_runtime, model_for_workers, reference_job, target_job, GOLDEN_INTRA_OP_THREADS,
};
use crate::execution::exec::selection::{self as targets};
use crate::execution::exec::serve::{ServeSession, Stopped};
use crate::execution::exec::ModelScope::Whole;
use crate::execution::exec::{Executor, PlannedTarget};
use crate::execution::runtime::Provisioner;
use crate::report::RunStatus;

/// What an eval runs on, decided and checked before any session starts.
pub struct EvalPlan {
    pub model: LoadedModel,
    pub signature: Signature,
    pub reference: ReferencePlan,
    pub targets: Vec<PlannedTarget>,
    pub provisioner: Provisioner,
    pub classes: ClassAxisPolicy,
    pub notes: Vec<String>,
}

/// Plans an eval: targets (a typo fails before any model loads), the model, its reference, the
/// set against the model's inputs, the runtimes.
pub fn plan(opts: &EvalOptions, dataset: &Dataset) -> Result<EvalPlan> {
    let mut notes = Vec::new();
    let requested = targets::targets(
        opts.targets.as_deref(),
        &opts.allow_failure,
        opts.baseline,
        &opts.policy.releases,
    )?;
    let provisioner = Provisioner::new(&opts.exec.runtimes)?;
    let model = load_model(&opts.model)?;
    let signature = Signature::of(&model)?;
    let reference = reference::plan(&model, &opts.golden, &mut notes)?;
    dataset.check(&signature)?;
    if let ReferencePlan::Model { signature: ref_sig, .. } = &reference {
        dataset.check(ref_sig)?;
    }
    if let ReferencePlan::Stored { golden, .. } = &reference {
        if golden.manifest.samples.len() != dataset.len() {
            return Err(crate::foundation::error::bad_golden(format!(
                "the golden run holds {} samples and the set {}: a stored golden run must be of the set's samples, in order",
                golden.manifest.samples.len(),
                dataset.len()
            )));
        }
    }
    let mut softmax = signature.softmax_axes.clone();
    if let ReferencePlan::Model { signature: r, .. } = &reference {
        for (k, v) in &r.softmax_axes {
            softmax.entry(k.clone()).or_insert(*v);
        }
    }
    let classes = ClassAxisPolicy::parse(&opts.class_axis, softmax, &signature.outputs)?;
    let targets = targets::provision(requested, &provisioner)?;
    Ok(EvalPlan {
        model,
        signature,
        reference,
        targets,
        provisioner,
        classes,
        notes,
    })
}

/// The serving sessions of one run (several when the machine has cores to spare: sample `k` goes
/// to session `k mod n`), or how the run ended before it served anything.
pub type RunSessions = Result<Vec<ServeSession>, RunEnd>;

/// Every run's sessions: the reference's (none with a stored golden run) and each target's.
pub struct Started {
    pub executor: Executor,
    pub reference: Option<RunSessions>,
    pub targets: Vec<RunSessions>,
    /// Where each session's result file will be, per run (reference first).
    pub results: Vec<Vec<PathBuf>>,
}

/// How many sessions each run gets: `--jobs` shared by the runs, else the cores this process sees
/// (a cluster job's CPUs, when its engine confines it) shared by the threads one session of every
/// run keeps busy (the golden run's and `threads` per target); at least one each. The rule `plan`
/// sizes a job's memory with ([`crate::commands::shard::resources::sessions_per_run`]).
fn sessions_per_run(opts: &EvalOptions, (golden_runs, targets): (usize, usize), threads: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let set_threads = golden_runs * GOLDEN_INTRA_OP_THREADS + targets * threads;
    crate::commands::shard::resources::sessions_per_run(opts.exec.jobs, cores, golden_runs + targets, set_threads)
}

/// Starts every session, pinning the models' inputs to the shapes of `first` (the set's first
/// sample); sessions start at once, so the slow compilers (QNN) overlap.
pub fn start(opts: &EvalOptions, plan: &EvalPlan, first: &Sample) -> Result<Started> {
    let executor = Executor::new(&opts.exec)?;
    executor.expect_model_bytes(plan.model.total_bytes());
    let work = executor.work().to_path_buf();
    let samples = vec![first
        .inputs
        .iter()
        .map(|(name, tensor)| NamedTensor {
            name: name.clone(),
            tensor: tensor.clone(),
        })
        .collect()];
    let provenance = InputProvenance {
        source: "files".into(),
        samples: 1,
        generators: Vec::new(),
        seed: None,
        files: vec![opts.dataset.path.display().to_string()],
    };
    let shapes = InputSet::for_model(&plan.signature, samples, provenance)?;
    let mut notes = Vec::new();
    let model = model_for_workers(&plan.model, &shapes, &work, "model.onnx", &mut notes)?;
    let running = plan.targets.iter().filter(|t| t.runtime.is_ok()).count();
    let golden_runs = usize::from(matches!(plan.reference, ReferencePlan::Model { .. }));
    let threads = executor.threads();
    let per_run = sessions_per_run(opts, (golden_runs, running), threads);
    let timeout = opts.exec.timeout;
    let mut results = Vec::new();
    let mut jobs: Vec<Vec<(crate::execution::exec::Job, PathBuf)>> = Vec::new();
    if let ReferencePlan::Model { model: reference, .. } = &plan.reference {
        let cpu = cpu_runtime(&plan.provisioner)?;
        let path = model_for_workers(reference, &shapes, &work, "reference.onnx", &mut Vec::new())?;
        jobs.push(
            (0..per_run)
                .map(|s| {
                    reference_job(
                        &cpu,
                        path.clone(),
                        &[],
                        &work.join(format!("golden-{s}")),
                        &shapes.free_dims,
                    )
                })
                .collect(),
        );
    }
    for (i, t) in plan.targets.iter().enumerate() {
        let runs: Vec<(crate::execution::exec::Job, PathBuf)> = (0..per_run)
            .filter_map(|s| target_job(i * 1000 + s, t, (&model, Whole), &[], &work, threads, &shapes.free_dims))
            .map(|(job, dir)| (executor.prepared(job), dir))
            .collect();
        jobs.push(runs);
    }
    for run in &jobs {
        results.push(run.iter().map(|(job, _)| job.output_dir.join("result.json")).collect());
    }
    // Every worker is spawned on this thread, which keeps them (they die with the thread that
    // starts them), and they create their sessions at once: the slow compilers overlap.
    let spawned: Vec<Result<Vec<ServeSession>, RunEnd>> = jobs.iter().map(|run| spawn_run(run, timeout)).collect();
    let mut started: Vec<RunSessions> = spawned
        .into_iter()
        .map(|run| run.and_then(|sessions| sessions.into_iter().map(ready).collect()))
        .collect();
    let reference = (golden_runs == 1).then(|| started.remove(0));
    let targets = plan
        .targets
        .iter()
        .zip(started)
        .map(|(t, s)| match &t.runtime {
            Err(why) => Err(ended(RunStatus::Unavailable, why.clone())),
            Ok(_) => s,
        })
        .collect();
    Ok(Started {
        executor,
        reference,
        targets,
        results,
    })
}

/// Starts one run's workers; the first that cannot start ends the run.
fn spawn_run(jobs: &[(crate::execution::exec::Job, PathBuf)], timeout: Duration) -> Result<Vec<ServeSession>, RunEnd> {
    if jobs.is_empty() {
        return Err(ended(RunStatus::Unavailable, "no runtime for this target".into()));
    }
    jobs.iter()
        .map(|(job, dir)| {
            std::fs::create_dir_all(dir).map_err(|e| ended(RunStatus::Crashed, e.to_string()))?;
            ServeSession::spawn(job, dir, timeout).map_err(stopped)
        })
        .collect()
}

/// A session once its worker has created it; a session that fails ends its run (with the
/// runtime's words).
fn ready(session: ServeSession) -> Result<ServeSession, RunEnd> {
    session.await_ready().map_err(stopped)
}

fn stopped(s: Stopped) -> RunEnd {
    ended(s.status.into(), s.error)
}

/// How a run ended.
pub fn ended(status: RunStatus, error: String) -> RunEnd {
    RunEnd {
        status,
        error: Some(error),
    }
}
