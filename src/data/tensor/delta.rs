//! A growing stream state kept as what each step adds. A KV cache fed back every step
//! (`present = Concat(past, new)`) is its previous value plus one slice: written whole at every
//! step, 5,000 steps of a small one took 546 MB of the work directory (in `/dev/shm`, RAM), the
//! sum of every step's size. A worker instead writes such a step as a *delta file*: the file it
//! extends (the previous step's, or the golden step it was fed) and the slice it adds along one
//! axis. [`Tensor::read_npy`] reads either kind, so every reader of a step's outputs (figures,
//! saved outputs, teacher-forced inputs) gets the whole tensor, bit for bit.
//!
//! Delta files exist only inside a work directory while its audit runs: they are read only under
//! a root this process registered ([`allow_root`]), never from a stranger's file, and every base a
//! delta names is a path inside that root. Reading step `n` after step `n - 1` costs only the new
//! slice: recently read tensors are kept ([`CACHE_BYTES`]).

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{checked_len, Tensor, TensorData};

/// The first bytes of a delta file (a `.npy` file starts `\x93NUMPY`, so NumPy refuses it).
const MAGIC: &[u8; 16] = b"\x93NPU-AUDIT-DELTA";
/// The longest chain of deltas followed before a whole file.
const MAX_CHAIN: usize = 1 << 20;
/// How much the cache of recently read tensors may hold.
pub const CACHE_BYTES: usize = 512 << 20;
/// How many tensors the cache holds at most (each run's step and the golden run's).
const CACHE_ENTRIES: usize = 32;

/// What a delta file says after its magic, as one JSON line; the added slice follows.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    /// The file it extends, relative to the root both are in.
    base: PathBuf,
    axis: usize,
    /// The whole tensor's element type and shape.
    dtype: String,
    shape: Vec<usize>,
}

/// Work directories (and their twins in shared memory) whose delta files this process reads.
static ROOTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A tensor read recently: its file, the file's identity then, the tensor.
type Cached = (PathBuf, FileId, Arc<Tensor>);
static CACHE: Mutex<Vec<Cached>> = Mutex::new(Vec::new());

/// Size, modification time and inode: a file replaced since it was cached is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, i128, u64);

fn file_id(path: &Path) -> Option<FileId> {
    let m = std::fs::metadata(path).ok()?;
    let modified = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos() as i128;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Some(FileId(m.len(), modified, inode))
}

/// Lets this process read (and its workers write) delta files under `root`.
pub fn allow_root(root: &Path) {
    let mut roots = ROOTS.lock().unwrap_or_else(PoisonError::into_inner);
    if !roots.iter().any(|r| r == root) {
        roots.push(root.to_path_buf());
    }
}

/// Forgets a root (its work directory is gone) and every tensor cached from it.
pub fn forget_root(root: &Path) {
    ROOTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|r| r != root);
    CACHE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|(p, _, _)| !p.starts_with(root));
}

/// The registered root `path` lies in (lexically: both are paths the tool made).
fn root_of(path: &Path) -> Option<PathBuf> {
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return None;
    }
    ROOTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|r| path.starts_with(r))
        .cloned()
}

/// Whether the file at `path` is a delta file.
pub fn is_delta(path: &Path) -> bool {
    let mut head = [0u8; MAGIC.len()];
    std::fs::File::open(path).is_ok_and(|mut f| f.read_exact(&mut head).is_ok() && head == *MAGIC)
}

