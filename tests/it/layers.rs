//! Per-layer drift end to end: the real binary on the fixtures. Expected figures come from the
//! fixture script (NumPy, `fixtures/expected/ladder.json`), never from the tool.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn layers_of<'a>(report: &'a Value, id: &str) -> &'a Vec<Value> {
    target(report, id)["layers"]
        .as_array()
        .unwrap_or_else(|| panic!("{id} has no layers"))
}

fn layer<'a>(report: &'a Value, id: &str, node: &str) -> &'a Value {
    layers_of(report, id)
        .iter()
        .find(|l| l["node"] == node)
        .unwrap_or_else(|| panic!("{id} has no layer {node}"))
}

fn ladder() -> (String, String, Value) {
    let expected: Value =
        serde_json::from_slice(&std::fs::read(repo("fixtures/expected/ladder.json")).expect("ladder.json"))
            .expect("json");
    (
        repo("fixtures/models/ladder_qdq_u8.onnx").display().to_string(),
        repo("fixtures/models/ladder_fp32.onnx").display().to_string(),
        expected,
    )
}

/// `compare` of the ladder on qnn:sm8650 with the inputs its expectations were computed for
/// (`--gen x=uniform:-4,4 --seed 5 --samples 2`), plus `extra`; the audit must succeed.
fn ladder_report(extra: &[&str]) -> Value {
    let (model, reference, _) = ladder();
    let mut args = vec![
        model.as_str(),
        "--reference",
        reference.as_str(),
        "-t",
        "qnn:sm8650",
        "--gen",
        "x=uniform:-4,4",
        "--seed",
        "5",
        "--samples",
        "2",
        "--fingerprint",
        "off",
    ];
    args.extend_from_slice(extra);
    let (code, report, stderr) = compare_json(&args);
    assert_eq!(code, 0, "{stderr}");
    report
}

/// The histogram fields of a report comparison against the fixture script's.
fn assert_histogram(what: &str, got: &Value, want: &Value) {
    for key in ["differing", "off_by_one", "off_by_two", "off_by_more", "max_steps"] {
        assert_eq!(got[key], want[key], "{what}: {key}: got {got}, want {want}");
    }
}

