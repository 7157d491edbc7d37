//! The standalone bundle: the window cut out as an ONNX model holding only its own nodes and
//! weights (external data brought inline, opset and domains as in the source), its weights
//! optionally replaced by seeded random values, and the files a vendor runs without npu-audit
//! (`run.py`, `requirements.txt`, `bundle.json`, `README.md`), written as a directory or a zip.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};

use super::graph::Layered;
use crate::analyses::layers::tap::{drop_unused_initializers, Unit};
use crate::data::inputs::prng::SplitMix64;
use crate::data::model::constant::{external_bytes, tensor_values};
use crate::data::model::pb::{ModelProto, TensorProto};
use crate::data::model::slice::{value_info, MeasuredType};
use crate::data::tensor::DType;

/// The script the bundle carries (it reads `bundle.json` beside it).
pub const RUN_PY: &str = include_str!("run.py");

/// The window as a model of its own: its nodes in the source's order, its inputs typed as fed,
/// its outputs typed as measured, only the initializers it reads (inline).
pub fn standalone(
    layered: &Layered,
    unit: &Unit,
    types: &HashMap<String, MeasuredType>,
    model_dir: &Path,
) -> Result<ModelProto> {
    let mut out = layered.proto.clone();
    let source = layered.proto.graph.as_ref().context("the model has no graph")?;
    let g = out.graph.as_mut().context("the model has no graph")?;
    g.node = unit.nodes.iter().map(|&n| source.node[n].clone()).collect();
    g.input = unit
        .inputs
        .iter()
        .map(|t| {
            let ty = types
                .get(t)
                .ok_or_else(|| anyhow!("the window's input {t} has no known type"))?;
            Ok(value_info(t, Some(ty)))
        })
        .collect::<Result<_>>()?;
    g.output = unit.outputs.iter().map(|t| value_info(t, types.get(t))).collect();
    g.value_info.clear();
    g.name = Some("npu_audit_repro".into());
    g.doc_string = None;
    drop_unused_initializers(g);
    for t in &mut g.initializer {
        inline(t, model_dir)?;
    }
    out.metadata_props.clear();
    out.doc_string = None;
    Ok(out)
}

/// Brings a tensor kept in an external data file into the model.
fn inline(t: &mut TensorProto, dir: &Path) -> Result<()> {
    if let Some(raw) = external_bytes(t, dir, u64::MAX)? {
        t.raw_data = Some(raw);
        t.data_location = None;
        t.external_data.clear();
    }
    Ok(())
}

/// Whether an initializer is a weight (what `--scrub-weights` replaces): the data a
/// DequantizeLinear or QuantizeLinear reads (codes, or float weights quantized in the graph), or
/// a float tensor of more than one element a computing node reads. Scales, zero points, shapes
/// and scalars stay.
fn weights(proto: &ModelProto) -> Vec<String> {
    let Some(g) = proto.graph.as_ref() else {
        return Vec::new();
    };
    let mut names: Vec<String> = Vec::new();
    for n in &g.node {
        let qdq = matches!(n.op_type(), "DequantizeLinear" | "QuantizeLinear");
        for (i, t) in n.input.iter().enumerate() {
            let Some(init) = g.initializer.iter().find(|x| x.name.as_deref() == Some(t)) else {
                continue;
            };
            let float = DType::from_onnx(init.data_type.unwrap_or(0)).is_some_and(DType::is_float);
            let elements: i64 = init.dims.iter().product();
            let weight = if qdq { i == 0 } else { float && elements > 1 };
            if weight && elements > 1 && !names.contains(t) {
                names.push(t.clone());
            }
        }
    }
    names
}

/// The model with every weight replaced by seeded random values of the same shape and type:
/// integer codes uniform over the original's range, floats normal with the original's mean and
/// deviation. Returns the names replaced.
pub fn scrub(proto: &ModelProto, seed: u64) -> (ModelProto, Vec<String>) {
    let mut out = proto.clone();
    let names = weights(proto);
    let mut replaced = Vec::new();
    if let Some(g) = out.graph.as_mut() {
        for (k, t) in g.initializer.iter_mut().enumerate() {
            let Some(name) = t.name.clone().filter(|n| names.contains(n)) else {
                continue;
            };
            let mut rng = SplitMix64::for_input(seed, 0, k as u64);
            if let Some(raw) = random_like(t, &mut rng) {
                t.raw_data = Some(raw);
                t.float_data.clear();
                t.int32_data.clear();
                t.int64_data.clear();
                t.double_data.clear();
                replaced.push(name);
            }
        }
    }
    (out, replaced)
}

