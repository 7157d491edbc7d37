//! The models a per-layer audit runs: the audited model with chosen tensors exposed as extra
//! (untyped: ONNX Runtime infers their types) outputs, a prefix cut at one tensor for bisection,
//! and "isolation" models in which each layer reads golden inputs from graph inputs of its own.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::data::model::pb::{GraphProto, ModelProto, NodeProto};
use crate::data::model::slice::{value_info, MeasuredType};
use crate::data::model::topology::Topology;

/// The model with `taps` added as graph outputs after its own outputs, which stay first and in
/// place (the final outputs of a tapped run are checked against the untapped run's).
/// Graph inputs are never added: a runtime may hand an input back as an output without a copy.
pub fn tapped(model: &ModelProto, taps: &[String]) -> ModelProto {
    let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Rewrite);
    let mut out = model.clone();
    if let Some(g) = out.graph.as_mut() {
        let mut present: BTreeSet<String> = g.output.iter().chain(&g.input).filter_map(|o| o.name.clone()).collect();
        for t in taps {
            if present.insert(t.clone()) {
                g.output.push(value_info(t, None));
            }
        }
    }
    out
}

/// The nodes that `tensor` depends on, as a model whose only output is `tensor`: the graph cut
/// there, with the initializers its nodes read.
pub fn prefix(model: &ModelProto, tensor: &str) -> Option<ModelProto> {
    let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Rewrite);
    let mut out = model.clone();
    let g = out.graph.as_mut()?;
    let topo = Topology::of_graph(g);
    let producers = topo.producers();
    let mut keep = BTreeSet::new();
    let mut stack = vec![tensor.to_string()];
    while let Some(t) = stack.pop() {
        if let Some(&p) = producers.get(t.as_str()) {
            if keep.insert(p) {
                stack.extend(topo.nodes[p].inputs.iter().filter(|s| !s.is_empty()).cloned());
            }
        }
    }
    if keep.is_empty() && !topo.inputs.iter().any(|i| i == tensor) {
        return None;
    }
    let nodes = std::mem::take(&mut g.node);
    g.node = nodes
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, n)| n)
        .collect();
    // Every graph input stays, used or not: the samples fed name them all.
    g.output = vec![value_info(tensor, None)];
    g.value_info.clear();
    drop_unused_initializers(g);
    Some(out)
}

/// Tensors every path from the main graph input to the graph outputs goes through, in
/// execution order: cutting the graph at one of them splits the model's main flow in two.
/// Computed from the live set: right after such a tensor is produced, it is the only run-time
/// tensor still needed that the main input reaches. The main input is the one most nodes read
/// (directly or not): side inputs such as a transformer's attention mask reach every layer and
/// would otherwise leave no cut at all.
pub fn cut_tensors(topo: &Topology) -> Vec<String> {
    let order = topo.topological_order();
    let reached = main_flow(topo, &order);
    let constant: Vec<bool> = topo
        .constant_nodes(&order)
        .into_iter()
        .zip(&reached)
        .map(|(c, &r)| c || !r)
        .collect();
    // Last position at which each dynamic tensor is read (graph outputs: read at the end).
    let mut last_use: HashMap<&str, usize> = HashMap::new();
    for (k, &i) in order.iter().enumerate() {
        for t in topo.nodes[i].inputs.iter().filter(|t| topo.is_dynamic(t)) {
            last_use.insert(t.as_str(), k);
        }
    }
    for o in &topo.outputs {
        last_use.insert(o.as_str(), usize::MAX);
    }
    let main = main_input(topo, &order);
    let mut live: BTreeSet<&str> = main.into_iter().filter(|t| last_use.contains_key(t)).collect();
    let mut cuts = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        live.retain(|t| last_use.get(t).is_some_and(|&u| u > k));
        if constant[i] {
            continue;
        }
        for o in topo.nodes[i].outputs.iter().filter(|o| !o.is_empty()) {
            if last_use.get(o.as_str()).is_some_and(|&u| u > k) {
                live.insert(o.as_str());
            }
        }
        if let [only] = live.iter().copied().collect::<Vec<_>>().as_slice() {
            if topo.nodes[i].outputs.iter().any(|o| o == only) {
                cuts.push(only.to_string());
            }
        }
    }
    cuts
}

