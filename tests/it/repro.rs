//! `npu-audit repro` end to end on the CNN fixture: the smallest window that departs on the HTP
//! simulator, its bundle checked against figures recomputed here from the bundle's own files,
//! run by its `run.py` without npu-audit, trimmed by one layer and re-audited by `compare`, and
//! the ways a repro is refused.

use std::path::Path;

use serde_json::Value;

use crate::common::*;

const QNN: &str = "qnn:sm8650";

/// Runs `repro` on the CNN fixture with `extra`; returns (exit code, JSON report, stdout).
fn repro(extra: &[&str], report: &Path) -> (i32, Value, String) {
    let mut args = vec![
        "repro",
        "fixtures/models/cnn_qdq_u8.onnx",
        "--reference",
        "fixtures/models/cnn_fp32.onnx",
    ];
    args.extend_from_slice(extra);
    let out = bin()
        .current_dir(repo("."))
        .args(&args)
        .arg("--report")
        .arg(report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = out.status.code().unwrap_or(-1);
    let json = std::fs::read_to_string(report)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(Value::Null);
    assert!(
        code != 2 && code != 4,
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (code, json, stdout)
}

fn node(v: &Value) -> &str {
    v["node"].as_str().unwrap()
}

/// The real values of codes: `(code - zero_point) * scale`.
fn dequantized(codes: &[f64], scale: f64, zero_point: f64) -> Vec<f64> {
    codes.iter().map(|c| (c - zero_point) * scale).collect()
}

#[test]
fn a_two_layer_departure_is_cut_out_and_its_bundle_reproduces_without_npu_audit() {
    let tmp = tempdir();
    let bundle = tmp.path().join("bundle");
    let (code, r, stdout) = repro(
        &["-t", QNN, "--against", "cpu", "--out", bundle.to_str().unwrap()],
        &tmp.path().join("r.json"),
    );
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(r["status"], "reproduced");
    // conv1 alone and bn1 alone stay within one step of the CPU EP (the per-layer audit's
    // isolated figures); together bn1 amplifies conv1's ±1 to 3 steps: the search starts at the
    // first cumulative departure and grows one layer upstream.
    assert_eq!(r["start"]["reason"], "first_cumulative_departure");
    let w = &r["window"];
    assert_eq!((node(&w["first"]), node(&w["last"])), ("conv1", "bn1"));
    for m in r["minimality"].as_array().unwrap() {
        assert_eq!(m["departs"], false, "{m}");
    }
    assert_eq!(r["minimality"].as_array().unwrap().len(), 2);
    assert!(r["candidates_tried"].as_u64().unwrap() >= 4);
    // The bundle leaves the machine: its report names no path of this one (not the user's home,
    // the runtime cache, the repository or the temporary directory), the runtimes by file name.
    let shared = std::fs::read_to_string(bundle.join("repro.json")).unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    for host in [
        home.as_str(),
        ".cache/npu-audit",
        env!("CARGO_MANIFEST_DIR"),
        tmp.path().to_str().unwrap(),
    ] {
        assert!(!shared.contains(host), "the bundle's repro.json names {host}");
    }
    let shared: Value = serde_json::from_str(&shared).unwrap();
    assert_eq!(shared["model"], "cnn_qdq_u8.onnx");
    assert!(shared["target"]["runtime"]["library"]
        .as_str()
        .unwrap()
        .starts_with("libonnxruntime.so"));
    assert!(shared["target"]["runtime"]["sha256"]
        .as_str()
        .is_some_and(|h| h.len() == 64));

    // The figures, recomputed from the bundle's own files.
    let out = "relu1_out_QuantizeLinear_Output";
    let t = values(&npz_array(&bundle.join("expected/qnn_sm8650.npz"), out));
    let a = values(&npz_array(&bundle.join("expected/cpu.npz"), out));
    let g = values(&npz_array(&bundle.join("expected/golden.npz"), out));
    let differing = t.iter().zip(&a).filter(|(x, y)| x != y).count() as u64;
    let steps = t.iter().zip(&a).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    let f = &r["bundle"]["outputs"][0];
    assert_eq!(f["differing"].as_u64(), Some(differing));
    assert_eq!(f["max_steps"].as_f64(), Some(steps));
    assert!(steps >= 2.0);
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(bundle.join("bundle.json")).unwrap()).unwrap();
    let q = &cfg["outputs"][0]["quant"];
    let scale = q["scale"].as_f64().unwrap() as f32 as f64;
    let zp = q["zero_point"].as_f64().unwrap();
    let sqnr = plain_metrics(&dequantized(&t, scale, zp), &g).sqnr_db;
    assert_close("target SQNR", num(&f["target_sqnr_db"]), sqnr, 1e-9);
    // The window as cut: only its 10 nodes, its own weights, the source's opset.
    let model = npu_audit::data::model::load_model(&bundle.join("model.onnx")).unwrap();
    let graph = model.proto.graph.as_ref().unwrap();
    assert_eq!(graph.node.len() as u64, w["nodes"].as_u64().unwrap());
    let source = npu_audit::data::model::load_model(&repo("fixtures/models/cnn_qdq_u8.onnx")).unwrap();
    assert_eq!(model.proto.opset_import, source.proto.opset_import);
    let read: std::collections::BTreeSet<&str> = graph
        .node
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .collect();
    assert!(graph
        .initializer
        .iter()
        .all(|i| read.contains(i.name.as_deref().unwrap())));
    assert!(r["bundle"]["model_bytes"].as_u64() < r["bundle"]["source_model_bytes"].as_u64());
    // The simulator took every node of the window: the departure is the NPU's, not a fallback's.
    let placed = r["bundle"]["target_placement"].as_array().unwrap();
    assert_eq!(placed.len(), 1, "{placed:?}");
    assert_eq!(placed[0]["ep"], "QNNExecutionProvider");

    // run.py, with NumPy and onnxruntime only, prints what the tool printed.
    let py = venv_python("tests/data/numpy-ort-requirements.txt", "numpy-ort");
    let plugin = String::from_utf8(run(&["runtime", "path", "qnn"]).stdout).unwrap();
    let ran = std::process::Command::new(py)
        .arg(bundle.join("run.py"))
        .args(["--qnn-plugin", plugin.trim()])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&ran.stdout);
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{printed}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(
        printed.contains("qnn:sm8650: ran here; outputs bit-identical"),
        "{printed}"
    );
    let line = printed.lines().find(|l| l.starts_with("OUTPUT ")).unwrap();
    let sentence = line.trim_start_matches("OUTPUT ").trim_end_matches(" (departs)");
    assert!(
        stdout.contains(sentence),
        "run.py printed {sentence}; the tool:\n{stdout}"
    );
    assert!(printed.contains("REPRODUCED"), "{printed}");

    trimmed_window_does_not_depart(&bundle, tmp.path());
}

