//! Helpers shared by the end-to-end tests: run the real binary, read its JSON report and saved
//! outputs, and recompute metrics with plain double-precision loops (independent of the tool's
//! blocked kernel).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use npu_audit::data::tensor::{read_npz, Tensor};
use serde_json::Value;

/// Path of a file in the repository.
pub fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The binary under test.
pub fn bin() -> Command {
    let mut c = Command::cargo_bin("npu-audit").expect("binary");
    c.env_remove("NPU_AUDIT_FAULT_INJECT").env("NO_COLOR", "1");
    c
}

/// Runs the binary with `args`.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run npu-audit")
}

/// Runs `compare ... --format json` and returns (exit code, report, stderr).
pub fn compare_json(args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["compare"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let out = run(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON report ({e}); stderr:\n{stderr}"));
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// The report entry of a target.
pub fn target<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["targets"]
        .as_array()
        .and_then(|t| t.iter().find(|x| x["id"] == id))
        .unwrap_or_else(|| panic!("no target {id} in report"))
}

/// The metrics of one output of one target.
pub fn output<'a>(report: &'a Value, id: &str, name: &str) -> &'a Value {
    target(report, id)["outputs"]
        .as_array()
        .and_then(|o| o.iter().find(|x| x["name"] == name))
        .unwrap_or_else(|| panic!("no output {name} for {id}"))
}

/// A JSON dB figure as the report tables print it: two decimals, or `inf`/`-inf`.
pub fn db_text(v: &Value) -> String {
    let x = num(v);
    if x.is_finite() {
        format!("{x:.2}")
    } else if x > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// A JSON number, or the strings "inf"/"-inf"/"nan".
pub fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().expect("f64"),
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        Value::String(s) if s == "nan" => f64::NAN,
        other => panic!("not a number: {other}"),
    }
}

/// Reads one array of an .npz archive.
pub fn npz_array(path: &Path, name: &str) -> Tensor {
    read_npz(path)
        .expect("read npz")
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("no array {name} in {}", path.display()))
}

/// All values of a tensor as doubles.
pub fn values(t: &Tensor) -> Vec<f64> {
    (0..t.len()).map(|i| t.data.get_f64(i)).collect()
}

/// Straightforward metrics of `o` against `r` (finite inputs): max_abs, mean_abs, rmse, cosine,
/// sqnr_db.
pub struct Plain {
    pub max_abs: f64,
    pub mean_abs: f64,
    pub rmse: f64,
    pub cosine: f64,
    pub sqnr_db: f64,
}

pub fn plain_metrics(o: &[f64], r: &[f64]) -> Plain {
    assert_eq!(o.len(), r.len());
    let n = o.len() as f64;
    let mut max_abs: f64 = 0.0;
    let (mut sa, mut se, mut sr, mut so, mut sd) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (a, b) in o.iter().zip(r) {
        let d = a - b;
        max_abs = max_abs.max(d.abs());
        sa += d.abs();
        se += d * d;
        sr += b * b;
        so += a * a;
        sd += a * b;
    }
    Plain {
        max_abs,
        mean_abs: sa / n,
        rmse: (se / n).sqrt(),
        cosine: sd / (so.sqrt() * sr.sqrt()),
        sqnr_db: if se == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (sr / se).log10()
        },
    }
}

/// Asserts two doubles agree to a relative tolerance (infinities must be equal).
pub fn assert_close(what: &str, got: f64, want: f64, rel: f64) {
    if want.is_infinite() || got.is_infinite() {
        assert_eq!(got, want, "{what}");
        return;
    }
    let tol = rel * want.abs().max(1e-30);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} (tolerance {tol})"
    );
}

/// The u8/u8 QDQ CNN fixture.
pub fn cnn() -> String {
    repo("fixtures/models/cnn_qdq_u8.onnx").display().to_string()
}

/// The CNN fixture's fp32 model.
pub fn cnn_fp32() -> String {
    repo("fixtures/models/cnn_fp32.onnx").display().to_string()
}

