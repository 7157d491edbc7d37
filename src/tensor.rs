//! In-memory tensors of every element type the audit exchanges with ONNX Runtime, and their
//! `.npy` / `.npz` encoding.
//!
//! Tensors travel between the audit and its worker processes as NumPy files so that every user can
//! open them. `ndarray-npy` parses and writes the `.npy` header; the data bytes are handled here
//! because that crate has no float16 element type.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use ndarray_npy::npy::header::{Header, Layout};
use py_literal::Value as PyValue;
use serde::{Deserialize, Serialize};

/// Element types an audit can feed to or read from a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

    fn npy_descr(self) -> &'static str {
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
    fn from_npy_descr(descr: &str) -> Option<(DType, bool)> {
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
    fn from_bytes(dtype: DType, bytes: &[u8], big_endian: bool) -> TensorData {
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
        macro_rules! encode {
            ($v:expr) => {
                $v.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
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
        let expected: usize = shape.iter().product();
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

    /// The complete `.npy` encoding (version 1 header, little-endian, C order).
    pub fn to_npy_bytes(&self) -> Result<Vec<u8>> {
        let header = Header {
            type_descriptor: PyValue::String(self.dtype().npy_descr().to_string()),
            layout: Layout::Standard,
            shape: self.shape.clone(),
        };
        let mut out = header
            .to_bytes()
            .map_err(|e| anyhow::anyhow!("cannot format .npy header: {e}"))?;
        out.extend_from_slice(&self.data.to_le_bytes());
        Ok(out)
    }

    /// Writes the tensor as a `.npy` file.
    pub fn write_npy(&self, path: &Path) -> Result<()> {
        let bytes = self.to_npy_bytes()?;
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::new(file);
        w.write_all(&bytes)
            .and_then(|_| w.flush())
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Reads a `.npy` file of any supported element type.
    pub fn read_npy(path: &Path) -> Result<Tensor> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let mut reader = BufReader::new(file);
        Tensor::read_npy_from(&mut reader).with_context(|| format!("{}", path.display()))
    }

    /// Reads one `.npy` stream.
    pub fn read_npy_from<R: Read>(reader: &mut R) -> Result<Tensor> {
        let header = Header::from_reader(reader)
            .map_err(|e| anyhow::anyhow!("not a valid .npy file: {e}"))?;
        let descr = match &header.type_descriptor {
            PyValue::String(s) => s.clone(),
            other => bail!("unsupported .npy dtype {other} (structured arrays are not tensors)"),
        };
        let (dtype, big_endian) = DType::from_npy_descr(&descr)
            .with_context(|| format!("unsupported .npy dtype '{descr}'"))?;
        let count: usize = header.shape.iter().product();
        let nbytes = count
            .checked_mul(dtype.size())
            .context(".npy shape is too large")?;
        let mut bytes = Vec::with_capacity(nbytes);
        reader
            .take(nbytes as u64)
            .read_to_end(&mut bytes)
            .context("cannot read .npy data")?;
        if bytes.len() != nbytes {
            bail!(
                "truncated .npy data: {} bytes for shape {:?} of {dtype}, expected {nbytes}",
                bytes.len(),
                header.shape
            );
        }
        let data = TensorData::from_bytes(dtype, &bytes, big_endian);
        let tensor = Tensor::new(header.shape.clone(), data)?;
        if header.layout.is_fortran() && tensor.shape.len() > 1 {
            return Ok(tensor.fortran_to_c());
        }
        Ok(tensor)
    }

    /// Reorders data written in Fortran (column-major) order into row-major order.
    fn fortran_to_c(self) -> Tensor {
        let shape = self.shape.clone();
        let n = self.len();
        let rank = shape.len();
        // Strides of the column-major source for each axis.
        let mut f_strides = vec![1usize; rank];
        for ax in 1..rank {
            f_strides[ax] = f_strides[ax - 1] * shape[ax - 1];
        }
        let mut index = vec![0usize; rank];
        let order: Vec<usize> = (0..n)
            .map(|_| {
                let src: usize = index.iter().zip(&f_strides).map(|(i, s)| i * s).sum();
                for ax in (0..rank).rev() {
                    index[ax] += 1;
                    if index[ax] < shape[ax] {
                        break;
                    }
                    index[ax] = 0;
                }
                src
            })
            .collect();
        let data = with_typed_gather(&self.data, &order);
        Tensor { shape, data }
    }
}

fn with_typed_gather(data: &TensorData, order: &[usize]) -> TensorData {
    macro_rules! gather {
        ($v:expr, $variant:ident) => {
            TensorData::$variant(order.iter().map(|&i| $v[i]).collect())
        };
    }
    match data {
        TensorData::Float32(v) => gather!(v, Float32),
        TensorData::Float64(v) => gather!(v, Float64),
        TensorData::Float16(v) => gather!(v, Float16),
        TensorData::Int8(v) => gather!(v, Int8),
        TensorData::Uint8(v) => gather!(v, Uint8),
        TensorData::Int16(v) => gather!(v, Int16),
        TensorData::Uint16(v) => gather!(v, Uint16),
        TensorData::Int32(v) => gather!(v, Int32),
        TensorData::Uint32(v) => gather!(v, Uint32),
        TensorData::Int64(v) => gather!(v, Int64),
        TensorData::Uint64(v) => gather!(v, Uint64),
        TensorData::Bool(v) => gather!(v, Bool),
    }
}

/// Reads every array of a `.npz` archive, in archive order, keyed by name without `.npy`.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    read_npz_from(BufReader::new(file)).with_context(|| format!("{}", path.display()))
}

fn read_npz_from<R: Read + Seek>(reader: R) -> Result<Vec<(String, Tensor)>> {
    let mut archive = zip::ZipArchive::new(reader)
        .map_err(|e| anyhow::anyhow!("not a valid .npz archive: {e}"))?;
    let mut out = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| anyhow::anyhow!("cannot read .npz entry {i}: {e}"))?;
        if entry.is_dir() {
            continue;
        }
        let raw_name = entry.name().to_string();
        let name = raw_name
            .strip_suffix(".npy")
            .unwrap_or(&raw_name)
            .to_string();
        let tensor =
            Tensor::read_npy_from(&mut entry).with_context(|| format!("array '{name}'"))?;
        out.push((name, tensor));
    }
    Ok(out)
}

