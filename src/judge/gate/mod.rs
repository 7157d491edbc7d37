//! The release gate: every limit of the policy (file and flags) evaluated per target and output
//! into rules with the measured value, the limit, where the limit was set and pass/fail; in
//! baseline mode, regressions against a previous report; one verdict.

pub mod rejudge;
pub mod releases;
pub mod sets;
pub mod tolerance;

use crate::foundation::error::ExitCode;
use crate::judge::policy::{Limit, Policy};
use crate::report::common::Num;
use crate::report::compare::{OutputMetrics, Report, TargetReport};
use crate::report::gate::{Bound, GateReport, Measure, PolicyInfo, Rule, RuleResult, Verdict};
use crate::report::RunStatus;

/// The `output` of rules about a target's placement rather than one of its outputs.
pub const PLACEMENT_SCOPE: &str = "(placement)";
/// The `output` of the rule saying whether a target ran.
pub const RUN_SCOPE: &str = "(run)";
/// The `output` of rules about a target's layers (the per-layer audit).
pub const LAYERS_SCOPE: &str = "(layers)";
/// The `output` of rules about a stream's state (`--stream`).
pub const STREAM_SCOPE: &str = "(stream)";
/// The `output` of rules about a whole set (eval and generation limits).
pub const SET_SCOPE: &str = "(set)";

/// A previous report for baseline mode, and how to name it in rules.
pub struct Previous<'a> {
    pub report: &'a Report,
    pub label: String,
}

/// Collects rules of one target.
struct Rules<'a> {
    target: &'a str,
    rules: Vec<RuleResult>,
}

impl Rules<'_> {
    /// A rule judged by [`Rule::passes`]: an unmeasured value (NaN) fails, a gate that cannot be
    /// checked must not pass.
    fn push(&mut self, rule: Rule, output: &str, measured: f64, limit: f64, origin: &str) {
        self.rules
            .push(RuleResult::judged(rule, self.target, output, (measured, limit), origin));
    }

    fn push_regression(&mut self, rule: Rule, output: &str, growth: f64, previous: f64, margin: Margin) {
        self.push(rule, output, growth, margin.value, &margin.origin);
        if let Some(last) = self.rules.last_mut() {
            last.previous = Some(Num(previous));
        }
    }
}

/// A baseline-mode margin: set in the policy, or 0 (no regression at all).
struct Margin {
    value: f64,
    origin: String,
}

fn margin(limit: Option<(f64, &str)>, label: &str) -> Margin {
    match limit {
        Some((value, origin)) => Margin {
            value,
            origin: format!("{origin} vs {label}"),
        },
        None => Margin {
            value: 0.0,
            origin: format!("no regression vs {label}"),
        },
    }
}

fn float_limit(l: &Option<Limit<f64>>) -> Option<(f64, &str)> {
    l.as_ref().map(|l| (l.value, l.origin.as_str()))
}

fn count_limit(l: &Option<Limit<u64>>) -> Option<(f64, &str)> {
    l.as_ref().map(|l| (l.value as f64, l.origin.as_str()))
}

/// `worse - better` where both can be infinite: equal infinities are no change.
fn growth(now: f64, before: f64) -> f64 {
    if now == before {
        0.0
    } else {
        now - before
    }
}

fn placement_rules(policy: &Policy, target: &TargetReport, previous: Option<(&TargetReport, &str)>, r: &mut Rules<'_>) {
    if target.ep == crate::analyses::placement::CPU_EP {
        return;
    }
    let limits = policy.limits(&target.id, None);
    let p = target.placement.as_ref();
    let compute = p.map(|p| p.compute_fallback_nodes as f64).unwrap_or(f64::NAN);
    let partitions = p.map(|p| p.ep_partitions as f64).unwrap_or(f64::NAN);
    if policy.mode.uses_limits() {
        if let Some(l) = &limits.max_fallback_nodes {
            r.push(
                Rule::MaxFallbackNodes,
                PLACEMENT_SCOPE,
                compute,
                l.value as f64,
                &l.origin,
            );
        }
        if let Some(l) = limits.fail_on_fallback.as_ref().filter(|l| l.value) {
            r.push(Rule::FailOnFallback, PLACEMENT_SCOPE, compute, 0.0, &l.origin);
        }
        if let Some(l) = &limits.max_partitions {
            r.push(
                Rule::MaxPartitions,
                PLACEMENT_SCOPE,
                partitions,
                l.value as f64,
                &l.origin,
            );
        }
    }
    let Some((prev, label)) = previous.filter(|_| policy.mode.uses_baseline()) else {
        return;
    };
    let Some(before) = prev.placement.as_ref() else {
        return;
    };
    let (was_compute, was_partitions) = (before.compute_fallback_nodes as f64, before.ep_partitions as f64);
    let m = margin(count_limit(&limits.max_fallback_regression), label);
    r.push_regression(
        Rule::FallbackRegression,
        PLACEMENT_SCOPE,
        compute - was_compute,
        was_compute,
        m,
    );
    let m = margin(count_limit(&limits.max_partitions_regression), label);
    r.push_regression(
        Rule::PartitionsRegression,
        PLACEMENT_SCOPE,
        partitions - was_partitions,
        was_partitions,
        m,
    );
}

