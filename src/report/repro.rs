//! The JSON `repro` writes (`docs/repro.schema.json`, prose in `docs/repro.md`): the smallest
//! window of layers whose isolated run departs on the target and not on the comparison, how it
//! was found, the figures it shows, and the standalone bundle that reproduces it. A contract other
//! tools parse: the schema is derived from these types. The search itself is in `crate::commands::repro`.

use serde::{Deserialize, Serialize};

use super::common::Num;
use super::compare::RuntimeInfo;
use super::facts::HostInfo;
use crate::foundation::error::ExitCode;

/// The repro output's layout version.
pub const REPRO_SCHEMA_VERSION: u32 = 2;

/// What `repro` found and wrote.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReproReport {
    /// The layout version of this kind; a reader refuses a version it does not know.
    pub schema_version: u32,
    /// Which kind of report this is (`repro`): what a reader parses it as.
    pub kind: super::common::ReportKind,
    /// The tool that wrote it.
    pub tool: super::common::ToolInfo,
    /// The audited model and its SHA-256.
    pub model: String,
    pub model_sha256: String,
    /// The float reference whose activations feed every window.
    pub reference: String,
    /// The target whose departure is reproduced.
    pub target: TargetSide,
    /// What it is compared with: another target, or `golden` (the reference's activations
    /// quantized as the model quantizes them).
    pub against: TargetSide,
    /// What departing means in this run.
    pub criterion: Criterion,
    /// `reproduced`, `not_reproduced` (a window departs but the bundle alone does not),
    /// `no_departure`, or `target_did_not_run`.
    pub status: ReproStatus,
    /// Where the search started and why there.
    pub start: Option<StartPoint>,
    /// Windows run (each on the target and the comparison) before the answer.
    pub candidates_tried: usize,
    /// Sessions the search created.
    pub sessions: usize,
    /// The minimal departing window, when one was found.
    pub window: Option<WindowReport>,
    /// The windows one layer smaller at either end, which do not depart: why the window is
    /// minimal.
    pub minimality: Vec<CandidateReport>,
    /// With no departure: the window that came closest.
    pub closest: Option<CandidateReport>,
    /// The standalone bundle, when one was written.
    pub bundle: Option<BundleReport>,
    /// The machine the figures were made on.
    pub host: HostInfo,
    pub notes: Vec<String>,
    pub exit_code: ExitCode,
}

/// One side of the comparison.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TargetSide {
    /// The target id (`qnn:sm8650`), or `golden`.
    pub id: String,
    /// The runtime it ran on (none for `golden`).
    pub runtime: Option<RuntimeInfo>,
    /// The execution provider's options as passed (paths of this machine left out).
    pub ep_options: Vec<(String, String)>,
    /// For QNN chipsets: the part number, `soc_model` and `htp_arch` passed.
    pub chipset: Option<ChipsetInfo>,
}

/// A QNN chipset as the EP is told about it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChipsetInfo {
    pub sm: String,
    pub marketing: String,
    pub soc_model: u32,
    pub htp_arch: u32,
}

/// What makes a window "depart".
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Criterion {
    /// A quantized output departs when a code is at least this many quantization steps from the
    /// comparison's (2: beyond rounding).
    pub min_steps: u64,
    /// Also a departure: the target's SQNR against the golden activation at or below this
    /// while the comparison's is above it.
    pub max_sqnr_db: Option<f64>,
    /// A float output departs when its largest difference exceeds this fraction of the
    /// comparison's largest magnitude.
    pub float_tolerance: f64,
    /// The criterion in one sentence.
    pub text: String,
}

/// How a repro search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReproStatus {
    /// A minimal window departs and its bundle, run alone, departs the same way.
    Reproduced,
    /// A window departs inside the model, but its bundle alone does not: nothing was written.
    NotReproduced,
    /// No window departs.
    NoDeparture,
    /// The target or the comparison cannot run on this machine.
    TargetDidNotRun,
}

/// A layer of the audited model: its position in execution order, node and op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LayerRef {
    /// Position among the model's layers in execution order (0 = first).
    pub position: usize,
    pub node: String,
    pub op_type: String,
    /// The tensor it produces (codes for a quantized layer).
    pub tensor: String,
}

/// Where the search started.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StartPoint {
    pub layer: LayerRef,
    /// `layer_flag` (`--layer`), `first_isolated_departure` (the first layer that departs run
    /// alone), `first_cumulative_departure` (the first layer whose output departs in the whole
    /// model) or `first_failure` (the first layer the target cannot run alone).
    pub reason: String,
}

