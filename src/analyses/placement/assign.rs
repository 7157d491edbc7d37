//! Which EP ran each node of the analysed graph, from the runtime's assignment (names) and,
//! for nodes the assignment does not name, from their neighbours.

use std::collections::HashMap;

use crate::data::model::topology::Topology;
use crate::execution::exec::assignment::AssignedSubgraph;

/// The name a runtime-made node was derived from: ONNX Runtime appends `_token_N` to nodes it
/// re-creates in its layout transformation and `/duplicated` to DequantizeLinear nodes it copies
/// so that each QDQ group has its own.
pub fn base_name(name: &str) -> &str {
    let name = name.strip_suffix("/duplicated").unwrap_or(name);
    match name.rfind("_token_") {
        Some(i) if name[i + 7..].chars().all(|c| c.is_ascii_digit()) && name.len() > i + 7 => &name[..i],
        _ => name,
    }
}

/// The EP of every node of `graph` (`None` when neither the assignment nor any neighbour says),
/// and how many nodes got theirs by inference.
pub fn node_eps(graph: &Topology, assignment: &[AssignedSubgraph]) -> (Vec<Option<String>>, usize) {
    let mut exact: HashMap<&str, &str> = HashMap::new();
    let mut by_base: HashMap<(&str, &str), &str> = HashMap::new();
    for sg in assignment {
        for n in &sg.nodes {
            exact.entry(n.name.as_str()).or_insert(sg.ep.as_str());
            by_base
                .entry((base_name(&n.name), n.op_type.as_str()))
                .or_insert(sg.ep.as_str());
        }
    }
    let mut eps: Vec<Option<String>> = graph
        .nodes
        .iter()
        .map(|n| {
            exact
                .get(n.name.as_str())
                .or_else(|| by_base.get(&(n.name.as_str(), n.op_type.as_str())))
                .map(|s| s.to_string())
        })
        .collect();
    let unnamed: Vec<usize> = (0..eps.len()).filter(|&i| eps[i].is_none()).collect();
    if unnamed.is_empty() {
        return (eps, 0);
    }
    // A node the runtime fused or replaced ran where the nodes reading its outputs ran (it became
    // part of them), or else where the nodes feeding it ran.
    let producers = graph.producers();
    let consumers = graph.consumers();
    loop {
        let mut changed = false;
        for &i in &unnamed {
            if eps[i].is_some() {
                continue;
            }
            let n = &graph.nodes[i];
            let after: Vec<usize> = n
                .outputs
                .iter()
                .filter_map(|o| consumers.get(o.as_str()))
                .flatten()
                .copied()
                .collect();
            let before: Vec<usize> = n
                .inputs
                .iter()
                .filter_map(|t| producers.get(t.as_str()).copied())
                .collect();
            let agreed = |idx: &[usize]| -> Option<String> {
                let mut known = idx.iter().filter_map(|&j| eps[j].as_ref());
                let first = known.next()?;
                known.all(|e| e == first).then(|| first.clone())
            };
            if let Some(ep) = agreed(&after).or_else(|| agreed(&before)) {
                eps[i] = Some(ep);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let inferred = unnamed.iter().filter(|&&i| eps[i].is_some()).count();
    (eps, inferred)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::topology::test_node;
    use crate::execution::exec::assignment::AssignedNode;

    #[test]
    fn base_names_strip_runtime_suffixes_only() {
        assert_eq!(base_name("conv1_token_13"), "conv1");
        assert_eq!(
            base_name("conv3_out_DequantizeLinear/duplicated"),
            "conv3_out_DequantizeLinear"
        );
        assert_eq!(base_name("my_token_layer"), "my_token_layer");
        assert_eq!(base_name("x_token_"), "x_token_");
        assert_eq!(base_name("plain"), "plain");
    }

    #[test]
    fn unnamed_nodes_follow_their_consumers_then_their_producers() {
        let node = |name: &str, i: &str, o: &str| test_node(name, "Relu", &[i], &[o]);
        let graph = Topology {
            nodes: vec![node("a", "x", "a"), node("b", "a", "b"), node("c", "b", "c")],
            inputs: vec!["x".into()],
            outputs: vec!["c".into()],
            ..Default::default()
        };
        let assigned = |ep: &str, names: &[&str]| AssignedSubgraph {
            ep: ep.into(),
            nodes: names
                .iter()
                .map(|n| AssignedNode {
                    name: n.to_string(),
                    op_type: "Relu".into(),
                })
                .collect(),
        };
        // `b` was re-created as `b_token_4`; `c` is not named at all and follows its producer.
        let (eps, inferred) = node_eps(&graph, &[assigned("QNN", &["a", "b_token_4"])]);
        assert_eq!(eps, vec![Some("QNN".into()), Some("QNN".into()), Some("QNN".into())]);
        assert_eq!(inferred, 1);
    }
}
