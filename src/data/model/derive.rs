//! Deriving a float reference from a QDQ model when the user has no fp32 model.
//!
//! Every activation QuantizeLinear -> DequantizeLinear pair is replaced by a `Clip` to the range
//! the pair can represent, `[(qmin - zp)·scale, (qmax - zp)·scale]`: rounding disappears, the range
//! stays. The range must stay because quantizers fold `Relu`/`Clip` into it (ONNX Runtime's
//! quantizer deletes those nodes and lets the activation's range clamp instead), so removing the
//! pairs outright would change what the model computes. Weights keep their DequantizeLinear: the
//! reference uses the dequantized weights, so it measures rounding of activations and integer
//! execution, not weight quantization or clipping.

use std::collections::{HashMap, HashSet};

use super::constant::{constants, quant_range, tensor_values};
use super::pb::{AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto};
use super::LoadedModel;

/// The derived model and what was done to get it.
#[derive(Debug, Clone)]
pub struct DerivedReference {
    pub proto: ModelProto,
    /// Activation Q->DQ pairs replaced by a range clip.
    pub removed_pairs: usize,
    /// Activation pairs kept because their scale is per-axis or not a constant.
    pub kept_activation_pairs: usize,
    /// Quantized operators (QLinearConv, ...) that cannot be turned back into float.
    pub qoperator_nodes: Vec<String>,
}

fn op(n: &NodeProto) -> &str {
    n.op_type.as_deref().unwrap_or("")
}

/// Q/DQ nodes come from the default domain, or from `com.microsoft` (its contrib versions).
fn is_qdq_domain(n: &NodeProto) -> bool {
    matches!(
        n.domain.as_deref(),
        None | Some("") | Some("ai.onnx") | Some("com.microsoft")
    )
}

/// Tensors whose value depends only on initializers (weights, biases, constant-folded chains).
fn constant_tensors(graph: &GraphProto) -> HashSet<String> {
    let mut constant: HashSet<String> = graph.initializer.iter().filter_map(|t| t.name.clone()).collect();
    let inputs: HashSet<&str> = graph.input.iter().filter_map(|v| v.name.as_deref()).collect();
    // An initializer that is also a graph input can be overridden at run time: not constant.
    constant.retain(|n| !inputs.contains(n.as_str()));
    // Nodes are topologically sorted in a valid model, so one pass suffices.
    for node in &graph.node {
        let all_const = op(node) == "Constant"
            || (!node.input.is_empty() && node.input.iter().all(|i| i.is_empty() || constant.contains(i)));
        if all_const {
            constant.extend(node.output.iter().cloned());
        }
    }
    constant
}

/// The float range a QuantizeLinear node can represent, as `(lo, hi, float data type)`.
fn pair_range(q: &NodeProto, values: &HashMap<String, &TensorProto>) -> Option<(f64, f64, i32)> {
    let scale = tensor_values(values.get(q.input.get(1)?)?)?;
    if scale.values.len() != 1 {
        return None; // per-axis activation quantization: leave the pair alone
    }
    let (zp, q_type) = match q.input.get(2).filter(|n| !n.is_empty()) {
        Some(name) => {
            let z = tensor_values(values.get(name)?)?;
            if z.values.len() != 1 {
                return None;
            }
            (z.values[0], z.data_type)
        }
        None => {
            let attr = q
                .attribute
                .iter()
                .find(|a| a.name.as_deref() == Some("output_dtype"))
                .and_then(|a| a.i);
            (0.0, attr.map(|v| v as i32).filter(|&v| v != 0).unwrap_or(2))
        }
    };
    let (qmin, qmax) = quant_range(q_type)?;
    let s = scale.values[0];
    Some(((qmin - zp) * s, (qmax - zp) * s, scale.data_type))
}

