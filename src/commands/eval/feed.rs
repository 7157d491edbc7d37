//! The set streamed through every run: samples read one at a time, sent ahead to each run's
//! sessions (a few in flight per session, so every process stays busy), answers reduced at once to
//! records and appended to the checkpoint, nothing else kept. Memory holds the records and the
//! samples in flight, whatever the set's size.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::Path;

use anyhow::Result;

use super::checkpoint::{input_digest, Checkpoint, Resumed};
use super::sessions::{self, EvalPlan, RunSessions};
use super::{check_task, EvalOptions, Records, RunEnd};
use crate::analyses::accuracy::decide::{replay, Decider, Limits};
use crate::analyses::accuracy::task::{Task, Truth};
use crate::analyses::accuracy::Record;
use crate::analyses::metrics::ErrorStats;
use crate::commands::compare::reference::ReferencePlan;
use crate::data::dataset::{Dataset, Sample};
use crate::data::tensor::Tensor;
use crate::execution::exec::job::JobResult;
use crate::execution::exec::serve::{Answer, ServeSession};
use crate::foundation::error::{bad_input, run_error};
use crate::report::common::Num;
use crate::report::RunStatus;

/// Samples in flight per session.
const WINDOW: usize = 4;

/// One run's records and how it ended.
pub struct RunRecords {
    /// `reference`, or the target's id.
    pub id: String,
    pub records: Vec<Record>,
    /// `None`: it answered every sample.
    pub end: Option<RunEnd>,
    /// What its sessions measured (their runtime, placement, run times).
    pub results: Vec<JobResult>,
}

/// Every run of an eval, reduced to records.
pub struct Runs {
    pub task: Task,
    pub reference: RunRecords,
    /// One per planned target, in the plan's order.
    pub targets: Vec<RunRecords>,
    /// The SHA-256 of every sample's id and truth as the task reads its label (`None` for
    /// `agree`, whose truths are the reference's own): what a shard's records must agree with.
    pub truths_sha256: Option<String>,
    /// How many values the task's output has (every class a prediction names is below it).
    pub output_len: usize,
}

/// The SHA-256 of `(id, truth)` of every sample in the order fed, one JSON array a line; `None`
/// when a sample has no truth from a label.
pub fn truths_sha256(ids: &[String], truths: &[Option<Truth>]) -> Option<String> {
    let mut text = String::new();
    for (id, truth) in ids.iter().zip(truths) {
        text.push_str(&serde_json::to_string(&(id, truth.as_ref()?)).ok()?);
        text.push('\n');
    }
    Some(crate::foundation::hash::sha256_hex(text.as_bytes()))
}

/// A run while the set streams: its sessions (none once it stopped) and what it recorded.
struct Live {
    id: String,
    /// The sample its first record is of (the window's start).
    start: usize,
    sessions: Vec<ServeSession>,
    end: Option<RunEnd>,
    records: Vec<Record>,
    /// Whether the checkpoint already says it stopped.
    marked: bool,
    /// `--until-decided`: its limits watched sample by sample (gated targets only).
    decider: Option<Decider>,
    /// What its sessions said of themselves, for sessions already stopped (once decided).
    finished: Vec<JobResult>,
}

impl Live {
    fn new(
        (id, start): (String, usize),
        sessions: Option<RunSessions>,
        records: Vec<Record>,
        end: Option<RunEnd>,
    ) -> Live {
        let marked = end.is_some();
        let (sessions, end) = match (end, sessions) {
            (Some(e), _) => (Vec::new(), Some(e)),
            (None, Some(Ok(s))) => (s, None),
            (None, Some(Err(e))) => (Vec::new(), Some(e)),
            (None, None) => (Vec::new(), None),
        };
        Live {
            id,
            start,
            sessions,
            end,
            records,
            marked,
            decider: None,
            finished: Vec::new(),
        }
    }

    /// Whether its limits are decided (it takes no more samples).
    fn decided(&self) -> bool {
        self.decider.as_ref().is_some_and(|d| d.decision().is_some())
    }

    /// Whether the eval waits for it: a gated target neither decided nor stopped.
    fn undecided(&self) -> bool {
        self.decider.is_some() && !self.decided() && self.end.is_none()
    }

