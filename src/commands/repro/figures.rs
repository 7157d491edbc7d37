//! The figures of one output of a window: how far the target's values are from the comparison's
//! (in quantization steps for codes, in real values always) and each side's SQNR against the
//! golden activation; and whether that is a departure under the run's criterion.

use crate::analyses::layers::points::Quant;
use crate::data::tensor::Tensor;
use crate::report::common::Num;
use crate::report::repro::{Criterion, OutputFigures};

/// The real value of element `i`: dequantized as the ONNX specification says for codes.
fn real(t: &Tensor, i: usize, quant: Option<&Quant>) -> f64 {
    let v = t.data.get_f64(i);
    match quant {
        Some(q) => (v - q.zero_point) * f64::from(q.scale),
        None => v,
    }
}

/// `10·log10(Σr² / Σ(o − r)²)`; `+inf` for an exact match, `None` without a golden activation
/// of the same size.
fn sqnr_db(t: &Tensor, quant: Option<&Quant>, golden: Option<&[f32]>) -> Option<f64> {
    let golden = golden.filter(|g| g.len() == t.len())?;
    let (mut signal, mut noise) = (0.0f64, 0.0f64);
    for (i, &r) in golden.iter().enumerate() {
        let r = f64::from(r);
        signal += r * r;
        let e = real(t, i, quant) - r;
        noise += e * e;
    }
    Some(crate::analyses::metrics::sqnr_from_sums(signal, noise))
}

/// The figures of `target` against `against` (same shape and type, else every element counts
/// as differing), each against `golden`.
pub fn figures(
    tensor: &str,
    target: &Tensor,
    against: &Tensor,
    golden: Option<&[f32]>,
    quant: Option<&Quant>,
) -> OutputFigures {
    let comparable = target.shape == against.shape && target.dtype() == against.dtype();
    let (mut differing, mut max_steps, mut max_abs) = (0u64, 0u64, 0.0f64);
    if comparable {
        for i in 0..target.len() {
            let (a, b) = (target.data.get_f64(i), against.data.get_f64(i));
            if a.to_bits() == b.to_bits() {
                continue;
            }
            differing += 1;
            if quant.is_some() {
                max_steps = max_steps.max((a - b).abs() as u64);
            }
            let d = (real(target, i, quant) - real(against, i, quant)).abs();
            max_abs = if d.is_nan() { f64::INFINITY } else { max_abs.max(d) };
        }
    } else {
        differing = target.len().max(against.len()) as u64;
        max_abs = f64::INFINITY;
        max_steps = u64::MAX;
    }
    OutputFigures {
        tensor: tensor.to_string(),
        quantized: quant.is_some(),
        elements: target.len() as u64,
        differing,
        max_steps: quant.map(|_| max_steps),
        max_abs: Num(max_abs),
        target_sqnr_db: sqnr_db(target, quant, golden).map(Num),
        against_sqnr_db: sqnr_db(against, quant, golden).map(Num),
    }
}

/// The largest magnitude of a tensor's real values.
pub fn peak(t: &Tensor, quant: Option<&Quant>) -> f64 {
    (0..t.len()).map(|i| real(t, i, quant).abs()).fold(0.0, f64::max)
}

/// Whether one output departs: by steps (codes) or relative error (floats), or with
/// `--max-sqnr` by the target's SQNR falling to it while the comparison's stays above.
/// `against_peak` is the comparison's largest magnitude (float outputs).
pub fn departs(f: &OutputFigures, against_peak: f64, c: &Criterion) -> bool {
    if let Some(limit) = c.max_sqnr_db {
        return match (f.target_sqnr_db, f.against_sqnr_db) {
            (Some(t), Some(a)) => t.0 <= limit && a.0 > limit,
            _ => false,
        };
    }
    match f.max_steps {
        Some(steps) => steps >= c.min_steps,
        None => f.differing > 0 && (against_peak == 0.0 || f.max_abs.0 / against_peak > c.float_tolerance),
    }
}

/// The criterion in one sentence.
pub fn criterion_text(c: &Criterion) -> String {
    match c.max_sqnr_db {
        Some(db) => format!(
            "the target's SQNR against the golden activation at or below {db} dB while the comparison's stays above"
        ),
        None => format!(
            "a code {} or more quantization steps from the comparison's (float outputs: more than {:.3e} of its largest magnitude)",
            c.min_steps, c.float_tolerance
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tensor::TensorData;

    fn codes(v: &[u8]) -> Tensor {
        Tensor::new(vec![v.len()], TensorData::Uint8(v.to_vec())).unwrap()
    }

    fn rule(min_steps: u64, max_sqnr_db: Option<f64>) -> Criterion {
        Criterion {
            min_steps,
            max_sqnr_db,
            float_tolerance: 1.0 / 1024.0,
            text: String::new(),
        }
    }

    #[test]
    fn codes_are_compared_in_steps_and_dequantized_against_the_golden_run() {
        let q = Quant {
            scale: 0.5,
            zero_point: 128.0,
            elem_type: 2,
        };
        // Real values: target 0, 1, -1, 2.5; against 0, 0.5, -1, 1.0; golden 0, 1, -1, 2.
        let t = codes(&[128, 130, 126, 133]);
        let a = codes(&[128, 129, 126, 130]);
        let g = [0.0f32, 1.0, -1.0, 2.0];
        let f = figures("y", &t, &a, Some(&g), Some(&q));
        assert_eq!((f.differing, f.max_steps), (2, Some(3)));
        assert_eq!(f.max_abs.0, 1.5);
        // target noise 0.25, signal 6: 10·log10(24) dB; against noise 0.25 + 1 = 1.25.
        assert!((f.target_sqnr_db.unwrap().0 - 10.0 * 24f64.log10()).abs() < 1e-12);
        assert!((f.against_sqnr_db.unwrap().0 - 10.0 * (6.0f64 / 1.25).log10()).abs() < 1e-12);
        assert!(departs(&f, 0.0, &rule(2, None)));
        assert!(!departs(&f, 0.0, &rule(4, None)));
        // By SQNR: the target is 13.8 dB, the comparison 6.8 dB: the target is the better.
        assert!(!departs(&f, 0.0, &rule(2, Some(10.0))));
        let swapped = figures("y", &a, &t, Some(&g), Some(&q));
        assert!(departs(&swapped, 0.0, &rule(2, Some(10.0))));
    }

    #[test]
    fn float_outputs_depart_relative_to_the_comparisons_magnitude() {
        let t = Tensor::new(vec![2], TensorData::Float32(vec![1.0, 2.001])).unwrap();
        let a = Tensor::new(vec![2], TensorData::Float32(vec![1.0, 2.0])).unwrap();
        let f = figures("y", &t, &a, None, None);
        assert_eq!((f.differing, f.max_steps), (1, None));
        assert!(!departs(&f, 2.0, &rule(2, None)), "0.0005 of the peak is within 2^-10");
        let far = Tensor::new(vec![2], TensorData::Float32(vec![1.0, 2.01])).unwrap();
        assert!(departs(&figures("y", &far, &a, None, None), 2.0, &rule(2, None)));
    }
}
