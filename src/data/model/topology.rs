//! The dataflow skeleton of a graph: node names, op types, which tensors each node reads and
//! writes. Placement analysis and sub-model slicing need the edges, not the weights, so this is
//! small enough to travel from a worker to the audit as JSON.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::pb::{tensor_shape_proto, type_proto, GraphProto, ModelProto, ValueInfoProto};

/// One node of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GraphNode {
    pub name: String,
    pub op_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// Input tensor names; an empty name is an omitted optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// A graph's nodes in the file's order (ONNX requires topological order), its inputs, outputs
/// and constant tensors.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Topology {
    pub nodes: Vec<GraphNode>,
    /// Graph inputs that are fed at run time (initializers listed as inputs excluded).
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Initializers and outputs of `Constant` nodes: data that never crosses a device boundary
    /// at run time.
    pub constants: BTreeSet<String>,
    /// Element type and static shape of every tensor whose type the file declares (inputs,
    /// outputs, `value_info`, initializers).
    #[serde(default)]
    pub declared: BTreeMap<String, DeclaredType>,
}

/// A node's inputs, and for a node with subgraphs (`If`, `Loop`, `Scan`) the outer tensors its
/// subgraphs read: an `If` whose branches read the graph's activations depends on them, though
/// its only explicit input may be a constant condition.
fn with_outer_scope_reads(n: &super::pb::NodeProto) -> Vec<String> {
    let mut inputs = n.input.clone();
    for a in &n.attribute {
        for g in a.g.iter().chain(&a.graphs) {
            for t in outer_reads(g) {
                if !inputs.contains(&t) {
                    inputs.push(t);
                }
            }
        }
    }
    inputs
}

/// Tensors a graph's nodes (and their subgraphs) read that it neither declares nor computes.
fn outer_reads(g: &GraphProto) -> Vec<String> {
    let mut own: BTreeSet<&str> = g
        .input
        .iter()
        .filter_map(|v| v.name.as_deref())
        .chain(g.initializer.iter().filter_map(|t| t.name.as_deref()))
        .collect();
    let mut reads = Vec::new();
    for n in &g.node {
        for t in with_outer_scope_reads(n) {
            if !t.is_empty() && !own.contains(t.as_str()) && !reads.contains(&t) {
                reads.push(t);
            }
        }
        own.extend(n.output.iter().map(String::as_str));
    }
    reads
}
/// A tensor type as a file declares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeclaredType {
    /// ONNX `TensorProto.DataType` code.
    pub elem_type: i32,
    /// The shape when every dimension is a known number.
    pub shape: Option<Vec<u64>>,
}

fn declared_of(v: &ValueInfoProto) -> Option<(String, DeclaredType)> {
    let name = v.name.clone()?;
    let Some(type_proto::Value::TensorType(t)) = v.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    let shape = t.shape.as_ref().and_then(|s| {
        s.dim
            .iter()
            .map(|d| match d.value {
                Some(tensor_shape_proto::dimension::Value::DimValue(v)) if v >= 0 => Some(v as u64),
                _ => None,
            })
            .collect::<Option<Vec<u64>>>()
    });
    Some((
        name,
        DeclaredType {
            elem_type: t.elem_type?,
            shape,
        },
    ))
}

impl Topology {
    /// The main graph of a model (control-flow subgraphs are not descended into).
    pub fn of_model(model: &ModelProto) -> Topology {
        model.graph.as_ref().map(Topology::of_graph).unwrap_or_default()
    }

