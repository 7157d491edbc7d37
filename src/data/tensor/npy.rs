//! The `.npy` / `.npz` encoding of tensors. Tensors travel between the audit and its worker
//! processes as NumPy files so that every user can open them. `ndarray-npy` parses and writes the
//! `.npy` header; the data bytes are handled here because that crate has no float16 element type.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use ndarray_npy::npy::header::Header;
use py_literal::Value as PyValue;

use super::{checked_len, DType, Tensor, TensorData, MAX_ELEMENTS};

impl Tensor {
    /// The complete `.npy` encoding (version 1 header, little-endian, C order).
    ///
    /// The header is byte for byte the one `numpy.save` writes, so a tensor's SHA-256 in a report
    /// can be reproduced with NumPy.
    pub fn to_npy_bytes(&self) -> Result<Vec<u8>> {
        let mut out = numpy_header(self.dtype(), &self.shape)?;
        out.extend_from_slice(&self.data.to_le_bytes());
        Ok(out)
    }

    /// Writes the tensor as a `.npy` file.
    pub fn write_npy(&self, path: &Path) -> Result<()> {
        let bytes = self.to_npy_bytes()?;
        let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::new(file);
        w.write_all(&bytes)
            .and_then(|_| w.flush())
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Reads a `.npy` file of any supported element type.
    pub fn read_npy(path: &Path) -> Result<Tensor> {
        let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::ReadTensors);
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        // The file's length bounds the data (so it can be allocated once, up front, without
        // trusting the header); a file that is not regular gives no bound.
        let room = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        let mut reader = BufReader::new(file);
        // A growing stream state a worker wrote as what its step added (see `delta`).
        if super::delta::starts_delta(reader.fill_buf().unwrap_or_default()) {
            return super::delta::read(path);
        }
        Tensor::read_npy_checked(&mut reader, "", &accept_any, room).with_context(|| format!("{}", path.display()))
    }

    /// Reads one `.npy` stream.
    pub fn read_npy_from<R: Read>(reader: &mut R) -> Result<Tensor> {
        Tensor::read_npy_checked(reader, "", &accept_any, None)
    }

