//! `eval --until-decided`: a gated target's limits decided sample by sample with anytime-valid
//! confidence sequences ([`super::sequential`]), so the eval stops a target as soon as the answer
//! is known instead of running the whole set through a simulator that costs a second a sample.
//!
//! A drop limit watches `d = broken − fixed ∈ {−1, 0, 1}` per sample against the reference (its
//! mean is the accuracy drop); a minimum accuracy watches the correctness in `{0, 1}`. A limit is
//! decided met when its bound clears it (the drop's upper bound at or under the limit, the
//! accuracy's lower bound over it) and decided broken when the other bound crosses it; the target
//! is decided when a limit is broken or every limit is met. The decision depends only on the
//! records in the order they were taken, so the stream that stops a target and the report built
//! from the records (on resume too) reach the same decision at the same sample.

use super::sequential::{ConfidenceSequence, Side};
use super::Record;
use crate::report::common::Num;
use crate::report::eval::{SequentialDecision, SequentialOutcome, SequentialRule};
use crate::report::gate::Rule;

/// Each bound's one-sided miscoverage, uniform over time.
pub const ALPHA: f64 = 0.05;

/// What a decision guarantees, as the report states it.
pub const GUARANTEE: &str = "each limit's bounds hold at every sample size at once with probability 95% (a confidence sequence: coverage uniform over time), so stopping a target the moment its bounds decide is not peeking; a target decided to pass has a drop above its limit (or an accuracy below it) with probability at most 5%, and the samples were taken in a seeded random order so the first ones are a fair draw of the set";

/// The limits a target is gated on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// `max_accuracy_drop` in points.
    pub max_drop_points: Option<f64>,
    /// `min_accuracy` as a fraction.
    pub min_accuracy: Option<f64>,
}

impl Limits {
    /// Whether there is a limit to decide.
    pub fn any(&self) -> bool {
        self.max_drop_points.is_some() || self.min_accuracy.is_some()
    }
}

/// How a target's limits stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Pass,
    Fail,
}

impl Decision {
    /// The decision as the report states it.
    fn stated(decided: Option<Decision>) -> SequentialDecision {
        match decided {
            Some(Decision::Pass) => SequentialDecision::Pass,
            Some(Decision::Fail) => SequentialDecision::Fail,
            None => SequentialDecision::Undecided,
        }
    }
}

/// One limit's sequence and when it was decided.
#[derive(Debug, Clone)]
struct Watch {
    rule: Rule,
    limit: f64,
    sequence: ConfidenceSequence,
    /// The side that means the limit is met.
    passing: Side,
    /// Units of the report per unit of the sequence (points for a drop).
    scale: f64,
    decided: Option<(Decision, usize)>,
}

impl Watch {
    /// A limit the range decides before any sample: a drop limit of 100 points or more (a drop
    /// never exceeds 100) and a minimum accuracy of 0 or less are met; a minimum accuracy of 1 or
    /// more is never shown (no lower bound reaches 100%), nor a drop limit of -100 points or less.
    fn decided_by_its_limit(&self) -> Option<Decision> {
        let (lo, hi) = if self.rule == Rule::MaxAccuracyDrop {
            (-1.0, 1.0)
        } else {
            (0.0, 1.0)
        };
        let limit = self.limit / self.scale;
        let met_at_the_top = self.passing == Side::Below;
        if limit >= hi {
            Some(if met_at_the_top { Decision::Pass } else { Decision::Fail })
        } else if limit <= lo {
            Some(if met_at_the_top { Decision::Fail } else { Decision::Pass })
        } else {
            None
        }
    }

    /// Takes one observation, unless decided: a decided limit keeps the bounds of its decision.
    fn push(&mut self, x: f64, samples: usize) {
        if self.decided.is_some() {
            return;
        }
        self.sequence.push(x);
        if let Some(side) = self.sequence.decides(self.limit / self.scale) {
            let d = if side == self.passing {
                Decision::Pass
            } else {
                Decision::Fail
            };
            self.decided = Some((d, samples));
        }
    }

