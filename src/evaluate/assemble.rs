//! The eval's report, built once from the runs' records: every target's metrics, its paired
//! comparisons with the reference and the baseline, what flipped and the worst samples, the
//! per-layer audit of the samples it broke (`--explain`), the gate and the exit code.

use anyhow::Result;

use super::sessions::EvalPlan;
use super::stream::{RunRecords, Runs};
use super::EvalOptions;
use crate::audit::reference::ReferencePlan;
use crate::dataset::Dataset;
use crate::error::ExitCode;
use crate::eval::task::{Task, TaskKind};
use crate::eval::{self, primary_is_cer, Record};
use crate::exec::plan::BASELINE_ID;
use crate::exec::{PlannedTarget, RunStatus};
use crate::report::eval::{
    DatasetInfo, EvalGate, EvalReport, EvalTarget, StatisticsInfo, TaskInfo, EVAL_SCHEMA_VERSION,
};
use crate::report::model::{Num, Rule, RuleResult, RuntimeInfo, Verdict};
use crate::target::TargetRole;

/// Worst samples listed per target.
const WORST: usize = 10;
/// The most classes a confusion matrix is kept for.
const MAX_CONFUSION_CLASSES: usize = 1000;

/// The report of an eval.
pub fn report(opts: &EvalOptions, plan: &EvalPlan, dataset: &Dataset, runs: Runs) -> Result<EvalReport> {
    let task = &runs.task;
    let baseline = plan
        .targets
        .iter()
        .zip(&runs.targets)
        .find(|(t, r)| t.spec.id == BASELINE_ID && r.end.is_none())
        .map(|(_, r)| r);
    let mut targets: Vec<EvalTarget> = plan
        .targets
        .iter()
        .zip(&runs.targets)
        .map(|(t, r)| target_row(opts, task, t, r, &runs.reference, baseline))
        .collect();
    if opts.explain > 0 {
        for (row, (planned, run)) in targets.iter_mut().zip(plan.targets.iter().zip(&runs.targets)) {
            row.explanation = super::explain::explain(opts, plan, dataset, planned, run, &runs.reference)?;
        }
    }
    let gate = gate(opts, plan, &targets);
    let exit_code = exit_code(plan, &targets, gate.verdict);
    Ok(EvalReport {
        schema_version: EVAL_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        host: Some(crate::host::this_host()),
        model: opts.model.display().to_string(),
        model_sha256: plan.model.sha256.clone(),
        reference: match &plan.reference {
            ReferencePlan::Model { description, .. } | ReferencePlan::Stored { description, .. } => description.clone(),
        },
        dataset: DatasetInfo {
            path: dataset.path.display().to_string(),
            samples: dataset.len(),
            ids_sha256: crate::hash::sha256_hex(dataset.ids.join("\n").as_bytes()),
            labels: if task.labels_from_reference() {
                "reference".into()
            } else {
                dataset.labels_from.clone().unwrap_or_default()
            },
        },
        task: task_info(task),
        statistics: statistics_info(opts),
        reference_metrics: eval::metrics(task, &runs.reference.records, &opts.stats),
        targets,
        gate,
        notes: plan
            .notes
            .iter()
            .chain(&runs.notes)
            .cloned()
            .chain(crate::target::ignored_isa_cap())
            .collect(),
        exit_code,
    })
}

/// One target's row.
fn target_row(
    opts: &EvalOptions,
    task: &Task,
    planned: &PlannedTarget,
    run: &RunRecords,
    reference: &RunRecords,
    baseline: Option<&RunRecords>,
) -> EvalTarget {
    let records = &run.records;
    let answered = !records.is_empty();
    let mut comparisons = Vec::new();
    if answered {
        comparisons.push(eval::compare(
            task,
            records,
            &reference.records,
            "reference",
            &opts.stats,
        ));
        if let Some(b) = baseline.filter(|b| b.id != run.id) {
            comparisons.push(eval::compare(task, records, &b.records, &b.id, &opts.stats));
        }
    }
    let confusion = match &task.kind {
        TaskKind::Classify { .. } | TaskKind::Agree if class_count(records) <= MAX_CONFUSION_CLASSES => {
            eval::confusion(records)
        }
        _ => Vec::new(),
    };
    EvalTarget {
        id: run.id.clone(),
        role: match planned.role {
            TargetRole::Baseline => "baseline".into(),
            TargetRole::Target => "target".into(),
        },
        status: run.end.as_ref().map_or(RunStatus::Ok, |e| e.status),
        error: run.end.as_ref().and_then(|e| e.error.clone()),
        runtime: runtime_info(planned, run),
        intra_op_threads: run.results.first().and_then(|r| r.intra_threads),
        samples_run: records.len(),
        metrics: answered.then(|| eval::metrics(task, records, &opts.stats)),
        comparisons,
        median_sqnr_db: eval::median_sqnr(records),
        flips: eval::flips(records, &reference.records),
        worst: eval::worst(records, WORST),
        sqnr_histogram: eval::sqnr_histogram(records),
        confusion,
        explanation: None,
        run_ms_median: median_run_ms(run),
    }
}