    /// Stops its sessions at once (samples in flight are not wanted any more), keeping what they
    /// said of themselves.
    fn settle(&mut self) {
        self.finished.extend(self.sessions.drain(..).map(ServeSession::abandon));
    }

    /// The sample it records next.
    fn next_index(&self) -> usize {
        self.start + self.records.len()
    }

    /// Its record of sample `index`, if it made one.
    fn record_of(&self, index: usize) -> Option<&Record> {
        self.records.get(index.checked_sub(self.start)?)
    }

    fn answering(&self) -> bool {
        self.end.is_none() && !self.sessions.is_empty() && !self.decided()
    }

    /// Stops the run: its sessions killed, why kept.
    fn stop(&mut self, status: RunStatus, error: String) {
        self.sessions.clear();
        self.end = Some(RunEnd {
            status,
            error: Some(error),
        });
    }
}

/// The identity of the records: what must be the same for a records directory to be resumed.
pub(super) fn context(
    opts: &EvalOptions,
    plan: &EvalPlan,
    dataset: &Dataset,
    runs: &[String],
    window: &Range<usize>,
) -> serde_json::Value {
    let runtimes: Vec<String> = plan
        .targets
        .iter()
        .map(|t| match &t.runtime {
            Ok(rt) => format!("{} {}", t.spec.id, rt.host.library.display()),
            Err(_) => format!("{} unavailable", t.spec.id),
        })
        .collect();
    let mut context = serde_json::json!({
        "tool": env!("CARGO_PKG_VERSION"),
        "model": plan.model.sha256,
        "reference": match &plan.reference {
            ReferencePlan::Model { model, .. } => model.sha256.clone(),
            ReferencePlan::Stored { golden, .. } => golden.manifest.reference_model.sha256.clone(),
        },
        "dataset": dataset.path.display().to_string(),
        "ids": dataset.ids_sha256(),
        "labels": dataset.labels_from,
        "task": opts.task.identity(),
        "runs": runs,
        "runtimes": runtimes,
        "threads": opts.exec.threads,
        // Records of another kernel class would join two machines' figures in one report.
        "host": crate::foundation::host::this_host().isa_class,
    });
    // A shard's part of the set (a whole-set eval's context is what it always was).
    if *window != (0..dataset.len()) {
        context["window"] = serde_json::json!([window.start, window.end]);
    }
    // A sequential eval's order and the limits it decides: its records are of those.
    if let Some(sequential) = opts.stats.sequential {
        let limits: Vec<serde_json::Value> = plan
            .targets
            .iter()
            .map(|t| {
                let l = opts.policy.limits(&t.spec.id, None);
                serde_json::json!([
                    t.spec.id,
                    l.min_accuracy.map(|l| l.value),
                    l.max_accuracy_drop.map(|l| l.value)
                ])
            })
            .collect();
        context["order_seed"] = sequential.order_seed.into();
        context["limits"] = limits.into();
    }
    context
}

