//! Where the loops run: the reference's parts on the CPU EP (the golden run's settings) and each
//! target's parts, one serving worker per part, every run on its own thread. The reference works
//! each sample first (a decode, or a scored window) and hands its tokens and logits to every
//! target as soon as it has them, so the slow targets (the QNN simulator) start on sample 1 while
//! the reference is on sample 2. What is done with a sample is a [`SampleWork`]'s: the same
//! sessions serve `--task generate|transcribe` and `--task score`.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::decode::{PartFailure, PartOutputs, PartRunner};
use super::explain::DivergentCall;
use super::spec::{GenerationSpec, Part, PartFile, PartKind};
use super::{GenSample, GenerationOptions, Specs};
use crate::data::tensor::Tensor;
use crate::execution::exec::executor::{cpu_runtime, reference_job, target_job};
use crate::execution::exec::selection as targets;
use crate::execution::exec::serve::ServeSession;
use crate::execution::exec::ModelScope::Whole;
use crate::execution::exec::{Executor, Job, PlannedTarget};
use crate::execution::runtime::Provisioner;
use crate::report::generation::PartRun;
use crate::report::RunStatus;

/// The reference's side and each target's of the channels that hand the reference's work over.
type Channels<R> = (Vec<SyncSender<Arc<R>>>, Vec<Receiver<Arc<R>>>);

/// Samples the reference may decode ahead of the slowest target.
const REFERENCE_AHEAD: usize = 2;

/// The inputs of a part call a target's work kept for `--explain`.
pub type KeptCall = (PartKind, Vec<(String, Tensor)>);

/// What a run does with each sample: the reference's work, handed to every target's thread, and
/// each target's against it.
pub trait SampleWork: Sync {
    /// The reference's result for one sample.
    type Reference: Send + Sync;
    /// A target's result for one sample.
    type Target: Send;
    /// The progress line's name for the work (`generate`, `score`).
    const LABEL: &'static str;
    /// The reference's work on one sample; its failure ends the audit.
    fn reference(&self, runner: &mut dyn PartRunner, sample: &Tensor) -> Result<Self::Reference, PartFailure>;
    /// What the report keeps of the reference's result once every target has it (without the
    /// logits only targets need).
    fn kept(&self, reference: &Self::Reference) -> Self::Reference;
    /// A target's work on one sample against the reference's, with the part call to explain
    /// when `keep_call` (`--explain`).
    fn target(
        &self,
        runner: &mut dyn PartRunner,
        sample: &Tensor,
        reference: &Self::Reference,
        keep_call: bool,
    ) -> (Self::Target, Option<KeptCall>);
}

/// A target's run: how it ended, its parts' sessions, its work on each sample it reached.
pub struct TargetRun<T> {
    pub planned: PlannedTarget,
    pub status: RunStatus,
    pub error: Option<String>,
    pub runtime: Option<String>,
    pub parts: Vec<PartRun>,
    /// One per sample, in order, until the run ended.
    pub decodes: Vec<T>,
    /// `--explain`: the first K divergent part calls, with their inputs.
    pub divergent_calls: Vec<DivergentCall>,
}

/// Every run's work on the set.
pub struct Decoded<W: SampleWork> {
    pub reference: Vec<W::Reference>,
    pub targets: Vec<TargetRun<W::Target>>,
}

/// One file of a part as a run starts it: the part, the file's name (`None` for a part of one
/// file), the inputs it takes, its job and work directory.
pub struct FileJob {
    pub part: PartKind,
    pub file: Option<String>,
    pub inputs: Vec<String>,
    pub job: Job,
    pub dir: std::path::PathBuf,
}

/// A file's serving session.
struct FileSession {
    part: PartKind,
    file: Option<String>,
    inputs: Vec<String>,
    session: ServeSession,
}

/// A run's serving sessions, one per file of every part, as a [`PartRunner`]: a part of several
/// files runs them in order, each fed its inputs by name from the part's and the earlier files'
/// tensors. A file whose worker stopped (crashed, timed out) ends the run, and every later call
/// says so.
struct Sessions<'p> {
    files: Vec<FileSession>,
    dead: Option<PartFailure>,
    /// Where each token decoded is counted (the progress line), and as which run.
    progress: Option<(&'p Mutex<Progress>, usize)>,
}

