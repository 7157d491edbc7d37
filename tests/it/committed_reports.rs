//! The reports under `fixtures/reports/`: real reports the binary wrote on the fixtures, kept in
//! the repository so the renderer tests (`tests/it/render_snapshots.rs`) read real data and never a
//! path outside it. `committed_reports_match_a_fresh_run` runs the same audits again and fails
//! when any figure differs from the committed report (timings, cache flags and the machine's
//! paths aside): a change of behaviour must regenerate them, with
//! `cargo test --test it -- --ignored committed_reports::regenerate`.

use crate::common;

use std::path::PathBuf;

use common::repo;
use serde_json::Value;

/// Each committed report: its name and the `compare` arguments that make it (run from the
/// repository root, so paths in the report are relative).
const CASES: &[(&str, &[&str])] = &[
    (
        // Four targets and the baseline, one of them failing and allowed to (the same way on every
        // host: a plugin release on a core it predates); a failing SQNR rule.
        "cnn",
        &[
            "fixtures/models/cnn_qdq_u8.onnx",
            "--reference",
            "fixtures/models/cnn_fp32.onnx",
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "-t",
            "qnn:sm8850",
            "-t",
            crate::common::REFUSED_TARGET,
            "--allow-failure",
            crate::common::REFUSED_PATTERN,
            "--min-sqnr",
            "28",
        ],
    ),
    (
        // Per-layer drift on every layer, with isolated runs.
        "cnn_layers",
        &[
            "fixtures/models/cnn_qdq_u8.onnx",
            "--reference",
            "fixtures/models/cnn_fp32.onnx",
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "--layers",
            "all",
        ],
    ),
    (
        // A compute op left to the CPU in the middle of the graph: placement and its rule.
        "fallback",
        &[
            "fixtures/models/fallback_qdq_u8.onnx",
            "-t",
            "qnn:sm8650",
            "-t",
            "cpu",
            "--max-fallback-nodes",
            "0",
        ],
    ),
    (
        // A transformer block with 16-bit activations, every layer tapped.
        "transformer",
        &[
            "fixtures/models/transformer_qdq_a16w8.onnx",
            "--reference",
            "fixtures/models/transformer_fp32.onnx",
            "--inputs",
            "fixtures/inputs/transformer_seed7.npz",
            "-t",
            "qnn:sm8650",
            "-t",
            "cpu",
            "--layers",
            "all",
        ],
    ),
    (
        // Localisation by cutting the graph instead of tapping it.
        "ladder_bisect",
        &[
            "fixtures/models/ladder_qdq_u8.onnx",
            "--reference",
            "fixtures/models/ladder_fp32.onnx",
            "-t",
            "qnn:sm8650",
            "--layers",
            "bisect",
        ],
    ),
];

/// Runs one case's audit from the repository root and returns its report, with the user's
/// home directory written as `~` (the runtimes' cache paths).
fn run_case(args: &[&str]) -> Value {
    let mut all = vec!["compare"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json", "--fingerprint", "auto"]);
    let out = common::bin()
        .current_dir(repo(""))
        .args(&all)
        .output()
        .expect("run npu-audit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0..=1)), "{args:?}: {stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let home = std::env::var("HOME").unwrap_or_default();
    let text = if home.len() > 1 {
        text.replace(&home, "~")
    } else {
        text.to_string()
    };
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: no JSON ({e}): {stderr}"))
}

fn committed(name: &str) -> PathBuf {
    repo(&format!("fixtures/reports/{name}.json"))
}

/// The report without what differs between two runs of the same audit on two machines:
/// timings, whether a fingerprint (or a QNN context) came from the cache, where runtimes and logs
/// live, which host made it (`tests/it/hosts.rs` checks that against `/proc/cpuinfo`).
fn stable(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "timing"
                            | "seconds"
                            | "cached"
                            | "library"
                            | "source"
                            | "log"
                            | "summary_cached"
                            | "host"
                            | "qnn_context"
                    )
                })
                .map(|(k, x)| (k.clone(), stable(x)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(stable).collect()),
        other => other.clone(),
    }
}

/// The first place two JSON values differ, as a path.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.keys().chain(y.keys()).find_map(|k| match (x.get(k), y.get(k)) {
            (Some(p), Some(q)) => first_difference(p, q, &format!("{path}.{k}")),
            _ => Some(format!("{path}.{k}: present on one side only")),
        }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: committed {a}, now {b}")),
    }
}

#[test]
fn committed_reports_match_a_fresh_run() {
    for (name, args) in CASES {
        let text = std::fs::read_to_string(committed(name))
            .unwrap_or_else(|e| panic!("fixtures/reports/{name}.json: {e}; regenerate the committed reports"));
        let then: Value = serde_json::from_str(&text).expect("committed report parses");
        let now = run_case(args);
        if let Some(diff) = first_difference(&stable(&then), &stable(&now), name) {
            panic!(
                "{diff}\nthe committed report no longer matches the binary: if the change is intended, run \
                 `cargo test --test it -- --ignored committed_reports::regenerate` and review the renderer snapshots"
            );
        }
    }
}

#[test]
#[ignore = "writes fixtures/reports/; run by hand after a change of behaviour"]
fn regenerate() {
    std::fs::create_dir_all(repo("fixtures/reports")).expect("mkdir");
    for (name, args) in CASES {
        let report = run_case(args);
        let text = serde_json::to_string_pretty(&report).expect("json") + "\n";
        std::fs::write(committed(name), text).expect("write");
    }
}
