//! The Execute stage of `compare`: the inputs and models written for the workers, the golden run
//! (when the reference is a model) and one job per target that can run, all run by the
//! [`Executor`].

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::plan::AuditPlan;
use super::reference::ReferencePlan;
use crate::analyses::placement::targets::INSPECT_LIMIT_BYTES;
use crate::analyses::stream::StreamSpec;
use crate::data::inputs::InputFile;
use crate::data::target::Backend;
use crate::execution::exec::executor::{cpu_runtime, model_for_workers, reference_job, target_job};
use crate::execution::exec::{Executor, Job, ModelScope, Outcome, OutputFile};
use crate::execution::runtime::Runtime;

/// What ran.
pub struct Executed {
    /// Per sample, every input as the workers read it.
    pub input_files: Vec<Vec<InputFile>>,
    /// Every job's outcome: the golden run first (when there is one), then the targets'.
    pub outcomes: Vec<Outcome>,
    /// Whether `outcomes[0]` is the golden run.
    pub golden_ran: bool,
    /// Per planned target, the index of its outcome (`None`: its runtime is unavailable).
    pub job_of: Vec<Option<usize>>,
    /// Per planned target, the index of its thread-probe run's outcome (with `--repeat`).
    pub probe_of: Vec<Option<usize>>,
    /// The CPU build of the golden run.
    pub cpu: Option<Runtime>,
    /// `--stream --teacher-forcing`: per planned target, its teacher-forced run (the golden
    /// state fed at every step), when the target and the golden run ran.
    pub teacher_forced: Vec<Option<Outcome>>,
    pub notes: Vec<String>,
}

impl Executed {
    /// The golden run's outcome, when the reference is a model.
    pub fn golden(&self) -> Option<&Outcome> {
        self.outcomes.first().filter(|_| self.golden_ran)
    }

    /// Target `i`'s outcome, when it ran.
    pub fn outcome(&self, i: usize) -> Option<&Outcome> {
        self.job_of.get(i).copied().flatten().map(|j| &self.outcomes[j])
    }

    /// Target `i`'s thread-probe run, when there was one.
    pub fn probe(&self, i: usize) -> Option<&Outcome> {
        self.probe_of.get(i).copied().flatten().map(|j| &self.outcomes[j])
    }
}

/// Writes the inputs and models, then runs the golden run and every target at once; `scope`
/// says whether the audited model's compiled QNN contexts are stored.
pub fn run(plan: &AuditPlan, executor: &Executor, repeat: Repeat, scope: ModelScope) -> Result<Executed> {
    let work = executor.work();
    let mut notes = Vec::new();
    let input_files = plan.inputs.write(&work.join("inputs"))?;
    let audited = model_for_workers(&plan.model, &plan.inputs, work, "model.onnx", &mut notes)?;
    let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
    let cpu = match &plan.reference {
        ReferencePlan::Model { model, .. } => {
            let cpu = cpu_runtime(&plan.provisioner)?;
            let path = model_for_workers(model, &plan.inputs, work, "reference.onnx", &mut Vec::new())?;
            jobs.push(reference_job(
                &cpu,
                path,
                &input_files,
                &work.join("golden"),
                &plan.inputs.free_dims,
            ));
            Some(cpu)
        }
        ReferencePlan::Stored { .. } => None,
    };
    let golden_ran = !jobs.is_empty();
    let inspect = plan.model.total_bytes() < INSPECT_LIMIT_BYTES;
    if !inspect {
        notes.push(
            "the model is over 1 GiB: placement is read from the assignment alone, without the runtime's partitioned graph"
                .into(),
        );
    }
    let job_of = target_jobs(
        plan,
        executor,
        (&audited, scope),
        &input_files,
        inspect,
        repeat.runs,
        &mut jobs,
    );
    let probe_of = probe_jobs(plan, &job_of, repeat, &mut jobs);
    if let Some(stream) = &plan.stream {
        for (job, _) in &mut jobs {
            job.feedback = stream.feedback.clone();
        }
    }
    let outcomes = executor.run(&jobs)?;
    let teacher_forced = match plan.stream.as_ref().filter(|s| s.teacher_forcing && golden_ran) {
        Some(stream) => teacher_forced_runs(stream, &jobs, &job_of, &outcomes, executor)?,
        None => vec![None; plan.targets.len()],
    };
    Ok(Executed {
        input_files,
        outcomes,
        golden_ran,
        job_of,
        probe_of,
        cpu,
        teacher_forced,
        notes,
    })
}

