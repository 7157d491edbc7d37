//! What a fingerprint reports (serde types of the JSON `fingerprint` object, documented in
//! docs/report-schema.md), and the one-line summaries other reports quote.

use serde::{Deserialize, Serialize};

use super::rounding::Rounding;

/// A candidate's score on one probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateScore {
    pub candidate: String,
    /// Points where the candidate predicts exactly what the target returned.
    pub matching: u64,
}

/// One probe point shown as evidence: the ideal value, what each candidate predicts, what the
/// target returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Which output and element.
    pub output: usize,
    pub index: usize,
    /// The probe's input at that point, in words (`x = -2.5 · 2^-4`, `codes 131, 127`).
    pub input: String,
    /// For codes: x / scale + zero point before rounding; for floats: the exact result.
    pub ideal: f64,
    pub predicted: Vec<(String, f64)>,
    pub observed: f64,
}

/// The verdict on one probe for one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub probe: String,
    /// `rounding`, `saturation`, `accuracy`, `accumulation`, `precision`.
    pub kind: String,
    pub op: String,
    pub dtype: String,
    /// The classification: a rounding rule (`half_even`, `half_away`, `half_up`, `floor`,
    /// `trunc`), `saturate`/`wrap`, `exact`/`faithful`/`approximate`, an arithmetic (`fp32`,
    /// `fp16`, `fp16_ftz`, `fp16_result`, `fp16_sequential`), or
    /// `non_deterministic`, `cpu_fallback`, `refused`, `other`.
    pub verdict: String,
    /// A short cell for tables (`half-even 384/384`).
    pub summary: String,
    /// Points (elements) the probe checks.
    pub points: u64,
    /// Points where the candidates disagree with each other (the ones that decide).
    pub discriminating: u64,
    /// Points where the target returned what the verdict predicts.
    pub agreeing: u64,
    pub candidates: Vec<CandidateScore>,
    /// Largest distance, in codes, between the target and the correctly rounded value.
    pub max_lsb: Option<u64>,
    /// Points whose code differs from the correctly rounded (half-even) one.
    pub off_by_one: Option<u64>,
    pub off_by_more: Option<u64>,
    /// Rounding probes: values this close to a tie (in LSB) were rounded as if on the tie, so the
    /// target's pre-rounding value carries about this much precision.
    pub tie_window: Option<f64>,
    /// When every code the target returned is a multiple of a power of two > 1 the ideal codes
    /// are not: that step (the low bits the target does not produce).
    pub code_step: Option<u64>,
    /// Repeated runs with identical input (1 = not checked for determinism).
    pub repeats: usize,
    /// Elements that differed between repeated runs, summed over the runs.
    pub repeat_differences: u64,
    /// Nodes of the probe the target's EP took, of all nodes placed.
    pub placement: Option<String>,
    pub evidence: Vec<Evidence>,
    /// For controls: the verdict a working harness must give.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// The runtime's error when the probe could not run.
    pub error: Option<String>,
}

/// Every probe's verdict for one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetFingerprint {
    pub target: String,
    /// `ok`, or why no probe ran (`unavailable`: the runtime is missing).
    pub status: String,
    pub error: Option<String>,
    pub ort_version: Option<String>,
    /// Runtime identity the cache entry is keyed on.
    pub runtime: Option<String>,
    /// Whether this fingerprint came from the cache instead of running now.
    pub cached: bool,
    pub probes: Vec<ProbeResult>,
}

/// The `fingerprint` command's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FingerprintReport {
    pub schema_version: u32,
    pub tool_version: String,
    /// The machine that made the figures (`docs/hosts.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::foundation::host::HostInfo>,
    pub probe_set_version: u32,
    pub repeat: usize,
    pub targets: Vec<TargetFingerprint>,
}

/// Schema version of the fingerprint report.
pub const FINGERPRINT_SCHEMA_VERSION: u32 = 1;

impl ProbeResult {
    /// The short text of one table cell.
    pub fn cell(&self) -> String {
        let p = self;
        let label = |name: &str| {
            Rounding::ALL
                .iter()
                .find(|r| r.name() == name)
                .map(|r| r.label().to_string())
                .unwrap_or_else(|| name.replace('_', "-"))
        };
        match p.verdict.as_str() {
            "faithful" => format!("±1 LSB {}/{}", p.off_by_one.unwrap_or(0), p.points),
            "approximate" => format!(
                "≤{} LSB {}/{}",
                p.max_lsb.unwrap_or(0),
                p.off_by_one.unwrap_or(0) + p.off_by_more.unwrap_or(0),
                p.points
            ),
            "cpu_fallback" => "CPU fallback".into(),
            "non_deterministic" => format!("non-det. ({})", p.repeat_differences),
            v if v.contains('|') => v.split('|').map(label).collect::<Vec<_>>().join("|"),
            v => match p.tie_window {
                Some(w) => format!("{} ±{w:.3}", label(v)),
                None => label(v),
            },
        }
    }
}

impl TargetFingerprint {
    /// The verdict of one probe, if it ran.
    pub fn verdict(&self, probe: &str) -> Option<&ProbeResult> {
        self.probes.iter().find(|p| p.probe == probe)
    }

    /// The short summary compare shows in a target's row: the requantization rule (the rounding
    /// every QDQ op ends with), saturation, the float arithmetic, and any non-determinism.
    pub fn row_summary(&self) -> String {
        if self.status != "ok" {
            return format!("fingerprint {}", self.status);
        }
        let word = |id: &str| {
            self.verdict(id)
                .map(|p| p.verdict.replace('_', "-"))
                .unwrap_or_else(|| "?".into())
        };
        let mut parts = vec![
            format!("requant {}", word("requantize_u8")),
            format!("conv {}", word("conv_u8_i8w")),
            format!("float {}", word("float_mul")),
        ];
        let nondet = self.probes.iter().filter(|p| p.verdict == "non_deterministic").count();
        if nondet > 0 {
            parts.push(format!("{nondet} probe(s) non-deterministic"));
        }
        parts.join(", ")
    }

    /// The rounding rule of requantization, when the probe classified it.
    pub fn requant_rounding(&self) -> Option<&str> {
        self.verdict("requantize_u8").map(|p| p.verdict.as_str())
    }
}