#[test]
fn the_ladder_drifts_first_at_the_tie_layer_and_isolation_blames_it_alone() {
    let (_, _, want) = ladder();
    let report = ladder_report(&["--layers", "all"]);
    let info = &report["layer_audit"];
    assert_eq!(info["unmatched"], serde_json::json!([]));
    let summary = &target(&report, "qnn:sm8650")["layer_summary"];
    let layers = want["layers"].as_object().expect("layers");
    // The levels, from NumPy's chains: the first layer whose codes differ at all (the tie layer,
    // introduced there) and the first more than one step off (inherited from it).
    let ladder_nodes = [
        ("a", "conv_a"),
        ("b", "conv_b"),
        ("c", "conv_c"),
        ("d", "conv_d"),
        ("y", "conv_e"),
    ];
    let first_where = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        ladder_nodes
            .iter()
            .find(|(name, _)| pred(&layers[*name]["cumulative"]))
            .map(|(_, node)| *node)
    };
    let code = first_where(&|c| c["differing"].as_u64() > Some(0));
    let beyond = first_where(&|c| c["max_steps"].as_u64() > Some(1));
    assert_eq!((code, beyond), (Some("conv_c"), Some("conv_d")));
    let first = &summary["first_code_difference"];
    assert_eq!(first["node"], code.unwrap(), "{summary}");
    assert_eq!(first["tensor"], "c_QuantizeLinear_Output");
    assert_eq!(first["introduced"], true);
    let second = &summary["first_beyond_rounding"];
    assert_eq!(second["node"], beyond.unwrap(), "{summary}");
    assert_eq!(second["max_steps"], layers["d"]["cumulative"]["max_steps"]);
    assert_eq!(second["introduced"], false, "conv_d alone rounds like the baseline");
    assert_eq!(summary["tap_effects"]["outputs_identical"], true);

    for (name, node) in ladder_nodes {
        let w = &layers[name];
        let got = layer(&report, "qnn:sm8650", node);
        // Cumulative codes against the baseline: NumPy's half-up chain against its half-even chain.
        assert_histogram(&format!("{node} cumulative"), &got["vs_baseline"], &w["cumulative"]);
        // Isolated: the layer alone on golden inputs.
        assert_histogram(
            &format!("{node} isolated"),
            &got["introduced_vs_baseline"],
            &w["isolated"],
        );
        // SQNR against the fp32 golden activations: the baseline rounds half to even, HTP half up.
        let base = layer(&report, "qnn:sm8650", node);
        assert_close(
            &format!("{node} qnn sqnr"),
            num(&base["sqnr_db"]),
            w["sqnr_db_half_up"].as_f64().unwrap(),
            1e-4,
        );
        let noopt = layer(&report, "cpu:noopt", node);
        assert_close(
            &format!("{node} noopt sqnr"),
            num(&noopt["sqnr_db"]),
            w["sqnr_db"].as_f64().unwrap(),
            1e-4,
        );
        // Dequantization is float32, as DequantizeLinear defines it; NumPy's is float64.
        assert_close(
            &format!("{node} noopt max_abs"),
            num(&noopt["max_abs"]),
            w["max_abs"].as_f64().unwrap(),
            1e-5,
        );
        assert_close(
            &format!("{node} noopt introduced sqnr"),
            num(&noopt["introduced_sqnr_db"]),
            w["introduced_sqnr_db"].as_f64().unwrap(),
            1e-4,
        );
    }
    // The tie layer's one-LSB differences all sat on a .5 tie of the baseline's value.
    let c = &layer(&report, "qnn:sm8650", "conv_c")["vs_baseline"];
    assert_eq!(c["ties"], layers["c"]["cumulative"]["ties"]);
    assert!(c["ties"].as_u64().unwrap() > 0);
    // Successors inherit: they differ cumulatively but not alone.
    for node in ["conv_d", "conv_e"] {
        let l = layer(&report, "qnn:sm8650", node);
        assert!(l["vs_baseline"]["differing"].as_u64().unwrap() > 0, "{node} inherits");
        assert_eq!(l["introduced_vs_baseline"]["differing"], 0, "{node} introduces nothing");
    }
}

#[test]
fn bisection_finds_the_first_ladder_layer_beyond_rounding_in_logarithmic_sessions() {
    let report = ladder_report(&["--layers", "bisect"]);
    let summary = &target(&report, "qnn:sm8650")["layer_summary"];
    // Bisection looks for the first layer beyond rounding: conv_d, two steps off (NumPy).
    assert_eq!(summary["first_beyond_rounding"]["node"], "conv_d", "{summary}");
    assert!(
        summary["first_code_difference"].is_null(),
        "bisection searches one level"
    );
    let bisect = &summary["bisect"];
    // Cuts: the input's codes and the five layers' codes; log2(6) rounded up, plus the last cut.
    assert_eq!(bisect["cuts"], 6);
    let steps = bisect["steps"].as_array().unwrap();
    assert!(steps.len() <= 4, "{steps:?}");
    assert_eq!(steps[0]["tensor"], "y_QuantizeLinear_Output");
    assert_eq!(steps[0]["departs"], true);
}

