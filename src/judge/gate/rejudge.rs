//! A stored report judged again from its own figures and limits, for `render`: a verdict is
//! printed only when it follows from the report. Each rule's measured value must be the one the
//! report's figures give (where the rule reads a figure the report holds), its pass the one
//! [`Rule::passes`] gives for that value and its limit, the verdict the one its rules give, and the
//! exit code the one [`super::exit_code`] maps the verdict and the targets to. The first
//! contradiction is said in one line; an edited or damaged report is refused, not printed.

use super::{exit_code, sets, verdict};
use crate::foundation::error::ExitCode;
use crate::report::compare::Report;
use crate::report::eval::EvalReport;
use crate::report::gate::{GateReport, Rule, RuleResult, Verdict};
use crate::report::generation::GenerationReport;
use crate::report::matrix::Matrix;
use crate::report::pipeline::PipelineReport;
use crate::report::RunStatus;

/// Whether two stored figures are the same number (NaN equal to NaN; a relative hair allowed
/// for figures a reader may have reformatted).
fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Every rule's pass follows from its value and limit, its value from the report's figures
/// (`figure`, where the rule reads one), and the verdict from the rules.
fn rules_follow(gate: &GateReport, active: bool, figure: impl Fn(&RuleResult) -> Option<f64>) -> Result<(), String> {
    for r in &gate.rules {
        let who = format!("rule {} of {} ({})", r.rule, r.target, r.output);
        if !r.is_consistent() {
            return Err(format!(
                "{who} says {} where its measured value {} against its limit {} {}",
                if r.pass { "pass" } else { "fail" },
                r.measured.0,
                r.limit.0,
                if r.pass { "fails" } else { "passes" }
            ));
        }
        if let Some(v) = figure(r).filter(|v| !same(*v, r.measured.0)) {
            return Err(format!(
                "{who} states the measured value {} where the report's figures give {v}",
                r.measured.0
            ));
        }
    }
    let want = verdict(active, &gate.rules);
    if want != gate.verdict {
        return Err(format!(
            "its verdict is {} where its rules give {}",
            verdict_word(gate.verdict),
            verdict_word(want)
        ));
    }
    Ok(())
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::None => "none",
    }
}

/// The stored exit code is the one the verdict and the targets give (codes a finished audit does
/// not write, such as an interrupt's, are left as stored).
fn exit_follows(stored: ExitCode, required_unfinished: bool, verdict: Verdict) -> Result<(), String> {
    let want = exit_code(required_unfinished, verdict);
    let judged = matches!(
        stored,
        ExitCode::Success | ExitCode::DriftExceeded | ExitCode::TargetFailed
    );
    if judged && stored != want {
        return Err(format!(
            "its exit code is {} where its verdict and targets give {}",
            stored as i32, want as i32
        ));
    }
    Ok(())
}

/// Whether a set audit's required target did not finish: its `ran` rule fails.
fn ran_failed(gate: &GateReport) -> bool {
    gate.rules.iter().any(|r| r.rule == Rule::Ran && !r.pass)
}

/// Whether a set audit's gate had a limit to judge (beside `ran`).
fn has_limits(gate: &GateReport) -> bool {
    gate.rules.iter().any(|r| r.rule != Rule::Ran)
}

/// A compare report's gate, judged again.
pub fn compare(r: &Report) -> Result<(), String> {
    let figure = |rule: &RuleResult| -> Option<f64> {
        let t = r.targets.iter().find(|t| t.id == rule.target)?;
        let output = || t.outputs.iter().find(|o| o.name == rule.output);
        let measured = |o: &crate::report::compare::OutputMetrics, v: f64| if o.elements == 0 { f64::NAN } else { v };
        match rule.rule {
            Rule::Ran => Some(f64::from(u8::from(t.status == RunStatus::Ok))),
            Rule::MinSqnrDb => output().map(|o| measured(o, o.sqnr_db.0)),
            Rule::MaxAbs => output().map(|o| measured(o, o.max_abs.0)),
            Rule::MinTop1Agreement => output().map(|o| o.top1_agreement.map_or(f64::NAN, |v| measured(o, v))),
            Rule::BitExact => output().map(|o| {
                o.bit_identical
                    .map_or(f64::NAN, |b| measured(o, (o.elements - b) as f64))
            }),
            Rule::MaxFallbackNodes | Rule::FailOnFallback => Some(
                t.placement
                    .as_ref()
                    .map_or(f64::NAN, |p| p.compute_fallback_nodes as f64),
            ),
            Rule::MaxPartitions => Some(t.placement.as_ref().map_or(f64::NAN, |p| p.ep_partitions as f64)),
            _ => None,
        }
    };
    rules_follow(&r.gate, !r.gate.rules.is_empty(), figure)?;
    exit_follows(r.exit_code, super::required_unfinished(&r.targets), r.gate.verdict)
}

