//! What the statistical limits of the audits that run a set (`eval`, generation) are held to:
//! for each target, the figure a limit reads off its report (what it measures, the estimate, the
//! bound that cannot pass by luck). The audits form their gates with these, and `render` judges a
//! stored report again with the same functions.

use super::Bounded;
use crate::analyses::accuracy::stats::{wilson, wilson_lower, Z90};
use crate::report::eval::{EvalTarget, SequentialDecision};
use crate::report::gate::{Bound, Measure, Rule};
use crate::report::generation::{GenerationTask, TargetSummary};

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

/// What `max_accuracy_drop` judges: for `transcribe` the WER's increase in points (its paired
/// bootstrap's 95th percentile, which a sample with no word edit differing cannot give); for
/// `generate` the share of samples whose text differs from the reference's, in points (its
/// one-sided 95% Wilson bound).
pub fn generation_drop(task: GenerationTask, m: &TargetSummary) -> Bounded {
    match task {
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
    }
}

/// What `min_accuracy` judges: the share of transcripts equal to their label (`transcribe`) or
/// of texts equal to the reference's (`generate`), at its one-sided 95% Wilson lower bound.
pub fn generation_accuracy(task: GenerationTask, m: &TargetSummary) -> Bounded {
    let (measure, k, n) = match task {
        GenerationTask::Transcribe => (
            Measure::ExactTranscripts,
            m.scores.as_ref().map_or(0, |s| s.exact),
            m.scores.as_ref().map_or(0, |s| s.samples),
        ),
        GenerationTask::Generate => (Measure::SameText, m.same_text, m.samples),
    };
    let (k, n) = (k as u64, n as u64);
    Bounded {
        measure,
        estimate: if n == 0 { f64::NAN } else { k as f64 / n as f64 },
        bound: wilson_lower(k, n),
        kind: Bound::WilsonLower,
    }
}
