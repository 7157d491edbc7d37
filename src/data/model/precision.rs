//! Per-activation precision rewrites of a QDQ graph, the remedies `matrix` proves by re-audit:
//! one activation's 8-bit QuantizeLinear/DequantizeLinear pair widened to 16 bits over the same
//! real range (so no calibration data is needed), or removed so that the layer runs in float.

use std::collections::HashSet;

use super::constant::{constants, tensor_values};
use super::pb::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};

const UINT8: i32 = 2;
const INT8: i32 = 3;
const UINT16: i32 = 4;
const INT16: i32 = 5;
/// The code types a widening starts from, and those a pair left in float may have.
const EIGHT_BIT: &[i32] = &[UINT8, INT8];
const ANY_CODES: &[i32] = &[UINT8, INT8, UINT16, INT16];
/// `ai.onnx` QuantizeLinear and DequantizeLinear accept 16-bit codes from this opset on; before
/// it, ONNX Runtime's own `com.microsoft` versions of the two ops do.
const FIRST_OPSET_WITH_16_BIT_QDQ: i64 = 21;

/// Why an activation cannot be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrecisionError {
    #[error("no QuantizeLinear reads {0}")]
    NotQuantized(String),
    #[error("{tensor}: its quantization is not one constant scale and zero point")]
    NotPerTensor { tensor: String },
    #[error("{tensor}: its codes are {bits}, which this rewrite does not change")]
    UnsupportedCodes { tensor: String, bits: String },
    #[error("{tensor}: its codes {codes} are read by {consumer}, not only by DequantizeLinear")]
    OtherConsumer {
        tensor: String,
        codes: String,
        consumer: String,
    },
    #[error("{tensor}: its DequantizeLinear's output {output} is a graph output")]
    GraphOutput { tensor: String, output: String },
}

/// One 8-bit pair widened to 16 bits: the parameters before and after, for the report and for
/// ONNX Runtime's quantizer overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Widened {
    /// The float activation (the QuantizeLinear's input).
    pub tensor: String,
    pub scale_8: f32,
    pub zero_point_8: i64,
    pub scale_16: f32,
    pub zero_point_16: i64,
    /// `uint16` or `int16`.
    pub code_type: &'static str,
    /// The QuantizeLinear and DequantizeLinear nodes rewritten.
    pub nodes: Vec<String>,
}

/// One pair removed: the activation now flows in float from its producer to its consumers.
#[derive(Debug, Clone, PartialEq)]
pub struct Floated {
    pub tensor: String,
    /// The QuantizeLinear and DequantizeLinear nodes removed.
    pub removed: Vec<String>,
    /// The nodes that now read the float tensor directly.
    pub consumers: Vec<String>,
}

/// The QuantizeLinear reading `tensor`, its per-tensor scale, zero point and code type (one of
/// `code_types`), and the DequantizeLinear nodes reading its codes (the only readers allowed).
struct Pair {
    /// The old scale and zero point's names (dropped once nothing reads them).
    params: Vec<String>,
    q: usize,
    dqs: Vec<usize>,
    scale: f32,
    zero_point: i64,
    code_type: i32,
}

fn find_pair(graph: &GraphProto, tensor: &str, code_types: &[i32]) -> Result<Pair, PrecisionError> {
    let q = graph
        .node
        .iter()
        .position(|n| {
            n.op_type.as_deref() == Some("QuantizeLinear") && n.input.first().map(String::as_str) == Some(tensor)
        })
        .ok_or_else(|| PrecisionError::NotQuantized(tensor.to_string()))?;
    let node = &graph.node[q];
    let not_per_tensor = || PrecisionError::NotPerTensor {
        tensor: tensor.to_string(),
    };
    let consts = constants(graph);
    let value = |i: usize| {
        let name = node.input.get(i).filter(|s| !s.is_empty())?;
        let v = tensor_values(consts.get(name)?)?;
        (v.values.len() == 1).then(|| (v.values[0], v.data_type))
    };
    let (scale, _) = value(1).ok_or_else(not_per_tensor)?;
    let (zero_point, code_type) = value(2).ok_or_else(not_per_tensor)?;
    if !code_types.contains(&code_type) {
        let bits = crate::data::tensor::DType::from_onnx(code_type)
            .map_or("not integers".to_string(), |d| d.name().to_string());
        return Err(PrecisionError::UnsupportedCodes {
            tensor: tensor.to_string(),
            bits,
        });
    }
    let codes = node.output.first().cloned().unwrap_or_default();
    if graph.output.iter().any(|o| o.name.as_deref() == Some(codes.as_str())) {
        return Err(PrecisionError::GraphOutput {
            tensor: tensor.to_string(),
            output: codes,
        });
    }
    let mut dqs = Vec::new();
    for (i, n) in graph.node.iter().enumerate() {
        if !n.input.contains(&codes) {
            continue;
        }
        if n.op_type.as_deref() != Some("DequantizeLinear") || n.input.first() != Some(&codes) {
            return Err(PrecisionError::OtherConsumer {
                tensor: tensor.to_string(),
                codes,
                consumer: node_label(n),
            });
        }
        dqs.push(i);
    }
    let params = node.input.iter().skip(1).filter(|s| !s.is_empty()).cloned().collect();
    Ok(Pair {
        params,
        q,
        dqs,
        scale: scale as f32,
        zero_point: zero_point as i64,
        code_type,
    })
}

