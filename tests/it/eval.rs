//! `npu-audit eval` end to end on real, publicly released models: the PP-OCR text-direction
//! classifier on text lines rendered with Pillow's bundled font (labels exact by construction:
//! a line turned half a turn is class 1), and the PP-OCRv4 recognizer (RapidOCR's package) on
//! rendered words, decoded with greedy CTC. Every accuracy, interval, discordant count, p-value,
//! bootstrap bound, per-sample SQNR and flip is recomputed by tests/data/eval_check.py (ONNX
//! Runtime's Python package, statsmodels, NumPy, PaddleOCR's own CTC post-processing), the HTML in
//! headless Chromium; bad sets, a crash mid-set and an interrupted run are checked here.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// The release of RapidOCR whose recognizer and CTC decoding the tests use, and its wheel's hash.
const RAPIDOCR: &str = "rapidocr_onnxruntime==1.4.4";
const RAPIDOCR_SHA256: &str = "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf";

fn python() -> &'static PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| venv_python("tests/data/eval-requirements.txt", "eval"))
}

fn real(name: &str) -> String {
    repo(&format!("fixtures/real/{name}")).display().to_string()
}

/// Runs tests/data/make_eval_set.py with `args`.
fn make_set(args: &[&str]) {
    run_ok(
        std::process::Command::new(python())
            .arg(repo("tests/data/make_eval_set.py"))
            .args(args),
    );
}

/// A set of rendered lines for the classifier, made once per test process.
fn cls_set(name: &str, count: usize, seed: u64, extra: &[&str]) -> PathBuf {
    let dir = tempdir().keep();
    let out = dir.join(name);
    let (count, seed) = (count.to_string(), seed.to_string());
    let mut args = vec!["cls", out.to_str().unwrap(), "--count", &count, "--seed", &seed];
    args.extend_from_slice(extra);
    make_set(&args);
    out
}

/// The clean set the classification tests share: 60 lines.
fn clean_set() -> &'static PathBuf {
    static SET: OnceLock<PathBuf> = OnceLock::new();
    SET.get_or_init(|| cls_set("clean", 60, 11, &[]))
}

/// RapidOCR's package, unpacked once under the tool's cache (its wheel checked by hash).
fn rapidocr() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cache = python()
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .unwrap()
            .to_path_buf();
        let dir = cache.join(format!("rapidocr-{}", &RAPIDOCR_SHA256[..12]));
        if !dir.join("complete").exists() {
            let staging = tempfile::tempdir_in(&cache).unwrap();
            run_ok(
                std::process::Command::new(python())
                    .args([
                        "-m",
                        "pip",
                        "download",
                        "--quiet",
                        "--no-deps",
                        "--only-binary",
                        ":all:",
                        RAPIDOCR,
                        "-d",
                    ])
                    .arg(staging.path()),
            );
            let wheel = std::fs::read_dir(staging.path())
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path();
            assert_eq!(
                npu_audit::foundation::hash::sha256_file(&wheel).unwrap(),
                RAPIDOCR_SHA256,
                "{}",
                wheel.display()
            );
            let unpacked = staging.path().join("unpacked");
            run_ok(
                std::process::Command::new(python())
                    .args([
                        "-c",
                        "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
                    ])
                    .arg(&wheel)
                    .arg(&unpacked),
            );
            std::fs::write(unpacked.join("complete"), "").unwrap();
            if std::fs::rename(&unpacked, &dir).is_err() {
                assert!(dir.join("complete").exists(), "cannot place {}", dir.display());
            }
        }
        dir
    })
    .clone()
}

/// An eval's JSON report, exit code and stderr; `dir` gets `r.json`, `r.records` (named: the
/// tests read the records), `r.html`, `r.md`.
fn eval(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let mut with_records = args.to_vec();
    let records = dir.join("r.records");
    with_records.extend(["--records", records.to_str().unwrap()]);
    eval_records_default(dir, &with_records, env)
}

/// [`eval`] with the records where `args` put them (without `--records`: the tool's cache).
fn eval_records_default(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, Value, String) {
    let json = dir.join("r.json");
    let mut cmd = bin();
    cmd.arg("eval")
        .args(args)
        .arg("--no-config")
        .arg("--out")
        .arg(&json)
        .arg("--html")
        .arg(dir.join("r.html"))
        .arg("--markdown")
        .arg(dir.join("r.md"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report: Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap_or_else(|e| panic!("no report ({e}): {stderr}")))
            .expect("JSON");
    let code = out.status.code().unwrap_or(-1);
    assert_eq!(Some(i64::from(code)), report["exit_code"].as_i64(), "{stderr}");
    (code, report, stderr)
}

/// Runs tests/data/eval_check.py on an eval written to `dir` and returns how many figures it
/// checked (it fails the test on the first mismatch).
fn check(dir: &Path, dataset: &Path, reference: &str, model: &str, task: &[&str]) -> usize {
    let out = run_ok(
        std::process::Command::new(python())
            .arg(repo("tests/data/eval_check.py"))
            .arg("--report")
            .arg(dir.join("r.json"))
            .arg("--records")
            .arg(dir.join("r.records"))
            .arg("--dataset")
            .arg(dataset)
            .args(["--reference", reference, "--model", model])
            .args(task),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("checked ").and_then(|r| r.strip_suffix(" figures")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("eval_check.py said:\n{text}"))
}

/// The classifier's eval on the clean set: u8 on the CPU EP (and the baseline) against fp32.
fn cls_eval() -> &'static (PathBuf, Value) {
    static RUN: OnceLock<(PathBuf, Value)> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempdir().keep();
        let set = clean_set().display().to_string();
        let (code, report, stderr) = eval(
            &dir,
            &[
                &real("ppocr_cls_qdq_u8.onnx"),
                "--reference",
                &real("ppocr_cls_fp32.onnx"),
                "--dataset",
                &set,
                "--task",
                "classify",
                "-t",
                "cpu",
                "--margin",
                "5",
                "--explain",
                "2",
                "--resamples",
                "4000",
                "--stat-seed",
                "7",
            ],
            &[],
        );
        assert_eq!(code, 0, "{stderr}");
        (dir, report)
    })
}

