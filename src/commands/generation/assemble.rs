//! The report from the decodes: each sample's texts and where they part, each target's figures
//! over the samples it decoded to their end (WER and CER with bootstrap intervals, paired against
//! the reference's), the gate as every kind of audit forms it, and the exit code.

use super::figures::{divergence, edits, later_differing, normalise, Decode, ReferenceDecode, TargetDecode};
use super::sessions::{Decoded, TargetRun};
use super::spec::GenerationSpec;
use super::{GenSample, GenerationOptions, Specs};
use crate::analyses::accuracy::ctc::edit_distance;
use crate::analyses::accuracy::matching::divergent_tokens;
use crate::analyses::accuracy::stats::{mcnemar_exact, median};
use crate::analyses::accuracy::{paired_rate_change, pooled_rate, StatOptions};
use crate::data::dataset::Dataset;
use crate::data::target::TargetRole;
use crate::foundation::words::{count, listed};
use crate::judge::gate::{self, sets};
use crate::judge::policy::limits::applied_by;
use crate::judge::policy::Limit;
use crate::report::common::{Num, ReportKind, ToolInfo};
use crate::report::eval::StatisticsInfo;
use crate::report::gate::{GateReport, Rule};
use crate::report::generation::{
    EditCounts, GenerationReport, GenerationSet, GenerationTarget, GenerationTask, PartSummary, ReferenceSample,
    SpecSummary, StepExplanation, StopReason, TargetSample, TargetSummary, TextScores, UnscoredSample,
    GENERATION_SCHEMA_VERSION,
};
use crate::report::RunStatus;

/// The report of a generation audit.
pub fn report(
    opts: &GenerationOptions,
    specs: &Specs,
    dataset: &Dataset,
    samples: &[GenSample],
    decoded: Decoded<Decode<'_>>,
    explanations: &[Vec<(usize, StepExplanation)>],
) -> GenerationReport {
    let spec = &specs.audited;
    let reference_samples: Vec<ReferenceSample> = samples
        .iter()
        .zip(&decoded.reference)
        .map(|(s, d)| reference_sample(spec, s, d))
        .collect();
    let unscored = unscored(&reference_samples);
    let scored: Vec<&ReferenceSample> = reference_samples
        .iter()
        .filter(|r| !unscored.iter().any(|u| u.id == r.id))
        .collect();
    let reference_scores = scores(
        &opts.stats,
        &scored.iter().map(|r| (r.words, r.chars)).collect::<Vec<_>>(),
    );
    let targets: Vec<GenerationTarget> = decoded
        .targets
        .iter()
        .zip(explanations)
        .map(|(t, x)| {
            target_row(
                opts,
                (spec, samples),
                (&decoded.reference, &reference_samples, &unscored),
                (t, x),
            )
        })
        .collect();
    let gate = gate(opts, &decoded.targets, &targets, samples.len());
    let required_unfinished = decoded
        .targets
        .iter()
        .zip(&targets)
        .any(|(run, row)| run.planned.required && !finished(row));
    GenerationReport {
        schema_version: GENERATION_SCHEMA_VERSION,
        kind: ReportKind::Generation,
        tool: ToolInfo::this(),
        host: crate::foundation::host::this_host().into(),
        task: opts.task,
        spec: spec_summary(spec),
        reference: spec_summary(specs.reference()),
        dataset: GenerationSet {
            path: dataset.path.display().to_string(),
            samples: samples.len(),
            labels_from: dataset.labels_from.clone(),
        },
        statistics: Some(statistics_info(&opts.stats)),
        intra_op_threads: Some(
            opts.exec
                .threads
                .unwrap_or(crate::execution::exec::executor::DEFAULT_INTRA_OP_THREADS),
        ),
        notes: notes(opts, &reference_samples, &unscored, &targets),
        reference_samples,
        unscored,
        reference_scores,
        reference_corpus: None,
        prompt_lengths: opts.prompt_lengths.clone(),
        exit_code: gate::exit_code(required_unfinished, gate.verdict),
        targets,
        gate,
    }
}

