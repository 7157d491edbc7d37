//! A `qnn-net-run` (or `snpe-net-run`) output directory: `Result_<N>/` per inference, each with
//! one `<output>.raw` per model output (in any spelling of [`super::spelling`] that names one
//! output), float32 by default or the output's own type with `--use_native_output_files`. The device
//! is a `device.json` beside `Result_0/`, else `--chipset`. The inputs are those of the
//! `input_list.txt` beside `Result_0/` when the report has one (one line per inference, each
//! `name:=path` or a path per model input in order; `#` lines name outputs and are skipped; the
//! paths are the device's, so each file is looked up by its file name in `inputs/` or beside the
//! list, never where the path points), else the golden run's or `--inputs`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::spelling::{self, OutputFile};
use super::{DeviceInfo, DeviceReport, ReportDefaults, ReportFormat, MAX_FILE_BYTES, MAX_REPORT_BYTES, MAX_TEXT_BYTES};
use crate::data::model::{Dim, Signature, TensorInfo};
use crate::data::tensor::{DType, Tensor, TensorData};
use crate::foundation::error::bad_input;

/// The most inferences one directory may hold.
const MAX_RESULTS: usize = 4096;

/// `Result_0`, `Result_1`, ... in order. A gap (a `Result_N` after one that is missing) is
/// refused rather than taken for the end: samples would silently go missing.
fn result_dirs(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    loop {
        let name = format!("Result_{}", out.len());
        let path = dir.join(&name);
        if !super::member_dir(&path, &name)? {
            break;
        }
        if out.len() >= MAX_RESULTS {
            bail!("more than {MAX_RESULTS} Result_N directories");
        }
        out.push(path);
    }
    if out.is_empty() {
        bail!("no Result_0/ (not a qnn-net-run output directory)");
    }
    let beyond = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("Result_")?.parse::<usize>().ok())
        .filter(|n| *n > out.len())
        .min();
    if let Some(n) = beyond {
        bail!(
            "Result_{n} follows a gap: Result_{} is missing (the inferences must be Result_0, Result_1, ... without gaps)",
            out.len()
        );
    }
    Ok(out)
}

/// The shape of a raw file of `len` bytes: the declared one, with one dynamic dimension (a batch)
/// taken from the length (as float32 values, what `qnn-net-run` writes by default, else in the
/// tensor's own type). Raw files carry no shape, so two dynamic dimensions cannot be told.
fn shape_of(info: &TensorInfo, len: usize) -> Result<Vec<usize>> {
    let Some(dims) = &info.dims else {
        bail!("'{}' has no declared shape: raw files carry no shape", info.name);
    };
    let fixed: usize = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => *n,
            Dim::Dynamic(_) => 1,
        })
        .product();
    let dynamic: Vec<usize> = (0..dims.len())
        .filter(|&k| matches!(dims[k], Dim::Dynamic(_)))
        .collect();
    let mut shape: Vec<usize> = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => *n,
            Dim::Dynamic(_) => 1,
        })
        .collect();
    match dynamic.as_slice() {
        [] => Ok(shape),
        [k] => {
            let per = [4, info.dtype.size()].map(|w| fixed.saturating_mul(w));
            let Some(width) = per.into_iter().find(|p| *p > 0 && len.is_multiple_of(*p)) else {
                bail!(
                    "'{}': {len} bytes are no whole number of its {fixed}-element rows",
                    info.name
                );
            };
            shape[*k] = len / width;
            Ok(shape)
        }
        _ => bail!(
            "'{}' has {} dynamic dimensions: a raw file carries no shape (give the inputs with --inputs)",
            info.name,
            dynamic.len()
        ),
    }
}

/// Whether `len` bytes are `shape`'s elements as float32 or in the tensor's own type.
fn fits(shape: &[usize], info: &TensorInfo, len: usize) -> bool {
    let n = crate::data::tensor::checked_len(shape).unwrap_or(0);
    n > 0 && (len == n.saturating_mul(4) || len == n.saturating_mul(info.dtype.size()))
}

