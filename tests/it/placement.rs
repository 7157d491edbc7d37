//! Placement, fallback, crossings, placement gates and compile-failure bisection, end to end on
//! the QNN HTP simulator. Expected values come from `fixtures/expected/placement.json`, which the
//! fixture script computes from the fixture's own shapes and element types.

use crate::common;

use common::{bin, compare_json, repo, target};
use serde_json::Value;

fn expected() -> Value {
    let text = std::fs::read_to_string(repo("fixtures/expected/placement.json")).expect("placement.json");
    serde_json::from_str(&text).expect("json")
}

fn fixture(key: &str) -> String {
    repo(&format!("fixtures/{}", expected()[key].as_str().expect("path")))
        .display()
        .to_string()
}

fn short(ep: &str) -> String {
    ep.trim_end_matches("ExecutionProvider").to_uppercase()
}

#[test]
fn a_mid_graph_fallback_is_named_with_its_reason_partitions_and_crossing_bytes() {
    let want = expected();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.json");
    let (code, report, stderr) = compare_json(&[
        &fixture("fallback_model"),
        "-t",
        "qnn:sm8650",
        "--no-baseline",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let p = &target(&report, "qnn:sm8650")["placement"];
    assert_eq!(p["graph"], "runtime", "the runtime's partitioned graph was captured");

    let compute: Vec<(String, String, String)> = p["fallback"]
        .as_array()
        .expect("fallback")
        .iter()
        .filter(|f| f["kind"] == "compute")
        .map(|f| {
            assert!(
                f["reason"].as_str().is_some_and(|r| r.contains("Celu")),
                "the EP's reason is kept: {f}"
            );
            (
                f["name"].as_str().unwrap_or_default().to_string(),
                f["op_type"].as_str().unwrap_or_default().to_string(),
                f["position"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let want_compute: Vec<(String, String, String)> = want["compute_fallback"]
        .as_array()
        .expect("list")
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap_or_default().to_string(),
                f["op_type"].as_str().unwrap_or_default().to_string(),
                f["position"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(compute, want_compute);
    assert_eq!(p["compute_fallback_nodes"], 1);
    // The graph-input Q and graph-output DQ are on the CPU too, but expected ones.
    let boundary = p["fallback"]
        .as_array()
        .expect("fallback")
        .iter()
        .filter(|f| f["kind"] == "boundary")
        .count();
    assert_eq!(boundary, 2);

    assert_eq!(p["ep_partitions"], want["qnn_partitions"]);
    let eps: Vec<String> = p["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|x| short(x["ep"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(eps, ["CPU", "QNN", "CPU", "QNN", "CPU"], "the strip in execution order");

    let mut got: Vec<(String, String, String, u64, u64, String)> = p["crossings"]
        .as_array()
        .expect("crossings")
        .iter()
        .map(|c| {
            (
                short(c["from_ep"].as_str().unwrap_or_default()),
                short(c["to_ep"].as_str().unwrap_or_default()),
                c["dtype"].as_str().unwrap_or_default().to_string(),
                c["elements"].as_u64().unwrap_or(0),
                c["bytes"].as_u64().unwrap_or(0),
                c["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut want_crossings: Vec<(String, String, String, u64, u64, String)> = want["crossings"]
        .as_array()
        .expect("crossings")
        .iter()
        .map(|c| {
            (
                c["from"].as_str().unwrap_or_default().to_string(),
                c["to"].as_str().unwrap_or_default().to_string(),
                c["dtype"].as_str().unwrap_or_default().to_string(),
                c["elements"].as_u64().unwrap_or(0),
                c["bytes"].as_u64().unwrap_or(0),
                c["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    got.sort();
    want_crossings.sort();
    assert_eq!(got, want_crossings);
    assert_eq!(p["crossing_bytes"], want["crossing_bytes"]);
    assert_eq!(p["mid_graph_crossing_bytes"], want["mid_graph_crossing_bytes"]);

    // The raw runtime log is kept beside the report, with the EP's validation messages.
    let log = dir.path().join("report.logs").join("qnn_sm8650.log");
    let text = std::fs::read_to_string(&log).expect("kept log");
    assert!(text.contains("Validation FAILED"), "verbose EP log kept");
    assert_eq!(target(&report, "qnn:sm8650")["log"], log.display().to_string());
}

#[test]
fn placement_gates_pass_and_fail_per_target() {
    let model = fixture("fallback_model");
    let rule = |report: &Value, name: &str| -> Value {
        report["gate"]["rules"]
            .as_array()
            .and_then(|r| r.iter().find(|x| x["rule"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    let (code, report, _) = compare_json(&[
        &model,
        "-t",
        "qnn:sm8650",
        "-t",
        "cpu",
        "--no-baseline",
        "--fail-on-fallback",
        "--max-partitions",
        "2",
    ]);
    assert_eq!(code, 1);
    let r = rule(&report, "fail_on_fallback");
    assert_eq!(
        (r["target"].as_str(), r["measured"].as_f64(), r["pass"].as_bool()),
        (Some("qnn:sm8650"), Some(1.0), Some(false))
    );
    assert_eq!(rule(&report, "max_partitions")["pass"], true);
    // The CPU target is not gated on fallback: it is the CPU (it only has to run).
    let rules = report["gate"]["rules"].as_array().expect("rules");
    assert!(
        rules.iter().all(|r| r["target"] == "qnn:sm8650" || r["rule"] == "ran"),
        "{rules:?}"
    );

    let (code, report, _) = compare_json(&[
        &model,
        "-t",
        "qnn:sm8650",
        "--no-baseline",
        "--max-fallback-nodes",
        "1",
        "--max-partitions",
        "1",
    ]);
    assert_eq!(code, 1);
    assert_eq!(rule(&report, "max_fallback_nodes")["pass"], true);
    let r = rule(&report, "max_partitions");
    assert_eq!((r["measured"].as_f64(), r["pass"].as_bool()), (Some(2.0), Some(false)));

    // A model QNN takes whole passes the strictest placement gate.
    let (code, report, stderr) = compare_json(&[
        &common::cnn(),
        "-t",
        "qnn:sm8650",
        "--no-baseline",
        "--fail-on-fallback",
        "--max-partitions",
        "1",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["gate"]["verdict"], "pass");
    assert_eq!(target(&report, "qnn:sm8650")["placement"]["crossing_count"], 3);
}

#[test]
fn explain_failure_names_the_node_a_chipset_refuses() {
    let want = expected();
    let refusing = want["bisect_refusing_target"].as_str().expect("target");
    let accepting = want["bisect_accepting_target"].as_str().expect("target");
    let out = bin()
        .args([
            "explain-failure",
            &fixture("bisect_model"),
            "-t",
            refusing,
            "-t",
            accepting,
            "--format",
            "json",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).expect("json");
    let find = |id: &str| {
        list.as_array()
            .and_then(|l| l.iter().find(|e| e["target"] == id).cloned())
    };
    let refused = find(refusing).expect("refusing target");
    assert_eq!(refused["outcome"], "explained");
    assert_eq!(refused["trigger"]["name"], want["bisect_trigger"]["name"]);
    assert_eq!(refused["trigger"]["op_type"], want["bisect_trigger"]["op_type"]);
    assert_eq!(refused["fails_alone"], true);
    assert!(refused["full_model_error"].as_str().is_some_and(|e| e.contains("1002")));
    // Bisection: far fewer compiles than nodes.
    assert!(refused["steps"].as_array().map(|s| s.len()).unwrap_or(99) <= 8);
    assert_eq!(find(accepting).expect("accepting target")["outcome"], "accepted");

    // `compare` reports the failure and points to explain-failure.
    let table = bin()
        .args(["compare", &fixture("bisect_model"), "-t", refusing, "--no-baseline"])
        .output()
        .expect("run");
    assert_eq!(table.status.code(), Some(3));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("npu-audit explain-failure") && text.contains(&format!("--target {refusing}")),
        "{text}"
    );
}