/// Writes named tensors into one uncompressed `.npz` archive (what `numpy.savez` writes).
pub fn write_npz(path: &Path, tensors: &[(String, &Tensor)]) -> Result<()> {
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut zip = zip::ZipWriter::new(BufWriter::new(file));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    for (name, tensor) in tensors {
        zip.start_file(format!("{name}.npy"), options)
            .with_context(|| format!("cannot write {}", path.display()))?;
        zip.write_all(&tensor.to_npy_bytes()?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    zip.finish()
        .with_context(|| format!("cannot write {}", path.display()))?
        .flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip_keeps_dtype_shape_and_bits() {
        let cases = vec![
            Tensor::new(
                vec![2, 3],
                TensorData::Float32(vec![0.0, -0.0, 1.5, f32::NAN, f32::INFINITY, -2.25]),
            )
            .unwrap(),
            Tensor::new(vec![3], TensorData::Float16(vec![0x3c00, 0x8000, 0x7e00])).unwrap(),
            Tensor::new(vec![2, 2], TensorData::Uint8(vec![0, 1, 254, 255])).unwrap(),
            Tensor::new(vec![2], TensorData::Int64(vec![i64::MIN, 7])).unwrap(),
            Tensor::new(vec![3], TensorData::Bool(vec![true, false, true])).unwrap(),
            Tensor::new(vec![], TensorData::Float64(vec![3.5])).unwrap(),
        ];
        for t in cases {
            let bytes = t.to_npy_bytes().unwrap();
            let back = Tensor::read_npy_from(&mut bytes.as_slice()).unwrap();
            assert_eq!(back.shape, t.shape);
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(back.data.to_le_bytes(), t.data.to_le_bytes());
        }
    }

    #[test]
    fn npy_header_is_what_numpy_writes() {
        // numpy.save of np.arange(3, dtype='<f4') starts with this exact header.
        let t = Tensor::new(vec![3], TensorData::Float32(vec![0.0, 1.0, 2.0])).unwrap();
        let bytes = t.to_npy_bytes().unwrap();
        assert_eq!(&bytes[..6], b"\x93NUMPY");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(
            header.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)"),
            "{header}"
        );
        assert!(header.ends_with('\n'));
        assert_eq!((10 + header_len) % 64, 0);
    }

    #[test]
    fn fortran_order_is_reordered() {
        // 2x3 matrix [[1,2,3],[4,5,6]] stored column-major is 1,4,2,5,3,6.
        let header = Header {
            type_descriptor: PyValue::String("<i4".into()),
            layout: Layout::Fortran,
            shape: vec![2, 3],
        };
        let mut bytes = header.to_bytes().unwrap();
        for v in [1i32, 4, 2, 5, 3, 6] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let t = Tensor::read_npy_from(&mut bytes.as_slice()).unwrap();
        assert_eq!(t.data, TensorData::Int32(vec![1, 2, 3, 4, 5, 6]));
    }

    #[test]
    fn truncated_npy_is_an_error() {
        let t = Tensor::new(vec![4], TensorData::Float32(vec![1.0; 4])).unwrap();
        let bytes = t.to_npy_bytes().unwrap();
        let err = Tensor::read_npy_from(&mut &bytes[..bytes.len() - 3]).unwrap_err();
        assert!(format!("{err}").contains("truncated"));
    }
}