    /// Reads one `.npy` stream named `name`, handing its declared element type and shape to
    /// `check` before any data is read. `room` is the size the container declares for the whole
    /// stream (a `.npz` entry), which the data must fit.
    fn read_npy_checked<R: Read>(
        reader: &mut R,
        name: &str,
        check: ArrayCheck<'_>,
        room: Option<u64>,
    ) -> Result<Tensor> {
        let TypedHeader {
            header,
            dtype,
            big_endian,
            count,
        } = typed_header(reader)?;
        check(name, dtype, &header.shape)?;
        let nbytes = count * dtype.size();
        if let Some(room) = room.filter(|&r| nbytes as u64 > r) {
            bail!(
                "truncated .npy data: shape {:?} of {dtype} needs {nbytes} bytes but the file or archive entry holds {room}",
                header.shape
            );
        }
        // Capacity up front only when the container vouches for the size; a bare header's shape
        // is not trusted until the data is there.
        let mut bytes = Vec::with_capacity(if room.is_some() { nbytes } else { 0 });
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

/// The `.npy` header `numpy.save` writes for a C-ordered array: the dict with sorted keys, room
/// for the first dimension to grow to 21 digits, padding to a multiple of 64 bytes.
fn numpy_header(dtype: DType, shape: &[usize]) -> Result<Vec<u8>> {
    const GROWTH_AXIS_MAX_DIGITS: usize = 21;
    let dims = match shape {
        [] => "()".to_string(),
        [one] => format!("({one},)"),
        many => format!(
            "({})",
            many.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
        ),
    };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        dtype.npy_descr()
    );
    if let Some(first) = shape.first() {
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(first.to_string().len())));
    }
    // magic (6) + version (2) + length (2 or 4) + dict + padding + '\n' is a multiple of 64.
    let (version, len_bytes) = if dict.len() + 1 + 10 < 65536 {
        (1u8, 2)
    } else {
        (2u8, 4)
    };
    let unpadded = 6 + 2 + len_bytes + dict.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    let header_len = dict.len() + pad + 1;
    let mut out = Vec::with_capacity(unpadded + pad);
    out.extend_from_slice(b"\x93NUMPY");
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&u16::try_from(header_len)?.to_le_bytes());
    } else {
        out.extend_from_slice(&u32::try_from(header_len)?.to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    Ok(out)
}

/// The longest `.npy` header read, as in NumPy (`numpy.lib.format`, `max_header_size`): a header
/// that claims more is refused before anything is allocated for it.
const MAX_HEADER_BYTES: usize = 10_000;

/// Reads a `.npy` header: its magic, version and length first, so that a length field claiming
/// gigabytes is refused (`ndarray-npy` would allocate it), then the header itself.
fn read_header<R: Read>(reader: &mut R) -> Result<Header> {
    let invalid = |why: String| anyhow::anyhow!("not a valid .npy file: {why}");
    let mut prefix = [0u8; 8];
    reader
        .read_exact(&mut prefix)
        .map_err(|e| invalid(format!("cannot read its magic and version: {e}")))?;
    if &prefix[..6] != b"\x93NUMPY" {
        return Err(invalid("it does not start with the magic \\x93NUMPY".into()));
    }
    let len_bytes = match prefix[6] {
        1 => 2,
        2 | 3 => 4,
        v => return Err(invalid(format!("format version {v} does not exist"))),
    };
    let mut len = [0u8; 4];
    reader
        .read_exact(&mut len[..len_bytes])
        .map_err(|e| invalid(format!("cannot read its header length: {e}")))?;
    let header_len = u32::from_le_bytes(len) as usize;
    if header_len > MAX_HEADER_BYTES {
        return Err(invalid(format!(
            "its header claims {header_len} bytes (at most {MAX_HEADER_BYTES} are read, as in NumPy)"
        )));
    }
    let mut bytes = Vec::with_capacity(8 + len_bytes + header_len);
    bytes.extend_from_slice(&prefix);
    bytes.extend_from_slice(&len[..len_bytes]);
    reader
        .take(header_len as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid(format!("cannot read its header: {e}")))?;
    Header::from_reader(&mut bytes.as_slice()).map_err(|e| invalid(e.to_string()))
}

/// A `.npy` header with what its data will be: a tensor's element type, the byte order and the
/// element count (bounded).
struct TypedHeader {
    header: Header,
    dtype: DType,
    big_endian: bool,
    count: usize,
}

/// Reads a `.npy` header and checks it describes a tensor: a plain element type (not a structured
/// array) and at most [`MAX_ELEMENTS`] elements.
fn typed_header<R: Read>(reader: &mut R) -> Result<TypedHeader> {
    let header = read_header(reader)?;
    let descr = match &header.type_descriptor {
        PyValue::String(s) => s.clone(),
        other => bail!("unsupported .npy dtype {other} (structured arrays are not tensors)"),
    };
    let (dtype, big_endian) =
        DType::from_npy_descr(&descr).with_context(|| format!("unsupported .npy dtype '{descr}'"))?;
    let count = checked_len(&header.shape)
        .with_context(|| format!(".npy shape {:?} has more than {MAX_ELEMENTS} elements", header.shape))?;
    Ok(TypedHeader {
        header,
        dtype,
        big_endian,
        count,
    })
}

/// Reads a `.npy` stream's header for a reader that takes its data itself (row by row): the
/// element type, the shape and whether the data is big-endian. Column-major data is refused: its
/// rows are not contiguous.
pub(super) fn stream_header<R: Read>(reader: &mut R) -> Result<(DType, Vec<usize>, bool)> {
    let TypedHeader {
        header,
        dtype,
        big_endian,
        ..
    } = typed_header(reader)?;
    if header.layout.is_fortran() && header.shape.len() > 1 {
        bail!("column-major (Fortran order) data cannot be read row by row; save it in C order");
    }
    Ok((dtype, header.shape, big_endian))
}

/// Reads only the element type and shape of a `.npy` file (its header), not its data.
pub fn read_npy_header(path: &Path) -> Result<(DType, Vec<usize>)> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let header = read_header(&mut BufReader::new(file)).with_context(|| path.display().to_string())?;
    let dtype = match &header.type_descriptor {
        PyValue::String(d) => DType::from_npy_descr(d).map(|(t, _)| t),
        _ => None,
    }
    .with_context(|| format!("{}: unsupported .npy dtype {}", path.display(), header.type_descriptor))?;
    Ok((dtype, header.shape))
}

/// What a reader checks on an array's name, declared element type and shape before reading its
/// data: an array the caller cannot use is refused before anything is inflated or allocated.
pub type ArrayCheck<'a> = &'a dyn Fn(&str, DType, &[usize]) -> Result<()>;

/// An [`ArrayCheck`] that takes every array.
pub fn accept_any(_: &str, _: DType, _: &[usize]) -> Result<()> {
    Ok(())
}

/// Reads every array of a `.npz` archive, in archive order, keyed by name without `.npy`.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Tensor)>> {
    read_npz_checked(path, &accept_any)
}

/// [`read_npz`] with every array's declared type and shape checked before its data is read.
pub fn read_npz_checked(path: &Path, check: ArrayCheck<'_>) -> Result<Vec<(String, Tensor)>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    read_npz_from(BufReader::new(file), check).with_context(|| format!("{}", path.display()))
}

/// [`read_npz`] of an archive held in memory (read from standard input).
pub fn read_npz_bytes(bytes: Vec<u8>) -> Result<Vec<(String, Tensor)>> {
    read_npz_bytes_checked(bytes, &accept_any)
}

/// [`read_npz_bytes`] with every array checked before its data is read.
pub fn read_npz_bytes_checked(bytes: Vec<u8>, check: ArrayCheck<'_>) -> Result<Vec<(String, Tensor)>> {
    read_npz_from(std::io::Cursor::new(bytes), check)
}

