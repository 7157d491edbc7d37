//! The JUnit XML rendering of a report, which CI systems (GitHub Actions test reporters, GitLab,
//! Jenkins) show as test results:
//!
//! - `<testsuites>` holds one `<testsuite>` per target (`name` = the target id), in report
//!   order, then one per target that only the rules name (a report edited by hand);
//! - each rule of `gate.rules` on that target is a `<testcase>` with `classname`
//!   `npu-audit.<target>` and `name` `<rule> <output>` (`min_sqnr_db probs`,
//!   `max_fallback_nodes (placement)`, `ran (run)`); a failing rule has
//!   `<failure message="measured X, limit Y (origin)" type="<rule>">` with the details in its
//!   text; a passing `ran` rule of a target that did not run (allowed to fail) is `<skipped/>`;
//! - a target without a `ran` rule gets a `ran` test case when it has no rule at all (a report
//!   without a gate, the baseline) or when it did not run: it passes when the target ran, fails
//!   with the runtime's error when a required target did not, and is `<skipped/>` for one
//!   allowed to fail;
//! - `tests`, `failures`, `errors` (always 0) and `skipped` are counted per suite and in total;
//!   `time` is the target's worker wall time in seconds, on the suite and its `ran` case.
//!
//! Every text and attribute is XML-escaped, and characters XML 1.0 does not allow (control
//! characters other than tab, line feed and carriage return; U+FFFE, U+FFFF) are dropped.

use std::fmt::Write as _;

use super::markdown::{rule_value, rule_values};
use crate::exec::RunStatus;
use crate::report::model::{Report, RuleResult, TargetReport};

/// How a test case ended.
enum Outcome {
    Pass,
    Failure {
        message: String,
        kind: String,
        text: String,
    },
    Skipped(String),
}

struct Case {
    name: String,
    time: Option<f64>,
    outcome: Outcome,
}

struct Suite<'a> {
    name: &'a str,
    target: Option<&'a TargetReport>,
    cases: Vec<Case>,
}

impl Suite<'_> {
    fn failures(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failure { .. }))
            .count()
    }

    fn skipped(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Skipped(_)))
            .count()
    }

    fn seconds(&self) -> f64 {
        self.target
            .and_then(|t| t.timing.as_ref())
            .map_or(0.0, |t| t.wall_ms / 1000.0)
    }
}

/// Renders the report as JUnit XML.
pub fn render(report: &Report) -> String {
    let suites = suites(report);
    let tests: usize = suites.iter().map(|s| s.cases.len()).sum();
    let failures: usize = suites.iter().map(Suite::failures).sum();
    let skipped: usize = suites.iter().map(Suite::skipped).sum();
    let time: f64 = suites.iter().map(Suite::seconds).sum();

    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{time:.3}\">",
        attr(&format!("npu-audit {}", report.model.path))
    );
    for suite in &suites {
        write_suite(&mut s, suite);
    }
    s.push_str("</testsuites>\n");
    s
}

fn suites(report: &Report) -> Vec<Suite<'_>> {
    let mut suites: Vec<Suite<'_>> = report
        .targets
        .iter()
        .map(|t| Suite {
            name: &t.id,
            target: Some(t),
            cases: Vec::new(),
        })
        .collect();
    for r in &report.gate.rules {
        if !suites.iter().any(|s| s.name == r.target) {
            suites.push(Suite {
                name: &r.target,
                target: None,
                cases: Vec::new(),
            });
        }
    }
    for suite in &mut suites {
        let rules: Vec<&RuleResult> = report.gate.rules.iter().filter(|r| r.target == suite.name).collect();
        suite.cases = rules.iter().map(|r| rule_case(r, suite.target)).collect();
        let Some(t) = suite.target else { continue };
        let ran = t.status == RunStatus::Ok;
        if rules.iter().any(|r| r.rule == "ran") || (!rules.is_empty() && ran) {
            continue;
        }
        let outcome = if ran {
            Outcome::Pass
        } else if t.required {
            Outcome::Failure {
                message: format!("{}: {}", t.status.as_str(), first_line(t.error.as_deref())),
                kind: "ran".into(),
                text: format!(
                    "required target {} did not run: {}\n{}",
                    t.id,
                    t.status.as_str(),
                    t.error.as_deref().unwrap_or("no error text")
                ),
            }
        } else {
            Outcome::Skipped(format!(
                "allowed to fail: {}: {}",
                t.status.as_str(),
                first_line(t.error.as_deref())
            ))
        };
        suite.cases.push(Case {
            name: "ran".into(),
            time: t.timing.as_ref().map(|x| x.wall_ms / 1000.0),
            outcome,
        });
    }
    suites
}