/// The largest SQNR loss of any layer against the baseline on the same layer, with the layer
/// summary's definition (`layers::divergence::sqnr_loss`); NaN when there are no layers to
/// compare (no per-layer audit, or no baseline), which fails the rule.
fn layer_rules(policy: &Policy, target: &TargetReport, baseline: Option<&TargetReport>, r: &mut Rules<'_>) {
    let limits = policy.limits(&target.id, None);
    let Some(l) = limits.max_layer_sqnr_loss_db.filter(|_| policy.mode.uses_limits()) else {
        return;
    };
    let rules = crate::report::compare::DivergenceRules::default();
    let worst = baseline
        .filter(|b| !b.layers.is_empty() && !target.layers.is_empty())
        .map(|b| {
            target
                .layers
                .iter()
                .filter_map(|layer| {
                    let base = b.layers.iter().find(|x| x.index == layer.index)?;
                    crate::analyses::layers::divergence::sqnr_loss(layer, base, &rules)
                })
                .fold(0.0, f64::max)
        })
        .unwrap_or(f64::NAN);
    r.push(Rule::MaxLayerSqnrLossDb, LAYERS_SCOPE, worst, l.value, &l.origin);
}

/// A stream's rules: each decision's agreement over the steps, and the step at which the state
/// diverges (a target whose state never diverges measures infinity). An audit that is not a
/// stream has none (a policy may hold them for the streams it also judges); a stream without a
/// decision does not measure agreement, and fails it.
fn stream_rules(policy: &Policy, target: &TargetReport, r: &mut Rules<'_>) {
    let limits = policy.limits(&target.id, None);
    let Some(free) = target
        .stream
        .as_ref()
        .map(|s| &s.free)
        .filter(|_| policy.mode.uses_limits())
    else {
        return;
    };
    if let Some(l) = &limits.min_decision_agreement {
        let rule = Rule::MinDecisionAgreement;
        if free.decisions.is_empty() {
            r.push(rule, STREAM_SCOPE, f64::NAN, l.value, &l.origin);
        }
        for d in &free.decisions {
            r.push(rule, &d.decision, d.agreement, l.value, &l.origin);
        }
    }
    if let Some(l) = &limits.max_divergence_step {
        let step = free.divergence_step.map_or(f64::INFINITY, |s| s as f64);
        let limit = l.value as f64;
        // The state must stay above the divergence SQNR through step N: diverging later passes.
        r.push(Rule::MaxDivergenceStep, STREAM_SCOPE, step, limit, &l.origin);
    }
}

