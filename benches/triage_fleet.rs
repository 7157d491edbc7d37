//! Triage throughput on a fleet of 1,000 device reports of the PP-OCR classifier, and the local
//! work a cold triage does.
//!
//! `cargo bench --bench triage_fleet` builds the fleet here: four input sets (fed as each report's
//! `inputs.npz`), what `compare` saves for the HTP simulation of SM8650 and SM8450 and for the CPU
//! EP on each, and 1,000 `.zip` reports that are those outputs (some moved by one quantization
//! step) under a chipset label. Then, against one store:
//!
//! - cold: the first triage; its local runs must be exactly the distinct (target, input set)
//!   pairs (4 candidates x 4 input sets = 16), however many reports share them;
//! - new reports, runs cached: three fleets of 1,000 reports the store has not seen (another app
//!   version in `device.json`), each triaged from the kept runs; the median is the figure
//!   (target: at least 100 reports per second on 2 cores);
//! - rerun: the last fleet again, every entry read back.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use npu_audit::data::tensor::{npz_bytes, read_npz, Tensor, TensorData};

const OUTPUT: &str = "save_infer_model/scale_0.tmp_1";
const INPUT_SETS: usize = 4;
const REPORTS: usize = 1000;
const CANDIDATES: [&str; 4] = ["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn model() -> String {
    root().join("fixtures/real/ppocr_cls_qdq_u8.onnx").display().to_string()
}

fn reference() -> String {
    root().join("fixtures/real/ppocr_cls_fp32.onnx").display().to_string()
}

/// Input set `k`: the classifier's 1x3x48x192 input from a fixed linear congruential sequence.
fn input_set(k: usize) -> Tensor {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15 ^ (k as u64 + 1);
    let values: Vec<f32> = (0..3 * 48 * 192)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::new(vec![1, 3, 48, 192], TensorData::Float32(values)).expect("input shape")
}