/// One raw output: float32 (converted to the output's type when that is an integer type and
/// every value is one of its codes), or the output's own type.
fn read_raw(bytes: &[u8], info: &TensorInfo, shape: Vec<usize>) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let native = n * info.dtype.size();
    if bytes.len() == native {
        return Tensor::new(shape, TensorData::from_bytes(info.dtype, bytes, false));
    }
    if bytes.len() != n * 4 {
        if info.dtype == DType::Float32 {
            bail!("{} bytes are not {n} float32 values ({} bytes)", bytes.len(), n * 4);
        }
        bail!(
            "{} bytes are neither {n} float32 values ({} bytes) nor {n} {} values ({native} bytes)",
            bytes.len(),
            n * 4,
            info.dtype.name()
        );
    }
    let floats = TensorData::from_bytes(DType::Float32, bytes, false);
    if info.dtype == DType::Float32 {
        return Tensor::new(shape, floats);
    }
    let Some((lo, hi)) = info.dtype.int_range() else {
        bail!("float32 values for a {} output", info.dtype.name());
    };
    let values: Vec<f64> = (0..n).map(|i| floats.get_f64(i)).collect();
    if let Some(v) = values.iter().find(|v| v.fract() != 0.0 || **v < lo || **v > hi) {
        bail!("float32 value {v} is not a {} code", info.dtype.name());
    }
    let bytes: Vec<u8> = values.iter().flat_map(|v| int_bytes(*v, info.dtype)).collect();
    Tensor::new(shape, TensorData::from_bytes(info.dtype, &bytes, false))
}

fn int_bytes(v: f64, dtype: DType) -> Vec<u8> {
    let w = dtype.size();
    (v as i64).to_le_bytes()[..w].to_vec()
}

/// Every inference's outputs, and the file of each output in `Result_0/` with its spelling.
fn read_results(dir: &Path, sig: &Signature, hash: &mut Sha256) -> Result<(super::Samples, Vec<OutputFile>)> {
    let mut total = 0u64;
    let mut samples = Vec::new();
    let names: Vec<String> = sig.outputs.iter().map(|o| o.name.clone()).collect();
    let mut first = Vec::new();
    for (k, result) in result_dirs(dir)?.iter().enumerate() {
        let files = spelling::resolve(result, &names).with_context(|| format!("Result_{k}"))?;
        let mut sample = Vec::new();
        for (info, f) in sig.outputs.iter().zip(&files) {
            let shown = format!("Result_{k}/{}", f.file);
            let bytes = super::read_member(&result.join(&f.file), &shown, MAX_FILE_BYTES)?;
            total += bytes.len() as u64;
            if total > MAX_REPORT_BYTES {
                bail!("the outputs hold more than {} MiB", MAX_REPORT_BYTES >> 20);
            }
            hash.update(shown.as_bytes());
            hash.update(&bytes);
            let shape = shape_of(info, bytes.len()).with_context(|| shown.clone())?;
            let t = read_raw(&bytes, info, shape).with_context(|| shown.clone())?;
            sample.push((info.name.clone(), t));
        }
        if k == 0 {
            first = files;
        }
        samples.push(sample);
    }
    Ok((samples, first))
}

fn device_beside(dir: &Path, defaults: &ReportDefaults, hash: &mut Sha256) -> Result<DeviceInfo> {
    let p = dir.join("device.json");
    if std::fs::symlink_metadata(&p).is_err() {
        return Ok(DeviceInfo {
            chipset: defaults.chipset.clone(),
            ..Default::default()
        });
    }
    let bytes = super::read_member(&p, "device.json", MAX_TEXT_BYTES)?;
    hash.update(&bytes);
    DeviceInfo::parse(&bytes)
}

/// The name of the input list a report may carry beside `Result_0/`.
pub const INPUT_LIST: &str = "input_list.txt";

/// The model input a `name:=` of an input list means: the name itself or as the converters
/// write it.
fn input_index(sig: &Signature, name: &str) -> Option<usize> {
    sig.inputs.iter().position(|i| {
        i.name == name
            || spelling::spellings(&i.name)
                .iter()
                .any(|(r, _)| r.strip_suffix(".raw") == Some(name))
    })
}

/// The file an input list's path names, looked up by its file name inside the report only: its
/// path and its name within the report.
fn input_file(dir: &Path, path: &str) -> Result<(std::path::PathBuf, String)> {
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    if base.is_empty() || base == "." || base == ".." {
        bail!("{INPUT_LIST}: '{path}' names no file");
    }
    let mut places = vec![(dir.join(base), base.to_string())];
    if super::member_dir(&dir.join("inputs"), "inputs")? {
        places.insert(0, (dir.join("inputs").join(base), format!("inputs/{base}")));
    }
    places
        .into_iter()
        .find(|(p, _)| std::fs::symlink_metadata(p).is_ok())
        .ok_or_else(|| anyhow::anyhow!("{INPUT_LIST}: {base} is not in the report (inputs/ or beside the list)"))
}

