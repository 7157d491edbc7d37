//! The gate's contract, shared by every kind of report: the rules a gate evaluates, each rule's
//! result with what it measured against which limit, and the verdict. Every kind emits these
//! (compare, eval, generation); `judge::gate` forms them and maps the verdict to an exit code.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::Num;

/// The overall result of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// No threshold was set.
    None,
}

impl Verdict {
    /// The verdict of a gate that judged something: `fail` when it failed, else `pass`.
    pub fn judged(failed: bool) -> Verdict {
        if failed {
            Verdict::Fail
        } else {
            Verdict::Pass
        }
    }
}

/// Gate rules and the verdict.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GateReport {
    /// `pass`, `fail`, or `none` when no threshold was set.
    pub verdict: Verdict,
    /// Every rule, in the order evaluated.
    pub rules: Vec<RuleResult>,
    /// The policy file the limits came from, and the previous report of baseline mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyInfo>,
}

/// Where a gate's limits came from.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PolicyInfo {
    /// The policy file (`npu-audit.toml`), `null` when the limits came from flags only.
    pub file: Option<String>,
    /// The policy file's SHA-256.
    pub sha256: Option<String>,
    /// `absolute` (limits), `baseline` (only regressions against a previous report) or `both`.
    pub mode: String,
    /// The previous report baseline mode compares with, and its model's SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_report: Option<String>,
    /// The SHA-256 of the previous report's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_model_sha256: Option<String>,
    /// Targets whose failure does not fail the gate (patterns, from flags and the policy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_to_fail: Vec<String>,
    /// `[runtime]` rules between two releases of one target (kept here so that `merge` can
    /// evaluate them on the merged report).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub release_limits: Vec<ReleaseLimit>,
}

/// A rule between two releases of one target, as the policy sets it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReleaseLimit {
    /// `release_sqnr_change_db` or `release_bit_exact`.
    pub rule: Rule,
    /// The limit (dB; 0 elements for bit exactness).
    pub limit: Num,
    /// Where it was set (`npu-audit.toml:12`).
    pub origin: String,
}

/// The rules a gate evaluates, as the report names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// An output's SQNR against the golden run is at least the limit (dB).
    MinSqnrDb,
    /// An output's largest absolute error is at most the limit.
    MaxAbs,
    /// The fraction of rows whose top-1 class agrees with the golden run's.
    MinTop1Agreement,
    /// Elements that differ from the golden run's bits (limit 0).
    BitExact,
    /// Compute nodes a non-CPU target leaves to the CPU EP.
    MaxFallbackNodes,
    /// Any compute node on the CPU EP fails.
    FailOnFallback,
    /// Partitions the target's EP compiles the graph into.
    MaxPartitions,
    /// A target ran to the end (1) or not (0): on every sample, for the kinds that run a set.
    /// A required target fails it; one allowed to fail passes it, ungated.
    Ran,
    /// The largest per-layer SQNR loss against the baseline on the same layer (dB).
    MaxLayerSqnrLossDb,
    /// A stream's decisions agree with the golden stream's on at least this fraction of steps.
    MinDecisionAgreement,
    /// A stream's state diverges no earlier than this step.
    MaxDivergenceStep,
    /// Baseline mode: dB of SQNR lost since the previous report.
    SqnrRegressionDb,
    /// Baseline mode: growth of the largest absolute error.
    MaxAbsRegression,
    /// Baseline mode: top-1 agreement lost.
    Top1Regression,
    /// Baseline mode: more compute nodes on the CPU EP.
    FallbackRegression,
    /// Baseline mode: more partitions.
    PartitionsRegression,
    /// Eval and generation: a target's accuracy on the set (a fraction), judged on its
    /// one-sided 95% lower bound.
    MinAccuracy,
    /// Eval and generation: the points lost against the reference, judged on the one-sided 95%
    /// upper bound of the loss.
    MaxAccuracyDrop,
    /// Corpus drift (`--task score`): the mean KL divergence from the reference's next-token
    /// distributions, in nats, judged on its one-sided 95% upper bound.
    MaxKldMean,
    /// Corpus drift: the 99th percentile of the per-position KL divergence, in nats.
    MaxKldP99,
    /// Corpus drift: the share of positions whose most likely token is the reference's, judged
    /// on its one-sided 95% lower bound.
    MinSameTop,
    /// Corpus drift: the target's perplexity over the reference's on the same text.
    MaxPplRatio,
    /// Between two releases of one target: SQNR change (dB).
    ReleaseSqnrChangeDb,
    /// Between two releases of one target: elements that differ (limit 0).
    ReleaseBitExact,
}