/// An eval report's gate, judged again.
pub fn eval(r: &EvalReport) -> Result<(), String> {
    let cer = r.task.primary == "cer";
    let figure = |rule: &RuleResult| -> Option<f64> {
        let t = r.targets.iter().find(|t| t.id == rule.target)?;
        match rule.rule {
            Rule::Ran if !rule.ungated => Some(f64::from(u8::from(t.status == RunStatus::Ok))),
            Rule::MinAccuracy => Some(sets::eval_accuracy(t).bound),
            Rule::MaxAccuracyDrop => Some(sets::eval_drop(t, cer).bound),
            _ => None,
        }
    };
    rules_follow(&r.gate, has_limits(&r.gate), figure)?;
    exit_follows(r.exit_code, ran_failed(&r.gate), r.gate.verdict)
}

/// A generation report's gate, judged again.
pub fn generation(r: &GenerationReport) -> Result<(), String> {
    let figure = |rule: &RuleResult| -> Option<f64> {
        let t = r.targets.iter().find(|t| t.id == rule.target)?;
        let finished = t.status == RunStatus::Ok && t.summary.unfinished.is_empty();
        match rule.rule {
            Rule::Ran if !rule.ungated => Some(f64::from(u8::from(finished))),
            Rule::Ran => None,
            // A rule the task does not gate with is not a number: a stored pass contradicts it.
            rule => Some(sets::generation_figure(r.task, rule, t).map_or(f64::NAN, |b| b.bound)),
        }
    };
    rules_follow(&r.gate, has_limits(&r.gate), figure)?;
    exit_follows(r.exit_code, ran_failed(&r.gate), r.gate.verdict)
}

/// A pipeline report's exit code, judged again: a target whose final SQNR is under the limit
/// (or not a number) fails it. A target that did not run fails it only when it was named, which
/// the report does not keep: either code is taken for such a target.
pub fn pipeline(r: &PipelineReport) -> Result<(), String> {
    let Some(min) = r.min_sqnr_db else {
        return exit_follows(r.exit_code, false, Verdict::None);
    };
    let below = |t: &&crate::report::pipeline::PipelineTarget| t.final_sqnr_db.0.is_nan() || t.final_sqnr_db.0 < min;
    let ran_below = r.targets.iter().filter(|t| t.failed.is_none()).any(|t| below(&t));
    let failed_below = r.targets.iter().filter(|t| t.failed.is_some()).any(|t| below(&t));
    if failed_below && !ran_below && r.exit_code != ExitCode::Success {
        return exit_follows(r.exit_code, false, Verdict::Fail);
    }
    exit_follows(
        r.exit_code,
        false,
        if ran_below { Verdict::Fail } else { Verdict::Pass },
    )
}

/// A matrix report's exit code, judged again: under limits, a target whose recommended variant
/// does not run on the target itself fails it.
pub fn matrix(m: &Matrix) -> Result<(), String> {
    let failing = !m.policy.is_empty() && m.recommendations.iter().any(|r| !r.runs_on_itself());
    exit_follows(m.exit_code, false, if failing { Verdict::Fail } else { Verdict::Pass })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_the_figures_do_not_give_is_a_contradiction() {
        let mut gate = GateReport {
            verdict: Verdict::Fail,
            rules: vec![RuleResult::judged(
                Rule::MaxAccuracyDrop,
                "cpu",
                "(set)",
                (73.0, 0.1),
                "--max-accuracy-drop",
            )],
            policy: None,
        };
        assert_eq!(rules_follow(&gate, true, |_| Some(73.0)), Ok(()));
        gate.rules[0].pass = true;
        let e = rules_follow(&gate, true, |_| Some(73.0)).unwrap_err();
        assert!(
            e.contains("says pass where its measured value 73 against its limit 0.1 fails"),
            "{e}"
        );
        gate.rules[0].pass = false;
        gate.verdict = Verdict::Pass;
        assert!(rules_follow(&gate, true, |_| None)
            .unwrap_err()
            .contains("verdict is pass where its rules give fail"));
        gate.verdict = Verdict::Fail;
        gate.rules[0].measured = crate::report::common::Num(0.05);
        gate.rules[0].pass = true;
        gate.verdict = Verdict::Pass;
        let e = rules_follow(&gate, true, |_| Some(73.0)).unwrap_err();
        assert!(
            e.contains("states the measured value 0.05 where the report's figures give 73"),
            "{e}"
        );
        assert!(exit_follows(ExitCode::Success, false, Verdict::Fail).is_err());
        assert!(exit_follows(ExitCode::TargetFailed, true, Verdict::Fail).is_ok());
    }
}
