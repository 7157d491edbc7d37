//! Terminal tables at 80, 100 and 120 columns, as a person sees them: the real binary runs under
//! a pseudo-terminal (util-linux `script`, the terminal sized with `stty` inside it), and its
//! output, stripped of ANSI styles, must fit the width line by line while every figure the same
//! run reports in its JSON (SQNR, max ULP, top-1, differing counts, statuses) stands whole in its
//! target's row, or in its target's block when the table falls back to one record per block.

use crate::common;

use std::path::Path;

use common::{db_text, num, repo, tempdir};
use serde_json::Value;

/// The widths every table is checked at.
const WIDTHS: [usize; 3] = [80, 100, 120];

/// `text` quoted for `sh`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Runs the binary with `args` from the repository root under a pseudo-terminal `cols` wide, its
/// stderr (progress) kept apart; returns what the terminal showed, without ANSI styles and
/// carriage returns. The run must exit with 0.
fn pty(args: &[&str], cols: usize) -> String {
    let script = Path::new("/usr/bin/script");
    assert!(
        script.is_file(),
        "util-linux `script` (Debian's bsdutils) is needed to run the binary under a pseudo-terminal"
    );
    let dir = tempdir();
    let stderr = dir.path().join("stderr");
    let bin = assert_cmd::cargo::cargo_bin("npu-audit");
    let command: Vec<String> = std::iter::once(bin.display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .map(|a| quote(&a))
        .collect();
    let shell = format!(
        "stty cols {cols} rows 50 && exec {} 2>{}",
        command.join(" "),
        quote(&stderr.display().to_string())
    );
    let out = std::process::Command::new(script)
        .args(["-qec", &shell, "/dev/null"])
        .current_dir(repo(""))
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .env_remove("NPU_AUDIT_FAULT_INJECT")
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script");
    let shown = plain(&String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{args:?} at {cols} columns: {}\n{shown}\n{}",
        out.status,
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    assert_fits(&shown, cols, args);
    shown
}

/// Terminal output without ANSI escape sequences and carriage returns.
fn plain(text: &str) -> String {
    let ansi =
        regex::Regex::new(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>]")
            .expect("regex");
    ansi.replace_all(text, "").replace('\r', "")
}

/// Every line at most `cols` columns wide (each character one column: box drawing, `·`, `±`,
/// `…` are all narrow).
fn assert_fits(text: &str, cols: usize, what: &[&str]) {
    assert!(!text.trim().is_empty(), "{what:?} printed nothing");
    for line in text.lines() {
        assert!(
            line.chars().count() <= cols,
            "{what:?} at {cols} columns: a line of {} characters:\n{line}\n\n{text}",
            line.chars().count()
        );
    }
}

/// The lines of the paragraph (blank-line separated) whose first line starts with `heading`.
fn paragraph<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim_start() == heading || l.trim_start().starts_with(&format!("{heading} ")))
        .unwrap_or_else(|| panic!("no paragraph '{heading}' in\n{text}"));
    lines[start..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .copied()
        .collect()
}

/// The cells of a table line (`│` or `|` between them), trimmed; empty when it is no row.
fn cells(line: &str) -> Vec<String> {
    let sep = if line.contains('│') { '│' } else { '|' };
    let t = line.trim();
    if !t.contains(sep) {
        return Vec::new();
    }
    let t = t.strip_prefix(sep).unwrap_or(t);
    let t = t.strip_suffix(sep).unwrap_or(t);
    t.split(sep).map(|c| c.trim().to_string()).collect()
}

/// The value of `column` in the row (or block) of `row` within the paragraph under `heading`: a
/// table's header may be wrapped over several lines, a block's value over several lines.
fn lookup(text: &str, heading: &str, row: &str, column: &str) -> String {
    value_in(&paragraph(text, heading), row, column)
}

/// The value of `column` in the row (or block) of `row` among `lines`.
fn value_in(lines: &[&str], row: &str, column: &str) -> String {
    let found = if lines.iter().any(|l| l.trim_start().starts_with("-[ ")) {
        block_value(lines, row, column)
    } else {
        table_value(lines, row, column)
    };
    found.unwrap_or_else(|| panic!("no '{column}' of '{row}' in\n{}", lines.join("\n")))
}

fn block_value(lines: &[&str], row: &str, column: &str) -> Option<String> {
    let start = lines.iter().position(|l| {
        let t = l.trim_start();
        t.starts_with("-[ ")
            && t.split(" ]")
                .next()
                .is_some_and(|title| title[3..].split_whitespace().any(|w| w == row))
    })?;
    let mut value: Option<String> = None;
    for line in lines[start + 1..].iter().map(|l| l.trim_start()) {
        if line.starts_with("-[ ") {
            break;
        }
        let Some((name, v)) = line.split_once('│') else {
            break;
        };
        match (&mut value, name.trim()) {
            (None, n) if n == column => value = Some(v.trim().to_string()),
            (Some(so_far), "") => {
                so_far.push(' ');
                so_far.push_str(v.trim());
            }
            (Some(_), _) => break,
            _ => {}
        }
    }
    value
}

fn table_value(lines: &[&str], row: &str, column: &str) -> Option<String> {
    let rows: Vec<Vec<String>> = lines.iter().map(|l| cells(l)).filter(|c| !c.is_empty()).collect();
    let rule = lines.iter().position(|l| l.contains('├') || l.contains("-+-"))?;
    let header_lines = lines[..rule].iter().map(|l| cells(l)).filter(|c| !c.is_empty());
    let mut header: Vec<String> = Vec::new();
    for parts in header_lines {
        header.resize(parts.len(), String::new());
        for (h, p) in header.iter_mut().zip(parts) {
            let glue = if h.is_empty() || h.ends_with('-') || h.ends_with('/') || p.is_empty() {
                ""
            } else {
                " "
            };
            *h = format!("{h}{glue}{p}");
        }
    }
    let at = header.iter().position(|h| h == column)?;
    let found = rows
        .iter()
        .find(|c| c.first().and_then(|k| k.split_whitespace().next()) == Some(row))?;
    found.get(at).cloned()
}

/// The TARGETS, OUTPUT and TARGET vs TARGET tables of a compare report, checked against its JSON.
fn check_compare(shown: &str, report: &Value) {
    let targets = report["targets"].as_array().expect("targets");
    for t in targets {
        let id = t["id"].as_str().expect("id");
        let status = t["status"].as_str().expect("status");
        assert_eq!(lookup(shown, "TARGETS", id, "status"), status, "{id}\n{shown}");
    }
    for t in targets.iter().filter(|t| t["status"] == "ok") {
        let id = t["id"].as_str().expect("id");
        for o in t["outputs"].as_array().expect("outputs") {
            let heading = format!("OUTPUT {}", o["name"].as_str().expect("name"));
            assert_eq!(
                lookup(shown, &heading, id, "SQNR dB"),
                db_text(&o["sqnr_db"]),
                "{id} {heading}"
            );
            let ulp = o["max_ulp"].as_u64().map_or("-".into(), |u| u.to_string());
            assert_eq!(lookup(shown, &heading, id, "max ULP"), ulp, "{id} {heading}");
            let top1 = format!("{:.1}%", 100.0 * num(&o["top1_agreement"]));
            assert_eq!(lookup(shown, &heading, id, "top-1"), top1, "{id} {heading}");
        }
    }
    for e in report["agreement"].as_array().expect("agreement") {
        let Some(n) = e["differing_elements"].as_u64() else {
            continue;
        };
        let heading = format!(
            "TARGET vs TARGET: differing elements of {}",
            e["output"].as_str().expect("output")
        );
        let (a, b) = (e["a"].as_str().expect("a"), e["b"].as_str().expect("b"));
        assert_eq!(lookup(shown, &heading, a, b), n.to_string(), "{a} vs {b}");
        assert_eq!(lookup(shown, &heading, b, a), n.to_string(), "{b} vs {a}");
    }
}

/// The audit of the issue, run once on the terminal at 100 columns with its report kept, then
/// rendered again from that report at 80 and 120 columns. OpenVINO's outcome depends on the host's
/// instruction set: whichever it is, its status is shown in its row.
#[test]
fn compare_keeps_every_figure_and_status_whole_at_80_100_and_120_columns() {
    let dir = tempdir();
    let json = dir.path().join("report.json");
    let (model, reference) = (common::cnn(), common::cnn_fp32());
    let mut args = vec!["compare", &model, "--reference", &reference];
    for t in ["cpu", "cpu:noopt", "qnn:sm8650", "qnn:sm8850", "openvino"] {
        args.extend(["-t", t]);
    }
    let json_arg = json.display().to_string();
    args.extend(["--allow-failure", "openvino", "--out", &json_arg]);
    let live = pty(&args, 100);
    let report: Value = serde_json::from_slice(&std::fs::read(&json).expect("report")).expect("json");
    let openvino = common::target(&report, "openvino")["status"].as_str().expect("status");
    assert!(["ok", "failed"].contains(&openvino), "openvino ended {openvino}");
    check_compare(&live, &report);
    for cols in [80, 120] {
        check_compare(&pty(&["render", &json_arg], cols), &report);
    }
}

/// The per-layer audit of the committed report (`compare --layers all` on the CNN fixture): the
/// worst layers of every target with their SQNR, at every width.
#[test]
fn layer_tables_keep_their_figures_whole() {
    let path = repo("fixtures/reports/cnn_layers.json");
    let report: Value = serde_json::from_slice(&std::fs::read(&path).expect("report")).expect("json");
    for cols in WIDTHS {
        let shown = pty(&["render", path.to_str().expect("utf-8")], cols);
        check_compare(&shown, &report);
        let mut checked = 0;
        for t in report["targets"].as_array().expect("targets") {
            let Some(layers) = t["layers"].as_array().filter(|l| !l.is_empty()) else {
                continue;
            };
            // The target's part of LAYERS: its name alone on a line, down to the next blank line.
            let heading = format!("  {}", t["id"].as_str().expect("id"));
            let lines: Vec<&str> = shown.lines().collect();
            let start = lines.iter().position(|l| *l == heading).expect("the target's layers");
            let worst: Vec<&str> = lines[start..]
                .iter()
                .take_while(|l| !l.trim().is_empty())
                .copied()
                .collect();
            for l in layers {
                let index = l["index"].to_string();
                let title = format!("-[ # {index} ]");
                if !worst
                    .iter()
                    .any(|r| r.trim_start().starts_with(&title) || cells(r).first() == Some(&index))
                {
                    continue;
                }
                let sqnr = l["sqnr_db"].as_f64().map_or("-".into(), |_| db_text(&l["sqnr_db"]));
                assert_eq!(value_in(&worst, &index, "SQNR dB"), sqnr, "layer #{index} at {cols}");
                checked += 1;
            }
        }
        assert!(
            checked >= 10,
            "only {checked} layer rows found at {cols} columns:\n{shown}"
        );
    }
}

/// `targets` and `runtime list`: every row keeps its status (`can run`, `state`) beside its name.
#[test]
fn targets_and_runtime_list_fit_and_keep_each_rows_status() {
    let targets: Value = serde_json::from_slice(&common::run(&["targets", "--format", "json"]).stdout).expect("json");
    let runtimes: Value =
        serde_json::from_slice(&common::run(&["runtime", "list", "--format", "json"]).stdout).expect("json");
    for cols in WIDTHS {
        let shown = pty(&["targets"], cols);
        let first = shown.lines().next().unwrap_or_default().trim_start().to_string();
        for t in targets.as_array().expect("targets") {
            let id = t["target"].as_str().expect("target");
            let can = if t["available"] == true { "yes" } else { "no" };
            assert_eq!(lookup(&shown, &first, id, "can run"), can, "{id} at {cols}");
        }
        let shown = pty(&["runtime", "list"], cols);
        let first = shown.lines().next().unwrap_or_default().trim_start().to_string();
        for r in runtimes.as_array().expect("runtimes") {
            let key = r["key"].as_str().expect("key");
            let state = r["state"].as_str().expect("state");
            let release = format!(
                "{}{}",
                r["version"].as_str().expect("version"),
                if r["default"] == true { " (default)" } else { "" }
            );
            // A key has several releases: its rows are told apart by release.
            let rows = paragraph(&shown, &first);
            let shown_states: Vec<(String, String)> = records_of(&rows, key);
            assert!(
                shown_states.contains(&(release.clone(), state.to_string())),
                "{key} {release} {state} at {cols}: {shown_states:?}\n{shown}"
            );
        }
    }
}

/// (release, state) of every `runtime list` row or block of `key`.
fn records_of(lines: &[&str], key: &str) -> Vec<(String, String)> {
    if lines.iter().any(|l| l.starts_with("-[ ")) {
        let starts: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i] == format!("-[ key {key} ]") || lines[i].starts_with(&format!("-[ key {key} ]-")))
            .collect();
        return starts
            .into_iter()
            .filter_map(|i| {
                let block = &lines[i..];
                Some((block_value(block, key, "release")?, block_value(block, key, "state")?))
            })
            .collect();
    }
    lines
        .iter()
        .map(|l| cells(l))
        .filter(|c| c.len() >= 5 && c[0] == key)
        .map(|c| (c[2].clone(), c[4].clone()))
        .collect()
}

