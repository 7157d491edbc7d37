//! What the reports state about where and how figures were made: the host and what a target's
//! figures owe to it, the model's tensors and external data, where the inputs came from, why a
//! target is in the audit and the phases `--timings` splits the audit's own work into. The layers
//! below have their own types for these facts (`crate::foundation::host`, `crate::data::model`, `crate::data::inputs`,
//! `crate::data::target`, `crate::foundation::timings`); they are converted where a command builds its report
//! (`crate::into_report`), so the reports depend on serde and schemars alone.

use serde::{Deserialize, Serialize};

/// The machine that made the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostInfo {
    /// The CPU's model name as the operating system states it.
    pub cpu: String,
    /// The instruction-set features that select kernels (avx2, avx512f, avx512_vnni, ...).
    pub isa: Vec<String>,
    /// The class of kernels these features select ([`isa_class`]): two hosts of one class run
    /// the same int8 kernels; hosts of two classes may print different figures for the
    /// host-sensitive targets (`docs/hosts.md`).
    #[serde(default)]
    pub isa_class: String,
    /// The operating system (`linux`).
    pub os: String,
    /// The CPU architecture (`x86_64`, `aarch64`).
    pub arch: String,
}

/// Whether a target's figures depend on the host that computes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Dependence {
    /// Measured to differ between hosts of two ISA classes (`docs/hosts.md`).
    Measured,
    /// The runtime picks kernels by the host and offers no cap; no difference is measured on the
    /// fixtures, but the mechanism can make one.
    Possible,
    /// The figures do not depend on the host (a simulator of fixed-point hardware, an emulated
    /// CPU model).
    Independent,
}

/// What a target's figures owe to the host: whether they depend on it, on which kernel class they
/// were made (the host's, or the cap the target asked for), and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TargetHost {
    /// Whether the figures depend on the host.
    pub dependence: Dependence,
    /// The kernel class the figures were made on: the host's, or lower when the target caps it.
    pub isa_class: String,
    /// The cap the target asked for (`isa=avx2`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isa_cap: Option<String>,
    /// What the dependence comes from, and what the measurements say (`docs/hosts.md`).
    pub why: String,
}

/// Serialisable summary of a tensor for reports.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TensorSummary {
    /// The tensor.
    pub name: String,
    /// Its element type.
    pub dtype: String,
    /// Declared dimensions: a number when fixed, the symbol (or `"?"`) when dynamic; `null` when
    /// the model declares no shape.
    pub shape: Option<Vec<serde_json::Value>>,
}

/// One external data file of a model, with its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExternalFile {
    /// Relative to the model's directory, as the model names it.
    pub file: String,
    /// The file's SHA-256.
    pub sha256: String,
}

/// Where the inputs came from, for reports.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InputProvenance {
    /// `files`, `generated`, `mixed` or `golden`.
    pub source: String,
    /// Samples fed to every target.
    pub samples: usize,
    /// Generator per generated input, e.g. `image=uniform:-1,1`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generators: Vec<String>,
    /// The generator's seed, when an input was generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The `--inputs`/`--input` files, when inputs came from files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// Why a target is in the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetRole {
    /// Asked for (or chosen by default).
    Target,
    /// `cpu:noopt`, added by the audit as the reference integer implementation.
    Baseline,
}

/// The parent phases the audit's own work is split into. Names are stable: they are the report's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "AuditPhase")]
pub enum AuditPhase {
    /// Resolving and fetching ONNX Runtime builds and plugins.
    Provision,
    /// Loading and checking the models, inputs and golden run.
    Prepare,
    /// Building rewritten models in memory (tapped, prefix and isolation models).
    #[serde(rename = "rewrite_models")]
    Rewrite,
    /// Encoding rewritten models and writing them to disk.
    WriteModels,
    /// Waiting for worker sessions (their own split is in the workers' table).
    Sessions,
    /// Reading tensors back from the files workers wrote.
    ReadTensors,
    /// Pairing the audited model's tensors with the reference's.
    Matching,
    /// Comparing tensors: metrics, accumulators, agreement.
    Compare,
    /// Writing the saved outputs, logs and findings.
    Persist,
    /// Rendering the report in its formats and writing it.
    Render,
    /// Everything else the parent did in this stage.
    Other,
}

impl TargetHost {
    /// Why figures of `id` made here and figures made as `other` describes may not be joined
    /// (two kinds of kernels for a target that depends on the host), or `None` when they may.
    pub fn conflict(&self, id: &str, other: &TargetHost) -> Option<String> {
        let depends = self.dependence != Dependence::Independent || other.dependence != Dependence::Independent;
        (depends && self.isa_class != other.isa_class).then(|| {
            format!(
                "{id} was measured on {} and on {} kernels, and its figures depend on the host: {}",
                other.isa_class, self.isa_class, self.why
            )
        })
    }
}

impl AuditPhase {
    /// The name the report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditPhase::Provision => "provision",
            AuditPhase::Prepare => "prepare",
            AuditPhase::Rewrite => "rewrite_models",
            AuditPhase::WriteModels => "write_models",
            AuditPhase::Sessions => "sessions",
            AuditPhase::ReadTensors => "read_tensors",
            AuditPhase::Matching => "matching",
            AuditPhase::Compare => "compare",
            AuditPhase::Persist => "persist",
            AuditPhase::Render => "render",
            AuditPhase::Other => "other",
        }
    }
}
