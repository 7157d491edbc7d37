//! Divergent-token figures of two generated token sequences, as OpenVINO's who_what_benchmark
//! names them: FDT, the first divergent token (the length of the common prefix), and SDT, the
//! tokens of the evaluated sequence to correct: those outside the matching blocks Python's
//! `difflib.SequenceMatcher` finds against the reference's (which who_what_benchmark uses). The
//! blocks are computed here as difflib computes them (Ratcliff–Obershelp: the longest matching
//! run, the leftmost of equal ones, then recursively either side of it; with difflib's "autojunk"
//! for sequences of 200 or more), so the counts are who_what_benchmark's own.

use std::collections::HashMap;

/// FDT and SDT of `target` against `reference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DivergentTokens {
    /// The first index where the two differ (the common prefix's length; the shorter one's
    /// length when one is a prefix of the other).
    pub fdt: usize,
    /// Tokens of `target` outside difflib's matching blocks against `reference`.
    pub sdt: usize,
}

/// FDT and SDT of `target` against `reference`.
pub fn divergent_tokens(reference: &[u32], target: &[u32]) -> DivergentTokens {
    let fdt = reference.iter().zip(target).take_while(|(a, b)| a == b).count();
    let matched: usize = matching_blocks(reference, target).iter().map(|m| m.2).sum();
    DivergentTokens {
        fdt,
        sdt: target.len() - matched,
    }
}

/// `difflib.SequenceMatcher(None, a, b).get_matching_blocks()` without the final empty block:
/// `(i, j, size)` with `a[i..i + size] == b[j..j + size]`, in order.
pub fn matching_blocks(a: &[u32], b: &[u32]) -> Vec<(usize, usize, usize)> {
    let index = BIndex::new(b);
    let mut queue = vec![(0, a.len(), 0, b.len())];
    let mut blocks = Vec::new();
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (i, j, k) = index.longest_match(a, (alo, ahi), (blo, bhi));
        if k > 0 {
            blocks.push((i, j, k));
            if alo < i && blo < j {
                queue.push((alo, i, blo, j));
            }
            if i + k < ahi && j + k < bhi {
                queue.push((i + k, ahi, j + k, bhi));
            }
        }
    }
    blocks.sort_unstable();
    blocks
}

/// Where each element of `b` occurs, as difflib's `b2j`: an element occurring more than
/// `len(b) / 100 + 1` times in a `b` of 200 or more is "popular" and left out (autojunk).
struct BIndex<'b> {
    b: &'b [u32],
    positions: HashMap<u32, Vec<usize>>,
}

impl<'b> BIndex<'b> {
    fn new(b: &'b [u32]) -> BIndex<'b> {
        let mut positions: HashMap<u32, Vec<usize>> = HashMap::new();
        for (j, &x) in b.iter().enumerate() {
            positions.entry(x).or_default().push(j);
        }
        if b.len() >= 200 {
            let most = b.len() / 100 + 1;
            positions.retain(|_, js| js.len() <= most);
        }
        BIndex { b, positions }
    }

    /// difflib's `find_longest_match`: the longest run of `a[alo..ahi]` in `b[blo..bhi]` over
    /// the indexed elements (the earliest in `a`, then in `b`, of equal ones), then extended over
    /// equal elements either side (popular ones included, as difflib extends).
    fn longest_match(
        &self,
        a: &[u32],
        (alo, ahi): (usize, usize),
        (blo, bhi): (usize, usize),
    ) -> (usize, usize, usize) {
        let (mut besti, mut bestj, mut best) = (alo, blo, 0);
        let mut run: HashMap<usize, usize> = HashMap::new();
        for (i, x) in a.iter().enumerate().take(ahi).skip(alo) {
            let mut next = HashMap::new();
            for &j in self.positions.get(x).map_or(&[][..], Vec::as_slice) {
                if j < blo {
                    continue;
                }
                if j >= bhi {
                    break;
                }
                let k = run.get(&(j.wrapping_sub(1))).copied().unwrap_or(0) + 1;
                next.insert(j, k);
                if k > best {
                    (besti, bestj, best) = (i + 1 - k, j + 1 - k, k);
                }
            }
            run = next;
        }
        let b = self.b;
        while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
            (besti, bestj, best) = (besti - 1, bestj - 1, best + 1);
        }
        while besti + best < ahi && bestj + best < bhi && a[besti + best] == b[bestj + best] {
            best += 1;
        }
        (besti, bestj, best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_counts_are_difflibs() {
        // difflib.SequenceMatcher(None, [1,2,3], [1,2,1,2,3]).get_matching_blocks():
        // [Match(a=0, b=2, size=3), Match(a=3, b=5, size=0)]: the longest run wins over the
        // common prefix, which FDT still counts.
        assert_eq!(matching_blocks(&[1, 2, 3], &[1, 2, 1, 2, 3]), vec![(0, 2, 3)]);
        assert_eq!(
            divergent_tokens(&[1, 2, 3], &[1, 2, 1, 2, 3]),
            DivergentTokens { fdt: 2, sdt: 2 }
        );
        // "abxcd" against "abcd": blocks (0,0,2), (3,2,2); nothing to correct in the target.
        assert_eq!(
            matching_blocks(&[1, 2, 9, 3, 4], &[1, 2, 3, 4]),
            vec![(0, 0, 2), (3, 2, 2)]
        );
        assert_eq!(divergent_tokens(&[5, 6], &[5, 6]), DivergentTokens { fdt: 2, sdt: 0 });
        assert_eq!(divergent_tokens(&[], &[7, 8]), DivergentTokens { fdt: 0, sdt: 2 });
    }
}
