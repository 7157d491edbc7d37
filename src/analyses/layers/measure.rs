//! Figures of one layer on one target, accumulated one sample at a time: the dequantized
//! activation against the fp32 golden one (SQNR, max abs), and the codes against the
//! baseline's (a histogram of differences in LSB, and how many one-LSB differences sat on a
//! .5 tie of the baseline's value before rounding).

use std::borrow::Cow;

use crate::analyses::metrics::agreement::Agreement;
use crate::analyses::metrics::errors::ErrorStats;
use crate::data::tensor::{with_code_pair, with_codes, Tensor, TensorData};

use super::points::Quant;

/// A value this close to a .5 tie (in LSB) counts as on it. Qualcomm's HTP simulator rounds
/// values within 0.007 LSB of an 8-bit tie as ties (see the fingerprint), so the window is a
/// little wider than that and far narrower than any rounding the candidates disagree on.
pub const TIE_WINDOW_LSB: f64 = 0.01;

/// The float value of a tapped tensor: codes dequantized as DequantizeLinear does
/// (`(code − zero_point) · scale` in float32), floats as float32 (borrowed, not copied).
pub fn real_values<'a>(t: &'a Tensor, quant: Option<&Quant>) -> Cow<'a, [f32]> {
    match (quant, &t.data) {
        (None, TensorData::Float32(v)) => Cow::Borrowed(v),
        (Some(q), data) if !t.dtype().is_float() => {
            Cow::Owned(with_codes!(data, v => dequantize(v, q)).unwrap_or_else(|| {
                (0..data.len())
                    .map(|i| (data.get_f64(i) - q.zero_point) as f32 * q.scale)
                    .collect()
            }))
        }
        (_, data) => Cow::Owned((0..data.len()).map(|i| data.get_f64(i) as f32).collect()),
    }
}

/// Codes of one integer type dequantized (the same arithmetic as the generic path: the
/// difference in double precision, then the product in float32).
fn dequantize<T: Copy + Into<f64>>(codes: &[T], q: &Quant) -> Vec<f32> {
    codes
        .iter()
        .map(|&c| (c.into() - q.zero_point) as f32 * q.scale)
        .collect()
}

/// Positions where two code tensors of one integer type differ by exactly one step; `None`
/// for other types.
fn one_step_apart(a: &TensorData, b: &TensorData) -> Option<Vec<usize>> {
    fn positions<T: Copy + Into<i64>>(x: &[T], y: &[T]) -> Vec<usize> {
        let one = |(i, (&a, &b)): (usize, (&T, &T))| ((a.into() - b.into()).abs() == 1).then_some(i);
        x.iter().zip(y).enumerate().filter_map(one).collect()
    }
    with_code_pair!(a, b, x, y => positions(x, y))
}

/// The code a value maps to before rounding, in LSB (`x / scale + zero_point`).
fn ideal(x: f32, q: &Quant) -> f64 {
    (x / q.scale) as f64 + q.zero_point
}

/// Whether an ideal value sits on a .5 tie.
pub fn on_tie(ideal: f64) -> bool {
    ((ideal - ideal.floor()) - 0.5).abs() <= TIE_WINDOW_LSB
}

/// How many one-step code differences between `target` and `base` sat on a tie of the
/// baseline's value before rounding (`before`, the same length).
fn one_lsb_ties(target: &Tensor, base: &Tensor, before: &Tensor, q: &Quant) -> u64 {
    let at = |i: usize| on_tie(ideal(before.data.get_f64(i) as f32, q));
    match one_step_apart(&target.data, &base.data) {
        Some(positions) => positions.into_iter().filter(|&i| at(i)).count() as u64,
        None => (0..target.len())
            .filter(|&i| (target.data.get_f64(i) - base.data.get_f64(i)).abs() == 1.0 && at(i))
            .count() as u64,
    }
}

