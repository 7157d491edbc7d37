//! One step's logits against the reference's: KL divergence of their softmax and SQNR, the
//! figures a generation audit reports per step (and the LLM community judges quantization by),
//! and, for a text scored teacher-forced, what each side made of the token that came next.
//! Every figure is NaN (or absent) when a logit is not finite on either side, so a caller can
//! count such steps.

use super::sqnr_from_sums;

/// KL(p ‖ q) in nats of p = softmax(reference), q = softmax(target), in float64; NaN when a
/// logit is not finite or the lengths differ.
pub fn kl_divergence(reference: &[f32], target: &[f32]) -> f64 {
    if !comparable(reference, target) {
        return f64::NAN;
    }
    kl_of(&log_softmax(reference), &log_softmax(target))
}

/// KL(p ‖ q) of two distributions given as log-probabilities (at least 0: rounding can take a
/// sum of nearly equal terms just below it).
fn kl_of(lp: &[f64], lq: &[f64]) -> f64 {
    let kl: f64 = lp.iter().zip(lq).map(|(a, b)| a.exp() * (a - b)).sum();
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

/// One position of a text scored teacher-forced (llama.cpp's `--kl-divergence` figures): both
/// sides' next-token distributions, the softmax of the raw logits, against the token that came.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenFigures {
    /// KL(reference ‖ target) in nats.
    pub kld: f64,
    /// The target's probability of the token that came minus the reference's.
    pub delta_p: f64,
    /// `-ln p` of the token that came, under the reference and under the target.
    pub nll_reference: f64,
    pub nll_target: f64,
    /// Each side's most likely token (the first of equal maxima).
    pub reference_top: u32,
    pub target_top: u32,
    /// SQNR of the target's logits against the reference's, in dB.
    pub sqnr_db: f64,
}

impl TokenFigures {
    /// Whether both sides' most likely token is the same.
    pub fn same_top(&self) -> bool {
        self.reference_top == self.target_top
    }
}

/// What the two sides' logits say of the token `next` that came after them; `None` when a logit
/// is not finite, the lengths differ or `next` is outside them.
pub fn token_figures(reference: &[f32], target: &[f32], next: u32) -> Option<TokenFigures> {
    let at = next as usize;
    if !comparable(reference, target) || at >= reference.len() {
        return None;
    }
    let (lp, lq) = (log_softmax(reference), log_softmax(target));
    Some(TokenFigures {
        kld: kl_of(&lp, &lq),
        delta_p: lq[at].exp() - lp[at].exp(),
        nll_reference: -lp[at],
        nll_target: -lq[at],
        reference_top: top(reference),
        target_top: top(target),
        sqnr_db: sqnr_db(reference, target),
    })
}

/// The index of the largest value, the first of equal ones (the values are finite).
fn top(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
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

    #[test]
    fn a_token_is_scored_by_both_sides_probabilities_of_it() {
        // p = softmax([0, ln 3]) = [1/4, 3/4]; q = softmax([0, 0]) = [1/2, 1/2]; token 1 came.
        let f = token_figures(&[0.0, 3f32.ln()], &[0.0, 0.0], 1).unwrap();
        assert!((f.delta_p - (0.5 - 0.75)).abs() < 1e-7, "{}", f.delta_p);
        assert!((f.nll_reference - (4.0f64 / 3.0).ln()).abs() < 1e-7);
        assert!((f.nll_target - 2f64.ln()).abs() < 1e-12);
        // Equal logits: the first is the top; so the tops differ.
        assert_eq!((f.reference_top, f.target_top, f.same_top()), (1, 0, false));
        assert!(token_figures(&[0.0, 1.0], &[0.0, f32::NAN], 0).is_none());
        assert!(token_figures(&[0.0, 1.0], &[0.0, 1.0], 2).is_none());
    }
}
