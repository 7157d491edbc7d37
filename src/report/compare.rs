//! The one in-memory report of an audit. Every renderer (terminal table, JSON) reads this and
//! nothing else; none recomputes a metric. The JSON form is documented in `docs/report-schema.md`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Num, ToolInfo};
use super::facts::TargetRole;
use super::facts::TensorSummary;
use super::gate::GateReport;
use super::run::Phase;
use super::run::RunStatus;
use crate::foundation::error::ExitCode;

/// Version of the JSON layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 2;

/// Top-level report.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Report {
    /// The layout version of this kind; a reader refuses a version it does not know.
    pub schema_version: u32,
    /// Which kind of report this is (`compare`): what a reader parses it as.
    pub kind: super::common::ReportKind,
    /// The tool that wrote it.
    pub tool: ToolInfo,
    /// The machine that made the figures: CPU, the instruction-set features that select kernels,
    /// their class (`docs/hosts.md`). Absent in reports of releases before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<super::facts::HostInfo>,
    /// The audited model.
    pub model: ModelInfo,
    /// The golden run.
    pub reference: ReferenceInfo,
    /// The inputs fed to every target.
    pub inputs: InputsInfo,
    /// Id of the target whose error is the "reference integer implementation" baseline.
    pub baseline: Option<String>,
    /// Every target, in the order asked (the baseline last).
    pub targets: Vec<TargetReport>,
    /// Target-versus-target bit agreement, one entry per pair of targets that ran and per output.
    pub agreement: Vec<AgreementEntry>,
    /// Per output: targets that agree bit-exactly with each other, grouped.
    pub bit_exact_groups: Vec<BitExactGroups>,
    /// Per output: the loosest gate every target that ran would have passed.
    pub tolerances: Vec<Tolerance>,
    /// The gate: rules and verdict.
    pub gate: GateReport,
    /// Metric definitions, printed once.
    pub metric_definitions: BTreeMap<String, String>,
    /// With `--layers`: what was tapped and matched, and what could not be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer_audit: Option<LayerAuditInfo>,
    /// With `--stream`: how every run fed its state back, step by step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamInfo>,
    /// What the user should know about this run, one sentence each.
    pub notes: Vec<String>,
    /// With `--shard i/n`: which part of the targets this report holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// For a report made by `npu-audit merge`: the shard reports it joined.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
    /// With `--timings`: where the audit's time went, up to this report's assembly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<AuditTimings>,
    /// The exit code the run ended with.
    pub exit_code: ExitCode,
}

/// Where an audit's time went (`--timings`). Wall-clock figures of one machine and one run:
/// unlike every other figure of the report, they are not reproducible.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AuditTimings {
    /// From the start of the audit to this report's assembly.
    pub wall_ms: f64,
    /// The parent process's work per stage and phase. Phases are exclusive (a phase nested in
    /// another is not counted in it), so they add up to `wall_ms`.
    pub phases: Vec<PhaseTiming>,
    /// Worker sessions per stage and target, summed over the stage's sessions. Workers run
    /// concurrently: these overlap each other and sit within the parent's `sessions` phase.
    pub workers: Vec<WorkerTiming>,
    /// The audit process's own peak resident memory in MiB (workers excluded: each is in
    /// `workers`), read as the report was assembled.
    #[serde(default)]
    pub parent_peak_rss_mb: f64,
}

/// One phase of the parent's work within one stage of the audit.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PhaseTiming {
    /// The part of the audit (`plan`, `golden and outputs`, `layers: tapped runs`...).
    pub stage: String,
    /// The kind of work (provisioning, sessions, comparing...).
    pub phase: super::facts::AuditPhase,
    /// Milliseconds spent in the phase, nested phases excluded.
    pub ms: f64,
    /// How many times the phase was entered.
    pub count: usize,
}

/// The worker sessions of one target within one stage, summed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkerTiming {
    /// The part of the audit that started these sessions.
    pub stage: String,
    /// The target id (`golden` for the reference runs).
    pub target: String,
    /// How many sessions the figures add up.
    pub sessions: usize,
    /// Loading ONNX Runtime and creating its environment.
    pub load_ms: f64,
    /// Registering a plugin EP library.
    pub register_ms: f64,
    /// Creating the sessions (graph optimisation, EP compilation).
    pub session_create_ms: f64,
    /// The `run` calls.
    pub run_ms: f64,
    /// Reading the input files and writing the output files.
    pub io_ms: f64,
    /// The rest of the workers' wall time: process spawn and exit, the job and result files.
    pub overhead_ms: f64,
    /// Spawn to exit, as the parent measured it.
    pub wall_ms: f64,
    /// The largest peak resident memory of one of these sessions' worker processes, in MiB.
    #[serde(default)]
    pub peak_rss_mb: f64,
}