/// Streams the samples `window` of the set through every run of the plan and returns every run's
/// records, keeping them where `records` says (the checkpoint).
pub fn run(
    opts: &EvalOptions,
    plan: &EvalPlan,
    dataset: &Dataset,
    (window, records): (Range<usize>, &Records),
) -> Result<Runs> {
    let mut reader = dataset.samples(&plan.signature, window.start)?.take(window.len());
    let first = reader
        .next()
        .transpose()?
        .ok_or_else(|| bad_input("the set has no sample"))?;
    let run_ids: Vec<String> = std::iter::once("reference".to_string())
        .chain(plan.targets.iter().map(|t| t.spec.id.clone()))
        .collect();
    let mut started = sessions::start(opts, plan, &first)?;
    // The task and every label are checked against the reference's first answer before anything
    // is written.
    let first_golden = reference_outputs(plan, started.reference.as_mut(), &first)?;
    let (task, truths) = check_task(&opts.task, &plan.signature, &plan.classes, &first_golden, dataset)?;
    let context = context(opts, plan, dataset, &run_ids, &window);
    let records_dir = records_dir(records, &context, started.executor.work());
    let limits = super::decided_limits(opts, plan, dataset, &task);
    let (mut checkpoint, resumed) = open_records(&context, (&run_ids, &limits), &window, &records_dir)?;
    let output_len = first_golden
        .iter()
        .find(|(n, _)| *n == task.output)
        .map_or(0, |(_, t)| t.len());
    // The executor owns the work directory (the sessions' files, the default records): it lives
    // until the stream is done.
    let sessions::Started {
        executor: _work,
        reference: reference_sessions,
        targets: target_sessions,
        results,
    } = started;
    let check = ResumeCheck {
        plan,
        dataset,
        task: &task,
        output_len,
        dir: &records_dir,
        runs: &run_ids,
        window: window.clone(),
    };
    check_resumed(&check, &resumed)?;
    let decided_before = resumed.decided.clone();
    let (mut reference, mut targets) = live_runs(plan, (reference_sessions, target_sessions), resumed, window.start);
    let resume = take_up(
        &limits,
        (&task, &truths),
        (&mut reference, &mut targets),
        (&checkpoint, &records_dir, &decided_before),
    )?;
    let mut stream = Stream {
        plan,
        task: &task,
        truths: &truths,
        checkpoint: &mut checkpoint,
        total: window.len(),
    };
    let samples: Box<dyn Iterator<Item = Result<Sample>> + '_> = if resume == 0 {
        Box::new(std::iter::once(Ok(first)).chain(reader))
    } else {
        Box::new(
            dataset
                .samples(&plan.signature, window.start + resume)?
                .take(window.len() - resume),
        )
    };
    stream.all(samples, &mut reference, &mut targets)?;
    let (reference, targets) = finish_runs(plan, reference, targets, results);
    Ok(Runs {
        task,
        reference,
        targets,
        truths_sha256: truths_sha256(&dataset.ids, &truths),
        output_len,
    })
}

/// The directory `records` names for the records of `context` (`work`: the work directory), said
/// with `-v`.
fn records_dir(records: &Records, context: &serde_json::Value, work: &Path) -> std::path::PathBuf {
    let dir = match records {
        Records::Named(dir) => dir.clone(),
        Records::Cached => super::records_cache::cached_dir(context),
        Records::Work => work.join("records"),
    };
    crate::foundation::console::detail(format_args!("eval: records in {}", dir.display()));
    dir
}

/// Opens the records directory for the runs `run_ids` (reference first) of this eval over
/// `window`, with the limits a sequential eval decides for each target.
fn open_records(
    context: &serde_json::Value,
    (run_ids, limits): (&[String], &[Option<Limits>]),
    window: &Range<usize>,
    dir: &Path,
) -> Result<(Checkpoint, Resumed)> {
    let decidable: Vec<bool> = std::iter::once(false)
        .chain(limits.iter().map(Option::is_some))
        .collect();
    Checkpoint::open(dir, context, (run_ids, &decidable), (window.start, window.len()))
}

/// The largest output SQNR a record may hold: outputs of `f64` values cannot be farther apart
/// than about 6,200 dB, so a figure beyond this is not the tool's.
const MAX_RECORD_SQNR_DB: f64 = 10_000.0;

/// Checks that the records kept in a records directory are of the set's samples as they are now
/// and are records this eval could have made: no more of them than samples, each id its sample's,
/// each digest of the inputs fed the sample's (a sample edited since is refused, never mixed with
/// records of its old self), each prediction of the task's kind and classes, each SQNR a figure.
fn check_resumed(check: &ResumeCheck, resumed: &Resumed) -> Result<()> {
    let refuse = |why: String| {
        crate::foundation::error::bad_output(format!(
            "--records {}: {why}; give a new or empty directory to evaluate the set as it is",
            check.dir.display()
        ))
    };
    let total = check.window.len();
    for (run, records) in check.runs.iter().zip(&resumed.records) {
        if records.len() > total {
            return Err(refuse(format!(
                "{run} holds {} records for a set of {total} samples",
                records.len()
            )));
        }
        for r in records {
            let admitted = r
                .prediction
                .as_ref()
                .is_none_or(|p| check.task.admits(p, check.output_len));
            let sqnr = r.sqnr_db.map_or(0.0, |s| s.0);
            if !admitted || (sqnr.is_finite() && sqnr.abs() > MAX_RECORD_SQNR_DB) {
                return Err(refuse(format!(
                    "the record of sample {} is not one this eval makes (its prediction or SQNR)",
                    crate::foundation::console::printable(&r.id)
                )));
            }
        }
    }
    check_resumed_inputs(check, resumed, &refuse)
}

