//! The places in a quantized graph where per-layer drift is observed ("points"), in execution
//! order. In a QDQ graph a layer's result is the output of the QuantizeLinear that follows it:
//! the integer codes the NPU really holds. Tapping those keeps every QDQ node group intact (a
//! QuantizeLinear output may be a graph output without stopping a runtime from fusing the group
//! that ends in it), while tapping the float tensor before it would break the group apart.
//! Float tensors that no QuantizeLinear follows (float islands, fallbacks) are points too.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::model::constant::{constants, external_values, tensor_values};
use crate::model::pb::GraphProto;
use crate::model::topology::Topology;

/// A per-tensor quantization: `real = (code − zero_point) · scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quant {
    pub scale: f32,
    pub zero_point: f64,
    /// ONNX data type of the codes.
    pub elem_type: i32,
}

/// One observation point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The tensor exposed as an extra output: codes for a quantized point.
    pub tensor: String,
    /// The float-domain tensor it stands for (the QuantizeLinear's input), matched to the
    /// reference model.
    pub float_name: String,
    /// The node computing `float_name` (the QuantizeLinear itself for a graph input).
    pub node: String,
    pub op_type: String,
    /// Index of that node in the graph.
    pub node_index: Option<usize>,
    /// Index of the QuantizeLinear node, for quantized points.
    pub q_index: Option<usize>,
    pub quant: Option<Quant>,
    /// Points whose values this point's node reads (through DequantizeLinear for codes).
    pub inputs: Vec<usize>,
}

/// Ops that only move quantization around; never a layer of their own.
fn is_qdq(op: &str) -> bool {
    matches!(op, "QuantizeLinear" | "DequantizeLinear")
}

/// The per-tensor quantization of a QuantizeLinear node, when its scale and zero point are
/// constants with one value each.
fn quant_of(
    graph: &GraphProto,
    consts: &HashMap<String, &crate::model::pb::TensorProto>,
    dir: Option<&Path>,
    q: usize,
) -> Option<Quant> {
    // Scales and zero points are tiny; a model with external data may still keep them outside.
    let values = |t: &crate::model::pb::TensorProto| tensor_values(t).or_else(|| external_values(t, dir?, 1 << 20));
    let node = &graph.node[q];
    let scale = values(consts.get(node.input.get(1)?)?)?;
    let [scale] = scale.values.as_slice() else {
        return None;
    };
    let (zero_point, elem_type) = match node.input.get(2).filter(|s| !s.is_empty()) {
        Some(zp) => {
            let v = values(consts.get(zp)?)?;
            let [z] = v.values.as_slice() else {
                return None;
            };
            (*z, v.data_type)
        }
        // Without a zero point the codes are uint8 unless `output_dtype` says otherwise.
        None => {
            let dtype = node
                .attribute
                .iter()
                .find(|a| a.name.as_deref() == Some("output_dtype"))
                .and_then(|a| a.i)
                .map(|i| i as i32)
                .unwrap_or(2);
            (0.0, dtype)
        }
    };
    // Codes the audit cannot count in LSB (4-bit, float8) are not points.
    crate::tensor::DType::from_onnx(elem_type)?.int_range()?;
    (*scale > 0.0 && scale.is_finite()).then_some(Quant {
        scale: *scale as f32,
        zero_point,
        elem_type,
    })
}

