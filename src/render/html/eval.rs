//! The HTML page of `eval` (`--html FILE`): the primary metric of the reference and every target
//! with its 95% interval (one bar each), every target's drop against the reference with its
//! interval beside zero and the margin, how each target's samples fall by output SQNR (right and
//! wrong apart), the flips, the confusion matrices and the gate. Built like the other pages:
//! inline CSS and SVG, the shared self-check script, every string escaped by `maud`.
//!
//! Interval bars carry `data-run`, `data-value`, `data-lo`, `data-hi`; drop bars `data-target`
//! and the same; histogram bars `data-target`, `data-lo`, `data-correct`, `data-wrong`: a headless
//! browser's DOM dump is checked against the JSON (`tests/it/eval.rs`).

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::plot::{nice_ticks, tick_label};
use super::{SELF_CHECK_JS, STYLE};
use crate::render::eval::{drop, explanation_text, margin_word, primary, samples_needed_text, sequential_text};
use crate::report::eval::{ConfusionCell, EvalReport, EvalTarget, Metrics};
use crate::report::gate::Verdict;

const WIDTH: f64 = 760.0;
const LEFT: f64 = 200.0;
const ROW: f64 = 26.0;
const TOP: f64 = 28.0;
/// The most classes a confusion matrix is drawn for (more: the top confusions only).
const MAX_DRAWN_CLASSES: usize = 30;

/// The primary metric of a run as (value, lo, hi) in percent.
fn primary_values(report: &EvalReport, m: &Metrics) -> (f64, f64, f64) {
    match (&report.task.primary[..], &m.cer) {
        ("cer", Some(c)) => (100.0 * c.value.0, 100.0 * c.lo.0, 100.0 * c.hi.0),
        _ => (
            100.0 * m.accuracy.value.0,
            100.0 * m.accuracy.lo.0,
            100.0 * m.accuracy.hi.0,
        ),
    }
}

/// `x` of a value in `[lo, hi]` across the plot.
fn scale(v: f64, lo: f64, hi: f64) -> f64 {
    let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    LEFT + t.clamp(0.0, 1.0) * (WIDTH - LEFT - 20.0)
}

/// The x axis of a row plot at `y`: a line across the plot, a tick and its value at every tick
/// of `[lo, hi]`, and what the axis measures under it.
fn x_axis(ticks: &[f64], (lo, hi): (f64, f64), y: f64, title: &str) -> Markup {
    let step = ticks.get(1).zip(ticks.first()).map_or(1.0, |(b, a)| b - a);
    html! {
        g.axis {
            line x1=(scale(lo, lo, hi)) x2=(scale(hi, lo, hi)) y1=(y) y2=(y) stroke="#999" {}
            @for v in ticks.iter().filter(|v| **v >= lo - 1e-9 && **v <= hi + 1e-9) {
                @let x = scale(*v, lo, hi);
                line x1=(x) x2=(x) y1=(y) y2=(y + 4.0) stroke="#999" {}
                text.tick x=(x) y=(y + 15.0) text-anchor="middle" font-size="11" { (tick_label(*v, step)) }
            }
            text x=(LEFT - 8.0) y=(y + 15.0) text-anchor="end" font-size="11" fill="#555" { (title) }
        }
    }
}

