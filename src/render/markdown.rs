//! The Markdown rendering of a report, sized for a GitHub pull-request comment or a CI step
//! summary (`$GITHUB_STEP_SUMMARY`): the verdict and the model on the first line, the failing
//! rules, one row per target, the targets that did not run with the first line of their error,
//! the passing rules folded in a `<details>` block, and the notes.
//!
//! GitHub refuses comments over 65536 characters, so every list is capped (at most
//! [`MAX_RULE_ROWS`] rule rows per table, each section within a share of the budget) and says
//! how many rows it left out; the whole text stays under [`MAX_CHARS`] bytes whatever the report
//! holds. Table cells are escaped (`|`, newlines, and the characters Markdown or HTML would
//! interpret) and long cells are cut. Like every renderer it reads the [`Report`] and
//! recomputes nothing: the per-target columns pick the worst figure among the outputs.

use std::fmt::Write as _;

use super::present::{db, divergence_cell, num, pct, plural_s, rule_value, rule_values, shorten, signed_db};
use crate::report::compare::{Report, TargetReport};
use crate::report::facts::TargetRole;
use crate::report::gate::{RuleResult, Verdict};
use crate::report::RunStatus;

/// The most bytes the rendering takes (GitHub's comment limit is 65536 characters).
pub const MAX_CHARS: usize = 60_000;
/// The most rows a table of rules shows; the rest are counted.
pub const MAX_RULE_ROWS: usize = 50;
/// The most rows of the per-target table and of the list of targets that did not run.
const MAX_TARGET_ROWS: usize = 100;
/// The most notes shown.
const MAX_NOTES: usize = 20;
/// Longest table cell, in characters.
pub(super) const CELL_CHARS: usize = 100;
/// Longest one-line error or note, in characters.
pub(super) const LINE_CHARS: usize = 300;

/// Byte budgets of the sections; their sum with the heading stays below [`MAX_CHARS`].
const FAILING_BUDGET: usize = 22_000;
const TARGETS_BUDGET: usize = 12_000;
const NOT_RUN_BUDGET: usize = 6_000;
const PASSING_BUDGET: usize = 11_000;
const STREAM_BUDGET: usize = 2_500;
const NOTES_BUDGET: usize = 5_000;

/// Renders the report as Markdown.
pub fn render(report: &Report) -> String {
    let mut s = String::new();
    heading(&mut s, report);

    let failing: Vec<&RuleResult> = report.gate.rules.iter().filter(|r| !r.pass).collect();
    let passing: Vec<&RuleResult> = report.gate.rules.iter().filter(|r| r.pass).collect();

    if !failing.is_empty() {
        let _ = writeln!(s, "\n**Failing rules** ({})\n", failing.len());
        rule_table(&mut s, &failing, FAILING_BUDGET);
    }

    targets_section(&mut s, report);
    stream_section(&mut s, report);
    not_run_section(&mut s, report);

    if !passing.is_empty() {
        let _ = writeln!(
            s,
            "\n<details><summary>{} passing rule{}</summary>\n",
            passing.len(),
            plural_s(passing.len())
        );
        rule_table(&mut s, &passing, PASSING_BUDGET);
        s.push_str("\n</details>\n");
    }

    notes_section(&mut s, report);
    enforce_limit(s)
}

/// With `--stream`: each target's decisions and divergence, free and teacher-forced.
fn stream_section(s: &mut String, report: &Report) {
    let Some(info) = &report.stream else { return };
    let _ = writeln!(
        s,
        "\n**Stream**: {} steps, fed back {}, diverged below {} dB\n",
        info.steps,
        code(&info.feedback.join(", ")),
        super::present::db(info.divergence_sqnr_db.0)
    );
    let rows: Vec<Vec<String>> = super::present::stream_rows(report)
        .into_iter()
        .map(|r| {
            let decisions = if r.decisions.is_empty() {
                "-".into()
            } else {
                r.decisions.join("; ")
            };
            vec![
                r.target,
                r.run.into(),
                decisions,
                r.divergence,
                r.growth,
                r.median_db,
                r.last_db,
            ]
        })
        .collect();
    let total = rows.len();
    push_table(
        s,
        &[
            "target",
            "run",
            "decisions",
            "diverges",
            "growth",
            "median dB",
            "last dB",
        ],
        rows.into_iter(),
        total,
        MAX_TARGET_ROWS,
        STREAM_BUDGET,
        "stream rows",
    );
}

