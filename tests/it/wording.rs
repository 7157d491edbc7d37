//! What a newcomer reads, end to end (issue "newcomer", item 7): the fleet's conclusion by its
//! keyword, the group of unidentified chipsets not named as a chipset, one sign and precision
//! for the figure against the CPU EP in the table and the sentence; the max ULP that comes from
//! values near zero, with the max away from zero recomputed here from the saved outputs; matrix's
//! `runs on` column explained and its search named as the user named it; `schema` naming its six
//! schemas; `check-config` without a file saying where it looked.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::Value;

const MODEL: &str = "fixtures/real/ppocr_cls_qdq_u8.onnx";
const FLEET: &str = "fixtures/device_reports/fleet";
const GOLDEN: &str = "golden/ppocr_cls_fp32";

// ---------------------------------------------------------------------------------------------
// triage

/// A chipset group as people read it: the part number in capitals, or the phrase for reports
/// whose chipset was not identified.
fn group_label(key: &str) -> String {
    if key == "unidentified" {
        "chipset not identified".into()
    } else {
        key.to_uppercase()
    }
}

/// The report's SQNR minus the CPU EP's, signed, as the tool writes it in tables.
fn signed(excess: f64) -> String {
    let v = -excess;
    if v.is_finite() {
        format!("{v:+.2}")
    } else if v > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

#[test]
fn the_triage_table_names_and_signs_the_fleet_as_its_sentence_does() {
    let dir = tempdir();
    let json = dir.path().join("t.json");
    let mut args = vec!["triage", MODEL, FLEET, "--golden", GOLDEN, "--no-db"];
    for t in ["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"] {
        args.extend(["-t", t]);
    }
    args.extend(["--out", json.to_str().expect("utf-8")]);
    let out = bin().current_dir(repo("")).args(&args).output().expect("run triage");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("--out")).expect("JSON");
    let fleet = &t["fleet"];
    let kind = fleet["kind"].as_str().expect("kind");
    let sentence = fleet["sentence"].as_str().expect("sentence");
    assert!(
        table.contains(&format!("conclusion ({kind}): {sentence}")),
        "the conclusion under its JSON keyword: {table}"
    );
    assert!(
        !table.contains("UNIDENTIFIED") && !sentence.contains("UNIDENTIFIED"),
        "{table}"
    );
    let groups = fleet["by_chipset"].as_array().expect("chipsets");
    assert!(
        groups.iter().any(|g| g["key"] == "unidentified"),
        "the fleet has an unidentified report"
    );
    for g in groups {
        let label = group_label(g["key"].as_str().expect("key"));
        let figure = signed(num(&g["median_excess_db"]));
        let row = table
            .lines()
            .find(|l| l.starts_with('│') && l.split('│').nth(1).is_some_and(|c| c.trim() == label))
            .unwrap_or_else(|| panic!("no chipset row {label:?} in\n{table}"));
        let cells: Vec<&str> = row.split('│').map(str::trim).collect();
        // │ chipset │ reports │ median SQNR dB │ min SQNR dB │ median vs CPU EP dB │ verdicts │
        assert_eq!(cells[5], figure, "{row}");
        let median = num(&g["median_sqnr_db"]);
        if median.is_finite() && figure.starts_with(['-', '+']) {
            // The sentence: the same label, sign and precision.
            let said = format!("{label} {median:.2} dB ({figure} dB vs the CPU EP)");
            assert!(sentence.contains(&said), "{said:?} not in {sentence:?}");
        }
    }
    assert!(table.contains("median vs CPU EP dB"), "{table}");
}

// ---------------------------------------------------------------------------------------------
// compare: the max ULP near zero

