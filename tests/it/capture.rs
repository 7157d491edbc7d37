//! The capture script (docs/capture/capture.py) end to end: it runs a real quantized CNN with
//! ONNX Runtime's Python package on the CPU EP and on Qualcomm's HTP simulator (the QNN plugin
//! npu-audit fetched), writes device reports, and `npu-audit triage` gives each the verdict its
//! construction implies; the SQNR triage prints is recomputed here from what the script wrote.
//!
//! Python comes from a virtual environment this test makes once under npu-audit's cache
//! (`capture-venv-<hash of docs/capture/requirements.txt>`) with exactly the pinned packages.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use npu_audit::data::tensor::{read_npz_bytes, Tensor};
use serde_json::Value;

const MODEL: &str = "fixtures/models/cnn_qdq_u8.onnx";
const GOLDEN: &str = "golden/cnn_fp32";
const SAMPLES: usize = 4;

/// The venv's Python with the capture script's pinned packages.
fn python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| venv_python("docs/capture/requirements.txt", "capture"))
}

/// The golden run's input samples as one `.npz` each (what an app would feed).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    (0..SAMPLES)
        .map(|k| {
            let t = Tensor::read_npy(&repo(GOLDEN).join(format!("inputs/s{k}/i0.npy"))).unwrap();
            let p = dir.join(format!("in{k}.npz"));
            npu_audit::data::tensor::write_npz(&p, &[("image".to_string(), &t)]).unwrap();
            p
        })
        .collect()
}

