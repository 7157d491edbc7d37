//! The report of `eval --task transcribe|generate` on a generation spec: every target decoded
//! each sample with its own tokens fed back; where its text departed from the fp32 reference's,
//! what that cost in words, and how close each step's logits stayed under teacher forcing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Num, ToolInfo};
use super::eval::StatisticsInfo;
use super::facts::HostInfo;
use super::gate::GateReport;
use super::RunStatus;
use crate::foundation::error::ExitCode;

/// The layout version of this report; a reader refuses another.
pub const GENERATION_SCHEMA_VERSION: u32 = 2;

/// A generation audit's report.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerationReport {
    /// The layout version of this kind; a reader refuses a version it does not know.
    pub schema_version: u32,
    /// Which kind of report this is (`generation`): what a reader parses it as.
    pub kind: super::common::ReportKind,
    /// The tool that wrote it.
    pub tool: ToolInfo,
    pub host: HostInfo,
    pub task: GenerationTask,
    /// The spec every target ran.
    pub spec: SpecSummary,
    /// The fp32 spec the targets are compared with, decoded on the CPU EP without graph
    /// optimizations (the golden run).
    pub reference: SpecSummary,
    pub dataset: GenerationSet,
    /// How the intervals were drawn (the bootstrap's seed and resamples) and with which methods
    /// (absent in reports of layout 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics: Option<StatisticsInfo>,
    /// The intra-op threads every target's sessions were asked to run with (`--threads`; the
    /// reference runs with 1); absent in reports of layout 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_op_threads: Option<usize>,
    /// The reference's own decode of every sample.
    pub reference_samples: Vec<ReferenceSample>,
    /// Samples no figure counts: the reference gave no number to decode them by.
    #[serde(default)]
    pub unscored: Vec<UnscoredSample>,
    /// The reference's text against the labels, over the scored samples (`None` without labels).
    pub reference_scores: Option<TextScores>,
    /// `--prompt-lengths`: the prompt lengths swept (each sample cut to its first L prompt
    /// tokens for every L it has; the samples above are the cuts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_lengths: Vec<usize>,
    /// `--task score`: the reference's windows and its perplexity over them (the windows take
    /// the place of `reference_samples`, which is then empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_corpus: Option<ReferenceCorpus>,
    pub targets: Vec<GenerationTarget>,
    /// The gate, as every kind of audit forms it: per target `ran` (every sample decoded to its
    /// end) and the limits (`max_accuracy_drop`, `min_accuracy`), each held to the bound that
    /// cannot pass by luck.
    pub gate: GateReport,
    pub notes: Vec<String>,
    pub exit_code: ExitCode,
}

/// What the set's labels are to a generation audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GenerationTask {
    /// Labels are the spoken text: WER and CER of every transcript, the reference's included.
    Transcribe,
    /// Agreement with the reference's text (labels, when the set has them, scored too).
    Generate,
    /// Corpus drift: each sample is a window of text fed teacher-forced after the start tokens,
    /// and every position's next-token distribution is held to the reference's (KLD, the same
    /// top token, perplexity: llama.cpp's `--kl-divergence` figures).
    Score,
}

impl GenerationTask {
    /// Every task, in the order the help lists them.
    pub const ALL: [GenerationTask; 3] = [
        GenerationTask::Transcribe,
        GenerationTask::Generate,
        GenerationTask::Score,
    ];

    /// The task's name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            GenerationTask::Transcribe => "transcribe",
            GenerationTask::Generate => "generate",
            GenerationTask::Score => "score",
        }
    }
}

/// A sample no figure counts, and why.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnscoredSample {
    pub id: String,
    pub why: String,
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
    /// The `prefill` part's chunk length (absent: the prompt goes through the step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_length: Option<usize>,
    pub suppress_tokens: Vec<u32>,
    pub suppress_at_start: Vec<u32>,
}

/// One ONNX file of a spec (a part split into several files has one entry per file, in the
/// order they run).
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
    /// The intra-op threads its sessions ran with, as the workers state them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_op_threads: Option<usize>,
    /// Per part: how its session was made (`compiled`, `loaded` from the context cache, ...),
    /// its creation time in ms.
    pub parts: Vec<PartRun>,
    pub samples: Vec<TargetSample>,
    /// Under `--task score` only `samples` (windows scored), `unfinished`, `steps` (positions
    /// scored), `nonfinite_steps`, `top1_agreement` (the same top token), `mean_kl`,
    /// `median_sqnr_db` and the cost apply; the rest are 0 or absent, and `corpus` holds the
    /// figures.
    pub summary: TargetSummary,
    /// `--task score`: its next-token distributions against the reference's over the corpus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus: Option<CorpusFigures>,
    /// `--prompt-lengths`: its figures per prompt length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<PromptSweep>,
}

