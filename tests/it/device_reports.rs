//! Device reports are strangers' files: `triage` of hostile reports of the CNN fixture against its
//! committed golden run, with only the CPU EP as candidate (each run takes a second). Links are
//! never followed, archives with two members of one name or members that are links are refused,
//! and every refusal names the report and says what is wrong in words a person can act on.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use npu_audit::tensor::{write_npz, Tensor, TensorData};
use serde_json::Value;

const OUTPUTS: [&str; 2] = ["logits", "probs"];

fn golden() -> String {
    repo("golden/cnn_fp32").display().to_string()
}

/// The golden run's output `k` (logits, probs) of each of its 4 samples, as float32 values.
fn golden_values(k: usize) -> Vec<Vec<f32>> {
    (0..4)
        .map(|s| {
            let t = Tensor::read_npy(&repo("golden/cnn_fp32/outputs").join(format!("s{s}/o{k}.npy"))).unwrap();
            values(&t).into_iter().map(|v| v as f32).collect()
        })
        .collect()
}

/// The golden run's outputs stacked as a report's `outputs.npz` at `path`.
fn outputs_npz(path: &Path) {
    let tensors: Vec<(String, Tensor)> = OUTPUTS
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let flat: Vec<f32> = golden_values(k).into_iter().flatten().collect();
            (
                name.to_string(),
                Tensor::new(vec![4, 1, 10], TensorData::Float32(flat)).unwrap(),
            )
        })
        .collect();
    let refs: Vec<(String, &Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    write_npz(path, &refs).unwrap();
}

/// The tool's own report directory of the golden run's outputs.
fn own_report(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    outputs_npz(&d.join("outputs.npz"));
    std::fs::write(d.join("device.json"), r#"{"soc_model": "SM8650"}"#).unwrap();
    d
}

fn raw_f32(path: &Path, values: &[f32]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

/// A `qnn-net-run` directory with `Result_<n>/` for each of `results` (the golden run's outputs of
/// sample `n % 4`) and a `device.json`.
fn qnn_report(dir: &Path, name: &str, results: &[usize]) -> PathBuf {
    let d = dir.join(name);
    for &n in results {
        for (k, output) in OUTPUTS.iter().enumerate() {
            raw_f32(&d.join(format!("Result_{n}/{output}.raw")), &golden_values(k)[n % 4]);
        }
    }
    std::fs::write(d.join("device.json"), r#"{"soc_model": "SM8650"}"#).unwrap();
    d
}

/// `triage` of `reports` with the CPU EP as the only candidate and no store, plus `extra`.
fn triage(reports: &[&Path], extra: &[&str]) -> (i32, Value, String) {
    let g = golden();
    let model = cnn();
    let out = bin()
        .arg("triage")
        .args(reports)
        .args(["--model", &model, "--golden", &g, "--candidate", "cpu", "--no-db"])
        .args(["--format", "json"])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one report's entry of a triage that must succeed.
fn only_entry(reports: &[&Path]) -> Value {
    let (code, json, err) = triage(reports, &[]);
    assert_eq!(code, 0, "{err}");
    let entries = json["reports"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{json}");
    entries[0].clone()
}

/// Asserts the entry is `malformed` with a sentence that names the report and holds `needle`.
fn assert_refused(entry: &Value, report: &Path, needle: &str) {
    let sentence = entry["verdict"]["sentence"].as_str().unwrap();
    assert_eq!(entry["verdict"]["kind"], "malformed", "{entry}");
    assert!(
        sentence.starts_with(&format!("device report {}: ", report.display())),
        "{sentence}"
    );
    assert!(sentence.contains(needle), "expected '{needle}' in: {sentence}");
}

/// A file outside every report that a link inside one points to: JSON a device could have
/// written, with a marker that must never reach the triage.
fn outside_json(dir: &Path) -> PathBuf {
    let p = dir.join("outside.json");
    std::fs::write(&p, r#"{"soc_model": "SM8650", "device_model": "OUTSIDE-SECRET"}"#).unwrap();
    p
}

#[cfg(unix)]
#[test]
fn links_in_a_qnn_net_run_directory_are_refused_not_followed() {
    use std::os::unix::fs::symlink;
    let dir = tempdir();
    // Result_3 is a link to a directory of valid outputs elsewhere.
    let elsewhere = qnn_report(dir.path(), "elsewhere", &[3]);
    let r = qnn_report(dir.path(), "result_link", &[0, 1, 2]);
    symlink(elsewhere.join("Result_3"), r.join("Result_3")).unwrap();
    assert_refused(&only_entry(&[&r]), &r, "Result_3 is a symbolic link");
    // device.json a link to a file outside.
    let secret = outside_json(dir.path());
    let r = qnn_report(dir.path(), "device_link", &[0, 1, 2, 3]);
    std::fs::remove_file(r.join("device.json")).unwrap();
    symlink(&secret, r.join("device.json")).unwrap();
    let e = only_entry(&[&r]);
    assert_refused(&e, &r, "device.json is a symbolic link");
    assert!(!e.to_string().contains("OUTSIDE-SECRET"), "{e}");
    // input_list.txt a link to a file outside.
    let r = qnn_report(dir.path(), "list_link", &[0, 1, 2, 3]);
    symlink("/etc/passwd", r.join("input_list.txt")).unwrap();
    let e = only_entry(&[&r]);
    assert_refused(&e, &r, "input_list.txt is a symbolic link");
    assert!(!e.to_string().contains("root:"), "{e}");
    // inputs/ a link to a directory of raw inputs outside.
    let r = qnn_report(dir.path(), "inputs_link", &[0, 1, 2, 3]);
    let raws = dir.path().join("raws");
    for s in 0..4 {
        let t = Tensor::read_npy(&repo("golden/cnn_fp32/inputs").join(format!("s{s}/i0.npy"))).unwrap();
        let v: Vec<f32> = values(&t).into_iter().map(|v| v as f32).collect();
        raw_f32(&raws.join(format!("x{s}.raw")), &v);
    }
    symlink(&raws, r.join("inputs")).unwrap();
    std::fs::write(r.join("input_list.txt"), "x0.raw\nx1.raw\nx2.raw\nx3.raw\n").unwrap();
    assert_refused(&only_entry(&[&r]), &r, "inputs is a symbolic link");
}

#[cfg(unix)]
#[test]
fn an_ai_hub_sidecar_that_is_a_link_is_refused_not_followed() {
    let dir = tempdir();
    let npz = dir.path().join("hub.npz");
    outputs_npz(&npz);
    std::os::unix::fs::symlink(outside_json(dir.path()), dir.path().join("hub.device.json")).unwrap();
    let e = only_entry(&[&npz]);
    assert_refused(&e, &npz, "hub.device.json is a symbolic link");
    assert!(!e.to_string().contains("OUTSIDE-SECRET"), "{e}");
}
