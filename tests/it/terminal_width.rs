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
    pty_sized(args, cols, 50)
}

/// [`pty`] on a terminal of `rows` rows: 0 is a terminal that sets its columns alone
/// (`stty cols 100` under `script`), which some libraries take for no size at all.
fn pty_sized(args: &[&str], cols: usize, rows: usize) -> String {
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
        "stty cols {cols} rows {rows} && exec {} 2>{}",
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

/// The value of `column` in `row` of whichever table among `lines` has that column: a table too
/// wide for the terminal continues in further tables that repeat its key column.
fn table_value(lines: &[&str], row: &str, column: &str) -> Option<String> {
    tables(lines).iter().find_map(|t| one_table_value(t, row, column))
}

/// `lines` cut into tables, each from its top border (`╭`) on; lines without one are one table.
fn tables<'a>(lines: &[&'a str]) -> Vec<Vec<&'a str>> {
    if !lines.iter().any(|l| l.trim_start().starts_with('╭')) {
        return vec![lines.to_vec()];
    }
    let mut out: Vec<Vec<&str>> = Vec::new();
    for line in lines {
        if line.trim_start().starts_with('╭') {
            out.push(Vec::new());
        }
        if let Some(t) = out.last_mut() {
            t.push(line);
        }
    }
    out
}

/// `a` continued by `b` (a header or a cell wrapped over two lines): no space after a `-` or `/`.
fn glued(a: &str, b: &str) -> String {
    let glue = if a.is_empty() || a.ends_with('-') || a.ends_with('/') || b.is_empty() {
        ""
    } else {
        " "
    };
    format!("{a}{glue}{b}")
}

/// The value of `column` in `row` of one table: its header may be wrapped over several lines, a
/// row over several lines (the continuation's key cell empty).
fn one_table_value(lines: &[&str], row: &str, column: &str) -> Option<String> {
    let rule = lines.iter().position(|l| l.contains('├') || l.contains("-+-"))?;
    let mut header: Vec<String> = Vec::new();
    for parts in lines[..rule].iter().map(|l| cells(l)).filter(|c| !c.is_empty()) {
        header.resize(parts.len(), String::new());
        for (h, p) in header.iter_mut().zip(parts) {
            *h = glued(h, &p);
        }
    }
    let at = header.iter().position(|h| h == column)?;
    let mut rows: Vec<Vec<String>> = Vec::new();
    for parts in lines[rule + 1..].iter().map(|l| cells(l)).filter(|c| !c.is_empty()) {
        match rows.last_mut() {
            Some(last) if parts.first().is_some_and(String::is_empty) => {
                for (cell, more) in last.iter_mut().zip(parts) {
                    *cell = glued(cell, &more);
                }
            }
            _ => rows.push(parts),
        }
    }
    let found = rows
        .iter()
        .find(|c| c.first().and_then(|k| k.split_whitespace().next()) == Some(row))?;
    found.get(at).cloned()
}

/// No table of `text` fell back to one block per row.
fn assert_no_blocks(text: &str, what: &str) {
    let blocks: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("-[ ")).collect();
    assert!(blocks.is_empty(), "{what}: per-row blocks {blocks:?} in\n{text}");
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
    assert_no_blocks(&live, "compare of five targets at 100 columns");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).expect("report")).expect("json");
    let openvino = common::target(&report, "openvino")["status"].as_str().expect("status");
    assert!(["ok", "failed"].contains(&openvino), "openvino ended {openvino}");
    check_compare(&live, &report);
    for cols in [80, 120] {
        check_compare(&pty(&["render", &json_arg], cols), &report);
    }
    let wide = pty(&["render", &json_arg], 120);
    assert_no_blocks(&wide, "compare of five targets at 120 columns");
}

