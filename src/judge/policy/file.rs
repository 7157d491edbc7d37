//! The layout of `npu-audit.toml` as serde reads it. Every value keeps its span, so a check
//! after parsing can still point at the line it came from; unknown keys are refused by serde.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// Layout version; only 1 exists.
    pub version: Option<Spanned<i64>>,
    /// Targets `compare` runs when no `--target` is given (`targets = []` is refused, not read as
    /// "the default targets").
    pub targets: Option<Spanned<Vec<Spanned<String>>>>,
    /// Target patterns whose failure to run does not fail the gate.
    #[serde(default)]
    pub allow_failure: Vec<Spanned<String>>,
    /// `absolute`, `baseline` or `both`.
    pub mode: Option<Spanned<String>>,
    /// Named sets of targets a `[target.NAME]` section can refer to.
    #[serde(default)]
    pub groups: BTreeMap<Spanned<String>, Vec<Spanned<String>>>,
    /// Limits of every target and output.
    pub defaults: Option<TargetSection>,
    /// Limits of the targets a key (id, glob or group) selects.
    #[serde(default)]
    pub target: BTreeMap<Spanned<String>, TargetSection>,
    pub baseline: Option<BaselineSection>,
    pub runtime: Option<RuntimeSection>,
}

/// `[runtime]`: the releases to audit per runtime family, and rules between two releases of one
/// target.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSection {
    pub cpu: Option<Vec<Spanned<String>>>,
    pub qnn: Option<Vec<Spanned<String>>>,
    pub openvino: Option<Vec<Spanned<String>>>,
    pub directml: Option<Vec<Spanned<String>>>,
    pub gpu: Option<Vec<Spanned<String>>>,
    /// dB an output's SQNR may move between two releases of one target.
    pub max_sqnr_change_db: Option<Spanned<f64>>,
    /// Two releases of one target must agree bit for bit.
    pub require_bit_exact: Option<Spanned<bool>>,
}

/// `[baseline]`: the previous report regressions are measured against.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineSection {
    /// Path of a JSON report, relative to the policy file.
    pub report: Spanned<String>,
}

/// Limits of a set of targets (`[defaults]`, `[target.X]`), with per-output overrides.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSection {
    pub min_sqnr_db: Option<Spanned<f64>>,
    pub max_abs: Option<Spanned<f64>>,
    pub min_top1_agreement: Option<Spanned<f64>>,
    pub require_bit_exact: Option<Spanned<bool>>,
    pub max_sqnr_regression_db: Option<Spanned<f64>>,
    pub max_abs_regression: Option<Spanned<f64>>,
    pub max_top1_regression: Option<Spanned<f64>>,
    pub max_fallback_nodes: Option<Spanned<u64>>,
    pub max_partitions: Option<Spanned<u64>>,
    pub fail_on_fallback: Option<Spanned<bool>>,
    pub max_fallback_regression: Option<Spanned<u64>>,
    pub max_partitions_regression: Option<Spanned<u64>>,
    pub max_layer_sqnr_loss_db: Option<Spanned<f64>>,
    /// Stream audits: fraction of steps whose decision agrees with the golden stream's.
    pub min_decision_agreement: Option<Spanned<f64>>,
    /// Stream audits: the state may not diverge at this step or before.
    pub max_divergence_step: Option<Spanned<u64>>,
    /// Eval: the lowest accuracy (a fraction) on the set.
    pub min_accuracy: Option<Spanned<f64>>,
    /// Eval: the most points lost against the reference (non-inferiority).
    pub max_accuracy_drop: Option<Spanned<f64>>,
    /// Corpus drift (`--task score`): the most mean KLD, in nats.
    pub max_kld_mean: Option<Spanned<f64>>,
    /// Corpus drift: the most 99th percentile KLD, in nats.
    pub max_kld_p99: Option<Spanned<f64>>,
    /// Corpus drift: the least share of positions with the reference's top token.
    pub min_same_top: Option<Spanned<f64>>,
    /// Corpus drift: the most PPL target / PPL reference.
    pub max_ppl_ratio: Option<Spanned<f64>>,
    /// The selected targets may fail to run without failing the gate.
    pub allow_failure: Option<Spanned<bool>>,
    #[serde(default)]
    pub outputs: BTreeMap<Spanned<String>, OutputSection>,
}

/// Limits of one output (`[defaults.outputs.NAME]`, `[target.X.outputs.NAME]`). Placement
/// limits are a whole target's and are refused here.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    pub min_sqnr_db: Option<Spanned<f64>>,
    pub max_abs: Option<Spanned<f64>>,
    pub min_top1_agreement: Option<Spanned<f64>>,
    pub require_bit_exact: Option<Spanned<bool>>,
    pub max_sqnr_regression_db: Option<Spanned<f64>>,
    pub max_abs_regression: Option<Spanned<f64>>,
    pub max_top1_regression: Option<Spanned<f64>>,
}
