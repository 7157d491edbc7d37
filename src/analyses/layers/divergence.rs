//! Where a target first departs from the baseline, at the three levels a user reasons in:
//!
//! 1. **code difference**: a quantized layer whose codes differ from the baseline's at all (a
//!    rounding difference, usually on ties);
//! 2. **beyond rounding**: codes more than `tolerance_lsb` steps apart, or a float tensor off by
//!    more than `float_tolerance` of the baseline tensor's largest magnitude (float results of two
//!    correct implementations differ in their last bits, so "any differing bit" is never a
//!    departure);
//! 3. **SQNR loss**: the layer's SQNR against the golden run more than `sqnr_loss_db` below the
//!    baseline's on the same layer.
//!
//! The per-layer summary, the bisection (which looks for level 2 at its cuts) and every renderer
//! read these definitions from here.

use crate::report::common::Num;
use crate::report::compare::{CodeComparison, DivergenceRules, LayerPointer, LayerReport};

/// Level 1: the codes differ at all (quantized layers only).
pub fn differs_in_codes(c: &CodeComparison, quantized: bool) -> bool {
    quantized && c.differing > 0
}

/// Level 2: a difference beyond rounding.
pub fn beyond_rounding(c: &CodeComparison, quantized: bool, rules: &DivergenceRules) -> bool {
    if quantized {
        c.differing > 0 && c.max_steps > rules.tolerance_lsb
    } else {
        c.max_rel_error.is_some_and(|r| r.0 > rules.float_tolerance)
    }
}

/// How many dB `own` is below `base`, both counted up to the ceiling; `None` when either was
/// not measured.
fn loss_db(own: Option<Num>, base: Option<Num>, rules: &DivergenceRules) -> Option<f64> {
    let cap = |v: Num| {
        if v.0.is_nan() {
            None
        } else {
            Some(v.0.min(rules.sqnr_ceiling_db))
        }
    };
    let (own, base) = (cap(own?)?, cap(base?)?);
    Some(if own == base { 0.0 } else { base - own })
}

/// Level 3: how many dB the layer's SQNR against the golden run is below the baseline's on the
/// same layer, both counted up to the ceiling.
pub fn sqnr_loss(layer: &LayerReport, baseline: &LayerReport, rules: &DivergenceRules) -> Option<f64> {
    loss_db(layer.sqnr_db, baseline.sqnr_db, rules)
}

/// The first layer at each level.
#[derive(Debug, Default)]
pub struct FirstDepartures {
    pub code_difference: Option<LayerPointer>,
    pub beyond_rounding: Option<LayerPointer>,
    pub sqnr_loss: Option<LayerPointer>,
}

/// Finds the first layer at each level among `layers` (execution order) of a target, against the
/// baseline's layers (`None` for the baseline itself or without one: nothing departs then).
pub fn first_departures(
    layers: &[LayerReport],
    baseline: Option<&[LayerReport]>,
    rules: &DivergenceRules,
) -> FirstDepartures {
    let Some(baseline) = baseline else {
        return FirstDepartures::default();
    };
    let code_difference = layers.iter().find_map(|l| {
        let c = codes(l).filter(|c| differs_in_codes(c, l.quantized))?;
        let introduced = l
            .introduced_vs_baseline
            .as_ref()
            .map(|i| differs_in_codes(i, l.quantized));
        Some(pointer(l, c, introduced))
    });
    let beyond = layers.iter().find_map(|l| {
        let c = codes(l).filter(|c| beyond_rounding(c, l.quantized, rules))?;
        let introduced = l
            .introduced_vs_baseline
            .as_ref()
            .map(|i| beyond_rounding(i, l.quantized, rules));
        Some(pointer(l, c, introduced))
    });
    let by_index: std::collections::HashMap<usize, &LayerReport> = baseline.iter().map(|b| (b.index, b)).collect();
    let sqnr_loss = layers.iter().find_map(|l| {
        let base = by_index.get(&l.index)?;
        let loss = sqnr_loss(l, base, rules).filter(|&d| d > rules.sqnr_loss_db)?;
        let introduced = loss_db(l.introduced_sqnr_db, base.introduced_sqnr_db, rules).map(|d| d > rules.sqnr_loss_db);
        let mut p = match codes(l) {
            Some(c) => pointer(l, c, introduced),
            None => pointer(l, &CodeComparison::default(), introduced),
        };
        p.sqnr_db = l.sqnr_db;
        p.baseline_sqnr_db = base.sqnr_db;
        debug_assert!(loss > 0.0);
        Some(p)
    });
    FirstDepartures {
        code_difference,
        beyond_rounding: beyond,
        sqnr_loss,
    }
}

