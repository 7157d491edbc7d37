//! The rounding rules a target might apply when it turns a real value into an integer code, and
//! the predictions each one makes for a probe's ideal values.

use serde::{Deserialize, Serialize};

/// A candidate rounding rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Rounding {
    /// Ties to the even neighbour: the ONNX specification's rule for QuantizeLinear.
    HalfEven,
    /// Ties away from zero (C `round`).
    HalfAway,
    /// Ties toward +infinity (`floor(x + 0.5)`), common in fixed-point requantization.
    HalfUp,
    /// Toward −infinity.
    Floor,
    /// Toward zero (a plain float-to-int cast).
    Trunc,
}

impl Rounding {
    /// Every candidate, in the order reports list them.
    pub const ALL: [Rounding; 5] = [
        Rounding::HalfEven,
        Rounding::HalfAway,
        Rounding::HalfUp,
        Rounding::Floor,
        Rounding::Trunc,
    ];

    /// The name used in reports (`half_even`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Rounding::HalfEven => "half_even",
            Rounding::HalfAway => "half_away",
            Rounding::HalfUp => "half_up",
            Rounding::Floor => "floor",
            Rounding::Trunc => "trunc",
        }
    }

    /// Words for tables and explanations.
    pub fn label(self) -> &'static str {
        match self {
            Rounding::HalfEven => "half-even",
            Rounding::HalfAway => "half-away",
            Rounding::HalfUp => "half-up",
            Rounding::Floor => "floor",
            Rounding::Trunc => "truncation",
        }
    }

    /// `v` rounded to an integer by this rule (exact in f64 for |v| < 2^52).
    pub fn apply(self, v: f64) -> f64 {
        match self {
            Rounding::HalfEven => v.round_ties_even(),
            Rounding::HalfAway => v.round(),
            Rounding::HalfUp => (v + 0.5).floor(),
            Rounding::Floor => v.floor(),
            Rounding::Trunc => v.trunc(),
        }
    }
}

/// How a quantized value is stored: zero point and the code range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CodeRange {
    pub zero_point: i64,
    pub min: i64,
    pub max: i64,
}

impl CodeRange {
    /// The range of an integer type by its short name (`u8`, `i8`, `u16`, `i16`) with a zero
    /// point.
    pub fn of(dtype: &str, zero_point: i64) -> CodeRange {
        let (min, max) = match dtype {
            "u8" => (0, 255),
            "i8" => (-128, 127),
            "u16" => (0, 65535),
            "i16" => (-32768, 32767),
            _ => (i64::MIN, i64::MAX),
        };
        CodeRange { zero_point, min, max }
    }

    /// The code QuantizeLinear's formula gives for `v` (= x / scale) under `rule`: rounded, zero
    /// point added, saturated.
    pub fn code(&self, v: f64, rule: Rounding) -> i64 {
        (rule.apply(v) as i64 + self.zero_point).clamp(self.min, self.max)
    }

    /// The code a wrapping (not saturating) implementation would store for `v` rounded to even.
    pub fn wrapped(&self, v: f64) -> i64 {
        let width = self.max - self.min + 1;
        let c = v.round_ties_even() as i64 + self.zero_point;
        (c - self.min).rem_euclid(width) + self.min
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_rounds_the_textbook_cases() {
        // (value, half_even, half_away, half_up, floor, trunc), worked by hand.
        let cases = [
            (2.5, 2.0, 3.0, 3.0, 2.0, 2.0),
            (3.5, 4.0, 4.0, 4.0, 3.0, 3.0),
            (-2.5, -2.0, -3.0, -2.0, -3.0, -2.0),
            (-0.75, -1.0, -1.0, -1.0, -1.0, 0.0),
            (1.25, 1.0, 1.0, 1.0, 1.0, 1.0),
        ];
        for (v, he, ha, hu, fl, tr) in cases {
            let got: Vec<f64> = Rounding::ALL.iter().map(|r| r.apply(v)).collect();
            assert_eq!(got, vec![he, ha, hu, fl, tr], "value {v}");
        }
    }

    #[test]
    fn codes_saturate_or_wrap_at_the_range_ends() {
        let u8r = CodeRange::of("u8", 128);
        assert_eq!(u8r.code(200.0, Rounding::HalfEven), 255);
        assert_eq!(u8r.code(-129.0, Rounding::HalfEven), 0);
        assert_eq!(u8r.code(-0.5, Rounding::HalfAway), 127);
        // 128 + 130 = 258 wraps to 2.
        assert_eq!(u8r.wrapped(130.0), 2);
        let i8r = CodeRange::of("i8", 0);
        assert_eq!(i8r.wrapped(-130.0), 126);
    }
}
