//! Top-1 / top-5 agreement along a class axis: does the target pick the golden run's class?

use crate::data::tensor::TensorData;

/// Running counts for one output of one target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopKStats {
    pub rows: u64,
    pub top1_agree: u64,
    /// `None` when the class axis has 5 entries or fewer (top-5 would be trivially 1).
    pub top5_agree: Option<u64>,
}

/// Index of the first maximum, ignoring NaN; `None` for an all-NaN row.
fn argmax(row: impl Iterator<Item = f64>) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, v) in row.enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

impl TopKStats {
    /// Starts counting for a class axis of `classes` entries.
    pub fn new(classes: usize) -> TopKStats {
        TopKStats {
            rows: 0,
            top1_agree: 0,
            top5_agree: (classes > 5).then_some(0),
        }
    }

    /// Adds one sample. `shape` is the output's shape, `axis` the class axis (non-negative).
    pub fn update(&mut self, out: &TensorData, gold: &TensorData, shape: &[usize], axis: usize) {
        let classes = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let outer: usize = shape[..axis].iter().product();
        if classes == 0 {
            return;
        }
        for a in 0..outer {
            for b in 0..inner {
                let at = |c: usize| a * classes * inner + c * inner + b;
                let gold_best = argmax((0..classes).map(|c| gold.get_f64(at(c))));
                let out_best = argmax((0..classes).map(|c| out.get_f64(at(c))));
                self.rows += 1;
                let Some(g) = gold_best else { continue };
                self.top1_agree += (out_best == Some(g)) as u64;
                if let Some(top5) = self.top5_agree.as_mut() {
                    // The golden class is in the target's top 5 when fewer than 5 entries beat it
                    // (a larger value, or an equal value at a lower index).
                    let og = out.get_f64(at(g));
                    if og.is_nan() {
                        continue;
                    }
                    let beaten_by = (0..classes)
                        .filter(|&c| {
                            let v = out.get_f64(at(c));
                            v > og || (v == og && c < g)
                        })
                        .count();
                    *top5 += (beaten_by < 5) as u64;
                }
            }
        }
    }

    /// Fraction of rows whose top-1 class matches.
    pub fn top1(&self) -> Option<f64> {
        (self.rows > 0).then(|| self.top1_agree as f64 / self.rows as f64)
    }

    /// Fraction of rows where the golden class is in the target's top 5.
    pub fn top5(&self) -> Option<f64> {
        self.top5_agree
            .filter(|_| self.rows > 0)
            .map(|t| t as f64 / self.rows as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_along_the_last_axis() {
        // Two rows of 3 classes: golden picks 2 and 0; target picks 2 and 1.
        let gold = TensorData::Float32(vec![0.1, 0.2, 0.7, 0.5, 0.3, 0.2]);
        let out = TensorData::Float32(vec![0.0, 0.1, 0.9, 0.3, 0.6, 0.1]);
        let mut s = TopKStats::new(3);
        s.update(&out, &gold, &[2, 3], 1);
        assert_eq!(s.top1(), Some(0.5));
        assert_eq!(s.top5(), None);
    }

    #[test]
    fn rows_along_a_middle_axis() {
        // Shape [1, 3, 2]: classes on axis 1, two rows (columns).
        // column 0 values (0, 5, 1) → class 1; column 1 values (9, 0, 0) → class 0.
        let gold = TensorData::Float32(vec![0.0, 9.0, 5.0, 0.0, 1.0, 0.0]);
        let mut s = TopKStats::new(3);
        s.update(&gold, &gold, &[1, 3, 2], 1);
        assert_eq!((s.rows, s.top1_agree), (2, 2));
    }

    #[test]
    fn ties_go_to_the_lower_index() {
        // Quantized scores tie often: golden argmax is 0, the target ties 0 and 1 → index 0 wins.
        let gold = TensorData::Float32(vec![0.9, 0.1, 0.0]);
        let out = TensorData::Float32(vec![0.5, 0.5, 0.0]);
        let mut s = TopKStats::new(3);
        s.update(&out, &gold, &[3], 0);
        assert_eq!(s.top1(), Some(1.0));
    }

    #[test]
    fn top5_counts_the_golden_class_among_the_five_largest() {
        // 7 classes, golden class 6. Target: class 6 is the 5th largest → in; then 6th → out.
        let gold = TensorData::Float32(vec![0., 0., 0., 0., 0., 0., 1.]);
        let in5 = TensorData::Float32(vec![7., 6., 5., 4., 0., 0., 3.]);
        let out5 = TensorData::Float32(vec![7., 6., 5., 4., 3.5, 0., 3.]);
        let mut a = TopKStats::new(7);
        a.update(&in5, &gold, &[1, 7], 1);
        assert_eq!(a.top5(), Some(1.0));
        assert_eq!(a.top1(), Some(0.0));
        let mut b = TopKStats::new(7);
        b.update(&out5, &gold, &[1, 7], 1);
        assert_eq!(b.top5(), Some(0.0));
        // An equal value at a lower index beats the golden class.
        let tie = TensorData::Float32(vec![7., 6., 5., 4., 3., 0., 3.]);
        let mut c = TopKStats::new(7);
        c.update(&tie, &gold, &[1, 7], 1);
        assert_eq!(c.top5(), Some(0.0));
    }
}
