//! `eval SPEC.toml --task score`: corpus drift. Each sample of a decoder-only set is a window of
//! text fed teacher-forced after the spec's start tokens, on the reference and on every target,
//! through the spec's own parts (the prefill in chunks, or a token at a time through the step);
//! the logits after each window token but the last are held to the token after it and to the
//! reference's logits there. The reference's logits of a window are computed once and handed to
//! every target, as a decode's are; the figures are llama.cpp's (`analyses::accuracy::corpus`).

use super::assemble::{finished, gate, limits_not_applied, spec_summary};
use super::decode::{prompt_ids, Loop, PartFailure, PartRunner};
use super::sessions::{Decoded, KeptCall, SampleWork, TargetRun};
use super::spec::GenerationSpec;
use super::{GenSample, GenerationOptions, Specs};
use crate::analyses::accuracy::corpus::{self, perplexity, Position, Window};
use crate::analyses::accuracy::stats::median;
use crate::analyses::metrics::logits::{log_softmax, token_figures};
use crate::data::dataset::Dataset;
use crate::data::tensor::Tensor;
use crate::foundation::words::{count, listed};
use crate::judge::gate as judge_gate;
use crate::report::common::{Num, ReportKind, ToolInfo};
use crate::report::eval::StatisticsInfo;
use crate::report::generation::{
    CorpusFigures, GenerationReport, GenerationSet, GenerationTarget, ReferenceCorpus, ReferenceWindow, TargetSummary,
    GENERATION_SCHEMA_VERSION,
};

/// `--task score`'s work on each window.
pub struct Score<'s> {
    pub audited: &'s GenerationSpec,
    pub reference: &'s GenerationSpec,
}

/// The reference's reading of one window: its tokens, the logits after each but the last (handed
/// to the targets, then dropped), and `-ln p` of each next token (`None` where its logits are not
/// all finite).
pub struct ReferenceWindowRead {
    pub tokens: Vec<u32>,
    pub logits: Vec<Vec<f32>>,
    pub nll: Vec<Option<f64>>,
}

/// A target's reading of one window: each position against the reference's, or why the window
/// was not fed to its end.
pub struct TargetWindowRead {
    pub positions: Vec<Position>,
    pub error: Option<PartFailure>,
    /// Tokens fed (the start tokens and the window's).
    pub fed: usize,
}

impl Score<'_> {
    /// The logits after each window token but the last: the prompt's logits without the start
    /// tokens' and the window's last token's.
    fn window_logits(
        spec: &GenerationSpec,
        runner: &mut dyn PartRunner,
        sample: &Tensor,
    ) -> Result<Vec<Vec<f32>>, PartFailure> {
        let (_, logits) = Loop::new(spec).prompt(runner, sample)?;
        let n = prompt_ids(sample).len();
        for _ in 0..logits.len() {
            runner.token();
        }
        let start = spec.start_tokens.len();
        Ok(logits.into_iter().skip(start).take(n.saturating_sub(1)).collect())
    }
}

impl SampleWork for Score<'_> {
    type Reference = ReferenceWindowRead;
    type Target = TargetWindowRead;
    const LABEL: &'static str = "score";

    fn reference(&self, runner: &mut dyn PartRunner, sample: &Tensor) -> Result<ReferenceWindowRead, PartFailure> {
        let logits = Score::window_logits(self.reference, runner, sample)?;
        let tokens: Vec<u32> = prompt_ids(sample).iter().map(|&t| t as u32).collect();
        let nll = logits
            .iter()
            .zip(&tokens[1..])
            .map(|(row, &next)| {
                row.iter()
                    .all(|v| v.is_finite())
                    .then(|| -log_softmax(row)[next as usize])
            })
            .collect();
        Ok(ReferenceWindowRead { tokens, logits, nll })
    }

    fn kept(&self, r: &ReferenceWindowRead) -> ReferenceWindowRead {
        ReferenceWindowRead {
            tokens: r.tokens.clone(),
            logits: Vec::new(),
            nll: r.nll.clone(),
        }
    }

    fn target(
        &self,
        runner: &mut dyn PartRunner,
        sample: &Tensor,
        reference: &ReferenceWindowRead,
        _keep_call: bool,
    ) -> (TargetWindowRead, Option<KeptCall>) {
        let fed = self.audited.start_tokens.len() + reference.tokens.len();
        let read = match Score::window_logits(self.audited, runner, sample) {
            Ok(logits) => TargetWindowRead {
                positions: positions(reference, &logits),
                error: None,
                fed,
            },
            Err(e) => TargetWindowRead {
                positions: Vec::new(),
                error: Some(e),
                fed,
            },
        };
        (read, None)
    }
}

