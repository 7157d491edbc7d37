//! The JUnit XML rendering on a small hand-written report (`tests/data/small_report.json`: a
//! target with failing rules and an output whose name holds a pipe and a line break, a required
//! target that failed, the baseline without rules), parsed back by Python's ElementTree.

use crate::common;

use common::{parse_junit, repo};
use npu_audit::render::junit::render;
use npu_audit::report::compare::Report;
use npu_audit::report::gate::Verdict;

fn small_report() -> Report {
    let text = std::fs::read_to_string(repo("tests/data/small_report.json")).expect("tests/data/small_report.json");
    serde_json::from_str(&text).expect("the small report parses")
}

#[test]
fn small_report_counts_rules_and_run_status() {
    let xml = render(&small_report());
    let parsed = parse_junit(&xml);
    // qnn:sm8650: 3 rules (2 failing); openvino: its failing `ran` rule; cpu:noopt: no rule,
    // so one `ran` case.
    assert_eq!(
        (parsed["tests"].as_u64(), parsed["failures"].as_u64()),
        (Some(5), Some(3))
    );
    let suites = parsed["suites"].as_array().expect("suites");
    let names: Vec<&str> = suites.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["qnn:sm8650", "openvino", "cpu:noopt"]);
    assert_eq!(
        (suites[0]["tests"].as_u64(), suites[0]["failures"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(suites[0]["time"].as_f64(), Some(1.5));
    let first = &suites[0]["cases"][0];
    assert_eq!(first["name"], "min_sqnr_db probs");
    assert_eq!(first["classname"], "npu-audit.qnn:sm8650");
    assert_eq!(first["message"], "measured 25.06, limit 28.00 (--min-sqnr)");
    // The output name's pipe survives; its line break reads as a space.
    assert_eq!(suites[0]["cases"][1]["name"], "max_abs out|put two");
    assert_eq!(
        suites[0]["cases"][1]["message"],
        "not measured, limit 0.01000 (npu-audit.toml:3)"
    );
    let failed_run = &suites[1]["cases"][0];
    assert!(
        failed_run["text"]
            .as_str()
            .is_some_and(|t| t.ends_with("first line of the error\nsecond line")),
        "the full error is in the failure text: {failed_run}"
    );
    assert_eq!(suites[2]["cases"][0]["name"], "ran");
    assert_eq!(suites[2]["cases"][0]["outcome"], "pass");
}

#[test]
fn allowed_failures_are_skipped_and_no_gate_still_reports_runs() {
    let mut r = small_report();
    r.gate.rules.clear();
    r.gate.verdict = Verdict::None;
    r.targets[1].required = false;
    r.targets[1].error = Some("bad\u{1}\u{7} <thing> & \"more\"".into());
    let parsed = parse_junit(&render(&r));
    assert_eq!(
        (
            parsed["tests"].as_u64(),
            parsed["failures"].as_u64(),
            parsed["skipped"].as_u64()
        ),
        (Some(3), Some(0), Some(1))
    );
    let skipped = &parsed["suites"][1]["cases"][0];
    assert_eq!(skipped["outcome"], "skipped");
    assert_eq!(skipped["message"], "allowed to fail: failed: bad <thing> & \"more\"");
    assert_eq!(skipped["time"], "0.250");
    assert_eq!(parsed["suites"][0]["cases"][0]["time"], "1.500");

    // A required target that did not run, without a `ran` rule: a failing `ran` case.
    r.targets[1].required = true;
    let parsed = parse_junit(&render(&r));
    assert_eq!(parsed["failures"].as_u64(), Some(1));
    assert_eq!(
        parsed["suites"][1]["cases"][0]["message"],
        "failed: bad <thing> & \"more\""
    );
}

#[test]
fn names_with_markup_stay_well_formed() {
    let mut r = small_report();
    r.targets[0].id = "qnn:<sm>&\"8650\"'".into();
    for rule in &mut r.gate.rules {
        if rule.target == "qnn:sm8650" {
            rule.target = r.targets[0].id.clone();
            rule.output = "]]> <!-- \u{0} -->".into();
            rule.origin = "<policy> & 'flags'".into();
        }
    }
    let xml = render(&r);
    assert!(!xml.contains('\u{0}'));
    let parsed = parse_junit(&xml);
    assert_eq!(parsed["suites"][0]["name"], "qnn:<sm>&\"8650\"'");
    assert_eq!(
        parsed["suites"][0]["cases"][0]["classname"],
        "npu-audit.qnn:<sm>&\"8650\"'"
    );
    assert_eq!(parsed["suites"][0]["cases"][0]["name"], "min_sqnr_db ]]> <!--  -->");
    assert_eq!(parsed["tests"].as_u64(), Some(5));
}