fn heading(s: &mut String, report: &Report) {
    let verdict = match report.gate.verdict {
        Verdict::Pass => "✅ PASS",
        Verdict::Fail => "❌ FAIL",
        Verdict::None => "➖ no gate",
    };
    let _ = writeln!(
        s,
        "### {verdict} · npu-audit · {}",
        code(&shorten(&report.model.path, 200))
    );
    let ran = report.targets.iter().filter(|t| t.status == RunStatus::Ok).count();
    let failing = report.gate.rules.iter().filter(|r| !r.pass).count();
    let short_sha: String = report.model.sha256.chars().take(12).collect();
    let _ = writeln!(
        s,
        "\nmodel sha256 {} · golden: {} · {ran}/{} targets ran · {} rule{}, {failing} failing · exit code {}",
        code(&short_sha),
        escape(&shorten(&report.reference.description, LINE_CHARS)),
        report.targets.len(),
        report.gate.rules.len(),
        plural_s(report.gate.rules.len()),
        report.exit_code as i32,
    );
    let _ = writeln!(
        s,
        "\nhost: {}",
        escape(&shorten(&super::present::host_line(report.host.as_ref()), LINE_CHARS))
    );
}

/// A table of rules, at most [`MAX_RULE_ROWS`] rows within `budget` bytes.
fn rule_table(s: &mut String, rules: &[&RuleResult], budget: usize) {
    let rows = rules.iter().map(|r| {
        let (mut measured, limit) = rule_values(r.rule.as_str(), r.measured, r.limit);
        if let Some(p) = r.previous {
            measured.push_str(&format!(" (was {})", rule_value(r.rule.as_str(), p)));
        }
        vec![
            r.rule.to_string(),
            r.target.clone(),
            r.output.clone(),
            measured,
            limit,
            if r.origin.is_empty() {
                "-".into()
            } else {
                r.origin.clone()
            },
        ]
    });
    push_table(
        s,
        &["rule", "target", "output", "measured", "limit", "origin"],
        rows,
        rules.len(),
        MAX_RULE_ROWS,
        budget,
        "rules",
    );
}

