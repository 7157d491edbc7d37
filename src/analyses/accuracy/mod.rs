//! What accuracy is and how sure a sample makes it (the measures `eval` and `matrix --dataset`
//! report): each run's outputs reduced, sample by sample, to [`Record`]s (what it predicted, the truth, how it scored, the sample's
//! output SQNR against the reference), and every figure computed from records alone (so a sharded
//! or resumed run gives the same figures as one run): metrics with intervals, paired comparisons
//! (Tango's score bounds or the bootstrap, McNemar, non-inferiority), flips, the worst samples,
//! confusions; sequential decisions on them.

pub mod corpus;
pub mod ctc;
pub mod decide;
pub mod matching;
pub mod paired;
pub mod sequential;
pub mod stats;
pub mod task;

use serde::{Deserialize, Serialize};

use crate::report::common::Num;
use crate::report::eval::{Comparison, ConfusionCell, Estimate, Flip, Metrics, Proportion, SqnrBin, WorstSample};
use stats::{bootstrap, ratio_at, wilson, Spread, Z95};
use task::{Judged, Prediction, Task, TaskKind, Truth};

/// One sample in one run: the unit every figure is computed from, and what a checkpoint keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Record {
    /// The sample's position in the set.
    pub index: usize,
    pub id: String,
    /// What the run predicted (absent when the sample failed on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
    pub truth: Truth,
    pub judged: Judged,
    /// The sample's output SQNR against the reference (the worst output), for targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqnr_db: Option<Num>,
    /// Why the sample failed on this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Record {
    /// The record of a sample the run failed on: wrong, and for a transcript every character
    /// missing.
    pub fn failed(task: &Task, index: usize, id: String, truth: Truth, error: String) -> Record {
        let empty = match &task.kind {
            TaskKind::Ctc { .. } => Prediction::Text(String::new()),
            TaskKind::Decide { .. } => Prediction::Decision(false),
            _ => Prediction::Classes(Vec::new()),
        };
        let mut judged = task.judge(&empty, &truth);
        judged.correct = false;
        Record {
            index,
            id,
            prediction: None,
            truth,
            judged,
            sqnr_db: None,
            error: Some(error),
        }
    }
}

impl Record {
    /// How the record's prediction scores against `truth`, as the stream judges it (a sample the
    /// run failed on is wrong): a record's stored verdict is never trusted where this can be
    /// computed (a resumed eval, a merge of shards).
    pub fn judged_against(&self, task: &Task, truth: &Truth) -> Judged {
        match &self.prediction {
            Some(p) => task.judge(p, truth),
            None => {
                let error = self.error.clone().unwrap_or_default();
                Record::failed(task, self.index, self.id.clone(), truth.clone(), error).judged
            }
        }
    }
}

/// How the statistics are drawn (recorded in the report).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StatOptions {
    pub seed: u64,
    pub resamples: usize,
    /// Non-inferiority margin in points of the primary metric.
    pub margin_points: Option<f64>,
    /// `--until-decided`: samples in a seeded random order, each gated target stopped when its
    /// limits are decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<Sequential>,
}

/// A sequential eval's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sequential {
    /// `--order-seed`: the seed of the order the samples are taken in.
    pub order_seed: u64,
}

/// Whether the task's primary metric is the character error rate (else accuracy).
pub fn primary_is_cer(task: &Task) -> bool {
    matches!(task.kind, TaskKind::Ctc { .. })
}

fn proportion(k: u64, n: u64) -> Proportion {
    let (lo, hi) = wilson(k, n, Z95);
    Proportion {
        k,
        n,
        value: Num(if n == 0 { f64::NAN } else { k as f64 / n as f64 }),
        lo: Num(lo),
        hi: Num(hi),
    }
}

/// A bootstrap's figure with its interval; none when every resample gave the same figure (the
/// sample has nothing that varies: a zero-width interval would claim a certainty it does not
/// have).
fn estimate(value: f64, s: &Spread, samples: usize) -> Estimate {
    let unbounded = unbounded_spread(s)
        .then(|| format!("every resample of the {samples} samples gives the same figure: they cannot bound it"));
    Estimate {
        value: Num(value),
        lo: Num(if unbounded.is_some() { f64::NAN } else { s.lo95 }),
        hi: Num(if unbounded.is_some() { f64::NAN } else { s.hi95 }),
        unbounded,
    }
}

