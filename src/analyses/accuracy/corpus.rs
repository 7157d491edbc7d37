//! Corpus drift (`eval SPEC.toml --task score`): a target's next-token distributions against the
//! reference's at every position of a text, teacher-forced, summed up as llama.cpp's
//! `llama-perplexity --kl-divergence` does (mean KLD with its standard error and percentiles, Δp,
//! the same top token, both perplexities and their ratio), a curve by position in the window,
//! and the bounds a gate holds to its limits. The positions of one window are not independent
//! samples, so every bound resamples whole windows.

use super::stats::{bootstrap, percentile, quantile_upper_rank, wilson, wilson_lower, Spread, Z95};
use super::StatOptions;
use crate::analyses::metrics::logits::TokenFigures;
use crate::report::common::Num;
use crate::report::generation::{
    CorpusBounds, CorpusFigures, DeltaP, KldFigures, Perplexity, PositionCurve, SameTop, WindowFigures, WorstPosition,
};

/// One position of a window as a target read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Position {
    /// Both sides' logits finite: its figures.
    Scored(TokenFigures),
    /// The target's logits hold a value that is not finite (the reference's are finite).
    NotFinite,
    /// The reference's logits hold a value that is not finite: no target is scored here.
    Unscored,
}

/// A window as a target read it: its id, the tokens that came after each position (window
/// tokens 1..n), each position, and why it was not fed to its end (left out of the figures).
pub struct Window<'a> {
    pub id: &'a str,
    pub next: &'a [u32],
    pub positions: Vec<Position>,
    pub error: Option<String>,
}

impl Window<'_> {
    fn scored(&self) -> impl Iterator<Item = (usize, &TokenFigures)> {
        self.positions.iter().enumerate().filter_map(|(j, p)| match p {
            Position::Scored(f) => Some((j, f)),
            _ => None,
        })
    }

    fn not_finite(&self) -> usize {
        self.positions.iter().filter(|p| **p == Position::NotFinite).count()
    }
}

/// The fewest windows a bootstrap over windows can resample into more than one corpus.
const MIN_WINDOWS: usize = 2;

/// How many times the level before it a position's mean KLD must reach to be a jump.
const JUMP: f64 = 3.0;

/// The least mean KLD a jump reaches, in nats: below the best quantizations' mean (llama.cpp's
/// q8_0 of Llama-3-8B: 0.0014), so float rounding between two nearly equal runs names none.
const JUMP_FLOOR: f64 = 1e-4;

