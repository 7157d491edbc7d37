//! The partitions of a target's graph as the runtime runs them: each partition an execution
//! provider compiled is one run, the nodes left to the CPU EP between two of them are one run,
//! and the runs follow each other in the order they execute. Nodes are numbered in that order, so
//! every partition is one contiguous range of positions and the crossings fall at the cuts.
//!
//! Which nodes form one compiled partition comes from the runtime's assignment when it lists
//! each compiled subgraph (the C API does). Otherwise (the verbose log names only fused nodes)
//! it is reconstructed the way ONNX Runtime's partitioner must cut a graph: a partition cannot
//! contain a node upstream and a node downstream of a node another EP runs between them (it
//! could not run as one piece), so the nodes of an EP are grouped by the set of such cutting
//! nodes among their ancestors. Each group is convex, and no grouping with fewer partitions is.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};

use super::assign::base_name;
use super::CPU_EP;
use crate::data::model::topology::Topology;
use crate::execution::exec::assignment::AssignedSubgraph;
use crate::report::compare::Partition;

/// What [`as_run`] reads about the analysed graph.
pub struct Graph<'a> {
    pub topology: &'a Topology,
    /// Each node's EP (`None`: unknown; such nodes are left out of the runs).
    pub eps: &'a [Option<String>],
    /// A topological order of the nodes.
    pub order: &'a [usize],
    pub producers: &'a HashMap<&'a str, usize>,
    pub consumers: &'a HashMap<&'a str, Vec<usize>>,
    /// Nodes that compute from constants alone.
    pub constant: &'a [bool],
}

impl Graph<'_> {
    fn preds(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.topology.nodes[i]
            .inputs
            .iter()
            .filter_map(|t| self.producers.get(t.as_str()).copied())
    }

    fn succs(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.topology.nodes[i]
            .outputs
            .iter()
            .filter_map(|t| self.consumers.get(t.as_str()))
            .flatten()
            .copied()
    }

    fn is_cpu(&self, i: usize) -> bool {
        self.eps[i].as_deref() == Some(CPU_EP)
    }
}

/// The runs of `g` in execution order. `assignment` is the runtime's list of compiled subgraphs,
/// when it has one.
pub fn as_run(g: &Graph<'_>, assignment: Option<&[AssignedSubgraph]>) -> Vec<Partition> {
    let n = g.topology.nodes.len();
    let position: Vec<usize> = {
        let mut p = vec![0; n];
        for (k, &i) in g.order.iter().enumerate() {
            p[i] = k;
        }
        p
    };
    let unit_of = assignment
        .and_then(|a| units_from_assignment(g, a))
        .unwrap_or_else(|| units_by_cuts(g));
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &i in g.order {
        if let Some(u) = unit_of[i] {
            members.entry(u).or_default().push(i);
        }
    }
    let sequence = execution_order(g, &unit_of, &members, &position);
    runs(g, &sequence, &members)
}

