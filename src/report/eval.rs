//! The JSON `eval` writes (`docs/eval.schema.json`, prose in `docs/eval.md`): per target its task
//! metrics with intervals, paired comparisons with the reference and the baseline (drop, McNemar,
//! non-inferiority), what flipped, and the gate. A contract other tools parse: the schema is
//! derived from these types. The eval itself is in `crate::commands::eval`.

use serde::{Deserialize, Serialize};

use super::common::Num;
use super::compare::{LayerPointer, RuntimeInfo};
use super::run::RunStatus;
use crate::foundation::error::ExitCode;

/// The eval output's layout version (2: drops of accuracy bounded by Tango's score interval,
/// bounds a sample cannot give said so, sample sizes, sequential decisions).
pub const EVAL_SCHEMA_VERSION: u32 = 3;

/// What `eval` found.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvalReport {
    /// The layout version of this kind; a reader refuses a version it does not know.
    pub schema_version: u32,
    /// Which kind of report this is (`eval`): what a reader parses it as.
    pub kind: super::common::ReportKind,
    /// The tool that wrote it.
    pub tool: super::common::ToolInfo,
    /// The machine that made the figures: CPU, the instruction-set features that select kernels,
    /// their class (`docs/hosts.md`). Absent in reports of releases before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<super::facts::HostInfo>,
    /// The audited model and its SHA-256.
    pub model: String,
    pub model_sha256: String,
    /// How the reference outputs were made.
    pub reference: String,
    pub dataset: DatasetInfo,
    pub task: TaskInfo,
    pub statistics: StatisticsInfo,
    /// The reference's own figures against the labels.
    pub reference_metrics: Metrics,
    pub targets: Vec<EvalTarget>,
    pub gate: super::gate::GateReport,
    pub notes: Vec<String>,
    pub exit_code: ExitCode,
}

/// The set as fed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DatasetInfo {
    pub path: String,
    /// Samples evaluated (after `--limit`).
    pub samples: usize,
    /// The SHA-256 of the sample ids in order: two runs on the same samples have the same.
    pub ids_sha256: String,
    /// Where the labels came from (`reference` for `agree`).
    pub labels: String,
    /// The SHA-256 of the labels' contents (every id and label as JSON, a line each, in the
    /// set's order): the same labels give the same, wherever they came from. Absent for `agree`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels_sha256: Option<String>,
    /// The SHA-256 of the samples' contents (each sample file's SHA-256 with its id, or the
    /// stacked archive's): recorded by a sharded eval, whose shards must read the same set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_sha256: Option<String>,
}

/// The task as run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TaskInfo {
    /// `classify`, `decide`, `ctc` or `agree`.
    pub kind: String,
    /// The output the task reads.
    pub output: String,
    /// The task's settings as one line (`top-5`, `probs>0.5`, the vocabulary's size).
    pub settings: String,
    /// The metric comparisons and the gate are about: `accuracy` or `cer`.
    pub primary: String,
}

/// How the statistics were computed, so that anyone recomputes the same figures.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatisticsInfo {
    /// Seed of the bootstrap's generator (`docs/eval.md`).
    pub seed: u64,
    /// Resamples of every bootstrap.
    pub resamples: usize,
    /// The non-inferiority margin in points of the primary metric, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub margin_points: Option<f64>,
    /// `--until-decided`: the samples were taken in a seeded random order and each gated target
    /// stopped when its confidence sequence decided its limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<SequentialInfo>,
    /// One sentence per method.
    pub methods: Vec<String>,
}

/// How a sequential eval took its samples and what its decisions guarantee.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SequentialInfo {
    /// `--order-seed`: the seed of the order the samples were taken in (`docs/eval.md`).
    pub order_seed: u64,
    /// Each bound's miscoverage, uniform over every sample size (0.05).
    pub alpha: f64,
    /// What a decision guarantees, in one sentence.
    pub guarantee: String,
}

/// A proportion with its 95% Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Proportion {
    pub k: u64,
    pub n: u64,
    pub value: Num,
    pub lo: Num,
    pub hi: Num,
}

/// A figure with its 95% interval (`lo` and `hi` are `nan` when the sample cannot bound it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Estimate {
    pub value: Num,
    pub lo: Num,
    pub hi: Num,
    /// Why there is no interval: the sample has nothing that varies (every resample of a
    /// bootstrap gives the same figure), so it cannot bound the figure, and no limit on it passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unbounded: Option<String>,
}

/// A run's figures against the labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Metrics {
    /// Samples with a figure (every sample the run answered).
    pub samples: usize,
    /// Samples the run failed on (counted as wrong).
    pub errors: usize,
    /// Top-1 right, the decision right, or the transcript exact.
    pub accuracy: Proportion,
    /// Classification: the true class among the best k.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<Proportion>,
    /// Decisions: precision, recall and F1 of the positive decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<Proportion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall: Option<Proportion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub f1: Option<Estimate>,
    /// CTC: character and word error rates (edits over the labels' characters or words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cer: Option<Estimate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wer: Option<Estimate>,
}

