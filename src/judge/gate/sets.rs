//! What the statistical limits of the audits that run a set (`eval`, generation) are held to:
//! for each target, the figure a limit reads off its report (what it measures, the estimate, the
//! bound that cannot pass by luck). The audits form their gates with these, and `render` judges a
//! stored report again with the same functions.

use super::Bounded;
use crate::analyses::accuracy::stats::{wilson, wilson_lower, Z90};
use crate::judge::policy::{Limit, Limits};
use crate::report::eval::{EvalTarget, SequentialDecision};
use crate::report::gate::{Bound, Measure, Rule};
use crate::report::generation::{CorpusFigures, GenerationTarget, GenerationTask, TargetSummary};

/// A sequential decision's bound of `rule`: the one that crossed the limit (while undecided the
/// one that would pass it, `passing_upper` or not).
fn decided(t: &EvalTarget, rule: Rule, passing_upper: bool) -> Option<f64> {
    let r = t.sequential.as_ref()?.rules.iter().find(|r| r.rule == rule)?;
    let (passing, failing) = if passing_upper {
        (r.upper.0, r.lower.0)
    } else {
        (r.lower.0, r.upper.0)
    };
    Some(match r.decision {
        SequentialDecision::Fail => failing,
        SequentialDecision::Pass | SequentialDecision::Undecided => passing,
    })
}

/// What `min_accuracy` judges: the accuracy's one-sided 95% lower bound (the sequence's, in a
/// sequential eval).
pub fn eval_accuracy(t: &EvalTarget) -> Bounded {
    let estimate = t.metrics.as_ref().map_or(f64::NAN, |m| m.accuracy.value.0);
    let (bound, kind) = match decided(t, Rule::MinAccuracy, false) {
        Some(b) => (b, Bound::Sequence),
        None => (
            t.metrics
                .as_ref()
                .map_or(f64::NAN, |m| wilson_lower(m.accuracy.k, m.accuracy.n)),
            Bound::WilsonLower,
        ),
    };
    Bounded {
        measure: Measure::Accuracy,
        estimate,
        bound,
        kind,
    }
}

/// What `max_accuracy_drop` judges: the drop's one-sided 95% upper bound against the reference
/// (Tango's for accuracy, the paired bootstrap's for the CER; the sequence's, in a sequential
/// eval).
pub fn eval_drop(t: &EvalTarget, cer: bool) -> Bounded {
    let against = t.comparisons.iter().find(|c| c.against == "reference");
    let estimate = against.map_or(f64::NAN, |c| c.drop.value.0);
    let (bound, kind) = match decided(t, Rule::MaxAccuracyDrop, true) {
        Some(b) => (b, Bound::Sequence),
        None => (
            against.map_or(f64::NAN, |c| c.drop_upper.0),
            if cer { Bound::BootstrapUpper } else { Bound::TangoUpper },
        ),
    };
    Bounded {
        measure: if cer {
            Measure::CerIncrease
        } else {
            Measure::AccuracyDrop
        },
        estimate,
        bound,
        kind,
    }
}

/// The rules a generation audit of `task` gates with, in the order it forms them.
pub fn generation_rules(task: GenerationTask) -> &'static [Rule] {
    match task {
        GenerationTask::Transcribe | GenerationTask::Generate => &[Rule::MaxAccuracyDrop, Rule::MinAccuracy],
        GenerationTask::Score => &[Rule::MaxKldMean, Rule::MaxKldP99, Rule::MinSameTop, Rule::MaxPplRatio],
    }
}

/// The limit a policy sets for a set-wide statistical `rule` (`None`: not set, or not such a rule).
pub fn limit_of(limits: &Limits, rule: Rule) -> Option<&Limit<f64>> {
    match rule {
        Rule::MinAccuracy => limits.min_accuracy.as_ref(),
        Rule::MaxAccuracyDrop => limits.max_accuracy_drop.as_ref(),
        Rule::MaxKldMean => limits.max_kld_mean.as_ref(),
        Rule::MaxKldP99 => limits.max_kld_p99.as_ref(),
        Rule::MinSameTop => limits.min_same_top.as_ref(),
        Rule::MaxPplRatio => limits.max_ppl_ratio.as_ref(),
        _ => None,
    }
}