    fn rule(&self) -> SequentialRule {
        SequentialRule {
            rule: self.rule,
            limit: Num(self.limit),
            lower: Num(self.scale * self.sequence.lower()),
            upper: Num(self.scale * self.sequence.upper()),
            decision: Decision::stated(self.decided.map(|(d, _)| d)),
            decided_at: self.decided.map(|(_, at)| at),
        }
    }
}

/// A gated target's limits, watched sample by sample.
#[derive(Debug, Clone)]
pub struct Decider {
    watches: Vec<Watch>,
    samples: usize,
    decided: Option<Decision>,
}

impl Decider {
    /// A decider for `limits`; `None` when there is no limit.
    pub fn new(limits: Limits) -> Option<Decider> {
        let mut watches = Vec::new();
        if let Some(points) = limits.max_drop_points {
            watches.push(Watch {
                rule: Rule::MaxAccuracyDrop,
                limit: points,
                sequence: ConfidenceSequence::new(-1.0, 1.0, ALPHA),
                passing: Side::Below,
                scale: 100.0,
                decided: None,
            });
        }
        if let Some(fraction) = limits.min_accuracy {
            watches.push(Watch {
                rule: Rule::MinAccuracy,
                limit: fraction,
                sequence: ConfidenceSequence::new(0.0, 1.0, ALPHA),
                passing: Side::Above,
                scale: 1.0,
                decided: None,
            });
        }
        if watches.is_empty() {
            return None;
        }
        for w in &mut watches {
            w.decided = w.decided_by_its_limit().map(|d| (d, 0));
        }
        let mut decider = Decider {
            watches,
            samples: 0,
            decided: None,
        };
        decider.decided = decider.overall();
        Some(decider)
    }

    /// The target's decision from its limits': one broken decides it, all met decide it.
    fn overall(&self) -> Option<Decision> {
        let any_broken = self
            .watches
            .iter()
            .any(|w| matches!(w.decided, Some((Decision::Fail, _))));
        let all_met = self
            .watches
            .iter()
            .all(|w| matches!(w.decided, Some((Decision::Pass, _))));
        if any_broken {
            Some(Decision::Fail)
        } else if all_met {
            Some(Decision::Pass)
        } else {
            None
        }
    }

    /// Takes the target's record of the next sample and the reference's record of it, and says
    /// the decision once there is one (a decided target takes no more samples).
    pub fn push(&mut self, target: &Record, reference: &Record) -> Option<Decision> {
        if self.decided.is_some() {
            return self.decided;
        }
        self.samples += 1;
        let broken = !target.judged.correct && reference.judged.correct;
        let fixed = target.judged.correct && !reference.judged.correct;
        let d = f64::from(u8::from(broken)) - f64::from(u8::from(fixed));
        let correct = f64::from(u8::from(target.judged.correct));
        for w in &mut self.watches {
            let x = if w.rule == Rule::MaxAccuracyDrop { d } else { correct };
            w.push(x, self.samples);
        }
        self.decided = self.overall();
        self.decided
    }

    /// The decision, once made.
    pub fn decision(&self) -> Option<Decision> {
        self.decided
    }

    /// Samples taken (up to the decision).
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// The decision as the report states it.
    pub fn outcome(&self) -> SequentialOutcome {
        SequentialOutcome {
            decision: Decision::stated(self.decided),
            samples_used: self.samples,
            rules: self.watches.iter().map(Watch::rule).collect(),
        }
    }
}