/// The samples the reference gave no number to decode by: nothing can be compared with them.
fn unscored(reference: &[ReferenceSample]) -> Vec<UnscoredSample> {
    reference
        .iter()
        .filter(|r| r.stop == StopReason::NoNumber)
        .map(|r| UnscoredSample {
            id: r.id.clone(),
            why: format!(
                "the reference's logits held no number after {} (its features or the model produce NaN)",
                count(r.tokens.len(), "token")
            ),
        })
        .collect()
}

/// Whether a target decoded every sample to its end.
pub(super) fn finished(row: &GenerationTarget) -> bool {
    row.status == RunStatus::Ok && row.summary.unfinished.is_empty()
}

/// Why a target did not decode every sample to its end, in words (`None` when it did).
pub(super) fn unfinished_words(row: &GenerationTarget, samples: usize) -> Option<String> {
    if finished(row) {
        return None;
    }
    let k = row.summary.unfinished.len();
    let of = format!("{k} of {samples} samples did not finish");
    Some(if row.status == RunStatus::Ok {
        of
    } else {
        format!("{} ({of})", row.status.ended_words())
    })
}

/// The gate, as every kind of audit forms it: `ran` for each target asked for (every sample
/// decoded, or window fed, to its end), then the task's limits (flag or policy), each held to the
/// bound that cannot pass by luck. A target that did not finish is not judged on what it did.
pub(super) fn gate<T>(
    opts: &GenerationOptions,
    runs: &[TargetRun<T>],
    rows: &[GenerationTarget],
    samples: usize,
) -> GateReport {
    let mut rules = Vec::new();
    let mut active = false;
    let asked = runs
        .iter()
        .zip(rows)
        .filter(|(r, _)| r.planned.role == TargetRole::Target);
    for (run, row) in asked {
        let limits = opts.policy.limits(&row.id, None);
        let set: Vec<(Rule, &Limit<f64>)> = sets::generation_rules(opts.task)
            .iter()
            .filter_map(|&rule| sets::limit_of(&limits, rule).map(|l| (rule, l)))
            .collect();
        active |= !set.is_empty();
        let unfinished = unfinished_words(row, samples);
        rules.push(gate::ran_rule(&row.id, run.planned.required, unfinished.as_deref()));
        if unfinished.is_some() {
            continue;
        }
        for (rule, l) in set {
            if let Some(figure) = sets::generation_figure(opts.task, rule, row) {
                rules.push(gate::bounded_rule(rule, &row.id, figure, (l.value, &l.origin)));
            }
        }
    }
    GateReport {
        verdict: gate::verdict(active, &rules),
        rules,
        policy: None,
    }
}

/// Notes on the policy's limits a generation audit does not apply: those of other kinds of
/// audit, and those of the other tasks (a corpus limit on `--task generate`).
pub(super) fn limits_not_applied(opts: &GenerationOptions, targets: &[GenerationTarget]) -> Vec<String> {
    let ids: Vec<String> = targets.iter().map(|t| t.id.clone()).collect();
    let mut notes = opts.policy.not_applied(ReportKind::Generation, &ids);
    let gated: Vec<&str> = sets::generation_rules(opts.task).iter().map(|r| r.as_str()).collect();
    for (name, origin) in opts.policy.set_on(&ids) {
        if applied_by(name).contains(&ReportKind::Generation) && !gated.contains(&name) {
            let tasks: Vec<&str> = GenerationTask::ALL
                .iter()
                .filter(|t| sets::generation_rules(**t).iter().any(|r| r.as_str() == name))
                .map(|t| t.name())
                .collect();
            notes.push(format!(
                "{origin}: {name} is not applied by --task {} (it gates --task {})",
                opts.task.name(),
                tasks.join(", ")
            ));
        }
    }
    notes
}

