//! A model of several gigabytes within bounded memory: generates a QDQ stack of wide MatMul
//! layers whose int8 weights (2.5 GiB by default) live in one external data file, then audits it
//! twice, outputs only and with `--layers all`, and prints the peak resident memory of every
//! process of the audit (each worker's and the audit's own, from the report's `timings`).
//!
//! The yardstick is one bare ONNX Runtime session of the same model and settings: the worker of
//! the outputs-only audit for that target (it loads the runtime, creates one session of the model,
//! runs it and writes its outputs, nothing else). The goal is every worker of the per-layer audit
//! within 1.5x of it (the tapped, prefix and isolation models link the external data file, so a
//! session holds the weights once) and the audit process itself far below the weights' size (it
//! never reads them).
//!
//! `cargo bench --bench large_model` (release build). Environment: `LARGE_MODEL_LAYERS` (default
//! 40 layers of 8192 x 8192 int8 weights, 64 MiB each), `LARGE_MODEL_TARGETS` (comma-separated,
//! default `cpu`; `cpu,qnn:sm8650` adds Qualcomm's HTP simulator, which is slow on this size).
//! The model is written under Cargo's target temporary directory and removed at the end, or into
//! `LARGE_MODEL_DIR` and kept (with both reports), to be run by another harness.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use npu_audit::data::model::build::GraphBuilder;
use npu_audit::data::model::pb::{StringStringEntryProto, TensorProto};
use npu_audit::data::model::slice::{value_info, MeasuredType};
use npu_audit::data::tensor::{Tensor, TensorData};
use serde_json::Value;

/// Rows and columns of every weight matrix.
const WIDTH: usize = 8192;
/// Weight codes in [-8, 8] with this scale keep the activations' spread from layer to layer
/// (sqrt(WIDTH) x 4.9 / 448 ~ 1), so no layer saturates or dies.
const WEIGHT_SCALE: f32 = 1.0 / 448.0;
const ACT_SCALE: f32 = 1.0 / 64.0;

/// Streams one layer's weights (a 64-bit LCG, the values only need to be deterministic).
fn write_weights(out: &mut impl Write, seed: u64) -> u64 {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut chunk = vec![0u8; 1 << 20];
    let total = WIDTH * WIDTH;
    for _ in 0..total / chunk.len() {
        for b in chunk.iter_mut() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            *b = (((s >> 33) % 17) as i8 - 8) as u8;
        }
        out.write_all(&chunk).expect("write weights");
    }
    total as u64
}

fn scalar(b: &mut GraphBuilder, name: &str, data: TensorData) {
    b.constant(name, &Tensor::new(vec![], data).expect("scalar"));
}

/// QuantizeLinear then DequantizeLinear of `x` with the ONNX Runtime quantizer's names.
fn qdq(b: &mut GraphBuilder, x: &str) -> String {
    scalar(b, &format!("{x}_scale"), TensorData::Float32(vec![ACT_SCALE]));
    scalar(b, &format!("{x}_zero_point"), TensorData::Uint8(vec![128]));
    let params = [format!("{x}_scale"), format!("{x}_zero_point")];
    let q = format!("{x}_QuantizeLinear_Output");
    let dq = format!("{x}_DequantizeLinear_Output");
    b.node(
        "QuantizeLinear",
        &format!("{x}_QuantizeLinear"),
        &[x, &params[0], &params[1]],
        &[&q],
        &[],
    );
    b.node(
        "DequantizeLinear",
        &format!("{x}_DequantizeLinear"),
        &[&q, &params[0], &params[1]],
        &[&dq],
        &[],
    );
    dq
}

/// An int8 initializer stored in `weights.bin` at `offset`.
fn external(name: &str, offset: u64, length: u64) -> TensorProto {
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    TensorProto {
        name: Some(name.into()),
        dims: vec![WIDTH as i64, WIDTH as i64],
        data_type: Some(3),
        data_location: Some(1),
        external_data: vec![
            entry("location", "weights.bin".into()),
            entry("offset", offset.to_string()),
            entry("length", length.to_string()),
        ],
        ..Default::default()
    }
}

/// Writes the model and its weight file into `dir`; returns the model's path and the weights'
/// size in bytes.
fn generate(dir: &Path, layers: usize) -> (PathBuf, u64) {
    let mut weights = BufWriter::new(File::create(dir.join("weights.bin")).expect("weights.bin"));
    let mut b = GraphBuilder::new("wide_matmul_stack");
    b.input("x", 1, &[1, WIDTH]);
    let mut prev = qdq(&mut b, "x");
    let mut initializers = Vec::new();
    let mut offset = 0u64;
    for l in 0..layers {
        let w = format!("w{l}");
        let length = write_weights(&mut weights, l as u64);
        initializers.push(external(&format!("{w}_quantized"), offset, length));
        offset += length;
        scalar(&mut b, &format!("{w}_scale"), TensorData::Float32(vec![WEIGHT_SCALE]));
        scalar(&mut b, &format!("{w}_zero_point"), TensorData::Int8(vec![0]));
        let wdq = format!("{w}_DequantizeLinear_Output");
        let params = [
            format!("{w}_quantized"),
            format!("{w}_scale"),
            format!("{w}_zero_point"),
        ];
        b.node(
            "DequantizeLinear",
            &format!("{w}_DequantizeLinear"),
            &[&params[0], &params[1], &params[2]],
            &[&wdq],
            &[],
        );
        let out = format!("matmul{l}_out");
        b.node("MatMul", &format!("matmul{l}"), &[&prev, &wdq], &[&out], &[]);
        prev = qdq(&mut b, &out);
    }
    b.output(&prev);
    weights.flush().expect("flush weights");
    let mut model = b.finish();
    if let Some(g) = model.graph.as_mut() {
        g.initializer.extend(initializers);
        // The audit reads the outputs' types from the model, as exporters write them.
        let typed = MeasuredType {
            elem_type: 1,
            shape: vec![1, WIDTH],
        };
        g.output = vec![value_info(&prev, Some(&typed))];
    }
    let path = dir.join("model.onnx");
    std::fs::write(&path, prost::Message::encode_to_vec(&model)).expect("write model");
    (path, offset)
}