/// The fewest samples that can decide every limit of `limits` met, reached when no sample flips
/// and every one is right: what the set must hold at least for the target to pass (`None` beyond
/// ten million).
pub fn fewest_to_pass(limits: Limits) -> Option<usize> {
    let decider = Decider::new(limits)?;
    // The capital grows geometrically: doubling finds the bracket, bisection the first sample.
    let passes = |t: usize| {
        let mut d = decider.clone();
        d.watches.iter_mut().all(|w| {
            let x = if w.rule == Rule::MaxAccuracyDrop { 0.0 } else { 1.0 };
            w.sequence.push_many(x, t as u64);
            w.sequence.decides(w.limit / w.scale) == Some(w.passing)
        })
    };
    if passes(0) {
        return Some(0);
    }
    let mut hi = 1usize;
    while !passes(hi) {
        hi *= 2;
        if hi > 10_000_000 {
            return None;
        }
    }
    let mut lo = hi / 2;
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if passes(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// The decider after a target's records, taken in order against the reference's records of the
/// same samples, up to its decision (records after it are not taken: the stream makes none).
pub fn replay(limits: Limits, target: &[Record], reference: &[Record]) -> Option<Decider> {
    let mut decider = Decider::new(limits)?;
    let by_index: std::collections::HashMap<usize, &Record> = reference.iter().map(|r| (r.index, r)).collect();
    for t in target {
        let Some(r) = by_index.get(&t.index) else { break };
        if decider.push(t, r).is_some() {
            break;
        }
    }
    Some(decider)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyses::accuracy::task::{Judged, Prediction, Truth};

    fn record(index: usize, correct: bool) -> Record {
        Record {
            index,
            id: index.to_string(),
            prediction: Some(Prediction::Classes(vec![usize::from(!correct)])),
            truth: Truth::Class(0),
            judged: Judged {
                correct,
                in_top_k: None,
                reading: None,
            },
            sqnr_db: None,
            error: None,
        }
    }

    #[test]
    fn a_target_that_never_flips_passes_a_five_point_drop_limit_at_the_closed_form_sample() {
        // Every pair concordant: d = 0 each time, decided when the mixture's capital at 0.05
        // reaches 20 (88 samples, by hand in sequential.rs).
        let limits = Limits {
            max_drop_points: Some(5.0),
            min_accuracy: None,
        };
        let target: Vec<Record> = (0..200).map(|k| record(k, k % 3 != 0)).collect();
        let reference = target.clone();
        let d = replay(limits, &target, &reference).unwrap();
        let outcome = d.outcome();
        assert_eq!((outcome.decision, outcome.samples_used), (SequentialDecision::Pass, 88));
        assert_eq!(fewest_to_pass(limits), Some(88));
        assert!(outcome.rules[0].upper.0 <= 5.0 && outcome.rules[0].lower.0 < 0.0);
    }

    #[test]
    fn a_broken_limit_stops_at_once_and_an_undecided_one_says_so() {
        // The target breaks every third sample the reference gets right: a drop of 33 points.
        let limits = Limits {
            max_drop_points: Some(1.0),
            min_accuracy: Some(0.5),
        };
        let reference: Vec<Record> = (0..300).map(|k| record(k, true)).collect();
        let target: Vec<Record> = (0..300).map(|k| record(k, k % 3 != 0)).collect();
        let d = replay(limits, &target, &reference).unwrap();
        assert_eq!(d.decision(), Some(Decision::Fail));
        let o = d.outcome();
        assert!(o.samples_used < 300);
        assert_eq!(o.rules[0].decision, SequentialDecision::Fail);
        // Limits the range decides: met at once, or never shown.
        let edge = |max_drop_points, min_accuracy| {
            Decider::new(Limits {
                max_drop_points,
                min_accuracy,
            })
            .and_then(|d| d.decision())
        };
        assert_eq!(edge(Some(100.0), None), Some(Decision::Pass));
        assert_eq!(edge(None, Some(0.0)), Some(Decision::Pass));
        assert_eq!(edge(None, Some(1.0)), Some(Decision::Fail));
        assert_eq!(edge(Some(100.0), Some(0.5)), None);
        // 4 samples cannot decide a one-point limit either way.
        let d = replay(limits, &target[..4], &reference[..4]).unwrap();
        assert_eq!(d.outcome().decision, SequentialDecision::Undecided);
        assert!(Decider::new(Limits {
            max_drop_points: None,
            min_accuracy: None
        })
        .is_none());
    }
}