fn output_rules(
    policy: &Policy,
    target: &str,
    out: &OutputMetrics,
    previous: Option<(&OutputMetrics, &str)>,
    r: &mut Rules<'_>,
) {
    let limits = policy.limits(target, Some(&out.name));
    let name = out.name.as_str();
    // An output without elements matches anything: every rule on it is unmeasured and fails.
    let measured = |v: f64| if out.elements == 0 { f64::NAN } else { v };
    if policy.mode.uses_limits() {
        if let Some(l) = &limits.min_sqnr_db {
            r.push(Rule::MinSqnrDb, name, measured(out.sqnr_db.0), l.value, &l.origin);
        }
        if let Some(l) = &limits.max_abs {
            r.push(Rule::MaxAbs, name, measured(out.max_abs.0), l.value, &l.origin);
        }
        if let Some(l) = &limits.min_top1_agreement {
            // An output without a class axis has no top-1: skipped under a limit set for every
            // output, failed under one set for this output by name.
            match out.top1_agreement {
                Some(v) => r.push(Rule::MinTop1Agreement, name, measured(v), l.value, &l.origin),
                None if l.per_output => r.push(Rule::MinTop1Agreement, name, f64::NAN, l.value, &l.origin),
                None => {}
            }
        }
        if let Some(l) = limits.require_bit_exact.as_ref().filter(|l| l.value) {
            let differing = match out.bit_identical {
                Some(b) => measured((out.elements - b) as f64),
                None => f64::NAN,
            };
            r.push(Rule::BitExact, name, differing, 0.0, &l.origin);
        }
    }
    let Some((before, label)) = previous.filter(|_| policy.mode.uses_baseline()) else {
        return;
    };
    let lost_db = measured(growth(before.sqnr_db.0, out.sqnr_db.0));
    let m = margin(float_limit(&limits.max_sqnr_regression_db), label);
    r.push_regression(Rule::SqnrRegressionDb, name, lost_db, before.sqnr_db.0, m);
    let m = margin(float_limit(&limits.max_abs_regression), label);
    r.push_regression(
        Rule::MaxAbsRegression,
        name,
        measured(growth(out.max_abs.0, before.max_abs.0)),
        before.max_abs.0,
        m,
    );
    if let (Some(now), Some(was)) = (out.top1_agreement, before.top1_agreement) {
        let m = margin(float_limit(&limits.max_top1_regression), label);
        r.push_regression(Rule::Top1Regression, name, was - now, was, m);
    }
}

/// The rules of a target that ran: placement, layers, and each output's (with regressions
/// against its run in the previous report, in baseline mode).
fn ran_rules(
    policy: &Policy,
    target: &TargetReport,
    baseline: Option<&TargetReport>,
    previous: Option<&Previous<'_>>,
    r: &mut Rules<'_>,
    notes: &mut Vec<String>,
) {
    let prev = previous.and_then(|p| {
        let found = p
            .report
            .targets
            .iter()
            .find(|t| t.id == target.id && t.status == RunStatus::Ok);
        if found.is_none() && policy.mode.uses_baseline() {
            notes.push(format!(
                "{}: no regression rules, {} has no successful run of it",
                target.id, p.label
            ));
        }
        found.map(|t| (t, p.label.as_str()))
    });
    placement_rules(policy, target, prev, r);
    layer_rules(policy, target, baseline, r);
    stream_rules(policy, target, r);
    for out in &target.outputs {
        let said = notes.iter().any(|n| n.starts_with(&format!("output '{}'", out.name)));
        if out.elements == 0 && !said {
            notes.push(format!(
                "output '{}' has no elements (shape {:?}): nothing was compared, and every rule on it fails as not measured",
                out.name, out.shape
            ));
        }
        let before = prev.and_then(|(t, label)| {
            t.outputs
                .iter()
                .find(|o| o.name == out.name && o.error.is_none())
                .map(|o| (o, label))
        });
        output_rules(policy, &target.id, out, before, r);
    }
}

/// Evaluates the policy on every target the user asked for (not the baseline the audit added),
/// and returns the gate and notes on what baseline mode could not compare.
pub fn evaluate(
    policy: &Policy,
    targets: &[TargetReport],
    previous: Option<&Previous<'_>>,
) -> (GateReport, Vec<String>) {
    let mut notes = Vec::new();
    let mut rules = Vec::new();
    let active = policy.is_active();
    for target in targets
        .iter()
        .filter(|t| active && t.role == crate::report::facts::TargetRole::Target)
    {
        let mut r = Rules {
            target: &target.id,
            rules: Vec::new(),
        };
        let ok = target.status == RunStatus::Ok;
        let unfinished = (!ok).then(|| target.status.ended_words());
        r.rules.push(ran_rule(&target.id, target.required, unfinished));
        if ok {
            let baseline = targets
                .iter()
                .find(|t| t.role == crate::report::facts::TargetRole::Baseline);
            ran_rules(policy, target, baseline, previous, &mut r, &mut notes);
        }
        rules.extend(r.rules);
    }
    let verdict = verdict(active, &rules);
    let info = (active || policy.source.is_some()).then(|| PolicyInfo {
        file: policy.source.as_ref().map(|s| s.path.display().to_string()),
        sha256: policy.source.as_ref().map(|s| s.sha256.clone()),
        mode: policy.mode.as_str().into(),
        baseline_report: previous.map(|p| p.label.clone()),
        baseline_model_sha256: previous.map(|p| p.report.model.sha256.clone()),
        allowed_to_fail: policy.allow_failure.iter().map(|p| p.text.clone()).collect(),
        release_limits: releases::limits_info(&policy.release_limits),
    });
    (
        GateReport {
            verdict,
            rules,
            policy: info,
        },
        notes,
    )
}

