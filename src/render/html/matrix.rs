//! The HTML page of `matrix` (`--html FILE`): the variant-by-target heat map (inline SVG, one
//! rect per cell coloured by its worst output's SQNR, outlined when it meets the policy), the
//! recommendation per target, the remedy searches and the cells that did not run. Built like the
//! other pages: inline CSS and SVG, the shared self-check script, every string escaped by `maud`.
//!
//! Every cell rect carries `data-variant`, `data-target`, `data-sqnr` and `data-meets`, and the
//! self-check marks the SVG `data-rendered="ok"` with the number of drawn marks, so a headless
//! browser's DOM dump can be checked against the JSON (`tests/it/matrix.rs`).

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{SELF_CHECK_JS, STYLE};
use crate::render::matrix::{cell_text, find, kind_name, SHIP_RUNS_ON_LEGEND};
use crate::render::present::{bytes, db, db_opt, pct};
use crate::report::matrix::Matrix;
use crate::report::RunStatus;

const CELL_W: f64 = 118.0;
const CELL_H: f64 = 40.0;
const LEFT: f64 = 120.0;
const TOP: f64 = 70.0;
/// The colour scale's ends: red at or below `LOW_DB`, green at or above `HIGH_DB`.
pub const LOW_DB: f64 = 0.0;
pub const HIGH_DB: f64 = 40.0;

/// The heat map colour of an SQNR: red (0 dB) through yellow to green (40 dB), grey when the
/// cell did not run or has no figure.
pub fn heat_colour(sqnr: Option<f64>) -> String {
    let Some(s) = sqnr.filter(|s| !s.is_nan()) else {
        return "#bdbdbd".into();
    };
    let t = ((s - LOW_DB) / (HIGH_DB - LOW_DB)).clamp(0.0, 1.0);
    // Hue 0 (red) to 120 (green), as RGB so the DOM dump compares exactly.
    let (r, g) = if t < 0.5 {
        (255.0, 510.0 * t)
    } else {
        (510.0 * (1.0 - t), 255.0)
    };
    format!("#{:02x}{:02x}40", r.round() as u8, g.round() as u8)
}

/// Points of accuracy lost that the colour scale shows red (`matrix --task`).
pub const RED_DROP_POINTS: f64 = 10.0;

/// A drop on the SQNR colour scale: no loss (or a gain) green, [`RED_DROP_POINTS`] or more red.
pub fn drop_shade(drop: f64) -> f64 {
    HIGH_DB - (HIGH_DB - LOW_DB) * (drop.max(0.0) / RED_DROP_POINTS)
}

/// The column labels' font size, the widest advance of one of its characters (a bound, so that
/// an estimate never falls short of the drawn text) and the label's height above and below its
/// baseline.
const LABEL_FONT: f64 = 12.0;
const LABEL_CHAR_W: f64 = 0.62 * LABEL_FONT;
const LABEL_ASCENT: f64 = 0.9 * LABEL_FONT;
const LABEL_DESCENT: f64 = 0.3 * LABEL_FONT;
/// How far a column label is turned (degrees, counter-clockwise).
const LABEL_TURN: f64 = 20.0;

/// Where the heat map's parts go: the cells' top-left corner and the drawing's size, with room
/// for every rotated column label (a long target id is not clipped at the top or the sides).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Geometry {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
}

impl Geometry {
    fn of(targets: &[String], rows: usize) -> Geometry {
        let (mut left, mut top) = (LEFT, TOP);
        // The labels' boxes with the cells at (LEFT, TOP); the drawing then grows to hold them.
        let boxes: Vec<[f64; 4]> = (0..targets.len())
            .map(|j| label_box(&targets[j], column_centre(LEFT, j), TOP - 8.0))
            .collect();
        let pad = 4.0;
        let min_x = boxes.iter().map(|b| b[0]).fold(f64::INFINITY, f64::min);
        let min_y = boxes.iter().map(|b| b[1]).fold(f64::INFINITY, f64::min);
        let max_x = boxes.iter().map(|b| b[2]).fold(f64::NEG_INFINITY, f64::max);
        if min_x < pad {
            left += pad - min_x;
        }
        if min_y < pad {
            top += pad - min_y;
        }
        let cells_right = left + CELL_W * targets.len() as f64 + 10.0;
        let width = cells_right.max(max_x + (left - LEFT) + pad);
        Geometry {
            left,
            top,
            width,
            height: top + CELL_H * rows as f64 + 10.0,
        }
    }
}

/// The x of column `j`'s centre with the cells starting at `left`.
fn column_centre(left: f64, j: usize) -> f64 {
    left + CELL_W * (j as f64 + 0.5)
}