/// What `compare` saves for each candidate on input set `k`: run name -> output values.
fn simulate(dir: &Path, k: usize) -> Vec<(String, Vec<f32>)> {
    let inputs = dir.join(format!("in{k}.npz"));
    std::fs::write(&inputs, npz_bytes(&[("x".into(), &input_set(k))]).expect("npz")).expect("write");
    let saved = dir.join(format!("saved{k}"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_npu-audit"));
    cmd.args(["compare", &model(), "--reference", &reference(), "--inputs"])
        .arg(&inputs)
        .args([
            "-t",
            "qnn:sm8650",
            "-t",
            "qnn:sm8450",
            "-t",
            "cpu",
            "--fingerprint",
            "off",
        ])
        .arg("--save-outputs")
        .arg(&saved)
        .args(["--format", "json"]);
    let out = cmd.output().expect("compare runs");
    assert!(out.status.code() == Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    ["qnn_sm8650", "qnn_sm8450", "cpu"]
        .iter()
        .map(|run| {
            let arrays = read_npz(&saved.join(run).join("s0.npz")).expect("saved outputs");
            let t = &arrays.iter().find(|(n, _)| n == OUTPUT).expect("output").1;
            let TensorData::Float32(v) = &t.data else {
                panic!("float output")
            };
            (run.to_string(), v.clone())
        })
        .collect()
}

/// Report `i` of a fleet: which saved run, which label, moved by a step or not.
fn report_zip(path: &Path, i: usize, sims: &[Vec<(String, Vec<f32>)>], step: f32, app: &str) {
    let k = i % INPUT_SETS;
    let (run, label) = match i % 5 {
        0 | 1 => (0, "SM8650"),
        2 => (1, "SM8450"),
        3 => (2, "SM8650"),
        _ => (1, "SM8650"),
    };
    let mut values = sims[k][run].1.clone();
    if i.is_multiple_of(7) {
        let at = i % values.len();
        values[at] += step;
    }
    let n = values.len();
    let outputs = Tensor::new(vec![1, 1, n], TensorData::Float32(values)).expect("shape");
    let mut stacked_input = input_set(k);
    stacked_input.shape.insert(0, 1);
    let device = format!(
        r#"{{"soc_model": "{label}", "device_model": "phone-{}", "app_version": "{app}"}}"#,
        i % 13
    );
    let file = std::fs::File::create(path).expect("create");
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in [
        ("device.json", device.into_bytes()),
        ("outputs.npz", npz_bytes(&[(OUTPUT.into(), &outputs)]).expect("npz")),
        ("inputs.npz", npz_bytes(&[("x".into(), &stacked_input)]).expect("npz")),
    ] {
        zip.start_file(name, opts).expect("zip");
        zip.write_all(&bytes).expect("zip");
    }
    zip.finish().expect("zip");
}

fn fleet(dir: &Path, name: &str, sims: &[Vec<(String, Vec<f32>)>], step: f32) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("mkdir");
    for i in 0..REPORTS {
        report_zip(&d.join(format!("r{i:04}.zip")), i, sims, step, name);
    }
    d
}

/// One triage of `fleet` into `db`: seconds and the store's counts.
fn triage(fleet: &Path, db: &Path, dir: &Path) -> (f64, serde_json::Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_npu-audit"));
    cmd.arg("triage")
        .arg(fleet)
        .args(["--model", &model(), "--reference", &reference(), "--db"])
        .arg(db)
        .args(["--format", "json", "--out"])
        .arg(dir.join("triage.json"));
    for c in CANDIDATES {
        cmd.args(["--candidate", c]);
    }
    let start = Instant::now();
    let out = cmd.output().expect("triage runs");
    let secs = start.elapsed().as_secs_f64();
    assert!(out.status.code() == Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("triage.json")).expect("json")).expect("json");
    (secs, t["store"].clone())
}

fn output_step() -> f32 {
    let m = npu_audit::data::model::load_model(Path::new(&model())).expect("model");
    let sig = npu_audit::data::model::Signature::of(&m).expect("signature");
    let g = m.proto.graph.as_ref().expect("graph");
    npu_audit::data::model::constant::output_steps(g, &sig.outputs)[0].expect("a quantized output") as f32
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sims: Vec<_> = (0..INPUT_SETS).map(|k| simulate(dir.path(), k)).collect();
    let step = output_step();
    let db = dir.path().join("store.db");
    let cold_fleet = fleet(dir.path(), "cold", &sims, step);
    let (cold_secs, cold) = triage(&cold_fleet, &db, dir.path());
    let pairs = CANDIDATES.len() * INPUT_SETS;
    println!(
        "cold: {REPORTS} reports in {cold_secs:.1} s; local runs made {} (distinct target x input-set pairs: {pairs})",
        cold["runs_made"]
    );
    assert_eq!(cold["runs_made"].as_u64(), Some(pairs as u64), "{cold}");
    let mut rates = Vec::new();
    let mut last = cold_fleet;
    for round in 0..3 {
        let f = fleet(dir.path(), &format!("warm{round}"), &sims, step);
        let (secs, s) = triage(&f, &db, dir.path());
        assert_eq!(
            (s["runs_made"].as_u64(), s["reports_triaged"].as_u64()),
            (Some(0), Some(REPORTS as u64)),
            "{s}"
        );
        rates.push(REPORTS as f64 / secs);
        println!(
            "new reports, runs from the store: {REPORTS} reports in {secs:.2} s = {:.0} reports/s",
            REPORTS as f64 / secs
        );
        last = f;
    }
    rates.sort_by(|a, b| a.total_cmp(b));
    let (secs, s) = triage(&last, &db, dir.path());
    assert_eq!(s["reports_from_store"].as_u64(), Some(REPORTS as u64), "{s}");
    println!("median of 3: {:.0} reports/s (target >= 100)", rates[1]);
    println!(
        "rerun, every entry from the store: {REPORTS} reports in {secs:.2} s = {:.0} reports/s",
        REPORTS as f64 / secs
    );
    println!(
        "ratio cold / cached-runs time: {:.1}x",
        cold_secs / (REPORTS as f64 / rates[1])
    );
}
