//! A `qnn-net-run` (or `snpe-net-run`) output directory: `Result_<N>/` per inference, each with
//! one `<output>.raw` per model output (characters other than letters, digits and `_` written as
//! `_`), float32 by default or the output's own type with `--use_native_output_files`. The device
//! is a `device.json` beside `Result_0/`, else `--chipset`. The inputs are the golden run's or
//! `--inputs` (the input list names paths on the device).

use std::path::Path;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::{DeviceInfo, DeviceReport, ReportDefaults, ReportFormat, MAX_FILE_BYTES, MAX_REPORT_BYTES, MAX_TEXT_BYTES};
use crate::error::bad_input;
use crate::model::{Dim, Signature, TensorInfo};
use crate::tensor::{DType, Tensor, TensorData};

/// The most inferences one directory may hold.
const MAX_RESULTS: usize = 4096;

/// The file names `qnn-net-run` may give an output, most likely first. The converters replace
/// each character other than letters, digits and `_` by `_` and prefix `_` to a name that starts
/// with a digit (`/conv1/Conv_output_0` -> `_conv1_Conv_output_0`, `127` -> `_127`); some tools
/// collapse runs of such characters into one `_` (`\W+`).
pub fn raw_names(output: &str) -> Vec<String> {
    let per_char: String = output
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect();
    let mut collapsed = String::new();
    let mut in_run = false;
    for c in output.chars() {
        let word = c.is_ascii_alphanumeric() || c == '_';
        if word {
            collapsed.push(c);
        } else if !in_run {
            collapsed.push('_');
        }
        in_run = !word;
    }
    let lead = |s: &str| {
        if s.starts_with(|c: char| c.is_ascii_digit()) {
            format!("_{s}")
        } else {
            s.to_string()
        }
    };
    let mut names = vec![lead(&per_char), lead(&collapsed), per_char];
    names.dedup();
    names.into_iter().map(|n| format!("{n}.raw")).collect()
}

/// `Result_0`, `Result_1`, ... in order; a gap ends nothing but is refused.
fn result_dirs(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut n = 0;
    let mut out = Vec::new();
    while dir.join(format!("Result_{n}")).is_dir() {
        if n >= MAX_RESULTS {
            bail!("more than {MAX_RESULTS} Result_N directories");
        }
        out.push(dir.join(format!("Result_{n}")));
        n += 1;
    }
    if out.is_empty() {
        bail!("no Result_0/ (not a qnn-net-run output directory)");
    }
    Ok(out)
}

fn shape_of(info: &TensorInfo) -> Result<Vec<usize>> {
    match &info.dims {
        Some(d) => d
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Dynamic(_) => bail!(
                    "output '{}' has a dynamic dimension: raw files carry no shape",
                    info.name
                ),
            })
            .collect(),
        None => bail!("output '{}' has no declared shape: raw files carry no shape", info.name),
    }
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
        bail!(
            "{} bytes: neither {n} float32 values nor {n} {} values",
            bytes.len(),
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

fn read_results(dir: &Path, sig: &Signature, hash: &mut Sha256) -> Result<Vec<Vec<(String, Tensor)>>> {
    let mut total = 0u64;
    let mut samples = Vec::new();
    for (k, result) in result_dirs(dir)?.iter().enumerate() {
        let mut sample = Vec::new();
        for info in &sig.outputs {
            let names = raw_names(&info.name);
            let Some(file_name) = names.iter().find(|n| std::fs::symlink_metadata(result.join(n)).is_ok()) else {
                bail!("Result_{k}: no {}", names[0]);
            };
            let file = result.join(file_name);
            let meta = std::fs::symlink_metadata(&file)?;
            if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
                bail!(
                    "Result_{k}/{file_name}: not a regular file within {} MiB",
                    MAX_FILE_BYTES >> 20
                );
            }
            total += meta.len();
            if total > MAX_REPORT_BYTES {
                bail!("the outputs hold more than {} MiB", MAX_REPORT_BYTES >> 20);
            }
            let bytes = std::fs::read(&file)?;
            hash.update(format!("Result_{k}/{file_name}").as_bytes());
            hash.update(&bytes);
            let t = read_raw(&bytes, info, shape_of(info)?).with_context(|| format!("Result_{k}/{file_name}"))?;
            sample.push((info.name.clone(), t));
        }
        samples.push(sample);
    }
    Ok(samples)
}

fn device_beside(dir: &Path, defaults: &ReportDefaults, hash: &mut Sha256) -> Result<DeviceInfo> {
    let p = dir.join("device.json");
    if std::fs::symlink_metadata(&p).is_err() {
        return Ok(DeviceInfo {
            chipset: defaults.chipset.clone(),
            ..Default::default()
        });
    }
    crate::userfile::regular_file(&p).map_err(|e| anyhow::anyhow!("device.json: {e}"))?;
    if std::fs::metadata(&p)?.len() > MAX_TEXT_BYTES {
        bail!("device.json is too large");
    }
    let bytes = std::fs::read(&p)?;
    hash.update(&bytes);
    DeviceInfo::parse(&bytes)
}

/// Reads a `qnn-net-run` output directory.
pub fn read_dir(dir: &Path, sig: &Signature, defaults: &ReportDefaults) -> Result<DeviceReport> {
    let fail = |e: anyhow::Error| bad_input(format!("device report {}: {e:#}", dir.display()));
    let mut hash = Sha256::new();
    let outputs = read_results(dir, sig, &mut hash).map_err(fail)?;
    let device = device_beside(dir, defaults, &mut hash).map_err(fail)?;
    Ok(DeviceReport {
        path: dir.to_path_buf(),
        format: ReportFormat::QnnNetRun,
        content_sha256: crate::hash::hex(&hash.finalize()),
        device,
        outputs,
        inputs: None,
        logs: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_float_codes_read_as_qnn_net_run_writes_them() {
        assert_eq!(
            raw_names("save_infer_model/scale_0.tmp_1")[0],
            "save_infer_model_scale_0_tmp_1.raw"
        );
        assert_eq!(raw_names("/conv1/Conv_output_0")[0], "_conv1_Conv_output_0.raw");
        assert_eq!(raw_names("onnx::Conv_497")[0], "onnx__Conv_497.raw");
        assert!(raw_names("onnx::Conv_497").contains(&"onnx_Conv_497.raw".to_string()));
        assert_eq!(raw_names("127")[0], "_127.raw");
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
