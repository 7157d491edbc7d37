//! Deriving a float reference from a QDQ model when the user has no fp32 model: every activation
//! QuantizeLinear -> DequantizeLinear pair is removed, so activations flow in float, while weights
//! keep their DequantizeLinear (the reference uses the dequantized weights, so it measures the
//! cost of quantizing activations and of integer execution, not of quantizing weights).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{Context, Result};
use prost::Message;

use super::pb::{GraphProto, ModelProto, NodeProto};
use super::LoadedModel;

/// The derived model and what was done to get it.
#[derive(Debug, Clone)]
pub struct DerivedReference {
    pub proto: ModelProto,
    /// Activation Q->DQ pairs removed.
    pub removed_pairs: usize,
    /// QuantizeLinear/DequantizeLinear nodes kept because they act on constants (weights, biases)
    /// or on integer graph inputs.
    pub kept_qdq_nodes: usize,
    /// Quantized operators (QLinearConv, ...) that cannot be turned back into float.
    pub qoperator_nodes: Vec<String>,
}

fn op(n: &NodeProto) -> &str {
    n.op_type.as_deref().unwrap_or("")
}

fn is_default_domain(n: &NodeProto) -> bool {
    matches!(n.domain.as_deref(), None | Some("") | Some("ai.onnx") | Some("com.microsoft"))
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

/// Removes activation Q/DQ pairs from a QDQ model.
pub fn derive_float_reference(model: &LoadedModel) -> DerivedReference {
    let mut proto = model.proto.clone();
    let Some(graph) = proto.graph.as_mut() else {
        return DerivedReference { proto, removed_pairs: 0, kept_qdq_nodes: 0, qoperator_nodes: vec![] };
    };
    let constant = constant_tensors(graph);
    let producer: HashMap<String, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i)))
        .collect();

    // DQ output -> the float tensor that fed the Q in front of it.
    let mut replace: HashMap<String, String> = HashMap::new();
    let mut removed: HashSet<usize> = HashSet::new();
    for (i, node) in graph.node.iter().enumerate() {
        if op(node) != "DequantizeLinear" || !is_default_domain(node) {
            continue;
        }
        let (Some(q_out), Some(dq_out)) = (node.input.first(), node.output.first()) else { continue };
        let Some(&q_idx) = producer.get(q_out) else { continue };
        let q = &graph.node[q_idx];
        if op(q) != "QuantizeLinear" || !is_default_domain(q) {
            continue;
        }
        let Some(float_in) = q.input.first() else { continue };
        if constant.contains(float_in) {
            continue; // fake-quantised weight: keep it quantised
        }
        replace.insert(dq_out.clone(), float_in.clone());
        removed.insert(i);
    }
    let resolve = |name: &str| -> String {
        let mut cur = name.to_string();
        let mut guard = 0;
        while let Some(next) = replace.get(&cur) {
            cur = next.clone();
            guard += 1;
            if guard > replace.len() {
                break;
            }
        }
        cur
    };

    let graph_outputs: HashSet<String> = graph.output.iter().filter_map(|v| v.name.clone()).collect();
    let mut new_nodes: Vec<NodeProto> = Vec::with_capacity(graph.node.len());
    for (i, node) in graph.node.iter().enumerate() {
        if removed.contains(&i) {
            let dq_out = &node.output[0];
            if graph_outputs.contains(dq_out) {
                // Keep the graph output's name: a float Identity stands where the DQ was.
                new_nodes.push(NodeProto {
                    input: vec![resolve(dq_out)],
                    output: vec![dq_out.clone()],
                    name: Some(format!("{}_npu_audit_float", node.name.as_deref().unwrap_or("dq"))),
                    op_type: Some("Identity".into()),
                    ..Default::default()
                });
            }
            continue;
        }
        let mut node = node.clone();
        for input in node.input.iter_mut() {
            if replace.contains_key(input.as_str()) {
                *input = resolve(input);
            }
        }
        new_nodes.push(node);
    }

    // Drop QuantizeLinear nodes nothing reads any more.
    let mut consumed: HashSet<String> = graph_outputs.clone();
    loop {
        consumed.clear();
        consumed.extend(graph_outputs.iter().cloned());
        for n in &new_nodes {
            consumed.extend(n.input.iter().cloned());
        }
        let before = new_nodes.len();
        new_nodes.retain(|n| !(op(n) == "QuantizeLinear" && n.output.iter().all(|o| !consumed.contains(o))));
        if new_nodes.len() == before {
            break;
        }
    }

    let produced: HashSet<String> = new_nodes.iter().flat_map(|n| n.output.iter().cloned()).collect();
    graph.value_info.retain(|v| v.name.as_ref().is_some_and(|n| produced.contains(n)));
    graph.quantization_annotation.clear();
    let kept_qdq_nodes =
        new_nodes.iter().filter(|n| matches!(op(n), "QuantizeLinear" | "DequantizeLinear")).count();
    let qoperator_nodes = new_nodes
        .iter()
        .filter(|n| op(n).starts_with("QLinear") || matches!(op(n), "ConvInteger" | "MatMulInteger" | "DynamicQuantizeLinear"))
        .map(|n| format!("{} ({})", n.name.as_deref().unwrap_or(""), op(n)))
        .collect();
    graph.node = new_nodes;
    DerivedReference { proto, removed_pairs: removed.len(), kept_qdq_nodes, qoperator_nodes }
}

