//! The triage page's SQNR distribution: one row per chipset, every measured report of it (copies
//! counted once, as the fleet counts them) as a dot at its SQNR against the golden run, the
//! chipset's median as a bar, the CPU EP's (`cpu:noopt`) SQNR on the same inputs as a hollow
//! diamond, and the fleet's outliers ringed in red. Dots are spread vertically within their row
//! (never horizontally: x is the figure).
//!
//! The x axis spans the finite figures only; an output bit-identical to the golden run
//! (+inf dB) sits on a band right of the axis, −inf on a band left of it, and a report whose
//! SQNR is NaN (NaN outputs) on a band at the far left, so no value stretches or breaks the
//! scale. Reports without a figure (malformed, not reproduced) are not drawn; the page counts
//! them.
//!
//! For the page's self-check (`tests/it/triage_html.rs`) dots are `.mark` (with `data-report`, the
//! report's index in `reports[]`, and `data-sqnr`), each row a `g.row` with `data-chipset`, each
//! axis tick a `g.tick` with `data-value`; the page's script writes where each was drawn.

use std::fmt::Write as _;

use super::plot::{nice_ticks, svg_open, tick_label, Scale};
use crate::commands::triage::fleet::{chipset_group_label, chipset_of};
use crate::render::present::{chipset_label, db, escape_markup, shorten, verdict_keyword};
use crate::report::triage::{ReportEntry, Triage};

/// Where a figure is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Place {
    Finite(f64),
    PlusInf,
    MinusInf,
    NaN,
}

impl Place {
    pub(super) fn of(v: f64) -> Place {
        if v.is_nan() {
            Place::NaN
        } else if v == f64::INFINITY {
            Place::PlusInf
        } else if v == f64::NEG_INFINITY {
            Place::MinusInf
        } else {
            Place::Finite(v)
        }
    }
}

/// One chipset's row: its reports (index in `reports[]`, entry), median, and the CPU EP's
/// figures on the inputs its reports ran on (distinct values).
pub(super) struct Row<'a> {
    pub(super) key: String,
    pub(super) reports: Vec<(usize, &'a ReportEntry)>,
    median: Option<f64>,
    cpu: Vec<f64>,
}

/// The rows, in the fleet's chipset order (reports grouped the same way when there is no
/// fleet, a single report).
pub(super) fn rows(t: &Triage) -> Vec<Row<'_>> {
    let mut rows: Vec<Row> = Vec::new();
    for (i, e) in t.reports.iter().enumerate() {
        if e.duplicate_of.is_some() || e.sqnr_db.is_none() {
            continue;
        }
        let key = chipset_of(e);
        match rows.iter_mut().find(|r| r.key == key) {
            Some(r) => r.reports.push((i, e)),
            None => rows.push(Row {
                key,
                reports: vec![(i, e)],
                median: None,
                cpu: Vec::new(),
            }),
        }
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    for r in &mut rows {
        r.median = t
            .fleet
            .as_ref()
            .and_then(|f| f.by_chipset.iter().find(|g| g.key == r.key))
            .and_then(|g| g.median_sqnr_db)
            .map(|n| n.0);
        for (_, e) in &r.reports {
            if let Some(c) = e.cpu_sqnr_db.map(|n| n.0) {
                if !c.is_nan() && !r.cpu.iter().any(|x| x.to_bits() == c.to_bits()) {
                    r.cpu.push(c);
                }
            }
        }
    }
    rows
}

/// The plot's geometry: the finite axis and the bands beside it.
pub(super) struct Frame {
    pub(super) x: Scale,
    ticks: Vec<f64>,
    /// Centres of the NaN, −inf and +inf bands, when some figure needs them.
    nan_x: Option<f64>,
    minus_inf_x: Option<f64>,
    plus_inf_x: Option<f64>,
    width: f64,
}

const LABEL_W: f64 = 170.0;
const BAND_W: f64 = 46.0;
const AXIS_W: f64 = 720.0;
const ROW_H: f64 = 40.0;
const TOP: f64 = 34.0;

