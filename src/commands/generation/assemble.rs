//! The report from the decodes: each sample's texts and where they part, each target's figures
//! over the set (WER and CER with bootstrap intervals, paired against the reference's), and the
//! exit code.

use super::figures::{divergence, edits, later_differing, normalise, ReferenceDecode, TargetDecode};
use super::sessions::{Decoded, TargetRun};
use super::spec::GenerationSpec;
use super::{GenSample, GenerationOptions, Specs};
use crate::analyses::accuracy::ctc::edit_distance;
use crate::analyses::accuracy::stats::{bootstrap, mcnemar_exact, ratio_at};
use crate::data::dataset::Dataset;
use crate::foundation::error::ExitCode;
use crate::report::compare::{Num, ToolInfo};
use crate::report::generation::{
    EditCounts, GenerationReport, GenerationRule, GenerationSet, GenerationTarget, PartSummary, ReferenceSample,
    SpecSummary, StepExplanation, StopReason, TargetSample, TargetSummary, TextScores, GENERATION_SCHEMA_VERSION,
};
use crate::report::RunStatus;

/// The report of a generation audit.
pub fn report(
    opts: &GenerationOptions,
    specs: &Specs,
    dataset: &Dataset,
    samples: &[GenSample],
    (decoded, explanations): (Decoded, &[Vec<(usize, StepExplanation)>]),
) -> GenerationReport {
    let spec = &specs.audited;
    let reference_samples: Vec<ReferenceSample> = samples
        .iter()
        .zip(&decoded.reference)
        .map(|(s, d)| reference_sample(spec, s, d))
        .collect();
    let reference_scores = scores(
        opts,
        &reference_samples.iter().map(|r| (r.words, r.chars)).collect::<Vec<_>>(),
    );
    let targets: Vec<GenerationTarget> = decoded
        .targets
        .iter()
        .zip(explanations)
        .map(|(t, x)| target_row(opts, spec, samples, &decoded.reference, &reference_samples, (t, x)))
        .collect();
    let notes = stop_notes(&reference_samples, &targets);
    let gate = gate(opts, &targets);
    let exit_code = match exit_code(&decoded.targets) {
        ExitCode::Success if gate.iter().any(|r| !r.pass) => ExitCode::DriftExceeded,
        code => code,
    };
    GenerationReport {
        schema_version: GENERATION_SCHEMA_VERSION,
        kind: "generation".into(),
        tool: ToolInfo {
            name: "npu-audit".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        host: crate::foundation::host::this_host().into(),
        task: opts.task.name().into(),
        spec: spec_summary(spec),
        reference: spec_summary(specs.reference()),
        dataset: GenerationSet {
            path: dataset.path.display().to_string(),
            samples: samples.len(),
            labels_from: dataset.labels_from.clone(),
        },
        reference_samples,
        reference_scores,
        targets,
        gate,
        notes,
        exit_code,
    }
}

/// Each target's `max_accuracy_drop` (flag or policy) held to the upper bound of its loss: the
/// WER's increase for `transcribe`, the share of texts that differ from the reference's for
/// `generate`.
fn gate(opts: &GenerationOptions, targets: &[GenerationTarget]) -> Vec<GenerationRule> {
    let mut rules = Vec::new();
    for t in targets.iter().filter(|t| t.status == RunStatus::Ok) {
        let Some(limit) = opts.policy.limits(&t.id, None).max_accuracy_drop else {
            continue;
        };
        let m = &t.summary;
        let transcribe = opts.task == super::GenerationTask::Transcribe;
        let (measure, estimate, upper) = match (m.wer_delta_points, m.wer_delta_upper) {
            (Some(e), Some(u)) if transcribe => ("wer_increase", e.0, u.0),
            _ => {
                let differ = (m.samples - m.same_text) as u64;
                let n = m.samples as u64;
                let upper = 100.0
                    * crate::analyses::accuracy::stats::wilson(differ, n, crate::analyses::accuracy::stats::Z90).1;
                ("text_disagreement", 100.0 * differ as f64 / n.max(1) as f64, upper)
            }
        };
        rules.push(GenerationRule {
            target: t.id.clone(),
            measure: measure.into(),
            estimate: Num(estimate),
            upper: Num(upper),
            limit: limit.value,
            origin: limit.origin.clone(),
            pass: upper <= limit.value,
        });
    }
    rules
}

/// A required target that did not decode the whole set fails the audit (exit 3).
fn exit_code(targets: &[TargetRun]) -> ExitCode {
    let failed = targets
        .iter()
        .any(|t| t.planned.required && (t.status != RunStatus::Ok || t.decodes.iter().any(|d| d.error.is_some())));
    if failed {
        ExitCode::TargetFailed
    } else {
        ExitCode::Success
    }
}

/// Notes on decodes stopped at the limit: a loop that never ends is reported, not hidden.
fn stop_notes(reference: &[ReferenceSample], targets: &[GenerationTarget]) -> Vec<String> {
    let mut notes = Vec::new();
    let at_limit = |stops: Vec<(&str, StopReason)>| -> Vec<String> {
        stops
            .into_iter()
            .filter(|(_, s)| *s == StopReason::Limit)
            .map(|(id, _)| id.to_string())
            .collect()
    };
    let r = at_limit(reference.iter().map(|s| (s.id.as_str(), s.stop)).collect());
    if !r.is_empty() {
        notes.push(format!(
            "the reference reached max_new_tokens without the end token on {} sample(s): {}",
            r.len(),
            r.join(", ")
        ));
    }
    for t in targets {
        let ids = at_limit(t.samples.iter().map(|s| (s.id.as_str(), s.stop)).collect());
        if !ids.is_empty() {
            notes.push(format!(
                "{} reached max_new_tokens without the end token on {} sample(s): {}",
                t.id,
                ids.len(),
                ids.join(", ")
            ));
        }
    }
    notes
}

fn reference_sample(spec: &GenerationSpec, s: &GenSample, d: &ReferenceDecode) -> ReferenceSample {
    let text = spec.text(&d.tokens);
    let (words, chars) = s.label.as_deref().map(|l| edits(&text, l)).unzip();
    ReferenceSample {
        id: s.id.clone(),
        tokens: d.tokens.clone(),
        text,
        stop: d.stop,
        label: s.label.clone(),
        words,
        chars,
        error: d.error.as_ref().map(|f| format!("part {}: {}", f.part, f.error)),
    }
}

fn target_sample(spec: &GenerationSpec, s: &GenSample, reference: &ReferenceDecode, d: &TargetDecode) -> TargetSample {
    let text = spec.text(&d.tokens);
    let (words, chars) = s.label.as_deref().map(|l| edits(&text, l)).unzip();
    let reference_text = spec.text(&reference.tokens);
    TargetSample {
        id: s.id.clone(),
        tokens: d.tokens.clone(),
        stop: d.stop,
        first_divergence: divergence(spec, reference, d),
        later_differing: d
            .divergence
            .map_or(0, |k| later_differing(&reference.tokens, &d.tokens, k)),
        token_edits: edit_distance(&reference.tokens, &d.tokens),
        same_text: normalise(&text) == normalise(&reference_text),
        words,
        chars,
        steps: d.steps.clone(),
        error: d.error.as_ref().map(|f| format!("part {}: {}", f.part, f.error)),
        text,
        layers: None,
    }
}

fn target_row(
    opts: &GenerationOptions,
    spec: &GenerationSpec,
    samples: &[GenSample],
    reference: &[ReferenceDecode],
    reference_samples: &[ReferenceSample],
    (run, explained): (&TargetRun, &[(usize, StepExplanation)]),
) -> GenerationTarget {
    let mut rows: Vec<TargetSample> = samples
        .iter()
        .zip(reference)
        .zip(&run.decodes)
        .map(|((s, r), d)| target_sample(spec, s, r, d))
        .collect();
    for (k, x) in explained {
        if let Some(row) = rows.get_mut(*k) {
            row.layers = Some(x.clone());
        }
    }
    let summary = summary(opts, &rows, &reference_samples[..rows.len()], run);
    GenerationTarget {
        id: run.planned.spec.id.clone(),
        status: run.status,
        error: run.error.clone(),
        runtime: run.runtime.clone(),
        parts: run.parts.clone(),
        samples: rows,
        summary,
    }
}

fn summary(
    opts: &GenerationOptions,
    rows: &[TargetSample],
    reference: &[ReferenceSample],
    run: &TargetRun,
) -> TargetSummary {
    let mut divergences: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.first_divergence.as_ref().map(|d| d.step as f64))
        .collect();
    divergences.sort_by(f64::total_cmp);
    let steps: Vec<_> = rows.iter().flat_map(|r| &r.steps).collect();
    let top1 = steps.iter().filter(|s| s.top1).count();
    let kls: Vec<f64> = steps.iter().map(|s| s.kl.0).filter(|v| v.is_finite()).collect();
    let mut sqnrs: Vec<f64> = steps.iter().map(|s| s.sqnr_db.0).filter(|v| !v.is_nan()).collect();
    sqnrs.sort_by(f64::total_cmp);
    let scores = scores(opts, &rows.iter().map(|r| (r.words, r.chars)).collect::<Vec<_>>());
    let (wer_delta_points, wer_delta_interval, wer_delta_upper) = wer_delta(opts, rows, reference);
    let exact = |w: Option<EditCounts>| w.is_some_and(|w| w.edits == 0);
    let broken = rows
        .iter()
        .zip(reference)
        .filter(|(t, r)| exact(r.words) && !exact(t.words))
        .count();
    let fixed = rows
        .iter()
        .zip(reference)
        .filter(|(t, r)| !exact(r.words) && exact(t.words))
        .count();
    let labelled = rows.iter().any(|r| r.words.is_some());
    let new_tokens: usize = rows.iter().map(|r| r.tokens.len()).sum();
    let busy_s: f64 = run
        .parts
        .iter()
        .map(|p| p.mean_run_ms.unwrap_or(0.0) * p.runs as f64 / 1000.0)
        .sum();
    TargetSummary {
        samples: rows.len(),
        diverged: divergences.len(),
        median_divergence_step: median(&divergences),
        same_text: rows.iter().filter(|r| r.same_text).count(),
        top1_agreement: Num(if steps.is_empty() {
            f64::NAN
        } else {
            top1 as f64 / steps.len() as f64
        }),
        steps: steps.len(),
        mean_kl: Num(if kls.is_empty() {
            f64::NAN
        } else {
            kls.iter().sum::<f64>() / kls.len() as f64
        }),
        median_sqnr_db: Num(median(&sqnrs).unwrap_or(f64::NAN)),
        scores,
        wer_delta_points,
        wer_delta_interval,
        wer_delta_upper,
        broken,
        fixed,
        mcnemar_p: labelled.then(|| Num(mcnemar_exact(broken as u64, fixed as u64))),
        new_tokens,
        seconds_per_token: (new_tokens > 0 && busy_s > 0.0).then(|| busy_s / new_tokens as f64),
        seconds_per_sample: (!rows.is_empty() && busy_s > 0.0).then(|| busy_s / rows.len() as f64),
    }
}