fn interval_plot(report: &EvalReport) -> Markup {
    let mut rows: Vec<(String, (f64, f64, f64))> =
        vec![("reference".into(), primary_values(report, &report.reference_metrics))];
    for t in &report.targets {
        if let Some(m) = &t.metrics {
            rows.push((t.id.clone(), primary_values(report, m)));
        }
    }
    let lo = rows
        .iter()
        .map(|(_, v)| v.1)
        .fold(f64::INFINITY, f64::min)
        .floor()
        .max(0.0);
    let hi = rows
        .iter()
        .map(|(_, v)| v.2)
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .min(100.0);
    // The axis runs from tick to tick, within 0–100%.
    let ticks = nice_ticks(lo, hi, 5);
    let (lo, hi) = (
        ticks.first().map_or(lo, |t| t.max(0.0)),
        ticks.last().map_or(hi, |t| t.min(100.0)),
    );
    let axis_y = TOP + ROW * rows.len() as f64 + 4.0;
    let height = axis_y + 24.0;
    html! {
        svg.plot data-plot="intervals" xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img" aria-label="primary metric with 95% intervals" {
            text x=(LEFT) y="14" { (report.task.primary) " (%) with 95% intervals, " (format!("{lo:.0}")) " to " (format!("{hi:.0}")) }
            @for (i, (name, (v, l, h))) in rows.iter().enumerate() {
                @let y = TOP + ROW * i as f64 + ROW / 2.0;
                text x=(LEFT - 8.0) y=(y + 4.0) text-anchor="end" { (name) }
                @if l.is_finite() && h.is_finite() {
                    line x1=(scale(*l, lo, hi)) x2=(scale(*h, lo, hi)) y1=(y) y2=(y) stroke="#555" stroke-width="3" {}
                }
                circle.mark cx=(scale(*v, lo, hi)) cy=(y) r="5" fill="#0969da"
                    data-run=(name) data-value=(format!("{v}")) data-lo=(format!("{l}")) data-hi=(format!("{h}")) {
                    title { (name) ": " (format!("{v:.2} ({l:.2}–{h:.2})")) }
                }
            }
            (x_axis(&ticks, (lo, hi), axis_y, "%"))
        }
    }
}

fn drop_plot(report: &EvalReport) -> Markup {
    let rows: Vec<(&EvalTarget, &crate::report::eval::Comparison)> = report
        .targets
        .iter()
        .filter_map(|t| t.comparisons.iter().find(|c| c.against == "reference").map(|c| (t, c)))
        .collect();
    let margin = report.statistics.margin_points.unwrap_or(0.0);
    let span = rows
        .iter()
        .flat_map(|(_, c)| [c.drop.lo.0.abs(), c.drop.hi.0.abs()])
        .filter(|v| v.is_finite())
        .fold(margin.max(1.0), f64::max)
        .ceil();
    let ticks = nice_ticks(-span, span, 6);
    let axis_y = TOP + ROW * rows.len().max(1) as f64 + 4.0;
    let height = axis_y + 24.0;
    let zero = scale(0.0, -span, span);
    html! {
        svg.plot data-plot="drops" xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img" aria-label="drop against the reference" {
            text x=(LEFT) y="14" { "drop against the reference in points (right: worse), " (format!("±{span:.0}")) }
            line x1=(zero) x2=(zero) y1=(TOP - 6.0) y2=(axis_y) stroke="#999" {}
            @if margin > 0.0 {
                @let m = scale(margin, -span, span);
                line x1=(m) x2=(m) y1=(TOP - 6.0) y2=(axis_y) stroke="#c62828" stroke-dasharray="4 3" {
                    title { "margin " (crate::render::eval::points(margin)) }
                }
            }
            @for (i, (t, c)) in rows.iter().enumerate() {
                @let y = TOP + ROW * i as f64 + ROW / 2.0;
                text x=(LEFT - 8.0) y=(y + 4.0) text-anchor="end" { (t.id) }
                @if c.drop.lo.0.is_finite() && c.drop.hi.0.is_finite() {
                    line x1=(scale(c.drop.lo.0, -span, span)) x2=(scale(c.drop.hi.0, -span, span)) y1=(y) y2=(y) stroke="#555" stroke-width="3" {}
                }
                circle.mark cx=(scale(c.drop.value.0, -span, span)) cy=(y) r="5" fill="#9a6700"
                    data-target=(t.id) data-value=(format!("{}", c.drop.value.0)) data-lo=(format!("{}", c.drop.lo.0))
                    data-hi=(format!("{}", c.drop.hi.0)) {
                    title { (t.id) ": " (drop(&c.drop)) }
                }
            }
            (x_axis(&ticks, (-span, span), axis_y, "points"))
        }
    }
}

/// The colours of a histogram's bars: the samples the target answers right, and wrong.
const RIGHT_COLOUR: &str = "#1a7f37";
const WRONG_COLOUR: &str = "#c62828";

/// Whole sample counts from 0 to at least `max` for the histogram's y axis.
fn count_ticks(max: u64) -> Vec<f64> {
    let ticks: Vec<f64> = nice_ticks(0.0, max.max(1) as f64, 4)
        .into_iter()
        .filter(|v| *v >= 0.0 && v.fract() == 0.0)
        .collect();
    if ticks.len() < 2 {
        vec![0.0, max.max(1) as f64]
    } else {
        ticks
    }
}

