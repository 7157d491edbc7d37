//! The drop of a paired proportion (accuracy lost by a target against the run it is compared with,
//! on the same samples) bounded by Tango's asymptotic score interval (Tango 1998; the method
//! Fagerland, Lydersen & Laake 2014 recommend for the difference of paired proportions), and the
//! sample sizes that interval needs to show a limit (Nam 1997, the same score statistic).
//!
//! Only the discordant pairs carry information: `broken` (the other run right, the target wrong)
//! and `fixed` (the reverse), out of `n` pairs. The drop is `δ = (broken − fixed) / n`. Unlike a
//! percentile bootstrap, which collapses to a zero-width interval when no pair is discordant, the
//! score interval keeps the width the sample size allows: with no flip in 4 samples the one-sided
//! 95% upper bound is 40.35 points, in 300 samples 0.89.

pub use super::stats::Z90;

/// Tango's score statistic of the hypothesis that the drop is `delta`, for `broken` and `fixed`
/// discordant pairs out of `n` (counts may be expected values, hence floats):
///
/// `T(δ) = (b − f − nδ) / sqrt(n (2 p̃ + δ (1 − δ)))`, where `p̃` is the maximum-likelihood
/// estimate of the probability of a `fixed` pair under the hypothesis, the positive root of
/// `2n p² + W p − f δ (1 − δ) = 0` with `W = −b − f + (2n − b + f) δ`.
pub fn score(broken: f64, fixed: f64, n: f64, delta: f64) -> f64 {
    let w = -broken - fixed + (2.0 * n - broken + fixed) * delta;
    let c = fixed * delta * (1.0 - delta);
    let disc = (w * w + 8.0 * n * c).max(0.0).sqrt();
    // The root written so that no two close numbers are subtracted.
    let p_fixed = if w > 0.0 {
        2.0 * c / (w + disc)
    } else {
        (disc - w) / (4.0 * n)
    };
    let variance = n * (2.0 * p_fixed.max(0.0) + delta * (1.0 - delta));
    (broken - fixed - n * delta) / variance.sqrt()
}

/// The bound where the score statistic reaches `-z` above the estimate (`upper`) or `+z` below
/// it: the statistic falls as the hypothesised drop rises, so bisection finds the one crossing.
fn crossing(broken: f64, fixed: f64, n: f64, z: f64, upper: bool) -> f64 {
    let estimate = (broken - fixed) / n;
    let (mut inside, mut outside) = if upper { (estimate, 1.0) } else { (estimate, -1.0) };
    if inside == outside {
        return inside;
    }
    // 200 halvings reach the spacing of doubles near any bound in [-1, 1].
    for _ in 0..200 {
        let mid = 0.5 * (inside + outside);
        if mid == inside || mid == outside {
            break;
        }
        let t = score(broken, fixed, n, mid);
        let beyond = if upper { t <= -z } else { t >= z };
        if beyond {
            outside = mid;
        } else {
            inside = mid;
        }
    }
    outside
}

/// A paired drop's score bounds, as fractions (multiply by 100 for points).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DropBounds {
    /// The estimate, `(broken − fixed) / n`.
    pub estimate: f64,
    /// The two-sided 95% interval.
    pub lo95: f64,
    pub hi95: f64,
    /// The one-sided 95% bounds (the two-sided 90% interval): what non-inferiority and
    /// equivalence test.
    pub lo90: f64,
    pub hi90: f64,
}

/// Tango's score bounds of the drop for `broken` and `fixed` discordant pairs out of `n`; `None`
/// without a pair.
pub fn drop_bounds(broken: u64, fixed: u64, n: u64) -> Option<DropBounds> {
    if n == 0 || broken + fixed > n {
        return None;
    }
    let (b, f, n) = (broken as f64, fixed as f64, n as f64);
    Some(DropBounds {
        estimate: (b - f) / n,
        lo95: crossing(b, f, n, super::stats::Z95, false),
        hi95: crossing(b, f, n, super::stats::Z95, true),
        lo90: crossing(b, f, n, Z90, false),
        hi90: crossing(b, f, n, Z90, true),
    })
}

/// The smallest drop `n` pairs can rule out: the one-sided 95% upper bound when no pair is
/// discordant, `z² / (n + z²)` (what a sample of that size could show at best).
pub fn resolution(n: u64) -> f64 {
    let z2 = Z90 * Z90;
    z2 / (n as f64 + z2)
}

/// The pairs needed for the one-sided 95% upper bound of the drop to fall within `limit` (a
/// fraction), when pairs break with probability `broken` and are fixed with probability `fixed`,
/// with probability `power` (0.5: the bound of the expected counts meets the limit).
///
/// Nam's (1997) sample size for the score test of non-inferiority in matched pairs:
/// `n = (z_α sqrt(w₀) + z_β sqrt(w₁))² / (limit − δ)²`, with `δ = broken − fixed`,
/// `w₁ = broken + fixed − δ²` the variance of a pair's difference, and `w₀ = 2 p̃ + limit (1 − limit)` its
/// variance under the hypothesis that the drop is the limit (`p̃` as in [`score`], from the
/// expected proportions). `None` when no sample size shows it (the expected drop is at or beyond
/// the limit).
pub fn samples_needed(broken: f64, fixed: f64, limit: f64, power: f64) -> Option<u64> {
    let delta = broken - fixed;
    let valid = |p: f64| p.is_finite() && (0.0..=1.0).contains(&p);
    if !(valid(broken) && valid(fixed) && broken + fixed <= 1.0 && limit > 0.0 && limit < 1.0) {
        return None;
    }
    // A drop at the limit (to rounding) is shown by no sample size.
    if delta >= limit - 1e-12 || !(0.0..1.0).contains(&power) {
        return None;
    }
    let w = -broken - fixed + (2.0 - broken + fixed) * limit;
    let c = fixed * limit * (1.0 - limit);
    let disc = (w * w + 8.0 * c).max(0.0).sqrt();
    let p_fixed = if w > 0.0 {
        2.0 * c / (w + disc)
    } else {
        (disc - w) / 4.0
    };
    let w0 = 2.0 * p_fixed + limit * (1.0 - limit);
    let w1 = (broken + fixed - delta * delta).max(0.0);
    let z_beta = if power <= 0.5 { 0.0 } else { normal_quantile(power) };
    let n = (Z90 * w0.sqrt() + z_beta * w1.sqrt()).powi(2) / (limit - delta).powi(2);
    // Beyond a trillion samples the answer is "never" in practice.
    (n < 1e12).then(|| n.ceil().max(1.0) as u64)
}

