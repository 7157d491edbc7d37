//! Generated inputs: `zeros`, `ones`, `uniform:LO,HI`, `normal:MEAN,STD`, drawn from the seeded
//! generator of `docs/inputs.md`.

use std::fmt;

use anyhow::Result;

use super::prng::SplitMix64;
use crate::data::tensor::{f64_to_f16_bits, DType, Tensor, TensorData};
use crate::foundation::error::bad_input;

/// A generator specification.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GenSpec {
    Zeros,
    Ones,
    Uniform { lo: f64, hi: f64 },
    Normal { mean: f64, std: f64 },
}

impl fmt::Display for GenSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GenSpec::Zeros => f.write_str("zeros"),
            GenSpec::Ones => f.write_str("ones"),
            GenSpec::Uniform { lo, hi } => write!(f, "uniform:{lo},{hi}"),
            GenSpec::Normal { mean, std } => write!(f, "normal:{mean},{std}"),
        }
    }
}

impl GenSpec {
    /// The default for inputs nobody specified.
    pub const DEFAULT: GenSpec = GenSpec::Uniform { lo: -1.0, hi: 1.0 };
    /// Zeros: a stream's fed-back state before the first step.
    pub const ZEROS: GenSpec = GenSpec::Zeros;

    /// Parses `zeros`, `ones`, `uniform:LO,HI`, `normal:MEAN,STD`.
    pub fn parse(text: &str) -> Result<GenSpec> {
        let bad = || {
            bad_input(format!(
                "generator '{text}' is not one of zeros, ones, uniform:LO,HI, normal:MEAN,STD"
            ))
        };
        let (kind, args) = text.split_once(':').unwrap_or((text, ""));
        let nums: Vec<f64> = if args.is_empty() {
            vec![]
        } else {
            args.split(',')
                .map(|a| a.trim().parse::<f64>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad())?
        };
        if nums.iter().any(|n| !n.is_finite()) {
            return Err(bad());
        }
        match (kind.trim(), nums.as_slice()) {
            ("zeros", []) => Ok(GenSpec::Zeros),
            ("ones", []) => Ok(GenSpec::Ones),
            ("uniform", [lo, hi]) if lo <= hi => Ok(GenSpec::Uniform { lo: *lo, hi: *hi }),
            ("normal", [mean, std]) if *std >= 0.0 => Ok(GenSpec::Normal { mean: *mean, std: *std }),
            _ => Err(bad()),
        }
    }

    /// Whether the specification makes sense for an element type: integer ranges need integer
    /// bounds inside the type's range, float16 bounds must be finite in float16.
    pub fn check_for(&self, dtype: DType) -> Result<(), String> {
        let GenSpec::Uniform { lo, hi } = *self else {
            return Ok(());
        };
        if let Some((min, max)) = dtype.int_range() {
            if lo.fract() != 0.0 || hi.fract() != 0.0 {
                return Err(format!("{self}: an {dtype} input needs integer bounds"));
            }
            if lo < min || hi > max {
                return Err(format!("{self}: bounds outside the {dtype} range [{min}, {max}]"));
            }
        }
        if dtype == DType::Float16 && (lo.abs() > 65504.0 || hi.abs() > 65504.0) {
            return Err(format!("{self}: bounds outside the float16 range [-65504, 65504]"));
        }
        Ok(())
    }

    /// Draws a tensor for input `input_index` of sample `sample`.
    pub fn generate(&self, dtype: DType, shape: &[usize], seed: u64, sample: u64, input_index: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let mut rng = SplitMix64::for_input(seed, sample, input_index);
        let spec = *self;
        // One double per element, in row-major order; integer and float types round it their way.
        let mut draw = move || -> f64 {
            match spec {
                GenSpec::Zeros => 0.0,
                GenSpec::Ones => 1.0,
                GenSpec::Uniform { lo, hi } => match dtype.int_range() {
                    Some(_) => rng.uniform_int(lo, hi),
                    None if dtype == DType::Bool => rng.next_unit(),
                    None => rng.uniform(lo, hi),
                },
                GenSpec::Normal { mean, std } => {
                    if dtype == DType::Bool {
                        rng.next_unit()
                    } else {
                        rng.normal(mean, std)
                    }
                }
            }
        };
        let ints = |draw: &mut dyn FnMut() -> f64| -> Vec<f64> {
            let (lo, hi) = dtype.int_range().unwrap_or((f64::MIN, f64::MAX));
            (0..n).map(|_| draw().round_ties_even().clamp(lo, hi)).collect()
        };
        let data = match dtype {
            DType::Float32 => TensorData::Float32((0..n).map(|_| draw() as f32).collect()),
            DType::Float64 => TensorData::Float64((0..n).map(|_| draw()).collect()),
            DType::Float16 => TensorData::Float16((0..n).map(|_| f64_to_f16_bits(draw())).collect()),
            DType::Bool => TensorData::Bool((0..n).map(|_| bool_of(spec, draw())).collect()),
            DType::Int8 => TensorData::Int8(ints(&mut draw).into_iter().map(|v| v as i8).collect()),
            DType::Uint8 => TensorData::Uint8(ints(&mut draw).into_iter().map(|v| v as u8).collect()),
            DType::Int16 => TensorData::Int16(ints(&mut draw).into_iter().map(|v| v as i16).collect()),
            DType::Uint16 => TensorData::Uint16(ints(&mut draw).into_iter().map(|v| v as u16).collect()),
            DType::Int32 => TensorData::Int32(ints(&mut draw).into_iter().map(|v| v as i32).collect()),
            DType::Uint32 => TensorData::Uint32(ints(&mut draw).into_iter().map(|v| v as u32).collect()),
            DType::Int64 => TensorData::Int64(ints(&mut draw).into_iter().map(|v| v as i64).collect()),
            DType::Uint64 => TensorData::Uint64(ints(&mut draw).into_iter().map(|v| v as u64).collect()),
        };
        Tensor {
            shape: shape.to_vec(),
            data,
        }
    }
}

fn bool_of(spec: GenSpec, v: f64) -> bool {
    match spec {
        GenSpec::Zeros => false,
        GenSpec::Ones => true,
        _ => v < 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        for text in ["zeros", "ones", "uniform:-1,1", "normal:0.5,2"] {
            assert_eq!(GenSpec::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "",
            "uniform",
            "uniform:1",
            "uniform:2,1",
            "normal:0,-1",
            "gauss:0,1",
            "uniform:a,b",
            "uniform:0,inf",
        ] {
            assert!(GenSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn integer_uniform_stays_in_range_and_is_reproducible() {
        let a = GenSpec::Uniform { lo: -8.0, hi: 7.0 }.generate(DType::Int64, &[100], 5, 0, 2);
        let b = GenSpec::Uniform { lo: -8.0, hi: 7.0 }.generate(DType::Int64, &[100], 5, 0, 2);
        assert_eq!(a, b);
        let TensorData::Int64(v) = a.data else { panic!() };
        assert!(v.iter().all(|x| (-8..=7).contains(x)));
        assert!(v.contains(&-8) && v.contains(&7));
    }
}