/// One shard of a sharded audit.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ShardInfo {
    /// 1-based.
    pub index: usize,
    /// The number of shards.
    pub count: usize,
    /// Every target of the whole audit in order (the baseline last), so a merge restores the
    /// order of a single run.
    pub all_targets: Vec<String>,
    /// The targets this shard ran (the baseline runs in every shard).
    pub targets: Vec<String>,
    /// Where this shard saved its outputs (relative to the report when under its directory, else
    /// absolute), for agreement across shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_dir: Option<String>,
    /// The SHA-256 of every saved output file, by its path relative to `outputs_dir`: `merge`
    /// reads only files that match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub output_files: BTreeMap<String, String>,
}

/// The per-layer audit of a compare run, common to every target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LayerAuditInfo {
    /// `all`, `selected` (filters given) or `bisect`.
    pub mode: String,
    /// Observation points in the audited graph (QuantizeLinear outputs and float results no
    /// QuantizeLinear reads) and how many the selection took.
    pub points: usize,
    /// Points the selection took (and that are activations).
    pub selected: usize,
    /// Selected points paired with a reference tensor, by how (`name`, `convention`,
    /// `structure`), and the float tensors of those that were not.
    pub matched: usize,
    /// Selected points paired with the reference, by how: `name`, `convention`, `structure`.
    pub matched_by: BTreeMap<String, usize>,
    /// Float tensors of the selected points that have no counterpart in the reference.
    pub unmatched: Vec<String>,
    /// The three levels of departure from the baseline and their thresholds.
    #[serde(default)]
    pub divergence: DivergenceRules,
    /// Tapped runs the selection was split into (each its own session per target), and worker
    /// sessions the per-layer audit started in all.
    pub tap_runs: usize,
    /// Worker sessions the per-layer audit started in all.
    pub sessions: usize,
    /// Whether each layer was also run alone on golden inputs (isolated attribution), and how
    /// many levels of layers (itself, and those it reads N - 1 levels back) each run holds.
    pub isolated: bool,
    /// Levels of layers each isolated run holds (the layer and N − 1 upstream).
    pub isolate_window: usize,
    /// Wall time of the per-layer audit.
    pub seconds: f64,
    /// Layers the terminal lists per target, worst first.
    pub top: usize,
    /// What failed or matched nothing; the output-level audit is complete regardless.
    pub problems: Vec<String>,
}

/// How "a layer departs from the baseline" is measured, at each level the summary names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DivergenceRules {
    /// Beyond rounding, quantized layers: a code more than this many steps from the baseline's.
    pub tolerance_lsb: u64,
    /// Beyond rounding, float layers: the largest difference above this fraction of the
    /// baseline tensor's largest magnitude (never "any differing bit": float results of two
    /// correct implementations differ in their last bits).
    pub float_tolerance: f64,
    /// SQNR loss: the layer's SQNR against the golden run more than this many dB below the
    /// baseline's on the same layer.
    pub sqnr_loss_db: f64,
    /// SQNR above this counts as this much when losses are measured: a float layer 142 dB from
    /// the golden run (float32 rounding) is as exact as one at +inf for any quantized model.
    #[serde(default = "default_sqnr_ceiling")]
    pub sqnr_ceiling_db: f64,
}

fn default_sqnr_ceiling() -> f64 {
    DivergenceRules::default().sqnr_ceiling_db
}

impl Default for DivergenceRules {
    /// One LSB of rounding; a float16 step (2^-10) of the tensor's largest magnitude, since QNN
    /// runs float ops in float16; 3 dB, twice the baseline's noise power, with SQNR counted up
    /// to 100 dB.
    fn default() -> Self {
        DivergenceRules {
            tolerance_lsb: 1,
            float_tolerance: 1.0 / 1024.0,
            sqnr_loss_db: 3.0,
            sqnr_ceiling_db: 100.0,
        }
    }
}

/// A per-layer figure set of one target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LayerReport {
    /// Execution order of the point in the audited graph.
    pub index: usize,
    /// The op type of the node that computes it.
    pub op_type: String,
    /// The node that computes it.
    pub node: String,
    /// The tapped tensor (codes for a quantized layer).
    pub tensor: String,
    /// Its float-domain tensor and the reference's counterpart.
    pub float_tensor: String,
    /// The reference's counterpart of the float tensor, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_tensor: Option<String>,
    /// Whether the tapped tensor holds codes (an activation QuantizeLinear output).
    pub quantized: bool,
    /// Elements compared, over every sample.
    pub elements: u64,
    /// Cumulative (the whole model ran): against the golden activation.
    pub sqnr_db: Option<Num>,
    /// Cumulative: the largest absolute error against the golden activation.
    pub max_abs: Option<Num>,
    /// Lowest SQNR among the layers this one reads minus its own: dB this layer cost.
    pub sqnr_drop_db: Option<Num>,
    /// Cumulative: against the baseline target's tensor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_baseline: Option<CodeComparison>,
    /// Isolated (the layer alone on golden inputs): SQNR of its output against the golden
    /// output, i.e. what this layer introduces by itself.
    pub introduced_sqnr_db: Option<Num>,
    /// Isolated: the largest absolute error against the golden output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub introduced_max_abs: Option<Num>,
    /// Isolated: codes against the baseline's run of the same isolated layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub introduced_vs_baseline: Option<CodeComparison>,
    /// Why the layer (or part of its figures) could not be measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set when the layer overflowed on the target (cumulative run): its values turned ±inf or
    /// NaN where the golden run's are finite, or the golden values pass float16's range where
    /// the target computes the tensor in float16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<LayerOverflow>,
}

