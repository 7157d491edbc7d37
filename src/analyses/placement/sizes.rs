//! The size of a tensor that crosses between EPs: from the types a file declares, from a CPU
//! run of the model that reported the shapes (the probe), or, for tensors the runtime made,
//! through the shape-preserving nodes it inserted (a layout Transpose or a re-created Q/DQ has
//! as many elements as its input).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use super::assign::base_name;
use crate::data::model::topology::{DeclaredType, Topology};

/// Element type and count of one tensor at the audited input shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorSize {
    /// ONNX `TensorProto.DataType` code.
    pub elem_type: i32,
    pub elements: u64,
}

impl TensorSize {
    /// Bytes of one instance, rounding sub-byte types up; `None` for an unknown element type.
    pub fn bytes(&self) -> Option<u64> {
        let bits: u64 = match self.elem_type {
            2 | 3 | 9 | 17..=20 | 23 => 8,
            4 | 5 | 10 | 16 => 16,
            1 | 6 | 12 => 32,
            7 | 11 | 13 => 64,
            21 | 22 | 25 | 26 => 4,
            _ => return None,
        };
        Some((self.elements * bits).div_ceil(8))
    }
}

fn of_declared(d: &DeclaredType) -> Option<TensorSize> {
    Some(TensorSize {
        elem_type: d.elem_type,
        elements: d.shape.as_ref()?.iter().product(),
    })
}

/// Ops whose first output has exactly as many elements as their first input.
const SAME_ELEMENTS: &[&str] = &[
    "Transpose",
    "QuantizeLinear",
    "DequantizeLinear",
    "Identity",
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "Abs",
    "Neg",
    "LeakyRelu",
    "HardSigmoid",
    "HardSwish",
    "Softmax",
];

/// Resolves tensor sizes of an analysed graph (the runtime's or the model's own), remembering
/// the model tensors it needed and could not size, so that a probe can measure them.
pub struct Sizes<'a> {
    graph: &'a Topology,
    model: &'a Topology,
    probed: &'a HashMap<String, TensorSize>,
    graph_producers: HashMap<&'a str, usize>,
    model_nodes: HashMap<&'a str, usize>,
    model_producers: HashMap<&'a str, usize>,
    /// Model tensors whose size was needed and is not known.
    pub missing: RefCell<BTreeSet<String>>,
}

