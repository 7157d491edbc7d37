//! Target-against-target agreement: how many elements differ bit for bit, and by how much at
//! most. Lighter than [`ErrorStats`]: with a dozen targets there are dozens of pairs per output.

use super::stats::ErrorStats;
use crate::report::model::CodeDiffs;
use crate::tensor::TensorData;

/// Running counts for one pair of targets on one output.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    pub elements: u64,
    /// Elements that are not bit-identical (NaN-aware); `None` when the element types differ.
    pub differing: Option<u64>,
    /// max |a − b| over positions where both are finite; infinite if one side alone is not.
    pub max_abs: f64,
    /// Differences in quantization steps, when the output has one.
    pub codes: Option<CodeDiffs>,
}

impl CodeDiffs {
    /// Counts one pair of values.
    pub fn add(&mut self, a: f64, b: f64) {
        let steps = if a.is_finite() && b.is_finite() {
            ((a - b).abs() / self.lsb).round() as u64
        } else if a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) {
            0
        } else {
            u64::MAX
        };
        match steps {
            0 => {}
            1 => self.off_by_one += 1,
            2 => self.off_by_two += 1,
            _ => self.off_by_more += 1,
        }
        self.max_steps = self.max_steps.max(steps);
    }
}

impl Default for Agreement {
    fn default() -> Self {
        Agreement {
            elements: 0,
            differing: Some(0),
            max_abs: 0.0,
            codes: None,
        }
    }
}

impl Agreement {
    /// Counts differences in quantization steps of `lsb` as well (see [`CodeDiffs`]).
    pub fn with_lsb(lsb: Option<f64>) -> Agreement {
        Agreement {
            codes: lsb.filter(|l| *l > 0.0 && l.is_finite()).map(|lsb| CodeDiffs {
                lsb,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Adds one sample of both targets' outputs (same shape).
    pub fn update(&mut self, a: &TensorData, b: &TensorData) {
        if let Some(c) = self.codes.as_mut() {
            for i in 0..a.len().min(b.len()) {
                c.add(a.get_f64(i), b.get_f64(i));
            }
        }
        match (a, b) {
            (TensorData::Float32(x), TensorData::Float32(y)) => self.update_f32(x, y),
            _ => {
                // Other types are rare in model outputs: reuse the full statistics.
                let same = a.dtype() == b.dtype();
                let mut s = ErrorStats::new(same, same && a.dtype().is_float());
                s.update(a, b);
                self.elements += s.elements;
                self.differing = match (self.differing, s.differing()) {
                    (Some(d), Some(e)) => Some(d + e),
                    _ => None,
                };
                self.max_abs = self.max_abs.max(s.max_abs());
            }
        }
    }

    fn update_f32(&mut self, x: &[f32], y: &[f32]) {
        let mut differing = 0u64;
        let mut max_abs = self.max_abs;
        for (&a, &b) in x.iter().zip(y) {
            let same_bits = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            differing += (!same_bits) as u64;
            if same_bits {
                continue;
            }
            let d = if a.is_finite() && b.is_finite() {
                (a as f64 - b as f64).abs()
            } else {
                f64::INFINITY
            };
            max_abs = max_abs.max(d);
        }
        self.elements += x.len().min(y.len()) as u64;
        self.differing = self.differing.map(|d| d + differing);
        self.max_abs = max_abs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bits_and_largest_difference() {
        let mut a = Agreement::default();
        a.update(
            &TensorData::Float32(vec![1.0, 2.0, f32::NAN, 0.0, 5.0]),
            &TensorData::Float32(vec![1.0, 2.5, f32::NAN, -0.0, 5.0]),
        );
        assert_eq!(a.elements, 5);
        // 2.0 vs 2.5 and +0 vs -0 differ in their bits.
        assert_eq!(a.differing, Some(2));
        assert_eq!(a.max_abs, 0.5);
        a.update(
            &TensorData::Float32(vec![f32::INFINITY]),
            &TensorData::Float32(vec![1.0]),
        );
        assert_eq!(a.max_abs, f64::INFINITY);
        let mut m = Agreement::default();
        m.update(&TensorData::Float64(vec![1.0]), &TensorData::Float32(vec![1.0]));
        assert_eq!(m.differing, None);
    }

    #[test]
    fn counts_differences_in_quantization_steps() {
        // Step 0.5: differences of 0.5, 1.0 and 2.0 are 1, 2 and 4 steps.
        let mut a = Agreement::with_lsb(Some(0.5));
        a.update(
            &TensorData::Float32(vec![1.0, 1.5, 2.0, 4.0, 0.0]),
            &TensorData::Float32(vec![1.0, 1.0, 1.0, 2.0, 0.0]),
        );
        let c = a.codes.unwrap();
        assert_eq!((c.off_by_one, c.off_by_two, c.off_by_more, c.max_steps), (1, 1, 1, 4));
        let mut u = Agreement::with_lsb(Some(1.0));
        u.update(&TensorData::Uint8(vec![3, 200]), &TensorData::Uint8(vec![4, 200]));
        assert_eq!(u.codes.unwrap().off_by_one, 1);
        assert!(Agreement::with_lsb(None).codes.is_none());
    }
}
