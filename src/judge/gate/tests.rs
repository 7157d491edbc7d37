use std::path::Path;

use serde_json::json;

use super::*;
use crate::judge::policy::Thresholds;

/// A number as the report writes it (JSON has no inf or NaN).
fn n(v: f64) -> serde_json::Value {
    serde_json::to_value(Num(v)).unwrap()
}

/// A target report with one output, as a run would have written it.
fn target(
    id: &str,
    ep: &str,
    status: &str,
    sqnr: f64,
    max_abs: f64,
    top1: Option<f64>,
    fallback: usize,
) -> TargetReport {
    serde_json::from_value(json!({
        "id": id, "ep": ep, "role": "target", "required": true, "options": {}, "status": status,
        "placement": {
            "source": "ort_api", "graph": "runtime", "nodes_by_ep": {}, "target_ep_nodes": 10, "total_nodes": 12,
            "cpu_op_types": {}, "ep_partitions": 1 + fallback, "partitions": [], "crossings": [], "crossing_count": 0,
            "crossing_bytes": null, "mid_graph_crossing_count": 0, "mid_graph_crossing_bytes": null,
            "fallback": [], "compute_fallback_nodes": fallback, "inserted_by_ep": {}, "inferred_nodes": 0
        },
        "outputs": [{
            "name": "probs", "dtype": "float32", "shape": [1, 10], "elements": 10, "bit_identical": 4,
            "max_abs": n(max_abs), "mean_abs": 0.0, "rmse": 0.0, "cosine": 1.0, "sqnr_db": n(sqnr),
            "top1_agreement": top1, "nan_count": 0, "inf_count": 0, "nonfinite_mismatch": 0
        }]
    }))
    .unwrap()
}

fn policy(text: &str) -> Policy {
    Policy::parse(text, "p.toml", Path::new("."))
        .unwrap()
        .with_flags(&Thresholds::default(), &[], None)
        .unwrap()
}

fn rules(g: &GateReport) -> Vec<(String, String, f64, f64, bool, String)> {
    g.rules
        .iter()
        .map(|r| {
            (
                r.rule.to_string(),
                r.output.clone(),
                r.measured.0,
                r.limit.0,
                r.pass,
                r.origin.clone(),
            )
        })
        .collect()
}

#[test]
fn each_limit_is_one_rule_with_its_measure_limit_and_origin() {
    let p = policy(
        "[defaults]\nmin_sqnr_db = 30\nmax_abs = 0.05\nmin_top1_agreement = 0.9\nrequire_bit_exact = true\n\
         [target.\"qnn:*\"]\nmax_fallback_nodes = 1\nmax_partitions = 1\nfail_on_fallback = true\n",
    );
    let t = [
        target("qnn:sm8650", "QNNExecutionProvider", "ok", 31.5, 0.06, Some(0.95), 1),
        target("cpu", "CPUExecutionProvider", "ok", 29.0, 0.01, Some(0.8), 0),
    ];
    let (g, notes) = evaluate(&p, &t, None);
    assert!(notes.is_empty());
    assert_eq!(g.verdict, Verdict::Fail);
    let r = rules(&g);
    let row = |rule: &str, target: &str| {
        g.rules
            .iter()
            .find(|x| x.rule.as_str() == rule && x.target == target)
            .map(|x| (x.measured.0, x.limit.0, x.pass, x.origin.as_str()))
            .unwrap()
    };
    assert_eq!(row("ran", "qnn:sm8650"), (1.0, 1.0, true, "required"));
    assert_eq!(row("max_fallback_nodes", "qnn:sm8650"), (1.0, 1.0, true, "p.toml:7"));
    assert_eq!(row("fail_on_fallback", "qnn:sm8650"), (1.0, 0.0, false, "p.toml:9"));
    assert_eq!(row("max_partitions", "qnn:sm8650"), (2.0, 1.0, false, "p.toml:8"));
    assert_eq!(row("min_sqnr_db", "qnn:sm8650"), (31.5, 30.0, true, "p.toml:2"));
    assert_eq!(row("max_abs", "qnn:sm8650"), (0.06, 0.05, false, "p.toml:3"));
    assert_eq!(row("min_top1_agreement", "qnn:sm8650"), (0.95, 0.9, true, "p.toml:4"));
    assert_eq!(row("bit_exact", "qnn:sm8650"), (6.0, 0.0, false, "p.toml:5"));
    assert_eq!(row("min_sqnr_db", "cpu"), (29.0, 30.0, false, "p.toml:2"));
    assert_eq!(row("min_top1_agreement", "cpu"), (0.8, 0.9, false, "p.toml:4"));
    // Placement rules apply to non-CPU targets only.
    assert!(!r
        .iter()
        .any(|x| x.0 == "max_partitions" && g.rules.iter().any(|y| y.target == "cpu" && y.rule.as_str() == x.0)));
    assert_eq!(g.rules.len(), 8 + 5);
}

