//! `npu-audit triage`: what users' devices sent in, reproduced here. Each report's outputs are
//! compared with the same inputs run on the fp32 golden run, on the CPU EP (`cpu`, `cpu:noopt`)
//! and on the HTP simulation of every chipset (and of the QNN release the device names, when the
//! catalogue has it); the comparison decides one verdict per report, and over a fleet the rule
//! that separates a quantization problem (drift on every chipset, as large on the CPU EP), an
//! NPU/runtime problem (drift concentrated on some chipsets) and a device problem (outliers
//! within one chipset).
//!
//! Simulation work grows with the distinct input sets, not with reports: reports are grouped by
//! their inputs and every group is one audit of every candidate.

pub mod fleet;
pub mod reproduce;
pub mod verdict;

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::audit::CompareOptions;
use crate::device::{DeviceInfo, DeviceReport, Identity, ReportDefaults, ReportFormat};
use crate::report::model::Num;

pub use fleet::Fleet;
pub use verdict::{CandidateDistance, OutputFigures, Verdict, VerdictKind};

/// Version of the triage JSON layout (`docs/device-reports.md`).
pub const TRIAGE_SCHEMA_VERSION: u32 = 1;

/// What `triage` is asked.
#[derive(Debug, Clone)]
pub struct TriageOptions {
    /// Report paths; a directory that is not one report is a fleet of them.
    pub reports: Vec<PathBuf>,
    /// Model, golden run or reference, default inputs, execution (targets are set here).
    pub audit: CompareOptions,
    pub defaults: ReportDefaults,
    /// Targets every report is compared with besides its own chipset.
    pub candidates: Vec<String>,
    pub thresholds: Thresholds,
}

/// The numbers that turn measurements into verdicts, recorded in the output.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            rounding_steps: 2,
            excess_db: 3.0,
            outlier_db: 6.0,
            min_sqnr_db: None,
        }
    }
}

/// One candidate run of one input group.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CandidateRun {
    pub target: String,
    /// The input group it ran on (`golden` or an inputs hash).
    pub inputs: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its SQNR against the golden run per output.
    pub sqnr_db: Vec<Num>,
}

/// One report triaged.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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
    pub logs: Option<crate::device::LogFindings>,
    pub verdict: Verdict,
    /// The earlier report with the same contents, when this one is a copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
}

/// What `triage` found.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Triage {
    pub schema_version: u32,
    pub tool_version: String,
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
    pub notes: Vec<String>,
}

/// Every report path: files and report directories as given, fleet directories expanded.
fn report_paths(opts: &TriageOptions) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in &opts.reports {
        if p.is_dir() && !crate::device::is_single_report(p) {
            out.extend(crate::device::fleet_entries(p)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Runs the triage.
pub fn run(opts: &TriageOptions) -> Result<Triage> {
    let model = crate::model::load_model(&opts.audit.model)?;
    let sig = crate::model::Signature::of(&model)?;
    let paths = report_paths(opts)?;
    let parsed: Vec<(PathBuf, Result<DeviceReport, String>)> = paths
        .into_iter()
        .map(|p| {
            let r = crate::device::read_report(&p, &sig, &opts.defaults).map_err(|e| format!("{e:#}"));
            (p, r)
        })
        .collect();
    let graph = model.proto.graph.as_ref();
    let steps = graph.map_or_else(
        || vec![None; sig.outputs.len()],
        |g| crate::model::constant::output_steps(g, &sig.outputs),
    );
    let groups = reproduce::run_groups(opts, &parsed)?;
    let mut reports = verdict::entries(&parsed, &groups, &steps, &opts.thresholds);
    verdict::mark_duplicates(&mut reports);
    let fleet = (reports.len() > 1).then(|| fleet::analyse(&reports, &opts.thresholds));
    Ok(Triage {
        schema_version: TRIAGE_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        model: opts.audit.model.display().to_string(),
        model_sha256: crate::hash::sha256_file(&opts.audit.model)?,
        reference: opts
            .audit
            .golden
            .as_ref()
            .or(opts.audit.reference.as_ref())
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        intra_op_threads: opts
            .audit
            .exec
            .threads
            .unwrap_or(crate::exec::executor::DEFAULT_INTRA_OP_THREADS),
        thresholds: opts.thresholds.clone(),
        candidate_runs: groups.iter().flat_map(|g| g.runs.clone()).collect(),
        reports,
        fleet,
        notes: groups.iter().flat_map(|g| g.notes.clone()).collect(),
    })
}