fn read_npz_from<R: Read + Seek>(reader: R, check: ArrayCheck<'_>) -> Result<Vec<(String, Tensor)>> {
    let mut archive = super::open_zip(reader, ".npz")?;
    let mut out = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let entry = archive
            .by_index(i)
            .map_err(|e| anyhow::anyhow!("cannot read .npz entry {i}: {e}"))?;
        if entry.is_dir() {
            continue;
        }
        let raw_name = entry.name().to_string();
        if entry.is_symlink() {
            bail!("'{raw_name}' is a symbolic link, not an array");
        }
        let name = raw_name.strip_suffix(".npy").unwrap_or(&raw_name).to_string();
        let tensor = read_entry(entry, &name, check).with_context(|| format!("array '{name}'"))?;
        out.push((name, tensor));
    }
    Ok(out)
}

/// Reads one archive entry as a `.npy` stream, then to its end, where the archive's CRC-32 of
/// the entry is checked: a damaged archive is refused as NumPy refuses it.
fn read_entry<R: Read>(mut entry: zip::read::ZipFile<'_, R>, name: &str, check: ArrayCheck<'_>) -> Result<Tensor> {
    let room = entry.size();
    let tensor = Tensor::read_npy_checked(&mut entry, name, check, Some(room))?;
    let mut rest = [0u8; 4096];
    match entry.read(&mut rest) {
        Ok(0) => Ok(tensor),
        Ok(n) => bail!("{n} or more bytes after the array data"),
        Err(e) => bail!("the archive is damaged: {e}"),
    }
}

/// Reads only the named arrays of a `.npz` archive (in the order asked; names it lacks are
/// skipped): a large archive of activations is never loaded whole.
pub fn read_npz_entries(path: &Path, names: &[String]) -> Result<Vec<(String, Tensor)>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut archive = super::open_zip(BufReader::new(file), ".npz").with_context(|| format!("{}", path.display()))?;
    let mut out = Vec::new();
    for name in names {
        let Ok(entry) = archive.by_name(&format!("{name}.npy")) else {
            continue;
        };
        let tensor =
            read_entry(entry, name, &accept_any).with_context(|| format!("{}: array '{name}'", path.display()))?;
        out.push((name.clone(), tensor));
    }
    Ok(out)
}

/// Named tensors as one uncompressed `.npz` archive (what `numpy.savez` writes), in memory: a
/// write that fails (a full disk) then fails once, cleanly, when the bytes are written.
pub fn npz_bytes(tensors: &[(String, &Tensor)]) -> Result<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    for (name, tensor) in tensors {
        zip.start_file(format!("{name}.npy"), options)?;
        zip.write_all(&tensor.to_npy_bytes()?)?;
    }
    Ok(zip.finish()?.into_inner())
}

/// Writes named tensors into one uncompressed `.npz` archive at `path`.
pub fn write_npz(path: &Path, tensors: &[(String, &Tensor)]) -> Result<()> {
    let bytes = npz_bytes(tensors)?;
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray_npy::npy::header::Layout;

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
    fn headers_are_byte_for_byte_numpys() {
        // numpy 2.4: numpy.save of zeros((2, 3), '<f4'), zeros((), '<f8'), zeros((5,), 'u1'),
        // zeros((1, 3, 32, 32), '<f2'): every header is 128 bytes, padded with spaces.
        let cases: [(DType, Vec<usize>, &str); 4] = [
            (
                DType::Float32,
                vec![2, 3],
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
            ),
            (
                DType::Float64,
                vec![],
                "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
            ),
            (
                DType::Uint8,
                vec![5],
                "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }",
            ),
            (
                DType::Float16,
                vec![1, 3, 32, 32],
                "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 3, 32, 32), }",
            ),
        ];
        for (dtype, shape, dict) in cases {
            let h = numpy_header(dtype, &shape).unwrap();
            assert_eq!(h.len(), 128, "{dict}");
            assert_eq!(&h[..10], b"\x93NUMPY\x01\x00v\x00");
            let text = std::str::from_utf8(&h[10..]).unwrap();
            assert!(text.starts_with(dict) && text.ends_with('\n'));
            assert!(text[dict.len()..text.len() - 1].chars().all(|c| c == ' '));
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
    fn a_header_length_beyond_numpy_s_limit_is_refused_before_it_is_allocated() {
        // Version 3, header length 0xf2a8a4be (4 GB): found by fuzzing, when ndarray-npy
        // allocated the length before reading.
        let bytes = b"\x93NUMPY\x03\x00\xbe\xa4\xa8\xf2{'descr': '<f4'}";
        let err = Tensor::read_npy_from(&mut &bytes[..]).unwrap_err();
        assert!(
            format!("{err:#}").contains("its header claims 4071138494 bytes"),
            "{err:#}"
        );
    }

    #[test]
    fn truncated_npy_is_an_error() {
        let t = Tensor::new(vec![4], TensorData::Float32(vec![1.0; 4])).unwrap();
        let bytes = t.to_npy_bytes().unwrap();
        let err = Tensor::read_npy_from(&mut &bytes[..bytes.len() - 3]).unwrap_err();
        assert!(format!("{err}").contains("truncated"));
    }
}