/// Each position of a window: unscored where the reference's logits are not finite, not finite
/// where the target's are not, else both sides' figures against the token that came.
fn positions(reference: &ReferenceWindowRead, logits: &[Vec<f32>]) -> Vec<Position> {
    reference
        .logits
        .iter()
        .zip(logits)
        .zip(&reference.tokens[1..])
        .zip(&reference.nll)
        .map(|(((r, t), &next), nll)| match (nll, token_figures(r, t, next)) {
            (None, _) => Position::Unscored,
            (Some(_), Some(f)) => Position::Scored(f),
            (Some(_), None) => Position::NotFinite,
        })
        .collect()
}

/// The report of a corpus drift audit.
pub fn report(
    opts: &GenerationOptions,
    specs: &Specs,
    dataset: &Dataset,
    samples: &[GenSample],
    decoded: Decoded<Score<'_>>,
) -> GenerationReport {
    let spec = &specs.audited;
    let reference_corpus = reference_corpus(spec, samples, &decoded.reference);
    let targets: Vec<GenerationTarget> = decoded
        .targets
        .iter()
        .map(|t| target_row(opts, spec, samples, (&decoded.reference, t)))
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
            labels_from: None,
        },
        statistics: Some(statistics_info(opts)),
        intra_op_threads: Some(
            opts.exec
                .threads
                .unwrap_or(crate::execution::exec::executor::DEFAULT_INTRA_OP_THREADS),
        ),
        notes: notes(opts, &reference_corpus, &targets),
        reference_samples: Vec::new(),
        unscored: Vec::new(),
        reference_scores: None,
        reference_corpus: Some(reference_corpus),
        prompt_lengths: Vec::new(),
        exit_code: judge_gate::exit_code(required_unfinished, gate.verdict),
        targets,
        gate,
    }
}

/// The reference's side: its windows, their text, its perplexity over the positions it scored.
fn reference_corpus(spec: &GenerationSpec, samples: &[GenSample], reads: &[ReferenceWindowRead]) -> ReferenceCorpus {
    let finite: Vec<f64> = reads.iter().flat_map(|r| r.nll.iter().flatten().copied()).collect();
    let all: usize = reads.iter().map(|r| r.nll.len()).sum();
    ReferenceCorpus {
        windows: reads.len(),
        positions: finite.len(),
        nonfinite_positions: all - finite.len(),
        perplexity: Num(perplexity(&finite)),
        rows: samples
            .iter()
            .zip(reads)
            .map(|(s, r)| ReferenceWindow {
                id: s.id.clone(),
                tokens: r.tokens.len(),
                text: spec.text(&r.tokens),
                perplexity: Num(perplexity(&r.nll.iter().flatten().copied().collect::<Vec<_>>())),
            })
            .collect(),
    }
}

/// A target's row: its corpus figures over the windows it fed to its end, the summary's shared
/// figures, its cost.
fn target_row(
    opts: &GenerationOptions,
    spec: &GenerationSpec,
    samples: &[GenSample],
    (reference, run): (&[ReferenceWindowRead], &TargetRun<TargetWindowRead>),
) -> GenerationTarget {
    let windows: Vec<Window<'_>> = samples
        .iter()
        .zip(reference)
        .zip(&run.decodes)
        .map(|((s, r), d)| Window {
            id: &s.id,
            next: &r.tokens[1..],
            positions: d.positions.clone(),
            error: d.error.as_ref().map(PartFailure::words),
        })
        .collect();
    let figures = corpus::figures(&windows, &opts.stats, &|t| spec.token_text(t));
    let unfinished: Vec<String> = windows
        .iter()
        .filter(|w| w.error.is_some())
        .map(|w| w.id.to_string())
        .chain(samples[run.decodes.len()..].iter().map(|s| s.id.clone()))
        .collect();
    let sqnrs: Vec<f64> = windows
        .iter()
        .filter(|w| w.error.is_none())
        .flat_map(|w| &w.positions)
        .filter_map(|p| match p {
            Position::Scored(f) => Some(f.sqnr_db),
            _ => None,
        })
        .collect();
    let fed: usize = run.decodes.iter().map(|d| d.fed).sum();
    let mut summary = summary(&figures, run, fed);
    summary.unfinished = unfinished;
    summary.median_sqnr_db = Num(median(&sqnrs).unwrap_or(f64::NAN));
    GenerationTarget {
        id: run.planned.spec.id.clone(),
        status: run.status,
        error: run.error.clone(),
        runtime: run.runtime.clone(),
        intra_op_threads: run.parts.iter().find_map(|p| p.intra_op_threads),
        parts: run.parts.clone(),
        samples: Vec::new(),
        summary,
        corpus: Some(figures),
        sweep: None,
    }
}