fn first_line(error: Option<&str>) -> &str {
    error
        .and_then(|e| e.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("no error text")
}

fn rule_case(r: &RuleResult, target: Option<&TargetReport>) -> Case {
    let (measured, limit) = rule_values(&r.rule, r.measured, r.limit);
    let origin = if r.origin.is_empty() {
        String::new()
    } else {
        format!(" ({})", r.origin)
    };
    let did_not_run = target.is_some_and(|t| t.status != RunStatus::Ok);
    let outcome = if !r.pass {
        let mut text = format!(
            "rule {} on target {}, output {}: measured {measured}, limit {limit}",
            r.rule, r.target, r.output
        );
        if !r.origin.is_empty() {
            let _ = write!(text, ", set by {}", r.origin);
        }
        if let Some(p) = r.previous {
            let _ = write!(text, "; previous report: {}", rule_value(&r.rule, p));
        }
        if let Some(t) = target.filter(|_| did_not_run) {
            let _ = write!(
                text,
                "\ntarget {}: {}",
                t.status.as_str(),
                t.error.as_deref().unwrap_or("no error text")
            );
        }
        let measured = if r.measured.0.is_nan() {
            "not measured".to_string()
        } else {
            format!("measured {measured}")
        };
        Outcome::Failure {
            message: format!("{measured}, limit {limit}{origin}"),
            kind: r.rule.clone(),
            text,
        }
    } else if r.rule == "ran" && (did_not_run || r.measured.0 < r.limit.0) {
        let error = target.map_or("did not run", |t| first_line(t.error.as_deref()));
        let status = target.map_or("not run", |t| t.status.as_str());
        Outcome::Skipped(format!("allowed to fail: {status}: {error}"))
    } else {
        Outcome::Pass
    };
    let time = if r.rule == "ran" {
        target.and_then(|t| t.timing.as_ref()).map(|x| x.wall_ms / 1000.0)
    } else {
        None
    };
    Case {
        name: format!("{} {}", r.rule, r.output),
        time,
        outcome,
    }
}

fn write_suite(s: &mut String, suite: &Suite<'_>) {
    let _ = writeln!(
        s,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{:.3}\">",
        attr(suite.name),
        suite.cases.len(),
        suite.failures(),
        suite.skipped(),
        suite.seconds()
    );
    if let Some(t) = suite.target {
        s.push_str("    <properties>\n");
        let mut props = vec![
            ("ep", t.ep.clone()),
            ("status", t.status.as_str().to_string()),
            ("required", t.required.to_string()),
        ];
        if let Some(rt) = &t.runtime {
            props.push(("runtime", format!("{} {}", rt.package, rt.version)));
        }
        if let Some(c) = &t.chipset {
            props.push(("chipset", format!("{} ({})", c.sm, c.name)));
        }
        for (k, v) in props {
            let _ = writeln!(s, "      <property name=\"{k}\" value=\"{}\"/>", attr(&v));
        }
        s.push_str("    </properties>\n");
    }
    let classname = attr(&format!("npu-audit.{}", suite.name));
    for case in &suite.cases {
        let time = case.time.map(|t| format!(" time=\"{t:.3}\"")).unwrap_or_default();
        let open = format!(
            "    <testcase classname=\"{classname}\" name=\"{}\"{time}",
            attr(&case.name)
        );
        match &case.outcome {
            Outcome::Pass => {
                let _ = writeln!(s, "{open}/>");
            }
            Outcome::Failure {
                message,
                kind,
                text: body,
            } => {
                let _ = writeln!(
                    s,
                    "{open}>\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
                    attr(message),
                    attr(kind),
                    text(body)
                );
            }
            Outcome::Skipped(message) => {
                let _ = writeln!(
                    s,
                    "{open}>\n      <skipped message=\"{}\"/>\n    </testcase>",
                    attr(message)
                );
            }
        }
    }
    s.push_str("  </testsuite>\n");
}

/// Whether XML 1.0 allows the character (`Char` production; Rust chars are never surrogates).
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

fn escape(text: &str, in_attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars().filter(|&c| xml_char(c)) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // A parser turns a raw line break in an attribute into a space, and a raw carriage
            // return anywhere into a line feed: character references keep them.
            '\r' => out.push_str("&#13;"),
            '\n' if in_attribute => out.push_str("&#10;"),
            '\t' if in_attribute => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes an attribute value.
fn attr(value: &str) -> String {
    escape(value, true)
}

/// Escapes element text.
fn text(value: &str) -> String {
    escape(value, false)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::render::markdown::tests::small_report;
    use crate::report::model::{Report, Verdict};

    /// Parses JUnit XML with Python's ElementTree (expat, a conforming XML parser) and returns,
    /// per suite, (name, tests, failures, skipped, [(case name, classname, outcome)]); `None`
    /// when no Python 3 is available (the tool itself needs one, so it normally is).
    pub(crate) fn parse_with_python(xml: &str) -> Option<serde_json::Value> {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        const SCRIPT: &str = r#"
import json, sys, xml.etree.ElementTree as ET
root = ET.fromstring(sys.stdin.buffer.read())
assert root.tag == "testsuites", root.tag
out = {"tests": int(root.get("tests")), "failures": int(root.get("failures")),
       "skipped": int(root.get("skipped")), "suites": []}
for s in root.findall("testsuite"):
    cases = []
    for c in s.findall("testcase"):
        f = c.find("failure")
        k = c.find("skipped")
        cases.append({"name": c.get("name"), "classname": c.get("classname"), "time": c.get("time"),
                      "outcome": "failure" if f is not None else "skipped" if k is not None else "pass",
                      "message": f.get("message") if f is not None else None,
                      "text": f.text if f is not None else None})
    out["suites"].append({"name": s.get("name"), "tests": int(s.get("tests")),
                          "failures": int(s.get("failures")), "skipped": int(s.get("skipped")),
                          "time": float(s.get("time")), "cases": cases})
print(json.dumps(out))
"#;
        let mut child = Command::new(std::env::var("NPU_AUDIT_PYTHON").unwrap_or_else(|_| "python3".into()))
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(xml.as_bytes()).ok()?;
        let out = child.wait_with_output().ok()?;
        assert!(
            out.status.success(),
            "XML does not parse: {}\n{xml}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).ok()
    }

    fn load(name: &str) -> Option<Report> {
        let text = std::fs::read_to_string(format!("/tmp/reports/{name}.json")).ok()?;
        Some(serde_json::from_str(&text).expect("report parses"))
    }

    fn count(xml: &str, needle: &str) -> usize {
        xml.matches(needle).count()
    }

    #[test]
    fn escapes_and_strips() {
        assert_eq!(
            attr("a<b & \"c\" 'd'>\n"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;&#10;"
        );
        assert_eq!(text("x\u{0}\u{1b}y\u{fffe}\r\n"), "xy&#13;\n");
        assert_eq!(text("é😀"), "é😀");
    }

    #[test]
    fn small_report_counts_rules_and_run_status() {
        let r = small_report();
        let xml = render(&r);
        // qnn:sm8650: 3 rules (2 failing); openvino: its failing `ran` rule; cpu:noopt: no rule,
        // so one `ran` case.
        assert!(
            xml.contains(
                "<testsuites name=\"npu-audit models/m|x.onnx\" tests=\"5\" failures=\"3\" errors=\"0\" skipped=\"0\""
            ),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<testsuite name=\"qnn:sm8650\" tests=\"3\" failures=\"2\" errors=\"0\" skipped=\"0\" time=\"1.500\">"
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<testsuite name=\"openvino\" tests=\"1\" failures=\"1\""),
            "{xml}"
        );
        assert!(
            xml.contains("<testsuite name=\"cpu:noopt\" tests=\"1\" failures=\"0\""),
            "{xml}"
        );
        assert!(xml.contains(
            "<testcase classname=\"npu-audit.qnn:sm8650\" name=\"min_sqnr_db probs\">\n      <failure message=\"measured 25.06, limit 28.00 (--min-sqnr)\" type=\"min_sqnr_db\">"
        ), "{xml}");
        // The output name's pipe and line break survive in the attribute.
        assert!(xml.contains("name=\"max_abs out|put&#10;two\""), "{xml}");
        assert!(
            xml.contains("message=\"not measured, limit 0.01000 (npu-audit.toml:3)\""),
            "{xml}"
        );
        assert!(
            xml.contains("second line</failure>"),
            "the full error is in the failure text"
        );
        assert_eq!(count(&xml, "<testcase "), 5);
        assert_eq!(count(&xml, "<failure "), 3);
        if let Some(parsed) = parse_with_python(&xml) {
            assert_eq!(parsed["tests"], 5);
            assert_eq!(parsed["failures"], 3);
            assert_eq!(parsed["suites"][0]["cases"][1]["name"], "max_abs out|put\ntwo");
        }
    }

    #[test]
    fn allowed_failures_are_skipped_and_no_gate_still_reports_runs() {
        let mut r = small_report();
        r.gate.rules.clear();
        r.gate.verdict = Verdict::None;
        r.targets[1].required = false;
        r.targets[1].error = Some("bad\u{1}\u{7} <thing> & \"more\"".into());
        let xml = render(&r);
        assert!(
            xml.contains("tests=\"3\" failures=\"0\" errors=\"0\" skipped=\"1\""),
            "{xml}"
        );
        assert!(xml.contains(
            "<testcase classname=\"npu-audit.openvino\" name=\"ran\" time=\"0.250\">\n      <skipped message=\"allowed to fail: failed: bad &lt;thing&gt; &amp; &quot;more&quot;\"/>"
        ), "{xml}");
        assert!(
            xml.contains("<testcase classname=\"npu-audit.qnn:sm8650\" name=\"ran\" time=\"1.500\"/>"),
            "{xml}"
        );
        if let Some(parsed) = parse_with_python(&xml) {
            assert_eq!(parsed["skipped"], 1);
        }

        // A required target that did not run, without a `ran` rule: a failing `ran` case.
        r.targets[1].required = true;
        let xml = render(&r);
        assert!(
            xml.contains("tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"0\""),
            "{xml}"
        );
        assert!(xml.contains("<failure message=\"failed: bad &lt;thing&gt;"), "{xml}");
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
        assert!(
            xml.contains("name=\"qnn:&lt;sm&gt;&amp;&quot;8650&quot;&apos;\""),
            "{xml}"
        );
        if let Some(parsed) = parse_with_python(&xml) {
            assert_eq!(parsed["suites"][0]["name"], "qnn:<sm>&\"8650\"'");
            assert_eq!(
                parsed["suites"][0]["cases"][0]["classname"],
                "npu-audit.qnn:<sm>&\"8650\"'"
            );
            assert_eq!(parsed["tests"], 5);
        }
    }

    #[test]
    fn real_reports_count_every_rule() {
        for name in ["cnn", "fallback", "transformer"] {
            let Some(r) = load(name) else { continue };
            let xml = render(&r);
            let failing = r.gate.rules.iter().filter(|x| !x.pass).count();
            let extra_ran = r
                .targets
                .iter()
                .filter(|t| {
                    let rules: Vec<_> = r.gate.rules.iter().filter(|x| x.target == t.id).collect();
                    !rules.iter().any(|x| x.rule == "ran") && (rules.is_empty() || t.status != RunStatus::Ok)
                })
                .count();
            assert_eq!(count(&xml, "<testcase "), r.gate.rules.len() + extra_ran, "{name}");
            assert_eq!(count(&xml, "<testsuite "), r.targets.len(), "{name}");
            if let Some(parsed) = parse_with_python(&xml) {
                assert_eq!(parsed["tests"], r.gate.rules.len() + extra_ran, "{name}");
                let failing_runs = r
                    .targets
                    .iter()
                    .filter(|t| t.required && t.status != RunStatus::Ok)
                    .filter(|t| !r.gate.rules.iter().any(|x| x.target == t.id && x.rule == "ran"))
                    .count();
                assert_eq!(parsed["failures"], failing + failing_runs, "{name}");
            }
        }
    }
}