/// Why a layer is named as an overflow: a cause that outranks any SQNR ranking, since every
/// layer after it inherits values that are not numbers (or not the reference's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LayerOverflow {
    /// Elements of the target's tensor that are ±inf or NaN where the golden value is finite.
    pub nonfinite: u64,
    /// The largest magnitude of the golden tensor.
    pub reference_peak: Num,
    /// The target's largest absolute error on the tensor against the golden run.
    pub max_abs_error: Num,
    /// Whether the target computes this tensor in float16 (a float tensor on the QNN HTP), so
    /// that a golden magnitude above 65,504 may not be held.
    pub float16: bool,
}

/// The largest finite float16 value: a float16 tensor cannot hold a magnitude above it.
pub const FLOAT16_MAX: f64 = 65504.0;

/// The error, relative to the peak, above which a target did not hold values past float16's
/// range: 1/64, 32 times float16's rounding (2⁻¹¹), so that the noise a layer inherits does not
/// count (SmolLM2's layer 2 carries 83,882 on the HTP with an error of 1/970 of it), while a clip
/// to 65,504 of a peak of 70,000 (6%) or to 131,008 of 591,800 (78%) does.
pub const FLOAT16_HELD_RELATIVE: f64 = 1.0 / 64.0;

impl LayerOverflow {
    /// Whether the golden values pass float16's range on a target that computes in float16 and
    /// the target did not hold them: its error there is above [`FLOAT16_HELD_RELATIVE`] of the
    /// peak (a value past the range that the target carried, as the HTP does inside some fused
    /// ops and up to 131,008 in others, is no overflow).
    pub fn beyond_float16(&self) -> bool {
        self.float16
            && self.reference_peak.0 > FLOAT16_MAX
            && self.max_abs_error.0 > self.reference_peak.0 * FLOAT16_HELD_RELATIVE
    }
}

/// A tensor of one target against the baseline's: counts of elements off by 1, 2 and more LSB
/// (codes), and for one-LSB differences how many sat on a .5 tie of the baseline's value.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct CodeComparison {
    /// Elements that differ from the baseline's (bit for bit for floats).
    pub differing: u64,
    /// Codes one step away (a rounding difference).
    pub off_by_one: u64,
    /// Codes two steps away.
    pub off_by_two: u64,
    /// Codes more than two steps away (different arithmetic).
    pub off_by_more: u64,
    /// The largest difference in steps (0 for float tensors).
    pub max_steps: u64,
    /// `None` when the value before rounding was not available.
    pub ties: Option<u64>,
    /// The largest absolute difference from the baseline's value.
    pub max_abs: Num,
    /// Float tensors: `max_abs` relative to the largest magnitude of the baseline's tensor (the
    /// measure of "beyond rounding" for a tensor without a quantization grid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rel_error: Option<Num>,
}

/// Where a target first departs from the baseline, at three levels a user reasons in (the
/// definitions and their thresholds are in `layer_audit.divergence`), and what tapping did to its
/// session. Each is `None` when no layer qualifies (or without a baseline).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TargetLayerSummary {
    /// The first quantized layer (execution order) whose codes differ from the baseline's at
    /// all: a rounding difference, often on ties.
    #[serde(default)]
    pub first_code_difference: Option<LayerPointer>,
    /// The first layer that differs from the baseline beyond rounding: codes more than
    /// `tolerance_lsb` steps apart, or a float tensor off by more than `float_tolerance` of its
    /// largest magnitude.
    #[serde(default)]
    pub first_beyond_rounding: Option<LayerPointer>,
    /// The first layer whose SQNR against the golden run is more than `sqnr_loss_db` below the
    /// baseline's on the same layer: where the target starts to cost accuracy.
    #[serde(default)]
    pub first_sqnr_loss: Option<LayerPointer>,
    /// The same as `first_beyond_rounding` (its name in reports of npu-audit before 0.2).
    pub first_divergence: Option<LayerPointer>,
    /// The first layer (execution order) that overflowed on this target: the cause to look at
    /// before any SQNR ranking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_overflow: Option<OverflowPointer>,
    /// Layers that could not be compared with the baseline (a tensor missing on either side):
    /// a null first difference only means "none" when this is 0.
    pub layers_not_compared: usize,
    /// Placement and results of the tapped sessions against the untapped one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tap_effects: Option<TapEffects>,
    /// With `--layers bisect`: the cuts tried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bisect: Option<BisectReport>,
    /// Why some of the per-layer audit of this target failed, in one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A layer named in a summary.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LayerPointer {
    /// The layer's position in execution order.
    pub index: usize,
    /// The node that computes it.
    pub node: String,
    /// Its op type.
    pub op_type: String,
    /// The tapped tensor (codes for a quantized layer).
    pub tensor: String,
    /// Elements that differ from the baseline's.
    pub differing: u64,
    /// The largest difference, in LSB (0 for a float tensor).
    pub max_steps: u64,
    /// A float tensor's largest difference relative to the baseline tensor's largest magnitude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rel_error: Option<Num>,
    /// The layer's SQNR against the golden run, and the baseline's on the same layer (for the
    /// SQNR-loss level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqnr_db: Option<Num>,
    /// The baseline's SQNR against the golden run on the same layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_sqnr_db: Option<Num>,
    /// Whether the layer alone, on golden inputs, already departs from the baseline at the same
    /// level (it introduced the drift rather than inherited it); `None` when not run in isolation.
    pub introduced: Option<bool>,
}