/// Every point of a graph, in execution order; `dir` is the model's directory (external data).
pub fn points(graph: &GraphProto, dir: Option<&Path>) -> Vec<Point> {
    let topo = Topology::of_graph(graph);
    let consts = constants(graph);
    let order = topo.topological_order();
    let constant = topo.constant_nodes(&order);
    let producers = topo.producers();
    let consumers = topo.consumers();
    let mut out: Vec<Point> = Vec::new();
    // Float-domain tensor -> point, and code tensor -> point: how inputs are resolved.
    let mut by_float: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
    let producer_of = |t: &str| -> (String, String, Option<usize>) {
        match producers.get(t) {
            Some(&p) => (topo.nodes[p].name.clone(), topo.nodes[p].op_type.clone(), Some(p)),
            None => (t.to_string(), "Input".to_string(), None),
        }
    };
    // The points a node reads: through DequantizeLinear back to the codes' point, or directly.
    let input_points = |n: usize, by_float: &BTreeMap<String, usize>, by_code: &BTreeMap<String, usize>| {
        let mut v: Vec<usize> = Vec::new();
        for t in topo.nodes[n].inputs.iter().filter(|t| topo.is_dynamic(t)) {
            let p = by_float.get(t.as_str()).copied().or_else(|| {
                let &dq = producers.get(t.as_str())?;
                let d = &topo.nodes[dq];
                (d.op_type == "DequantizeLinear")
                    .then(|| by_code.get(d.inputs.first()?.as_str()).copied())
                    .flatten()
            });
            if let Some(p) = p {
                if !v.contains(&p) {
                    v.push(p);
                }
            }
        }
        v
    };
    // Nodes computed from tensor shapes only (Shape -> ... -> Range, grids and anchors): with the
    // input shapes pinned, runtimes fold them into constants, so they are not activations.
    let mut shape_only = vec![false; topo.nodes.len()];
    for &i in &order {
        let n = &topo.nodes[i];
        let dynamic: Vec<&String> = n.inputs.iter().filter(|t| topo.is_dynamic(t)).collect();
        shape_only[i] = matches!(n.op_type.as_str(), "Shape" | "Size")
            || (!constant[i]
                && !dynamic.is_empty()
                && dynamic
                    .iter()
                    .all(|t| producers.get(t.as_str()).is_some_and(|&p| shape_only[p] || constant[p])));
    }
    for &i in &order {
        let n = &topo.nodes[i];
        if constant[i] || shape_only[i] || n.op_type == "Constant" {
            continue;
        }
        if n.op_type == "QuantizeLinear" {
            let (Some(input), Some(output)) = (n.inputs.first(), n.outputs.first()) else {
                continue;
            };
            let Some(quant) = quant_of(graph, &consts, dir, i) else {
                continue;
            };
            if producers.get(input.as_str()).is_some_and(|&p| shape_only[p]) {
                continue;
            }
            let (node, op_type, node_index) = match producers.get(input.as_str()) {
                Some(_) => producer_of(input),
                None => (n.name.clone(), "QuantizeLinear".to_string(), Some(i)),
            };
            let inputs = match node_index.filter(|&p| p != i) {
                Some(p) => input_points(p, &by_float, &by_code),
                None => Vec::new(),
            };
            by_code.insert(output.clone(), out.len());
            by_float.entry(input.clone()).or_insert(out.len());
            out.push(Point {
                tensor: output.clone(),
                float_name: input.clone(),
                node,
                op_type,
                node_index,
                q_index: Some(i),
                quant: Some(quant),
                inputs,
            });
            continue;
        }
        if is_qdq(&n.op_type) {
            continue;
        }
        // A float result no QuantizeLinear reads is observed as it is.
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            let quantized_later = consumers
                .get(o.as_str())
                .is_some_and(|c| c.iter().any(|&c| topo.nodes[c].op_type == "QuantizeLinear"));
            // Unread results (LayerNormalization's Mean, an LSTM's unused state) are not
            // exposed: runtimes prune them, and an extra output would change the session.
            let read = consumers.contains_key(o.as_str()) || topo.outputs.contains(o);
            if quantized_later || !read {
                continue;
            }
            let inputs = input_points(i, &by_float, &by_code);
            by_float.insert(o.clone(), out.len());
            out.push(Point {
                tensor: o.clone(),
                float_name: o.clone(),
                node: n.name.clone(),
                op_type: n.op_type.clone(),
                node_index: Some(i),
                q_index: None,
                quant: None,
                inputs,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::build::GraphBuilder;
    use crate::tensor::{Tensor, TensorData};
    use std::path::Path;

    #[test]
    fn tensors_computed_from_shapes_alone_are_not_layers() {
        // x -> Relu -> Q (a layer); Shape(x) -> Cast -> Q (a grid: constant once shapes are
        // pinned, and runtimes fold it).
        let mut b = GraphBuilder::new("g");
        b.input("x", 1, &[1, 4]);
        b.constant("s", &Tensor::new(vec![], TensorData::Float32(vec![0.5])).unwrap());
        b.constant("z", &Tensor::new(vec![], TensorData::Uint8(vec![0])).unwrap());
        b.node("Relu", "relu", &["x"], &["r"], &[]);
        b.node("QuantizeLinear", "rq", &["r", "s", "z"], &["r_q"], &[]);
        b.node("Shape", "shape", &["x"], &["sh"], &[]);
        b.node(
            "Cast",
            "cast",
            &["sh"],
            &["shf"],
            &[("to", crate::model::build::Attr::Int(1))],
        );
        b.node("QuantizeLinear", "gq", &["shf", "s", "z"], &["g_q"], &[]);
        b.output("r_q").output("g_q");
        let model = b.finish();
        let p = points(model.graph.as_ref().unwrap(), None);
        let names: Vec<&str> = p.iter().map(|p| p.tensor.as_str()).collect();
        assert_eq!(names, vec!["r_q"]);
        assert_eq!(p[0].quant.unwrap().scale, 0.5);
    }

    #[test]
    fn the_cnn_fixture_is_observed_at_every_quantize_linear_in_order() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/cnn_qdq_u8.onnx");
        let model = crate::model::load_model(&path).unwrap();
        let p = points(model.proto.graph.as_ref().unwrap(), None);
        let names: Vec<&str> = p.iter().map(|p| p.tensor.as_str()).collect();
        // Activation QuantizeLinear nodes in file order (weights are constant-derived); the
        // Softmax reads the DequantizeLinear output `logits`, a graph output.
        assert_eq!(names.first(), Some(&"image_QuantizeLinear_Output"));
        assert_eq!(names.len(), 14, "{names:?}");
        let relu1 = p.iter().find(|p| p.float_name == "relu1_out").unwrap();
        assert_eq!(
            (relu1.node.as_str(), relu1.op_type.as_str()),
            ("bn1", "BatchNormalization")
        );
        let q = relu1.quant.unwrap();
        assert_eq!(q.elem_type, 2);
        // bn1 reads conv1's codes through a DequantizeLinear.
        assert_eq!(p[relu1.inputs[0]].float_name, "conv1_out");
        let mul = p.iter().find(|p| p.node == "hardswish_mul").unwrap();
        let read: Vec<&str> = mul.inputs.iter().map(|&i| p[i].float_name.as_str()).collect();
        assert_eq!(read, vec!["conv3_out", "hsig_out"]);
        let probs = p.iter().find(|p| p.node == "softmax").unwrap();
        assert_eq!(p[probs.inputs[0]].tensor, "logits_QuantizeLinear_Output");
    }
}
