//! `npu-audit sample-size`: how many samples an eval needs for the one-sided 95% bound of a
//! target's drop to show a limit, at flip rates the user expects or at those an earlier eval
//! observed (with that eval's time per sample, what the samples would cost), so a set is sized
//! before hours of simulation. The figures are [`crate::analyses::accuracy::paired::samples_needed`]'s.

use serde::Serialize;

use crate::analyses::accuracy::paired::samples_needed;
use crate::report::eval::EvalReport;

/// One line of the answer: a target (or the expected rates) and the samples it needs.
#[derive(Debug, Clone, Serialize)]
pub struct SizingRow {
    /// The target the rates were observed on, or `expected`.
    pub target: String,
    /// Fractions of samples broken and fixed against the reference.
    pub broken_rate: f64,
    pub fixed_rate: f64,
    /// Samples at which the expected counts' bound meets the limit (even odds of showing it);
    /// absent when no sample size shows it at these rates.
    pub even_odds: Option<u64>,
    /// Samples that show it with the asked probability.
    pub powered: Option<u64>,
    /// The earlier eval's median time per sample on this target, in milliseconds.
    pub run_ms_median: Option<f64>,
}

/// The answer of `sample-size`.
#[derive(Debug, Clone, Serialize)]
pub struct Sizing {
    pub limit_points: f64,
    /// The probability `powered` is sized for.
    pub power: f64,
    /// Where the rates come from: `expected`, or the earlier eval's file.
    pub source: String,
    pub rows: Vec<SizingRow>,
}

/// The samples `limit_points` needs at the rates `broken` and `fixed` (fractions).
pub fn row(target: &str, (broken, fixed): (f64, f64), limit_points: f64, power: f64) -> SizingRow {
    let limit = limit_points / 100.0;
    SizingRow {
        target: target.into(),
        broken_rate: broken,
        fixed_rate: fixed,
        even_odds: samples_needed(broken, fixed, limit, 0.5),
        powered: samples_needed(broken, fixed, limit, power),
        run_ms_median: None,
    }
}

/// The rows of every target of an earlier eval that was compared with its reference on accuracy
/// (the CER's drop has no sample-size formula).
pub fn from_report(report: &EvalReport, limit_points: f64, power: f64) -> Vec<SizingRow> {
    if report.task.primary == "cer" {
        return Vec::new();
    }
    report
        .targets
        .iter()
        .filter_map(|t| {
            let c = t.comparisons.iter().find(|c| c.against == "reference")?;
            // Reports of layout 1 do not say how many pairs: every sample the target ran.
            let n = if c.pairs > 0 { c.pairs } else { t.samples_run as u64 };
            (n > 0).then(|| {
                let rates = (c.broken as f64 / n as f64, c.fixed as f64 / n as f64);
                SizingRow {
                    // A stranger's figure: only a time a session can have took is used.
                    run_ms_median: t.run_ms_median.filter(|ms| ms.is_finite() && (0.0..1e9).contains(ms)),
                    ..row(&t.id, rates, limit_points, power)
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_flip_needs_the_closed_form_and_a_drop_at_the_limit_needs_no_number() {
        let r = row("expected", (0.0, 0.0), 1.0, 0.8);
        assert_eq!((r.even_odds, r.powered), (Some(268), Some(268)));
        let r = row("expected", (0.06, 0.01), 5.0, 0.8);
        assert_eq!((r.even_odds, r.powered), (None, None));
    }
}