/// The report's notes: decodes stopped at the limit, samples no figure counts, steps whose
/// logits were not numbers, and the policy's limits a generation audit does not apply.
fn notes(
    opts: &GenerationOptions,
    reference: &[ReferenceSample],
    unscored: &[UnscoredSample],
    targets: &[GenerationTarget],
) -> Vec<String> {
    let mut notes = stop_notes(reference, targets);
    if !unscored.is_empty() {
        notes.push(format!(
            "the reference's logits held no number on {}: {} (no target is scored on them)",
            count(unscored.len(), "sample"),
            listed(&unscored.iter().map(|u| u.id.as_str()).collect::<Vec<_>>(), 8)
        ));
    }
    for t in targets {
        let m = &t.summary;
        if m.nonfinite_steps > 0 {
            notes.push(format!(
                "{}: {} of {} teacher-forced steps have logits that are not all finite (NaN or ±inf); its mean KL and median SQNR are over the other {}",
                t.id,
                m.nonfinite_steps,
                m.steps,
                m.steps - m.nonfinite_steps
            ));
        }
        if !m.unfinished.is_empty() {
            notes.push(format!(
                "{}: {} did not finish and {} not scored: {}",
                t.id,
                count(m.unfinished.len(), "sample"),
                if m.unfinished.len() == 1 { "is" } else { "are" },
                listed(&m.unfinished, 8)
            ));
        }
    }
    notes.extend(limits_not_applied(opts, targets));
    notes
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
            "the reference reached max_new_tokens without the end token on {}: {}",
            count(r.len(), "sample"),
            listed(&r, 8)
        ));
    }
    for t in targets {
        let ids = at_limit(t.samples.iter().map(|s| (s.id.as_str(), s.stop)).collect());
        if !ids.is_empty() {
            notes.push(format!(
                "{} reached max_new_tokens without the end token on {}: {}",
                t.id,
                count(ids.len(), "sample"),
                listed(&ids, 8)
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
        error: None,
    }
}

fn target_sample(spec: &GenerationSpec, s: &GenSample, reference: &ReferenceDecode, d: &TargetDecode) -> TargetSample {
    let text = spec.text(&d.tokens);
    let (words, chars) = s.label.as_deref().map(|l| edits(&text, l)).unzip();
    let reference_text = spec.text(&reference.tokens);
    let text_tokens = |t: &'_ [u32]| -> Vec<u32> { t.strip_suffix(&[spec.end_token.1]).unwrap_or(t).to_vec() };
    let divergent = divergent_tokens(&text_tokens(&reference.tokens), &text_tokens(&d.tokens));
    TargetSample {
        id: s.id.clone(),
        tokens: d.tokens.clone(),
        stop: d.stop,
        first_divergence: divergence(spec, reference, d),
        later_differing: d
            .divergence
            .map_or(0, |k| later_differing(&reference.tokens, &d.tokens, k)),
        token_edits: edit_distance(&reference.tokens, &d.tokens),
        fdt: divergent.fdt,
        sdt: divergent.sdt,
        same_text: normalise(&text) == normalise(&reference_text),
        scored: d.error.is_none() && d.stop != StopReason::Failed,
        nonfinite_steps: d.steps.iter().filter(|f| f.kl.0.is_nan()).count(),
        words,
        chars,
        steps: d.steps.clone(),
        error: d.error.as_ref().map(|f| f.words()),
        text,
        layers: None,
        prompt: s.cut.clone(),
    }
}

/// The reference's decodes, its rows, and the samples no figure counts.
type ReferenceSide<'a> = (&'a [ReferenceDecode], &'a [ReferenceSample], &'a [UnscoredSample]);

fn target_row(
    opts: &GenerationOptions,
    (spec, samples): (&GenerationSpec, &[GenSample]),
    (reference, reference_rows, unscored): ReferenceSide<'_>,
    (run, explained): (&TargetRun<TargetDecode>, &[(usize, StepExplanation)]),
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
    for row in &mut rows {
        row.scored &= !unscored.iter().any(|u| u.id == row.id);
    }
    // Samples it never reached did not finish either.
    let unfinished: Vec<String> = rows
        .iter()
        .filter(|r| r.error.is_some() || r.stop == StopReason::Failed)
        .map(|r| r.id.clone())
        .chain(samples[rows.len()..].iter().map(|s| s.id.clone()))
        .collect();
    let counted: Vec<(&TargetSample, &ReferenceSample)> =
        rows.iter().zip(reference_rows).filter(|(t, _)| t.scored).collect();
    let mut summary = summary(&opts.stats, &counted, run);
    summary.unfinished = unfinished;
    GenerationTarget {
        id: run.planned.spec.id.clone(),
        status: run.status,
        error: run.error.clone(),
        runtime: run.runtime.clone(),
        intra_op_threads: run.parts.iter().find_map(|p| p.intra_op_threads),
        parts: run.parts.clone(),
        sweep: (!opts.prompt_lengths.is_empty()).then(|| {
            let scored: Vec<&TargetSample> = rows.iter().filter(|r| r.scored).collect();
            super::sweep::sweep(&opts.prompt_lengths, &scored)
        }),
        samples: rows,
        summary,
        corpus: None,
    }
}

/// A target's figures over its scored samples, each beside the reference's row of the sample.
fn summary(
    stats: &StatOptions,
    rows: &[(&TargetSample, &ReferenceSample)],
    run: &TargetRun<TargetDecode>,
) -> TargetSummary {
    let divergences: Vec<f64> = rows
        .iter()
        .filter_map(|(t, _)| t.first_divergence.as_ref().map(|d| d.step as f64))
        .collect();
    let steps: Vec<_> = rows.iter().flat_map(|(t, _)| &t.steps).collect();
    let top1 = steps.iter().filter(|s| s.top1).count();
    let kls: Vec<f64> = steps.iter().map(|s| s.kl.0).filter(|v| v.is_finite()).collect();
    let sqnrs: Vec<f64> = steps.iter().filter(|s| !s.kl.0.is_nan()).map(|s| s.sqnr_db.0).collect();
    let scores = scores(stats, &rows.iter().map(|(t, _)| (t.words, t.chars)).collect::<Vec<_>>());
    let change = wer_change(stats, rows);
    let exact = |w: Option<EditCounts>| w.is_some_and(|w| w.edits == 0);
    let broken = rows.iter().filter(|(t, r)| exact(r.words) && !exact(t.words)).count();
    let fixed = rows.iter().filter(|(t, r)| !exact(r.words) && exact(t.words)).count();
    let labelled = rows.iter().any(|(t, _)| t.words.is_some());
    let new_tokens: usize = rows.iter().map(|(t, _)| t.tokens.len()).sum();
    let busy_s: f64 = run
        .parts
        .iter()
        .map(|p| p.mean_run_ms.unwrap_or(0.0) * p.runs as f64 / 1000.0)
        .sum();
    TargetSummary {
        samples: rows.len(),
        unfinished: Vec::new(),
        diverged: divergences.len(),
        median_divergence_step: median(&divergences),
        same_text: rows.iter().filter(|(t, _)| t.same_text).count(),
        fdt_mean: mean_of(rows, |t| t.fdt as f64),
        sdt_mean: mean_of(rows, |t| t.sdt as f64),
        sdt_norm_mean: mean_of(rows, |t| {
            let n = t.tokens.len() - usize::from(t.stop == StopReason::EndToken);
            if n == 0 {
                0.0
            } else {
                t.sdt as f64 / n as f64
            }
        }),
        top1_agreement: Num(ratio(top1, steps.len())),
        steps: steps.len(),
        nonfinite_steps: steps.iter().filter(|s| s.kl.0.is_nan()).count(),
        mean_kl: Num(if kls.is_empty() {
            f64::NAN
        } else {
            kls.iter().sum::<f64>() / kls.len() as f64
        }),
        median_sqnr_db: Num(median(&sqnrs).unwrap_or(f64::NAN)),
        scores,
        wer_delta_points: change.as_ref().map(|c| c.estimate.value),
        wer_delta_interval: change
            .as_ref()
            .filter(|c| c.estimate.unbounded.is_none())
            .map(|c| [c.estimate.lo, c.estimate.hi]),
        wer_delta_upper: change.as_ref().map(|c| Num(c.upper)),
        wer_delta_unbounded: change.as_ref().and_then(|c| c.estimate.unbounded.clone()),
        broken,
        fixed,
        mcnemar_p: labelled.then(|| Num(mcnemar_exact(broken as u64, fixed as u64))),
        new_tokens,
        seconds_per_token: (new_tokens > 0 && busy_s > 0.0).then(|| busy_s / new_tokens as f64),
        seconds_per_sample: (!rows.is_empty() && busy_s > 0.0).then(|| busy_s / rows.len() as f64),
    }
}

/// The mean of `f` over the scored samples (`None` without any).
fn mean_of(rows: &[(&TargetSample, &ReferenceSample)], f: impl Fn(&TargetSample) -> f64) -> Option<Num> {
    (!rows.is_empty()).then(|| Num(rows.iter().map(|(t, _)| f(t)).sum::<f64>() / rows.len() as f64))
}

/// `k / n`, NaN when `n` is 0.
fn ratio(k: usize, n: usize) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        k as f64 / n as f64
    }
}

