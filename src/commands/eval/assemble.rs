//! The eval's report, built once from the runs' records: every target's metrics, its paired
//! comparisons with the reference and the baseline, what flipped and the worst samples, the
//! per-layer audit of the samples it broke (`--explain`), the gate and the exit code.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::feed::Runs;
use super::sessions::EvalPlan;
use super::summary::{summary, RunSummary};
use super::EvalOptions;
use crate::analyses::accuracy::decide::{replay, Limits};
use crate::analyses::accuracy::task::{Task, TaskKind};
use crate::analyses::accuracy::{self, primary_is_cer, Record, StatOptions};
use crate::commands::compare::reference::ReferencePlan;
use crate::data::dataset::Dataset;
use crate::data::target::TargetRole;
use crate::execution::exec::selection::BASELINE_ID;
use crate::foundation::error::ExitCode;
use crate::foundation::host::HostInfo;
use crate::judge::gate::{self, sets};
use crate::report::common::Num;
use crate::report::eval::{
    Comparison, DatasetInfo, EvalReport, EvalTarget, SamplesNeeded, SequentialInfo, StatisticsInfo, TaskInfo,
    EVAL_SCHEMA_VERSION,
};
use crate::report::gate::{GateReport, Rule, Verdict};
use crate::report::RunStatus;

/// Worst samples listed per target.
const WORST: usize = 10;
/// The most classes a confusion matrix is kept for.
const MAX_CONFUSION_CLASSES: usize = 1000;

/// What an eval's report is made of besides its runs' records: everything the options, the plan
/// and the set decide. A shard keeps it in its file, and `merge` builds the report from it and the
/// shards' records through the same [`build`] one machine uses, so the figures cannot differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Basis {
    pub model: String,
    pub model_sha256: String,
    pub reference: String,
    pub dataset: DatasetInfo,
    pub task: Task,
    pub stats: StatOptions,
    /// Every target of the eval, in the plan's order.
    pub targets: Vec<TargetBasis>,
    pub notes: Vec<String>,
}

/// A target as the gate sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetBasis {
    pub id: String,
    /// `target`, or `baseline` for the `cpu:noopt` run the eval added.
    pub role: TargetRole,
    /// Whether its failure fails the eval (exit code 3).
    pub required: bool,
    pub min_accuracy: Option<GateLimit>,
    pub max_accuracy_drop: Option<GateLimit>,
}

impl TargetBasis {
    /// The limits a sequential eval decides for it: a target the user asked for, with a limit.
    pub fn decided_limits(&self) -> Option<Limits> {
        let limits = Limits {
            max_drop_points: self.max_accuracy_drop.as_ref().map(|l| l.value),
            min_accuracy: self.min_accuracy.as_ref().map(|l| l.value),
        };
        (self.role == TargetRole::Target && limits.any()).then_some(limits)
    }
}

/// A limit of the gate and where it was set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateLimit {
    pub value: f64,
    pub origin: String,
}

impl Basis {
    /// The basis of an eval as planned, with its task as checked against the reference.
    pub fn of(opts: &EvalOptions, plan: &EvalPlan, dataset: &Dataset, task: &Task) -> Basis {
        let limit = |l: &Option<crate::judge::policy::limits::Limit<f64>>| {
            l.as_ref().map(|l| GateLimit {
                value: l.value,
                origin: l.origin.clone(),
            })
        };
        let targets = plan
            .targets
            .iter()
            .map(|t| {
                let limits = opts.policy.limits(&t.spec.id, None);
                TargetBasis {
                    id: t.spec.id.clone(),
                    role: t.role,
                    required: t.required,
                    min_accuracy: limit(&limits.min_accuracy),
                    max_accuracy_drop: limit(&limits.max_accuracy_drop),
                }
            })
            .collect();
        Basis {
            model: opts.model.display().to_string(),
            model_sha256: plan.model.sha256.clone(),
            reference: match &plan.reference {
                ReferencePlan::Model { description, .. } | ReferencePlan::Stored { description, .. } => {
                    description.clone()
                }
            },
            dataset: dataset_info(dataset, task),
            task: task.clone(),
            stats: opts.stats,
            targets,
            notes: plan
                .notes
                .iter()
                .cloned()
                .chain(crate::data::target::ignored_isa_cap())
                .collect(),
        }
    }
}

fn dataset_info(dataset: &Dataset, task: &Task) -> DatasetInfo {
    DatasetInfo {
        path: dataset.path.display().to_string(),
        samples: dataset.len(),
        ids_sha256: dataset.ids_sha256(),
        labels: if task.labels_from_reference() {
            "reference".into()
        } else {
            dataset.labels_from.clone().unwrap_or_default()
        },
        labels_sha256: (!task.labels_from_reference())
            .then(|| dataset.labels_sha256())
            .flatten(),
        samples_sha256: None,
    }
}

