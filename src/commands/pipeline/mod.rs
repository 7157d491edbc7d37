//! `npu-audit pipeline`: several models chained (outputs of one feed inputs of the next),
//! audited end to end per target, with the drift of the final output attributed to a stage.
//!
//! Each stage runs through `compare` twice over: once on the golden chain's inputs for every
//! target at once (what the stage *introduces* on each target), and once per target on that
//! target's own upstream outputs (the *chained* run, as the app runs the chain). The chained
//! run's golden run is the stage's reference on the target's drifted inputs: what the upstream
//! drift becomes through an exact stage (*propagated*). Every figure is measured against the
//! golden chain (every reference on the golden upstream outputs).

pub mod file;

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::analyses::metrics::ErrorStats;
use crate::commands::compare::{run_compare_with_outputs, Audited, CompareOptions, GoldenSource, RunTensors};
use crate::data::inputs::{InputOptions, MemoryInputs};
use crate::data::target::TargetSpec;
use crate::data::tensor::Tensor;
use crate::execution::exec::ExecOptions;
use crate::foundation::userfile::{InputFiles, Outputs, Reads};
use crate::report::common::Num;
pub use crate::report::pipeline::{PipelineReport, PipelineTarget, StageFigures, StageInfo, StageOutput};
pub use file::{Feed, Stage};

/// One run's outputs: per sample, every output by name.
type Samples = Vec<Vec<(String, Tensor)>>;

/// What `pipeline` was asked.
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub file: PathBuf,
    /// The file's stages, read and checked.
    pub stages: Vec<Stage>,
    /// The targets every stage runs on.
    pub targets: Vec<TargetSpec>,
    /// Whether the user named the targets: a chain that fails on a target the user did not name
    /// (every runnable target, by default) is reported but fails no `--min-sqnr`, as `compare`
    /// does not fail on a default target that does not run.
    pub targets_named: bool,
    /// The first stage's inputs (later stages get their upstream stages' outputs).
    pub inputs: InputOptions,
    pub exec: ExecOptions,
    /// The final stage's outputs must reach this SQNR on every target (exit 1 otherwise).
    pub min_sqnr_db: Option<f64>,
}

impl Reads for PipelineOptions {
    fn declare(&self, set: &mut InputFiles) {
        let PipelineOptions {
            file,
            stages,
            targets: _,
            targets_named: _,
            inputs,
            exec,
            min_sqnr_db: _,
        } = self;
        set.add(file).with(inputs).with(exec);
        for stage in stages {
            set.add(&stage.model).add_all(&stage.reference);
        }
    }
}

/// Runs the pipeline and returns its report.
pub fn run(opts: &PipelineOptions, outputs: &mut Outputs) -> Result<PipelineReport> {
    let mut golden: Vec<Samples> = Vec::new();
    let mut chains: Vec<(String, Chain)> = Vec::new();
    let mut infos = Vec::new();
    let mut samples = 0;
    for (k, stage) in opts.stages.iter().enumerate() {
        crate::foundation::interrupt::check()?;
        let inputs = match k {
            0 => opts.inputs.clone(),
            _ => stage_inputs(stage, &golden, &opts.stages, "the golden chain")?,
        };
        let (report, tensors) = audit_stage(opts, stage, inputs, None, outputs)?;
        if k == 0 {
            samples = report.inputs.provenance.samples;
        }
        infos.push(StageInfo {
            name: stage.name.clone(),
            model: stage.model.display().to_string(),
            reference: report.reference.description.clone(),
            golden: report.reference.clone(),
            feeds: stage
                .feeds
                .iter()
                .map(|f| format!("{} <- {}.{}", f.input, opts.stages[f.stage].name, f.output))
                .collect(),
        });
        let gold = tensors
            .get("golden")
            .cloned()
            .context("the golden run kept no outputs")?;
        for row in report
            .targets
            .iter()
            .filter(|t| t.role == crate::report::facts::TargetRole::Target)
        {
            if k == 0 {
                chains.push((row.id.clone(), Chain::starting(row)));
            }
            let Some((_, chain)) = chains.iter_mut().find(|(id, _)| *id == row.id) else {
                continue;
            };
            if chain.failed.is_none() && chain.outputs.len() == k {
                let at = StagePoint { k, stage, gold: &gold };
                advance(opts, &at, chain, row, &tensors, outputs)?;
            }
        }
        golden.push(gold);
    }
    Ok(report(opts, infos, samples, chains))
}

