//! Element-wise error statistics of one output against its golden counterpart, accumulated over
//! samples in one pass. Definitions: `docs/metrics.md`.
//!
//! The float32 path is the hot loop of every audit: it works on blocks of 64 elements with eight
//! independent accumulators per sum (so the compiler vectorises it and the adds do not wait on
//! each other), and falls back to a careful per-element path only for blocks that hold a NaN or an
//! infinity. Differences and sums are computed in double precision, so `max_abs` is exact and the
//! sums carry no float32 rounding; the eight partial sums make the result independent of the
//! vector width the CPU offers.

use crate::tensor::TensorData;

const EXP_MASK: u32 = 0x7f80_0000;
const BLOCK: usize = 64;
const LANES: usize = 8;

/// Running sums for one output of one target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorStats {
    pub elements: u64,
    /// `None` when the two sides have different element types.
    pub bit_identical: Option<u64>,
    pub nan_count: u64,
    pub inf_count: u64,
    pub nonfinite_mismatch: u64,
    /// Positions where both values are finite (the population of the error sums).
    pub finite_pairs: u64,
    pub max_abs: f64,
    pub sum_abs: f64,
    pub sum_sq_err: f64,
    pub sum_sq_ref: f64,
    pub sum_sq_out: f64,
    pub sum_dot: f64,
    /// `None` unless both sides have the same float type.
    pub max_ulp: Option<u64>,
}