/// What resumed records are checked against.
struct ResumeCheck<'a> {
    plan: &'a EvalPlan,
    dataset: &'a Dataset,
    task: &'a Task,
    /// How many values the task's output has (every class a prediction may name is below it).
    output_len: usize,
    dir: &'a std::path::Path,
    /// The runs' ids, in the records' order.
    runs: &'a [String],
    /// The samples the records are of.
    window: Range<usize>,
}

/// Walks the samples the records cover and refuses (through `refuse`) the first whose id or
/// inputs are not the record's.
fn check_resumed_inputs(
    check: &ResumeCheck,
    resumed: &Resumed,
    refuse: &dyn Fn(String) -> anyhow::Error,
) -> Result<()> {
    let kept = resumed.records.iter().map(Vec::len).max().unwrap_or(0);
    if kept == 0 {
        return Ok(());
    }
    for sample in check
        .dataset
        .samples(&check.plan.signature, check.window.start)?
        .take(kept)
    {
        let sample = sample?;
        let digest = input_digest(&sample.inputs);
        let id = crate::foundation::console::printable(&sample.id);
        for (records, inputs) in resumed.records.iter().zip(&resumed.inputs) {
            let at = sample.index - check.window.start;
            let (Some(record), Some(input)) = (records.get(at), inputs.get(at)) else {
                continue;
            };
            if record.id != sample.id {
                return Err(refuse(format!(
                    "sample {id} is recorded as '{}': the set changed since it was recorded",
                    crate::foundation::console::printable(&record.id)
                )));
            }
            if *input != digest {
                return Err(refuse(format!("sample {id} changed since it was recorded")));
            }
        }
    }
    Ok(())
}

/// Judges resumed records again against the labels as they are now (a label corrected since the
/// records were made counts as corrected; a record's own verdict is never trusted).
fn rejudge(task: &Task, truths: &[Option<Truth>], reference: &mut Live, targets: &mut [Live]) {
    let label = |index: usize| truths.get(index).cloned().flatten();
    for r in &mut reference.records {
        let truth = label(r.index)
            .or_else(|| r.prediction.as_ref().and_then(Task::truth_of_prediction))
            .unwrap_or(Truth::Text(String::new()));
        judge_again(task, r, truth);
    }
    for live in targets {
        for r in &mut live.records {
            let truth = match reference.record_of(r.index) {
                Some(reference) => reference.truth.clone(),
                None => label(r.index).unwrap_or_else(|| r.truth.clone()),
            };
            judge_again(task, r, truth);
        }
    }
}

/// A record judged against `truth`, as the stream would have judged it.
fn judge_again(task: &Task, record: &mut Record, truth: Truth) {
    record.judged = record.judged_against(task, &truth);
    record.truth = truth;
}

/// Takes up what the records directory held: resumed records judged again against the labels as
/// they are now, and a sequential eval's gated targets given their deciders. Returns how many
/// samples every run already recorded.
fn take_up(
    limits: &[Option<Limits>],
    (task, truths): (&Task, &[Option<Truth>]),
    (reference, targets): (&mut Live, &mut [Live]),
    (checkpoint, dir, decided): (&Checkpoint, &Path, &[bool]),
) -> Result<usize> {
    let resume = reference.records.len();
    if resume > 0 {
        rejudge(task, truths, reference, targets);
        crate::foundation::console::note(format!(
            "eval: resuming after {resume} samples recorded in {}",
            dir.display()
        ));
    }
    watch(limits, (reference, targets), &decided[1..], (checkpoint, dir))?;
    Ok(resume)
}

