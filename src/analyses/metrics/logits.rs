//! One step's logits against the reference's: KL divergence of their softmax and SQNR, the
//! figures a generation audit reports per step (and the LLM community judges quantization by).
//! Both are NaN when a logit is not finite on either side, so a caller can count such steps.

use super::sqnr_from_sums;

/// KL(p ‖ q) in nats of p = softmax(reference), q = softmax(target), in float64; NaN when a
/// logit is not finite or the lengths differ.
pub fn kl_divergence(reference: &[f32], target: &[f32]) -> f64 {
    if !comparable(reference, target) {
        return f64::NAN;
    }
    let (lp, lq) = (log_softmax(reference), log_softmax(target));
    let kl: f64 = lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum();
    kl.max(0.0)
}

/// `ln softmax(x)` in float64, through the largest logit so no exponential overflows.
pub fn log_softmax(x: &[f32]) -> Vec<f64> {
    let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let sum: f64 = x.iter().map(|&v| (f64::from(v) - m).exp()).sum();
    let lse = m + sum.ln();
    x.iter().map(|&v| f64::from(v) - lse).collect()
}

/// The SQNR of the target's logits against the reference's, in dB; +inf when equal, NaN when
/// not comparable (a logit not finite, lengths that differ).
pub fn sqnr_db(reference: &[f32], target: &[f32]) -> f64 {
    if !comparable(reference, target) {
        return f64::NAN;
    }
    let (mut signal, mut noise) = (0.0f64, 0.0f64);
    for (&r, &t) in reference.iter().zip(target) {
        signal += f64::from(r) * f64::from(r);
        noise += (f64::from(t) - f64::from(r)).powi(2);
    }
    sqnr_from_sums(signal, noise)
}

/// Whether two logit vectors can be compared: one length, every value finite.
fn comparable(reference: &[f32], target: &[f32]) -> bool {
    reference.len() == target.len() && reference.iter().chain(target).all(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_and_sqnr_match_hand_worked_values() {
        // p = softmax([0, ln 3]) = [1/4, 3/4]; q = softmax([0, 0]) = [1/2, 1/2].
        let kl = kl_divergence(&[0.0, 3f32.ln()], &[0.0, 0.0]);
        let want = 0.25 * (0.5f64).ln() + 0.75 * (1.5f64).ln();
        assert!((kl - want).abs() < 1e-7, "{kl} vs {want}");
        // signal 1² + 2² = 5, noise 0.1² + 0 = 0.01: 10·log10(500).
        let s = sqnr_db(&[1.0, 2.0], &[1.1, 2.0]);
        assert!((s - 10.0 * 500f64.log10()).abs() < 1e-4, "{s}");
        assert_eq!(sqnr_db(&[1.0], &[1.0]), f64::INFINITY);
        assert!(kl_divergence(&[f32::NAN], &[0.0]).is_nan());
        assert!(sqnr_db(&[1.0, f32::INFINITY], &[1.0, 1.0]).is_nan());
    }
}
