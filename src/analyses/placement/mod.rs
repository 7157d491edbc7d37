//! Placement analysis: from a target's recorded node assignment, the graph the runtime
//! partitioned and its verbose log, work out the partitions in execution order, the tensors that
//! cross between EPs and their bytes, and which nodes fell back to the CPU, of what kind and why.

pub mod assign;
pub mod log;
pub mod runs;
pub mod sizes;
pub mod targets;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use crate::data::model::topology::Topology;
use crate::data::tensor::DType;
use crate::execution::exec::assignment::AssignedSubgraph;
use crate::report::compare::{Crossing, FallbackNode, PlacementSummary};
use assign::{base_name, node_eps};
pub use sizes::TensorSize;

/// The CPU execution provider's name, where fallback lands.
pub const CPU_EP: &str = "CPUExecutionProvider";

/// What one target's session recorded.
pub struct Recorded<'a> {
    /// The execution provider the target asked for.
    pub target_ep: &'a str,
    /// The assignment read through the API (empty when the runtime has none).
    pub assignment: &'a [AssignedSubgraph],
    /// The graph ONNX Runtime partitioned, when it was captured.
    pub runtime_graph: Option<&'a Topology>,
    /// The worker's log (verbose while the session was created, when placement was inspected).
    pub log: &'a str,
}

/// The analysis, and the model tensors whose size it needed but could not find (a probe run can
/// measure them; then analyse again).
pub struct Analysis {
    pub summary: PlacementSummary,
    pub missing_sizes: BTreeSet<String>,
}

/// One target's graph with each node's EP, and the facts about its nodes every part of the
/// analysis reads.
struct Placed<'g> {
    graph: &'g Topology,
    eps: Vec<Option<String>>,
    /// Model nodes the assignment does not name, placed from their neighbours.
    inferred_nodes: usize,
    order: Vec<usize>,
    producers: HashMap<&'g str, usize>,
    consumers: HashMap<&'g str, Vec<usize>>,
    /// Graph-input QuantizeLinear or graph-output DequantizeLinear.
    boundary: Vec<bool>,
    /// Computes from constants alone.
    constant: Vec<bool>,
    /// Made by the runtime (only known on the runtime's graph).
    inserted: Vec<bool>,
}

