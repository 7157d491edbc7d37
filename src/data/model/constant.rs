//! Reading the values of small constant tensors (quantization scales and zero points) from
//! initializers or `Constant` nodes.

use std::collections::HashMap;

use super::pb::{GraphProto, TensorProto};
use crate::data::tensor::{DType, TensorData};

/// Values of a constant tensor as doubles, with its ONNX data type.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstValues {
    pub data_type: i32,
    pub dims: Vec<i64>,
    pub values: Vec<f64>,
}

/// Decodes the values of a tensor stored inside the model (external data is not read).
pub fn tensor_values(t: &TensorProto) -> Option<ConstValues> {
    const UINT4: i32 = 21;
    const INT4: i32 = 22;
    let data_type = t.data_type.unwrap_or(0);
    let dims: Vec<usize> = t.dims.iter().map(|&d| d.max(0) as usize).collect();
    let count = crate::data::tensor::checked_len(&dims)?;
    if t.data_location == Some(1) {
        return None;
    }
    let raw = t.raw_data.as_deref().filter(|r| !r.is_empty());
    let values: Vec<f64> = if matches!(data_type, UINT4 | INT4) {
        // Two 4-bit values per byte, low nibble first; without raw data, one byte per int32.
        let bytes: Vec<u8> = raw
            .map(<[u8]>::to_vec)
            .unwrap_or_else(|| t.int32_data.iter().map(|&v| v as u8).collect());
        let nibble = |n: u8| {
            if data_type == INT4 {
                ((n << 4) as i8 >> 4) as f64
            } else {
                n as f64
            }
        };
        bytes
            .iter()
            .flat_map(|&b| [nibble(b & 0x0f), nibble(b >> 4)])
            .take(count)
            .collect()
    } else {
        let dtype = DType::from_onnx(data_type)?;
        match (raw, dtype) {
            (Some(r), _) => {
                let data = TensorData::from_bytes(dtype, r, false);
                (0..data.len()).map(|i| data.get_f64(i)).collect()
            }
            (None, DType::Float32) => t.float_data.iter().map(|&v| v as f64).collect(),
            (None, DType::Float64) => t.double_data.clone(),
            (None, DType::Float16) => t
                .int32_data
                .iter()
                .map(|&v| half::f16::from_bits(v as u16).to_f64())
                .collect(),
            (None, DType::Int64) => t.int64_data.iter().map(|&v| v as f64).collect(),
            (None, DType::Uint32 | DType::Uint64) => t.uint64_data.iter().map(|&v| v as f64).collect(),
            (None, _) => t.int32_data.iter().map(|&v| v as f64).collect(),
        }
    };
    (values.len() == count).then(|| ConstValues {
        data_type,
        dims: t.dims.clone(),
        values,
    })
}