/// Gives every gated target of a sequential eval its decider, with the records it already holds
/// taken in order (a resumed eval): a target they decide is settled at once, and one the records
/// directory says was decided must be decided exactly at its last record, or the records are not
/// this eval's.
fn watch(
    limits: &[Option<Limits>],
    (reference, targets): (&Live, &mut [Live]),
    marked: &[bool],
    (checkpoint, dir): (&Checkpoint, &Path),
) -> Result<()> {
    for ((live, limits), &marked) in targets.iter_mut().zip(limits).zip(marked) {
        let Some(decider) = limits.and_then(|l| replay(l, &live.records, &reference.records)) else {
            continue;
        };
        let at_end = decider.decision().is_some() && decider.samples() == live.records.len();
        if (marked || decider.decision().is_some()) && !at_end {
            return Err(crate::foundation::error::bad_output(format!(
                "--records {}: the records of {} do not decide its limits at their last sample, judged against the labels as they are now (the labels changed, or the records are not this eval's); give a new or empty directory",
                dir.display(),
                crate::foundation::console::printable(&live.id)
            )));
        }
        live.decider = Some(decider);
        if at_end {
            live.settle();
            if !marked {
                checkpoint.decided(&live.id)?;
            }
        }
    }
    Ok(())
}

/// Every run as the stream takes it: its sessions, and what the records directory already held
/// for it (its records, whether it had stopped).
fn live_runs(
    plan: &EvalPlan,
    (reference_sessions, target_sessions): (Option<RunSessions>, Vec<RunSessions>),
    resumed: Resumed,
    start: usize,
) -> (Live, Vec<Live>) {
    let mut kept = resumed.records.into_iter();
    let mut stopped = resumed.stopped.into_iter();
    let mut next = || (kept.next().unwrap_or_default(), stopped.next().flatten());
    let (records, end) = next();
    let reference = Live::new(("reference".into(), start), reference_sessions, records, end);
    let targets = plan
        .targets
        .iter()
        .zip(target_sessions)
        .map(|(t, s)| {
            let (records, end) = next();
            Live::new((t.spec.id.clone(), start), Some(s), records, end)
        })
        .collect();
    (reference, targets)
}

/// Every run's records once the set is done, with what its sessions measured (read from their
/// result files, `results` per run, reference first when it ran).
fn finish_runs(
    plan: &EvalPlan,
    reference: Live,
    targets: Vec<Live>,
    results: Vec<Vec<std::path::PathBuf>>,
) -> (RunRecords, Vec<RunRecords>) {
    let finish = |live: Live, results: &[std::path::PathBuf]| -> RunRecords {
        let results = live
            .finished
            .into_iter()
            .chain(live.sessions.into_iter().zip(results).map(|(s, path)| s.finish(path)))
            .collect();
        RunRecords {
            id: live.id,
            records: live.records,
            end: live.end,
            results,
        }
    };
    let mut paths = results.into_iter();
    let reference_paths = if matches!(plan.reference, ReferencePlan::Model { .. }) {
        paths.next().unwrap_or_default()
    } else {
        Vec::new()
    };
    let reference = finish(reference, &reference_paths);
    let targets = targets
        .into_iter()
        .map(|t| finish(t, &paths.next().unwrap_or_default()))
        .collect();
    (reference, targets)
}

/// The reference's outputs of the first sample (sent and received before the stream, to check the
/// task against them; not recorded here).
fn reference_outputs(
    plan: &EvalPlan,
    reference: Option<&mut RunSessions>,
    first: &Sample,
) -> Result<Vec<(String, Tensor)>> {
    match (&plan.reference, reference) {
        (ReferencePlan::Stored { golden, .. }, _) => stored_outputs(golden, first),
        (ReferencePlan::Model { .. }, Some(Ok(sessions))) if !sessions.is_empty() => {
            let session = &mut sessions[0];
            session.send(&first.inputs);
            match session.receive() {
                Ok(Ok(outputs)) => Ok(outputs),
                Ok(Err(e)) => Err(run_error(format!(
                    "the reference run failed on sample {}: {e}",
                    first.id
                ))),
                Err(s) => Err(run_error(format!("the reference run stopped: {}", s.error))),
            }
        }
        (ReferencePlan::Model { .. }, Some(Err(end))) => Err(run_error(format!(
            "the reference run could not start: {}",
            end.error.clone().unwrap_or_default()
        ))),
        (ReferencePlan::Model { .. }, _) => Err(run_error("the reference run has no session")),
    }
}