fn histogram(t: &EvalTarget) -> Markup {
    let most = t.sqnr_histogram.iter().map(|b| b.correct + b.wrong).max().unwrap_or(1);
    let ticks = count_ticks(most);
    // Bars are scaled to the top tick, so that they read against the axis.
    let max = ticks.last().copied().unwrap_or(1.0).max(most.max(1) as f64);
    let bar_w = 34.0;
    let width = (60.0 + bar_w * t.sqnr_histogram.len() as f64).max(220.0);
    let (height, base) = (184.0, 130.0);
    html! {
        svg.plot data-plot=(format!("sqnr-{}", t.id)) xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
            viewBox=(format!("0 0 {width} {height}")) role="img" aria-label="samples by output SQNR, right and wrong" {
            text x="4" y="12" font-size="11" fill="#555" { "samples" }
            line x1="38" x2="38" y1=(base - 110.0) y2=(base) stroke="#999" {}
            line x1="38" x2=(40.0 + bar_w * t.sqnr_histogram.len() as f64) y1=(base) y2=(base) stroke="#999" {}
            @for v in &ticks {
                @let y = base - 110.0 * v / max;
                line x1="34" x2="38" y1=(y) y2=(y) stroke="#999" {}
                text.tick x="31" y=(y + 4.0) text-anchor="end" font-size="11" { (format!("{v:.0}")) }
            }
            @for (i, b) in t.sqnr_histogram.iter().enumerate() {
                @let x = 40.0 + bar_w * i as f64;
                @let hc = 110.0 * b.correct as f64 / max;
                @let hw = 110.0 * b.wrong as f64 / max;
                rect.mark x=(x) y=(base - hc) width=(bar_w - 4.0) height=(hc) fill=(RIGHT_COLOUR)
                    data-target=(t.id) data-lo=(format!("{}", b.lo_db.0)) data-correct=(b.correct) data-wrong=(b.wrong) {
                    title { (format!("{}..{} dB: {} right, {} wrong", b.lo_db.0, b.hi_db.0, b.correct, b.wrong)) }
                }
                rect.mark x=(x) y=(base - hc - hw) width=(bar_w - 4.0) height=(hw) fill=(WRONG_COLOUR)
                    data-target=(t.id) data-lo=(format!("{}", b.lo_db.0)) data-wrong=(b.wrong) {}
                line x1=(x) x2=(x) y1=(base) y2=(base + 4.0) stroke="#999" {}
                text.tick x=(x + bar_w / 2.0 - 2.0) y=(base + 14.0) text-anchor="middle" font-size="11" {
                    @if b.lo_db.0.is_finite() { (format!("{:.0}", b.lo_db.0)) } @else { (if b.lo_db.0 > 0.0 { "exact" } else { "none" }) }
                }
            }
            text x="4" y=(base + 14.0) font-size="11" fill="#555" { "dB ≥" }
            g.legend {
                rect x="40" y="164" width="10" height="10" fill=(RIGHT_COLOUR) {}
                text x="54" y="173" font-size="11" { "answered right" }
                rect x="140" y="164" width="10" height="10" fill=(WRONG_COLOUR) {}
                text x="154" y="173" font-size="11" { "answered wrong" }
            }
        }
    }
}

/// The 20 most frequent confusions (off the diagonal).
fn top_confusions(cells: &[ConfusionCell]) -> Vec<&ConfusionCell> {
    let mut off: Vec<&ConfusionCell> = cells.iter().filter(|c| c.truth != c.predicted).collect();
    off.sort_by(|a, b| b.count.cmp(&a.count).then(a.truth.cmp(&b.truth)));
    off.truncate(20);
    off
}

fn confusion(cells: &[ConfusionCell]) -> Markup {
    let classes = cells.iter().map(|c| c.truth.max(c.predicted) + 1).max().unwrap_or(0);
    let count = |t: usize, p: usize| {
        cells
            .iter()
            .find(|c| c.truth == t && c.predicted == p)
            .map_or(0, |c| c.count)
    };
    html! {
        @if classes <= MAX_DRAWN_CLASSES {
            table.confusion {
                tr { th { "truth \\ predicted" } @for p in 0..classes { th { (p) } } }
                @for t in 0..classes {
                    tr { th { (t) } @for p in 0..classes {
                        @let n = count(t, p);
                        td.num class=(if t == p { "v-ref" } else if n > 0 { "v-bad" } else { "" }) { (n) }
                    } }
                }
            }
        } @else {
            table { tr { th { "truth" } th { "predicted" } th { "samples" } }
                @for c in top_confusions(cells) { tr { td { (c.truth) } td { (c.predicted) } td.num { (c.count) } } } }
        }
    }
}