/// Where the chain is: the stage, its index, the golden chain's outputs of it.
struct StagePoint<'a> {
    k: usize,
    stage: &'a Stage,
    gold: &'a Samples,
}

/// One target's chain through stage `at.k`: its figures from the stage's run on the golden inputs
/// (`tensors`, every target) and its own chained run; or where it failed.
fn advance(
    opts: &PipelineOptions,
    at: &StagePoint<'_>,
    chain: &mut Chain,
    row: &crate::report::compare::TargetReport,
    tensors: &RunTensors,
    outputs: &mut Outputs,
) -> Result<()> {
    let Some(introduced) = tensors.get(&row.id) else {
        let why = row.error.clone().unwrap_or_else(|| row.status.as_str().into());
        chain.failed = Some(format!("{}: {why}", at.stage.name));
        return Ok(());
    };
    if at.k == 0 {
        chain.push(at.stage, at.gold, introduced, None, introduced.clone());
        return Ok(());
    }
    let inputs = stage_inputs(at.stage, &chain.outputs, &opts.stages, &row.id)?;
    let target = opts.targets.iter().find(|t| t.id == row.id).cloned();
    let (own, own_tensors) = audit_stage(opts, at.stage, inputs, target, outputs)?;
    match own_tensors.get(&row.id) {
        Some(chained) => {
            let propagated = own_tensors.get("golden").context("the golden run kept no outputs")?;
            chain.push(at.stage, at.gold, introduced, Some(propagated), chained.clone());
        }
        None => {
            let t = own.targets.iter().find(|t| t.id == row.id);
            let why = t.and_then(|t| t.error.clone()).unwrap_or_else(|| "did not run".into());
            chain.failed = Some(format!("{}: {why}", at.stage.name));
        }
    }
    Ok(())
}

/// What a target ran with (the same for every stage).
#[derive(Default)]
struct Knobs {
    runtime: Option<crate::report::compare::RuntimeInfo>,
    options: std::collections::BTreeMap<String, String>,
    intra_op_threads: Option<usize>,
}

/// One target's way through the chain so far.
#[derive(Default)]
struct Chain {
    knobs: Knobs,
    /// Per stage that ran, its chained outputs.
    outputs: Vec<Samples>,
    figures: Vec<StageFigures>,
    failed: Option<String>,
}

impl Chain {
    /// A chain before its first stage, with what the target runs with.
    fn starting(row: &crate::report::compare::TargetReport) -> Chain {
        Chain {
            knobs: Knobs {
                runtime: row.runtime.clone(),
                options: row.options.clone(),
                intra_op_threads: row.intra_op_threads,
            },
            ..Chain::default()
        }
    }

    fn push(
        &mut self,
        stage: &Stage,
        gold: &Samples,
        introduced: &Samples,
        propagated: Option<&Samples>,
        chained: Samples,
    ) {
        let names: Vec<String> = gold
            .first()
            .map(|s| s.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default();
        let outputs = names
            .iter()
            .map(|name| {
                let chained_stats = pooled(&chained, gold, name);
                StageOutput {
                    name: name.clone(),
                    introduced_sqnr_db: Num(pooled(introduced, gold, name).sqnr_db()),
                    propagated_sqnr_db: propagated.map(|p| Num(pooled(p, gold, name).sqnr_db())),
                    chained_sqnr_db: Num(chained_stats.sqnr_db()),
                    chained_max_abs: Num(chained_stats.max_abs()),
                }
            })
            .collect();
        self.figures.push(StageFigures {
            stage: stage.name.clone(),
            outputs,
        });
        self.outputs.push(chained);
    }
}

/// The statistics of one output of `run` against `gold`, pooled over the samples (NaN when a
/// sample lacks it or the shapes differ).
fn pooled(run: &Samples, gold: &Samples, name: &str) -> ErrorStats {
    let mut stats: Option<ErrorStats> = None;
    fn find<'s>(sample: &'s [(String, Tensor)], name: &str) -> Option<&'s Tensor> {
        sample.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
    for (r, g) in run.iter().zip(gold) {
        let (Some(o), Some(g)) = (find(r, name), find(g, name)) else {
            return nan_stats();
        };
        if o.shape != g.shape {
            return nan_stats();
        }
        let same = o.dtype() == g.dtype();
        let s = stats.get_or_insert_with(|| ErrorStats::new(same, same && o.dtype().is_float()));
        s.update(&o.data, &g.data);
    }
    stats.unwrap_or_else(nan_stats)
}

