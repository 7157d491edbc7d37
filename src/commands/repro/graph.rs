//! The audited model as a sequence of layers in execution order, and the windows of consecutive
//! layers a repro is made of: each window's nodes (its layers with their DequantizeLinear and
//! QuantizeLinear nodes and the constant-only nodes they read), the tensors it reads from the rest
//! of the model, and what feeds each of them from the golden run.

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context as _, Result};

use crate::analyses::layers::matching::{match_tensors, TensorMatch};
use crate::analyses::layers::points::{points, Point, Quant};
use crate::analyses::layers::tap::{GraphIndex, Unit};
use crate::data::model::pb::ModelProto;
use crate::data::model::rewrite::pin_input_shapes;
use crate::data::model::topology::Topology;
use crate::data::model::LoadedModel;
use crate::report::repro::LayerRef;

/// A window: the positions of its first and last layer, inclusive.
pub type Window = (usize, usize);

/// Where a window's input comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Feed {
    /// A graph input: the sample itself.
    GraphInput(String),
    /// Codes: the golden activation (a reference tensor) quantized as the model's
    /// QuantizeLinear does.
    Codes { reference: String, quant: Quant },
    /// A float activation: the golden one.
    Float(String),
}

/// The audited model's layers and how they pair with the reference.
pub struct Layered {
    /// The audited model with its input dimensions pinned to the samples'.
    pub proto: ModelProto,
    pub index: GraphIndex,
    pub points: Vec<Point>,
    /// Point indices of the layers, in execution order (graph-input quantization excluded: it
    /// is the sample's, not a layer's).
    pub layers: Vec<usize>,
    matches: BTreeMap<String, TensorMatch>,
    /// Codes tensor -> the point whose QuantizeLinear produces it.
    by_code: HashMap<String, usize>,
}

impl Layered {
    /// The layers of `model`, paired with `reference`.
    pub fn new(model: &LoadedModel, reference: &LoadedModel, shapes: &HashMap<String, Vec<usize>>) -> Result<Layered> {
        let mut proto = model.proto.clone();
        pin_input_shapes(&mut proto, shapes);
        let graph = proto.graph.as_ref().context("the model has no graph")?;
        let pts = points(graph, model.path.parent());
        let index = GraphIndex::of(graph);
        let matches = match_tensors(&Topology::of_graph(graph), &Topology::of_model(&reference.proto));
        let layers = pts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.node_index.is_some() && p.op_type != "QuantizeLinear")
            .map(|(i, _)| i)
            .collect();
        let by_code = pts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.quant.is_some())
            .map(|(i, p)| (p.tensor.clone(), i))
            .collect();
        Ok(Layered {
            proto,
            index,
            points: pts,
            layers,
            matches,
            by_code,
        })
    }

    /// The point of the layer at `position`.
    pub fn point(&self, position: usize) -> &Point {
        &self.points[self.layers[position]]
    }

    /// How the report names the layer at `position`.
    pub fn layer_ref(&self, position: usize) -> LayerRef {
        let p = self.point(position);
        LayerRef {
            position,
            node: p.node.clone(),
            op_type: p.op_type.clone(),
            tensor: p.tensor.clone(),
        }
    }

    /// The layer a user names: its node, the tensor it produces, or that tensor's float name.
    pub fn find(&self, name: &str) -> Option<usize> {
        (0..self.layers.len()).find(|&k| {
            let p = self.point(k);
            p.node == name || p.tensor == name || p.float_name == name
        })
    }

    /// The reference tensor paired with a float tensor of the audited model.
    pub fn reference_name(&self, float_name: &str) -> Option<&str> {
        self.matches.get(float_name).map(|m| m.reference.as_str())
    }

    /// The point whose tensor is `tensor` (a layer's output).
    pub fn point_of_tensor(&self, tensor: &str) -> Option<&Point> {
        self.points.iter().find(|p| p.tensor == tensor)
    }

    /// Every reference tensor some window may read or be measured against.
    pub fn reference_taps(&self) -> Vec<String> {
        let mut taps: Vec<String> = self.matches.values().map(|m| m.reference.clone()).collect();
        taps.sort();
        taps.dedup();
        taps
    }

    /// The nodes of a window and what it reads; its outputs are the tensors of its layers that
    /// no node of the window reads (with a branch inside, more than one).
    pub fn unit(&self, (first, last): Window) -> Unit {
        let members: Vec<(usize, Option<usize>)> = (first..=last)
            .filter_map(|k| {
                let p = self.point(k);
                Some((p.node_index?, p.q_index))
            })
            .collect();
        let mut unit = self.index.unit(&members, Vec::new());
        let read_inside = |t: &str| {
            unit.nodes
                .iter()
                .any(|&n| self.index.topo.nodes[n].inputs.iter().any(|i| i == t))
        };
        let mut sinks: Vec<String> = (first..=last)
            .map(|k| self.point(k).tensor.clone())
            .filter(|t| !read_inside(t))
            .collect();
        if sinks.is_empty() {
            sinks.push(self.point(last).tensor.clone());
        }
        unit.outputs = sinks;
        unit
    }

    /// Where a window's input `t` comes from, or why it cannot be fed.
    pub fn feed(&self, t: &str) -> Result<Feed, String> {
        if self.index.topo.inputs.iter().any(|i| i == t) {
            return Ok(Feed::GraphInput(t.to_string()));
        }
        let missing = || format!("its input {t} has no counterpart in the reference");
        if let Some(&c) = self.by_code.get(t) {
            let src = &self.points[c];
            let reference = self.reference_name(&src.float_name).ok_or_else(missing)?;
            return Ok(Feed::Codes {
                reference: reference.to_string(),
                quant: src.quant.ok_or("unquantized")?,
            });
        }
        self.reference_name(t)
            .map(|r| Feed::Float(r.to_string()))
            .ok_or_else(missing)
    }

    /// Whether a window holds a node with a subgraph (`If`, `Loop`, `Scan`): such a window
    /// cannot be cut into a standalone model.
    pub fn control_flow(&self, unit: &Unit) -> Option<String> {
        let graph = self.proto.graph.as_ref()?;
        unit.nodes.iter().find_map(|&n| {
            let node = &graph.node[n];
            node.attribute
                .iter()
                .any(|a| a.g.is_some() || !a.graphs.is_empty())
                .then(|| format!("{} ({})", node.name(), node.op_type()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture(name: &str) -> LoadedModel {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models").join(name);
        crate::data::model::load_model(&path).unwrap()
    }

    #[test]
    fn a_window_of_the_cnn_reads_codes_and_exposes_what_it_does_not_consume() {
        let q = fixture("cnn_qdq_u8.onnx");
        let r = fixture("cnn_fp32.onnx");
        let l = Layered::new(&q, &r, &HashMap::new()).unwrap();
        // conv1 and bn1 are the first two layers; bn1 reads conv1's codes.
        assert_eq!(l.layer_ref(0).node, "conv1");
        assert_eq!(l.layer_ref(1).node, "bn1");
        let unit = l.unit((0, 1));
        assert_eq!(unit.outputs, vec![l.point(1).tensor.clone()]);
        assert_eq!(unit.inputs, vec!["image_QuantizeLinear_Output".to_string()]);
        match l.feed("image_QuantizeLinear_Output").unwrap() {
            Feed::Codes { reference, quant } => {
                assert_eq!(reference, "image");
                assert_eq!(quant.elem_type, 2);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(l.find("bn1"), Some(1));
        assert_eq!(l.find("relu1_out"), Some(1));
        assert_eq!(l.find("nope"), None);
    }
}