/// A terminal that sets its columns and not its rows (`stty cols 100` alone, as under `script`)
/// is still 100 columns wide: the committed compare report of five targets fits it, its tables
/// still tables (the OUTPUT and TARGETS tables continue in a second table that repeats the target).
#[test]
fn a_terminal_with_only_its_columns_set_is_fitted_to_them() {
    let path = repo("fixtures/reports/cnn.json");
    let report: Value = serde_json::from_slice(&std::fs::read(&path).expect("report")).expect("json");
    let shown = pty_sized(&["render", path.to_str().expect("utf-8")], 100, 0);
    assert_no_blocks(&shown, "render at 100 columns, 0 rows");
    check_compare(&shown, &report);
    // The figures that decide share the first OUTPUT table; the others follow in a second one.
    let logits = paragraph(&shown, "OUTPUT logits");
    let parts = tables(&logits);
    assert_eq!(parts.len(), 2, "{}", logits.join("\n"));
    for column in ["bit-identical", "max abs", "SQNR dB", "excess dB", "top-1"] {
        assert!(
            one_table_value(&parts[0], "cpu", column).is_some(),
            "{column} in the first table"
        );
    }
    for column in ["mean abs", "RMSE", "max ULP", "cosine"] {
        assert!(
            one_table_value(&parts[1], "cpu", column).is_some(),
            "{column} in the second table"
        );
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
        if cols >= 100 {
            assert_no_blocks(&shown, &format!("layers at {cols} columns"));
        }
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

/// The committed fleet (13 reports) at 100 columns: its reports are one table, each report's
/// verdict in its row as the same run's JSON says, and the fleet's tables are tables too.
#[test]
fn the_committed_fleet_triages_into_one_table_at_100_columns() {
    let dir = tempdir();
    let json = dir.path().join("t.json");
    let json_arg = json.display().to_string();
    let mut args = vec![
        "triage",
        "fixtures/real/ppocr_cls_qdq_u8.onnx",
        "fixtures/device_reports/fleet",
        "--golden",
        "golden/ppocr_cls_fp32",
        "--no-db",
        "--no-arm64",
        "--out",
        &json_arg,
    ];
    for t in ["cpu:noopt", "cpu", "qnn:sm8650", "qnn:sm8450"] {
        args.extend(["-t", t]);
    }
    let shown = pty(&args, 100);
    assert_no_blocks(&shown, "triage of the committed fleet at 100 columns");
    let reports = paragraph(&shown, "TRIAGE");
    let top_borders = reports.iter().filter(|l| l.trim_start().starts_with('╭')).count();
    assert_eq!(top_borders, 1, "{}", reports.join("\n"));
    let triage: Value = serde_json::from_slice(&std::fs::read(&json).expect("triage")).expect("json");
    let entries = triage["reports"].as_array().expect("reports");
    assert_eq!(entries.len(), 13);
    for (i, e) in entries.iter().enumerate() {
        let copy = if e["duplicate_of"].is_string() { " (copy)" } else { "" };
        let verdict = format!("{}{copy}", e["verdict"]["kind"].as_str().expect("kind"));
        assert_eq!(lookup(&shown, "TRIAGE", &(i + 1).to_string(), "verdict"), verdict);
    }
    for g in triage["fleet"]["by_chipset"].as_array().expect("by_chipset") {
        let key = g["key"].as_str().expect("key");
        let fleet = paragraph(&shown, "FLEET");
        // A chipset the report did not identify is shown in words; the identified ones by name.
        if let Some(reports) = g["reports"].as_u64().filter(|_| key.starts_with("SM")) {
            assert_eq!(value_in(&fleet, key, "reports"), reports.to_string(), "{key}");
        }
    }
}

/// A matrix of three variants on six targets at 100 columns: the grid continues in a second
/// table rather than becoming blocks, and every cell is where its variant and target say.
#[test]
fn a_matrix_of_six_targets_stays_a_table_at_100_columns() {
    let dir = tempdir();
    let json = dir.path().join("m.json");
    let json_arg = json.display().to_string();
    let int8 = format!("int8={}", common::cnn());
    let a16w8 = format!("a16w8={}", repo("fixtures/models/cnn_qdq_a16w8.onnx").display());
    let fp16 = format!("fp16={},enable_htp_fp16_precision=1", common::cnn_fp32());
    let reference = common::cnn_fp32();
    let mut args = vec![
        "matrix",
        "--variant",
        &int8,
        "--variant",
        &a16w8,
        "--variant",
        &fp16,
        "--reference",
        &reference,
    ];
    for t in [
        "cpu",
        "cpu:noopt",
        "qnn:sm8650",
        "qnn:sm8450",
        "qnn:sm8850",
        "qnn:sm8550",
    ] {
        args.extend(["-t", t]);
    }
    args.extend([
        "--min-sqnr",
        "28",
        "--search",
        "widen16",
        "--max-promoted",
        "3",
        "--out",
        &json_arg,
    ]);
    let shown = pty(&args, 100);
    assert_no_blocks(&shown, "matrix of six targets at 100 columns");
    let m: Value = serde_json::from_slice(&std::fs::read(&json).expect("matrix")).expect("json");
    for c in m["cells"].as_array().expect("cells") {
        let (variant, target) = (
            c["variant"].as_str().expect("variant"),
            c["target"].as_str().expect("target"),
        );
        let mark = if c["meets_policy"] == true { " ✓" } else { "" };
        let expected = format!("{}{mark}", db_text(&c["sqnr_db"]));
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

/// An eval of four targets at 100 columns: the TARGETS table stays a table (the flips and
/// McNemar's p in a second one), each target's accuracy and margin in its row as its JSON says.
#[test]
fn an_eval_of_four_targets_stays_a_table_at_100_columns() {
    let dir = tempdir();
    let set = dir.path().join("set");
    std::fs::create_dir(&set).expect("set dir");
    let mut labels = String::from("id,label\n");
    for (i, label) in [3, 7, 1].iter().enumerate() {
        std::fs::copy(repo("fixtures/inputs/cnn_seed7.npz"), set.join(format!("s{i}.npz"))).expect("sample");
        labels.push_str(&format!("s{i},{label}\n"));
    }
    std::fs::write(set.join("labels.csv"), labels).expect("labels");
    let json = dir.path().join("e.json");
    let (set_arg, json_arg) = (set.display().to_string(), json.display().to_string());
    let (model, reference) = (common::cnn(), common::cnn_fp32());
    let mut args = vec![
        "eval",
        &model,
        "--reference",
        &reference,
        "--dataset",
        &set_arg,
        "--task",
        "classify",
        "--output",
        "logits",
        "--margin",
        "5",
        "--out",
        &json_arg,
    ];
    for t in ["cpu", "cpu:noopt", "qnn:sm8650", "qnn:sm8850"] {
        args.extend(["-t", t]);
    }
    let shown = pty(&args, 100);
    assert_no_blocks(&shown, "eval of four targets at 100 columns");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).expect("eval")).expect("json");
    for t in report["targets"].as_array().expect("targets") {
        let id = t["id"].as_str().expect("id");
        assert_eq!(
            lookup(&shown, "TARGETS", id, "status"),
            t["status"].as_str().expect("status")
        );
        assert_eq!(lookup(&shown, "TARGETS", id, "samples"), t["samples_run"].to_string());
        let vs_ref = t["comparisons"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["against"] == "reference"));
        if let Some(c) = vs_ref {
            let flips = format!("{}/{}", c["fixed"], c["broken"]);
            assert_eq!(lookup(&shown, "TARGETS", id, "fixed/broken"), flips, "{id}");
        }
    }
}
