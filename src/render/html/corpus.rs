//! A corpus drift report (`eval SPEC.toml --task score`) as one HTML page: the targets' figures,
//! the mean KLD by position in the window (one curve per target, a dashed line at each prefill
//! chunk's first token, the jumps ringed), and every window with the reference's text and each
//! target's worst position. The curve's points are the plot's marks (the self-check counts one per
//! position a target scored).

use std::fmt::Write as _;

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::plot::{nice_ticks, svg_open, tick_label, Scale, PALETTE};
use super::{SELF_CHECK_JS, STYLE};
use crate::render::corpus::{chunk_start, figures_row, jump_lines, worst_words, HEAD};
use crate::render::generation::{gate_lines, part_words, report_notes, verdict_words};
use crate::render::present::{escape_markup, num};
use crate::report::generation::GenerationReport;

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = WIDTH - 180.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = HEIGHT - 50.0;

/// The page.
pub fn render(r: &GenerationReport) -> String {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "npu-audit corpus drift: " (r.spec.path) } style { (PreEscaped(STYLE)) } }
            body {
                h1 { "npu-audit corpus drift" }
                p { "Spec " code { (r.spec.path) } " (" (r.spec.layout) ", " (r.spec.form) "), reference " code { (r.reference.path) }
                    ", set " code { (r.dataset.path) } " (" (r.dataset.samples) " windows), perplexity of the reference "
                    (r.reference_corpus.as_ref().map_or("-".into(), |c| num(c.perplexity.0))) "." }
                (targets(r))
                h2 { "Mean KLD by position in the window" }
                p.muted { "Position j: the logits after the window's token j, held to token j+1. Dashed: the first token of a prefill chunk." }
                (PreEscaped(curve(r)))
                @for t in &r.targets { @if let Some(c) = &t.corpus { @for j in jump_lines(r, c) { p { strong { (t.id) } ": " (j) } } } }
                (windows(r))
                (gate(r))
                @for n in report_notes(r) { p.note { (n) } }
                p.muted { "npu-audit " (r.tool.version) }
                (PreEscaped(format!("<script>{SELF_CHECK_JS}</script>\n")))
            }
        }
    };
    page.into_string()
}

fn targets(r: &GenerationReport) -> Markup {
    html! {
        h2 { "Targets" }
        table {
            tr { @for h in HEAD { th { (h) } } }
            @for t in &r.targets {
                tr {
                    @for (k, cell) in figures_row(t, r.dataset.samples).into_iter().enumerate() {
                        @if k < 2 { td { (cell) } } @else { td.num { (cell) } }
                    }
                }
            }
        }
        @for t in &r.targets {
            p { strong { (t.id) } " " (t.runtime.as_deref().unwrap_or(""))
                @if let Some(e) = &t.error { br; "error: " (e) }
                @for p in &t.parts { br; span.muted { (part_words(p)) } } }
        }
    }
}

fn windows(r: &GenerationReport) -> Markup {
    let Some(reference) = &r.reference_corpus else {
        return html! {};
    };
    html! {
        h2 { "Windows" }
        table {
            tr { th { "window" } th { "reference text" } th { "PPL" } @for t in &r.targets { th { (t.id) } } }
            @for (k, w) in reference.rows.iter().enumerate() {
                tr {
                    td { code { (w.id) } }
                    td { (w.text) }
                    td.num { (num(w.perplexity.0)) }
                    @for t in &r.targets {
                        td { @match t.corpus.as_ref().and_then(|c| c.rows.get(k)) {
                            Some(x) => { "mean KLD " (num(x.mean_kld.0)) br; span.muted { (worst_words(x)) } }
                            None => span.muted { "not run" },
                        } }
                    }
                }
            }
        }
    }
}

fn gate(r: &GenerationReport) -> Markup {
    let lines = gate_lines(r);
    html! {
        @if !lines.is_empty() {
            h2 { "Gate: " (verdict_words(r)) }
            ul { @for l in lines { li { (l) } } }
        }
    }
}

