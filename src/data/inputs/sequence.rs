//! The fresh inputs of a stream's steps, as files: a long array cut into windows (`--chunk`), or
//! an `.npz` whose every member stacks one input over the steps (`--sequence`). Both become one
//! tensor per step and input, fed to the sample machinery as if each step were a sample.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::data::model::{Dim, Signature, TensorInfo};
use crate::data::tensor::{read_npz_checked, Tensor, TensorData};
use crate::foundation::error::bad_input;

/// `--chunk NAME=FILE.npy[:hop=H]`, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkSpec {
    pub input: String,
    pub file: PathBuf,
    /// Samples between the starts of two windows; `None`: the window's length (no overlap).
    pub hop: Option<usize>,
}

impl ChunkSpec {
    /// Parses `NAME=FILE.npy[:hop=H]`.
    pub fn parse(text: &str) -> Result<ChunkSpec> {
        let bad = || bad_input(format!("--chunk '{text}' is not NAME=FILE.npy[:hop=H]"));
        let (input, rest) = text.split_once('=').ok_or_else(bad)?;
        let (file, hop) = match rest.rsplit_once(":hop=") {
            Some((file, hop)) => {
                let hop: usize = hop
                    .parse()
                    .ok()
                    .filter(|h| *h > 0)
                    .ok_or_else(|| bad_input(format!("--chunk '{text}': hop must be a positive integer")))?;
                (file, Some(hop))
            }
            None => (rest, None),
        };
        if input.is_empty() || file.is_empty() {
            return Err(bad());
        }
        Ok(ChunkSpec {
            input: input.into(),
            file: file.into(),
            hop,
        })
    }
}

/// The window length of an input: its last dimension, fixed in the model or pinned.
fn window_of(info: &TensorInfo, pinned: Option<&Vec<usize>>) -> Result<(Vec<usize>, usize)> {
    let shape: Option<Vec<usize>> = pinned.cloned().or_else(|| {
        info.dims.as_ref().and_then(|dims| {
            dims.iter()
                .map(|d| if let Dim::Fixed(n) = d { Some(*n) } else { None })
                .collect()
        })
    });
    let shape = shape.filter(|s| s.last().is_some_and(|w| *w > 0)).ok_or_else(|| {
        bad_input(format!(
            "--chunk {}: the input's shape {} must be fixed (pin it with --input-shape {}:...) and end in the window length",
            info.name,
            info.shape_text(),
            info.name
        ))
    })?;
    let window = shape[shape.len() - 1];
    Ok((shape, window))
}

/// Cuts `--chunk`'s array into the windows of `info`'s last dimension: the array's last axis is
/// time, its other axes must equal the input's leading dimensions (or be absent when those are
/// all 1). With a hop `h` shorter than the window `w`, the array is first padded on the left with
/// `w - h` zeros, so that window `k` ends at sample `(k + 1)·h` and carries the `w - h` samples
/// before its new ones as context (how streaming models such as VADs are fed). At most `steps`
/// windows are taken.
pub fn chunk(
    spec: &ChunkSpec,
    info: &TensorInfo,
    pinned: Option<&Vec<usize>>,
    steps: Option<usize>,
) -> Result<Vec<Tensor>> {
    let at = |e: String| bad_input(format!("--chunk {}={}: {e}", spec.input, spec.file.display()));
    let (shape, window) = window_of(info, pinned)?;
    let hop = spec.hop.unwrap_or(window);
    let array = Tensor::read_npy(&spec.file).map_err(|e| at(format!("{e:#}")))?;
    if array.dtype() != info.dtype {
        return Err(at(format!(
            "the array is {} but input '{}' takes {}",
            array.dtype().name(),
            info.name,
            info.dtype.name()
        )));
    }
    let lead = &shape[..shape.len() - 1];
    let array_lead = &array.shape[..array.shape.len().saturating_sub(1)];
    let rows: usize = lead.iter().product();
    if array.shape.is_empty() || (array_lead != lead && !(array_lead.is_empty() && rows == 1)) {
        return Err(at(format!(
            "an array of shape {:?} cannot feed input '{}' {:?}: its last axis is time and the others must be {:?}",
            array.shape, info.name, shape, lead
        )));
    }
    let length = array.shape[array.shape.len() - 1];
    let pad = window.saturating_sub(hop);
    if length + pad < window {
        return Err(at(format!("{length} samples are fewer than one window of {window}")));
    }
    let available = (length + pad - window) / hop + 1;
    let count = match steps {
        Some(n) if n > available => {
            return Err(at(format!(
                "--steps {n} asks for more windows than the array holds ({available} of {window} every {hop})"
            )))
        }
        Some(n) => n,
        None => available,
    };
    let size = array.dtype().size();
    let bytes = array.data.to_le_bytes();
    (0..count)
        .map(|k| {
            crate::foundation::interrupt::check()?;
            let mut out = Vec::with_capacity(rows * window * size);
            for r in 0..rows {
                let row = &bytes[r * length * size..(r + 1) * length * size];
                for t in k * hop..k * hop + window {
                    match t.checked_sub(pad) {
                        Some(i) => out.extend_from_slice(&row[i * size..(i + 1) * size]),
                        None => out.extend(std::iter::repeat_n(0u8, size)),
                    }
                }
            }
            Tensor::new(shape.clone(), TensorData::from_bytes(info.dtype, &out, false))
        })
        .collect()
}