/// Whether a bootstrap's spread says nothing: no resample or all of them alike.
fn unbounded_spread(s: &Spread) -> bool {
    s.lo95.partial_cmp(&s.hi95) != Some(std::cmp::Ordering::Less)
}

fn count(records: &[Record], f: impl Fn(&Record) -> bool) -> u64 {
    records.iter().filter(|r| f(r)).count() as u64
}

/// A run's metrics against the truth, from its records.
pub fn metrics(task: &Task, records: &[Record], stats: &StatOptions) -> Metrics {
    let n = records.len() as u64;
    let mut m = Metrics {
        samples: records.len(),
        errors: records.iter().filter(|r| r.error.is_some()).count(),
        accuracy: proportion(count(records, |r| r.judged.correct), n),
        top_k: None,
        precision: None,
        recall: None,
        f1: None,
        cer: None,
        wer: None,
    };
    match &task.kind {
        TaskKind::Classify { top_k, .. } if *top_k > 1 => {
            m.top_k = Some(proportion(count(records, |r| r.judged.in_top_k == Some(true)), n));
        }
        TaskKind::Decide { .. } => decision_metrics(records, stats, &mut m),
        TaskKind::Ctc { .. } => {
            let (ce, cl, we, wl) = reading_columns(records);
            let cer = bootstrap(records.len(), stats.resamples, stats.seed, &mut |i: &[usize]| {
                ratio_at(&ce, &cl, i)
            });
            let wer = bootstrap(records.len(), stats.resamples, stats.seed, &mut |i: &[usize]| {
                ratio_at(&we, &wl, i)
            });
            let all: Vec<usize> = (0..records.len()).collect();
            m.cer = Some(estimate(ratio_at(&ce, &cl, &all), &cer, records.len()));
            m.wer = Some(estimate(ratio_at(&we, &wl, &all), &wer, records.len()));
        }
        _ => {}
    }
    m
}

/// Per record: character edits, label characters, word edits, label words.
fn reading_columns(records: &[Record]) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let r = |f: fn(&task::ReadingCounts) -> usize| -> Vec<f64> {
        records
            .iter()
            .map(|r| r.judged.reading.as_ref().map_or(0.0, |x| f(x) as f64))
            .collect()
    };
    (
        r(|x| x.char_edits),
        r(|x| x.label_chars),
        r(|x| x.word_edits),
        r(|x| x.label_words),
    )
}

/// Precision, recall and F1 of the positive decision.
fn decision_metrics(records: &[Record], stats: &StatOptions, m: &mut Metrics) {
    let decided = |r: &Record| matches!(r.prediction, Some(Prediction::Decision(true)));
    let truth = |r: &Record| matches!(r.truth, Truth::Decision(true));
    let tp: Vec<f64> = records.iter().map(|r| f64::from(decided(r) && truth(r))).collect();
    let fp: Vec<f64> = records.iter().map(|r| f64::from(decided(r) && !truth(r))).collect();
    let fneg: Vec<f64> = records.iter().map(|r| f64::from(!decided(r) && truth(r))).collect();
    let sum = |v: &[f64]| v.iter().sum::<f64>() as u64;
    let (t, f, n) = (sum(&tp), sum(&fp), sum(&fneg));
    m.precision = Some(proportion(t, t + f));
    m.recall = Some(proportion(t, t + n));
    let f1_at = |i: &[usize]| {
        let (t, f, n) = i
            .iter()
            .fold((0.0, 0.0, 0.0), |(a, b, c), &k| (a + tp[k], b + fp[k], c + fneg[k]));
        if t + f + n == 0.0 {
            f64::NAN
        } else {
            2.0 * t / (2.0 * t + f + n)
        }
    };
    let all: Vec<usize> = (0..records.len()).collect();
    let spread = bootstrap(records.len(), stats.resamples, stats.seed, &mut |i: &[usize]| f1_at(i));
    m.f1 = Some(estimate(f1_at(&all), &spread, records.len()));
}

