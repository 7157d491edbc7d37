//! Float16 from double precision, rounded once.

use half::f16;

/// Rounds a double to the nearest float16 (ties to even) in one step. `half`'s own conversion goes
/// through float32 on CPUs with F16C, which rounds twice and can differ in the last bit.
pub fn f64_to_f16_bits(v: f64) -> u16 {
    if v.is_nan() {
        return 0x7e00;
    }
    let a = v.abs();
    let quantum = if a < 2f64.powi(-14) {
        2f64.powi(-24) // subnormal spacing
    } else {
        let exponent = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        2f64.powi(exponent.min(15) - 10)
    };
    // Scaling by a power of two is exact, so this is the only rounding.
    let rounded = (a / quantum).round_ties_even() * quantum;
    let magnitude = if rounded > 65504.0 {
        f16::INFINITY
    } else {
        f16::from_f64(rounded)
    };
    let bits = magnitude.to_bits();
    if v.is_sign_negative() {
        bits | 0x8000
    } else {
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float16_rounding_is_single_and_to_even() {
        // 1 + 2^-11 is halfway between 1 and the next float16 (1 + 2^-10): ties to even gives 1.
        assert_eq!(f64_to_f16_bits(1.0 + 2f64.powi(-11)), 0x3c00);
        // Just above the tie rounds up. Via float32 this value would first round to the tie.
        assert_eq!(f64_to_f16_bits(1.0 + 2f64.powi(-11) + 2f64.powi(-40)), 0x3c01);
        assert_eq!(f64_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f64_to_f16_bits(65519.99), 0x7bff);
        assert_eq!(f64_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f64_to_f16_bits(-2f64.powi(-24)), 0x8001);
        assert_eq!(f64_to_f16_bits(2f64.powi(-25)), 0x0000);
        assert_eq!(f64_to_f16_bits(3.0 * 2f64.powi(-25)), 0x0002);
        assert_eq!(f64_to_f16_bits(-0.0), 0x8000);
    }
}
