//! The report of `eval --task transcribe|generate` on a generation spec: every target decoded
//! each sample with its own tokens fed back; where its text departed from the fp32 reference's,
//! what that cost in words, and how close each step's logits stayed under teacher forcing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::compare::{Num, ToolInfo};
use super::facts::HostInfo;
use super::RunStatus;
use crate::foundation::error::ExitCode;

/// The layout version of this report; a reader refuses another.
pub const GENERATION_SCHEMA_VERSION: u32 = 1;

/// A generation audit's report.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerationReport {
    pub schema_version: u32,
    /// Always `"generation"`: what tells this report from the others.
    pub kind: String,
    pub tool: ToolInfo,
    pub host: HostInfo,
    /// `transcribe` (labels are the spoken text: WER and CER) or `generate` (agreement with the
    /// reference's text; labels, when the set has them, also scored).
    pub task: String,
    /// The spec every target ran.
    pub spec: SpecSummary,
    /// The fp32 spec the targets are compared with, decoded on the CPU EP without graph
    /// optimizations (the golden run).
    pub reference: SpecSummary,
    pub dataset: GenerationSet,
    /// The reference's own decode of every sample.
    pub reference_samples: Vec<ReferenceSample>,
    /// The reference's text against the labels (`None` without labels).
    pub reference_scores: Option<TextScores>,
    pub targets: Vec<GenerationTarget>,
    /// `max_accuracy_drop` per target, judged on the one-sided 95% upper bound of the loss.
    pub gate: Vec<GenerationRule>,
    pub notes: Vec<String>,
    pub exit_code: ExitCode,
}

/// One target's limit on the points it may lose against the reference: for `transcribe`, the
/// WER's increase (its paired bootstrap's 95th percentile); for `generate`, the share of samples
/// whose text differs from the reference's (its one-sided 95% Wilson bound), in points.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerationRule {
    pub target: String,
    /// `wer_increase` or `text_disagreement`.
    pub measure: String,
    /// The point estimate and the one-sided 95% upper bound the limit is held to, in points.
    pub estimate: Num,
    pub upper: Num,
    pub limit: f64,
    /// Where the limit came from (`--max-accuracy-drop`, the policy file's line).
    pub origin: String,
    pub pass: bool,
}

/// What a spec is: its file and parts with their digests, the loop's settings.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecSummary {
    pub path: String,
    /// `encoder-decoder` or `decoder-only`.
    pub layout: String,
    /// `dynamic` (the past grows) or `static` (fixed KV buffers).
    pub form: String,
    pub parts: Vec<PartSummary>,
    pub tokenizer_sha256: String,
    pub start_tokens: Vec<String>,
    pub end_token: String,
    pub max_new_tokens: usize,
    pub kv_length: Option<usize>,
    pub suppress_tokens: Vec<u32>,
    pub suppress_at_start: Vec<u32>,
}

/// One ONNX file of a spec.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartSummary {
    pub name: String,
    pub file: String,
    pub sha256: String,
}

/// The set decoded.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerationSet {
    pub path: String,
    pub samples: usize,
    /// Where the labels came from (`None`: no labels).
    pub labels_from: Option<String>,
}

/// How a decode stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The end token was chosen.
    EndToken,
    /// `max_new_tokens` were chosen without the end token: stopped, and reported.
    Limit,
    /// No logit was a number (every one NaN or suppressed).
    NoNumber,
    /// A part failed mid-way (the sample's `error` says which and why).
    Failed,
}

/// The reference's decode of one sample.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReferenceSample {
    pub id: String,
    /// The tokens chosen, the end token included when chosen.
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    pub label: Option<String>,
    /// Edits to the label: words and characters of the normalised texts.
    pub words: Option<EditCounts>,
    pub chars: Option<EditCounts>,
    pub error: Option<String>,
}

/// Edits between a text and its label, and the label's length (words or characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditCounts {
    pub edits: usize,
    pub of: usize,
}

/// Word and character error rates over a set, with their percentile-bootstrap intervals, and
/// exact matches.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextScores {
    /// Samples scored.
    pub samples: usize,
    /// Word error rate: word edits over label words, summed over the set (0..; may pass 1).
    pub wer: Num,
    pub wer_interval: [Num; 2],
    pub cer: Num,
    pub cer_interval: [Num; 2],
    /// Samples whose normalised text equals the label's.
    pub exact: usize,
}

/// A target's decode of the set.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerationTarget {
    pub id: String,
    pub status: RunStatus,
    pub error: Option<String>,
    /// The ONNX Runtime release and EP it ran on, in words.
    pub runtime: Option<String>,
    /// Per part: how its session was made (`compiled`, `loaded` from the context cache, ...),
    /// its creation time in ms.
    pub parts: Vec<PartRun>,
    pub samples: Vec<TargetSample>,
    pub summary: TargetSummary,
}