impl Frame {
    pub(super) fn new(rows: &[Row]) -> Frame {
        let places: Vec<Place> = rows
            .iter()
            .flat_map(|r| {
                let dots = r.reports.iter().filter_map(|(_, e)| e.sqnr_db.map(|n| n.0));
                dots.chain(r.cpu.iter().copied()).chain(r.median)
            })
            .map(Place::of)
            .collect();
        let finite: Vec<f64> = places
            .iter()
            .filter_map(|p| if let Place::Finite(v) = p { Some(*v) } else { None })
            .collect();
        let (lo, hi) = match (
            finite.iter().copied().reduce(f64::min),
            finite.iter().copied().reduce(f64::max),
        ) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (0.0, 10.0),
        };
        let ticks = nice_ticks(lo, hi, 8);
        let mut x = LABEL_W;
        let mut band = |needed: bool| {
            needed.then(|| {
                x += BAND_W;
                x - BAND_W / 2.0
            })
        };
        let nan_x = band(places.contains(&Place::NaN));
        let minus_inf_x = band(places.contains(&Place::MinusInf));
        let p0 = x + 14.0;
        let p1 = p0 + AXIS_W;
        let plus_inf_x = places.contains(&Place::PlusInf).then_some(p1 + 14.0 + BAND_W / 2.0);
        Frame {
            x: Scale {
                d0: ticks[0],
                d1: ticks[ticks.len() - 1],
                p0,
                p1,
            },
            ticks,
            nan_x,
            minus_inf_x,
            plus_inf_x,
            width: p1 + 14.0 + BAND_W + 16.0,
        }
    }

    /// The x of a figure.
    pub(super) fn at(&self, p: Place) -> f64 {
        match p {
            Place::Finite(v) => self.x.at(v),
            Place::PlusInf => self.plus_inf_x.unwrap_or(self.x.p1),
            Place::MinusInf => self.minus_inf_x.unwrap_or(self.x.p0),
            Place::NaN => self.nan_x.unwrap_or(self.x.p0),
        }
    }
}

/// The colour of a verdict's dots (and of its tag in the report list).
pub(super) fn verdict_colour(keyword: &str) -> &'static str {
    match keyword {
        "reproduced" => "#1a7f37",
        "rounding" => "#5aae61",
        "cpu_fallback" => "#6b6b6b",
        "other_chipset" => "#7b3294",
        "garbage" => "#1f2328",
        "unidentified" => "#e6550d",
        "unexplained" => "#c62828",
        _ => "#9a6700",
    }
}

/// The SVG of the SQNR distribution per chipset.
pub(super) fn sqnr_plot(t: &Triage) -> String {
    let rows = rows(t);
    let f = Frame::new(&rows);
    let height = TOP + rows.len() as f64 * ROW_H + 44.0;
    let mut s = String::new();
    let n: usize = rows.iter().map(|r| r.reports.len()).sum();
    svg_open(
        &mut s,
        "sqnr-by-chipset",
        f.width,
        height,
        &format!(
            "SQNR against the golden run of {n} measured reports, one row per chipset ({}), with each chipset's median and the CPU EP's SQNR on the same inputs",
            rows.iter().map(|r| chipset_group_label(&r.key)).collect::<Vec<_>>().join(", ")
        ),
    );
    let _ = writeln!(
        s,
        "<title>SQNR per chipset</title><desc>One dot per report at its SQNR (dB) against the golden run; bar: the chipset's median; diamond: the CPU EP on the same inputs; red ring: an outlier.</desc>"
    );
    axis(&mut s, &f, height);
    let outliers: Vec<&str> = t
        .fleet
        .as_ref()
        .map(|fl| fl.outliers.iter().map(String::as_str).collect())
        .unwrap_or_default();
    for (k, r) in rows.iter().enumerate() {
        row(&mut s, &f, r, TOP + k as f64 * ROW_H, &outliers);
    }
    s.push_str("</svg>\n");
    s
}