impl Rule {
    /// The name the report, the policy file and the renderings use.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::MinSqnrDb => "min_sqnr_db",
            Rule::MaxAbs => "max_abs",
            Rule::MinTop1Agreement => "min_top1_agreement",
            Rule::BitExact => "bit_exact",
            Rule::MaxFallbackNodes => "max_fallback_nodes",
            Rule::FailOnFallback => "fail_on_fallback",
            Rule::MaxPartitions => "max_partitions",
            Rule::Ran => "ran",
            Rule::MaxLayerSqnrLossDb => "max_layer_sqnr_loss_db",
            Rule::MinDecisionAgreement => "min_decision_agreement",
            Rule::MaxDivergenceStep => "max_divergence_step",
            Rule::SqnrRegressionDb => "sqnr_regression_db",
            Rule::MaxAbsRegression => "max_abs_regression",
            Rule::Top1Regression => "top1_regression",
            Rule::FallbackRegression => "fallback_regression",
            Rule::PartitionsRegression => "partitions_regression",
            Rule::MinAccuracy => "min_accuracy",
            Rule::MaxAccuracyDrop => "max_accuracy_drop",
            Rule::MaxKldMean => "max_kld_mean",
            Rule::MaxKldP99 => "max_kld_p99",
            Rule::MinSameTop => "min_same_top",
            Rule::MaxPplRatio => "max_ppl_ratio",
            Rule::ReleaseSqnrChangeDb => "release_sqnr_change_db",
            Rule::ReleaseBitExact => "release_bit_exact",
        }
    }
}

/// How a rule's measured value meets its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Passes when measured >= limit.
    AtLeast,
    /// Passes when measured <= limit.
    AtMost,
    /// Passes when measured > limit (a step a stream's state must stay good through).
    Beyond,
}

impl Rule {
    /// How the rule's measured value must stand against its limit.
    pub fn direction(self) -> Direction {
        match self {
            Rule::MinSqnrDb
            | Rule::MinTop1Agreement
            | Rule::MinDecisionAgreement
            | Rule::MinAccuracy
            | Rule::MinSameTop
            | Rule::Ran => Direction::AtLeast,
            Rule::MaxDivergenceStep => Direction::Beyond,
            _ => Direction::AtMost,
        }
    }

    /// Whether `measured` meets `limit` under this rule; an unmeasured value (NaN) never does:
    /// a gate that cannot be checked must not pass. The one place a rule's pass is decided, by
    /// every kind of audit and again by `render`.
    pub fn passes(self, measured: f64, limit: f64) -> bool {
        !measured.is_nan()
            && match self.direction() {
                Direction::AtLeast => measured >= limit,
                Direction::AtMost => measured <= limit,
                Direction::Beyond => measured > limit,
            }
    }
}

/// What a statistical rule's figure is a figure of (`None` on rules whose name says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Eval: the primary metric's accuracy (a fraction).
    Accuracy,
    /// Eval: accuracy points lost against the reference.
    AccuracyDrop,
    /// Eval (CTC): points of character error rate gained against the reference.
    CerIncrease,
    /// Transcribe: the share of samples whose normalised text equals the label's.
    ExactTranscripts,
    /// Transcribe: points of word error rate gained against the reference's.
    WerIncrease,
    /// Generate: the share of samples whose text equals the reference's.
    SameText,
    /// Generate: the share of samples whose text differs from the reference's, in points.
    TextDisagreement,
    /// Score: the mean KL divergence over the corpus's positions, in nats.
    KldMean,
    /// Score: the 99th percentile KL divergence, in nats.
    KldP99,
    /// Score: the share of positions whose top token is the reference's.
    SameTop,
    /// Score: PPL target / PPL reference.
    PplRatio,
}

