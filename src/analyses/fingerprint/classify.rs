//! Turning a probe's outputs into a verdict: which candidate rule predicts every point, how many
//! points decided it, and the points that show it.

use anyhow::{bail, Result};

use super::probes::{Expect, Kind, Probe};
use super::result::{CandidateScore, Evidence, ProbeResult};
use super::rounding::{CodeRange, Rounding};
use crate::data::tensor::Tensor;

/// Evidence rows kept per probe.
const EVIDENCE_ROWS: usize = 8;

/// One integer point of a probe: (output, index, ideal, range, observed code).
type Point = (usize, usize, f64, CodeRange, i64);

impl ProbeResult {
    /// A result for `probe` with nothing measured yet: classification fills it in, or the runner
    /// gives it a verdict and error when the probe did not run.
    pub fn blank(probe: &Probe) -> ProbeResult {
        ProbeResult {
            probe: probe.id.to_string(),
            kind: probe.kind.name().to_string(),
            op: probe.op.to_string(),
            dtype: probe.dtype.to_string(),
            verdict: String::new(),
            summary: String::new(),
            points: 0,
            discriminating: 0,
            agreeing: 0,
            candidates: Vec::new(),
            max_lsb: None,
            off_by_one: None,
            off_by_more: None,
            tie_window: None,
            code_step: None,
            repeats: 1,
            repeat_differences: 0,
            placement: None,
            evidence: Vec::new(),
            expected: probe.control.map(str::to_string),
            error: None,
        }
    }
}

/// Evidence rows for integer points: the input, the ideal code before rounding, what `predict`
/// says each candidate gives, and the target's code.
fn code_evidence(
    probe: &Probe,
    points: &[Point],
    predict: impl Fn(f64, &CodeRange) -> Vec<(String, f64)>,
) -> Vec<Evidence> {
    spread(points)
        .into_iter()
        .map(|(k, i, v, range, obs)| Evidence {
            output: k,
            index: i,
            input: input_words(probe, i),
            ideal: v + range.zero_point as f64,
            predicted: predict(v, &range),
            observed: obs as f64,
        })
        .collect()
}

/// Classifies one probe's outputs (the first run's). Placement, repeats and errors are the
/// caller's to add.
pub fn classify(probe: &Probe, observed: &[Tensor]) -> Result<ProbeResult> {
    if observed.len() != probe.expect.len() {
        bail!(
            "the probe has {} output(s) but the target returned {}",
            probe.expect.len(),
            observed.len()
        );
    }
    for (k, (e, t)) in probe.expect.iter().zip(observed).enumerate() {
        let want = match e {
            Expect::Codes { ideal, .. } => ideal.len(),
            Expect::Floats { candidates } => candidates.first().map(|c| c.1.len()).unwrap_or(0),
        };
        if t.len() != want {
            bail!("output {k} has {} elements, the probe expects {want}", t.len());
        }
        if matches!(e, Expect::Codes { .. }) == t.dtype().is_float() {
            bail!("output {k} has type {}, not what the probe expects", t.dtype().name());
        }
    }
    let mut r = ProbeResult::blank(probe);
    match probe.kind {
        Kind::Rounding => rounding(probe, observed, &mut r),
        Kind::Saturation => saturation(probe, observed, &mut r),
        Kind::Accuracy => accuracy(probe, observed, &mut r),
        Kind::Accumulation | Kind::Precision => float_candidates(probe, observed, &mut r),
    }
    Ok(r)
}

/// Every integer point of a probe: (output, index, ideal, range, observed code).
fn code_points<'a>(
    probe: &'a Probe,
    observed: &'a [Tensor],
) -> impl Iterator<Item = (usize, usize, f64, CodeRange, i64)> + 'a {
    probe.expect.iter().zip(observed).enumerate().flat_map(|(k, (e, t))| {
        let (ideal, range) = match e {
            Expect::Codes { ideal, range } => (ideal.as_slice(), *range),
            Expect::Floats { .. } => (&[][..], CodeRange::of("", 0)),
        };
        ideal
            .iter()
            .enumerate()
            .map(move |(i, &v)| (k, i, v, range, t.data.get_i128(i).unwrap_or(i128::MAX) as i64))
    })
}

