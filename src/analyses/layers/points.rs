//! The places in a quantized graph where per-layer drift is observed ("points"), in execution
//! order. In a QDQ graph a layer's result is the output of the QuantizeLinear that follows it:
//! the integer codes the NPU really holds. Tapping those keeps every QDQ node group intact (a
//! QuantizeLinear output may be a graph output without stopping a runtime from fusing the group
//! that ends in it), while tapping the float tensor before it would break the group apart.
//! Float tensors that no QuantizeLinear follows (float islands, fallbacks) are points too.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::data::model::constant::{constants, external_values, tensor_values};
use crate::data::model::pb::GraphProto;
use crate::data::model::topology::Topology;

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
    consts: &HashMap<String, &crate::data::model::pb::TensorProto>,
    dir: Option<&Path>,
    q: usize,
) -> Option<Quant> {
    // Scales and zero points are tiny; a model with external data may still keep them outside.
    let values =
        |t: &crate::data::model::pb::TensorProto| tensor_values(t).or_else(|| external_values(t, dir?, 1 << 20));
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
    crate::data::tensor::DType::from_onnx(elem_type)?.int_range()?;
    (*scale > 0.0 && scale.is_finite()).then_some(Quant {
        scale: *scale as f32,
        zero_point,
        elem_type,
    })
}

/// Nodes computed from tensor shapes only (Shape -> ... -> Range, grids and anchors): with the
/// input shapes pinned, runtimes fold them into constants, so they are not activations.
fn shape_only_nodes(
    topo: &Topology,
    order: &[usize],
    constant: &[bool],
    producers: &HashMap<&str, usize>,
) -> Vec<bool> {
    let mut shape_only = vec![false; topo.nodes.len()];
    for &i in order {
        let n = &topo.nodes[i];
        let dynamic: Vec<&String> = n.inputs.iter().filter(|t| topo.is_dynamic(t)).collect();
        shape_only[i] = matches!(n.op_type.as_str(), "Shape" | "Size")
            || (!constant[i]
                && !dynamic.is_empty()
                && dynamic
                    .iter()
                    .all(|t| producers.get(t.as_str()).is_some_and(|&p| shape_only[p] || constant[p])));
    }
    shape_only
}

/// The points found so far, and how a tensor resolves to the point that observes it.
struct Collector<'g> {
    topo: &'g Topology,
    producers: HashMap<&'g str, usize>,
    consumers: HashMap<&'g str, Vec<usize>>,
    shape_only: Vec<bool>,
    out: Vec<Point>,
    /// Float-domain tensor -> point, and code tensor -> point.
    by_float: BTreeMap<String, usize>,
    by_code: BTreeMap<String, usize>,
}

impl Collector<'_> {
    /// The points a node reads: through DequantizeLinear back to the codes' point, or directly.
    fn input_points(&self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = Vec::new();
        for t in self.topo.nodes[n].inputs.iter().filter(|t| self.topo.is_dynamic(t)) {
            let p = self.by_float.get(t.as_str()).copied().or_else(|| {
                let &dq = self.producers.get(t.as_str())?;
                let d = &self.topo.nodes[dq];
                (d.op_type == "DequantizeLinear")
                    .then(|| self.by_code.get(d.inputs.first()?.as_str()).copied())
                    .flatten()
            });
            if let Some(p) = p.filter(|p| !v.contains(p)) {
                v.push(p);
            }
        }
        v
    }

    /// The point of an activation QuantizeLinear `i`: its codes, attributed to the node that
    /// computes its input.
    fn quantized(&mut self, i: usize, quant: Quant) {
        let n = &self.topo.nodes[i];
        let (Some(input), Some(output)) = (n.inputs.first(), n.outputs.first()) else {
            return;
        };
        let producer = self.producers.get(input.as_str()).copied();
        if producer.is_some_and(|p| self.shape_only[p]) {
            return;
        }
        let (node, op_type, node_index) = match producer {
            Some(p) => (
                self.topo.nodes[p].name.clone(),
                self.topo.nodes[p].op_type.clone(),
                Some(p),
            ),
            None => (n.name.clone(), "QuantizeLinear".to_string(), Some(i)),
        };
        let inputs = match node_index.filter(|&p| p != i) {
            Some(p) => self.input_points(p),
            None => Vec::new(),
        };
        self.by_code.insert(output.clone(), self.out.len());
        self.by_float.entry(input.clone()).or_insert(self.out.len());
        self.out.push(Point {
            tensor: output.clone(),
            float_name: input.clone(),
            node,
            op_type,
            node_index,
            q_index: Some(i),
            quant: Some(quant),
            inputs,
        });
    }

    /// The float results of node `i` that no QuantizeLinear reads, observed as they are.
    fn floats(&mut self, i: usize) {
        let n = &self.topo.nodes[i];
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            let quantized_later = self
                .consumers
                .get(o.as_str())
                .is_some_and(|c| c.iter().any(|&c| self.topo.nodes[c].op_type == "QuantizeLinear"));
            // Unread results (LayerNormalization's Mean, an LSTM's unused state) are not
            // exposed: runtimes prune them, and an extra output would change the session.
            let read = self.consumers.contains_key(o.as_str()) || self.topo.outputs.contains(o);
            if quantized_later || !read {
                continue;
            }
            let inputs = self.input_points(i);
            self.by_float.insert(o.clone(), self.out.len());
            self.out.push(Point {
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
}

/// Every point of a graph, in execution order; `dir` is the model's directory (external data).
pub fn points(graph: &GraphProto, dir: Option<&Path>) -> Vec<Point> {
    let topo = Topology::of_graph(graph);
    let consts = constants(graph);
    let order = topo.topological_order();
    let constant = topo.constant_nodes(&order);
    let producers = topo.producers();
    let shape_only = shape_only_nodes(&topo, &order, &constant, &producers);
    let mut c = Collector {
        topo: &topo,
        consumers: topo.consumers(),
        producers,
        shape_only,
        out: Vec::new(),
        by_float: BTreeMap::new(),
        by_code: BTreeMap::new(),
    };
    for &i in &order {
        let n = &topo.nodes[i];
        if constant[i] || c.shape_only[i] || n.op_type == "Constant" {
            continue;
        }
        if n.op_type == "QuantizeLinear" {
            if let Some(quant) = quant_of(graph, &consts, dir, i) {
                c.quantized(i, quant);
            }
        } else if !is_qdq(&n.op_type) {
            c.floats(i);
        }
    }
    c.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::build::GraphBuilder;
    use crate::data::tensor::{Tensor, TensorData};
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
            &[("to", crate::data::model::build::Attr::Int(1))],
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
        let model = crate::data::model::load_model(&path).unwrap();
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
