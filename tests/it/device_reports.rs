//! Device reports are strangers' files: `triage` of hostile reports of the CNN fixture against its
//! committed golden run, with only the CPU EP as candidate (each run takes a second). Links are
//! never followed, archives with two members of one name or members that are links are refused,
//! and every refusal names the report and says what is wrong in words a person can act on.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
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

/// `Result_0` to `Result_3` and then `Result_5`: the gap silently ended the samples at four.
#[test]
fn a_gap_in_result_n_is_refused_not_taken_for_the_end() {
    let dir = tempdir();
    let r = qnn_report(dir.path(), "gap", &[0, 1, 2, 3, 5]);
    assert_refused(&only_entry(&[&r]), &r, "Result_5 follows a gap: Result_4 is missing");
}

/// A zip of the given (member name, bytes) pairs, made by Python's zipfile (which writes two
/// members of one name, as a hostile archive would); a name ending in `@` is stored as a
/// symbolic link (Unix mode 0120777) under the name without it.
fn zip_with(path: &Path, members: &[(&str, Vec<u8>)]) {
    let dir = tempdir();
    let mut spec = Vec::new();
    for (k, (name, bytes)) in members.iter().enumerate() {
        let f = dir.path().join(format!("m{k}"));
        std::fs::write(&f, bytes).unwrap();
        spec.push(serde_json::json!([name, f.display().to_string()]));
    }
    let script = r#"
import json, sys, warnings, zipfile
warnings.simplefilter("ignore")
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, f in json.loads(sys.argv[2]):
        data = open(f, "rb").read()
        if name.endswith("@"):
            info = zipfile.ZipInfo(name[:-1])
            info.create_system = 3
            info.external_attr = 0o120777 << 16
            z.writestr(info, data)
        else:
            z.writestr(name, data)
"#;
    run_ok(
        std::process::Command::new(std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into()))
            .args(["-c", script])
            .arg(path)
            .arg(serde_json::Value::Array(spec).to_string()),
    );
}

