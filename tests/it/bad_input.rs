//! Bad input: one clear line on stderr, the documented exit code, no panic, no partial output.

use crate::common;

use common::*;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};

/// Runs `compare` with `--out` in a fresh directory; asserts the exit code, a single error line,
/// and that no report file was left behind.
fn expect_error(args: &[&str], code: i32, needle: &str) {
    let dir = tempdir();
    let out_file = dir.path().join("report.json");
    let mut all: Vec<&str> = vec!["compare"];
    all.extend_from_slice(args);
    let out_arg = out_file.display().to_string();
    all.extend_from_slice(&["--out", &out_arg]);
    let out = run(&all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
    assert_eq!(lines.len(), 1, "{args:?}: more than one line on stderr: {stderr}");
    assert!(lines[0].starts_with("npu-audit: error: "), "{stderr}");
    assert!(lines[0].contains(needle), "{args:?}: expected '{needle}' in {stderr}");
    assert!(!out_file.exists(), "{args:?}: a report file was written");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "{args:?}: files left in the output directory"
    );
}

#[test]
fn missing_model_file() {
    expect_error(&["/nonexistent/model.onnx", "-t", "cpu"], 2, "does not exist");
}

#[test]
fn a_text_file_is_not_an_onnx_model() {
    let dir = tempdir();
    let p = dir.path().join("model.onnx");
    std::fs::write(&p, "this is not a model\n").unwrap();
    expect_error(&[p.to_str().unwrap(), "-t", "cpu"], 2, "is not an ONNX model");
}

#[test]
fn a_truncated_model() {
    let dir = tempdir();
    let bytes = std::fs::read(cnn()).unwrap();
    for cut in [bytes.len() / 2, bytes.len() - 7, 100] {
        let p = dir.path().join(format!("cut{cut}.onnx"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let out = run(&["compare", p.to_str().unwrap(), "-t", "cpu"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("truncated"), "{cut}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

fn npz_with(dir: &std::path::Path, name: &str, arrays: &[(&str, Tensor)]) -> String {
    let p = dir.join(name);
    let refs: Vec<(String, &Tensor)> = arrays.iter().map(|(n, t)| (n.to_string(), t)).collect();
    write_npz(&p, &refs).unwrap();
    p.display().to_string()
}

#[test]
fn inputs_with_wrong_names_shapes_dtypes_or_missing() {
    let dir = tempdir();
    let good = || Tensor::new(vec![1, 3, 32, 32], TensorData::Float32(vec![0.5; 3072])).unwrap();
    let wrong_name = npz_with(dir.path(), "a.npz", &[("img", good())]);
    expect_error(
        &[&cnn(), "-t", "cpu", "--inputs", &wrong_name],
        2,
        "array 'img': not an input of the model (inputs: image)",
    );
    let wrong_shape = npz_with(
        dir.path(),
        "b.npz",
        &[(
            "image",
            Tensor::new(vec![1, 3, 16, 16], TensorData::Float32(vec![0.0; 768])).unwrap(),
        )],
    );
    expect_error(
        &[&cnn(), "-t", "cpu", "--inputs", &wrong_shape],
        2,
        "must have shape [1,3,32,32]",
    );
    let wrong_dtype = npz_with(
        dir.path(),
        "c.npz",
        &[(
            "image",
            Tensor::new(vec![1, 3, 32, 32], TensorData::Float64(vec![0.0; 3072])).unwrap(),
        )],
    );
    expect_error(
        &[&cnn(), "-t", "cpu", "--inputs", &wrong_dtype],
        2,
        "must be float32 but the given array is float64",
    );
    let empty = npz_with(dir.path(), "d.npz", &[]);
    expect_error(
        &[&cnn(), "-t", "cpu", "--inputs", &empty],
        2,
        "input 'image' is not given",
    );
    let not_npz = dir.path().join("e.npz");
    std::fs::write(&not_npz, "plain text").unwrap();
    expect_error(
        &[&cnn(), "-t", "cpu", "--inputs", not_npz.to_str().unwrap()],
        2,
        "not a valid .npz archive",
    );
    expect_error(
        &[&cnn(), "-t", "cpu", "--input", "image=/nonexistent.npy"],
        2,
        "cannot open /nonexistent.npy",
    );
    expect_error(&[&cnn(), "-t", "cpu", "--gen", "gaussian"], 2, "generator 'gaussian'");
    expect_error(
        &[&cnn(), "-t", "cpu", "--input-shape", "nope:1,2"],
        2,
        "has no input 'nope'",
    );
}

/// An image input with dynamic height and width is not generated as a 1x1 image: refused with
/// the flag that pins it, and run once pinned.
#[test]
fn a_dynamic_image_is_not_generated_as_one_pixel() {
    let model = repo("fixtures/real/ppocr_cls_qdq_u8.onnx");
    let reference = repo("fixtures/real/ppocr_cls_fp32.onnx");
    let (m, r) = (model.to_str().unwrap(), reference.to_str().unwrap());
    expect_error(
        &[m, "--reference", r, "-t", "cpu", "--no-baseline"],
        2,
        "--input-shape x:1,3,H,W",
    );
    let out = bin()
        .args(["compare", m, "--reference", r, "-t", "cpu", "--no-baseline"])
        .args(["--input-shape", "x:1,3,48,192", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn unknown_targets_and_flags() {
    expect_error(&[&cnn(), "-t", "tpu"], 2, "unknown target 'tpu'");
    expect_error(&[&cnn(), "-t", "qnn:sm9999"], 2, "unknown Snapdragon chipset 'sm9999'");
    expect_error(&[&cnn(), "-t", "qnn"], 2, "needs a chipset");
    expect_error(
        &[&cnn(), "--runtime", "cpu=/nonexistent/lib.so", "-t", "cpu"],
        2,
        "no such file or directory",
    );
    let out = run(&["compare", &cnn(), "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));
}

#[test]
fn an_unwritable_output_path_fails_before_any_work() {
    let out = run(&["compare", &cnn(), "-t", "cpu", "--out", "/nonexistent/dir/report.json"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not exist") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let dir = tempdir();
    let out = run(&["compare", &cnn(), "-t", "cpu", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
}

#[test]
fn a_reference_model_with_other_inputs_is_rejected() {
    expect_error(
        &[
            &cnn(),
            "--reference",
            repo("fixtures/models/transformer_fp32.onnx").to_str().unwrap(),
            "-t",
            "cpu",
        ],
        2,
        "the reference model takes an input 'tokens'",
    );
}