#[test]
fn a_failed_target_fails_ran_unless_allowed_and_top1_is_skipped_without_a_class_axis() {
    let p = policy("[defaults]\nmin_top1_agreement = 0.9\n");
    let mut failed = target(
        "openvino",
        "OpenVINOExecutionProvider",
        "failed",
        f64::NAN,
        f64::NAN,
        None,
        0,
    );
    let ok = target("cpu", "CPUExecutionProvider", "ok", 40.0, 0.0, None, 0);
    let (g, _) = evaluate(&p, &[failed.clone(), ok.clone()], None);
    assert_eq!(
        rules(&g),
        vec![
            (
                "ran".into(),
                RUN_SCOPE.into(),
                0.0,
                1.0,
                false,
                "required: it failed".into()
            ),
            ("ran".into(), RUN_SCOPE.into(), 1.0, 1.0, true, "required".into()),
        ]
    );
    assert_eq!(g.verdict, Verdict::Fail);
    failed.required = false;
    let (g, _) = evaluate(&p, &[failed, ok.clone()], None);
    assert_eq!(g.rules[0].origin, "allowed to fail: it failed; not gated");
    assert!(g.rules[0].pass && g.rules[0].ungated);
    assert_eq!(g.verdict, Verdict::Pass);
    // Named for this output, a missing top-1 fails.
    let p = policy("[defaults.outputs.probs]\nmin_top1_agreement = 0.9\n");
    let (g, _) = evaluate(&p, &[ok], None);
    assert_eq!(g.rules[1].rule.as_str(), "min_top1_agreement");
    assert!(g.rules[1].measured.0.is_nan() && !g.rules[1].pass);
}

#[test]
fn baseline_mode_fails_only_on_regressions_beyond_the_margin() {
    let previous: Report = serde_json::from_value(json!({
        "schema_version": 2, "kind": "compare", "tool": {"name": "npu-audit", "version": "0"},
        "model": {"path": "m", "sha256": "abc", "size_bytes": 1, "ir_version": 8, "opset": 17, "producer": "",
                  "inputs": [], "outputs": []},
        "reference": {"kind": "model", "path": "r", "sha256": "def", "description": ""},
        "inputs": {"source": "generated", "samples": 1, "tensors": []},
        "baseline": null,
        "targets": [
            serde_json::to_value(target("qnn:sm8650", "QNNExecutionProvider", "ok", 30.0, 0.05, Some(0.99), 0)).unwrap(),
            serde_json::to_value(target("cpu", "CPUExecutionProvider", "ok", f64::INFINITY, 0.0, Some(1.0), 0)).unwrap(),
        ],
        "agreement": [], "bit_exact_groups": [], "tolerances": [],
        "gate": {"verdict": "none", "rules": []}, "metric_definitions": {}, "notes": [], "exit_code": 0
    }))
    .unwrap();
    let p = Policy::parse(
        "mode = \"baseline\"\n[defaults]\nmin_sqnr_db = 99\nmax_sqnr_regression_db = 0.5\n[baseline]\nreport = \"prev.json\"\n",
        "p.toml",
        Path::new("."),
    )
    .unwrap()
    .with_flags(&Thresholds::default(), &[], None)
    .unwrap();
    let now = [
        target("qnn:sm8650", "QNNExecutionProvider", "ok", 29.6, 0.05, Some(0.98), 1),
        target("cpu", "CPUExecutionProvider", "ok", f64::INFINITY, 0.0, Some(1.0), 0),
        target("qnn:sm8850", "QNNExecutionProvider", "ok", 10.0, 1.0, Some(0.5), 0),
    ];
    let prev = Previous {
        report: &previous,
        label: "prev.json".into(),
    };
    let (g, notes) = evaluate(&p, &now, Some(&prev));
    assert_eq!(
        notes,
        ["qnn:sm8850: no regression rules, prev.json has no successful run of it"]
    );
    let got: Vec<(String, String, f64, f64, bool)> = g
        .rules
        .iter()
        .filter(|r| r.target == "qnn:sm8650")
        .map(|r| {
            (
                r.rule.to_string(),
                r.output.clone(),
                (r.measured.0 * 1e6).round() / 1e6,
                r.limit.0,
                r.pass,
            )
        })
        .collect();
    // min_sqnr_db = 99 is not evaluated in baseline mode.
    assert_eq!(
        got,
        vec![
            ("ran".into(), "(run)".into(), 1.0, 1.0, true),
            ("fallback_regression".into(), "(placement)".into(), 1.0, 0.0, false),
            ("partitions_regression".into(), "(placement)".into(), 1.0, 0.0, false),
            ("sqnr_regression_db".into(), "probs".into(), 0.4, 0.5, true),
            ("max_abs_regression".into(), "probs".into(), 0.0, 0.0, true),
            ("top1_regression".into(), "probs".into(), 0.01, 0.0, false),
        ]
    );
    let sqnr = g
        .rules
        .iter()
        .find(|r| r.rule.as_str() == "sqnr_regression_db")
        .unwrap();
    assert_eq!(sqnr.origin, "p.toml:4 vs prev.json");
    assert_eq!(sqnr.previous.map(|n| n.0), Some(30.0));
    // An exact match before and after (inf dB) is no regression.
    let cpu = g
        .rules
        .iter()
        .find(|r| r.rule.as_str() == "sqnr_regression_db" && r.target == "cpu")
        .unwrap();
    assert_eq!((cpu.measured.0, cpu.pass), (0.0, true));
    assert_eq!(g.verdict, Verdict::Fail);
    assert_eq!(g.policy.as_ref().map(|p| p.mode.as_str()), Some("baseline"));
}

#[test]
fn no_limits_means_no_verdict() {
    let (g, _) = evaluate(
        &Policy::empty(),
        &[target("cpu", "CPUExecutionProvider", "ok", 1.0, 1.0, None, 0)],
        None,
    );
    assert_eq!(g.verdict, Verdict::None);
    assert!(g.rules.is_empty() && g.policy.is_none());
}