/// The bounding box `[x0, y0, x1, y1]` of a column label that starts at `(cx, y)` (its baseline)
/// and is turned by [`LABEL_TURN`] about that point: it rises to the right, so no part of it
/// falls into the cells below.
fn label_box(text: &str, cx: f64, y: f64) -> [f64; 4] {
    let w = LABEL_CHAR_W * text.chars().count() as f64;
    let (sin, cos) = (-LABEL_TURN).to_radians().sin_cos();
    let corners = [
        (0.0, -LABEL_ASCENT),
        (w, -LABEL_ASCENT),
        (0.0, LABEL_DESCENT),
        (w, LABEL_DESCENT),
    ];
    let turned: Vec<(f64, f64)> = corners
        .iter()
        .map(|(dx, dy)| (cx + dx * cos - dy * sin, y + dx * sin + dy * cos))
        .collect();
    [
        turned.iter().map(|p| p.0).fold(f64::INFINITY, f64::min),
        turned.iter().map(|p| p.1).fold(f64::INFINITY, f64::min),
        turned.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
        turned.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
    ]
}

fn heat_map(m: &Matrix) -> Markup {
    let g = Geometry::of(&m.targets, m.cost_order.len());
    let (width, height, left, top) = (g.width, g.height, g.left, g.top);
    html! {
        svg.plot data-plot="matrix" xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
            viewBox=(format!("0 0 {width} {height}")) role="img" aria-label="SQNR by variant and target" {
            @for (j, t) in m.targets.iter().enumerate() {
                @let cx = column_centre(left, j);
                text x=(cx) y=(top - 8.0) text-anchor="start" font-size=(LABEL_FONT)
                    transform=(format!("rotate(-{LABEL_TURN} {cx} {})", top - 8.0)) { (t) }
            }
            @for (i, v) in m.cost_order.iter().enumerate() {
                text x=(left - 8.0) y=(top + CELL_H * (i as f64 + 0.5) + 4.0) text-anchor="end" { (v) }
                @for (j, t) in m.targets.iter().enumerate() {
                    @let c = find(m, v, t);
                    @let sqnr = c.filter(|c| c.status == RunStatus::Ok).and_then(|c| c.sqnr_db).map(|s| s.0);
                    @let shade = match c.and_then(|c| c.task.as_ref()) {
                        Some(t) => Some(drop_shade(t.drop.value.0)),
                        None => sqnr,
                    };
                    @let meets = c.is_some_and(|c| c.meets_policy);
                    @let x = left + CELL_W * j as f64;
                    @let y = top + CELL_H * i as f64;
                    g.cell {
                        rect.mark x=(x + 1.0) y=(y + 1.0) width=(CELL_W - 2.0) height=(CELL_H - 2.0)
                            fill=(heat_colour(shade)) stroke=(if meets { "#0b3d1a" } else { "none" })
                            stroke-width=(if meets { "3" } else { "0" })
                            data-variant=(v) data-target=(t) data-sqnr=(sqnr.map_or("none".into(), |s| format!("{s}")))
                            data-meets=(meets) {
                            title { (v) " on " (t) ": " (cell_text(c)) }
                        }
                        text x=(x + CELL_W / 2.0) y=(y + CELL_H / 2.0 + 4.0) text-anchor="middle" { (cell_text(c)) }
                    }
                }
            }
        }
    }
}

fn recommendations(m: &Matrix) -> Markup {
    html! {
        h2 { "What to ship where" }
        table {
            tr { th { "target" } th { "ship" } th { "runs on" } th { "SQNR dB" } th { "why" } th { "cheaper proven fix" } }
            @for r in &m.recommendations {
                tr {
                    td { code { (r.target) } }
                    td { @if let Some(v) = &r.variant { (v) } @else { span.bad { "none" } } }
                    td { (r.run_on.as_deref().unwrap_or("-")) }
                    td.num { (db_opt(r.sqnr_db)) }
                    td { (r.reason) }
                    td { (r.remedy.as_deref().unwrap_or("-")) }
                }
            }
        }
        p.muted { (SHIP_RUNS_ON_LEGEND) }
    }
}

fn cells_table(m: &Matrix) -> Markup {
    html! {
        h2 { "Cells" }
        table {
            tr { th { "variant" } th { "target" } th { "status" } @if m.task.is_some() { th { "primary (95% CI)" } th { "drop, points (95% CI)" } th { "fixed/broken" } th { "McNemar p" } }
                 th { "SQNR dB" } th { "max abs" } th { "top-1" }
                 th { "CPU fallback" } th { "partitions" } th { "size" } th { "runtime" } }
            @for c in &m.cells {
                tr {
                    td { (c.variant) } td { code { (c.target) } }
                    td { (c.status.as_str()) @if let Some(e) = &c.error { details { summary { "error" } pre { (e) } } } }
                    @if m.task.is_some() {
                        @match &c.task {
                            Some(t) => {
                                td.num { (format!("{:.2}% ({:.2}–{:.2})", 100.0 * t.primary.value.0, 100.0 * t.primary.lo.0, 100.0 * t.primary.hi.0)) }
                                td.num { (crate::render::eval::drop(&t.drop)) }
                                td.num { (t.fixed) "/" (t.broken) }
                                td.num { (crate::render::eval::p_value(t.mcnemar_p.0)) }
                            }
                            None => { td { "-" } td { "-" } td { "-" } td { "-" } }
                        }
                    }
                    td.num { (db_opt(c.sqnr_db)) }
                    td.num { (c.max_abs.map_or("-".into(), |v| format!("{:.5}", v.0))) }
                    td.num { (pct(c.top1_agreement)) }
                    td.num { (c.compute_fallback_nodes.map_or("-".into(), |n| n.to_string())) }
                    td.num { (c.partitions.map_or("-".into(), |n| n.to_string())) }
                    td.num { (bytes(c.model_bytes)) }
                    td { (c.runtime.as_deref().unwrap_or("-")) }
                }
            }
        }
    }
}