fn node_label(n: &NodeProto) -> String {
    format!(
        "{} ({})",
        n.name.as_deref().unwrap_or(""),
        n.op_type.as_deref().unwrap_or("")
    )
}

/// The 16-bit scale and zero point that cover exactly the real range of an 8-bit pair:
/// `[s·(qmin−z), s·(qmax−z)]`. The 16-bit range has 257 times the 8-bit one's steps
/// (65535 = 255·257), so the scale is s/257 and every 8-bit code q lands on the 16-bit code
/// 257·q (+128 between the signed types' offsets): the old grid is a subset of the new one.
pub fn widened_params(scale: f32, zero_point: i64, signed: bool) -> (f32, i64) {
    let scale_16 = (scale as f64 / 257.0) as f32;
    let zero_point_16 = if signed {
        257 * zero_point + 128
    } else {
        257 * zero_point
    };
    (scale_16, zero_point_16)
}

/// A name not yet used by any tensor of the graph.
fn fresh_name(graph: &GraphProto, base: &str) -> String {
    let used: HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .chain(graph.node.iter().flat_map(|n| n.output.iter().map(String::as_str)))
        .chain(graph.input.iter().filter_map(|i| i.name.as_deref()))
        .collect();
    (0..)
        .map(|k| {
            if k == 0 {
                base.to_string()
            } else {
                format!("{base}_{k}")
            }
        })
        .find(|n| !used.contains(n.as_str()))
        .unwrap_or_else(|| base.to_string())
}

fn scalar(name: &str, data_type: i32, raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.to_string()),
        data_type: Some(data_type),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// Widens the 8-bit QuantizeLinear/DequantizeLinear pair of the activation `tensor` to 16 bits
/// (uint8 to uint16, int8 to int16) over the same real range. Below opset 21 the pair becomes
/// ONNX Runtime's `com.microsoft` QuantizeLinear/DequantizeLinear, as its quantizer writes
/// 16-bit activations for such models.
pub fn widen_to_16_bits(model: &mut ModelProto, tensor: &str) -> Result<Widened, PrecisionError> {
    let opset = super::load::default_opset(model);
    let Some(graph) = model.graph.as_mut() else {
        return Err(PrecisionError::NotQuantized(tensor.to_string()));
    };
    let pair = find_pair(graph, tensor, EIGHT_BIT)?;
    let signed = pair.code_type == INT8;
    let (scale_16, zero_point_16) = widened_params(pair.scale, pair.zero_point, signed);
    let scale_name = fresh_name(graph, &format!("{tensor}_scale_16bit"));
    let zp_name = fresh_name(graph, &format!("{tensor}_zero_point_16bit"));
    let (code_type, zp_raw) = if signed {
        (INT16, (zero_point_16 as i16).to_le_bytes().to_vec())
    } else {
        (UINT16, (zero_point_16 as u16).to_le_bytes().to_vec())
    };
    graph
        .initializer
        .push(scalar(&scale_name, 1, scale_16.to_le_bytes().to_vec()));
    graph.initializer.push(scalar(&zp_name, code_type, zp_raw));
    let contrib = opset < FIRST_OPSET_WITH_16_BIT_QDQ;
    let mut nodes = Vec::new();
    for i in std::iter::once(pair.q).chain(pair.dqs.iter().copied()) {
        let n = &mut graph.node[i];
        n.input.resize(3, String::new());
        n.input[1] = scale_name.clone();
        n.input[2] = zp_name.clone();
        if contrib {
            n.domain = Some("com.microsoft".into());
        }
        nodes.push(n.name.clone().unwrap_or_default());
    }
    drop_unread_initializers(graph, &pair.params, &[]);
    let codes = graph.node[pair.q].output.first().cloned().unwrap_or_default();
    for vi in graph
        .value_info
        .iter_mut()
        .filter(|v| v.name.as_deref() == Some(codes.as_str()))
    {
        set_elem_type(vi, code_type);
    }
    if contrib
        && !model
            .opset_import
            .iter()
            .any(|o| o.domain.as_deref() == Some("com.microsoft"))
    {
        model.opset_import.push(OperatorSetIdProto {
            domain: Some("com.microsoft".into()),
            version: Some(1),
        });
    }
    Ok(Widened {
        tensor: tensor.to_string(),
        scale_8: pair.scale,
        zero_point_8: pair.zero_point,
        scale_16,
        zero_point_16,
        code_type: if signed { "int16" } else { "uint16" },
        nodes,
    })
}