/// Every target that ran its stream runs it again with the golden run's state as each step's
/// state input (the first step's is the stream's initial state): the same steps as independent
/// samples, no feedback.
fn teacher_forced_runs(
    stream: &StreamSpec,
    jobs: &[(Job, PathBuf)],
    job_of: &[Option<usize>],
    outcomes: &[Outcome],
    executor: &Executor,
) -> Result<Vec<Option<Outcome>>> {
    let golden = match outcomes.first().and_then(|o| o.result.as_ref()).filter(|r| r.ok) {
        Some(r) => &r.outputs,
        None => return Ok(vec![None; job_of.len()]),
    };
    let ran = |j: usize| outcomes[j].status == crate::execution::exec::RunStatus::Ok;
    let mut forced: Vec<(Job, PathBuf)> = Vec::new();
    let mut index_of = Vec::with_capacity(job_of.len());
    for j in job_of {
        let Some(j) = j.filter(|j| ran(*j)) else {
            index_of.push(None);
            continue;
        };
        let (job, dir) = &jobs[j];
        let dir = dir.with_file_name(format!(
            "{}-teacher",
            dir.file_name().unwrap_or_default().to_string_lossy()
        ));
        let samples = golden_state_samples(stream, &job.samples, golden);
        forced.push((
            Job {
                samples,
                feedback: Vec::new(),
                inspect_placement: false,
                repeat: 1,
                output_dir: dir.join("out"),
                ..job.clone()
            },
            dir,
        ));
        index_of.push(Some(forced.len() - 1));
    }
    if forced.is_empty() {
        return Ok(vec![None; job_of.len()]);
    }
    let mut outcomes = executor.run(&forced)?.into_iter().map(Some).collect::<Vec<_>>();
    Ok(index_of
        .into_iter()
        .map(|i| i.and_then(|i| outcomes[i].take()))
        .collect())
}

/// The steps with each fed-back input replaced, from the second step on, by the golden run's
/// output of the step before.
fn golden_state_samples(
    stream: &StreamSpec,
    samples: &[Vec<InputFile>],
    golden: &[Vec<OutputFile>],
) -> Vec<Vec<InputFile>> {
    samples
        .iter()
        .enumerate()
        .map(|(k, sample)| {
            sample
                .iter()
                .map(|input| {
                    let fed = stream.feedback.iter().find(|f| f.input == input.name);
                    let previous = k.checked_sub(1).and_then(|p| golden.get(p));
                    match fed
                        .zip(previous)
                        .and_then(|(f, files)| files.iter().find(|o| o.name == f.output))
                    {
                        Some(file) => InputFile {
                            name: input.name.clone(),
                            path: file.path.clone(),
                        },
                        None => input.clone(),
                    }
                })
                .collect()
        })
        .collect()
}

/// How often every sample runs, and the threads of the extra run that probes thread
/// sensitivity (only with more than one run).
#[derive(Debug, Clone, Copy)]
pub struct Repeat {
    pub runs: usize,
    pub thread_probe: usize,
}

/// With more than one run per sample: a second job per target, the same but with
/// `thread_probe` intra-op threads. Returns each target's probe job index.
fn probe_jobs(
    plan: &AuditPlan,
    job_of: &[Option<usize>],
    repeat: Repeat,
    jobs: &mut Vec<(Job, PathBuf)>,
) -> Vec<Option<usize>> {
    if repeat.runs < 2 {
        return vec![None; plan.targets.len()];
    }
    job_of
        .iter()
        .map(|j| {
            let (job, dir) = jobs.get((*j)?)?.clone();
            let dir = dir.with_file_name(format!(
                "{}-threads{}",
                dir.file_name()?.to_string_lossy(),
                repeat.thread_probe
            ));
            let probe = Job {
                intra_threads: repeat.thread_probe,
                repeat: 1,
                inspect_placement: false,
                output_dir: dir.join("out"),
                ..job
            };
            jobs.push((probe, dir));
            Some(jobs.len() - 1)
        })
        .collect()
}

/// Adds one job per target that can run to `jobs`; returns each target's job index.
fn target_jobs(
    plan: &AuditPlan,
    executor: &Executor,
    model: (&Path, ModelScope),
    input_files: &[Vec<InputFile>],
    inspect: bool,
    repeat: usize,
    jobs: &mut Vec<(Job, PathBuf)>,
) -> Vec<Option<usize>> {
    let threads = executor.threads();
    plan.targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (mut job, dir) = target_job(
                i,
                t,
                model,
                input_files,
                executor.work(),
                threads,
                &plan.inputs.free_dims,
            )?;
            job.inspect_placement = inspect && !matches!(t.spec.backend, Backend::Cpu);
            job.repeat = repeat.max(1);
            jobs.push((job, dir));
            Some(jobs.len() - 1)
        })
        .collect()
}