fn qnn_plugin() -> String {
    let out = bin().args(["runtime", "path", "qnn"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs capture.py; returns its exit code and stderr.
fn capture(inputs: &[PathBuf], out: &Path, extra: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(python());
    cmd.arg(repo("docs/capture/capture.py")).arg(repo(MODEL));
    for i in inputs {
        cmd.arg("--inputs").arg(i);
    }
    cmd.arg("--out").arg(out).args(extra);
    let o = cmd.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn triage(reports: &[&Path]) -> Value {
    let mut cmd = bin();
    cmd.arg("triage").args(reports);
    cmd.args(["--model", &repo(MODEL).display().to_string()]);
    cmd.args([
        "--golden",
        &repo(GOLDEN).display().to_string(),
        "--no-db",
        "--format",
        "json",
    ]);
    for c in ["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"] {
        cmd.args(["--candidate", c]);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn entry<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["reports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("no report {name}"))
}

/// An output's SQNR over every sample: the captured outputs against the golden run's files.
fn recomputed_sqnr(outputs_npz: Vec<u8>, output: &str, index: usize) -> f64 {
    let captured = read_npz_bytes(outputs_npz).unwrap();
    let stacked = &captured.iter().find(|(n, _)| n == output).unwrap().1;
    let golden: Vec<f64> = (0..SAMPLES)
        .flat_map(|k| values(&Tensor::read_npy(&repo(GOLDEN).join(format!("outputs/s{k}/o{index}.npy"))).unwrap()))
        .collect();
    plain_metrics(&values(stacked), &golden).sqnr_db
}

fn zip_member(path: &Path, name: &str) -> Vec<u8> {
    use std::io::Read as _;
    let mut z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut bytes = Vec::new();
    z.by_name(name).unwrap().read_to_end(&mut bytes).unwrap();
    bytes
}

#[test]
fn captured_reports_triage_as_what_ran_them() {
    let dir = tempdir();
    let ins = inputs(dir.path());
    let plugin = qnn_plugin();
    let sim = dir.path().join("s24_qnn.zip");
    let cpu = dir.path().join("s24_cpu");
    let other = dir.path().join("s24_other");
    let qnn = ["--ep", "qnn", "--qnn-plugin", &plugin];
    let runs: [(&Path, Vec<&str>); 3] = [
        (&sim, [&qnn[..], &["--chipset", "sm8650", "--log"]].concat()),
        (&cpu, vec!["--ep", "cpu", "--device", "soc_model=SM8650"]),
        (
            &other,
            [&qnn[..], &["--chipset", "sm8450", "--device", "soc_model=SM8650"]].concat(),
        ),
    ];
    for (out, extra) in &runs {
        let (code, err) = capture(&ins, out, extra);
        assert_eq!(code, 0, "{err}");
    }
    let t = triage(&[&sim, &cpu, &other]);
    let kind = |name: &str| entry(&t, name)["verdict"]["kind"].as_str().unwrap().to_string();
    assert_eq!(
        kind("s24_qnn.zip"),
        "reproduced",
        "{}",
        entry(&t, "s24_qnn.zip")["verdict"]
    );
    assert_eq!(kind("s24_cpu"), "cpu_fallback", "{}", entry(&t, "s24_cpu")["verdict"]);
    assert_eq!(
        kind("s24_other"),
        "other_chipset",
        "{}",
        entry(&t, "s24_other")["verdict"]
    );
    // The capture fed the golden run's inputs: measured against the golden run itself.
    assert_eq!(entry(&t, "s24_qnn.zip")["inputs"], "golden");
    // What the simulated device says about itself, and what its log shows.
    let e = entry(&t, "s24_qnn.zip");
    assert_eq!(e["device"]["soc_model"], "SM8650");
    assert_eq!(e["device"]["ep_options"]["htp_arch"], "75");
    assert_eq!(e["device"]["qnn_release"], "2.7.0");
    assert_eq!(
        (e["logs"]["htp_arch"].as_u64(), e["logs"]["soc_model"].as_u64()),
        (Some(75), Some(57))
    );
    // Every output's SQNR against the golden run, recomputed from the captured files.
    for (k, output) in ["logits", "probs"].iter().enumerate() {
        let m = e["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["output"] == *output)
            .unwrap();
        let want = recomputed_sqnr(zip_member(&sim, "outputs.npz"), output, k);
        assert_close(output, num(&m["sqnr_db"]), want, 1e-6);
        let m = entry(&t, "s24_cpu")["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["output"] == *output)
            .unwrap()
            .clone();
        let want = recomputed_sqnr(std::fs::read(cpu.join("outputs.npz")).unwrap(), output, k);
        assert_close(output, num(&m["sqnr_db"]), want, 1e-6);
    }
}

#[test]
fn the_script_refuses_what_it_must_not_do_in_one_line() {
    let dir = tempdir();
    let ins = inputs(dir.path());
    let out = dir.path().join("r.zip");
    std::fs::write(&out, b"someone's file").unwrap();
    for (extra, says) in [
        (vec![], "exists (--force replaces it)"),
        (
            vec!["--force", "--device", "shell=rm"],
            "--device shell: not a device.json key",
        ),
        (
            vec!["--force", "--ep", "qnn", "--qnn-plugin", "/nonexistent.so"],
            "no such file",
        ),
    ] {
        let (code, err) = capture(&ins, &out, &extra);
        assert_eq!(code, 2, "{err}");
        assert!(err.trim().lines().count() == 1 && err.contains(says), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), b"someone's file");
    }
}

/// Each output's quantization step, read from the model (the scale of its DequantizeLinear).
fn output_steps() -> Vec<Option<f64>> {
    let m = npu_audit::data::model::load_model(&repo(MODEL)).unwrap();
    let sig = npu_audit::data::model::Signature::of(&m).unwrap();
    npu_audit::data::model::constant::output_steps(m.proto.graph.as_ref().unwrap(), &sig.outputs)
}

/// A copy of the captured report `src` whose outputs are moved by `steps(output index, element)`
/// quantization steps.
fn moved_copy(src: &Path, dst: &Path, steps: impl Fn(usize, usize) -> f32) {
    std::fs::create_dir_all(dst).unwrap();
    for f in ["device.json", "inputs.npz"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let lsb = output_steps();
    let arrays = read_npz_bytes(std::fs::read(src.join("outputs.npz")).unwrap()).unwrap();
    let moved: Vec<(String, Tensor)> = arrays
        .into_iter()
        .enumerate()
        .map(|(k, (name, t))| {
            let step = lsb[k].expect("a quantized output") as f32;
            let v: Vec<f32> = values(&t)
                .iter()
                .enumerate()
                .map(|(i, x)| *x as f32 + steps(k, i) * step)
                .collect();
            (
                name,
                Tensor::new(t.shape.clone(), npu_audit::data::tensor::TensorData::Float32(v)).unwrap(),
            )
        })
        .collect();
    let refs: Vec<(String, &Tensor)> = moved.iter().map(|(n, t)| (n.clone(), t)).collect();
    npu_audit::data::tensor::write_npz(&dst.join("outputs.npz"), &refs).unwrap();
}

#[test]
fn rounding_noise_malformed_and_hostile_copies_of_a_capture() {
    let dir = tempdir();
    let ins = inputs(dir.path());
    let sim = dir.path().join("sim");
    let (code, err) = capture(
        &ins,
        &sim,
        &["--ep", "qnn", "--qnn-plugin", &qnn_plugin(), "--chipset", "sm8650"],
    );
    assert_eq!(code, 0, "{err}");
    let round = dir.path().join("round");
    moved_copy(&sim, &round, |k, i| if k == 0 && i == 3 { -1.0 } else { 0.0 });
    let noise = dir.path().join("noise");
    moved_copy(&sim, &noise, |_, i| if i % 2 == 0 { 7.0 } else { -7.0 });
    let broken = dir.path().join("broken");
    moved_copy(&sim, &broken, |_, _| 0.0);
    let bytes = std::fs::read(broken.join("outputs.npz")).unwrap();
    std::fs::write(broken.join("outputs.npz"), &bytes[..bytes.len() / 2]).unwrap();
    let hostile = dir.path().join("hostile.zip");
    {
        use std::io::Write as _;
        let mut z = zip::ZipWriter::new(std::fs::File::create(&hostile).unwrap());
        let o = zip::write::SimpleFileOptions::default();
        for (name, data) in [
            ("device.json", std::fs::read(sim.join("device.json")).unwrap()),
            ("outputs.npz", std::fs::read(sim.join("outputs.npz")).unwrap()),
            ("../../escape.txt", b"pwned".to_vec()),
        ] {
            z.start_file(name, o).unwrap();
            z.write_all(&data).unwrap();
        }
        z.finish().unwrap();
    }
    let t = triage(&[&sim, &round, &noise, &broken, &hostile]);
    let kind = |name: &str| entry(&t, name)["verdict"]["kind"].as_str().unwrap().to_string();
    assert_eq!(kind("sim"), "reproduced");
    assert_eq!(kind("round"), "rounding", "{}", entry(&t, "round")["verdict"]);
    let to_sim = |name: &str| {
        entry(&t, name)["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["target"] == "qnn:sm8650")
            .unwrap()["steps"]
            .clone()
    };
    assert_eq!(
        (
            to_sim("round")["off_by_one"].as_u64(),
            to_sim("round")["max_steps"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(kind("noise"), "unexplained", "{}", entry(&t, "noise")["verdict"]);
    assert_eq!(to_sim("noise")["max_steps"].as_u64(), Some(7));
    assert_eq!(kind("broken"), "malformed");
    assert_eq!(kind("hostile.zip"), "malformed");
    let why = entry(&t, "hostile.zip")["verdict"]["sentence"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("escape.txt"), "{why}");
    assert!(!dir.path().join("escape.txt").exists() && !dir.path().parent().unwrap().join("escape.txt").exists());
}