fn set_elem_type(vi: &mut super::pb::ValueInfoProto, elem_type: i32) {
    use super::pb::type_proto::Value;
    if let Some(Value::TensorType(t)) = vi.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        t.elem_type = Some(elem_type);
    }
}

/// The pair [`leave_in_float`] removes, and its DequantizeLinear outputs (none a graph output).
fn float_pair(graph: &GraphProto, tensor: &str) -> Result<(Pair, Vec<String>), PrecisionError> {
    let pair = find_pair(graph, tensor, ANY_CODES)?;
    let dq_outputs: Vec<String> = pair
        .dqs
        .iter()
        .filter_map(|&i| graph.node[i].output.first().cloned())
        .collect();
    if let Some(out) = graph
        .output
        .iter()
        .filter_map(|o| o.name.as_deref())
        .find(|o| dq_outputs.iter().any(|d| d == o))
    {
        return Err(PrecisionError::GraphOutput {
            tensor: tensor.to_string(),
            output: out.to_string(),
        });
    }
    Ok((pair, dq_outputs))
}

/// Whether [`widen_to_16_bits`] (`widen`) or [`leave_in_float`] can rewrite the activation
/// `tensor`, checked without copying or changing the model.
pub fn can_rewrite(model: &ModelProto, tensor: &str, widen: bool) -> Result<(), PrecisionError> {
    let Some(graph) = model.graph.as_ref() else {
        return Err(PrecisionError::NotQuantized(tensor.to_string()));
    };
    if widen {
        find_pair(graph, tensor, EIGHT_BIT).map(drop)
    } else {
        float_pair(graph, tensor).map(drop)
    }
}

/// Removes the QuantizeLinear/DequantizeLinear pair of the activation `tensor`: the nodes that
/// read the dequantized value read the float tensor instead, so its producer and readers are no
/// longer a quantized node group (the runtime decides where the float part runs).
pub fn leave_in_float(model: &mut ModelProto, tensor: &str) -> Result<Floated, PrecisionError> {
    let Some(graph) = model.graph.as_mut() else {
        return Err(PrecisionError::NotQuantized(tensor.to_string()));
    };
    let (pair, dq_outputs) = float_pair(graph, tensor)?;
    let mut consumers = Vec::new();
    for n in graph.node.iter_mut() {
        let mut reads = false;
        for input in n.input.iter_mut().filter(|x| dq_outputs.contains(x)) {
            *input = tensor.to_string();
            reads = true;
        }
        if reads {
            consumers.push(n.name.clone().unwrap_or_default());
        }
    }
    let mut gone: Vec<usize> = std::iter::once(pair.q).chain(pair.dqs).collect();
    gone.sort_unstable();
    drop_unread_initializers(graph, &pair.params, &gone);
    let removed = gone
        .iter()
        .rev()
        .map(|&i| graph.node.remove(i).name.unwrap_or_default())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Ok(Floated {
        tensor: tensor.to_string(),
        removed,
        consumers,
    })
}