impl<'g> Placed<'g> {
    fn new(graph: &'g Topology, assignment: &[AssignedSubgraph], model: &Topology, runtime_graph: bool) -> Placed<'g> {
        let (eps, inferred_nodes) = node_eps(graph, assignment);
        let order = graph.topological_order();
        let model_names: HashSet<&str> = model.nodes.iter().map(|n| n.name.as_str()).collect();
        let inserted = graph
            .nodes
            .iter()
            .map(|n| {
                runtime_graph && !model_names.contains(n.name.as_str()) && !model_names.contains(base_name(&n.name))
            })
            .collect();
        let boundary = graph
            .nodes
            .iter()
            .map(|node| match node.op_type.as_str() {
                "QuantizeLinear" => node.inputs.first().is_some_and(|t| graph.inputs.contains(t)),
                "DequantizeLinear" => {
                    !node.outputs.is_empty() && node.outputs.iter().all(|t| graph.outputs.contains(t))
                }
                _ => false,
            })
            .collect();
        Placed {
            constant: graph.constant_nodes(&order),
            producers: graph.producers(),
            consumers: graph.consumers(),
            graph,
            eps,
            inferred_nodes,
            order,
            boundary,
            inserted,
        }
    }

    fn ep_of(&self, i: usize) -> &str {
        self.eps[i].as_deref().unwrap_or("unknown")
    }

    /// Nodes per EP, op types on the CPU EP (for a non-CPU target), runtime-made nodes per EP.
    fn counts(&self, cpu_target: bool) -> [BTreeMap<String, usize>; 3] {
        let (mut by_ep, mut cpu_ops, mut inserted) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for (i, node) in self.graph.nodes.iter().enumerate() {
            *by_ep.entry(self.ep_of(i).to_string()).or_default() += 1;
            if self.ep_of(i) == CPU_EP && !cpu_target {
                *cpu_ops.entry(node.op_type.clone()).or_default() += 1;
            }
            if self.inserted[i] {
                *inserted.entry(self.ep_of(i).to_string()).or_default() += 1;
            }
        }
        [by_ep, cpu_ops, inserted]
    }

    /// Tensors produced on one EP and read on another, once per consuming EP.
    fn crossings(&self, sizes: &sizes::Sizes<'_>) -> Vec<Crossing> {
        let graph = self.graph;
        let mut crossings = Vec::new();
        for &p in &self.order {
            let Some(from) = self.eps[p].as_deref() else { continue };
            for t in graph.nodes[p].outputs.iter().filter(|t| !t.is_empty()) {
                let mut by_ep: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
                for &c in self.consumers.get(t.as_str()).map(|v| v.as_slice()).unwrap_or(&[]) {
                    if let Some(to) = self.eps[c].as_deref().filter(|to| *to != from) {
                        by_ep.entry(to).or_default().push(c);
                    }
                }
                for (to, cs) in by_ep {
                    let size = sizes.of(t);
                    let touches_boundary = self.boundary[p] || cs.iter().all(|&c| self.boundary[c]);
                    crossings.push(Crossing {
                        tensor: t.clone(),
                        from_ep: from.to_string(),
                        to_ep: to.to_string(),
                        producer: graph.nodes[p].name.clone(),
                        consumers: cs.iter().map(|&c| graph.nodes[c].name.clone()).collect(),
                        dtype: size.map(|s| DType::onnx_name(s.elem_type).to_string()),
                        elements: size.map(|s| s.elements),
                        bytes: size.and_then(|s| s.bytes()),
                        kind: if touches_boundary { "boundary" } else { "mid_graph" }.into(),
                    });
                }
            }
        }
        crossings
    }

    /// Every node of a non-CPU target the CPU EP ran, classified, with the EP's logged reason.
    fn fallback(&self, rec: &Recorded<'_>) -> Vec<FallbackNode> {
        let reasons = log::rejection_reasons(rec.log);
        let inserted = |i: usize| self.inserted[i];
        let facts = NodeFacts {
            boundary: &self.boundary,
            constant: &self.constant,
            inserted: &inserted,
        };
        let graph = self.graph;
        classify_fallback(
            graph,
            &self.eps,
            rec.target_ep,
            &self.order,
            &self.producers,
            &self.consumers,
            &facts,
        )
        .into_iter()
        .map(|(i, kind, position)| {
            let name = &graph.nodes[i].name;
            FallbackNode {
                name: name.clone(),
                op_type: graph.nodes[i].op_type.clone(),
                kind: kind.into(),
                position: position.into(),
                reason: reasons.get(name).or_else(|| reasons.get(base_name(name))).cloned(),
            }
        })
        .collect()
    }
}

/// Where the assignment comes from (`ort_api`, else the verbose log's "Node placements"), the
/// graph it names (`runtime` or `model`), and for a logged one the fused nodes per EP.
type Choice = (
    &'static str,
    Vec<AssignedSubgraph>,
    Topology,
    &'static str,
    HashMap<String, usize>,
);

fn choose(rec: &Recorded<'_>, model: &Topology) -> Option<Choice> {
    let (source, mut assignment) = if !rec.assignment.is_empty() {
        ("ort_api", rec.assignment.to_vec())
    } else {
        let logged = log::logged_placement(rec.log);
        if logged.is_empty() {
            return None;
        }
        ("ort_log", logged)
    };
    // The runtime's graph is only usable with the API's names: the log names fused nodes.
    let (graph, graph_kind) = match rec.runtime_graph {
        Some(g) if source == "ort_api" && !g.nodes.is_empty() => (g.without_constant_nodes(), "runtime"),
        _ => (model.without_constant_nodes(), "model"),
    };
    let fused_count = if source == "ort_log" {
        complete_logged(&mut assignment, &graph)
    } else {
        HashMap::new()
    };
    Some((source, assignment, graph, graph_kind, fused_count))
}

/// Analyses one target's placement against `model` (the audited model as fed, input shapes
/// pinned), with tensor sizes measured by a probe in `probed`. `None` when the runtime recorded
/// nothing at all.
pub fn analyze(rec: &Recorded<'_>, model: &Topology, probed: &HashMap<String, TensorSize>) -> Option<Analysis> {
    let (source, assignment, graph, graph_kind, fused_count) = choose(rec, model)?;
    let placed = Placed::new(&graph, &assignment, model, graph_kind == "runtime");
    let cpu_target = rec.target_ep == CPU_EP;
    let [nodes_by_ep, cpu_op_types, inserted_by_ep] = placed.counts(cpu_target);
    let runs_graph = runs::Graph {
        topology: &graph,
        eps: &placed.eps,
        order: &placed.order,
        producers: &placed.producers,
        consumers: &placed.consumers,
        constant: &placed.constant,
    };
    let partitions = runs::as_run(&runs_graph, (source == "ort_api").then_some(assignment.as_slice()));
    let ep_partitions = if cpu_target {
        partitions.iter().filter(|p| p.ep == CPU_EP).count()
    } else if source == "ort_api" {
        assignment.iter().filter(|sg| sg.ep == rec.target_ep).count()
    } else {
        fused_count.get(rec.target_ep).copied().unwrap_or(0)
    };
    let sizes = sizes::Sizes::new(&graph, model, probed);
    let crossings = placed.crossings(&sizes);
    let total = |only_mid: bool| -> Option<u64> {
        crossings
            .iter()
            .filter(|c| !only_mid || c.kind == "mid_graph")
            .map(|c| c.bytes)
            .sum()
    };
    let fallback = if cpu_target { Vec::new() } else { placed.fallback(rec) };
    let summary = PlacementSummary {
        source: source.into(),
        graph: graph_kind.into(),
        target_ep_nodes: nodes_by_ep.get(rec.target_ep).copied().unwrap_or(0),
        total_nodes: graph.nodes.len(),
        nodes_by_ep,
        cpu_op_types,
        ep_partitions,
        partitions,
        crossing_count: crossings.len(),
        crossing_bytes: total(false),
        mid_graph_crossing_count: crossings.iter().filter(|c| c.kind == "mid_graph").count(),
        mid_graph_crossing_bytes: total(true),
        compute_fallback_nodes: fallback.iter().filter(|f| f.kind == "compute").count(),
        crossings,
        fallback,
        inserted_by_ep,
        inferred_nodes: placed.inferred_nodes,
    };
    let missing_sizes = sizes.missing.into_inner();
    Some(Analysis { summary, missing_sizes })
}

/// The log lists an EP's compiled partitions as fused nodes, not the nodes inside them: every
/// graph node the log does not name belongs to the one EP that has fused nodes. Returns the
/// number of fused nodes per EP.
fn complete_logged(assignment: &mut [AssignedSubgraph], graph: &Topology) -> HashMap<String, usize> {
    let names: HashSet<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut fused: HashMap<String, usize> = HashMap::new();
    for sg in assignment.iter() {
        let count = sg.nodes.iter().filter(|n| !names.contains(n.name.as_str())).count();
        if count > 0 {
            fused.insert(sg.ep.clone(), count);
        }
    }
    if fused.len() == 1 {
        let named: HashSet<String> = assignment
            .iter()
            .flat_map(|sg| sg.nodes.iter().map(|n| n.name.clone()))
            .collect();
        let ep = fused.keys().next().cloned().unwrap_or_default();
        if let Some(sg) = assignment.iter_mut().find(|sg| sg.ep == ep) {
            for node in graph.nodes.iter().filter(|n| !named.contains(&n.name)) {
                sg.nodes.push(crate::execution::exec::assignment::AssignedNode {
                    name: node.name.clone(),
                    op_type: node.op_type.clone(),
                });
            }
        }
    }
    fused
}

/// What the analysis already knows of each node, per node index.
struct NodeFacts<'a> {
    /// Graph-input QuantizeLinear or graph-output DequantizeLinear.
    boundary: &'a [bool],
    /// Computes from constants alone.
    constant: &'a [bool],
    /// Made by the runtime.
    inserted: &'a dyn Fn(usize) -> bool,
}