/// A target's corpus figures over the windows it fed to the end; `spell` gives a token's text.
pub fn figures(windows: &[Window<'_>], stats: &StatOptions, spell: &dyn Fn(u32) -> String) -> CorpusFigures {
    let done: Vec<&Window<'_>> = windows.iter().filter(|w| w.error.is_none()).collect();
    let all: Vec<&TokenFigures> = done.iter().flat_map(|w| w.scored().map(|(_, f)| f)).collect();
    let col = |f: &dyn Fn(&TokenFigures) -> f64| all.iter().map(|t| f(t)).collect::<Vec<f64>>();
    let kld = col(&|t| t.kld);
    let dp = col(&|t| t.delta_p);
    let ln_ratio = col(&|t| t.nll_target - t.nll_reference);
    let same = all.iter().filter(|t| t.same_top()).count();
    let n = all.len();
    let nonfinite: usize = done.iter().map(|w| w.not_finite()).sum();
    let (lo, hi) = wilson(same as u64, n as u64, Z95);
    let (ln_mean, ln_se) = (mean(&ln_ratio), standard_error(&ln_ratio));
    let by_position = curve(&done);
    CorpusFigures {
        windows: done.len(),
        positions: n,
        nonfinite_positions: nonfinite,
        kld: KldFigures {
            mean: Num(mean(&kld)),
            mean_se: Num(standard_error(&kld)),
            median: Num(percentile(&mut kld.clone(), 50.0)),
            p90: Num(percentile(&mut kld.clone(), 90.0)),
            p99: Num(percentile(&mut kld.clone(), 99.0)),
            p999: Num(percentile(&mut kld.clone(), 99.9)),
            max: Num(kld.iter().copied().fold(f64::NAN, f64::max)),
        },
        delta_p: DeltaP {
            mean: Num(mean(&dp)),
            mean_se: Num(standard_error(&dp)),
            rms: Num(mean(&dp.iter().map(|v| v * v).collect::<Vec<_>>()).sqrt()),
            p1: Num(percentile(&mut dp.clone(), 1.0)),
            p99: Num(percentile(&mut dp.clone(), 99.0)),
        },
        same_top: SameTop {
            count: same,
            share: Num(if n == 0 { f64::NAN } else { same as f64 / n as f64 }),
            interval: if n == 0 { [Num(f64::NAN); 2] } else { [Num(lo), Num(hi)] },
        },
        perplexity: Perplexity {
            reference: Num(perplexity(&col(&|t| t.nll_reference))),
            target: Num(perplexity(&col(&|t| t.nll_target))),
            ln_ratio: Num(ln_mean),
            ln_ratio_se: Num(ln_se),
            ln_ratio_interval: [Num(ln_mean - Z95 * ln_se), Num(ln_mean + Z95 * ln_se)],
        },
        bounds: bounds(&done, (same, n, nonfinite), stats),
        jumps: jumps(&by_position.iter().map(|p| p.mean_kld.0).collect::<Vec<_>>()),
        by_position,
        rows: windows.iter().map(|w| window_row(w, spell)).collect(),
    }
}

/// The positions whose level passes [`JUMP`] times both the one before and the median of all
/// before, and [`JUMP_FLOOR`] (a step up is named where it starts, a lone spike where it is).
pub fn jumps(levels: &[f64]) -> Vec<usize> {
    (1..levels.len())
        .filter(|&j| {
            let before = super::stats::median(&levels[..j]).unwrap_or(f64::NAN);
            let v = levels[j];
            v >= JUMP_FLOOR && v > JUMP * levels[j - 1] && v > JUMP * before
        })
        .collect()
}

/// Perplexity: `exp` of the mean `-ln p` of the tokens that came; NaN over none.
pub fn perplexity(nll: &[f64]) -> f64 {
    mean(nll).exp()
}

/// The mean of the values; NaN when there are none.
fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        f64::NAN
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// The mean's standard error: the sample standard deviation (ddof 1) over √n; NaN below 2 values.
fn standard_error(values: &[f64]) -> f64 {
    let n = values.len();
    if n < 2 {
        return f64::NAN;
    }
    let m = mean(values);
    let ss: f64 = values.iter().map(|v| (v - m) * (v - m)).sum();
    (ss / (n - 1) as f64 / n as f64).sqrt()
}

/// Per window: its positions' sums of each figure (what a resample of windows adds up).
struct WindowSums {
    count: f64,
    kld: f64,
    same: f64,
    ln_ratio: f64,
    klds: Vec<f64>,
}

/// The gate's bounds, from a bootstrap over the windows (the stats' seed and resamples), each
/// one-sided 95%; NaN, with why, where the corpus cannot bound a figure.
fn bounds(done: &[&Window<'_>], (same, n, nonfinite): (usize, usize, usize), stats: &StatOptions) -> CorpusBounds {
    let nan = |why: String| CorpusBounds {
        kld_mean_upper: Num(f64::NAN),
        kld_p99_upper: Num(f64::NAN),
        same_top_lower: Num(f64::NAN),
        ppl_ratio_upper: Num(f64::NAN),
        unbounded: Some(why),
    };
    if nonfinite > 0 {
        return nan(format!(
            "{nonfinite} positions' logits are not finite: no figure over the others bounds the target"
        ));
    }
    if done.len() < MIN_WINDOWS {
        return nan(
            "one window cannot bound a corpus figure (its positions are not independent samples): score two windows or more".into(),
        );
    }
    let sums: Vec<WindowSums> = done.iter().map(|w| window_sums(w)).collect();
    let over = |f: &dyn Fn(&WindowSums) -> f64| -> Spread {
        bootstrap(sums.len(), stats.resamples, stats.seed, &mut |idx| {
            let (num, den) = idx
                .iter()
                .fold((0.0, 0.0), |(a, b), &i| (a + f(&sums[i]), b + sums[i].count));
            if den == 0.0 {
                f64::NAN
            } else {
                num / den
            }
        })
    };
    let kld_mean = over(&|s| s.kld);
    let same_share = over(&|s| s.same);
    let ln_ratio = over(&|s| s.ln_ratio);
    let mut pooled = Vec::new();
    let p99 = bootstrap(sums.len(), stats.resamples, stats.seed, &mut |idx| {
        pooled.clear();
        for &i in idx {
            pooled.extend_from_slice(&sums[i].klds);
        }
        percentile(&mut pooled, 99.0)
    });
    let mut sorted: Vec<f64> = sums.iter().flat_map(|s| s.klds.iter().copied()).collect();
    sorted.sort_by(f64::total_cmp);
    let order_bound = quantile_upper_rank(sorted.len(), 0.99, 0.05).map(|k| sorted[k - 1]);
    CorpusBounds {
        kld_mean_upper: Num(kld_mean.hi90),
        kld_p99_upper: Num(order_bound.map_or(f64::NAN, |b| b.max(p99.hi90))),
        same_top_lower: Num(same_share.lo90.min(wilson_lower(same as u64, n as u64))),
        ppl_ratio_upper: Num(ln_ratio.hi90.exp()),
        unbounded: order_bound.is_none().then(|| {
            format!("{n} positions cannot bound the 99th percentile KLD (299 or more can, whatever its distribution)")
        }),
    }
}

fn window_sums(w: &Window<'_>) -> WindowSums {
    let mut s = WindowSums {
        count: 0.0,
        kld: 0.0,
        same: 0.0,
        ln_ratio: 0.0,
        klds: Vec::new(),
    };
    for (_, f) in w.scored() {
        s.count += 1.0;
        s.kld += f.kld;
        s.same += f64::from(u8::from(f.same_top()));
        s.ln_ratio += f.nll_target - f.nll_reference;
        s.klds.push(f.kld);
    }
    s
}

/// Mean KLD and the same-top share at each position of the window, over the windows scored there.
fn curve(done: &[&Window<'_>]) -> Vec<PositionCurve> {
    let longest = done.iter().map(|w| w.positions.len()).max().unwrap_or(0);
    (0..longest)
        .map(|j| {
            let at: Vec<&TokenFigures> = done
                .iter()
                .filter_map(|w| match w.positions.get(j) {
                    Some(Position::Scored(f)) => Some(f),
                    _ => None,
                })
                .collect();
            let k = at.len() as f64;
            PositionCurve {
                position: j,
                windows: at.len(),
                mean_kld: Num(at.iter().map(|f| f.kld).sum::<f64>() / k),
                same_top: Num(at.iter().filter(|f| f.same_top()).count() as f64 / k),
            }
        })
        .collect()
}

/// One window's row: its means and its worst position, spelled.
fn window_row(w: &Window<'_>, spell: &dyn Fn(u32) -> String) -> WindowFigures {
    let s = window_sums(w);
    let worst = w
        .scored()
        .max_by(|a, b| a.1.kld.total_cmp(&b.1.kld))
        .map(|(j, f)| WorstPosition {
            position: j,
            kld: Num(f.kld),
            next_piece: w.next.get(j).map_or_else(String::new, |&t| spell(t)),
            reference_top_piece: spell(f.reference_top),
            target_top_piece: spell(f.target_top),
        });
    let per = |v: f64| Num(if s.count == 0.0 { f64::NAN } else { v / s.count });
    WindowFigures {
        id: w.id.to_string(),
        positions: s.count as usize,
        nonfinite_positions: w.not_finite(),
        mean_kld: per(s.kld),
        same_top: per(s.same),
        ln_ppl_ratio: per(s.ln_ratio),
        worst,
        error: w.error.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(kld: f64, nll: (f64, f64), tops: (u32, u32)) -> Position {
        Position::Scored(TokenFigures {
            kld,
            delta_p: (-nll.1).exp() - (-nll.0).exp(),
            nll_reference: nll.0,
            nll_target: nll.1,
            reference_top: tops.0,
            target_top: tops.1,
            sqnr_db: 30.0,
        })
    }

    fn stats() -> StatOptions {
        StatOptions {
            seed: 0,
            resamples: 200,
            margin_points: None,
            sequential: None,
        }
    }

    #[test]
    fn figures_pool_every_scored_position_as_numpy_does() {
        let next = [1, 2, 3];
        let windows = [
            Window {
                id: "a",
                next: &next,
                positions: vec![
                    at(0.1, (1.0, 1.5), (1, 1)),
                    at(0.3, (2.0, 2.0), (2, 5)),
                    Position::Unscored,
                ],
                error: None,
            },
            Window {
                id: "b",
                next: &next,
                positions: vec![at(0.2, (1.0, 1.0), (1, 1)), Position::NotFinite],
                error: None,
            },
        ];
        let c = figures(&windows, &stats(), &|t| format!("<{t}>"));
        // KLD 0.1, 0.3, 0.2: mean 0.2, sample sd 0.1, SE 0.1/√3.
        assert_eq!((c.windows, c.positions, c.nonfinite_positions), (2, 3, 1));
        assert!((c.kld.mean.0 - 0.2).abs() < 1e-12);
        assert!((c.kld.mean_se.0 - 0.1 / 3f64.sqrt()).abs() < 1e-12);
        // np.percentile([0.1, 0.2, 0.3], 90) = 0.28.
        assert!((c.kld.p90.0 - 0.28).abs() < 1e-12);
        assert_eq!(c.same_top.count, 2);
        // ln ratio: mean of 0.5, 0, 0; PPL ref exp(4/3), target exp(4.5/3).
        assert!((c.perplexity.ln_ratio.0 - 0.5 / 3.0).abs() < 1e-12);
        assert!((c.perplexity.reference.0 - (4.0f64 / 3.0).exp()).abs() < 1e-12);
        // A target with a position not finite is not bounded.
        assert!(c.bounds.kld_mean_upper.0.is_nan() && c.bounds.unbounded.is_some());
        assert_eq!(
            c.rows[0].worst.as_ref().map(|w| w.target_top_piece.as_str()),
            Some("<5>")
        );
        // Its worst position is 1 (KLD 0.3), where the window's token 2 came.
        assert_eq!(c.rows[0].worst.as_ref().map(|w| w.next_piece.as_str()), Some("<2>"));
        // Curve: position 0 over both windows, 1 over window a only.
        assert!((c.by_position[0].mean_kld.0 - 0.15).abs() < 1e-12);
        assert_eq!((c.by_position[1].windows, c.by_position[1].same_top.0), (1, 0.0));
    }

    #[test]
    fn one_window_bounds_nothing_and_p99_needs_299_positions() {
        let one = |id: &'static str, kld: f64| Window {
            id,
            next: &[],
            positions: (0..39).map(|_| at(kld, (1.0, 1.0), (0, 0))).collect(),
            error: None,
        };
        let c = figures(&[one("a", 0.01)], &stats(), &|_| String::new());
        assert!(c.bounds.kld_mean_upper.0.is_nan() && c.bounds.same_top_lower.0.is_nan());
        let ten: Vec<Window<'_>> = (0..10).map(|k| one("w", 0.01 * (k + 1) as f64)).collect();
        let c = figures(&ten, &stats(), &|_| String::new());
        // 390 positions: an order statistic bounds the p99 (299 or more), at least the windows'
        // largest KLD short of the top few.
        assert!(c.bounds.kld_mean_upper.0 >= c.kld.mean.0);
        assert!(c.bounds.kld_p99_upper.0 >= 0.1 - 1e-12, "{:?}", c.bounds);
        // Every top agrees: the Wilson bound of 390/390, not the bootstrap's 1.
        assert!((c.bounds.same_top_lower.0 - wilson_lower(390, 390)).abs() < 1e-12);
        assert!(c.bounds.unbounded.is_none());
    }

    #[test]
    fn a_step_up_is_named_where_it_starts() {
        let levels = [0.01, 0.012, 0.009, 0.011, 0.5, 0.52, 0.49, 0.02, 0.3];
        assert_eq!(jumps(&levels), vec![4, 8]);
        assert!(jumps(&[0.0, 0.0, 0.0]).is_empty());
        assert!(jumps(&[1e-9, 1e-9, 1e-6]).is_empty());
    }
}