/// The f32 values of one saved output, per sample.
fn saved(dir: &Path, run: &str, output: &str) -> Vec<Vec<f32>> {
    let mut samples: Vec<_> = std::fs::read_dir(dir.join(run))
        .expect("saved outputs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "npz"))
        .collect();
    samples.sort();
    samples
        .iter()
        .map(|p| values(&npz_array(p, output)).into_iter().map(|v| v as f32).collect())
        .collect()
}

/// ULP distance of two finite float32 values: their bits on one signed line.
fn ulps(a: f32, b: f32) -> u64 {
    let line = |v: f32| {
        let bits = v.to_bits() as i64;
        if bits >> 31 == 1 {
            -(bits & 0x7fff_ffff)
        } else {
            bits
        }
    };
    (line(a) - line(b)).unsigned_abs()
}

/// (max ULP over every pair, max over the pairs with both values at least 1e-6 of their sample's
/// largest golden magnitude).
fn max_ulps(out: &[Vec<f32>], gold: &[Vec<f32>]) -> (u64, Option<u64>) {
    let (mut all, mut away) = (0, None::<u64>);
    for (o, g) in out.iter().zip(gold) {
        let peak = g.iter().map(|v| v.abs() as f64).fold(0.0, f64::max);
        for (&a, &b) in o.iter().zip(g) {
            let u = ulps(a, b);
            all = all.max(u);
            if (a.abs() as f64).min(b.abs() as f64) >= peak * 1e-6 {
                away = Some(away.map_or(u, |m| m.max(u)));
            }
        }
    }
    (all, away)
}

#[test]
fn a_max_ulp_set_near_zero_is_noted_with_the_max_away_from_zero() {
    let dir = tempdir();
    let keep = dir.path().join("outputs");
    let (report, _) = cnn_report(&["--no-baseline", "--save-outputs", keep.to_str().expect("utf-8")]);
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut noted = 0;
    for output in ["logits", "probs"] {
        let (all, away) = max_ulps(&saved(&keep, "cpu", output), &saved(&keep, "golden", output));
        assert_eq!(output_max_ulp(&report, output), all, "{output}");
        let note = notes
            .iter()
            .find(|n| n.starts_with(&format!("{output}: the max ULP comes from values near zero")));
        match away.filter(|a| *a < all) {
            Some(a) => {
                let note = note.unwrap_or_else(|| panic!("no note on {output}: {notes:?}"));
                assert!(note.contains(&format!("cpu {a} (not {all})")), "{note}");
                noted += 1;
            }
            None => assert!(note.is_none(), "{output}: {note:?}"),
        }
    }
    // The quantized softmax rounds small probabilities to 0: a golden 6e-4 against 0 is ~10^9 ULP.
    assert_eq!(noted, 1, "{notes:?}");
}

fn output_max_ulp(report: &Value, name: &str) -> u64 {
    output(report, "cpu", name)["max_ulp"].as_u64().expect("max_ulp")
}

/// `compare` of the CNN fixture on the CPU EP, JSON report.
fn cnn_report(extra: &[&str]) -> (Value, String) {
    let (cnn, fp32) = (cnn(), cnn_fp32());
    let mut args = vec![
        cnn.as_str(),
        "--reference",
        fp32.as_str(),
        "-t",
        "cpu",
        "--fingerprint",
        "off",
    ];
    args.extend_from_slice(extra);
    let (code, report, stderr) = compare_json(&args);
    assert_eq!(code, 0, "{stderr}");
    (report, stderr)
}

// ---------------------------------------------------------------------------------------------
// matrix

#[test]
fn matrix_names_its_search_as_given_and_explains_runs_on_everywhere() {
    let dir = tempdir();
    let d = dir.path();
    let (json, md, html) = (d.join("m.json"), d.join("m.md"), d.join("m.html"));
    let int8 = format!("int8={}", repo("fixtures/models/cnn_qdq_u8.onnx").display());
    let fp32 = repo("fixtures/models/cnn_fp32.onnx");
    let out = bin()
        .args([
            "matrix",
            "--variant",
            &int8,
            "--reference",
            fp32.to_str().expect("utf-8"),
        ])
        .args(["-t", "cpu", "-t", "qnn:sm8650", "--min-sqnr", "28"])
        .args(["--search", "widen16", "--max-promoted", "1"])
        .args(["--out", json.to_str().expect("utf-8")])
        .args(["--markdown", md.to_str().expect("utf-8")])
        .args(["--html", html.to_str().expect("utf-8")])
        .output()
        .expect("run matrix");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(matches!(out.status.code(), Some(0 | 1)), "{stderr}");
    assert!(stderr.contains("matrix: --search widen16 on int8"), "{stderr}");
    assert!(!stderr.contains("a16 search"), "{stderr}");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("--out")).expect("JSON");
    // The recommendation's column: every value is the target's id, `cpu` or `-`, and explained.
    for r in m["recommendations"].as_array().expect("recommendations") {
        let on = r["run_on"].as_str().unwrap_or("-");
        assert!(on == "-" || on == "cpu" || r["target"] == on, "{r}");
    }
    let legend = "runs on: the target's id (the variant runs on that target)";
    assert!(stdout.contains(legend), "{stdout}");
    assert!(std::fs::read_to_string(&md).expect("--markdown").contains(legend));
    let page = std::fs::read_to_string(&html).expect("--html");
    assert!(page.contains(&legend.replace('\'', "&#39;")) || page.contains(legend));
    assert!(!page.contains("Widen16"), "the enum's name on the page");
    // The search's steps: one value per failing target, in the order of its dB columns.
    let search = &m["remedies"][0];
    let failing: Vec<&str> = search["failing_targets"]
        .as_array()
        .expect("failing")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        failing,
        ["qnn:sm8650"],
        "the int8 CNN is below 28 dB on the HTP only (README: 25.06)"
    );
    let steps = search["steps"].as_array().expect("steps");
    assert!(!steps.is_empty(), "{search}");
    assert!(
        stdout.contains("runs on: where the changed layer ran on each failing target"),
        "{stdout}"
    );
    for (i, st) in steps.iter().enumerate() {
        let want: Vec<&str> = failing
            .iter()
            .map(|t| st["placement"][*t]["layer_runs_on"].as_str().unwrap_or("-"))
            .collect();
        let row = stdout
            .lines()
            .find(|l| l.starts_with('│') && l.split('│').nth(1).is_some_and(|c| c.trim() == (i + 1).to_string()))
            .unwrap_or_else(|| panic!("no step row {} in\n{stdout}", i + 1));
        let cells: Vec<&str> = row.split('│').map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells.last().copied(), Some(want.join(",").as_str()), "{row}");
        assert!(want.iter().all(|w| ["npu", "cpu", "-"].contains(w)), "{want:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// schema and check-config

#[test]
fn schema_names_every_schema_it_prints() {
    let kinds = ["report", "triage", "matrix", "pipeline", "eval", "repro", "generation"];
    let top = String::from_utf8_lossy(&run(&["--help"]).stdout).to_string();
    let line = top
        .lines()
        .find(|l| l.trim_start().starts_with("schema "))
        .unwrap_or_else(|| panic!("no schema command in\n{top}"));
    let help = String::from_utf8_lossy(&run(&["schema", "--help"]).stdout).to_string();
    for k in kinds {
        assert!(line.contains(k), "{k} not in the command list's line {line:?}");
        assert!(help.contains(k), "{k} not in schema --help:\n{help}");
        // Each is what the tool prints, and published under docs/.
        let out = run(&["schema", k]);
        assert_eq!(out.status.code(), Some(0));
        let printed: Value = serde_json::from_slice(&out.stdout).expect("schema JSON");
        let file = repo(&format!("docs/{k}.schema.json"));
        let committed: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).expect("committed schema")).expect("JSON");
        assert_eq!(printed, committed, "{}", file.display());
    }
}