/// The report of an eval run on this machine.
pub fn report(opts: &EvalOptions, plan: &EvalPlan, dataset: &Dataset, runs: Runs) -> Result<EvalReport> {
    let basis = Basis::of(opts, plan, dataset, &runs.task);
    let reference = summary(None, runs.reference);
    let targets: Vec<RunSummary> = plan
        .targets
        .iter()
        .zip(runs.targets)
        .map(|(p, r)| summary(Some(p), r))
        .collect();
    let mut report = build(&basis, Some(crate::foundation::host::this_host()), &reference, &targets);
    if opts.explain > 0 {
        for (row, (planned, run)) in report.targets.iter_mut().zip(plan.targets.iter().zip(&targets)) {
            row.explanation = super::broken_layers::explain(opts, plan, dataset, planned, run, &reference)?;
        }
    }
    Ok(report)
}

/// The report from its basis and every run's records: what one machine and a merge of shards
/// both compute.
pub fn build(basis: &Basis, host: Option<HostInfo>, reference: &RunSummary, runs: &[RunSummary]) -> EvalReport {
    let task = &basis.task;
    let baseline = basis
        .targets
        .iter()
        .zip(runs)
        .find(|(t, r)| t.id == BASELINE_ID && r.end.is_none())
        .map(|(_, r)| r);
    let targets: Vec<EvalTarget> = basis
        .targets
        .iter()
        .zip(runs)
        .map(|(t, r)| target_row(&basis.stats, task, t, r, reference, baseline))
        .collect();
    let gate = gate(basis, &targets);
    let exit_code = exit_code(basis, &targets, gate.verdict);
    EvalReport {
        schema_version: EVAL_SCHEMA_VERSION,
        kind: crate::report::common::ReportKind::Eval,
        tool: crate::report::common::ToolInfo::this(),
        host: host.map(Into::into),
        model: basis.model.clone(),
        model_sha256: basis.model_sha256.clone(),
        reference: basis.reference.clone(),
        dataset: basis.dataset.clone(),
        task: task_info(task),
        statistics: statistics_info(&basis.stats),
        reference_metrics: accuracy::metrics(task, &reference.records, &basis.stats),
        targets,
        gate,
        notes: basis.notes.clone(),
        exit_code,
    }
}

/// One target's row.
fn target_row(
    stats: &StatOptions,
    task: &Task,
    planned: &TargetBasis,
    run: &RunSummary,
    reference: &RunSummary,
    baseline: Option<&RunSummary>,
) -> EvalTarget {
    let records = &run.records;
    let answered = !records.is_empty();
    let mut comparisons = Vec::new();
    if answered {
        comparisons.push(accuracy::compare(task, records, &reference.records, "reference", stats));
        if let Some(b) = baseline.filter(|b| b.id != run.id) {
            comparisons.push(accuracy::compare(task, records, &b.records, &b.id, stats));
        }
    }
    let confusion = match &task.kind {
        TaskKind::Classify { .. } | TaskKind::Agree if class_count(records) <= MAX_CONFUSION_CLASSES => {
            accuracy::confusion(records)
        }
        _ => Vec::new(),
    };
    let sequential = stats
        .sequential
        .and(planned.decided_limits())
        .and_then(|l| replay(l, records, &reference.records))
        .map(|d| d.outcome());
    // What would show the limit, for the targets the user asked about (not the baseline).
    let limit = planned
        .max_accuracy_drop
        .as_ref()
        .map(|l| l.value)
        .or(stats.margin_points);
    let samples_needed = comparisons
        .iter()
        .find(|c| c.against == "reference" && planned.role == TargetRole::Target)
        .and_then(|c| samples_needed(task, c, limit?));
    EvalTarget {
        id: run.id.clone(),
        role: planned.role.into(),
        status: run.end.as_ref().map_or(RunStatus::Ok, |e| e.status),
        error: run.end.as_ref().and_then(|e| e.error.clone()),
        runtime: run.runtime.clone(),
        intra_op_threads: run.intra_op_threads,
        samples_run: records.len(),
        metrics: answered.then(|| accuracy::metrics(task, records, stats)),
        comparisons,
        median_sqnr_db: accuracy::median_sqnr(records),
        flips: accuracy::flips(records, &reference.records),
        worst: accuracy::worst(records, WORST),
        sqnr_histogram: accuracy::sqnr_histogram(records),
        confusion,
        explanation: None,
        run_ms_median: median_run_ms(run),
        samples_needed,
        sequential,
    }
}

/// How many samples a drop limit needs at the flip rates `c` observed, when its bound did not
/// show it (accuracy drops only: the CER's bootstrap has no sample-size formula).
fn samples_needed(task: &Task, c: &Comparison, limit_points: f64) -> Option<SamplesNeeded> {
    if primary_is_cer(task) || c.pairs == 0 || c.drop_upper.0 <= limit_points {
        return None;
    }
    let n = c.pairs.max(1);
    let (broken, fixed) = (c.broken as f64 / n as f64, c.fixed as f64 / n as f64);
    let limit = limit_points / 100.0;
    Some(SamplesNeeded {
        limit_points: Num(limit_points),
        broken_rate: Num(broken),
        fixed_rate: Num(fixed),
        even_odds: accuracy::paired::samples_needed(broken, fixed, limit, 0.5),
        power_80: accuracy::paired::samples_needed(broken, fixed, limit, 0.8),
    })
}