/// One line of an input list: the raw file of every model input, in the model's order.
fn input_line(dir: &Path, sig: &Signature, line: &str, n: usize) -> Result<Vec<(std::path::PathBuf, String)>> {
    let mut files: Vec<Option<(std::path::PathBuf, String)>> = vec![None; sig.inputs.len()];
    for (pos, token) in line.split_whitespace().enumerate() {
        let (k, path) = match token.split_once(":=") {
            Some((name, path)) => (
                input_index(sig, name)
                    .ok_or_else(|| anyhow::anyhow!("{INPUT_LIST} line {n}: the model has no input '{name}'"))?,
                path,
            ),
            None => (pos, token),
        };
        let slot = files.get_mut(k).ok_or_else(|| {
            anyhow::anyhow!(
                "{INPUT_LIST} line {n}: more files than the model's {} inputs",
                sig.inputs.len()
            )
        })?;
        if slot.replace(input_file(dir, path)?).is_some() {
            bail!("{INPUT_LIST} line {n}: input {} is given twice", sig.inputs[k].name);
        }
    }
    files
        .into_iter()
        .enumerate()
        .map(|(k, f)| {
            f.ok_or_else(|| anyhow::anyhow!("{INPUT_LIST} line {n}: no file for input {}", sig.inputs[k].name))
        })
        .collect()
}

/// The inputs of the report's input list, one sample per line, when it has one.
fn read_input_list(
    dir: &Path,
    sig: &Signature,
    hints: &std::collections::HashMap<String, Vec<usize>>,
    hash: &mut Sha256,
) -> Result<Option<super::Samples>> {
    let list = dir.join(INPUT_LIST);
    if std::fs::symlink_metadata(&list).is_err() {
        return Ok(None);
    }
    let text = String::from_utf8(super::read_member(&list, INPUT_LIST, MAX_TEXT_BYTES)?)
        .map_err(|_| anyhow::anyhow!("{INPUT_LIST} is not UTF-8 text"))?;
    hash.update(INPUT_LIST.as_bytes());
    hash.update(text.as_bytes());
    let mut total = 0u64;
    let mut samples = Vec::new();
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    for (i, line) in lines {
        if samples.len() >= MAX_RESULTS {
            bail!("{INPUT_LIST}: more than {MAX_RESULTS} inferences");
        }
        let mut sample = Vec::new();
        for (info, (file, shown)) in sig.inputs.iter().zip(input_line(dir, sig, line, i + 1)?) {
            let bytes = super::read_member(&file, &shown, MAX_FILE_BYTES)?;
            total += bytes.len() as u64;
            if total > MAX_REPORT_BYTES {
                bail!("{INPUT_LIST}: the inputs are larger than the report limits");
            }
            hash.update(&bytes);
            let at = || format!("{INPUT_LIST} line {}: {shown}", i + 1);
            let shape = match hints.get(&info.name) {
                Some(h) if fits(h, info, bytes.len()) => h.clone(),
                _ => shape_of(info, bytes.len()).with_context(at)?,
            };
            let t = read_raw(&bytes, info, shape).with_context(at)?;
            sample.push((info.name.clone(), t));
        }
        samples.push(sample);
    }
    Ok(Some(samples))
}

/// Reads a `qnn-net-run` output directory.
pub fn read_dir(dir: &Path, sig: &Signature, defaults: &ReportDefaults) -> Result<DeviceReport> {
    let fail = |e: anyhow::Error| bad_input(format!("device report {}: {e:#}", dir.display()));
    let mut hash = Sha256::new();
    let (outputs, output_files) = read_results(dir, sig, &mut hash).map_err(fail)?;
    let device = device_beside(dir, defaults, &mut hash).map_err(fail)?;
    let inputs = read_input_list(dir, sig, &defaults.input_shapes, &mut hash).map_err(fail)?;
    if let Some(i) = &inputs {
        if i.len() != outputs.len() {
            return Err(fail(anyhow::anyhow!(
                "{INPUT_LIST} lists {} inferences and there are {} Result_N directories",
                i.len(),
                outputs.len()
            )));
        }
    }
    Ok(DeviceReport {
        path: dir.to_path_buf(),
        format: ReportFormat::QnnNetRun,
        content_sha256: crate::foundation::hash::hex(&hash.finalize()),
        device,
        outputs,
        inputs,
        logs: Vec::new(),
        output_files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_codes_read_as_qnn_net_run_writes_them() {
        let info = TensorInfo {
            name: "y".into(),
            dtype: DType::Uint8,
            dims: Some(vec![Dim::Fixed(2)]),
        };
        let floats: Vec<u8> = [3.0f32, 255.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = read_raw(&floats, &info, vec![2]).unwrap();
        assert_eq!(t.data, TensorData::Uint8(vec![3, 255]));
        assert_eq!(
            read_raw(&[7, 9], &info, vec![2]).unwrap().data,
            TensorData::Uint8(vec![7, 9])
        );
        let bad: Vec<u8> = [3.5f32, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(read_raw(&bad, &info, vec![2]).is_err());
    }
}