/// Removes the initializers among `names` that no node reads any more, the nodes at `gone` (about
/// to be removed) not counting: the old scale and zero point of a rewritten pair, unless other
/// pairs share them.
fn drop_unread_initializers(graph: &mut GraphProto, names: &[String], gone: &[usize]) {
    let read: HashSet<String> = graph
        .node
        .iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .flat_map(|(_, n)| n.input.iter().cloned())
        .collect();
    graph.initializer.retain(|t| {
        let name = t.name.as_deref().unwrap_or("");
        !names.iter().any(|n| n == name) || read.contains(name)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::data::model::pb::{GraphProto, NodeProto, OperatorSetIdProto, ValueInfoProto};

    fn node(name: &str, op: &str, inputs: &[&str], output: &str) -> NodeProto {
        NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.into()],
            ..Default::default()
        }
    }

    /// x -> Conv -> y -> Q(0.02, 100, uint8) -> DQ -> Relu -> out, opset 13.
    fn model() -> ModelProto {
        ModelProto {
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(13),
            }],
            graph: Some(GraphProto {
                node: vec![
                    node("conv", "Conv", &["x", "w"], "y"),
                    node("q", "QuantizeLinear", &["y", "y_scale", "y_zp"], "y_q"),
                    node("dq", "DequantizeLinear", &["y_q", "y_scale", "y_zp"], "y_dq"),
                    node("relu", "Relu", &["y_dq"], "out"),
                ],
                initializer: vec![
                    scalar("y_scale", 1, 0.02f32.to_le_bytes().to_vec()),
                    scalar("y_zp", UINT8, vec![100]),
                ],
                output: vec![ValueInfoProto {
                    name: Some("out".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn initializer<'a>(m: &'a ModelProto, name: &str) -> Option<&'a TensorProto> {
        m.graph
            .as_ref()?
            .initializer
            .iter()
            .find(|t| t.name.as_deref() == Some(name))
    }

    #[test]
    fn widening_rewrites_the_pair_with_new_parameters_and_contrib_ops_before_opset_21() {
        let mut m = model();
        let w = widen_to_16_bits(&mut m, "y").expect("widens");
        assert_eq!((w.zero_point_8, w.zero_point_16, w.code_type), (100, 25_700, "uint16"));
        assert_eq!(w.nodes, ["q", "dq"]);
        let g = m.graph.as_ref().expect("graph");
        for n in &g.node[1..3] {
            assert_eq!(
                n.input[1..],
                ["y_scale_16bit".to_string(), "y_zero_point_16bit".to_string()]
            );
            assert_eq!(n.domain.as_deref(), Some("com.microsoft"));
        }
        let zp = initializer(&m, "y_zero_point_16bit").expect("zero point");
        assert_eq!(
            (zp.data_type, zp.raw_data.as_deref()),
            (Some(UINT16), Some(&25_700u16.to_le_bytes()[..]))
        );
        let scale = initializer(&m, "y_scale_16bit").expect("scale");
        assert_eq!(
            scale.raw_data.as_deref(),
            Some(&((0.02f64 / 257.0) as f32).to_le_bytes()[..])
        );
        // The old parameters are gone; the contrib domain is imported.
        assert!(initializer(&m, "y_scale").is_none() && initializer(&m, "y_zp").is_none());
        assert!(m
            .opset_import
            .iter()
            .any(|o| o.domain.as_deref() == Some("com.microsoft")));
        // Twice is refused: the codes are 16-bit now.
        assert!(matches!(
            widen_to_16_bits(&mut m, "y"),
            Err(PrecisionError::UnsupportedCodes { .. })
        ));
    }

    #[test]
    fn leaving_in_float_rewires_the_readers_and_removes_the_pair() {
        let mut m = model();
        let f = leave_in_float(&mut m, "y").expect("floats");
        assert_eq!(
            (f.removed, f.consumers),
            (vec!["q".to_string(), "dq".to_string()], vec!["relu".to_string()])
        );
        let g = m.graph.as_ref().expect("graph");
        let ops: Vec<&str> = g.node.iter().filter_map(|n| n.op_type.as_deref()).collect();
        assert_eq!(ops, ["Conv", "Relu"]);
        assert_eq!(g.node[1].input, ["y"]);
        assert!(g.initializer.is_empty());
    }

    #[test]
    fn pairs_read_by_other_ops_or_ending_the_graph_are_refused() {
        let mut m = model();
        m.graph
            .as_mut()
            .expect("graph")
            .node
            .push(node("peek", "Identity", &["y_q"], "z"));
        assert!(can_rewrite(&m, "y", true).is_err() && can_rewrite(&m, "y", false).is_err());
        assert!(matches!(
            widen_to_16_bits(&mut m, "y"),
            Err(PrecisionError::OtherConsumer { .. })
        ));
        let mut m = model();
        m.graph.as_mut().expect("graph").output[0].name = Some("y_dq".into());
        assert!(can_rewrite(&m, "y", true).is_ok() && can_rewrite(&m, "y", false).is_err());
        assert!(matches!(
            leave_in_float(&mut m, "y"),
            Err(PrecisionError::GraphOutput { .. })
        ));
        assert!(matches!(
            widen_to_16_bits(&mut model(), "x"),
            Err(PrecisionError::NotQuantized(_))
        ));
    }

    #[test]
    fn widened_ranges_equal_the_eight_bit_ranges() {
        // uint8, s = 0.02, z = 100: real range [-2.0, 3.1]. uint16 over it: s/257, z·257.
        let (s, z) = widened_params(0.02, 100, false);
        assert_eq!(z, 25_700);
        assert!((s as f64 * (0.0 - z as f64) + 2.0).abs() < 1e-6);
        assert!((s as f64 * (65_535.0 - z as f64) - 3.1).abs() < 1e-6);
        // int8, s = 0.5, z = -3: range [-62.5, 65]; int16 ends -32768 and 32767.
        let (s, z) = widened_params(0.5, -3, true);
        assert_eq!(z, 257 * -3 + 128);
        assert!((s as f64 * (-32_768.0 - z as f64) + 62.5).abs() < 1e-4);
        assert!((s as f64 * (32_767.0 - z as f64) - 65.0).abs() < 1e-4);
    }
}