/// A stored golden run's outputs of a sample, after checking that its inputs are the sample's.
fn stored_outputs(golden: &crate::execution::golden::Golden, sample: &Sample) -> Result<Vec<(String, Tensor)>> {
    let entry = golden.manifest.samples.get(sample.stored).ok_or_else(|| {
        crate::foundation::error::bad_golden(format!("the golden run has no sample {}", sample.stored))
    })?;
    for (name, t) in &sample.inputs {
        let same = entry.inputs.iter().find(|e| &e.name == name).is_some_and(|e| {
            t.to_npy_bytes()
                .is_ok_and(|b| crate::foundation::hash::sha256_hex(&b) == e.sha256)
        });
        if !same {
            return Err(crate::foundation::error::bad_golden(format!(
                "sample {} input '{name}' is not the golden run's: a stored golden run must be of the set's samples, in order",
                sample.id
            )));
        }
    }
    entry
        .outputs
        .iter()
        .map(|e| Ok((e.name.clone(), Tensor::read_npy(&golden.dir.join(&e.file))?)))
        .collect()
}

/// The loop's fixed parts.
struct Stream<'a> {
    plan: &'a EvalPlan,
    task: &'a Task,
    truths: &'a [Option<Truth>],
    checkpoint: &'a mut Checkpoint,
    total: usize,
}

/// A sample sent and not reduced yet.
struct InFlight {
    index: usize,
    id: String,
    /// [`input_digest`] of its inputs, recorded with its records.
    input: String,
    /// Kept only with a stored golden run (its outputs are read at reduction).
    sample: Option<Sample>,
}

