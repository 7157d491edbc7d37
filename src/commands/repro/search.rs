//! The delta debugging over windows of consecutive layers: from the layer where the departure
//! shows, grow the window upstream by doubling until it departs, then narrow each end to the
//! last position that still departs, until neither end moves. Departure is not monotone in the
//! window (a longer window can fuse differently), so each narrowing tries every position of its
//! range, not halves; the oracle runs many windows side by side in one session.

use anyhow::Result;

use super::graph::Window;

/// Whether each window departs on the target and not on the comparison.
pub trait Oracle {
    fn departs(&mut self, windows: &[Window]) -> Result<Vec<bool>>;
}

/// Rounds of narrowing before the search settles for what it has (each round that moves an
/// end makes the window smaller, so this is never reached on a finite window in practice).
const MAX_ROUNDS: usize = 16;

/// The smallest window ending at or before `end` that departs, grown from `end` upstream and
/// then narrowed at both ends (at its start only with `keep_end`: the user named that layer);
/// `None` when no window ending at `end` departs.
pub fn minimal_window(oracle: &mut dyn Oracle, end: usize, keep_end: bool) -> Result<Option<Window>> {
    let Some(mut window) = grow(oracle, end)? else {
        return Ok(None);
    };
    for _ in 0..MAX_ROUNDS {
        let started = narrow_start(oracle, window)?;
        let narrowed = if keep_end {
            started
        } else {
            narrow_end(oracle, started)?
        };
        if narrowed == window {
            break;
        }
        window = narrowed;
    }
    Ok(Some(window))
}

/// The layer alone, then windows reaching 1, 2, 4, ... layers upstream of it (and the whole
/// prefix): the smallest that departs.
fn grow(oracle: &mut dyn Oracle, end: usize) -> Result<Option<Window>> {
    let mut reach = vec![0];
    let mut k = 1;
    while k < end {
        reach.push(k);
        k *= 2;
    }
    if end > 0 {
        reach.push(end);
    }
    reach.dedup();
    let windows: Vec<Window> = reach.iter().map(|&k| (end - k, end)).collect();
    let departs = oracle.departs(&windows)?;
    Ok(windows.into_iter().zip(departs).find(|(_, d)| *d).map(|(w, _)| w))
}

/// The window with its start moved as far downstream as it still departs.
fn narrow_start(oracle: &mut dyn Oracle, (first, last): Window) -> Result<Window> {
    let windows: Vec<Window> = (first + 1..=last).map(|s| (s, last)).collect();
    let departs = oracle.departs(&windows)?;
    Ok(windows
        .into_iter()
        .zip(departs)
        .filter(|(_, d)| *d)
        .map(|(w, _)| w)
        .next_back()
        .unwrap_or((first, last)))
}

/// The window with its end moved as far upstream as it still departs.
fn narrow_end(oracle: &mut dyn Oracle, (first, last): Window) -> Result<Window> {
    let windows: Vec<Window> = (first..last).map(|e| (first, e)).collect();
    let departs = oracle.departs(&windows)?;
    Ok(windows
        .into_iter()
        .zip(departs)
        .find(|(_, d)| *d)
        .map(|(w, _)| w)
        .unwrap_or((first, last)))
}

/// The windows one layer smaller at either end: a minimal window's neighbours that must not
/// depart.
pub fn one_smaller((first, last): Window) -> Vec<Window> {
    if first == last {
        return Vec::new();
    }
    vec![(first + 1, last), (first, last - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Departs when the window contains every layer of `needed`; counts what it was asked.
    struct Needs {
        needed: BTreeSet<usize>,
        asked: Vec<Window>,
    }

    impl Oracle for Needs {
        fn departs(&mut self, windows: &[Window]) -> Result<Vec<bool>> {
            self.asked.extend_from_slice(windows);
            Ok(windows
                .iter()
                .map(|&(a, b)| self.needed.iter().all(|&n| a <= n && n <= b))
                .collect())
        }
    }

    fn search(needed: &[usize], end: usize) -> (Option<Window>, Vec<Window>) {
        let mut o = Needs {
            needed: needed.iter().copied().collect(),
            asked: Vec::new(),
        };
        let w = minimal_window(&mut o, end, false).unwrap();
        (w, o.asked)
    }

    #[test]
    fn a_layer_that_departs_alone_is_its_own_window() {
        let (w, asked) = search(&[7], 7);
        assert_eq!(w, Some((7, 7)));
        assert_eq!(asked[0], (7, 7));
    }

    #[test]
    fn the_window_grows_upstream_to_the_cause_and_no_further() {
        // The departure shows at 20 but needs layers 13 and 20 together.
        let (w, _) = search(&[13, 20], 20);
        assert_eq!(w, Some((13, 20)));
        // Needing 0 reaches the whole prefix.
        assert_eq!(search(&[0, 5], 5).0, Some((0, 5)));
    }

    #[test]
    fn the_end_is_narrowed_when_the_cause_lies_upstream_of_where_it_shows() {
        // Shows at 9, but layers 3..=4 depart by themselves.
        let (w, _) = search(&[3, 4], 9);
        assert_eq!(w, Some((3, 4)));
        // Unless the end is the layer the user named.
        let mut o = Needs {
            needed: [3, 4].into(),
            asked: Vec::new(),
        };
        assert_eq!(minimal_window(&mut o, 9, true).unwrap(), Some((3, 9)));
    }

    #[test]
    fn nothing_departs_gives_none() {
        let mut o = Needs {
            needed: [99].into(),
            asked: Vec::new(),
        };
        assert_eq!(minimal_window(&mut o, 5, false).unwrap(), None);
        assert_eq!(o.asked, vec![(5, 5), (4, 5), (3, 5), (1, 5), (0, 5)]);
    }

    #[test]
    fn a_minimal_window_has_two_smaller_neighbours() {
        assert_eq!(one_smaller((3, 5)), vec![(4, 5), (3, 4)]);
        assert!(one_smaller((2, 2)).is_empty());
    }
}