/// A report `.zip` whose `device.json` is there twice (the last one won), one whose log is a
/// link, and an AI Hub `.npz` with one array twice: each refused, saying what.
#[test]
fn archives_with_a_member_twice_or_a_member_that_is_a_link_are_refused() {
    let dir = tempdir();
    let outputs = dir.path().join("outputs.npz");
    outputs_npz(&outputs);
    let npz = std::fs::read(&outputs).unwrap();
    let device = |soc: &str| format!(r#"{{"soc_model": "{soc}"}}"#).into_bytes();
    let twice = dir.path().join("twice.zip");
    zip_with(
        &twice,
        &[
            ("device.json", device("SM8650")),
            ("outputs.npz", npz.clone()),
            ("device.json", device("SM8450")),
        ],
    );
    assert_refused(&only_entry(&[&twice]), &twice, "'device.json' is in the archive twice");
    let link = dir.path().join("link.zip");
    zip_with(
        &link,
        &[
            ("device.json", device("SM8650")),
            ("outputs.npz", npz.clone()),
            ("logs/logcat.txt@", b"/etc/passwd".to_vec()),
        ],
    );
    assert_refused(&only_entry(&[&link]), &link, "'logs/logcat.txt' is a symbolic link");
    // An AI Hub archive: logits twice, the second all zeros.
    let logits = npu_audit::data::tensor::read_npz(&outputs).unwrap();
    let zeros = Tensor::new(vec![4, 1, 10], TensorData::Float32(vec![0.0; 40])).unwrap();
    let hub = dir.path().join("hub.npz");
    zip_with(
        &hub,
        &[
            ("logits.npy", logits[0].1.to_npy_bytes().unwrap()),
            ("probs.npy", logits[1].1.to_npy_bytes().unwrap()),
            ("logits.npy", zeros.to_npy_bytes().unwrap()),
        ],
    );
    assert_refused(&only_entry(&[&hub]), &hub, "'logits.npy' is in the archive twice");
}

/// The messages of refusals say what the file is and what was expected, once.
#[cfg(unix)]
#[test]
fn refusals_of_report_files_say_what_they_are_and_what_was_expected() {
    let dir = tempdir();
    // A log that is a link: "is a symbolic link", not "is not a regular file, not a regular file".
    let r = own_report(dir.path(), "log_link");
    std::fs::create_dir(r.join("logs")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", r.join("logs/logcat.txt")).unwrap();
    let e = only_entry(&[&r]);
    assert_refused(&e, &r, "logs/logcat.txt is a symbolic link");
    assert!(!e.to_string().contains("not a regular file, not a regular file"), "{e}");
    // A raw output of 12 bytes for a float32 output of 10 values.
    let r = qnn_report(dir.path(), "short_raw", &[0, 1, 2, 3]);
    std::fs::write(r.join("Result_2/probs.raw"), [0u8; 12]).unwrap();
    assert_refused(
        &only_entry(&[&r]),
        &r,
        "Result_2/probs.raw: 12 bytes are not 10 float32 values (40 bytes)",
    );
    // A `.zip` that is no archive: said as a report .zip, not as an .npz.
    let z = dir.path().join("broken.zip");
    std::fs::write(&z, b"PK\x03\x04 not really").unwrap();
    let e = only_entry(&[&z]);
    assert_refused(&e, &z, "not a valid .zip archive");
    assert!(!e.to_string().contains(".npz"), "{e}");
    // A zip of neither format.
    let z = dir.path().join("other.zip");
    zip_with(&z, &[("readme.txt", b"hello".to_vec())]);
    assert_refused(&only_entry(&[&z]), &z, "'readme.txt' is not part of a device report");
    // Reports of 2 samples against a golden run of 4: the sentence names the report too.
    let r = qnn_report(dir.path(), "two", &[0, 1]);
    assert_refused(&only_entry(&[&r]), &r, "2 samples of outputs for 4 samples of inputs");
}

/// A device model with a terminal escape (ESC ] ... BEL) and a direction override reached the
/// triage page as raw control characters; they are shown escaped, as text.
#[test]
fn control_characters_from_a_device_reach_the_triage_page_escaped() {
    let dir = tempdir();
    let r = own_report(dir.path(), "escape");
    std::fs::write(
        r.join("device.json"),
        r#"{"soc_model": "SM8650", "device_model": "Pixel\u001b]0;pwned\u0007 \u202eevil"}"#,
    )
    .unwrap();
    let html = dir.path().join("t.html");
    let (code, _, err) = triage(&[&r], &["--html", html.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!page.contains(c), "{:?} reached the page raw", c);
    }
    assert!(
        page.contains(r"Pixel\u{1b}]0;pwned\u{7} \u{202e}evil"),
        "the model is shown escaped"
    );
}

/// A copy of the CNN's golden directory in `dir`.
fn golden_copy(dir: &Path) -> PathBuf {
    let to = dir.join("golden");
    for e in walk(&repo("golden/cnn_fp32")) {
        let rel = e.strip_prefix(repo("golden/cnn_fp32")).unwrap();
        std::fs::create_dir_all(to.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(&e, to.join(rel)).unwrap();
    }
    to
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .flat_map(|p| if p.is_dir() { walk(&p) } else { vec![p] })
        .collect()
}

/// A golden file changed after `golden create`: compare refuses the directory (exit 2), and
/// triage marked every report `not_reproduced` and exited 0. It fails the way compare does.
#[test]
fn triage_against_an_altered_golden_directory_fails_as_compare_does() {
    let dir = tempdir();
    let g = golden_copy(dir.path());
    let out = g.join("outputs/s1/o0.npy");
    let mut bytes = std::fs::read(&out).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&out, bytes).unwrap();
    let r = own_report(dir.path(), "r");
    let g = g.to_str().unwrap();
    fails_with(
        &["compare", &cnn(), "--golden", g, "-t", "cpu"],
        2,
        "outputs/s1/o0.npy was altered",
    );
    fails_with(
        &[
            "triage",
            r.to_str().unwrap(),
            "--model",
            &cnn(),
            "--golden",
            g,
            "--candidate",
            "cpu",
            "--no-db",
        ],
        2,
        "outputs/s1/o0.npy was altered",
    );
}

/// A `device.json` naming its chipset twice: which one the phone meant is unknown, so the report
/// is malformed, naming the key (not silently read as the last one).
#[test]
fn a_device_json_naming_a_key_twice_is_malformed() {
    let dir = tempdir();
    let r = qnn_report(dir.path(), "twice", &[0, 1, 2, 3]);
    std::fs::write(
        r.join("device.json"),
        r#"{"soc_model": "SM8650", "soc_model": "SM8450"}"#,
    )
    .unwrap();
    assert_refused(&only_entry(&[&r]), &r, "the key \"soc_model\" is given twice");
}
