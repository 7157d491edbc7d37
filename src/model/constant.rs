//! Reading the values of small constant tensors (quantization scales and zero points) from
//! initializers or `Constant` nodes.

use std::collections::HashMap;

use super::pb::{GraphProto, TensorProto};

/// Values of a constant tensor as doubles, with its ONNX data type.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstValues {
    pub data_type: i32,
    pub dims: Vec<i64>,
    pub values: Vec<f64>,
}

/// Decodes the values of a tensor stored inside the model (external data is not read).
pub fn tensor_values(t: &TensorProto) -> Option<ConstValues> {
    let data_type = t.data_type.unwrap_or(0);
    let dims: Vec<usize> = t.dims.iter().map(|&d| d.max(0) as usize).collect();
    let count = crate::tensor::checked_len(&dims)?;
    if t.data_location == Some(1) {
        return None;
    }
    let raw = t.raw_data.as_deref().filter(|r| !r.is_empty());
    let values: Vec<f64> = match (data_type, raw) {
        (1, Some(r)) => r
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        (1, None) => t.float_data.iter().map(|&v| v as f64).collect(),
        (11, Some(r)) => r
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        (11, None) => t.double_data.clone(),
        (10, Some(r)) => r
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
            .collect(),
        (10, None) => t
            .int32_data
            .iter()
            .map(|&v| half::f16::from_bits(v as u16).to_f64())
            .collect(),
        (2, Some(r)) => r.iter().map(|&v| v as f64).collect(),
        (3, Some(r)) => r.iter().map(|&v| v as i8 as f64).collect(),
        (4, Some(r)) => r
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as f64)
            .collect(),
        (5, Some(r)) => r
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]) as f64)
            .collect(),
        (6, Some(r)) => r
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        (7, Some(r)) => r
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
            .collect(),
        (21, Some(r)) => r
            .iter()
            .flat_map(|&b| [(b & 0x0f) as f64, (b >> 4) as f64])
            .take(count)
            .collect(),
        (22, Some(r)) => r
            .iter()
            .flat_map(|&b| [(((b & 0x0f) << 4) as i8 >> 4) as f64, ((b as i8) >> 4) as f64])
            .take(count)
            .collect(),
        (2..=6, None) | (21 | 22, None) => {
            let v: Vec<f64> = t.int32_data.iter().map(|&v| v as f64).collect();
            if matches!(data_type, 21 | 22) {
                // Packed two per int32 element in the low byte.
                v.iter()
                    .flat_map(|&x| {
                        let b = x as i64 as u8;
                        if data_type == 21 {
                            [(b & 0x0f) as f64, (b >> 4) as f64]
                        } else {
                            [(((b & 0x0f) << 4) as i8 >> 4) as f64, ((b as i8) >> 4) as f64]
                        }
                    })
                    .take(count)
                    .collect()
            } else {
                v
            }
        }
        (7, None) => t.int64_data.iter().map(|&v| v as f64).collect(),
        _ => return None,
    };
    (values.len() == count).then(|| ConstValues {
        data_type,
        dims: t.dims.clone(),
        values,
    })
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