/// Statistics that measure nothing: every figure NaN.
fn nan_stats() -> ErrorStats {
    ErrorStats::default()
}

/// A stage's inputs, in memory: every input of every sample from the output of the earlier stage
/// that feeds it in `runs` (per stage; `chain` names whose runs they are).
fn stage_inputs(stage: &Stage, runs: &[Samples], stages: &[Stage], chain: &str) -> Result<InputOptions> {
    let count = stage.feeds.iter().map(|f| runs[f.stage].len()).min().unwrap_or(0);
    let mut samples = Vec::with_capacity(count);
    for s in 0..count {
        let tensors: Vec<(String, Tensor)> = stage
            .feeds
            .iter()
            .map(|f| {
                runs[f.stage]
                    .get(s)
                    .into_iter()
                    .flatten()
                    .find(|(n, _)| *n == f.output)
                    .map(|(_, t)| (f.input.clone(), t.clone()))
                    .with_context(|| format!("stage {}: no output '{}' in sample {s}", f.stage, f.output))
            })
            .collect::<Result<_>>()?;
        samples.push(tensors);
    }
    let upstream: Vec<&str> = stage.feeds.iter().map(|f| stages[f.stage].name.as_str()).collect();
    Ok(InputOptions {
        samples: 1,
        memory: Some(MemoryInputs {
            label: format!("{chain}: outputs of stage {}", upstream.join(", ")),
            samples,
        }),
        ..InputOptions::default()
    })
}

/// `compare` of one stage on its inputs: every target, or one.
fn audit_stage(
    opts: &PipelineOptions,
    stage: &Stage,
    inputs: InputOptions,
    only: Option<TargetSpec>,
    outputs: &mut Outputs,
) -> Result<(crate::report::compare::Report, RunTensors)> {
    let audited = Audited {
        model: stage.model.clone(),
        golden: GoldenSource {
            reference: stage.reference.clone(),
            ..GoldenSource::default()
        },
        inputs,
    };
    let targets = only.map_or_else(|| opts.targets.clone(), |t| vec![t]);
    let audit = CompareOptions::findings(audited, targets, opts.exec.clone());
    run_compare_with_outputs(&audit, outputs).with_context(|| format!("stage {}", stage.name))
}

/// The report: per target its stages, final SQNR and the stage its drift comes from.
fn report(
    opts: &PipelineOptions,
    stages: Vec<StageInfo>,
    samples: usize,
    chains: Vec<(String, Chain)>,
) -> PipelineReport {
    let targets: Vec<PipelineTarget> = chains
        .into_iter()
        .map(|(id, chain)| {
            let complete = chain.failed.is_none() && chain.figures.len() == opts.stages.len();
            let final_sqnr = chain
                .figures
                .last()
                .filter(|_| complete)
                .map_or(f64::NAN, |f| worst(f, |o| o.chained_sqnr_db.0));
            let (origin, attribution) = if complete {
                attribute(&chain.figures)
            } else {
                (None, Vec::new())
            };
            PipelineTarget {
                id,
                runtime: chain.knobs.runtime,
                options: chain.knobs.options,
                intra_op_threads: chain.knobs.intra_op_threads,
                stages: chain.figures,
                failed: chain.failed,
                final_sqnr_db: Num(final_sqnr),
                origin,
                attribution,
            }
        })
        .collect();
    let failing = targets
        .iter()
        .filter(|t| opts.targets_named || t.failed.is_none())
        .any(|t| {
            opts.min_sqnr_db
                .is_some_and(|m| t.final_sqnr_db.0.is_nan() || t.final_sqnr_db.0 < m)
        });
    PipelineReport {
        schema_version: crate::report::pipeline::PIPELINE_SCHEMA_VERSION,
        kind: crate::report::common::ReportKind::Pipeline,
        tool: crate::report::common::ToolInfo::this(),
        host: Some(crate::foundation::host::this_host().into()),
        file: opts.file.display().to_string(),
        stages,
        samples,
        targets,
        min_sqnr_db: opts.min_sqnr_db,
        exit_code: crate::judge::gate::exit_code(false, crate::report::gate::Verdict::judged(failing)),
    }
}