/// The records of two runs on the samples both answered, paired by position.
fn paired<'r>(target: &'r [Record], other: &'r [Record]) -> Vec<(&'r Record, &'r Record)> {
    let by_index: std::collections::HashMap<usize, &Record> = other.iter().map(|r| (r.index, r)).collect();
    target
        .iter()
        .filter_map(|t| by_index.get(&t.index).map(|o| (t, *o)))
        .collect()
}

/// `target` against `other` on the same samples: the primary metric's drop with its bounds
/// (Tango's score interval for accuracy, the paired bootstrap for the CER), McNemar's exact test
/// on correctness, and the margin's verdicts.
pub fn compare(task: &Task, target: &[Record], other: &[Record], against: &str, stats: &StatOptions) -> Comparison {
    let pairs = paired(target, other);
    let fixed = pairs
        .iter()
        .filter(|(t, o)| t.judged.correct && !o.judged.correct)
        .count() as u64;
    let broken = pairs
        .iter()
        .filter(|(t, o)| !t.judged.correct && o.judged.correct)
        .count() as u64;
    let mut c = if primary_is_cer(task) {
        bootstrap_drop(&pairs, stats)
    } else {
        score_drop(broken, fixed, pairs.len() as u64)
    };
    c.against = against.to_string();
    c.pairs = pairs.len() as u64;
    c.fixed = fixed;
    c.broken = broken;
    c.mcnemar_p = Num(stats::mcnemar_exact(fixed, broken));
    if let Some(m) = stats.margin_points {
        // A bound the sample cannot give is within no margin.
        c.non_inferior = Some(c.drop_upper.0 <= m);
        c.equivalent = Some(c.drop_lower.0 >= -m && c.drop_upper.0 <= m);
    }
    c
}

/// A comparison's bounds with its counts and verdicts still to fill in.
fn bounds_only(drop: Estimate, (lower, upper): (f64, f64), method: &str, resolution: Option<f64>) -> Comparison {
    Comparison {
        against: String::new(),
        pairs: 0,
        drop,
        drop_upper: Num(upper),
        drop_lower: Num(lower),
        method: method.into(),
        resolution: resolution.map(Num),
        fixed: 0,
        broken: 0,
        mcnemar_p: Num(f64::NAN),
        non_inferior: None,
        equivalent: None,
    }
}

/// The accuracy drop of paired runs in points, bounded by Tango's score interval
/// ([`paired::drop_bounds`]).
fn score_drop(broken: u64, fixed: u64, n: u64) -> Comparison {
    let Some(b) = paired::drop_bounds(broken, fixed, n) else {
        let drop = Estimate {
            value: Num(f64::NAN),
            lo: Num(f64::NAN),
            hi: Num(f64::NAN),
            unbounded: Some("no sample was answered by both runs".into()),
        };
        return bounds_only(drop, (f64::NAN, f64::NAN), "tango", None);
    };
    let drop = Estimate {
        value: Num(100.0 * b.estimate),
        lo: Num(100.0 * b.lo95),
        hi: Num(100.0 * b.hi95),
        unbounded: None,
    };
    let resolution = 100.0 * paired::resolution(n);
    bounds_only(drop, (100.0 * b.lo90, 100.0 * b.hi90), "tango", Some(resolution))
}

/// The CER gained in points, bounded by the paired percentile bootstrap (no score interval fits
/// a ratio of sums); unbounded when no sample's edits differ between the runs.
fn bootstrap_drop(pairs: &[(&Record, &Record)], stats: &StatOptions) -> Comparison {
    let edits = |r: &Record| r.judged.reading.map_or(0.0, |x| x.char_edits as f64);
    let chars = |r: &Record| r.judged.reading.map_or(0.0, |x| x.label_chars as f64);
    let column = |f: &dyn Fn(&(&Record, &Record)) -> f64| pairs.iter().map(f).collect::<Vec<f64>>();
    let (te, tc) = (column(&|(t, _)| edits(t)), column(&|(t, _)| chars(t)));
    let (oe, oc) = (column(&|(_, o)| edits(o)), column(&|(_, o)| chars(o)));
    let change = paired_rate_change((&te, &tc), (&oe, &oc), stats);
    bounds_only(change.estimate, (change.lower, change.upper), "bootstrap", None)
}