/// `fingerprint` of two targets on one probe: the verdict table (and the evidence tables the HTP
/// simulation's verdict brings) fit, and each verdict cell is the one the piped table prints.
#[test]
fn the_fingerprint_table_fits_and_keeps_each_verdict() {
    let args = [
        "fingerprint",
        "-t",
        "cpu",
        "-t",
        "qnn:sm8650",
        "--probe",
        "requantize_u8",
    ];
    let piped = common::run(&args);
    assert!(piped.status.success(), "{}", String::from_utf8_lossy(&piped.stderr));
    let piped = String::from_utf8_lossy(&piped.stdout).to_string();
    let expected = |target: &str| lookup(&piped, "FINGERPRINT", "requantize_u8", target);
    for cols in WIDTHS {
        let shown = pty(&args, cols);
        for target in ["cpu", "qnn:sm8650"] {
            assert_eq!(
                lookup(&shown, "FINGERPRINT", "requantize_u8", target),
                expected(target),
                "{target} at {cols}:\n{shown}"
            );
            let status = lookup(&shown, "FINGERPRINT", "(target)", target);
            assert!(["cached", "ran now"].contains(&status.as_str()), "{target}: {status}");
        }
    }
}

/// `matrix` of two variants on two targets: every cell's SQNR and the recommendation per target.
#[test]
fn the_matrix_tables_fit_and_keep_each_cell() {
    let dir = tempdir();
    let json = dir.path().join("m.json");
    for cols in WIDTHS {
        let shown = pty(
            &[
                "matrix",
                "--variant",
                &format!("int8={}", common::cnn()),
                "--variant",
                &format!("a16w8={}", repo("fixtures/models/cnn_qdq_a16w8.onnx").display()),
                "--reference",
                &common::cnn_fp32(),
                "-t",
                "cpu",
                "-t",
                "qnn:sm8650",
                "--out",
                json.to_str().expect("utf-8"),
            ],
            cols,
        );
        let m: Value = serde_json::from_slice(&std::fs::read(&json).expect("matrix")).expect("json");
        for c in m["cells"].as_array().expect("cells") {
            let (variant, target) = (
                c["variant"].as_str().expect("variant"),
                c["target"].as_str().expect("target"),
            );
            let mark = if c["meets_policy"] == true { " ✓" } else { "" };
            let expected = match c["status"].as_str().expect("status") {
                "ok" => format!("{}{mark}", db_text(&c["sqnr_db"])),
                status => status.to_string(),
            };
            assert_eq!(
                lookup(&shown, "MATRIX", variant, target),
                expected,
                "{variant} on {target}"
            );
        }
        for r in m["recommendations"].as_array().expect("recommendations") {
            let target = r["target"].as_str().expect("target");
            let ship = r["variant"].as_str().unwrap_or("none");
            assert_eq!(lookup(&shown, "RECOMMENDATION", target, "ship"), ship, "{target}");
        }
    }
}

