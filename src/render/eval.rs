//! `eval` in the terminal and as Markdown: the reference's figures, one row per target (the
//! primary metric with its interval, the paired drop against the reference, the discordant
//! counts, McNemar's p, the margin's verdict), the flips and worst samples, where the flips come
//! from, the gate. On a terminal the tables and lines are fitted to its width by `grid`, which
//! never splits a figure.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, prose, table_with, Look};
use super::present::rule_values;
use crate::report::eval::{Comparison, Estimate, EvalReport, EvalTarget, FlipExplanation, Metrics, Proportion};
use crate::report::model::Verdict;

/// A percentage of a proportion with its interval: `99.00% (96.43–99.72)`.
pub fn proportion(p: &Proportion) -> String {
    if p.n == 0 {
        return "-".into();
    }
    percent_with_interval(p.value.0, p.lo.0, p.hi.0)
}

/// A rate (CER, WER, F1) as a percentage with its interval.
pub fn rate(e: &Estimate) -> String {
    if e.value.0.is_nan() {
        return "-".into();
    }
    percent_with_interval(e.value.0, e.lo.0, e.hi.0)
}

/// `value (lo–hi)`, fractions shown as percentages.
fn percent_with_interval(value: f64, lo: f64, hi: f64) -> String {
    format!("{:.2}% ({:.2}–{:.2})", 100.0 * value, 100.0 * lo, 100.0 * hi)
}

/// A drop in points with its interval: `+0.50 (−0.50–+1.50)`.
pub fn drop(e: &Estimate) -> String {
    if e.value.0.is_nan() {
        return "-".into();
    }
    format!("{:+.2} ({:+.2}…{:+.2})", e.value.0, e.lo.0, e.hi.0)
}

/// The primary metric of a run, as the task reads it.
pub fn primary(report: &EvalReport, m: &Metrics) -> String {
    match (&report.task.primary[..], &m.cer) {
        ("cer", Some(cer)) => format!("CER {}", rate(cer)),
        _ => proportion(&m.accuracy),
    }
}

/// A p-value: four decimals, or two significant digits below 0.0001 (`6.8e-13`).
pub fn p_value(p: f64) -> String {
    if p > 0.0 && p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

/// What a margin says: `non-inferior`, `equivalent`, `inferior?`, or `-` without one.
pub fn margin_word(c: &Comparison) -> &'static str {
    match (c.non_inferior, c.equivalent) {
        (Some(_), Some(true)) => "equivalent",
        (Some(true), _) => "non-inferior",
        (Some(false), _) => "not shown non-inferior",
        _ => "-",
    }
}

fn comparison<'t>(t: &'t EvalTarget, against: &str) -> Option<&'t Comparison> {
    t.comparisons.iter().find(|c| c.against == against)
}

fn targets_table(report: &EvalReport) -> String {
    let baseline = report
        .targets
        .iter()
        .find(|t| t.role == "baseline")
        .map(|t| t.id.clone());
    let mut b = Builder::default();
    let mut head = vec![
        "target",
        "status",
        "samples",
        "primary (95% CI)",
        "points lost vs reference",
        "fixed/broken",
        "McNemar p",
    ];
    if baseline.is_some() {
        head.push("points lost vs baseline");
    }
    head.push("margin");
    b.push_record(head);
    for t in &report.targets {
        let vs_ref = comparison(t, "reference");
        let mut row = vec![
            t.id.clone(),
            t.status.as_str().to_string(),
            t.samples_run.to_string(),
            t.metrics.as_ref().map_or("-".into(), |m| primary(report, m)),
            vs_ref.map_or("-".into(), |c| drop(&c.drop)),
            vs_ref.map_or("-".into(), |c| format!("{}/{}", c.fixed, c.broken)),
            vs_ref.map_or("-".into(), |c| p_value(c.mcnemar_p.0)),
        ];
        if let Some(base) = &baseline {
            row.push(comparison(t, base).map_or("-".into(), |c| drop(&c.drop)));
        }
        row.push(vs_ref.map_or("-", margin_word).to_string());
        b.push_record(row);
    }
    // The margin's verdict is a status, never shortened.
    let margin = b.count_columns().saturating_sub(1);
    table_with(b, &Look::grid().keeping(&[margin]))
}

fn header(s: &mut String, report: &EvalReport) {
    let _ = writeln!(
        s,
        "{} {} eval · {}\nset      {} ({} samples; labels: {})\ntask     {} on output '{}' ({})\nreference {}: {}",
        bold("npu-audit"),
        report.tool_version,
        report.model,
        report.dataset.path,
        report.dataset.samples,
        report.dataset.labels,
        report.task.kind,
        report.task.output,
        report.task.settings,
        report.reference,
        primary(report, &report.reference_metrics)
    );
    let st = &report.statistics;
    let _ = writeln!(
        s,
        "stats    bootstrap {} resamples, seed {}{}",
        st.resamples,
        st.seed,
        st.margin_points
            .map_or(String::new(), |m| format!(", margin {m} points"))
    );
}