/// One layer, one target.
#[derive(Debug, Clone)]
pub struct LayerAcc {
    /// Against the golden (fp32 reference) activation, when the layer has a counterpart.
    pub golden: Option<ErrorStats>,
    /// Against the baseline's tensor (codes for a quantized layer).
    pub baseline: Option<Agreement>,
    /// One-LSB differences whose baseline value before rounding sat on a tie.
    pub ties: u64,
    /// Whether `ties` was measured (the baseline's value before rounding was available).
    pub ties_known: bool,
    /// The largest finite magnitude of the baseline's tensor: what a float tensor's error is
    /// relative to.
    pub baseline_peak: f64,
    /// The largest finite magnitude of the golden (fp32 reference) tensor: whether the values
    /// fit float16 (65,504) where the target computes in float16.
    pub reference_peak: f64,
    /// Elements of the target's tensor that are ±inf or NaN where the golden value is finite.
    pub nonfinite: u64,
    pub elements: u64,
    /// Set when the target's tensor was missing (nothing is measured then).
    pub error: Option<String>,
    /// Why the golden or baseline comparison was dropped, when it was.
    pub golden_error: Option<String>,
    pub baseline_error: Option<String>,
}

impl LayerAcc {
    /// Empty figures; `against_golden` / `against_baseline` say which comparisons apply.
    pub fn new(against_golden: bool, against_baseline: bool, quantized: bool) -> LayerAcc {
        LayerAcc {
            golden: against_golden.then(|| ErrorStats::new(true, true)),
            baseline: against_baseline.then(|| Agreement::with_lsb(quantized.then_some(1.0))),
            ties: 0,
            ties_known: false,
            baseline_peak: 0.0,
            reference_peak: 0.0,
            nonfinite: 0,
            elements: 0,
            error: None,
            golden_error: None,
            baseline_error: None,
        }
    }

    fn drop_golden(&mut self, why: String) {
        self.golden = None;
        self.golden_error = Some(why);
    }

    fn drop_baseline(&mut self, why: String) {
        self.baseline = None;
        self.ties_known = false;
        self.baseline_error = Some(why);
    }

    /// The reference's peak and the target's non-finite values where the reference is finite:
    /// what an overflow is named by.
    fn note_range(&mut self, out: &[f32], reference: &[f32]) {
        for (o, r) in out.iter().zip(reference) {
            if r.is_finite() {
                self.reference_peak = self.reference_peak.max(r.abs() as f64);
                self.nonfinite += !o.is_finite() as u64;
            }
        }
    }

    /// Every reason a figure is missing, in one line.
    pub fn problems(&self) -> Option<String> {
        let all: Vec<&str> = [&self.error, &self.golden_error, &self.baseline_error]
            .into_iter()
            .filter_map(|e| e.as_deref())
            .collect();
        (!all.is_empty()).then(|| all.join("; "))
    }