/// A layer named as the first overflow of a target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OverflowPointer {
    /// The layer's position in execution order.
    pub index: usize,
    /// The node that computes it.
    pub node: String,
    /// Its op type.
    pub op_type: String,
    /// The tapped tensor.
    pub tensor: String,
    /// What overflowed.
    pub overflow: LayerOverflow,
}

/// What adding outputs changed: an extra output can stop an EP from fusing nodes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TapEffects {
    /// Partitions (assigned subgraphs) of the untapped session and the most any tapped one had.
    pub partitions_untapped: usize,
    /// The most partitions any tapped session had.
    pub partitions_tapped: usize,
    /// Nodes whose count on an EP differs between the untapped session and some tapped one
    /// (`name on EP: before -> after`, runtime-made nodes by their base name; first 20): moved
    /// to another EP, fused differently, or added for the extra outputs.
    pub nodes_changed: Vec<String>,
    /// How many nodes changed EP or fusion (all of them; `nodes_changed` lists 20).
    pub nodes_changed_count: usize,
    /// Whether every tapped run returned the model's outputs bit-identical to the untapped run
    /// (the final outputs in the report always come from the untapped run).
    pub outputs_identical: bool,
}

/// A localisation by cutting the graph instead of tapping everything.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BisectReport {
    /// Tensors every path goes through, among the selected points.
    pub cuts: usize,
    /// (tensor, departs) in the order they were tried.
    pub steps: Vec<BisectStep>,
    /// Sessions this target's bisection used (its own and the baseline's).
    pub sessions: usize,
}

/// One cut tried.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BisectStep {
    /// The tensor the model was cut at.
    pub tensor: String,
    /// Whether the target's codes there depart from the baseline's beyond rounding.
    pub departs: bool,
    /// Codes there that differ from the baseline's.
    #[serde(default)]
    pub differing: u64,
    /// The largest difference there from the baseline's codes, in LSB.
    pub max_steps: u64,
}

/// The audited model.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ModelInfo {
    /// The model file as given.
    pub path: String,
    /// The model file's SHA-256.
    pub sha256: String,
    /// The model file's size.
    pub size_bytes: u64,
    /// External data files with their SHA-256 (the model file's hash does not cover them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_data: Vec<super::facts::ExternalFile>,
    /// The ONNX IR version.
    pub ir_version: i64,
    /// The default-domain opset.
    pub opset: i64,
    /// The producer name and version the model states.
    pub producer: String,
    /// The model's inputs as declared.
    pub inputs: Vec<TensorSummary>,
    /// The model's outputs as declared.
    pub outputs: Vec<TensorSummary>,
}

/// The golden run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReferenceInfo {
    /// `model` (a float model given with --reference), `derived` (activation Q/DQ removed from the
    /// audited model), or `golden` (a stored golden run).
    pub kind: String,
    /// The reference model (or golden directory) as given.
    pub path: String,
    /// Its SHA-256 (of the encoding, for a derived reference).
    pub sha256: String,
    /// One line saying what the golden run is, repeated in every rendering.
    pub description: String,
    /// For a derived reference: the activation Q/DQ pairs replaced by clips.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_qdq_pairs: Option<usize>,
    /// The runtime of the golden run (absent for a stored golden run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeInfo>,
    /// The intra-op threads of the golden run (a stored one: as its manifest records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_op_threads: Option<usize>,
    /// The golden run's times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
}

/// The inputs fed to every target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct InputsInfo {
    #[serde(flatten)]
    pub provenance: super::facts::InputProvenance,
    /// Every input tensor of every sample, with the hash of its encoding.
    pub tensors: Vec<InputTensorInfo>,
}

/// One input tensor of one sample.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct InputTensorInfo {
    /// The sample (0-based).
    pub sample: usize,
    /// The model input it feeds.
    pub name: String,
    /// Its element type (`float32`, ...).
    pub dtype: String,
    /// Its shape as fed.
    pub shape: Vec<usize>,
    /// SHA-256 of the tensor's `.npy` encoding.
    pub sha256: String,
}