/// The largest class any record names, plus one.
fn class_count(records: &[Record]) -> usize {
    records
        .iter()
        .filter_map(|r| match &r.truth {
            eval::task::Truth::Class(c) => Some(c + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The median of every session's run times.
fn median_run_ms(run: &RunRecords) -> Option<f64> {
    let mut all: Vec<f64> = run.results.iter().flat_map(|r| r.run_ms.iter().copied()).collect();
    (!all.is_empty()).then(|| eval::stats::percentile(&mut all, 50.0))
}

/// What a target ran with: its runtime as the worker's library reported itself.
fn runtime_info(planned: &PlannedTarget, run: &RunRecords) -> Option<RuntimeInfo> {
    let rt = planned.runtime.as_ref().ok()?;
    let outcome = run.results.first().map(|r| crate::exec::Outcome {
        status: RunStatus::Ok,
        error: None,
        result: Some(r.clone()),
        wall_ms: 0.0,
        log: std::path::PathBuf::new(),
    });
    Some(crate::audit::facts::target_runtime_info(
        rt,
        outcome.as_ref(),
        &mut |r| r.sha256.clone(),
    ))
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

fn statistics_info(opts: &EvalOptions) -> StatisticsInfo {
    StatisticsInfo {
        seed: opts.stats.seed,
        resamples: opts.stats.resamples,
        margin_points: opts.stats.margin_points,
        methods: vec![
            "proportions: 95% Wilson score interval".into(),
            "error rates, F1 and every drop: 95% percentile bootstrap over samples (drops paired: both runs resampled on the same samples), NumPy's linear percentiles, resamples drawn as docs/eval.md specifies".into(),
            "McNemar: exact two-sided binomial test of the discordant pairs at one half".into(),
            "non-inferiority: the drop's one-sided 95% upper bound (95th percentile) within the margin; equivalence: its 90% interval within plus or minus the margin (two one-sided tests)".into(),
        ],
    }
}

/// The gate: `min_accuracy` and `max_accuracy_drop` per target from the policy and flags, and
/// `ran` for required targets.
fn gate(opts: &EvalOptions, plan: &EvalPlan, targets: &[EvalTarget]) -> EvalGate {
    let mut rules = Vec::new();
    let mut active = false;
    // The user's targets only, as compare gates: the baseline the eval added is for comparison.
    let asked = targets
        .iter()
        .zip(&plan.targets)
        .filter(|(_, p)| p.role == TargetRole::Target);
    for (t, planned) in asked {
        let limits = opts.policy.limits(&t.id, None);
        let rule = |rule: Rule, measured: f64, limit: f64, pass: bool, origin: &str| RuleResult {
            rule,
            target: t.id.clone(),
            output: "(set)".into(),
            measured: Num(measured),
            limit: Num(limit),
            pass: pass && !measured.is_nan(),
            origin: origin.to_string(),
            previous: None,
        };
        if let Some(l) = &limits.min_accuracy {
            active = true;
            let measured = t.metrics.as_ref().map_or(f64::NAN, |m| m.accuracy.value.0);
            rules.push(rule(
                Rule::MinAccuracy,
                measured,
                l.value,
                measured >= l.value,
                &l.origin,
            ));
        }
        if let Some(l) = &limits.max_accuracy_drop {
            active = true;
            let upper = t
                .comparisons
                .iter()
                .find(|c| c.against == "reference")
                .map_or(f64::NAN, |c| c.drop_upper.0);
            rules.push(rule(Rule::MaxAccuracyDrop, upper, l.value, upper <= l.value, &l.origin));
        }
        if planned.required {
            let ok = t.status == RunStatus::Ok;
            let origin = if ok {
                "required"
            } else {
                "required: did not run to the end"
            };
            rules.push(rule(Rule::Ran, f64::from(u8::from(ok)), 1.0, ok, origin));
        }
    }
    EvalGate {
        verdict: crate::gate::verdict(active, &rules),
        rules,
    }
}

/// A required target that did not run to the end (3) wins over a failed gate (1).
fn exit_code(plan: &EvalPlan, targets: &[EvalTarget], verdict: Verdict) -> ExitCode {
    let missing = targets
        .iter()
        .zip(&plan.targets)
        .any(|(t, p)| p.required && t.status != RunStatus::Ok);
    if missing {
        ExitCode::TargetFailed
    } else if verdict == Verdict::Fail {
        ExitCode::DriftExceeded
    } else {
        ExitCode::Success
    }
}