/// A rate pooled over samples (Σ edits / Σ units: a WER, a CER), with its 95% percentile
/// bootstrap interval over samples; no interval when every resample gives the same figure.
pub fn pooled_rate(edits: &[f64], units: &[f64], stats: &StatOptions) -> Estimate {
    let all: Vec<usize> = (0..edits.len()).collect();
    let spread = bootstrap(edits.len(), stats.resamples, stats.seed, &mut |ix| {
        ratio_at(edits, units, ix)
    });
    estimate(ratio_at(edits, units, &all), &spread, edits.len())
}

/// A pooled rate's change between two runs of the same samples, in points (`target − other`),
/// with its paired bootstrap (both resampled on the same samples): the two-sided 95% interval
/// and the one-sided 95% bounds (`lower`, `upper`).
#[derive(Debug, Clone, PartialEq)]
pub struct RateChange {
    pub estimate: Estimate,
    pub lower: f64,
    pub upper: f64,
}

/// The paired change of a pooled rate (`target` and `other` as (edits, units) per sample). A
/// sample where no pair's edits differ cannot bound the change (every resample gives 0): then
/// there is no interval and both bounds are NaN, which fails any limit on them. The CER drop of
/// `eval` and the WER change of a generation audit are this.
pub fn paired_rate_change(target: (&[f64], &[f64]), other: (&[f64], &[f64]), stats: &StatOptions) -> RateChange {
    let ((te, tu), (oe, ou)) = (target, other);
    let n = te.len();
    let mut change_at = |i: &[usize]| 100.0 * (ratio_at(te, tu, i) - ratio_at(oe, ou, i));
    let all: Vec<usize> = (0..n).collect();
    let value = change_at(&all);
    let informative = te.iter().zip(oe).filter(|(t, o)| t != o).count();
    if informative == 0 {
        let estimate = Estimate {
            value: Num(value),
            lo: Num(f64::NAN),
            hi: Num(f64::NAN),
            unbounded: Some(format!(
                "no sample's edits differ between the runs: {} cannot bound the change",
                crate::foundation::words::count(n, "sample")
            )),
        };
        return RateChange {
            estimate,
            lower: f64::NAN,
            upper: f64::NAN,
        };
    }
    let spread = bootstrap(n, stats.resamples, stats.seed, &mut change_at);
    let estimate = estimate(value, &spread, n);
    let (lower, upper) = if estimate.unbounded.is_some() {
        (f64::NAN, f64::NAN)
    } else {
        (spread.lo90, spread.hi90)
    };
    RateChange { estimate, lower, upper }
}

/// What a prediction (or its absence) reads as in a report.
pub fn shown(p: Option<&Prediction>) -> String {
    match p {
        None => "(failed)".into(),
        Some(Prediction::Classes(c)) => c.first().map_or("-".into(), |c| c.to_string()),
        Some(Prediction::Decision(d)) => d.to_string(),
        Some(Prediction::Text(t)) => t.clone(),
    }
}

/// What a truth reads as in a report.
pub fn shown_truth(t: &Truth) -> String {
    match t {
        Truth::Class(c) => c.to_string(),
        Truth::Decision(d) => d.to_string(),
        Truth::Text(s) => s.clone(),
    }
}

/// Every sample whose correctness differs between `reference` and `target`.
pub fn flips(target: &[Record], reference: &[Record]) -> Vec<Flip> {
    paired(target, reference)
        .into_iter()
        .filter(|(t, r)| t.judged.correct != r.judged.correct)
        .map(|(t, r)| Flip {
            id: t.id.clone(),
            label: shown_truth(&t.truth),
            reference: shown(r.prediction.as_ref()),
            target: shown(t.prediction.as_ref()),
            kind: if t.judged.correct { "fixed" } else { "broken" }.into(),
            sqnr_db: t.sqnr_db.unwrap_or(Num(f64::NAN)),
        })
        .collect()
}