/// The bundle without its last layer (bn1: its BatchNormalization, the QuantizeLinear after it
/// and the DequantizeLinear before it), audited by `compare`: the HTP simulator and the CPU EP
/// stay within one step, so the window is minimal at that end.
fn trimmed_window_does_not_depart(bundle: &Path, dir: &Path) {
    use prost::Message;
    let mut model = npu_audit::data::model::load_model(&bundle.join("model.onnx"))
        .unwrap()
        .proto;
    let g = model.graph.as_mut().unwrap();
    let conv1 = "conv1_out_QuantizeLinear_Output";
    let reads_conv1 = |n: &npu_audit::data::model::pb::NodeProto| n.input.iter().any(|i| i == conv1);
    let dq = g.node.iter().find(|n| reads_conv1(n)).unwrap().output[0].clone();
    g.node.retain(|n| !reads_conv1(n));
    let bn = g.node.iter().find(|n| n.input.contains(&dq)).unwrap().output[0].clone();
    g.node.retain(|n| !n.input.contains(&dq) && !n.input.contains(&bn));
    g.output = vec![tensor_value_info(conv1, 2, &[1, 16, 32, 32])];
    let read: std::collections::BTreeSet<String> = g.node.iter().flat_map(|n| n.input.clone()).collect();
    g.initializer.retain(|i| read.contains(i.name.as_deref().unwrap()));
    let path = dir.join("trimmed.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let input = dir.join("in.npy");
    npz_array(&bundle.join("inputs.npz"), "image_QuantizeLinear_Output")
        .write_npy(&input)
        .unwrap();
    let (_, report, err) = compare_json(&[
        path.to_str().unwrap(),
        "--reference",
        path.to_str().unwrap(),
        "-t",
        QNN,
        "-t",
        "cpu",
        "--no-baseline",
        "--input",
        &format!("image_QuantizeLinear_Output={}", input.display()),
    ]);
    let pair = report["agreement"]
        .as_array()
        .unwrap_or_else(|| panic!("{err}"))
        .iter()
        .find(|e| e["a"] != "golden" && e["b"] != "golden" && (e["a"] == QNN || e["b"] == QNN))
        .unwrap_or_else(|| panic!("{report}"));
    let steps = pair["code_differences"]["max_steps"].as_u64().unwrap_or(0);
    assert!(steps < 2, "conv1 alone departs by {steps} steps: {pair}");
}

#[test]
fn a_zip_bundle_with_scrubbed_weights_reproduces_or_says_it_does_not() {
    let tmp = tempdir();
    let zip = tmp.path().join("b.zip");
    let (code, r, _) = repro(
        &[
            "-t",
            QNN,
            "--against",
            "cpu:noopt",
            "--scrub-weights",
            "--scrub-seed",
            "5",
            "--out",
            zip.to_str().unwrap(),
        ],
        &tmp.path().join("r.json"),
    );
    assert_eq!(code, 0);
    let s = &r["bundle"]["scrubbed"];
    assert_eq!(s["seed"], 5);
    assert!(!s["replaced"].as_array().unwrap().is_empty());
    let names: Vec<String> = {
        let f = std::fs::File::open(&zip).unwrap();
        let a = zip::ZipArchive::new(f).unwrap();
        a.file_names().map(str::to_string).collect()
    };
    for want in [
        "README.md",
        "model.onnx",
        "inputs.npz",
        "run.py",
        "requirements.txt",
        "repro.json",
    ] {
        assert!(names.iter().any(|n| n == want), "{names:?}");
    }
    // Kept weights mean no golden figures (the golden run is of the real weights); dropped
    // ones leave the real bundle, with them.
    let carried = s["reproduces"] == true;
    assert_eq!(names.iter().any(|n| n == "expected/golden.npz"), !carried, "{s}");
    let sqnr = &r["bundle"]["outputs"][0]["target_sqnr_db"];
    assert_eq!(sqnr.is_null(), carried, "{sqnr}");
}

#[test]
fn a_target_that_does_not_depart_ends_1_with_the_closest_layer_and_writes_nothing() {
    let tmp = tempdir();
    let out = tmp.path().join("never");
    let (code, r, stdout) = repro(
        &["-t", "cpu", "--against", "cpu:noopt", "--out", out.to_str().unwrap()],
        &tmp.path().join("r.json"),
    );
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(r["status"], "no_departure");
    assert!(r["window"].is_null() && r["bundle"].is_null());
    let closest = &r["closest"];
    assert_eq!(closest["departs"], false);
    assert!(closest["outputs"][0]["max_steps"].as_u64().unwrap() < 2);
    assert!(stdout.contains("CLOSEST"), "{stdout}");
    assert!(!out.exists(), "a bundle was written for no departure");
}

#[test]
fn a_named_layer_keeps_its_place_at_the_end_of_the_window() {
    let tmp = tempdir();
    let (code, r, _) = repro(&["-t", QNN, "--layer", "conv3"], &tmp.path().join("r.json"));
    assert_eq!(code, 0);
    assert_eq!(r["start"]["reason"], "layer_flag");
    assert_eq!(node(&r["window"]["last"]), "conv3");
    assert!(r["bundle"]["reproduces"] == true && r["bundle"]["path"] == "");
}

#[test]
fn repro_refuses_what_it_cannot_do_in_one_line() {
    let tmp = tempdir();
    let m = repo("fixtures/models/cnn_qdq_u8.onnx");
    let m = m.to_str().unwrap();
    fails_with(
        &["repro", m, "-t", QNN, "--layer", "nope"],
        2,
        "--layer nope: the model has no layer",
    );
    fails_with(&["repro", m, "-t", QNN, "--against", QNN], 2, "is the target itself");
    fails_with(&["repro", m, "-t", "qnn:all"], 2, "repro takes one");
    fails_with(&["repro", m, "-t", "qnn:sm8650@all"], 2, "repro takes one");
    fails_with(&["repro", m, "-t", "qnn:nope"], 2, "--target qnn:nope");
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "keep").unwrap();
    fails_with(&["repro", m, "-t", QNN, "--out", full.to_str().unwrap()], 2, "--out");
    assert_eq!(std::fs::read_to_string(full.join("x")).unwrap(), "keep");
    let fixtures = repo("fixtures/models");
    fails_with(
        &["repro", m, "-t", QNN, "--out", fixtures.to_str().unwrap()],
        2,
        "--out",
    );
}