fn scalar(name: String, value: f64, data_type: i32) -> TensorProto {
    let raw = match data_type {
        10 => crate::data::tensor::f64_to_f16_bits(value).to_le_bytes().to_vec(),
        11 => value.to_le_bytes().to_vec(),
        _ => (value as f32).to_le_bytes().to_vec(),
    };
    TensorProto {
        name: Some(name),
        data_type: Some(data_type),
        dims: vec![],
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// The activation pairs to replace: the index of each pair's DequantizeLinear with its clip,
/// the scalar initializers the clips read, and how many activation pairs were kept.
struct Clips {
    by_dq: HashMap<usize, NodeProto>,
    initializers: Vec<TensorProto>,
    kept_activation_pairs: usize,
}

/// The activation QuantizeLinear (index) feeding DequantizeLinear `node`, with the float tensor
/// it quantizes; `None` for weights and anything that is not an activation pair.
fn activation_pair<'g>(
    graph: &'g GraphProto,
    node: &NodeProto,
    producer: &HashMap<String, usize>,
    constant: &HashSet<String>,
) -> Option<(&'g NodeProto, &'g String)> {
    if op(node) != "DequantizeLinear" || !is_qdq_domain(node) {
        return None;
    }
    let q = &graph.node[*producer.get(node.input.first()?)?];
    if op(q) != "QuantizeLinear" || !is_qdq_domain(q) {
        return None;
    }
    let float_in = q.input.first()?;
    // A fake-quantised weight stays quantised.
    (!constant.contains(float_in)).then_some((q, float_in))
}

/// A Clip from `float_in` to the DequantizeLinear's output, bounded by `lo` and `hi` (inputs from
/// opset 11, attributes before).
fn clip_node(
    node: &NodeProto,
    float_in: &str,
    (lo, hi, float_type): (f64, f64, i32),
    opset: i64,
    clips: &mut Clips,
) -> NodeProto {
    let dq_out = &node.output[0];
    let base = format!("{dq_out}_npu_audit_range");
    let mut clip = NodeProto {
        input: vec![float_in.to_string()],
        output: vec![dq_out.clone()],
        name: Some(format!("{}_npu_audit_clip", node.name.as_deref().unwrap_or(dq_out))),
        op_type: Some("Clip".into()),
        ..Default::default()
    };
    if opset >= 11 {
        clip.input.push(format!("{base}_lo"));
        clip.input.push(format!("{base}_hi"));
        clips.initializers.push(scalar(format!("{base}_lo"), lo, float_type));
        clips.initializers.push(scalar(format!("{base}_hi"), hi, float_type));
    } else {
        let attr = |name: &str, v: f64| AttributeProto {
            name: Some(name.into()),
            f: Some(v as f32),
            r#type: Some(1),
            ..Default::default()
        };
        clip.attribute = vec![attr("min", lo), attr("max", hi)];
    }
    clip
}

/// Every activation pair of `graph` that becomes a clip.
fn find_clips(graph: &GraphProto, opset: i64) -> Clips {
    let constant = constant_tensors(graph);
    let producer: HashMap<String, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i)))
        .collect();
    let values = constants(graph);
    let mut clips = Clips {
        by_dq: HashMap::new(),
        initializers: Vec::new(),
        kept_activation_pairs: 0,
    };
    for (i, node) in graph.node.iter().enumerate() {
        let Some((q, float_in)) = node
            .output
            .first()
            .and_then(|_| activation_pair(graph, node, &producer, &constant))
        else {
            continue;
        };
        let Some(range) = pair_range(q, &values) else {
            clips.kept_activation_pairs += 1;
            continue;
        };
        let clip = clip_node(node, float_in, range, opset, &mut clips);
        clips.by_dq.insert(i, clip);
    }
    clips
}

/// Drops QuantizeLinear nodes nothing reads any more (repeatedly: one may feed another).
fn drop_dead_quantizers(mut nodes: Vec<NodeProto>, graph_outputs: &HashSet<String>) -> Vec<NodeProto> {
    loop {
        let mut consumed: HashSet<&str> = graph_outputs.iter().map(String::as_str).collect();
        for n in &nodes {
            consumed.extend(n.input.iter().map(String::as_str));
        }
        let dead: HashSet<usize> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| op(n) == "QuantizeLinear" && n.output.iter().all(|o| !consumed.contains(o.as_str())))
            .map(|(i, _)| i)
            .collect();
        if dead.is_empty() {
            return nodes;
        }
        nodes = nodes
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !dead.contains(i))
            .map(|(_, n)| n)
            .collect();
    }
}