/// One part's session on a target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartRun {
    pub part: String,
    pub session_create_ms: f64,
    pub qnn_context: Option<String>,
    /// Steps it ran, and their mean time in ms (the session's own time).
    pub runs: usize,
    pub mean_run_ms: Option<f64>,
    /// Nodes the EP asked for took, of all nodes (from the recorded assignment; `None` when the
    /// runtime did not say).
    pub nodes_on_ep: Option<[usize; 2]>,
}

/// A target's decode of one sample against the reference's.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetSample {
    pub id: String,
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    /// The first step whose token differs from the reference's (`None`: every token the same).
    pub first_divergence: Option<Divergence>,
    /// Positions after the first divergence whose token differs from the reference's at the
    /// same position (a missing token counts as differing).
    pub later_differing: usize,
    /// Token edits between the two decodes (end tokens included).
    pub token_edits: usize,
    /// Whether its text equals the reference's.
    pub same_text: bool,
    pub words: Option<EditCounts>,
    pub chars: Option<EditCounts>,
    /// Per reference step under teacher forcing (the reference's tokens fed from the first
    /// divergence on; before it, the target's own tokens are the reference's).
    pub steps: Vec<StepFigures>,
    pub error: Option<String>,
    /// `--explain`: the per-layer audit of the part call that produced the divergent step, on the
    /// inputs (the key/value state) this target fed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<StepExplanation>,
}

/// The per-layer audit of the part call where a target's decode first departed, on the inputs it
/// fed it: which layer introduces the most error against the fp32 reference by itself, and where
/// the target first parts from the baseline (`cpu:noopt`, the reference integer implementation).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepExplanation {
    /// The part audited (`step`, `prompt`, `decoder`, ...).
    pub part: String,
    /// The layer whose isolated run (alone, on the reference's inputs) has the lowest SQNR
    /// against the reference's output: the error it introduces by itself.
    pub worst_introduced: Option<IntroducedLayer>,
    /// Against the baseline: the first layer whose codes differ, the first beyond rounding, the
    /// first that loses SQNR (none of them on a target that computes as the baseline does: its
    /// departure is the quantized model's own).
    pub first_code_difference: Option<super::compare::LayerPointer>,
    pub first_beyond_rounding: Option<super::compare::LayerPointer>,
    pub first_sqnr_loss: Option<super::compare::LayerPointer>,
    pub error: Option<String>,
}

/// A layer and the SQNR of its isolated run against the reference.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IntroducedLayer {
    pub index: usize,
    pub node: String,
    pub op_type: String,
    pub introduced_sqnr_db: Num,
}

/// Where a target's decode first departed from the reference's.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Divergence {
    /// The new token's index (0: the first token after the start tokens and prompt).
    pub step: usize,
    pub reference_token: u32,
    pub reference_piece: String,
    /// `None` when no logit of the step was a number (nothing was chosen).
    pub target_token: Option<u32>,
    pub target_piece: String,
    /// The text both decodes share before it.
    pub common_text: String,
    /// The reference's top-1 margin there (its best logit minus the target's choice's, in the
    /// reference's logits): how close the call was.
    pub reference_margin: Num,
}

/// One step's logits against the reference's.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepFigures {
    /// The target's greedy choice equals the reference's token.
    pub top1: bool,
    /// KL(reference ‖ target) of the softmax of the logits, in nats.
    pub kl: Num,
    /// SQNR of the logits against the reference's, in dB.
    pub sqnr_db: Num,
}

/// A target's figures over the set.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetSummary {
    pub samples: usize,
    /// Samples whose tokens departed from the reference's.
    pub diverged: usize,
    /// The median first divergent step over diverged samples.
    pub median_divergence_step: Option<f64>,
    /// Samples whose text equals the reference's.
    pub same_text: usize,
    /// Teacher-forced steps whose top-1 equals the reference's, of all steps.
    pub top1_agreement: Num,
    pub steps: usize,
    pub mean_kl: Num,
    pub median_sqnr_db: Num,
    /// Against the labels (`None` without).
    pub scores: Option<TextScores>,
    /// The WER's change from the reference's in points (target − reference), paired by sample,
    /// with its bootstrap interval.
    pub wer_delta_points: Option<Num>,
    pub wer_delta_interval: Option<[Num; 2]>,
    /// The one-sided 95% upper bound of the WER change (the bootstrap's 95th percentile).
    pub wer_delta_upper: Option<Num>,
    /// Exact matches with the label the reference had and the target lost (broken), and the
    /// reverse (fixed), with McNemar's exact p.
    pub broken: usize,
    pub fixed: usize,
    pub mcnemar_p: Option<Num>,
    /// Decoding cost on this target: new tokens, and the mean seconds per token and per sample
    /// (the parts' own run time).
    pub new_tokens: usize,
    pub seconds_per_token: Option<f64>,
    pub seconds_per_sample: Option<f64>,
}
