//! `npu-audit matrix` end to end on the CNN fixture and on the real PP-OCR classifier: every
//! recommended cell and every kept candidate re-run independently with `compare` (its SQNR
//! recomputed from the saved outputs with plain double loops), the 16-bit rewrite checked against
//! the ONNX QuantizeLinear/DequantizeLinear definitions with NumPy (tests/data/check_widened.py),
//! the dispatch table against the files, and the HTML heat map in headless Chromium.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// What one matrix run left behind: its JSON, and the directory with its other files.
struct Run {
    json: Value,
    dir: tempfile::TempDir,
}

impl Run {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn matrix(args: &[&str]) -> Run {
    let dir = tempdir();
    let d = dir.path();
    let out = bin()
        .arg("matrix")
        .args(args)
        .args(["--out", d.join("m.json").to_str().unwrap()])
        .args(["--dispatch", d.join("dispatch.json").to_str().unwrap()])
        .args(["--html", d.join("m.html").to_str().unwrap()])
        .args(["--markdown", d.join("m.md").to_str().unwrap()])
        .args(["--write-candidates", d.join("candidates").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "matrix failed: {stderr}");
    let json = serde_json::from_slice(&std::fs::read(d.join("m.json")).unwrap()).unwrap();
    Run { json, dir }
}

/// The CNN fixture: int8 and a16w8 on the CPU EP and the HTP of SM8650, a 28 dB floor (the int8
/// model's HTP output is at 25.06 dB, README), both searches.
fn cnn() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        matrix(&[
            "--variant",
            &format!("int8={}", repo("fixtures/models/cnn_qdq_u8.onnx").display()),
            "--variant",
            &format!("a16w8={}", repo("fixtures/models/cnn_qdq_a16w8.onnx").display()),
            "--reference",
            repo("fixtures/models/cnn_fp32.onnx").to_str().unwrap(),
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "--min-sqnr",
            "28",
            "--search",
            "widen16",
            "--search",
            "float",
            "--max-promoted",
            "3",
        ])
    })
}

/// The real PP-OCR classifier: u8, a16w8 and the fp32 model in fp16 on the HTP, on the CPU EP
/// and two chipsets, a 20 dB floor, the 16-bit search.
fn ppocr() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        matrix(&[
            "--variant",
            &format!("u8={}", real("ppocr_cls_qdq_u8.onnx")),
            "--variant",
            &format!("a16w8={}", real("ppocr_cls_qdq_a16w8.onnx")),
            "--variant",
            &format!("fp16={},enable_htp_fp16_precision=1", real("ppocr_cls_fp32.onnx")),
            "--reference",
            &real("ppocr_cls_fp32.onnx"),
            "--inputs",
            repo("fixtures/inputs/ppocr_seed3.npz").to_str().unwrap(),
            "-t",
            "cpu",
            "-t",
            "qnn:sm8450",
            "-t",
            "qnn:sm8650",
            "--min-sqnr",
            "20",
            "--search",
            "widen16",
            "--max-promoted",
            "4",
        ])
    })
}

/// A file of `fixtures/real/`.
fn real(file: &str) -> String {
    repo(&format!("fixtures/real/{file}")).display().to_string()
}

/// The lowest SQNR over a report row's outputs.
fn worst_sqnr(row: &Value) -> f64 {
    row["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| num(&o["sqnr_db"]))
        .fold(f64::INFINITY, f64::min)
}

/// A JSON array of strings.
fn strs(v: &Value) -> Vec<&str> {
    v.as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect()
}

fn cell<'a>(m: &'a Value, variant: &str, target: &str) -> &'a Value {
    m["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["variant"] == variant && c["target"] == target)
        .unwrap_or_else(|| panic!("no cell {variant} on {target}"))
}

