//! Sub-models made of a chosen set of nodes: the tensors they read from outside become graph
//! inputs (typed from a probe run, so backends that need static shapes accept them) and every
//! tensor they produce that the rest of the graph reads becomes a graph output, so no node of the
//! set is dead code a runtime could drop.

use std::collections::{BTreeSet, HashMap};

use super::pb::{tensor_shape_proto, type_proto, ModelProto, TensorShapeProto, TypeProto, ValueInfoProto};

/// Element type and shape of a tensor as measured by a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasuredType {
    pub elem_type: i32,
    pub shape: Vec<usize>,
}

/// A graph input or output declaration; without a type, ONNX Runtime infers it (outputs only).
pub fn value_info(name: &str, t: Option<&MeasuredType>) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: t.map(|t| TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(t.elem_type),
                shape: Some(TensorShapeProto {
                    dim: t
                        .shape
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The model restricted to the nodes at `keep` (indices into the graph's node list); `Constant`
/// nodes and initializers stay (runtimes drop the unused ones). Returns `None` when a tensor the
/// nodes read from outside has no known type.
pub fn sub_model(
    model: &ModelProto,
    keep: &BTreeSet<usize>,
    types: &HashMap<String, MeasuredType>,
) -> Option<ModelProto> {
    let mut out = model.clone();
    let g = out.graph.as_mut()?;
    let original = model.graph.as_ref()?;
    let constants: BTreeSet<&str> = original
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .chain(
            original
                .node
                .iter()
                .filter(|n| n.op_type.as_deref() == Some("Constant"))
                .flat_map(|n| n.output.iter().map(|s| s.as_str())),
        )
        .collect();
    let is_constant_node = |i: usize| original.node[i].op_type.as_deref() == Some("Constant");
    let kept: Vec<usize> = (0..original.node.len())
        .filter(|&i| keep.contains(&i) || is_constant_node(i))
        .collect();
    let produced: BTreeSet<&str> = kept
        .iter()
        .filter(|&&i| !is_constant_node(i))
        .flat_map(|&i| original.node[i].output.iter().map(|s| s.as_str()))
        .filter(|s| !s.is_empty())
        .collect();
    let read_outside: BTreeSet<&str> = (0..original.node.len())
        .filter(|i| !keep.contains(i))
        .flat_map(|i| original.node[i].input.iter().map(|s| s.as_str()))
        .chain(original.output.iter().filter_map(|o| o.name.as_deref()))
        .collect();
    let mut inputs: Vec<&str> = Vec::new();
    for &i in kept.iter().filter(|&&i| !is_constant_node(i)) {
        for t in &original.node[i].input {
            let t = t.as_str();
            if !t.is_empty() && !constants.contains(t) && !produced.contains(t) && !inputs.contains(&t) {
                inputs.push(t);
            }
        }
    }
    let mut outputs: Vec<&str> = produced.iter().copied().filter(|t| read_outside.contains(t)).collect();
    if outputs.is_empty() {
        if let Some(&last) = kept.iter().rev().find(|&&i| !is_constant_node(i)) {
            outputs.extend(
                original.node[last]
                    .output
                    .iter()
                    .map(|s| s.as_str())
                    .filter(|s| !s.is_empty()),
            );
        }
    }
    let declared: HashMap<&str, &ValueInfoProto> = original
        .input
        .iter()
        .filter_map(|v| Some((v.name.as_deref()?, v)))
        .collect();
    g.node = kept.iter().map(|&i| original.node[i].clone()).collect();
    g.input = inputs
        .iter()
        .map(|t| match (declared.get(t), types.get(*t)) {
            (_, Some(m)) => Some(value_info(t, Some(m))),
            (Some(v), None) => Some((*v).clone()),
            (None, None) => None,
        })
        .collect::<Option<Vec<_>>>()?;
    g.output = outputs.iter().map(|t| value_info(t, types.get(*t))).collect();
    g.value_info.clear();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::pb::{GraphProto, NodeProto, TensorProto};

    fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_window_reads_its_inputs_from_typed_graph_inputs_and_exposes_what_others_read() {
        let model = ModelProto {
            graph: Some(GraphProto {
                node: vec![
                    node("a", "Relu", &["x"], &["a"]),
                    node("b", "Add", &["a", "w"], &["b"]),
                    node("c", "Relu", &["b"], &["c"]),
                    node("d", "Add", &["c", "a"], &["y"]),
                ],
                input: vec![value_info("x", None)],
                output: vec![value_info("y", None)],
                initializer: vec![TensorProto {
                    name: Some("w".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let types: HashMap<String, MeasuredType> = [(
            "a".to_string(),
            MeasuredType {
                elem_type: 1,
                shape: vec![1, 4],
            },
        )]
        .into();
        let sub = sub_model(&model, &[1, 2].into(), &types).unwrap();
        let g = sub.graph.unwrap();
        let names = |v: &[ValueInfoProto]| v.iter().map(|x| x.name.clone().unwrap()).collect::<Vec<_>>();
        assert_eq!(g.node.len(), 2);
        assert_eq!(names(&g.input), vec!["a"]);
        // `c` is read by `d`, outside; `b` only inside.
        assert_eq!(names(&g.output), vec!["c"]);
        assert!(g.input[0].r#type.is_some());
        // A window whose input has no measured type cannot be built.
        assert!(sub_model(&model, &[2].into(), &types).is_none());
    }
}