impl<'a> Sizes<'a> {
    pub fn new(graph: &'a Topology, model: &'a Topology, probed: &'a HashMap<String, TensorSize>) -> Sizes<'a> {
        Sizes {
            graph,
            model,
            probed,
            graph_producers: graph.producers(),
            model_nodes: model
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect(),
            model_producers: model.producers(),
            missing: RefCell::new(BTreeSet::new()),
        }
    }

    /// The size of `tensor` of the analysed graph, if it can be known.
    pub fn of(&self, tensor: &str) -> Option<TensorSize> {
        self.resolve(tensor, 0)
    }

    fn known(&self, tensor: &str) -> Option<TensorSize> {
        self.graph
            .declared
            .get(tensor)
            .and_then(of_declared)
            .or_else(|| self.model.declared.get(tensor).and_then(of_declared))
            .or_else(|| self.probed.get(tensor).copied())
    }

    fn elem_type_of(&self, tensor: &str) -> Option<i32> {
        self.graph
            .declared
            .get(tensor)
            .or_else(|| self.model.declared.get(tensor))
            .map(|d| d.elem_type)
    }

    fn resolve(&self, tensor: &str, depth: usize) -> Option<TensorSize> {
        if let Some(s) = self.known(tensor) {
            return Some(s);
        }
        if depth > 64 {
            return None;
        }
        if let Some(&p) = self.graph_producers.get(tensor) {
            let node = &self.graph.nodes[p];
            let index = node.outputs.iter().position(|o| o == tensor).unwrap_or(0);
            // A node the runtime kept or re-created computes what the model's node computed,
            // perhaps in another layout: same element type, same element count.
            let model_node = self
                .model_nodes
                .get(node.name.as_str())
                .or_else(|| self.model_nodes.get(base_name(&node.name)))
                .map(|&i| &self.model.nodes[i])
                .filter(|m| m.op_type == node.op_type);
            if let Some(m) = model_node {
                if let Some(t) = m.outputs.get(index).filter(|t| t.as_str() != tensor) {
                    if let Some(s) = self.known(t) {
                        return Some(s);
                    }
                    self.missing.borrow_mut().insert(t.clone());
                }
            }
            if index == 0 && SAME_ELEMENTS.contains(&node.op_type.as_str()) {
                let input = self.resolve(node.inputs.first()?, depth + 1)?;
                let elem_type = match node.op_type.as_str() {
                    // ONNX: the zero point's type, uint8 without one; the scale's type.
                    "QuantizeLinear" => node
                        .inputs
                        .get(2)
                        .filter(|z| !z.is_empty())
                        .and_then(|z| self.elem_type_of(z))
                        .unwrap_or(2),
                    "DequantizeLinear" => node.inputs.get(1).and_then(|s| self.elem_type_of(s)).unwrap_or(1),
                    _ => input.elem_type,
                };
                return Some(TensorSize {
                    elem_type,
                    elements: input.elements,
                });
            }
        }
        if self.model_producers.contains_key(tensor) {
            self.missing.borrow_mut().insert(tensor.to_string());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::topology::test_node as node;

    #[test]
    fn runtime_tensors_are_sized_through_renamed_and_inserted_nodes() {
        // Model: conv -> y_q (QuantizeLinear to uint8) -> y_dq -> y. The runtime re-created the
        // DQ and inserted a transpose and a Q in front of it.
        let model = Topology {
            nodes: vec![
                node("conv", "Conv", &["x", "w"], &["c"]),
                node("y_q", "QuantizeLinear", &["c", "s", "zp"], &["yq"]),
                node("y_dq", "DequantizeLinear", &["yq", "s", "zp"], &["y"]),
            ],
            inputs: vec!["x".into()],
            outputs: vec!["y".into()],
            constants: ["w", "s", "zp"].iter().map(|s| s.to_string()).collect(),
            declared: [
                (
                    "y".to_string(),
                    DeclaredType {
                        elem_type: 1,
                        shape: Some(vec![1, 8, 4, 4]),
                    },
                ),
                (
                    "zp".to_string(),
                    DeclaredType {
                        elem_type: 2,
                        shape: Some(vec![]),
                    },
                ),
            ]
            .into(),
        };
        let runtime = Topology {
            nodes: vec![
                node("conv_token_3", "Conv", &["x", "w"], &["conv"]),
                node("y_dq", "DequantizeLinear", &["q", "s", "zp"], &["y_dq_nhwc"]),
                node("Transpose_token_9", "Transpose", &["y_dq_nhwc"], &["t"]),
                node("QuantizeLinear_token_10", "QuantizeLinear", &["t", "s", "zp"], &["t_q"]),
            ],
            ..Default::default()
        };
        let probed = HashMap::new();
        let sizes = Sizes::new(&runtime, &model, &probed);
        let s = sizes.of("t_q").unwrap();
        assert_eq!((s.elem_type, s.elements, s.bytes()), (2, 128, Some(128)));
        assert_eq!(sizes.of("t").unwrap().bytes(), Some(512));
        // The conv's output is not declared anywhere: the probe must measure the model's `c`.
        assert_eq!(sizes.of("conv"), None);
        assert!(sizes.missing.borrow().contains("c"));
    }

    #[test]
    fn sub_byte_types_round_up() {
        let s = TensorSize {
            elem_type: 22,
            elements: 3,
        };
        assert_eq!(s.bytes(), Some(2));
    }
}
