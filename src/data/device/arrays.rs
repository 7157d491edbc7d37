//! A report's arrays against the model's signature: one entry per model input or output, either
//! one sample in the declared shape or several stacked on a new leading axis (how NumPy and AI
//! Hub write them). Names, element types and fixed dimensions are checked from the `.npy`
//! headers, before any data is inflated.

use std::cell::Cell;

use anyhow::{bail, Result};

use crate::data::model::{Dim, TensorInfo};
use crate::data::tensor::{checked_len, read_npz_bytes_checked, DType, Tensor, TensorData};

use super::MAX_FILE_BYTES;

/// Arrays per sample, each sample in the order of the model's inputs or outputs.
pub type Samples = Vec<Vec<(String, Tensor)>>;

/// Whether `shape` is `info`'s declared shape (`Some(false)`), that shape with a leading sample
/// axis (`Some(true)`), or neither (`None`).
fn stacked(info: &TensorInfo, shape: &[usize]) -> Option<bool> {
    let Some(dims) = &info.dims else {
        return Some(false);
    };
    let fits = |s: &[usize]| {
        s.len() == dims.len()
            && dims.iter().zip(s).all(|(d, &n)| match d {
                Dim::Fixed(f) => *f == n,
                Dim::Dynamic(_) => true,
            })
    };
    if fits(shape) {
        Some(false)
    } else if !shape.is_empty() && fits(&shape[1..]) {
        Some(true)
    } else {
        None
    }
}

/// Checks one array's header against the declared tensors (`what` is "output" or "input").
pub fn check_header(declared: &[TensorInfo], what: &str, name: &str, dtype: DType, shape: &[usize]) -> Result<()> {
    let Some(info) = declared.iter().find(|i| i.name == name) else {
        let known: Vec<&str> = declared.iter().map(|i| i.name.as_str()).collect();
        bail!("'{name}' is not a model {what} (the model's: {})", known.join(", "));
    };
    if dtype != info.dtype {
        bail!(
            "{what} '{name}' is {}, the model's is {}",
            dtype.name(),
            info.dtype.name()
        );
    }
    if stacked(info, shape).is_none() {
        bail!(
            "{what} '{name}' has shape {shape:?}, not the model's {} (or that with a leading sample axis)",
            info.shape_text()
        );
    }
    Ok(())
}

/// Reads an `.npz` of `declared` tensors held in memory, each array's header checked before its
/// data, the archive's total declared size within [`MAX_FILE_BYTES`].
pub fn read_npz_for(bytes: Vec<u8>, declared: &[TensorInfo], what: &str) -> Result<Samples> {
    let total = Cell::new(0u64);
    let check = |name: &str, dtype: DType, shape: &[usize]| -> Result<()> {
        check_header(declared, what, name, dtype, shape)?;
        let bytes = checked_len(shape).map_or(u64::MAX, |n| (n * dtype.size()) as u64);
        total.set(total.get().saturating_add(bytes));
        if total.get() > MAX_FILE_BYTES {
            bail!("the arrays hold more than {} MiB", MAX_FILE_BYTES >> 20);
        }
        Ok(())
    };
    let arrays = read_npz_bytes_checked(bytes, &check)?;
    split_samples(arrays, declared, what)
}

/// Orders `arrays` by `declared` and splits stacked ones into samples: every declared tensor
/// must be there, each with the same number of samples.
pub fn split_samples(arrays: Vec<(String, Tensor)>, declared: &[TensorInfo], what: &str) -> Result<Samples> {
    let mut per_tensor: Vec<Vec<Tensor>> = Vec::new();
    for info in declared {
        let mut found = arrays.iter().filter(|(n, _)| *n == info.name);
        let Some((_, t)) = found.next() else {
            bail!("no {what} '{}' in the report", info.name);
        };
        if found.next().is_some() {
            bail!("{what} '{}' appears twice", info.name);
        }
        per_tensor.push(match stacked(info, &t.shape) {
            Some(true) => unstack(t),
            _ => vec![t.clone()],
        });
    }
    let count = per_tensor.first().map_or(0, Vec::len);
    if count == 0 {
        bail!("the report holds no sample of its {what}s");
    }
    if per_tensor.iter().any(|s| s.len() != count) {
        bail!("the {what}s hold different numbers of samples");
    }
    Ok((0..count)
        .map(|k| {
            declared
                .iter()
                .zip(&per_tensor)
                .map(|(info, s)| (info.name.clone(), s[k].clone()))
                .collect()
        })
        .collect())
}

/// Splits a tensor along its first axis.
fn unstack(t: &Tensor) -> Vec<Tensor> {
    let n = t.shape[0];
    if n == 0 {
        return Vec::new();
    }
    let bytes = t.data.to_le_bytes();
    let chunk = bytes.len() / n;
    bytes
        .chunks(chunk.max(1))
        .take(n)
        .map(|c| Tensor {
            shape: t.shape[1..].to_vec(),
            data: TensorData::from_bytes(t.dtype(), c, false),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, dims: &[usize]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            dtype: DType::Float32,
            dims: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
        }
    }

    #[test]
    fn stacked_samples_split_and_single_samples_stay_whole() {
        let declared = [info("y", &[1, 2])];
        let t = Tensor::new(vec![3, 1, 2], TensorData::Float32(vec![0., 1., 2., 3., 4., 5.])).unwrap();
        let s = split_samples(vec![("y".into(), t)], &declared, "output").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[2][0].1.data, TensorData::Float32(vec![4., 5.]));
        assert_eq!(s[2][0].1.shape, vec![1, 2]);
        let one = Tensor::new(vec![1, 2], TensorData::Float32(vec![7., 8.])).unwrap();
        assert_eq!(
            split_samples(vec![("y".into(), one)], &declared, "output")
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn wrong_names_shapes_and_types_are_refused_from_the_header() {
        let declared = [info("y", &[1, 2])];
        assert!(check_header(&declared, "output", "z", DType::Float32, &[1, 2]).is_err());
        assert!(check_header(&declared, "output", "y", DType::Uint8, &[1, 2]).is_err());
        assert!(check_header(&declared, "output", "y", DType::Float32, &[2, 2]).is_err());
        assert!(check_header(&declared, "output", "y", DType::Float32, &[5, 1, 2]).is_ok());
    }
}
