//! End to end on the fixtures: the real binary, real ONNX Runtime builds, and expectations
//! computed outside the tool (fixtures/make_fixtures.py: a NumPy evaluator, NumPy metrics, and the
//! onnxruntime Python package on the same inputs).

use crate::common;

use common::*;
use serde_json::Value;

/// (QDQ model, fp32 model, inputs) of the synthetic fixtures.
const PAIRS: &[(&str, &str, &str)] = &[
    ("cnn_qdq_u8", "cnn_fp32", "cnn_seed7"),
    ("cnn_qdq_a16w8", "cnn_fp32", "cnn_seed7"),
    ("transformer_qdq_u8", "transformer_fp32", "transformer_seed7"),
    ("transformer_qdq_a16w8", "transformer_fp32", "transformer_seed7"),
];

fn metrics_json() -> Value {
    serde_json::from_slice(&std::fs::read(repo("fixtures/expected/metrics.json")).unwrap()).unwrap()
}

fn expected_pair<'a>(m: &'a Value, target: &str) -> &'a Value {
    m["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["target"].as_str().unwrap().ends_with(&format!("{target}.onnx")))
        .unwrap_or_else(|| panic!("no expected metrics for {target}"))
}

/// Asserts every metric of the report equals NumPy's.
fn assert_metrics_equal(what: &str, got: &Value, want: &Value) {
    for key in [
        "elements",
        "bit_identical",
        "nan_count",
        "inf_count",
        "nonfinite_mismatch",
        "max_ulp",
    ] {
        assert_eq!(got[key], want[key], "{what} {key}");
    }
    // max_abs is a single difference of two float32 values, exact in double.
    assert_eq!(num(&got["max_abs"]), num(&want["max_abs"]), "{what} max_abs");
    // Sums: NumPy adds in plain double order, the tool in blocks; both in double.
    for key in ["mean_abs", "rmse", "cosine", "sqnr_db"] {
        assert_close(&format!("{what} {key}"), num(&got[key]), num(&want[key]), 1e-9);
    }
    for key in ["top1_agreement", "top5_agreement"] {
        assert_eq!(got[key], want[key], "{what} {key}");
    }
}

fn bits(t: &npu_audit::data::tensor::Tensor) -> Vec<u8> {
    t.data.to_le_bytes()
}