impl PartRunner for Sessions<'_> {
    fn run(&mut self, part: PartKind, inputs: Vec<(String, Tensor)>) -> Result<PartOutputs, PartFailure> {
        if let Some(dead) = &self.dead {
            return Err(dead.clone());
        }
        let fed = inputs.len();
        let mut pool = inputs;
        let mut ran = false;
        for f in self.files.iter_mut().filter(|f| f.part == part) {
            ran = true;
            let feed: Vec<(String, Tensor)> = pool
                .iter()
                .filter(|(name, _)| f.inputs.contains(name))
                .cloned()
                .collect();
            let failure = |status: RunStatus, error: String| PartFailure {
                part: Some(part),
                file: f.file.clone(),
                status,
                error,
            };
            f.session.send(&feed);
            match f.session.receive() {
                Ok(Ok(outputs)) => pool.extend(outputs),
                Ok(Err(error)) => return Err(failure(RunStatus::Failed, error)),
                Err(stopped) => {
                    let failed = failure(stopped.status.into(), stopped.error);
                    self.dead = Some(failed.clone());
                    return Err(failed);
                }
            }
        }
        if !ran {
            return Err(PartFailure {
                part: Some(part),
                file: None,
                status: RunStatus::Failed,
                error: "no session for this part".into(),
            });
        }
        Ok(pool.split_off(fed))
    }

    fn token(&mut self) {
        if let Some((progress, run)) = self.progress {
            if let Ok(mut p) = progress.lock() {
                p.tick(run, 1, false);
            }
        }
    }
}

impl<'p> Sessions<'p> {
    /// Starts one worker per file of every part (all at once, so compilers overlap) and waits
    /// for each; the first file whose session cannot be made ends the run, named.
    fn start(
        jobs: Vec<FileJob>,
        timeout: Duration,
        progress: (&'p Mutex<Progress>, usize),
    ) -> Result<Sessions<'p>, PartFailure> {
        let mut spawned = Vec::new();
        for j in jobs {
            let fail = |status: RunStatus, error: String| PartFailure {
                part: Some(j.part),
                file: j.file.clone(),
                status,
                error,
            };
            std::fs::create_dir_all(&j.dir).map_err(|e| fail(RunStatus::Crashed, e.to_string()))?;
            let s = ServeSession::spawn(&j.job, &j.dir, timeout).map_err(|s| fail(s.status.into(), s.error))?;
            spawned.push((j, s));
        }
        let mut files = Vec::new();
        for (j, s) in spawned {
            let session = s.await_ready().map_err(|s| PartFailure {
                part: Some(j.part),
                file: j.file.clone(),
                status: s.status.into(),
                error: s.error,
            })?;
            files.push(FileSession {
                part: j.part,
                file: j.file,
                inputs: j.inputs,
                session,
            });
        }
        Ok(Sessions {
            files,
            dead: None,
            progress: Some(progress),
        })
    }

    /// What each file's session did: creation, context, runs, placement.
    fn summary(&self, target_ep: &str) -> Vec<PartRun> {
        self.files
            .iter()
            .map(|f| {
                let (s, r) = (&f.session, &f.session.ready);
                let total: usize = r.placement.iter().map(|g| g.nodes.len()).sum();
                let on_ep: usize = r
                    .placement
                    .iter()
                    .filter(|g| g.ep == target_ep)
                    .map(|g| g.nodes.len())
                    .sum();
                PartRun {
                    part: f.part.name().into(),
                    file: f.file.clone(),
                    session_create_ms: r.session_create_ms,
                    intra_op_threads: r.intra_threads,
                    qnn_context: r
                        .context
                        .and_then(|c| serde_json::to_value(c).ok())
                        .and_then(|v| v.as_str().map(str::to_string)),
                    runs: s.answered(),
                    mean_run_ms: s.mean_run_ms(),
                    nodes_on_ep: (total > 0).then_some([on_ep, total]),
                }
            })
            .collect()
    }
}