/// Writes a rewritten model to `dest`, making the external data files of the original model
/// (relative to its directory) visible beside it.
pub fn write_model(proto: &ModelProto, original: &LoadedModel, dest: &Path) -> Result<()> {
    let dir = dest.parent().context("destination has no directory")?;
    let source_dir = original.path.parent().unwrap_or(Path::new("."));
    for file in original.external_data_files() {
        let from = source_dir.join(&file);
        let to = dir.join(&file);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if to.exists() {
            continue;
        }
        let from = from.canonicalize().with_context(|| format!("external data file {} is missing", from.display()))?;
        link_or_copy(&from, &to)?;
    }
    std::fs::write(dest, proto.encode_to_vec()).with_context(|| format!("cannot write {}", dest.display()))
}

#[cfg(unix)]
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    std::os::unix::fs::symlink(from, to)
        .or_else(|_| std::fs::copy(from, to).map(|_| ()))
        .with_context(|| format!("cannot link {} to {}", from.display(), to.display()))
}

#[cfg(not(unix))]
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).map(|_| ()).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pb::{OperatorSetIdProto, TensorProto, ValueInfoProto};

    fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name: Some(outputs[0].to_string()),
            op_type: Some(op.into()),
            ..Default::default()
        }
    }

    fn init(name: &str) -> TensorProto {
        TensorProto { name: Some(name.into()), dims: vec![], data_type: Some(1), float_data: vec![1.0], ..Default::default() }
    }

    /// x -Q-> xq -DQ-> xd -Conv(w_dq)-> c -Q-> cq -DQ-> y (graph output); w -DQ-> w_dq (weight).
    fn qdq_model() -> LoadedModel {
        let graph = GraphProto {
            node: vec![
                node("QuantizeLinear", &["x", "s", "z"], &["xq"]),
                node("DequantizeLinear", &["xq", "s", "z"], &["xd"]),
                node("DequantizeLinear", &["w", "s", "z"], &["w_dq"]),
                node("Conv", &["xd", "w_dq"], &["c"]),
                node("QuantizeLinear", &["c", "s", "z"], &["cq"]),
                node("DequantizeLinear", &["cq", "s", "z"], &["y"]),
            ],
            initializer: vec![init("s"), init("z"), init("w")],
            input: vec![ValueInfoProto { name: Some("x".into()), ..Default::default() }],
            output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
            ..Default::default()
        };
        let proto = ModelProto {
            ir_version: Some(9),
            opset_import: vec![OperatorSetIdProto { domain: None, version: Some(21) }],
            graph: Some(graph),
            ..Default::default()
        };
        LoadedModel { path: "m.onnx".into(), proto, sha256: String::new(), size: 0, modified: false }
    }

    #[test]
    fn activation_pairs_go_and_weight_dequantization_stays() {
        let d = derive_float_reference(&qdq_model());
        assert_eq!(d.removed_pairs, 2);
        let g = d.proto.graph.unwrap();
        let ops: Vec<_> = g.node.iter().map(|n| (op(n).to_string(), n.input.clone(), n.output.clone())).collect();
        assert_eq!(
            ops,
            vec![
                ("DequantizeLinear".into(), vec!["w".into(), "s".into(), "z".into()], vec!["w_dq".into()]),
                ("Conv".into(), vec!["x".into(), "w_dq".into()], vec!["c".into()]),
                ("Identity".into(), vec!["c".into()], vec!["y".into()]),
            ]
        );
        assert_eq!(d.kept_qdq_nodes, 1);
    }
}

/// Replaces the dynamic dimensions of graph inputs with the concrete shapes being fed, so that
/// backends that need static shapes (QNN HTP) see them, whether or not the dimension is named.
pub fn pin_input_shapes(proto: &ModelProto, shapes: &HashMap<String, Vec<usize>>) -> (ModelProto, usize) {
    use super::pb::{tensor_shape_proto::dimension::Value as DimValue, type_proto::Value as TypeValue};
    let mut proto = proto.clone();
    let mut pinned = 0;
    if let Some(graph) = proto.graph.as_mut() {
        for input in graph.input.iter_mut() {
            let Some(shape) = input.name.as_ref().and_then(|n| shapes.get(n)) else { continue };
            let Some(TypeValue::TensorType(t)) = input.r#type.as_mut().and_then(|t| t.value.as_mut()) else { continue };
            let Some(declared) = t.shape.as_mut() else { continue };
            if declared.dim.len() != shape.len() {
                continue;
            }
            for (d, &n) in declared.dim.iter_mut().zip(shape) {
                let fixed = matches!(d.value, Some(DimValue::DimValue(v)) if v >= 0);
                if !fixed {
                    d.value = Some(DimValue::DimValue(n as i64));
                    pinned += 1;
                }
            }
        }
    }
    (proto, pinned)
}