fn remedies(m: &Matrix) -> Markup {
    html! {
        @for s in &m.remedies {
            h2 { "Remedy for " (s.variant) ": " (kind_name(s.kind)) }
            p { (s.outcome) }
            table {
                tr { th { "#" } th { "layer" } th { "op" } th { "alone dB" } th { "kept" }
                     @for t in &s.failing_targets { th { (t) " dB (gain)" } } }
                @for (i, st) in s.steps.iter().enumerate() {
                    tr {
                        td.num { (i + 1) } td { code { (st.layer.tensor) } } td { (st.layer.op_type) }
                        td.num { (db(st.layer.introduced_sqnr_db.0)) } td { (if st.kept { "yes" } else { "no" }) }
                        @for t in &s.failing_targets {
                            td.num { (st.sqnr_db.get(t).map_or("-".into(), |v| db(v.0)))
                                (st.gained_db.get(t).map_or(String::new(), |g| format!(" ({})", crate::render::present::signed(g.0, 2)))) }
                        }
                    }
                }
            }
            details { summary { "quantizer overrides" } pre { (serde_json::to_string_pretty(&s.quantizer_overrides).unwrap_or_default()) } }
        }
    }
}

/// Renders the matrix as one self-contained HTML page.
pub fn render(m: &Matrix) -> String {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "npu-audit matrix" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "npu-audit matrix" }
                p { "Golden run: " code { (m.reference) } ". Policy: "
                    (if m.policy.is_empty() { "none".to_string() } else { m.policy.join(", ") })
                    ". Cost order: " (m.cost_order.join(" < ")) "." }
                (heat_map(m))
                @if m.task.is_some() {
                    p.muted { (crate::render::matrix::measured_text(m)) "; green for no loss to red at "
                        (RED_DROP_POINTS) " points lost; outlined cells meet the policy; grey cells did not run." }
                } @else {
                    p.muted { "Worst output's SQNR in dB against the golden run, red at " (LOW_DB) " dB to green at "
                        (HIGH_DB) " dB; outlined cells meet the policy; grey cells did not run." }
                }
                @if let Some(n) = crate::render::matrix::wrong_result_note(m) { p.note { (n) } }
                (recommendations(m))
                (remedies(m))
                (cells_table(m))
                @for n in &m.notes { p.note { (n) } }
                p.muted { "npu-audit " (m.tool.version) }
                (PreEscaped(format!("<script>{SELF_CHECK_JS}</script>\n")))
            }
        }
    };
    page.into_string() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_label_fits_in_the_heat_map() {
        let short = vec!["cpu".to_string(), "qnn:sm8650".to_string()];
        let long = vec![
            "openvino:cpu,isa=avx2,precision=f32@1.24.1".to_string(),
            "cpu".to_string(),
            "qnn:sm8650@2.7.0,htp_graph_finalization_optimization_mode=3".to_string(),
        ];
        for targets in [&short, &long] {
            let g = Geometry::of(targets, 3);
            for (j, t) in targets.iter().enumerate() {
                let [x0, y0, x1, y1] = label_box(t, column_centre(g.left, j), g.top - 8.0);
                assert!(
                    x0 >= 0.0 && y0 >= 0.0,
                    "{t} clipped at the left or top: {x0} {y0} in {g:?}"
                );
                assert!(
                    x1 <= g.width && y1 <= g.top,
                    "{t} beyond the right or into the cells: {x1} {y1} in {g:?}"
                );
            }
        }
        // Short labels keep the cells where they were.
        let g = Geometry::of(&short, 3);
        assert_eq!((g.left, g.top, g.height), (LEFT, TOP, TOP + 3.0 * CELL_H + 10.0));
        // The longest label sets the top: its box reaches exactly the padding.
        let g = Geometry::of(&long, 3);
        let [_, y0, _, _] = label_box(&long[2], column_centre(g.left, 2), g.top - 8.0);
        assert!((y0 - 4.0).abs() < 1e-9, "{y0}");
    }
}
