//! The phone's own CPU fallback, emulated (`cpu-arm64:<core>`, `docs/hosts.md`): its outputs are
//! the aarch64 wheel's own, checked here against the wheel's Python API run under the same
//! emulation by a script of this test; its integer kernels (dot product, i8mm) compute what the
//! ONNX spec says, recomputed here; it differs from the x86 CPU EP where the real models said
//! it would; and triage recognises a device whose outputs are the ARM64 CPU EP's as a CPU
//! fallback.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
use serde_json::Value;

/// The emulation's directory, from where the report says the emulated library lives.
fn emulation_root(report: &Value, id: &str) -> PathBuf {
    let library = target(report, id)["runtime"]["library"].as_str().unwrap().to_string();
    Path::new(&library).ancestors().nth(3).unwrap().to_path_buf()
}

/// Runs `model` on `inputs` (an `.npz`) with the aarch64 wheel's Python API under qemu's model of
/// `core`, as a user would by hand, and returns the outputs as `.npz` bytes' path.
fn by_hand(root: &Path, core: &str, model: &Path, inputs: &Path, out: &Path) {
    let script = out.with_extension("py");
    std::fs::write(
        &script,
        r#"import sys, numpy as np, onnxruntime as ort
model, inputs, out = sys.argv[1:]
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feed = dict(np.load(inputs))
names = [o.name for o in s.get_outputs()]
np.savez(out, **dict(zip(names, s.run(names, feed))))
"#,
    )
    .unwrap();
    let done = std::process::Command::new(root.join("qemu/qemu-aarch64"))
        .env_clear()
        .env("PYTHONPATH", root.join("site"))
        .env("PYTHONNOUSERSITE", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg("-L")
        .arg(root.join("sysroot"))
        .args(["-cpu", core])
        .arg(root.join("sysroot/usr/bin/python3.11"))
        .arg("-s")
        .arg(&script)
        .args([model, inputs, out])
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
}

fn differing_bits(a: &Tensor, b: &Tensor) -> usize {
    let (x, y) = (values(a), values(b));
    x.iter().zip(&y).filter(|(p, q)| p.to_bits() != q.to_bits()).count()
}

/// The MiniLM fixture (a16w8) on the x86 CPU EP and two emulated cores: the emulated outputs
/// are the wheel's own, bit for bit, and differ from the x86 build's.
#[test]
fn emulated_targets_give_the_aarch64_wheels_own_outputs() {
    let dir = tempdir();
    let saved = dir.path().join("saved");
    let (model, inputs) = (
        repo("fixtures/real/minilm_l2_qdq_a16w8.onnx"),
        repo("fixtures/inputs/minilm_seed7.npz"),
    );
    let (code, report, stderr) = compare_json(&[
        model.to_str().unwrap(),
        "--reference",
        repo("fixtures/real/minilm_l2_fp32.onnx").to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "-t",
        "cpu",
        "-t",
        "cpu-arm64:cortex-a76",
        "-t",
        "arm64",
        "--fingerprint",
        "off",
        "--save-outputs",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    for id in ["cpu-arm64:cortex-a76", "cpu-arm64:cortex-a710"] {
        let t = target(&report, id);
        assert_eq!(t["status"], "ok", "{}", t["error"]);
        assert_eq!(t["host"]["dependence"], "independent");
        assert!(t["runtime"]["emulation"].as_str().unwrap().contains("aarch64 wheel"));
    }
    let root = emulation_root(&report, "cpu-arm64:cortex-a710");
    let x86 = npz_array(&saved.join("cpu/s0.npz"), "token_embeddings");
    for core in ["cortex-a76", "cortex-a710"] {
        let hand = dir.path().join(format!("{core}.npz"));
        by_hand(&root, core, &model, &inputs, &hand);
        let tool = npz_array(&saved.join(format!("cpu-arm64_{core}/s0.npz")), "token_embeddings");
        let own = npz_array(&hand, "token_embeddings");
        assert_eq!(tool.shape, own.shape);
        assert_eq!(
            differing_bits(&tool, &own),
            0,
            "{core}: the tool's outputs are not the wheel's"
        );
        assert!(
            differing_bits(&tool, &x86) > 0,
            "{core}: no difference from the x86 build on a16w8"
        );
    }
}

/// `y = QuantizeLinear(x, 0.05, 128)`, `z = MatMulInteger(y as [4, 64], W, 128, 0)`: ONNX's
/// rounding (half to even) and exact integer products, recomputed here from the spec.
#[test]
fn an_emulated_cores_integer_kernels_compute_what_the_onnx_spec_says() {
    use npu_audit::data::model::pb::{tensor_proto::DataType, NodeProto, TensorProto};
    let dir = tempdir();
    let model = dir.path().join("mmi.onnx");
    let w: Vec<i8> = (0..64 * 16)
        .map(|k| (k * 37 + 11) % 255 - 127)
        .map(|v| v as i8)
        .collect();
    let init = |name: &str, dt: DataType, dims: Vec<i64>, raw: Vec<u8>| TensorProto {
        name: Some(name.into()),
        data_type: Some(dt as i32),
        dims,
        raw_data: Some(raw),
        ..Default::default()
    };
    let nodes = vec![
        NodeProto {
            input: vec!["x".into(), "s".into(), "zp".into()],
            output: vec!["y".into()],
            name: Some("q".into()),
            op_type: Some("QuantizeLinear".into()),
            ..Default::default()
        },
        NodeProto {
            input: vec!["y".into(), "w".into(), "zp".into()],
            output: vec!["z".into()],
            name: Some("mm".into()),
            op_type: Some("MatMulInteger".into()),
            ..Default::default()
        },
    ];
    write_model(
        &model,
        nodes,
        vec![tensor_value_info("x", 1, &[4, 64])],
        vec![tensor_value_info("y", 2, &[4, 64]), tensor_value_info("z", 6, &[4, 16])],
    );
    // The initializers, added to the written graph.
    {
        use prost::Message;
        let mut m = npu_audit::data::model::pb::ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
        let g = m.graph.as_mut().unwrap();
        g.initializer
            .push(init("s", DataType::Float, vec![], 0.05f32.to_le_bytes().to_vec()));
        g.initializer.push(init("zp", DataType::Uint8, vec![], vec![128]));
        g.initializer.push(init(
            "w",
            DataType::Int8,
            vec![64, 16],
            w.iter().map(|v| *v as u8).collect(),
        ));
        std::fs::write(&model, m.encode_to_vec()).unwrap();
    }
    // Ties (k.5 steps) both ways, and values beyond the range.
    let x: Vec<f32> = (0..256)
        .map(|k| (k as f32 - 128.0) * 0.025 + if k % 7 == 0 { 9.0 } else { 0.0 })
        .collect();
    let inputs = dir.path().join("x.npz");
    let xt = Tensor::new(vec![4, 64], TensorData::Float32(x.clone())).unwrap();
    write_npz(&inputs, &[("x".to_string(), &xt)]).unwrap();
    let saved = dir.path().join("saved");
    let (code, _, stderr) = compare_json(&[
        model.to_str().unwrap(),
        "--reference",
        model.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "-t",
        "cpu-arm64:cortex-a76",
        "-t",
        "cpu-arm64:cortex-a710",
        "--no-baseline",
        "--fingerprint",
        "off",
        "--save-outputs",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let q: Vec<i64> = x
        .iter()
        .map(|v| ((*v / 0.05f32).round_ties_even() as f64 + 128.0).clamp(0.0, 255.0) as i64)
        .collect();
    let z: Vec<i64> = (0..4 * 16)
        .map(|k| {
            let (r, c) = (k / 16, k % 16);
            (0..64).map(|i| (q[r * 64 + i] - 128) * w[i * 16 + c] as i64).sum()
        })
        .collect();
    for core in ["cortex-a76", "cortex-a710"] {
        let dir = saved.join(format!("cpu-arm64_{core}/s0.npz"));
        let got_q: Vec<i64> = values(&npz_array(&dir, "y")).iter().map(|v| *v as i64).collect();
        let got_z: Vec<i64> = values(&npz_array(&dir, "z")).iter().map(|v| *v as i64).collect();
        assert_eq!(got_q, q, "{core}: QuantizeLinear");
        assert_eq!(got_z, z, "{core}: MatMulInteger");
    }
}

/// Writes a device report of one sample's `output` (the tensor as the model gives it) whose
/// `device.json` names `soc`.
fn phone_report(dir: &Path, output: &str, t: &Tensor, soc: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut shape = vec![1];
    shape.extend(&t.shape);
    let stacked = Tensor::new(shape, t.data.clone()).unwrap();
    write_npz(&dir.join("outputs.npz"), &[(output.to_string(), &stacked)]).unwrap();
    std::fs::write(dir.join("device.json"), format!(r#"{{"soc_model": "{soc}"}}"#)).unwrap();
    dir.to_path_buf()
}

/// The triage's JSON of `reports` with the default candidates (and `extra` flags).
fn triage_json(model: &Path, common: &[&str], reports: &Path, extra: &[&str]) -> Value {
    triage_json_with(model, common, reports, extra, None)
}

/// As [`triage_json`], with `NPU_AUDIT_FAULT_INJECT` set to `faults`.
fn triage_json_with(model: &Path, common: &[&str], reports: &Path, extra: &[&str], faults: Option<&str>) -> Value {
    let mut cmd = bin();
    cmd.args(
        [
            &["triage", model.to_str().unwrap(), reports.to_str().unwrap()][..],
            common,
            &["--format", "json"],
            extra,
        ]
        .concat(),
    );
    if let Some(f) = faults {
        cmd.env("NPU_AUDIT_FAULT_INJECT", f);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn entry_of<'a>(t: &'a Value, dir: &str) -> &'a Value {
    let reports = t["reports"].as_array().unwrap();
    reports
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with(dir))
        .unwrap_or_else(|| panic!("no report {dir} in {reports:?}"))
}

fn candidate_ids(entry: &Value) -> Vec<String> {
    entry["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["target"].as_str().unwrap().to_string())
        .collect()
}

/// A device whose outputs are the ARM64 CPU EP's (not the x86 build's), triaged without being
/// told to try the phone's CPU: its silent CPU fallback is found, named as the phone's own class
/// of kernels (SM8650's phones hide SVE, so the i8mm core is tried first); with `--no-arm64` it is
/// unexplained, as before, and says which CPU EPs were tried; a report one bit away from the
/// ARM64 outputs stays unexplained after the phone's cores were tried, and says so.
#[test]
fn triage_finds_a_silent_fallback_to_the_phones_own_arm64_cpu_by_itself() {
    let dir = tempdir();
    let saved = dir.path().join("saved");
    let model = repo("fixtures/real/ppocr_cls_qdq_a16w8.onnx");
    let reference = repo("fixtures/real/ppocr_cls_fp32.onnx");
    let inputs = repo("fixtures/inputs/ppocr_seed3.npz");
    let db = dir.path().join("triage.db");
    let common_args = [
        "--reference",
        reference.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ];
    let (code, _, stderr) = compare_json(&[
        model.to_str().unwrap(),
        "--reference",
        reference.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "-t",
        "cpu",
        "-t",
        "cpu-arm64",
        "--fingerprint",
        "off",
        "--save-outputs",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let output = "save_infer_model/scale_0.tmp_1";
    let arm = npz_array(&saved.join("cpu-arm64_cortex-a710/s0.npz"), output);
    let x86 = npz_array(&saved.join("cpu/s0.npz"), output);
    assert!(
        differing_bits(&arm, &x86) > 0,
        "the a16w8 classifier's ARM64 outputs should differ from x86's"
    );
    let fleet = dir.path().join("fleet");
    phone_report(&fleet.join("fallback"), output, &arm, "SM8650");
    // One element one unit in the last place away: no CPU EP gives it.
    let mut nudged = arm.clone();
    if let TensorData::Float32(v) = &mut nudged.data {
        v[0] = f32::from_bits(v[0].to_bits() + 1);
    }
    phone_report(&fleet.join("other"), output, &nudged, "SM8650");

    // The phone's cores crash here: said, and the entries are not kept, so the next triage
    // (below, on the same store) runs them again.
    let crashed = triage_json_with(
        &model,
        &common_args,
        &fleet,
        &[],
        Some("cpu-arm64:cortex-a710-nosve=crash;cpu-arm64:cortex-a710=crash"),
    );
    let missed = entry_of(&crashed, "fallback");
    assert_eq!(missed["verdict"]["kind"], "unexplained", "{missed}");
    let sentence = missed["verdict"]["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("; the phone's own CPU EP could not run here: cpu-arm64:cortex-a710-nosve crashed"),
        "{sentence}"
    );
    assert!(crashed["notes"]
        .to_string()
        .contains("and could not: cpu-arm64:cortex-a710-nosve crashed"));

    let t = triage_json(&model, &common_args, &fleet, &[]);
    assert_eq!(t["store"]["reports_from_store"], 0, "{}", t["store"]);
    let found = entry_of(&t, "fallback");
    assert_eq!(found["verdict"]["kind"], "cpu_fallback", "{found}");
    let sentence = found["verdict"]["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with(
            "identical to cpu-arm64:cortex-a710-nosve (as are cpu-arm64:cortex-a710: these inputs do not tell them apart):"
        ),
        "{sentence}"
    );
    assert!(sentence.contains("i8mm kernels"), "{sentence}");
    // Both classes SM8650's phones were seen with ran, and agree bit for bit on this model.
    for c in found["candidates"].as_array().unwrap() {
        if c["target"].as_str().unwrap().starts_with("cpu-arm64:") {
            assert_eq!(c["differing"], 0, "{c}");
        }
    }
    let ids = candidate_ids(found);
    let tail: Vec<&str> = ids.iter().rev().take(2).rev().map(String::as_str).collect();
    assert_eq!(
        tail,
        ["cpu-arm64:cortex-a710-nosve", "cpu-arm64:cortex-a710"],
        "{ids:?}"
    );
    let other = entry_of(&t, "other");
    assert_eq!(other["verdict"]["kind"], "unexplained", "{other}");
    let sentence = other["verdict"]["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("CPU EPs tried: cpu:noopt, cpu, cpu-arm64:cortex-a710-nosve, cpu-arm64:cortex-a710)"),
        "{sentence}"
    );
    let notes = t["notes"].to_string();
    assert!(
        notes.contains("2 reports on these inputs matched no simulation and were nearest a CPU EP"),
        "{notes}"
    );

    // Turned off: the symptom the issue reported, now with the CPU EPs it tried named.
    let off = triage_json(&model, &common_args, &fleet, &["--no-arm64"]);
    let missed = entry_of(&off, "fallback");
    assert_eq!(missed["verdict"]["kind"], "unexplained", "{missed}");
    let sentence = missed["verdict"]["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with("nothing here reproduces it (nearest cpu"),
        "{sentence}"
    );
    assert!(sentence.contains("; CPU EPs tried: cpu:noopt, cpu)"), "{sentence}");
    assert!(!candidate_ids(missed).iter().any(|id| id.starts_with("cpu-arm64")));
    assert!(!off["notes"].to_string().contains("phone's own ARM64"));

    // The store keeps the emulated runs: the same triage again makes no run.
    let again = triage_json(&model, &common_args, &fleet, &[]);
    assert_eq!(entry_of(&again, "fallback")["verdict"], found["verdict"]);
    assert_eq!(again["store"]["reports_from_store"], 2, "{}", again["store"]);
}