/// `check-config` run in `dir` with no FILE and no NPU_AUDIT_CONFIG: (exit code, stderr).
fn check_config_in(dir: &Path) -> (Option<i32>, String) {
    let out = bin()
        .current_dir(dir)
        .env_remove("NPU_AUDIT_CONFIG")
        .arg("check-config")
        .output()
        .expect("run check-config");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn check_config_without_a_file_says_where_it_looked_and_how_to_write_one() {
    let dir = tempdir();
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    // Outside a repository: only the current directory.
    let (code, err) = check_config_in(&root);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for needle in [
        "npu-audit: error: no policy file: no npu-audit.toml in ",
        root.to_str().expect("utf-8"),
        "outside a repository only the current directory is looked at",
        "NPU_AUDIT_CONFIG",
        "docs/policy.md",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    // In a repository: from the current directory up to its root.
    let project = root.join("project");
    let deep = project.join("models").join("v2");
    std::fs::create_dir_all(&deep).expect("mkdir");
    std::fs::create_dir_all(project.join(".git")).expect("mkdir");
    let (code, err) = check_config_in(&deep);
    assert_eq!(code, Some(2), "{err}");
    let looked = format!(
        "in {} or its parents up to the repository's root {}",
        deep.display(),
        project.display()
    );
    assert!(err.contains(&looked), "{looked:?} not in {err}");
    // Once written there, it is found and checked.
    std::fs::write(project.join("npu-audit.toml"), "[defaults]\nmin_sqnr_db = 30\n").expect("write");
    let out = bin()
        .current_dir(&deep)
        .env_remove("NPU_AUDIT_CONFIG")
        .arg("check-config")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

// ---------------------------------------------------------------------------------------------
// references

/// Every text file under `dir` (recursively), skipping binaries and build output.
fn text_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | "corpus" | "regressions" | "artifacts") {
                text_files(&p, out);
            }
        } else if std::fs::read_to_string(&p).is_ok() {
            out.push(p);
        }
    }
}

/// The scripts and documents name only the repository's own paths: no machine's directory
/// (`/work/...`) and no document the repository does not hold (`docs/NAME.md`, `CONTRACT.md`).
#[test]
fn scripts_and_docs_name_only_files_the_repository_holds() {
    let mut files = Vec::new();
    for dir in ["scripts", "docs", "tests/data", "fixtures", "benches"] {
        text_files(&repo(dir), &mut files);
    }
    files.push(repo("README.md"));
    let doc_ref = regex::Regex::new(r"\b((?:docs|tests|scripts|fixtures)/[A-Za-z0-9_./-]+\.md)\b").unwrap();
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let shown = f.strip_prefix(repo("")).unwrap().display().to_string();
        for (n, line) in text.lines().enumerate() {
            if line.contains("/work/") {
                problems.push(format!("{shown}:{}: a machine's path: {}", n + 1, line.trim()));
            }
            if line.contains("CONTRACT.md") || line.contains("DESIGN.md") {
                problems.push(format!(
                    "{shown}:{}: a document outside the repository: {}",
                    n + 1,
                    line.trim()
                ));
            }
            for m in doc_ref.captures_iter(line) {
                if !repo(&m[1]).is_file() {
                    problems.push(format!("{shown}:{}: {} does not exist", n + 1, &m[1]));
                }
            }
        }
    }
    assert!(files.len() > 30, "the scan found {} files", files.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
