//! Drift thresholds from the command line, evaluated per target and output into rules with the
//! measured value, the limit and a verdict.

use crate::report::model::{GateReport, Num, RuleResult, TargetReport, Verdict};

/// Thresholds given with `--min-sqnr`, `--max-abs`, `--require-bit-exact`.
#[derive(Debug, Clone, Default)]
pub struct Thresholds {
    pub min_sqnr_db: Option<f64>,
    pub max_abs: Option<f64>,
    pub require_bit_exact: bool,
}

impl Thresholds {
    /// Whether any threshold is set.
    pub fn any(&self) -> bool {
        self.min_sqnr_db.is_some() || self.max_abs.is_some() || self.require_bit_exact
    }
}

/// Evaluates the thresholds on every gated target ([`TargetReport::is_gated`]).
pub fn evaluate(t: &Thresholds, targets: &[TargetReport]) -> GateReport {
    let mut rules = Vec::new();
    for target in targets.iter().filter(|x| x.is_gated()) {
        for out in &target.outputs {
            let mut push = |rule: &str, measured: f64, limit: f64, pass: bool| {
                rules.push(RuleResult {
                    rule: rule.to_string(),
                    target: target.id.clone(),
                    output: out.name.clone(),
                    measured: Num(measured),
                    limit: Num(limit),
                    pass,
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
    GateReport { verdict, rules }
}