fn median(sorted: &[f64]) -> Option<f64> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// WER and CER over the labelled samples, pooled (edits over label words), with 95% percentile
/// bootstrap intervals over samples.
fn scores(opts: &GenerationOptions, rows: &[(Option<EditCounts>, Option<EditCounts>)]) -> Option<TextScores> {
    let labelled: Vec<(EditCounts, EditCounts)> = rows.iter().filter_map(|(w, c)| w.zip(*c)).collect();
    if labelled.is_empty() {
        return None;
    }
    let col =
        |f: &dyn Fn(&(EditCounts, EditCounts)) -> usize| labelled.iter().map(|x| f(x) as f64).collect::<Vec<f64>>();
    let (we, wn) = (col(&|x| x.0.edits), col(&|x| x.0.of));
    let (ce, cn) = (col(&|x| x.1.edits), col(&|x| x.1.of));
    let all: Vec<usize> = (0..labelled.len()).collect();
    let interval = |num: &[f64], den: &[f64]| {
        let s = bootstrap(labelled.len(), opts.stats.resamples, opts.stats.seed, &mut |ix| {
            ratio_at(num, den, ix)
        });
        [Num(s.lo95), Num(s.hi95)]
    };
    Some(TextScores {
        samples: labelled.len(),
        wer: Num(ratio_at(&we, &wn, &all)),
        wer_interval: interval(&we, &wn),
        cer: Num(ratio_at(&ce, &cn, &all)),
        cer_interval: interval(&ce, &cn),
        exact: labelled.iter().filter(|(w, _)| w.edits == 0).count(),
    })
}

