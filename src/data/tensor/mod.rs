//! In-memory tensors of every element type the audit exchanges with ONNX Runtime.

mod archive;
pub mod delta;
mod float16;
mod npy;
pub mod rows;

pub use archive::open_zip;

pub use float16::f64_to_f16_bits;

pub use npy::{
    accept_any, npz_bytes, read_npy_header, read_npz, read_npz_bytes, read_npz_bytes_checked, read_npz_checked,
    read_npz_entries, write_npz, ArrayCheck,
};

use std::fmt;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The most elements one tensor may have (2^31): inputs are generated and files are read into
/// memory, so a shape beyond this is refused rather than allocated.
pub const MAX_ELEMENTS: usize = 1 << 31;

/// The number of elements of a shape, or `None` when it overflows or exceeds [`MAX_ELEMENTS`].
pub fn checked_len(shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
}

/// Element types an audit can feed to or read from a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Float32,
    Float64,
    Float16,
    Int8,
    Uint8,
    Int16,
    Uint16,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Bool,
}

impl DType {
    /// Maps an ONNX `TensorProto.DataType` code to a supported element type.
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::Float32,
            2 => DType::Uint8,
            3 => DType::Int8,
            4 => DType::Uint16,
            5 => DType::Int16,
            6 => DType::Int32,
            7 => DType::Int64,
            9 => DType::Bool,
            10 => DType::Float16,
            11 => DType::Float64,
            12 => DType::Uint32,
            13 => DType::Uint64,
            _ => return None,
        })
    }

    /// The ONNX `TensorProto.DataType` code (the inverse of [`DType::from_onnx`]).
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::Float32 => 1,
            DType::Uint8 => 2,
            DType::Int8 => 3,
            DType::Uint16 => 4,
            DType::Int16 => 5,
            DType::Int32 => 6,
            DType::Int64 => 7,
            DType::Bool => 9,
            DType::Float16 => 10,
            DType::Float64 => 11,
            DType::Uint32 => 12,
            DType::Uint64 => 13,
        }
    }

    /// The name ONNX uses for a data type code, for error messages about unsupported types.
    pub fn onnx_name(code: i32) -> &'static str {
        match code {
            0 => "undefined",
            8 => "string",
            14 => "complex64",
            15 => "complex128",
            16 => "bfloat16",
            17..=20 => "float8",
            21 | 22 => "int4",
            23 => "float4",
            _ => match DType::from_onnx(code) {
                Some(d) => d.name(),
                None => "unknown",
            },
        }
    }

    /// NumPy-style name (`float32`, `uint8`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Float16 => "float16",
            DType::Int8 => "int8",
            DType::Uint8 => "uint8",
            DType::Int16 => "int16",
            DType::Uint16 => "uint16",
            DType::Int32 => "int32",
            DType::Uint32 => "uint32",
            DType::Int64 => "int64",
            DType::Uint64 => "uint64",
            DType::Bool => "bool",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Int8 | DType::Uint8 | DType::Bool => 1,
            DType::Float16 | DType::Int16 | DType::Uint16 => 2,
            DType::Float32 | DType::Int32 | DType::Uint32 => 4,
            DType::Float64 | DType::Int64 | DType::Uint64 => 8,
        }
    }

    /// Whether the type is a floating-point type (ULP distance and NaN/Inf apply).
    pub fn is_float(self) -> bool {
        matches!(self, DType::Float32 | DType::Float64 | DType::Float16)
    }

    /// The inclusive value range of an integer type, as doubles.
    pub fn int_range(self) -> Option<(f64, f64)> {
        Some(match self {
            DType::Int8 => (i8::MIN as f64, i8::MAX as f64),
            DType::Uint8 => (0.0, u8::MAX as f64),
            DType::Int16 => (i16::MIN as f64, i16::MAX as f64),
            DType::Uint16 => (0.0, u16::MAX as f64),
            DType::Int32 => (i32::MIN as f64, i32::MAX as f64),
            DType::Uint32 => (0.0, u32::MAX as f64),
            DType::Int64 => (i64::MIN as f64, i64::MAX as f64),
            DType::Uint64 => (0.0, u64::MAX as f64),
            _ => return None,
        })
    }

    pub(crate) fn npy_descr(self) -> &'static str {
        match self {
            DType::Float32 => "<f4",
            DType::Float64 => "<f8",
            DType::Float16 => "<f2",
            DType::Int8 => "|i1",
            DType::Uint8 => "|u1",
            DType::Int16 => "<i2",
            DType::Uint16 => "<u2",
            DType::Int32 => "<i4",
            DType::Uint32 => "<u4",
            DType::Int64 => "<i8",
            DType::Uint64 => "<u8",
            DType::Bool => "|b1",
        }
    }

    /// Parses a NumPy type descriptor; returns the type and whether the data is big-endian.
    pub(crate) fn from_npy_descr(descr: &str) -> Option<(DType, bool)> {
        let (order, code) = descr.split_at(1);
        let big = match order {
            "<" | "|" | "=" => false,
            ">" => true,
            _ => return None,
        };
        let dtype = match code {
            "f4" => DType::Float32,
            "f8" => DType::Float64,
            "f2" => DType::Float16,
            "i1" => DType::Int8,
            "u1" => DType::Uint8,
            "i2" => DType::Int16,
            "u2" => DType::Uint16,
            "i4" => DType::Int32,
            "u4" => DType::Uint32,
            "i8" => DType::Int64,
            "u8" => DType::Uint64,
            "b1" => DType::Bool,
            _ => return None,
        };
        Some((dtype, big))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Typed element storage. Float16 values are kept as their IEEE bit patterns.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    Float32(Vec<f32>),
    Float64(Vec<f64>),
    Float16(Vec<u16>),
    Int8(Vec<i8>),
    Uint8(Vec<u8>),
    Int16(Vec<i16>),
    Uint16(Vec<u16>),
    Int32(Vec<i32>),
    Uint32(Vec<u32>),
    Int64(Vec<i64>),
    Uint64(Vec<u64>),
    Bool(Vec<bool>),
}

