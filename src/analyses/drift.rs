//! What `compare` adds from the fingerprints: each target's fingerprint (cached, or measured for
//! this audit), determinism under `--repeat`, and a reading of each target's code differences
//! from the baseline ("±1 LSB in 0.4% of codes, consistent with half-up rounding in
//! requantization").

use std::collections::{BTreeMap, HashMap};

use crate::analyses::fingerprint::result::TargetFingerprint;
use crate::analyses::fingerprint::rounding::Rounding;
use crate::analyses::fingerprint::{cache, probes, run, FingerprintOptions};
use crate::analyses::metrics::Agreement;
use crate::analyses::outcome::TargetEnd;
use crate::data::tensor::Tensor;
use crate::execution::exec::{Executor, Outcome, PlannedTarget};
use crate::report::common::Num;
use crate::report::compare::{
    AgreementEntry, Determinism, DriftExplanation, FingerprintBrief, ThreadDifference, ThreadProbe,
};
use crate::report::RunStatus;

/// Whether `compare` shows fingerprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FingerprintMode {
    /// Use the cached fingerprint; measure (and cache) the ones missing.
    Auto,
    /// Use cached fingerprints only.
    Cached,
    /// No fingerprints.
    Off,
}

/// Runs per probe when `compare` measures a fingerprint, so the cache entry also serves
/// `fingerprint` with its default `--repeat`.
const COMPARE_PROBE_REPEAT: usize = 3;

/// Fingerprints of the targets that ran, by id, and notes on the ones missing.
pub fn fingerprints(
    planned: &[PlannedTarget],
    ends: &[TargetEnd<'_>],
    executor: &Executor,
    mode: FingerprintMode,
) -> (HashMap<String, TargetFingerprint>, Vec<String>) {
    let mut notes = Vec::new();
    let ran: Vec<PlannedTarget> = planned
        .iter()
        .zip(ends)
        .filter(|(t, e)| e.status == RunStatus::Ok && t.runtime.is_ok())
        .map(|(t, _)| t.clone())
        .collect();
    let found: Vec<TargetFingerprint> = match mode {
        FingerprintMode::Off => vec![],
        FingerprintMode::Cached => {
            let hits: Vec<TargetFingerprint> = ran
                .iter()
                .filter_map(|t| cache::load(&t.spec, t.runtime.as_ref().ok()?, 1))
                .collect();
            if hits.len() < ran.len() {
                notes.push(format!(
                    "{} target(s) have no cached fingerprint: run `npu-audit fingerprint` for them",
                    ran.len() - hits.len()
                ));
            }
            hits
        }
        FingerprintMode::Auto => {
            let opts = FingerprintOptions {
                repeat: COMPARE_PROBE_REPEAT,
                refresh: false,
                use_cache: true,
            };
            match run::fingerprint(&ran, &probes::all(), executor, &opts) {
                Ok(f) => f,
                Err(e) => {
                    notes.push(format!(
                        "fingerprints unavailable: {}",
                        crate::foundation::error::one_line(&e)
                    ));
                    vec![]
                }
            }
        }
    };
    (found.into_iter().map(|f| (f.target.clone(), f)).collect(), notes)
}

/// The brief a compare report carries.
pub fn brief(fp: &TargetFingerprint) -> FingerprintBrief {
    FingerprintBrief {
        summary: fp.row_summary(),
        verdicts: fp
            .probes
            .iter()
            .map(|p| (p.probe.clone(), p.verdict.clone()))
            .collect::<BTreeMap<_, _>>(),
        cached: fp.cached,
    }
}

/// The runs that measure determinism: `repeat` runs of every sample in one session, and per
/// planned target the run with `thread_probe` intra-op threads (with `repeat` > 1).
pub struct DeterminismRuns<'a> {
    pub repeat: usize,
    pub thread_probe: usize,
    pub probes: Vec<Option<&'a Outcome>>,
}

/// Determinism of a target's runs, when samples were repeated: across the repeats, and against
/// the run with other intra-op threads.
pub fn determinism(end: &TargetEnd<'_>, repeat: usize, probe: Option<ThreadProbe>) -> Option<Determinism> {
    let result = end.outcome.and_then(|o| o.result.as_ref())?;
    (repeat > 1 && end.status == RunStatus::Ok).then(|| Determinism {
        repeats: repeat,
        bit_identical: result.repeat_differences.is_empty(),
        differences: result.repeat_differences.iter().cloned().map(Into::into).collect(),
        thread_probe: probe,
    })
}

