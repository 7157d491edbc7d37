//! `fingerprint` and the fingerprint in `compare`, end to end with the real runtimes: the CPU EP
//! must classify as the ONNX specification says (QuantizeLinear rounds half to even, saturates),
//! the Floor control must come out as floor, and compare must carry fingerprints, determinism
//! and the reading of code differences.

use crate::common;

use common::{bin, cnn, cnn_fp32, compare_json, target};
use serde_json::Value;

fn fingerprint_json(args: &[&str]) -> Value {
    let out = bin()
        .arg("fingerprint")
        .args(args)
        .args(["--no-cache", "--format", "json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

fn probe<'a>(report: &'a Value, target: &str, probe: &str) -> &'a Value {
    report["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["target"] == target)
        .and_then(|t| {
            t["probes"]
                .as_array()
                .expect("probes")
                .iter()
                .find(|p| p["probe"] == probe)
        })
        .unwrap_or_else(|| panic!("no {probe} for {target}"))
}

#[test]
fn the_cpu_ep_rounds_half_to_even_saturates_and_floors_the_control() {
    let report = fingerprint_json(&["-t", "cpu", "-t", "cpu:noopt", "--repeat", "2"]);
    assert_eq!(report["repeat"], 2);
    for t in ["cpu", "cpu:noopt"] {
        for id in [
            "quantize_u8",
            "quantize_i8",
            "quantize_u16",
            "quantize_i16",
            "requantize_u8",
            "conv_u8",
            "conv_u16_i8w",
            "matmul_u8",
            "add_u8",
            "mul_u8",
            "average_pool_u8",
            "resize_u8",
        ] {
            let p = probe(&report, t, id);
            assert_eq!(p["verdict"], "half_even", "{t} {id}: {}", p["summary"]);
            let deciding = p["discriminating"].as_u64().expect("count");
            assert!(deciding > 0, "{t} {id} has deciding points");
            assert_eq!(p["agreeing"].as_u64(), Some(deciding));
            assert_eq!(p["repeats"], 2);
            assert_eq!(p["repeat_differences"], 0);
        }
        // 8-bit QuantizeLinear: quarters from -127 to 126.75 and ties ±2^-8 beside
        // -126.5..126.5: 1016 + 2·254 points (counted from the probe's construction).
        assert_eq!(probe(&report, t, "quantize_u8")["points"], 1016 + 2 * 254);
        assert_eq!(probe(&report, t, "requantize_u8")["points"], 3 * 256);
        assert_eq!(probe(&report, t, "saturation_u8")["verdict"], "saturate");
        assert_eq!(probe(&report, t, "saturation_i8")["verdict"], "saturate");
        assert_eq!(probe(&report, t, "floor_control")["verdict"], "floor");
        assert_eq!(probe(&report, t, "float_mul")["verdict"], "fp32");
        assert_eq!(probe(&report, t, "reduce_sum_f32")["verdict"], "fp32");
        assert_eq!(probe(&report, t, "sigmoid_u8")["verdict"], "exact");
    }
}

#[test]
fn qnn_htp_requantizes_half_up_leaves_input_quantization_to_the_cpu_and_computes_float_in_fp16() {
    let report = fingerprint_json(&[
        "-t",
        "qnn:sm8650",
        "--probe",
        "quantize_u8",
        "--probe",
        "requantize_u8",
        "--probe",
        "conv_u8",
        "--probe",
        "float_mul",
        "--repeat",
        "1",
    ]);
    let q = probe(&report, "qnn:sm8650", "quantize_u8");
    assert_eq!(
        q["verdict"], "cpu_fallback",
        "graph-input QuantizeLinear runs on the CPU EP: {q}"
    );
    let r = probe(&report, "qnn:sm8650", "requantize_u8");
    assert_eq!(r["verdict"], "half_up", "{}", r["summary"]);
    let w = r["tie_window"].as_f64().expect("window");
    assert!(w > 0.0 && w < 0.01, "values just beside ties round as ties: {w}");
    assert_eq!(probe(&report, "qnn:sm8650", "conv_u8")["verdict"], "half_up");
    assert_eq!(probe(&report, "qnn:sm8650", "float_mul")["verdict"], "fp16");
}

#[test]
fn an_unknown_probe_is_a_usage_error_naming_the_probes() {
    common::fails_with(
        &["fingerprint", "-t", "cpu", "--probe", "nope"],
        2,
        "matches no probe; probes: quantize_u8",
    );
    common::fails_with(&["fingerprint", "-t", "cpu", "--repeat", "0"], 2, "--repeat");
}

#[test]
fn compare_carries_fingerprints_determinism_and_reads_code_differences() {
    let (code, report, stderr) = compare_json(&[
        &cnn(),
        "--reference",
        &cnn_fp32(),
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650",
        "--repeat",
        "3",
    ]);
    assert_eq!(code, 0, "{stderr}");
    for id in ["cpu", "qnn:sm8650", "cpu:noopt"] {
        let t = target(&report, id);
        assert_eq!(t["determinism"]["repeats"], 3);
        assert_eq!(t["determinism"]["bit_identical"], true, "{id}");
    }
    assert_eq!(
        target(&report, "cpu")["fingerprint"]["verdicts"]["requantize_u8"],
        "half_even"
    );
    assert_eq!(
        target(&report, "qnn:sm8650")["fingerprint"]["verdicts"]["requantize_u8"],
        "half_up"
    );
    // Every element that differs between two quantized outputs differs by whole steps, so the
    // step histogram accounts for each differing element.
    let mut read = 0;
    for e in report["agreement"].as_array().expect("agreement") {
        let Some(c) = e.get("code_differences") else { continue };
        let steps =
            c["off_by_one"].as_u64().unwrap() + c["off_by_two"].as_u64().unwrap() + c["off_by_more"].as_u64().unwrap();
        assert_eq!(Some(steps), e["differing_elements"].as_u64(), "{e}");
        read += 1;
    }
    assert!(read > 0, "the fixture's outputs are quantized: steps are counted");
    let qnn = target(&report, "qnn:sm8650");
    let texts: Vec<&str> = qnn["drift_explanations"]
        .as_array()
        .expect("explanations")
        .iter()
        .map(|e| e["text"].as_str().unwrap_or_default())
        .collect();
    assert!(!texts.is_empty());
    assert!(
        texts
            .iter()
            .any(|t| t.contains("half-up rounding in requantization") || t.contains("requantization rounds half-up")),
        "{texts:?}"
    );
}

/// Rounds half to even, the way the test computes it (not the tool).
fn half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

/// A rounding change between two ONNX Runtime releases, found by fingerprinting every release:
/// the CPU EP's quantized Resize rounds down up to 1.26.0 and half to even from 1.27.0. Each tie
/// in the evidence is re-rounded here.
#[test]
fn the_cpu_eps_quantized_resize_changed_rounding_in_release_1_27_0() {
    let report = fingerprint_json(&["-t", "cpu@1.26.0", "-t", "cpu@1.27.0", "--probe", "resize_u8"]);
    for (id, verdict, rule) in [
        ("cpu@1.26.0", "floor", f64::floor as fn(f64) -> f64),
        ("cpu@1.27.0", "half_even", half_even),
    ] {
        let p = probe(&report, id, "resize_u8");
        assert_eq!(p["verdict"], verdict, "{id}: {p}");
        assert_eq!(p["discriminating"], p["agreeing"], "{id}");
        let ties: Vec<&Value> = p["evidence"]
            .as_array()
            .expect("evidence")
            .iter()
            .filter(|e| e["ideal"].as_f64().is_some_and(|x| x.fract() == 0.5))
            .collect();
        assert!(!ties.is_empty(), "{id}: no tie in the evidence");
        for e in ties {
            let ideal = e["ideal"].as_f64().expect("ideal");
            assert_eq!(e["observed"].as_f64(), Some(rule(ideal)), "{id}: {e}");
        }
    }
}
