//! What `compare` adds from the fingerprints: each target's fingerprint (cached, or measured for
//! this audit), determinism under `--repeat`, and a reading of each target's code differences
//! from the baseline ("±1 LSB in 0.4% of codes, consistent with half-up rounding in
//! requantization").

use std::collections::{BTreeMap, HashMap};

use crate::compare::Agreement;
use crate::exec::{Executor, Outcome, PlannedTarget, RunStatus};
use crate::fingerprint::result::TargetFingerprint;
use crate::fingerprint::rounding::Rounding;
use crate::fingerprint::{cache, probes, run, FingerprintOptions};
use crate::outcome::TargetEnd;
use crate::report::model::{
    AgreementEntry, Determinism, DriftExplanation, FingerprintBrief, Num, ThreadDifference, ThreadProbe,
};
use crate::tensor::Tensor;

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
                    notes.push(format!("fingerprints unavailable: {}", crate::error::one_line(&e)));
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
        differences: result.repeat_differences.clone(),
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
    pub fn of(graph: &crate::model::pb::GraphProto) -> ModelOps {
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

    fn relevant(&self, p: &crate::fingerprint::result::ProbeResult) -> bool {
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

/// The reading of one target's code differences from the baseline on one output.
pub fn explanation_text(
    codes: &crate::report::model::CodeDiffs,
    elements: u64,
    target: Option<&TargetFingerprint>,
    baseline: Option<&TargetFingerprint>,
    baseline_id: &str,
    model: &ModelOps,
) -> String {
    let pct = |n: u64| 100.0 * n as f64 / elements.max(1) as f64;
    let larger = codes.off_by_two + codes.off_by_more;
    let t_rule = target.and_then(|f| f.requant_rounding()).and_then(rule_label);
    let b_rule = baseline.and_then(|f| f.requant_rounding()).and_then(rule_label);
    if larger == 0 {
        let head = format!("±1 LSB in {:.3}% of codes, none larger", pct(codes.off_by_one));
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
    let mut text = format!(
        "±1 LSB in {:.3}%, ±2 or more in {:.3}% of codes (max {} LSB): more than rounding explains, different arithmetic",
        pct(codes.off_by_one),
        pct(larger),
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
    use crate::fingerprint::result::ProbeResult;
    use crate::report::model::CodeDiffs;

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
}
