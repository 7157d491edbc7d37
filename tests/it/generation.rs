//! `eval SPEC.toml --task transcribe|generate` end to end on the tiny encoder-decoder and
//! decoder-only models of tests/data/generation (made by `make_tiny.py` with NumPy and onnx
//! only). Every token, divergence, edit count, WER, CER and per-step KL, SQNR and top-1 is held to
//! `expected.json`, which make_tiny.py computed with a float64 NumPy forward pass of the fp32
//! models and an exact emulation of the QDQ ones; the tokens of every CPU and QNN target are also
//! held to `ort_greedy.py`, an onnxruntime-python greedy loop written from the spec's contract
//! (the QNN plugin registered in Python as ONNX Runtime's plugin API asks). Bad specs, a target
//! that crashes, and what is written on failure are checked too.

use crate::common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

fn data(rel: &str) -> String {
    repo(&format!("tests/data/generation/{rel}")).display().to_string()
}

fn expected() -> &'static Value {
    static E: OnceLock<Value> = OnceLock::new();
    E.get_or_init(|| {
        let text = std::fs::read_to_string(data("expected.json")).expect("expected.json");
        serde_json::from_str(&text).expect("expected.json parses")
    })
}

fn spec_expected(name: &str) -> &'static Value {
    &expected()["specs"][name]
}

/// Runs `eval SPEC --format json` (SPEC in tests/data/generation) with `args`; its exit code, report and stderr.
fn audit(spec: &str, args: &[&str]) -> (i32, Value, String) {
    audit_at(&data(spec), args)
}

/// `audit` of the spec at `path`.
fn audit_at(path: &str, args: &[&str]) -> (i32, Value, String) {
    let out = bin()
        .args(["eval", path, "--format", "json"])
        .args(args)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), report, stderr)
}