/// WER and CER over the labelled samples, pooled (edits over label words), with 95% percentile
/// bootstrap intervals over samples (none when every resample gives the same figure).
fn scores(stats: &StatOptions, rows: &[(Option<EditCounts>, Option<EditCounts>)]) -> Option<TextScores> {
    let labelled: Vec<(EditCounts, EditCounts)> = rows.iter().filter_map(|(w, c)| w.zip(*c)).collect();
    if labelled.is_empty() {
        return None;
    }
    let col =
        |f: &dyn Fn(&(EditCounts, EditCounts)) -> usize| labelled.iter().map(|x| f(x) as f64).collect::<Vec<f64>>();
    let wer = pooled_rate(&col(&|x| x.0.edits), &col(&|x| x.0.of), stats);
    let cer = pooled_rate(&col(&|x| x.1.edits), &col(&|x| x.1.of), stats);
    Some(TextScores {
        samples: labelled.len(),
        wer: wer.value,
        wer_interval: [wer.lo, wer.hi],
        cer: cer.value,
        cer_interval: [cer.lo, cer.hi],
        exact: labelled.iter().filter(|(w, _)| w.edits == 0).count(),
    })
}

/// The target's WER minus the reference's in points, paired by sample (both resampled on the
/// same indices); `None` without labels.
fn wer_change(
    stats: &StatOptions,
    rows: &[(&TargetSample, &ReferenceSample)],
) -> Option<crate::analyses::accuracy::RateChange> {
    let pairs: Vec<(EditCounts, EditCounts)> = rows.iter().filter_map(|(t, r)| t.words.zip(r.words)).collect();
    if pairs.is_empty() {
        return None;
    }
    let te: Vec<f64> = pairs.iter().map(|(t, _)| t.edits as f64).collect();
    let re: Vec<f64> = pairs.iter().map(|(_, r)| r.edits as f64).collect();
    let n: Vec<f64> = pairs.iter().map(|(_, r)| r.of as f64).collect();
    Some(paired_rate_change((&te, &n), (&re, &n), stats))
}

