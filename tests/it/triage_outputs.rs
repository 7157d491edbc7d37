//! `triage`'s outputs for people and programs: Markdown, HTML and the JSON with its published
//! schema, on a committed fleet of device reports (`fixtures/device_reports/fleet/`, built from
//! what the HTP simulation of two chipsets and the CPU EP produce on the real PP-OCR classifier)
//! and its committed triage (`fixtures/reports/triage_fleet.json`).
//!
//! - the committed triage is what the binary says on the committed fleet today (figures and
//!   verdicts; `cargo test --test it -- --ignored triage_outputs::regenerate` rebuilds both);
//! - `docs/triage.schema.json` is `npu-audit schema triage`, and real triage JSON validates
//!   against it while a drifted one does not;
//! - the Markdown and HTML renderings of the committed triage are reviewed snapshots, and their
//!   figures are the JSON's, checked here;
//! - `--format markdown`, `--markdown`, `--html` and `--out` write through one transaction.
//!
//! The page in a browser is `tests/it/triage_html.rs`.

use crate::common;

use std::path::Path;

use common::*;
use npu_audit::commands::triage::Triage;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
use serde_json::Value;

const OUTPUT: &str = "save_infer_model/scale_0.tmp_1";
const MODEL: &str = "fixtures/real/ppocr_cls_qdq_u8.onnx";
const GOLDEN: &str = "golden/ppocr_cls_fp32";
const FLEET: &str = "fixtures/device_reports/fleet";
const COMMITTED: &str = "fixtures/reports/triage_fleet.json";

/// The triage arguments of the committed fleet, run from the repository root.
fn fleet_args() -> Vec<String> {
    let mut args: Vec<String> = ["triage", MODEL, FLEET, "--golden", GOLDEN, "--no-db"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for c in ["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"] {
        args.push("-t".into());
        args.push(c.into());
    }
    args
}

/// Runs the triage of the committed fleet from the repository root with `extra` arguments.
fn triage_fleet(extra: &[&str]) -> std::process::Output {
    bin()
        .current_dir(repo(""))
        .args(fleet_args())
        .args(extra)
        .output()
        .expect("run npu-audit triage")
}

fn stdout_json(out: &std::process::Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("triage JSON")
}

fn committed_json() -> Value {
    let text = std::fs::read_to_string(repo(COMMITTED))
        .unwrap_or_else(|e| panic!("{COMMITTED}: {e}; run the ignored test `regenerate`"));
    serde_json::from_str(&text).expect("committed triage is JSON")
}

fn committed() -> Triage {
    serde_json::from_value(committed_json()).expect("the committed triage reads back as a Triage")
}

/// The triage without what differs between machines and releases of the tool.
fn stable(v: &Value) -> Value {
    strip_keys(v, &["tool_version", "runtime", "host"])
}

// ---------------------------------------------------------------------------------------------
// The committed fleet and its triage

/// Every run's two samples of the output, saved by `compare`.
fn saved(dir: &Path, run: &str) -> Vec<Vec<f32>> {
    (0..2)
        .map(|k| {
            let t = npz_array(&dir.join(run).join(format!("s{k}.npz")), OUTPUT);
            values(&t).into_iter().map(|v| v as f32).collect()
        })
        .collect()
}

/// A report directory with `samples` stacked as `outputs.npz` and `device` as `device.json`.
fn report(dir: &Path, name: &str, samples: &[Vec<f32>], device: &Value) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("mkdir");
    let per = samples[0].len();
    let flat: Vec<f32> = samples.iter().flatten().copied().collect();
    let t = Tensor::new(vec![samples.len(), 1, per], TensorData::Float32(flat)).expect("tensor");
    write_npz(&d.join("outputs.npz"), &[(OUTPUT.to_string(), &t)]).expect("npz");
    std::fs::write(d.join("device.json"), device.to_string() + "\n").expect("device.json");
}

/// `samples` with `delta` added to element `at` of sample `k` (every element when `at` is None).
fn moved(samples: &[Vec<f32>], k: usize, at: Option<usize>, delta: f32) -> Vec<Vec<f32>> {
    let mut o = samples.to_vec();
    match at {
        Some(i) => o[k][i] += delta,
        None => o.iter_mut().flatten().for_each(|v| *v += delta),
    }
    o
}

