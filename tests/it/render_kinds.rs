//! `render` on every kind of report the tool writes: each report is made here by its own command
//! (eval, an eval merged from shards, matrix, triage, pipeline, repro; cheap runs on the fixtures),
//! then rendered again, and every file `render` writes is byte for byte the one the command wrote,
//! as is the table (or `--format`) on stdout. A form a kind does not have is refused on one line
//! naming the flag and the kind (exit 2, nothing written); JSON that is no report, a report of
//! another layout version and an eval shard's file are refused on one line.

use std::path::{Path, PathBuf};

use crate::common::*;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};

/// Runs the binary from the repository root; asserts it exits `code`; returns its stdout.
fn stdout_of(args: &[&str], code: i32) -> String {
    let out = bin().current_dir(repo(".")).args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Renders `report` with each `(flag, file the command wrote)` into `dir` (`--out` among them)
/// and asserts every rendered file is byte for byte the command's; returns `render`'s stdout.
fn render_matches(report: &Path, written: &[(&str, PathBuf)], dir: &Path) -> String {
    let mut args = vec!["render".to_string(), s(report).to_string()];
    let mut pairs = Vec::new();
    for (flag, theirs) in written {
        let ours = dir.join(format!("rendered{}", flag.replace('-', "_")));
        args.extend([flag.to_string(), s(&ours).to_string()]);
        pairs.push((flag, theirs, ours));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdout = stdout_of(&args, 0);
    for (flag, theirs, ours) in pairs {
        assert!(
            read(theirs) == read(&ours),
            "{flag}: render wrote other text than its command"
        );
    }
    stdout
}

/// A flag for a form `report`'s kind has not: exit 2, one line naming the flag and the kind,
/// nothing written.
fn refuses(report: &Path, flag: &str, kind: &str, dir: &Path) {
    let dest = dir.join("refused.out");
    let out = bin().args(["render", s(report), flag, s(&dest)]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(flag) && stderr.contains(kind), "{flag}: {stderr}");
    assert!(out.stdout.is_empty() && !dest.exists(), "{flag} wrote something");
}

/// A labelled set for the PP-OCR classifier: `n` seeded uniform samples, labels 0 and 1.
fn cls_set(dir: &Path, n: usize) -> PathBuf {
    let set = dir.join("set");
    std::fs::create_dir_all(&set).unwrap();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut labels = String::from("id,label\n");
    for k in 0..n {
        let data: Vec<f32> = (0..3 * 48 * 192)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect();
        let x = Tensor::new(vec![1, 3, 48, 192], TensorData::Float32(data)).unwrap();
        write_npz(&set.join(format!("s{k:02}.npz")), &[("x".to_string(), &x)]).unwrap();
        labels.push_str(&format!("s{k:02},{}\n", k % 2));
    }
    std::fs::write(set.join("labels.csv"), labels).unwrap();
    set
}

/// The eval of the u8 classifier against fp32 on `set`, CPU only, with `extra`; its records
/// beside the set (not in the shared cache).
fn eval_args(set: &Path, extra: &[&str]) -> Vec<String> {
    let real = |n: &str| repo(&format!("fixtures/real/{n}")).display().to_string();
    let mut args: Vec<String> = vec![
        "eval".into(),
        real("ppocr_cls_qdq_u8.onnx"),
        "--reference".into(),
        real("ppocr_cls_fp32.onnx"),
        "--dataset".into(),
        s(set).into(),
        "--task".into(),
        "classify".into(),
        "-t".into(),
        "cpu".into(),
        "--no-config".into(),
        "--max-accuracy-drop".into(),
        "50".into(),
        "--records".into(),
        s(&set.with_extension("records")).into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

#[test]
fn render_turns_an_eval_report_into_the_html_markdown_and_table_eval_wrote() {
    let dir = tempdir();
    let d = dir.path();
    let set = cls_set(d, 6);
    let (json, md, html) = (d.join("e.json"), d.join("e.md"), d.join("e.html"));
    let args = eval_args(&set, &["--out", s(&json), "--markdown", s(&md), "--html", s(&html)]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let table = stdout_of(&args, 0);
    assert!(table.contains("cpu"), "{table}");
    let written = [("--out", json.clone()), ("--markdown", md), ("--html", html.clone())];
    assert_eq!(render_matches(&json, &written, d), table);
    assert!(read(&html).contains("<html") && read(&html).contains("cpu"));
    // --format json is the report as written; --format markdown its Markdown.
    assert_eq!(stdout_of(&["render", s(&json), "--format", "json"], 0), read(&json));
    let md_stdout = stdout_of(&["render", s(&json), "--format", "markdown"], 0);
    assert_eq!(md_stdout, read(&d.join("e.md")));
    for flag in ["--junit", "--node-data", "--dispatch"] {
        refuses(&json, flag, "an eval report", d);
    }
}

#[test]
fn render_turns_a_merged_eval_into_what_merge_wrote_and_refuses_a_shard() {
    let dir = tempdir();
    let d = dir.path();
    let set = cls_set(d, 6);
    let shards: Vec<PathBuf> = (1..=2).map(|i| d.join(format!("shard{i}.json"))).collect();
    for (i, shard) in shards.iter().enumerate() {
        let part = format!("{}/2", i + 1);
        let args = eval_args(&set, &["--shard", &part, "--out", s(shard)]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        stdout_of(&args, 0);
    }
    let (json, md, html) = (d.join("m.json"), d.join("m.md"), d.join("m.html"));
    let table = stdout_of(
        &[
            "merge",
            s(&shards[0]),
            s(&shards[1]),
            "--out",
            s(&json),
            "--markdown",
            s(&md),
            "--html",
            s(&html),
        ],
        0,
    );
    let written = [("--out", json.clone()), ("--markdown", md), ("--html", html)];
    assert_eq!(render_matches(&json, &written, d), table);
    let out = bin().args(["render", s(&shards[0])]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("eval shard") && stderr.contains("npu-audit merge"),
        "{stderr}"
    );
}

#[test]
fn render_writes_a_matrix_report_as_matrix_did_with_its_dispatch_table() {
    let dir = tempdir();
    let d = dir.path();
    let files: Vec<PathBuf> = ["m.json", "m.md", "m.html", "dispatch.json"]
        .iter()
        .map(|f| d.join(f))
        .collect();
    let int8 = format!("int8={}", repo("fixtures/models/cnn_qdq_u8.onnx").display());
    let a16w8 = format!("a16w8={}", repo("fixtures/models/cnn_qdq_a16w8.onnx").display());
    let table = stdout_of(
        &[
            "matrix",
            "--variant",
            &int8,
            "--variant",
            &a16w8,
            "--reference",
            "fixtures/models/cnn_fp32.onnx",
            "-t",
            "cpu",
            "--min-sqnr",
            "28",
            "--out",
            s(&files[0]),
            "--markdown",
            s(&files[1]),
            "--html",
            s(&files[2]),
            "--dispatch",
            s(&files[3]),
        ],
        0,
    );
    let written = [
        ("--out", files[0].clone()),
        ("--markdown", files[1].clone()),
        ("--html", files[2].clone()),
        ("--dispatch", files[3].clone()),
    ];
    assert_eq!(render_matches(&files[0], &written, d), table);
    assert!(read(&files[3]).contains("cpu"));
    for flag in ["--junit", "--node-data"] {
        refuses(&files[0], flag, "a matrix report", d);
    }
}

#[test]
fn render_writes_a_triage_as_triage_did() {
    let dir = tempdir();
    let d = dir.path();
    let (json, md, html) = (d.join("t.json"), d.join("t.md"), d.join("t.html"));
    let table = stdout_of(
        &[
            "triage",
            "fixtures/real/ppocr_cls_qdq_u8.onnx",
            "fixtures/device_reports/fleet/a_s24",
            "fixtures/device_reports/fleet/d_s24_drift",
            "--golden",
            "golden/ppocr_cls_fp32",
            "--no-db",
            "--no-arm64",
            "-t",
            "cpu",
            "-t",
            "qnn:sm8650",
            "--out",
            s(&json),
            "--markdown",
            s(&md),
            "--html",
            s(&html),
        ],
        0,
    );
    assert!(table.contains("reproduced") && table.contains("unexplained"), "{table}");
    let written = [("--out", json.clone()), ("--markdown", md), ("--html", html)];
    assert_eq!(render_matches(&json, &written, d), table);
    for flag in ["--junit", "--node-data", "--dispatch"] {
        refuses(&json, flag, "a triage report", d);
    }
    // The committed fleet's triage renders as its reviewed snapshots hold.
    let committed = repo("fixtures/reports/triage_fleet.json");
    let md = stdout_of(&["render", s(&committed), "--format", "markdown"], 0);
    let snapshot = read(&repo("tests/it/snapshots/it__triage_outputs__triage_fleet.md.snap"));
    assert!(
        snapshot.contains(md.trim_end()),
        "the committed triage's Markdown is not its snapshot"
    );
}

#[test]
fn render_writes_a_pipeline_report_as_pipeline_prints_it() {
    let dir = tempdir();
    let d = dir.path();
    let json = d.join("p.json");
    let pipeline = repo("fixtures/real/ppocr_cls_pipeline.toml");
    let common = [
        "pipeline",
        s(&pipeline),
        "-t",
        "cpu",
        "--inputs",
        "fixtures/inputs/ppocr_seed3.npz",
        "--out",
        s(&json),
    ];
    let markdown = stdout_of(&[&common[..], &["--format", "markdown"]].concat(), 0);
    let md = d.join("p.md");
    std::fs::write(&md, &markdown).unwrap();
    let table = render_matches(&json, &[("--out", json.clone()), ("--markdown", md)], d);
    assert!(table.contains("cpu") && table != markdown, "{table}");
    assert_eq!(stdout_of(&["render", s(&json), "--format", "markdown"], 0), markdown);
    for flag in ["--html", "--junit", "--node-data", "--dispatch"] {
        refuses(&json, flag, "a pipeline report", d);
    }
}

#[test]
fn render_writes_a_repro_report_as_repro_did() {
    let dir = tempdir();
    let d = dir.path();
    let (json, md) = (d.join("r.json"), d.join("r.md"));
    let table = stdout_of(
        &[
            "repro",
            "fixtures/models/cnn_qdq_u8.onnx",
            "--reference",
            "fixtures/models/cnn_fp32.onnx",
            "-t",
            "qnn:sm8650",
            "--report",
            s(&json),
            "--markdown",
            s(&md),
        ],
        0,
    );
    assert!(table.contains("qnn:sm8650"), "{table}");
    assert_eq!(
        render_matches(&json, &[("--out", json.clone()), ("--markdown", md)], d),
        table
    );
    for flag in ["--html", "--junit", "--node-data", "--dispatch"] {
        refuses(&json, flag, "a repro report", d);
    }
}

#[test]
fn json_that_is_no_report_of_this_release_is_refused_on_one_line() {
    let dir = tempdir();
    let d = dir.path();
    let triage = read(&repo("fixtures/reports/triage_fleet.json"));
    let cases = [
        ("{\"a\": 1}", "not a report npu-audit writes"),
        ("[1, 2]", "not a report npu-audit writes"),
        (
            "{\"tool_version\": \"1\", \"cells\": []}",
            "not a report npu-audit writes",
        ),
        ("{\"tool_version\": 1", "not JSON"),
        (
            &triage.replacen("\"schema_version\": 2", "\"schema_version\": 7", 1),
            "a triage report of schema version 7",
        ),
        (
            &triage.replacen("\"reports\": [", "\"reports\": 5, \"x\": [", 1),
            "(a triage report)",
        ),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let path = d.join(format!("bad{i}.json"));
        std::fs::write(&path, text).unwrap();
        let html = d.join("out.html");
        let out = bin().args(["render", s(&path), "--html", s(&html)]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{needle}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(needle), "{needle}: {stderr}");
        assert!(!html.exists());
    }
}