/// The ticks and grid of the finite axis, and the labels of the bands beside it.
fn axis(s: &mut String, f: &Frame, height: f64) {
    let (top, bottom) = (TOP - 6.0, height - 38.0);
    let step = f.ticks.get(1).map_or(1.0, |b| b - f.ticks[0]);
    let _ = writeln!(s, "<g class=\"axis\">");
    for v in &f.ticks {
        let x = f.x.at(*v);
        let _ = writeln!(
            s,
            "<g class=\"tick\" data-value=\"{v}\"><line class=\"grid\" x1=\"{x:.2}\" y1=\"{top:.1}\" x2=\"{x:.2}\" y2=\"{bottom:.1}\"/>\
             <text x=\"{x:.2}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
            bottom + 16.0,
            tick_label(*v, step)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">SQNR against the golden run (dB)</text>",
        (f.x.p0 + f.x.p1) / 2.0,
        bottom + 34.0
    );
    for (x, label, class) in [
        (f.nan_x, "NaN", "band-nan"),
        (f.minus_inf_x, "−∞", "band-minus-inf"),
        (f.plus_inf_x, "∞ exact", "band-inf"),
    ] {
        if let Some(x) = x {
            let _ = writeln!(
                s,
                "<rect class=\"band {class}\" x=\"{:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f3f3f3\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
                x - BAND_W / 2.0 + 3.0,
                BAND_W - 6.0,
                bottom - top,
                bottom + 16.0
            );
        }
    }
    let _ = writeln!(s, "</g>");
}

/// The figure as the title of a mark says it.
fn figure(v: f64) -> String {
    match Place::of(v) {
        Place::PlusInf => "+inf dB (bit-identical to the golden run)".into(),
        Place::NaN => "NaN (no figure: NaN outputs)".into(),
        _ => format!("{} dB", db(v)),
    }
}

/// One chipset's row: its band and label, the CPU EP's diamonds, the median bar, the dots.
fn row(s: &mut String, f: &Frame, r: &Row, y0: f64, outliers: &[&str]) {
    let mid = y0 + ROW_H / 2.0;
    let _ = writeln!(
        s,
        "<g class=\"row\" data-chipset=\"{}\" data-reports=\"{}\">\
         <rect class=\"row-band\" x=\"{LABEL_W:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{ROW_H:.1}\" fill=\"none\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} <tspan class=\"muted\">({})</tspan></text>",
        escape_markup(&r.key),
        r.reports.len(),
        f.width - LABEL_W - 8.0,
        LABEL_W - 8.0,
        mid + 4.0,
        escape_markup(&shorten(&chipset_group_label(&r.key), 24)),
        r.reports.len()
    );
    for c in &r.cpu {
        let (x, y) = (f.at(Place::of(*c)), y0 + 6.0);
        let _ = writeln!(
            s,
            "<path class=\"cpu-ref\" data-sqnr=\"{c}\" d=\"M{x:.2},{:.2} l5,5 l-5,5 l-5,-5 z\" fill=\"#fff\" stroke=\"#333\" stroke-width=\"1.5\">\
             <title>{}: the CPU EP (cpu:noopt) on the same inputs, {}</title></path>",
            y - 5.0,
            escape_markup(&chipset_group_label(&r.key)),
            figure(*c)
        );
    }
    if let Some(m) = r.median {
        let x = f.at(Place::of(m));
        let _ = writeln!(
            s,
            "<line class=\"median\" data-sqnr=\"{m}\" x1=\"{x:.2}\" y1=\"{:.1}\" x2=\"{x:.2}\" y2=\"{:.1}\" stroke=\"#1f2328\" stroke-width=\"3\">\
             <title>{}: median SQNR {}</title></line>",
            y0 + 13.0,
            y0 + ROW_H - 3.0,
            escape_markup(&chipset_group_label(&r.key)),
            figure(m)
        );
    }
    for (k, (i, e)) in r.reports.iter().enumerate() {
        dot(s, f, (*i, e), mid + 3.0 + ((k % 5) as f64 - 2.0) * 4.0, outliers);
    }
    let _ = writeln!(s, "</g>");
}

/// One report's dot.
fn dot(s: &mut String, f: &Frame, (i, e): (usize, &ReportEntry), y: f64, outliers: &[&str]) {
    let v = e.sqnr_db.map_or(f64::NAN, |n| n.0);
    let keyword = verdict_keyword(e.verdict.kind);
    let outlier = outliers.contains(&e.path.as_str());
    let device = e.device.as_ref().and_then(|d| d.device_model.as_deref()).unwrap_or("-");
    let _ = writeln!(
        s,
        "<circle class=\"mark{}\" data-report=\"{i}\" data-sqnr=\"{v}\" data-verdict=\"{keyword}\" cx=\"{:.2}\" cy=\"{y:.2}\" r=\"{}\" \
         fill=\"{}\" fill-opacity=\"0.85\" stroke=\"{}\" stroke-width=\"{}\"><title>#{} {} ({}, {}): {}, {keyword}{}</title></circle>",
        if outlier { " outlier" } else { "" },
        f.at(Place::of(v)),
        if outlier { 6.5 } else { 4.5 },
        verdict_colour(&keyword),
        if outlier { "#d00000" } else { "#ffffff" },
        if outlier { 2.5 } else { 0.8 },
        i + 1,
        escape_markup(&shorten(&e.path, 120)),
        escape_markup(&chipset_label(e.identity.as_ref())),
        escape_markup(device),
        figure(v),
        if outlier { ", outlier" } else { "" }
    );
}