/// `compare --layers all` of `model` (the CNN fixture or a twin of it) against the CNN's fp32
/// model on `cpu`, seed 4, fingerprint off, plus `extra`; the audit must succeed. Returns the
/// JSON report and stderr.
pub fn cnn_layer_audit(model: &str, extra: &[&str]) -> (Value, String) {
    let reference = cnn_fp32();
    let mut args = vec![
        model,
        "--reference",
        reference.as_str(),
        "-t",
        "cpu",
        "--seed",
        "4",
        "--layers",
        "all",
        "--fingerprint",
        "off",
    ];
    args.extend_from_slice(extra);
    let (code, report, stderr) = compare_json(&args);
    assert_eq!(code, 0, "{stderr}");
    (report, stderr)
}

/// Asserts that the binary fails with `code`, one line on stderr that starts with
/// `npu-audit: error: ` and contains `needle`.
pub fn fails_with(args: &[&str], code: i32, needle: &str) {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert_eq!(
        stderr.lines().filter(|l| !l.trim().is_empty()).count(),
        1,
        "{args:?}: {stderr}"
    );
    assert!(stderr.starts_with("npu-audit: error: "), "{stderr}");
    assert!(stderr.contains(needle), "{args:?}: expected '{needle}' in {stderr}");
}

/// A run's file in an eval's records directory (`suffix`: `jsonl`, `stopped.json`,
/// `decided.json`), named as docs/eval.md says: the id made a file name, then the first 12 hex
/// digits of the id's SHA-256.
pub fn records_file(dir: &std::path::Path, run: &str, suffix: &str) -> std::path::PathBuf {
    let digest = npu_audit::foundation::hash::sha256_hex(run.as_bytes());
    dir.join(format!("{}-{}.{suffix}", file_name_of(run), &digest[..12]))
}

