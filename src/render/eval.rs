//! `eval` in the terminal and as Markdown: the reference's figures, one row per target (the
//! primary metric with its interval, the paired drop against the reference, the discordant
//! counts, McNemar's p, the margin's verdict), the flips and worst samples, where the flips come
//! from, the gate. On a terminal the tables and lines are fitted to its width by `grid`, which
//! never splits a figure.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, prose, table_with, ColumnKind, Look};
use super::present::{count, rule_values, signed};
use crate::report::eval::{
    Comparison, Estimate, EvalReport, EvalTarget, FlipExplanation, Metrics, Proportion, SequentialDecision,
};
use crate::report::facts::TargetRole;
use crate::report::gate::{Rule, Verdict};

/// A percentage of a proportion with its interval: `99.00% (96.43–99.72)`.
pub fn proportion(p: &Proportion) -> String {
    if p.n == 0 {
        return "-".into();
    }
    percent_with_interval(p.value.0, p.lo.0, p.hi.0)
}

/// A rate (CER, WER, F1) as a percentage with its interval (`cannot bound` when the sample has
/// nothing that varies).
pub fn rate(e: &Estimate) -> String {
    if e.value.0.is_nan() {
        return "-".into();
    }
    if e.unbounded.is_some() {
        return format!("{:.2}% (cannot bound)", 100.0 * e.value.0);
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
    if e.unbounded.is_some() {
        return format!("{} (cannot bound)", signed(e.value.0, 2));
    }
    format!("{} ({}…{})", signed(e.value.0, 2), signed(e.lo.0, 2), signed(e.hi.0, 2))
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
        .find(|t| t.role == TargetRole::Baseline)
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
    // Every cell is a key or figures; the margin's verdict is words, wrapped but never cut.
    use ColumnKind::{Figure, Key, Words};
    let mut kinds = vec![Key, Key, Figure, Figure, Figure, Figure, Figure];
    kinds.extend(baseline.as_ref().map(|_| Figure));
    kinds.push(Words);
    // Too wide, the flips, McNemar's p and the drop against the baseline go to a second table.
    let secondary: Vec<usize> = (5..7).chain(baseline.map(|_| 7)).collect();
    table_with(b, &Look::grid(&kinds).splittable(1, &secondary))
}

fn header(s: &mut String, report: &EvalReport) {
    let _ = writeln!(
        s,
        "{} {} eval · {}\nset      {} ({}; labels: {})\ntask     {} on output '{}' ({})\nreference {}: {}",
        bold("npu-audit"),
        report.tool.version,
        report.model,
        report.dataset.path,
        count(report.dataset.samples, "sample"),
        report.dataset.labels,
        report.task.kind,
        report.task.output,
        report.task.settings,
        report.reference,
        primary(report, &report.reference_metrics)
    );
    let _ = writeln!(s, "stats    {}", stats_line(report));
}

/// How the figures were computed, in one line.
fn stats_line(report: &EvalReport) -> String {
    let st = &report.statistics;
    let mut line = format!(
        "drops: {}; bootstrap {} resamples, seed {}",
        if report.task.primary == "cer" {
            "paired bootstrap"
        } else {
            "Tango score bounds"
        },
        st.resamples,
        st.seed
    );
    if let Some(m) = st.margin_points {
        let _ = write!(line, "; margin {}", points(m));
    }
    if let Some(q) = &st.sequential {
        let _ = write!(
            line,
            "; until decided (anytime-valid 95% bounds), samples in the order of seed {}",
            q.order_seed
        );
    }
    line
}

/// A target's sequential decision in one line: `decided pass after 88 of 200 samples: drop ≤
/// 4.97 points`.
pub fn sequential_text(report: &EvalReport, t: &EvalTarget) -> Option<String> {
    let q = t.sequential.as_ref()?;
    let bounds: Vec<String> = q
        .rules
        .iter()
        .map(|r| match r.rule.as_str() {
            "max_accuracy_drop" => format!(
                "drop {}…{} vs limit {}",
                signed(r.lower.0, 2),
                signed(r.upper.0, 2),
                points(r.limit.0)
            ),
            _ => format!(
                "accuracy {:.2}%…{:.2}% vs limit {:.2}%",
                100.0 * r.lower.0,
                100.0 * r.upper.0,
                100.0 * r.limit.0
            ),
        })
        .collect();
    let verb = match q.decision.as_str() {
        "undecided" => "undecided".to_string(),
        d => format!("decided {d}"),
    };
    Some(format!(
        "{verb} after {} of {} samples ({}; anytime-valid 95% bounds)",
        q.samples_used,
        report.dataset.samples,
        bounds.join("; ")
    ))
}

/// `1 point`, `2.5 points` (the figure as given, at most two decimals).
pub fn points(v: f64) -> String {
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "1" {
        "1 point".into()
    } else {
        format!("{text} points")
    }
}

/// What a target's sample could not show and what would: `4 samples cannot show a drop under
/// 40.35 points; at its flip rates (0.0% broken, 0.0% fixed) 268 samples show 1 point at even
/// odds, 268 with 80% power`.
pub fn samples_needed_text(t: &EvalTarget) -> Option<String> {
    let need = t.samples_needed.as_ref()?;
    let c = comparison(t, "reference")?;
    let floor = c.resolution.map_or(String::new(), |r| {
        format!("{} samples cannot show a drop under {:.2} points; ", c.pairs, r.0)
    });
    let rates = format!(
        "{:.1}% broken, {:.1}% fixed",
        100.0 * need.broken_rate.0,
        100.0 * need.fixed_rate.0
    );
    let limit = points(need.limit_points.0);
    let sizes = match (need.even_odds, need.power_80) {
        (Some(even), Some(p80)) => {
            format!("{even} samples show a drop within {limit} at even odds, {p80} with 80% power")
        }
        _ => format!("no number of samples shows a drop within {limit}"),
    };
    Some(format!("{floor}at its flip rates ({rates}) {sizes}"))
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
    if let Some(q) = sequential_text(report, t) {
        let _ = writeln!(s, "  {}: {q}", t.id);
    }
    for c in t.comparisons.iter().filter(|c| c.drop.unbounded.is_some()) {
        let why = c.drop.unbounded.as_deref().unwrap_or_default();
        let _ = writeln!(s, "  {} vs {}: {why}", t.id, c.against);
    }
    if let Some(need) = samples_needed_text(t) {
        let _ = writeln!(s, "  {}: {need}", t.id);
    }
    let broken: Vec<String> = t.flips.iter().filter(|f| f.kind == "broken").map(flip_text).collect();
    if !broken.is_empty() {
        let shown = crate::foundation::words::listed_with(&broken, 5, "; ");
        let _ = writeln!(s, "  {} broke: {shown}", t.id);
    }
    if let Some(x) = &t.explanation {
        let _ = writeln!(
            s,
            "  {} flips come from: {}",
            t.id,
            super::present::printable(&explanation_text(t, x))
        );
    }
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

/// Where a target's flips come from, in one line. The baseline is what every other target's
/// layers are compared with, so its own audit can find no departure: that is said, not `none`.
pub fn explanation_text(t: &EvalTarget, x: &FlipExplanation) -> String {
    let samples = count(x.samples.len(), "broken sample");
    if let Some(e) = &x.error {
        return format!("the per-layer audit of {samples} failed: {e}");
    }
    if t.role == TargetRole::Baseline {
        return format!(
            "{} is the baseline the per-layer audit compares every target's layers with: no first departure of its own",
            t.id
        );
    }
    if x.first_code_difference.is_none() && x.first_beyond_rounding.is_none() && x.first_sqnr_loss.is_none() {
        return format!("over {samples}, no layer departs from the baseline at any level");
    }
    let at = |p: &Option<crate::report::compare::LayerPointer>| {
        p.as_ref()
            .map_or("none".into(), |p| format!("#{} {} ({})", p.index, p.node, p.op_type))
    };
    format!(
        "over {samples}, first code difference {}, first beyond rounding {}, first SQNR loss {}",
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
            let bound = bound_word(report, &r.target, r.rule);
            format!("{} {}: {bound}{m} vs limit {l} ({})", r.target, r.rule, r.origin)
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

/// Which bound a failed eval rule measured: the drop's upper bound and the accuracy's lower
/// one, unless a sequential decision broke the limit with the other.
fn bound_word(report: &EvalReport, target: &str, rule: Rule) -> &'static str {
    let broken = report
        .targets
        .iter()
        .find(|t| t.id == target)
        .and_then(|t| t.sequential.as_ref())
        .and_then(|q| q.rules.iter().find(|r| r.rule == rule))
        .is_some_and(|r| r.decision == SequentialDecision::Fail);
    match (rule, broken) {
        (Rule::MaxAccuracyDrop, false) | (Rule::MinAccuracy, true) => "upper bound ",
        (Rule::MinAccuracy, false) | (Rule::MaxAccuracyDrop, true) => "lower bound ",
        _ => "",
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
    // Without a gate there is no verdict: the heading names the command once.
    let verdict = match report.gate.verdict {
        Verdict::Pass => "✅ PASS · ",
        Verdict::Fail => "❌ FAIL · ",
        Verdict::None => "",
    };
    let _ = writeln!(s, "### {verdict}npu-audit eval · `{}`\n", esc(&report.model));
    let _ = writeln!(
        s,
        "{} of `{}`, task `{}` on `{}`; reference: {}\n",
        count(report.dataset.samples, "sample"),
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
            let _ = writeln!(
                s,
                "\n`{}`: flips come from {}",
                esc(&t.id),
                esc(&explanation_text(t, x))
            );
        }
    }
    for t in &report.targets {
        let lines = sequential_text(report, t).into_iter().chain(samples_needed_text(t));
        for line in lines {
            let _ = writeln!(s, "\n`{}`: {}", esc(&t.id), esc(&line));
        }
    }
    s
}

/// `sample-size` in the terminal: per target (or the expected rates) the samples that show the
/// limit at even odds and with the asked power, and what they cost at the earlier eval's speed.
pub fn sizing_text(sizing: &crate::commands::eval::sizing::Sizing) -> String {
    let mut b = Builder::default();
    let powered = format!("samples ({:.0}% power)", 100.0 * sizing.power);
    b.push_record([
        "rates of",
        "broken",
        "fixed",
        "samples (even odds)",
        powered.as_str(),
        "time per target",
    ]);
    let count = |n: Option<u64>| n.map_or("never".to_string(), |n| n.to_string());
    for r in &sizing.rows {
        let time = match (r.powered, r.run_ms_median) {
            (Some(n), Some(ms)) => {
                crate::foundation::console::elapsed_text(std::time::Duration::from_secs_f64(n as f64 * ms / 1000.0))
            }
            _ => "-".into(),
        };
        b.push_record([
            r.target.clone(),
            format!("{:.2}%", 100.0 * r.broken_rate),
            format!("{:.2}%", 100.0 * r.fixed_rate),
            count(r.even_odds),
            count(r.powered),
            time,
        ]);
    }
    let mut s = format!(
        "{} samples to show a drop within {} (one-sided 95% Tango bound; rates: {})\n",
        bold("sample-size"),
        points(sizing.limit_points),
        sizing.source
    );
    let kinds = [
        ColumnKind::Key,
        ColumnKind::Figure,
        ColumnKind::Figure,
        ColumnKind::Figure,
        ColumnKind::Figure,
        ColumnKind::Figure,
    ];
    let _ = writeln!(s, "{}", table_with(b, &Look::grid(&kinds)));
    if sizing.rows.iter().any(|r| r.even_odds.is_none()) {
        let _ = writeln!(s, "never: at these rates the expected drop is at or beyond the limit");
    }
    if sizing.rows.iter().any(|r| r.run_ms_median.is_some()) {
        let _ = writeln!(
            s,
            "time per target: the powered sample count at the earlier eval's median time per sample, one session"
        );
    }
    prose(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_agree_with_their_number() {
        assert_eq!(points(1.0), "1 point");
        assert_eq!(points(1.000_000_1), "1 point");
        assert_eq!(points(2.5), "2.5 points");
        assert_eq!(points(0.25), "0.25 points");
    }

    fn explained(role: &str, first: Option<crate::report::compare::LayerPointer>) -> String {
        let x = FlipExplanation {
            samples: vec!["s1".into()],
            first_code_difference: first,
            first_beyond_rounding: None,
            first_sqnr_loss: None,
            error: None,
        };
        let t: EvalTarget = serde_json::from_value(serde_json::json!({
            "id": "cpu:noopt", "role": role, "status": "ok", "intra_op_threads": 1,
            "samples_run": 1, "flips": [], "worst": [], "comparisons": []
        }))
        .unwrap_or_else(|e| panic!("a target: {e}"));
        explanation_text(&t, &x)
    }

    #[test]
    fn the_baseline_has_no_departure_of_its_own_and_says_so() {
        let text = explained("baseline", None);
        assert_eq!(
            text,
            "cpu:noopt is the baseline the per-layer audit compares every target's layers with: no first departure of its own"
        );
        assert!(!text.contains("none"), "{text}");
        let target = explained("target", None);
        assert_eq!(
            target,
            "over 1 broken sample, no layer departs from the baseline at any level"
        );
    }

    #[test]
    fn a_flip_cannot_move_the_terminal_cursor() {
        let flip = crate::report::eval::Flip {
            id: "\u{1b}[2K\rFAKE PASS".into(),
            label: "a\nb".into(),
            reference: "\u{202e}0".into(),
            target: "1".into(),
            kind: "broken".into(),
            sqnr_db: crate::report::common::Num(3.0),
        };
        let text = flip_text(&flip);
        assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
        assert!(
            text.starts_with("\\u{1b}[2K\\rFAKE PASS (label a\\nb, reference \\u{202e}0"),
            "{text}"
        );
    }
}