/// `--task score`: the reference's side of the corpus.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReferenceCorpus {
    /// Windows fed to the end, and the positions scored in them (a window of n tokens scores
    /// n − 1: the logits after each token but the last, against the token after it).
    pub windows: usize,
    pub positions: usize,
    /// Positions whose reference logits hold a value that is not finite: no target is scored
    /// on them.
    pub nonfinite_positions: usize,
    /// `exp` of the mean `-ln p` of the token that came, over the positions scored.
    pub perplexity: Num,
    pub rows: Vec<ReferenceWindow>,
}

/// One window as the reference read it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReferenceWindow {
    pub id: String,
    /// The window's tokens, and its text (the tokens decoded).
    pub tokens: usize,
    pub text: String,
    /// Its perplexity over its own positions.
    pub perplexity: Num,
}

/// A target's corpus drift: over every position scored (the reference's and its logits all
/// finite) of every window it fed to the end, as llama.cpp's `llama-perplexity --kl-divergence`
/// reports them, with the bounds the gate holds to its limits.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorpusFigures {
    pub windows: usize,
    pub positions: usize,
    /// Positions whose logits (this target's) hold a value that is not finite: left out of
    /// every figure, and no bound is given while there are any.
    pub nonfinite_positions: usize,
    pub kld: KldFigures,
    pub delta_p: DeltaP,
    pub same_top: SameTop,
    pub perplexity: Perplexity,
    pub bounds: CorpusBounds,
    /// Per position in the window (0: the logits after its first token): mean KLD and the
    /// same-top share over the windows.
    pub by_position: Vec<PositionCurve>,
    /// Positions where the curve's mean KLD jumps: more than three times both the position
    /// before's and the median of all positions before (a chunk boundary, the KV buffer's end).
    pub jumps: Vec<usize>,
    /// Per window, in the set's order.
    pub rows: Vec<WindowFigures>,
}

/// KL(reference ‖ target) over the positions scored, in nats.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KldFigures {
    pub mean: Num,
    /// The mean's standard error: the sample standard deviation (ddof 1) over √positions.
    pub mean_se: Num,
    /// NumPy's linear percentiles.
    pub median: Num,
    pub p90: Num,
    pub p99: Num,
    pub p999: Num,
    pub max: Num,
}

/// Δp: the target's probability of the token that came minus the reference's (a fraction).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeltaP {
    pub mean: Num,
    pub mean_se: Num,
    /// √(mean Δp²).
    pub rms: Num,
    pub p1: Num,
    pub p99: Num,
}

/// Positions whose most likely token is the reference's.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SameTop {
    pub count: usize,
    pub share: Num,
    /// The share's 95% Wilson score interval.
    pub interval: [Num; 2],
}

/// Perplexity over the positions scored: `exp` of the mean `-ln p` of the token that came.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Perplexity {
    /// The reference's over the same positions, and the target's.
    pub reference: Num,
    pub target: Num,
    /// `ln(PPL target / PPL reference)`: the mean of the per-position differences of `-ln p`,
    /// with its standard error and 95% interval (mean ± 1.96 SE over positions).
    pub ln_ratio: Num,
    pub ln_ratio_se: Num,
    pub ln_ratio_interval: [Num; 2],
}

/// The bounds the gate holds to the corpus limits: each one-sided 95%, from a bootstrap over
/// windows (the positions of one window are not independent). `nan` when the corpus cannot
/// bound the figure, `unbounded` saying why; a limit on it then fails.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorpusBounds {
    /// Upper bound of the mean KLD (`max_kld_mean`).
    pub kld_mean_upper: Num,
    /// Upper bound of the 99th percentile KLD (`max_kld_p99`): the bootstrap's, and never below
    /// the order statistic that bounds it without assumptions (none below 299 positions).
    pub kld_p99_upper: Num,
    /// Lower bound of the same-top share (`min_same_top`): the lower of the bootstrap's and
    /// the one-sided Wilson bound.
    pub same_top_lower: Num,
    /// Upper bound of PPL target / PPL reference (`max_ppl_ratio`).
    pub ppl_ratio_upper: Num,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unbounded: Option<String>,
}

/// One position of the window over the corpus.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PositionCurve {
    pub position: usize,
    /// Windows scored at this position.
    pub windows: usize,
    pub mean_kld: Num,
    pub same_top: Num,
}

/// One window's figures on a target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowFigures {
    pub id: String,
    /// Positions scored, and those whose logits were not finite.
    pub positions: usize,
    pub nonfinite_positions: usize,
    pub mean_kld: Num,
    pub same_top: Num,
    pub ln_ppl_ratio: Num,
    /// The position of the largest KLD (`None` when none was scored).
    pub worst: Option<WorstPosition>,
    /// Why the window was not fed to its end (its figures are then left out of the corpus's).
    pub error: Option<String>,
}

/// The position of a window where the target's distribution strays furthest.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorstPosition {
    pub position: usize,
    pub kld: Num,
    /// The token that came, and each side's most likely token, spelled.
    pub next_piece: String,
    pub reference_top_piece: String,
    pub target_top_piece: String,
}