fn tokens(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

/// Positions after `from` whose tokens differ, a token one side lacks counting: written here
/// from the definition, not taken from the tool.
fn later_differing(a: &[u64], b: &[u64], from: usize) -> usize {
    (from + 1..a.len().max(b.len()))
        .filter(|&i| a.get(i) != b.get(i))
        .count()
}

/// Holds one target's decode of the set to the spec's expected figures, sample by sample.
fn check_target(t: &Value, want: &Value, reference: &Value) {
    let id = t["id"].as_str().unwrap();
    assert_eq!(t["status"], "ok", "{id}: {}", t["error"]);
    let samples = t["samples"].as_array().unwrap();
    let wanted = want["samples"].as_array().unwrap();
    assert_eq!(samples.len(), wanted.len(), "{id}");
    for ((s, w), r) in samples.iter().zip(wanted).zip(reference["samples"].as_array().unwrap()) {
        let sid = s["id"].as_str().unwrap();
        assert_eq!(sid, w["id"], "{id}");
        assert_eq!(tokens(&s["tokens"]), tokens(&w["tokens"]), "{id} {sid} tokens");
        assert_eq!(s["text"], w["text"], "{id} {sid} text");
        let stop = if w["ended"].as_bool().unwrap() {
            "end_token"
        } else {
            "limit"
        };
        assert_eq!(s["stop"], stop, "{id} {sid}");
        assert_eq!(s["token_edits"], w["token_edits"], "{id} {sid}");
        assert_eq!(s["words"]["edits"], w["word_edits"], "{id} {sid}");
        assert_eq!(s["words"]["of"], w["label_words"], "{id} {sid}");
        assert_eq!(s["chars"]["edits"], w["char_edits"], "{id} {sid}");
        match (&s["first_divergence"], &w["departure"]) {
            (Value::Null, Value::Null) => assert_eq!(s["later_differing"], 0),
            (got, want) => {
                assert_eq!(got["step"], want["step"], "{id} {sid} divergence");
                assert_eq!(got["reference_token"], want["reference_token"], "{id} {sid}");
                assert_eq!(got["target_token"], want["target_token"], "{id} {sid}");
                assert_close(
                    "margin",
                    num(&got["reference_margin"]),
                    num(&want["reference_margin"]),
                    1e-3,
                );
                let step = want["step"].as_u64().unwrap() as usize;
                let later = later_differing(&tokens(&r["tokens"]), &tokens(&w["tokens"]), step);
                assert_eq!(s["later_differing"].as_u64().unwrap() as usize, later, "{id} {sid}");
            }
        }
        let steps = s["steps"].as_array().unwrap();
        let forced = w["teacher_forced"].as_array().unwrap();
        assert_eq!(steps.len(), forced.len(), "{id} {sid}: one figure per reference step");
        for (k, (g, f)) in steps.iter().zip(forced).enumerate() {
            assert_eq!(g["top1"], f["top1"], "{id} {sid} step {k}");
            let (kl, want_kl) = (num(&g["kl"]), num(&f["kl"]));
            assert!(
                (kl - want_kl).abs() <= 2e-3 * want_kl + 1e-7,
                "{id} {sid} step {k}: KL {kl} vs {want_kl}"
            );
            let (db, want_db) = (num(&g["sqnr_db"]), num(&f["sqnr_db"]));
            assert!(
                (db - want_db).abs() <= 2e-3,
                "{id} {sid} step {k}: SQNR {db} vs {want_db}"
            );
        }
    }
    let m = &t["summary"];
    let tf = &want["teacher_forced_summary"];
    assert_eq!(m["diverged"], want["departures"], "{id}");
    assert_eq!(m["steps"], tf["steps"], "{id}");
    assert_close("top-1", num(&m["top1_agreement"]), num(&tf["top1"]), 1e-12);
    assert_close("mean KL", num(&m["mean_kl"]), num(&tf["kl_mean"]), 2e-3);
    assert!(
        (num(&m["median_sqnr_db"]) - num(&tf["sqnr_db_median"])).abs() <= 2e-3,
        "{id}"
    );
    assert_close("WER", num(&m["scores"]["wer"]), num(&want["wer"]["value"]), 1e-12);
    assert_close("CER", num(&m["scores"]["cer"]), num(&want["cer"]["value"]), 1e-12);
}

/// The reference's decode, held to the fp32 spec's expected tokens and scores.
fn check_reference(report: &Value, want: &Value) {
    for (s, w) in report["reference_samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip(want["samples"].as_array().unwrap())
    {
        assert_eq!(tokens(&s["tokens"]), tokens(&w["tokens"]), "reference {}", w["id"]);
        assert_eq!(s["text"], w["text"]);
        assert_eq!(s["label"], w["label"]);
    }
    let scores = &report["reference_scores"];
    assert_close("reference WER", num(&scores["wer"]), num(&want["wer"]["value"]), 1e-12);
    assert_close("reference CER", num(&scores["cer"]), num(&want["cer"]["value"]), 1e-12);
}

#[test]
fn an_encoder_decoder_decodes_as_numpy_says_in_both_forms() {
    for (spec, reference) in [
        ("tiny_u8.toml", "tiny_fp32.toml"),
        ("tiny_u8_dynamic.toml", "tiny_fp32_dynamic.toml"),
    ] {
        let (code, report, stderr) = audit(
            spec,
            &[
                "--dataset",
                &data("set_ed"),
                "--task",
                "transcribe",
                "-t",
                "cpu",
                "-t",
                "cpu:noopt",
            ],
        );
        assert_eq!(code, 0, "{spec}: {stderr}");
        assert_eq!(report["kind"], "generation");
        assert_eq!(report["spec"]["form"], spec_expected(spec)["form"]);
        check_reference(&report, spec_expected(reference));
        for t in report["targets"].as_array().unwrap() {
            check_target(t, spec_expected(spec), spec_expected(reference));
        }
        // ed03 never chooses the end token: stopped at max_new_tokens and said so.
        assert!(
            report["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().contains("ed03")),
            "{}",
            report["notes"]
        );
    }
}

#[test]
fn a_decoder_only_model_decodes_as_numpy_says_in_both_forms() {
    for (spec, reference) in [
        ("lm_u8.toml", "lm_fp32.toml"),
        ("lm_u8_dynamic.toml", "lm_fp32_dynamic.toml"),
    ] {
        let (code, report, stderr) = audit(spec, &["--dataset", &data("set_lm"), "--task", "generate", "-t", "cpu"]);
        assert_eq!(code, 0, "{spec}: {stderr}");
        check_reference(&report, spec_expected(reference));
        for t in report["targets"].as_array().unwrap() {
            check_target(t, spec_expected(spec), spec_expected(reference));
        }
    }
}

/// `ort_greedy.py`'s tokens per sample for `spec` (extra: `--opt`, `--qnn`).
fn ort_tokens(spec: &str, set: &str, extra: &[&str]) -> Vec<(String, Vec<u64>)> {
    let py = venv_python("tests/data/numpy-ort-requirements.txt", "numpy-ort");
    // A set of tests/data/generation by name, or one a test made, by its path.
    let set = if std::path::Path::new(set).is_absolute() {
        set.to_string()
    } else {
        data(set)
    };
    let out = run_ok(
        std::process::Command::new(py)
            .arg(data("ort_greedy.py"))
            .args([&data(spec), &set])
            .args(extra),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // The QNN libraries print their own lines on stdout (LIBNATIVE's configuration note).
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            (v["id"].as_str().unwrap().to_string(), tokens(&v["tokens"]))
        })
        .collect()
}

fn tool_tokens(report: &Value, target: &str) -> Vec<(String, Vec<u64>)> {
    let t = target_row(report, target);
    assert_eq!(t["status"], "ok", "{target}: {}", t["error"]);
    t["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), tokens(&s["tokens"])))
        .collect()
}

fn target_row<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("no target {id}"))
}

fn qnn_plugin() -> PathBuf {
    let out = bin().args(["runtime", "path", "qnn"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
fn an_independent_onnxruntime_loop_gives_every_targets_tokens_qnn_included() {
    let (code, report, stderr) = audit(
        "tiny_u8.toml",
        &[
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
            "-t",
            "cpu:noopt",
            "-t",
            "qnn:sm8650",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        tool_tokens(&report, "cpu"),
        ort_tokens("tiny_u8.toml", "set_ed", &["--opt", "all"])
    );
    assert_eq!(
        tool_tokens(&report, "cpu:noopt"),
        ort_tokens("tiny_u8.toml", "set_ed", &["--opt", "disable"])
    );
    let plugin = qnn_plugin().display().to_string();
    // SM8650: soc_model 57, htp_arch 75 (docs/ARCHITECTURE, the chipset table).
    let qnn = ort_tokens("tiny_u8.toml", "set_ed", &["--qnn", &plugin, "57", "75"]);
    assert_eq!(tool_tokens(&report, "qnn:sm8650"), qnn);
    // Every part of the QNN target is a session of its own, its compiled context cached.
    let parts: Vec<&str> = target_row(&report, "qnn:sm8650")["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["part"].as_str().unwrap())
        .collect();
    assert_eq!(parts, ["encoder", "prompt", "step"]);
    for p in target_row(&report, "qnn:sm8650")["parts"].as_array().unwrap() {
        assert!(
            matches!(p["qnn_context"].as_str(), Some("compiled" | "loaded")),
            "{}",
            p
        );
    }
    let (_, lm, stderr) = audit(
        "lm_u8.toml",
        &["--dataset", &data("set_lm"), "--task", "generate", "-t", "cpu"],
    );
    assert_eq!(
        tool_tokens(&lm, "cpu"),
        ort_tokens("lm_u8.toml", "set_lm", &["--opt", "all"]),
        "{stderr}"
    );
    // A chunked prefill and a split step, each fed by the independent loop as the contract says
    // (chunks padded and masked; the files of a part run in order, tensors by name), on the CPU
    // EP and on the HTP simulator.
    for spec in ["lm_u8_chunked.toml", "lm_u8_split.toml"] {
        let (code, report, stderr) = audit(
            spec,
            &[
                "--dataset",
                &data("set_lm"),
                "--task",
                "generate",
                "-t",
                "cpu",
                "-t",
                "qnn:sm8650",
            ],
        );
        assert_eq!(code, 0, "{spec}: {stderr}");
        assert_eq!(
            tool_tokens(&report, "cpu"),
            ort_tokens(spec, "set_lm", &["--opt", "all"]),
            "{spec}"
        );
        assert_eq!(
            tool_tokens(&report, "qnn:sm8650"),
            ort_tokens(spec, "set_lm", &["--qnn", &plugin, "57", "75"]),
            "{spec}"
        );
    }
}

#[test]
fn the_report_renders_again_and_follows_its_committed_schema() {
    let dir = tempdir();
    let json = dir.path().join("g.json");
    let html = dir.path().join("g.html");
    let out = bin()
        .args([
            "eval",
            &data("tiny_u8.toml"),
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
        ])
        .args(["--no-baseline", "--out"])
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    // ed01: the reference says "big" (14) where the u8 model says "sun" (16), at step 4.
    assert!(table.contains("step 4: \"big\" → \"sun\""), "{table}");
    let derived = bin().args(["schema", "generation"]).output().unwrap();
    let committed = std::fs::read_to_string(repo("docs/generation.schema.json")).unwrap();
    assert!(
        String::from_utf8_lossy(&derived.stdout) == committed,
        "docs/generation.schema.json differs from the derived schema: run `cargo run -- schema generation > docs/generation.schema.json`"
    );
    let schema: Value = serde_json::from_str(&committed).unwrap();
    let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&report)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert_eq!(errors, Vec::<String>::new());
    // render reads it back into the same forms.
    let again = bin().arg("render").arg(&json).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(String::from_utf8_lossy(&again.stdout), table);
    // The page marks each target's text from its first divergence on.
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<mark").count(), 2, "ed01 and ed04 diverge on cpu");
}

/// Writes a copy of the tiny fixture's files into a fresh directory, `spec` changed by `edit`.
fn edited_spec(spec: &str, edit: impl Fn(String) -> String) -> (tempfile::TempDir, String) {
    let dir = tempdir();
    for entry in std::fs::read_dir(repo("tests/data/generation")).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    let path = dir.path().join(spec);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(text)).unwrap();
    let shown = path.display().to_string();
    (dir, shown)
}

fn refused(spec_path: &str, extra: &[&str], code: i32, needle: &str) {
    let dir = tempdir();
    let out_file = dir.path().join("never.json");
    let out = bin()
        .args([
            "eval",
            spec_path,
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
            "--out",
        ])
        .arg(&out_file)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "wanted '{needle}' in: {stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.contains("error")).count(),
        1,
        "one line: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out_file.exists(), "nothing is written on failure");
}

#[test]
fn bad_specs_and_flags_are_refused_on_one_line() {
    let (_d, unknown) = edited_spec("tiny_u8.toml", |t| t.replace("max_new_tokens", "max_tokens"));
    refused(&unknown, &[], 2, "unknown field");
    let (_d, short) = edited_spec("tiny_u8.toml", |t| t.replace("kv_length = 12", "kv_length = 10"));
    refused(&short, &[], 2, "kv_length is 10 and part step's");
    let (_d, foreign) = edited_spec("tiny_u8.toml", |t| t.replace("\"step_u8.onnx\"", "\"lm_step_u8.onnx\""));
    refused(
        &foreign,
        &[],
        2,
        "no past_key_values.N.decoder.key input: not a decoder with a KV state",
    );
    let (_d2, reference_differs) = edited_spec("tiny_u8.toml", |t| {
        t.replace("tiny_fp32.toml", "tiny_fp32_dynamic.toml")
    });
    // A dynamic reference of the same model decodes alike: accepted (only the form differs).
    let (code, _, stderr) = audit_path(&reference_differs);
    assert_eq!(code, 0, "{stderr}");
    let (_d, limit) = edited_spec("tiny_fp32.toml", |t| {
        t.replace("max_new_tokens = 8", "max_new_tokens = 7")
    });
    let u8_beside = std::path::Path::new(&limit).with_file_name("tiny_u8.toml");
    refused(&u8_beside.display().to_string(), &[], 2, "has another max_new_tokens");
    let (_d, tokenizer) = edited_spec("tiny_u8.toml", |t| t.replace("\"tokenizer.json\"", "\"expected.json\""));
    refused(&tokenizer, &[], 2, "not a tokenizers JSON file");
    // A tokenizer.json that makes the tokenizers crate panic (found by fuzzing): refused as well.
    let (dir, hostile) = edited_spec("tiny_u8.toml", |t| t);
    std::fs::copy(
        repo("fuzz/regressions/generation_spec/tokenizer-decoder-unwrap"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    refused(&hostile, &[], 2, "the tokenizers library could not read it");
    // A one-pass eval's flags are not a spec's: clap does not know them there, and the error
    // says where a spec's flags are listed.
    for flag in [
        &["--shard", "1/2"][..],
        &["--until-decided"],
        &["--top-k", "3"],
        &["--golden", "g"],
    ] {
        refused(
            &data("tiny_u8.toml"),
            flag,
            2,
            "a generation spec takes the flags `npu-audit eval SPEC.toml --help` lists",
        );
    }
    refused(
        &data("tiny_u8.toml"),
        &["--labels", &data("set_lm/labels.csv")],
        2,
        "labels",
    );
    // A model file where the spec belongs, and the spec given to a one-pass task.
    refused(&data("encoder.onnx"), &[], 2, "generation spec");
    let out = bin()
        .args([
            "eval",
            &data("tiny_u8.toml"),
            "--dataset",
            &data("set_ed"),
            "--task",
            "classify",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'classify'") && stderr.contains("a generation spec takes the flags"),
        "{stderr}"
    );
}

/// `audit`, of a spec anywhere (an edited copy), on the tiny encoder-decoder's set and `cpu`.
fn audit_path(spec: &str) -> (i32, Value, String) {
    audit_at(
        spec,
        &["--dataset", &data("set_ed"), "--task", "transcribe", "-t", "cpu"],
    )
}

#[test]
fn a_target_that_crashes_mid_decode_is_a_finding_and_the_others_are_audited() {
    // cpu:noopt's workers abort before their 3rd request: its encoder and prompt answer twice,
    // its step dies on the first sample's third token.
    let out = bin()
        .env("NPU_AUDIT_FAULT_INJECT", "cpu:noopt=crash@3")
        .args([
            "eval",
            &data("tiny_u8.toml"),
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
        ])
        .args(["-t", "cpu", "-t", "cpu:noopt", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let crashed = target_row(&report, "cpu:noopt");
    assert_eq!(crashed["status"], "crashed");
    assert!(
        crashed["error"].as_str().unwrap().starts_with("part step:"),
        "{}",
        crashed["error"]
    );
    assert_eq!(target_row(&report, "cpu")["status"], "ok");
    assert_eq!(target_row(&report, "cpu")["samples"].as_array().unwrap().len(), 6);
    // With the target allowed to fail, the audit passes.
    let allowed = bin()
        .env("NPU_AUDIT_FAULT_INJECT", "cpu:noopt=crash@3")
        .args([
            "eval",
            &data("tiny_u8.toml"),
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
        ])
        .args(["-t", "cpu", "-t", "cpu:noopt", "--allow-failure", "cpu:noopt"])
        .output()
        .unwrap();
    assert_eq!(
        allowed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
}

#[test]
fn the_gate_holds_each_target_to_the_upper_bound_of_its_loss() {
    // generate: cpu's text differs from the reference's on 2 of 4 prompts (lm00, lm02); the
    // one-sided 95% Wilson upper bound of 2/4 at z = 1.6449 is 0.5 + 0.31761 = 0.81761
    // (hand-worked: centre 0.5, half-width 1.6449·√(1/16 + z²/64) / (1 + z²/4)), 81.76 points.
    let (code, report, stderr) = audit(
        "lm_u8.toml",
        &[
            "--dataset",
            &data("set_lm"),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--max-accuracy-drop",
            "80",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    let rules = report["gate"]["rules"].as_array().unwrap();
    let rule = rules.iter().find(|r| r["rule"] == "max_accuracy_drop").unwrap();
    assert_eq!(rule["measure"], "text_disagreement");
    assert_eq!(rule["bound"], "wilson_upper");
    assert_close("estimate", num(&rule["estimate"]), 50.0, 1e-12);
    assert_close("upper", num(&rule["measured"]), 81.761, 1e-4);
    assert_eq!(rule["pass"], false);
    assert_eq!(report["gate"]["verdict"], "fail");
    let ran = rules.iter().find(|r| r["rule"] == "ran").unwrap();
    assert_eq!(
        (&ran["target"], &ran["pass"]),
        (&Value::from("cpu"), &Value::Bool(true))
    );
    let (code, _, stderr) = audit(
        "lm_u8.toml",
        &[
            "--dataset",
            &data("set_lm"),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--max-accuracy-drop",
            "90",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn explain_audits_the_divergent_step_on_the_state_the_target_fed_it() {
    let (code, report, stderr) = audit(
        "tiny_u8.toml",
        &[
            "--dataset",
            &data("set_ed"),
            "--task",
            "transcribe",
            "-t",
            "cpu",
            "--no-baseline",
            "--explain",
            "1",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let samples = target_row(&report, "cpu")["samples"].as_array().unwrap();
    let explained: Vec<&Value> = samples.iter().filter(|s| !s["layers"].is_null()).collect();
    // K = 1: the first diverged sample only (ed01, at its fifth token, produced by the step part).
    assert_eq!(explained.len(), 1, "{samples:?}");
    let x = &explained[0]["layers"];
    assert_eq!(explained[0]["id"], "ed01");
    assert_eq!(x["part"], "step");
    assert!(x["error"].is_null(), "{x}");
    let worst = &x["worst_introduced"];
    assert!(num(&worst["introduced_sqnr_db"]).is_finite(), "{x}");
    assert!(
        stderr.contains("per-layer audit of cpu's part step at sample 2's first divergence"),
        "{stderr}"
    );
}

/// The tokens of every sample of a report's reference and of its target `id`.
fn decoded(report: &Value, id: &str) -> (Vec<Vec<u64>>, Vec<Vec<u64>>) {
    let of = |samples: &Value| {
        samples
            .as_array()
            .unwrap()
            .iter()
            .map(|s| tokens(&s["tokens"]))
            .collect()
    };
    (of(&report["reference_samples"]), of(&target_row(report, id)["samples"]))
}

#[test]
fn a_chunked_prefill_and_a_split_step_decode_what_the_token_at_a_time_step_decodes() {
    // make_tiny.py checked the prefill part (4 tokens a call) and the two-file step against the
    // step position by position in float64; here the tool's loops over them must give the same
    // tokens and per-step figures on the CPU EP, with and without its graph rewrites.
    let args = [
        "--dataset",
        &data("set_lm"),
        "--task",
        "generate",
        "-t",
        "cpu",
        "-t",
        "cpu:noopt",
    ];
    let (code, plain, stderr) = audit("lm_u8.toml", &args);
    assert_eq!(code, 0, "{stderr}");
    for spec in ["lm_u8_chunked.toml", "lm_u8_split.toml"] {
        let (code, report, stderr) = audit(spec, &args);
        assert_eq!(code, 0, "{spec}: {stderr}");
        for id in ["cpu", "cpu:noopt"] {
            assert_eq!(decoded(&report, id), decoded(&plain, id), "{spec} {id}");
            let steps = |r: &Value| -> Vec<f64> {
                target_row(r, id)["samples"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|s| s["steps"].as_array().unwrap().iter().map(|f| num(&f["kl"])))
                    .collect()
            };
            for (a, b) in steps(&report).iter().zip(steps(&plain)) {
                assert!((a - b).abs() <= 1e-4 * b.abs() + 1e-7, "{spec} {id}: KL {a} vs {b}");
            }
        }
        let parts: Vec<&Value> = target_row(&report, "cpu")["parts"].as_array().unwrap().iter().collect();
        if spec.contains("split") {
            let files: Vec<&str> = parts.iter().map(|p| p["file"].as_str().unwrap()).collect();
            assert_eq!(
                files,
                ["lm_step_a_u8.onnx", "lm_step_b_u8.onnx"],
                "each file its own session"
            );
        } else {
            let names: Vec<&str> = parts.iter().map(|p| p["part"].as_str().unwrap()).collect();
            assert_eq!(names, ["prefill", "step"]);
            // Prompts of 2 to 4 ids after <s>: one chunk, or a full chunk and a padded one.
            assert!(parts[0]["runs"].as_u64().unwrap() >= 4, "{:?}", parts[0]);
        }
    }
}

#[test]
fn chunk_lengths_and_chains_that_do_not_fit_are_refused_before_any_session() {
    let (_d, chunk) = edited_spec("lm_u8_chunked.toml", |t| {
        t.replace("prefill_length = 4", "prefill_length = 3")
    });
    refused_lm(&chunk, "prefill_length 3 does not divide kv_length 16");
    let (_d, misplaced) = edited_spec("lm_u8.toml", |t| {
        t.replace("kv_length = 16", "kv_length = 16\nprefill_length = 4")
    });
    refused_lm(&misplaced, "[parts] needs prefill");
    let (_d, swapped) = edited_spec("lm_u8_split.toml", |t| {
        t.replace(
            "[\"lm_step_a_u8.onnx\", \"lm_step_b_u8.onnx\"]",
            "[\"lm_step_b_u8.onnx\", \"lm_step_a_u8.onnx\"]",
        )
    });
    refused_lm(
        &swapped,
        "part step: lm_step_b_u8.onnx takes hidden_states_1, which neither the loop feeds the part nor an earlier file of it gives",
    );
    let (_d, twice) = edited_spec("lm_u8_split.toml", |t| {
        t.replace(
            "\"lm_step_b_u8.onnx\"]",
            "\"lm_step_b_u8.onnx\", \"lm_step_b_u8.onnx\"]",
        )
    });
    refused_lm(&twice, "lm_step_b_u8.onnx gives logits, which an earlier file gives");
    let (_d, wrong_chunk) = edited_spec("lm_u8_chunked.toml", |t| {
        t.replace("prefill_length = 4", "prefill_length = 8")
    });
    refused_lm(
        &wrong_chunk,
        "part prefill's input_ids is [1,4], where prefill_length 8 and kv_length 16 make it [1, 8]",
    );
}

/// A decoder-only spec refused on one line with exit 2, nothing written.
fn refused_lm(spec: &str, needle: &str) {
    let dir = tempdir();
    let out_file = dir.path().join("never.json");
    let out = bin()
        .args([
            "eval",
            spec,
            "--dataset",
            &data("set_lm"),
            "--task",
            "generate",
            "-t",
            "cpu",
            "--out",
        ])
        .arg(&out_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(needle), "wanted '{needle}' in: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!out_file.exists());
}

/// who_what_benchmark's SDT counts the tokens outside Python difflib's matching blocks: the
/// tool's blocks are difflib's own on 600 random pairs (small alphabets, so runs repeat and tie,
/// and sequences of 200 or more, where difflib drops popular tokens), computed by the system
/// Python's difflib.
#[test]
fn divergent_token_blocks_are_pythons_difflib_blocks() {
    let script = r#"
import difflib, json, random
r = random.Random(7)
for k in range(600):
    n = r.choice([0, 1, 3, 8, 20, 60, 230, 300])
    m = r.choice([0, 2, 5, 12, 40, 210, 280])
    sym = r.choice([2, 3, 5, 30])
    a = [r.randrange(sym) for _ in range(n)]
    b = [r.randrange(sym) for _ in range(m)]
    if k % 5 == 0 and a:
        b = a[: r.randrange(len(a) + 1)] + b
    blocks = [list(x) for x in difflib.SequenceMatcher(None, a, b).get_matching_blocks()[:-1]]
    print(json.dumps({"a": a, "b": b, "blocks": blocks}))
"#;
    let out = run_ok(std::process::Command::new("python3").args(["-c", script]));
    let mut pairs = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let seq = |k: &str| -> Vec<u32> {
            v[k].as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        let (a, b) = (seq("a"), seq("b"));
        let want: Vec<(usize, usize, usize)> = v["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m[0].as_u64().unwrap() as usize,
                    m[1].as_u64().unwrap() as usize,
                    m[2].as_u64().unwrap() as usize,
                )
            })
            .collect();
        // difflib joins blocks adjacent in both sequences; the tokens they cover are the same.
        let covered = |blocks: &[(usize, usize, usize)]| -> Vec<usize> {
            blocks.iter().flat_map(|&(_, j, k)| j..j + k).collect()
        };
        let got = npu_audit::analyses::accuracy::matching::matching_blocks(&a, &b);
        assert_eq!(covered(&got), covered(&want), "{line}");
        let d = npu_audit::analyses::accuracy::matching::divergent_tokens(&a, &b);
        assert_eq!(d.sdt, b.len() - covered(&want).len(), "{line}");
        pairs += 1;
    }
    assert_eq!(pairs, 600);
}

/// A copy of `set` (tests/data/generation) with every prompt cut to its first `n` tokens.
fn cut_prompts(set: &str, dir: &std::path::Path, n: usize) -> String {
    use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(data(set)).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "npz") {
            continue;
        }
        let ids: Vec<i64> = values(&npz_array(&p, "input_ids")).iter().map(|v| *v as i64).collect();
        let t = Tensor::new(vec![1, n], TensorData::Int64(ids[..n].to_vec())).unwrap();
        write_npz(&dir.join(p.file_name().unwrap()), &[("input_ids".to_string(), &t)]).unwrap();
    }
    dir.display().to_string()
}

/// `--prompt-lengths`: every cut's first new token, each length's agreement and the lengths
/// where a prompt departs are those of ort_greedy.py run on sets cut to each length, on the
/// token-at-a-time step and the chunked prefill (whose chunk boundaries the lengths cross).
#[test]
fn a_prompt_length_sweep_agrees_with_an_independent_loop_on_every_cut() {
    let tmp = tempdir();
    for (spec, reference) in [
        ("lm_u8_chunked.toml", "lm_fp32_chunked.toml"),
        ("lm_u8.toml", "lm_fp32.toml"),
    ] {
        let (code, report, stderr) = audit(
            spec,
            &[
                "--dataset",
                &data("set_lm_text"),
                "--task",
                "generate",
                "-t",
                "cpu",
                "--no-baseline",
                "--prompt-lengths",
                "1-8",
            ],
        );
        assert_eq!(code, 0, "{spec}: {stderr}");
        assert_eq!(report["prompt_lengths"], serde_json::json!([1, 2, 3, 4, 5, 6, 7, 8]));
        let t = target_row(&report, "cpu");
        let rows = t["sweep"]["rows"].as_array().unwrap();
        // Per prompt, the first length where its first token departs (ort's own decodes).
        let mut first_departure: std::collections::BTreeMap<String, usize> = Default::default();
        for (k, l) in (1..=8).enumerate() {
            let set = cut_prompts("set_lm_text", &tmp.path().join(format!("{spec}-{l}")), l);
            let target = ort_tokens(spec, &set, &[]);
            let golden = ort_tokens(reference, &set, &["--opt", "disable"]);
            let mut same = 0;
            for ((id, tt), (_, rt)) in target.iter().zip(&golden) {
                let cut = format!("{id}@{l}");
                let row = t["samples"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["id"] == cut.as_str())
                    .unwrap();
                assert_eq!(tokens(&row["tokens"])[0], tt[0], "{spec} {cut}: first token");
                if tt[0] == rt[0] {
                    same += 1;
                } else {
                    first_departure.entry(id.clone()).or_insert(l);
                }
            }
            assert_eq!(rows[k]["length"], l);
            assert_eq!(rows[k]["samples"], 24);
            assert_eq!(rows[k]["first_token_same"], same, "{spec} length {l}");
        }
        let mut want: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
        for (id, l) in first_departure.into_iter().filter(|(_, l)| *l > 1) {
            want.entry(l).or_default().push(id);
        }
        let got: std::collections::BTreeMap<usize, Vec<String>> = t["sweep"]["departs_at"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let prompts = d["prompts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap().to_string())
                    .collect();
                (d["length"].as_u64().unwrap() as usize, prompts)
            })
            .collect();
        assert_eq!(got, want, "{spec}");
    }
}

#[test]
fn a_sweep_is_refused_where_it_cannot_run() {
    let spec = data("lm_u8.toml");
    let set = data("set_lm_text");
    let run = |extra: &[&str], needle: &str| {
        let mut args = vec![
            "eval",
            spec.as_str(),
            "--dataset",
            set.as_str(),
            "--no-config",
            "-t",
            "cpu",
        ];
        args.extend(extra);
        fails_with(&args, 2, needle);
    };
    run(
        &["--task", "generate", "--prompt-lengths", "0"],
        "'0' is not a prompt length",
    );
    run(
        &["--task", "generate", "--prompt-lengths", "5-3"],
        "'5-3' is an empty range",
    );
    run(&["--task", "generate", "--prompt-lengths", "9"], "need 17 KV slots");
    run(&["--task", "generate", "--prompt-lengths", "3,16"], "no prompt of");
    run(
        &["--task", "generate", "--prompt-lengths", "16"],
        "has 16 tokens (the longest has 15)",
    );
    run(
        &["--task", "score", "--prompt-lengths", "2"],
        "--prompt-lengths sweeps a decoder-only spec's prompts under --task generate",
    );
    fails_with(
        &[
            "eval",
            &data("tiny_u8.toml"),
            "--dataset",
            &data("set_ed"),
            "--no-config",
            "--task",
            "generate",
            "--prompt-lengths",
            "1",
        ],
        2,
        "--prompt-lengths sweeps a decoder-only spec's prompts",
    );
}
