//! Anytime-valid confidence sequences for a bounded mean, so that an eval may look after every
//! sample and stop as soon as its question is answered without the look inflating the error: the
//! betting confidence sequences of Waudby-Smith & Ramdas (2023, "Estimating means of bounded
//! random variables by betting", JRSS B), with the diversified-Kelly mixture of bets their §5
//! describes.
//!
//! For observations `x ∈ [lo, hi]` with mean `μ`, and a candidate `m`, each of `J` gamblers bets a
//! constant fraction `f_j = c · j / J` of its capital that the next observation falls below `m`
//! (the upper process: its capital grows when `μ < m`):
//!
//! `K⁺(m) = (1/J) Σ_j Π_i (1 + f_j (m − x_i) / (hi − m))`,
//!
//! and symmetrically `K⁻(m) = (1/J) Σ_j Π_i (1 + f_j (x_i − m) / (m − lo))` bets on falling above.
//! Under `μ ≥ m` (resp. `μ ≤ m`) each product has expectation at most 1 at every step, and so has
//! their average: a non-negative supermartingale, which by Ville's inequality ever reaches `1/α`
//! with probability at most `α`. So the one-sided bounds
//!
//! `upper_t = inf { m : K⁺_t(m) ≥ 1/α }` and `lower_t = sup { m : K⁻_t(m) ≥ 1/α }`
//!
//! hold at every sample size at once with probability `1 − α` each (coverage uniform over time):
//! stopping the moment a bound crosses a limit is not peeking. Both capitals grow with `m` moving
//! away from the observations, so a limit is decided by the capital at the limit itself (the
//! upper bound is at or under it exactly when `K⁺(limit) ≥ 1/α`), and a bound is found by
//! bisection when it is reported.
//!
//! The bets are constant, so a capital depends only on how many times each value was observed:
//! the bounds after `t` samples are the same for every order of them, and a resumed eval replays
//! its records into the same state.

/// Gamblers in the mixture.
const GAMBLERS: usize = 50;
/// The largest fraction of its capital a gambler stakes (all but 1%: one observation at the far
/// end of the range may not wipe the boldest gambler out).
const BOLDEST: f64 = 0.99;
/// Halvings of the bisections for a bound (to about 1e-15 of the range).
const HALVINGS: usize = 60;

/// What a sequence says of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The mean is shown below the limit.
    Below,
    /// The mean is shown above the limit.
    Above,
}

/// A confidence sequence for the mean of observations taking a few values in `[lo, hi]` (a
/// drop's `broken − fixed ∈ {−1, 0, 1}`, a correctness in `{0, 1}`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfidenceSequence {
    lo: f64,
    hi: f64,
    /// Each value observed and how many times.
    counts: Vec<(f64, u64)>,
    /// One-sided miscoverage of each bound.
    alpha: f64,
}

impl ConfidenceSequence {
    /// A sequence for observations in `[lo, hi]` whose bounds each miss the mean with probability
    /// at most `alpha`, uniformly over time.
    pub fn new(lo: f64, hi: f64, alpha: f64) -> ConfidenceSequence {
        ConfidenceSequence {
            lo,
            hi,
            counts: Vec::new(),
            alpha,
        }
    }

    /// Observations so far.
    pub fn len(&self) -> u64 {
        self.counts.iter().map(|(_, c)| c).sum()
    }

    /// Whether nothing was observed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds one observation (clamped to the range).
    pub fn push(&mut self, x: f64) {
        self.push_many(x, 1);
    }

    /// Adds `times` observations of `x` (clamped to the range).
    pub fn push_many(&mut self, x: f64, times: u64) {
        let x = x.clamp(self.lo, self.hi);
        match self.counts.iter_mut().find(|(v, _)| *v == x) {
            Some((_, c)) => *c += times,
            None => self.counts.push((x, times)),
        }
    }

    /// The one-sided upper bound of the mean (the range's top before any observation).
    pub fn upper(&self) -> f64 {
        self.bound(true)
    }

    /// The one-sided lower bound of the mean.
    pub fn lower(&self) -> f64 {
        self.bound(false)
    }

    /// Which side of `limit` the mean is shown to be on, if either: below when the upper process's
    /// capital at the limit reached `1/α` (the upper bound is at or under the limit), above when
    /// the lower one's did (the lower bound is at or over it).
    pub fn decides(&self, limit: f64) -> Option<Side> {
        let target = (1.0 / self.alpha).ln();
        if limit < self.hi && self.log_capital(limit, true) >= target {
            Some(Side::Below)
        } else if limit > self.lo && self.log_capital(limit, false) >= target {
            Some(Side::Above)
        } else {
            None
        }
    }

    /// The mean observed.
    pub fn mean(&self) -> f64 {
        let n = self.len();
        if n == 0 {
            return f64::NAN;
        }
        self.counts.iter().map(|(v, c)| v * *c as f64).sum::<f64>() / n as f64
    }

    /// `log K(m)` of the upper (`upward`) or lower process.
    fn log_capital(&self, m: f64, upward: bool) -> f64 {
        let width = if upward { self.hi - m } else { m - self.lo };
        if width <= 0.0 {
            return f64::NEG_INFINITY;
        }
        let logs: Vec<f64> = (1..=GAMBLERS)
            .map(|j| {
                let f = BOLDEST * j as f64 / GAMBLERS as f64;
                self.counts
                    .iter()
                    .map(|&(x, c)| {
                        let edge = if upward { m - x } else { x - m };
                        c as f64 * (f * edge / width).ln_1p()
                    })
                    .sum::<f64>()
            })
            .collect();
        let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if top == f64::NEG_INFINITY {
            return top;
        }
        top + (logs.iter().map(|l| (l - top).exp()).sum::<f64>() / GAMBLERS as f64).ln()
    }

