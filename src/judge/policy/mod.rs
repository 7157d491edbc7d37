//! The release policy: `npu-audit.toml` (limits per target, target group and output; targets
//! allowed to fail; baseline mode against a previous report) merged with the command-line flags,
//! which override it. Every check of the file names its line, so `check-config` and `compare`
//! point at the value to fix.

pub mod file;
pub mod limits;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use toml::Spanned;

use crate::data::target::TargetSpec;
use crate::foundation::error::bad_policy;
use crate::foundation::pattern::Pattern;
use file::{OutputSection, PolicyFile, TargetSection};
pub use limits::{Limit, Limits};

/// Thresholds given on the command line (`--min-sqnr`, `--max-abs`, `--min-top1`,
/// `--require-bit-exact` per output; `--max-fallback-nodes`, `--max-partitions`,
/// `--fail-on-fallback` per non-CPU target). They override the policy file.
#[derive(Debug, Clone, Default)]
pub struct Thresholds {
    pub min_sqnr_db: Option<f64>,
    pub max_abs: Option<f64>,
    /// Fraction of rows whose top-1 class matches the golden run's.
    pub min_top1: Option<f64>,
    pub require_bit_exact: bool,
    /// Most compute nodes a non-CPU target may leave to the CPU EP.
    pub max_fallback_nodes: Option<usize>,
    /// Most partitions a non-CPU target's EP may compile.
    pub max_partitions: Option<usize>,
    /// No compute node may fall back to the CPU EP.
    pub fail_on_fallback: bool,
    /// dB any layer may lose against the baseline (needs the per-layer audit).
    pub max_layer_sqnr_loss_db: Option<f64>,
    /// Stream: fraction of steps whose decision agrees with the golden stream's.
    pub min_decision_agreement: Option<f64>,
    /// Stream: the state may not diverge at this step or before.
    pub max_divergence_step: Option<usize>,
    /// Eval: the lowest accuracy (a fraction).
    pub min_accuracy: Option<f64>,
    /// Eval: the most points lost against the reference (non-inferiority).
    pub max_accuracy_drop: Option<f64>,
    /// Corpus drift (`--task score`): the limits on the mean and 99th percentile KLD, the
    /// same-top share and the perplexity ratio.
    pub corpus: CorpusThresholds,
}

/// The corpus drift limits given as flags (`--max-kld-mean`, `--max-kld-p99`, `--min-same-top`,
/// `--max-ppl-ratio`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CorpusThresholds {
    pub max_kld_mean: Option<f64>,
    pub max_kld_p99: Option<f64>,
    pub min_same_top: Option<f64>,
    pub max_ppl_ratio: Option<f64>,
}

/// The file `compare` reads when no `--config` is given, if it exists in the current directory.
pub const DEFAULT_FILE: &str = "npu-audit.toml";

/// What decides the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The limits.
    Absolute,
    /// Only regressions against a previous report (plus targets that must run).
    Baseline,
    /// Both.
    Both,
}

impl Mode {
    /// The name used in the file and the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Absolute => "absolute",
            Mode::Baseline => "baseline",
            Mode::Both => "both",
        }
    }

    /// Whether regression rules are evaluated.
    pub fn uses_baseline(self) -> bool {
        self != Mode::Absolute
    }

    /// Whether absolute limits are evaluated.
    pub fn uses_limits(self) -> bool {
        self != Mode::Baseline
    }
}

/// Which targets a section applies to.
#[derive(Debug, Clone)]
enum Selector {
    All,
    /// `[target.KEY]`: an id, a glob, or a group's members.
    Targets(Vec<Pattern>),
}

impl Selector {
    fn matches(&self, target: &str) -> bool {
        match self {
            Selector::All => true,
            Selector::Targets(patterns) => patterns.iter().any(|p| p.matches(target)),
        }
    }
}

