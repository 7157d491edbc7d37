//! Target-against-target agreement: how many elements differ bit for bit, and by how much at
//! most. Lighter than [`ErrorStats`]: with a dozen targets there are dozens of pairs per output.

use super::errors::ErrorStats;
use crate::data::tensor::TensorData;
use crate::report::compare::CodeDiffs;

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
        // Codes are most of what the per-layer audit compares: integers of one type are counted
        // on their own type, without going through doubles element by element.
        if crate::data::tensor::with_code_pair!(a, b, x, y => self.update_ints(x, y)).is_some() {
            return;
        }
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

    /// Integers of one type: the difference of two values is exact in `i64`, and a step
    /// count of an `lsb` of 1 is the difference itself.
    fn update_ints<T: Copy + Into<i64>>(&mut self, x: &[T], y: &[T]) {
        let n = x.len().min(y.len());
        let (mut differing, mut largest) = (0u64, 0u64);
        let mut by_steps = [0u64; 3];
        let lsb = self.codes.as_ref().map(|c| c.lsb);
        for (&a, &b) in x[..n].iter().zip(&y[..n]) {
            let d = (a.into() - b.into()).unsigned_abs();
            differing += (d != 0) as u64;
            largest = largest.max(d);
            if let Some(lsb) = lsb {
                let steps = if lsb == 1.0 { d } else { (d as f64 / lsb).round() as u64 };
                if steps > 0 {
                    by_steps[(steps.min(3) - 1) as usize] += 1;
                }
            }
        }
        if let Some(c) = self.codes.as_mut() {
            c.off_by_one += by_steps[0];
            c.off_by_two += by_steps[1];
            c.off_by_more += by_steps[2];
            c.max_steps = c.max_steps.max(if c.lsb == 1.0 {
                largest
            } else {
                (largest as f64 / c.lsb).round() as u64
            });
        }
        self.elements += n as u64;
        self.differing = self.differing.map(|d| d + differing);
        if n > 0 {
            self.max_abs = self.max_abs.max(largest as f64);
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

    #[test]
    fn integer_codes_are_counted_on_their_own_type() {
        // Hand-worked: differences 0, 1, -1, 2, -3, 300 (int16 only) -> 5 differing, steps
        // 1, 1, 2, 3, 300; max 300.
        let mut a = Agreement::with_lsb(Some(1.0));
        a.update(
            &TensorData::Int16(vec![5, -4, 7, 0, -10, 150]),
            &TensorData::Int16(vec![5, -5, 8, -2, -7, -150]),
        );
        let c = a.codes.unwrap();
        assert_eq!((c.off_by_one, c.off_by_two, c.off_by_more, c.max_steps), (2, 1, 2, 300));
        assert_eq!((a.elements, a.differing, a.max_abs), (6, Some(5), 300.0));
        // int8 extremes: -128 against 127 is 255 apart, beyond i8.
        let mut e = Agreement::with_lsb(Some(1.0));
        e.update(&TensorData::Int8(vec![-128, 3]), &TensorData::Int8(vec![127, 3]));
        assert_eq!(
            (e.codes.unwrap().max_steps, e.max_abs, e.differing),
            (255, 255.0, Some(1))
        );
        // A step of 2 codes: differences 1, 4 and 7 are 0.5, 2 and 3.5 steps, rounded half
        // away from zero to 1, 2 and 4.
        let mut s = Agreement::with_lsb(Some(2.0));
        s.update(&TensorData::Uint8(vec![1, 4, 7]), &TensorData::Uint8(vec![0, 0, 0]));
        let c = s.codes.unwrap();
        assert_eq!((c.off_by_one, c.off_by_two, c.off_by_more, c.max_steps), (1, 1, 1, 4));
        // No elements: max_abs stays as it was.
        let mut z = Agreement::with_lsb(Some(1.0));
        z.update(&TensorData::Uint16(vec![]), &TensorData::Uint16(vec![]));
        assert_eq!((z.elements, z.max_abs, z.differing), (0, 0.0, Some(0)));
    }
}