/// Kind and position of every CPU node of a non-CPU target, in execution order.
fn classify_fallback(
    graph: &Topology,
    eps: &[Option<String>],
    target_ep: &str,
    order: &[usize],
    producers: &HashMap<&str, usize>,
    consumers: &HashMap<&str, Vec<usize>>,
    facts: &NodeFacts<'_>,
) -> Vec<(usize, &'static str, &'static str)> {
    let n = graph.nodes.len();
    let on_target = |i: usize| eps[i].as_deref() == Some(target_ep);
    let preds = |i: usize| -> Vec<usize> {
        graph.nodes[i]
            .inputs
            .iter()
            .filter_map(|t| producers.get(t.as_str()).copied())
            .collect()
    };
    // Shape arithmetic (Shape -> Gather -> Concat -> Reshape's shape input) is kept on the CPU
    // by ONNX Runtime on purpose; nodes reading only constants are folded or cheap.
    let mut shape = vec![false; n];
    let mut after_target = vec![false; n];
    for &i in order {
        let node = &graph.nodes[i];
        let dynamic: Vec<&String> = node.inputs.iter().filter(|t| graph.is_dynamic(t)).collect();
        shape[i] = matches!(node.op_type.as_str(), "Shape" | "Size")
            || (!dynamic.is_empty()
                && dynamic
                    .iter()
                    .all(|t| producers.get(t.as_str()).is_some_and(|&p| shape[p])));
        after_target[i] = preds(i).iter().any(|&p| on_target(p) || after_target[p]);
    }
    let mut before_target = vec![false; n];
    for &i in order.iter().rev() {
        before_target[i] = graph.nodes[i]
            .outputs
            .iter()
            .filter_map(|t| consumers.get(t.as_str()))
            .flatten()
            .any(|&c| on_target(c) || before_target[c]);
    }
    order
        .iter()
        .copied()
        .filter(|&i| eps[i].as_deref() == Some(CPU_EP))
        .map(|i| {
            let node = &graph.nodes[i];
            let kind = if facts.boundary[i] {
                "boundary"
            } else if shape[i] {
                "shape"
            } else if facts.constant[i] {
                "constant"
            } else if (facts.inserted)(i) {
                "inserted"
            } else if matches!(node.op_type.as_str(), "QuantizeLinear" | "DequantizeLinear") {
                "quantization"
            } else {
                "compute"
            };
            let position = match (after_target[i], before_target[i]) {
                (true, true) => "middle",
                (false, true) => "head",
                (true, false) => "tail",
                (false, false) => "detached",
            };
            (i, kind, position)
        })
        .collect()
}

/// A target whose execution provider took no node ran entirely on the CPU: that is a failure of
/// the target, not a result for it.
pub fn silent_fallback(summary: &PlacementSummary, ep: &str, log: &Path) -> Option<String> {
    (ep != "CPUExecutionProvider" && summary.target_ep_nodes == 0 && summary.total_nodes > 0).then(|| {
        let why = crate::execution::exec::log::first_logged_error(log)
            .map(|e| format!("; the runtime logged: {e}"))
            .unwrap_or_default();
        format!(
            "{ep} took none of the {} nodes: the whole graph fell back to the CPU execution provider{why}",
            summary.total_nodes
        )
    })
}