/// Per-token progress shared by the runs: tokens decoded and samples done per run, for the line
/// that says how far each is and how long is left.
struct Progress {
    label: &'static str,
    started: Instant,
    samples: usize,
    runs: Vec<(String, usize, usize)>,
}

impl Progress {
    /// The time the slowest run still needs: a run that finished samples, at its time per
    /// sample; one still on its first, at its rate per step over the steps the reference took
    /// (once the reference has decoded the whole set).
    fn time_left(&self) -> Option<Duration> {
        let elapsed = self.started.elapsed().as_secs_f64();
        let (_, reference_steps, reference_done) = self.runs.first()?;
        let reference_complete = *reference_done == self.samples;
        let mut left: Option<f64> = None;
        for (_, steps, done) in &self.runs {
            let run_left = if *done >= self.samples {
                0.0
            } else if *done > 0 {
                elapsed / *done as f64 * (self.samples - done) as f64
            } else if reference_complete && *steps > 0 {
                elapsed / *steps as f64 * reference_steps.saturating_sub(*steps) as f64
            } else {
                return None;
            };
            left = Some(left.map_or(run_left, |l: f64| l.max(run_left)));
        }
        left.map(Duration::from_secs_f64)
    }

    fn tick(&mut self, run: usize, tokens: usize, sample_done: bool) {
        let label = self.label;
        let entry = &mut self.runs[run];
        entry.1 += tokens;
        if sample_done {
            entry.2 += 1;
        }
        let left = self.time_left().map_or(String::new(), |d| {
            format!("; about {} left", crate::foundation::console::elapsed_text(d))
        });
        let each: Vec<String> = self
            .runs
            .iter()
            .map(|(id, tokens, done)| format!("{id} {done}/{} ({tokens} steps)", self.samples))
            .collect();
        crate::foundation::console::activity(format!("{label}: {}{left}", each.join(", ")));
    }
}

/// Every run's jobs: the targets as planned, the reference's files' jobs, each target's (`None`:
/// no runtime for it here), and the executor whose work directory they write in.
struct Jobs {
    _executor: Executor,
    planned: Vec<PlannedTarget>,
    reference: Vec<FileJob>,
    targets: Vec<Option<Vec<FileJob>>>,
}

/// Plans the targets and prepares a job per file of every part, on the reference and on each.
fn plan_jobs(opts: &GenerationOptions, specs: &Specs) -> Result<Jobs> {
    let requested = targets::targets(
        opts.targets.as_deref(),
        &opts.allow_failure,
        opts.baseline,
        &opts.policy.releases,
    )?;
    let provisioner = Provisioner::new(&opts.exec.runtimes)?;
    let planned = targets::provision(requested, &provisioner)?;
    let cpu = cpu_runtime(&provisioner)?;
    let executor = Executor::new(&opts.exec)?;
    let bytes: u64 = specs
        .audited
        .parts
        .iter()
        .flat_map(|p| &p.files)
        .map(|f| f.model.total_bytes())
        .sum();
    executor.expect_model_bytes(bytes);
    let work_dir = executor.work().to_path_buf();
    let reference: Vec<FileJob> = files_of(specs.reference())
        .map(|(p, k, f)| {
            let (job, dir) = reference_job(
                &cpu,
                f.path.clone(),
                &[],
                &work_dir.join(format!("golden-{}-{k}", p.kind)),
                &[],
            );
            file_job(p, f, job, dir)
        })
        .collect();
    let targets: Vec<Option<Vec<_>>> = planned
        .iter()
        .enumerate()
        .map(|(i, t)| jobs_of(&executor, &specs.audited, i, t, &work_dir))
        .collect();
    Ok(Jobs {
        _executor: executor,
        planned,
        reference,
        targets,
    })
}