fn codes(l: &LayerReport) -> Option<&CodeComparison> {
    l.vs_baseline.as_ref()
}

fn pointer(l: &LayerReport, c: &CodeComparison, introduced: Option<bool>) -> LayerPointer {
    LayerPointer {
        index: l.index,
        node: l.node.clone(),
        op_type: l.op_type.clone(),
        tensor: l.tensor.clone(),
        differing: c.differing,
        max_steps: c.max_steps,
        max_rel_error: c.max_rel_error,
        sqnr_db: None,
        baseline_sqnr_db: None,
        introduced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(differing: u64, max_steps: u64) -> CodeComparison {
        CodeComparison {
            differing,
            off_by_one: differing,
            max_steps,
            max_abs: Num(0.1),
            ..Default::default()
        }
    }

    fn layer(index: usize, quantized: bool, vs: Option<CodeComparison>, sqnr: f64) -> LayerReport {
        LayerReport {
            index,
            op_type: "Add".into(),
            node: format!("n{index}"),
            tensor: format!("t{index}"),
            float_tensor: format!("t{index}"),
            reference_tensor: None,
            quantized,
            elements: 10,
            sqnr_db: Some(Num(sqnr)),
            max_abs: None,
            sqnr_drop_db: None,
            vs_baseline: vs,
            introduced_sqnr_db: None,
            introduced_max_abs: None,
            introduced_vs_baseline: None,
            error: None,
            overflow: None,
        }
    }

    #[test]
    fn each_level_names_its_own_first_layer() {
        let rules = DivergenceRules::default();
        let float_noise = CodeComparison {
            differing: 1,
            max_rel_error: Some(Num(1.6e-7)),
            ..Default::default()
        };
        let target = vec![
            // A float sum one float32 ulp off, 139 dB against an exact baseline: no level.
            layer(0, false, Some(float_noise), 139.0),
            // Codes one step off: level 1 only.
            layer(1, true, Some(codes(30, 1)), 40.0),
            // Four steps: level 2, and 2 dB under the baseline: not level 3.
            layer(2, true, Some(codes(8, 4)), 38.0),
            // 5 dB under the baseline: level 3.
            layer(3, true, Some(codes(9, 4)), 30.0),
        ];
        let baseline = vec![
            layer(0, false, None, f64::INFINITY),
            layer(1, true, None, 40.0),
            layer(2, true, None, 40.0),
            layer(3, true, None, 35.0),
        ];
        let f = first_departures(&target, Some(&baseline), &rules);
        assert_eq!(f.code_difference.map(|p| p.index), Some(1));
        assert_eq!(f.beyond_rounding.map(|p| p.index), Some(2));
        let loss = f.sqnr_loss.expect("a loss");
        assert_eq!(
            (
                loss.index,
                loss.sqnr_db.map(|n| n.0),
                loss.baseline_sqnr_db.map(|n| n.0)
            ),
            (3, Some(30.0), Some(35.0))
        );
        assert!(first_departures(&target, None, &rules).code_difference.is_none());
    }

    #[test]
    fn a_float_tensor_departs_beyond_a_float16_step_of_its_magnitude_never_on_any_bit() {
        let rules = DivergenceRules::default();
        let rel = |r: f64| CodeComparison {
            differing: 5,
            max_rel_error: Some(Num(r)),
            ..Default::default()
        };
        assert!(!beyond_rounding(&rel(1.0 / 2048.0), false, &rules));
        assert!(beyond_rounding(&rel(1.0 / 512.0), false, &rules));
        assert!(!differs_in_codes(&rel(1.0), false));
    }
}