/// A target against another run on the same samples, paired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// What it is compared with: `reference` or the baseline's id.
    pub against: String,
    /// Samples both runs answered: the pairs compared (absent in reports of layout 1).
    #[serde(default)]
    pub pairs: u64,
    /// The primary metric's drop in points (accuracy lost, or CER gained), with its two-sided 95%
    /// interval: Tango's score interval for accuracy, the paired bootstrap for the CER.
    pub drop: Estimate,
    /// The one-sided 95% upper bound of the drop: what non-inferiority and the
    /// `max_accuracy_drop` gate test (`nan` when the sample cannot bound it).
    pub drop_upper: Num,
    /// The one-sided 95% lower bound of the drop (equivalence tests both).
    #[serde(default = "Num::nan")]
    pub drop_lower: Num,
    /// `tango` (the score interval of paired proportions) or `bootstrap` (the paired percentile
    /// bootstrap, for the CER; every drop in reports of layout 1).
    #[serde(default = "bootstrap_method")]
    pub method: String,
    /// The smallest drop in points this many pairs can rule out: the upper bound had no pair been
    /// discordant (`tango` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Num>,
    /// Samples the other run got wrong and this one right.
    pub fixed: u64,
    /// Samples the other run got right and this one wrong.
    pub broken: u64,
    /// McNemar's exact two-sided p-value on `fixed` and `broken`.
    pub mcnemar_p: Num,
    /// With a margin: the drop's upper bound within it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_inferior: Option<bool>,
    /// With a margin: the drop's 90% interval within plus or minus it (two one-sided tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub equivalent: Option<bool>,
}

/// The method of every drop in reports of layout 1.
fn bootstrap_method() -> String {
    "bootstrap".into()
}

/// A sample whose correctness changed between the reference and a target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Flip {
    pub id: String,
    /// The label as the task reads it.
    pub label: String,
    pub reference: String,
    pub target: String,
    /// `fixed` (the target right, the reference wrong) or `broken`.
    pub kind: String,
    /// The sample's output SQNR against the reference (worst output).
    pub sqnr_db: Num,
}

/// A sample with a low output SQNR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorstSample {
    pub id: String,
    pub sqnr_db: Num,
    pub correct: bool,
}

/// The samples whose output SQNR falls in one bin, by whether the target got them right: how
/// drift turns into errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SqnrBin {
    /// The bin's lower edge in dB (`-inf` for samples without a finite SQNR below every edge).
    pub lo_db: Num,
    /// Its upper edge (exclusive; `inf` for the last).
    pub hi_db: Num,
    pub correct: u64,
    pub wrong: u64,
}

/// How often a true class was predicted as another (non-zero cells only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConfusionCell {
    pub truth: usize,
    pub predicted: usize,
    pub count: u64,
}

/// Where a target's flips come from: the per-layer audit of the samples it broke.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlipExplanation {
    /// The samples audited layer by layer.
    pub samples: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_code_difference: Option<LayerPointer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_beyond_rounding: Option<LayerPointer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_sqnr_loss: Option<LayerPointer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One target's eval.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvalTarget {
    pub id: String,
    /// `target`, or `baseline` for `cpu:noopt` added as the reference integer implementation.
    pub role: super::facts::TargetRole,
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeInfo>,
    pub intra_op_threads: Option<usize>,
    /// Samples it ran (all of them unless it stopped).
    pub samples_run: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comparisons: Vec<Comparison>,
    /// The median per-sample output SQNR against the reference (worst output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_sqnr_db: Option<Num>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flips: Vec<Flip>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worst: Vec<WorstSample>,
    /// Every sample's output SQNR in 5 dB bins, right and wrong apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sqnr_histogram: Vec<SqnrBin>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confusion: Vec<ConfusionCell>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<FlipExplanation>,
    /// Milliseconds per sample, median (the session's own run time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_ms_median: Option<f64>,
    /// When its drop limit is not shown: how many samples it would take at its observed flip
    /// rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_needed: Option<SamplesNeeded>,
    /// `--until-decided`: when and how its limits were decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<SequentialOutcome>,
}

/// The samples a drop limit needs at a target's flip rates (`docs/eval.md`, Nam 1997).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SamplesNeeded {
    /// The limit in points (`max_accuracy_drop`, else the margin).
    pub limit_points: Num,
    /// The fractions of samples the target broke and fixed against the reference.
    pub broken_rate: Num,
    pub fixed_rate: Num,
    /// Samples at which the bound of the expected counts meets the limit (even odds of showing
    /// it); absent when no number of samples shows it at these rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub even_odds: Option<u64>,
    /// Samples that show it with 80% probability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_80: Option<u64>,
}

/// A gated target's sequential decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SequentialOutcome {
    /// `pass` (every limit shown met), `fail` (a limit shown broken) or `undecided` (the set ran
    /// out, or the target stopped, first).
    pub decision: SequentialDecision,
    /// Samples it ran before the decision (all it ran when undecided).
    pub samples_used: usize,
    /// Each limit's bounds at its decision (at the stop when undecided).
    pub rules: Vec<SequentialRule>,
}

/// Where a sequential decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SequentialDecision {
    /// Shown met (every limit, for a target).
    Pass,
    /// Shown broken (one limit breaks a target).
    Fail,
    /// Not shown either way when the samples ran out or the target stopped.
    Undecided,
}

impl SequentialDecision {
    /// The decision as the report spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SequentialDecision::Pass => "pass",
            SequentialDecision::Fail => "fail",
            SequentialDecision::Undecided => "undecided",
        }
    }
}

/// One limit of a sequential decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SequentialRule {
    /// `max_accuracy_drop` (points) or `min_accuracy` (a fraction).
    pub rule: super::gate::Rule,
    pub limit: Num,
    /// The anytime-valid one-sided 95% bounds when it was decided (at the stop when undecided),
    /// in the limit's units.
    pub lower: Num,
    pub upper: Num,
    /// `pass`, `fail` or `undecided`.
    pub decision: SequentialDecision,
    /// The sample count at which it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<usize>,
}