/// A runtime build as loaded.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeInfo {
    /// The Python package the build ships in.
    pub package: String,
    /// Version the loaded library reports (or the pinned version of a plugin).
    pub version: String,
    /// Where it was found: flag, environment variable, installed package, cache, fetched now.
    pub source: String,
    /// The library loaded.
    pub library: String,
    /// The library's SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// For plugin EPs: the plugin package on top of the host runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<Box<RuntimeInfo>>,
    /// For an emulated ARM64 target: what ran the sessions (the wheel, the interpreter, qemu's
    /// release, the hash of the manifest of everything fetched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulation: Option<String>,
    /// For a QNN target: how its session got its compiled QNN context. `compiled`: compiled
    /// from the model and stored in the context cache; `loaded`: loaded from the cache (an entry
    /// verified against its SHA-256 manifest), not compiled; `recompiled`: the cached entry was
    /// corrupt (or refused), removed, compiled afresh and stored again; `uncached`: compiled with
    /// the cache turned off (`--no-context-cache`, `NPU_AUDIT_CONTEXT_CACHE=0`). Outputs are
    /// bit-identical whichever it was. Absent for other targets and in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qnn_context: Option<super::run::ContextUse>,
}

impl RuntimeInfo {
    /// The same runtime named without a path of this machine: its library by its file name (the
    /// package, version and SHA-256 say which build it is), for files meant to leave the machine.
    pub fn without_paths(mut self) -> RuntimeInfo {
        self.library = std::path::Path::new(&self.library)
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        self.plugin = self.plugin.map(|p| Box::new(p.without_paths()));
        self
    }

    /// `onnxruntime 1.31.1`, or a plugin on its host: `onnxruntime-qnn 2.7.0 on onnxruntime 1.31.1`.
    pub fn text(&self) -> String {
        match (&self.plugin, &self.emulation) {
            (Some(p), _) => format!("{} {} on {} {}", p.package, p.version, self.package, self.version),
            (None, Some(_)) => format!("{} {} aarch64, emulated", self.package, self.version),
            (None, None) => format!("{} {}", self.package, self.version),
        }
    }
}

/// Times measured inside the worker, plus the worker's wall time.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Timing {
    /// Loading the ONNX Runtime library and creating its environment.
    pub load_ms: Option<f64>,
    /// Registering a plugin EP library (QNN); 0 otherwise.
    pub register_ms: Option<f64>,
    /// `null` when session creation did not complete.
    pub session_create_ms: Option<f64>,
    /// Median of the per-sample run times; `null` when no run completed.
    pub run_ms: Option<f64>,
    /// The sum of the per-sample run times.
    pub run_ms_total: Option<f64>,
    /// Spawn to exit of the worker process.
    pub wall_ms: f64,
}

/// The HTP chipset of a QNN target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChipsetInfo {
    /// The Snapdragon part number (`SM8650`).
    pub sm: String,
    /// Its marketing name (`Snapdragon 8 Gen 3`).
    pub name: String,
    /// QNN's SoC model id passed to the EP (`soc_model`).
    pub soc_model: u32,
    /// The HTP architecture version passed to the EP (`htp_arch`, e.g. 75).
    pub htp_arch: u32,
}

/// One target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TargetReport {
    /// The target id (canonical: `qnn:sm8650`, `cpu:noopt`, options after a comma).
    pub id: String,
    /// The execution provider it asks for.
    pub ep: String,
    /// `target`, or `baseline` for the reference integer implementation the audit added itself.
    pub role: TargetRole,
    /// Whether its figures depend on the host, and on which kernel class they were made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<super::facts::TargetHost>,
    /// A required target that does not end `ok` makes the audit exit with code 3.
    pub required: bool,
    /// For a QNN target: the HTP chipset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chipset: Option<ChipsetInfo>,
    /// The EP options and session entries the target runs with (the chipset's included).
    pub options: BTreeMap<String, String>,
    /// The runtime it ran on (null when unavailable).
    pub runtime: Option<RuntimeInfo>,
    /// The intra-op threads its session ran with (null when no session started). Some CPU
    /// kernels give other bits with other thread counts; `--repeat` measures whether they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_op_threads: Option<usize>,
    /// How it ended: ok, failed, crashed, timeout, unavailable.
    pub status: RunStatus,
    /// The runtime's full error when it did not end ok.
    pub error: Option<String>,
    /// How far the worker got before it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<Phase>,
    /// The worker's times.
    pub timing: Option<Timing>,
    /// Where ONNX Runtime placed the graph's nodes, when the runtime records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSummary>,
    /// Path of this target's kept runtime log (`--logs`, `--out`, `--keep-work`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The target's arithmetic fingerprint (from the cache, or measured for this audit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<FingerprintBrief>,
    /// With `--repeat N`: whether every run of a sample returned the same bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub determinism: Option<Determinism>,
    /// Per quantized output: how the target's codes differ from the baseline's, and what the
    /// fingerprints say about it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift_explanations: Vec<DriftExplanation>,
    /// Per model output, the metrics against the golden run (empty unless ok).
    pub outputs: Vec<OutputMetrics>,
    /// With `--layers`: every tapped layer in execution order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<LayerReport>,
    /// With `--layers`: where it first departs and what tapping did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer_summary: Option<TargetLayerSummary>,
    /// With `--stream`: every step's figures against the golden stream (empty unless ok).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<TargetStream>,
}