/// Applies `$body` to the typed vector inside a [`TensorData`], whatever its type.
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            TensorData::Float32($v) => $body,
            TensorData::Float64($v) => $body,
            TensorData::Float16($v) => $body,
            TensorData::Int8($v) => $body,
            TensorData::Uint8($v) => $body,
            TensorData::Int16($v) => $body,
            TensorData::Uint16($v) => $body,
            TensorData::Int32($v) => $body,
            TensorData::Uint32($v) => $body,
            TensorData::Int64($v) => $body,
            TensorData::Uint64($v) => $body,
            TensorData::Bool($v) => $body,
        }
    };
}

/// Applies `$body` to the typed vector of integer codes (the types QuantizeLinear produces:
/// u8, i8, u16, i16, i32) inside a [`TensorData`]: `Some(body)`, `None` for other types. Lets a
/// hot loop over codes run on their own type instead of element by element through `f64`.
macro_rules! with_codes {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::data::tensor::TensorData::Uint8($v) => Some($body),
            $crate::data::tensor::TensorData::Int8($v) => Some($body),
            $crate::data::tensor::TensorData::Uint16($v) => Some($body),
            $crate::data::tensor::TensorData::Int16($v) => Some($body),
            $crate::data::tensor::TensorData::Int32($v) => Some($body),
            _ => None,
        }
    };
}
pub(crate) use with_codes;

/// [`with_codes`] for two tensors of the same code type: `None` when they are not.
macro_rules! with_code_pair {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr) => {
        match ($a, $b) {
            ($crate::data::tensor::TensorData::Uint8($x), $crate::data::tensor::TensorData::Uint8($y)) => Some($body),
            ($crate::data::tensor::TensorData::Int8($x), $crate::data::tensor::TensorData::Int8($y)) => Some($body),
            ($crate::data::tensor::TensorData::Uint16($x), $crate::data::tensor::TensorData::Uint16($y)) => Some($body),
            ($crate::data::tensor::TensorData::Int16($x), $crate::data::tensor::TensorData::Int16($y)) => Some($body),
            ($crate::data::tensor::TensorData::Int32($x), $crate::data::tensor::TensorData::Int32($y)) => Some($body),
            _ => None,
        }
    };
}
pub(crate) use with_code_pair;

