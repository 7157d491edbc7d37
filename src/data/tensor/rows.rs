//! The rows of a large array in a `.npz` archive, read in order without holding the array: an eval
//! set stacked on axis 0 (10,000 images) is fed one sample at a time. A thread owns the archive and
//! sends each row through a bounded channel, so at most a few rows are in memory, whether the
//! member is stored or compressed.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};

use anyhow::{bail, Context, Result};

use super::{checked_len, DType, Tensor, TensorData};

/// Rows in flight between the reading thread and the consumer.
const ROWS_AHEAD: usize = 4;

/// An array's element type and shape as its `.npy` header declares them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayHeader {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// The headers of every array of a `.npz` archive, each array's data read through once (not kept)
/// to check it against its header and its checksum: an array cut short, followed by stray bytes or
/// damaged is refused here, before anything is fed from it. Errors do not name the archive (the
/// caller does).
pub fn npz_headers(path: &Path) -> Result<Vec<ArrayHeader>> {
    let file = File::open(path).context("cannot open it")?;
    let mut archive = super::open_zip(BufReader::new(file), ".npz")?;
    let mut out = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| anyhow::anyhow!("cannot read entry {i}: {e}"))?;
        // An eval set's archive holds arrays only (NumPy writes nothing else).
        if entry.is_dir() || entry.is_symlink() {
            bail!(
                "entry '{}' is {}, not an array",
                entry.name(),
                if entry.is_dir() {
                    "a directory"
                } else {
                    "a symbolic link"
                }
            );
        }
        let name = entry.name().strip_suffix(".npy").unwrap_or(entry.name()).to_string();
        let (dtype, shape, _) = super::npy::stream_header(&mut entry).with_context(|| format!("array '{name}'"))?;
        let data = checked_len(&shape).map_or(u64::MAX, |n| (n as u64).saturating_mul(dtype.size() as u64));
        // Read to the end: the zip reader checks the member's CRC-32 there.
        let held = std::io::copy(&mut (&mut entry).take(data.saturating_add(1)), &mut std::io::sink())
            .with_context(|| format!("array '{name}': its data cannot be read"))?;
        if held != data {
            bail!(
                "array '{name}' holds {} bytes of data where its header ({} {shape:?}) declares {data}: the file is cut short or has stray bytes",
                if held > data { format!("more than {data}") } else { held.to_string() },
                dtype.name()
            );
        }
        out.push(ArrayHeader { name, dtype, shape });
    }
    Ok(out)
}

/// One array of a `.npz` archive read row by row (along axis 0) from row `start`.
pub struct RowStream {
    pub header: ArrayHeader,
    rows: Receiver<Result<Tensor, String>>,
}

impl RowStream {
    /// Opens `member` of the archive at `path` and starts reading it from row `start`.
    pub fn open(path: &Path, member: &str, start: usize) -> Result<RowStream> {
        let (header_tx, header_rx) = sync_channel::<Result<ArrayHeader, String>>(1);
        let (tx, rx) = sync_channel::<Result<Tensor, String>>(ROWS_AHEAD);
        let (path, name) = (path.to_path_buf(), member.to_string());
        std::thread::spawn(move || {
            if let Err(e) = stream(&path, &name, start, &header_tx, &tx) {
                // Whichever the consumer waits on hears why.
                let why = format!("{e:#}");
                let _ = header_tx.try_send(Err(why.clone()));
                let _ = tx.send(Err(why));
            }
        });
        let header = header_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the reader of array '{member}' stopped"))?
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(RowStream { header, rows: rx })
    }

    /// The next row: the array's type, its shape without axis 0.
    pub fn next_row(&mut self) -> Result<Tensor> {
        match self.rows.recv() {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => bail!("{e}"),
            Err(_) => bail!("array '{}' has no more rows", self.header.name),
        }
    }
}