/// Replaces activation Q/DQ pairs of a QDQ model by clips to their range.
pub fn derive_float_reference(model: &LoadedModel) -> DerivedReference {
    let opset = model.opset();
    let mut proto = model.proto.clone();
    let Some(graph) = proto.graph.as_mut() else {
        return DerivedReference {
            proto,
            removed_pairs: 0,
            kept_activation_pairs: 0,
            qoperator_nodes: vec![],
        };
    };
    let mut clips = find_clips(graph, opset);
    let removed_pairs = clips.by_dq.len();
    let graph_outputs: HashSet<String> = graph.output.iter().filter_map(|v| v.name.clone()).collect();
    let replaced: Vec<NodeProto> = graph
        .node
        .iter()
        .enumerate()
        .map(|(i, n)| clips.by_dq.remove(&i).unwrap_or_else(|| n.clone()))
        .collect();
    let new_nodes = drop_dead_quantizers(replaced, &graph_outputs);
    let produced: HashSet<String> = new_nodes.iter().flat_map(|n| n.output.iter().cloned()).collect();
    graph
        .value_info
        .retain(|v| v.name.as_ref().is_some_and(|n| produced.contains(n)));
    graph.quantization_annotation.clear();
    graph.initializer.extend(clips.initializers);
    let qoperator_nodes = new_nodes
        .iter()
        .filter(|n| {
            op(n).starts_with("QLinear") || matches!(op(n), "ConvInteger" | "MatMulInteger" | "DynamicQuantizeLinear")
        })
        .map(|n| format!("{} ({})", n.name.as_deref().unwrap_or(""), op(n)))
        .collect();
    graph.node = new_nodes;
    DerivedReference {
        proto,
        removed_pairs,
        kept_activation_pairs: clips.kept_activation_pairs,
        qoperator_nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::pb::{OperatorSetIdProto, ValueInfoProto};

    fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name: Some(outputs[0].to_string()),
            op_type: Some(op.into()),
            ..Default::default()
        }
    }

    fn f32_init(name: &str, v: f32) -> TensorProto {
        TensorProto {
            name: Some(name.into()),
            dims: vec![],
            data_type: Some(1),
            float_data: vec![v],
            ..Default::default()
        }
    }

    fn u8_init(name: &str, v: i32) -> TensorProto {
        TensorProto {
            name: Some(name.into()),
            dims: vec![],
            data_type: Some(2),
            int32_data: vec![v],
            ..Default::default()
        }
    }

    /// x -Q-> xq -DQ-> xd -Conv(w_dq)-> c -Q-> cq -DQ-> y (graph output); w -DQ-> w_dq (weight).
    fn qdq_model() -> LoadedModel {
        let graph = GraphProto {
            node: vec![
                node("QuantizeLinear", &["x", "s", "z"], &["xq"]),
                node("DequantizeLinear", &["xq", "s", "z"], &["xd"]),
                node("DequantizeLinear", &["w", "s", "z"], &["w_dq"]),
                node("Conv", &["xd", "w_dq"], &["c"]),
                node("QuantizeLinear", &["c", "s2", "z2"], &["cq"]),
                node("DequantizeLinear", &["cq", "s2", "z2"], &["y"]),
            ],
            initializer: vec![
                f32_init("s", 0.5),
                u8_init("z", 128),
                u8_init("w", 3),
                f32_init("s2", 0.25),
                u8_init("z2", 0),
            ],
            input: vec![ValueInfoProto {
                name: Some("x".into()),
                ..Default::default()
            }],
            output: vec![ValueInfoProto {
                name: Some("y".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let proto = ModelProto {
            ir_version: Some(9),
            opset_import: vec![OperatorSetIdProto {
                domain: None,
                version: Some(21),
            }],
            graph: Some(graph),
            ..Default::default()
        };
        LoadedModel {
            path: "m.onnx".into(),
            proto,
            sha256: String::new(),
            size: 0,
            modified: false,
        }
    }

    #[test]
    fn activation_pairs_become_range_clips_and_weight_dequantization_stays() {
        let d = derive_float_reference(&qdq_model());
        assert_eq!(d.removed_pairs, 2);
        let g = d.proto.graph.unwrap();
        let ops: Vec<_> = g
            .node
            .iter()
            .map(|n| (op(n).to_string(), n.input.clone(), n.output.clone()))
            .collect();
        assert_eq!(
            ops[0],
            (
                "Clip".into(),
                vec![
                    "x".into(),
                    "xd_npu_audit_range_lo".into(),
                    "xd_npu_audit_range_hi".into()
                ],
                vec!["xd".into()]
            )
        );
        assert_eq!(ops[1].0, "DequantizeLinear");
        assert_eq!(ops[2].0, "Conv");
        assert_eq!(
            ops[3],
            (
                "Clip".into(),
                vec!["c".into(), "y_npu_audit_range_lo".into(), "y_npu_audit_range_hi".into()],
                vec!["y".into()]
            )
        );
        assert_eq!(ops.len(), 4);
        let value = |name: &str| {
            tensor_values(g.initializer.iter().find(|t| t.name.as_deref() == Some(name)).unwrap())
                .unwrap()
                .values[0]
        };
        // u8, zero point 128, scale 0.5: [(0-128)·0.5, (255-128)·0.5] = [-64, 63.5].
        assert_eq!(value("xd_npu_audit_range_lo"), -64.0);
        assert_eq!(value("xd_npu_audit_range_hi"), 63.5);
        // zero point 0 (a folded Relu), scale 0.25: [0, 63.75].
        assert_eq!(value("y_npu_audit_range_lo"), 0.0);
        assert_eq!(value("y_npu_audit_range_hi"), 63.75);
    }
}