impl Measure {
    /// The measure in words, as the terminal and Markdown name it.
    pub fn words(self) -> &'static str {
        match self {
            Measure::Accuracy => "accuracy",
            Measure::AccuracyDrop => "accuracy drop",
            Measure::CerIncrease => "CER increase",
            Measure::ExactTranscripts => "transcripts equal to their label",
            Measure::WerIncrease => "WER increase",
            Measure::SameText => "texts equal to the reference's",
            Measure::TextDisagreement => "texts unlike the reference's",
            Measure::KldMean => "mean KLD",
            Measure::KldP99 => "99th percentile KLD",
            Measure::SameTop => "positions with the reference's top token",
            Measure::PplRatio => "perplexity ratio",
        }
    }
}

/// Which bound a statistical rule holds to its limit: the side that cannot pass by luck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The one-sided 95% Wilson score lower bound of a proportion.
    WilsonLower,
    /// The one-sided 95% Wilson score upper bound of a proportion.
    WilsonUpper,
    /// The one-sided 95% upper bound of Tango's score interval for a paired difference.
    TangoUpper,
    /// The 95th percentile of the paired percentile bootstrap.
    BootstrapUpper,
    /// An anytime-valid one-sided 95% bound of a confidence sequence (`--until-decided`).
    Sequence,
    /// A one-sided 95% bound of a percentile bootstrap over a corpus's windows (never looser
    /// than the Wilson bound of a share, nor than the order statistic that bounds a percentile).
    WindowBootstrap,
}

impl Bound {
    /// The bound in words.
    pub fn words(self) -> &'static str {
        match self {
            Bound::WilsonLower => "one-sided 95% lower bound (Wilson)",
            Bound::WilsonUpper => "one-sided 95% upper bound (Wilson)",
            Bound::TangoUpper => "one-sided 95% upper bound (Tango)",
            Bound::BootstrapUpper => "one-sided 95% upper bound (paired bootstrap)",
            Bound::Sequence => "anytime-valid one-sided 95% bound",
            Bound::WindowBootstrap => "one-sided 95% bound (bootstrap over windows)",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule evaluated on one target and output.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RuleResult {
    /// Which rule.
    pub rule: Rule,
    /// The target the rule is about.
    pub target: String,
    /// The output, or `(placement)` / `(run)` for rules about the whole target.
    pub output: String,
    /// The measured value (for a regression rule: the change since the previous report).
    pub measured: Num,
    /// The limit (or the margin of a regression rule).
    pub limit: Num,
    /// Whether the rule passes.
    pub pass: bool,
    /// Where the limit was set: `--min-sqnr`, `npu-audit.toml:12`, `required` (a target that
    /// must run), or for a regression rule the margin's origin and the previous report.
    #[serde(default)]
    pub origin: String,
    /// Regression rules: the previous report's value (`measured` is the change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Num>,
    /// Statistical rules: what `measured` is a bound of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure: Option<Measure>,
    /// Statistical rules: the point estimate of the measure, beside the bound `measured` holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Num>,
    /// Statistical rules: which bound `measured` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<Bound>,
    /// The target was allowed to fail and did not run to the end: nothing of it was judged
    /// (the rule passes so that the verdict does not count it, and says so).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ungated: bool,
}

impl RuleResult {
    /// A rule of `target` on `output`, its pass decided by [`Rule::passes`].
    pub fn judged(rule: Rule, target: &str, output: &str, (measured, limit): (f64, f64), origin: &str) -> RuleResult {
        RuleResult {
            rule,
            target: target.into(),
            output: output.into(),
            measured: Num(measured),
            limit: Num(limit),
            pass: rule.passes(measured, limit),
            origin: origin.into(),
            previous: None,
            measure: None,
            estimate: None,
            bound: None,
            ungated: false,
        }
    }

    /// Whether the stored `pass` is the one the rule's own figures give (an ungated rule passes).
    pub fn is_consistent(&self) -> bool {
        self.pass == (self.ungated || self.rule.passes(self.measured.0, self.limit.0))
    }
}