/// The reading thread: the header first, then every row from `start`.
fn stream(
    path: &PathBuf,
    member: &str,
    start: usize,
    header_tx: &std::sync::mpsc::SyncSender<Result<ArrayHeader, String>>,
    tx: &std::sync::mpsc::SyncSender<Result<Tensor, String>>,
) -> Result<()> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut archive = super::open_zip(BufReader::new(file), ".npz").with_context(|| format!("{}", path.display()))?;
    let mut entry = archive
        .by_name(&format!("{member}.npy"))
        .map_err(|_| anyhow::anyhow!("{}: no array '{member}'", path.display()))?;
    let (dtype, shape, big_endian) =
        super::npy::stream_header(&mut entry).with_context(|| format!("{}: array '{member}'", path.display()))?;
    if shape.is_empty() {
        bail!(
            "{}: array '{member}' is a scalar, not samples stacked on axis 0",
            path.display()
        );
    }
    let row_shape = shape[1..].to_vec();
    let row_bytes = checked_len(&row_shape).context("a row too large")? * dtype.size();
    let header = ArrayHeader {
        name: member.to_string(),
        dtype,
        shape: shape.clone(),
    };
    if header_tx.send(Ok(header)).is_err() {
        return Ok(());
    }
    let mut bytes = vec![0u8; row_bytes];
    for k in 0..shape[0] {
        entry
            .read_exact(&mut bytes)
            .with_context(|| format!("{}: array '{member}' ends before row {k}", path.display()))?;
        if k < start {
            continue;
        }
        let row = Tensor::new(row_shape.clone(), TensorData::from_bytes(dtype, &bytes, big_endian))?;
        if tx.send(Ok(row)).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// One array of a `.npz` archive whose rows are read in any order: its data inflated once into an
/// anonymous temporary file (removed by the system when closed), then each row read at its
/// offset. A sequential eval feeds a stacked set in a random order; a compressed member cannot
/// be sought, and holding the array would cost its size in memory instead of on disk.
#[derive(Debug)]
pub struct RowTable {
    pub header: ArrayHeader,
    file: File,
    row_shape: Vec<usize>,
    row_bytes: usize,
    big_endian: bool,
}

impl RowTable {
    /// Inflates `member` of the archive at `path` into a temporary file.
    pub fn spill(path: &Path, member: &str) -> Result<RowTable> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let mut archive =
            super::open_zip(BufReader::new(file), ".npz").with_context(|| format!("{}", path.display()))?;
        let mut entry = archive
            .by_name(&format!("{member}.npy"))
            .map_err(|_| anyhow::anyhow!("{}: no array '{member}'", path.display()))?;
        let (dtype, shape, big_endian) =
            super::npy::stream_header(&mut entry).with_context(|| format!("{}: array '{member}'", path.display()))?;
        let Some((&rows, row_shape)) = shape.split_first() else {
            bail!(
                "{}: array '{member}' is a scalar, not samples stacked on axis 0",
                path.display()
            );
        };
        let row_bytes = checked_len(row_shape).context("a row too large")? * dtype.size();
        let mut spill = tempfile::tempfile().context("cannot make a temporary file for the set's rows")?;
        let want = (rows as u64).saturating_mul(row_bytes as u64);
        let copied = std::io::copy(&mut (&mut entry).take(want), &mut spill)
            .with_context(|| format!("{}: array '{member}' cannot be read", path.display()))?;
        if copied != want {
            bail!("{}: array '{member}' ends before its last row", path.display());
        }
        Ok(RowTable {
            header: ArrayHeader {
                name: member.to_string(),
                dtype,
                shape: shape.clone(),
            },
            file: spill,
            row_shape: row_shape.to_vec(),
            row_bytes,
            big_endian,
        })
    }

    /// Row `k`: the array's type, its shape without axis 0.
    pub fn row(&self, k: usize) -> Result<Tensor> {
        use std::os::unix::fs::FileExt;
        if k >= self.header.shape[0] {
            bail!("array '{}' has no row {k}", self.header.name);
        }
        let mut bytes = vec![0u8; self.row_bytes];
        self.file
            .read_exact_at(&mut bytes, (k as u64) * self.row_bytes as u64)
            .with_context(|| format!("array '{}': row {k} cannot be read back", self.header.name))?;
        Tensor::new(
            self.row_shape.clone(),
            TensorData::from_bytes(self.header.dtype, &bytes, self.big_endian),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_in_order_from_any_start_and_the_end_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("set.npz");
        let a = Tensor::new(vec![3, 2], TensorData::Float32(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0])).unwrap();
        let l = Tensor::new(vec![3], TensorData::Int64(vec![7, 8, 9])).unwrap();
        super::super::write_npz(&path, &[("x".into(), &a), ("labels".into(), &l)]).unwrap();
        let headers = npz_headers(&path).unwrap();
        assert_eq!(headers[0].shape, vec![3, 2]);
        assert_eq!(headers[1].dtype, DType::Int64);
        let mut s = RowStream::open(&path, "x", 1).unwrap();
        assert_eq!(s.next_row().unwrap().data, TensorData::Float32(vec![2.0, 3.0]));
        assert_eq!(s.next_row().unwrap().data, TensorData::Float32(vec![4.0, 5.0]));
        assert!(s.next_row().is_err());
        assert!(RowStream::open(&path, "nope", 0).is_err());
        let table = RowTable::spill(&path, "x").unwrap();
        assert_eq!(table.row(2).unwrap().data, TensorData::Float32(vec![4.0, 5.0]));
        assert_eq!(table.row(0).unwrap().data, TensorData::Float32(vec![0.0, 1.0]));
        assert!(table.row(3).is_err());
    }
}