/// `triage` of three device reports of the committed fleet: triaged once into a store, then read
/// back from it on the terminal at every width; each report's verdict and SQNR in its row.
#[test]
fn the_triage_tables_fit_and_keep_each_verdict() {
    let dir = tempdir();
    let db_path = dir.path().join("t.db");
    let fleet = "fixtures/device_reports/fleet";
    let reports = [
        format!("{fleet}/a_s24"),
        format!("{fleet}/b_s24_round"),
        format!("{fleet}/h_s22_cpu"),
    ];
    let mut args: Vec<&str> = vec!["triage", "fixtures/real/ppocr_cls_qdq_u8.onnx"];
    args.extend(reports.iter().map(String::as_str));
    let db_arg = db_path.display().to_string();
    args.extend([
        "--golden",
        "golden/ppocr_cls_fp32",
        "--candidate",
        "cpu",
        "--candidate",
        "qnn:sm8650",
        "--db",
        &db_arg,
    ]);
    let piped = common::bin()
        .current_dir(repo(""))
        .args(&args)
        .args(["--format", "json"])
        .output()
        .expect("triage");
    assert!(piped.status.success(), "{}", String::from_utf8_lossy(&piped.stderr));
    let triage: Value = serde_json::from_slice(&piped.stdout).expect("json");
    // At 72 columns the report paths are cut from their start, a table still.
    let narrow = pty(&args, 72);
    assert!(narrow.contains("│ …/fleet/a_s24 │"), "{narrow}");
    for cols in WIDTHS.into_iter().chain([72]) {
        let shown = pty(&args, cols);
        for (i, e) in triage["reports"].as_array().expect("reports").iter().enumerate() {
            let row = (i + 1).to_string();
            let copy = if e["duplicate_of"].is_string() { " (copy)" } else { "" };
            let verdict = format!("{}{copy}", e["verdict"]["kind"].as_str().expect("kind"));
            assert_eq!(
                lookup(&shown, "TRIAGE", &row, "verdict"),
                verdict,
                "report {row} at {cols}"
            );
            let sqnr = if e["sqnr_db"].is_null() {
                "-".into()
            } else {
                db_text(&e["sqnr_db"])
            };
            assert_eq!(
                lookup(&shown, "TRIAGE", &row, "SQNR dB"),
                sqnr,
                "report {row} at {cols}"
            );
            // A path is cut from its start: the report's own name, where rows differ, stays.
            let name = reports[i].rsplit('/').next().expect("name");
            let path = lookup(&shown, "TRIAGE", &row, "report");
            assert!(path.ends_with(&format!("/{name}")), "report {row} at {cols}: {path:?}");
        }
    }
}