/// Nodes each graph input reaches, per input.
fn reached_by(topo: &Topology, order: &[usize], input: &str) -> Vec<bool> {
    let mut tensors: BTreeSet<&str> = BTreeSet::from([input]);
    let mut reached = vec![false; topo.nodes.len()];
    for &i in order {
        if topo.nodes[i].inputs.iter().any(|t| tensors.contains(t.as_str())) {
            reached[i] = true;
            tensors.extend(topo.nodes[i].outputs.iter().map(String::as_str));
        }
    }
    reached
}

/// The graph input that reaches the most nodes (ties: the first listed).
fn main_input<'a>(topo: &'a Topology, order: &[usize]) -> Option<&'a str> {
    topo.inputs
        .iter()
        .map(|t| (t.as_str(), reached_by(topo, order, t).iter().filter(|&&r| r).count()))
        .fold(None, |best: Option<(&str, usize)>, (t, n)| match best {
            Some((_, m)) if m >= n => best,
            _ => Some((t, n)),
        })
        .map(|(t, _)| t)
}

/// Whether the main input reaches each node (every node when the graph has no input).
fn main_flow(topo: &Topology, order: &[usize]) -> Vec<bool> {
    match main_input(topo, order) {
        Some(t) => reached_by(topo, order, t),
        None => vec![true; topo.nodes.len()],
    }
}

/// One layer run alone: the nodes of its QDQ group, reading every run-time input from a graph
/// input of its own.
#[derive(Debug, Clone)]
pub struct Unit {
    /// Node indices in the audited graph (the layer's node, the DequantizeLinear nodes it
    /// reads, its QuantizeLinear, and the constant-only nodes they need).
    pub nodes: BTreeSet<usize>,
    /// Run-time tensors the unit reads (names in the audited graph).
    pub inputs: Vec<String>,
    /// Tensors it must expose (names in the audited graph): the point's tensor, and for the
    /// baseline the float value before quantization.
    pub outputs: Vec<String>,
}

/// What building units needs from the audited graph, computed once per audit.
pub struct GraphIndex {
    pub topo: Topology,
    constant: Vec<bool>,
    producers: HashMap<String, usize>,
}

impl GraphIndex {
    /// Indexes one graph.
    pub fn of(graph: &GraphProto) -> GraphIndex {
        let topo = Topology::of_graph(graph);
        let constant = topo.constant_nodes(&topo.topological_order());
        let producers = topo.producers().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        GraphIndex {
            topo,
            constant,
            producers,
        }
    }

    /// The unit of a window of layers: each layer's node and QuantizeLinear (if any), the
    /// DequantizeLinear nodes feeding those nodes, and every constant-only node they read. A
    /// window of one layer is the layer alone.
    pub fn unit(&self, layers: &[(usize, Option<usize>)], outputs: Vec<String>) -> Unit {
        let topo = &self.topo;
        let mut nodes: BTreeSet<usize> = BTreeSet::new();
        for &(node, q) in layers {
            nodes.insert(node);
            nodes.extend(q);
            for t in &topo.nodes[node].inputs {
                if let Some(&p) = self.producers.get(t) {
                    if topo.nodes[p].op_type == "DequantizeLinear" && p != node {
                        nodes.insert(p);
                    }
                }
            }
        }
        // Constant-only ancestors (weight QuantizeLinear -> DequantizeLinear chains, Constant
        // nodes).
        let mut stack: Vec<usize> = nodes.iter().copied().collect();
        while let Some(n) = stack.pop() {
            for t in &topo.nodes[n].inputs {
                if let Some(&p) = self.producers.get(t) {
                    if self.constant[p] && nodes.insert(p) {
                        stack.push(p);
                    }
                }
            }
        }
        let produced: BTreeSet<&str> = nodes
            .iter()
            .flat_map(|&n| topo.nodes[n].outputs.iter().map(|s| s.as_str()))
            .collect();
        let mut inputs: Vec<String> = Vec::new();
        for &n in &nodes {
            for t in &topo.nodes[n].inputs {
                if topo.is_dynamic(t) && !produced.contains(t.as_str()) && !inputs.contains(t) {
                    inputs.push(t.clone());
                }
            }
        }
        Unit { nodes, inputs, outputs }
    }
}

