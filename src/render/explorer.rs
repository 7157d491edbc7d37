//! Per-layer drift as node data for Google's AI Edge Model Explorer
//! (<https://github.com/google-ai-edge/model-explorer>): load the audited ONNX model, then one of
//! these files over it ("Node data" → upload, or `model-explorer model.onnx
//! --node_data_paths=qnn_sm8650.json`), and every layer node the audit tapped is coloured by its
//! SQNR against the golden run.
//!
//! # Format
//!
//! The format has no version field of its own; this is the one of the `ai-edge-model-explorer`
//! Python package 0.1.32 and its web UI. One file holds one run of node data for one graph: the
//! `GraphNodeData` object of Model Explorer's Python `model_explorer.node_data_builder` (TypeScript
//! `NodeDataProviderGraphData` in `src/ui/src/components/visualizer/common/types.ts`):
//!
//! ```json
//! {
//!   "name": "qnn:sm8650: cumulative SQNR dB (npu-audit)",
//!   "results": {"conv1": {"value": 37.28}, "bn1": {"value": 36.33}},
//!   "thresholds": [{"value": 10, "bgColor": "#b71c1c"}, ..., {"value": 200, "bgColor": "#2e7d32"}],
//!   "hideAggregatedStats": ["sum"]
//! }
//! ```
//!
//! Written without the outer `ModelNodeData` map (graph id → `GraphNodeData`) on purpose: the
//! UI's loader (`getNodeDataProviderData` in `node_data_provider_extension_service.ts` and
//! `node_data_provider_dropdown.ts`) applies a file whose top-level `results` holds no key
//! `results` to the graph on screen, so the file does not depend on the graph id, which for
//! ONNX is the graph's name (`<main>` when it has none). The format has no way to carry
//! several runs in one file, so there is one file per target and view: `--node-data DIR`
//! writes `DIR/<target>.json` (cumulative) and `DIR/<target>.introduced.json` (layer alone),
//! the id with characters other than letters, digits, `-` and `.` turned into `_`, and
//! `DIR/worst.json` ([`render`]: the worst SQNR per node over the targets).
//!
//! Verified in the sources (snapshots of August 2026): google-ai-edge/model-explorer at
//! c0f8dbac5cf2 (`src/server/package/src/model_explorer/node_data_builder.py`,
//! `src/ui/src/components/visualizer/common/types.ts`,
//! `src/ui/src/components/visualizer/node_data_provider_extension_service.ts`) and the ONNX
//! adapter Model Explorer links to, justinchuby/model-explorer-onnx 0.4.2 at 41c34abcdeef
//! (`src/model_explorer_onnx/main.py`, `_passes.py`).
//!
//! # Keys
//!
//! A `results` key matches a node when it is the node's id, or a tensor name the adapter put
//! in the node's output metadata under `tensor_name`. The ONNX adapter sets each op node's id
//! to the ONNX `NodeProto.name` (`create_node`: `gb.GraphNode(id=onnx_node.name, ...)`) and
//! records output tensors under `__tensor_tag`, not `tensor_name`, so only node names match.
//! The keys are therefore `targets[].layers[].node`, the model node that computes the layer
//! (the Conv, not the QuantizeLinear after it whose codes were tapped). Left out, because they
//! could match no node or the wrong one: nodes the model leaves unnamed (the audit calls them
//! `#<index>`; the adapter's `NameFixPass` renames them `node`, `node_1`, ...), and a node
//! literally named `results` (the loader would take the file for a graph-id map). A node with
//! several tapped outputs gets its lowest value. Layers without the figure (no reference
//! counterpart) are left out; a target without any layer figure gets no file.
//!
//! # Values and colours
//!
//! `value` is the layer's cumulative `sqnr_db` ([`render_target`]) or its isolated
//! `introduced_sqnr_db` ([`render_target_introduced`]), in dB, as in the JSON report. JSON has
//! no infinity: values are clamped to ±[`SQNR_CAP_DB`] (an exact match, +inf dB, becomes 200;
//! a finite figure that high, a few float32 ULPs among millions of elements, reads as 200 too).
//! Colours come from absolute `thresholds` ([`THRESHOLDS`]: a value at or below a threshold's
//! `value` takes its colour; red under 20 dB through green above 50 dB) rather than a
//! `gradient`, which Model Explorer stretches between each file's own minimum and maximum: with
//! thresholds the same colour means the same SQNR in every target's file, and a file whose nodes
//! all have one value is still coloured.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::report::common::Num;
use crate::report::compare::{LayerReport, Report};
use crate::report::facts::TargetRole;
use crate::report::RunStatus;