impl Stream<'_> {
    /// Feeds every sample, keeping at most a window in flight per session, and reduces the oldest
    /// as soon as the window is full.
    fn all(
        &mut self,
        mut samples: Box<dyn Iterator<Item = Result<Sample>> + '_>,
        reference: &mut Live,
        targets: &mut [Live],
    ) -> Result<()> {
        let progress = Progress::new(
            self.total,
            &std::iter::once(&*reference).chain(targets.iter()).collect::<Vec<_>>(),
        );
        let per_run = reference
            .sessions
            .len()
            .max(targets.iter().map(|t| t.sessions.len()).max().unwrap_or(1))
            .max(1);
        for live in targets.iter_mut() {
            self.mark_stopped(live)?;
        }
        let mut queue: VecDeque<InFlight> = VecDeque::new();
        let sequential = targets.iter().any(|t| t.decider.is_some());
        let mut exhausted = false;
        loop {
            crate::foundation::interrupt::check()?;
            // A sequential eval ends when no gated target is left to decide.
            exhausted |= sequential && !targets.iter().any(Live::undecided);
            while !exhausted && queue.len() < WINDOW * per_run {
                match samples.next() {
                    Some(sample) => queue.push_back(self.send(sample?, reference, targets)),
                    None => exhausted = true,
                }
            }
            let Some(oldest) = queue.pop_front() else { break };
            self.reduce(oldest, reference, targets)?;
            for (k, live) in std::iter::once(&*reference).chain(targets.iter()).enumerate() {
                progress.update(k, live);
            }
        }
        progress.finish();
        Ok(())
    }

    /// Sends a sample to the session of every run that takes it (`index mod sessions`).
    fn send(&self, sample: Sample, reference: &mut Live, targets: &mut [Live]) -> InFlight {
        for live in std::iter::once(&mut *reference).chain(targets.iter_mut()) {
            if live.next_index() > sample.index || !live.answering() {
                continue;
            }
            let k = sample.index % live.sessions.len();
            live.sessions[k].send(&sample.inputs);
        }
        let stored = matches!(self.plan.reference, ReferencePlan::Stored { .. });
        InFlight {
            index: sample.index,
            id: sample.id.clone(),
            input: input_digest(&sample.inputs),
            sample: stored.then_some(sample),
        }
    }

    /// Receives a sample's answers from every run, reduces them to records, keeps them.
    fn reduce(&mut self, s: InFlight, reference: &mut Live, targets: &mut [Live]) -> Result<()> {
        let golden = match (&self.plan.reference, &s.sample) {
            (ReferencePlan::Stored { golden, .. }, Some(sample)) => stored_outputs(golden, sample)?,
            _ => match answer(reference, s.index) {
                Some(Ok(outputs)) => outputs,
                _ if crate::foundation::interrupt::stopping() => return Err(crate::foundation::error::interrupted()),
                Some(Err(e)) => return Err(run_error(format!("the reference run failed on sample {}: {e}", s.id))),
                None => {
                    let why = reference.end.as_ref().and_then(|e| e.error.clone()).unwrap_or_default();
                    return Err(run_error(format!(
                        "the reference run stopped at sample {}: {why}",
                        s.id
                    )));
                }
            },
        };
        let reference_record = self.record(&s, Ok(golden.clone()), None, None)?;
        let truth = reference_record.truth.clone();
        let mut appended: Vec<Option<Record>> = Vec::with_capacity(targets.len() + 1);
        let first_time = reference.next_index() == s.index;
        appended.push(first_time.then(|| reference_record.clone()));
        if first_time {
            reference.records.push(reference_record);
        }
        let mut settled = Vec::new();
        for (k, live) in targets.iter_mut().enumerate() {
            let fresh = live.next_index() == s.index && live.answering();
            let got = if fresh { answer(live, s.index) } else { None };
            match got {
                Some(a) => {
                    let r = self.record(&s, a, Some(&golden), Some(truth.clone()))?;
                    let decided = match (live.decider.as_mut(), reference.record_of(s.index)) {
                        (Some(d), Some(reference)) => d.push(&r, reference).is_some(),
                        _ => false,
                    };
                    if decided {
                        settled.push(k);
                    }
                    live.records.push(r.clone());
                    appended.push(Some(r));
                }
                None => {
                    self.mark_stopped(live)?;
                    appended.push(None);
                }
            }
        }
        let refs: Vec<Option<&Record>> = appended.iter().map(Option::as_ref).collect();
        self.checkpoint.append(&s.input, &refs)?;
        for k in settled {
            targets[k].settle();
            self.checkpoint.decided(&targets[k].id)?;
        }
        Ok(())
    }

    /// Writes a stopped run's marker in the checkpoint, once: a resumed eval does not wait for it.
    fn mark_stopped(&self, live: &mut Live) -> Result<()> {
        // Workers killed by an interruption did not stop on their own: nothing to remember.
        crate::foundation::interrupt::check()?;
        if let (Some(end), false) = (&live.end, live.marked) {
            self.checkpoint.stop(&live.id, end)?;
            live.marked = true;
        }
        Ok(())
    }

    /// A sample's record in one run: its prediction against the truth (the label's, or the
    /// reference's prediction for `agree`), and its output SQNR against `golden` for a target.
    fn record(
        &self,
        s: &InFlight,
        answer: Answer,
        golden: Option<&[(String, Tensor)]>,
        truth: Option<Truth>,
    ) -> Result<Record> {
        let truth_of_label = self.truths.get(s.index).cloned().flatten();
        match answer {
            Err(error) => {
                let truth = truth.or(truth_of_label).unwrap_or(Truth::Text(String::new()));
                Ok(Record::failed(self.task, s.index, s.id.clone(), truth, error))
            }
            Ok(outputs) => {
                let prediction = self
                    .task
                    .predict(&self.plan.classes, &outputs)
                    .map_err(|e| bad_input(format!("sample {}: {e}", s.id)))?;
                let truth = match truth.or(truth_of_label) {
                    Some(t) => t,
                    None => Task::truth_of_prediction(&prediction).unwrap_or(Truth::Text(String::new())),
                };
                let judged = self.task.judge(&prediction, &truth);
                Ok(Record {
                    index: s.index,
                    id: s.id.clone(),
                    prediction: Some(prediction),
                    truth,
                    judged,
                    sqnr_db: golden.map(|g| Num(worst_sqnr(&outputs, g))),
                    error: None,
                })
            }
        }
    }
}

/// The answer of `live`'s session that sample `index` went to, or `None` when it stopped (then it
/// is marked stopped).
fn answer(live: &mut Live, index: usize) -> Option<Answer> {
    if !live.answering() {
        return None;
    }
    let k = index % live.sessions.len();
    match live.sessions[k].receive() {
        Ok(a) => Some(a),
        Err(s) => {
            live.stop(s.status.into(), s.error);
            None
        }
    }
}