/// The lowest figure over a stage's outputs (NaN counts as lowest).
fn worst(f: &StageFigures, figure: impl Fn(&StageOutput) -> f64) -> f64 {
    f.outputs.iter().map(figure).fold(f64::INFINITY, |a, b| {
        if b.is_nan() || a.is_nan() {
            f64::NAN
        } else {
            a.min(b)
        }
    })
}

/// Walks back from the last stage: at each stage, the noise its outputs carry in the chain has
/// two sources, what the stage introduces (alone on golden inputs) and what arrives from
/// upstream (propagated through the exact stage). Both are measured against the same golden
/// outputs, so the lower SQNR is the larger noise power. When the stage's own is larger (or
/// equal), the drift originates there; otherwise the walk goes one stage up. The first stage
/// has no upstream.
pub fn attribute(figures: &[StageFigures]) -> (Option<String>, Vec<String>) {
    let mut why = Vec::new();
    for f in figures.iter().rev() {
        let introduced = worst(f, |o| o.introduced_sqnr_db.0);
        let propagated = worst(f, |o| o.propagated_sqnr_db.map_or(f64::INFINITY, |v| v.0));
        if f.outputs.iter().all(|o| o.propagated_sqnr_db.is_none()) {
            why.push(format!(
                "{}: first stage, introduces {} dB",
                f.stage,
                db_text(introduced)
            ));
            return (Some(f.stage.clone()), why);
        }
        if introduced <= propagated || propagated.is_nan() {
            why.push(format!(
                "{}: introduces {} dB, upstream drift arrives at {} dB: the stage's own error dominates",
                f.stage,
                db_text(introduced),
                db_text(propagated)
            ));
            return (Some(f.stage.clone()), why);
        }
        why.push(format!(
            "{}: introduces {} dB, upstream drift arrives at {} dB: it comes from upstream",
            f.stage,
            db_text(introduced),
            db_text(propagated)
        ));
    }
    (figures.first().map(|f| f.stage.clone()), why)
}

/// A dB figure in an attribution sentence: two decimals, or `inf`/`-inf`/`-`.
fn db_text(v: f64) -> String {
    match v {
        v if v.is_nan() => "-".into(),
        f64::INFINITY => "inf".into(),
        f64::NEG_INFINITY => "-inf".into(),
        v => format!("{v:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &str, introduced: f64, propagated: Option<f64>) -> StageFigures {
        StageFigures {
            stage: name.into(),
            outputs: vec![StageOutput {
                name: "y".into(),
                introduced_sqnr_db: Num(introduced),
                propagated_sqnr_db: propagated.map(Num),
                chained_sqnr_db: Num(0.0),
                chained_max_abs: Num(0.0),
            }],
        }
    }

    /// The head introduces 40 dB but receives the backbone's drift at 20 dB: the larger noise
    /// (lower SQNR) comes from upstream, and the backbone is the first stage.
    #[test]
    fn attribution_follows_the_larger_noise_upstream() {
        let (origin, why) = attribute(&[stage("backbone", 18.0, None), stage("head", 40.0, Some(20.0))]);
        assert_eq!(origin.as_deref(), Some("backbone"));
        assert_eq!(why.len(), 2);
        assert!(why[0].contains("comes from upstream"), "{why:?}");
        let (origin, _) = attribute(&[stage("backbone", 30.0, None), stage("head", 12.0, Some(35.0))]);
        assert_eq!(origin.as_deref(), Some("head"));
    }
}