/// The probe's input at a point, in words, when the point has one input element of its own.
fn input_words(probe: &Probe, index: usize) -> String {
    if !probe.elementwise() {
        return format!("output element {index}");
    }
    probe
        .inputs
        .iter()
        .map(|(name, t)| {
            let i = index % t.len().max(1);
            if t.dtype().is_float() {
                format!("{name} = {}", t.data.get_f64(i))
            } else {
                format!("{name} = {}", t.data.get_i128(i).unwrap_or_default())
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Distances in codes from the correctly rounded (half-even) code.
fn distances(probe: &Probe, observed: &[Tensor], r: &mut ProbeResult) {
    let (mut max, mut one, mut more) = (0u64, 0u64, 0u64);
    for (_, _, v, range, obs) in code_points(probe, observed) {
        let d = obs.abs_diff(range.code(v, Rounding::HalfEven));
        max = max.max(d);
        one += (d == 1) as u64;
        more += (d > 1) as u64;
    }
    r.max_lsb = Some(max);
    r.off_by_one = Some(one);
    r.off_by_more = Some(more);
    r.code_step = code_step(probe, observed);
}

/// The largest power of two that divides every returned code (relative to the zero point) but
/// not every correctly rounded one: the target drops that many low bits.
fn code_step(probe: &Probe, observed: &[Tensor]) -> Option<u64> {
    let (mut seen, mut ideal) = (0u64, 0u64);
    for (_, _, v, range, obs) in code_points(probe, observed) {
        seen |= obs.abs_diff(range.zero_point);
        ideal |= range.code(v, Rounding::HalfEven).abs_diff(range.zero_point);
    }
    let step = |bits: u64| if bits == 0 { 1 } else { 1u64 << bits.trailing_zeros() };
    (step(seen) > step(ideal)).then(|| step(seen))
}

/// When every miss of a nearest-rounding rule is a value near a tie (below 1/4 LSB from it) that
/// the target rounded to the tie's other neighbour, the rule holds at a coarser precision than
/// the probe's: returns the largest such distance, and whether every miss went the way the rule
/// rounds the tie itself (`true`: treated as a tie) or some went either way (limited precision).
fn tie_window(misses: &[Point], rule: Rounding) -> Option<(f64, bool)> {
    if misses.is_empty() || matches!(rule, Rounding::Floor | Rounding::Trunc) {
        return None;
    }
    let (mut window, mut as_tie) = (0.0f64, true);
    for &(_, _, v, range, obs) in misses {
        let tie = v.floor() + 0.5;
        let d = (v - tie).abs();
        let neighbours = [range.code(tie - 0.5, rule), range.code(tie + 0.5, rule)];
        if d >= 0.25 || !neighbours.contains(&obs) {
            return None;
        }
        as_tie &= range.code(tie, rule) == obs;
        window = window.max(d);
    }
    Some((window, as_tie))
}

/// Picks up to `EVIDENCE_ROWS` of `rows`, spread over the list.
fn spread<T: Clone>(rows: &[T]) -> Vec<T> {
    if rows.len() <= EVIDENCE_ROWS {
        return rows.to_vec();
    }
    (0..EVIDENCE_ROWS)
        .map(|i| rows[i * rows.len() / EVIDENCE_ROWS].clone())
        .collect()
}

/// Counts, for every candidate rule, the points it predicts; returns the counts and the
/// deciding points (where the rules disagree).
fn score_rules(probe: &Probe, observed: &[Tensor], r: &mut ProbeResult) -> ([u64; Rounding::ALL.len()], Vec<Point>) {
    let mut matching = [0u64; Rounding::ALL.len()];
    let mut deciding: Vec<Point> = Vec::new();
    for p @ (_, _, v, range, obs) in code_points(probe, observed) {
        r.points += 1;
        let preds: Vec<i64> = Rounding::ALL.iter().map(|&m| range.code(v, m)).collect();
        for (m, &pred) in preds.iter().enumerate() {
            matching[m] += (pred == obs) as u64;
        }
        if preds.iter().any(|&c| c != preds[0]) {
            r.discriminating += 1;
            deciding.push(p);
        }
    }
    r.candidates = Rounding::ALL
        .iter()
        .zip(matching)
        .map(|(m, n)| CandidateScore {
            candidate: m.name().into(),
            matching: n,
        })
        .collect();
    (matching, deciding)
}

fn deciding_matches(deciding: &[Point], m: Rounding) -> u64 {
    deciding
        .iter()
        .filter(|(_, _, v, range, obs)| range.code(*v, m) == *obs)
        .count() as u64
}

fn rounding(probe: &Probe, observed: &[Tensor], r: &mut ProbeResult) {
    let (matching, deciding) = score_rules(probe, observed, r);
    let full: Vec<Rounding> = Rounding::ALL
        .iter()
        .zip(matching)
        .filter(|(_, n)| *n == r.points)
        .map(|(m, _)| *m)
        .collect();
    distances(probe, observed, r);
    let shown: Vec<Point> = match full.as_slice() {
        [one] => {
            r.verdict = one.name().into();
            r.agreeing = deciding_matches(&deciding, *one);
            r.summary = format!("{} {}/{}", one.label(), r.agreeing, r.discriminating);
            spread(&deciding)
        }
        [] => no_rule_fits(probe, observed, &matching, &deciding, r),
        several => {
            r.verdict = several.iter().map(|m| m.name()).collect::<Vec<_>>().join("|");
            r.agreeing = r.discriminating;
            r.summary = format!(
                "{} (probe cannot tell)",
                several.iter().map(|m| m.label()).collect::<Vec<_>>().join(" or ")
            );
            spread(&deciding)
        }
    };
    r.evidence = code_evidence(probe, &shown, |v, range| {
        Rounding::ALL
            .iter()
            .map(|&m| (m.name().to_string(), range.code(v, m) as f64))
            .collect()
    });
}

/// No rule predicts every point: the nearest rule with the window around ties it misses, or
/// `other`. Returns the points shown as evidence (the misses).
fn no_rule_fits(
    probe: &Probe,
    observed: &[Tensor],
    matching: &[u64],
    deciding: &[Point],
    r: &mut ProbeResult,
) -> Vec<Point> {
    let (best, best_n) = Rounding::ALL
        .iter()
        .zip(matching.iter().copied())
        .max_by_key(|(_, n)| *n)
        .map(|(m, n)| (*m, n))
        .unwrap_or((Rounding::HalfEven, 0));
    let misses: Vec<_> = code_points(probe, observed)
        .filter(|(_, _, v, range, obs)| range.code(*v, best) != *obs)
        .collect();
    r.agreeing = deciding_matches(deciding, best);
    match tie_window(&misses, best) {
        Some((window, as_tie)) => {
            r.verdict = best.name().into();
            r.tie_window = Some(window);
            let how = if as_tie {
                "rounded as ties"
            } else {
                "rounded either way"
            };
            r.summary = format!(
                "{} {}/{}, values within {window:.4} LSB of a tie {how}",
                best.label(),
                r.agreeing,
                r.discriminating
            );
        }
        None => {
            r.verdict = "other".into();
            r.summary = format!(
                "other: nearest {} {}/{}, max {} LSB{}",
                best.label(),
                best_n,
                r.points,
                r.max_lsb.unwrap_or(0),
                r.code_step
                    .map(|s| format!(", every code a multiple of {s}"))
                    .unwrap_or_default()
            );
        }
    }
    spread(&misses)
}

fn saturation(probe: &Probe, observed: &[Tensor], r: &mut ProbeResult) {
    let (mut sat, mut wrap) = (0u64, 0u64);
    let mut outside: Vec<Point> = Vec::new();
    for p @ (_, _, v, range, obs) in code_points(probe, observed) {
        r.points += 1;
        let clamped = range.code(v, Rounding::HalfEven);
        let wrapped = range.wrapped(v);
        sat += (obs == clamped) as u64;
        wrap += (obs == wrapped) as u64;
        if clamped != wrapped {
            r.discriminating += 1;
            outside.push(p);
        }
    }
    r.candidates = vec![
        CandidateScore {
            candidate: "saturate".into(),
            matching: sat,
        },
        CandidateScore {
            candidate: "wrap".into(),
            matching: wrap,
        },
    ];
    distances(probe, observed, r);
    let outside_matching = |wrapping: bool| {
        outside
            .iter()
            .filter(|(_, _, v, range, obs)| {
                *obs == if wrapping {
                    range.wrapped(*v)
                } else {
                    range.code(*v, Rounding::HalfEven)
                }
            })
            .count() as u64
    };
    if sat == r.points {
        r.verdict = "saturate".into();
        r.agreeing = outside_matching(false);
        r.summary = format!("saturates {}/{}", r.agreeing, r.discriminating);
    } else if wrap == r.points {
        r.verdict = "wrap".into();
        r.agreeing = outside_matching(true);
        r.summary = format!("wraps {}/{}", r.agreeing, r.discriminating);
    } else {
        r.verdict = "other".into();
        r.agreeing = outside_matching(false);
        r.summary = format!("other: saturates {}/{} out of range", r.agreeing, r.discriminating);
    }
    r.evidence = code_evidence(probe, &outside, |v, range| {
        vec![
            ("saturate".into(), range.code(v, Rounding::HalfEven) as f64),
            ("wrap".into(), range.wrapped(v) as f64),
        ]
    });
}

fn accuracy(probe: &Probe, observed: &[Tensor], r: &mut ProbeResult) {
    let mut off: Vec<Point> = Vec::new();
    for p @ (_, _, v, range, obs) in code_points(probe, observed) {
        r.points += 1;
        if obs != range.code(v, Rounding::HalfEven) {
            off.push(p);
        }
    }
    distances(probe, observed, r);
    r.discriminating = r.points;
    r.agreeing = r.points - off.len() as u64;
    r.candidates = vec![CandidateScore {
        candidate: "correctly_rounded".into(),
        matching: r.agreeing,
    }];
    let max = r.max_lsb.unwrap_or(0);
    (r.verdict, r.summary) = match max {
        0 => ("exact".into(), format!("exact {}/{}", r.agreeing, r.points)),
        1 => ("faithful".into(), format!("±1 LSB on {}/{}", off.len(), r.points)),
        m => (
            "approximate".into(),
            format!("approx.: max {m} LSB, {}/{} off", off.len(), r.points),
        ),
    };
    r.evidence = code_evidence(probe, &off, |v, range| {
        vec![("correctly_rounded".into(), range.code(v, Rounding::HalfEven) as f64)]
    });
}

/// How far a float result may sit from a candidate and still be that candidate's result:
/// 2^-10 relative (an fp16 unit in the last place) or 2^-24 absolute (fp16's smallest
/// subnormal). A target that computes in fp16 converts its result to f32 with a small error
/// (seen on the QNN HTP simulator: about 2^-23 relative plus 1.5e-11 absolute), while the
/// candidates a probe tells apart differ by at least an fp16 rounding step.
fn float_tolerance(candidate: f32) -> f64 {
    (candidate.abs() as f64 * 2f64.powi(-10)).max(2f64.powi(-24))
}

/// Points of a float probe each candidate explains, the largest relative deviation of the
/// points it explains, and the deciding points (output, element).
struct FloatScores {
    scores: Vec<(String, u64)>,
    deviation: Vec<f64>,
    deciding: Vec<(usize, usize)>,
}

fn score_floats(probe: &Probe, observed: &[Tensor], r: &mut ProbeResult) -> FloatScores {
    let mut f = FloatScores {
        scores: Vec::new(),
        deviation: Vec::new(),
        deciding: Vec::new(),
    };
    for (k, (e, t)) in probe.expect.iter().zip(observed).enumerate() {
        let Expect::Floats { candidates } = e else { continue };
        if f.scores.is_empty() {
            f.scores = candidates.iter().map(|(n, _)| (n.to_string(), 0)).collect();
            f.deviation = vec![0.0; candidates.len()];
        }
        for i in 0..t.len() {
            r.points += 1;
            let obs = t.data.get_f64(i);
            // A point belongs to the nearest candidates (several when they coincide), if close
            // enough to them.
            let dist: Vec<f64> = candidates
                .iter()
                .map(|(_, v)| {
                    if obs.is_nan() && v[i].is_nan() {
                        0.0
                    } else {
                        (obs - v[i] as f64).abs()
                    }
                })
                .collect();
            let nearest = dist.iter().cloned().fold(f64::INFINITY, f64::min);
            for (c, (_, values)) in candidates.iter().enumerate() {
                if dist[c] == nearest && dist[c] <= float_tolerance(values[i]) {
                    f.scores[c].1 += 1;
                    if dist[c] > 0.0 {
                        let rel = dist[c] / (values[i].abs() as f64).max(f64::MIN_POSITIVE);
                        f.deviation[c] = f.deviation[c].max(rel);
                    }
                }
            }
            if candidates
                .iter()
                .any(|(_, v)| v[i].to_bits() != candidates[0].1[i].to_bits())
            {
                r.discriminating += 1;
                f.deciding.push((k, i));
            }
        }
    }
    f
}

fn float_candidates(probe: &Probe, observed: &[Tensor], r: &mut ProbeResult) {
    let f = score_floats(probe, observed, r);
    r.candidates = f
        .scores
        .iter()
        .map(|(n, m)| CandidateScore {
            candidate: n.clone(),
            matching: *m,
        })
        .collect();
    match f.scores.iter().position(|(_, m)| *m == r.points) {
        Some(c) => {
            let name = &f.scores[c].0;
            r.verdict = name.clone();
            r.agreeing = r.discriminating;
            let close = if f.deviation[c] == 0.0 {
                String::new()
            } else {
                format!(", off by up to {:.1e} relative", f.deviation[c])
            };
            r.summary = format!("{} {}/{}{close}", name.replace('_', "-"), r.agreeing, r.discriminating);
        }
        None => {
            r.verdict = "other".into();
            let (best, n) = f.scores.iter().max_by_key(|(_, m)| *m).cloned().unwrap_or_default();
            r.agreeing = n;
            r.summary = format!("other: nearest {} {n}/{}", best.replace('_', "-"), r.points);
        }
    }
    r.evidence = float_evidence(probe, observed, &f.deciding);
}

/// Some deciding points of a float probe, with every candidate's value.
fn float_evidence(probe: &Probe, observed: &[Tensor], deciding: &[(usize, usize)]) -> Vec<Evidence> {
    spread(deciding)
        .into_iter()
        .filter_map(|(k, i)| {
            let Expect::Floats { candidates } = &probe.expect[k] else {
                return None;
            };
            Some(Evidence {
                output: k,
                index: i,
                input: if probe.elementwise() {
                    input_words(probe, i)
                } else {
                    format!("{} inputs", probe.inputs.first().map(|(_, t)| t.len()).unwrap_or(0))
                },
                ideal: candidates[0].1[i] as f64,
                predicted: candidates.iter().map(|(n, v)| (n.to_string(), v[i] as f64)).collect(),
                observed: observed[k].data.get_f64(i),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyses::fingerprint::probes::all;
    use crate::data::tensor::TensorData;

    /// A simulated target: codes from the probe's ideals under an independent rounding function.
    fn simulate(probe: &Probe, round: impl Fn(f64) -> f64) -> Vec<Tensor> {
        probe
            .expect
            .iter()
            .map(|e| {
                let Expect::Codes { ideal, range } = e else {
                    panic!("float probe")
                };
                let codes: Vec<i32> = ideal
                    .iter()
                    .map(|v| (round(*v) as i64 + range.zero_point).clamp(range.min, range.max) as i32)
                    .collect();
                Tensor {
                    shape: vec![codes.len()],
                    data: TensorData::Int32(codes),
                }
            })
            .collect()
    }

    #[test]
    fn simulated_rounding_rules_are_recognised_on_every_rounding_probe() {
        type Rule = (&'static str, fn(f64) -> f64);
        let rules: [Rule; 5] = [
            ("half_even", |v| {
                let f = v.floor();
                if v - f == 0.5 {
                    if f % 2.0 == 0.0 {
                        f
                    } else {
                        f + 1.0
                    }
                } else {
                    (v + 0.5).floor()
                }
            }),
            ("half_away", |v| v.signum() * (v.abs() + 0.5).floor()),
            ("half_up", |v| (v + 0.5).floor()),
            ("floor", f64::floor),
            ("trunc", |v| if v < 0.0 { -(-v).floor() } else { v.floor() }),
        ];
        for probe in all().iter().filter(|p| p.kind == Kind::Rounding && p.control.is_none()) {
            for (name, rule) in rules {
                let r = classify(probe, &simulate(probe, rule)).unwrap();
                assert_eq!(r.verdict, name, "{} under {name}: {}", probe.id, r.summary);
                assert_eq!(r.agreeing, r.discriminating);
            }
        }
    }

    #[test]
    fn near_ties_rounded_as_ties_give_a_window_and_large_errors_do_not() {
        let probe = all().into_iter().find(|p| p.id == "requantize_u8").unwrap();
        // Half-up applied to the value snapped to a tie when within 0.01 LSB of it.
        let snapped = simulate(&probe, |v| {
            let tie = v.floor() + 0.5;
            if (v - tie).abs() < 0.01 {
                (tie + 0.5).floor()
            } else {
                (v + 0.5).floor()
            }
        });
        let r = classify(&probe, &snapped).unwrap();
        assert_eq!(r.verdict, "half_up");
        let w = r.tie_window.unwrap();
        assert!(w > 0.0 && w < 0.01, "{w}");
        // Dropping the 3 low bits is not rounding at all.
        let coarse = simulate(&probe, |v| (v / 8.0).floor() * 8.0);
        let r = classify(&probe, &coarse).unwrap();
        assert_eq!(r.verdict, "other");
        assert!(r.max_lsb.unwrap() > 1);
    }

    #[test]
    fn saturation_and_wrapping_are_told_apart() {
        let probe = all().into_iter().find(|p| p.id == "saturation_u8").unwrap();
        let Expect::Codes { ideal, .. } = &probe.expect[0] else {
            panic!()
        };
        let wrap: Vec<i32> = ideal
            .iter()
            .map(|v| ((*v as i64 + 128).rem_euclid(256)) as i32)
            .collect();
        let t = Tensor {
            shape: vec![wrap.len()],
            data: TensorData::Int32(wrap),
        };
        assert_eq!(classify(&probe, &[t]).unwrap().verdict, "wrap");
        let sat = simulate(&probe, |v| v);
        assert_eq!(classify(&probe, &sat).unwrap().verdict, "saturate");
    }
}