/// The name of a unit's copy of a tensor in the isolation model.
pub fn unit_name(k: usize, tensor: &str) -> String {
    format!("u{k}/{tensor}")
}

/// One model holding every unit side by side, each with its tensors renamed `u{k}/...` (weights
/// shared): one session per target for a whole chunk of layers. Returns `None` when an input
/// has no known type.
pub fn isolation_model(
    model: &ModelProto,
    units: &[(usize, Unit)],
    types: &HashMap<String, MeasuredType>,
) -> Option<ModelProto> {
    let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Rewrite);
    let mut out = model.clone();
    let original = model.graph.as_ref()?;
    let g = out.graph.as_mut()?;
    let initializers: BTreeSet<&str> = original.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
    let mut nodes: Vec<NodeProto> = Vec::new();
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for (k, u) in units {
        let rename = |t: &String| {
            if t.is_empty() || initializers.contains(t.as_str()) {
                t.clone()
            } else {
                unit_name(*k, t)
            }
        };
        for &n in &u.nodes {
            let mut node = original.node[n].clone();
            // Unnamed nodes get their index: ONNX Runtime refuses two nodes of one name.
            let name = node
                .name
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("#{n}"));
            node.name = Some(unit_name(*k, &name));
            node.input = node.input.iter().map(rename).collect();
            node.output = node.output.iter().map(rename).collect();
            nodes.push(node);
        }
        for t in &u.inputs {
            inputs.push(value_info(&unit_name(*k, t), Some(types.get(t)?)));
        }
        outputs.extend(
            u.outputs
                .iter()
                .filter(|t| !u.inputs.contains(t))
                .map(|t| value_info(&unit_name(*k, t), None)),
        );
    }
    g.node = nodes;
    g.input = inputs;
    g.output = outputs;
    g.value_info.clear();
    drop_unused_initializers(g);
    Some(out)
}

/// Removes the initializers no node (nor control-flow subgraph) reads and no graph input or
/// output names. A graph cut out of a model keeps only some of its nodes, and ONNX Runtime
/// refuses a model of IR version 3 with an initializer nothing refers to ("Graph ctor should
/// have created NodeArg for initializer"); the weights of the dropped nodes are also not worth
/// writing again for every rewritten model.
pub fn drop_unused_initializers(g: &mut GraphProto) {
    fn read_by(g: &GraphProto, used: &mut HashSet<String>) {
        for n in &g.node {
            used.extend(n.input.iter().filter(|t| !t.is_empty()).cloned());
            for a in &n.attribute {
                for sub in a.g.iter().chain(&a.graphs) {
                    read_by(sub, used);
                }
            }
        }
    }
    let mut used = HashSet::new();
    read_by(g, &mut used);
    used.extend(g.input.iter().chain(&g.output).filter_map(|v| v.name.clone()));
    g.initializer
        .retain(|t| t.name.as_ref().is_some_and(|n| used.contains(n)));
    g.sparse_initializer.retain(|s| {
        s.values
            .as_ref()
            .and_then(|v| v.name.as_ref())
            .is_some_and(|n| used.contains(n))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::topology::test_node;

    fn topo(nodes: Vec<crate::data::model::topology::GraphNode>, inputs: &[&str], outputs: &[&str]) -> Topology {
        Topology {
            nodes,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn cuts_are_the_tensors_every_path_goes_through() {
        // x -> a -> (b, c) -> add -> d -> y: a residual block; b and c are not cuts.
        let t = topo(
            vec![
                test_node("a", "Relu", &["x"], &["a"]),
                test_node("b", "Relu", &["a"], &["b"]),
                test_node("c", "Relu", &["a"], &["c"]),
                test_node("add", "Add", &["b", "c"], &["s"]),
                test_node("d", "Relu", &["s"], &["y"]),
            ],
            &["x"],
            &["y"],
        );
        assert_eq!(cut_tensors(&t), vec!["a", "s", "y"]);
        // A skip connection around b: b's output is not a cut, `a` is live past it.
        let skip = topo(
            vec![
                test_node("a", "Relu", &["x"], &["a"]),
                test_node("b", "Relu", &["a"], &["b"]),
                test_node("add", "Add", &["a", "b"], &["y"]),
            ],
            &["x"],
            &["y"],
        );
        assert_eq!(cut_tensors(&skip), vec!["a", "y"]);
    }
}