/// The curve plot: one polyline per target over the positions it scored, a point (a mark) at
/// each, the chunk boundaries dashed.
fn curve(r: &GenerationReport) -> String {
    let curves: Vec<(&str, Vec<(usize, f64)>)> = r
        .targets
        .iter()
        .filter_map(|t| {
            let c = t.corpus.as_ref()?;
            let points: Vec<(usize, f64)> = c
                .by_position
                .iter()
                .filter(|p| p.mean_kld.0.is_finite())
                .map(|p| (p.position, p.mean_kld.0))
                .collect();
            (!points.is_empty()).then_some((t.id.as_str(), points))
        })
        .collect();
    let positions = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(j, _)| *j + 1))
        .max()
        .unwrap_or(1);
    let top = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, v)| *v))
        .fold(0.0, f64::max);
    let y_ticks = nice_ticks(0.0, top.max(1e-9), 5);
    let x = Scale {
        d0: 0.0,
        d1: (positions.max(2) - 1) as f64,
        p0: LEFT,
        p1: RIGHT,
    };
    let y = Scale {
        d0: 0.0,
        d1: *y_ticks.last().unwrap_or(&1.0),
        p0: BOTTOM,
        p1: TOP,
    };
    let mut s = String::new();
    svg_open(
        &mut s,
        "corpus-kld",
        WIDTH,
        HEIGHT,
        "mean KLD by position in the window",
    );
    axes(&mut s, &x, &y, &y_ticks, positions);
    chunk_lines(&mut s, r, &x, positions);
    for (k, (id, points)) in curves.iter().enumerate() {
        target_curve(&mut s, (k, id), points, (&x, &y));
    }
    s.push_str("</svg>\n");
    s
}

/// One target's curve: the line, a point (a mark) per position with its figure on hover, and its
/// legend entry (`k`: its place among the curves).
fn target_curve(s: &mut String, (k, id): (usize, &str), points: &[(usize, f64)], (x, y): (&Scale, &Scale)) {
    let colour = PALETTE[k % PALETTE.len()];
    let path: Vec<String> = points
        .iter()
        .map(|(j, v)| format!("{:.1},{:.1}", x.at(*j as f64), y.at(*v)))
        .collect();
    let _ = writeln!(
        s,
        "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
        path.join(" ")
    );
    for (j, v) in points {
        let _ = writeln!(
            s,
            "<circle class=\"mark\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"><title>{} position {j}: {} nats</title></circle>",
            x.at(*j as f64),
            y.at(*v),
            escape_markup(id),
            num(*v)
        );
    }
    let ly = TOP + 18.0 * k as f64;
    let _ = writeln!(
        s,
        "<rect x=\"{:.0}\" y=\"{:.0}\" width=\"12\" height=\"3\" fill=\"{colour}\"/><text x=\"{:.0}\" y=\"{:.0}\" font-size=\"12\">{}</text>",
        RIGHT + 20.0,
        ly,
        RIGHT + 38.0,
        ly + 5.0,
        escape_markup(id)
    );
}

fn axes(s: &mut String, x: &Scale, y: &Scale, y_ticks: &[f64], positions: usize) {
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{BOTTOM}\" x2=\"{RIGHT}\" y2=\"{BOTTOM}\" stroke=\"#444\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{BOTTOM}\" stroke=\"#444\"/>"
    );
    let step = y_ticks.get(1).zip(y_ticks.first()).map_or(1.0, |(b, a)| b - a);
    for &t in y_ticks {
        let py = y.at(t);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{RIGHT}\" y2=\"{py:.1}\" stroke=\"#eee\"/><text x=\"{:.0}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            LEFT - 6.0,
            py + 4.0,
            tick_label(t, step)
        );
    }
    // Positions are whole: a tick between two is no position.
    let x_ticks: Vec<f64> = nice_ticks(0.0, (positions.max(2) - 1) as f64, 10)
        .into_iter()
        .filter(|t| t.fract() == 0.0)
        .collect();
    let x_step = x_ticks.get(1).zip(x_ticks.first()).map_or(1.0, |(b, a)| b - a);
    for &t in x_ticks.iter().filter(|t| **t <= x.d1) {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.0}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            x.at(t),
            BOTTOM + 16.0,
            tick_label(t, x_step)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"12\" text-anchor=\"middle\">position in the window</text><text x=\"16\" y=\"{:.0}\" font-size=\"12\" transform=\"rotate(-90 16 {:.0})\" text-anchor=\"middle\">mean KLD (nats)</text>",
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 36.0,
        (TOP + BOTTOM) / 2.0,
        (TOP + BOTTOM) / 2.0
    );
}

/// A dashed line at each window position that is a prefill chunk's first token.
fn chunk_lines(s: &mut String, r: &GenerationReport, x: &Scale, positions: usize) {
    for j in (1..positions).filter(|&j| chunk_start(r, j)) {
        let px = x.at(j as f64);
        let _ = writeln!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{BOTTOM}\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>"
        );
    }
}