    /// Adds one sample. `baseline` is the baseline's tensor, `baseline_float` its value before
    /// the QuantizeLinear (tie evidence), `golden` the reference activation.
    pub fn add(
        &mut self,
        target: &Tensor,
        quant: Option<&Quant>,
        golden: Option<&Tensor>,
        baseline: Option<&Tensor>,
        baseline_float: Option<&Tensor>,
    ) {
        if self.error.is_some() {
            return;
        }
        self.elements += target.len() as u64;
        // Each comparison stands alone: a missing reference tensor does not cost the baseline
        // comparison, and a figure against nothing is dropped rather than read as a match.
        if self.golden.is_some() {
            match golden {
                None => self.drop_golden("the reference run returned no counterpart".into()),
                Some(gold)
                    if gold
                        .shape
                        .iter()
                        .filter(|&&d| d != 1)
                        .ne(target.shape.iter().filter(|&&d| d != 1)) =>
                {
                    self.drop_golden(format!(
                        "shape {:?} against the reference's {:?}",
                        target.shape, gold.shape
                    ))
                }
                Some(gold) => {
                    let (out, reference) = (real_values(target, quant), real_values(gold, None));
                    self.note_range(&out, &reference);
                    if let Some(stats) = self.golden.as_mut() {
                        stats.update_f32(&out, &reference);
                    }
                }
            }
        }
        if self.baseline.is_some() {
            match baseline {
                None => self.drop_baseline("the baseline returned no such tensor".into()),
                Some(base) if base.shape != target.shape || base.dtype() != target.dtype() => {
                    self.drop_baseline(format!(
                        "{} {:?} against the baseline's {} {:?}",
                        target.dtype().name(),
                        target.shape,
                        base.dtype().name(),
                        base.shape
                    ))
                }
                Some(_) => {}
            }
        }
        if let (Some(agreement), Some(base)) = (self.baseline.as_mut(), baseline) {
            agreement.update(&target.data, &base.data);
            if quant.is_none() {
                let peak = (0..base.len())
                    .map(|i| base.data.get_f64(i).abs())
                    .filter(|v| v.is_finite());
                self.baseline_peak = peak.fold(self.baseline_peak, f64::max);
            }
            if let (Some(q), Some(f)) = (quant, baseline_float) {
                if f.len() == target.len() {
                    self.ties_known = true;
                    self.ties += one_lsb_ties(target, base, f, q);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_target_values_count_only_where_the_reference_is_finite() {
        let f = |v: &[f32]| Tensor::new(vec![v.len()], TensorData::Float32(v.to_vec())).unwrap();
        let mut acc = LayerAcc::new(true, false, false);
        let target = f(&[f32::INFINITY, f32::NAN, 1.0, f32::NAN, -3.0]);
        let golden = f(&[70000.0, 2.0, 1.0, f32::NAN, -90000.0]);
        acc.add(&target, None, Some(&golden), None, None);
        // inf and NaN against finite values count; a NaN against the reference's own NaN does not.
        assert_eq!(acc.nonfinite, 2);
        assert_eq!(acc.reference_peak, 90000.0);
    }

    fn codes(v: &[u8]) -> Tensor {
        Tensor::new(vec![v.len()], TensorData::Uint8(v.to_vec())).unwrap()
    }

    #[test]
    fn codes_are_counted_in_lsb_with_ties_from_the_baseline_value() {
        let q = Quant {
            scale: 0.5,
            zero_point: 128.0,
            elem_type: 2,
        };
        // Baseline values before rounding: 1.25 -> 2.5 + 128 = 130.5 (a tie), 1.0 -> 130.0,
        // 2.0 -> 132, 0.1 -> 128.2.
        let before = Tensor::new(vec![4], TensorData::Float32(vec![1.25, 1.0, 2.0, 0.1])).unwrap();
        let base = codes(&[130, 130, 132, 128]);
        let target = codes(&[131, 131, 135, 128]);
        let golden = Tensor::new(vec![4], TensorData::Float32(vec![1.25, 1.0, 2.0, 0.1])).unwrap();
        let mut acc = LayerAcc::new(true, true, true);
        acc.add(&target, Some(&q), Some(&golden), Some(&base), Some(&before));
        let a = acc.baseline.as_ref().unwrap();
        let c = a.codes.unwrap();
        assert_eq!((c.off_by_one, c.off_by_two, c.off_by_more, c.max_steps), (2, 0, 1, 3));
        assert_eq!(a.differing, Some(3));
        assert_eq!(acc.ties, 1);
        // Dequantized target: 1.5, 1.5, 3.5, 0 against 1.25, 1, 2, 0.1.
        let g = acc.golden.as_ref().unwrap();
        assert!((g.max_abs() - 1.5).abs() < 1e-12);
        let noise = 0.25f64.powi(2) + 0.5f64.powi(2) + 1.5f64.powi(2) + 0.1f64.powi(2);
        let signal = 1.25f64.powi(2) + 1.0 + 4.0 + 0.1f64.powi(2);
        assert!((g.sqnr_db() - 10.0 * (signal / noise).log10()).abs() < 1e-5);
    }
}
