//! Every way a target can end, the audit completing regardless, and the exit codes and gates.

use crate::common;

use common::*;

#[test]
fn a_target_this_platform_cannot_run_is_unavailable_and_fails_the_audit_only_when_required() {
    let (code, report, stderr) = compare_json(&[&cnn(), "-t", "cpu", "-t", "dml", "--no-baseline"]);
    assert_eq!(code, 3, "{stderr}");
    let dml = target(&report, "dml");
    assert_eq!(dml["status"], "unavailable");
    assert_eq!(dml["error"], "DirectML needs Windows");
    assert_eq!(dml["required"], true);
    assert_eq!(target(&report, "cpu")["status"], "ok");
    assert!(
        stderr.contains("required target(s) did not run: dml (unavailable)"),
        "{stderr}"
    );

    let (code, report, _) = compare_json(&[
        &cnn(),
        "-t",
        "cpu",
        "-t",
        "dml",
        "--allow-failure",
        "dml",
        "--no-baseline",
    ]);
    assert_eq!(code, 0);
    assert_eq!(target(&report, "dml")["required"], false);
}

#[test]
fn crashed_and_hung_workers_are_reported_and_the_audit_completes() {
    let out = bin()
        .env("NPU_AUDIT_FAULT_INJECT", "cpu=crash;qnn:sm8650=hang")
        .args([
            "compare",
            &cnn(),
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "-t",
            "cpu:noopt",
            "--timeout",
            "3",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu = target(&report, "cpu");
    assert_eq!(cpu["status"], "crashed");
    assert!(cpu["error"].as_str().unwrap().contains("SIGABRT"), "{}", cpu["error"]);
    let qnn = target(&report, "qnn:sm8650");
    assert_eq!(qnn["status"], "timeout");
    assert!(
        qnn["error"].as_str().unwrap().contains("within 3 s"),
        "{}",
        qnn["error"]
    );
    assert_eq!(target(&report, "cpu:noopt")["status"], "ok");
    assert!(output(&report, "cpu:noopt", "probs")["sqnr_db"].is_number());
}

#[test]
fn a_chipset_that_refuses_the_real_model_fails_with_qnns_own_error() {
    // Observed on this QNN build: the HTP v68 (Snapdragon 888) compiler runs out of memory
    // finalizing the PP-OCR classifier, which newer chipsets accept.
    let (code, report, stderr) = compare_json(&[
        repo("fixtures/real/ppocr_cls_qdq_u8.onnx").to_str().unwrap(),
        "--input-shape",
        "x:1,3,48,192",
        "-t",
        "qnn:sm8350",
        "-t",
        "qnn:sm8650",
        "--allow-failure",
        "qnn:sm8350",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let old = target(&report, "qnn:sm8350");
    assert_eq!(old["status"], "failed");
    assert_eq!(old["failed_at"], "create_session");
    let err = old["error"].as_str().unwrap();
    assert!(
        err.contains("Failed to finalize QNN graph") && err.contains("1002"),
        "{err}"
    );
    assert_eq!(target(&report, "qnn:sm8650")["status"], "ok");
}

#[test]
fn an_ep_that_takes_no_node_is_a_failure_not_a_cpu_result_in_disguise() {
    let (code, report, _) = compare_json(&[
        &cnn(),
        "-t",
        "qnn:sm8650,backend_path=/nonexistent/libQnnHtp.so",
        "--no-baseline",
    ]);
    assert_eq!(code, 3);
    let t = &report["targets"][0];
    assert_eq!(t["status"], "failed");
    let err = t["error"].as_str().unwrap();
    assert!(
        err.contains("took none of the") && err.contains("/nonexistent/libQnnHtp.so"),
        "{err}"
    );
    assert_eq!(t["placement"]["target_ep_nodes"], 0);
    assert!(t["outputs"].as_array().unwrap().is_empty());
}

#[test]
fn gates_pass_and_fail_with_the_documented_exit_codes() {
    let base = [
        cnn(),
        "--reference".into(),
        cnn_fp32(),
        "-t".into(),
        "cpu".into(),
        "--no-baseline".into(),
    ];
    let args = |extra: &[&str]| -> Vec<String> {
        base.iter()
            .cloned()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let run_gate = |extra: &[&str]| {
        let a = args(extra);
        compare_json(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (code, report, _) = run_gate(&[]);
    assert_eq!(code, 0);
    assert_eq!(report["gate"]["verdict"], "none");
    let worst = num(&report["tolerances"][1]["min_sqnr_db"]);

    let (code, report, _) = run_gate(&["--min-sqnr", &format!("{worst}")]);
    assert_eq!(code, 0, "the printed loosest gate must pass");
    assert_eq!(report["gate"]["verdict"], "pass");

    let (code, report, _) = run_gate(&["--min-sqnr", "200"]);
    assert_eq!(code, 1);
    assert_eq!(report["gate"]["verdict"], "fail");
    // Rule 0 says the target ran; then one rule per output.
    assert_eq!(report["gate"]["rules"][0]["rule"], "ran");
    let rule = &report["gate"]["rules"][1];
    assert_eq!(rule["rule"], "min_sqnr_db");
    assert_eq!(rule["pass"], false);
    assert_eq!(num(&rule["limit"]), 200.0);

    let (code, _, _) = run_gate(&["--max-abs", "1e-9"]);
    assert_eq!(code, 1);
    let (code, _, _) = run_gate(&["--require-bit-exact"]);
    assert_eq!(code, 1);

    // The fp32 model against itself without graph rewrites is bit-exact.
    let (code, report, stderr) = compare_json(&[
        &cnn_fp32(),
        "--reference",
        &cnn_fp32(),
        "-t",
        "cpu:noopt",
        "--require-bit-exact",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(output(&report, "cpu:noopt", "logits")["sqnr_db"], "inf");
    assert_eq!(output(&report, "cpu:noopt", "logits")["bit_identical"], 10);
    assert_eq!(report["gate"]["verdict"], "pass");
}

#[test]
fn targets_lists_what_this_machine_can_and_cannot_run() {
    let out = run(&["targets", "--format", "json"]);
    assert!(out.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["target"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(row("dml")["available"], false);
    assert_eq!(row("dml")["reason"], "DirectML needs Windows");
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        assert_eq!(row("qnn:sm8650")["available"], true);
        assert_eq!(
            row("qnn:sm8650")["runtime"],
            "onnxruntime-qnn 2.7.0 on onnxruntime 1.31.1"
        );
        assert_eq!(row("openvino")["available"], true);
        assert_eq!(row("cpu:noopt")["runtime"], "onnxruntime 1.31.1");
    }
    let text = run(&["targets"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("qnn:sm8850"));
}

/// Every emulated Arm core is a row of `targets`, with its class of kernels, the chipsets it
/// stands for, and whether the emulation is here or what its first use costs (an empty cache:
/// not provisioned; nothing is fetched by asking).
#[test]
fn targets_lists_every_emulated_arm_core_with_its_class_and_first_use() {
    let cache = tempdir();
    let out = run(&[
        "targets",
        "--format",
        "json",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arm: Vec<&serde_json::Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["target"].as_str().unwrap().starts_with("cpu-arm64:"))
        .collect();
    let ids: Vec<&str> = arm.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "cpu-arm64:cortex-a76",
            "cpu-arm64:neoverse-n1",
            "cpu-arm64:cortex-a710-nosve",
            "cpu-arm64:cortex-a710",
            "cpu-arm64:neoverse-n2",
            "cpu-arm64:neoverse-v1"
        ]
    );
    let classes: Vec<&str> = arm.iter().map(|r| r["isa_class"].as_str().unwrap()).collect();
    assert_eq!(
        classes,
        [
            "dotprod",
            "dotprod",
            "i8mm",
            "i8mm+sve2-128",
            "i8mm+sve2-128",
            "i8mm+sve-256"
        ]
    );
    let nosve = arm[2];
    assert!(
        nosve["stands_for"].as_array().unwrap().contains(&"SM8650".into()),
        "{nosve}"
    );
    assert!(
        nosve["runtime"]
            .as_str()
            .unwrap_or_default()
            .ends_with("(-cpu cortex-a710,sve=off)")
            || nosve["available"] == false,
        "{nosve}"
    );
    assert_eq!(arm[0]["stands_for"], serde_json::json!(["SM8350"]));
    for r in &arm {
        if r["available"] == true {
            assert_eq!(r["provisioned"], false, "{r}");
            assert!(r["first_use"].as_str().unwrap().contains("216 MB on disk"), "{r}");
            assert!(
                r["runtime_state"]
                    .as_str()
                    .unwrap()
                    .contains(cache.path().to_str().unwrap()),
                "{r}"
            );
        } else {
            assert!(r["reason"].as_str().unwrap().contains("ARM64 emulation"), "{r}");
        }
    }
    // Asking provisioned nothing.
    let made: Vec<String> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!made.iter().any(|name| name.starts_with("arm64-")), "{made:?}");
}

#[test]
fn runtime_path_prints_an_existing_library() {
    let out = run(&["runtime", "path", "cpu"]);
    assert!(out.status.success());
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(std::path::Path::new(&path).is_file(), "{path}");
    assert!(path.contains("onnxruntime"), "{path}");
}

#[test]
fn without_python_the_audit_says_what_to_install() {
    let cache = tempdir();
    let out = bin()
        .env("NPU_AUDIT_CACHE", cache.path())
        .env("NPU_AUDIT_PYTHON", "/nonexistent/python3")
        .env_remove("NPU_AUDIT_RUNTIME_CPU")
        .args(["compare", &cnn(), "-t", "cpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no Python interpreter found; install Python 3 with pip"),
        "{stderr}"
    );
    assert!(stderr.contains("NPU_AUDIT_RUNTIME_CPU"), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.contains("error")).count(), 1, "{stderr}");
}

#[test]
fn a_runtime_given_by_flag_or_environment_wins_and_reports_its_own_version() {
    let path = String::from_utf8(run(&["runtime", "path", "cpu"]).stdout)
        .unwrap()
        .trim()
        .to_string();
    let dir = std::path::Path::new(&path).parent().unwrap().to_path_buf();
    let flag = format!("cpu={path}");
    let (code, report, stderr) = compare_json(&[&cnn(), "-t", "cpu", "--no-baseline", "--runtime", &flag]);
    assert_eq!(code, 0, "{stderr}");
    let rt = &target(&report, "cpu")["runtime"];
    assert_eq!(rt["source"], "--runtime flag");
    assert_eq!(rt["version"], "1.31.1", "the version the library states");
    assert_eq!(rt["library"], path.as_str());

    let out = bin()
        .env("NPU_AUDIT_RUNTIME_CPU", &dir)
        .args(["compare", &cnn(), "-t", "cpu", "--no-baseline", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(target(&report, "cpu")["runtime"]["source"], "environment variable");
}