/// `compare --stream`: how the model ran as a stream, the same way on every target and in the
/// golden run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StreamInfo {
    /// Steps every run took (the samples, in order).
    pub steps: usize,
    /// Outputs fed back as inputs on the next step, as `output->input`.
    pub feedback: Vec<String>,
    /// The fed-back outputs: the state whose SQNR decides divergence.
    pub state_outputs: Vec<String>,
    /// What a step decides (`output>0.5`, or `top-1 of NAME` per output with a class axis);
    /// empty when nothing decides.
    pub decisions: Vec<String>,
    /// The SQNR (dB) below which the state counts as diverged.
    pub divergence_sqnr_db: Num,
    /// Whether every target also ran teacher-forced (the golden state fed at every step).
    pub teacher_forcing: bool,
}

/// One target's stream: running free (its own state fed back, as the app runs it) and, with
/// `--teacher-forcing`, with the golden run's state fed at every step (the error one step
/// introduces, without what the loop accumulated).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TargetStream {
    /// Its own state fed back.
    pub free: StreamRun,
    /// The golden state fed at every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teacher_forced: Option<StreamRun>,
    /// Why the teacher-forced run has no figures (it did not run to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teacher_forced_error: Option<String>,
}

/// The figures of one run of a stream, step by step (steps are 1-based in every field).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StreamRun {
    /// Per output, its series over the steps.
    pub outputs: Vec<StepSeries>,
    /// Per step, the lowest SQNR (dB) of the fed-back outputs against the golden stream's.
    pub state_sqnr_db: Vec<Num>,
    /// The median of `state_sqnr_db`.
    pub state_sqnr_median_db: Num,
    /// The first step whose `state_sqnr_db` is below the divergence SQNR; null if none is.
    pub divergence_step: Option<usize>,
    /// How fast the state's error grows: the least-squares slope, in dB per step, of
    /// `-state_sqnr_db` over the steps up to the divergence step (every step if it never
    /// diverges), finite values only; null with fewer than two.
    pub growth_db_per_step: Option<Num>,
    /// Per decision (in `StreamInfo::decisions` order), whether each step agreed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<DecisionSeries>,
}

/// One output over the steps of a stream.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepSeries {
    /// The output.
    pub name: String,
    /// Per step: SQNR against the golden stream's output at that step (dB).
    pub sqnr_db: Vec<Num>,
    /// Per step: max abs error.
    pub max_abs: Vec<Num>,
    /// Per step: cosine similarity.
    pub cosine: Vec<Num>,
    /// Steps whose output equals the golden one bit for bit.
    pub bit_identical_steps: usize,
}

/// One decision over the steps of a stream.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DecisionSeries {
    /// The decision, as `StreamInfo::decisions` names it.
    pub decision: String,
    /// Per step: whether the target decided what the golden stream decided (every element).
    pub agrees: Vec<bool>,
    /// Steps that decided otherwise.
    pub disagreements: usize,
    /// Fraction of steps that agreed.
    pub agreement: f64,
    /// The first step that decided otherwise.
    pub first_disagreement: Option<usize>,
}

/// The part of a target's fingerprint a compare report carries.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FingerprintBrief {
    /// One line: requantization rounding, float arithmetic, non-deterministic probes.
    pub summary: String,
    /// Verdict per probe (`requantize_u8: half_up`, ...).
    pub verdicts: BTreeMap<String, String>,
    /// Whether it came from the cache (keyed by target, runtime libraries and probe set).
    pub cached: bool,
}

/// Repeated runs of the same inputs on one target.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Determinism {
    /// Runs of every sample.
    pub repeats: usize,
    /// Whether every run of every sample returned the bits of its first run.
    pub bit_identical: bool,
    /// Every (sample, run, output) that differed from the sample's first run.
    pub differences: Vec<super::run::RepeatDifference>,
    /// The same model and inputs run once more with another intra-op thread count, against the
    /// target's run: which outputs depend on the thread count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_probe: Option<ThreadProbe>,
}

/// A target run with other intra-op threads, compared bit for bit with its run in the audit.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ThreadProbe {
    /// Intra-op threads of the probe run.
    pub threads: usize,
    /// Intra-op threads of the audit's run it is compared with.
    pub against_threads: Option<usize>,
    /// Whether every output of every sample has the bits of the audit's run.
    pub bit_identical: bool,
    /// Every (sample, output) that differed.
    pub differences: Vec<ThreadDifference>,
    /// Why the probe could not be compared (its run failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One output of one sample that another thread count changed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ThreadDifference {
    /// The sample (0-based).
    pub sample: usize,
    /// The output.
    pub output: String,
    /// Elements whose bits differ (every element when the shapes differ).
    pub differing: u64,
    /// Elements of the output.
    pub elements: u64,
    /// The largest absolute difference.
    pub max_abs: Num,
}

