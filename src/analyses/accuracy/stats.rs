//! The statistics an evaluator accepts, computed from per-sample records only (so a sharded run
//! and a merged one give the same figures): Wilson intervals for proportions, percentile
//! bootstrap intervals (for figures no score interval fits: error rates, F1, the CER's drop),
//! McNemar's exact test on the discordant pairs. Paired accuracy drops are in `paired`. Every
//! resampling draws from the tool's own seeded generator (`docs/eval.md` specifies it), so the same
//! records give the same figures on every machine.

use crate::data::inputs::prng::{mix, SplitMix64};

/// The normal quantile of a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The normal quantile of a one-sided 95% bound (and of a two-sided 90% interval).
pub const Z90: f64 = 1.644_853_626_951_472_2;

/// The Wilson score interval of `k` successes in `n` trials at `z` (95%: [`Z95`]); `(0, 1)` for
/// no trial.
pub fn wilson(k: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The one-sided 95% lower bound of a proportion: the Wilson bound at the one-sided quantile
/// (what `min_accuracy` gates, so one lucky sample does not show 99%).
pub fn wilson_lower(k: u64, n: u64) -> f64 {
    if n == 0 {
        return f64::NAN;
    }
    wilson(k, n, Z90).0
}

/// `ln(n!)` for the exact tests, exact to double precision for every `n` a dataset holds.
fn ln_factorial(n: u64) -> f64 {
    libm::lgamma(n as f64 + 1.0)
}

/// McNemar's exact test: the two-sided p-value of `b` and `c` discordant pairs under the null
/// hypothesis that either kind is equally likely (a binomial test of `min(b, c)` in `b + c`
/// trials at one half, doubled, at most 1).
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    let ln_half_n = n as f64 * std::f64::consts::LN_2;
    let tail: f64 = (0..=k)
        .map(|i| (ln_factorial(n) - ln_factorial(i) - ln_factorial(n - i) - ln_half_n).exp())
        .sum();
    (2.0 * tail).min(1.0)
}

/// The rank (1-based, of `n` values sorted ascending) whose value is a one-sided upper
/// confidence bound of the `q`-quantile (0..1) at 1 − `alpha`, assuming nothing of the values'
/// distribution: the smallest `k` with P(Binomial(n, q) ≥ k) ≤ `alpha` (at least `k` values below
/// the quantile is then that unlikely). `None` when no rank is (too few values: below 299 for
/// the 99th percentile at 95%).
pub fn quantile_upper_rank(n: usize, q: f64, alpha: f64) -> Option<usize> {
    let nf = n as f64;
    let ln_pmf = |j: usize| {
        let j = j as f64;
        ln_factorial(n as u64) - ln_factorial(j as u64) - ln_factorial((nf - j) as u64)
            + j * q.ln()
            + (nf - j) * (1.0 - q).ln()
    };
    // Walk down from n, the upper tail growing, to the last rank whose tail is within alpha.
    let mut tail = 0.0;
    let mut rank = None;
    for j in (1..=n).rev() {
        tail += ln_pmf(j).exp();
        if tail > alpha {
            break;
        }
        rank = Some(j);
    }
    rank
}

/// The generator of one bootstrap: a SplitMix64 stream whose state is `mix(seed)`.
pub fn resampler(seed: u64) -> SplitMix64 {
    SplitMix64::from_state(mix(seed))
}

/// One resample's indices: `n` draws of `floor(u · n)` with `u` the stream's next double.
pub fn draw(rng: &mut SplitMix64, n: usize, into: &mut Vec<usize>) {
    into.clear();
    into.extend((0..n).map(|_| ((rng.next_unit() * n as f64) as usize).min(n - 1)));
}

/// The `q`-th percentile (0..100) of `values` as NumPy's default (linear interpolation between
/// closest ranks) computes it; NaN when empty.
pub fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let pos = q / 100.0 * (values.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    values[lo] + (values[hi] - values[lo]) * (pos - lo as f64)
}

/// The median of the values that are not NaN (the mean of the middle two of an even count, as
/// NumPy's; infinities count, and two equal ones give themselves); `None` when none is left. The
/// one median of the tool: every report's medians are this.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        let (a, b) = (v[n / 2 - 1], v[n / 2]);
        if a == b {
            a
        } else {
            (a + b) / 2.0
        }
    })
}

/// A bootstrap's resampled statistic: its percentiles of interest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The 2.5th and 97.5th percentiles: the 95% interval.
    pub lo95: f64,
    pub hi95: f64,
    /// The 5th and 95th percentiles: the 90% interval, and the one-sided 95% bounds.
    pub lo90: f64,
    pub hi90: f64,
}