impl TensorData {
    /// The element type of the stored values.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::Float32(_) => DType::Float32,
            TensorData::Float64(_) => DType::Float64,
            TensorData::Float16(_) => DType::Float16,
            TensorData::Int8(_) => DType::Int8,
            TensorData::Uint8(_) => DType::Uint8,
            TensorData::Int16(_) => DType::Int16,
            TensorData::Uint16(_) => DType::Uint16,
            TensorData::Int32(_) => DType::Int32,
            TensorData::Uint32(_) => DType::Uint32,
            TensorData::Int64(_) => DType::Int64,
            TensorData::Uint64(_) => DType::Uint64,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes little- or big-endian bytes of `dtype` into typed storage.
    pub(crate) fn from_bytes(dtype: DType, bytes: &[u8], big_endian: bool) -> TensorData {
        macro_rules! decode {
            ($t:ty, $variant:ident) => {{
                const N: usize = std::mem::size_of::<$t>();
                TensorData::$variant(
                    bytes
                        .chunks_exact(N)
                        .map(|c| {
                            let mut a = [0u8; N];
                            a.copy_from_slice(c);
                            if big_endian {
                                <$t>::from_be_bytes(a)
                            } else {
                                <$t>::from_le_bytes(a)
                            }
                        })
                        .collect(),
                )
            }};
        }
        match dtype {
            DType::Float32 => decode!(f32, Float32),
            DType::Float64 => decode!(f64, Float64),
            DType::Float16 => decode!(u16, Float16),
            DType::Int8 => TensorData::Int8(bytes.iter().map(|&b| b as i8).collect()),
            DType::Uint8 => TensorData::Uint8(bytes.to_vec()),
            DType::Int16 => decode!(i16, Int16),
            DType::Uint16 => decode!(u16, Uint16),
            DType::Int32 => decode!(i32, Int32),
            DType::Uint32 => decode!(u32, Uint32),
            DType::Int64 => decode!(i64, Int64),
            DType::Uint64 => decode!(u64, Uint64),
            DType::Bool => TensorData::Bool(bytes.iter().map(|&b| b != 0).collect()),
        }
    }

    /// Little-endian bytes of the values, as stored in `.npy` and fed to ONNX Runtime.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        // Sized up front: `flat_map` cannot tell `collect` its length, and growing a vector of
        // hundreds of megabytes (a tapped run's activations) by doubling copies it again and again.
        macro_rules! encode {
            ($v:expr) => {{
                let mut out = Vec::with_capacity($v.len() * self.dtype().size());
                for x in $v.iter() {
                    out.extend_from_slice(&x.to_le_bytes());
                }
                out
            }};
        }
        match self {
            TensorData::Float32(v) => encode!(v),
            TensorData::Float64(v) => encode!(v),
            TensorData::Float16(v) => encode!(v),
            TensorData::Int8(v) => encode!(v),
            TensorData::Uint8(v) => v.clone(),
            TensorData::Int16(v) => encode!(v),
            TensorData::Uint16(v) => encode!(v),
            TensorData::Int32(v) => encode!(v),
            TensorData::Uint32(v) => encode!(v),
            TensorData::Int64(v) => encode!(v),
            TensorData::Uint64(v) => encode!(v),
            TensorData::Bool(v) => v.iter().map(|&b| b as u8).collect(),
        }
    }

    /// The value at `i` as an exact integer, for integer and bool types.
    pub fn get_i128(&self, i: usize) -> Option<i128> {
        Some(match self {
            TensorData::Int8(v) => v[i] as i128,
            TensorData::Uint8(v) => v[i] as i128,
            TensorData::Int16(v) => v[i] as i128,
            TensorData::Uint16(v) => v[i] as i128,
            TensorData::Int32(v) => v[i] as i128,
            TensorData::Uint32(v) => v[i] as i128,
            TensorData::Int64(v) => v[i] as i128,
            TensorData::Uint64(v) => v[i] as i128,
            TensorData::Bool(v) => v[i] as i128,
            _ => return None,
        })
    }

    /// The value at `i` as a double (float16 decoded, bools as 0/1).
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            TensorData::Float32(v) => v[i] as f64,
            TensorData::Float64(v) => v[i],
            TensorData::Float16(v) => half::f16::from_bits(v[i]).to_f64(),
            TensorData::Int8(v) => v[i] as f64,
            TensorData::Uint8(v) => v[i] as f64,
            TensorData::Int16(v) => v[i] as f64,
            TensorData::Uint16(v) => v[i] as f64,
            TensorData::Int32(v) => v[i] as f64,
            TensorData::Uint32(v) => v[i] as f64,
            TensorData::Int64(v) => v[i] as f64,
            TensorData::Uint64(v) => v[i] as f64,
            TensorData::Bool(v) => v[i] as u8 as f64,
        }
    }

    /// How many values are NaN and how many infinite (always 0 for integer types).
    pub fn nonfinite_counts(&self) -> (u64, u64) {
        if !self.dtype().is_float() {
            return (0, 0);
        }
        (0..self.len()).map(|i| self.get_f64(i)).fold((0, 0), |(nan, inf), v| {
            (nan + v.is_nan() as u64, inf + v.is_infinite() as u64)
        })
    }
}

/// A dense row-major tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl Tensor {
    /// Builds a tensor, checking that the shape and the number of values agree.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Tensor> {
        let expected = checked_len(&shape).with_context(|| format!("shape {shape:?} is too large"))?;
        if expected != data.len() {
            bail!(
                "shape {:?} needs {} values but {} were given",
                shape,
                expected,
                data.len()
            );
        }
        Ok(Tensor { shape, data })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}
