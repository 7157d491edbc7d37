//! Element-wise error statistics of one output against its golden counterpart, accumulated over
//! samples in one pass. Definitions: `docs/metrics.md`.
//!
//! The float32 path is the hot loop of every audit: it works on blocks of 64 elements with eight
//! independent accumulators per sum (so the compiler vectorises it and the adds do not wait on
//! each other), and falls back to a careful per-element path only for blocks that hold a NaN or an
//! infinity. Differences and sums are computed in double precision, so `max_abs` is exact and the
//! sums carry no float32 rounding; the eight partial sums make the result independent of the
//! vector width the CPU offers.
//!
//! The max ULP distance is also kept away from zero: a ULP distance counts every float between
//! two values, so 0 and 6e-4 are about 10^9 apart while 0.5 and 0.6 are 1.7·10^6 apart. Pairs
//! with a value below [`NEAR_ZERO`] times the sample's largest finite golden magnitude are left
//! out of that second maximum, so a report can say when the max ULP is only a near-zero effect.

use crate::data::tensor::TensorData;

const EXP_MASK: u32 = 0x7f80_0000;
const MAGNITUDE: u32 = 0x7fff_ffff;
const BLOCK: usize = 64;
const LANES: usize = 8;

/// A value whose magnitude is below this fraction of its sample's largest finite golden
/// magnitude is near zero, where ULP distances explode (see the module documentation).
pub const NEAR_ZERO: f64 = 1e-6;

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
    /// The max ULP distance over the finite pairs away from zero (both values at least
    /// [`NEAR_ZERO`] times the sample's largest finite golden magnitude); defined with `max_ulp`.
    pub max_ulp_away_from_zero: Option<u64>,
    /// Finite pairs away from zero: what `max_ulp_away_from_zero` is taken over.
    pub pairs_away_from_zero: u64,
}

/// The max ULP distance when it comes from pairs near zero ([`ErrorStats::near_zero_ulp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NearZeroUlp {
    /// The max ULP distance over every finite pair.
    pub max_ulp: u64,
    /// The max over the pairs away from zero; `None` when every pair is near zero.
    pub away_from_zero: Option<u64>,
}

/// Maps float32 bits to integers ordered like the floats, with +0 and -0 both at 0.
#[inline(always)]
fn ordered32(bits: u32) -> i32 {
    let magnitude = (bits & MAGNITUDE) as i32;
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

/// The bits of the smallest float32 magnitude that is not near zero in a sample whose golden
/// values are `gold`: [`NEAR_ZERO`] times its largest finite magnitude. Positive floats order as
/// their bits do, so magnitudes are compared as integers (and this loop vectorises).
#[inline(always)]
fn near_zero_floor32(gold: &[f32]) -> u32 {
    let mut peak = [0u32; LANES];
    let chunks = gold.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            let m = c[l].to_bits() & MAGNITUDE;
            peak[l] = if m < EXP_MASK && m > peak[l] { m } else { peak[l] };
        }
    }
    let finite = tail.iter().map(|v| v.to_bits() & MAGNITUDE).filter(|&m| m < EXP_MASK);
    let peak = peak.into_iter().chain(finite).max().unwrap_or(0);
    ((f32::from_bits(peak) as f64 * NEAR_ZERO) as f32).to_bits()
}

/// What the per-element paths count besides the sums: bit-identical elements, the max ULP
/// distance, and the same away from zero with its population.
#[derive(Debug, Default)]
struct Tally {
    identical: u64,
    max_ulp: u64,
    max_ulp_away: u64,
    away: u64,
}

/// The fast path's partial sums, one per lane.
#[derive(Default)]
struct LaneSums {
    abs: [f64; LANES],
    err2: [f64; LANES],
    ref2: [f64; LANES],
    out2: [f64; LANES],
    dot: [f64; LANES],
    maxabs: [f64; LANES],
}