/// The target's outputs with `threads` intra-op threads against its audit run, bit for bit.
pub fn thread_probe(end: &TargetEnd<'_>, probe: &Outcome, threads: usize) -> Option<ThreadProbe> {
    let main = end
        .outcome
        .and_then(|o| o.result.as_ref())
        .filter(|_| end.status == RunStatus::Ok)?;
    let mut out = ThreadProbe {
        threads,
        against_threads: main.intra_threads,
        bit_identical: false,
        differences: Vec::new(),
        error: None,
    };
    let Some(other) = probe.result.as_ref().filter(|r| r.ok) else {
        out.error = Some(probe.error.clone().unwrap_or_else(|| "the probe run failed".into()));
        return Some(out);
    };
    for (sample, (a, b)) in main.outputs.iter().zip(&other.outputs).enumerate() {
        for fa in a {
            let Some(fb) = b.iter().find(|f| f.name == fa.name) else {
                continue;
            };
            match compare_files(&fa.path, &fb.path) {
                Ok(Some(d)) => out.differences.push(ThreadDifference {
                    sample,
                    output: fa.name.clone(),
                    differing: d.0,
                    elements: d.1,
                    max_abs: Num(d.2),
                }),
                Ok(None) => {}
                Err(e) => out.error = Some(format!("{}: {e:#}", fa.name)),
            }
        }
    }
    out.bit_identical = out.differences.is_empty() && out.error.is_none();
    Some(out)
}

/// Elements that differ, elements, and the largest absolute difference of two output files;
/// `None` when they are bit-identical.
fn compare_files(a: &std::path::Path, b: &std::path::Path) -> anyhow::Result<Option<(u64, u64, f64)>> {
    let (x, y) = (Tensor::read_npy(a)?, Tensor::read_npy(b)?);
    if x.shape != y.shape || x.dtype() != y.dtype() {
        return Ok(Some((x.len() as u64, x.len() as u64, f64::INFINITY)));
    }
    let mut agreement = Agreement::default();
    agreement.update(&x.data, &y.data);
    let differing = agreement.differing.unwrap_or(agreement.elements);
    Ok((differing > 0).then_some((differing, agreement.elements, agreement.max_abs)))
}

fn rule_label(verdict: &str) -> Option<&'static str> {
    Rounding::ALL.iter().find(|r| r.name() == verdict).map(|r| r.label())
}

/// The probes relevant to the audited model: their key ops are among the model's op types, and
/// 16-bit probes only when the model holds 16-bit quantized tensors.
#[derive(Debug, Clone, Default)]
pub struct ModelOps {
    relevant: std::collections::HashSet<&'static str>,
}

impl ModelOps {
    /// Reads them from the model's graph (building the probe set once).
    pub fn of(graph: &crate::data::model::pb::GraphProto) -> ModelOps {
        let op_types: std::collections::HashSet<&str> =
            graph.node.iter().filter_map(|n| n.op_type.as_deref()).collect();
        let sixteen_bit = graph
            .initializer
            .iter()
            .any(|t| matches!(t.data_type, Some(4) | Some(5)));
        ModelOps {
            relevant: probes::all()
                .iter()
                .filter(|q| q.key_ops.iter().any(|op| op_types.contains(op)))
                .filter(|q| sixteen_bit || !matches!(q.dtype, "u16" | "i16"))
                .map(|q| q.id)
                .collect(),
        }
    }

    fn relevant(&self, p: &crate::analyses::fingerprint::result::ProbeResult) -> bool {
        self.relevant.contains(p.probe.as_str())
    }
}

/// Probe verdicts worth naming when codes differ by more than rounding explains: the ones about
/// ops the model has.
fn notable(fp: &TargetFingerprint, model: &ModelOps) -> Vec<String> {
    fp.probes
        .iter()
        .filter(|p| model.relevant(p))
        .filter_map(|p| {
            if let Some(step) = p.code_step {
                return Some(format!("{} codes in steps of {step}", p.probe));
            }
            match p.verdict.as_str() {
                "approximate" | "faithful" | "other" | "non_deterministic" => Some(format!("{} {}", p.probe, p.cell())),
                "fp16" | "fp16_ftz" | "fp16_result" | "fp16_sequential" => Some(format!("{} {}", p.probe, p.verdict)),
                _ => None,
            }
        })
        .collect()
}

