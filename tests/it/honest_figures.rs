//! A figure is reported only over what was measured, and what was not measured is said and gates
//! as unknown: a generation gate on one sample, a sample a crash cut off, a policy's
//! `min_accuracy` on a generation audit, logits that turn NaN, a reference that produced no
//! number, parts of two models, shard counts above the set, `repro --input-shape`, and a stored
//! verdict edited to pass. Every case runs the real binary on copies of the repository's tiny
//! generation models and classifier fixture (edited here where the case needs a hostile file),
//! and every expected figure is worked out here from its definition.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn data(rel: &str) -> String {
    repo(&format!("tests/data/generation/{rel}")).display().to_string()
}

/// `eval SPEC --format json ARGS` with `env`: exit code, report, stderr.
fn audit_env(spec: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let mut cmd = bin();
    cmd.args(["eval", spec, "--format", "json", "--no-config"]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        stderr,
    )
}

fn rules<'a>(report: &'a Value, rule: &str) -> Vec<&'a Value> {
    report["gate"]["rules"]
        .as_array()
        .expect("gate rules")
        .iter()
        .filter(|r| r["rule"] == rule)
        .collect()
}

fn target_of<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("no target {id}"))
}

/// The one-sided 95% Wilson score bounds of k in n, from the formula (z = 1.6448536).
fn wilson(k: f64, n: f64) -> (f64, f64) {
    let z: f64 = 1.644_853_626_951_472_2;
    let p = k / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// A copy of tests/data/generation in a fresh directory (the specs name their files relatively).
fn generation_copy() -> tempfile::TempDir {
    let dir = tempdir();
    copy_dir(&repo("tests/data/generation"), dir.path());
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn a_transcribe_gate_on_one_sample_cannot_pass_a_tenth_of_a_point() {
    let (code, report, stderr) = audit_env(
        &data("tiny_u8.toml"),
        &[
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
            "--no-baseline",
            "--max-accuracy-drop",
            "0.1",
            "--limit",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    let t = target_of(&report, "cpu");
    // One sample whose text is the reference's: no word edit differs, the bootstrap has no spread.
    assert_eq!(t["summary"]["same_text"], 1);
    assert_eq!(t["summary"]["wer_delta_interval"], Value::Null);
    assert!(t["summary"]["wer_delta_unbounded"]
        .as_str()
        .unwrap()
        .contains("1 sample cannot bound the change"));
    let r = rules(&report, "max_accuracy_drop");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["measured"], "nan");
    assert_eq!(r[0]["measure"], "wer_increase");
    assert_eq!(r[0]["pass"], false);
    assert_eq!(report["gate"]["verdict"], "fail");
    // The same sample judged on texts that differ (generate) has a Wilson bound: 0 of 1 differ,
    // upper bound z²/(1 + z²) = 73.01 points.
    let (code, report, stderr) = audit_env(
        &data("tiny_u8.toml"),
        &[
            "--dataset",
            &data("set_ed"),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--no-baseline",
            "--max-accuracy-drop",
            "0.1",
            "--limit",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    let r = rules(&report, "max_accuracy_drop");
    assert_close("Wilson bound", num(&r[0]["measured"]), 100.0 * wilson(0.0, 1.0).1, 1e-9);
    assert_close("by hand", num(&r[0]["measured"]), 73.0126, 1e-4);
}

#[test]
fn a_sample_cut_off_by_a_crash_is_not_scored_and_an_allowed_failure_goes_ungated() {
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
            "--no-baseline",
            "--max-accuracy-drop",
            "90",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let crash = [("NPU_AUDIT_FAULT_INJECT", "cpu=crash@3")];
    let a = args(&[]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, report, stderr) = audit_env(&data("tiny_u8.toml"), &a, &crash);
    assert_eq!(code, 3, "a required target that did not finish: {stderr}");
    let t = target_of(&report, "cpu");
    let cut: Vec<&Value> = t["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stop"] == "failed")
        .collect();
    assert!(!cut.is_empty(), "the crash cut a sample off: {t}");
    for s in &cut {
        assert_eq!(s["scored"], false, "{s}");
    }
    let m = &t["summary"];
    let unfinished: Vec<&str> = m["unfinished"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(unfinished.len(), 6, "every sample from the crash on: {m}");
    assert_eq!(m["samples"], 0, "nothing scored: {m}");
    assert_eq!(m["scores"], Value::Null, "no WER from a cut transcript: {m}");
    let ran = rules(&report, "ran");
    assert_eq!(ran[0]["pass"], false);
    assert!(
        ran[0]["origin"]
            .as_str()
            .unwrap()
            .contains("6 of 6 samples did not finish"),
        "{}",
        ran[0]
    );
    assert!(
        rules(&report, "max_accuracy_drop").is_empty(),
        "not judged on what it decoded"
    );
    // Allowed to fail: exit 0, and the report and the terminal say it went ungated.
    let a = args(&["--allow-failure", "cpu"]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, report, stderr) = audit_env(&data("tiny_u8.toml"), &a, &crash);
    assert_eq!(code, 0, "{stderr}");
    let ran = rules(&report, "ran");
    assert_eq!(
        (&ran[0]["pass"], &ran[0]["ungated"]),
        (&Value::Bool(true), &Value::Bool(true))
    );
    let table = bin()
        .args(["eval", &data("tiny_u8.toml"), "--no-config"])
        .args(&a)
        .env("NPU_AUDIT_FAULT_INJECT", "cpu=crash@3")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("cpu: allowed to fail: it crashed (6 of 6 samples did not finish); not gated"),
        "{text}"
    );
    assert!(text.contains("VERDICT PASS (not gated: cpu)"), "{text}");
}

#[test]
fn a_policys_min_accuracy_gates_a_generation_audit_and_a_limit_it_does_not_apply_is_said() {
    let dir = tempdir();
    let policy = dir.path().join("npu-audit.toml");
    std::fs::write(&policy, "[target.\"cpu\"]\nmin_accuracy = 0.99\nmin_sqnr_db = 30\n").unwrap();
    let out = bin()
        .args([
            "eval",
            &data("tiny_u8.toml"),
            "--format",
            "json",
            "--config",
            &p(&policy),
        ])
        .args([
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
            "--no-baseline",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = rules(&report, "min_accuracy");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["measure"], "exact_transcripts");
    assert_eq!(r[0]["bound"], "wilson_lower");
    assert!(
        r[0]["origin"].as_str().unwrap().ends_with("npu-audit.toml:2"),
        "{}",
        r[0]
    );
    let scores = &target_of(&report, "cpu")["summary"]["scores"];
    let (k, n) = (num(&scores["exact"]), num(&scores["samples"]));
    assert_close("Wilson lower bound", num(&r[0]["measured"]), wilson(k, n).0, 1e-9);
    assert_eq!(r[0]["pass"], false);
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.ends_with(
            "npu-audit.toml:3: min_sqnr_db is not applied by generation audits (it gates compare, matrix audits)"
        )),
        "{notes:?}"
    );
}

/// A step part whose logits are NaN from position `from` on: `logits + Where(position_ids > from
/// - 0.5, NaN, 0)` appended to `model`'s graph.
fn poison_logits(model: &Path, from: f32) {
    use npu_audit::data::model::pb::{attribute_proto, tensor_proto::DataType, AttributeProto, NodeProto, TensorProto};
    use prost::Message;
    let mut m = npu_audit::data::model::pb::ModelProto::decode(std::fs::read(model).unwrap().as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    for n in g.node.iter_mut() {
        for o in n.output.iter_mut().filter(|o| *o == "logits") {
            *o = "logits_raw".into();
        }
    }
    let scalar = |name: &str, v: f32| TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Float as i32),
        dims: vec![],
        raw_data: Some(v.to_le_bytes().to_vec()),
        ..Default::default()
    };
    g.initializer.push(scalar("poison_from", from - 0.5));
    g.initializer.push(scalar("poison_nan", f32::NAN));
    g.initializer.push(scalar("poison_zero", 0.0));
    let op = |op: &str, ins: &[&str], out: &str| NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        name: Some(format!("poison_{out}")),
        op_type: Some(op.into()),
        ..Default::default()
    };
    let mut cast = op("Cast", &["position_ids"], "poison_pos");
    cast.attribute.push(AttributeProto {
        name: Some("to".into()),
        r#type: Some(attribute_proto::AttributeType::Int as i32),
        i: Some(DataType::Float as i64),
        ..Default::default()
    });
    g.node.push(cast);
    g.node
        .push(op("Greater", &["poison_pos", "poison_from"], "poison_late"));
    g.node
        .push(op("Where", &["poison_late", "poison_nan", "poison_zero"], "poison_add"));
    g.node.push(op("Add", &["logits_raw", "poison_add"], "logits"));
    std::fs::write(model, m.encode_to_vec()).unwrap();
}

#[test]
fn logits_that_turn_nan_are_counted_per_sample_and_target_and_left_out_of_the_means() {
    let dir = generation_copy();
    let d = dir.path();
    // From position 5 on: each prompt is <s> and n ids (positions 0..n), so step k's logits come
    // from position n + k, and are NaN when n + k >= 5.
    poison_logits(&d.join("lm_step_u8.onnx"), 5.0);
    let (code, report, stderr) = audit_env(
        &p(&d.join("lm_u8.toml")),
        &[
            "--dataset",
            &p(&d.join("set_lm")),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--no-baseline",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let t = target_of(&report, "cpu");
    let mut expected_total = 0;
    let mut finite_kl: Vec<f64> = Vec::new();
    for (s, r) in t["samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip(report["reference_samples"].as_array().unwrap())
    {
        let id = s["id"].as_str().unwrap();
        let prompt = npz_array(&d.join(format!("set_lm/{id}.npz")), "input_ids").shape[1];
        let reference_steps = r["tokens"].as_array().unwrap().len();
        let nan_steps = (0..reference_steps).filter(|k| prompt + k >= 5).count();
        assert_eq!(
            s["nonfinite_steps"], nan_steps,
            "{id}: prompt {prompt}, {reference_steps} steps"
        );
        let steps = s["steps"].as_array().unwrap();
        assert_eq!(steps.len(), reference_steps, "{id}");
        for (k, f) in steps.iter().enumerate() {
            assert_eq!(f["kl"] == "nan", prompt + k >= 5, "{id} step {k}: {f}");
            if f["kl"] != "nan" {
                finite_kl.push(num(&f["kl"]));
            }
        }
        expected_total += nan_steps;
    }
    assert!(expected_total > 0 && !finite_kl.is_empty());
    let m = &t["summary"];
    assert_eq!(m["nonfinite_steps"], expected_total);
    let mean = finite_kl.iter().sum::<f64>() / finite_kl.len() as f64;
    assert_close("mean KL over the finite steps", num(&m["mean_kl"]), mean, 1e-12);
    let notes = report["notes"].to_string();
    assert!(
        notes.contains(&format!(
            "cpu: {expected_total} of {} teacher-forced steps have logits that are not all finite",
            m["steps"]
        )),
        "{notes}"
    );
    let table = bin()
        .args(["eval", &p(&d.join("lm_u8.toml")), "--no-config"])
        .args([
            "--dataset",
            &p(&d.join("set_lm")),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--no-baseline",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    let finite = num(&m["steps"]) as usize - expected_total;
    assert!(text.contains(&format!("({finite} of {} steps)", m["steps"])), "{text}");
}

#[test]
fn a_reference_that_gives_no_number_leaves_its_sample_unscored_for_every_target() {
    let dir = generation_copy();
    let d = dir.path();
    // ed02's features all NaN: the reference's logits hold no number at its first step.
    let path = d.join("set_ed/ed02.npz");
    let features = npz_array(&path, "input_features");
    let nan = npu_audit::data::tensor::Tensor::new(
        features.shape.clone(),
        npu_audit::data::tensor::TensorData::Float32(vec![f32::NAN; features.len()]),
    )
    .unwrap();
    npu_audit::data::tensor::write_npz(&path, &[("input_features".to_string(), &nan)]).unwrap();
    let (code, report, stderr) = audit_env(
        &p(&d.join("tiny_u8.toml")),
        &["--dataset", &p(&d.join("set_ed")), "--task", "transcribe", "-t", "cpu"],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let unscored: Vec<&str> = report["unscored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_str().unwrap())
        .collect();
    assert_eq!(unscored, ["ed02"]);
    assert_eq!(report["reference_scores"]["samples"], 5);
    for t in report["targets"].as_array().unwrap() {
        let m = &t["summary"];
        assert_eq!(m["samples"], 5, "{}", t["id"]);
        let rows: Vec<&Value> = t["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["scored"] == true)
            .collect();
        assert_eq!(rows.len(), 5);
        let same = rows.iter().filter(|s| s["same_text"] == true).count();
        let diverged = rows.iter().filter(|s| !s["first_divergence"].is_null()).count();
        assert_eq!(m["same_text"], same, "{}", t["id"]);
        assert_eq!(m["diverged"], diverged, "{}", t["id"]);
        // A text that differs diverged somewhere.
        assert!(
            diverged >= 5 - same,
            "{}: {diverged} diverged, {same} of 5 same",
            t["id"]
        );
    }
    assert!(report["notes"]
        .to_string()
        .contains("the reference's logits held no number on 1 sample: ed02"));
}

/// An encoder of `[1, 8, 32]` features whose hidden state is 24 wide, not the decoder's 16: a
/// part of another model.
fn wide_encoder(path: &Path) {
    use npu_audit::data::model::pb::{tensor_proto::DataType, NodeProto, TensorProto};
    use prost::Message;
    write_model(
        path,
        vec![],
        vec![tensor_value_info("input_features", 1, &[1, 8, 32])],
        vec![tensor_value_info("last_hidden_state", 1, &[1, 16, 24])],
    );
    let mut m = npu_audit::data::model::pb::ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    g.initializer.push(TensorProto {
        name: Some("w".into()),
        data_type: Some(DataType::Float as i32),
        dims: vec![32, 48],
        float_data: vec![0.01; 32 * 48],
        ..Default::default()
    });
    g.initializer.push(TensorProto {
        name: Some("shape".into()),
        data_type: Some(DataType::Int64 as i32),
        dims: vec![3],
        int64_data: vec![1, 16, 24],
        ..Default::default()
    });
    let op = |t: &str, ins: &[&str], out: &str| NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        name: Some(out.into()),
        op_type: Some(t.into()),
        ..Default::default()
    };
    g.node.push(op("MatMul", &["input_features", "w"], "h"));
    g.node.push(op("Reshape", &["h", "shape"], "last_hidden_state"));
    std::fs::write(path, m.encode_to_vec()).unwrap();
}

#[test]
fn parts_of_two_models_are_refused_before_any_session() {
    let dir = generation_copy();
    let d = dir.path();
    wide_encoder(&d.join("wide_encoder.onnx"));
    let spec = d.join("tiny_u8.toml");
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("\"encoder_u8.onnx\"", "\"wide_encoder.onnx\"");
    std::fs::write(&spec, text).unwrap();
    let out = bin()
        .args([
            "eval",
            &p(&spec),
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("part encoder's last_hidden_state is [1,16,24] and part prompt's encoder_hidden_states is [1,16,16]: the parts are not of one model"),
        "{stderr}"
    );
    assert!(!stderr.contains("generate:"), "refused before any session: {stderr}");
}

/// A set of `n` samples of the CNN fixture's `image` [1, 3, 32, 32], labelled by the reference.
fn cnn_set(dir: &Path, n: usize) -> PathBuf {
    let set = dir.join("set");
    std::fs::create_dir_all(&set).unwrap();
    for k in 0..n {
        let values: Vec<f32> = (0..3 * 32 * 32)
            .map(|i| ((i * 7 + k * 13) % 97) as f32 / 97.0)
            .collect();
        let t = npu_audit::data::tensor::Tensor::new(
            vec![1, 3, 32, 32],
            npu_audit::data::tensor::TensorData::Float32(values),
        )
        .unwrap();
        npu_audit::data::tensor::write_npz(&set.join(format!("s{k}.npz")), &[("image".to_string(), &t)]).unwrap();
    }
    set
}

#[test]
fn more_eval_shards_than_the_set_can_feed_are_refused_as_plan_refuses_them() {
    let dir = tempdir();
    let set = cnn_set(dir.path(), 4);
    let model = repo("fixtures/models/cnn_qdq_u8.onnx");
    let out_file = dir.path().join("sh1.json");
    let plan = bin()
        .args([
            "plan",
            "--shards",
            "10",
            "--",
            "eval",
            &p(&model),
            "--dataset",
            &p(&set),
            "--task",
            "agree",
            "-t",
            "cpu",
        ])
        .output()
        .unwrap();
    let plan_err = String::from_utf8_lossy(&plan.stderr).to_string();
    assert_eq!(plan.status.code(), Some(2), "{plan_err}");
    let out = bin()
        .args([
            "eval",
            &p(&model),
            "--dataset",
            &p(&set),
            "--task",
            "agree",
            "-t",
            "cpu",
            "--shard",
            "1/10",
        ])
        .args(["--out", &p(&out_file)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // The same reason, named by the flag each was given.
    let reason = plan_err.split_once("--shards 10: ").unwrap().1.trim();
    assert!(
        stderr.contains(&format!("--shard 1/10: {reason}")),
        "{stderr} vs {plan_err}"
    );
    assert!(!out_file.exists());
}

#[test]
fn repro_takes_input_shape_as_compare_does() {
    let dir = tempdir();
    let bundle = dir.path().join("b");
    let real = |f: &str| p(&repo(&format!("fixtures/real/{f}")));
    let out = bin()
        .args([
            "repro",
            &real("ppocr_cls_qdq_u8.onnx"),
            "--reference",
            &real("ppocr_cls_fp32.onnx"),
        ])
        .args([
            "--target",
            "cpu",
            "--against",
            "golden",
            "--input-shape",
            "x:1,3,48,192",
            "--out",
            &p(&bundle),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{stderr}");
    assert!(bundle.join("bundle.json").is_file() || bundle.exists(), "{stderr}");
}

/// A report's JSON with `edit` applied, written beside `dir`.
fn edited(from: &str, dir: &Path, edit: impl Fn(&mut Value)) -> PathBuf {
    let mut v: Value = serde_json::from_str(from).unwrap();
    edit(&mut v);
    let path = dir.join("edited.json");
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    path
}

#[test]
fn render_judges_a_stored_verdict_again_and_refuses_one_its_figures_contradict() {
    let dir = tempdir();
    let d = dir.path();
    // A failing generation report (2 of 4 texts differ; Wilson bound 81.76 points > 80).
    let out = bin()
        .args(["eval", &data("lm_u8.toml"), "--format", "json", "--no-config"])
        .args([
            "--dataset",
            &data("set_lm"),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--max-accuracy-drop",
            "80",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let ok = d.join("ok.json");
    std::fs::write(&ok, &text).unwrap();
    let rendered = bin().args(["render", &p(&ok)]).output().unwrap();
    assert_eq!(rendered.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&rendered.stdout).contains("VERDICT FAIL (cpu)"));
    let passing = |v: &mut Value| {
        for r in v["gate"]["rules"].as_array_mut().unwrap() {
            r["pass"] = true.into();
        }
        v["gate"]["verdict"] = "pass".into();
        v["exit_code"] = 0.into();
    };
    for (what, edit) in [
        ("a pass edited in", Box::new(passing) as Box<dyn Fn(&mut Value)>),
        (
            "a bound edited under its limit",
            Box::new(move |v: &mut Value| {
                passing(v);
                let rules = v["gate"]["rules"].as_array_mut().unwrap();
                let r = rules.iter_mut().find(|r| r["rule"] == "max_accuracy_drop").unwrap();
                r["measured"] = 10.0.into();
            }),
        ),
        (
            "an exit code edited",
            Box::new(|v: &mut Value| v["exit_code"] = 0.into()),
        ),
    ] {
        let path = edited(&text, d, edit);
        let out = bin().args(["render", &p(&path)]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("VERDICT PASS"), "{what}");
        assert!(
            stderr.contains("does not follow from the report's own figures"),
            "{what}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    // A compare report edited the same way.
    let cnn = std::fs::read_to_string(repo("fixtures/reports/cnn.json")).unwrap();
    let path = edited(&cnn, d, |v| {
        for r in v["gate"]["rules"].as_array_mut().unwrap() {
            r["pass"] = true.into();
        }
        v["gate"]["verdict"] = "pass".into();
        v["exit_code"] = 0.into();
    });
    let out = bin().args(["render", &p(&path)]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_report_says_its_kind_and_one_of_the_previous_layout_is_still_read() {
    let dir = tempdir();
    let d = dir.path();
    let cnn = std::fs::read_to_string(repo("fixtures/reports/cnn.json")).unwrap();
    let v: Value = serde_json::from_str(&cnn).unwrap();
    assert_eq!(
        (&v["kind"], &v["tool"]["name"]),
        (&Value::from("compare"), &Value::from("npu-audit"))
    );
    // A wrong kind is named as such, not as a missing field.
    let wrong = edited(&cnn, d, |v| v["kind"] = "eval".into());
    let out = bin().args(["render", &p(&wrong)]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("(an eval report)") && !stderr.contains("missing field `kind`"),
        "{stderr}"
    );
    let unknown = edited(&cnn, d, |v| v["kind"] = "verdicts".into());
    let out = bin().args(["render", &p(&unknown)]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("kind 'verdicts' is not a kind of report npu-audit writes"));
    // The layout before `kind`: read, and rendered as today's.
    let old = edited(&cnn, d, |v| {
        v.as_object_mut().unwrap().remove("kind");
        v["schema_version"] = 1.into();
    });
    let then = bin().args(["render", &p(&old)]).output().unwrap();
    let now = bin()
        .args(["render", &repo("fixtures/reports/cnn.json").display().to_string()])
        .output()
        .unwrap();
    assert_eq!(then.status.code(), Some(0), "{}", String::from_utf8_lossy(&then.stderr));
    assert_eq!(then.stdout, now.stdout);
    // A generation report given where an eval report is read names the kind it needs.
    let out = bin()
        .args(["eval", &data("lm_u8.toml"), "--format", "json", "--no-config"])
        .args([
            "--dataset",
            &data("set_lm"),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--no-baseline",
        ])
        .output()
        .unwrap();
    let gen = d.join("gen.json");
    std::fs::write(&gen, &out.stdout).unwrap();
    let sized = bin()
        .args(["sample-size", "--from", &p(&gen), "--max-accuracy-drop", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&sized.stderr);
    assert_eq!(sized.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("a generation report; --from reads an eval report"),
        "{stderr}"
    );
    let merged = bin().args(["merge", &p(&gen), &p(&gen)]).output().unwrap();
    let stderr = String::from_utf8_lossy(&merged.stderr);
    assert_eq!(merged.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a generation report, not a compare report"), "{stderr}");
}