/// Random values shaped and typed like `t`, as raw little-endian bytes (`None`: a type this
/// does not replace).
fn random_like(t: &TensorProto, rng: &mut SplitMix64) -> Option<Vec<u8>> {
    let v = tensor_values(t)?;
    let n = v.values.len() as f64;
    let lo = v.values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = v.values.iter().sum::<f64>() / n;
    let std = (v.values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
    let count = v.values.len();
    let mut int = || rng.uniform(lo, hi).round();
    Some(match DType::from_onnx(v.data_type)? {
        DType::Uint8 => (0..count).map(|_| int() as u8).collect(),
        DType::Int8 => (0..count).map(|_| int() as i8 as u8).collect(),
        DType::Uint16 => (0..count).flat_map(|_| (int() as u16).to_le_bytes()).collect(),
        DType::Int16 => (0..count).flat_map(|_| (int() as i16).to_le_bytes()).collect(),
        DType::Int32 => (0..count).flat_map(|_| (int() as i32).to_le_bytes()).collect(),
        DType::Float32 => (0..count)
            .flat_map(|_| (rng.normal(mean, std) as f32).to_le_bytes())
            .collect(),
        DType::Float16 => (0..count)
            .flat_map(|_| half::f16::from_f64(rng.normal(mean, std)).to_bits().to_le_bytes())
            .collect(),
        _ => return None,
    })
}

/// The bundle's files as a zip archive (deflated, members in the order given).
pub fn zip_bytes(files: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o644);
    for (name, bytes) in files {
        zip.start_file(name.as_str(), options)?;
        zip.write_all(bytes)?;
    }
    Ok(zip.finish()?.into_inner())
}

/// A target id as a file name (`qnn:sm8650@2.5.0` -> `qnn_sm8650@2.5.0`).
pub fn file_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "@.+-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::build::GraphBuilder;
    use crate::data::tensor::{Tensor, TensorData};

    #[test]
    fn scrubbing_replaces_weights_and_keeps_quantization_parameters() {
        let mut b = GraphBuilder::new("g");
        b.input("x", 1, &[1, 4]);
        b.constant(
            "w_q",
            &Tensor::new(vec![4], TensorData::Int8(vec![-3, 0, 5, 7])).unwrap(),
        );
        b.constant(
            "w_scale",
            &Tensor::new(vec![], TensorData::Float32(vec![0.25])).unwrap(),
        );
        b.constant("w_zp", &Tensor::new(vec![], TensorData::Int8(vec![0])).unwrap());
        b.node("DequantizeLinear", "dq", &["w_q", "w_scale", "w_zp"], &["w"], &[]);
        b.node("Mul", "mul", &["x", "w"], &["y"], &[]);
        b.output("y");
        let model = b.finish();
        let (scrubbed, replaced) = scrub(&model, 7);
        assert_eq!(replaced, vec!["w_q"]);
        let g = scrubbed.graph.unwrap();
        let get =
            |n: &str| tensor_values(g.initializer.iter().find(|t| t.name.as_deref() == Some(n)).unwrap()).unwrap();
        let w = get("w_q");
        assert_eq!(w.dims, vec![4]);
        assert!(w.values.iter().all(|&v| (-3.0..=7.0).contains(&v)), "{:?}", w.values);
        assert_ne!(w.values, vec![-3.0, 0.0, 5.0, 7.0]);
        assert_eq!(get("w_scale").values, vec![0.25]);
        // The same seed gives the same weights.
        assert_eq!(scrub(&model, 7).0, scrub(&model, 7).0);
        assert_ne!(scrub(&model, 8).0, scrub(&model, 7).0);
    }

    #[test]
    fn target_ids_become_portable_file_names() {
        assert_eq!(file_name("qnn:sm8650@2.5.0"), "qnn_sm8650@2.5.0");
        assert_eq!(file_name("cpu:noopt"), "cpu_noopt");
    }
}