/// The script a hostile device puts in its `device.json`; `tests/it/triage_html.rs` checks it
/// never runs.
pub const INJECTED: &str = "<script>document.body.setAttribute('data-pwned','script')</script>";
/// The markup a hostile device puts in its app version.
pub const INJECTED_IMG: &str = "\"><img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">";

/// Builds the fleet from what `compare` saved: per chipset the simulation itself, moved by one
/// quantization step, noise, NaN; CPU EP outputs on two chipsets; the golden run's own outputs
/// (+inf dB); an ambiguous board platform; a copy; a `device.json` with an unknown key; and a
/// device whose model name and app version are markup.
fn build_fleet(fleet: &Path, runs: &Path, step: f32) {
    let (gold, s8650, s8450, cpu, noopt) = (
        saved(runs, "golden"),
        saved(runs, "qnn_sm8650"),
        saved(runs, "qnn_sm8450"),
        saved(runs, "cpu"),
        saved(runs, "cpu_noopt"),
    );
    let dev = |soc: &str, model: &str, app: &str| serde_json::json!({"soc_model": soc, "device_model": model, "app_version": app, "onnxruntime_version": "1.22.0"});
    let s24 = dev("SM8650", "Galaxy S24", "2.1.0");
    let nan: Vec<Vec<f32>> = s8650.iter().map(|s| vec![f32::NAN; s.len()]).collect();
    report(fleet, "a_s24", &s8650, &s24);
    report(
        fleet,
        "b_s24_round",
        &moved(&s8650, 0, Some(0), step),
        &dev("SM8650", "Galaxy S24", "2.2.0"),
    );
    report(fleet, "c_hostile", &s8650, &dev("SM8650", INJECTED, INJECTED_IMG));
    report(
        fleet,
        "d_s24_drift",
        &moved(&s8650, 0, None, 40.0 * step),
        &dev("SM8650", "Galaxy S24+", "2.1.0"),
    );
    report(fleet, "e_s24_nan", &nan, &dev("SM8650", "Galaxy S24", "2.2.0"));
    report(fleet, "f_s22", &s8450, &dev("SM8450", "Galaxy S22", "2.1.0"));
    report(
        fleet,
        "g_s22_round",
        &moved(&s8450, 1, Some(1), -step),
        &dev("SM8450", "Galaxy S22", "2.2.0"),
    );
    report(fleet, "h_s22_cpu", &cpu, &dev("SM8450", "Galaxy S22", "2.1.0"));
    report(
        fleet,
        "i_s23_cpu",
        &noopt,
        &serde_json::json!({"board_platform": "kalama", "device_model": "Galaxy S23"}),
    );
    report(
        fleet,
        "j_s23_exact",
        &gold,
        &serde_json::json!({"board_platform": "kalama", "device_model": "Galaxy S23"}),
    );
    report(
        fleet,
        "k_taro",
        &moved(&s8450, 0, None, 3.0 * step),
        &serde_json::json!({"board_platform": "taro"}),
    );
    report(fleet, "l_copy", &s8650, &s24);
    report(
        fleet,
        "m_unknown_key",
        &s8650,
        &serde_json::json!({"soc_model": "SM8650", "shell": "rm -rf /"}),
    );
}

/// The output's quantization step: the scale of its DequantizeLinear, read from the model.
fn output_step() -> f32 {
    use prost::Message;
    let bytes = std::fs::read(repo(MODEL)).expect("model");
    let m = npu_audit::data::model::pb::ModelProto::decode(bytes.as_slice()).expect("onnx");
    let init = m
        .graph
        .expect("graph")
        .initializer
        .into_iter()
        .find(|t| t.name.as_deref() == Some("softmax_0.tmp_0_scale"))
        .expect("output scale");
    match init.float_data.first() {
        Some(v) => *v,
        None => f32::from_le_bytes(init.raw_data.expect("raw")[..4].try_into().expect("4 bytes")),
    }
}