/// The file or directory name the tool gives a run id (`--save-outputs`, `--node-data`):
/// characters other than letters, digits, `-` and `.` become `_`.
pub fn file_name_of(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A target that fails on every host the same way: QNN plugin 2.3.0 on ONNX Runtime core 1.31.1,
/// which it predates (session creation refuses it: "OrtEp has invalid ort_version_supported=0").
/// Tests that need a real runtime refusal use it: whether OpenVINO refuses a model depends on the
/// host's instruction set (the u8 CNN runs on AVX2-only hosts and is refused with AVX-512 VNNI).
pub const REFUSED_TARGET: &str = "qnn:sm8650@2.3.0+ort1.31.1";

/// The `--allow-failure` pattern of [`REFUSED_TARGET`].
pub const REFUSED_PATTERN: &str = "qnn:sm8650@2.3.0*";

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// A graph input or output declaration: ONNX element type code and a fixed shape.
pub fn tensor_value_info(name: &str, elem_type: i32, shape: &[usize]) -> npu_audit::data::model::pb::ValueInfoProto {
    use npu_audit::data::model::pb::{
        tensor_shape_proto::{dimension::Value as DimValue, Dimension},
        type_proto, TensorShapeProto, TypeProto, ValueInfoProto,
    };
    let dim = shape
        .iter()
        .map(|&d| Dimension {
            value: Some(DimValue::DimValue(d as i64)),
            denotation: None,
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem_type),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

/// A node `op(input) -> output` named after its output.
pub fn node(op: &str, input: &str, output: &str) -> npu_audit::data::model::pb::NodeProto {
    npu_audit::data::model::pb::NodeProto {
        input: vec![input.into()],
        output: vec![output.into()],
        name: Some(format!("{op}_{output}")),
        op_type: Some(op.into()),
        ..Default::default()
    }
}

/// An opset-17 model of `nodes` with graph `inputs` and `outputs`, written to `path`.
pub fn write_model(
    path: &Path,
    nodes: Vec<npu_audit::data::model::pb::NodeProto>,
    inputs: Vec<npu_audit::data::model::pb::ValueInfoProto>,
    outputs: Vec<npu_audit::data::model::pb::ValueInfoProto>,
) {
    use npu_audit::data::model::pb::{GraphProto, ModelProto, OperatorSetIdProto};
    use prost::Message;
    let model = ModelProto {
        ir_version: Some(9),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: Some("test".into()),
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    };
    std::fs::write(path, model.encode_to_vec()).unwrap();
}

/// A float32 model `y = OPS(x)` over `x` of shape `shape` (ops applied in order, each with one
/// input), written to `path`.
pub fn chain_model(path: &Path, ops: &[&str], shape: &[usize]) {
    let names: Vec<String> = (0..=ops.len())
        .map(|i| match i {
            0 => "x".into(),
            i if i == ops.len() => "y".into(),
            i => format!("t{i}"),
        })
        .collect();
    let nodes = ops
        .iter()
        .enumerate()
        .map(|(i, op)| node(op, &names[i], &names[i + 1]))
        .collect();
    let info = |name: &str| tensor_value_info(name, 1, shape);
    write_model(path, nodes, vec![info("x")], vec![info("y")]);
}

/// Spawns `compare` on the CNN fixture with its cpu worker hanging, work directories in `tmp`.
pub fn spawn_hanging_audit(tmp: &Path) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
        .env("TMPDIR", tmp)
        .env("NPU_AUDIT_FAULT_INJECT", "cpu=hang")
        .args(["compare", &cnn(), "-t", "cpu", "--no-baseline"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The work directories of audits in `tmp`.
pub fn work_dirs(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("npu-audit-"))
        .collect()
}

/// Moves every raw initializer of a model into `weights.bin` beside it (ONNX external data).
pub fn with_external_data(src: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    use npu_audit::data::model::pb::{ModelProto, StringStringEntryProto};
    use prost::Message;
    let mut model = ModelProto::decode(std::fs::read(src).unwrap().as_slice()).unwrap();
    let mut blob: Vec<u8> = Vec::new();
    for t in model.graph.as_mut().unwrap().initializer.iter_mut() {
        let Some(raw) = t.raw_data.take().filter(|r| !r.is_empty()) else {
            continue;
        };
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        t.external_data = vec![
            entry("location", "weights.bin".into()),
            entry("offset", blob.len().to_string()),
            entry("length", raw.len().to_string()),
        ];
        t.data_location = Some(1);
        blob.extend_from_slice(&raw);
        while !blob.len().is_multiple_of(64) {
            blob.push(0);
        }
    }
    assert!(!blob.is_empty());
    std::fs::write(dir.join("weights.bin"), blob).unwrap();
    let path = dir.join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

/// Parses JUnit XML with Python's ElementTree (expat, a conforming XML parser): per suite its
/// counts and cases. The tool itself needs Python 3, so the test does too.
pub fn parse_junit(xml: &str) -> Value {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    const SCRIPT: &str = r#"
import json, sys, xml.etree.ElementTree as ET
root = ET.fromstring(sys.stdin.buffer.read())
assert root.tag == "testsuites", root.tag
out = {"name": root.get("name"), "tests": int(root.get("tests")), "failures": int(root.get("failures")),
       "errors": int(root.get("errors")), "skipped": int(root.get("skipped")), "suites": []}
for s in root.findall("testsuite"):
    cases = []
    for c in s.findall("testcase"):
        f = c.find("failure")
        k = c.find("skipped")
        cases.append({"name": c.get("name"), "classname": c.get("classname"), "time": c.get("time"),
                      "outcome": "failure" if f is not None else "skipped" if k is not None else "pass",
                      "message": f.get("message") if f is not None else (k.get("message") if k is not None else None),
                      "text": f.text if f is not None else None})
    out["suites"].append({"name": s.get("name"), "tests": int(s.get("tests")),
                          "failures": int(s.get("failures")), "skipped": int(s.get("skipped")),
                          "time": float(s.get("time")), "cases": cases})
print(json.dumps(out))
"#;
    let python = std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = Command::new(python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("Python 3 runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(xml.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(
        out.status.success(),
        "the JUnit file is not well-formed XML: {}\n{xml}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// `v` without the keys named (anywhere in it): what differs between two runs of one audit
/// (timings, log paths) removed before comparing them.
pub fn strip_keys(v: &Value, keys: &[&str]) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !keys.contains(&k.as_str()))
                .map(|(k, x)| (k.clone(), strip_keys(x, keys)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|x| strip_keys(x, keys)).collect()),
        other => other.clone(),
    }
}

/// The browser to use: `NPU_AUDIT_CHROMIUM`, else Debian's `/usr/bin/chromium` (which
/// `scripts/test` installs when missing). A missing browser fails the test.
pub fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("NPU_AUDIT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        path.is_file(),
        "headless Chromium not found at {}: run the tests with scripts/test (it installs Debian's chromium), \
         or set NPU_AUDIT_CHROMIUM to a Chromium binary",
        path.display()
    );
    path
}

/// Runs headless Chromium on `page` with `extra` flags (own profile directory, 120 s limit) and
/// returns its stdout.
pub fn headless(browser: &Path, page: &Path, extra: &[String]) -> String {
    headless_url(
        browser,
        &format!("file://{}", page.display()),
        &page.with_extension("stdout"),
        extra,
    )
}

/// [`headless`] on a URL (a page with a fragment), its stdout kept in `stdout_file`.
pub fn headless_url(browser: &Path, url: &str, stdout_file: &Path, extra: &[String]) -> String {
    let profile = tempdir();
    let mut child = std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(stdout_file).expect("stdout file"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", browser.display()));
    match wait_timeout::ChildExt::wait_timeout(&mut child, std::time::Duration::from_secs(120))
        .expect("wait for chromium")
    {
        Some(status) => assert!(status.success(), "{} exited with {status}", browser.display()),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not finish within 120 s", browser.display());
        }
    }
    std::fs::read_to_string(stdout_file).expect("chromium output")
}

/// A virtual environment's Python with exactly the packages pinned in `requirements` (relative
/// to the repository), made once under npu-audit's cache as `<name>-venv-<hash of the file>`
/// (made aside, then renamed, so concurrent test processes never see half of one).
pub fn venv_python(requirements: &str, name: &str) -> PathBuf {
    let reqs = repo(requirements);
    let hash = npu_audit::foundation::hash::sha256_file(&reqs).unwrap();
    // The tool's cache: NPU_AUDIT_CACHE as the binary reads it, else the platform default.
    let cache = std::env::var_os("NPU_AUDIT_CACHE")
        .filter(|v| !v.is_empty())
        .map_or_else(npu_audit::execution::runtime::provision::cache_root, PathBuf::from);
    let venv = cache.join(format!("{name}-venv-{}", &hash[..12]));
    let py = venv.join("bin/python");
    if !venv.join("complete").exists() {
        std::fs::create_dir_all(&cache).unwrap();
        let tmp = tempfile::tempdir_in(&cache).unwrap();
        let staging = tmp.path().join("venv");
        let host = std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into());
        run_ok(std::process::Command::new(host).args(["-m", "venv"]).arg(&staging));
        run_ok(
            std::process::Command::new(staging.join("bin/python"))
                .args(["-m", "pip", "install", "--quiet", "--only-binary", ":all:", "-r"])
                .arg(&reqs),
        );
        std::fs::write(staging.join("complete"), "").unwrap();
        // Another test process may have won the race; its venv is as good as ours.
        if std::fs::rename(&staging, &venv).is_err() {
            assert!(venv.join("complete").exists(), "cannot place {}", venv.display());
        }
    }
    py
}

/// Runs a command and fails the test with its stderr unless it succeeds.
pub fn run_ok(cmd: &mut std::process::Command) -> Output {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