/// One part's session on a target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartRun {
    pub part: String,
    /// The file, for a part split into several (each its own session and compiled context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub session_create_ms: f64,
    pub qnn_context: Option<String>,
    /// The intra-op threads the session ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_op_threads: Option<usize>,
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
    /// who_what_benchmark's FDT: the first new token (0-based) where the target's text tokens
    /// (the end token left out) differ from the reference's, the common prefix's length.
    #[serde(default)]
    pub fdt: usize,
    /// who_what_benchmark's SDT: the target's text tokens outside the matching blocks Python's
    /// difflib finds against the reference's (the tokens to correct).
    #[serde(default)]
    pub sdt: usize,
    /// Whether its text equals the reference's.
    pub same_text: bool,
    /// Whether the figures count it: this target decoded it to its end, and the reference gave a
    /// number to compare with.
    #[serde(default = "counted")]
    pub scored: bool,
    /// Teacher-forced steps whose logits (the target's or the reference's) hold a value that is
    /// not finite: their KL and SQNR are not numbers and leave the means.
    #[serde(default)]
    pub nonfinite_steps: usize,
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
    /// `--prompt-lengths`: the set's sample this one was cut from, and its prompt's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptCut>,
}

/// A sample of a prompt-length sweep: the set's sample, cut to its first `length` prompt tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptCut {
    pub sample: String,
    pub length: usize,
}

/// A target's prompt-length sweep (`--prompt-lengths`): per length, how its first new token and
/// its decode fare against the reference's, and the lengths where it departs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptSweep {
    pub rows: Vec<LengthRow>,
    /// Lengths where a prompt's first new token departs from the reference's while it agreed at
    /// every shorter length swept (a chunk boundary, the KV buffer's end), with the prompts that
    /// do.
    pub departs_at: Vec<LengthDeparture>,
}

/// A length where prompts' first new tokens depart, each having agreed at every shorter length.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LengthDeparture {
    pub length: usize,
    pub prompts: Vec<String>,
}

/// One prompt length over the samples long enough for it, those scored.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LengthRow {
    pub length: usize,
    pub samples: usize,
    /// Samples whose first new token is the reference's.
    pub first_token_same: usize,
    /// The mean KL(reference ‖ target) of the first new token's distribution, in nats (over the
    /// samples whose logits there are all finite).
    pub first_token_kl: Num,
    /// Samples whose decode departs, and the median first divergent step of those.
    pub diverged: usize,
    pub median_divergence_step: Option<f64>,
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
    /// The first layer that overflowed on the target (values ±inf or NaN, or past float16's
    /// range where it computes in float16): the cause, before any SQNR ranking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_overflow: Option<super::compare::OverflowPointer>,
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

/// A sample counts unless a report says otherwise (reports of layout 1 counted every one).
fn counted() -> bool {
    true
}

/// A target's figures over the set: every figure over its scored samples (decoded to their end,
/// with a reference to compare with).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetSummary {
    /// Samples scored.
    pub samples: usize,
    /// Samples it did not decode to their end (a part failed, crashed or timed out, or the audit
    /// stopped first): listed, and left out of every figure.
    #[serde(default)]
    pub unfinished: Vec<String>,
    /// Samples whose tokens departed from the reference's.
    pub diverged: usize,
    /// The median first divergent step over diverged samples.
    pub median_divergence_step: Option<f64>,
    /// Samples whose text equals the reference's.
    pub same_text: usize,
    /// who_what_benchmark's figures over the scored samples: the mean FDT and SDT, and the mean
    /// of each sample's SDT over its text tokens (absent under `--task score`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdt_mean: Option<Num>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdt_mean: Option<Num>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdt_norm_mean: Option<Num>,
    /// Teacher-forced steps whose top-1 equals the reference's, of all steps.
    pub top1_agreement: Num,
    pub steps: usize,
    /// Steps whose logits hold a value that is not finite; the mean KL and the median SQNR are
    /// over the others.
    #[serde(default)]
    pub nonfinite_steps: usize,
    pub mean_kl: Num,
    pub median_sqnr_db: Num,
    /// Against the labels (`None` without).
    pub scores: Option<TextScores>,
    /// The WER's change from the reference's in points (target − reference), paired by sample,
    /// with its bootstrap interval (`None` when the sample cannot bound it).
    pub wer_delta_points: Option<Num>,
    pub wer_delta_interval: Option<[Num; 2]>,
    /// The one-sided 95% upper bound of the WER change (the bootstrap's 95th percentile; `nan`
    /// when the sample cannot bound it, which fails a limit on it).
    pub wer_delta_upper: Option<Num>,
    /// Why the WER change has no interval: no sample's word edits differ from the reference's,
    /// so every resample gives the same figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wer_delta_unbounded: Option<String>,
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