/// Splits `--sequence`'s archive into steps: every member is one input stacked over the steps
/// on its first axis (`[steps, ...input shape]`), and every member has the same number of steps,
/// except the fed-back inputs (`fed`), whose first row alone is their first value. At most
/// `steps` are taken. Each member is checked against the model from its header.
pub fn sequence(
    path: &Path,
    sig: &Signature,
    pinned: &HashMap<String, Vec<usize>>,
    (steps, fed): (Option<usize>, &[String]),
) -> Result<Vec<HashMap<String, Tensor>>> {
    let at = |e: String| bad_input(format!("--sequence {}: {e}", path.display()));
    let check = |name: &str, dtype: crate::data::tensor::DType, shape: &[usize]| -> Result<()> {
        let info = sig
            .inputs
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| bad_input("not an input of the model"))?;
        let step_shape = shape
            .get(1..)
            .ok_or_else(|| bad_input("a member must have a steps axis first"))?;
        super::check_declared(info, dtype, step_shape, pinned.get(name))
    };
    let members = read_npz_checked(path, &check).map_err(|e| at(format!("{e:#}")))?;
    let held: Vec<usize> = members
        .iter()
        .filter(|(name, _)| !fed.contains(name))
        .map(|(_, t)| t.shape[0])
        .collect();
    let available = held.iter().copied().min().unwrap_or(0);
    let empty_state = members.iter().any(|(name, t)| fed.contains(name) && t.shape[0] == 0);
    if held.iter().any(|n| *n != available) || available == 0 || empty_state {
        return Err(at(format!(
            "every member must hold the same number of steps, at least one (they hold {held:?}; a fed-back state's member needs one row, its first value)"
        )));
    }
    let count = match steps {
        Some(n) if n > available => {
            return Err(at(format!(
                "--steps {n} asks for more steps than it holds ({available})"
            )))
        }
        Some(n) => n,
        None => available,
    };
    let mut out = vec![HashMap::new(); count];
    for (name, stacked) in members {
        let step_shape = stacked.shape[1..].to_vec();
        let per_step: usize = step_shape.iter().product();
        let size = stacked.dtype().size();
        let bytes = stacked.data.to_le_bytes();
        for (k, step) in out.iter_mut().enumerate() {
            let row = if fed.contains(&name) { 0 } else { k };
            let part = &bytes[row * per_step * size..(row + 1) * per_step * size];
            let t = Tensor::new(step_shape.clone(), TensorData::from_bytes(stacked.dtype(), part, false))?;
            step.insert(name.clone(), t);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tensor::DType;

    fn input(dims: &[usize]) -> TensorInfo {
        TensorInfo {
            name: "x".into(),
            dtype: DType::Float32,
            dims: Some(dims.iter().map(|d| Dim::Fixed(*d)).collect()),
        }
    }

    fn write_npy(dir: &Path, values: Vec<f32>, shape: Vec<usize>) -> String {
        let path = dir.join("a.npy");
        Tensor::new(shape, TensorData::Float32(values))
            .unwrap()
            .write_npy(&path)
            .unwrap();
        path.display().to_string()
    }

    fn values(t: &Tensor) -> Vec<f32> {
        match &t.data {
            TensorData::Float32(v) => v.clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn parses_hop() {
        let s = ChunkSpec::parse("input=/a/b:c.npy:hop=512").unwrap();
        assert_eq!(
            (s.input.as_str(), s.file.to_str().unwrap_or(""), s.hop),
            ("input", "/a/b:c.npy", Some(512))
        );
        assert_eq!(ChunkSpec::parse("x=a.npy").unwrap().hop, None);
        assert!(ChunkSpec::parse("x=a.npy:hop=0").is_err());
        assert!(ChunkSpec::parse("a.npy").is_err());
    }

    /// Window 4, hop 3 over 1..=8: one zero of context first, then 3 new samples per window.
    #[test]
    fn windows_carry_context_from_the_left() {
        let dir = tempfile::tempdir().unwrap();
        let file = write_npy(dir.path(), (1..=8).map(|v| v as f32).collect(), vec![8]);
        let spec = ChunkSpec {
            input: "x".into(),
            file: file.into(),
            hop: Some(3),
        };
        let w = chunk(&spec, &input(&[1, 4]), None, None).unwrap();
        let got: Vec<Vec<f32>> = w.iter().map(values).collect();
        assert_eq!(got, vec![vec![0., 1., 2., 3.], vec![3., 4., 5., 6.]]);
        assert_eq!(w[0].shape, vec![1, 4]);
        assert_eq!(chunk(&spec, &input(&[1, 4]), None, Some(1)).unwrap().len(), 1);
        assert!(chunk(&spec, &input(&[1, 4]), None, Some(3)).is_err());
    }

    #[test]
    fn no_hop_means_back_to_back_windows_per_row() {
        let dir = tempfile::tempdir().unwrap();
        let file = write_npy(dir.path(), (0..10).map(|v| v as f32).collect(), vec![2, 5]);
        let spec = ChunkSpec {
            input: "x".into(),
            file: file.into(),
            hop: None,
        };
        let w = chunk(&spec, &input(&[2, 2]), None, None).unwrap();
        let got: Vec<Vec<f32>> = w.iter().map(values).collect();
        assert_eq!(got, vec![vec![0., 1., 5., 6.], vec![2., 3., 7., 8.]]);
        assert!(chunk(&spec, &input(&[3, 2]), None, None).is_err());
    }
}