/// `n` with its thousands grouped (`1,048,576`), as counts beside a share are written.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` of `total` codes as a share (`0.400%`) and, when that share would print as 0.000% or
/// 100.000% though it is neither, what it really is with its count: `< 0.001%` and
/// `3 of 1,048,576`, which the sentence puts in parentheses after its "of codes".
fn share(n: u64, total: u64) -> (String, Option<String>) {
    let text = format!("{:.3}%", 100.0 * n as f64 / total.max(1) as f64);
    let count = || Some(format!("{} of {}", grouped(n), grouped(total)));
    match text.as_str() {
        "0.000%" if n > 0 => ("< 0.001%".into(), count()),
        "100.000%" if n < total => ("> 99.999%".into(), count()),
        _ => (text, None),
    }
}

/// The reading of one target's code differences from the baseline on one output. A share is
/// never printed as 0.000% when some code differs (nor 100.000% when some does not), and a kind
/// of difference no code has is said in words, not as a share.
pub fn explanation_text(
    codes: &crate::report::compare::CodeDiffs,
    elements: u64,
    target: Option<&TargetFingerprint>,
    baseline: Option<&TargetFingerprint>,
    baseline_id: &str,
    model: &ModelOps,
) -> String {
    let larger = codes.off_by_two + codes.off_by_more;
    let t_rule = target.and_then(|f| f.requant_rounding()).and_then(rule_label);
    let b_rule = baseline.and_then(|f| f.requant_rounding()).and_then(rule_label);
    if larger == 0 {
        if codes.off_by_one == 0 {
            return "no code differs".into();
        }
        let (one, count) = share(codes.off_by_one, elements);
        let count = count.map_or_else(String::new, |c| format!(" ({c})"));
        let head = format!("±1 LSB in {one} of codes{count}, none larger");
        return match (t_rule, b_rule) {
            (Some(t), Some(b)) if t != b => format!(
                "{head}: consistent with {t} rounding in requantization on this target versus {b} on {baseline_id}"
            ),
            (Some(t), Some(_)) => format!(
                "{head}; both round {t} in requantization, so the differences come from where rounding happens (fused ops, intermediate precision), not from the rule"
            ),
            _ => format!("{head}: rounding differences (no fingerprint says which rule)"),
        };
    }
    let (more, more_count) = share(larger, elements);
    let ones = if codes.off_by_one == 0 {
        "no code 1 LSB apart".to_string()
    } else {
        let (one, count) = share(codes.off_by_one, elements);
        format!(
            "±1 LSB in {one}{}",
            count.map_or_else(String::new, |c| format!(" ({c})"))
        )
    };
    let mut text = format!(
        "{ones}, ±2 or more in {more} of codes ({}max {} LSB): more than rounding explains, different arithmetic",
        more_count.map_or_else(String::new, |c| format!("{c}; ")),
        codes.max_steps
    );
    if let Some(t) = t_rule {
        text.push_str(&format!("; requantization rounds {t}"));
    }
    let shown = target.map(|f| notable(f, model)).unwrap_or_default();
    if !shown.is_empty() {
        text.push_str(&format!("; the fingerprint shows: {}", shown.join(", ")));
    }
    text
}

/// What the fingerprints add to one target's row.
#[derive(Debug, Clone, Default)]
pub struct TargetDrift {
    pub fingerprint: Option<FingerprintBrief>,
    pub determinism: Option<Determinism>,
    /// Per quantized output, its code differences from the baseline read with the fingerprints.
    pub explanations: Vec<DriftExplanation>,
}