#[test]
fn taps_split_into_runs_give_the_same_figures_as_one_run() {
    let run_with = |budget: &str| {
        let (code, report, stderr) = compare_json(&[
            &cnn(),
            "--reference",
            &cnn_fp32(),
            "-t",
            "cpu",
            "--seed",
            "3",
            "--layers",
            "all",
            "--tap-memory",
            budget,
            "--fingerprint",
            "off",
        ]);
        assert_eq!(code, 0, "{stderr}");
        report
    };
    let one = run_with("256M");
    let many = run_with("8K");
    assert_eq!(one["layer_audit"]["tap_runs"], 1);
    assert!(
        many["layer_audit"]["tap_runs"].as_u64().unwrap() > 3,
        "{}",
        many["layer_audit"]
    );
    for id in ["cpu", "cpu:noopt"] {
        assert_eq!(layers_of(&one, id), layers_of(&many, id), "{id}");
    }
    // Every point of the CNN is tapped and matched (14 activation QuantizeLinear nodes).
    assert_eq!(one["layer_audit"]["selected"], 14);
    assert_eq!(one["layer_audit"]["matched"], 14);
    // Final outputs come from the untapped run and tapping left them bit-identical.
    assert_eq!(
        target(&one, "cpu")["layer_summary"]["tap_effects"]["outputs_identical"],
        true
    );
}