#[test]
fn classification_figures_match_an_independent_recomputation() {
    let (dir, report) = cls_eval();
    assert_eq!(report["dataset"]["samples"], 60);
    assert_eq!(report["statistics"]["seed"], 7);
    assert_eq!(report["statistics"]["resamples"], 4000);
    assert_eq!(report["task"]["settings"], "top-1", "top-5 of 2 classes is no figure");
    let checked = check(
        dir,
        clean_set(),
        &real("ppocr_cls_fp32.onnx"),
        &real("ppocr_cls_qdq_u8.onnx"),
        &["--task", "classify"],
    );
    // Reference and 2 runs: metrics, 3 comparisons, 60 per-sample SQNRs per rerun target.
    assert!(checked > 150, "{checked}");
    let cpu = target(report, "cpu");
    assert_eq!(cpu["status"], "ok");
    assert_eq!(cpu["samples_run"], 60);
    assert_eq!(cpu["intra_op_threads"], 1);
    assert_eq!(cpu["runtime"]["version"], "1.31.1", "{}", cpu["runtime"]);
    // The confusion matrix counts every sample once.
    let cells: u64 = cpu["confusion"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["count"].as_u64().unwrap())
        .sum();
    assert_eq!(cells, 60);
    // Every broken sample the explanation audits is one of the flips.
    let broken: Vec<&str> = cpu["flips"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "broken")
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    match cpu.get("explanation") {
        Some(x) => {
            let audited: Vec<&str> = x["samples"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            assert!(!audited.is_empty() && audited.len() <= 2, "{x}");
            assert!(audited.iter().all(|s| broken.contains(s)), "{audited:?} {broken:?}");
        }
        None => assert!(broken.is_empty(), "broken samples but no explanation: {cpu}"),
    }
    let md = std::fs::read_to_string(dir.join("r.md")).unwrap();
    assert!(md.contains("| cpu |") || md.contains("| `cpu` |"), "{md}");
}

#[test]
fn the_eval_page_draws_what_the_report_holds() {
    let (dir, report) = cls_eval();
    let dom = headless(&chromium(), &dir.join("r.html"), &["--dump-dom".to_string()]);
    let targets = report["targets"].as_array().unwrap();
    let mut want = std::collections::BTreeMap::new();
    want.insert("intervals".to_string(), 1 + targets.len());
    want.insert("drops".to_string(), targets.len());
    for t in targets {
        let bars: usize = t["sqnr_histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| usize::from(b["correct"].as_u64() > Some(0)) + usize::from(b["wrong"].as_u64() > Some(0)))
            .sum();
        want.insert(format!("sqnr-{}", t["id"].as_str().unwrap()), bars);
    }
    let body = regex::Regex::new(r"<body[^>]*>")
        .unwrap()
        .find(&dom)
        .expect("body")
        .as_str()
        .to_string();
    let n = want.len();
    assert!(body.contains(&format!("data-plots-rendered=\"{n} of {n}\"")), "{body}");
    let mut got = std::collections::BTreeMap::new();
    for tag in regex::Regex::new(r"<svg\b[^>]*>").unwrap().find_iter(&dom) {
        let tag = tag.as_str();
        let attr = |name: &str| {
            regex::Regex::new(&format!(r#" {name}="([^"]*)""#))
                .unwrap()
                .captures(tag)
                .map(|c| c[1].to_string())
        };
        let marks: usize = attr("data-marks").and_then(|m| m.parse().ok()).unwrap_or(0);
        got.insert(attr("data-plot").unwrap(), marks);
    }
    assert_eq!(got, want, "marks drawn per plot (left) against the report (right)");
    let flips: usize = targets.iter().map(|t| t["flips"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(dom.matches("class=\"flip\"").count(), flips);
}

#[test]
fn a_stacked_set_gives_the_figures_of_the_same_samples_as_files() {
    // The same seed draws the same lines: the stacked set's 20 are the directory's first 20.
    let stacked = cls_set("stacked.npz", 20, 11, &["--stacked"]);
    let run = |set: &Path, extra: &[&str]| {
        let dir = tempdir().keep();
        let set = set.display().to_string();
        let mut args = vec![
            real("ppocr_cls_qdq_u8.onnx"),
            "--reference".into(),
            real("ppocr_cls_fp32.onnx"),
            "--dataset".into(),
            set,
            "--task".into(),
            "classify".into(),
            "-t".into(),
            "cpu".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        eval(&dir, &args, &[]).1
    };
    let a = run(&stacked, &[]);
    let b = run(clean_set(), &["--limit", "20"]);
    assert_eq!(a["dataset"]["samples"], 20);
    assert_eq!(b["dataset"]["samples"], 20);
    assert!(
        a["dataset"]["labels"].as_str().unwrap().ends_with("member 'labels'"),
        "{}",
        a["dataset"]
    );
    assert_eq!(a["reference_metrics"], b["reference_metrics"]);
    for (x, y) in a["targets"]
        .as_array()
        .unwrap()
        .iter()
        .zip(b["targets"].as_array().unwrap())
    {
        assert_eq!(x["metrics"], y["metrics"]);
        assert_eq!(x["comparisons"], y["comparisons"]);
        assert_eq!(x["median_sqnr_db"], y["median_sqnr_db"]);
        // Ids differ (positions against file stems); what flipped does not.
        let kinds = |t: &Value| {
            t["flips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["kind"].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(x), kinds(y));
    }
}

#[test]
fn the_simulator_serves_the_set_as_compare_runs_one_sample() {
    let dir = tempdir().keep();
    let set = clean_set().display().to_string();
    let (code, report, stderr) = eval(
        &dir,
        &[
            &real("ppocr_cls_qdq_u8.onnx"),
            "--reference",
            &real("ppocr_cls_fp32.onnx"),
            "--dataset",
            &set,
            "--limit",
            "4",
            "--task",
            "classify",
            "-t",
            "qnn:sm8650",
            "--no-baseline",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let qnn = target(&report, "qnn:sm8650");
    assert_eq!(qnn["status"], "ok", "{qnn}");
    assert_eq!(qnn["samples_run"], 4);
    check(
        &dir,
        clean_set(),
        &real("ppocr_cls_fp32.onnx"),
        &real("ppocr_cls_qdq_u8.onnx"),
        &["--task", "classify", "--rerun", ""],
    );
    // The first sample's output SQNR is the one compare measures on that sample alone.
    let records = std::fs::read_to_string(records_file(&dir.join("r.records"), "qnn:sm8650", "jsonl")).unwrap();
    // The first line names the run; the records follow.
    let first: Value = serde_json::from_str(records.lines().nth(1).unwrap()).unwrap();
    let sample = clean_set().join(format!("{}.npz", first["record"]["id"].as_str().unwrap()));
    let (_, compared, _) = compare_json(&[
        &real("ppocr_cls_qdq_u8.onnx"),
        "--reference",
        &real("ppocr_cls_fp32.onnx"),
        "--inputs",
        sample.to_str().unwrap(),
        "-t",
        "qnn:sm8650",
        "--no-baseline",
        "--no-config",
    ]);
    let sqnr = num(&output(&compared, "qnn:sm8650", "save_infer_model/scale_0.tmp_1")["sqnr_db"]);
    assert_close(
        "qnn:sm8650 sample 0 SQNR",
        num(&first["record"]["sqnr_db"]),
        sqnr,
        1e-12,
    );
}

#[test]
fn ctc_decodes_as_paddleocr_does() {
    let work = tempdir().keep();
    let rapid = rapidocr();
    let fp32 = rapid.join("rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx");
    let vocab = work.join("vocab.txt");
    let (set, calib, u8_model) = (work.join("rec"), work.join("calib"), work.join("rec_u8.onnx"));
    let s = |p: &Path| p.display().to_string();
    make_set(&["vocab", &s(&fp32), &s(&vocab)]);
    make_set(&["rec", &s(&set), "--count", "24", "--seed", "3", "--vocab", &s(&vocab)]);
    make_set(&["rec", &s(&calib), "--count", "8", "--seed", "9", "--vocab", &s(&vocab)]);
    make_set(&["quantize", &s(&fp32), &s(&u8_model), "--calibrate", &s(&calib)]);
    let dir = work.join("eval");
    std::fs::create_dir(&dir).unwrap();
    let (code, report, stderr) = eval(
        &dir,
        &[
            &s(&u8_model),
            "--reference",
            &s(&fp32),
            "--dataset",
            &s(&set),
            "--task",
            "ctc",
            "--vocab",
            &s(&vocab),
            "-t",
            "cpu",
            "--margin",
            "2",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["task"]["primary"], "cer");
    let checked = check(
        &dir,
        &set,
        &s(&fp32),
        &s(&u8_model),
        &["--task", "ctc", "--vocab", &s(&vocab), "--rapidocr", &s(&rapid)],
    );
    assert!(checked > 80, "{checked}");
    // The fp32 recognizer reads rendered words well; the u8 one, calibrated on 8 lines, worse.
    let reference_cer = num(&report["reference_metrics"]["cer"]["value"]);
    let cpu_cer = num(&target(&report, "cpu")["metrics"]["cer"]["value"]);
    assert!(
        reference_cer < 0.1 && cpu_cer > reference_cer,
        "{reference_cer} {cpu_cer}"
    );
}

/// The arguments of a CPU-only eval of the classifier on `set`.
fn cpu_args(set: &Path) -> Vec<String> {
    vec![
        real("ppocr_cls_qdq_u8.onnx"),
        "--reference".into(),
        real("ppocr_cls_fp32.onnx"),
        "--dataset".into(),
        set.display().to_string(),
        "--task".into(),
        "classify".into(),
        "-t".into(),
        "cpu".into(),
        "--no-baseline".into(),
    ]
}

/// A copy of the first `n` samples of the clean set, with its labels, to damage.
fn copy_of_clean(n: usize) -> PathBuf {
    let dir = tempdir().keep().join("set");
    std::fs::create_dir(&dir).unwrap();
    let labels = std::fs::read_to_string(clean_set().join("labels.csv")).unwrap();
    let mut kept = String::from("id,label\n");
    for line in labels.lines().skip(1).take(n) {
        let id = line.split(',').next().unwrap();
        std::fs::copy(clean_set().join(format!("{id}.npz")), dir.join(format!("{id}.npz"))).unwrap();
        kept.push_str(line);
        kept.push('\n');
    }
    std::fs::write(dir.join("labels.csv"), kept).unwrap();
    dir
}

#[test]
fn bad_sets_fail_on_one_line_with_exit_2_and_write_nothing() {
    let write_npz = |path: &Path, name: &str, shape: &[usize]| {
        let t = npu_audit::data::tensor::Tensor::new(
            shape.to_vec(),
            npu_audit::data::tensor::TensorData::Float32(vec![0.0; shape.iter().product()]),
        )
        .unwrap();
        npu_audit::data::tensor::write_npz(path, &[(name.to_string(), &t)]).unwrap();
    };
    type Damage = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Damage, &str, Vec<&str>)> = vec![
        (
            "a sample without a label",
            Box::new(|d: &Path| {
                let l = std::fs::read_to_string(d.join("labels.csv")).unwrap();
                let kept: Vec<&str> = l.lines().filter(|x| !x.starts_with("line00002,")).collect();
                std::fs::write(d.join("labels.csv"), kept.join("\n")).unwrap();
            }),
            "sample line00002 has no label",
            vec![],
        ),
        (
            "a label without a sample",
            Box::new(|d: &Path| std::fs::remove_file(d.join("line00003.npz")).unwrap()),
            "a label for sample line00003, which the set does not have",
            vec![],
        ),
        (
            "a duplicate id",
            Box::new(|d: &Path| {
                let mut l = std::fs::read_to_string(d.join("labels.csv")).unwrap();
                l.push_str("line00001,0\n");
                std::fs::write(d.join("labels.csv"), l).unwrap();
            }),
            "sample line00001 is labelled twice",
            vec![],
        ),
        (
            "a label of the wrong type",
            Box::new(|d: &Path| {
                let l = std::fs::read_to_string(d.join("labels.csv")).unwrap();
                std::fs::write(d.join("labels.csv"), l.replacen("line00004,", "line00004,upside", 1)).unwrap();
            }),
            "sample line00004: label upside",
            vec![],
        ),
        (
            "a class outside the output's range",
            Box::new(|d: &Path| {
                let l = std::fs::read_to_string(d.join("labels.csv")).unwrap();
                let l: Vec<String> = l
                    .lines()
                    .map(|x| {
                        if x.starts_with("line00005,") {
                            "line00005,7".to_string()
                        } else {
                            x.to_string()
                        }
                    })
                    .collect();
                std::fs::write(d.join("labels.csv"), l.join("\n")).unwrap();
            }),
            "sample line00005: class 7 is outside the output's 2 classes",
            vec![],
        ),
        (
            "a directory entry inside a sample's archive",
            Box::new(|d: &Path| {
                // The sample's archive again, with a directory entry beside its array.
                let bytes = std::fs::read(d.join("line00001.npz")).unwrap();
                let mut old = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
                let file = std::fs::File::create(d.join("line00001.npz")).unwrap();
                let mut new = zip::ZipWriter::new(file);
                new.add_directory("extra/", zip::write::SimpleFileOptions::default())
                    .unwrap();
                for i in 0..old.len() {
                    new.raw_copy_file(old.by_index(i).unwrap()).unwrap();
                }
                new.finish().unwrap();
            }),
            "entry 'extra/' is a directory, not an array",
            vec![],
        ),
        (
            "a labels.jsonl id written as a position in a directory set",
            Box::new(|d: &Path| {
                let csv = std::fs::read_to_string(d.join("labels.csv")).unwrap();
                let lines: Vec<String> = csv
                    .lines()
                    .skip(1)
                    .enumerate()
                    .map(|(k, l)| {
                        let (id, label) = l.split_once(',').unwrap();
                        if k == 2 {
                            format!("{{\"id\": 2, \"label\": {label}}}")
                        } else {
                            format!("{{\"id\": \"{id}\", \"label\": {label}}}")
                        }
                    })
                    .collect();
                std::fs::remove_file(d.join("labels.csv")).unwrap();
                std::fs::write(d.join("labels.jsonl"), lines.join("\n") + "\n").unwrap();
            }),
            "sample line00002 has no label",
            vec![],
        ),
        (
            "an empty set",
            Box::new(|d: &Path| {
                for e in std::fs::read_dir(d).unwrap() {
                    std::fs::remove_file(e.unwrap().path()).unwrap();
                }
            }),
            "no sample (an empty set)",
            vec![],
        ),
        (
            "a sample of another shape than the model's",
            Box::new(move |d: &Path| write_npz(&d.join("line00006.npz"), "x", &[1, 1, 48, 192])),
            "sample line00006: array 'x' is float32 [1, 1, 48, 192]",
            vec![],
        ),
        (
            "a sample of another shape than the first",
            Box::new(move |d: &Path| write_npz(&d.join("line00006.npz"), "x", &[1, 3, 48, 160])),
            "sample line00006: array 'x' is [1, 3, 48, 160] where the first sample's is [1, 3, 48, 192]",
            vec![],
        ),
        (
            "a sample with an empty dimension",
            Box::new(move |d: &Path| write_npz(&d.join("line00000.npz"), "x", &[1, 3, 48, 0])),
            "sample line00000: array 'x' of shape [1, 3, 48, 0] holds no value",
            vec![],
        ),
        (
            "a sample without the model's input",
            Box::new(move |d: &Path| write_npz(&d.join("line00006.npz"), "image", &[1, 3, 48, 192])),
            "sample line00006: no array 'x'",
            vec![],
        ),
        (
            "an array that is not one of the model's inputs",
            Box::new(move |d: &Path| {
                let zeros = |shape: &[usize]| {
                    npu_audit::data::tensor::Tensor::new(
                        shape.to_vec(),
                        npu_audit::data::tensor::TensorData::Float32(vec![0.0; shape.iter().product()]),
                    )
                    .unwrap()
                };
                let (x, meta) = (zeros(&[1, 3, 48, 192]), zeros(&[1]));
                npu_audit::data::tensor::write_npz(
                    &d.join("line00006.npz"),
                    &[("x".to_string(), &x), ("meta".to_string(), &meta)],
                )
                .unwrap();
            }),
            "sample line00006: array 'meta' is not one of the model's inputs (x)",
            vec![],
        ),
        (
            "a sample whose data is cut short",
            Box::new(|d: &Path| {
                // A well-formed archive whose array holds fewer bytes than its header declares.
                let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 48, 192), }";
                let mut npy = b"\x93NUMPY\x01\x00".to_vec();
                let padded = format!("{header:<117}\n");
                npy.extend_from_slice(&(padded.len() as u16).to_le_bytes());
                npy.extend_from_slice(padded.as_bytes());
                npy.extend_from_slice(&[0u8; 1000]);
                let mut z = zip::ZipWriter::new(std::fs::File::create(d.join("line00006.npz")).unwrap());
                z.start_file("x.npy", zip::write::SimpleFileOptions::default()).unwrap();
                std::io::Write::write_all(&mut z, &npy).unwrap();
                z.finish().unwrap();
            }),
            "array 'x' holds 1000 bytes of data where its header (float32 [1, 3, 48, 192]) declares 110592",
            vec![],
        ),
        (
            "a sample damaged inside its archive",
            Box::new(|d: &Path| {
                let path = d.join("line00006.npz");
                let mut bytes = std::fs::read(&path).unwrap();
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x55;
                std::fs::write(&path, bytes).unwrap();
            }),
            "sample line00006: array 'x'",
            vec![],
        ),
        (
            "a directory named like a sample",
            Box::new(|d: &Path| std::fs::create_dir(d.join("zz.npz")).unwrap()),
            "zz.npz: not a regular file",
            vec![],
        ),
        (
            "a set without labels",
            Box::new(|d: &Path| std::fs::remove_file(d.join("labels.csv")).unwrap()),
            "no labels",
            vec![],
        ),
        (
            "a vocabulary that is not the model's",
            Box::new(|d: &Path| std::fs::write(d.join("../vocab.txt"), "a\nb\n").unwrap()),
            "--task: the vocabulary has 2 entries",
            vec!["--task", "ctc", "--vocab", "VOCAB"],
        ),
    ];
    for (what, damage, needle, extra) in cases {
        let set = copy_of_clean(8);
        damage(&set);
        let out_dir = set.parent().unwrap().join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let json = out_dir.join("r.json");
        let vocab = set.parent().unwrap().join("vocab.txt").display().to_string();
        let mut args = cpu_args(&set);
        if !extra.is_empty() {
            args.retain(|a| a != "classify" && a != "--task");
            args.extend(
                extra
                    .iter()
                    .map(|a| if *a == "VOCAB" { vocab.clone() } else { a.to_string() }),
            );
        }
        args.extend(["--out".to_string(), json.display().to_string()]);
        args.extend(["--html".to_string(), out_dir.join("r.html").display().to_string()]);
        let out = bin().arg("eval").args(&args).arg("--no-config").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(needle), "{what}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{what}: one line, not {stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().collect();
        assert!(left.is_empty(), "{what}: wrote {left:?}");
    }
}

/// Lines of a records file.
fn record_indices(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"record\""))
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["record"]["index"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// The tool's cache as the binary reads it (`NPU_AUDIT_CACHE`, else the platform's).
fn cache_root() -> PathBuf {
    std::env::var_os("NPU_AUDIT_CACHE")
        .filter(|v| !v.is_empty())
        .map_or_else(npu_audit::execution::runtime::provision::cache_root, PathBuf::from)
}

/// The records an eval of `set` keeps in the cache (`eval-records/<digest>/`, its `context.json`
/// naming the set), once there is one.
fn cached_records_of(set: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(cache_root().join("eval-records")).ok()?;
    entries.filter_map(Result::ok).map(|e| e.path()).find(|dir| {
        std::fs::read(dir.join("context.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|c| c["dataset"] == set.display().to_string())
    })
}

/// `eval --out FILE` keeps its records in the cache, not beside the report: killed, the same
/// command resumes there without counting a sample twice, and `runtime gc` removes the entry.
#[test]
fn an_interrupted_eval_resumes_without_counting_a_sample_twice() {
    let set = copy_of_clean(30);
    let work = set.parent().unwrap().to_path_buf();
    let (whole, cut) = (work.join("whole"), work.join("cut"));
    std::fs::create_dir(&whole).unwrap();
    std::fs::create_dir(&cut).unwrap();
    let args = cpu_args(&set);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, uninterrupted, _) = eval(&whole, &args, &[]);
    // The same eval with every CPU sample slowed down, killed once 8 samples are recorded.
    let mut child = KillOnDrop(
        std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
            .arg("eval")
            .args(&args)
            .arg("--no-config")
            .arg("--out")
            .arg(cut.join("r.json"))
            .env("NPU_AUDIT_FAULT_INJECT", "cpu=slow")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = std::time::Instant::now();
    let records = loop {
        assert!(start.elapsed().as_secs() < 120, "the slowed eval recorded nothing");
        std::thread::sleep(std::time::Duration::from_millis(20));
        match cached_records_of(&set) {
            Some(dir) if record_indices(&records_file(&dir, "cpu", "jsonl")).len() >= 8 => break dir,
            _ => {}
        }
    };
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(!cut.join("r.json").exists(), "a killed eval wrote its report");
    let before = record_indices(&records_file(&records, "cpu", "jsonl")).len();
    assert!((8..30).contains(&before), "{before}");
    let (code, resumed, stderr) = eval_records_default(&cut, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("resuming after"), "{stderr}");
    for run in ["reference", "cpu"] {
        assert_eq!(
            record_indices(&records_file(&records, run, "jsonl")),
            (0..30).collect::<Vec<u64>>(),
            "{run}"
        );
    }
    // Nothing but the report's own files beside the report.
    let mut beside: Vec<String> = std::fs::read_dir(&cut)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, ["r.html", "r.json", "r.md"]);
    let figures = |r: &Value| strip_keys(r, &["run_ms_median", "runtime", "model", "dataset", "notes"]);
    let (a, b) = (figures(&uninterrupted), figures(&resumed));
    assert_eq!(a["reference_metrics"], b["reference_metrics"]);
    assert_eq!(a["targets"], b["targets"]);
    // Another eval's records are not resumed, nor replaced.
    let mut other = args.clone();
    other.extend(["--limit", "10"]);
    let out = bin()
        .arg("eval")
        .args(&other)
        .arg("--no-config")
        .arg("--records")
        .arg(&records)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(record_indices(&records_file(&records, "cpu", "jsonl")).len(), 30);
    gc_removes_cached_records(&records);
}

/// `runtime gc` lists an eval's cached records and removes them (the entry moved into a cache of
/// its own, so that nothing else of the shared cache is collected).
fn gc_removes_cached_records(entry: &Path) {
    let cache = tempdir().keep();
    let moved = cache.join("eval-records").join(entry.file_name().unwrap());
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(entry, &moved).unwrap();
    let gc = |args: &[&str]| -> Value {
        let out = bin()
            .env("NPU_AUDIT_CACHE", &cache)
            .env("NPU_AUDIT_CONTEXT_DIR", cache.join("contexts"))
            .args(["runtime", "gc", "--format", "json"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let kept = gc(&[]);
    assert_eq!(kept.as_array().map(Vec::len), Some(1), "{kept}");
    assert_eq!(kept[0]["package"], "eval-records");
    assert!(
        kept[0]["version"].as_str().unwrap().contains("on reference, cpu"),
        "{kept}"
    );
    assert_eq!(
        kept[0]["removed"], false,
        "used just now: kept under the default --keep-days"
    );
    // An eval holding the entry keeps it.
    let lock = std::fs::File::open(&moved).unwrap();
    lock.try_lock().unwrap();
    let held = gc(&["--keep-days", "0"]);
    assert_eq!(held[0]["removed"], false, "{held}");
    assert!(held[0]["why"].as_str().unwrap().contains("in use"), "{held}");
    drop(lock);
    let dry = gc(&["--keep-days", "0", "--dry-run"]);
    assert_eq!(
        (&dry[0]["remove"], &dry[0]["removed"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    assert!(moved.is_dir());
    // The table says what went.
    let out = bin()
        .env("NPU_AUDIT_CACHE", &cache)
        .env("NPU_AUDIT_CONTEXT_DIR", cache.join("contexts"))
        .args(["runtime", "gc", "--keep-days", "0"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row = table
        .lines()
        .find(|l| l.contains("eval-records"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("removed") && row.contains("unused for"), "{table}");
    assert!(!moved.exists(), "the entry is gone");
}

/// The reference's and the CPU's correct counts in an eval report.
fn correct_counts(report: &Value) -> (u64, u64) {
    let correct = |m: &Value| m["accuracy"]["k"].as_u64().unwrap();
    (
        correct(&report["reference_metrics"]),
        correct(&report["targets"][0]["metrics"]),
    )
}

#[test]
fn resumed_records_are_checked_against_the_set_and_judged_again() {
    let set = copy_of_clean(6);
    let work = set.parent().unwrap().to_path_buf();
    let args = cpu_args(&set);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, first, stderr) = eval(&work, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    let (reference, cpu) = correct_counts(&first);
    assert!(cpu > 0 && reference > 0, "the flipped labels must change the counts");
    let records = work.join("r.records");
    // Every label flipped (two classes): what was right is now wrong. The resumed eval judges
    // the kept records against the labels as they are, so its counts are the complements.
    let labels = std::fs::read_to_string(set.join("labels.csv")).unwrap();
    let flipped: String = labels
        .lines()
        .map(|l| match l.rsplit_once(',') {
            Some((id, "0")) => format!("{id},1\n"),
            Some((id, "1")) => format!("{id},0\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(set.join("labels.csv"), flipped).unwrap();
    // A record's own verdict is not trusted either: every CPU record says it was right.
    let cpu_file = records_file(&records, "cpu", "jsonl");
    let tampered = std::fs::read_to_string(&cpu_file).unwrap();
    std::fs::write(&cpu_file, tampered.replace("\"correct\":false", "\"correct\":true")).unwrap();
    let (code, again, stderr) = eval(&work, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("resuming after 6 samples"), "{stderr}");
    assert_eq!(correct_counts(&again), (6 - reference, 6 - cpu));
    // Markers the tool does not write (the reference stopped, a target stopped "ok") do not make a
    // run that recorded half the set pass for finished: the rest is run.
    let cpu_lines = std::fs::read_to_string(&cpu_file).unwrap();
    // The header and three records.
    let half: String = cpu_lines.lines().take(4).map(|l| format!("{l}\n")).collect();
    std::fs::write(&cpu_file, &half).unwrap();
    std::fs::write(
        records_file(&records, "reference", "stopped.json"),
        r#"{"status": "crashed"}"#,
    )
    .unwrap();
    std::fs::write(records_file(&records, "cpu", "stopped.json"), r#"{"status": "ok"}"#).unwrap();
    let (code, finished, stderr) = eval(&work, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("resuming after 3 samples"), "{stderr}");
    assert_eq!(finished["targets"][0]["samples_run"], 6);
    assert_eq!(correct_counts(&finished), (6 - reference, 6 - cpu));
    // Records this eval cannot have made are refused: a class the output does not have, more
    // records than samples.
    let lines = std::fs::read_to_string(&cpu_file).unwrap();
    // This eval with `extra` flags ends 2 saying `needle`.
    let usage_error = |extra: &[&std::ffi::OsStr], needle: &str| {
        let out = bin()
            .arg("eval")
            .args(&args)
            .arg("--no-config")
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
    };
    let refused = |text: &str, needle: &str| {
        std::fs::write(&cpu_file, text).unwrap();
        usage_error(&["--records".as_ref(), records.as_os_str()], needle);
    };
    let first = lines.lines().nth(1).unwrap();
    let (class, rest) = first.split_once("\"classes\":[").unwrap();
    let alien = format!("{class}\"classes\":[7{}\n", &rest[1..]);
    refused(
        &lines.replacen(&format!("{first}\n"), &alien, 1),
        "is not one this eval makes",
    );
    let mut extra = lines.clone();
    for k in 6..9 {
        extra.push_str(&first.replace("\"index\":0", &format!("\"index\":{k}")));
        extra.push('\n');
    }
    std::fs::write(records_file(&records, "cpu", "stopped.json"), r#"{"status": "failed"}"#).unwrap();
    refused(&extra, "cpu holds 9 records for a set of 6 samples");
    std::fs::remove_file(records_file(&records, "cpu", "stopped.json")).unwrap();
    std::fs::write(&cpu_file, &lines).unwrap();
    // A sample whose inputs changed since is refused, and nothing is written.
    std::fs::remove_file(work.join("r.json")).unwrap();
    std::fs::copy(set.join("line00000.npz"), set.join("line00002.npz")).unwrap();
    let report = work.join("r.json");
    usage_error(
        &[
            "--out".as_ref(),
            report.as_os_str(),
            "--records".as_ref(),
            records.as_os_str(),
        ],
        "sample line00002 changed since it was recorded",
    );
    assert!(!report.exists());
    // No report may be named inside the records directory.
    for inside in ["context.json", "cpu.jsonl", "new.json"] {
        let out = records.join(inside);
        usage_error(
            &[
                "--records".as_ref(),
                records.as_os_str(),
                "--out".as_ref(),
                out.as_os_str(),
            ],
            "is inside",
        );
    }
    assert!(std::fs::read_to_string(records.join("context.json"))
        .unwrap()
        .contains("\"runs\""));
}

#[test]
fn a_matrix_on_a_labelled_set_refuses_the_flags_of_a_matrix_in_signal_terms() {
    let set = copy_of_clean(2);
    let cases: [&[&str]; 7] = [
        &["--min-sqnr", "30"],
        &["--require-bit-exact"],
        &["--max-fallback-nodes", "0"],
        &["--gen", "uniform:0,1"],
        &["--samples", "3"],
        &["--inputs", "elsewhere.npz"],
        &["--search", "widen16"],
    ];
    for extra in cases {
        let out = bin()
            .args(["matrix", "--variant"])
            .arg(format!("u8={}", real("ppocr_cls_qdq_u8.onnx")))
            .args(["-t", "cpu", "--reference", &real("ppocr_cls_fp32.onnx"), "--dataset"])
            .arg(&set)
            .args(["--task", "classify", "--no-config"])
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(extra[0]), "{extra:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{extra:?}: {stderr}");
    }
}

/// A child process killed when the test is done with it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_target_that_crashes_mid_set_is_a_finding_and_the_gate_judges_the_rest() {
    let set = copy_of_clean(12);
    let dir = set.parent().unwrap().join("crash");
    std::fs::create_dir(&dir).unwrap();
    let mut args = cpu_args(&set);
    args.extend(["--allow-failure".into(), "cpu".into(), "-t".into(), "cpu:noopt".into()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, report, stderr) = eval(&dir, &a, &[("NPU_AUDIT_FAULT_INJECT", "cpu=crash@5")]);
    assert_eq!(code, 0, "{stderr}");
    let cpu = target(&report, "cpu");
    assert_eq!(cpu["status"], "crashed", "{cpu}");
    assert_eq!(cpu["samples_run"], 4);
    assert!(cpu["error"].as_str().unwrap().contains("injected crash"), "{cpu}");
    assert_eq!(target(&report, "cpu:noopt")["samples_run"], 12);
    // Required, the crash is exit 3; a gate the rest fails is exit 1.
    let dir = set.parent().unwrap().join("required");
    std::fs::create_dir(&dir).unwrap();
    let (code, _, stderr) = eval(&dir, &a[..a.len() - 4], &[("NPU_AUDIT_FAULT_INJECT", "cpu=crash@5")]);
    assert_eq!(code, 3);
    // The exit is said on its one error line, as compare says it.
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("npu-audit: error: ")).collect();
    assert_eq!(
        errors,
        ["npu-audit: error: required target(s) did not run to the end: cpu (crashed)"],
        "{stderr}"
    );
    // Every label turned: the model is mostly wrong, and as wrong as the reference.
    let labels = std::fs::read_to_string(set.join("labels.csv")).unwrap();
    let turned: String = labels
        .lines()
        .map(|l| match l.rsplit_once(',') {
            Some((id, "0")) => format!("{id},1\n"),
            Some((id, "1")) => format!("{id},0\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(set.join("labels.csv"), turned).unwrap();
    let dir = set.parent().unwrap().join("gate");
    std::fs::create_dir(&dir).unwrap();
    let mut gated: Vec<&str> = a[..a.len() - 4].to_vec();
    gated.extend(["--min-accuracy", "0.5", "--max-accuracy-drop", "50"]);
    let (code, report, _) = eval(&dir, &gated, &[]);
    assert_eq!(code, 1);
    let rules = report["gate"]["rules"].as_array().unwrap();
    let rule = |name: &str| {
        rules
            .iter()
            .find(|r| r["rule"] == name)
            .unwrap_or_else(|| panic!("{name}: {rules:?}"))
    };
    assert_eq!(rule("min_accuracy")["pass"], false);
    assert_eq!(rule("max_accuracy_drop")["pass"], true);
    let upper = num(&target(&report, "cpu")["comparisons"][0]["drop_upper"]);
    assert_eq!(num(&rule("max_accuracy_drop")["measured"]), upper);
}

#[test]
fn the_eval_schema_is_committed_and_real_evals_validate() {
    let derived = bin().args(["schema", "eval"]).output().unwrap();
    let committed = std::fs::read_to_string(repo("docs/eval.schema.json")).unwrap();
    assert!(
        String::from_utf8_lossy(&derived.stdout) == committed,
        "docs/eval.schema.json differs from the derived schema: run `cargo run -- schema eval > docs/eval.schema.json`"
    );
    let schema: Value = serde_json::from_str(&committed).unwrap();
    if let Err(e) = jsonschema::draft202012::meta::validate(&schema) {
        panic!("not a valid draft 2020-12 schema: {e}");
    }
    let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    let (_, report) = cls_eval();
    let errors: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert_eq!(errors, Vec::<String>::new());
}

#[test]
fn matrix_on_a_labelled_set_recommends_the_cheapest_variant_within_the_accuracy_budget() {
    let dir = tempdir().keep();
    let set = clean_set().display().to_string();
    let json = dir.join("m.json");
    let html = dir.join("m.html");
    let out = bin()
        .args([
            "matrix",
            "--variant",
            &format!("int8={}", real("ppocr_cls_qdq_u8.onnx")),
            "--variant",
            &format!("a16w8={}", real("ppocr_cls_qdq_a16w8.onnx")),
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "--reference",
            &real("ppocr_cls_fp32.onnx"),
            "--dataset",
            &set,
            "--limit",
            "8",
            "--task",
            "classify",
            "--max-accuracy-drop",
            "20",
            "--resamples",
            "2000",
            "--no-config",
            "--out",
            json.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let m: Value = serde_json::from_slice(&std::fs::read(&json).unwrap_or_else(|e| panic!("{e}: {stderr}"))).unwrap();
    assert_eq!(out.status.code().map(i64::from), m["exit_code"].as_i64(), "{stderr}");
    assert_eq!(m["task"]["dataset"]["samples"], 8);
    assert_eq!(m["policy"], serde_json::json!(["max_accuracy_drop 20"]));
    let cells = m["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    // Each cell is what eval says of that variant on that target.
    let eval_dir = tempdir().keep();
    let (_, e, _) = eval(
        &eval_dir,
        &[
            &real("ppocr_cls_qdq_u8.onnx"),
            "--reference",
            &real("ppocr_cls_fp32.onnx"),
            "--dataset",
            &set,
            "--limit",
            "8",
            "--task",
            "classify",
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "--no-baseline",
            "--resamples",
            "2000",
        ],
        &[],
    );
    for t in ["cpu", "qnn:sm8650"] {
        let cell = cells
            .iter()
            .find(|c| c["variant"] == "int8" && c["target"] == t)
            .unwrap();
        let row = target(&e, t);
        let against = &row["comparisons"][0];
        assert_eq!(
            cell["task"]["primary"]["value"], row["metrics"]["accuracy"]["value"],
            "{t}"
        );
        assert_eq!(cell["task"]["drop"], against["drop"], "{t}");
        assert_eq!(cell["task"]["drop_upper"], against["drop_upper"], "{t}");
        assert_eq!(
            (&cell["task"]["fixed"], &cell["task"]["broken"]),
            (&against["fixed"], &against["broken"])
        );
        assert_eq!(cell["sqnr_db"], row["median_sqnr_db"], "{t}");
    }
    // The recommendation: per target, the first variant in cost order that ran and whose drop's
    // upper bound is within 20 points.
    assert_eq!(m["cost_order"], serde_json::json!(["int8", "a16w8"]));
    for r in m["recommendations"].as_array().unwrap() {
        let t = r["target"].as_str().unwrap();
        let meets = |v: &str| {
            cells.iter().any(|c| {
                c["variant"] == v && c["target"] == t && c["status"] == "ok" && num(&c["task"]["drop_upper"]) <= 20.0
            })
        };
        let want = ["int8", "a16w8"].into_iter().find(|v| meets(v));
        match want {
            Some(v) => assert_eq!(r["variant"], v, "{r}"),
            None => assert!(r["variant"].is_null() || r["run_on"] == "cpu", "{r}"),
        }
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("drop, points"), "the cells table shows the task figures");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("docs/matrix.schema.json")).unwrap()).unwrap();
    let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&m)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert_eq!(errors, Vec::<String>::new());
}

#[test]
fn without_labels_agreement_with_a_stored_golden_run_is_what_the_labelled_eval_recorded() {
    let (cls_dir, _) = cls_eval();
    let dir = tempdir().keep();
    let golden = dir.join("golden");
    let mut create = bin();
    create
        .args(["golden", "create", &real("ppocr_cls_fp32.onnx"), "--out"])
        .arg(&golden);
    let ids: Vec<String> = (0..5).map(|k| format!("line{k:05}")).collect();
    for id in &ids {
        create.arg("--inputs").arg(clean_set().join(format!("{id}.npz")));
    }
    let out = create.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let set = clean_set().display().to_string();
    let (code, report, stderr) = eval(
        &dir,
        &[
            &real("ppocr_cls_qdq_u8.onnx"),
            "--golden",
            golden.to_str().unwrap(),
            "--dataset",
            &set,
            "--limit",
            "5",
            "--task",
            "agree",
            "-t",
            "cpu",
            "--no-baseline",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["dataset"]["labels"], "reference");
    // The labelled eval's records say which of these samples the CPU EP's top-1 left.
    let top1 = |run: &str| -> Vec<u64> {
        std::fs::read_to_string(records_file(&cls_dir.join("r.records"), run, "jsonl"))
            .unwrap()
            .lines()
            .skip(1)
            .take(5)
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["record"]["prediction"]["classes"][0]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    };
    let (reference, cpu) = (top1("reference"), top1("cpu"));
    let agreeing = reference.iter().zip(&cpu).filter(|(a, b)| a == b).count() as u64;
    assert_eq!(report["reference_metrics"]["accuracy"]["k"], 5);
    assert_eq!(target(&report, "cpu")["metrics"]["accuracy"]["k"], agreeing);
    // A stored golden run of other samples is refused.
    let out = bin()
        .args([
            "eval",
            &real("ppocr_cls_qdq_u8.onnx"),
            "--golden",
            golden.to_str().unwrap(),
            "--dataset",
            &set,
        ])
        .args(["--limit", "4", "--task", "agree", "-t", "cpu", "--no-config"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the golden run holds 5 samples and the set 4"),
        "{stderr}"
    );
}

/// Runs `npu-audit eval ARGS --no-config` with `env`; (exit code, stderr).
fn eval_shard(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = bin();
    cmd.arg("eval").args(args).arg("--no-config");
    for var in SHARD_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Every engine variable `--shard auto` reads (cleared so the test's own environment cannot
/// choose a part).
const SHARD_VARS: &[&str] = &[
    "JOB_COMPLETION_INDEX",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "CI_NODE_INDEX",
    "CI_NODE_TOTAL",
    "BUILDKITE_PARALLEL_JOB",
    "BUILDKITE_PARALLEL_JOB_COUNT",
    "AWS_BATCH_JOB_ARRAY_INDEX",
    "BATCH_TASK_INDEX",
    "NPU_AUDIT_SHARD_COUNT",
];

/// The eval report's figures: everything but the sessions' run times.
fn figures_of(report: &Value) -> Value {
    strip_keys(report, &["run_ms_median"])
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

#[test]
fn shards_of_an_eval_merge_to_the_report_one_machine_writes() {
    let set = cls_set("shards", 12, 11, &[]);
    let work = tempdir().keep();
    let (model, reference) = (real("ppocr_cls_qdq_u8.onnx"), real("ppocr_cls_fp32.onnx"));
    let set_arg = set.display().to_string();
    let args = [
        model.as_str(),
        "--reference",
        &reference,
        "--dataset",
        &set_arg,
        "--task",
        "classify",
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650",
    ];
    let (code, whole, stderr) = eval(&work, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    // Three shards: one named, two found from a cluster engine's variables.
    let engines: [&[(&str, &str)]; 3] = [
        &[],
        &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "3")],
        &[("CI_NODE_INDEX", "3"), ("CI_NODE_TOTAL", "3")],
    ];
    let mut parts = Vec::new();
    for (k, env) in engines.iter().enumerate() {
        let out = work.join(format!("shard{}.json", k + 1));
        let shard = if env.is_empty() {
            "1/3".to_string()
        } else {
            "auto".into()
        };
        let mut a = args.to_vec();
        a.extend(["--shard", &shard, "--out", out.to_str().unwrap()]);
        let (code, stderr) = eval_shard(&a, env);
        assert_eq!(code, 0, "{stderr}");
        parts.push(out);
    }
    // The split, worked by hand: weights cpu 1, qnn 700, cpu:noopt 1 over 12 samples make a line
    // of 8,424 cut at 2,808 and 5,616; cpu fills 0..12, qnn's sample i starts at 12 + 700 i
    // (2,112 for i = 3, 2,812 for 4, 5,612 for 8, 6,312 for 9), cpu:noopt starts at 8,412.
    let units = |p: &Path| -> Vec<(String, u64, u64)> {
        read_json(p)["units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| {
                let u = &u["unit"];
                (
                    u["run"].as_str().unwrap().to_string(),
                    u["start"].as_u64().unwrap(),
                    u["end"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let unit = |r: &str, s, e| (r.to_string(), s, e);
    assert_eq!(units(&parts[0]), vec![unit("cpu", 0, 12), unit("qnn:sm8650", 0, 4)]);
    assert_eq!(units(&parts[1]), vec![unit("qnn:sm8650", 4, 9)]);
    assert_eq!(
        units(&parts[2]),
        vec![unit("qnn:sm8650", 9, 12), unit("cpu:noopt", 0, 12)]
    );
    // Merged in any order: the figures of the one-machine report, every one.
    let merged = work.join("merged.json");
    let p: Vec<String> = parts.iter().map(|p| p.display().to_string()).collect();
    bin()
        .args(["merge", &p[2], &p[0], &p[1], "--out", merged.to_str().unwrap()])
        .assert()
        .success();
    assert_eq!(figures_of(&read_json(&merged)), figures_of(&whole));
    check_bad_merges(&work, &p);
}

/// Merges that are not of every shard of one eval are refused on one line, writing nothing.
fn check_bad_merges(work: &Path, p: &[String]) {
    let out = work.join("bad.json");
    let refused = |parts: &[&str], want: &str| {
        let o = bin()
            .arg("merge")
            .args(parts)
            .args(["--out", out.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(want), "{want}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!out.exists());
    };
    refused(&[&p[0], &p[1]], "shard 3/3 missing");
    // A compare report among eval shards (either first): each part's kind is its own.
    let compare = repo("tests/data/small_report.json").display().to_string();
    refused(&[&p[0], &compare, &p[2]], "every part of a merge is of one kind");
    refused(&[&compare, &p[0], &p[1], &p[2]], "every part of a merge is of one kind");
    refused(&[&p[0], &p[1], &p[1], &p[2]], "are both shard 2/3");
    // A shard of another eval (another set), one whose records were cut, one of another split.
    let edited = |name: &str, edit: &dyn Fn(&mut Value)| -> String {
        let mut v = read_json(Path::new(&p[1]));
        edit(&mut v);
        let path = work.join(name);
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        path.display().to_string()
    };
    let other_set = edited("other_set.json", &|v| {
        v["basis"]["dataset"]["ids_sha256"] = "0".repeat(64).into()
    });
    refused(
        &[&p[0], &other_set, &p[2]],
        "differ in the set's samples (ids or count)",
    );
    let cut = edited("cut.json", &|v| {
        v["units"][0]["run"]["records"].as_array_mut().unwrap().pop();
    });
    refused(&[&p[0], &cut, &p[2]], "the shard did not finish");
    let overlap = edited("overlap.json", &|v| v["units"][0]["unit"]["start"] = 3.into());
    refused(&[&p[0], &overlap, &p[2]], "missing or counted twice");
    let costs = edited("costs.json", &|v| v["costs"]["cpu"] = 2.into());
    refused(&[&p[0], &costs, &p[2]], "differ in the costs");
    // A shard whose reference records were dropped (another shard holds them) and whose target
    // labels were then forged to fit its predictions: refused for what it does not hold.
    let forged = edited("forged.json", &|v| {
        v["reference"] = serde_json::json!([]);
        for r in v["units"][0]["run"]["records"].as_array_mut().unwrap() {
            let predicted = r["prediction"]["classes"][0].clone();
            r["truth"]["class"] = predicted;
            r["judged"] = serde_json::json!({"correct": true, "in_top_k": true});
        }
    });
    refused(
        &[&p[0], &forged, &p[2]],
        "does not hold the reference's records of samples 4..9",
    );
    // A shard that lost its format is refused as a damaged shard, not as a compare report; one
    // whose gate limit is not an object says so without Rust's type names.
    let no_format = edited("no_format.json", &|v| {
        v.as_object_mut().unwrap().remove("format");
    });
    refused(&[&no_format, &p[0], &p[2]], "not an eval shard's file (no format");
    let bad_limit = edited("bad_limit.json", &|v| {
        v["basis"]["targets"][0]["min_accuracy"] = 5.into()
    });
    refused(&[&p[0], &bad_limit, &p[2]], "expected an object");
}

#[test]
fn shard_flags_that_name_no_part_are_refused_on_one_line() {
    let set = copy_of_clean(4);
    let args = cpu_args(&set);
    let out = set.parent().unwrap().join("s.json");
    let with = |extra: &[&str]| -> Vec<String> {
        let mut a = args.clone();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let o = out.to_str().unwrap();
    type Case<'a> = (Vec<String>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (with(&["--shard", "4/3", "--out", o]), vec![], "is not i/n"),
        (with(&["--shard", "1/0", "--out", o]), vec![], "is not i/n"),
        (with(&["--shard", "auto", "--out", o]), vec![], "no cluster engine"),
        (
            with(&["--shard", "auto", "--out", o]),
            vec![("JOB_COMPLETION_INDEX", "0")],
            "NPU_AUDIT_SHARD_COUNT",
        ),
        (
            with(&["--shard", "auto", "--out", o]),
            vec![
                ("CI_NODE_INDEX", "1"),
                ("CI_NODE_TOTAL", "2"),
                ("BUILDKITE_PARALLEL_JOB", "0"),
                ("BUILDKITE_PARALLEL_JOB_COUNT", "2"),
            ],
            "several engines",
        ),
        (
            with(&["--shard", "1/2", "--out", o]),
            vec![("CI_NODE_INDEX", "2"), ("CI_NODE_TOTAL", "2")],
            "disagrees",
        ),
        (with(&["--shard", "1/2"]), vec![], "--shard needs --out FILE"),
        (with(&["--costs", "cpu=1", "--out", o]), vec![], "--shard"),
    ];
    for (a, env, want) in cases {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, stderr) = eval_shard(&a, &env);
        assert_eq!(code, 2, "{a:?}: {stderr}");
        assert!(stderr.contains(want), "{want}: {stderr}");
        assert!(!out.exists());
    }
}

/// A tiny seeded generator for the kill points (the same points on every run of the test).
fn next_random(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

#[test]
fn a_shard_killed_at_random_points_resumes_and_counts_no_sample_twice() {
    let set = copy_of_clean(30);
    let work = set.parent().unwrap().to_path_buf();
    let args = cpu_args(&set);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, whole, _) = eval(&work, &args, &[]);
    let shard = |k: usize, name: &str| {
        let out = work.join(name);
        let mut a = args.clone();
        let part = format!("{k}/2");
        let records = out.with_extension("records");
        a.extend(["--shard", &part, "--out", out.to_str().unwrap()]);
        a.extend(["--records", records.to_str().unwrap()]);
        let (code, stderr) = eval_shard(&a, &[]);
        assert_eq!(code, 0, "{stderr}");
        (out, stderr)
    };
    let (first, _) = shard(1, "first.json");
    // Shard 2/2 is cpu's samples 15..30: slowed down, killed after a random number of records
    // and a random delay, again and again, then run to the end.
    let out = work.join("second.json");
    let records = records_file(
        &work.join("second.records").join("2-of-2").join("15-30"),
        "cpu",
        "jsonl",
    );
    let (mut state, mut partial) = (7u64, 0);
    for _ in 0..3 {
        let wait_for = (next_random(&mut state) % 12) as usize;
        let mut child = KillOnDrop(
            std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
                .arg("eval")
                .args(&args)
                .args(["--no-config", "--shard", "2/2", "--out", out.to_str().unwrap()])
                .arg("--records")
                .arg(work.join("second.records"))
                .env("NPU_AUDIT_FAULT_INJECT", "cpu=slow")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let start = std::time::Instant::now();
        while record_indices(&records).len() < wait_for && start.elapsed().as_secs() < 120 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::thread::sleep(std::time::Duration::from_millis(next_random(&mut state) % 150));
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        assert!(!out.exists(), "a killed shard wrote its file");
        let n = record_indices(&records).len();
        partial += usize::from(n > 0 && n < 15);
    }
    assert!(partial > 0, "no kill landed while the shard was recording");
    let (second, stderr) = shard(2, "second.json");
    let kept = record_indices(&records);
    assert_eq!(kept, (15..30).collect::<Vec<u64>>(), "{stderr}");
    // Started again when finished: it runs nothing and leaves its file as it was.
    let before = std::fs::read(&second).unwrap();
    let (_, again) = shard(2, "second.json");
    assert!(again.contains("already done"), "{again}");
    assert_eq!(record_indices(&records), kept);
    assert_eq!(std::fs::read(&second).unwrap(), before);
    let merged = work.join("merged.json");
    bin()
        .args([
            "merge",
            first.to_str().unwrap(),
            second.to_str().unwrap(),
            "--out",
            merged.to_str().unwrap(),
        ])
        .assert()
        .success();
    assert_eq!(figures_of(&read_json(&merged)), figures_of(&whole));
    // A shard's records directory is refused to another shard, and kept.
    std::fs::rename(work.join("second.records/2-of-2"), work.join("second.records/1-of-2")).unwrap();
    let records = records_file(
        &work.join("second.records").join("1-of-2").join("15-30"),
        "cpu",
        "jsonl",
    );
    let mut a = args.clone();
    let second_records = work.join("second.records");
    a.extend(["--shard", "1/2", "--records", second_records.to_str().unwrap(), "--out"]);
    let other = work.join("other.json");
    a.push(other.to_str().unwrap());
    let (code, stderr) = eval_shard(&a, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("another eval or another shard"), "{stderr}");
    assert_eq!(record_indices(&records), kept);
}

/// The normal quantile of a one-sided 95% bound, as SciPy's `norm.ppf(0.95)` gives it.
const Z90: f64 = 1.644_853_626_951_472_2;

/// An eval of the fp32 classifier against itself on the CPU EP (graph optimizations on against
/// off): no sample flips, so every bound below is the sample size's alone.
fn self_eval(set: &Path, extra: &[&str]) -> (i32, Value, String) {
    let dir = tempdir().keep();
    let set = set.display().to_string();
    let mut args = vec![
        real("ppocr_cls_fp32.onnx"),
        "--reference".into(),
        real("ppocr_cls_fp32.onnx"),
        "--dataset".into(),
        set,
        "--task".into(),
        "classify".into(),
        "-t".into(),
        "cpu".into(),
        "--no-baseline".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    eval(&dir, &args, &[])
}

/// The gate rule `rule` of `report`'s first target: (measured, pass).
fn rule_of(report: &Value, rule: &str) -> (f64, bool) {
    let r = report["gate"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == rule)
        .unwrap_or_else(|| panic!("no rule {rule}: {}", report["gate"]));
    (r["measured"].as_f64().unwrap(), r["pass"].as_bool().unwrap())
}

#[test]
fn four_samples_without_a_flip_cannot_show_a_one_point_drop_nor_one_sample_99_percent() {
    let (code, report, stderr) = self_eval(
        clean_set(),
        &["--limit", "4", "--max-accuracy-drop", "1", "--min-accuracy", "0.5"],
    );
    assert_eq!(code, 1, "{stderr}");
    let c = &report["targets"][0]["comparisons"][0];
    assert_eq!(
        (c["fixed"].as_u64(), c["broken"].as_u64(), c["pairs"].as_u64()),
        (Some(0), Some(0), Some(4))
    );
    // With no discordant pair Tango's statistic is -sqrt(nδ/(1-δ)): the bound is z²/(n + z²).
    let by_hand = 100.0 * Z90 * Z90 / (4.0 + Z90 * Z90);
    let (upper, pass) = rule_of(&report, "max_accuracy_drop");
    assert!(!pass && (upper - by_hand).abs() < 1e-9 && upper >= 35.0, "{upper}");
    assert!((by_hand - 40.35).abs() < 0.005);
    assert!((c["resolution"].as_f64().unwrap() - by_hand).abs() < 1e-9);
    // The two-sided 95% interval at z = 1.96: ±z²/(n + z²) = ±48.99 points.
    let z95 = 1.959_963_984_540_054_f64;
    let wide = 100.0 * z95 * z95 / (4.0 + z95 * z95);
    assert!((c["drop"]["hi"].as_f64().unwrap() - wide).abs() < 1e-9, "{c}");
    assert!((c["drop"]["lo"].as_f64().unwrap() + wide).abs() < 1e-9, "{c}");
    // What the sample would need: z²(1 - L)/L = 267.8 samples for one point.
    let need = &report["targets"][0]["samples_needed"];
    assert_eq!(need["even_odds"].as_u64(), Some(268), "{need}");
    assert!(stderr.is_empty() || !stderr.contains("panicked"));
    // Accuracy 4 of 4 is judged by its one-sided 95% Wilson lower bound, n / (n + z²) at k = n.
    let (lower, pass) = rule_of(&report, "min_accuracy");
    assert!(pass && (lower - 4.0 / (4.0 + Z90 * Z90)).abs() < 1e-12, "{lower}");
    // One right sample does not show 99%: its bound is 1 / (1 + z²) = 26.99%.
    let (code, one, _) = self_eval(clean_set(), &["--limit", "1", "--min-accuracy", "0.99"]);
    let (lower, pass) = rule_of(&one, "min_accuracy");
    assert!(
        code == 1 && !pass && (lower - 1.0 / (1.0 + Z90 * Z90)).abs() < 1e-12,
        "{lower}"
    );
}

/// The 200 lines the sequential tests take their samples from.
fn lines_200() -> &'static PathBuf {
    static SET: OnceLock<PathBuf> = OnceLock::new();
    SET.get_or_init(|| cls_set("lines200", 200, 11, &[]))
}

/// A target's sequential outcome in a report.
fn sequential_of<'r>(report: &'r Value, target: &str) -> &'r Value {
    let t = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == target)
        .unwrap();
    &t["sequential"]
}

#[test]
fn until_decided_stops_each_target_once_its_limit_is_shown_and_resumes_in_the_same_order() {
    // The fp32 model on the CPU EP and in fp16 on the HTP simulator: neither flips a line, so
    // each is decided at the sample the mixture's capital reaches 20 with every d = 0 (88, worked
    // by hand in src/commands/eval/sequential.rs), long before the 200.
    let dir = tempdir().keep();
    let set = lines_200().display().to_string();
    let fp32 = real("ppocr_cls_fp32.onnx");
    let args = [
        fp32.as_str(),
        "--reference",
        fp32.as_str(),
        "--dataset",
        &set,
        "--task",
        "classify",
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650,enable_htp_fp16_precision=1",
        "--max-accuracy-drop",
        "5",
        "--until-decided",
        "--order-seed",
        "7",
    ];
    let (code, report, stderr) = eval(&dir, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["statistics"]["sequential"]["order_seed"], 7);
    for target in ["cpu", "qnn:sm8650,enable_htp_fp16_precision=1"] {
        let q = sequential_of(&report, target);
        assert_eq!(q["decision"], "pass", "{target}: {q}");
        assert_eq!(q["samples_used"], 88, "{target}: {q}");
        let rule = &q["rules"][0];
        assert!(
            rule["upper"].as_f64().unwrap() <= 5.0 && rule["decided_at"] == 88,
            "{rule}"
        );
    }
    // The baseline is not gated: it ran until the eval ended, no further than the window ahead.
    let baseline = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["role"] == "baseline")
        .unwrap();
    assert!(baseline["sequential"].is_null());
    assert!(
        (88..120).contains(&baseline["samples_run"].as_u64().unwrap()),
        "{baseline}"
    );
    // The samples came in the seeded order, not the set's: the records' ids are a shuffle.
    let records = dir.join("r.records");
    let ids: Vec<String> = std::fs::read_to_string(records_file(&records, "cpu", "jsonl"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["record"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 88);
    let mut sorted = ids.clone();
    sorted.sort();
    assert_ne!(ids, sorted);
    // Run again on the same records: every target is decided there, nothing is run, the figures
    // are the same.
    let (code, again, stderr) = eval(&dir, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("resuming after"), "{stderr}");
    let figures = |r: &Value| strip_keys(r, &["run_ms_median", "runtime"]);
    assert_eq!(figures(&report)["targets"], figures(&again)["targets"]);
}

#[test]
fn until_decided_fails_what_the_set_cannot_decide_and_says_what_it_would_take() {
    // The u8 classifier breaks lines in both directions on the CPU EP: a one-point budget is
    // decided neither way within 200 samples, so the target runs the set and the gate fails.
    let dir = tempdir().keep();
    let set = lines_200().display().to_string();
    let u8 = real("ppocr_cls_qdq_u8.onnx");
    let fp32 = real("ppocr_cls_fp32.onnx");
    let args = [
        u8.as_str(),
        "--reference",
        fp32.as_str(),
        "--dataset",
        &set,
        "--task",
        "classify",
        "-t",
        "cpu",
        "--no-baseline",
        "--max-accuracy-drop",
        "1",
        "--until-decided",
    ];
    let (code, report, stderr) = eval(&dir, &args, &[]);
    assert_eq!(code, 1, "{stderr}");
    let q = sequential_of(&report, "cpu");
    assert_eq!(
        (q["decision"].as_str(), q["samples_used"].as_u64()),
        (Some("undecided"), Some(200)),
        "{q}"
    );
    let (upper, pass) = rule_of(&report, "max_accuracy_drop");
    assert!(!pass && upper > 1.0 && upper == q["rules"][0]["upper"].as_f64().unwrap());
    // The set is too small to pass one point without fixes, and the eval said so up front.
    assert!(
        stderr.contains("it can pass only by fixing more samples than it breaks"),
        "{stderr}"
    );
    assert!(
        report["notes"]
            .to_string()
            .contains("even with every sample right and none flipped"),
        "{}",
        report["notes"]
    );
    // Flags that cannot go together are refused on one line.
    let refuse = |extra: &[&str], want: &str| {
        let out = bin()
            .arg("eval")
            .args(&args[..10])
            .args(extra)
            .arg("--no-config")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want) && err.lines().count() == 1, "{err}");
    };
    refuse(&["--until-decided"], "give --max-accuracy-drop or --min-accuracy");
    refuse(
        &[
            "--until-decided",
            "--max-accuracy-drop",
            "1",
            "--shard",
            "1/2",
            "--out",
            "x.json",
        ],
        "cannot be used with",
    );
    refuse(&["--order-seed", "3"], "--until-decided");
}

#[test]
fn a_stacked_set_is_taken_in_the_same_seeded_order_as_its_directory() {
    let stacked = cls_set("stacked200.npz", 200, 11, &["--stacked"]);
    let fp32 = real("ppocr_cls_fp32.onnx");
    let u8 = real("ppocr_cls_qdq_u8.onnx");
    let run = |set: &Path| {
        let dir = tempdir().keep();
        let set = set.display().to_string();
        let args = [
            u8.as_str(),
            "--reference",
            fp32.as_str(),
            "--dataset",
            &set,
            "--task",
            "classify",
            "-t",
            "cpu",
            "--no-baseline",
            "--max-accuracy-drop",
            "30",
            "--until-decided",
            "--order-seed",
            "3",
        ];
        eval(&dir, &args, &[]).1
    };
    let (a, b) = (run(&stacked), run(lines_200()));
    let (qa, qb) = (sequential_of(&a, "cpu"), sequential_of(&b, "cpu"));
    assert_eq!(qa, qb);
    assert_eq!(qa["decision"], "pass", "{qa}");
    assert!(qa["samples_used"].as_u64().unwrap() < 200, "{qa}");
    assert_eq!(a["targets"][0]["comparisons"], b["targets"][0]["comparisons"]);
    assert_eq!(a["dataset"]["ids_sha256"].as_str().map(str::len), Some(64));
}

#[test]
fn an_interrupted_eval_exits_130_and_leaves_no_stop_marker() {
    let set = copy_of_clean(30);
    let work = set.parent().unwrap().to_path_buf();
    let args = cpu_args(&set);
    let records = work.join("r.records");
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
        .arg("eval")
        .args(&args)
        .arg("--no-config")
        .arg("--out")
        .arg(work.join("r.json"))
        .arg("--records")
        .arg(&records)
        .env("NPU_AUDIT_FAULT_INJECT", "cpu=slow")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let start = std::time::Instant::now();
    while record_indices(&records_file(&records, "cpu", "jsonl")).len() < 4 {
        assert!(start.elapsed().as_secs() < 120, "the slowed eval recorded nothing");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unsafe {
        libc::kill(child.0.id() as libc::pid_t, libc::SIGINT);
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("npu-audit: error: interrupted"), "{stderr}");
    assert!(!work.join("r.json").exists(), "an interrupted eval wrote its report");
    // The workers the interruption stopped did not crash: nothing says so, and the eval resumes.
    let markers: Vec<_> = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains("stopped"))
        .collect();
    assert!(markers.is_empty(), "{markers:?}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, resumed, stderr) = eval(&work, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(resumed["targets"][0]["status"], "ok");
    assert_eq!(
        record_indices(&records_file(&records, "cpu", "jsonl")),
        (0..30).collect::<Vec<u64>>()
    );
}

#[test]
fn sample_sizes_show_the_limit_with_the_probability_they_promise() {
    // Nam's sample size against the exact probability that n pairs show the limit, summed over
    // the trinomial distribution of the counts by tests/data/tango_check.py.
    let cli = |args: &[&str]| {
        let out = bin().args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let out = cli(&[
        "sample-size",
        "--max-accuracy-drop",
        "1",
        "--broken",
        "1",
        "--fixed",
        "1",
        "--format",
        "json",
    ]);
    let sizing: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &sizing["rows"][0];
    let (even, powered) = (row["even_odds"].as_u64().unwrap(), row["powered"].as_u64().unwrap());
    let exact = |n: u64| -> f64 {
        let out = run_ok(
            std::process::Command::new(python())
                .arg(repo("tests/data/tango_check.py"))
                .args(["power", &n.to_string(), "0.01", "0.01", "0.01"]),
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let (p_even, p_powered) = (exact(even), exact(powered));
    assert!((0.45..0.56).contains(&p_even), "{even}: {p_even}");
    assert!((0.78..0.86).contains(&p_powered), "{powered}: {p_powered}");
    // With no flip the bound of n pairs is z²/(n + z²): one point takes z²(1 - L)/L samples.
    let none = cli(&["sample-size", "--max-accuracy-drop", "1", "--flip-rate", "0"]);
    let text = String::from_utf8_lossy(&none.stdout);
    let by_hand = (Z90 * Z90 * 0.99 / 0.01).ceil() as u64;
    assert!(
        text.contains(&format!("│ {by_hand} │")) || text.contains(&format!(" {by_hand} ")),
        "{text}"
    );
    // An earlier eval's rates: one row per target with its time per sample.
    let (dir, _) = cls_eval();
    let report = dir.join("r.json").display().to_string();
    let out = cli(&[
        "sample-size",
        "--max-accuracy-drop",
        "5",
        "--format",
        "json",
        "--from",
        &report,
    ]);
    let from: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        from["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["target"] == "cpu" && r["run_ms_median"].is_number()),
        "{from}"
    );
    let bad = bin()
        .args(["sample-size", "--max-accuracy-drop", "1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn merge_judges_every_record_again_and_refuses_shards_of_other_labels() {
    let set = copy_of_clean(8);
    let work = set.parent().unwrap().to_path_buf();
    let args = cpu_args(&set);
    let shard = |k: usize| -> PathBuf {
        let out = work.join(format!("shard{k}.json"));
        let records = out.with_extension("records");
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        let part = format!("{k}/2");
        a.extend(["--shard", &part, "--out", out.to_str().unwrap()]);
        a.extend(["--records", records.to_str().unwrap()]);
        let (code, stderr) = eval_shard(&a, &[]);
        assert_eq!(code, 0, "{stderr}");
        out
    };
    let first = shard(1);
    let second = shard(2);
    let merged = work.join("merged.json");
    let merge = |parts: &[&Path]| {
        bin()
            .arg("merge")
            .args(parts)
            .args(["--out", merged.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let ok = merge(&[&first, &second]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let report = read_json(&merged);
    let labels_sha = report["dataset"]["labels_sha256"].as_str().unwrap().to_string();
    assert_eq!(labels_sha.len(), 64);
    // The limits come from the shards' files, and the report says so (here: none set)...
    assert!(!report["notes"].to_string().contains("merge sets none"));
    std::fs::remove_file(&merged).unwrap();
    // ...and a margin written into every shard's file is taken, said plainly as the shards'.
    let with_margin: Vec<PathBuf> = [&first, &second]
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let mut v = read_json(p);
            v["basis"]["stats"]["margin_points"] = 7.5.into();
            let path = work.join(format!("margin{k}.json"));
            std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
            path
        })
        .collect();
    let out = merge(&[&with_margin[0], &with_margin[1]]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let notes = read_json(&merged)["notes"].to_string();
    assert!(
        notes.contains("taken from their files (merge sets none): margin 7.5 points"),
        "{notes}"
    );
    std::fs::remove_file(&merged).unwrap();
    let refused = |edit: &dyn Fn(&mut Value), want: &str| {
        let mut v = read_json(&second);
        edit(&mut v);
        let edited = work.join("edited.json");
        std::fs::write(&edited, serde_json::to_vec(&v).unwrap()).unwrap();
        let out = merge(&[&first, &edited]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert!(
            stderr.contains(want) && stderr.trim().lines().count() == 1,
            "{want}: {stderr}"
        );
        assert!(!merged.exists());
    };
    // A verdict flipped by hand, in a target's record and in the reference's.
    let target_records = |v: &mut Value| -> Vec<Value> { v["units"][0]["run"]["records"].as_array().unwrap().clone() };
    let wrong = target_records(&mut read_json(&second))
        .iter()
        .position(|r| r["judged"]["correct"] == false)
        .unwrap_or(0);
    refused(
        &|v| {
            let c = &mut v["units"][0]["run"]["records"][wrong]["judged"]["correct"];
            *c = Value::Bool(!c.as_bool().unwrap());
        },
        "judged otherwise than its prediction scores against its label",
    );
    refused(
        &|v| {
            let c = &mut v["reference"][0]["judged"]["correct"];
            *c = Value::Bool(!c.as_bool().unwrap());
        },
        "judged otherwise",
    );
    // A target's label edited (and its verdict made to fit it).
    refused(
        &|v| {
            let r = &mut v["units"][0]["run"]["records"][0];
            let truth = 1 - r["truth"]["class"].as_u64().unwrap();
            let classes: Vec<u64> = r["prediction"]["classes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_u64().unwrap())
                .collect();
            r["truth"]["class"] = truth.into();
            r["judged"]["correct"] = (classes[0] == truth).into();
            r["judged"]["in_top_k"] = classes.contains(&truth).into();
        },
        "another label than the reference's record",
    );
    // The reference's records of a unit's samples dropped (so no label check could see the
    // target's), a run that "stopped" with status ok, a shard count no split has, a label edited
    // alike in the reference's and the target's records, a class the output does not have.
    refused(
        &|v| {
            let refs = v["reference"].as_array_mut().unwrap();
            refs.truncate(1);
        },
        "the reference's record",
    );
    refused(
        &|v| {
            v["units"][0]["run"]["end"] = serde_json::json!({"status": "ok", "error": null});
            v["units"][0]["run"]["records"].as_array_mut().unwrap().truncate(1);
        },
        "says it stopped with status ok",
    );
    refused(
        &|v| v["shard"]["count"] = 1_000_000_000u64.into(),
        "not ones an eval writes",
    );
    refused(
        &|v| {
            let flip = |r: &mut Value| {
                let truth = 1 - r["truth"]["class"].as_u64().unwrap();
                let classes: Vec<u64> = r["prediction"]["classes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_u64().unwrap())
                    .collect();
                r["truth"]["class"] = truth.into();
                r["judged"]["correct"] = (classes[0] == truth).into();
                r["judged"]["in_top_k"] = classes.contains(&truth).into();
            };
            let index = v["units"][0]["run"]["records"][0]["index"].clone();
            for r in v["reference"].as_array_mut().unwrap() {
                if r["index"] == index {
                    flip(r);
                }
            }
            flip(&mut v["units"][0]["run"]["records"][0]);
        },
        "other labels than the ones the shards read",
    );
    refused(
        &|v| {
            let r = &mut v["units"][0]["run"]["records"][0];
            r["prediction"]["classes"] = serde_json::json!([99]);
            r["judged"] = serde_json::json!({"correct": false, "in_top_k": false});
        },
        "predicts what the task's output of 2 values cannot",
    );
    // A part read from a pipe is read once: the merge is the merge of the files.
    let piped = bin()
        .arg("merge")
        .arg("-")
        .arg(&second)
        .args(["--out", merged.to_str().unwrap()])
        .write_stdin(std::fs::read(&first).unwrap())
        .output()
        .unwrap();
    assert!(piped.status.success(), "{}", String::from_utf8_lossy(&piped.stderr));
    std::fs::remove_file(&merged).unwrap();
    // The labels edited between the shards' runs: shard 2 run again against other labels.
    let labels = std::fs::read_to_string(set.join("labels.csv")).unwrap();
    let mut lines: Vec<String> = labels.lines().map(String::from).collect();
    let last = lines.len() - 1;
    let (id, label) = lines[last]
        .split_once(',')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .unwrap();
    lines[last] = format!("{id},{}", if label == "0" { 1 } else { 0 });
    std::fs::write(set.join("labels.csv"), lines.join("\n") + "\n").unwrap();
    std::fs::remove_file(&second).unwrap();
    // Its records directory knows the labels changed: it is refused until given a new one.
    let (code, stderr) = {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        let records = work.join("shard2.records");
        a.extend(["--shard", "2/2", "--out", second.to_str().unwrap()]);
        a.extend(["--records", records.to_str().unwrap()]);
        eval_shard(&a, &[])
    };
    assert!(
        code == 2 && stderr.contains("holds the records of another eval"),
        "{stderr}"
    );
    std::fs::remove_dir_all(work.join("shard2.records")).unwrap();
    let second = shard(2);
    let out = merge(&[&first, &second]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the labels' contents"), "{stderr}");
    assert!(!merged.exists());
}

#[test]
fn targets_whose_ids_read_alike_keep_their_own_records_and_contexts_are_typed_json() {
    // Both ids become `cpu_noopt_session.a_b` when punctuation is made `_`.
    let set = copy_of_clean(4);
    let work = set.parent().unwrap().to_path_buf();
    let mut args = cpu_args(&set);
    args.truncate(args.len() - 3);
    args.extend(
        [
            "-t",
            "cpu:noopt,session.a=b",
            "-t",
            "cpu,noopt_session.a=b",
            "--no-baseline",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, first, stderr) = eval(&work, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    let records = work.join("r.records");
    for run in ["cpu:noopt,session.a=b", "cpu,noopt_session.a=b"] {
        let text = std::fs::read_to_string(records_file(&records, run, "jsonl")).unwrap();
        let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(header, serde_json::json!({ "run": run }));
        assert_eq!(text.lines().count(), 5, "{run}");
    }
    // Resumed, each target reads its own records back: the same figures.
    let (code, again, stderr) = eval(&work, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("resuming after 4 samples"), "{stderr}");
    let figures = |r: &Value| strip_keys(r, &["run_ms_median", "runtime"]);
    assert_eq!(figures(&first)["targets"], figures(&again)["targets"]);
    // A records file that is another run's (its header names it) is refused.
    let a = records_file(&records, "cpu:noopt,session.a=b", "jsonl");
    let b = records_file(&records, "cpu,noopt_session.a=b", "jsonl");
    std::fs::copy(&a, &b).unwrap();
    let out = bin()
        .arg("eval")
        .args(&args)
        .arg("--no-config")
        .arg("--records")
        .arg(&records)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && err.contains("is not cpu,noopt_session.a=b's records"),
        "{err}"
    );
    // The context is typed JSON: no Rust debug text anywhere.
    let context = std::fs::read_to_string(records.join("context.json")).unwrap();
    for debug in ["Classify {", "Some(", "None", "StatOptions", "ClassAxisFlag"] {
        assert!(!context.contains(debug), "{debug}: {context}");
    }
    let context: Value = serde_json::from_str(&context).unwrap();
    assert_eq!(context["task"]["kind"], "classify");
    assert_eq!(context["task"]["top_k"], 5);
}