    /// The bound of this sample size alone: where the capital reaches `1/α`, between the mean
    /// (where it cannot: each product is at most `exp(f Σ edge / width) ≤ 1` there) and the end
    /// of the range.
    fn bound(&self, upward: bool) -> f64 {
        let target = (1.0 / self.alpha).ln();
        let (mut inside, mut outside) = if upward {
            (self.mean(), self.hi)
        } else {
            (self.mean(), self.lo)
        };
        if inside.is_nan() {
            return outside;
        }
        for _ in 0..HALVINGS {
            let mid = 0.5 * (inside + outside);
            if self.log_capital(mid, upward) >= target {
                outside = mid;
            } else {
                inside = mid;
            }
        }
        outside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drops(broken: u64, fixed: u64, same: u64) -> ConfidenceSequence {
        let mut cs = ConfidenceSequence::new(-1.0, 1.0, 0.05);
        for (x, n) in [(1.0, broken), (-1.0, fixed), (0.0, same)] {
            for _ in 0..n {
                cs.push(x);
            }
        }
        cs
    }

    #[test]
    fn with_no_flip_the_capital_is_the_closed_form() {
        // Every observation 0, limit m: each gambler's capital is (1 + f m / (1 − m))^t, and
        // the average of the fifty reaches 20 first at t = 88 for m = 0.05 (by hand:
        // (1/50) Σ_j (1 + 0.99 j/50 · 0.05/0.95)^88 = 20.48, and 19.66 at t = 87).
        let mut cs = ConfidenceSequence::new(-1.0, 1.0, 0.05);
        let mut decided = None;
        for t in 1..=200u64 {
            cs.push(0.0);
            if decided.is_none() && cs.decides(0.05) == Some(Side::Below) {
                decided = Some(t);
            }
        }
        let by_hand = |t: i32| {
            (1..=50)
                .map(|j| (1.0 + 0.99 * f64::from(j) / 50.0 * 0.05 / 0.95).powi(t))
                .sum::<f64>()
                / 50.0
        };
        assert!(by_hand(87) < 20.0 && by_hand(88) >= 20.0);
        assert_eq!(decided, Some(88));
        assert!(cs.lower() < 0.0 && cs.upper() > 0.0);
    }

    #[test]
    fn bounds_hold_the_mean_and_agree_with_the_decision_at_a_limit() {
        let mut cs = ConfidenceSequence::new(-1.0, 1.0, 0.05);
        for k in 0..300u64 {
            cs.push(match k % 20 {
                0 => 1.0,
                7 => -1.0,
                _ => 0.0,
            });
            let (low, up) = (cs.lower(), cs.upper());
            assert!(low <= cs.mean() && cs.mean() <= up);
            // Just outside a bound (once the sample has one) the limit is decided; just inside it
            // is not.
            if up < 1.0 - 1e-6 && low > -1.0 + 1e-6 {
                assert_eq!(cs.decides(up + 1e-9), Some(Side::Below));
                assert_eq!(cs.decides(up - 1e-6), None);
                assert_eq!(cs.decides(low - 1e-9), Some(Side::Above));
            }
        }
        // The order of the observations does not change the bounds.
        assert_eq!(cs.upper(), drops(15, 15, 270).upper());
        assert_eq!(cs.lower(), drops(15, 15, 270).lower());
    }

    #[test]
    fn a_sequence_never_claims_more_than_a_fixed_sample_bound() {
        // Anytime validity costs width: with no flip in 300 samples the fixed-size score bound is
        // 0.89 points, the sequence's is wider; with as many fixed as broken the limit of one
        // point is decided neither way.
        let cs = drops(0, 0, 300);
        assert!(cs.upper() > super::super::paired::resolution(300));
        let cs = drops(11, 12, 177);
        assert_eq!(cs.decides(0.01), None);
        assert!(cs.upper() > 0.036 && cs.lower() < -0.046);
        // Many broken samples are shown above a small limit.
        let cs = drops(40, 0, 60);
        assert_eq!(cs.decides(0.05), Some(Side::Above));
    }

    #[test]
    fn the_error_rate_stays_under_alpha_when_the_mean_is_the_limit() {
        // Simulated drops with mean exactly at the limit (P(broken) = 0.15, P(fixed) = 0.10):
        // the sequence may wrongly say "below" at any of 400 looks in at most α of the runs.
        let mut state = 42u64;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let runs = 300;
        let mut wrong = 0;
        for _ in 0..runs {
            let mut cs = ConfidenceSequence::new(-1.0, 1.0, 0.05);
            for _ in 0..400 {
                let u = next();
                cs.push(if u < 0.15 {
                    1.0
                } else if u < 0.25 {
                    -1.0
                } else {
                    0.0
                });
                if cs.decides(0.05) == Some(Side::Below) {
                    wrong += 1;
                    break;
                }
            }
        }
        assert!(wrong <= runs / 20, "{wrong} of {runs}");
    }
}
