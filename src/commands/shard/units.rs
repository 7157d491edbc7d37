//! Work units: one run over a range of samples. `eval`'s work is cut into them by cost, and every
//! part (`eval --shard`, `plan`, `merge`'s check of a part) takes them from [`units`].

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// A piece of work: one run over the samples `start..end` of the set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    /// The target's id.
    pub run: String,
    pub start: usize,
    pub end: usize,
}

/// Splits `samples` samples on each of `runs` (id, weight per sample) into `count` shards of
/// even cost. The runs are laid end to end, each as long as its samples times its weight, and the
/// line is cut into `count` equal lengths; a sample goes to the shard its start falls in. Each
/// shard so gets a few contiguous units (few sessions to start), and no shard's cost is more than
/// one sample's away from the even share.
pub fn units(runs: &[(String, u64)], samples: usize, count: usize) -> Vec<Vec<Unit>> {
    let total: u128 = runs.iter().map(|(_, w)| u128::from(*w) * samples as u128).sum();
    let mut shards: Vec<Vec<Unit>> = vec![Vec::new(); count];
    if total == 0 || count == 0 {
        return shards;
    }
    let shard_of = |at: u128| ((at * count as u128 / total) as usize).min(count - 1);
    let mut offset: u128 = 0;
    for (run, weight) in runs {
        let w = u128::from(*weight);
        let mut start = 0;
        while start < samples {
            let shard = shard_of(offset + w * start as u128);
            // The first sample past `start` whose start falls in a later shard.
            let (mut lo, mut hi) = (start + 1, samples);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if shard_of(offset + w * mid as u128) == shard {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            shards[shard].push(Unit {
                run: run.clone(),
                start,
                end: lo,
            });
            start = lo;
        }
        offset += w * samples as u128;
    }
    shards
}

/// A shard's units grouped by sample range, in the order the ranges first appear: each group is
/// what the shard streams at once (its runs' sessions side by side, with the reference), the groups
/// one after the other. `eval --shard` runs them so, and `plan` sizes a job's CPUs, memory and
/// time from them.
pub fn windows(units: &[Unit]) -> Vec<(Range<usize>, Vec<&Unit>)> {
    let mut groups: Vec<(Range<usize>, Vec<&Unit>)> = Vec::new();
    for u in units {
        match groups.iter_mut().find(|(w, _)| *w == (u.start..u.end)) {
            Some((_, members)) => members.push(u),
            None => groups.push((u.start..u.end, vec![u])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_cover_every_sample_once_and_even_out_the_cost() {
        // Hand-worked: 10 samples on cpu (weight 1) then qnn (weight 9) is a line of 100 cut at 25,
        // 50 and 75. qnn's sample i starts at 10 + 9i: 10, 19 | 28, 37, 46 | 55, 64, 73 | 82, 91.
        // Costs 28, 27, 27, 18: each within one qnn sample of the even 25.
        let runs = vec![("cpu".to_string(), 1), ("qnn".to_string(), 9)];
        let shards = units(&runs, 10, 4);
        let unit = |run: &str, start, end| Unit {
            run: run.into(),
            start,
            end,
        };
        assert_eq!(shards[0], vec![unit("cpu", 0, 10), unit("qnn", 0, 2)]);
        assert_eq!(shards[1], vec![unit("qnn", 2, 5)]);
        assert_eq!(shards[2], vec![unit("qnn", 5, 8)]);
        assert_eq!(shards[3], vec![unit("qnn", 8, 10)]);
        for count in 1..=13 {
            for samples in [0, 1, 2, 7, 2000] {
                let runs = vec![("a".to_string(), 1), ("b".to_string(), 700), ("c".to_string(), 30)];
                let shards = units(&runs, samples, count);
                assert_eq!(shards.len(), count);
                for (run, w) in &runs {
                    let mut covered: Vec<(usize, usize)> = shards
                        .iter()
                        .flatten()
                        .filter(|u| &u.run == run)
                        .map(|u| (u.start, u.end))
                        .collect();
                    covered.sort();
                    let mut next = 0;
                    for (s, e) in covered {
                        assert_eq!(s, next);
                        assert!(e > s);
                        next = e;
                    }
                    assert_eq!(next, samples, "{run} w{w}");
                }
                let total: u64 = runs.iter().map(|(_, w)| w * samples as u64).sum();
                for shard in &shards {
                    let cost: u64 = shard
                        .iter()
                        .map(|u| runs.iter().find(|r| r.0 == u.run).map_or(0, |r| r.1) * (u.end - u.start) as u64)
                        .sum();
                    assert!(
                        cost.abs_diff(total / count as u64) <= 700 + 1,
                        "{count} {samples}: {cost}"
                    );
                }
            }
        }
    }
}