/// Each node's unit from the runtime's compiled subgraphs: every node of a non-CPU EP belongs to
/// the subgraph that names it (or its runtime-made copy's original), or, when none does, to that
/// of a neighbour on the same EP; every CPU node is a unit of its own. `None` when some non-CPU
/// node cannot be placed in a subgraph.
fn units_from_assignment(g: &Graph<'_>, assignment: &[AssignedSubgraph]) -> Option<Vec<Option<usize>>> {
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (k, sg) in assignment.iter().enumerate().filter(|(_, sg)| sg.ep != CPU_EP) {
        for node in &sg.nodes {
            by_name.entry(node.name.as_str()).or_insert(k);
            by_name.entry(base_name(&node.name)).or_insert(k);
        }
    }
    let n = g.topology.nodes.len();
    let mut unit: Vec<Option<usize>> = (0..n)
        .map(|i| match &g.eps[i] {
            Some(ep) if ep != CPU_EP => {
                let name = g.topology.nodes[i].name.as_str();
                by_name.get(name).or_else(|| by_name.get(base_name(name))).copied()
            }
            _ => None,
        })
        .collect();
    // Nodes the assignment does not name join a neighbour's subgraph on the same EP.
    loop {
        let mut changed = false;
        for i in 0..n {
            if unit[i].is_some() || g.eps[i].is_none() || g.is_cpu(i) {
                continue;
            }
            let same_ep = |j: &usize| g.eps[*j] == g.eps[i] && unit[*j].is_some();
            let found = g.succs(i).find(same_ep).or_else(|| g.preds(i).find(same_ep));
            if let Some(j) = found {
                unit[i] = unit[j];
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let offset = assignment.len();
    (0..n)
        .map(|i| match &g.eps[i] {
            None => Some(None),
            Some(_) if g.is_cpu(i) => Some(Some(offset + i)),
            Some(_) => unit[i].map(Some),
        })
        .collect()
}

/// Each node's unit reconstructed from the cuts: non-CPU nodes grouped by EP and by the set of
/// cutting nodes among their ancestors (nodes of another EP that have an ancestor on a non-CPU
/// EP themselves, so that something ran before them and something after); every CPU node a unit
/// of its own.
fn units_by_cuts(g: &Graph<'_>) -> Vec<Option<usize>> {
    let n = g.topology.nodes.len();
    let mut cuts: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    let mut after_accelerated = vec![false; n];
    let accelerated = |i: usize| g.eps[i].is_some() && !g.is_cpu(i);
    for &i in g.order {
        let mut mine = BTreeSet::new();
        let mut after = false;
        for p in g.preds(i) {
            mine.extend(cuts[p].iter().copied());
            // A node of another EP that ran after an accelerated node cuts this one off from
            // the nodes before it.
            if accelerated(i) && after_accelerated[p] && g.eps[p] != g.eps[i] {
                mine.insert(p);
            }
            after |= accelerated(p) || after_accelerated[p];
        }
        cuts[i] = mine;
        after_accelerated[i] = after;
    }
    let mut keys: HashMap<(&str, &BTreeSet<usize>), usize> = HashMap::new();
    (0..n)
        .map(|i| match g.eps[i].as_deref() {
            None => None,
            Some(CPU_EP) => Some(n + i),
            Some(ep) => {
                let next = keys.len();
                Some(*keys.entry((ep, &cuts[i])).or_insert(next))
            }
        })
        .collect()
}

/// The units in the order they run: a topological order of the graph with each unit contracted
/// to one node, preferring at each step the unit whose data flow starts first (a unit of
/// constants alone runs just before the first node that reads it).
fn execution_order(
    g: &Graph<'_>,
    unit_of: &[Option<usize>],
    members: &BTreeMap<usize, Vec<usize>>,
    position: &[usize],
) -> Vec<usize> {
    let priority: HashMap<usize, usize> = members
        .iter()
        .map(|(&u, m)| {
            let start = m.iter().filter(|&&i| !g.constant[i]).map(|&i| position[i]).min();
            let first_reader = m.iter().flat_map(|&i| g.succs(i)).map(|c| position[c]).min();
            (u, start.or(first_reader).unwrap_or(position[m[0]]))
        })
        .collect();
    let mut edges: HashMap<usize, HashSet<usize>> = HashMap::new();
    let mut indegree: HashMap<usize, usize> = members.keys().map(|&u| (u, 0)).collect();
    for (c, &uc) in unit_of.iter().enumerate() {
        let Some(uc) = uc else { continue };
        for p in g.preds(c) {
            match unit_of[p] {
                Some(up) if up != uc && edges.entry(up).or_default().insert(uc) => {
                    *indegree.entry(uc).or_default() += 1;
                }
                _ => {}
            }
        }
    }
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = indegree
        .iter()
        .filter(|(_, &d)| d == 0)
        .map(|(&u, _)| Reverse((priority[&u], u)))
        .collect();
    let mut sequence = Vec::with_capacity(members.len());
    while let Some(Reverse((_, u))) = ready.pop() {
        sequence.push(u);
        for &next in edges.get(&u).into_iter().flatten() {
            let d = indegree.entry(next).or_default();
            *d -= 1;
            if *d == 0 {
                ready.push(Reverse((priority[&next], next)));
            }
        }
    }
    // A grouping that is not convex cannot run as drawn; keep every node anyway.
    let mut rest: Vec<usize> = members.keys().copied().filter(|u| !sequence.contains(u)).collect();
    rest.sort_by_key(|u| priority[u]);
    sequence.extend(rest);
    sequence
}

/// The runs: each non-CPU unit one partition, consecutive CPU units one partition.
fn runs(g: &Graph<'_>, sequence: &[usize], members: &BTreeMap<usize, Vec<usize>>) -> Vec<Partition> {
    let mut grouped: Vec<(String, Vec<usize>)> = Vec::new();
    for u in sequence {
        let nodes = &members[u];
        let ep = g.eps[nodes[0]].clone().unwrap_or_default();
        match grouped.last_mut() {
            Some((last, run)) if ep == CPU_EP && *last == ep => run.extend(nodes),
            _ => grouped.push((ep, nodes.clone())),
        }
    }
    let mut next = 0;
    grouped
        .into_iter()
        .map(|(ep, nodes)| {
            let mut op_types: BTreeMap<String, usize> = BTreeMap::new();
            for &i in &nodes {
                *op_types.entry(g.topology.nodes[i].op_type.clone()).or_default() += 1;
            }
            let first_index = next;
            next += nodes.len();
            Partition {
                ep,
                nodes: nodes.len(),
                first_node: g.topology.nodes[nodes[0]].name.clone(),
                last_node: g.topology.nodes[nodes[nodes.len() - 1]].name.clone(),
                first_index,
                last_index: next - 1,
                op_types,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::topology::test_node;
    use crate::execution::exec::assignment::AssignedNode;

    /// x -> a (QNN) -> b (CPU) -> c (QNN) -> add (QNN) <- a: the residual edge a -> add makes
    /// a, c and add one connected QNN component, but they cannot run as one piece. `w` (CPU,
    /// constants only) feeds c and cuts nothing.
    fn residual() -> (Topology, Vec<Option<String>>) {
        let topology = Topology {
            nodes: vec![
                test_node("a", "Conv", &["x"], &["a"]),
                test_node("b", "Erf", &["a"], &["b"]),
                test_node("w", "DequantizeLinear", &["w_q"], &["w"]),
                test_node("c", "Mul", &["b", "w"], &["c"]),
                test_node("add", "Add", &["a", "c"], &["y"]),
            ],
            inputs: vec!["x".into()],
            outputs: vec!["y".into()],
            ..Default::default()
        };
        let ep = |e: &str| Some(e.to_string());
        let eps = vec![ep("QNN"), ep(CPU_EP), ep(CPU_EP), ep("QNN"), ep("QNN")];
        (topology, eps)
    }

    fn run_of(assignment: Option<&[AssignedSubgraph]>) -> Vec<(String, Vec<String>, usize, usize)> {
        let (topology, eps) = residual();
        let order = topology.topological_order();
        let producers = topology.producers();
        let consumers = topology.consumers();
        let constant = topology.constant_nodes(&order);
        let g = Graph {
            topology: &topology,
            eps: &eps,
            order: &order,
            producers: &producers,
            consumers: &consumers,
            constant: &constant,
        };
        as_run(&g, assignment)
            .into_iter()
            .map(|p| {
                let names: Vec<String> = p.op_types.keys().cloned().collect();
                (p.ep, names, p.first_index, p.last_index)
            })
            .collect()
    }

    #[test]
    fn a_cpu_node_between_two_accelerated_nodes_cuts_the_partition_though_a_residual_joins_them() {
        let got = run_of(None);
        assert_eq!(
            got,
            vec![
                ("QNN".to_string(), vec!["Conv".to_string()], 0, 0),
                (
                    CPU_EP.to_string(),
                    vec!["DequantizeLinear".to_string(), "Erf".to_string()],
                    1,
                    2
                ),
                ("QNN".to_string(), vec!["Add".to_string(), "Mul".to_string()], 3, 4),
            ]
        );
    }

    #[test]
    fn the_runtime_s_compiled_subgraphs_are_the_partitions_when_it_lists_them() {
        let sg = |ep: &str, names: &[&str]| AssignedSubgraph {
            ep: ep.into(),
            nodes: names
                .iter()
                .map(|n| AssignedNode {
                    name: n.to_string(),
                    op_type: String::new(),
                })
                .collect(),
        };
        // The runtime compiled `c` and `add` as two partitions.
        let listed = [
            sg("QNN", &["a"]),
            sg(CPU_EP, &["b", "w"]),
            sg("QNN", &["c"]),
            sg("QNN", &["add"]),
        ];
        let got = run_of(Some(&listed));
        let eps: Vec<&str> = got.iter().map(|(ep, ..)| ep.as_str()).collect();
        assert_eq!(eps, ["QNN", CPU_EP, "QNN", "QNN"]);
        assert_eq!((got[3].2, got[3].3), (4, 4));
    }
}