#[test]
#[ignore = "writes fixtures/device_reports/fleet and fixtures/reports/triage_fleet.json; run by hand"]
fn regenerate() {
    let dir = tempdir();
    let runs = dir.path().join("saved");
    let (code, _, stderr) = compare_json(&[
        repo(MODEL).to_str().expect("utf-8"),
        "--golden",
        repo(GOLDEN).to_str().expect("utf-8"),
        "-t",
        "qnn:sm8650",
        "-t",
        "qnn:sm8450",
        "-t",
        "cpu",
        "--fingerprint",
        "off",
        "--no-config",
        "--save-outputs",
        runs.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let fleet = repo(FLEET);
    if fleet.exists() {
        std::fs::remove_dir_all(&fleet).expect("remove the old fleet");
    }
    build_fleet(&fleet, &runs, output_step());
    let t = stdout_json(&triage_fleet(&["--format", "json"]));
    std::fs::write(repo(COMMITTED), serde_json::to_string_pretty(&t).expect("json") + "\n").expect("write");
}

#[test]
fn the_committed_triage_is_what_the_binary_says_today() {
    let now = stdout_json(&triage_fleet(&["--format", "json"]));
    assert_eq!(
        stable(&committed_json()),
        stable(&now),
        "{COMMITTED} differs from a fresh triage of {FLEET}: run \
         `cargo test --test it -- --ignored triage_outputs::regenerate` and review the snapshots"
    );
}

// ---------------------------------------------------------------------------------------------
// The published schema

fn triage_schema() -> Value {
    let text = std::fs::read_to_string(repo("docs/triage.schema.json")).expect("read docs/triage.schema.json");
    serde_json::from_str(&text).expect("docs/triage.schema.json is JSON")
}

fn schema_errors(v: &Value) -> Vec<String> {
    let validator = jsonschema::draft202012::new(&triage_schema()).expect("the schema compiles");
    validator
        .iter_errors(v)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn the_committed_triage_schema_is_the_one_derived_from_the_types() {
    let out = bin()
        .args(["schema", "triage"])
        .output()
        .expect("run npu-audit schema triage");
    assert_eq!(out.status.code(), Some(0));
    let derived = String::from_utf8(out.stdout).expect("utf-8");
    let committed = std::fs::read_to_string(repo("docs/triage.schema.json")).expect("read");
    assert!(
        derived == committed,
        "docs/triage.schema.json differs from the schema derived from the triage types: run \
         `cargo run -- schema triage > docs/triage.schema.json` and describe the change in docs/device-reports.md"
    );
    if let Err(e) = jsonschema::draft202012::meta::validate(&triage_schema()) {
        panic!("not a valid draft 2020-12 schema: {e}");
    }
    // `schema` alone is still the report's.
    let report = bin().arg("schema").output().expect("run npu-audit schema");
    let text = std::fs::read_to_string(repo("docs/report.schema.json")).expect("read");
    assert_eq!(String::from_utf8_lossy(&report.stdout), text);
}

#[test]
fn real_triage_json_validates_and_a_drifted_one_does_not() {
    let t = committed_json();
    let errs = schema_errors(&t);
    assert!(errs.is_empty(), "{COMMITTED}:\n{}", errs.join("\n"));
    // Every optional part the schema describes is in the committed triage.
    let reports = t["reports"].as_array().expect("reports");
    for key in [
        "duplicate_of",
        "cpu_sqnr_db",
        "identity",
        "device",
        "format",
        "content_sha256",
        "inputs",
    ] {
        assert!(reports.iter().any(|r| r.get(key).is_some()), "no report has {key}");
    }
    assert!(t["fleet"]["outliers"].as_array().is_some_and(|o| !o.is_empty()));
    let mut drifted = Vec::new();
    let mut v = t.clone();
    v["reports"][0]["extra"] = Value::from(1);
    drifted.push(("an unknown field in a report", v));
    let mut v = t.clone();
    v["reports"][1]["verdict"]["kind"] = Value::from("probably_fine");
    drifted.push(("an unknown verdict keyword", v));
    let mut v = t.clone();
    v["reports"][2].as_object_mut().expect("object").remove("verdict");
    drifted.push(("a report without its verdict", v));
    let mut v = t.clone();
    v["fleet"]["by_chipset"][0]["median_sqnr_db"] = Value::from("fifteen");
    drifted.push(("a figure that is not a number", v));
    for (what, v) in drifted {
        assert!(!schema_errors(&v).is_empty(), "{what} validates");
    }
}

// ---------------------------------------------------------------------------------------------
// Markdown and HTML of the committed triage

/// Reports per verdict keyword, counted from the JSON.
fn verdict_counts(t: &Value) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for r in t["reports"].as_array().expect("reports") {
        *counts
            .entry(r["verdict"]["kind"].as_str().expect("kind").to_string())
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn markdown_says_the_summary_first_then_groups_then_every_report() {
    let json = committed_json();
    let md = npu_audit::render::triage_markdown::render(&committed());
    let first = md.lines().next().expect("heading");
    assert!(
        first.starts_with("### npu-audit triage") && first.contains(MODEL),
        "{first}"
    );
    // The verdicts, counted from the JSON.
    let line = md
        .lines()
        .find(|l| l.starts_with("**Verdicts:**"))
        .expect("verdict line");
    for (k, n) in verdict_counts(&json) {
        assert!(line.contains(&format!("`{k}` {n}")), "{k} {n} not in {line}");
    }
    // The fleet's conclusion with its figures, before the tables.
    let fleet = &json["fleet"];
    let at = |needle: &str| md.find(needle).unwrap_or_else(|| panic!("no {needle:?} in\n{md}"));
    let conclusion = at(&format!("**Fleet: `{}`**", fleet["kind"].as_str().expect("kind")));
    assert!(conclusion < at("**By chipset**") && at("**By chipset**") < at("**Reports**"));
    for g in fleet["by_chipset"].as_array().expect("chipsets") {
        // The group of reports whose chipset was not identified is not named as a chipset.
        let key = match g["key"].as_str().expect("key") {
            "unidentified" => "chipset not identified".to_string(),
            chip => chip.to_uppercase(),
        };
        let excess = num(&g["median_excess_db"]);
        let against = if excess.is_finite() {
            format!("{:+.2}", -excess)
        } else if excess > 0.0 {
            "-inf".into()
        } else {
            "inf".into()
        };
        let line = format!(
            "- {key}: median SQNR {} dB, {against} dB against the CPU EP",
            db_text(&g["median_sqnr_db"])
        );
        assert!(md.contains(&line), "no {line:?}");
    }
    for o in fleet["outliers"].as_array().expect("outliers") {
        assert!(md.contains(&format!("`{}`", o.as_str().expect("path"))));
    }
    // Every report: a table row with its SQNR and verdict, and its sentence.
    for (i, r) in json["reports"].as_array().expect("reports").iter().enumerate() {
        let path = r["path"].as_str().expect("path").replace('_', "\\_");
        let sqnr = if r["sqnr_db"].is_null() {
            "-".to_string()
        } else {
            db_text(&r["sqnr_db"])
        };
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {} | {path} |", i + 1)))
            .expect("report row");
        assert!(row.contains(&format!("| {sqnr} |")), "{row}");
        let kind = r["verdict"]["kind"].as_str().expect("kind").replace('_', "\\_");
        assert!(row.contains(&kind), "{row}");
        assert!(md.contains(&format!(
            "{}. `{}`",
            i + 1,
            r["verdict"]["kind"].as_str().expect("kind")
        )));
    }
    // The hostile device's markup is text.
    // The hostile device's markup is text: every `<` escaped (the rendering writes no HTML).
    for (at, _) in md.match_indices('<') {
        assert!(
            md[..at].ends_with('\\'),
            "raw markup in the Markdown: {}",
            &md[at..(at + 20).min(md.len())]
        );
    }
    assert!(md.contains("\\<script\\>"));
    insta::assert_snapshot!("triage_fleet.md", md);
}

/// Every `<circle class="mark...">` of the page: (report index, cx, classes).
fn dots(html: &str) -> Vec<(usize, f64, String)> {
    let re = regex::Regex::new(
        r#"<circle class="(mark[^"]*)" data-report="(\d+)" data-sqnr="[^"]*" data-verdict="[^"]*" cx="([0-9.]+)""#,
    )
    .expect("regex");
    re.captures_iter(html)
        .map(|c| {
            (
                c[2].parse().expect("index"),
                c[3].parse().expect("cx"),
                c[1].to_string(),
            )
        })
        .collect()
}

#[test]
fn html_draws_every_measured_report_and_escapes_what_devices_say() {
    let json = committed_json();
    let html = npu_audit::render::html::triage::render(&committed());
    for needle in ["http:", "https:", "<script src", "<link", "@import", "src=\""] {
        assert!(
            !html.contains(needle),
            "the page loads something from elsewhere: {needle:?}"
        );
    }
    assert_eq!(html.matches("<script").count(), 1, "one inline script");
    assert!(
        !html.contains(INJECTED) && !html.contains("<img"),
        "a device's markup reached the page"
    );
    assert!(
        html.contains("&lt;script&gt;document.body.setAttribute(&#39;data-pwned&#39;,&#39;script&#39;)&lt;/script&gt;")
            || html.contains("&lt;script&gt;document.body.setAttribute('data-pwned','script')&lt;/script&gt;")
    );
    // One dot per measured report that is not a copy, in its chipset's row.
    let reports = json["reports"].as_array().expect("reports");
    let measured: Vec<(usize, &Value)> = reports
        .iter()
        .enumerate()
        .filter(|(_, r)| r["duplicate_of"].is_null() && !r["sqnr_db"].is_null())
        .collect();
    let drawn = dots(&html);
    let mut want: Vec<usize> = measured.iter().map(|(i, _)| *i).collect();
    let mut got: Vec<usize> = drawn.iter().map(|d| d.0).collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    let rows = json["fleet"]["by_chipset"].as_array().expect("chipsets");
    for g in rows {
        let key = g["key"].as_str().expect("key");
        assert!(html.contains(&format!(
            "<g class=\"row\" data-chipset=\"{key}\" data-reports=\"{}\">",
            g["reports"]
        )));
    }
    assert_eq!(html.matches("<g class=\"row\"").count(), rows.len());
    // Outliers are the fleet's.
    let outliers: Vec<&str> = json["fleet"]["outliers"]
        .as_array()
        .expect("outliers")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for (i, _, class) in &drawn {
        let path = reports[*i]["path"].as_str().expect("path");
        assert_eq!(class.contains("outlier"), outliers.contains(&path), "{path}: {class}");
    }
    // x follows SQNR: finite dots in order, +inf right of them all, -inf left.
    let x_of = |i: usize| drawn.iter().find(|d| d.0 == i).expect("dot").1;
    let mut finite: Vec<(f64, f64)> = measured.iter().map(|(i, r)| (num(&r["sqnr_db"]), x_of(*i))).collect();
    finite.sort_by(|a, b| a.0.total_cmp(&b.0));
    for w in finite.windows(2) {
        assert!(w[0].1 <= w[1].1 + 1e-9, "x does not follow SQNR: {w:?}");
        if w[0].0 < w[1].0 && w[1].0.is_finite() && w[0].0.is_finite() {
            assert!(w[0].1 < w[1].1, "{w:?}");
        }
    }
    assert!(
        html.contains("∞ exact") && html.contains("−∞"),
        "bands for +inf and -inf"
    );
    insta::assert_snapshot!("triage_fleet.html", html);
}

#[test]
fn a_nan_figure_sits_on_its_own_band_and_leaves_the_axis_alone() {
    let mut t = committed();
    let before = npu_audit::render::html::triage::render(&t);
    let ticks = |h: &str| -> Vec<String> {
        let re = regex::Regex::new(r#"<g class="tick" data-value="([^"]+)"><line class="grid" x1="([^"]+)""#)
            .expect("regex");
        re.captures_iter(h).map(|c| format!("{}@{}", &c[1], &c[2])).collect()
    };
    // The -inf report's figure becomes NaN, the +inf one None (no figure).
    let (minus, plus) = (
        t.reports
            .iter()
            .position(|e| e.sqnr_db.is_some_and(|v| v.0 == f64::NEG_INFINITY))
            .expect("a -inf report"),
        t.reports
            .iter()
            .position(|e| e.sqnr_db.is_some_and(|v| v.0 == f64::INFINITY))
            .expect("a +inf report"),
    );
    t.reports[minus].sqnr_db = Some(npu_audit::report::common::Num(f64::NAN));
    t.reports[plus].sqnr_db = None;
    let after = npu_audit::render::html::triage::render(&t);
    assert!(after.contains(">NaN</text>") && after.contains("band-nan"));
    assert!(after.contains(&format!("data-report=\"{minus}\" data-sqnr=\"NaN\"")));
    assert!(
        !after.contains(&format!("data-report=\"{plus}\" ")),
        "a report without a figure is not drawn"
    );
    let unmeasured = t.reports.iter().filter(|e| e.sqnr_db.is_none()).count();
    assert!(after.contains(&format!("; {unmeasured} without a figure")));
    // The finite axis keeps its ticks (values; positions move only by the bands beside it).
    let values = |v: Vec<String>| {
        v.into_iter()
            .map(|s| s.split('@').next().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(values(ticks(&before)), values(ticks(&after)));
    assert!(!ticks(&after).is_empty());
}

// ---------------------------------------------------------------------------------------------
// The command line

#[test]
fn every_format_and_file_comes_from_one_run() {
    let dir = tempdir();
    let (json, md, html) = (
        dir.path().join("t.json"),
        dir.path().join("t.md"),
        dir.path().join("t.html"),
    );
    let out = triage_fleet(&[
        "--format",
        "markdown",
        "--out",
        json.to_str().expect("utf-8"),
        "--markdown",
        md.to_str().expect("utf-8"),
        "--html",
        html.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&json).expect("--out written");
    let value: Value = serde_json::from_str(&text).expect("JSON");
    let errs = schema_errors(&value);
    assert!(errs.is_empty(), "{}", errs.join("\n"));
    assert_eq!(
        stable(&value),
        stable(&committed_json()),
        "the run differs from {COMMITTED}"
    );
    let t: Triage = serde_json::from_value(value).expect("reads back");
    let markdown = npu_audit::render::triage_markdown::render(&t);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        markdown,
        "--format markdown on stdout"
    );
    assert_eq!(std::fs::read_to_string(&md).expect("--markdown written"), markdown);
    assert_eq!(
        std::fs::read_to_string(&html).expect("--html written"),
        npu_audit::render::html::triage::render(&t)
    );
}

#[test]
fn output_files_are_checked_before_any_work_and_written_all_or_none() {
    let dir = tempdir();
    let (json, page) = (dir.path().join("t.json"), dir.path().join("t.html"));
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "--markdown",
                page.to_str().expect("utf-8"),
                "--html",
                page.to_str().expect("utf-8"),
            ],
            "--markdown and --html name the same file",
        ),
        (&["--out", "-", "--html", "-"], "--out, --html all name standard output"),
        (
            &["--out", json.to_str().expect("utf-8"), "--html", "/no/such/dir/t.html"],
            "--html /no/such/dir/t.html: directory /no/such/dir does not exist",
        ),
    ];
    for (args, needle) in cases {
        let started = std::time::Instant::now();
        let out = triage_fleet(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(
            started.elapsed().as_secs() < 10,
            "{args:?} ran the triage before refusing"
        );
        assert!(!json.exists() && !page.exists(), "{args:?} wrote a file");
    }
    // `--html -` prints the page instead of the table.
    let out = triage_fleet(&["--html", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("<!DOCTYPE html>"));
}

/// `triage MODEL REPORT... -t TARGET` is the grammar (`--model` and `--candidate` still read the
/// same), and `-t` names the targets besides the report's own chipset: with only the CPU EP
/// named, a report its chipset reproduces in the committed triage (its `device.json` names no
/// QNN release, so the catalogue's default runs) is still reproduced by it.
#[test]
fn a_report_is_compared_with_its_own_chipset_whatever_the_targets() {
    let report = format!("{FLEET}/a_s24");
    let run = |args: &[&str]| {
        let out = bin()
            .current_dir(repo(""))
            .args(args)
            .output()
            .expect("run npu-audit triage");
        stdout_json(&out)
    };
    let new = run(&[
        "triage", MODEL, &report, "--golden", GOLDEN, "--no-db", "-t", "cpu", "--format", "json",
    ]);
    let old = run(&[
        "triage",
        &report,
        "--model",
        MODEL,
        "--golden",
        GOLDEN,
        "--no-db",
        "--candidate",
        "cpu",
        "--format",
        "json",
    ]);
    assert_eq!(new["reports"], old["reports"], "the old spelling reads differently");
    let entry = &new["reports"][0];
    let committed = committed_json();
    let want = committed["reports"]
        .as_array()
        .and_then(|r| {
            r.iter()
                .find(|e| e["path"].as_str().is_some_and(|p| p.ends_with("/a_s24")))
        })
        .expect("a_s24 in the committed triage");
    assert_eq!(entry["verdict"]["kind"], "reproduced", "{}", entry["verdict"]);
    assert_eq!(entry["verdict"], want["verdict"]);
    let ran: Vec<&str> = entry["candidates"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["target"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ran, ["cpu", "qnn:sm8650"], "{entry}");
}