/// Whether `bytes` (the start of a file) are a delta file's.
pub(super) fn starts_delta(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// `(outer, inner bytes)` around `axis` of `shape`: how many blocks the axis repeats in, and the
/// bytes of one index along it.
fn blocks(shape: &[usize], axis: usize, width: usize) -> (usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product::<usize>() * width;
    (outer, inner)
}

/// A tensor's type, shape and little-endian bytes, made once to be tried against several others.
pub struct Flat {
    dtype: super::DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl Flat {
    /// The flat form of `t`.
    pub fn of(t: &Tensor) -> Flat {
        Flat {
            dtype: t.dtype(),
            shape: t.shape.clone(),
            bytes: t.data.to_le_bytes(),
        }
    }
}

/// When `out` is `prev` extended along one axis (same type, every other dimension equal, `prev`'s
/// values unchanged in front), that axis and the bytes `out` adds.
pub fn extension(prev: &Flat, out: &Flat) -> Option<(usize, Vec<u8>)> {
    if prev.dtype != out.dtype || prev.shape.len() != out.shape.len() {
        return None;
    }
    let differing: Vec<usize> = (0..out.shape.len())
        .filter(|&i| prev.shape[i] != out.shape[i])
        .collect();
    let [axis] = differing[..] else { return None };
    if out.shape[axis] < prev.shape[axis] {
        return None;
    }
    let (outer, inner) = blocks(&out.shape, axis, out.dtype.size());
    let (old, new) = (prev.shape[axis] * inner, (out.shape[axis] - prev.shape[axis]) * inner);
    let (p, o) = (&prev.bytes, &out.bytes);
    let mut tail = Vec::with_capacity(outer * new);
    for k in 0..outer {
        let block = &o[k * (old + new)..(k + 1) * (old + new)];
        if block[..old] != p[k * old..(k + 1) * old] {
            return None;
        }
        tail.extend_from_slice(&block[old..]);
    }
    Some((axis, tail))
}

/// Writes `out` at `path` as the file `base` extended by `tail` along `axis` (see [`extension`]);
/// `false` when either is outside a registered root (then the caller writes it whole).
pub fn write_delta(path: &Path, base: &Path, out: &Tensor, axis: usize, tail: &[u8]) -> Result<bool> {
    let (Some(root), Some(base_root)) = (root_of(path), root_of(base)) else {
        return Ok(false);
    };
    let Ok(relative) = base.strip_prefix(&root).map(Path::to_path_buf) else {
        return Ok(false);
    };
    if base_root != root {
        return Ok(false);
    }
    let header = Header {
        base: relative,
        axis,
        dtype: out.dtype().name().to_string(),
        shape: out.shape.clone(),
    };
    let mut bytes = MAGIC.to_vec();
    serde_json::to_writer(&mut bytes, &header)?;
    bytes.push(b'\n');
    bytes.extend_from_slice(tail);
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

/// Reads the delta file at `path` as the whole tensor: back along its bases to a whole file (or a
/// tensor read recently), then forward adding each slice.
pub(super) fn read(path: &Path) -> Result<Tensor> {
    let root = root_of(path).with_context(|| {
        format!(
            "{} is a delta file of an audit's work directory, readable only while that audit runs",
            path.display()
        )
    })?;
    let mut chain: Vec<(PathBuf, Header, Vec<u8>)> = Vec::new();
    let mut current = path.to_path_buf();
    let mut tensor = loop {
        if let Some(t) = cached(&current) {
            break (*t).clone();
        }
        let bytes = std::fs::read(&current).with_context(|| format!("cannot read {}", current.display()))?;
        if !starts_delta(&bytes) {
            break Tensor::read_npy(&current)?;
        }
        let (header, tail) = parse(&bytes).with_context(|| format!("{}", current.display()))?;
        let base = root.join(&header.base);
        let inside = header.base.components().all(|c| matches!(c, Component::Normal(_)));
        if !inside || chain.len() >= MAX_CHAIN {
            bail!(
                "{}: a delta whose base is outside its work directory",
                current.display()
            );
        }
        chain.push((current, header, tail));
        current = base;
    };
    for (file, header, tail) in chain.into_iter().rev() {
        tensor = apply(tensor, &header, &tail).with_context(|| format!("{}", file.display()))?;
    }
    remember(path, &tensor);
    Ok(tensor)
}

fn parse(bytes: &[u8]) -> Result<(Header, Vec<u8>)> {
    let rest = &bytes[MAGIC.len()..];
    let end = rest
        .iter()
        .position(|&b| b == b'\n')
        .context("a delta file without its header line")?;
    let header: Header = serde_json::from_slice(&rest[..end]).context("a delta file's header is damaged")?;
    Ok((header, rest[end + 1..].to_vec()))
}

/// `base` extended by `tail` to the header's shape.
fn apply(base: Tensor, header: &Header, tail: &[u8]) -> Result<Tensor> {
    let (axis, shape) = (header.axis, &header.shape);
    let fits = base.dtype().name() == header.dtype
        && base.shape.len() == shape.len()
        && axis < shape.len()
        && (0..shape.len()).all(|i| base.shape[i] == shape[i] || (i == axis && base.shape[i] <= shape[i]));
    if !fits {
        bail!(
            "a delta to {} {shape:?} along axis {axis} of a {} {:?}",
            header.dtype,
            base.dtype().name(),
            base.shape
        );
    }
    checked_len(shape).with_context(|| format!("shape {shape:?} is too large"))?;
    let dtype = base.dtype();
    let (outer, inner) = blocks(shape, axis, dtype.size());
    let (old, new) = (base.shape[axis] * inner, (shape[axis] - base.shape[axis]) * inner);
    if tail.len() != outer * new {
        bail!("a delta of {} bytes where {} were expected", tail.len(), outer * new);
    }
    let before = base.data.to_le_bytes();
    let mut bytes = Vec::with_capacity(outer * (old + new));
    for k in 0..outer {
        bytes.extend_from_slice(&before[k * old..(k + 1) * old]);
        bytes.extend_from_slice(&tail[k * new..(k + 1) * new]);
    }
    Tensor::new(shape.clone(), TensorData::from_bytes(dtype, &bytes, false))
}

fn cached(path: &Path) -> Option<Arc<Tensor>> {
    let id = file_id(path)?;
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    let at = cache.iter().position(|(p, i, _)| p == path && *i == id)?;
    // Most recently used last.
    let entry = cache.remove(at);
    let tensor = entry.2.clone();
    cache.push(entry);
    Some(tensor)
}

fn remember(path: &Path, tensor: &Tensor) {
    let bytes = tensor.len() * tensor.dtype().size();
    let Some(id) = file_id(path).filter(|_| bytes <= CACHE_BYTES) else {
        return;
    };
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    cache.retain(|(p, _, _)| p != path);
    cache.push((path.to_path_buf(), id, Arc::new(tensor.clone())));
    let size = |c: &Vec<Cached>| c.iter().map(|(_, _, t)| t.len() * t.dtype().size()).sum::<usize>();
    while cache.len() > CACHE_ENTRIES || size(&cache) > CACHE_BYTES {
        cache.remove(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: Vec<usize>, values: impl Iterator<Item = f32>) -> Tensor {
        Tensor::new(shape, TensorData::Float32(values.collect())).unwrap()
    }

    #[test]
    fn a_tensor_extended_along_any_axis_is_read_back_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        allow_root(dir.path());
        // [2, len, 3]: the axis in the middle, so every block of the outer axis grows.
        let mut prev = f32s(vec![2, 1, 3], (0..6).map(|v| v as f32));
        let base = dir.path().join("s0.npy");
        prev.write_npy(&base).unwrap();
        let mut file = base;
        for step in 1..5usize {
            let data = prev.data.to_le_bytes();
            let mut values: Vec<f32> = Vec::new();
            for k in 0..2 {
                let block = &data[k * step * 12..(k + 1) * step * 12];
                values.extend(block.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
                values.extend((0..3).map(|j| (100 * step + 10 * k + j) as f32));
            }
            let out = f32s(vec![2, step + 1, 3], values.into_iter());
            let (axis, tail) = extension(&Flat::of(&prev), &Flat::of(&out)).expect("an extension");
            assert_eq!((axis, tail.len()), (1, 2 * 3 * 4));
            let path = dir.path().join(format!("s{step}.npy"));
            assert!(write_delta(&path, &file, &out, axis, &tail).unwrap());
            assert!(is_delta(&path));
            assert_eq!(Tensor::read_npy(&path).unwrap(), out);
            (prev, file) = (out, path);
        }
        // Read cold (nothing cached) from the last step back to the whole file.
        CACHE.lock().unwrap().clear();
        assert_eq!(Tensor::read_npy(&file).unwrap(), prev);
        // Not an extension: a value in front changed, another type, two axes grown.
        let short = Flat::of(&f32s(vec![1, 2], [1.0, 2.0].into_iter()));
        let flat = |shape: Vec<usize>, v: &[f32]| Flat::of(&f32s(shape, v.iter().copied()));
        assert_eq!(
            extension(&short, &flat(vec![1, 3], &[1.0, 2.0, 7.0])),
            Some((1, 7f32.to_le_bytes().to_vec()))
        );
        assert!(extension(&short, &flat(vec![1, 3], &[1.0, 9.0, 7.0])).is_none());
        let ints = Tensor::new(vec![1, 3], TensorData::Int32(vec![1, 2, 7])).unwrap();
        assert!(extension(&short, &Flat::of(&ints)).is_none());
        assert!(extension(&short, &flat(vec![2, 3], &[1.0, 2.0, 7.0, 1.0, 2.0, 7.0])).is_none());
        forget_root(dir.path());
        let err = Tensor::read_npy(&file).unwrap_err().to_string();
        assert!(err.contains("readable only while that audit runs"), "{err}");
    }
}