#[test]
fn cpu_noopt_reproduces_numpy_and_python_onnxruntime_on_every_synthetic_fixture() {
    let expected = metrics_json();
    for (qdq, fp32, inputs) in PAIRS {
        let dir = tempdir();
        let save = dir.path().join("outputs");
        let (code, report, stderr) = compare_json(&[
            repo(&format!("fixtures/models/{qdq}.onnx")).to_str().unwrap(),
            "--reference",
            repo(&format!("fixtures/models/{fp32}.onnx")).to_str().unwrap(),
            "--inputs",
            repo(&format!("fixtures/inputs/{inputs}.npz")).to_str().unwrap(),
            "-t",
            "cpu:noopt",
            "-t",
            "cpu",
            "--save-outputs",
            save.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{qdq}: {stderr}");
        assert_eq!(report["reference"]["kind"], "model");
        assert_eq!(target(&report, "cpu:noopt")["status"], "ok");
        assert_eq!(target(&report, "cpu:noopt")["runtime"]["version"], "1.31.1");
        let pair = expected_pair(&expected, qdq);
        let steps = expected["numpy_vs_ort"][qdq].clone();
        for (name, want) in pair["outputs"].as_object().unwrap() {
            // The golden run is the Python package's run, bit for bit (same library, same
            // settings, one thread), and within float32 summation noise of the NumPy evaluator.
            let golden = npz_array(&save.join("golden/s0.npz"), name);
            let ort_fp32 = npz_array(&repo(&format!("fixtures/expected/{fp32}__ort_noopt.npz")), name);
            assert_eq!(
                bits(&golden),
                bits(&ort_fp32),
                "{fp32} {name}: golden differs from onnxruntime-python"
            );
            let numpy_fp32 = npz_array(&repo(&format!("fixtures/expected/{fp32}__numpy.npz")), name);
            let p = plain_metrics(&values(&golden), &values(&numpy_fp32));
            // A float32 dot product of K terms rounds at most ~K·2^-24 relative; the largest K here
            // is 16·9 = 144 (Conv 3x3 over 16 channels), so 1e-5 absolute on values of order 1-10.
            assert!(
                p.max_abs <= 1e-5,
                "{fp32} {name}: golden vs NumPy max abs {}",
                p.max_abs
            );

            let noopt = npz_array(&save.join("cpu_noopt/s0.npz"), name);
            let ort_qdq = npz_array(&repo(&format!("fixtures/expected/{qdq}__ort_noopt.npz")), name);
            assert_eq!(
                bits(&noopt),
                bits(&ort_qdq),
                "{qdq} {name}: cpu:noopt differs from onnxruntime-python"
            );
            // Against NumPy's own QDQ evaluation: every output is DequantizeLinear of a code, so
            // differences come in whole steps. A last-bit float32 difference upstream can move
            // a value across a rounding point, one step, and such a step can be amplified by
            // the layers after it; the fixtures' worst case is 4 steps (cnn a16w8 probs).
            let numpy_qdq = npz_array(&repo(&format!("fixtures/expected/{qdq}__numpy.npz")), name);
            // Dequantized values are float32 products (q - zp)·scale, exact to 2^-24 relative, so
            // with codes up to 65535 a "whole step" can read as up to 1.004 steps: allow 1%.
            let step = num(&steps[name]["output_dq_scale"]);
            let p = plain_metrics(&values(&noopt), &values(&numpy_qdq));
            assert!(
                p.max_abs <= 4.01 * step,
                "{qdq} {name}: {} steps from NumPy",
                p.max_abs / step
            );
            // In bulk the two agree: on average less than one step apart.
            assert!(
                p.mean_abs <= step,
                "{qdq} {name}: mean {} steps from NumPy",
                p.mean_abs / step
            );

            // The report's figures are NumPy's figures.
            assert_metrics_equal(&format!("{qdq} {name}"), output(&report, "cpu:noopt", name), want);
        }
    }
}

#[test]
fn real_model_from_pypi_matches_numpy_metrics_and_runs_on_qnn() {
    let expected = metrics_json();
    let (code, report, stderr) = compare_json(&[
        repo("fixtures/real/ppocr_cls_qdq_u8.onnx").to_str().unwrap(),
        "--reference",
        repo("fixtures/real/ppocr_cls_fp32.onnx").to_str().unwrap(),
        "--inputs",
        repo("fixtures/inputs/ppocr_seed3.npz").to_str().unwrap(),
        "--input-shape",
        "x:1,3,48,192",
        "-t",
        "cpu:noopt",
        "-t",
        "qnn:sm8650",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let pair = expected_pair(&expected, "ppocr_cls_qdq_u8");
    for (name, want) in pair["outputs"].as_object().unwrap() {
        assert_metrics_equal(&format!("ppocr {name}"), output(&report, "cpu:noopt", name), want);
        // Two classes: top-1 applies, top-5 does not.
        assert!(output(&report, "qnn:sm8650", name)["top1_agreement"].is_number());
        assert!(output(&report, "qnn:sm8650", name)["top5_agreement"].is_null());
    }
    let qnn = target(&report, "qnn:sm8650");
    assert_eq!(qnn["status"], "ok");
    assert!(qnn["placement"]["target_ep_nodes"].as_u64().unwrap() > 0);
    assert!(report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("pinned")));
}

#[test]
fn two_qnn_chipsets_metrics_agreement_and_baseline_match_a_recomputation() {
    let dir = tempdir();
    let save = dir.path().join("out");
    let (code, report, stderr) = compare_json(&[
        repo("fixtures/models/cnn_qdq_u8.onnx").to_str().unwrap(),
        "--reference",
        repo("fixtures/models/cnn_fp32.onnx").to_str().unwrap(),
        "--gen",
        "uniform:-1,1",
        "--seed",
        "11",
        "--samples",
        "3",
        "-t",
        "qnn:sm8650",
        "-t",
        "qnn:8 Elite Gen 5",
        "--save-outputs",
        save.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["baseline"], "cpu:noopt");
    let ids = ["qnn:sm8650", "qnn:sm8850", "cpu:noopt"];
    for id in ids {
        let t = target(&report, id);
        assert_eq!(t["status"], "ok", "{id}: {}", t["error"]);
    }
    for id in ["qnn:sm8650", "qnn:sm8850"] {
        let t = target(&report, id);
        assert_eq!(t["runtime"]["plugin"]["package"], "onnxruntime-qnn");
        assert_eq!(t["runtime"]["plugin"]["version"], "2.7.0");
        assert_eq!(t["ep"], "QNNExecutionProvider");
    }
    assert_eq!(target(&report, "qnn:sm8850")["chipset"]["soc_model"], 87);
    assert_eq!(target(&report, "qnn:sm8850")["chipset"]["htp_arch"], 81);

    let load = |id: &str, name: &str| -> Vec<f64> {
        (0..3)
            .flat_map(|k| values(&npz_array(&save.join(format!("{id}/s{k}.npz")), name)))
            .collect()
    };
    for name in ["logits", "probs"] {
        let golden = load("golden", name);
        let base = plain_metrics(&load("cpu_noopt", name), &golden);
        for id in ["qnn:sm8650", "qnn:sm8850"] {
            let o = load(&id.replace(':', "_"), name);
            let p = plain_metrics(&o, &golden);
            let got = output(&report, id, name);
            assert_eq!(got["elements"], 30);
            assert_eq!(num(&got["max_abs"]), p.max_abs, "{id} {name}");
            assert_close("mean_abs", num(&got["mean_abs"]), p.mean_abs, 1e-9);
            assert_close("rmse", num(&got["rmse"]), p.rmse, 1e-9);
            assert_close("cosine", num(&got["cosine"]), p.cosine, 1e-12);
            assert_close("sqnr", num(&got["sqnr_db"]), p.sqnr_db, 1e-9);
            // The three-run view: the baseline's error beside the target's, and the difference.
            assert_close("baseline sqnr", num(&got["baseline"]["sqnr_db"]), base.sqnr_db, 1e-9);
            assert_close(
                "excess",
                num(&got["baseline"]["excess_db"]),
                base.sqnr_db - p.sqnr_db,
                1e-9,
            );
        }
        let a = load("qnn_sm8650", name);
        let b = load("qnn_sm8850", name);
        let differing = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        let entry = report["agreement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["output"] == name && e["a"] == "qnn:sm8650" && e["b"] == "qnn:sm8850")
            .expect("agreement entry");
        assert_eq!(entry["differing_elements"], differing as u64);
        assert_eq!(entry["elements"], 30);
    }
    // The loosest passing gate is at most the worst target's figure.
    for tol in report["tolerances"].as_array().unwrap() {
        let name = tol["output"].as_str().unwrap();
        let worst = ["qnn:sm8650", "qnn:sm8850"]
            .iter()
            .map(|id| num(&output(&report, id, name)["sqnr_db"]))
            .fold(f64::INFINITY, f64::min);
        let gate = num(&tol["min_sqnr_db"]);
        assert!(gate <= worst && worst - gate < 0.01 + 1e-9, "{name}: {gate} vs {worst}");
    }
}

#[test]
fn openvino_is_a_separate_build_that_runs_the_transformer() {
    let (code, report, stderr) = compare_json(&[
        repo("fixtures/models/transformer_qdq_u8.onnx").to_str().unwrap(),
        "--reference",
        repo("fixtures/models/transformer_fp32.onnx").to_str().unwrap(),
        "-t",
        "openvino",
        "--no-baseline",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let t = target(&report, "openvino");
    assert_eq!(t["status"], "ok", "{}", t["error"]);
    assert_eq!(t["runtime"]["package"], "onnxruntime-openvino");
    assert_eq!(t["runtime"]["version"], "1.24.1");
    let sqnr = num(&output(&report, "openvino", "hidden")["sqnr_db"]);
    assert!(sqnr > 20.0 && sqnr < 60.0, "{sqnr}");
}

#[test]
fn the_derived_reference_is_what_numpy_and_onnxruntime_compute_for_the_same_rewrite() {
    let expected = metrics_json();
    let cases = [
        ("models", "cnn_qdq_u8", "cnn_seed7", None),
        ("models", "cnn_qdq_a16w8", "cnn_seed7", None),
        ("models", "transformer_qdq_u8", "transformer_seed7", None),
        ("models", "transformer_qdq_a16w8", "transformer_seed7", None),
        ("real", "ppocr_cls_qdq_u8", "ppocr_seed3", Some("x:1,3,48,192")),
    ];
    for (dir_name, qdq, inputs, shape) in cases {
        let dir = tempdir();
        let save = dir.path().join("out");
        let model = repo(&format!("fixtures/{dir_name}/{qdq}.onnx"));
        let input_file = repo(&format!("fixtures/inputs/{inputs}.npz"));
        let mut args = vec![
            model.to_str().unwrap().to_string(),
            "--inputs".into(),
            input_file.to_str().unwrap().into(),
            "-t".into(),
            "cpu:noopt".into(),
            "--save-outputs".into(),
            save.to_str().unwrap().into(),
        ];
        if let Some(s) = shape {
            args.extend(["--input-shape".to_string(), s.to_string()]);
        }
        let (code, report, stderr) = compare_json(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 0, "{qdq}: {stderr}");
        assert_eq!(report["reference"]["kind"], "derived");
        assert!(report["reference"]["description"]
            .as_str()
            .unwrap()
            .starts_with("DERIVED"));
        // The same pairs are replaced (ppocr: pairs on Constant-fed weight chains stay).
        assert_eq!(
            report["reference"]["removed_qdq_pairs"], expected["derived"][qdq]["pairs_replaced"],
            "{qdq}"
        );
        let pair = expected["derived_pairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["target"].as_str().unwrap().ends_with(&format!("{qdq}.onnx")))
            .unwrap();
        for (name, want) in pair["outputs"].as_object().unwrap() {
            let golden = npz_array(&save.join("golden/s0.npz"), name);
            let ort = npz_array(&repo(&format!("fixtures/expected/{qdq}__derived_ort_noopt.npz")), name);
            assert_eq!(
                bits(&golden),
                bits(&ort),
                "{qdq} {name}: derived golden differs from the script's rewrite"
            );
            let numpy = npz_array(&repo(&format!("fixtures/expected/{qdq}__derived_numpy.npz")), name);
            let p = plain_metrics(&values(&golden), &values(&numpy));
            assert!(p.max_abs <= 1e-5, "{qdq} {name}: derived golden vs NumPy {}", p.max_abs);
            assert_metrics_equal(
                &format!("{qdq} {name} vs derived"),
                output(&report, "cpu:noopt", name),
                want,
            );
        }
    }
}

#[test]
fn models_with_external_data_audit_like_their_inline_twins() {
    let dir = tempdir();
    let external = with_external_data(&repo("fixtures/models/cnn_qdq_u8.onnx"), dir.path());
    let args = |model: &str| -> Vec<String> {
        [model, "--seed", "2", "-t", "cpu", "-t", "qnn:sm8650"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let inline_model = repo("fixtures/models/cnn_qdq_u8.onnx");
    let (code, inline, stderr) = compare_json(
        &args(inline_model.to_str().unwrap())
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, 0, "{stderr}");
    // Run from another directory: the derived reference is written to the work directory and its
    // external data must stay reachable there.
    let out = bin()
        .current_dir(std::env::temp_dir())
        .args(["compare"])
        .args(args(external.to_str().unwrap()))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let ext: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ext["reference"]["kind"], "derived");
    for id in ["cpu", "qnn:sm8650", "cpu:noopt"] {
        for name in ["logits", "probs"] {
            assert_eq!(
                output(&ext, id, name)["sqnr_db"],
                output(&inline, id, name)["sqnr_db"],
                "{id} {name}"
            );
        }
    }
}