/// One section's limits, in the order sections override each other.
#[derive(Debug, Clone)]
struct Layer {
    selector: Selector,
    /// `Some` for an `outputs.NAME` section.
    output: Option<String>,
    limits: Limits,
}

/// The file a policy was read from.
#[derive(Debug, Clone)]
pub struct PolicySource {
    pub path: PathBuf,
    pub sha256: String,
}

/// A validated policy with the flags applied.
#[derive(Debug, Clone)]
pub struct Policy {
    pub source: Option<PolicySource>,
    /// Targets to run when no `--target` is given.
    pub targets: Vec<crate::data::target::TargetList>,
    /// Patterns of targets whose failure to run does not fail the audit.
    pub allow_failure: Vec<crate::data::target::TargetPattern>,
    pub mode: Mode,
    /// The previous report of baseline mode, and where it was named.
    pub baseline_report: Option<(PathBuf, String)>,
    layers: Vec<Layer>,
    /// Output names sections refer to, with their location, checked against the model.
    output_refs: Vec<(String, String)>,
    /// Where `mode` was set, for errors about it.
    mode_origin: String,
    /// `[runtime]`: per family, the releases its targets run on (each one a target of its own).
    pub releases: BTreeMap<String, Vec<String>>,
    /// `[runtime]`: rules between two releases of one target.
    pub release_limits: ReleaseLimits,
}

impl crate::foundation::userfile::Reads for Policy {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        let Policy {
            source,
            targets: _,
            allow_failure: _,
            mode: _,
            baseline_report,
            layers: _,
            output_refs: _,
            mode_origin: _,
            releases: _,
            release_limits: _,
        } = self;
        set.add_all(source.iter().map(|s| &s.path));
        set.add_all(baseline_report.iter().map(|(report, _)| report));
    }
}

/// Rules that hold between two releases of the same target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReleaseLimits {
    pub max_sqnr_change_db: Option<Limit<f64>>,
    pub require_bit_exact: Option<Limit<bool>>,
}

/// Line and column (1-based) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, col)
}

/// Turns spans into `file:line` locations and builds errors pointing at them.
struct Locator<'a> {
    file: String,
    text: &'a str,
}

impl Locator<'_> {
    fn at(&self, span: std::ops::Range<usize>) -> String {
        let (line, _) = line_col(self.text, span.start);
        format!("{}:{line}", self.file)
    }

    fn error(&self, span: std::ops::Range<usize>, message: impl std::fmt::Display) -> anyhow::Error {
        let (line, col) = line_col(self.text, span.start);
        bad_policy(format!("{}:{line}:{col}: {message}", self.file))
    }
}

/// Every target id the tool knows, for checking that a pattern can match something.
fn known_ids() -> Vec<String> {
    crate::data::target::all_known().into_iter().map(|s| s.id).collect()
}

/// A target pattern of the file: `all`, a glob over known ids, or an id the target parser takes.
fn target_pattern(loc: &Locator<'_>, s: &Spanned<String>, known: &[String]) -> Result<Pattern> {
    let text = s.get_ref().trim();
    if text == "all" {
        return Pattern::parse("*");
    }
    let pattern = Pattern::parse(text).map_err(|e| loc.error(s.span(), format!("{e:#}")))?;
    if text.contains(['*', '?']) || text.starts_with('/') {
        // A glob with a release (`qnn:*@2.6.0*`) names known targets by what precedes the `@`.
        let head = match text.split_once('@') {
            Some((head, _)) if !text.starts_with('/') => Pattern::parse(head).ok(),
            _ => None,
        };
        let names_known = |id: &String| pattern.matches(id) || head.as_ref().is_some_and(|h| h.matches(id));
        if !known.iter().any(names_known) {
            return Err(loc.error(
                s.span(),
                format!("'{text}' matches no known target (known: {})", known.join(", ")),
            ));
        }
        return Ok(pattern);
    }
    let specs = TargetSpec::parse_many(text).map_err(|e| loc.error(s.span(), format!("{e:#}")))?;
    // `qnn:all` names every chipset.
    let ids: Vec<String> = specs.iter().map(|s| regex::escape(&s.id)).collect();
    Pattern::parse(&format!("/^({})$/", ids.join("|")))
}