/// SQNR values are clamped to ±this many dB (JSON has no infinity; an exact match is +inf dB).
pub const SQNR_CAP_DB: f64 = 200.0;

/// Colour thresholds in dB: a node whose value is at most `.0` (and above the previous
/// threshold) gets background `.1`.
pub const THRESHOLDS: [(f64, &str); 6] = [
    (10.0, "#b71c1c"),
    (20.0, "#e53935"),
    (30.0, "#fb8c00"),
    (40.0, "#fdd835"),
    (50.0, "#9ccc65"),
    (SQNR_CAP_DB, "#2e7d32"),
];

/// Node data of the worst cumulative SQNR per node over every target of the audit that ran
/// with per-layer figures (the baseline the audit added is left out when other targets have
/// figures): where any target loses accuracy. Results are empty without a per-layer audit.
pub fn render(report: &Report) -> String {
    let with_layers = |baseline: bool| {
        report
            .targets
            .iter()
            .filter(move |t| t.status == RunStatus::Ok && !t.layers.is_empty())
            .filter(move |t| baseline || t.role != TargetRole::Baseline)
    };
    let mut targets: Vec<_> = with_layers(false).collect();
    if targets.is_empty() {
        targets = with_layers(true).collect();
    }
    let mut values: BTreeMap<&str, f64> = BTreeMap::new();
    for t in &targets {
        collect(&t.layers, |l| l.sqnr_db, &mut values);
    }
    let ids: Vec<&str> = targets.iter().map(|t| t.id.as_str()).collect();
    document(
        &format!(
            "worst cumulative SQNR dB over {} (npu-audit)",
            if ids.is_empty() {
                "no target".to_string()
            } else {
                ids.join(", ")
            }
        ),
        &values,
    )
}

/// Node data of one target: each layer node's cumulative SQNR (`layers[].sqnr_db`, the whole
/// model running) in dB. `None` when the report has no such target or no layer figure for it.
pub fn render_target(report: &Report, target: &str) -> Option<String> {
    target_document(report, target, "cumulative", |l| l.sqnr_db)
}

/// Node data of one target: each layer node's isolated SQNR (`layers[].introduced_sqnr_db`,
/// the layer alone on golden inputs: what it introduces itself) in dB. `None` when the report
/// has no such target or no isolated figure for it.
pub fn render_target_introduced(report: &Report, target: &str) -> Option<String> {
    target_document(report, target, "introduced (layer alone)", |l| l.introduced_sqnr_db)
}

fn target_document(
    report: &Report,
    target: &str,
    what: &str,
    figure: impl Fn(&LayerReport) -> Option<Num>,
) -> Option<String> {
    let t = report.targets.iter().find(|t| t.id == target)?;
    let mut values = BTreeMap::new();
    collect(&t.layers, figure, &mut values);
    if values.is_empty() {
        return None;
    }
    Some(document(&format!("{target}: {what} SQNR dB (npu-audit)"), &values))
}

/// Whether Model Explorer's ONNX adapter gives a node this id (see the module documentation).
fn matchable(node: &str) -> bool {
    let unnamed = node
        .strip_prefix('#')
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()));
    !node.is_empty() && !unnamed && node != "results"
}

/// The clamped value of each matchable layer node, the lowest when a node appears twice.
fn collect<'a>(
    layers: &'a [LayerReport],
    figure: impl Fn(&LayerReport) -> Option<Num>,
    values: &mut BTreeMap<&'a str, f64>,
) {
    for l in layers.iter().filter(|l| matchable(&l.node)) {
        let Some(Num(v)) = figure(l) else { continue };
        if v.is_nan() {
            continue;
        }
        let v = v.clamp(-SQNR_CAP_DB, SQNR_CAP_DB);
        values
            .entry(l.node.as_str())
            .and_modify(|old| *old = old.min(v))
            .or_insert(v);
    }
}

