//! The JSON `triage` writes (`docs/triage.schema.json`, prose in `docs/device-reports.md`): one
//! entry per device report with its verdict and figures, the local runs it was compared with, the
//! fleet's groups and conclusion. A contract other tools parse: the schema is derived from these
//! types. The triage itself is in `crate::commands::triage`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::Num;
use super::compare::CodeDiffs;
use super::device::{DeviceInfo, Identity, ReportFormat};
use super::run::RunStatus;

/// Version of the triage JSON layout (`docs/device-reports.md`).
pub const TRIAGE_SCHEMA_VERSION: u32 = 2;

/// The numbers that turn measurements into verdicts, recorded in the output.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Thresholds {
    /// A device within this many quantization steps of its chipset's simulation everywhere
    /// differs from it only in rounding.
    pub rounding_steps: u64,
    /// A chipset whose median SQNR is more than this below the CPU EP's (`cpu:noopt`) on the
    /// same inputs drifts beyond quantization.
    pub excess_db: f64,
    /// A report more than this below its chipset's median SQNR is an outlier.
    pub outlier_db: f64,
    /// Drift that leaves every report at or above this SQNR is no problem (`None`: any drift
    /// beyond the CPU EP is reported).
    pub min_sqnr_db: Option<f64>,
}

/// One candidate run of one input group.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CandidateRun {
    pub target: String,
    /// The input group it ran on (`golden` or an inputs hash).
    pub inputs: String,
    /// How its run ended.
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its SQNR against the golden run per output.
    pub sqnr_db: Vec<Num>,
}

/// One report triaged.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReportEntry {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<ReportFormat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// `golden` (the golden run's inputs) or the SHA-256 of the report's inputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<String>,
    pub samples: usize,
    /// Against the golden run, per output.
    pub metrics: Vec<OutputFigures>,
    /// The worst output's SQNR against the golden run.
    pub sqnr_db: Option<Num>,
    /// The CPU EP's (`cpu:noopt`) worst SQNR on the same inputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_sqnr_db: Option<Num>,
    /// Against every candidate that ran on these inputs.
    pub candidates: Vec<CandidateDistance>,
    /// Problems of the outputs themselves (NaN, constant, all zero).
    pub garbage: Vec<String>,
    /// Lines of the report's logs that show where the model ran (`file:line: text`).
    pub log_evidence: Vec<String>,
    /// What the report's logs say (QNN errors, fallback, versions, contradictions with
    /// `device.json`); absent when it sent no logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<super::device::LogFindings>,
    pub verdict: Verdict,
    /// For a `qnn-net-run`/`snpe-net-run` directory: the file each output was read from and how
    /// its name was spelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<super::device::OutputFile>,
    /// The earlier report with the same contents, when this one is a copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
}

/// What `triage` found.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Triage {
    /// The layout version of this kind; a reader refuses a version it does not know.
    pub schema_version: u32,
    /// Which kind of report this is (`triage`): what a reader parses it as.
    pub kind: super::common::ReportKind,
    /// The tool that wrote it.
    pub tool: super::common::ToolInfo,
    /// The machine that made the figures: CPU, the instruction-set features that select kernels,
    /// their class (`docs/hosts.md`). Absent in reports of releases before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<super::facts::HostInfo>,
    pub model: String,
    pub model_sha256: String,
    /// The golden directory or reference model the reports are measured against.
    pub reference: String,
    pub intra_op_threads: usize,
    pub thresholds: Thresholds,
    pub candidate_runs: Vec<CandidateRun>,
    pub reports: Vec<ReportEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Fleet>,
    /// What the store gave and kept, when triage used one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreUse>,
    pub notes: Vec<String>,
}

/// How much of a triage came from the store: a rerun over a grown fleet triages only the new
/// reports and runs only the targets no earlier triage ran on the same inputs.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoreUse {
    pub path: String,
    /// Reports whose entry was read back (same contents, same context).
    pub reports_from_store: usize,
    /// Reports triaged now.
    pub reports_triaged: usize,
    /// Local runs (one target on one input set) read back.
    pub runs_from_store: usize,
    /// Local runs made now.
    pub runs_made: usize,
}

/// The stable keyword of a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Bit for bit what the HTP simulation of its chipset gives: auditable on a laptop.
    Reproduced,
    /// Within the rounding tolerance of its chipset's simulation.
    Rounding,
    /// Identical to a CPU EP run: the NPU did not run the model on that device.
    CpuFallback,
    /// Identical to another chipset's simulation.
    OtherChipset,
    /// NaN, infinite, constant or all-zero outputs that nothing here reproduces.
    Garbage,
    /// The report names no chipset this tool can simulate, and nothing reproduces it.
    Unidentified,
    /// Its own chipset's simulation does not run this model here (the HTP compiler refuses it,
    /// or it crashes): the one run that could reproduce the report is missing, so nothing can be
    /// concluded about the device.
    OwnChipsetFailed,
    /// Nothing here explains it: device-, driver- or firmware-specific.
    Unexplained,
    /// The report could not be read or does not fit the model.
    Malformed,
    /// The local reproduction did not run.
    NotReproduced,
}

/// A verdict: the keyword and a sentence for people.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    pub kind: VerdictKind,
    pub sentence: String,
}

/// A report's output against the golden run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputFigures {
    pub output: String,
    pub elements: u64,
    pub sqnr_db: Num,
    pub cosine: Num,
    pub max_abs: Num,
    pub rmse: Num,
    pub nan_count: u64,
    pub inf_count: u64,
}

/// A report against one candidate run, over every sample and output.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CandidateDistance {
    pub target: String,
    pub elements: u64,
    /// Elements whose bits differ (`None`: the types or shapes differ).
    pub differing: Option<u64>,
    pub max_abs: Num,
    /// Differences in quantization steps, when every output has a step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<CodeDiffs>,
}

/// Figures of one group of reports.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupFigures {
    pub key: String,
    pub reports: usize,
    pub median_sqnr_db: Option<Num>,
    pub min_sqnr_db: Option<Num>,
    /// Median of (CPU EP SQNR − report SQNR) on the same inputs.
    pub median_excess_db: Option<Num>,
    /// Reports per verdict keyword.
    pub verdicts: BTreeMap<String, usize>,
}

/// What the fleet says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FleetKind {
    /// Drift on every chipset, as large on the CPU EP: fix the quantized model.
    Quantization,
    /// Drift concentrated on some chipsets: NPU/runtime.
    Npu,
    /// Every chipset at or above the SQNR floor.
    Healthy,
    /// Fewer than two measured reports.
    Undecided,
}

/// The fleet's groups and conclusion.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fleet {
    pub measured_reports: usize,
    pub by_chipset: Vec<GroupFigures>,
    pub by_device_model: Vec<GroupFigures>,
    pub by_app_version: Vec<GroupFigures>,
    pub by_runtime: Vec<GroupFigures>,
    pub kind: FleetKind,
    pub sentence: String,
    /// Chipsets whose median drifts beyond the CPU EP by more than `excess_db`.
    pub concentrated_on: Vec<String>,
    /// Reports more than `outlier_db` below their chipset's median (device-specific).
    pub outliers: Vec<String>,
}