#[test]
fn filters_that_match_nothing_and_an_unmatchable_reference_are_reported_and_the_audit_completes() {
    // A reference with the CNN's inputs and outputs but nothing else in common.
    let dir = tempdir();
    let other = dir.path().join("other.onnx");
    {
        use npu_audit::data::model::build::GraphBuilder;
        use npu_audit::data::tensor::{Tensor, TensorData};
        let mut b = GraphBuilder::new("other");
        b.input("image", 1, &[1, 3, 32, 32]);
        b.constant("shape", &Tensor::new(vec![2], TensorData::Int64(vec![1, -1])).unwrap());
        b.constant(
            "w",
            &Tensor::new(vec![3072, 10], TensorData::Float32(vec![0.001; 30720])).unwrap(),
        );
        b.node("Reshape", "flat", &["image", "shape"], &["flat_image"], &[]);
        b.node("MatMul", "fc_other", &["flat_image", "w"], &["scores"], &[]);
        b.node("Identity", "copy", &["scores"], &["logits"], &[]);
        b.node("Softmax", "sm", &["logits"], &["probs"], &[]);
        b.output("logits").output("probs");
        let mut model = b.finish();
        let g = model.graph.as_mut().unwrap();
        g.output = vec![
            tensor_value_info("logits", 1, &[1, 10]),
            tensor_value_info("probs", 1, &[1, 10]),
        ];
        std::fs::write(&other, prost::Message::encode_to_vec(&model)).unwrap();
    }
    let (code, report, stderr) = compare_json(&[
        &cnn(),
        "--reference",
        other.to_str().unwrap(),
        "-t",
        "cpu",
        "--op",
        "Conv,NoSuchOp",
        "--fingerprint",
        "off",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let problems: Vec<&str> = report["layer_audit"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        problems.iter().any(|p| p.starts_with("--op NoSuchOp matches no layer")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("none of the 3 tapped layers has a counterpart")),
        "{problems:?}"
    );
    assert_eq!(report["layer_audit"]["unmatched"].as_array().unwrap().len(), 3);
    // The output-level audit is complete, and layers are still compared with the baseline.
    assert!(
        output(&report, "cpu", "probs")["sqnr_db"].is_number()
            || output(&report, "cpu", "probs")["sqnr_db"].is_string()
    );
    let conv1 = layer(&report, "cpu", "conv1");
    assert!(conv1["sqnr_db"].is_null());
    assert!(conv1["vs_baseline"]["differing"].is_u64());
}

#[test]
fn a_failed_sizing_session_is_a_problem_not_a_failed_audit() {
    let out = bin()
        .env("NPU_AUDIT_FAULT_INJECT", "layer-sizing=crash")
        .args([
            "compare",
            &cnn(),
            "-t",
            "cpu",
            "--layers",
            "all",
            "--fingerprint",
            "off",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = report["layer_audit"]["problems"].to_string();
    assert!(
        problems.contains("cannot infer the types of the tapped tensors"),
        "{problems}"
    );
    assert!(target(&report, "cpu")["outputs"]
        .as_array()
        .is_some_and(|o| o.len() == 2));
}

#[test]
fn layer_flags_are_checked_before_anything_runs() {
    fails_with(
        &["compare", &cnn(), "--layers", "none", "--op", "Conv"],
        2,
        "drop --layers none",
    );
    fails_with(&["compare", &cnn(), "--node", "/(/"], 2, "is not a valid pattern");
    fails_with(
        &["layers", &cnn(), "--tap-list", "/no/such/list.txt"],
        2,
        "--tap-list /no/such/list.txt",
    );
}

#[test]
fn the_layers_command_prints_the_layer_section() {
    let out = run(&[
        "layers",
        &cnn(),
        "-t",
        "qnn:sm8650",
        "--op",
        "Softmax",
        "--seed",
        "1",
        "--fingerprint",
        "off",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("LAYERS"), "{text}");
    assert!(text.contains("1 of 14 points tapped (selected) in 1 run(s)"), "{text}");
    assert!(text.contains("softmax"), "{text}");
}

#[test]
fn a_tensor_a_target_cannot_return_is_named_and_every_other_layer_is_still_measured() {
    let out = bin()
        .env(
            "NPU_AUDIT_FAULT_INJECT",
            "cpu=refuse-output:conv2_out_QuantizeLinear_Output",
        )
        .args([
            "compare",
            &cnn(),
            "--reference",
            &cnn_fp32(),
            "-t",
            "cpu",
            "--layers",
            "all",
            "--fingerprint",
            "off",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &target(&report, "cpu")["layer_summary"];
    let error = summary["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("retried in halves: 1 of 14 layer(s) make it fail"),
        "{error}"
    );
    for l in layers_of(&report, "cpu") {
        if l["tensor"] == "conv2_out_QuantizeLinear_Output" {
            assert!(l["error"].as_str().unwrap().contains("injected fault"), "{l}");
            assert!(l["sqnr_db"].is_null() && l.get("vs_baseline").is_none());
        } else {
            assert!(l.get("error").is_none(), "{l}");
            assert!(l["vs_baseline"]["differing"].is_u64(), "{l}");
            assert!(!l["sqnr_db"].is_null(), "{l}");
        }
    }
    // Retries: log2(14) levels of two sessions at most, on top of the first runs.
    let sessions = report["layer_audit"]["sessions"].as_u64().unwrap();
    assert!(sessions <= 6 + 2 * 4, "{sessions}");
}

#[test]
fn a_model_with_external_data_is_tapped_like_its_inline_twin() {
    let dir = tempdir();
    // Every initializer outside, scales and zero points included.
    let external = with_external_data(&repo("fixtures/models/cnn_qdq_u8.onnx"), dir.path());
    let run_on = |m: &str| cnn_layer_audit(m, &[]).0;
    let inline = run_on(&cnn());
    let ext = run_on(external.to_str().unwrap());
    assert_eq!(ext["layer_audit"]["selected"], 14);
    for id in ["cpu", "cpu:noopt"] {
        assert_eq!(layers_of(&inline, id), layers_of(&ext, id), "{id}");
    }
}

#[test]
fn an_isolation_window_carries_the_tie_layer_into_its_successor() {
    let report = ladder_report(&["--layers", "all", "--isolate-window", "2"]);
    assert_eq!(report["layer_audit"]["isolate_window"], 2);
    let introduced = |node: &str| {
        layer(&report, "qnn:sm8650", node)["introduced_vs_baseline"]["differing"]
            .as_u64()
            .unwrap()
    };
    // conv_d's window holds conv_c, the only layer with ties; conv_e's holds conv_d and itself.
    assert!(introduced("conv_c") > 0);
    assert!(introduced("conv_d") > 0);
    assert_eq!(introduced("conv_e"), 0);
    assert_eq!(introduced("conv_b"), 0);
}

#[test]
fn a_layer_the_baseline_cannot_return_is_counted_as_not_compared_not_as_agreeing() {
    let out = bin()
        .env(
            "NPU_AUDIT_FAULT_INJECT",
            "cpu:noopt=refuse-output:conv2_out_QuantizeLinear_Output",
        )
        .args([
            "compare",
            &cnn(),
            "--reference",
            &cnn_fp32(),
            "-t",
            "qnn:sm8650",
            "--layers",
            "all",
            "--no-isolate",
            "--fingerprint",
            "off",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &target(&report, "qnn:sm8650")["layer_summary"];
    assert_eq!(summary["layers_not_compared"], 1, "{summary}");
    let conv2 = layer(&report, "qnn:sm8650", "conv2");
    assert!(conv2.get("vs_baseline").is_none(), "{conv2}");
    // Its comparison with the golden run does not need the baseline and is still there.
    assert!(conv2["sqnr_db"].is_number(), "{conv2}");
    assert!(
        conv2["error"]
            .as_str()
            .unwrap()
            .contains("baseline returned no such tensor"),
        "{conv2}"
    );
}

/// The CNN fixture as old exporters write models: IR version 3 (ONNX Runtime then refuses an
/// initializer no node reads) and nodes without names.
fn ir3_unnamed_twin(src: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    use npu_audit::data::model::pb::ModelProto;
    use prost::Message;
    let mut model = ModelProto::decode(std::fs::read(src).expect("read").as_slice()).expect("decode");
    model.ir_version = Some(3);
    for n in &mut model.graph.as_mut().expect("graph").node {
        n.name = None;
    }
    let path = dir.join("cnn_ir3_unnamed.onnx");
    std::fs::write(&path, model.encode_to_vec()).expect("write");
    path
}

#[test]
fn layers_run_alone_on_an_ir3_model_with_unnamed_nodes_as_on_its_modern_twin() {
    let dir = tempdir();
    let twin = ir3_unnamed_twin(&repo("fixtures/models/cnn_qdq_u8.onnx"), dir.path());
    // Several runs, so that each isolation model holds some layers and not others.
    let run_on = |m: &str| cnn_layer_audit(m, &["--tap-memory", "8K"]).0;
    let named = run_on(&cnn());
    let old = run_on(twin.to_str().unwrap());
    assert_eq!(old["layer_audit"]["problems"], serde_json::json!([]));
    assert!(
        old["layer_audit"]["tap_runs"].as_u64().unwrap() > 3,
        "{}",
        old["layer_audit"]
    );
    // Node names differ (the twin's are made up); tensors and every figure are the same.
    let figures = |report: &Value, id: &str| -> Vec<Value> {
        layers_of(report, id)
            .iter()
            .map(|l| {
                serde_json::json!([
                    l["tensor"],
                    l["sqnr_db"],
                    l["introduced_sqnr_db"],
                    l["introduced_max_abs"],
                    l["introduced_vs_baseline"]
                ])
            })
            .collect()
    };
    for id in ["cpu", "cpu:noopt"] {
        assert!(
            target(&old, id)["layer_summary"]["error"].is_null(),
            "{id}: {}",
            target(&old, id)["layer_summary"]
        );
        let got = figures(&old, id);
        assert_eq!(got.len(), 14, "{id}");
        // Every layer was measured alone.
        assert!(got.iter().all(|f| !f[2].is_null()), "{id}: {got:?}");
        assert_eq!(got, figures(&named, id), "{id}");
    }
}

#[test]
fn external_data_on_another_file_system_is_copied_once_per_audit_not_once_per_model() {
    use std::os::unix::fs::MetadataExt;
    let models = tempdir();
    let external = with_external_data(&repo("fixtures/models/cnn_qdq_u8.onnx"), models.path());
    // The audit's work directory on another file system than the model, so hard links to the
    // model's weight file fail: /dev/shm is a tmpfs on Linux.
    let work = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm (Linux tmpfs)");
    let device = |p: &std::path::Path| std::fs::metadata(p).expect("metadata").dev();
    assert_ne!(
        device(models.path()),
        device(work.path()),
        "/dev/shm must be another file system"
    );
    let out = bin()
        .env("TMPDIR", work.path())
        .args([
            "compare",
            external.to_str().unwrap(),
            "--reference",
            &cnn_fp32(),
            "-t",
            "cpu",
        ])
        .args([
            "--fingerprint",
            "off",
            "--layers",
            "all",
            "--tap-memory",
            "8K",
            "--keep-work",
        ])
        .args(["--out", "-"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Every rewritten model (sizing, each tap run, each isolation run) has the weights beside it,
    // and all of them are one file.
    let mut weights = Vec::new();
    let mut stack = vec![work.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "weights.bin") {
                weights.push(std::fs::metadata(&p).expect("metadata").ino());
            }
        }
    }
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let runs = report["layer_audit"]["tap_runs"].as_u64().expect("tap_runs");
    assert!(runs >= 3, "the tap budget should split the taps: {runs} run(s)");
    assert!(
        weights.len() as u64 > runs,
        "{} weight file(s) for {runs} runs",
        weights.len()
    );
    weights.sort_unstable();
    weights.dedup();
    assert_eq!(weights.len(), 1, "one copy of the weights, linked everywhere");
}

/// Exp of x up to 13 (exp(13) ≈ 442,413, past float16's 65,504), then Neg: on the QNN HTP the
/// float ops run in float16 and Exp's values are not held; on the CPU EP they are.
fn overflowing_float_model(dir: &Path) -> (String, String) {
    use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
    let model = dir.join("exp.onnx");
    chain_model(&model, &["Exp", "Neg"], &[1, 8]);
    let x = Tensor::new(
        vec![1, 8],
        TensorData::Float32(vec![1.0, 4.0, 8.0, 10.0, 11.0, 11.5, 12.0, 13.0]),
    )
    .unwrap();
    let inputs = dir.join("x.npz");
    write_npz(&inputs, &[("x".to_string(), &x)]).unwrap();
    (model.display().to_string(), inputs.display().to_string())
}

#[test]
fn a_layer_past_float16s_range_on_the_htp_is_named_the_overflow_before_any_ranking() {
    let dir = tempdir();
    let (model, inputs) = overflowing_float_model(dir.path());
    let args = [
        "--inputs",
        inputs.as_str(),
        "-t",
        "qnn:sm8650",
        "-t",
        "cpu",
        "--layers",
        "all",
    ];
    let mut json = vec![model.as_str()];
    json.extend_from_slice(&args);
    let (code, report, stderr) = compare_json(&json);
    assert_eq!(code, 0, "{stderr}");
    // The golden Exp's peak is float32's exp(13), computed here independently.
    let peak = 13f32.exp() as f64;
    let first = &target(&report, "qnn:sm8650")["layer_summary"]["first_overflow"];
    assert_eq!(first["node"], "Exp_t1", "{first}");
    let o = &first["overflow"];
    assert_eq!(o["float16"], true);
    assert!(
        (o["reference_peak"].as_f64().unwrap() - peak).abs() <= peak * 1e-6,
        "{o}"
    );
    // Not held: off by more than 1/64 of the peak (far beyond float16 rounding); the value
    // the HTP kept is at most float16's largest with its all-ones exponent as a number (131,008).
    let error = o["max_abs_error"].as_f64().unwrap();
    assert!(error > peak / 64.0 && error >= peak - 131_008.0 - 1.0, "{o}");
    // Neg only inherits it (its values are as wrong as its input's, it costs no SQNR of its
    // own): not named. The CPU EP holds float32 and names none.
    assert!(layer(&report, "qnn:sm8650", "Neg_y").get("overflow").is_none());
    assert!(target(&report, "cpu")["layer_summary"]["first_overflow"].is_null());
    assert!(layer(&report, "cpu", "Exp_t1").get("overflow").is_none());
    // The terminal names it first, with the peak as the renderer writes numbers.
    let mut text = vec!["compare", model.as_str()];
    text.extend_from_slice(&args);
    let out = run(&text);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .skip_while(|l| l.trim() != "qnn:sm8650")
        .nth(1)
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.trim_start().starts_with("first overflow (the cause before any SQNR ranking): #0 Exp_t1 (Exp) at t1: the reference reaches 4.424e5, past float16's 65,504"),
        "{line}"
    );
}