fn finite(loc: &Locator<'_>, v: &Spanned<f64>, name: &str, min: f64, max: f64) -> Result<f64> {
    let x = *v.get_ref();
    if !x.is_finite() || x < min || x > max {
        let range = match (min.is_finite(), max.is_finite()) {
            (true, true) => format!("between {min} and {max}"),
            (true, false) => format!("a number >= {min}"),
            _ => "a finite number".into(),
        };
        return Err(loc.error(v.span(), format!("{name} must be {range}, not {x}")));
    }
    Ok(x)
}

/// A value of the file as a limit set on its line.
fn spanned<T: Copy>(loc: &Locator<'_>, v: &Option<Spanned<T>>) -> Option<Limit<T>> {
    v.as_ref().map(|v| Limit::new(*v.get_ref(), loc.at(v.span())))
}

/// The output-level limits of a section, checked.
fn output_limits(loc: &Locator<'_>, s: &OutputSection) -> Result<Limits> {
    let mut out = Limits::default();
    macro_rules! number {
        ($f:ident, $min:expr, $max:expr) => {
            if let Some(v) = &s.$f {
                out.$f = Some(Limit::new(
                    finite(loc, v, stringify!($f), $min, $max)?,
                    loc.at(v.span()),
                ));
            }
        };
    }
    number!(min_sqnr_db, f64::NEG_INFINITY, f64::INFINITY);
    number!(max_abs, 0.0, f64::INFINITY);
    number!(min_top1_agreement, 0.0, 1.0);
    number!(max_sqnr_regression_db, 0.0, f64::INFINITY);
    number!(max_abs_regression, 0.0, f64::INFINITY);
    number!(max_top1_regression, 0.0, 1.0);
    out.require_bit_exact = spanned(loc, &s.require_bit_exact);
    Ok(out)
}

/// The limits of a target section (its own, not its outputs'), checked.
fn target_limits(loc: &Locator<'_>, s: &TargetSection) -> Result<Limits> {
    let mut out = output_limits(
        loc,
        &OutputSection {
            min_sqnr_db: s.min_sqnr_db.clone(),
            max_abs: s.max_abs.clone(),
            min_top1_agreement: s.min_top1_agreement.clone(),
            require_bit_exact: s.require_bit_exact.clone(),
            max_sqnr_regression_db: s.max_sqnr_regression_db.clone(),
            max_abs_regression: s.max_abs_regression.clone(),
            max_top1_regression: s.max_top1_regression.clone(),
        },
    )?;
    out.max_fallback_nodes = spanned(loc, &s.max_fallback_nodes);
    out.max_partitions = spanned(loc, &s.max_partitions);
    out.max_fallback_regression = spanned(loc, &s.max_fallback_regression);
    out.max_partitions_regression = spanned(loc, &s.max_partitions_regression);
    out.fail_on_fallback = spanned(loc, &s.fail_on_fallback);
    if let Some(v) = &s.max_layer_sqnr_loss_db {
        let db = finite(loc, v, "max_layer_sqnr_loss_db", 0.0, f64::INFINITY)?;
        out.max_layer_sqnr_loss_db = Some(Limit::new(db, loc.at(v.span())));
    }
    if let Some(v) = &s.min_decision_agreement {
        let fraction = finite(loc, v, "min_decision_agreement", 0.0, 1.0)?;
        out.min_decision_agreement = Some(Limit::new(fraction, loc.at(v.span())));
    }
    out.max_divergence_step = spanned(loc, &s.max_divergence_step);
    if let Some(v) = &s.min_accuracy {
        let fraction = finite(loc, v, "min_accuracy", 0.0, 1.0)?;
        out.min_accuracy = Some(Limit::new(fraction, loc.at(v.span())));
    }
    if let Some(v) = &s.max_accuracy_drop {
        let points = finite(loc, v, "max_accuracy_drop", 0.0, 100.0)?;
        out.max_accuracy_drop = Some(Limit::new(points, loc.at(v.span())));
    }
    let checked = |v: &Option<Spanned<f64>>, name: &str, (lo, hi): (f64, f64)| -> Result<Option<Limit<f64>>> {
        v.as_ref()
            .map(|v| Ok(Limit::new(finite(loc, v, name, lo, hi)?, loc.at(v.span()))))
            .transpose()
    };
    out.max_kld_mean = checked(&s.max_kld_mean, "max_kld_mean", (0.0, f64::INFINITY))?;
    out.max_kld_p99 = checked(&s.max_kld_p99, "max_kld_p99", (0.0, f64::INFINITY))?;
    out.min_same_top = checked(&s.min_same_top, "min_same_top", (0.0, 1.0))?;
    out.max_ppl_ratio = checked(&s.max_ppl_ratio, "max_ppl_ratio", (0.0, f64::INFINITY))?;
    Ok(out)
}