/// What `rule` judges of a generation target under `task` (`None`: the task does not gate with
/// it). The audit forms its gate with this, and `render` judges a stored report with it again.
pub fn generation_figure(task: GenerationTask, rule: Rule, t: &GenerationTarget) -> Option<Bounded> {
    if !generation_rules(task).contains(&rule) {
        return None;
    }
    match rule {
        Rule::MaxAccuracyDrop => generation_drop(task, &t.summary),
        Rule::MinAccuracy => generation_accuracy(task, &t.summary),
        _ => Some(
            t.corpus
                .as_ref()
                .map_or_else(|| unmeasured_corpus(rule), |c| corpus(rule, c)),
        ),
    }
}

/// A corpus limit's figure: what it measures, the estimate, the bound over windows.
fn corpus(rule: Rule, c: &CorpusFigures) -> Bounded {
    let b = &c.bounds;
    let (measure, estimate, bound) = match rule {
        Rule::MaxKldMean => (Measure::KldMean, c.kld.mean.0, b.kld_mean_upper.0),
        Rule::MaxKldP99 => (Measure::KldP99, c.kld.p99.0, b.kld_p99_upper.0),
        Rule::MinSameTop => (Measure::SameTop, c.same_top.share.0, b.same_top_lower.0),
        _ => (Measure::PplRatio, c.perplexity.ln_ratio.0.exp(), b.ppl_ratio_upper.0),
    };
    Bounded {
        measure,
        estimate,
        bound,
        kind: Bound::WindowBootstrap,
    }
}

/// A corpus limit on a target with no corpus figures (it scored no window): not measured.
fn unmeasured_corpus(rule: Rule) -> Bounded {
    let empty = |measure| Bounded {
        measure,
        estimate: f64::NAN,
        bound: f64::NAN,
        kind: Bound::WindowBootstrap,
    };
    empty(match rule {
        Rule::MaxKldMean => Measure::KldMean,
        Rule::MaxKldP99 => Measure::KldP99,
        Rule::MinSameTop => Measure::SameTop,
        _ => Measure::PplRatio,
    })
}

/// What `max_accuracy_drop` judges: for `transcribe` the WER's increase in points (its paired
/// bootstrap's 95th percentile, which a sample with no word edit differing cannot give); for
/// `generate` the share of samples whose text differs from the reference's, in points (its
/// one-sided 95% Wilson bound).
fn generation_drop(task: GenerationTask, m: &TargetSummary) -> Option<Bounded> {
    Some(match task {
        GenerationTask::Score => return None,
        GenerationTask::Transcribe => Bounded {
            measure: Measure::WerIncrease,
            estimate: m.wer_delta_points.map_or(f64::NAN, |v| v.0),
            bound: m.wer_delta_upper.map_or(f64::NAN, |v| v.0),
            kind: Bound::BootstrapUpper,
        },
        GenerationTask::Generate => {
            let (differ, n) = ((m.samples - m.same_text) as u64, m.samples as u64);
            Bounded {
                measure: Measure::TextDisagreement,
                estimate: if n == 0 {
                    f64::NAN
                } else {
                    100.0 * differ as f64 / n as f64
                },
                bound: if n == 0 {
                    f64::NAN
                } else {
                    100.0 * wilson(differ, n, Z90).1
                },
                kind: Bound::WilsonUpper,
            }
        }
    })
}

/// What `min_accuracy` judges: the share of transcripts equal to their label (`transcribe`) or
/// of texts equal to the reference's (`generate`), at its one-sided 95% Wilson lower bound.
fn generation_accuracy(task: GenerationTask, m: &TargetSummary) -> Option<Bounded> {
    let (measure, k, n) = match task {
        GenerationTask::Score => return None,
        GenerationTask::Transcribe => (
            Measure::ExactTranscripts,
            m.scores.as_ref().map_or(0, |s| s.exact),
            m.scores.as_ref().map_or(0, |s| s.samples),
        ),
        GenerationTask::Generate => (Measure::SameText, m.same_text, m.samples),
    };
    let (k, n) = (k as u64, n as u64);
    Some(Bounded {
        measure,
        estimate: if n == 0 { f64::NAN } else { k as f64 / n as f64 },
        bound: wilson_lower(k, n),
        kind: Bound::WilsonLower,
    })
}
