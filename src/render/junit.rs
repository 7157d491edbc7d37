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
//! The XML is written by `quick-junit` (escaping, and the characters XML 1.0 does not allow
//! dropped); this module decides the suites, cases and outcomes. A line break inside an attribute
//! (an output name) reads back as a space, as XML's attribute normalization has it.

use std::fmt::Write as _;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report as Junit, TestCase, TestCaseStatus, TestSuite};

use super::present::{rule_value, rule_values};
use crate::report::compare::{Report, TargetReport};
use crate::report::gate::{Rule, RuleResult};
use crate::report::RunStatus;

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
    fn seconds(&self) -> f64 {
        self.target
            .and_then(|t| t.timing.as_ref())
            .map_or(0.0, |t| t.wall_ms / 1000.0)
    }
}

/// Characters XML 1.0 allows (`Char` production); `quick-junit` drops the C0 controls, this
/// drops the rest (U+FFFE, U+FFFF).
fn xml_text(text: &str) -> String {
    text.chars()
        .filter(|&c| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..))
        .collect()
}

/// [`xml_text`] for an attribute value: line breaks and tabs become spaces, which is what an XML
/// parser's attribute normalization would make of them anyway.
fn xml_attr(text: &str) -> String {
    xml_text(text).replace(['\r', '\n', '\t'], " ")
}

/// Renders the report as JUnit XML.
pub fn render(report: &Report) -> String {
    let suites = suites(report);
    let mut junit = Junit::new(xml_attr(&format!("npu-audit {}", report.model.path)));
    junit.set_time(Duration::from_secs_f64(suites.iter().map(Suite::seconds).sum()));
    junit.add_test_suites(suites.iter().map(test_suite));
    junit.to_string().unwrap_or_else(|e| {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- {} -->\n",
            xml_text(&e.to_string())
        )
    })
}

fn test_suite(suite: &Suite<'_>) -> TestSuite {
    let mut out = TestSuite::new(xml_attr(suite.name));
    out.set_time(Duration::from_secs_f64(suite.seconds()));
    if let Some(t) = suite.target {
        out.add_properties(properties(t));
    }
    let classname = xml_attr(&format!("npu-audit.{}", suite.name));
    for case in &suite.cases {
        let status = match &case.outcome {
            Outcome::Pass => TestCaseStatus::success(),
            Outcome::Failure { message, kind, text } => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status
                    .set_message(xml_attr(message))
                    .set_type(xml_attr(kind))
                    .set_description(xml_text(text));
                status
            }
            Outcome::Skipped(message) => {
                let mut status = TestCaseStatus::skipped();
                status.set_message(xml_attr(message));
                status
            }
        };
        let mut tc = TestCase::new(xml_attr(&case.name), status);
        tc.set_classname(classname.clone());
        if let Some(t) = case.time {
            tc.set_time(Duration::from_secs_f64(t));
        }
        out.add_test_case(tc);
    }
    out
}

fn properties(t: &TargetReport) -> Vec<Property> {
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
    props.into_iter().map(|(k, v)| Property::new(k, xml_attr(&v))).collect()
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
        if rules.iter().any(|r| r.rule == Rule::Ran) || (!rules.is_empty() && ran) {
            continue;
        }
        suite.cases.push(Case {
            name: "ran".into(),
            time: t.timing.as_ref().map(|x| x.wall_ms / 1000.0),
            outcome: ran_outcome(t),
        });
    }
    suites
}

/// The `ran` case of a target without a `ran` rule.
fn ran_outcome(t: &TargetReport) -> Outcome {
    if t.status == RunStatus::Ok {
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
    }
}

fn first_line(error: Option<&str>) -> &str {
    error
        .and_then(|e| e.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("no error text")
}

fn rule_case(r: &RuleResult, target: Option<&TargetReport>) -> Case {
    let did_not_run = target.is_some_and(|t| t.status != RunStatus::Ok);
    let outcome = if !r.pass {
        failed_rule(r, target.filter(|_| did_not_run))
    } else if r.rule == Rule::Ran && (did_not_run || r.measured.0 < r.limit.0) {
        let error = target.map_or("did not run", |t| first_line(t.error.as_deref()));
        let status = target.map_or("not run", |t| t.status.as_str());
        Outcome::Skipped(format!("allowed to fail: {status}: {error}"))
    } else {
        Outcome::Pass
    };
    let time = if r.rule == Rule::Ran {
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

/// The failure of a rule: the measured value and the limit, where it was set, the previous
/// report's value, and the runtime's error of a target that did not run.
fn failed_rule(r: &RuleResult, not_run: Option<&TargetReport>) -> Outcome {
    let (measured, limit) = rule_values(r.rule.as_str(), r.measured, r.limit);
    let mut text = format!(
        "rule {} on target {}, output {}: measured {measured}, limit {limit}",
        r.rule, r.target, r.output
    );
    if !r.origin.is_empty() {
        let _ = write!(text, ", set by {}", r.origin);
    }
    if let Some(p) = r.previous {
        let _ = write!(text, "; previous report: {}", rule_value(r.rule.as_str(), p));
    }
    if let Some(t) = not_run {
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
    let origin = if r.origin.is_empty() {
        String::new()
    } else {
        format!(" ({})", r.origin)
    };
    Outcome::Failure {
        message: format!("{measured}, limit {limit}{origin}"),
        kind: r.rule.to_string(),
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_xml_cannot_hold_is_dropped() {
        assert_eq!(xml_text("x\u{0}\u{1b}y\u{fffe}\r\n"), "xy\r\n");
        assert_eq!(xml_attr("a\nb\tc"), "a b c");
        assert_eq!(xml_text("é😀"), "é😀");
    }
}