/// The `k` samples with the lowest output SQNR (a failed sample first).
pub fn worst(target: &[Record], k: usize) -> Vec<WorstSample> {
    let mut v: Vec<&Record> = target.iter().collect();
    let key = |r: &Record| {
        r.sqnr_db.map_or(
            f64::NEG_INFINITY,
            |s| if s.0.is_nan() { f64::NEG_INFINITY } else { s.0 },
        )
    };
    v.sort_by(|a, b| key(a).total_cmp(&key(b)).then(a.index.cmp(&b.index)));
    v.into_iter()
        .take(k)
        .map(|r| WorstSample {
            id: r.id.clone(),
            sqnr_db: r.sqnr_db.unwrap_or(Num(f64::NAN)),
            correct: r.judged.correct,
        })
        .collect()
}

/// The median per-sample SQNR (NaN-free samples).
pub fn median_sqnr(target: &[Record]) -> Option<Num> {
    let mut v: Vec<f64> = target
        .iter()
        .filter_map(|r| r.sqnr_db.map(|s| s.0))
        .filter(|s| !s.is_nan())
        .collect();
    if v.is_empty() {
        return None;
    }
    Some(Num(stats::percentile(&mut v, 50.0)))
}

/// The width of an SQNR histogram's bins, in dB.
pub const SQNR_BIN_DB: f64 = 5.0;

/// Every sample's output SQNR in [`SQNR_BIN_DB`] bins from the lowest finite value to the
/// highest, right and wrong apart; non-finite SQNRs (an exact output is +inf dB, a failed sample
/// has none) get bins of their own at the ends.
pub fn sqnr_histogram(records: &[Record]) -> Vec<SqnrBin> {
    let sqnr = |r: &Record| {
        r.sqnr_db.map_or(
            f64::NEG_INFINITY,
            |s| if s.0.is_nan() { f64::NEG_INFINITY } else { s.0 },
        )
    };
    let finite: Vec<f64> = records.iter().map(sqnr).filter(|s| s.is_finite()).collect();
    let mut bins: Vec<SqnrBin> = Vec::new();
    let mut add = |lo: f64, hi: f64, inside: &dyn Fn(f64) -> bool| {
        let (mut correct, mut wrong) = (0, 0);
        for r in records.iter().filter(|r| inside(sqnr(r))) {
            if r.judged.correct {
                correct += 1;
            } else {
                wrong += 1;
            }
        }
        if correct + wrong > 0 {
            bins.push(SqnrBin {
                lo_db: Num(lo),
                hi_db: Num(hi),
                correct,
                wrong,
            });
        }
    };
    add(f64::NEG_INFINITY, f64::NEG_INFINITY, &|s| s == f64::NEG_INFINITY);
    if let (Some(lo), Some(hi)) = (
        finite.iter().copied().reduce(f64::min),
        finite.iter().copied().reduce(f64::max),
    ) {
        // Bounded: no SQNR of real outputs is beyond 10,000 dB (f64's range), and a bound keeps a
        // figure from anywhere else from making the loop endless.
        let bin = |v: f64| (v / SQNR_BIN_DB).floor().clamp(-2_000.0, 2_000.0) as i64;
        let (first, last) = (bin(lo), bin(hi));
        for b in first..=last {
            let (a, z) = (b as f64 * SQNR_BIN_DB, (b + 1) as f64 * SQNR_BIN_DB);
            add(a, z, &|s| s.is_finite() && s >= a && s < z);
        }
    }
    add(f64::INFINITY, f64::INFINITY, &|s| s == f64::INFINITY);
    bins
}