/// How a target's codes differ from the baseline's on one quantized output, and the reading of
/// it the fingerprints support.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DriftExplanation {
    /// The quantized output.
    pub output: String,
    /// The target compared with (the baseline).
    pub against: String,
    /// Elements compared, over every sample.
    pub elements: u64,
    /// The target's codes against the baseline's, counted in steps.
    pub codes: CodeDiffs,
    /// The reading, in one sentence.
    pub text: String,
}

impl TargetReport {
    /// Whether drift gates apply: it ran, and it is not the baseline the audit added on its own
    /// (the user did not ask to gate that one).
    pub fn is_gated(&self) -> bool {
        self.status == RunStatus::Ok && self.role == TargetRole::Target
    }
}

/// Where ONNX Runtime placed the graph's nodes for one target, where the graph was cut, what
/// crosses the cuts, and which nodes fell back to the CPU and why.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PlacementSummary {
    /// Where the node-to-EP assignment came from: `ort_api` (the session's recorded assignment)
    /// or `ort_log` (ONNX Runtime's verbose "Node placements" lines, for runtimes without the API).
    pub source: String,
    /// Which graph the partitions refer to: `runtime` (the graph as ONNX Runtime partitioned it,
    /// after its layout transformation, with nodes it inserted) or `model` (the model's own graph).
    pub graph: String,
    /// Nodes per execution provider.
    pub nodes_by_ep: BTreeMap<String, usize>,
    /// Nodes on the target's own execution provider.
    pub target_ep_nodes: usize,
    /// Nodes of the graph the assignment refers to.
    pub total_nodes: usize,
    /// Op types that ran on the CPU EP in a non-CPU target, with counts.
    pub cpu_op_types: BTreeMap<String, usize>,
    /// Partitions the target's EP compiled (ONNX Runtime's count when it records one).
    pub ep_partitions: usize,
    /// Connected runs of nodes on one EP, in execution order.
    pub partitions: Vec<Partition>,
    /// Tensors produced on one EP and consumed on another (each tensor once per consuming EP).
    pub crossings: Vec<Crossing>,
    /// Crossings, each tensor once per consuming EP.
    pub crossing_count: usize,
    /// Bytes crossing per inference (one sample); `null` when a tensor's size is unknown.
    pub crossing_bytes: Option<u64>,
    /// Crossings that do not touch a graph-boundary node.
    pub mid_graph_crossing_count: usize,
    /// Bytes per inference of the mid-graph crossings; null when a size is unknown.
    pub mid_graph_crossing_bytes: Option<u64>,
    /// Every node of a non-CPU target that the CPU EP ran, classified.
    pub fallback: Vec<FallbackNode>,
    /// Fallback nodes of kind `compute`: what `--max-fallback-nodes` and `--fail-on-fallback` count.
    pub compute_fallback_nodes: usize,
    /// Nodes the runtime added (layout transposes, duplicated or re-created Q/DQ), per EP.
    pub inserted_by_ep: BTreeMap<String, usize>,
    /// Model nodes the assignment does not name (fused or replaced by the runtime); their EP was
    /// inferred from their neighbours.
    pub inferred_nodes: usize,
}

/// A connected run of nodes on one execution provider.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Partition {
    /// The execution provider.
    pub ep: String,
    /// Nodes in the run.
    pub nodes: usize,
    /// First and last node in execution order.
    pub first_node: String,
    /// The last node, in execution order.
    pub last_node: String,
    /// Positions in the graph's execution order (0-based, inclusive).
    pub first_index: usize,
    /// The last node's position in execution order.
    pub last_index: usize,
    /// Op types with counts.
    pub op_types: BTreeMap<String, usize>,
}

/// One tensor crossing from one execution provider to another.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Crossing {
    /// The tensor that crosses.
    pub tensor: String,
    /// The execution provider that produces it.
    pub from_ep: String,
    /// The execution provider that reads it.
    pub to_ep: String,
    /// The node that produces it.
    pub producer: String,
    /// The nodes on `to_ep` that read it.
    pub consumers: Vec<String>,
    /// ONNX element type name (`uint8`, `float`, ...).
    pub dtype: Option<String>,
    /// Its elements per inference, when known.
    pub elements: Option<u64>,
    /// Its bytes per inference, when known.
    pub bytes: Option<u64>,
    /// `boundary` when it touches a graph-input QuantizeLinear or graph-output DequantizeLinear
    /// (unavoidable), `mid_graph` otherwise (a cost of fallback).
    pub kind: String,
}

/// A node of a non-CPU target that the CPU EP ran.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FallbackNode {
    /// The node.
    pub name: String,
    /// Its op type.
    pub op_type: String,
    /// `boundary` (graph-input Q, graph-output DQ), `inserted` (added by the runtime),
    /// `shape` (computes on shapes), `constant` (reads only constants), `quantization` (a Q/DQ
    /// inside the graph), or `compute` (a real op the EP did not take).
    pub kind: String,
    /// `head` (before any node of the target's EP), `middle` (between two), `tail` (after the
    /// last), or `detached`.
    pub position: String,
    /// Why the EP rejected it, from the runtime's log, when it says.
    pub reason: Option<String>,
}