fn document(name: &str, values: &BTreeMap<&str, f64>) -> String {
    let results: serde_json::Map<String, Value> = values
        .iter()
        .map(|(node, v)| (node.to_string(), json!({ "value": v })))
        .collect();
    let thresholds: Vec<Value> = THRESHOLDS
        .iter()
        .map(|(v, c)| json!({ "value": v, "bgColor": c }))
        .collect();
    let doc = json!({
        "name": name,
        "results": results,
        "thresholds": thresholds,
        // A sum of dB figures means nothing; min, max and average do.
        "hideAggregatedStats": ["sum"],
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::markdown::tests::small_report;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("node data is JSON")
    }

    /// Checks a document against the loader's rules: top-level `results` without a `results`
    /// key, numeric values, thresholds ascending with colours.
    fn assert_graph_node_data(doc: &Value) {
        let results = doc["results"].as_object().expect("results object");
        assert!(results.get("results").is_none());
        assert!(results.values().all(|r| r["value"].is_f64() || r["value"].is_i64()));
        let th = doc["thresholds"].as_array().expect("thresholds");
        let values: Vec<f64> = th.iter().filter_map(|t| t["value"].as_f64()).collect();
        assert_eq!(values.len(), th.len());
        assert!(values.windows(2).all(|w| w[0] < w[1]));
        assert!(th
            .iter()
            .all(|t| t["bgColor"].as_str().is_some_and(|c| c.starts_with('#'))));
    }

    #[test]
    fn small_report_keys_nodes_and_clamps_infinity() {
        let r = small_report();
        let doc = parse(&render_target(&r, "qnn:sm8650").expect("node data"));
        assert_graph_node_data(&doc);
        assert_eq!(doc["name"], "qnn:sm8650: cumulative SQNR dB (npu-audit)");
        let results = doc["results"].as_object().expect("results");
        // The layer without a figure is left out; +inf is clamped; the node name keeps its
        // characters (JSON escapes them).
        assert_eq!(results.len(), 2, "{doc}");
        assert_eq!(results["x_QuantizeLinear"]["value"], SQNR_CAP_DB);
        assert_eq!(results["conv1 <&\"'>"]["value"], 36.19);
        let introduced = parse(&render_target_introduced(&r, "qnn:sm8650").expect("introduced"));
        assert_eq!(introduced["results"]["conv1 <&\"'>"]["value"], 37.46);
        // No layers, or no such target: no file.
        assert!(render_target(&r, "cpu:noopt").is_none());
        assert!(render_target(&r, "nope").is_none());
    }

    #[test]
    fn unmatchable_and_repeated_nodes() {
        let mut r = small_report();
        let mut layers = r.targets[0].layers.clone();
        for (i, node) in ["#7", "results", "", "conv1 <&\"'>"].iter().enumerate() {
            let mut l = layers[1].clone();
            l.node = node.to_string();
            l.sqnr_db = Some(Num(f64::NEG_INFINITY));
            l.index = 10 + i;
            layers.push(l);
        }
        r.targets[0].layers = layers;
        let doc = parse(&render_target(&r, "qnn:sm8650").expect("node data"));
        let results = doc["results"].as_object().expect("results");
        assert_eq!(results.len(), 2, "{doc}");
        // The repeated node keeps its lowest value, -inf clamped.
        assert_eq!(results["conv1 <&\"'>"]["value"], -SQNR_CAP_DB);
        assert!(matchable("#7a") && matchable("#") && !matchable("#12"));
    }

    #[test]
    fn combined_view_takes_the_worst_target() {
        let mut r = small_report();
        let mut other = r.targets[0].clone();
        other.id = "qnn:sm8850".into();
        other.layers[1].sqnr_db = Some(Num(12.5));
        other.layers[0].sqnr_db = Some(Num(80.0));
        r.targets.push(other);
        let doc = parse(&render(&r));
        assert_graph_node_data(&doc);
        assert_eq!(doc["results"]["conv1 <&\"'>"]["value"], 12.5);
        assert_eq!(doc["results"]["x_QuantizeLinear"]["value"], 80.0);
        assert!(doc["name"]
            .as_str()
            .is_some_and(|n| n.contains("qnn:sm8650, qnn:sm8850")));
        r.targets.iter_mut().for_each(|t| t.layers.clear());
        let empty = parse(&render(&r));
        assert_eq!(empty["results"], json!({}));
    }
}