/// One audit with `--timings`: its report and wall time.
fn audit(model: &Path, targets: &[String], extra: &[&str], out: &Path) -> (Value, f64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_npu-audit"));
    cmd.args([
        "compare",
        model.to_str().expect("utf-8 path"),
        "--fingerprint",
        "off",
        "--timings",
    ]);
    for t in targets {
        cmd.args(["-t", t]);
    }
    cmd.args(["--timeout", "3600", "--out", out.to_str().expect("utf-8 path")])
        .args(extra);
    let start = Instant::now();
    let status = cmd.stdout(std::process::Stdio::null()).status().expect("npu-audit");
    let secs = start.elapsed().as_secs_f64();
    assert!(status.code().is_some_and(|c| c <= 1), "audit failed: {status}");
    let report = serde_json::from_slice(&std::fs::read(out).expect("report")).expect("json");
    (report, secs)
}

/// Peak MiB of each (stage, target) worker, and of the audit process.
fn peaks(report: &Value) -> (BTreeMap<(String, String), f64>, f64) {
    let t = &report["timings"];
    let workers = t["workers"].as_array().expect("timings.workers");
    let by = workers
        .iter()
        .map(|w| {
            let key = (
                w["stage"].as_str().unwrap_or("").to_string(),
                w["target"].as_str().unwrap_or("").to_string(),
            );
            (key, w["peak_rss_mb"].as_f64().unwrap_or(f64::NAN))
        })
        .collect();
    (by, t["parent_peak_rss_mb"].as_f64().unwrap_or(f64::NAN))
}

fn main() {
    let layers: usize = std::env::var("LARGE_MODEL_LAYERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let targets: Vec<String> = std::env::var("LARGE_MODEL_TARGETS")
        .unwrap_or_else(|_| "cpu".into())
        .split(',')
        .map(str::to_string)
        .collect();
    // LARGE_MODEL_DIR keeps the model (to run it elsewhere); by default it is removed at the end.
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let kept = std::env::var_os("LARGE_MODEL_DIR").map(PathBuf::from);
    let dir = kept.as_deref().unwrap_or(scratch.path());
    std::fs::create_dir_all(dir).expect("LARGE_MODEL_DIR");
    let start = Instant::now();
    let (model, bytes) = generate(dir, layers);
    let gib = bytes as f64 / (1u64 << 30) as f64;
    println!(
        "{layers} MatMul layers [1,{WIDTH}] x [{WIDTH},{WIDTH}] int8, {gib:.2} GiB of external data, generated in {:.1} s; targets {targets:?}; no reference (derived)",
        start.elapsed().as_secs_f64()
    );
    let (bare, bare_secs) = audit(&model, &targets, &[], &dir.join("outputs.json"));
    let (layered, layered_secs) = audit(&model, &targets, &["--layers", "all"], &dir.join("layers.json"));
    println!("outputs only: {bare_secs:.1} s; --layers all: {layered_secs:.1} s");
    let (bare_peaks, bare_parent) = peaks(&bare);
    let (layer_peaks, layer_parent) = peaks(&layered);
    // The bare session of each target (and of the golden run) is its outputs-only worker; the
    // sizing run and the placement probe (a CPU session of the model) are CPU EP sessions without
    // graph optimizations, like cpu:noopt.
    let bare_of = |target: &str| {
        let key = if matches!(target, "layer-sizing" | "probe") {
            "cpu:noopt"
        } else {
            target
        };
        bare_peaks
            .get(&("golden and outputs".to_string(), key.to_string()))
            .copied()
    };
    println!(
        "{:<24} {:<14} {:>10} {:>12} {:>7}",
        "stage", "process", "peak MiB", "bare MiB", "ratio"
    );
    let mut worst: f64 = 0.0;
    for ((stage, target), peak) in &layer_peaks {
        let reference = bare_of(target).unwrap_or(f64::NAN);
        let ratio = peak / reference;
        if stage != "golden and outputs" {
            worst = worst.max(ratio);
        }
        println!("{stage:<24} {target:<14} {peak:>10.0} {reference:>12.0} {ratio:>7.2}");
    }
    println!(
        "{:<24} {:<14} {layer_parent:>10.0} {:>12} (outputs only: {bare_parent:.0} MiB)",
        "audit process", "npu-audit", "-"
    );
    println!(
        "largest worker of the per-layer audit: {worst:.2}x its bare session (goal <= 1.50: {}); audit process {:.1}% of the weights",
        if worst <= 1.5 { "met" } else { "NOT met" },
        100.0 * layer_parent / (gib * 1024.0)
    );
}
