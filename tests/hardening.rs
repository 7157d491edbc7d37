//! Regression tests for defects found by adversarial QA: each one names what went wrong before.

mod common;

use common::*;

#[test]
fn golden_force_never_replaces_the_current_directory_or_a_non_golden_directory() {
    let dir = tempdir();
    let keep = dir.path().join("precious");
    std::fs::create_dir(&keep).unwrap();
    std::fs::write(keep.join("keep.txt"), "keep").unwrap();
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    let out = bin()
        .args([
            "golden",
            "create",
            fp32.to_str().unwrap(),
            "--out",
            keep.to_str().unwrap(),
            "--force",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a golden run"));
    let out = bin()
        .current_dir(&keep)
        .args(["golden", "create", fp32.to_str().unwrap(), "--out", ".", "--force"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("current directory"));
    let out = bin()
        .current_dir(&keep)
        .args(["golden", "create", fp32.to_str().unwrap(), "--out", "..", "--force"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(keep.join("keep.txt")).unwrap(), "keep");
    // An earlier golden run is replaced, and only once the new one is complete.
    let g = dir.path().join("g");
    for _ in 0..2 {
        let out = run(&[
            "golden",
            "create",
            fp32.to_str().unwrap(),
            "--out",
            g.to_str().unwrap(),
            "--force",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(g.join("manifest.json").is_file());
}

#[test]
fn nan_where_the_golden_run_has_numbers_is_an_infinite_error_not_an_exact_match() {
    let dir = tempdir();
    let log = dir.path().join("log.onnx");
    let log_abs = dir.path().join("logabs.onnx");
    chain_model(&log, &["Log"], &[1, 10]);
    chain_model(&log_abs, &["Abs", "Log"], &[1, 10]);
    let (code, report, stderr) = compare_json(&[
        log.to_str().unwrap(),
        "--reference",
        log_abs.to_str().unwrap(),
        "-t",
        "cpu",
        "--no-baseline",
        "--gen",
        "uniform:-1,1",
        "--min-sqnr",
        "40",
    ]);
    assert_eq!(code, 1, "{stderr}");
    let o = output(&report, "cpu", "y");
    let nans = o["nan_count"].as_u64().unwrap();
    assert!(nans > 0);
    assert_eq!(o["nonfinite_mismatch"], nans);
    assert_eq!(o["sqnr_db"], "-inf");
    assert_eq!(o["max_abs"], "inf");
    assert_eq!(o["mean_abs"], "inf");
    assert_eq!(o["cosine"], "nan");
    assert!(o["max_ulp"].is_null());
    assert_eq!(report["gate"]["verdict"], "fail");
    assert_eq!(report["tolerances"][0]["min_sqnr_db"], "-inf");
}

#[test]
fn command_line_values_out_of_range_are_one_line_usage_errors() {
    fails_with(&["compare", &cnn(), "--timeout=1e30"], 2, "--timeout");
    fails_with(&["compare", &cnn(), "--timeout", "-1"], 2, "--timeout");
    fails_with(
        &["compare", &cnn(), "--max-abs", "-1"],
        2,
        "--max-abs must be a non-negative number",
    );
    fails_with(&["compare", &cnn(), "--samples", "-1"], 2, "--samples");
    fails_with(&["compare", &cnn(), "--threads", "100000"], 2, "--threads");
    fails_with(&["compare"], 2, "<MODEL>");
    fails_with(
        &["compare", &cnn(), "--format", "xml"],
        2,
        "[possible values: table, json, markdown]",
    );
    fails_with(
        &["compare", &cnn(), "--input-shape", "image:1000000000,10,10,10"],
        2,
        "--input-shape",
    );
    fails_with(
        &["compare", &cnn(), "--input-shape", "image:2,3,32,32"],
        2,
        "conflicts with the model's declared shape",
    );
    fails_with(&["compare", &cnn(), "--class-axis", "5"], 2, "axis 5 does not exist");
    fails_with(
        &["compare", &cnn(), "--class-axis", "nope=1"],
        2,
        "has no output 'nope'",
    );
    fails_with(
        &["compare", &cnn(), "-t", "qnn:sm8650,soc_model=99"],
        2,
        "set by the chipset",
    );
    fails_with(&["compare", &cnn(), "-t", "cpu,a=1,a=2"], 2, "given twice");
    fails_with(&["runtime", "path", "directml"], 2, "of no use on this machine");
}

#[test]
fn a_reference_of_another_shape_is_refused_not_reported_as_compared() {
    let dir = tempdir();
    let a = dir.path().join("a.onnx");
    let b = dir.path().join("b.onnx");
    chain_model(&a, &["Relu"], &[1, 10]);
    chain_model(&b, &["Relu"], &[2, 5]);
    // Same input name and type but another shape: the inputs do not fit the reference.
    fails_with(
        &[
            "compare",
            a.to_str().unwrap(),
            "--reference",
            b.to_str().unwrap(),
            "-t",
            "cpu",
        ],
        2,
        "must have shape [2,5]",
    );
    // Same inputs, an output of another shape ([10, 1] instead of [1, 10]).
    let t = dir.path().join("t.onnx");
    chain_model(&t, &["Transpose"], &[1, 10]);
    fails_with(
        &[
            "compare",
            a.to_str().unwrap(),
            "--reference",
            t.to_str().unwrap(),
            "-t",
            "cpu",
        ],
        2,
        "the reference does not compute this model's output",
    );
}

#[test]
fn conflicting_input_sources_are_refused() {
    let dir = tempdir();
    let g = dir.path().join("g");
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    assert!(
        run(&["golden", "create", fp32.to_str().unwrap(), "--out", g.to_str().unwrap()])
            .status
            .success()
    );
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap(), "--gen", "zeros"],
        2,
        "--golden supplies the inputs",
    );
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap(), "--samples", "3"],
        2,
        "--golden supplies the inputs",
    );
    fails_with(
        &[
            "compare",
            &cnn(),
            "--inputs",
            repo("fixtures/inputs/cnn_seed7.npz").to_str().unwrap(),
            "--gen",
            "zeros",
        ],
        2,
        "every input comes from a file",
    );
    fails_with(
        &[
            "compare",
            &cnn(),
            "--gen",
            "image=uniform:0.5,1.5",
            "--gen",
            "image=zeros",
        ],
        2,
        "twice",
    );
}

#[test]
fn the_golden_manifest_must_be_consistent_and_stay_inside_its_directory() {
    let dir = tempdir();
    let g = dir.path().join("g");
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    assert!(run(&[
        "golden",
        "create",
        fp32.to_str().unwrap(),
        "--out",
        g.to_str().unwrap(),
        "--samples",
        "2"
    ])
    .status
    .success());
    let manifest_path = g.join("manifest.json");
    let original = std::fs::read_to_string(&manifest_path).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&original).unwrap();
    m["samples"][1]["outputs"][0]["name"] = "other".into();
    std::fs::write(&manifest_path, serde_json::to_string(&m).unwrap()).unwrap();
    fails_with(&["compare", &cnn(), "--golden", g.to_str().unwrap()], 2, "inconsistent");
    let mut m: serde_json::Value = serde_json::from_str(&original).unwrap();
    m["samples"][0]["outputs"][0]["file"] = "../elsewhere.npy".into();
    std::fs::write(&manifest_path, serde_json::to_string(&m).unwrap()).unwrap();
    fails_with(
        &["compare", &cnn(), "--golden", g.to_str().unwrap()],
        2,
        "outside the golden directory",
    );
}

#[test]
fn a_reference_onnx_runtime_cannot_load_is_an_input_error() {
    let dir = tempdir();
    let model = dir.path().join("m.onnx");
    chain_model(&model, &["NoSuchOperator"], &[1, 4]);
    fails_with(
        &["compare", model.to_str().unwrap(), "-t", "cpu"],
        2,
        "cannot run the reference model",
    );
}

#[test]
fn outputs_are_saved_only_into_an_empty_directory() {
    let dir = tempdir();
    std::fs::write(dir.path().join("stale.npz"), "x").unwrap();
    fails_with(
        &[
            "compare",
            &cnn(),
            "-t",
            "cpu",
            "--save-outputs",
            dir.path().to_str().unwrap(),
        ],
        2,
        "is not empty",
    );
}

#[cfg(unix)]
#[test]
fn an_interrupted_audit_stops_its_workers_and_removes_its_work_directory() {
    let tmp = tempdir();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
        .env("TMPDIR", tmp.path())
        .env("NPU_AUDIT_FAULT_INJECT", "cpu=hang")
        .args(["compare", &cnn(), "-t", "cpu", "--no-baseline"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the hanging worker has its log in the work directory.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let work_dir_exists = || {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with("npu-audit-"))
    };
    while !work_dir_exists() {
        assert!(std::time::Instant::now() < deadline, "no work directory appeared");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill(2) on the child process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(!work_dir_exists(), "the work directory was left behind");
}

#[test]
fn an_npy_header_claiming_a_huge_shape_is_refused_before_any_allocation() {
    let dir = tempdir();
    let path = dir.path().join("huge.npy");
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000, 100), }";
    let pad = 64 - (10 + dict.len() + 1) % 64;
    let header = format!("{dict}{}\n", " ".repeat(pad));
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    std::fs::write(&path, bytes).unwrap();
    let arg = format!("image={}", path.display());
    fails_with(
        &["compare", &cnn(), "-t", "cpu", "--input", &arg],
        2,
        "has more than 2147483648 elements",
    );
}