/// The summary's figures a corpus has: windows and positions scored, the same top token as
/// top-1 agreement, the mean KLD, the cost per token fed and per window.
fn summary(c: &CorpusFigures, run: &TargetRun<TargetWindowRead>, fed: usize) -> TargetSummary {
    let busy_s: f64 = run
        .parts
        .iter()
        .map(|p| p.mean_run_ms.unwrap_or(0.0) * p.runs as f64 / 1000.0)
        .sum();
    TargetSummary {
        samples: c.windows,
        unfinished: Vec::new(),
        diverged: 0,
        median_divergence_step: None,
        same_text: 0,
        fdt_mean: None,
        sdt_mean: None,
        sdt_norm_mean: None,
        top1_agreement: c.same_top.share,
        steps: c.positions + c.nonfinite_positions,
        nonfinite_steps: c.nonfinite_positions,
        mean_kl: c.kld.mean,
        median_sqnr_db: Num(f64::NAN),
        scores: None,
        wer_delta_points: None,
        wer_delta_interval: None,
        wer_delta_upper: None,
        wer_delta_unbounded: None,
        broken: 0,
        fixed: 0,
        mcnemar_p: None,
        new_tokens: 0,
        seconds_per_token: (fed > 0 && busy_s > 0.0).then(|| busy_s / fed as f64),
        seconds_per_sample: (!run.decodes.is_empty() && busy_s > 0.0).then(|| busy_s / run.decodes.len() as f64),
    }
}

/// The report's notes: positions no figure counts, windows not fed to their end, the policy's
/// limits a corpus audit does not apply (a bound not given is said by the gate line of a limit
/// on it).
fn notes(opts: &GenerationOptions, reference: &ReferenceCorpus, targets: &[GenerationTarget]) -> Vec<String> {
    let mut notes = Vec::new();
    if reference.nonfinite_positions > 0 {
        notes.push(format!(
            "the reference's logits are not all finite at {} of {}: no target is scored there",
            count(reference.nonfinite_positions, "position"),
            reference.positions + reference.nonfinite_positions
        ));
    }
    for t in targets {
        let m = &t.summary;
        if let Some(c) = &t.corpus {
            if c.nonfinite_positions > 0 {
                notes.push(format!(
                    "{}: its logits are not all finite (NaN or ±inf) at {} of {}; its figures are over the other {}",
                    t.id, c.nonfinite_positions, m.steps, c.positions
                ));
            }
        }
        if !m.unfinished.is_empty() {
            notes.push(format!(
                "{}: {} not fed to {} end and not scored: {}",
                t.id,
                count(m.unfinished.len(), "window"),
                if m.unfinished.len() == 1 { "its" } else { "their" },
                listed(&m.unfinished, 8)
            ));
        }
    }
    notes.extend(limits_not_applied(opts, targets));
    notes
}

/// How the figures and bounds were computed.
fn statistics_info(opts: &GenerationOptions) -> StatisticsInfo {
    StatisticsInfo {
        seed: opts.stats.seed,
        resamples: opts.stats.resamples,
        margin_points: None,
        sequential: None,
        methods: vec![
            "per position (window positions 0..n-2, the logits after each token but the last against the token after it): KL(reference ‖ target) of the softmax of the raw logits, Δp = p_target − p_reference of the token that came, the same top token, −ln p of the token on both sides; a position whose logits are not all finite on either side leaves every figure".into(),
            "over every position of every window fed to its end: KLD mean with its standard error (ddof 1), NumPy's linear percentiles, Δp mean, RMS and percentiles, the same-top share with its 95% Wilson interval, PPL = exp(mean −ln p) on both sides and ln(PPL ratio) = mean difference ± 1.96 SE (llama.cpp's llama-perplexity --kl-divergence)".into(),
            "gate bounds: one-sided 95%, percentile bootstrap over windows (a window's positions are not independent); the same-top bound never above its Wilson bound, the p99 bound never below the order statistic that bounds it without assumptions (299 positions or more); none from one window or with positions not finite".into(),
        ],
    }
}