/// How the intervals were drawn, and with which methods.
fn statistics_info(stats: &StatOptions) -> StatisticsInfo {
    StatisticsInfo {
        seed: stats.seed,
        resamples: stats.resamples,
        margin_points: None,
        sequential: None,
        methods: vec![
            "WER and CER: pooled over samples (edits over label words or characters), 95% percentile bootstrap over samples; no interval when every resample gives the same figure".into(),
            "WER change: paired percentile bootstrap (both runs resampled on the same samples), its 95th percentile the one-sided 95% upper bound max_accuracy_drop gates; a sample where no word edit differs cannot bound it, and the gate fails".into(),
            "texts unlike the reference's (generate) and exact transcripts or same texts (min_accuracy): one-sided 95% Wilson score bounds".into(),
            "McNemar: exact two-sided binomial test of the samples broken and fixed on exact match".into(),
            "per-step KL and SQNR: over the teacher-forced steps whose logits are all finite".into(),
        ],
    }
}

pub(super) fn spec_summary(spec: &GenerationSpec) -> SpecSummary {
    SpecSummary {
        path: spec.path.display().to_string(),
        layout: spec.layout.name().into(),
        form: spec.form.name().into(),
        parts: spec
            .parts
            .iter()
            .flat_map(|p| {
                p.files.iter().map(|f| PartSummary {
                    name: p.kind.name().into(),
                    file: f.path.display().to_string(),
                    sha256: f.model.sha256.clone(),
                })
            })
            .collect(),
        prefill_length: spec.prefill_length,
        tokenizer_sha256: spec.tokenizer_sha256.clone(),
        start_tokens: spec.start_tokens.iter().map(|(t, _)| t.clone()).collect(),
        end_token: spec.end_token.0.clone(),
        max_new_tokens: spec.max_new_tokens,
        kv_length: spec.kv_length,
        suppress_tokens: spec.suppress_tokens.clone(),
        suppress_at_start: spec.suppress_at_start.clone(),
    }
}
