//! `--timings` end to end: the account of where an audit's time went covers every session the
//! audit started, each in the stage that started it, and is absent unless asked for. Times
//! themselves are never asserted (they belong to benchmarks); only the account's structure and
//! its invariants are.

use crate::common;

use std::collections::BTreeMap;

use common::*;

#[test]
fn timings_account_for_every_session_in_its_stage_and_only_when_asked() {
    let (plain, stderr) = cnn_layer_audit(&cnn(), &[]);
    assert!(plain.get("timings").is_none(), "{}", plain["timings"]);
    assert!(!stderr.contains("Timings:"), "{stderr}");

    let (report, stderr) = cnn_layer_audit(&cnn(), &["--timings"]);
    let t = &report["timings"];
    assert!(
        stderr.contains("Timings:") && stderr.contains("Worker sessions"),
        "{stderr}"
    );
    // Sessions per stage and target: the golden run and both CPU targets once for the outputs,
    // one sizing session, then per tap run the golden reference and both targets tapped, and
    // both targets isolated (the CNN's 14 layers fit one run).
    let mut sessions: BTreeMap<(String, String), u64> = BTreeMap::new();
    for w in t["workers"].as_array().expect("workers") {
        let key = (
            w["stage"].as_str().unwrap().to_string(),
            w["target"].as_str().unwrap().to_string(),
        );
        sessions.insert(key, w["sessions"].as_u64().unwrap());
        // What a worker measured inside itself fits within its spawn-to-exit time.
        let inside: f64 = ["load_ms", "register_ms", "session_create_ms", "run_ms", "io_ms"]
            .iter()
            .map(|k| w[*k].as_f64().unwrap())
            .sum();
        let wall = w["wall_ms"].as_f64().unwrap();
        assert!(inside <= wall + 1.0, "{w}");
        assert!((inside + w["overhead_ms"].as_f64().unwrap() - wall).abs() < 1e-6, "{w}");
        // A worker has ONNX Runtime's library mapped and resident (tens of MiB); the CNN's
        // tensors are kilobytes, so no worker comes near a gigabyte.
        let peak = w["peak_rss_mb"].as_f64().unwrap();
        assert!((10.0..1024.0).contains(&peak), "{w}");
    }
    let parent = t["parent_peak_rss_mb"].as_f64().unwrap();
    assert!((1.0..1024.0).contains(&parent), "{t}");
    let want: BTreeMap<(String, String), u64> = [
        ("golden and outputs", "golden", 1),
        ("golden and outputs", "cpu", 1),
        ("golden and outputs", "cpu:noopt", 1),
        ("layers: plan", "layer-sizing", 1),
        ("layers: tapped runs", "golden", 1),
        ("layers: tapped runs", "cpu", 1),
        ("layers: tapped runs", "cpu:noopt", 1),
        ("layers: isolated runs", "cpu", 1),
        ("layers: isolated runs", "cpu:noopt", 1),
    ]
    .into_iter()
    .map(|(s, t, n)| ((s.to_string(), t.to_string()), n))
    .collect();
    assert_eq!(sessions, want);
    assert_eq!(
        sessions.values().sum::<u64>(),
        3 + report["layer_audit"]["sessions"].as_u64().unwrap()
    );
    // Parent phases: the documented names only; each stage that waited on workers says so.
    let known = [
        "provision",
        "prepare",
        "rewrite_models",
        "write_models",
        "sessions",
        "read_tensors",
        "matching",
        "compare",
        "persist",
        "render",
        "other",
    ];
    let phases = t["phases"].as_array().expect("phases");
    for p in phases {
        assert!(known.contains(&p["phase"].as_str().unwrap()), "{p}");
        assert!(p["ms"].as_f64().unwrap() >= 0.0, "{p}");
    }
    for stage in [
        "golden and outputs",
        "layers: plan",
        "layers: tapped runs",
        "layers: isolated runs",
    ] {
        let waited = phases
            .iter()
            .find(|p| p["stage"] == stage && p["phase"] == "sessions")
            .unwrap_or_else(|| panic!("{stage}: no sessions phase"));
        assert_eq!(waited["count"].as_u64(), Some(1), "{waited}");
    }
    // The phases account for the whole wall time.
    let sum: f64 = phases.iter().map(|p| p["ms"].as_f64().unwrap()).sum();
    assert!((sum - t["wall_ms"].as_f64().unwrap()).abs() < 1e-6, "{t}");
}