/// The figures of one output of one window, against the comparison and the golden run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputFigures {
    /// The tensor (its name in the audited model, and in the bundle).
    pub tensor: String,
    pub quantized: bool,
    pub elements: u64,
    /// Elements whose value differs from the comparison's.
    pub differing: u64,
    /// The largest difference from the comparison in quantization steps (quantized outputs).
    pub max_steps: Option<u64>,
    /// The largest absolute difference from the comparison, in real values.
    pub max_abs: Num,
    /// The target's SQNR against the golden activation (dB).
    pub target_sqnr_db: Option<Num>,
    /// The comparison's SQNR against the golden activation (dB).
    pub against_sqnr_db: Option<Num>,
}

/// One window tried.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CandidateReport {
    pub first: LayerRef,
    pub last: LayerRef,
    pub layers: usize,
    pub departs: bool,
    /// Why the window could not be judged, or the target's error when it cannot run it.
    pub error: Option<String>,
    /// Whether the target fails on the window while the comparison runs it.
    pub target_fails: bool,
    /// Per output, over the samples (the worst sample's figures).
    pub outputs: Vec<OutputFigures>,
}

/// The minimal departing window.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WindowReport {
    pub first: LayerRef,
    pub last: LayerRef,
    /// Its layers in execution order.
    pub layers: Vec<LayerRef>,
    /// ONNX nodes it holds (layers with their DequantizeLinear/QuantizeLinear nodes and the
    /// constant-only nodes they read).
    pub nodes: usize,
    /// The tensors it reads from the rest of the model (fed from the golden run).
    pub inputs: Vec<String>,
    /// Whether the target fails on it while the comparison runs it (a compile failure).
    pub target_fails: bool,
    pub error: Option<String>,
    /// Per output: figures on the sample the bundle carries.
    pub outputs: Vec<OutputFigures>,
    /// The sample the bundle carries (the one with the largest departure).
    pub sample: usize,
}

/// The bundle written.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BundleReport {
    /// Where it was written (a directory or a `.zip`).
    pub path: String,
    /// Whether the bundle's model, run alone on both sides, departs as the window did.
    pub reproduces: bool,
    /// Its figures as the bundle alone gives them (what its `run.py` prints).
    pub outputs: Vec<OutputFigures>,
    /// The bundle's files with their sizes and SHA-256.
    pub files: Vec<BundleFile>,
    /// Bytes of the bundle's model and of the audited model (with external data).
    pub model_bytes: u64,
    pub source_model_bytes: u64,
    /// `--scrub-weights`: what replacing the weights did.
    pub scrubbed: Option<ScrubReport>,
    /// Where the target ran the bundle's nodes, as ONNX Runtime recorded it (a window the NPU
    /// hands back to the CPU EP is not the NPU's departure).
    pub target_placement: Vec<EpNodes>,
}

/// Nodes one execution provider ran, in execution order.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EpNodes {
    pub ep: String,
    /// Node names as ONNX Runtime knows them (layout Transposes it inserted included).
    pub nodes: Vec<String>,
}

/// One file of the bundle.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BundleFile {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

/// What `--scrub-weights` did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubReport {
    pub seed: u64,
    /// Weight tensors replaced (the rest, quantization parameters and shapes, are kept).
    pub replaced: Vec<String>,
    /// Whether the departure still reproduces with them: the bundle carries the scrubbed
    /// weights only when it does.
    pub reproduces: bool,
    /// Its figures; no SQNR: the golden activations are those of the real weights.
    pub outputs: Vec<OutputFigures>,
    /// Why it was not tried, when it was not.
    pub note: Option<String>,
}

impl OutputFigures {
    /// The figures as one sentence: what the terminal, the Markdown, the bundle's README and its
    /// `run.py` print for an output (the same digits, so they can be compared as text).
    pub fn sentence(&self) -> String {
        let steps = self.max_steps.map(|s| format!(", max {s} steps")).unwrap_or_default();
        let db = |v: Option<Num>| v.map_or("n/a".to_string(), |v| format!("{:.4}", v.0));
        format!(
            "{}: {} of {} differ{steps}, max abs {}, target {} dB, comparison {} dB against the golden run",
            self.tensor,
            self.differing,
            self.elements,
            general6(self.max_abs.0),
            db(self.target_sqnr_db),
            db(self.against_sqnr_db)
        )
    }
}

/// A number as Python's `format(x, ".6g")` writes it: six significant digits, trailing zeros
/// dropped, scientific notation below 1e-4 and from 1e6 (what `run.py` prints, so the two can
/// be compared as text).
pub fn general6(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if x == 0.0 {
        return "0".into();
    }
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{x:.*}", (5 - exp).max(0) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_pythons_g_format_writes_them() {
        // Expected strings from Python 3: format(x, ".6g").
        for (x, want) in [
            (0.0213, "0.0213"),
            (0.1234567, "0.123457"),
            (123456.7, "123457"),
            (1234567.0, "1.23457e+06"),
            (0.00001234, "1.234e-05"),
            (0.0001, "0.0001"),
            (1.0, "1"),
            (0.03026, "0.03026"),
            (99999.95, "99999.9"),
        ] {
            assert_eq!(general6(x), want, "{x}");
        }
    }
}