/// The bytes of a tensor kept in an external data file (`location`, `offset`, `length` relative
/// to the model's directory `dir`): `None` when it is not external or holds more than `limit`
/// bytes; an error when the entry or the file is unusable.
pub fn external_bytes(t: &TensorProto, dir: &std::path::Path, limit: u64) -> anyhow::Result<Option<Vec<u8>>> {
    use anyhow::Context as _;
    use std::io::{Read, Seek, SeekFrom};
    if t.data_location != Some(1) {
        return Ok(None);
    }
    let field = |k: &str| {
        t.external_data
            .iter()
            .find(|e| e.key.as_deref() == Some(k))
            .and_then(|e| e.value.clone())
    };
    let name = t.name.as_deref().unwrap_or_default();
    let location = field("location").with_context(|| format!("tensor {name}: external data without a location"))?;
    let offset: u64 = field("offset")
        .map_or(Ok(0), |v| v.parse())
        .context("external data offset")?;
    let mut file = std::fs::File::open(dir.join(&location))
        .with_context(|| format!("tensor {name}: external data file {location}"))?;
    let length: u64 = match field("length") {
        Some(v) => v.parse().context("external data length")?,
        None => file
            .metadata()?
            .len()
            .checked_sub(offset)
            .with_context(|| format!("tensor {name}: external data file {location} ends before its offset"))?,
    };
    if length > limit {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut raw = vec![0u8; usize::try_from(length)?];
    file.read_exact(&mut raw)
        .with_context(|| format!("tensor {name}: external data file {location} is shorter than it says"))?;
    Ok(Some(raw))
}

/// Decodes a small tensor stored in an external data file; `None` when it is not external,
/// missing, or over `limit` bytes (only scales and zero points are read this way).
pub fn external_values(t: &TensorProto, dir: &std::path::Path, limit: u64) -> Option<ConstValues> {
    let raw = external_bytes(t, dir, limit).ok()??;
    let inline = TensorProto {
        raw_data: Some(raw),
        data_location: None,
        external_data: Vec::new(),
        ..t.clone()
    };
    tensor_values(&inline)
}

/// Constant tensors of a graph by name: initializers and `Constant` nodes with a `value` tensor.
pub fn constants(graph: &GraphProto) -> HashMap<String, &TensorProto> {
    let mut out: HashMap<String, &TensorProto> = HashMap::new();
    for t in &graph.initializer {
        if let Some(n) = &t.name {
            out.insert(n.clone(), t);
        }
    }
    for node in graph.node.iter().filter(|n| n.op_type.as_deref() == Some("Constant")) {
        let (Some(output), Some(value)) = (
            node.output.first(),
            node.attribute.iter().find(|a| a.name.as_deref() == Some("value")),
        ) else {
            continue;
        };
        if let Some(t) = &value.t {
            out.insert(output.clone(), t);
        }
    }
    out
}

/// The quantization step of each named graph output: 1 for an integer output (its codes), the
/// scale of the `DequantizeLinear` that produces a float output (directly or through ops that
/// only move values: Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose) when that scale
/// is one constant (per-tensor), else `None`. Differences between targets are counted in these steps.
pub fn output_steps(graph: &GraphProto, outputs: &[crate::data::model::TensorInfo]) -> Vec<Option<f64>> {
    let consts = constants(graph);
    outputs
        .iter()
        .map(|o| {
            if !o.dtype.is_float() && o.dtype.int_range().is_some() {
                return Some(1.0);
            }
            let mut producer = graph.node.iter().find(|n| n.output.first() == Some(&o.name))?;
            // Ops that move values without changing them keep the step of what they move.
            while matches!(
                producer.op_type.as_deref(),
                Some("Identity" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Transpose")
            ) {
                let input = producer.input.first()?;
                producer = graph.node.iter().find(|n| n.output.first() == Some(input))?;
            }
            if producer.op_type.as_deref() != Some("DequantizeLinear") {
                return None;
            }
            let scale = tensor_values(consts.get(producer.input.get(1)?)?)?;
            match scale.values.as_slice() {
                [s] if *s > 0.0 => Some(*s),
                _ => None,
            }
        })
        .collect()
}

/// The inclusive integer range of a quantized type.
pub fn quant_range(data_type: i32) -> Option<(f64, f64)> {
    Some(match data_type {
        2 => (0.0, 255.0),
        3 => (-128.0, 127.0),
        4 => (0.0, 65535.0),
        5 => (-32768.0, 32767.0),
        21 => (0.0, 15.0),
        22 => (-8.0, 7.0),
        6 => (i32::MIN as f64, i32::MAX as f64),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_typed_storage() {
        let raw = TensorProto {
            data_type: Some(1),
            dims: vec![2],
            raw_data: Some([0.5f32.to_le_bytes(), 2f32.to_le_bytes()].concat()),
            ..Default::default()
        };
        assert_eq!(tensor_values(&raw).unwrap().values, vec![0.5, 2.0]);
        let typed = TensorProto {
            data_type: Some(2),
            dims: vec![],
            int32_data: vec![128],
            ..Default::default()
        };
        assert_eq!(tensor_values(&typed).unwrap().values, vec![128.0]);
        let int4 = TensorProto {
            data_type: Some(22),
            dims: vec![3],
            raw_data: Some(vec![0x8f, 0x07]),
            ..Default::default()
        };
        assert_eq!(tensor_values(&int4).unwrap().values, vec![-1.0, -8.0, 7.0]);
    }
}