/// The Judge stage's result: every rule with its verdict, the exit code the run ends with, and
/// notes on rules that could not be formed.
#[derive(Debug, Clone)]
pub struct Judgement {
    pub gate: GateReport,
    pub exit_code: ExitCode,
    pub notes: Vec<String>,
}

/// Judges the targets' rows against the policy (and the previous report of baseline mode).
pub fn judge(
    policy: &Policy,
    targets: &[TargetReport],
    agreement: &[crate::report::compare::AgreementEntry],
    previous: Option<&Previous<'_>>,
) -> Judgement {
    let (mut gate, notes) = evaluate(policy, targets, previous);
    let limits = releases::limits_info(&policy.release_limits);
    gate.rules.extend(releases::rules(&limits, targets, agreement));
    gate.verdict = verdict(policy.is_active(), &gate.rules);
    Judgement {
        exit_code: exit_code(required_unfinished(targets), gate.verdict),
        gate,
        notes,
    }
}

/// The verdict of a gate: `none` without limits, else `pass` when every rule passes.
pub fn verdict(active: bool, rules: &[RuleResult]) -> Verdict {
    if !active {
        Verdict::None
    } else if rules.iter().all(|r| r.pass) {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}

/// The exit code of every kind of audit: a required target that did not run to the end (3) wins
/// over a failed gate (1). The one mapping of a gate's outcome to an exit code.
pub fn exit_code(required_unfinished: bool, verdict: Verdict) -> ExitCode {
    if required_unfinished {
        ExitCode::TargetFailed
    } else if verdict == Verdict::Fail {
        ExitCode::DriftExceeded
    } else {
        ExitCode::Success
    }
}

/// Whether a required target of a compare report did not run.
pub fn required_unfinished(targets: &[TargetReport]) -> bool {
    targets.iter().any(|t| t.required && t.status != RunStatus::Ok)
}

/// The `ran` rule every kind of audit gives each target it gates: a required target passes only
/// when it ran to the end; one allowed to fail passes either way, and when it did not finish the
/// rule says that nothing of it was judged (`ungated`). `unfinished` says why it did not.
pub fn ran_rule(target: &str, required: bool, unfinished: Option<&str>) -> RuleResult {
    let ran = if unfinished.is_none() { 1.0 } else { 0.0 };
    let origin = match (required, unfinished) {
        (true, None) => "required".to_string(),
        (true, Some(why)) => format!("required: {why}"),
        (false, None) => "allowed to fail".to_string(),
        (false, Some(why)) => format!("allowed to fail: {why}; not gated"),
    };
    let mut rule = RuleResult::judged(Rule::Ran, target, RUN_SCOPE, (ran, 1.0), &origin);
    if !required && unfinished.is_some() {
        rule.pass = true;
        rule.ungated = true;
    }
    rule
}

/// A statistical figure a limit is held to: what it measures, its point estimate, and the bound
/// that cannot pass by luck (NaN when the sample cannot bound it: the rule then fails).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounded {
    pub measure: Measure,
    pub estimate: f64,
    pub bound: f64,
    pub kind: Bound,
}

/// The rule of a set-wide statistical limit (`min_accuracy`, `max_accuracy_drop`) on a target:
/// the bound against the limit, with the estimate and what both are of. Eval and generation form
/// theirs here.
pub fn bounded_rule(rule: Rule, target: &str, figure: Bounded, (limit, origin): (f64, &str)) -> RuleResult {
    let mut r = RuleResult::judged(rule, target, SET_SCOPE, (figure.bound, limit), origin);
    r.measure = Some(figure.measure);
    r.estimate = Some(Num(figure.estimate));
    r.bound = Some(figure.kind);
    r
}

#[cfg(test)]
mod tests;