/// The WER change in points, its 95% interval and its one-sided 95% upper bound.
type WerDelta = (Option<Num>, Option<[Num; 2]>, Option<Num>);

/// The target's WER minus the reference's in points, paired by sample, with the 95% percentile
/// bootstrap interval of the difference (both resampled on the same indices).
fn wer_delta(opts: &GenerationOptions, rows: &[TargetSample], reference: &[ReferenceSample]) -> WerDelta {
    let pairs: Vec<(EditCounts, EditCounts)> = rows
        .iter()
        .zip(reference)
        .filter_map(|(t, r)| t.words.zip(r.words))
        .collect();
    if pairs.is_empty() {
        return (None, None, None);
    }
    let te: Vec<f64> = pairs.iter().map(|(t, _)| t.edits as f64).collect();
    let re: Vec<f64> = pairs.iter().map(|(_, r)| r.edits as f64).collect();
    let n: Vec<f64> = pairs.iter().map(|(_, r)| r.of as f64).collect();
    let all: Vec<usize> = (0..pairs.len()).collect();
    let delta = |ix: &[usize]| 100.0 * (ratio_at(&te, &n, ix) - ratio_at(&re, &n, ix));
    let s = bootstrap(pairs.len(), opts.stats.resamples, opts.stats.seed, &mut |ix| delta(ix));
    (
        Some(Num(delta(&all))),
        Some([Num(s.lo95), Num(s.hi95)]),
        Some(Num(s.hi90)),
    )
}

fn spec_summary(spec: &GenerationSpec) -> SpecSummary {
    SpecSummary {
        path: spec.path.display().to_string(),
        layout: spec.layout.name().into(),
        form: spec.form.name().into(),
        parts: spec
            .parts
            .iter()
            .map(|p| PartSummary {
                name: p.name.into(),
                file: p.path.display().to_string(),
                sha256: p.model.sha256.clone(),
            })
            .collect(),
        tokenizer_sha256: spec.tokenizer_sha256.clone(),
        start_tokens: spec.start_tokens.iter().map(|(t, _)| t.clone()).collect(),
        end_token: spec.end_token.0.clone(),
        max_new_tokens: spec.max_new_tokens,
        kv_length: spec.kv_length,
        suppress_tokens: spec.suppress_tokens.clone(),
        suppress_at_start: spec.suppress_at_start.clone(),
    }
}
