//! The LAYERS section of the terminal report: what was tapped and matched, then per target the
//! first layer that departs from the baseline, what tapping did to the session, and the worst
//! layers.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, table_with, ColumnKind, Look};
use super::present::{self, db_opt, num};
use crate::report::common::Num;
use crate::report::compare::{
    CodeComparison, DivergenceRules, LayerAuditInfo, LayerReport, Report, TapEffects, TargetReport,
};

/// Orders layers worst first: the largest SQNR drop, then the most codes differing from the
/// baseline, then the lowest SQNR.
fn worst_first(a: &LayerReport, b: &LayerReport) -> std::cmp::Ordering {
    let key = |l: &LayerReport| {
        (
            l.sqnr_drop_db.map_or(f64::NEG_INFINITY, |d| d.0),
            l.vs_baseline.as_ref().map_or(0, |c| c.differing),
            -l.sqnr_db.map_or(f64::INFINITY, |d| d.0),
        )
    };
    let (x, y) = (key(a), key(b));
    y.0.total_cmp(&x.0).then(y.1.cmp(&x.1)).then(y.2.total_cmp(&x.2))
}

/// `n (±1 a, ±2 b, >2 c, ties t)` for codes; the element count and max |Δ| for floats.
fn codes_cell(c: Option<&CodeComparison>, quantized: bool) -> String {
    let Some(c) = c else { return "-".into() };
    if c.differing == 0 {
        return "0".into();
    }
    if !quantized {
        return format!("{} (max {})", c.differing, num(c.max_abs.0));
    }
    let ties = c.ties.map(|t| format!(", {t} on .5")).unwrap_or_default();
    format!(
        "{} (±1 {}{ties}, ±2 {}, more {}; max {})",
        c.differing, c.off_by_one, c.off_by_two, c.off_by_more, c.max_steps
    )
}

fn layer_table(layers: &[&LayerReport]) -> String {
    let mut b = Builder::default();
    b.push_record([
        "#",
        "op",
        "node",
        "tensor",
        "SQNR dB",
        "drop dB",
        "max abs",
        "codes ≠ baseline",
        "introduced dB",
        "introduced ≠",
    ]);
    for l in layers {
        b.push_record([
            l.index.to_string(),
            l.op_type.clone(),
            l.node.clone(),
            l.tensor.clone(),
            db_opt(l.sqnr_db),
            db_opt(l.sqnr_drop_db),
            l.max_abs.map_or("-".into(), |v: Num| num(v.0)),
            codes_cell(l.vs_baseline.as_ref(), l.quantized),
            db_opt(l.introduced_sqnr_db),
            codes_cell(l.introduced_vs_baseline.as_ref(), l.quantized),
        ]);
    }
    use ColumnKind::{Figure, Key, Text, Wrapped};
    let kinds = [Key, Key, Text, Text, Figure, Figure, Figure, Wrapped, Figure, Wrapped];
    // Too wide, the tensor, max abs and the codes the layer introduces go to a second table.
    let look = Look::grid(&kinds).indented(4).splittable(1, &[3, 6, 9]);
    table_with(b, &look)
}

fn target_section(s: &mut String, t: &TargetReport, info: &LayerAuditInfo, baseline: Option<&str>) {
    let (top, rules) = (info.top, &info.divergence);
    let Some(summary) = &t.layer_summary else { return };
    let _ = writeln!(s, "\n  {}", bold(&t.id));
    if let Some(e) = &summary.error {
        let _ = writeln!(s, "    {e}");
    }
    for line in divergence_lines(t, rules, baseline) {
        let _ = writeln!(s, "    {line}");
    }
    if let Some(e) = &summary.tap_effects {
        let _ = writeln!(s, "    {}", tapping_line(e));
    }
    if let Some(b) = &summary.bisect {
        let steps: Vec<String> = b
            .steps
            .iter()
            .map(|st| format!("{}{}", st.tensor, if st.departs { " ✗" } else { " ✓" }))
            .collect();
        let _ = writeln!(
            s,
            "    bisection: {}, {}: {}",
            present::count(b.cuts, "cut"),
            present::count(b.sessions, "session"),
            steps.join(" → ")
        );
    }
    if t.layers.is_empty() {
        return;
    }
    let mut worst: Vec<&LayerReport> = t.layers.iter().collect();
    worst.sort_by(|a, b| worst_first(a, b));
    worst.truncate(top.max(1));
    let _ = writeln!(
        s,
        "    worst {} of {} layers:\n{}",
        worst.len(),
        t.layers.len(),
        indent(&layer_table(&worst), 4)
    );
}

/// Where the target first departs from the baseline at each level (nothing without one).
fn divergence_lines(t: &TargetReport, rules: &DivergenceRules, baseline: Option<&str>) -> Vec<String> {
    if baseline.is_none() {
        return Vec::new();
    }
    present::divergence_lines(t, rules)
}

/// What tapping did to the target's session.
fn tapping_line(e: &TapEffects) -> String {
    let outputs = if e.outputs_identical {
        "final outputs bit-identical to the untapped run"
    } else {
        "final outputs DIFFER from the untapped run: tapping changed the computation"
    };
    let nodes = if e.nodes_changed_count == 0 {
        "placement unchanged".to_string()
    } else {
        format!(
            "{} node(s) placed or fused differently (e.g. {})",
            e.nodes_changed_count,
            e.nodes_changed.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        )
    };
    format!(
        "tapping: {nodes}; partitions {} untapped, {} tapped; {outputs}",
        e.partitions_untapped, e.partitions_tapped
    )
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}")).collect::<Vec<_>>().join("\n")
}

/// Appends the LAYERS section when the report has a per-layer audit.
pub fn section(s: &mut String, report: &Report) {
    let Some(info) = &report.layer_audit else { return };
    let _ = writeln!(s, "\n{}", bold("LAYERS"));
    let kinds: Vec<String> = info.matched_by.iter().map(|(k, v)| format!("{v} by {k}")).collect();
    let how = if info.mode == "bisect" {
        format!("bisection among {} of {} points", info.selected, info.points)
    } else {
        format!(
            "{} of {} points tapped ({}) in {} run(s)",
            info.selected, info.points, info.mode, info.tap_runs
        )
    };
    let isolated = if info.isolated {
        "; each layer also run alone on golden inputs"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "  {how}; {} matched to the reference ({}); {}, {:.1} s{isolated}",
        info.matched,
        if kinds.is_empty() { "-".into() } else { kinds.join(", ") },
        present::count(info.sessions, "session"),
        info.seconds,
    );
    if !info.unmatched.is_empty() {
        let shown: Vec<&str> = info.unmatched.iter().take(10).map(|s| s.as_str()).collect();
        let more = info.unmatched.len().saturating_sub(shown.len());
        let _ = writeln!(
            s,
            "  no reference counterpart: {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
    }
    for p in &info.problems {
        let _ = writeln!(s, "  ! {p}");
    }
    for t in &report.targets {
        target_section(s, t, info, report.baseline.as_deref());
    }
}