impl Policy {
    /// No file: limits come from the flags alone.
    pub fn empty() -> Policy {
        Policy {
            source: None,
            targets: Vec::new(),
            allow_failure: Vec::new(),
            mode: Mode::Absolute,
            baseline_report: None,
            layers: Vec::new(),
            output_refs: Vec::new(),
            mode_origin: String::new(),
            releases: BTreeMap::new(),
            release_limits: ReleaseLimits::default(),
        }
    }

    /// Reads and checks a policy file.
    pub fn load(path: &Path) -> Result<Policy> {
        let shown = crate::foundation::userfile::shown(path);
        let bytes = crate::foundation::userfile::read_user_file(path)
            .map_err(|e| bad_policy(format!("{shown}: cannot read: {e}")))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            bad_policy(format!(
                "{shown}: not UTF-8 text (byte {})",
                e.utf8_error().valid_up_to()
            ))
        })?;
        // A policy read from standard input names paths relative to the current directory.
        let base = match path.parent() {
            Some(p) if !crate::foundation::userfile::is_stdio(path) => p.to_path_buf(),
            _ => std::path::PathBuf::new(),
        };
        let mut policy = Policy::parse(&text, &shown, &base)?;
        policy.source = Some(PolicySource {
            path: path.to_path_buf(),
            sha256: crate::foundation::hash::sha256_hex(text.as_bytes()),
        });
        Ok(policy)
    }

    /// Parses and checks policy text; `file` names it in errors, `base` resolves relative paths.
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Policy> {
        let loc = Locator {
            file: file.to_string(),
            text,
        };
        let raw: PolicyFile = toml::from_str(text).map_err(|e| {
            let message = e.message().trim().replace('\n', " ");
            match e.span() {
                Some(span) => loc.error(span, message),
                None => bad_policy(format!("{file}: {message}")),
            }
        })?;
        if let Some(v) = raw.version.as_ref().filter(|v| *v.get_ref() != 1) {
            return Err(loc.error(v.span(), format!("version {} is not supported (only 1)", v.get_ref())));
        }
        let known = known_ids();
        let mut policy = Policy::empty();
        top_level(&loc, &raw, &known, &mut policy)?;
        let groups = groups(&loc, &raw, &known)?;
        if let Some(d) = &raw.defaults {
            if let Some(a) = &d.allow_failure {
                return Err(loc.error(
                    a.span(),
                    "allow_failure in [defaults] would allow every target to fail; use the top-level allow_failure = [\"all\"]",
                ));
            }
            add_section(&loc, &mut policy, Selector::All, d)?;
        }
        // File order decides which of two matching sections wins.
        let mut sections: Vec<_> = raw.target.iter().collect();
        sections.sort_by_key(|(k, _)| k.span().start);
        for (key, section) in sections {
            let k = key.get_ref().trim();
            let (patterns, texts) = match groups.iter().find(|(n, _, _)| n == k) {
                Some((_, p, t)) => (p.clone(), t.clone()),
                None => (vec![target_pattern(&loc, key, &known)?], vec![k.to_string()]),
            };
            match &section.allow_failure {
                Some(a) if *a.get_ref() => {
                    for t in &texts {
                        let p = crate::data::target::TargetPattern::parse(t)
                            .map_err(|e| loc.error(key.span(), format!("{e:#}")))?;
                        policy.allow_failure.push(p);
                    }
                }
                Some(a) => {
                    refuse_allow_failure_conflict(&loc, raw.allow_failure.as_slice(), &patterns, &texts, a, &known)?
                }
                None => {}
            }
            add_section(&loc, &mut policy, Selector::Targets(patterns), section)?;
        }
        if let Some(r) = &raw.runtime {
            runtime_section(&loc, r, &mut policy)?;
        }
        if let Some(b) = &raw.baseline {
            let rel = b.report.get_ref().trim();
            if rel.is_empty() {
                return Err(loc.error(b.report.span(), "[baseline] report must name a JSON report"));
            }
            policy.baseline_report = Some((base.join(rel), loc.at(b.report.span())));
            if raw.mode.is_none() {
                policy.mode = Mode::Both;
            }
        }
        Ok(policy)
    }

    /// Applies the command-line flags, which override the file: thresholds as a last section
    /// over every target, `--allow-failure` added, `--baseline-report` replacing the file's.
    pub fn with_flags(
        mut self,
        flags: &Thresholds,
        allow_failure: &[crate::data::target::TargetPattern],
        baseline: Option<&Path>,
    ) -> Result<Policy> {
        let l = Limits {
            min_sqnr_db: flags.min_sqnr_db.map(|v| Limit::new(v, "--min-sqnr")),
            max_abs: flags.max_abs.map(|v| Limit::new(v, "--max-abs")),
            min_top1_agreement: flags.min_top1.map(|v| Limit::new(v, "--min-top1")),
            require_bit_exact: flags.require_bit_exact.then(|| Limit::new(true, "--require-bit-exact")),
            max_fallback_nodes: flags
                .max_fallback_nodes
                .map(|v| Limit::new(v as u64, "--max-fallback-nodes")),
            max_partitions: flags.max_partitions.map(|v| Limit::new(v as u64, "--max-partitions")),
            fail_on_fallback: flags.fail_on_fallback.then(|| Limit::new(true, "--fail-on-fallback")),
            max_layer_sqnr_loss_db: flags
                .max_layer_sqnr_loss_db
                .map(|v| Limit::new(v, "--max-layer-sqnr-loss")),
            min_decision_agreement: flags
                .min_decision_agreement
                .map(|v| Limit::new(v, "--min-decision-agreement")),
            max_divergence_step: flags
                .max_divergence_step
                .map(|v| Limit::new(v as u64, "--max-divergence-step")),
            min_accuracy: flags.min_accuracy.map(|v| Limit::new(v, "--min-accuracy")),
            max_accuracy_drop: flags.max_accuracy_drop.map(|v| Limit::new(v, "--max-accuracy-drop")),
            max_kld_mean: flags.corpus.max_kld_mean.map(|v| Limit::new(v, "--max-kld-mean")),
            max_kld_p99: flags.corpus.max_kld_p99.map(|v| Limit::new(v, "--max-kld-p99")),
            min_same_top: flags.corpus.min_same_top.map(|v| Limit::new(v, "--min-same-top")),
            max_ppl_ratio: flags.corpus.max_ppl_ratio.map(|v| Limit::new(v, "--max-ppl-ratio")),
            ..Limits::default()
        };
        if !l.is_empty() {
            self.layers.push(Layer {
                selector: Selector::All,
                output: None,
                limits: l,
            });
        }
        self.allow_failure.extend(allow_failure.iter().cloned());
        if let Some(b) = baseline {
            self.baseline_report = Some((b.to_path_buf(), "--baseline-report".into()));
            if self.mode == Mode::Absolute {
                self.mode = Mode::Both;
            }
        }
        if self.mode.uses_baseline() && self.baseline_report.is_none() {
            let at = if self.mode_origin.is_empty() {
                "mode".to_string()
            } else {
                self.mode_origin.clone()
            };
            return Err(bad_policy(format!(
                "{at}: mode = \"{}\" needs a previous report: add [baseline] report = \"FILE.json\" or pass --baseline-report",
                self.mode.as_str()
            )));
        }
        Ok(self)
    }

    /// The limits of one target (`output` = `None`: the target-level ones) with every matching
    /// section applied in order: `[defaults]`, its `outputs.NAME`, then each matching
    /// `[target.X]` in file order followed by its `outputs.NAME`; the flags last.
    pub fn limits(&self, target: &str, output: Option<&str>) -> Limits {
        let mut out = Limits::default();
        for layer in &self.layers {
            let output_fits = match (&layer.output, output) {
                (None, _) => true,
                (Some(o), Some(name)) => o == name,
                (Some(_), None) => false,
            };
            if output_fits && layer.selector.matches(target) {
                out.overlay(&layer.limits);
            }
        }
        out
    }

    /// The notes an audit of `kind` owes for the limits this policy sets on `targets` that it
    /// does not apply (each limit once, with where it was set): a limit is applied or said, never
    /// silently skipped. Flags are refused by the commands that have none of them.
    pub fn not_applied(&self, kind: crate::report::common::ReportKind, targets: &[String]) -> Vec<String> {
        self.set_on(targets)
            .into_iter()
            .filter(|(name, _)| !limits::applied_by(name).contains(&kind))
            .map(|(name, origin)| {
                let applied: Vec<&str> = limits::applied_by(name).iter().map(|k| k.as_str()).collect();
                format!(
                    "{origin}: {name} is not applied by {kind} audits (it gates {} audits)",
                    applied.join(", ")
                )
            })
            .collect()
    }

    /// Every limit this policy sets on any of `targets`, by name with where it was set, each once.
    pub fn set_on(&self, targets: &[String]) -> Vec<(&'static str, String)> {
        let mut seen: Vec<(&'static str, String)> = Vec::new();
        for layer in &self.layers {
            if !targets.iter().any(|t| layer.selector.matches(t)) {
                continue;
            }
            for found in layer.limits.set() {
                if !seen.contains(&found) {
                    seen.push(found);
                }
            }
        }
        seen
    }

    /// Whether the gate has anything to evaluate.
    pub fn is_active(&self) -> bool {
        self.layers.iter().any(|l| !l.limits.is_empty())
            || self.baseline_report.is_some()
            || self.release_limits != ReleaseLimits::default()
    }

    /// Output names the policy sets limits for that the model does not have: a typo there
    /// would silently drop a gate.
    pub fn check_outputs(&self, outputs: &[String]) -> Result<()> {
        match self.output_refs.iter().find(|(n, _)| !outputs.contains(n)) {
            Some((name, at)) => Err(bad_policy(format!(
                "{at}: '{name}' is not an output of the model (outputs: {})",
                outputs.join(", ")
            ))),
            None => Ok(()),
        }
    }

    /// The policy as `check-config` prints it: the sections that apply to each of `targets`.
    pub fn describe(&self, targets: &[String]) -> String {
        let mut out = String::new();
        out.push_str(&format!("mode: {}\n", self.mode.as_str()));
        if let Some((p, at)) = &self.baseline_report {
            out.push_str(&format!("previous report: {} ({at})\n", p.display()));
        }
        if !self.targets.is_empty() {
            let texts: Vec<&str> = self.targets.iter().map(|t| t.text.as_str()).collect();
            out.push_str(&format!("targets: {}\n", texts.join(", ")));
        }
        if !self.allow_failure.is_empty() {
            let texts: Vec<&str> = self.allow_failure.iter().map(|p| p.text.as_str()).collect();
            out.push_str(&format!("allowed to fail: {}\n", texts.join(", ")));
        }
        for t in targets {
            out.push_str(&format!("{t}:\n"));
            let own = self.limits(t, None).describe();
            if own.is_empty() {
                out.push_str("  (no limits)\n");
            }
            for line in own {
                out.push_str(&format!("  {line}\n"));
            }
            let mut outputs: Vec<&String> = self.output_refs.iter().map(|(n, _)| n).collect();
            outputs.sort();
            outputs.dedup();
            for o in outputs {
                // Only what an output's sections change.
                let own = self.limits(t, None).describe();
                let changed: Vec<String> = self
                    .limits(t, Some(o))
                    .describe()
                    .into_iter()
                    .filter(|l| !own.contains(l))
                    .collect();
                if changed.is_empty() {
                    continue;
                }
                out.push_str(&format!("  output {o}:\n"));
                for line in changed {
                    out.push_str(&format!("    {line}\n"));
                }
            }
        }
        out
    }
}