/// Does `work` on every sample of the set on the reference and on every target.
pub fn run_all<W: SampleWork>(
    opts: &GenerationOptions,
    specs: &Specs,
    samples: &[GenSample],
    work: &W,
) -> Result<Decoded<W>> {
    let Jobs {
        _executor,
        planned,
        reference: reference_jobs,
        targets: target_jobs,
    } = plan_jobs(opts, specs)?;
    let timeout = opts.exec.timeout;
    let explain = opts.explain;
    let progress = Mutex::new(Progress {
        label: W::LABEL,
        started: Instant::now(),
        samples: samples.len(),
        runs: std::iter::once("reference".to_string())
            .chain(planned.iter().map(|t| t.spec.id.clone()))
            .map(|id| (id, 0, 0))
            .collect(),
    });
    let _beat =
        crate::foundation::console::TerminalHeartbeat::start(format!("{}: {} samples", W::LABEL, samples.len()));
    // The reference runs at most a few samples ahead of the slowest target: its logits (a
    // vocabulary per step) are held only until every target has compared with them.
    let (senders, receivers): Channels<W::Reference> = planned.iter().map(|_| sync_channel(REFERENCE_AHEAD)).unzip();
    let (reference, targets) = std::thread::scope(|scope| {
        let progress = &progress;
        let handles: Vec<_> = planned
            .iter()
            .zip(target_jobs)
            .zip(receivers)
            .enumerate()
            .map(|(i, ((t, jobs), rx))| {
                scope.spawn(move || run_target(work, t, jobs, samples, (rx, timeout), (progress, i + 1, explain)))
            })
            .collect();
        let reference = run_reference(work, reference_jobs, samples, (senders, timeout), progress);
        let targets: Vec<TargetRun<W::Target>> = handles
            .into_iter()
            .zip(&planned)
            .map(|(h, t)| {
                h.join()
                    .unwrap_or_else(|_| ended(t, RunStatus::Crashed, "the target's thread panicked".into()))
            })
            .collect();
        (reference, targets)
    });
    Ok(Decoded {
        reference: reference?,
        targets,
    })
}

/// Every file of a spec's parts, in the order they run: its part, its place in the spec, the file.
fn files_of(spec: &GenerationSpec) -> impl Iterator<Item = (&Part, usize, &PartFile)> {
    spec.parts
        .iter()
        .flat_map(|p| p.files.iter().map(move |f| (p, f)))
        .enumerate()
        .map(|(k, (p, f))| (p, k, f))
}

/// A file's job as the run starts it: named when its part has several files.
fn file_job(part: &Part, file: &PartFile, job: Job, dir: std::path::PathBuf) -> FileJob {
    FileJob {
        part: part.kind,
        file: (part.files.len() > 1).then(|| file.name()),
        inputs: file.signature.inputs.iter().map(|i| i.name.clone()).collect(),
        job,
        dir,
    }
}

/// A target's jobs, one per file of every part (`None`: no runtime for it here).
fn jobs_of(
    executor: &Executor,
    spec: &GenerationSpec,
    index: usize,
    t: &PlannedTarget,
    work: &Path,
) -> Option<Vec<FileJob>> {
    files_of(spec)
        .map(|(p, k, f)| {
            let (mut job, _) = target_job(index * 100 + k, t, (&f.path, Whole), &[], work, executor.threads(), &[])?;
            job.inspect_placement = false;
            let job = executor.prepared(job);
            let dir = job.output_dir.clone();
            Some(file_job(p, f, job, dir))
        })
        .collect()
}

/// The reference's work on every sample, each handed to every target as soon as it is done.
/// A reference that cannot start, or that fails on a sample, ends the audit: without it nothing
/// can be compared.
fn run_reference<W: SampleWork>(
    work: &W,
    jobs: Vec<FileJob>,
    samples: &[GenSample],
    (senders, timeout): (Vec<SyncSender<Arc<W::Reference>>>, Duration),
    progress: &Mutex<Progress>,
) -> Result<Vec<W::Reference>> {
    let mut sessions = Sessions::start(jobs, timeout, (progress, 0))
        .map_err(|f| reference_failed(format!("the fp32 reference did not start on the CPU EP: {}", f.words())))?;
    let mut decodes = Vec::with_capacity(samples.len());
    for s in samples {
        if crate::foundation::interrupt::stopping() {
            break;
        }
        let d = work
            .reference(&mut sessions, &s.input)
            .map_err(|f| reference_failed(format!("the fp32 reference failed on sample {}: {}", s.id, f.words())))?;
        if let Ok(mut p) = progress.lock() {
            p.tick(0, 0, true);
        }
        let kept = work.kept(&d);
        let shared = Arc::new(d);
        for tx in &senders {
            let _ = tx.send(shared.clone());
        }
        decodes.push(kept);
    }
    Ok(decodes)
}