/// The percentile bootstrap of `statistic` over `n` samples: `resamples` resamples of the sample
/// indices drawn from `seed`. `statistic` gets each resample's indices.
pub fn bootstrap(n: usize, resamples: usize, seed: u64, statistic: &mut dyn FnMut(&[usize]) -> f64) -> Spread {
    if n == 0 || resamples == 0 {
        return Spread {
            lo95: f64::NAN,
            hi95: f64::NAN,
            lo90: f64::NAN,
            hi90: f64::NAN,
        };
    }
    let mut rng = resampler(seed);
    let mut indices = Vec::with_capacity(n);
    let mut values: Vec<f64> = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        draw(&mut rng, n, &mut indices);
        values.push(statistic(&indices));
    }
    Spread {
        lo95: percentile(&mut values, 2.5),
        hi95: percentile(&mut values, 97.5),
        lo90: percentile(&mut values, 5.0),
        hi90: percentile(&mut values, 95.0),
    }
}

/// The mean of `values` over `indices`.
pub fn mean_at(values: &[f64], indices: &[usize]) -> f64 {
    if indices.is_empty() {
        return f64::NAN;
    }
    indices.iter().map(|&i| values[i]).sum::<f64>() / indices.len() as f64
}

/// A ratio of sums over `indices` (`Σ num / Σ den`, as a character error rate pools edits over
/// characters); NaN when the denominator is 0.
pub fn ratio_at(num: &[f64], den: &[f64], indices: &[usize]) -> f64 {
    let (n, d) = indices.iter().fold((0.0, 0.0), |(n, d), &i| (n + num[i], d + den[i]));
    if d == 0.0 {
        f64::NAN
    } else {
        n / d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quantile_bound_rank_is_the_binomial_tails() {
        // 0.99^299 = 0.0495 ≤ 0.05 < 0.99^298; the larger ranks from Python's exact binomial sums.
        assert_eq!(quantile_upper_rank(299, 0.99, 0.05), Some(299));
        assert_eq!(quantile_upper_rank(298, 0.99, 0.05), None);
        assert_eq!(quantile_upper_rank(1000, 0.99, 0.05), Some(996));
        assert_eq!(quantile_upper_rank(5000, 0.99, 0.05), Some(4962));
    }

    #[test]
    fn wilson_matches_hand_worked_intervals() {
        // 8 of 10 at z = 1.96: centre (0.8 + 0.19208) / 1.38416, half-width 1.96 · sqrt(0.016 +
        // 0.009604) / 1.38416 (Wilson 1927; the same figures as statsmodels' proportion_confint).
        let (lo, hi) = wilson(8, 10, Z95);
        assert!(
            (lo - 0.490_162).abs() < 1e-5 && (hi - 0.943_317).abs() < 1e-5,
            "{lo} {hi}"
        );
        let (lo, hi) = wilson(0, 20, Z95);
        assert!(lo == 0.0 && (hi - 0.161_125).abs() < 1e-5, "{hi}");
        assert_eq!(wilson(0, 0, Z95), (0.0, 1.0));
    }

    #[test]
    fn mcnemar_exact_matches_small_tables_by_hand() {
        // b = 1, c = 6: 2 · (C(7,0) + C(7,1)) / 2^7 = 2 · 8 / 128 = 0.125.
        assert!((mcnemar_exact(1, 6) - 0.125).abs() < 1e-12);
        // b = 0, c = 5: 2 / 32.
        assert!((mcnemar_exact(5, 0) - 0.0625).abs() < 1e-12);
        // Balanced tables are as likely as can be.
        assert_eq!(mcnemar_exact(3, 3), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // b = 2, c = 12: 2 · (1 + 14 + 91) / 16384.
        assert!((mcnemar_exact(2, 12) - 212.0 / 16384.0).abs() < 1e-12);
    }

    #[test]
    fn the_median_skips_nan_and_keeps_infinities() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[3.0, f64::INFINITY, 1.0]), Some(3.0));
        assert_eq!(median(&[1.0, 2.0, f64::NAN, 4.0, 8.0]), Some(3.0));
        assert_eq!(median(&[f64::INFINITY, f64::INFINITY]), Some(f64::INFINITY));
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn percentiles_interpolate_as_numpy_does() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        // np.percentile([1, 2, 3, 4], 2.5) = 1 + 0.075 · 1.
        assert!((percentile(&mut v, 2.5) - 1.075).abs() < 1e-12);
        assert!((percentile(&mut v, 97.5) - 3.925).abs() < 1e-12);
        assert_eq!(percentile(&mut v, 50.0), 2.5);
    }

    #[test]
    fn a_bootstrap_is_the_same_for_the_same_seed_and_covers_the_mean() {
        let x: Vec<f64> = (0..200).map(|i| f64::from(i % 2 == 0)).collect();
        let mut mean = |idx: &[usize]| mean_at(&x, idx);
        let a = bootstrap(x.len(), 2000, 7, &mut mean);
        let b = bootstrap(x.len(), 2000, 7, &mut |idx: &[usize]| mean_at(&x, idx));
        assert_eq!(a, b);
        assert!(
            a.lo95 < 0.5 && 0.5 < a.hi95 && a.lo95 <= a.lo90 && a.hi90 <= a.hi95,
            "{a:?}"
        );
        // The 95% interval of a proportion of 0.5 in 200 is about ±0.07.
        assert!((a.hi95 - a.lo95 - 0.139).abs() < 0.02, "{a:?}");
    }
}