/// Metrics of one output of one target against the golden run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OutputMetrics {
    /// The output.
    pub name: String,
    /// The target's element type for it.
    pub dtype: String,
    /// The target's shape for it.
    pub shape: Vec<usize>,
    /// Elements compared, over every sample.
    pub elements: u64,
    /// Elements bit-identical to the golden run's; null when the element types differ.
    pub bit_identical: Option<u64>,
    /// max |o − r| (docs/metrics.md).
    pub max_abs: Num,
    /// Σ|o − r| / n.
    pub mean_abs: Num,
    /// sqrt(Σ(o − r)² / n).
    pub rmse: Num,
    /// The largest distance in units in the last place (same float type only).
    pub max_ulp: Option<u64>,
    /// Cosine similarity with the golden output.
    pub cosine: Num,
    /// 10·log10(Σr² / Σ(o − r)²); +inf for an exact match.
    pub sqnr_db: Num,
    /// Fraction of rows whose top-1 class matches the golden run's, along the class axis.
    pub top1_agreement: Option<f64>,
    /// Fraction of rows where the golden run's class is among the target's 5 largest.
    pub top5_agreement: Option<f64>,
    /// NaN elements in the target's output.
    pub nan_count: u64,
    /// Infinite elements in the target's output.
    pub inf_count: u64,
    /// Positions where exactly one side is not finite, or the two differ in non-finite kind.
    pub nonfinite_mismatch: u64,
    /// The class axis top-k was computed along.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class_axis: Option<usize>,
    /// This target's error next to the baseline's (the three-run view).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineDelta>,
    /// Why the output could not be compared (e.g. a shape mismatch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether `error` is a shape mismatch with the golden run.
    #[serde(skip)]
    pub shape_mismatch: bool,
}

/// The target's error against fp32 next to the baseline's error on the same quantized model.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BaselineDelta {
    /// The baseline target (`cpu:noopt`).
    pub target: String,
    /// The baseline's SQNR against the golden run on this output.
    pub sqnr_db: Num,
    /// The baseline's max absolute error on this output.
    pub max_abs: Num,
    /// `baseline.sqnr_db - target.sqnr_db`: dB lost beyond the reference integer implementation.
    pub excess_db: Num,
}

/// Bit agreement between two targets on one output.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgreementEntry {
    /// One target of the pair.
    pub a: String,
    /// The other target of the pair.
    pub b: String,
    /// The output compared.
    pub output: String,
    /// Elements compared, over every sample (0 when the outputs cannot be compared).
    pub elements: u64,
    /// `None` when the two outputs have different element types or shapes.
    pub differing_elements: Option<u64>,
    /// max |a − b| over positions where both are finite.
    pub max_abs: Num,
    /// For a quantized output: differences counted in quantization steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_differences: Option<CodeDiffs>,
}

/// Targets that agree bit-exactly with each other on one output.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BitExactGroups {
    /// The output.
    pub output: String,
    /// Targets grouped by bit-identical outputs; every target that ran is in exactly one group.
    pub groups: Vec<Vec<String>>,
}

/// The loosest thresholds every target that ran would have passed on one output; NaN figures
/// when some target's figure could not be measured (then no threshold passes them all).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Tolerance {
    /// The output.
    pub output: String,
    /// Lowest SQNR, rounded down to 0.01 dB.
    pub min_sqnr_db: Num,
    /// Highest max-abs error, rounded up to 3 significant digits.
    pub max_abs: Num,
    /// Lowest cosine similarity, rounded down to 6 decimals.
    pub min_cosine: Num,
    /// Lowest top-1 agreement, when the output has a class axis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_top1_agreement: Option<f64>,
    /// Whether every target matched the golden run bit for bit.
    pub all_bit_exact: bool,
    /// The targets these bounds cover.
    pub targets: Vec<String>,
}

impl Tolerance {
    /// Whether every figure was measured on every target: otherwise no threshold passes them
    /// all, and the figures are NaN.
    pub fn is_measured(&self) -> bool {
        !(self.min_sqnr_db.0.is_nan() || self.max_abs.0.is_nan() || self.min_cosine.0.is_nan())
    }
}

/// How many elements of two quantized outputs differ by one step (a rounding difference), and
/// by more (different arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CodeDiffs {
    /// The output's quantization step: 1 for integer outputs, the scale of the
    /// DequantizeLinear that produces a float output.
    pub lsb: f64,
    /// Elements one quantization step apart (a rounding difference).
    pub off_by_one: u64,
    /// Elements two steps apart.
    pub off_by_two: u64,
    /// Elements more than two steps apart (or one side not finite).
    pub off_by_more: u64,
    /// The largest difference in steps.
    pub max_steps: u64,
}