    /// The skeleton of one graph.
    pub fn of_graph(g: &GraphProto) -> Topology {
        let mut constants: BTreeSet<String> = g.initializer.iter().filter_map(|t| t.name.clone()).collect();
        constants.extend(
            g.sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref()?.name.clone()),
        );
        let nodes: Vec<GraphNode> = g
            .node
            .iter()
            .enumerate()
            .map(|(i, n)| GraphNode {
                name: n
                    .name
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| format!("#{i}")),
                op_type: n.op_type.clone().unwrap_or_default(),
                domain: n.domain.clone().unwrap_or_default(),
                inputs: with_outer_scope_reads(n),
                outputs: n.output.clone(),
            })
            .collect();
        for n in &nodes {
            if n.op_type == "Constant" && n.domain.is_empty() {
                constants.extend(n.outputs.iter().cloned());
            }
        }
        let mut declared: BTreeMap<String, DeclaredType> = g
            .input
            .iter()
            .chain(&g.output)
            .chain(&g.value_info)
            .filter_map(declared_of)
            .collect();
        for t in &g.initializer {
            if let (Some(name), Some(elem_type)) = (t.name.clone(), t.data_type) {
                let shape = t.dims.iter().map(|&d| u64::try_from(d).ok()).collect();
                declared.insert(name, DeclaredType { elem_type, shape });
            }
        }
        let inputs = g
            .input
            .iter()
            .filter_map(|v| v.name.clone())
            .filter(|n| !constants.contains(n))
            .collect();
        let outputs = g.output.iter().filter_map(|v| v.name.clone()).collect();
        Topology {
            nodes,
            inputs,
            outputs,
            constants,
            declared,
        }
    }

    /// The same graph without its `Constant` nodes: runtimes turn them into initializers, so
    /// they are data, not work placed on a device.
    pub fn without_constant_nodes(&self) -> Topology {
        Topology {
            nodes: self
                .nodes
                .iter()
                .filter(|n| !(n.op_type == "Constant" && n.domain.is_empty()))
                .cloned()
                .collect(),
            ..self.clone()
        }
    }

    /// Index of the node producing each tensor.
    pub fn producers(&self) -> HashMap<&str, usize> {
        let mut m = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                m.insert(o.as_str(), i);
            }
        }
        m
    }

    /// Indices of the nodes reading each tensor (each node once per tensor).
    pub fn consumers(&self) -> HashMap<&str, Vec<usize>> {
        let mut m: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for t in n.inputs.iter().filter(|t| !t.is_empty()) {
                let list = m.entry(t.as_str()).or_default();
                if list.last() != Some(&i) {
                    list.push(i);
                }
            }
        }
        m
    }

    /// Whether a tensor is computed at run time from the graph's inputs (not constant data).
    pub fn is_dynamic(&self, tensor: &str) -> bool {
        !tensor.is_empty() && !self.constants.contains(tensor)
    }

    /// Per node: whether it computes from constants alone (directly or through other such
    /// nodes), such as a QuantizeLinear of an initializer. Runtimes fold these; they do no work
    /// per inference.
    pub fn constant_nodes(&self, order: &[usize]) -> Vec<bool> {
        let producers = self.producers();
        let mut constant = vec![false; self.nodes.len()];
        for &i in order {
            constant[i] = self.nodes[i]
                .inputs
                .iter()
                .filter(|t| !t.is_empty())
                .all(|t| self.constants.contains(t) || producers.get(t.as_str()).is_some_and(|&p| constant[p]));
        }
        constant
    }

    /// Node indices in a topological order, keeping the file's order where it is one. Nodes in
    /// a cycle (an invalid graph) are appended in file order rather than lost.
    pub fn topological_order(&self) -> Vec<usize> {
        let producers = self.producers();
        let mut indegree = vec![0usize; self.nodes.len()];
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            let preds: BTreeSet<usize> = n
                .inputs
                .iter()
                .filter_map(|t| producers.get(t.as_str()).copied())
                .filter(|&p| p != i)
                .collect();
            indegree[i] = preds.len();
            for p in preds {
                next[p].push(i);
            }
        }
        // A min-heap on the file index keeps the file's order whenever it is topological.
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = indegree
            .iter()
            .enumerate()
            .filter(|(_, d)| **d == 0)
            .map(|(i, _)| std::cmp::Reverse(i))
            .collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(i);
            for &j in &next[i] {
                indegree[j] -= 1;
                if indegree[j] == 0 {
                    ready.push(std::cmp::Reverse(j));
                }
            }
        }
        if order.len() < self.nodes.len() {
            let seen: BTreeSet<usize> = order.iter().copied().collect();
            order.extend((0..self.nodes.len()).filter(|i| !seen.contains(i)));
        }
        order
    }
}

/// A default-domain node, for tests that build graphs by hand.
#[cfg(test)]
pub fn test_node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> GraphNode {
    GraphNode {
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::test_node as node;
    use super::*;

    #[test]
    fn topological_order_fixes_an_unsorted_file_and_keeps_a_sorted_one() {
        let t = Topology {
            nodes: vec![
                node("c", "Relu", &["b"], &["c"]),
                node("a", "Relu", &["x"], &["a"]),
                node("b", "Add", &["a", "w"], &["b"]),
            ],
            inputs: vec!["x".into()],
            outputs: vec!["c".into()],
            constants: ["w".to_string()].into(),
            declared: BTreeMap::new(),
        };
        assert_eq!(t.topological_order(), vec![1, 2, 0]);
        let sorted = Topology {
            nodes: vec![t.nodes[1].clone(), t.nodes[2].clone(), t.nodes[0].clone()],
            ..t.clone()
        };
        assert_eq!(sorted.topological_order(), vec![0, 1, 2]);
        assert!(!t.is_dynamic("w"));
        assert!(t.is_dynamic("a"));
        assert_eq!(t.consumers()["a"], vec![2]);
    }

    #[test]
    fn nodes_fed_only_by_constants_are_constant_through_chains() {
        let t = Topology {
            nodes: vec![
                node("q", "QuantizeLinear", &["w", "s"], &["wq"]),
                node("dq", "DequantizeLinear", &["wq", "s"], &["wf"]),
                node("add", "Add", &["x", "wf"], &["y"]),
            ],
            inputs: vec!["x".into()],
            outputs: vec!["y".into()],
            constants: ["w", "s"].iter().map(|s| s.to_string()).collect(),
            declared: BTreeMap::new(),
        };
        assert_eq!(t.constant_nodes(&t.topological_order()), vec![true, true, false]);
    }
}