/// The standard normal quantile of `p` in (0, 1), by bisection on the complementary error
/// function (accurate to the doubles' spacing; used for a handful of powers).
pub fn normal_quantile(p: f64) -> f64 {
    let cdf = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
    let (mut lo, mut hi) = (-40.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds in points, to the precision the table gives them.
    fn upper_points(broken: u64, fixed: u64, n: u64) -> f64 {
        100.0 * drop_bounds(broken, fixed, n).unwrap().hi90
    }

    #[test]
    fn no_flip_bounds_are_the_closed_form_and_the_published_figures() {
        // With no discordant pair the statistic is −sqrt(nδ / (1 − δ)), so the bound is
        // z² / (n + z²): 2.7055 / 6.7055 at n = 4.
        for n in [1u64, 4, 20, 300, 10_000] {
            let closed = resolution(n);
            let got = drop_bounds(0, 0, n).unwrap().hi90;
            assert!((got - closed).abs() < 1e-12, "n {n}: {got} vs {closed}");
        }
        assert!((upper_points(0, 0, 4) - 40.35).abs() < 0.005);
        assert!((upper_points(0, 0, 20) - 11.92).abs() < 0.005);
        assert!((upper_points(0, 0, 300) - 0.89).abs() < 0.005);
    }

    #[test]
    fn bounds_match_scipy_root_finding_on_the_score_statistic() {
        // scipy.optimize.brentq on T(δ) ± z, with p̃ checked against a numerical maximisation of
        // the restricted multinomial likelihood (tests/data/tango_check.py prints these).
        let b = drop_bounds(11, 12, 200).unwrap();
        assert!((b.estimate + 0.005).abs() < 1e-15);
        assert!((100.0 * b.hi90 - 3.597_199_162_559).abs() < 1e-6, "{b:?}");
        assert!((100.0 * b.hi95 - 4.459_072_087_413).abs() < 1e-6, "{b:?}");
        assert!((100.0 * b.lo95 + 5.502_383_662_822).abs() < 1e-6, "{b:?}");
        let b = drop_bounds(7, 1, 21).unwrap();
        assert!((b.hi95 - 0.517_232_276_421).abs() < 1e-9, "{b:?}");
        assert!((b.lo95 - 0.026_003_032_481).abs() < 1e-9, "{b:?}");
        assert!((b.lo90 - 0.074_630_768_476).abs() < 1e-9, "{b:?}");
        // All pairs broken: the drop is exactly 1.
        let all = drop_bounds(5, 0, 5).unwrap();
        assert_eq!((all.estimate, all.hi90), (1.0, 1.0));
        assert!(drop_bounds(0, 0, 0).is_none());
    }

    #[test]
    fn the_bound_rises_with_broken_pairs_and_falls_with_fixed_ones() {
        for n in [10u64, 60] {
            for broken in 0..n / 2 {
                for fixed in 0..n / 2 {
                    let here = drop_bounds(broken, fixed, n).unwrap().hi90;
                    let more_broken = drop_bounds(broken + 1, fixed, n).unwrap().hi90;
                    let more_fixed = drop_bounds(broken, fixed + 1, n).unwrap().hi90;
                    assert!(more_broken >= here && more_fixed <= here, "{broken} {fixed} {n}");
                }
            }
        }
    }

    #[test]
    fn sample_sizes_meet_the_limit_they_were_sized_for() {
        // No flip expected: the bound of n pairs with none discordant is z²/(n + z²), so n =
        // z²(1 − M)/M: 268 for one point.
        assert_eq!(samples_needed(0.0, 0.0, 0.01, 0.5), Some(268));
        assert!(resolution(268) <= 0.01 && resolution(267) > 0.01);
        // At even odds the expected counts' bound lands on the limit.
        let n = samples_needed(0.02, 0.01, 0.05, 0.5).unwrap();
        let at = |n: u64| {
            let (b, f) = (0.02 * n as f64, 0.01 * n as f64);
            crossing(b, f, n as f64, Z90, true)
        };
        assert!(at(n) <= 0.05 && at(n - 1) > 0.05 - 1e-3, "{n}");
        // More power costs samples; a drop at the limit is never shown.
        assert!(samples_needed(0.02, 0.01, 0.05, 0.8).unwrap() > n);
        assert_eq!(samples_needed(0.06, 0.01, 0.05, 0.8), None);
        assert!((normal_quantile(0.8) - 0.841_621_233_572_914).abs() < 1e-12);
        assert!((normal_quantile(0.95) - Z90).abs() < 1e-12);
    }
}
