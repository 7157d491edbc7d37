//! Drift thresholds from the command line, evaluated per target and output into rules with the
//! measured value, the limit and a verdict.

use crate::report::model::{GateReport, Num, RuleResult, TargetReport, Verdict};

/// Thresholds given with `--min-sqnr`, `--max-abs`, `--require-bit-exact` (per output) and
/// `--max-fallback-nodes`, `--max-partitions`, `--fail-on-fallback` (per non-CPU target).
#[derive(Debug, Clone, Default)]
pub struct Thresholds {
    pub min_sqnr_db: Option<f64>,
    pub max_abs: Option<f64>,
    pub require_bit_exact: bool,
    /// Most compute nodes a non-CPU target may leave to the CPU EP.
    pub max_fallback_nodes: Option<usize>,
    /// Most partitions a non-CPU target's EP may compile.
    pub max_partitions: Option<usize>,
    /// No compute node may fall back to the CPU EP.
    pub fail_on_fallback: bool,
}

impl Thresholds {
    /// Whether any threshold is set.
    pub fn any(&self) -> bool {
        self.min_sqnr_db.is_some() || self.max_abs.is_some() || self.require_bit_exact || self.any_placement()
    }

    fn any_placement(&self) -> bool {
        self.max_fallback_nodes.is_some() || self.max_partitions.is_some() || self.fail_on_fallback
    }
}

/// The `output` of rules about a target's placement rather than one of its outputs.
pub const PLACEMENT_SCOPE: &str = "(placement)";

/// Placement rules of one target. Unknown placement fails them: a gate that cannot be checked
/// must not pass.
fn placement_rules(t: &Thresholds, target: &TargetReport, rules: &mut Vec<RuleResult>) {
    if !t.any_placement() || target.ep == crate::placement::CPU_EP {
        return;
    }
    let p = target.placement.as_ref();
    let compute = p.map(|p| p.compute_fallback_nodes as f64).unwrap_or(f64::NAN);
    let mut push = |rule: &str, measured: f64, limit: f64| {
        rules.push(RuleResult {
            rule: rule.to_string(),
            target: target.id.clone(),
            output: PLACEMENT_SCOPE.into(),
            measured: Num(measured),
            limit: Num(limit),
            pass: !measured.is_nan() && measured <= limit,
            origin: String::new(),
        });
    };
    if let Some(max) = t.max_fallback_nodes {
        push("max_fallback_nodes", compute, max as f64);
    }
    if t.fail_on_fallback {
        push("fail_on_fallback", compute, 0.0);
    }
    if let Some(max) = t.max_partitions {
        let partitions = p.map(|p| p.ep_partitions as f64).unwrap_or(f64::NAN);
        push("max_partitions", partitions, max as f64);
    }
}

/// Evaluates the thresholds on every gated target ([`TargetReport::is_gated`]).
pub fn evaluate(t: &Thresholds, targets: &[TargetReport]) -> GateReport {
    let mut rules = Vec::new();
    for target in targets.iter().filter(|x| x.is_gated()) {
        placement_rules(t, target, &mut rules);
        for out in &target.outputs {
            let mut push = |rule: &str, measured: f64, limit: f64, pass: bool| {
                rules.push(RuleResult {
                    rule: rule.to_string(),
                    target: target.id.clone(),
                    output: out.name.clone(),
                    measured: Num(measured),
                    limit: Num(limit),
                    pass,
                    origin: String::new(),
                });
            };
            if let Some(min) = t.min_sqnr_db {
                let v = out.sqnr_db.0;
                push("min_sqnr_db", v, min, !v.is_nan() && v >= min);
            }
            if let Some(max) = t.max_abs {
                let v = out.max_abs.0;
                push("max_abs", v, max, !v.is_nan() && v <= max);
            }
            if t.require_bit_exact {
                let differing = match out.bit_identical {
                    Some(b) => (out.elements - b) as f64,
                    None => f64::NAN,
                };
                push("bit_exact", differing, 0.0, differing == 0.0);
            }
        }
    }
    let verdict = if !t.any() {
        Verdict::None
    } else if rules.iter().all(|r| r.pass) {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    GateReport {
        verdict,
        rules,
        policy: None,
    }
}