/// The lowest SQNR of any output of `outputs` against the same output of `golden` (NaN when an
/// output is missing or its shape differs).
fn worst_sqnr(outputs: &[(String, Tensor)], golden: &[(String, Tensor)]) -> f64 {
    let mut worst = f64::INFINITY;
    for (name, g) in golden {
        let Some((_, o)) = outputs.iter().find(|(n, _)| n == name) else {
            return f64::NAN;
        };
        if o.shape != g.shape {
            return f64::NAN;
        }
        let same = o.dtype() == g.dtype();
        let mut stats = ErrorStats::new(same, same && o.dtype().is_float());
        stats.update(&o.data, &g.data);
        worst = worst.min(stats.sqnr_db());
    }
    worst
}

/// `5h 12m`, `3m 04s`, `12s`.
fn duration_text(secs: f64) -> String {
    crate::foundation::console::elapsed_text(std::time::Duration::from_secs(secs.max(0.0).round() as u64))
}

/// One progress line per run (drawn only on a terminal): the samples it recorded, its own time
/// per sample (its sessions' run time, shared among them) and the time it would take alone for the
/// rest. Runs go in step, so the slowest line's time left is the eval's.
struct Progress {
    bars: Vec<indicatif::ProgressBar>,
    total: usize,
    _multi: indicatif::MultiProgress,
}

impl Progress {
    fn new(total: usize, runs: &[&Live]) -> Progress {
        let target = if crate::foundation::console::progress() {
            indicatif::ProgressDrawTarget::stderr()
        } else {
            indicatif::ProgressDrawTarget::hidden()
        };
        let multi = indicatif::MultiProgress::with_draw_target(target);
        let width = runs.iter().map(|r| r.id.len()).max().unwrap_or(0);
        let template = format!("{{prefix:>{width}}} [{{bar:30}}] {{pos}}/{{len}} {{msg}}");
        let bars = runs
            .iter()
            .map(|live| {
                let bar = multi.add(indicatif::ProgressBar::new(total as u64));
                if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
                    bar.set_style(style);
                }
                bar.set_prefix(live.id.clone());
                bar.set_position(live.records.len() as u64);
                bar
            })
            .collect();
        Progress {
            bars,
            total,
            _multi: multi,
        }
    }

    /// Redraws run `k`'s line from its records and sessions, and says the eval's activity.
    fn update(&self, k: usize, live: &Live) {
        self.redraw(k, live);
        crate::foundation::console::activity(self.summary());
    }

    fn redraw(&self, k: usize, live: &Live) {
        let Some(bar) = self.bars.get(k) else { return };
        bar.set_position(live.records.len() as u64);
        if let Some(end) = &live.end {
            bar.set_message(format!("stopped: {}", end.status.as_str()));
            return;
        }
        if let Some(outcome) = live.decider.as_ref().filter(|_| live.decided()).map(Decider::outcome) {
            bar.set_message(format!(
                "decided: {} after {} samples",
                outcome.decision.as_str(),
                outcome.samples_used
            ));
            return;
        }
        let times: Vec<f64> = live.sessions.iter().filter_map(ServeSession::mean_run_ms).collect();
        if times.is_empty() {
            return;
        }
        // Sessions answer in parallel: the run's time per sample is their mean over their count.
        let per_sample = times.iter().sum::<f64>() / times.len() as f64 / live.sessions.len() as f64 / 1000.0;
        let left = per_sample * self.total.saturating_sub(live.records.len()) as f64;
        bar.set_message(format!("{per_sample:.3} s/sample, {} left", duration_text(left)));
    }

    /// Every run's position and message on one line, for the progress lines off a terminal.
    fn summary(&self) -> String {
        let runs: Vec<String> = self
            .bars
            .iter()
            .map(|b| {
                let msg = b.message();
                let msg = if msg.is_empty() {
                    String::new()
                } else {
                    format!(" ({msg})")
                };
                format!("{} {}/{}{msg}", b.prefix(), b.position(), self.total)
            })
            .collect();
        runs.join("; ")
    }

    fn finish(&self) {
        for bar in &self.bars {
            bar.finish_and_clear();
        }
    }
}