/// The fast path's counters, one per lane, folded into a [`Tally`] before they can overflow.
#[derive(Default)]
struct LaneCounts {
    ulp: [u32; LANES],
    ulp_away: [u32; LANES],
    same: [u32; LANES],
    away: [u32; LANES],
}

impl LaneCounts {
    fn fold_into(&self, t: &mut Tally) {
        t.max_ulp = self.ulp.iter().fold(t.max_ulp, |m, &u| m.max(u as u64));
        t.max_ulp_away = self.ulp_away.iter().fold(t.max_ulp_away, |m, &u| m.max(u as u64));
        t.identical += self.same.iter().map(|&s| s as u64).sum::<u64>();
        t.away += self.away.iter().map(|&s| s as u64).sum::<u64>();
    }
}

/// One block of finite pairs, lane by lane; `floor` as [`near_zero_floor32`] gives it.
#[inline(always)]
fn finite_block(o: &[f32], r: &[f32], floor: u32, sums: &mut LaneSums, counts: &mut LaneCounts) {
    for j in 0..BLOCK / LANES {
        for l in 0..LANES {
            let i = j * LANES + l;
            let (ob, rb) = (o[i].to_bits(), r[i].to_bits());
            let (ov, rv) = (o[i] as f64, r[i] as f64);
            let d = ov - rv;
            let ad = d.abs();
            sums.abs[l] += ad;
            sums.err2[l] += d * d;
            sums.ref2[l] += rv * rv;
            sums.out2[l] += ov * ov;
            sums.dot[l] += ov * rv;
            sums.maxabs[l] = if ad > sums.maxabs[l] { ad } else { sums.maxabs[l] };
            let (a, c) = (ordered32(ob), ordered32(rb));
            // |a - c| fits in 32 unsigned bits; computed without 64-bit lanes.
            let u = a.max(c).wrapping_sub(a.min(c)) as u32;
            counts.ulp[l] = if u > counts.ulp[l] { u } else { counts.ulp[l] };
            // Magnitudes are below 2^31: signed compares, which vector units have.
            let least = ((ob & MAGNITUDE) as i32).min((rb & MAGNITUDE) as i32);
            let away = least >= floor as i32;
            let ua = if away { u } else { 0 };
            counts.ulp_away[l] = counts.ulp_away[l].max(ua);
            counts.away[l] += away as u32;
            counts.same[l] += (ob == rb) as u32;
        }
    }
}