/// A target's work on every sample, each once the reference's is there.
fn run_target<W: SampleWork>(
    work: &W,
    t: &PlannedTarget,
    jobs: Option<Vec<FileJob>>,
    samples: &[GenSample],
    (rx, timeout): (Receiver<Arc<W::Reference>>, Duration),
    (progress, run, explain): (&Mutex<Progress>, usize, usize),
) -> TargetRun<W::Target> {
    let Some(jobs) = jobs.filter(|_| t.runtime.is_ok()) else {
        let why = t
            .runtime
            .as_ref()
            .err()
            .cloned()
            .unwrap_or_else(|| "no runtime for this target".into());
        return ended(t, RunStatus::Unavailable, why);
    };
    let ep = jobs.first().map_or_else(String::new, |j| ep_name(&j.job).to_string());
    let mut sessions = match Sessions::start(jobs, timeout, (progress, run)) {
        Ok(s) => s,
        Err(f) => return ended(t, f.status, f.words()),
    };
    let runtime = runtime_words(t, &sessions);
    let mut decodes = Vec::new();
    let mut explained = Vec::new();
    for s in samples {
        let Ok(reference) = rx.recv() else { break };
        let keep = explained.len() < explain;
        let (d, call) = work.target(&mut sessions, &s.input, &reference, keep);
        if let Some((part, inputs)) = call {
            explained.push(DivergentCall {
                sample: decodes.len(),
                part,
                inputs,
            });
        }
        if let Ok(mut p) = progress.lock() {
            p.tick(run, 0, true);
        }
        decodes.push(d);
        if sessions.dead.is_some() {
            break;
        }
    }
    let (status, error) = match &sessions.dead {
        Some(f) => (f.status, Some(f.words())),
        None if decodes.len() < samples.len() => (RunStatus::Crashed, Some("the audit was interrupted".into())),
        None => (RunStatus::Ok, None),
    };
    TargetRun {
        planned: t.clone(),
        status,
        error,
        runtime,
        parts: sessions.summary(&ep),
        decodes,
        divergent_calls: explained,
    }
}

/// The EP a target's job asks for (the CPU EP's name for a CPU target).
fn ep_name(job: &Job) -> &str {
    match &job.ep {
        crate::execution::exec::EpSetup::Cpu { .. } => "CPUExecutionProvider",
        crate::execution::exec::EpSetup::Plugin { ep_name, .. }
        | crate::execution::exec::EpSetup::BuiltIn { ep_name, .. } => ep_name,
    }
}

/// The runtime a target ran on, in words: the core's release as its library states it, and the
/// plugin's.
fn runtime_words(t: &PlannedTarget, sessions: &Sessions) -> Option<String> {
    let rt = t.runtime.as_ref().ok()?;
    let core = sessions
        .files
        .first()
        .and_then(|f| f.session.ready.ort_version.clone())
        .unwrap_or_else(|| rt.host.version.clone().unwrap_or_default());
    Some(match &rt.plugin {
        Some(p) => format!(
            "onnxruntime {core} + {} {}",
            p.package,
            p.version.clone().unwrap_or_default()
        ),
        None => format!("{} {core}", rt.host.package),
    })
}

/// A target that ran nothing.
fn ended<T>(t: &PlannedTarget, status: RunStatus, error: String) -> TargetRun<T> {
    TargetRun {
        planned: t.clone(),
        status,
        error: Some(error),
        runtime: None,
        parts: Vec::new(),
        decodes: Vec::new(),
        divergent_calls: Vec::new(),
    }
}

/// The reference could not decode: nothing can be compared (exit 4, as a golden run that fails).
fn reference_failed(message: String) -> anyhow::Error {
    crate::foundation::error::RunError(message).into()
}
