//! Overhead of the audit around ONNX Runtime: the tool's total wall time for a fixture audit
//! against the sum of the sessions' own create + run times (as each worker measured them).
//!
//! `cargo bench --bench audit_overhead` runs the release binary several times and prints medians.

use std::process::Command;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let exe = env!("CARGO_BIN_EXE_npu-audit");
    let root = env!("CARGO_MANIFEST_DIR");
    let reps = 5;
    let cases: &[(&str, &[&str])] = &[
        (
            "transformer_qdq_u8 on cpu, cpu:noopt, qnn:sm8650, qnn:sm8850, openvino, 8 samples (jobs = cores)",
            &[
                "fixtures/models/transformer_qdq_u8.onnx",
                "--reference",
                "fixtures/models/transformer_fp32.onnx",
                "-t",
                "cpu",
                "-t",
                "cpu:noopt",
                "-t",
                "qnn:sm8650",
                "-t",
                "qnn:sm8850",
                "-t",
                "openvino",
                "--samples",
                "8",
            ],
        ),
        (
            "the same, one worker at a time",
            &[
                "fixtures/models/transformer_qdq_u8.onnx",
                "--reference",
                "fixtures/models/transformer_fp32.onnx",
                "-t",
                "cpu",
                "-t",
                "cpu:noopt",
                "-t",
                "qnn:sm8650",
                "-t",
                "qnn:sm8850",
                "-t",
                "openvino",
                "--samples",
                "8",
                "--jobs",
                "1",
            ],
        ),
        (
            "ppocr_cls_qdq_u8 (real model) on every QNN chipset (jobs = cores)",
            &[
                "fixtures/real/ppocr_cls_qdq_u8.onnx",
                "--reference",
                "fixtures/real/ppocr_cls_fp32.onnx",
                "--input-shape",
                "x:1,3,48,192",
                "-t",
                "qnn:all",
                "-t",
                "cpu:noopt",
                "--allow-failure",
                "all",
            ],
        ),
        (
            "ppocr_cls_qdq_u8 on every QNN chipset, one worker at a time",
            &[
                "fixtures/real/ppocr_cls_qdq_u8.onnx",
                "--reference",
                "fixtures/real/ppocr_cls_fp32.onnx",
                "--input-shape",
                "x:1,3,48,192",
                "-t",
                "qnn:all",
                "-t",
                "cpu:noopt",
                "--allow-failure",
                "all",
                "--jobs",
                "1",
            ],
        ),
    ];
    println!("audit wall time vs the sum of the sessions' own session-create + run times ({reps} runs each, medians)");
    for (label, args) in cases {
        let mut walls = Vec::new();
        let mut sums = Vec::new();
        let mut ratios = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let out = Command::new(exe)
                .current_dir(root)
                .arg("compare")
                .args(*args)
                .args(["--format", "json"])
                .output()
                .expect("run npu-audit");
            let wall = t.elapsed().as_secs_f64() * 1e3;
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
            let session = |timing: &serde_json::Value| -> f64 {
                timing["session_create_ms"].as_f64().unwrap_or(0.0) + timing["run_ms_total"].as_f64().unwrap_or(0.0)
            };
            let mut sum = session(&report["reference"]["timing"]);
            for t in report["targets"].as_array().unwrap() {
                if t["status"] == "ok" {
                    sum += session(&t["timing"]);
                }
            }
            walls.push(wall);
            sums.push(sum);
            ratios.push(wall / sum);
        }
        println!("  {label}");
        println!(
            "    wall {:8.0} ms   sessions {:8.0} ms   wall / sessions = {:.2}  (goal <= 1.10 -> {})",
            median(walls),
            median(sums),
            median(ratios.clone()),
            if median(ratios) <= 1.1 { "met" } else { "NOT met" }
        );
    }
}
