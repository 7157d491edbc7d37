//! The loosest limits every target that ran would have passed, per output: what a user can set
//! as a gate today without failing it.

use crate::report::common::Num;
use crate::report::compare::{OutputMetrics, TargetReport, Tolerance};

/// Rounds down to `decimals` decimal places (for minimums a gate can use).
fn floor_to(v: f64, decimals: i32) -> f64 {
    if !v.is_finite() {
        return v;
    }
    // The decimal text parses to the double nearest it, which is never above `v` because `v`
    // is a double at or above that decimal; and it prints back short (no 26.490000000000002).
    let mut units = (v * 10f64.powi(decimals)).floor() as i64;
    loop {
        let r: f64 = format!("{units}e-{decimals}").parse().unwrap_or(v);
        if r <= v {
            return r;
        }
        units -= 1;
    }
}

/// Rounds up to 3 significant digits (for maximums a gate can use).
pub fn ceil_3_significant(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return v;
    }
    // Three significant digits as an integer mantissa and a decimal exponent; parsing the decimal
    // text gives the double nearest to it, which is never below `v` because `v` is a double at or
    // below that decimal.
    let exponent = v.log10().floor() as i32 - 2;
    let mut mantissa = (v / 10f64.powi(exponent)).ceil() as u64;
    loop {
        let r: f64 = format!("{mantissa}e{exponent}").parse().unwrap_or(v);
        if r >= v {
            return r;
        }
        mantissa += 1;
    }
}

/// `pick` (min or max) that stays NaN once a figure is NaN: a figure not measured on one target
/// means no threshold is passed by every target.
fn nan_or(pick: fn(f64, f64) -> f64) -> impl Fn(f64, f64) -> f64 {
    move |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { pick(a, b) }
}

/// For each output, the loosest thresholds that every gated target that ran would have passed.
pub fn tolerances(outputs: &[String], targets: &[TargetReport]) -> Vec<Tolerance> {
    let gated: Vec<&TargetReport> = targets.iter().filter(|t| t.is_gated()).collect();
    outputs
        .iter()
        .filter_map(|name| {
            let metrics: Vec<(&str, &OutputMetrics)> = gated
                .iter()
                .filter_map(|t| {
                    t.outputs
                        .iter()
                        .find(|o| &o.name == name && o.error.is_none())
                        .map(|o| (t.id.as_str(), o))
                })
                .collect();
            if metrics.is_empty() {
                return None;
            }
            let min_sqnr = metrics
                .iter()
                .map(|(_, o)| o.sqnr_db.0)
                .fold(f64::INFINITY, nan_or(f64::min));
            let max_abs = metrics.iter().map(|(_, o)| o.max_abs.0).fold(0.0, nan_or(f64::max));
            let min_cos = metrics
                .iter()
                .map(|(_, o)| o.cosine.0)
                .fold(f64::INFINITY, nan_or(f64::min));
            let top1: Vec<f64> = metrics.iter().filter_map(|(_, o)| o.top1_agreement).collect();
            Some(Tolerance {
                output: name.clone(),
                min_sqnr_db: Num(floor_to(min_sqnr, 2)),
                max_abs: Num(ceil_3_significant(max_abs)),
                min_cosine: Num(floor_to(min_cos, 6)),
                min_top1_agreement: (!top1.is_empty()).then(|| top1.iter().copied().fold(1.0, f64::min)),
                all_bit_exact: metrics.iter().all(|(_, o)| o.bit_identical == Some(o.elements)),
                targets: metrics.iter().map(|(id, _)| id.to_string()).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_for_gates_never_tightens() {
        for v in [0.0123, 0.0124999, 1.0, 7.77777, 123456.0, 3.3e-7] {
            let r = ceil_3_significant(v);
            assert!(r >= v, "{v} -> {r}");
            assert!(r <= v * 1.01 + 1e-300, "{v} -> {r}");
        }
        assert_eq!(ceil_3_significant(0.01231), 0.0124);
        assert_eq!(floor_to(23.456, 2), 23.45);
        assert_eq!(floor_to(26.49, 2), 26.49);
        assert_eq!(floor_to(-3.001, 2), -3.01);
        assert_eq!(floor_to(0.99888109999, 6), 0.998881);
        assert_eq!(floor_to(f64::INFINITY, 2), f64::INFINITY);
    }

    #[test]
    fn a_figure_not_measured_on_one_target_leaves_no_loosest_threshold() {
        let pick = nan_or(f64::min);
        assert_eq!([3.0, 1.0, 2.0].into_iter().fold(f64::INFINITY, &pick), 1.0);
        assert!([3.0, f64::NAN, 2.0].into_iter().fold(f64::INFINITY, &pick).is_nan());
    }
}
