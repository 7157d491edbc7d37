//! What a device report said and what was read from it, as the triage report states it: the
//! device's own description, the chipset it identifies, the report's format, what its logs say
//! and which file held each output. The parser of device reports (`crate::data::device`) has its own
//! types for these; triage converts them when it builds its report, so the parser can change
//! without changing the triage report's schema unnoticed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a device states about itself (`docs/device-reports.md`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_model: Option<String>,
    /// The SoC as the device states it (`ro.soc.model`, e.g. `SM8650`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soc_model: Option<String>,
    /// `ro.board.platform` (`pineapple`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_platform: Option<String>,
    /// A marketing name or AI Hub chipset attribute, when that is all there is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chipset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onnxruntime_version: Option<String>,
    /// The execution provider the app asked for (`QNNExecutionProvider`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ep: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ep_options: BTreeMap<String, String>,
    /// The QNN plugin or SDK release on the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qnn_release: Option<String>,
    /// SHA-256 of the model file the device ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_sha256: Option<String>,
    /// Keys of `device.json` outside this schema, as the device wrote them (an app's own
    /// `app_build` or `locale`): kept and listed in the report, never read. A value longer than
    /// 256 characters as JSON is kept as a string saying so.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown_keys: BTreeMap<String, serde_json::Value>,
}

/// How sure the chipset of a report is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdentityStatus {
    /// One chipset the audit can simulate.
    Identified,
    /// A known chipset without a simulation target.
    NotSimulated,
    /// A spelling shared by several chipsets, nothing else to decide.
    Ambiguous,
    /// The keys name different chipsets.
    Contradictory,
    /// No key names a chipset this tool knows.
    Unknown,
}

/// The chipset a report comes from, as far as it can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Identity {
    pub status: IdentityStatus,
    /// The part number (`sm8650`), when identified.
    pub chipset: Option<String>,
    /// What was read and what it means.
    pub sentence: String,
}

/// Which format a report came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportFormat {
    /// The tool's own directory.
    Directory,
    /// The tool's own `.zip`.
    Zip,
    /// A `qnn-net-run`/`snpe-net-run` output directory.
    QnnNetRun,
    /// Qualcomm AI Hub outputs saved as `.npz`.
    AiHub,
}

/// What the logs of one report say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogFindings {
    /// Lines read, over every log file.
    pub lines_read: u64,
    /// QNN error codes, each once, in the order first seen.
    pub qnn_errors: Vec<QnnError>,
    /// The QNN backend could not be set up (`QNN SetupBackend failed ...`, `Unable to load
    /// backend ...`): the QNN EP took no node and ONNX Runtime ran the model on the CPU EP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_failure: Option<String>,
    pub fallback: Fallback,
    /// `Node(s) placed on [EP]. Number of nodes: N` of the last session in the log (verbose).
    /// A QNN partition is one fused node here, so QNN's count is its number of partitions.
    pub placements: Vec<Placement>,
    /// Execution providers the log names (`QNNExecutionProvider`, `CPUExecutionProvider`, ...).
    pub execution_providers: Vec<String>,
    /// The QNN backend ORT loaded (`HTP (HTP_QTI_AISW)`), from `Found valid interface`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_backend: Option<String>,
    /// The QNN EP's `htp_arch` and `soc_model` options as it read them (`User specified ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub htp_arch: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soc_model: Option<u32>,
    /// The QNN core API version of the backend library (`2.40.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_api_version: Option<String>,
    /// The QNN SDK build of the backend (`v2.51.0.260929181845`, `Backend build version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_sdk_build: Option<String>,
    /// The `onnxruntime-qnn` plugin release the log names (an app's line or a library path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qnn_release: Option<String>,
    /// The ONNX Runtime version the log names (`ORT Build Info: git-branch=rel-X.Y.Z`, an app's
    /// `onnxruntime version: X.Y.Z`, `libonnxruntime.so.X.Y.Z`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ort_version: Option<String>,
    /// The lines that show this, as `file:line: text` (one line each, capped).
    pub evidence: Vec<String>,
    /// What the logs say that `device.json` contradicts.
    pub contradictions: Vec<String>,
}

/// One QNN error code seen in the logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QnnError {
    pub code: u32,
    /// The QNN API's name for it (`QNN_COMMON_ERROR_MEM_ALLOC`).
    pub name: String,
    /// What failed and what it usually means.
    pub meaning: String,
    /// Lines that carry it.
    pub count: u64,
    /// The first line that carries it (`file:line: text`).
    pub line: String,
}

/// How much of the graph the QNN EP took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fallback {
    /// QNN partitions (`Number of partitions supported by QNN EP`, the last one logged, else QNN's
    /// placement count). More than one: the graph is cut, CPU EP runs between the partitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes_on_qnn: Option<u64>,
    /// From the CPU EP's placement line, else the graph's nodes less QNN's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes_on_cpu: Option<u64>,
    /// Node units the QNN EP refused, each (op type, node) once.
    pub unsupported_nodes: Vec<UnsupportedNode>,
    /// Refusals logged, repeats included.
    pub unsupported_count: u64,
    /// `session.disable_cpu_ep_fallback` refused the session (`fallback to CPU EP has been
    /// explicitly disabled`).
    pub fallback_disabled: bool,
}

/// A node (unit) the QNN EP refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UnsupportedNode {
    pub op_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Nodes one execution provider got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Placement {
    pub ep: String,
    pub nodes: u64,
}

/// How an output's file name was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Spelling {
    /// Every character other than letters, digits and `_` written as `_`, `_` before a leading
    /// digit (Qualcomm's converters).
    Sanitized,
    /// Runs of such characters written as one `_`.
    Collapsed,
    /// Only `/` written as `_` (`qnn-net-run`).
    SlashAsUnderscore,
    /// The output's name as it is.
    AsNamed,
    /// Each `/` a subdirectory (`snpe-net-run`).
    Subdirectories,
}

/// Which file of `Result_0/` holds an output, and how its name was spelled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputFile {
    pub output: String,
    /// The file, relative to `Result_N/` (`/`-separated).
    pub file: String,
    pub spelling: Spelling,
}