impl ErrorStats {
    /// Starts statistics for a pair of element types.
    pub fn new(same_dtype: bool, float_dtype: bool) -> ErrorStats {
        let ulp = (same_dtype && float_dtype).then_some(0);
        ErrorStats {
            bit_identical: same_dtype.then_some(0),
            max_ulp: ulp,
            max_ulp_away_from_zero: ulp,
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
        let floor = near_zero_floor32(gold);
        let blocks = n / BLOCK;
        let mut tally = Tally::default();
        // Lane accumulators live across blocks; counters are folded every CHUNK blocks so the
        // 32-bit lanes cannot overflow.
        const CHUNK: usize = 1 << 16;
        let mut sums = LaneSums::default();
        let mut finite_blocks = 0u64;
        for chunk_start in (0..blocks).step_by(CHUNK) {
            let mut counts = LaneCounts::default();
            for b in chunk_start..(chunk_start + CHUNK).min(blocks) {
                let o = &out[b * BLOCK..(b + 1) * BLOCK];
                let r = &gold[b * BLOCK..(b + 1) * BLOCK];
                let mut nonfinite = false;
                for i in 0..BLOCK {
                    nonfinite |= (o[i].to_bits() & EXP_MASK == EXP_MASK) | (r[i].to_bits() & EXP_MASK == EXP_MASK);
                }
                if nonfinite {
                    self.update_f32_careful(o, r, floor, &mut tally);
                    continue;
                }
                finite_blocks += 1;
                finite_block(o, r, floor, &mut sums, &mut counts);
            }
            counts.fold_into(&mut tally);
        }
        self.sum_abs += sums.abs.iter().sum::<f64>();
        self.sum_sq_err += sums.err2.iter().sum::<f64>();
        self.sum_sq_ref += sums.ref2.iter().sum::<f64>();
        self.sum_sq_out += sums.out2.iter().sum::<f64>();
        self.sum_dot += sums.dot.iter().sum::<f64>();
        self.max_abs = sums.maxabs.iter().fold(self.max_abs, |a, &b| a.max(b));
        self.finite_pairs += finite_blocks * BLOCK as u64;
        self.update_f32_careful(&out[blocks * BLOCK..], &gold[blocks * BLOCK..], floor, &mut tally);
        self.elements += n as u64;
        if let Some(b) = self.bit_identical.as_mut() {
            *b += tally.identical;
        }
        self.add_ulp(tally.max_ulp, tally.max_ulp_away, tally.away);
    }

    /// Folds one sample's ULP figures in (when ULP distances are defined for this pair of types).
    fn add_ulp(&mut self, max_ulp: u64, max_ulp_away: u64, away: u64) {
        if let (Some(u), Some(a)) = (self.max_ulp.as_mut(), self.max_ulp_away_from_zero.as_mut()) {
            *u = (*u).max(max_ulp);
            *a = (*a).max(max_ulp_away);
            self.pairs_away_from_zero += away;
        }
    }

    /// Per-element float32 path that handles NaN and infinities; `floor` as
    /// [`near_zero_floor32`] gives it for the sample.
    fn update_f32_careful(&mut self, o: &[f32], r: &[f32], floor: u32, tally: &mut Tally) {
        for (&ov, &rv) in o.iter().zip(r) {
            let (ob, rb) = (ov.to_bits(), rv.to_bits());
            tally.identical += (ob == rb || (ov.is_nan() && rv.is_nan())) as u64;
            self.nan_count += ov.is_nan() as u64;
            self.inf_count += ov.is_infinite() as u64;
            if ov.is_finite() && rv.is_finite() {
                let (ov, rv) = (ov as f64, rv as f64);
                self.add_finite_pair(ov, rv);
                let u = (ordered32(ob) as i64 - ordered32(rb) as i64).unsigned_abs();
                tally.max_ulp = tally.max_ulp.max(u);
                if ob & MAGNITUDE >= floor && rb & MAGNITUDE >= floor {
                    tally.max_ulp_away = tally.max_ulp_away.max(u);
                    tally.away += 1;
                }
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
            crate::data::tensor::DType::Float16 => Some(15),
            crate::data::tensor::DType::Float64 => Some(63),
            crate::data::tensor::DType::Float32 => Some(31),
            _ => None,
        }
        .filter(|_| same && self.max_ulp.is_some());
        // Near zero: below NEAR_ZERO times the sample's largest finite golden magnitude.
        let peak = match sign_bit {
            Some(_) => (0..n)
                .map(|i| gold.get_f64(i).abs())
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max),
            None => 0.0,
        };
        let floor = peak * NEAR_ZERO;
        let mut tally = Tally::default();
        for i in 0..n {
            let (ov, rv) = (out.get_f64(i), gold.get_f64(i));
            if same {
                let equal_bits = ob[i * size..(i + 1) * size] == rb[i * size..(i + 1) * size];
                if let Some(b) = self.bit_identical.as_mut() {
                    *b += (equal_bits || (ov.is_nan() && rv.is_nan())) as u64;
                }
            }
            if let (Some(sb), true) = (sign_bit, ov.is_finite() && rv.is_finite()) {
                let read = |bytes: &[u8]| bytes.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64);
                let a = ordered(read(&ob[i * size..(i + 1) * size]), sb);
                let b = ordered(read(&rb[i * size..(i + 1) * size]), sb);
                let u = (a - b).unsigned_abs() as u64;
                tally.max_ulp = tally.max_ulp.max(u);
                if ov.abs() >= floor && rv.abs() >= floor {
                    tally.max_ulp_away = tally.max_ulp_away.max(u);
                    tally.away += 1;
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
        self.add_ulp(tally.max_ulp, tally.max_ulp_away, tally.away);
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
        } else {
            super::sqnr_from_sums(self.sum_sq_ref, self.sum_sq_err)
        }
    }

    /// Max ULP distance over finite pairs; `None` when undefined (different types, or a position
    /// non-finite on one side only).
    pub fn max_ulp_distance(&self) -> Option<u64> {
        self.max_ulp.filter(|_| self.nonfinite_mismatch == 0)
    }

    /// When the max ULP distance is set only by pairs near zero, where a ULP distance counts
    /// every float between the two values: the max over every pair and over the pairs away from
    /// zero. `None` when the max ULP is undefined or some pair away from zero reaches it.
    pub fn near_zero_ulp(&self) -> Option<NearZeroUlp> {
        let max_ulp = self.max_ulp_distance()?;
        let away = self.max_ulp_away_from_zero?;
        (away < max_ulp).then_some(NearZeroUlp {
            max_ulp,
            away_from_zero: (self.pairs_away_from_zero > 0).then_some(away),
        })
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
        let mut tally = Tally::default();
        careful.update_f32_careful(&o, &r, near_zero_floor32(&r), &mut tally);
        // The careful path leaves the element count to its caller.
        careful.elements = o.len() as u64;
        assert_eq!(fast.bit_identical, Some(tally.identical));
        assert_eq!(fast.max_ulp, Some(tally.max_ulp));
        assert_eq!(fast.max_ulp_away_from_zero, Some(tally.max_ulp_away));
        assert_eq!(fast.pairs_away_from_zero, tally.away);
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

    /// ULP distance of two finite float32 values, straight from their bits (an independent
    /// reading: sign-magnitude to a signed integer line, in i64).
    fn ulps(a: f32, b: f32) -> u64 {
        let line = |v: f32| {
            let bits = v.to_bits() as i64;
            if bits >> 31 == 1 {
                -(bits & 0x7fff_ffff)
            } else {
                bits
            }
        };
        (line(a) - line(b)).unsigned_abs()
    }

    #[test]
    fn the_max_ulp_set_near_zero_is_told_apart_from_the_rest() {
        // A softmax-like output: the target rounds small probabilities to 0 (a quantized code 0).
        let gold = [0.597f32, 0.358, 0.0185, 6.07e-4, 5.86e-8, 4.54e-3];
        let out = [0.584f32, 0.369, 0.0196, 0.0, 0.0, 3.9e-3];
        // Near zero: a value below 1e-6 x 0.597; the zeros and 5.86e-8 are, 6.07e-4 is not.
        let floor = 0.597f64 * 1e-6;
        let all = (0..6).map(|i| ulps(out[i], gold[i])).max().unwrap();
        let away = (0..6)
            .filter(|&i| (out[i] as f64).abs() >= floor && (gold[i] as f64).abs() >= floor)
            .map(|i| ulps(out[i], gold[i]))
            .max()
            .unwrap();
        // 0 against 6.07e-4 spans about 10^9 floats; the pairs away from zero far fewer.
        assert_eq!(all, ulps(0.0, 6.07e-4));
        assert!(all > 900_000_000 && away < 2_000_000, "{all} {away}");
        let s = stats(&out, &gold);
        assert_eq!(s.max_ulp, Some(all));
        assert_eq!(s.max_ulp_away_from_zero, Some(away));
        assert_eq!(s.pairs_away_from_zero, 4);
        assert_eq!(
            s.near_zero_ulp(),
            Some(NearZeroUlp {
                max_ulp: all,
                away_from_zero: Some(away)
            })
        );
        // The same figures from the fast path: 64-element blocks of the same six pairs (the
        // largest golden magnitude, hence the floor, unchanged), the last one on the careful path.
        let o: Vec<f32> = out.iter().copied().cycle().take(6 * 70).collect();
        let g: Vec<f32> = gold.iter().copied().cycle().take(6 * 70).collect();
        let long = stats(&o, &g);
        assert_eq!(long.max_ulp, Some(all));
        assert_eq!(long.max_ulp_away_from_zero, Some(away));
        assert_eq!(long.pairs_away_from_zero, 4 * 70);
    }

    #[test]
    fn a_max_ulp_away_from_zero_needs_no_note() {
        // 3.0 against 2.0 is the max, away from zero; the near-zero pair (0 against the fifth
        // subnormal, 5 ULP) is smaller.
        let s = stats(&[3.0, f32::from_bits(5), 0.5], &[2.0, 0.0, 0.5]);
        assert_eq!(s.max_ulp, Some(1 << 22));
        assert_eq!(s.max_ulp_away_from_zero, Some(1 << 22));
        assert_eq!(s.near_zero_ulp(), None);
        // Every pair near zero but the peak's own (exact): the max has nothing to compare with.
        let s = stats(&[1e-9, 1.0], &[0.0, 1.0]);
        assert_eq!(
            s.near_zero_ulp(),
            Some(NearZeroUlp {
                max_ulp: ulps(1e-9, 0.0),
                away_from_zero: Some(0)
            })
        );
        // The only pair has a zero: nothing is away from zero.
        let s = stats(&[0.0], &[1e-3]);
        assert_eq!(s.pairs_away_from_zero, 0);
        assert_eq!(
            s.near_zero_ulp(),
            Some(NearZeroUlp {
                max_ulp: ulps(0.0, 1e-3),
                away_from_zero: None
            })
        );
        // An all-zero golden sample has no scale: nothing in it is near zero.
        let s = stats(&[1e-9], &[0.0]);
        assert_eq!(s.pairs_away_from_zero, 1);
        assert_eq!(s.near_zero_ulp(), None);
    }

    #[test]
    fn the_floor_is_each_samples_own() {
        // Sample 1's largest value is 1e-3, so 1e-8 is not near zero there (floor 1e-9) though
        // it would be against sample 2's largest, 100.
        let mut s = ErrorStats::new(true, true);
        s.update_f32(&[1e-3, 2e-8], &[1e-3, 1e-8]);
        s.update_f32(&[100.0, 0.0], &[100.0, 1e-5]);
        assert_eq!(s.max_ulp, Some(ulps(0.0, 1e-5)));
        assert_eq!(s.max_ulp_away_from_zero, Some(ulps(2e-8, 1e-8)));
        assert_eq!(s.pairs_away_from_zero, 3);
    }

    #[test]
    fn float16_and_float64_tell_near_zero_apart_too() {
        let mut s = ErrorStats::new(true, true);
        // float16: 1.0 = 0x3c00, 1.0 + 2^-10 = 0x3c01; 0 against the smallest normal 0x0400.
        s.update(
            &TensorData::Float16(vec![0x3c01, 0x0000]),
            &TensorData::Float16(vec![0x3c00, 0x0400]),
        );
        assert_eq!(s.max_ulp, Some(0x0400));
        assert_eq!(s.max_ulp_away_from_zero, Some(1));
        let mut d = ErrorStats::new(true, true);
        d.update(
            &TensorData::Float64(vec![2.0, 0.0]),
            &TensorData::Float64(vec![2.0, 1e-300]),
        );
        assert_eq!(d.max_ulp, Some(1e-300f64.to_bits()));
        assert_eq!(d.max_ulp_away_from_zero, Some(0));
        assert_eq!(d.pairs_away_from_zero, 1);
    }

    #[test]
    fn zero_signal() {
        let s = stats(&[1.0, 0.0], &[0.0, 0.0]);
        assert_eq!(s.sqnr_db(), f64::NEG_INFINITY);
        assert_eq!(s.cosine(), 0.0);
    }
}
