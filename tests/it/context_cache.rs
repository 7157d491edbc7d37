//! The compiled-context cache of QNN sessions, end to end on every QNN fixture the other tests
//! audit: a first audit compiles and stores the context, a second loads it, a third finds one
//! byte of it flipped, says so on one line and compiles again; each run's outputs are the same
//! bits, its report the same figures and placement, its exit code the same. The context cache is
//! a temporary directory of each test (`NPU_AUDIT_CONTEXT_DIR`); the runtimes come from the shared
//! cache.

use std::path::Path;

use crate::common;

use common::{bin, file_name_of, repo, tempdir};
use serde_json::Value;

/// The one chipset the tests compile for (the HTP simulator costs about a second per sample).
const TARGET: &str = "qnn:sm8650";

/// The line the audit prints when a cached context was not used.
const NOT_USED: &str = "the cached QNN context was not used";

/// One `compare` of `model` on [`TARGET`] with the context cache in `contexts`, its outputs saved
/// in `outputs`: (exit code, report, stderr).
fn audit(model: &str, contexts: &Path, outputs: &Path, extra: &[&str]) -> (i32, Value, String) {
    let model = repo(&format!("fixtures/models/{model}"));
    let out = bin()
        .env("NPU_AUDIT_CONTEXT_DIR", contexts)
        .env_remove("NPU_AUDIT_CONTEXT_CACHE")
        .arg("compare")
        .arg(&model)
        .args(["-t", TARGET, "--format", "json", "--save-outputs"])
        .arg(outputs)
        .args(extra)
        .output()
        .expect("run npu-audit");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON report ({e}); stderr:\n{stderr}"));
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// How the target's session got its context, as the report says.
fn context_use(report: &Value) -> String {
    let t = common::target(report, TARGET);
    assert_eq!(t["status"], "ok", "{TARGET} did not run: {}", t["error"]);
    t["runtime"]["qnn_context"].as_str().unwrap_or("(absent)").to_string()
}

/// Every array the target's run saved, as (file, array name, element bytes).
fn saved_outputs(dir: &Path) -> Vec<(String, String, Vec<u8>)> {
    let target_dir = dir.join(file_name_of(TARGET));
    let mut files: Vec<_> = std::fs::read_dir(&target_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", target_dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no saved outputs in {}", target_dir.display());
    files
        .iter()
        .flat_map(|f| {
            let name = f.file_name().expect("name").to_string_lossy().to_string();
            npu_audit::data::tensor::read_npz(f)
                .expect("read npz")
                .into_iter()
                .map(move |(array, t)| (name.clone(), array, t.data.to_le_bytes()))
        })
        .collect()
}

/// The report without what differs between two runs of one audit: timings, how each session got
/// its context, whether a fingerprint came from the cache.
fn stable(v: &Value) -> Value {
    common::strip_keys(
        v,
        &["timing", "run_ms_median", "qnn_context", "cached", "summary_cached"],
    )
}

/// The entries of a context cache (their directories: one per compiled session).
fn entries(contexts: &Path) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(contexts)
        .map(|rd| {
            rd.map(|e| e.expect("entry").path())
                .filter(|p| p.is_dir() && !p.file_name().expect("name").to_string_lossy().starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// Flips one byte in the middle of the entry's context model.
fn corrupt(entry: &Path) {
    let path = entry.join("model_ctx.onnx");
    let mut bytes = std::fs::read(&path).expect("read the cached context");
    let k = bytes.len() / 2;
    bytes[k] ^= 0x5a;
    std::fs::write(&path, bytes).expect("write");
}

/// Compiled, loaded, corrupt and compiled again: the same outputs, figures and exit code.
fn compiled_loaded_recompiled(model: &str) {
    let tmp = tempdir();
    let contexts = tmp.path().join("contexts");
    let run = |n: usize| audit(model, &contexts, &tmp.path().join(format!("out{n}")), &[]);

    let (code1, first, err1) = run(1);
    assert_eq!(context_use(&first), "compiled", "{model}: {err1}");
    let stored = entries(&contexts);
    assert_eq!(stored.len(), 1, "{model}: one session, one entry: {stored:?}");
    let context = std::fs::read(stored[0].join("model_ctx.onnx")).expect("the context model");
    assert!(
        context.windows(b"EPContext".len()).any(|w| w == b"EPContext"),
        "{model}: the stored model holds no EPContext node"
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(stored[0].join("manifest.json")).expect("manifest")).expect("json");
    for f in manifest["files"].as_array().expect("files") {
        let bytes = std::fs::read(stored[0].join(f["name"].as_str().expect("name"))).expect("file");
        assert_eq!(
            f["sha256"],
            common_sha256(&bytes),
            "{model}: manifest hash of {}",
            f["name"]
        );
    }

    let (code2, second, err2) = run(2);
    assert_eq!(context_use(&second), "loaded", "{model}: {err2}");
    assert_eq!(code2, code1, "{model}: exit code");
    assert_eq!(entries(&contexts), stored, "{model}: a hit stores nothing new");
    assert_eq!(
        saved_outputs(&tmp.path().join("out2")),
        saved_outputs(&tmp.path().join("out1"))
    );
    assert_eq!(
        stable(&second),
        stable(&first),
        "{model}: the loaded run's report differs"
    );
    assert!(
        !err1.contains(NOT_USED) && !err2.contains(NOT_USED),
        "{model}: {err1}{err2}"
    );

    corrupt(&stored[0]);
    let (code3, third, err3) = run(3);
    assert_eq!(context_use(&third), "recompiled", "{model}: {err3}");
    assert_eq!(code3, code1, "{model}: exit code");
    let said: Vec<&str> = err3.lines().filter(|l| l.contains(NOT_USED)).collect();
    assert_eq!(said.len(), 1, "{model}: one line about the corrupt entry: {err3}");
    assert!(said[0].contains("SHA-256"), "{}", said[0]);
    assert_eq!(
        saved_outputs(&tmp.path().join("out3")),
        saved_outputs(&tmp.path().join("out1"))
    );
    assert_eq!(
        stable(&third),
        stable(&first),
        "{model}: the recompiled run's report differs"
    );

    // The entry was stored again, whole: the next run loads it.
    let (_, fourth, err4) = run(4);
    assert_eq!(context_use(&fourth), "loaded", "{model}: {err4}");
    assert_eq!(
        saved_outputs(&tmp.path().join("out4")),
        saved_outputs(&tmp.path().join("out1"))
    );
}

/// SHA-256 of bytes as lowercase hex (through the crate's hash module, which its own unit test
/// checks against the standard's test vectors).
fn common_sha256(bytes: &[u8]) -> Value {
    Value::String(npu_audit::foundation::hash::sha256_hex(bytes))
}

#[test]
fn cnn_u8_context_is_compiled_loaded_and_recompiled() {
    compiled_loaded_recompiled("cnn_qdq_u8.onnx");
}

#[test]
fn cnn_a16w8_context_is_compiled_loaded_and_recompiled() {
    compiled_loaded_recompiled("cnn_qdq_a16w8.onnx");
}

#[test]
fn fallback_context_is_compiled_loaded_and_recompiled() {
    // A compute node left to the CPU between two QNN partitions: the context model keeps it.
    compiled_loaded_recompiled("fallback_qdq_u8.onnx");
}

#[test]
fn ladder_context_is_compiled_loaded_and_recompiled() {
    compiled_loaded_recompiled("ladder_qdq_u8.onnx");
}

#[test]
fn transformer_u8_context_is_compiled_loaded_and_recompiled() {
    compiled_loaded_recompiled("transformer_qdq_u8.onnx");
}

#[test]
fn transformer_a16w8_context_is_compiled_loaded_and_recompiled() {
    compiled_loaded_recompiled("transformer_qdq_a16w8.onnx");
}

/// `--no-context-cache` and `NPU_AUDIT_CONTEXT_CACHE=0` compile without loading or storing, and
/// the report says so; `runtime gc` lists the entries and removes them.
#[test]
fn the_cache_can_be_turned_off_and_collected() {
    let tmp = tempdir();
    let contexts = tmp.path().join("contexts");
    let model = "cnn_qdq_u8.onnx";
    let (_, first, err) = audit(model, &contexts, &tmp.path().join("out1"), &[]);
    assert_eq!(context_use(&first), "compiled", "{err}");
    let stored = entries(&contexts);
    assert_eq!(stored.len(), 1);

    let (_, off, err) = audit(model, &contexts, &tmp.path().join("out2"), &["--no-context-cache"]);
    assert_eq!(context_use(&off), "uncached", "{err}");
    let out = bin()
        .env("NPU_AUDIT_CONTEXT_DIR", &contexts)
        .env("NPU_AUDIT_CONTEXT_CACHE", "0")
        .arg("compare")
        .arg(repo(&format!("fixtures/models/{model}")))
        .args(["-t", TARGET, "--format", "json"])
        .output()
        .expect("run");
    let by_env: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(context_use(&by_env), "uncached");
    assert_eq!(entries(&contexts), stored, "nothing stored with the cache off");
    assert_eq!(
        saved_outputs(&tmp.path().join("out2")),
        saved_outputs(&tmp.path().join("out1"))
    );
    // Other targets say nothing of contexts.
    assert!(common::target(&first, "cpu:noopt")["runtime"]["qnn_context"].is_null());

    // gc over an empty runtime cache sees only the contexts.
    let gc = |args: &[&str]| -> Value {
        let out = bin()
            .env("NPU_AUDIT_CONTEXT_DIR", &contexts)
            .env("NPU_AUDIT_CACHE", tmp.path().join("no-runtimes"))
            .args(["runtime", "gc", "--format", "json"])
            .args(args)
            .output()
            .expect("run gc");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("gc json")
    };
    let kept = gc(&[]);
    assert_eq!(kept.as_array().map(Vec::len), Some(1), "{kept}");
    assert_eq!(kept[0]["package"], "qnn-context");
    assert!(kept[0]["version"].as_str().expect("about").contains(model), "{kept}");
    assert_eq!(
        kept[0]["removed"], false,
        "used just now: kept under the default --keep-days"
    );
    let dry = gc(&["--keep-days", "0", "--dry-run"]);
    assert_eq!(
        (dry[0]["remove"].clone(), dry[0]["removed"].clone()),
        (Value::Bool(true), Value::Bool(false))
    );
    assert!(stored[0].is_dir());
    let gone = gc(&["--keep-days", "0"]);
    assert_eq!(gone[0]["removed"], true, "{gone}");
    assert!(entries(&contexts).is_empty(), "the entry is gone");
}

/// `eval`'s serving workers use the cache as `compare`'s workers do: the second eval of a set
/// loads the context the first compiled, with the same answers.
#[test]
fn eval_sessions_load_the_context_a_first_eval_compiled() {
    use npu_audit::data::tensor::{Tensor, TensorData};
    let tmp = tempdir();
    let set = tmp.path().join("set");
    std::fs::create_dir(&set).expect("mkdir");
    for k in 0..2u32 {
        let values: Vec<f32> = (0..3 * 32 * 32u32)
            .map(|i| ((i * 7 + k * 13) % 200) as f32 / 100.0 - 1.0)
            .collect();
        let image = Tensor::new(vec![1, 3, 32, 32], TensorData::Float32(values)).expect("tensor");
        npu_audit::data::tensor::write_npz(&set.join(format!("s{k}.npz")), &[("image".to_string(), &image)])
            .expect("write sample");
    }
    let contexts = tmp.path().join("contexts");
    let run = |n: usize| -> Value {
        let report = tmp.path().join(format!("eval{n}.json"));
        let out = bin()
            .env("NPU_AUDIT_CONTEXT_DIR", &contexts)
            .env_remove("NPU_AUDIT_CONTEXT_CACHE")
            .arg("eval")
            .arg(repo("fixtures/models/cnn_qdq_u8.onnx"))
            .arg("--reference")
            .arg(repo("fixtures/models/cnn_fp32.onnx"))
            .arg("--dataset")
            .arg(&set)
            .args([
                "--task",
                "agree",
                "--output",
                "probs",
                "-t",
                TARGET,
                "--no-baseline",
                "--no-config",
            ])
            .arg("--out")
            .arg(&report)
            .output()
            .expect("run eval");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&std::fs::read(&report).expect("eval report")).expect("json")
    };
    let first = run(1);
    assert_eq!(context_use(&first), "compiled");
    let second = run(2);
    assert_eq!(context_use(&second), "loaded");
    assert_eq!(entries(&contexts).len(), 1);
    let target = |r: &Value| stable(common::target(r, TARGET));
    assert_eq!(target(&second), target(&first), "the loaded sessions' figures differ");
}

/// An entry whose files match its manifest but which ONNX Runtime cannot load (a context model
/// that is not one, with the manifest rewritten to match) is recompiled too, never fatal.
#[test]
fn an_entry_the_runtime_refuses_is_recompiled() {
    let tmp = tempdir();
    let contexts = tmp.path().join("contexts");
    let model = "cnn_qdq_u8.onnx";
    let (code1, first, err) = audit(model, &contexts, &tmp.path().join("out1"), &[]);
    assert_eq!(context_use(&first), "compiled", "{err}");
    let entry = entries(&contexts).remove(0);
    let garbage = b"not an ONNX model".to_vec();
    std::fs::write(entry.join("model_ctx.onnx"), &garbage).expect("write");
    let manifest_path = entry.join("manifest.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&manifest_path).expect("read")).expect("json");
    for f in manifest["files"].as_array_mut().expect("files") {
        if f["name"] == "model_ctx.onnx" {
            f["size"] = Value::from(garbage.len());
            f["sha256"] = common_sha256(&garbage);
        }
    }
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).expect("json")).expect("write");
    let (code2, second, err2) = audit(model, &contexts, &tmp.path().join("out2"), &[]);
    assert_eq!(context_use(&second), "recompiled", "{err2}");
    assert_eq!(code2, code1);
    let said: Vec<&str> = err2.lines().filter(|l| l.contains(NOT_USED)).collect();
    assert_eq!(said.len(), 1, "{err2}");
    assert!(said[0].contains("refused"), "{}", said[0]);
    assert_eq!(
        saved_outputs(&tmp.path().join("out2")),
        saved_outputs(&tmp.path().join("out1"))
    );
    assert_ne!(
        std::fs::read(entry.join("model_ctx.onnx")).expect("stored again"),
        garbage
    );
}

/// Two audits compiling the same session at once (shards on one host) leave one complete entry,
/// which a third loads.
#[test]
fn two_audits_racing_on_one_key_leave_one_whole_entry() {
    let tmp = tempdir();
    let contexts = tmp.path().join("contexts");
    let model = repo("fixtures/models/cnn_qdq_u8.onnx");
    let start = |n: usize| {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
            .env("NPU_AUDIT_CONTEXT_DIR", &contexts)
            .env_remove("NPU_AUDIT_CONTEXT_CACHE")
            .env_remove("NPU_AUDIT_FAULT_INJECT")
            .arg("compare")
            .arg(&model)
            .args(["-t", TARGET, "--format", "json", "--save-outputs"])
            .arg(tmp.path().join(format!("out{n}")))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start npu-audit")
    };
    let racing = [start(1), start(2)];
    for child in racing {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).expect("json");
        // Each compiled (neither found the other's entry complete before it looked) or loaded.
        assert!(
            ["compiled", "loaded"].contains(&context_use(&report).as_str()),
            "{}",
            context_use(&report)
        );
    }
    let stored = entries(&contexts);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let leftovers: Vec<_> = std::fs::read_dir(&contexts)
        .expect("read")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".stage-") || n.starts_with(".trash-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let (_, third, err) = audit("cnn_qdq_u8.onnx", &contexts, &tmp.path().join("out3"), &[]);
    assert_eq!(context_use(&third), "loaded", "{err}");
    assert_eq!(
        saved_outputs(&tmp.path().join("out3")),
        saved_outputs(&tmp.path().join("out1"))
    );
    assert_eq!(
        saved_outputs(&tmp.path().join("out2")),
        saved_outputs(&tmp.path().join("out1"))
    );
}

/// Only a model audited whole stores its context: a per-layer audit's tapped and isolated models
/// (temporary sub-models) compile without storing, so the cache holds the audited model's entry
/// alone, and a plain audit of the model afterwards loads it.
#[test]
fn a_per_layer_audit_stores_only_the_whole_models_context() {
    let tmp = tempdir();
    let contexts = tmp.path().join("contexts");
    let layered = [
        "--layers",
        "all",
        "--no-baseline",
        "--fingerprint",
        "off",
        "--no-config",
    ];
    let (_, report, err) = audit("cnn_qdq_u8.onnx", &contexts, &tmp.path().join("out1"), &layered);
    assert_eq!(context_use(&report), "compiled", "{err}");
    let layers = common::target(&report, TARGET)["layers"].as_array().map_or(0, Vec::len);
    assert!(
        layers > 1,
        "the per-layer audit measured no layer: {}",
        report["layer_audit"]
    );
    let sessions = report["layer_audit"]["sessions"].as_u64().unwrap_or(0);
    assert!(
        sessions > 1,
        "the per-layer audit ran no sessions: {}",
        report["layer_audit"]
    );
    let stored = entries(&contexts);
    assert_eq!(stored.len(), 1, "the sub-models stored contexts: {stored:?}; {err}");

    let plain = ["--no-baseline", "--fingerprint", "off", "--no-config"];
    let (_, again, err2) = audit("cnn_qdq_u8.onnx", &contexts, &tmp.path().join("out2"), &plain);
    assert_eq!(
        context_use(&again),
        "loaded",
        "the entry is not the whole model's: {err2}"
    );
    assert_eq!(entries(&contexts), stored);
}