/// A section saying `allow_failure = false` for a target the top-level `allow_failure` lets fail
/// is a contradiction, refused rather than resolved by a rule the reader has to guess.
fn refuse_allow_failure_conflict(
    loc: &Locator<'_>,
    top_level: &[Spanned<String>],
    patterns: &[Pattern],
    texts: &[String],
    at: &Spanned<bool>,
    known: &[String],
) -> Result<()> {
    let selected: Vec<&str> = known
        .iter()
        .filter(|id| patterns.iter().any(|p| p.matches(id)))
        .map(String::as_str)
        .chain(
            texts
                .iter()
                .map(String::as_str)
                .filter(|t| !t.contains(['*', '?', '/'])),
        )
        .collect();
    for a in top_level {
        let text = a.get_ref().trim();
        let pattern = Pattern::parse(if text == "all" { "*" } else { text })?;
        if let Some(id) = selected.iter().find(|id| pattern.matches(id)) {
            return Err(loc.error(
                at.span(),
                format!(
                    "allow_failure = false here, but the top-level allow_failure = [\"{text}\"] lets {id} fail; say it in one place"
                ),
            ));
        }
    }
    Ok(())
}

/// `[runtime]`: the releases per family, each checked against the catalogue, and the rules
/// between releases.
fn runtime_section(loc: &Locator<'_>, r: &file::RuntimeSection, policy: &mut Policy) -> Result<()> {
    let families = [
        ("cpu", &r.cpu),
        ("qnn", &r.qnn),
        ("openvino", &r.openvino),
        ("directml", &r.directml),
        ("gpu", &r.gpu),
    ];
    for (family, list) in families {
        let Some(list) = list else { continue };
        let known: Vec<String> = crate::execution::runtime::catalogue()
            .releases(family)
            .iter()
            .map(|b| b.version.clone())
            .collect();
        let mut versions = Vec::new();
        for v in list {
            let text = v.get_ref().trim();
            if !known.iter().any(|k| k == text) {
                return Err(loc.error(
                    v.span(),
                    format!(
                        "no release {text} of {family} in the catalogue (known: {})",
                        known.join(", ")
                    ),
                ));
            }
            if !versions.iter().any(|x: &String| x == text) {
                versions.push(text.to_string());
            }
        }
        if versions.is_empty() {
            return Err(bad_policy(format!(
                "{}: [runtime] {family} = [] lists no release",
                loc.file
            )));
        }
        policy.releases.insert(family.to_string(), versions);
    }
    if let Some(v) = &r.max_sqnr_change_db {
        let db = finite(loc, v, "max_sqnr_change_db", 0.0, f64::INFINITY)?;
        policy.release_limits.max_sqnr_change_db = Some(Limit::new(db, loc.at(v.span())));
    }
    policy.release_limits.require_bit_exact = spanned(loc, &r.require_bit_exact).filter(|l| l.value);
    Ok(())
}