#[test]
fn the_repro_schema_is_committed_and_reports_validate() {
    let derived = bin().args(["schema", "repro"]).output().unwrap();
    let committed = std::fs::read_to_string(repo("docs/repro.schema.json")).unwrap();
    assert!(
        String::from_utf8_lossy(&derived.stdout) == committed,
        "docs/repro.schema.json differs from the derived schema: run `cargo run -- schema repro > docs/repro.schema.json`"
    );
    let schema: Value = serde_json::from_str(&committed).unwrap();
    let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    let tmp = tempdir();
    for extra in [&["-t", QNN][..], &["-t", "cpu", "--against", "cpu:noopt"][..]] {
        let (_, r, _) = repro(extra, &tmp.path().join("r.json"));
        if let Err(e) = validator.validate(&r) {
            panic!("{extra:?}: the report does not validate: {e}");
        }
    }
}

#[test]
fn the_layers_page_gives_a_repro_command_that_runs_as_written() {
    let tmp = tempdir();
    let page = tmp.path().join("l.html");
    let out = bin()
        .current_dir(repo("."))
        .args([
            "layers",
            "fixtures/models/cnn_qdq_u8.onnx",
            "--reference",
            "fixtures/models/cnn_fp32.onnx",
        ])
        .args(["-t", QNN, "--html"])
        .arg(&page)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    let start = html
        .find("<code>npu-audit repro ")
        .expect("a repro command on the page")
        + "<code>".len();
    let command = &html[start..start + html[start..].find("</code>").unwrap()];
    let zip = tmp.path().join("repro.zip");
    let words: Vec<String> = command
        .split_whitespace()
        .skip(1)
        .map(|w| {
            if w == "repro.zip" {
                zip.display().to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    let ran = bin().current_dir(repo(".")).args(&words).output().unwrap();
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{command}: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(zip.is_file());
}

#[test]
fn weights_kept_in_external_data_are_brought_into_the_bundles_model() {
    let tmp = tempdir();
    let external = with_external_data(&repo("fixtures/models/cnn_qdq_u8.onnx"), tmp.path());
    let bundle = tmp.path().join("b");
    let out = bin()
        .args(["repro", external.to_str().unwrap(), "--reference"])
        .arg(repo("fixtures/models/cnn_fp32.onnx"))
        .args(["-t", QNN, "--out", bundle.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let model = npu_audit::data::model::load_model(&bundle.join("model.onnx")).unwrap();
    assert!(model.external_data_files().is_empty());
    let g = model.proto.graph.as_ref().unwrap();
    assert!(!g.initializer.is_empty());
    assert!(g
        .initializer
        .iter()
        .all(|t| t.data_location != Some(1) && t.external_data.is_empty()));
    // The same window as from the model with its weights inside.
    let inline = tmp.path().join("inline");
    let plain = bin()
        .args(["repro"])
        .arg(repo("fixtures/models/cnn_qdq_u8.onnx"))
        .arg("--reference")
        .arg(repo("fixtures/models/cnn_fp32.onnx"))
        .args(["-t", QNN, "--out", inline.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(0));
    let a = npz_array(
        &bundle.join("expected/qnn_sm8650.npz"),
        "relu1_out_QuantizeLinear_Output",
    );
    let b = npz_array(
        &inline.join("expected/qnn_sm8650.npz"),
        "relu1_out_QuantizeLinear_Output",
    );
    assert_eq!(values(&a), values(&b));
}

#[test]
fn no_output_replaces_the_references_external_data() {
    let tmp = tempdir();
    let reference = with_external_data(&repo("fixtures/models/cnn_fp32.onnx"), tmp.path());
    let model = npu_audit::data::model::load_model(&reference).unwrap();
    let data = tmp.path().join(&model.external_data_files()[0]);
    let before = std::fs::read(&data).unwrap();
    let m = repo("fixtures/models/cnn_qdq_u8.onnx");
    let (r, d) = (reference.to_str().unwrap(), data.to_str().unwrap());
    for flag in ["--report", "--markdown", "--out"] {
        fails_with(
            &["repro", m.to_str().unwrap(), "--reference", r, "-t", QNN, flag, d],
            2,
            "",
        );
    }
    fails_with(
        &[
            "compare",
            m.to_str().unwrap(),
            "--reference",
            r,
            "-t",
            "cpu",
            "--out",
            d,
        ],
        2,
        "one of this run's inputs",
    );
    assert_eq!(std::fs::read(&data).unwrap(), before);
}

#[test]
fn a_bundle_never_replaces_a_file_nor_writes_through_a_link() {
    let tmp = tempdir();
    let m = repo("fixtures/models/cnn_qdq_u8.onnx");
    let m = m.to_str().unwrap();
    // An existing zip, a link to a file elsewhere, a dangling link, a link to an empty directory:
    // each refused before any work, each left as it was.
    let existing = tmp.path().join("old.zip");
    std::fs::write(&existing, "the user's own zip").unwrap();
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let linked = tmp.path().join("linked.zip");
    std::os::unix::fs::symlink(&victim, &linked).unwrap();
    let dangling = tmp.path().join("dangling.zip");
    std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let dir_link = tmp.path().join("bundle");
    std::os::unix::fs::symlink(&empty, &dir_link).unwrap();
    for (dest, want) in [
        (&existing, "exists (a file)"),
        (&linked, "exists (a symbolic link)"),
        (&dangling, "symbolic link"),
        (&dir_link, "is a symbolic link"),
    ] {
        fails_with(&["repro", m, "-t", QNN, "--out", dest.to_str().unwrap()], 2, want);
    }
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "the user's own zip");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink());
    assert!(!tmp.path().join("nowhere").exists());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

#[test]
fn external_data_behind_a_link_out_of_the_models_directory_is_refused_by_every_command() {
    // A model whose weights file is a link, inside its directory, to a file outside it: the
    // "host file" would be inlined into a vendor's bundle. Every command that reads the model
    // refuses it before writing anything.
    let tmp = tempdir();
    let made = tmp.path().join("made");
    std::fs::create_dir(&made).unwrap();
    let model = with_external_data(&repo("fixtures/models/cnn_qdq_u8.onnx"), &made);
    let host = tmp.path().join("host");
    std::fs::create_dir(&host).unwrap();
    std::fs::rename(made.join("weights.bin"), host.join("secret.bin")).unwrap();
    std::os::unix::fs::symlink(host.join("secret.bin"), made.join("weights.bin")).unwrap();
    let m = model.to_str().unwrap();
    let bundle = tmp.path().join("bundle.zip");
    let report = tmp.path().join("r.json");
    let (b, r) = (bundle.to_str().unwrap(), report.to_str().unwrap());
    let want = "is a link to";
    fails_with(&["repro", m, "-t", QNN, "--out", b, "--report", r], 2, want);
    fails_with(&["compare", m, "-t", "cpu", "--out", r], 2, want);
    fails_with(&["layers", m, "-t", "cpu", "--out", r], 2, want);
    let golden = tmp.path().join("golden");
    fails_with(&["golden", "create", m, "--out", golden.to_str().unwrap()], 2, want);
    assert!(!bundle.exists() && !report.exists() && !golden.exists());
    // A link that stays inside the directory is the model's own file.
    std::fs::remove_file(made.join("weights.bin")).unwrap();
    std::fs::rename(host.join("secret.bin"), made.join("blob.bin")).unwrap();
    std::os::unix::fs::symlink("blob.bin", made.join("weights.bin")).unwrap();
    let ok = bin().args(["compare", m, "-t", "cpu", "--out", r]).output().unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
}
