//! The JSON `matrix` writes (`docs/matrix.schema.json`, prose in `docs/matrix.md`): every cell
//! (a variant on a target), the recommendation per target, the dispatch table an app loads, and
//! the mixed-precision searches. A contract other tools parse: the schema is derived from these
//! types. The matrix itself is in `crate::commands::matrix`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::Num;
use super::run::RunStatus;
use crate::foundation::error::ExitCode;

/// The matrix output's layout version.
pub const MATRIX_SCHEMA_VERSION: u32 = 2;

/// A variant as measured: its file, size and precision.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VariantInfo {
    pub name: String,
    pub path: String,
    pub sha256: String,
    /// The model and its external data, in bytes.
    pub size_bytes: u64,
    /// `int8`, `a16w8`, `fp16` (a float model with `enable_htp_fp16_precision=1`) or `fp32`.
    pub precision: String,
    /// The default cost rank of that precision (0 cheapest).
    pub cost_rank: u8,
    /// The options as given (`[EP:]KEY=VALUE`).
    pub options: Vec<String>,
}

/// What `matrix` found.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Matrix {
    /// The layout version of this kind; a reader refuses a version it does not know.
    pub schema_version: u32,
    /// Which kind of report this is (`matrix`): what a reader parses it as.
    pub kind: super::common::ReportKind,
    /// The tool that wrote it.
    pub tool: super::common::ToolInfo,
    /// The machine that made the figures: CPU, the instruction-set features that select kernels,
    /// their class (`docs/hosts.md`). Absent in reports of releases before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<super::facts::HostInfo>,
    /// The golden directory or reference model every cell is measured against.
    pub reference: String,
    /// The limits of the policy, one `rule limit` each.
    pub policy: Vec<String>,
    /// The variants, cheapest first.
    pub cost_order: Vec<String>,
    pub variants: Vec<VariantInfo>,
    /// The targets as asked (columns).
    pub targets: Vec<String>,
    /// Every (variant, target), variants in cost order.
    pub cells: Vec<Cell>,
    pub recommendations: Vec<Recommendation>,
    pub dispatch: Dispatch,
    /// Mixed-precision searches for variants that fail the policy somewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedies: Vec<RemedySearch>,
    /// `matrix --task`: the set, the task and the reference's figures; the cells then carry
    /// their task figures and the policy is the accuracy limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<MatrixTask>,
    /// ONNX Runtime's intra-op threads in every session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intra_op_threads: Option<usize>,
    pub notes: Vec<String>,
    /// 0, or 1 when a policy sets limits and some target has no variant that meets them on the
    /// target itself (its recommendation runs on the CPU instead, or there is none).
    pub exit_code: ExitCode,
}

/// A variant on a target.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cell {
    pub variant: String,
    /// The target as asked (without the variant's options).
    pub target: String,
    /// How the cell's run ended.
    pub status: RunStatus,
    /// The runtime's own text when the cell did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether every rule of the policy holds for this cell (a cell that did not run never does).
    pub meets_policy: bool,
    /// The rules that failed, as `rule output: measured vs limit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_rules: Vec<String>,
    /// The output with the lowest SQNR, and that SQNR against the golden run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqnr_db: Option<Num>,
    /// The largest absolute error over every output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_abs: Option<Num>,
    /// The lowest top-1 agreement over the outputs with a class axis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top1_agreement: Option<f64>,
    /// Compute nodes a non-CPU target left to the CPU EP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_fallback_nodes: Option<usize>,
    /// Partitions the target's EP compiled the graph into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<usize>,
    /// Bytes per run crossing between the EP and the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crossing_bytes: Option<u64>,
    /// The nodes left to the CPU EP, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_nodes: Vec<String>,
    /// The variant's model and external data, in bytes.
    pub model_bytes: u64,
    /// The runtime that ran the cell (`onnxruntime-qnn 2.7.0 on onnxruntime 1.31.1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// The options the target ran with (the variant's included).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, String>,
    /// `matrix --task`: the cell's figures on the labelled set (its `sqnr_db` is then the median
    /// per-sample output SQNR).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<CellTask>,
}

/// A cell's task figures on the set (`docs/eval.md` defines each).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CellTask {
    /// Samples the cell's run answered.
    pub samples: usize,
    /// The primary metric (accuracy, or the character error rate for `ctc`) as a fraction, with
    /// its 95% interval.
    pub primary: super::eval::Estimate,
    /// Points of the primary metric lost against the reference (paired; positive is worse), with
    /// its 95% interval.
    pub drop: super::eval::Estimate,
    /// The drop's one-sided 95% upper bound: what `max_accuracy_drop` judges.
    pub drop_upper: Num,
    /// Samples the reference got wrong and this cell right, and the reverse.
    pub fixed: u64,
    pub broken: u64,
    /// McNemar's exact two-sided p-value on `fixed` and `broken`.
    pub mcnemar_p: Num,
}

/// `matrix --task`: what the cells measured.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MatrixTask {
    pub dataset: super::eval::DatasetInfo,
    pub task: super::eval::TaskInfo,
    pub statistics: super::eval::StatisticsInfo,
    /// The reference's own figures on the set.
    pub reference_metrics: super::eval::Metrics,
}

