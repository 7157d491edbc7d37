//! The JSON `pipeline` writes (`docs/pipeline.schema.json`, prose in `docs/streams.md`): per
//! target each stage's figures against the golden chain and the stage the final drift comes
//! from. A contract other tools parse: the schema is derived from these types. The chain's audit
//! is in `crate::commands::pipeline`.

use serde::{Deserialize, Serialize};

use super::common::Num;
use crate::foundation::error::ExitCode;

/// The layout version of this report; a reader refuses another (reports of releases before
/// it was recorded have none, and are read as version 0).
pub const PIPELINE_SCHEMA_VERSION: u32 = 1;

/// What `pipeline` found.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PipelineReport {
    /// The layout version of this kind; a reader refuses a version it does not know.
    pub schema_version: u32,
    /// Which kind of report this is (`pipeline`): what a reader parses it as.
    pub kind: super::common::ReportKind,
    /// The tool that wrote it.
    pub tool: super::common::ToolInfo,
    /// The machine that made the figures: CPU, the instruction-set features that select kernels,
    /// their class (`docs/hosts.md`). Absent in reports of releases before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<super::facts::HostInfo>,
    /// The pipeline file.
    pub file: String,
    pub stages: Vec<StageInfo>,
    /// Samples fed to the first stage.
    pub samples: usize,
    pub targets: Vec<PipelineTarget>,
    /// The limit on the final outputs' SQNR, when one was set.
    pub min_sqnr_db: Option<f64>,
    /// 0, or 1 when a target's final output is below `min_sqnr_db` (or did not run).
    pub exit_code: ExitCode,
}

/// One stage as it ran.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageInfo {
    pub name: String,
    pub model: String,
    /// The reference as `compare` described it.
    pub reference: String,
    /// The golden run of this stage on the golden chain: its runtime, threads and timing.
    pub golden: crate::report::compare::ReferenceInfo,
    /// `input <- STAGE.OUTPUT`.
    pub feeds: Vec<String>,
}

/// One target through the chain.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PipelineTarget {
    pub id: String,
    /// The runtime every stage ran on (null when unavailable).
    pub runtime: Option<crate::report::compare::RuntimeInfo>,
    /// The EP options and session entries every stage ran with.
    pub options: std::collections::BTreeMap<String, String>,
    /// The intra-op threads of its sessions.
    pub intra_op_threads: Option<usize>,
    /// The stages it ran, in order (fewer than all when one failed).
    pub stages: Vec<StageFigures>,
    /// The stage that did not run, and the runtime's words.
    pub failed: Option<String>,
    /// The worst SQNR of the last stage's outputs in the chain (NaN when it did not get there).
    pub final_sqnr_db: Num,
    /// The stage the final drift comes from (see `attribution`), when the chain ran.
    pub origin: Option<String>,
    /// Why: the comparison at each stage walked back from the last.
    pub attribution: Vec<String>,
}

/// One stage's outputs on one target.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageFigures {
    pub stage: String,
    pub outputs: Vec<StageOutput>,
}

/// One output of one stage on one target, against the golden chain (pooled over samples).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageOutput {
    pub name: String,
    /// The stage alone on the target, fed the golden chain's inputs: the drift it introduces.
    pub introduced_sqnr_db: Num,
    /// The stage's reference fed the target's chained inputs: the upstream drift carried
    /// through an exact stage (null for the first stage).
    pub propagated_sqnr_db: Option<Num>,
    /// The stage on the target fed its own chained inputs: what the app gets.
    pub chained_sqnr_db: Num,
    pub chained_max_abs: Num,
}