fn variant_path(m: &Value, name: &str) -> String {
    let v = m["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap();
    v["path"].as_str().unwrap().to_string()
}

fn variant_target(m: &Value, name: &str, target: &str) -> String {
    let v = m["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap();
    let mut t = target.to_string();
    if target.starts_with("qnn:") {
        for o in v["options"].as_array().unwrap() {
            t = format!("{t},{}", o.as_str().unwrap());
        }
    }
    t
}

/// The worst output's SQNR of `model` on `target`, from a separate `compare` run: the one the
/// report gives, and one recomputed from the saved outputs against the golden run's.
fn rerun_sqnr(model: &str, reference: &str, target: &str, extra: &[&str]) -> (f64, f64) {
    let saved = tempdir();
    let mut args = vec![
        model,
        "--reference",
        reference,
        "-t",
        target,
        "--no-baseline",
        "--fingerprint",
        "off",
        "--save-outputs",
        saved.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (_, report, stderr) = compare_json(&args);
    let row = &report["targets"][0];
    assert_eq!(row["status"], "ok", "{target}: {stderr}");
    let reported = worst_sqnr(row);
    // The target's directory (its id made a file name), beside the golden run's.
    let run_dir = std::fs::read_dir(saved.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().is_some_and(|n| n != "golden"))
        .unwrap();
    let mut recomputed = f64::INFINITY;
    for o in row["outputs"].as_array().unwrap() {
        let name = o["name"].as_str().unwrap();
        let got = values(&npz_array(&run_dir.join("s0.npz"), name));
        let want = values(&npz_array(&saved.path().join("golden").join("s0.npz"), name));
        recomputed = recomputed.min(plain_metrics(&got, &want).sqnr_db);
    }
    (reported, recomputed)
}

#[test]
fn cnn_matrix_recommends_the_cheapest_variant_that_meets_the_policy_per_target() {
    let m = &cnn().json;
    assert_eq!(m["cost_order"], serde_json::json!(["int8", "a16w8"]));
    // The int8 model's HTP output is 25.06 dB (README), under the 28 dB floor; a16w8 is above.
    let int8_htp = cell(m, "int8", "qnn:sm8650");
    assert!(!int8_htp["meets_policy"].as_bool().unwrap());
    assert!((num(&int8_htp["sqnr_db"]) - 25.06).abs() < 0.01);
    let recs = m["recommendations"].as_array().unwrap();
    let rec = |t: &str| recs.iter().find(|r| r["target"] == t).unwrap();
    assert_eq!(rec("cpu")["variant"], "int8");
    assert_eq!(rec("qnn:sm8650")["variant"], "a16w8");
    assert_eq!(rec("qnn:sm8650")["run_on"], "qnn:sm8650");
    // Every recommended cell, re-run alone: the same SQNR, and the same recomputed here.
    for r in recs {
        let (v, on) = (r["variant"].as_str().unwrap(), r["run_on"].as_str().unwrap());
        let c = cell(m, v, on);
        let fp32 = repo("fixtures/models/cnn_fp32.onnx");
        let (reported, recomputed) = rerun_sqnr(
            &variant_path(m, v),
            fp32.to_str().unwrap(),
            &variant_target(m, v, on),
            &[],
        );
        assert_eq!(reported, num(&c["sqnr_db"]), "{v} on {on}");
        assert_close(&format!("{v} on {on}"), recomputed, reported, 1e-9);
        assert!(reported >= 28.0);
    }
}

#[test]
fn the_dispatch_table_names_each_targets_file_provider_and_options() {
    let run = cnn();
    let d: Value = serde_json::from_slice(&std::fs::read(run.file("dispatch.json")).unwrap()).unwrap();
    let entries = d["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let htp = entries.iter().find(|e| e["target"] == "qnn:sm8650").unwrap();
    assert_eq!(htp["variant"], "a16w8");
    assert_eq!(htp["execution_provider"], "QNNExecutionProvider");
    assert_eq!(htp["chipset"], "sm8650");
    assert_eq!(htp["soc_model"], 57);
    assert_eq!(htp["ep_options"]["soc_model"], "57");
    let file = htp["model"].as_str().unwrap();
    let bytes = std::fs::read(file).unwrap();
    use sha2::Digest;
    assert_eq!(htp["model_sha256"], format!("{:x}", sha2::Sha256::digest(&bytes)));
    assert_eq!(d["unresolved"], serde_json::json!([]));
}

/// The kept candidate of `kind`: its step, and the file written under --write-candidates.
fn kept_step<'a>(m: &'a Value, kind: &str) -> (&'a Value, &'a Value) {
    let s = m["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap();
    let step = s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|st| st["kept"] == true)
        .expect("a kept step");
    (s, step)
}

#[test]
fn a_16_bit_layer_turns_the_failing_htp_cell_into_a_passing_one_re_measured() {
    let run = cnn();
    let (search, step) = kept_step(&run.json, "widen16");
    assert_eq!(search["fixed"], true, "{search:#}");
    assert_eq!(search["failing_targets"], serde_json::json!(["qnn:sm8650"]));
    let changed = search["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 1);
    let before = num(&cell(&run.json, "int8", "qnn:sm8650")["sqnr_db"]);
    let after = num(&step["sqnr_db"]["qnn:sm8650"]);
    assert!(after >= 28.0 && before < 28.0);
    assert_close("gain", num(&step["gained_db"]["qnn:sm8650"]), after - before, 1e-9);
    // The candidate file, re-run alone: the SQNR the search reported, recomputed here too.
    let file = step["candidate_file"].as_str().unwrap();
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    let (reported, recomputed) = rerun_sqnr(file, fp32.to_str().unwrap(), "qnn:sm8650", &[]);
    assert_eq!(reported, after);
    assert_close("candidate", recomputed, after, 1e-9);
    // The quantizer overrides name the kept layer as 16-bit.
    let tensor = changed[0].as_str().unwrap();
    assert_eq!(
        search["quantizer_overrides"]["extra_options"]["TensorQuantOverrides"][tensor],
        serde_json::json!([{ "quant_type": "QUInt16" }])
    );
    assert_eq!(step["placement"]["qnn:sm8650"]["layer_runs_on"], "npu");
}

/// `tests/data/check_widened.py` on a candidate: the JSON it prints.
fn numpy_check(original: &Path, candidate: &str) -> Value {
    let py = venv_python("tests/data/numpy-onnx-requirements.txt", "numpy-onnx");
    let out = run_ok(
        std::process::Command::new(py)
            .arg(repo("tests/data/check_widened.py"))
            .arg(original)
            .arg(candidate),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn assert_widened_per_onnx(check: &Value, tensors: &[&str], opset: i64) {
    assert_eq!(check["opset"], opset);
    let widened = check["widened"].as_array().unwrap();
    let names: Vec<&str> = widened.iter().map(|w| w["tensor"].as_str().unwrap()).collect();
    assert_eq!(names, tensors);
    for w in widened {
        // The same real range (float32 scale: a few parts in 10^8), the 8-bit grid inside the
        // 16-bit one, half a 16-bit step at most over the range, 257 times finer.
        assert!(num(&w["range_rel_diff"]) < 1e-6, "{w}");
        assert!(num(&w["grid_max_abs"]) < 1e-5 * num(&w["step_8"]) * 256.0, "{w}");
        assert!(num(&w["round_trip_max_in_steps_16"]) <= 0.5 + 1e-6, "{w}");
        assert_close("steps", num(&w["step_8"]) / num(&w["step_16"]), 257.0, 1e-6);
        assert!(w["readers"].as_u64().unwrap() >= 1);
        assert_eq!(w["readers_share_params"], true);
        assert_eq!(w["domain_ok"], true);
    }
}

#[test]
fn the_16_bit_rewrite_matches_the_onnx_quantize_definitions() {
    let run = cnn();
    let (search, step) = kept_step(&run.json, "widen16");
    let tensors: Vec<&str> = strs(&search["changed"]);
    let check = numpy_check(
        &repo("fixtures/models/cnn_qdq_u8.onnx"),
        step["candidate_file"].as_str().unwrap(),
    );
    assert_widened_per_onnx(&check, &tensors, 21);
}

#[test]
fn a_layer_left_in_float_reports_where_it_runs_and_what_it_buys() {
    let run = cnn();
    let (search, step) = kept_step(&run.json, "float");
    let node = step["layer"]["node"].as_str().unwrap();
    assert_eq!(
        search["quantizer_overrides"]["nodes_to_exclude"],
        serde_json::json!([node])
    );
    // Where the runtime put it: what a separate compare of the candidate says about fallback.
    let file = step["candidate_file"].as_str().unwrap();
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    let (_, report, _) = compare_json(&[
        file,
        "--reference",
        fp32.to_str().unwrap(),
        "-t",
        "qnn:sm8650",
        "--no-baseline",
        "--fingerprint",
        "off",
    ]);
    let p = &report["targets"][0]["placement"];
    let fell_back = p["fallback"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == node && f["kind"] == "compute");
    let placed = &step["placement"]["qnn:sm8650"];
    assert_eq!(placed["layer_runs_on"], if fell_back { "cpu" } else { "npu" });
    assert_eq!(placed["partitions"], p["ep_partitions"]);
    assert_eq!(placed["compute_fallback_nodes"], p["compute_fallback_nodes"]);
    let sqnr = worst_sqnr(&report["targets"][0]);
    assert_eq!(sqnr, num(&step["sqnr_db"]["qnn:sm8650"]));
}

#[test]
fn ppocr_matrix_over_u8_a16w8_and_fp16_with_a_16_bit_fix_on_the_failing_chipset() {
    let run = ppocr();
    let m = &run.json;
    // fp16 of the fp32 model on the HTP is far above both quantized variants there.
    for t in ["qnn:sm8450", "qnn:sm8650"] {
        let fp16 = num(&cell(m, "fp16", t)["sqnr_db"]);
        assert!(fp16 > 40.0, "fp16 on {t}: {fp16}");
        assert!(num(&cell(m, "u8", t)["sqnr_db"]) < fp16 - 20.0);
    }
    // Recommended cells re-run alone give the same SQNR.
    let fp32 = repo("fixtures/real/ppocr_cls_fp32.onnx");
    let inputs = repo("fixtures/inputs/ppocr_seed3.npz");
    for r in m["recommendations"].as_array().unwrap() {
        let (v, on) = (r["variant"].as_str().unwrap(), r["run_on"].as_str().unwrap());
        let extra = ["--inputs", inputs.to_str().unwrap()];
        let (reported, recomputed) = rerun_sqnr(
            &variant_path(m, v),
            fp32.to_str().unwrap(),
            &variant_target(m, v, on),
            &extra,
        );
        assert_eq!(reported, num(&cell(m, v, on)["sqnr_db"]), "{v} on {on}");
        assert_close(&format!("{v} on {on}"), recomputed, reported, 1e-9);
    }
    // The u8 model fails the floor on SM8450; the search's kept layers make it pass, and the
    // candidate's 16-bit pairs (com.microsoft ops: the model is opset 11) follow the definitions.
    let (search, step) = kept_step(m, "widen16");
    assert_eq!(search["variant"], "u8");
    assert!(search["failing_targets"]
        .as_array()
        .unwrap()
        .contains(&Value::from("qnn:sm8450")));
    assert_eq!(search["fixed"], true, "{}", search["outcome"]);
    let file = step["candidate_file"].as_str().unwrap();
    let (reported, _) = rerun_sqnr(
        file,
        fp32.to_str().unwrap(),
        "qnn:sm8450",
        &["--inputs", inputs.to_str().unwrap()],
    );
    assert_eq!(reported, num(&step["sqnr_db"]["qnn:sm8450"]));
    assert!(reported >= 20.0);
    let tensors: Vec<&str> = strs(&search["changed"]);
    let check = numpy_check(&repo("fixtures/real/ppocr_cls_qdq_u8.onnx"), file);
    assert_widened_per_onnx(&check, &tensors, 11);
    // SM8450 ships fp16 (u8 and a16w8 fail there), and the recommendation names the cheaper fix.
    let rec = m["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["target"] == "qnn:sm8450")
        .unwrap();
    assert_eq!(rec["variant"], "fp16");
    let fix = rec["remedy"].as_str().unwrap();
    assert!(
        fix.starts_with(&format!("u8 with {} at 16 bits meets it at", tensors.join(", "))),
        "{fix}"
    );
}

#[test]
fn the_heat_map_draws_one_cell_per_variant_and_target_in_chromium() {
    let run = cnn();
    let browser = chromium();
    let dom = headless_url(
        &browser,
        &format!("file://{}", run.file("m.html").display()),
        &run.file("m.dom"),
        &["--dump-dom".to_string()],
    );
    assert!(dom.contains(r#"data-rendered="ok""#), "the heat map was not drawn");
    let cells = run.json["cells"].as_array().unwrap();
    assert!(dom.contains(&format!(r#"data-marks="{}""#, cells.len())));
    for c in cells {
        let (v, t) = (c["variant"].as_str().unwrap(), c["target"].as_str().unwrap());
        let needle = format!(
            r#"data-variant="{v}" data-target="{t}" data-sqnr="{}" data-meets="{}""#,
            num(&c["sqnr_db"]),
            c["meets_policy"]
        );
        assert!(dom.contains(&needle), "{needle}");
    }
    let md = std::fs::read_to_string(run.file("m.md")).unwrap();
    assert!(md.contains("| **int8** |") && md.contains("### What to ship where"));
}

#[test]
fn bad_variants_are_refused_with_one_line_and_exit_2() {
    let u8m = repo("fixtures/models/cnn_qdq_u8.onnx").display().to_string();
    let fp32 = repo("fixtures/models/cnn_fp32.onnx").display().to_string();
    let v = |s: &str| format!("a={s}");
    for (args, needle) in [
        (vec!["--variant".into(), u8m.clone()], "expected NAME=MODEL.onnx"),
        (vec!["--variant".into(), v("/nonexistent.onnx")], "is not a file"),
        (
            vec!["--variant".into(), v(&u8m), "--variant".into(), v(&u8m)],
            "given twice",
        ),
        (
            vec!["--variant".into(), format!("{},bogus:x=1", v(&u8m))],
            "not an execution provider",
        ),
        (
            vec!["--variant".into(), v(&u8m), "--cost".into(), "b".into()],
            "--cost must name every variant",
        ),
    ] {
        let mut all: Vec<&str> = vec!["matrix", "-t", "cpu", "--reference", &fp32];
        all.extend(args.iter().map(String::as_str));
        fails_with(&all, 2, needle);
    }
    fails_with(&["matrix", "-t", "cpu", "--variant", &v(&u8m)], 2, "--reference");
}

#[test]
fn the_matrix_json_follows_the_committed_schema_derived_from_the_types() {
    let out = bin().args(["schema", "matrix"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let committed = std::fs::read_to_string(repo("docs/matrix.schema.json")).unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout) == committed,
        "docs/matrix.schema.json differs from the derived schema: run `cargo run -- schema matrix > docs/matrix.schema.json`"
    );
    let schema: Value = serde_json::from_str(&committed).unwrap();
    let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    for json in [&cnn().json, &ppocr().json] {
        let errors: Vec<String> = validator
            .iter_errors(json)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
}

/// The real transformer (all-MiniLM-L6-v2's first two layers): its u8 model is about 5 dB from the
/// fp32 one everywhere, the a16w8 model above 35 dB; at a 25 dB floor a16w8 is what ships, and
/// the 16-bit rewrite of a transformer's activations follows the ONNX definitions too.
#[test]
fn minilm_matrix_ships_a16w8_and_its_16_bit_candidates_follow_the_definitions() {
    let inputs = repo("fixtures/inputs/minilm_text0.npz").display().to_string();
    let run = matrix(&[
        "--variant",
        &format!("u8={}", real("minilm_l2_qdq_u8.onnx")),
        "--variant",
        &format!("a16w8={}", real("minilm_l2_qdq_a16w8.onnx")),
        "--reference",
        &real("minilm_l2_fp32.onnx"),
        "--inputs",
        &inputs,
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650",
        "--min-sqnr",
        "25",
        "--search",
        "widen16",
        "--max-promoted",
        "1",
    ]);
    let m = &run.json;
    for t in ["cpu", "qnn:sm8650"] {
        assert!(num(&cell(m, "u8", t)["sqnr_db"]) < 10.0);
        let rec = m["recommendations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["target"] == t)
            .unwrap();
        assert_eq!(rec["variant"], "a16w8");
        let (reported, recomputed) = rerun_sqnr(
            &real("minilm_l2_qdq_a16w8.onnx"),
            &real("minilm_l2_fp32.onnx"),
            t,
            &["--inputs", &inputs],
        );
        assert_eq!(reported, num(&cell(m, "a16w8", t)["sqnr_db"]));
        assert_close(t, recomputed, reported, 1e-9);
    }
    let search = &m["remedies"][0];
    let first = &search["steps"][0];
    let tensor = first["layer"]["tensor"].as_str().unwrap();
    let original = repo("fixtures/real/minilm_l2_qdq_u8.onnx");
    let check = numpy_check(&original, first["candidate_file"].as_str().unwrap());
    let opset = check["opset"].as_i64().unwrap();
    assert_widened_per_onnx(&check, &[tensor], opset);
}

/// With a stored golden run the searches rank layers on its activations (`golden create
/// --layers`), and say why they cannot when it holds outputs only.
#[test]
fn searches_against_a_stored_golden_run_need_its_activations() {
    let dir = tempdir();
    let fp32 = repo("fixtures/models/cnn_fp32.onnx").display().to_string();
    let u8m = repo("fixtures/models/cnn_qdq_u8.onnx").display().to_string();
    for (name, layers) in [("with", true), ("without", false)] {
        let golden = dir.path().join(name);
        let mut create = vec!["golden", "create", &fp32, "--out", golden.to_str().unwrap()];
        if layers {
            create.push("--layers");
        }
        assert_eq!(run(&create).status.code(), Some(0));
        let out = run(&[
            "matrix",
            "--variant",
            &format!("int8={u8m}"),
            "--golden",
            golden.to_str().unwrap(),
            "-t",
            "qnn:sm8650",
            "--min-sqnr",
            "28",
            "--search",
            "widen16",
            "--format",
            "json",
        ]);
        let m: Value = serde_json::from_slice(&out.stdout).unwrap();
        let search = &m["remedies"][0];
        if layers {
            assert_eq!(search["fixed"], true, "{search:#}");
            assert_eq!(search["changed"], serde_json::json!(["conv2_out"]));
        } else {
            assert!(
                search["error"].as_str().unwrap().contains("golden create --layers"),
                "{search:#}"
            );
        }
    }
}