fn target_section(report: &EvalReport, t: &EvalTarget) -> Markup {
    html! {
        h2 { code { (t.id) } " " span class=(if t.status == crate::report::RunStatus::Ok { "ok" } else { "bad" }) { (t.status.as_str()) } }
        @if let Some(e) = &t.error { pre { (e) } }
        @if let Some(m) = &t.metrics {
            p { "primary " (primary(report, m)) " on " (t.samples_run) " samples"
                @if let Some(s) = t.median_sqnr_db { "; median output SQNR " (format!("{:.2}", s.0)) " dB" } }
        }
        @for c in &t.comparisons {
            p { "against " code { (c.against) } ": drop " (drop(&c.drop)) " points, " (c.fixed) " fixed, " (c.broken)
                " broken, McNemar p " (crate::render::eval::p_value(c.mcnemar_p.0)) ", " (margin_word(c)) }
            @if let Some(why) = &c.drop.unbounded { p.note { (why) } }
        }
        @if let Some(q) = sequential_text(report, t) { p.note { (q) } }
        @if let Some(need) = samples_needed_text(t) { p.note { (need) } }
        @if let Some(x) = &t.explanation { p.note { "Flips come from: " (explanation_text(t, x)) } }
        @if !t.sqnr_histogram.is_empty() { (histogram(t)) }
        @if !t.flips.is_empty() {
            details { summary { (crate::render::present::count(t.flips.len(), "sample")) " flipped" }
                table { tr { th { "sample" } th { "label" } th { "reference" } th { "target" } th { "kind" } th { "SQNR dB" } }
                    @for f in &t.flips { tr.flip data-kind=(f.kind) {
                        td { (f.id) } td { (f.label) } td { (f.reference) } td { (f.target) } td { (f.kind) }
                        td.num { (format!("{:.2}", f.sqnr_db.0)) } } } } }
        }
        @if !t.confusion.is_empty() { details { summary { "confusion matrix" } (confusion(&t.confusion)) } }
    }
}

/// Renders the eval as one self-contained HTML page.
pub fn render(report: &EvalReport) -> String {
    let verdict = match report.gate.verdict {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::None => "no limits",
    };
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "npu-audit eval: " (report.model) " (" (verdict) ")" } style { (PreEscaped(STYLE)) } }
            body {
                h1 { "npu-audit eval · " (verdict) }
                p { "Model " code { (report.model) } ", set " code { (report.dataset.path) } " (" (report.dataset.samples)
                    " samples, labels: " (report.dataset.labels) "), task " (report.task.kind) " on " code { (report.task.output) }
                    " (" (report.task.settings) "). Reference: " (report.reference) ": " (primary(report, &report.reference_metrics)) "." }
                (interval_plot(report))
                (drop_plot(report))
                @for t in &report.targets { (target_section(report, t)) }
                h2 { "Gate" }
                table { tr { th { "rule" } th { "target" } th { "measured" } th { "limit" } th { "origin" } th { "pass" } }
                    @for r in &report.gate.rules { tr class=(if r.pass { "" } else { "rule-fail" }) {
                        td { code { (r.rule.as_str()) } } td { (r.target) } td.num { (format!("{}", r.measured.0)) }
                        td.num { (format!("{}", r.limit.0)) } td { (r.origin) } td { (if r.pass { "yes" } else { "no" }) } } } }
                h2 { "Statistics" }
                ul { @for m in &report.statistics.methods { li { (m) } } }
                p.muted { "seed " (report.statistics.seed) ", " (report.statistics.resamples) " resamples" }
                @for n in &report.notes { p.note { (n) } }
                p.muted { "npu-audit " (report.tool.version) }
                (PreEscaped(format!("<script>{SELF_CHECK_JS}</script>\n")))
            }
        }
    };
    page.into_string() + "\n"
}