/// Writes a table: the header, then rows until `max_rows` or `budget` bytes, then a line
/// counting the rows left out.
pub(super) fn push_table(
    s: &mut String,
    header: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
    total: usize,
    max_rows: usize,
    budget: usize,
    what: &str,
) {
    let start = s.len();
    let _ = writeln!(s, "| {} |", header.join(" | "));
    let _ = writeln!(s, "|{}", " --- |".repeat(header.len()));
    let mut shown = 0;
    for row in rows.take(max_rows) {
        let line = format!(
            "| {} |\n",
            row.iter()
                .map(|c| escape(&shorten(c, CELL_CHARS)))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        if s.len() - start + line.len() > budget {
            break;
        }
        s.push_str(&line);
        shown += 1;
    }
    if shown < total {
        let _ = writeln!(
            s,
            "\n_{} more {what} not shown; the JSON report (`--out`) has every one._",
            total - shown
        );
    }
}

/// The lowest finite-or-infinite value (NaN ignored) and the output it belongs to.
fn worst_sqnr(t: &TargetReport) -> Option<(f64, &str)> {
    t.outputs
        .iter()
        .filter(|o| !o.sqnr_db.0.is_nan())
        .map(|o| (o.sqnr_db.0, o.name.as_str()))
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

fn targets_section(s: &mut String, report: &Report) {
    if report.targets.is_empty() {
        return;
    }
    let multi_output = report.targets.iter().any(|t| t.outputs.len() > 1);
    let _ = writeln!(
        s,
        "\n**Targets**{}\n",
        if multi_output {
            " (worst figure over the outputs)"
        } else {
            ""
        }
    );
    let rows = report.targets.iter().map(|t| target_row(report, t, multi_output));
    push_table(
        s,
        &[
            "target",
            "status",
            "SQNR dB",
            "max abs",
            "top-1",
            "excess dB",
            "CPU fallback / partitions",
            "first layer beyond rounding",
        ],
        rows,
        report.targets.len(),
        MAX_TARGET_ROWS,
        TARGETS_BUDGET,
        "targets",
    );
}

fn target_row(report: &Report, t: &TargetReport, multi_output: bool) -> Vec<String> {
    let baseline = t.role == TargetRole::Baseline || report.baseline.as_deref() == Some(t.id.as_str());
    let failing = report.gate.rules.iter().filter(|r| !r.pass && r.target == t.id).count();
    let ran = t.status == RunStatus::Ok;
    let mark = if failing > 0 || (!ran && t.required) {
        "❌"
    } else if !ran {
        "⚠️"
    } else {
        "✅"
    };
    let mut status = format!("{mark} {}", t.status.as_str());
    if !ran && !t.required {
        status.push_str(" (allowed)");
    }
    if failing > 0 {
        status.push_str(&format!(", {failing} failing rule{}", plural_s(failing)));
    }
    let mut id = t.id.clone();
    if t.role == TargetRole::Baseline {
        id.push_str(" (baseline)");
    }
    if !ran {
        return vec![
            id,
            status,
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ];
    }
    let sqnr = match worst_sqnr(t) {
        Some((v, name)) if multi_output => format!("{} ({name})", db(v)),
        Some((v, _)) => db(v),
        None => "-".into(),
    };
    let max_abs = t
        .outputs
        .iter()
        .map(|o| o.max_abs.0)
        .filter(|v| !v.is_nan())
        .max_by(f64::total_cmp)
        .map_or("-".into(), num);
    let top1 = t
        .outputs
        .iter()
        .filter_map(|o| o.top1_agreement)
        .min_by(f64::total_cmp)
        .map_or("-".into(), |v| pct(Some(v)));
    let excess = if baseline {
        "(baseline)".into()
    } else {
        t.outputs
            .iter()
            .filter_map(|o| o.baseline.as_ref().map(|b| b.excess_db.0))
            .filter(|v| !v.is_nan())
            .max_by(f64::total_cmp)
            .map_or("-".into(), signed_db)
    };
    let fallback = t.placement.as_ref().map_or("-".into(), |p| {
        format!("{} / {}", p.compute_fallback_nodes, p.ep_partitions)
    });
    vec![
        id,
        status,
        sqnr,
        max_abs,
        top1,
        excess,
        fallback,
        divergence_cell(t, baseline),
    ]
}

fn not_run_section(s: &mut String, report: &Report) {
    let not_run: Vec<&TargetReport> = report.targets.iter().filter(|t| t.status != RunStatus::Ok).collect();
    if not_run.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n**Did not run**\n");
    let start = s.len();
    let mut shown = 0;
    for t in not_run.iter().take(MAX_TARGET_ROWS) {
        let error = t
            .error
            .as_deref()
            .and_then(|e| e.lines().find(|l| !l.trim().is_empty()))
            .unwrap_or("no error text");
        let line = format!(
            "- {} {}{}: {}\n",
            code(&shorten(&t.id, CELL_CHARS)),
            t.status.as_str(),
            if t.required {
                " (required)"
            } else {
                " (allowed to fail)"
            },
            escape(&shorten(error.trim(), LINE_CHARS))
        );
        if s.len() - start + line.len() > NOT_RUN_BUDGET {
            break;
        }
        s.push_str(&line);
        shown += 1;
    }
    if shown < not_run.len() {
        let _ = writeln!(s, "- _{} more not shown_", not_run.len() - shown);
    }
}

fn notes_section(s: &mut String, report: &Report) {
    if report.notes.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n**Notes**\n");
    let start = s.len();
    let mut shown = 0;
    for n in report.notes.iter().take(MAX_NOTES) {
        let line = format!("- {}\n", escape(&shorten(n, LINE_CHARS)));
        if s.len() - start + line.len() > NOTES_BUDGET {
            break;
        }
        s.push_str(&line);
        shown += 1;
    }
    if shown < report.notes.len() {
        let _ = writeln!(s, "- _{} more notes in the JSON report_", report.notes.len() - shown);
    }
}

/// The last guard: the section budgets keep the text far below [`MAX_CHARS`], but should it
/// ever exceed it, it is cut at a line end (closing an open `<details>`).
fn enforce_limit(mut s: String) -> String {
    if s.len() <= MAX_CHARS {
        return s;
    }
    let tail = "\n_… cut to fit a GitHub comment; the JSON report has everything._\n";
    let mut end = MAX_CHARS - tail.len() - "\n</details>\n".len();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    if let Some(nl) = s[..end].rfind('\n') {
        end = nl + 1;
    }
    s.truncate(end);
    let open = s.matches("<details>").count() > s.matches("</details>").count();
    s.push_str(tail);
    if open {
        s.push_str("\n</details>\n");
    }
    s
}

/// Escapes text for a table cell or inline Markdown: `|` (which ends a cell even inside code),
/// line breaks (which end a table row), and the characters Markdown or HTML would interpret.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last_space = false;
    for c in text.chars() {
        match c {
            '\r' | '\n' | '\t' | '\u{2028}' | '\u{2029}' => {
                if !last_space {
                    out.push(' ');
                }
                last_space = true;
                continue;
            }
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '~' | '&' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
        last_space = false;
    }
    out
}

/// An inline code span that holds `text` whatever backticks it contains (a fence longer than
/// any run of backticks inside); line breaks become spaces.
pub(super) fn code(text: &str) -> String {
    let text: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::compare::Report;
    use crate::report::gate::RuleResult;

    /// A small report written by hand: `qnn:sm8650` ran (two outputs, one named with a pipe
    /// and a newline; two layers, one bit-exact), `openvino` was required and failed, and the
    /// `cpu:noopt` baseline ran. Rules: three failing (one of them `ran`), one passing.
    pub(crate) const SMALL_REPORT: &str = include_str!("../../tests/data/small_report.json");

    /// [`SMALL_REPORT`] parsed.
    pub(crate) fn small_report() -> Report {
        serde_json::from_str(SMALL_REPORT).expect("small report parses")
    }

    /// Splits a table row into cells at unescaped `|`.
    fn cells(line: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut chars = line.trim().trim_start_matches('|').chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\' {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            } else if c == '|' {
                out.push(cur.trim().to_string());
                cur.clear();
            } else {
                cur.push(c);
            }
        }
        out
    }

    /// Rows of the table that follows `title`.
    fn table_rows<'a>(md: &'a str, title: &str) -> Vec<&'a str> {
        let Some(at) = md.find(title) else { return Vec::new() };
        md[at..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .collect()
    }

    #[test]
    fn escape_keeps_cells_in_one_row() {
        let e = escape("a|b\nc\r\nd <x> & `y`");
        assert!(!e.contains('\n'));
        assert_eq!(cells(&format!("| {e} | z |")).len(), 2);
        assert!(e.contains("a\\|b"));
        assert!(e.contains("\\<x\\>"));
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`a"), "`` `a ``");
    }

    #[test]
    fn small_report_lists_failing_rules_targets_and_errors() {
        let r = small_report();
        let md = render(&r);
        assert!(md.starts_with("### ❌ FAIL · npu-audit · `models/m|x.onnx`"), "{md}");
        let failing = table_rows(&md, "**Failing rules**");
        let want = r.gate.rules.iter().filter(|x| !x.pass).count();
        assert_eq!(failing.len(), want, "{md}");
        for (row, rule) in failing.iter().zip(r.gate.rules.iter().filter(|x| !x.pass)) {
            let c = cells(row);
            assert_eq!(c.len(), 6, "{row}");
            assert_eq!(c[0], escape(rule.rule.as_str()));
            assert_eq!(c[1], escape(&rule.target));
        }
        // The output name with a pipe and a newline stays in its cell.
        assert!(md.contains("out\\|put two"), "{md}");
        let targets = table_rows(&md, "**Targets**");
        assert_eq!(targets.len(), r.targets.len());
        assert!(targets.iter().all(|row| cells(row).len() == 8));
        assert!(md.contains("#1 conv1 (Conv): 12 differ, max 2 LSB, introduced"), "{md}");
        assert!(md.contains("**Did not run**"));
        assert!(md.contains("failed (required): first line of the error"), "{md}");
        assert!(!md.contains("second line"));
        assert!(md.contains("<details><summary>1 passing rule</summary>"));
        assert!(md.trim_end().ends_with("- a note"), "{md}");
    }

    #[test]
    fn thousands_of_rules_stay_under_the_comment_limit() {
        let mut r = small_report();
        let template = r.gate.rules[0].clone();
        let long = "x|".repeat(400);
        r.gate.rules = (0..5000)
            .map(|i| RuleResult {
                rule: crate::report::gate::Rule::MinSqnrDb,
                target: format!("qnn:sm{i}{long}"),
                output: format!("output_{i}\n{long}"),
                origin: long.clone(),
                pass: i % 2 == 0,
                ..template.clone()
            })
            .collect();
        for _ in 0..300 {
            let mut t = r.targets[1].clone();
            t.error = Some(long.repeat(20));
            r.targets.push(t);
        }
        r.notes = vec![long.repeat(10); 500];
        let md = render(&r);
        assert!(md.len() < MAX_CHARS, "{}", md.len());
        assert!(md.chars().count() < 65_536);
        let failing = table_rows(&md, "**Failing rules**");
        assert!(failing.len() <= MAX_RULE_ROWS && !failing.is_empty());
        assert!(md.contains("more rules not shown"), "cap is announced");
        assert_eq!(md.matches("<details>").count(), md.matches("</details>").count());
    }

    #[test]
    fn enforce_limit_cuts_at_a_line_and_closes_details() {
        let s = format!("head\n<details>\n{}", "row\n".repeat(30_000));
        let out = enforce_limit(s);
        assert!(out.len() <= MAX_CHARS);
        assert!(out.ends_with("</details>\n"));
    }
}