/// Fingerprint, determinism and explanations of every planned target.
pub fn per_target(
    planned: &[PlannedTarget],
    ends: &[TargetEnd<'_>],
    fingerprints: &HashMap<String, TargetFingerprint>,
    agreement: &[AgreementEntry],
    baseline_id: Option<&str>,
    runs: &DeterminismRuns<'_>,
    model: &ModelOps,
) -> Vec<TargetDrift> {
    planned
        .iter()
        .zip(ends)
        .enumerate()
        .map(|(i, (t, end))| {
            let id = t.spec.id.as_str();
            let probe = runs
                .probes
                .get(i)
                .copied()
                .flatten()
                .and_then(|p| thread_probe(end, p, runs.thread_probe));
            TargetDrift {
                fingerprint: fingerprints.get(id).map(brief),
                determinism: determinism(end, runs.repeat, probe),
                explanations: baseline_id
                    .filter(|b| *b != id)
                    .map(|base| explanations(id, base, fingerprints, agreement, model))
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// The code differences of target `id` from the baseline `base`, per output, with their reading.
fn explanations(
    id: &str,
    base: &str,
    fingerprints: &HashMap<String, TargetFingerprint>,
    agreement: &[AgreementEntry],
    model: &ModelOps,
) -> Vec<DriftExplanation> {
    let mut out = Vec::new();
    for e in agreement {
        let pair = (e.a == id && e.b == base) || (e.b == id && e.a == base);
        let Some(codes) = e.code_differences.filter(|_| pair) else {
            continue;
        };
        if e.differing_elements == Some(0) || codes.off_by_one + codes.off_by_two + codes.off_by_more == 0 {
            continue;
        }
        out.push(DriftExplanation {
            output: e.output.clone(),
            against: base.to_string(),
            elements: e.elements,
            codes,
            text: explanation_text(
                &codes,
                e.elements,
                fingerprints.get(id),
                fingerprints.get(base),
                base,
                model,
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyses::fingerprint::result::ProbeResult;
    use crate::report::compare::CodeDiffs;

    fn fp(requant: &str) -> TargetFingerprint {
        let probe: ProbeResult = serde_json::from_value(serde_json::json!({
            "probe": "requantize_u8", "kind": "rounding", "op": "", "dtype": "u8", "verdict": requant,
            "summary": "", "points": 1, "discriminating": 1, "agreeing": 1, "candidates": [],
            "max_lsb": 0, "off_by_one": 0, "off_by_more": 0, "tie_window": null, "code_step": null,
            "repeats": 1, "repeat_differences": 0, "placement": null, "evidence": [], "error": null
        }))
        .unwrap();
        TargetFingerprint {
            target: "t".into(),
            status: "ok".into(),
            error: None,
            ort_version: None,
            runtime: None,
            cached: false,
            probes: vec![probe],
        }
    }

    #[test]
    fn one_step_differences_are_read_against_both_rounding_rules() {
        let codes = CodeDiffs {
            lsb: 1.0,
            off_by_one: 4,
            ..Default::default()
        };
        let text = explanation_text(
            &codes,
            1000,
            Some(&fp("half_up")),
            Some(&fp("half_even")),
            "cpu:noopt",
            &ModelOps::default(),
        );
        assert_eq!(
            text,
            "±1 LSB in 0.400% of codes, none larger: consistent with half-up rounding in requantization on this target versus half-even on cpu:noopt"
        );
        let same = explanation_text(
            &codes,
            1000,
            Some(&fp("half_even")),
            Some(&fp("half_even")),
            "b",
            &ModelOps::default(),
        );
        assert!(same.contains("both round half-even"), "{same}");
        let larger = CodeDiffs {
            lsb: 1.0,
            off_by_one: 10,
            off_by_more: 5,
            max_steps: 7,
            ..Default::default()
        };
        let text = explanation_text(&larger, 100, None, None, "b", &ModelOps::default());
        assert!(
            text.starts_with("±1 LSB in 10.000%, ±2 or more in 5.000% of codes (max 7 LSB)"),
            "{text}"
        );
    }

    #[test]
    fn a_share_that_would_print_as_zero_or_all_says_what_it_is() {
        // 3 of 2^20 codes is 0.000286%: printed with three decimals it would be 0.000%.
        let few = CodeDiffs {
            lsb: 1.0,
            off_by_one: 3,
            ..Default::default()
        };
        let text = explanation_text(&few, 1 << 20, None, None, "b", &ModelOps::default());
        assert!(
            text.starts_with("±1 LSB in < 0.001% of codes (3 of 1,048,576), none larger"),
            "{text}"
        );
        // Every code but one: 99.9999%, which would print as 100.000%.
        let most = CodeDiffs {
            lsb: 1.0,
            off_by_one: 1_999_999,
            ..Default::default()
        };
        let text = explanation_text(&most, 2_000_000, None, None, "b", &ModelOps::default());
        assert!(
            text.starts_with("±1 LSB in > 99.999% of codes (1,999,999 of 2,000,000), none larger"),
            "{text}"
        );
        // No code one step apart is said in words, and a rare larger difference gets its count.
        let only_larger = CodeDiffs {
            lsb: 1.0,
            off_by_more: 2,
            max_steps: 9,
            ..Default::default()
        };
        let text = explanation_text(&only_larger, 1_000_000, None, None, "b", &ModelOps::default());
        assert!(
            text.starts_with("no code 1 LSB apart, ±2 or more in < 0.001% of codes (2 of 1,000,000; max 9 LSB)"),
            "{text}"
        );
        assert!(!text.contains("0.000%"), "{text}");
        // An exact 100% is a share like any other.
        let all = CodeDiffs {
            lsb: 1.0,
            off_by_one: 8,
            ..Default::default()
        };
        let text = explanation_text(&all, 8, None, None, "b", &ModelOps::default());
        assert!(text.starts_with("±1 LSB in 100.000% of codes, none larger"), "{text}");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_048_576), "1,048,576");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }
}