/// The decision for one target.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Recommendation {
    pub target: String,
    /// The variant to ship, or `null` when no variant meets the policy anywhere this target's
    /// device can run it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Where it runs: the target itself, or `cpu` when only the CPU meets the policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_on: Option<String>,
    /// The chosen cell's SQNR (worst output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqnr_db: Option<Num>,
    /// When none meets the policy: the cell on this target with the highest SQNR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closest: Option<Closest>,
    /// One sentence: why this choice.
    pub reason: String,
    /// A cheaper fix a search proved on this target: the variant with some layers changed, to
    /// regenerate with the search's quantizer overrides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
}

impl Recommendation {
    /// Whether a variant meets the policy on the target itself (not only on the CPU, or nowhere).
    pub fn runs_on_itself(&self) -> bool {
        self.variant.is_some() && self.run_on.as_deref() == Some(self.target.as_str())
    }
}

/// The best cell that still fails the policy, and what it fails.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Closest {
    pub variant: String,
    pub sqnr_db: Option<Num>,
    pub failed_rules: Vec<String>,
}

/// One row of the dispatch table an app loads: which file to open with which execution
/// provider and options on a device of this target.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DispatchEntry {
    pub target: String,
    /// The device's chipset: its `sm` name and SoC model (as QNN's `soc_model` option and
    /// Android's `ro.soc.model` name them), for QNN targets (also when the choice is its CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chipset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soc_model: Option<u32>,
    pub variant: String,
    pub model: String,
    pub model_sha256: String,
    /// ONNX Runtime's name of the execution provider to register.
    pub execution_provider: String,
    /// The provider options the audit ran the cell with (the variant's included).
    pub ep_options: BTreeMap<String, String>,
    pub sqnr_db: Option<Num>,
}

/// The dispatch table: one entry per target with a recommendation.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dispatch {
    pub schema_version: u32,
    /// The policy the choices meet, as the limits it sets.
    pub policy: Vec<String>,
    pub entries: Vec<DispatchEntry>,
    /// Targets for which no variant meets the policy.
    pub unresolved: Vec<String>,
}

/// The two rewrites a search can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RemedyKind {
    /// The layer's activation quantized to 16 bits over its 8-bit range.
    Widen16,
    /// The layer's activation left unquantized (its Q/DQ pair dropped).
    Float,
}

/// A layer ranked by the drift it introduces on the failing targets.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankedLayer {
    /// The float activation (the QuantizeLinear's input).
    pub tensor: String,
    pub node: String,
    pub op_type: String,
    /// Its SQNR run alone on golden inputs, lowest over the failing targets.
    pub introduced_sqnr_db: Num,
}

/// Where a changed layer ran on one target, and what the graph's placement became.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepPlacement {
    /// `npu` (the target's EP), `cpu` (left to the CPU EP), or `-` when the candidate did not run.
    pub layer_runs_on: String,
    pub compute_fallback_nodes: Option<usize>,
    pub partitions: Option<usize>,
    pub crossing_bytes: Option<u64>,
}

/// One candidate: the previous kept candidate with one more layer changed.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemedyStep {
    pub layer: RankedLayer,
    /// What the rewrite did (the 16-bit scale and zero point, or the nodes removed).
    pub rewrite: String,
    /// Whether the layer stays in the candidate (it raised the failing targets' SQNR).
    pub kept: bool,
    /// Per target: the worst output's SQNR of this candidate, and the change from the last kept
    /// candidate (the dB this layer buys).
    pub sqnr_db: BTreeMap<String, Num>,
    pub gained_db: BTreeMap<String, Num>,
    pub meets_policy: BTreeMap<String, bool>,
    pub placement: BTreeMap<String, StepPlacement>,
    /// Targets that met the policy with the last kept candidate and do not with this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regressions: Vec<String>,
    /// Targets where the last kept candidate ran and this one did not (its cells say why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub did_not_run: Vec<String>,
    /// The candidate's file under `--write-candidates`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate_file: Option<String>,
}

/// One search on one variant.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemedySearch {
    pub variant: String,
    pub kind: RemedyKind,
    /// The targets where the variant failed the policy.
    pub failing_targets: Vec<String>,
    /// The candidates' layers in the order tried (most introduced drift first).
    pub ranking: Vec<RankedLayer>,
    pub steps: Vec<RemedyStep>,
    /// The layers of the final candidate.
    pub changed: Vec<String>,
    /// Whether the final candidate meets the policy on every failing target.
    pub fixed: bool,
    /// One sentence on the outcome.
    pub outcome: String,
    /// The final candidate's cells on every target (empty when no layer was kept).
    pub cells: Vec<Cell>,
    /// For ONNX Runtime's `quantize_static`: `extra_options.TensorQuantOverrides` (16-bit
    /// activations) or `nodes_to_exclude` (layers left in float), to regenerate the model from
    /// the user's calibration data.
    pub quantizer_overrides: serde_json::Value,
    /// Why the search could not run, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