fn details(s: &mut String, report: &EvalReport, t: &EvalTarget) {
    if let Some(m) = &t.metrics {
        let mut extra = Vec::new();
        if let Some(k) = &m.top_k {
            extra.push(format!("top-k {}", proportion(k)));
        }
        if let (Some(p), Some(r), Some(f)) = (&m.precision, &m.recall, &m.f1) {
            extra.push(format!(
                "precision {} recall {} F1 {}",
                proportion(p),
                proportion(r),
                rate(f)
            ));
        }
        if let (Some(c), Some(w)) = (&m.cer, &m.wer) {
            extra.push(format!(
                "CER {} WER {} exact {}",
                rate(c),
                rate(w),
                proportion(&m.accuracy)
            ));
        }
        if m.errors > 0 {
            extra.push(format!("{} sample(s) failed", m.errors));
        }
        if !extra.is_empty() {
            let _ = writeln!(s, "  {}: {}", t.id, extra.join("; "));
        }
    }
    if let Some(e) = &t.error {
        let _ = writeln!(s, "  {} {}: {}", t.id, t.status.as_str(), super::present::printable(e));
    }
    let broken: Vec<String> = t
        .flips
        .iter()
        .filter(|f| f.kind == "broken")
        .take(5)
        .map(flip_text)
        .collect();
    if !broken.is_empty() {
        let _ = writeln!(s, "  {} broke: {}", t.id, broken.join("; "));
    }
    if let Some(x) = &t.explanation {
        let _ = writeln!(
            s,
            "  {} flips come from: {}",
            t.id,
            super::present::printable(&explanation_text(x))
        );
    }
    let _ = report;
}

/// A flip in one line, its id and labels (the user's, the model's transcripts) made printable.
fn flip_text(f: &crate::report::eval::Flip) -> String {
    let text = format!(
        "{} (label {}, reference {}, target {}, {} dB)",
        f.id,
        f.label,
        f.reference,
        f.target,
        super::present::db(f.sqnr_db.0)
    );
    super::present::printable(&text)
}

/// Where a target's flips come from, in one line.
pub fn explanation_text(x: &FlipExplanation) -> String {
    if let Some(e) = &x.error {
        return format!("the per-layer audit of {} sample(s) failed: {e}", x.samples.len());
    }
    let at = |p: &Option<crate::report::model::LayerPointer>| {
        p.as_ref()
            .map_or("none".into(), |p| format!("#{} {} ({})", p.index, p.node, p.op_type))
    };
    format!(
        "over {} broken sample(s), first code difference {}, first beyond rounding {}, first SQNR loss {}",
        x.samples.len(),
        at(&x.first_code_difference),
        at(&x.first_beyond_rounding),
        at(&x.first_sqnr_loss)
    )
}

fn gate(s: &mut String, report: &EvalReport) {
    let failing: Vec<String> = report
        .gate
        .rules
        .iter()
        .filter(|r| !r.pass)
        .map(|r| {
            let (m, l) = rule_values(r.rule.as_str(), r.measured, r.limit);
            format!("{} {}: {m} vs limit {l} ({})", r.target, r.rule, r.origin)
        })
        .collect();
    let verdict = match report.gate.verdict {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::None => "no limits set",
    };
    let _ = writeln!(s, "\nVERDICT {verdict} (exit {})", report.exit_code as i32);
    for f in failing {
        let _ = writeln!(s, "  {f}");
    }
}

/// The terminal rendering.
pub fn table_text(report: &EvalReport) -> String {
    let mut s = String::new();
    header(&mut s, report);
    let _ = writeln!(s, "\n{}", bold("TARGETS"));
    let _ = writeln!(s, "{}", targets_table(report));
    for t in &report.targets {
        details(&mut s, report, t);
    }
    gate(&mut s, report);
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    prose(&s)
}

/// Markdown: a pull-request comment or a step summary.
pub fn markdown(report: &EvalReport) -> String {
    let esc = |t: &str| t.replace('|', "\\|").replace('\n', " ");
    let mut s = String::new();
    let verdict = match report.gate.verdict {
        Verdict::Pass => "✅ PASS",
        Verdict::Fail => "❌ FAIL",
        Verdict::None => "eval",
    };
    let _ = writeln!(s, "### {verdict} · npu-audit eval · `{}`\n", esc(&report.model));
    let _ = writeln!(
        s,
        "{} samples of `{}`, task `{}` on `{}`; reference: {}\n",
        report.dataset.samples,
        esc(&report.dataset.path),
        report.task.kind,
        esc(&report.task.output),
        primary(report, &report.reference_metrics)
    );
    let _ = writeln!(
        s,
        "| target | status | primary (95% CI) | drop vs reference (points) | fixed/broken | McNemar p | margin |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for t in &report.targets {
        let c = comparison(t, "reference");
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            esc(&t.id),
            t.status.as_str(),
            t.metrics.as_ref().map_or("-".into(), |m| primary(report, m)),
            c.map_or("-".into(), |c| drop(&c.drop)),
            c.map_or("-".into(), |c| format!("{}/{}", c.fixed, c.broken)),
            c.map_or("-".into(), |c| p_value(c.mcnemar_p.0)),
            c.map_or("-", margin_word)
        );
    }
    for t in report.targets.iter().filter(|t| t.explanation.is_some()) {
        if let Some(x) = &t.explanation {
            let _ = writeln!(s, "\n`{}`: flips come from {}", esc(&t.id), esc(&explanation_text(x)));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flip_cannot_move_the_terminal_cursor() {
        let flip = crate::report::eval::Flip {
            id: "\u{1b}[2K\rFAKE PASS".into(),
            label: "a\nb".into(),
            reference: "\u{202e}0".into(),
            target: "1".into(),
            kind: "broken".into(),
            sqnr_db: crate::report::model::Num(3.0),
        };
        let text = flip_text(&flip);
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
        assert!(
            text.starts_with("\\u{1b}[2K\\rFAKE PASS (label a\\nb, reference \\u{202e}0"),
            "{text}"
        );
    }
}