/// Maps float32 bits to integers ordered like the floats, with +0 and -0 both at 0.
#[inline(always)]
fn ordered32(bits: u32) -> i32 {
    let magnitude = (bits & 0x7fff_ffff) as i32;
    if bits >> 31 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// The same for float16 and float64 bit patterns.
fn ordered(bits: u64, sign_bit: u32) -> i128 {
    let magnitude = (bits & ((1u64 << sign_bit) - 1)) as i128;
    if (bits >> sign_bit) & 1 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

impl ErrorStats {
    /// Starts statistics for a pair of element types.
    pub fn new(same_dtype: bool, float_dtype: bool) -> ErrorStats {
        ErrorStats {
            bit_identical: same_dtype.then_some(0),
            max_ulp: (same_dtype && float_dtype).then_some(0),
            ..Default::default()
        }
    }

    /// Adds one sample's output (`out`) against the golden output (`gold`), same length.
    pub fn update(&mut self, out: &TensorData, gold: &TensorData) {
        debug_assert_eq!(out.len(), gold.len());
        match (out, gold) {
            (TensorData::Float32(o), TensorData::Float32(r)) => self.update_f32(o, r),
            _ => self.update_generic(out, gold),
        }
    }

    /// The float32 fast path: picks the widest vector unit the CPU has at run time.
    pub fn update_f32(&mut self, out: &[f32], gold: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                unsafe { self.update_f32_avx2(out, gold) };
                return;
            }
        }
        self.update_f32_portable(out, gold);
    }

    /// The kernel compiled for AVX2 (256-bit lanes). No FMA: fused multiply-adds round
    /// differently, and reports must not depend on the CPU they were computed on.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn update_f32_avx2(&mut self, out: &[f32], gold: &[f32]) {
        self.update_f32_portable(out, gold);
    }

    /// The kernel; `inline(always)` so each caller gets it compiled for its own target features.
    #[inline(always)]
    fn update_f32_portable(&mut self, out: &[f32], gold: &[f32]) {
        let n = out.len().min(gold.len());
        let (out, gold) = (&out[..n], &gold[..n]);
        let blocks = n / BLOCK;
        let mut identical = 0u64;
        let mut max_ulp = 0u64;
        // Lane accumulators live across blocks; counters are folded every CHUNK blocks so the
        // 32-bit lanes cannot overflow.
        const CHUNK: usize = 1 << 16;
        let mut abs = [0f64; LANES];
        let mut err2 = [0f64; LANES];
        let mut ref2 = [0f64; LANES];
        let mut out2 = [0f64; LANES];
        let mut dot = [0f64; LANES];
        let mut maxabs = [0f64; LANES];
        let mut finite_blocks = 0u64;
        for chunk_start in (0..blocks).step_by(CHUNK) {
            let mut ulp = [0u32; LANES];
            let mut same = [0u32; LANES];
            for b in chunk_start..(chunk_start + CHUNK).min(blocks) {
                let o = &out[b * BLOCK..(b + 1) * BLOCK];
                let r = &gold[b * BLOCK..(b + 1) * BLOCK];
                let mut nonfinite = false;
                for i in 0..BLOCK {
                    nonfinite |= (o[i].to_bits() & EXP_MASK == EXP_MASK) | (r[i].to_bits() & EXP_MASK == EXP_MASK);
                }
                if nonfinite {
                    self.update_f32_careful(o, r, &mut identical, &mut max_ulp);
                    continue;
                }
                finite_blocks += 1;
                for j in 0..BLOCK / LANES {
                    for l in 0..LANES {
                        let i = j * LANES + l;
                        let (ob, rb) = (o[i].to_bits(), r[i].to_bits());
                        let (ov, rv) = (o[i] as f64, r[i] as f64);
                        let d = ov - rv;
                        let ad = d.abs();
                        abs[l] += ad;
                        err2[l] += d * d;
                        ref2[l] += rv * rv;
                        out2[l] += ov * ov;
                        dot[l] += ov * rv;
                        maxabs[l] = if ad > maxabs[l] { ad } else { maxabs[l] };
                        let (a, c) = (ordered32(ob), ordered32(rb));
                        // |a - c| fits in 32 unsigned bits; computed without 64-bit lanes.
                        let u = a.max(c).wrapping_sub(a.min(c)) as u32;
                        ulp[l] = if u > ulp[l] { u } else { ulp[l] };
                        same[l] += (ob == rb) as u32;
                    }
                }
            }
            max_ulp = ulp.iter().fold(max_ulp, |m, &u| m.max(u as u64));
            identical += same.iter().map(|&s| s as u64).sum::<u64>();
        }
        self.sum_abs += abs.iter().sum::<f64>();
        self.sum_sq_err += err2.iter().sum::<f64>();
        self.sum_sq_ref += ref2.iter().sum::<f64>();
        self.sum_sq_out += out2.iter().sum::<f64>();
        self.sum_dot += dot.iter().sum::<f64>();
        self.max_abs = maxabs.iter().fold(self.max_abs, |a, &b| a.max(b));
        self.finite_pairs += finite_blocks * BLOCK as u64;
        self.update_f32_careful(
            &out[blocks * BLOCK..],
            &gold[blocks * BLOCK..],
            &mut identical,
            &mut max_ulp,
        );
        self.elements += n as u64;
        if let Some(b) = self.bit_identical.as_mut() {
            *b += identical;
        }
        if let Some(u) = self.max_ulp.as_mut() {
            *u = (*u).max(max_ulp);
        }
    }

    /// Per-element float32 path that handles NaN and infinities.
    fn update_f32_careful(&mut self, o: &[f32], r: &[f32], identical: &mut u64, max_ulp: &mut u64) {
        for (&ov, &rv) in o.iter().zip(r) {
            let (ob, rb) = (ov.to_bits(), rv.to_bits());
            *identical += (ob == rb || (ov.is_nan() && rv.is_nan())) as u64;
            self.nan_count += ov.is_nan() as u64;
            self.inf_count += ov.is_infinite() as u64;
            if ov.is_finite() && rv.is_finite() {
                let (ov, rv) = (ov as f64, rv as f64);
                self.add_finite_pair(ov, rv);
                *max_ulp = (*max_ulp).max((ordered32(ob) as i64 - ordered32(rb) as i64).unsigned_abs());
            } else if !(ov.is_nan() && rv.is_nan()) && ob != rb {
                self.nonfinite_mismatch += 1;
            }
        }
    }

    #[inline]
    fn add_finite_pair(&mut self, ov: f64, rv: f64) {
        self.add_pair_with_difference(ov, rv, ov - rv);
    }

    #[inline]
    fn add_pair_with_difference(&mut self, ov: f64, rv: f64, d: f64) {
        self.finite_pairs += 1;
        self.max_abs = self.max_abs.max(d.abs());
        self.sum_abs += d.abs();
        self.sum_sq_err += d * d;
        self.sum_sq_ref += rv * rv;
        self.sum_sq_out += ov * ov;
        self.sum_dot += ov * rv;
    }

    /// Any pair of element types: values compared as doubles.
    fn update_generic(&mut self, out: &TensorData, gold: &TensorData) {
        let n = out.len().min(gold.len());
        let same = out.dtype() == gold.dtype();
        let size = out.dtype().size();
        let (ob, rb) = if same {
            (out.to_le_bytes(), gold.to_le_bytes())
        } else {
            (Vec::new(), Vec::new())
        };
        let sign_bit = match out.dtype() {
            crate::tensor::DType::Float16 => Some(15),
            crate::tensor::DType::Float64 => Some(63),
            crate::tensor::DType::Float32 => Some(31),
            _ => None,
        };
        for i in 0..n {
            let (ov, rv) = (out.get_f64(i), gold.get_f64(i));
            if same {
                let equal_bits = ob[i * size..(i + 1) * size] == rb[i * size..(i + 1) * size];
                if let Some(b) = self.bit_identical.as_mut() {
                    *b += (equal_bits || (ov.is_nan() && rv.is_nan())) as u64;
                }
                if let (Some(sb), Some(u), true) = (sign_bit, self.max_ulp.as_mut(), ov.is_finite() && rv.is_finite()) {
                    let read = |bytes: &[u8]| bytes.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64);
                    let a = ordered(read(&ob[i * size..(i + 1) * size]), sb);
                    let b = ordered(read(&rb[i * size..(i + 1) * size]), sb);
                    *u = (*u).max((a - b).unsigned_abs() as u64);
                }
            }
            self.nan_count += ov.is_nan() as u64;
            self.inf_count += ov.is_infinite() as u64;
            if let (Some(oi), Some(ri)) = (out.get_i128(i), gold.get_i128(i)) {
                // Integers: the difference is exact even where the values are beyond 2^53.
                self.add_pair_with_difference(ov, rv, (oi - ri) as f64);
            } else if ov.is_finite() && rv.is_finite() {
                self.add_finite_pair(ov, rv);
            } else if !(ov.is_nan() && rv.is_nan()) && ov != rv {
                self.nonfinite_mismatch += 1;
            }
        }
        self.elements += n as u64;
    }

    /// max |o - r|, infinite when some position is non-finite on one side only, undefined (NaN)
    /// without elements.
    pub fn max_abs(&self) -> f64 {
        if self.elements == 0 {
            f64::NAN
        } else if self.nonfinite_mismatch > 0 {
            f64::INFINITY
        } else {
            self.max_abs
        }
    }

    /// The mean of a per-pair quantity: infinite error when a position is non-finite on one side
    /// only, 0 when every position is a matching non-finite value, undefined without elements.
    fn mean_of(&self, sum: f64) -> f64 {
        if self.nonfinite_mismatch > 0 {
            f64::INFINITY
        } else if self.finite_pairs > 0 {
            sum / self.finite_pairs as f64
        } else if self.elements > 0 {
            0.0
        } else {
            f64::NAN
        }
    }

    /// Mean absolute error over finite pairs.
    pub fn mean_abs(&self) -> f64 {
        self.mean_of(self.sum_abs)
    }

    /// Root mean square error over finite pairs.
    pub fn rmse(&self) -> f64 {
        self.mean_of(self.sum_sq_err).sqrt()
    }

    /// Cosine similarity; 1 for two zero vectors, 0 when only one is zero, undefined (NaN) when a
    /// position is non-finite on one side only or there are no elements.
    pub fn cosine(&self) -> f64 {
        if self.nonfinite_mismatch > 0 || self.elements == 0 {
            return f64::NAN;
        }
        match (self.sum_sq_out == 0.0, self.sum_sq_ref == 0.0) {
            (true, true) => 1.0,
            (true, false) | (false, true) => 0.0,
            // Rounding can push the quotient a hair past ±1, which a cosine never is.
            _ => (self.sum_dot / (self.sum_sq_out.sqrt() * self.sum_sq_ref.sqrt())).clamp(-1.0, 1.0),
        }
    }

    /// 10·log10(Σr² / Σ(o − r)²): +inf for an exact match, -inf for a zero signal with noise and
    /// for any position that is non-finite on one side only (an infinite error), undefined (NaN)
    /// without elements: an empty output matches nothing.
    pub fn sqnr_db(&self) -> f64 {
        if self.elements == 0 {
            f64::NAN
        } else if self.nonfinite_mismatch > 0 {
            f64::NEG_INFINITY
        } else if self.sum_sq_err == 0.0 {
            f64::INFINITY
        } else if self.sum_sq_ref == 0.0 {
            f64::NEG_INFINITY
        } else {
            10.0 * (self.sum_sq_ref / self.sum_sq_err).log10()
        }
    }

    /// Max ULP distance over finite pairs; `None` when undefined (different types, or a position
    /// non-finite on one side only).
    pub fn max_ulp_distance(&self) -> Option<u64> {
        self.max_ulp.filter(|_| self.nonfinite_mismatch == 0)
    }

    /// Elements that are not bit-identical (when defined).
    pub fn differing(&self) -> Option<u64> {
        self.bit_identical.map(|b| self.elements - b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(o: &[f32], r: &[f32]) -> ErrorStats {
        let mut s = ErrorStats::new(true, true);
        s.update_f32(o, r);
        s
    }

    #[test]
    fn hand_worked_case() {
        // o = [1, 2, 3, 4], r = [1, 2.5, 2, 4]: errors 0, -0.5, 1, 0.
        let s = stats(&[1.0, 2.0, 3.0, 4.0], &[1.0, 2.5, 2.0, 4.0]);
        assert_eq!(s.elements, 4);
        assert_eq!(s.bit_identical, Some(2));
        assert_eq!(s.max_abs(), 1.0);
        assert_eq!(s.mean_abs(), 0.375);
        assert_eq!(s.rmse(), (1.25f64 / 4.0).sqrt());
        // Σr² = 1 + 6.25 + 4 + 16 = 27.25; Σe² = 1.25.
        assert!((s.sqnr_db() - 10.0 * (27.25f64 / 1.25).log10()).abs() < 1e-12);
        // Σor = 1 + 5 + 6 + 16 = 28; Σo² = 30.
        assert!((s.cosine() - 28.0 / (30f64.sqrt() * 27.25f64.sqrt())).abs() < 1e-12);
        // 3.0 vs 2.0: 3.0 = 0x40400000, 2.0 = 0x40000000 → 2^22 ulps apart.
        assert_eq!(s.max_ulp, Some(1 << 22));
    }

    #[test]
    fn no_elements_is_not_measured() {
        let s = stats(&[], &[]);
        assert!(s.sqnr_db().is_nan() && s.max_abs().is_nan() && s.cosine().is_nan() && s.rmse().is_nan());
    }

    #[test]
    fn exact_match_is_infinite_sqnr() {
        let v: Vec<f32> = (0..1000).map(|i| (i as f32).sin()).collect();
        let s = stats(&v, &v);
        assert_eq!(s.sqnr_db(), f64::INFINITY);
        assert_eq!(s.bit_identical, Some(1000));
        assert_eq!(s.max_ulp, Some(0));
        assert_eq!(s.cosine(), 1.0);
    }

    #[test]
    fn signed_zeros_are_zero_ulps_apart_but_not_bit_identical() {
        let s = stats(&[0.0, -0.0], &[-0.0, 0.0]);
        assert_eq!(s.bit_identical, Some(0));
        assert_eq!(s.max_ulp, Some(0));
        assert_eq!(s.max_abs(), 0.0);
    }

    #[test]
    fn adjacent_floats_across_zero() {
        // The smallest positive and negative subnormals are 2 ulps apart.
        let tiny = f32::from_bits(1);
        let s = stats(&[tiny], &[-tiny]);
        assert_eq!(s.max_ulp, Some(2));
    }

    #[test]
    fn nans_match_nans_and_count_as_mismatch_against_numbers() {
        let o = [f32::NAN, f32::NAN, 1.0, f32::INFINITY, f32::INFINITY];
        let r = [f32::from_bits(0x7fc0_0001), 1.0, 1.0, f32::INFINITY, 2.0];
        let s = stats(&o, &r);
        assert_eq!(s.bit_identical, Some(3));
        assert_eq!(s.nan_count, 2);
        assert_eq!(s.inf_count, 2);
        assert_eq!(s.nonfinite_mismatch, 2);
        assert_eq!(s.finite_pairs, 1);
        assert_eq!(s.max_abs(), f64::INFINITY);
        // An infinite error is not an exact match, whatever the finite pairs say.
        assert_eq!(s.sqnr_db(), f64::NEG_INFINITY);
        assert!(s.cosine().is_nan());
        assert_eq!(s.mean_abs(), f64::INFINITY);
        assert_eq!(s.max_ulp_distance(), None);
    }

    #[test]
    fn fast_and_careful_paths_agree() {
        // 1000 elements: 15 full blocks take the fast path, the tail the careful one.
        let r: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let o: Vec<f32> = r
            .iter()
            .enumerate()
            .map(|(i, v)| v + ((i % 5) as f32 - 2.0) * 1e-3)
            .collect();
        let fast = stats(&o, &r);
        let mut careful = ErrorStats::new(true, true);
        let (mut id, mut ulp) = (0, 0);
        careful.update_f32_careful(&o, &r, &mut id, &mut ulp);
        // The careful path leaves the element count to its caller.
        careful.elements = o.len() as u64;
        assert_eq!(fast.bit_identical, Some(id));
        assert_eq!(fast.max_ulp, Some(ulp));
        assert_eq!(fast.max_abs(), careful.max_abs());
        assert!((fast.sum_sq_err - careful.sum_sq_err).abs() <= 1e-12 * careful.sum_sq_err);
        assert!((fast.sum_dot - careful.sum_dot).abs() <= 1e-12 * careful.sum_dot.abs());
    }

    #[test]
    fn every_vector_width_gives_the_same_bits() {
        let r: Vec<f32> = (0..100_003).map(|i| ((i as f32) * 0.013).sin() * 5.0).collect();
        let o: Vec<f32> = r.iter().map(|v| (v * 31.0).round() / 31.0).collect();
        let mut dispatched = ErrorStats::new(true, true);
        dispatched.update_f32(&o, &r);
        let mut portable = ErrorStats::new(true, true);
        portable.update_f32_portable(&o, &r);
        assert_eq!(dispatched, portable);
    }

    #[test]
    fn generic_path_compares_integers_and_mixed_types() {
        let mut s = ErrorStats::new(true, false);
        s.update(
            &TensorData::Uint8(vec![0, 10, 255]),
            &TensorData::Uint8(vec![1, 10, 250]),
        );
        assert_eq!(s.bit_identical, Some(1));
        assert_eq!(s.max_abs(), 5.0);
        assert_eq!(s.max_ulp, None);
        let mut m = ErrorStats::new(false, false);
        m.update(&TensorData::Float64(vec![1.5]), &TensorData::Float32(vec![1.0]));
        assert_eq!(m.bit_identical, None);
        assert_eq!(m.max_abs(), 0.5);
    }

    #[test]
    fn int64_differences_beyond_two_to_the_53_are_exact() {
        let base = 100_000_000_000_000_000i64;
        let mut s = ErrorStats::new(true, false);
        s.update(
            &TensorData::Int64(vec![base + 1, base]),
            &TensorData::Int64(vec![base, base]),
        );
        assert_eq!(s.max_abs(), 1.0);
        assert_eq!(s.mean_abs(), 0.5);
        assert!(s.sqnr_db().is_finite());
        assert_eq!(s.bit_identical, Some(1));
    }

    #[test]
    fn float16_ulps() {
        let mut s = ErrorStats::new(true, true);
        // 1.0 = 0x3c00 and the next float16 0x3c01.
        s.update(&TensorData::Float16(vec![0x3c01]), &TensorData::Float16(vec![0x3c00]));
        assert_eq!(s.max_ulp, Some(1));
        assert_eq!(s.max_abs(), 2f64.powi(-10));
    }

    #[test]
    fn matching_nans_alone_are_no_error() {
        let s = stats(&[f32::NAN, f32::INFINITY], &[f32::NAN, f32::INFINITY]);
        assert_eq!(s.nonfinite_mismatch, 0);
        assert_eq!(s.mean_abs(), 0.0);
        assert_eq!(s.sqnr_db(), f64::INFINITY);
        let empty = stats(&[], &[]);
        assert!(empty.mean_abs().is_nan());
    }

    #[test]
    fn zero_signal() {
        let s = stats(&[1.0, 0.0], &[0.0, 0.0]);
        assert_eq!(s.sqnr_db(), f64::NEG_INFINITY);
        assert_eq!(s.cosine(), 0.0);
    }
}
