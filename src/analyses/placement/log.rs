//! What a worker's verbose ONNX Runtime log says about placement: why the EP rejected nodes
//! (QNN's "Validation FAILED ... REASON" blocks) and ONNX Runtime's own "Node placements" list,
//! which is the only placement record of runtimes older than the assignment API.

use std::collections::BTreeMap;

use crate::execution::exec::assignment::{AssignedNode, AssignedSubgraph};

/// Why each node was rejected, by node name (distinct reasons joined with "; ").
pub fn rejection_reasons(log: &str) -> BTreeMap<String, String> {
    let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut block: Option<Vec<String>> = None;
    for line in log.lines() {
        let body = line.trim();
        if line.contains("Validation FAILED for") {
            block = Some(Vec::new());
            continue;
        }
        let Some(names) = block.as_mut() else { continue };
        if body.is_empty() || line.contains("[V:") || line.contains("[I:") || line.contains("[W:") {
            block = None;
            continue;
        }
        if let Some(rest) = body.strip_prefix("Operator type:") {
            if let Some((_, after)) = rest.split_once("Node name:") {
                let name = after.split(" Node index:").next().unwrap_or(after).trim();
                names.push(name.to_string());
            }
        } else if let Some(reason) = body.strip_prefix("REASON :").or_else(|| body.strip_prefix("REASON:")) {
            let reason = separate_sentences(reason.trim());
            for n in names.iter() {
                let list = reasons.entry(n.clone()).or_default();
                if !list.contains(&reason) {
                    list.push(reason.clone());
                }
            }
        }
    }
    reasons.into_iter().map(|(k, v)| (k, v.join("; "))).collect()
}

/// ONNX Runtime's QNN EP builds some reasons from two sentences without a space between them
/// ("...not supported by QNN EP.Erf node `x` will not be assigned..."): a period that ends a word
/// and is followed by a capital letter starts a new sentence.
fn separate_sentences(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    let chars: Vec<char> = text.chars().collect();
    for (k, &c) in chars.iter().enumerate() {
        out.push(c);
        let ends_word = k >= 2 && chars[k - 1].is_alphabetic() && chars[k - 2].is_alphabetic();
        if c == '.' && ends_word && chars.get(k + 1).is_some_and(|n| n.is_uppercase()) {
            out.push(' ');
        }
    }
    out
}

/// ONNX Runtime's "Node placements" list (verbose level): per EP, the nodes as `(op type, name)`.
/// Nodes an EP compiled appear as one fused node per partition.
pub fn logged_placement(log: &str) -> Vec<AssignedSubgraph> {
    let mut out: Vec<AssignedSubgraph> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        if !line.contains("VerifyEachNodeIsAssignedToAnEp]") {
            current = None;
            continue;
        }
        let msg = line
            .split_once("VerifyEachNodeIsAssignedToAnEp]")
            .map(|(_, m)| m)
            .unwrap_or("");
        if let Some(rest) = msg.split_once("placed on [").map(|(_, r)| r) {
            let ep = rest.split(']').next().unwrap_or("").to_string();
            out.push(AssignedSubgraph { ep, nodes: Vec::new() });
            current = Some(out.len() - 1);
        } else if let (Some(i), Some((op, name))) = (current, msg.trim().split_once(" (")) {
            out[i].nodes.push(AssignedNode {
                name: name.strip_suffix(')').unwrap_or(name).to_string(),
                op_type: op.to_string(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as ONNX Runtime 1.31 with the QNN EP 2.7 writes them (one real log, shortened).
    const LOG: &str = "\
2026-11-22 07:43:30.390085402 [V:onnxruntime:, qnn_execution_provider.cc:1713 LogNodeSupport] Validation FAILED for 1 nodes in OrtNodeUnit (QuantizeLinear) :
\tOperator type: QuantizeLinear Node name: x_QuantizeLinear Node index: 2
\tREASON : QNN EP is configured to not take Q nodes that consume a graph input.

2026-11-22 07:43:30.390101806 [V:onnxruntime:, qnn_execution_provider.cc:1713 LogNodeSupport] Validation PASSED for 4 nodes in OrtNodeUnit (Conv) :
\tOperator type: DequantizeLinear Node name: x_DequantizeLinear Node index: 3

2026-11-22 07:43:30.392299975 [V:onnxruntime:, qnn_execution_provider.cc:1713 LogNodeSupport] Validation FAILED for 2 nodes in OrtNodeUnit (Celu) :
\tOperator type: Celu Node name: mid Node index: 7
\tOperator type: DequantizeLinear Node name: mid_dq Node index: 8
\tREASON : Operators of type `Celu` are not supported by QNN EP.Celu node `mid` will not be assigned to QNN EP.
2026-11-22 07:43:30.462761888 [V:onnxruntime:, session_state.cc:1578 VerifyEachNodeIsAssignedToAnEp] Node placements
2026-11-22 07:43:30.462766545 [V:onnxruntime:, session_state.cc:1584 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [QNNExecutionProvider]. Number of nodes: 2
2026-11-22 07:43:30.462770310 [V:onnxruntime:, session_state.cc:1586 VerifyEachNodeIsAssignedToAnEp]   QNNExecutionProvider_1_2 (QNNExecutionProvider_QNNExecutionProvider_1_2_0)
2026-11-22 07:43:30.462776209 [V:onnxruntime:, session_state.cc:1584 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 1
2026-11-22 07:43:30.462784492 [V:onnxruntime:, session_state.cc:1586 VerifyEachNodeIsAssignedToAnEp]   Celu (mid)
\u{1b}[0;93m2026-11-22 07:43:30.462789749 [W:onnxruntime:, session_state.cc:1598 VerifyEachNodeIsAssignedToAnEp] Some nodes were not assigned
2026-11-22 07:43:30.462812944 [V:onnxruntime:, session_state.cc:193 CreateGraphInfo] SaveMLValueNameIndexMapping
";

    #[test]
    fn reasons_are_read_per_node_and_passed_units_are_ignored() {
        let r = rejection_reasons(LOG);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(
            r["x_QuantizeLinear"],
            "QNN EP is configured to not take Q nodes that consume a graph input."
        );
        // One message of two sentences the runtime glued together, separated again.
        assert_eq!(
            r["mid"],
            "Operators of type `Celu` are not supported by QNN EP. Celu node `mid` will not be assigned to QNN EP."
        );
        assert_eq!(r["mid"], r["mid_dq"]);
        assert!(!r.contains_key("x_DequantizeLinear"));
    }

    #[test]
    fn node_placements_are_read_per_ep() {
        let p = logged_placement(LOG);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].ep, "QNNExecutionProvider");
        assert_eq!(p[0].nodes.len(), 1);
        assert_eq!(p[1].ep, "CPUExecutionProvider");
        assert_eq!(p[1].nodes[0].name, "mid");
        assert_eq!(p[1].nodes[0].op_type, "Celu");
    }
}
