//! The CI formats end to end: `compare --out --markdown --junit --node-data` on the CNN fixture
//! with a limit one output passes and the other fails, each file checked against the JSON
//! report of the same run; then `render` of the saved report writes the same files.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;

/// Splits a Markdown table row into cells at unescaped `|`, removing the escapes.
fn cells(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.trim().trim_start_matches('|').chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '|' => {
                out.push(cur.trim().to_string());
                cur.clear();
            }
            c => cur.push(c),
        }
    }
    out
}

/// Body rows of the Markdown table after the line starting with `title`.
fn table_rows<'a>(md: &'a str, title: &str) -> Vec<&'a str> {
    let Some(at) = md.find(title) else { return Vec::new() };
    md[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect()
}

fn rules(report: &Value) -> &Vec<Value> {
    report["gate"]["rules"].as_array().expect("gate.rules")
}

fn passes(rule: &Value) -> bool {
    rule["pass"].as_bool().expect("pass")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Node-data file name of a target (`--node-data` replaces characters other than letters,
/// digits, `-` and `.` with `_`).
fn node_data_file(dir: &Path, target: &str) -> std::path::PathBuf {
    dir.join(format!("{}.json", file_name_of(target)))
}

fn check_junit(xml: &str, report: &Value) {
    let all = rules(report);
    let failing = all.iter().filter(|r| !passes(r)).count();
    let targets = report["targets"].as_array().expect("targets");
    // A target with no rule (the baseline the audit added) gets one `ran` test case.
    let extra: Vec<&Value> = targets
        .iter()
        .filter(|t| !all.iter().any(|r| r["target"] == t["id"]))
        .collect();
    assert!(extra.iter().all(|t| t["status"] == "ok"));
    let tests = all.len() + extra.len();
    assert_eq!(xml.matches("<testcase ").count(), tests, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), failing, "{xml}");
    let parsed = parse_junit(xml);
    let name = format!("npu-audit {}", report["model"]["path"].as_str().expect("model path"));
    assert_eq!(parsed["name"], name.as_str());
    assert_eq!(parsed["skipped"], 0);
    assert_eq!(parsed["tests"], tests);
    assert_eq!(parsed["failures"], failing);
    assert_eq!(parsed["errors"], 0);
    let suites = parsed["suites"].as_array().expect("suites");
    assert_eq!(suites.len(), targets.len());
    for (suite, target) in suites.iter().zip(targets) {
        let id = target["id"].as_str().expect("id");
        assert_eq!(suite["name"], id);
        let wall = num(&target["timing"]["wall_ms"]) / 1000.0;
        assert!((suite["time"].as_f64().expect("time") - wall).abs() < 1e-3);
        let cases = suite["cases"].as_array().expect("cases");
        let own: Vec<&Value> = all.iter().filter(|r| r["target"] == id).collect();
        let want_cases = own.len().max(1);
        assert_eq!(cases.len(), want_cases, "{id}");
        assert_eq!(suite["tests"], want_cases);
        assert_eq!(suite["failures"], own.iter().filter(|r| !passes(r)).count());
        for (case, rule) in cases.iter().zip(&own) {
            assert_eq!(case["classname"], format!("npu-audit.{id}"));
            assert_eq!(
                case["name"],
                format!(
                    "{} {}",
                    rule["rule"].as_str().unwrap_or(""),
                    rule["output"].as_str().unwrap_or("")
                )
            );
            let outcome = if passes(rule) { "pass" } else { "failure" };
            assert_eq!(case["outcome"], outcome, "{case}");
            if !passes(rule) {
                let message = case["message"].as_str().expect("failure message");
                assert!(message.starts_with("measured "), "{message}");
                assert!(
                    message.ends_with(&format!("({})", rule["origin"].as_str().unwrap_or(""))),
                    "{message}"
                );
            }
        }
        if own.is_empty() {
            assert_eq!(cases[0]["name"], "ran");
            assert_eq!(cases[0]["outcome"], "pass");
        }
    }
}

fn check_markdown(md: &str, report: &Value) {
    let all = rules(report);
    let failing: Vec<&Value> = all.iter().filter(|r| !passes(r)).collect();
    let passing = all.len() - failing.len();
    assert!(md.starts_with("### ❌ FAIL · npu-audit · `"), "{md}");
    assert!(md
        .lines()
        .next()
        .is_some_and(|l| l.contains(report["model"]["path"].as_str().unwrap_or("?"))));
    let rows = table_rows(md, "**Failing rules**");
    assert_eq!(rows.len(), failing.len(), "{md}");
    for (row, rule) in rows.iter().zip(&failing) {
        let c = cells(row);
        assert_eq!(c.len(), 6, "{row}");
        for (cell, key) in c.iter().zip(["rule", "target", "output"]) {
            assert_eq!(cell, rule[key].as_str().unwrap_or("?"), "{row}");
        }
        assert_eq!(c[5], rule["origin"].as_str().unwrap_or("?"));
    }
    assert!(
        md.contains(&format!("<details><summary>{passing} passing rule")),
        "{md}"
    );
    let targets = report["targets"].as_array().expect("targets");
    let rows = table_rows(md, "**Targets**");
    assert_eq!(rows.len(), targets.len(), "{md}");
    assert!(md.len() < 60_000);
}

fn check_node_data(dir: &Path, report: &Value) {
    let targets = report["targets"].as_array().expect("targets");
    let mut files = 0;
    for t in targets {
        let id = t["id"].as_str().expect("id");
        let layers = t["layers"].as_array().expect("layers tapped");
        assert!(!layers.is_empty(), "{id}");
        let mut want: BTreeMap<&str, f64> = BTreeMap::new();
        for l in layers {
            if l["sqnr_db"].is_null() {
                continue;
            }
            let v = num(&l["sqnr_db"]).clamp(-200.0, 200.0);
            let e = want.entry(l["node"].as_str().expect("node")).or_insert(v);
            *e = e.min(v);
        }
        let path = node_data_file(dir, id);
        let doc: Value = serde_json::from_str(&read(&path)).expect("node data is JSON");
        files += 1;
        let results = doc["results"].as_object().expect("results");
        assert_eq!(results.len(), want.len(), "{id}: one entry per layer node");
        for (node, v) in &want {
            assert_eq!(results[*node]["value"].as_f64(), Some(*v), "{id} {node}");
        }
        assert!(doc["thresholds"].as_array().is_some_and(|t| !t.is_empty()));
        assert!(doc["name"].as_str().is_some_and(|n| n.starts_with(id)));
    }
    // Besides one cumulative file per target: one `.introduced.json` per target with isolated
    // figures, and `worst.json` over the targets.
    let names: Vec<String> = std::fs::read_dir(dir)
        .expect("node-data dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .collect();
    let cumulative = names
        .iter()
        .filter(|n| !n.ends_with(".introduced.json") && *n != "worst.json")
        .count();
    assert_eq!(cumulative, files, "{names:?}");
    assert!(names.iter().any(|n| n == "worst.json"), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| n.ends_with(".introduced.json")).count(),
        files,
        "{names:?}"
    );
}

#[test]
fn markdown_junit_and_node_data_match_the_json_report() {
    let dir = tempdir();
    let d = dir.path();
    let (json, md, xml, nodes) = (d.join("r.json"), d.join("r.md"), d.join("r.xml"), d.join("nodes"));
    let args = [
        "compare",
        &cnn(),
        "--reference",
        &cnn_fp32(),
        "-t",
        "cpu",
        // On these inputs the CPU EP reaches about 36.4 dB on `logits` and 32.5 dB on `probs`:
        // one rule passes, one fails.
        "--min-sqnr",
        "34.5",
        "--layers",
        "all",
        "--fingerprint",
        "off",
        "--out",
        json.to_str().expect("path"),
        "--markdown",
        md.to_str().expect("path"),
        "--junit",
        xml.to_str().expect("path"),
        "--node-data",
        nodes.to_str().expect("path"),
    ];
    let out = run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: Value = serde_json::from_str(&read(&json)).expect("JSON report");
    let all = rules(&report);
    assert!(all.iter().any(|r| !passes(r)), "a failing rule: {}", report["gate"]);
    assert!(
        all.iter().any(|r| passes(r) && r["rule"] == "min_sqnr_db"),
        "a passing rule"
    );

    let (md_text, xml_text) = (read(&md), read(&xml));
    check_junit(&xml_text, &report);
    check_markdown(&md_text, &report);
    check_node_data(&nodes, &report);

    // `render` of the saved report writes the same files.
    let again = d.join("again");
    std::fs::create_dir(&again).expect("mkdir");
    let (md2, xml2, nodes2) = (again.join("r.md"), again.join("r.xml"), again.join("nodes"));
    let out = run(&[
        "render",
        json.to_str().expect("path"),
        "--markdown",
        md2.to_str().expect("path"),
        "--junit",
        xml2.to_str().expect("path"),
        "--node-data",
        nodes2.to_str().expect("path"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "render: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read(&md2), md_text);
    assert_eq!(read(&xml2), xml_text);
    for t in report["targets"].as_array().expect("targets") {
        let id = t["id"].as_str().expect("id");
        assert_eq!(
            read(&node_data_file(&nodes2, id)),
            read(&node_data_file(&nodes, id)),
            "{id}"
        );
    }
}