/// The confusion cells of a classification (true class, predicted class, count), non-zero only.
pub fn confusion(records: &[Record]) -> Vec<ConfusionCell> {
    let mut cells: std::collections::BTreeMap<(usize, usize), u64> = std::collections::BTreeMap::new();
    for r in records {
        if let (Truth::Class(t), Some(Prediction::Classes(p))) = (&r.truth, &r.prediction) {
            if let Some(&p) = p.first() {
                *cells.entry((*t, p)).or_default() += 1;
            }
        }
    }
    cells
        .into_iter()
        .map(|((truth, predicted), count)| ConfusionCell {
            truth,
            predicted,
            count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(index: usize, correct: bool) -> Record {
        Record {
            index,
            id: index.to_string(),
            prediction: Some(Prediction::Classes(vec![usize::from(!correct)])),
            truth: Truth::Class(0),
            judged: Judged {
                correct,
                in_top_k: Some(true),
                reading: None,
            },
            sqnr_db: Some(Num(index as f64)),
            error: None,
        }
    }

    #[test]
    fn the_sqnr_histogram_bins_by_5_db_and_stays_bounded() {
        let mut records: Vec<Record> = (0..4).map(|k| record(k, k != 1)).collect();
        for (r, s) in records.iter_mut().zip([0.0, 4.9, 5.0, 12.0]) {
            r.sqnr_db = Some(Num(s));
        }
        let bins = sqnr_histogram(&records);
        let got: Vec<(f64, u64, u64)> = bins.iter().map(|b| (b.lo_db.0, b.correct, b.wrong)).collect();
        assert_eq!(got, vec![(0.0, 1, 1), (5.0, 1, 0), (10.0, 1, 0)]);
        // Figures no output can have end in a bounded loop, not an endless one or an overflow.
        records[0].sqnr_db = Some(Num(-1e308));
        records[3].sqnr_db = Some(Num(1e308));
        let bins = sqnr_histogram(&records);
        assert!(bins.len() <= 4001);
    }

    #[test]
    fn paired_counts_and_drops_follow_the_records() {
        let task = Task {
            kind: TaskKind::Classify {
                top_k: 1,
                classes: None,
            },
            output: "y".into(),
        };
        let stats = StatOptions {
            seed: 0,
            resamples: 500,
            margin_points: Some(5.0),
            sequential: None,
        };
        // Reference right on 0..8, target right on 2..10: 2 fixed, 2 broken.
        let reference: Vec<Record> = (0..10).map(|i| record(i, i < 8)).collect();
        let target: Vec<Record> = (0..10).map(|i| record(i, i >= 2)).collect();
        let c = compare(&task, &target, &reference, "reference", &stats);
        assert_eq!((c.fixed, c.broken, c.drop.value.0), (2, 2, 0.0));
        assert_eq!(c.mcnemar_p.0, 1.0);
        let f = flips(&target, &reference);
        assert_eq!(f.iter().filter(|f| f.kind == "broken").count(), 2);
        assert_eq!(worst(&target, 1)[0].id, "0");
        let m = metrics(&task, &target, &stats);
        assert_eq!((m.accuracy.k, m.accuracy.n), (8, 10));
    }

    #[test]
    fn decisions_score_precision_recall_and_f1_by_hand() {
        let task = Task {
            kind: TaskKind::Decide {
                above: true,
                threshold: 0.5,
            },
            output: "p".into(),
        };
        // (decided, truth): 3 true positives, 1 false positive, 2 false negatives, 4 true
        // negatives. Precision 3/4, recall 3/5, F1 2·3 / (2·3 + 1 + 2) = 6/9.
        let pairs = [(true, true); 3]
            .into_iter()
            .chain([(true, false)])
            .chain([(false, true); 2])
            .chain([(false, false); 4]);
        let records: Vec<Record> = pairs
            .enumerate()
            .map(|(index, (d, t))| {
                let (prediction, truth) = (Prediction::Decision(d), Truth::Decision(t));
                Record {
                    index,
                    id: index.to_string(),
                    judged: task.judge(&prediction, &truth),
                    prediction: Some(prediction),
                    truth,
                    sqnr_db: None,
                    error: None,
                }
            })
            .collect();
        let stats = StatOptions {
            seed: 1,
            resamples: 200,
            margin_points: None,
            sequential: None,
        };
        let m = metrics(&task, &records, &stats);
        assert_eq!((m.accuracy.k, m.accuracy.n), (7, 10));
        let p = m.precision.unwrap();
        let r = m.recall.unwrap();
        assert_eq!((p.k, p.n, r.k, r.n), (3, 4, 3, 5));
        let f1 = m.f1.unwrap();
        assert!((f1.value.0 - 6.0 / 9.0).abs() < 1e-12, "{f1:?}");
        assert!(f1.lo.0 <= f1.value.0 && f1.value.0 <= f1.hi.0, "{f1:?}");
    }
}