/// The top-level keys: `targets`, `allow_failure`, `mode`.
fn top_level(loc: &Locator<'_>, raw: &PolicyFile, known: &[String], policy: &mut Policy) -> Result<()> {
    if let Some(list) = raw.targets.as_ref().filter(|l| l.get_ref().is_empty()) {
        return Err(loc.error(
            list.span(),
            "targets = [] names no target; list them, or remove the key to run the default targets",
        ));
    }
    for t in raw.targets.iter().flat_map(|l| l.get_ref()) {
        let list =
            crate::data::target::TargetList::parse(t.get_ref()).map_err(|e| loc.error(t.span(), format!("{e:#}")))?;
        policy.targets.push(list);
    }
    for a in &raw.allow_failure {
        target_pattern(loc, a, known)?;
        let p = crate::data::target::TargetPattern::parse(a.get_ref())
            .map_err(|e| loc.error(a.span(), format!("{e:#}")))?;
        policy.allow_failure.push(p);
    }
    if let Some(m) = &raw.mode {
        policy.mode = match m.get_ref().as_str() {
            "absolute" => Mode::Absolute,
            "baseline" => Mode::Baseline,
            "both" => Mode::Both,
            other => {
                return Err(loc.error(
                    m.span(),
                    format!("mode '{other}' is not one of absolute, baseline, both"),
                ))
            }
        };
        policy.mode_origin = loc.at(m.span());
    }
    Ok(())
}