/// The largest class any record names, plus one.
fn class_count(records: &[Record]) -> usize {
    records
        .iter()
        .filter_map(|r| match &r.truth {
            accuracy::task::Truth::Class(c) => Some(c + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The median of every session's run times.
fn median_run_ms(run: &RunSummary) -> Option<f64> {
    let mut all = run.run_ms.clone();
    (!all.is_empty()).then(|| accuracy::stats::percentile(&mut all, 50.0))
}

fn task_info(task: &Task) -> TaskInfo {
    let (kind, settings) = match &task.kind {
        TaskKind::Classify { top_k, classes } => (
            "classify",
            format!(
                "top-1{}{}",
                if *top_k > 1 {
                    format!(" and top-{top_k}")
                } else {
                    String::new()
                },
                classes
                    .as_ref()
                    .map_or(String::new(), |c| format!(", {} named classes", c.len()))
            ),
        ),
        TaskKind::Decide { above, threshold } => (
            "decide",
            format!("{}{}{threshold}", task.output, if *above { ">" } else { "<" }),
        ),
        TaskKind::Ctc { vocabulary } => ("ctc", format!("greedy CTC, {} classes (blank 0)", vocabulary.classes())),
        TaskKind::Agree => ("agree", "top-1 of the reference as the label".into()),
    };
    TaskInfo {
        kind: kind.into(),
        output: task.output.clone(),
        settings,
        primary: if primary_is_cer(task) { "cer" } else { "accuracy" }.into(),
    }
}

fn statistics_info(stats: &StatOptions) -> StatisticsInfo {
    StatisticsInfo {
        seed: stats.seed,
        resamples: stats.resamples,
        margin_points: stats.margin_points,
        sequential: stats.sequential.map(|s| SequentialInfo {
            order_seed: s.order_seed,
            alpha: accuracy::decide::ALPHA,
            guarantee: accuracy::decide::GUARANTEE.into(),
        }),
        methods: methods(stats),
    }
}

/// One sentence per method the report's figures were computed with.
fn methods(stats: &StatOptions) -> Vec<String> {
    let mut methods: Vec<String> = vec![
        "proportions: 95% Wilson score interval; min_accuracy gates its one-sided 95% lower bound".into(),
        "accuracy drops: Tango's asymptotic score interval for the difference of paired proportions (two-sided 95%; one-sided 95% bounds for limits, margins and equivalence)".into(),
        "error rates, F1 and the CER's drop: 95% percentile bootstrap over samples (drops paired: both runs resampled on the same samples), NumPy's linear percentiles, resamples drawn as docs/eval.md specifies; no interval when every resample gives the same figure".into(),
        "McNemar: exact two-sided binomial test of the discordant pairs at one half".into(),
        "non-inferiority: the drop's one-sided 95% upper bound within the margin; equivalence: both one-sided 95% bounds within plus or minus the margin (two one-sided tests)".into(),
        "samples needed: Nam's (1997) sample size for the score test of non-inferiority in matched pairs, at the observed flip rates".into(),
    ];
    if stats.sequential.is_some() {
        methods.push("until decided: betting confidence sequences (Waudby-Smith & Ramdas 2023, a mixture of 50 constant bets) on each sample's broken − fixed and correctness, one-sided 95% each, in a seeded random order".into());
    }
    methods
}

/// The gate: `min_accuracy` and `max_accuracy_drop` per target from the policy and flags, and
/// `ran` for each target asked for (the baseline the eval added is for comparison), as every kind
/// of audit forms them (`judge::gate`).
fn gate(basis: &Basis, targets: &[EvalTarget]) -> GateReport {
    let mut rules = Vec::new();
    let mut active = false;
    let cer = primary_is_cer(&basis.task);
    let asked = targets
        .iter()
        .zip(&basis.targets)
        .filter(|(_, p)| p.role == TargetRole::Target);
    for (t, planned) in asked {
        active |= planned.min_accuracy.is_some() || planned.max_accuracy_drop.is_some();
        let finished = t.status == RunStatus::Ok;
        let unfinished = (!finished).then(|| t.status.ended_words());
        rules.push(gate::ran_rule(&t.id, planned.required, unfinished));
        if !finished {
            continue;
        }
        if let Some(l) = &planned.min_accuracy {
            rules.push(gate::bounded_rule(
                Rule::MinAccuracy,
                &t.id,
                sets::eval_accuracy(t),
                (l.value, &l.origin),
            ));
        }
        if let Some(l) = &planned.max_accuracy_drop {
            rules.push(gate::bounded_rule(
                Rule::MaxAccuracyDrop,
                &t.id,
                sets::eval_drop(t, cer),
                (l.value, &l.origin),
            ));
        }
    }
    GateReport {
        verdict: gate::verdict(active, &rules),
        rules,
        policy: None,
    }
}

/// A required target that did not run to the end (3) wins over a failed gate (1).
fn exit_code(basis: &Basis, targets: &[EvalTarget], verdict: Verdict) -> ExitCode {
    let unfinished = targets
        .iter()
        .zip(&basis.targets)
        .any(|(t, p)| p.required && t.status != RunStatus::Ok);
    gate::exit_code(unfinished, verdict)
}