/// A `[groups]` entry: its name, its members as patterns, and as written.
type Group = (String, Vec<Pattern>, Vec<String>);

/// The `[groups]` table, each name checked to be a plain word that is not a target id.
fn groups(loc: &Locator<'_>, raw: &PolicyFile, known: &[String]) -> Result<Vec<Group>> {
    let mut groups: Vec<Group> = Vec::new();
    for (name, members) in &raw.groups {
        let n = name.get_ref().trim();
        if n.is_empty() || n.contains(['*', '?', ':', '/', ',']) || TargetSpec::parse_many(n).is_ok() {
            return Err(loc.error(
                name.span(),
                format!("group name '{n}' must be a plain word that is not a target id"),
            ));
        }
        if members.is_empty() {
            return Err(loc.error(name.span(), format!("group '{n}' has no targets")));
        }
        let patterns = members
            .iter()
            .map(|m| target_pattern(loc, m, known))
            .collect::<Result<Vec<_>>>()?;
        let texts = members.iter().map(|m| m.get_ref().trim().to_string()).collect();
        groups.push((n.to_string(), patterns, texts));
    }
    Ok(groups)
}

/// Adds a section's limits (and those of its `outputs.NAME` tables, in file order) for the
/// targets `selector` names.
fn add_section(loc: &Locator<'_>, policy: &mut Policy, selector: Selector, section: &TargetSection) -> Result<()> {
    policy.layers.push(Layer {
        selector: selector.clone(),
        output: None,
        limits: target_limits(loc, section)?,
    });
    let mut outputs: Vec<_> = section.outputs.iter().collect();
    outputs.sort_by_key(|(k, _)| k.span().start);
    for (name, limits) in outputs {
        let n = name.get_ref().trim();
        if n.is_empty() {
            return Err(loc.error(name.span(), "an output name must not be empty"));
        }
        let mut limits = output_limits(loc, limits)?;
        limits.mark_per_output();
        policy.output_refs.push((n.to_string(), loc.at(name.span())));
        policy.layers.push(Layer {
            selector: selector.clone(),
            output: Some(n.to_string()),
            limits,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
