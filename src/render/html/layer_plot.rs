//! The per-layer SQNR plot: one curve per target over its tapped layers (x: the layer's index in
//! execution order, y: cumulative `sqnr_db`); an exact match (+inf dB) is drawn as a triangle
//! on a band above the axis range, −inf on a band below, null and NaN are left out; each
//! target's first divergence from the baseline is a dashed line.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::plot::{nice_ticks, svg_open, target_colour, tick_label, Scale};
use crate::render::present::{divergence_sentence, escape_markup, shorten};
use crate::report::compare::{LayerReport, Report, TargetReport};
use crate::report::facts::TargetRole;

/// Where a layer's SQNR is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum LayerValue {
    Finite(f64),
    PlusInf,
    MinusInf,
}

pub(super) fn layer_value(l: &LayerReport) -> Option<LayerValue> {
    let v = l.sqnr_db?.0;
    if v.is_nan() {
        None
    } else if v == f64::INFINITY {
        Some(LayerValue::PlusInf)
    } else if v == f64::NEG_INFINITY {
        Some(LayerValue::MinusInf)
    } else {
        Some(LayerValue::Finite(v))
    }
}

/// Geometry of the layer plot.
pub(super) struct LayerFrame {
    pub(super) x: Scale,
    pub(super) y: Scale,
    y_ticks: Vec<f64>,
    x_ticks: Vec<f64>,
    /// Rows for +inf and -inf, above and below the finite range.
    y_plus_inf: f64,
    y_minus_inf: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

const LP_WIDTH: f64 = 1180.0;

const LP_HEIGHT: f64 = 460.0;

impl LayerFrame {
    pub(super) fn new(series: &[&TargetReport]) -> LayerFrame {
        let (left, right, top, bottom) = (70.0, LP_WIDTH - 230.0, 40.0, LP_HEIGHT - 60.0);
        let layers = || series.iter().flat_map(|t| t.layers.iter());
        let finite: Vec<f64> = layers()
            .filter_map(|l| match layer_value(l) {
                Some(LayerValue::Finite(v)) => Some(v),
                _ => None,
            })
            .collect();
        let (lo, hi) = if finite.is_empty() {
            (0.0, 10.0)
        } else {
            (
                finite.iter().copied().fold(f64::INFINITY, f64::min),
                finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            )
        };
        let y_ticks = nice_ticks(lo, hi, 6);
        let (y0, y1) = (y_ticks[0], y_ticks[y_ticks.len() - 1]);
        let imin = layers().map(|l| l.index).min().unwrap_or(0) as f64;
        let imax = layers().map(|l| l.index).max().unwrap_or(0) as f64;
        let x_ticks: Vec<f64> = nice_ticks(imin, imax, 10)
            .into_iter()
            .map(f64::round)
            .filter(|v| *v >= imin && *v <= imax)
            .fold(Vec::new(), |mut acc, v| {
                if acc.last() != Some(&v) {
                    acc.push(v);
                }
                acc
            });
        let pad = if imax > imin { 0.0 } else { 1.0 };
        LayerFrame {
            x: Scale {
                d0: imin - pad,
                d1: imax + pad,
                p0: left + 12.0,
                p1: right - 12.0,
            },
            y: Scale {
                d0: y0,
                d1: y1,
                p0: bottom - 34.0,
                p1: top + 34.0,
            },
            y_ticks,
            x_ticks,
            y_plus_inf: top + 10.0,
            y_minus_inf: bottom - 10.0,
            left,
            right,
            top,
            bottom,
        }
    }

    pub(super) fn point(&self, index: usize, v: LayerValue) -> (f64, f64) {
        let y = match v {
            LayerValue::Finite(x) => self.y.at(x),
            LayerValue::PlusInf => self.y_plus_inf,
            LayerValue::MinusInf => self.y_minus_inf,
        };
        (self.x.at(index as f64), y)
    }
}

/// The per-layer SQNR plot of the targets in `series` (each with layers).
pub(super) fn layer_plot(report: &Report, series: &[&TargetReport]) -> String {
    let f = LayerFrame::new(series);
    let mut s = String::new();
    svg_open(&mut s, "layers", LP_WIDTH, LP_HEIGHT, "per-layer SQNR per target");
    layer_axes(&mut s, &f, series);
    let n = series.len();
    for (i, t) in series.iter().enumerate() {
        // Earlier series are drawn wider, so identical curves stay visible under later ones.
        let width = 1.6 + 1.8 * (n - 1 - i) as f64;
        let radius = 2.6 + 1.0 * (n - 1 - i) as f64;
        layer_series(&mut s, &f, t, target_colour(report, t), width, radius);
    }
    divergence_markers(&mut s, &f, report, series);
    layer_legend(&mut s, &f, report, series);
    s.push_str("</svg>\n");
    s
}

fn layer_axes(s: &mut String, f: &LayerFrame, series: &[&TargetReport]) {
    s.push_str("<g class=\"axis\">\n");
    let step = f.y_ticks.get(1).map_or(1.0, |b| b - f.y_ticks[0]);
    for &v in &f.y_ticks {
        let y = f.y.at(v);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            f.left,
            f.right,
            f.left - 5.0,
            f.left,
            f.left - 8.0,
            y + 4.0,
            tick_label(v, step)
        );
    }
    for &v in &f.x_ticks {
        let x = f.x.at(v);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{v:.0}</text>",
            f.bottom,
            f.bottom + 5.0,
            f.bottom + 19.0
        );
    }
    let layers = || series.iter().flat_map(|t| t.layers.iter());
    let band = |s: &mut String, y: f64, label: &str| {
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke-dasharray=\"4 3\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            f.left,
            f.right,
            f.left - 8.0,
            y + 4.0
        );
    };
    if layers().any(|l| layer_value(l) == Some(LayerValue::PlusInf)) {
        band(s, f.y_plus_inf, "∞ exact");
    }
    if layers().any(|l| layer_value(l) == Some(LayerValue::MinusInf)) {
        band(s, f.y_minus_inf, "−∞");
    }
    let _ = writeln!(
        s,
        "<path fill=\"none\" d=\"M{l:.1},{t:.1} V{b:.1} H{r:.1}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">tapped layer: index in execution order</text>\
         <text transform=\"translate({:.1},{:.1}) rotate(-90)\" text-anchor=\"middle\">cumulative SQNR vs golden (dB)</text>",
        (f.left + f.right) / 2.0,
        f.bottom + 42.0,
        f.left - 48.0,
        (f.top + f.bottom) / 2.0,
        l = f.left,
        t = f.top,
        b = f.bottom,
        r = f.right,
    );
    s.push_str("</g>\n");
}

fn layer_series(s: &mut String, f: &LayerFrame, t: &TargetReport, colour: &str, width: f64, radius: f64) {
    let dash = if t.role == TargetRole::Baseline {
        " stroke-dasharray=\"7 4\""
    } else {
        ""
    };
    let points: Vec<(&LayerReport, LayerValue)> =
        t.layers.iter().filter_map(|l| layer_value(l).map(|v| (l, v))).collect();
    let path: Vec<String> = points
        .iter()
        .map(|(l, v)| {
            let (x, y) = f.point(l.index, *v);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let _ = writeln!(
        s,
        "<g class=\"series\" data-target=\"{}\">\n<polyline class=\"line\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"{width:.1}\" \
         stroke-linejoin=\"round\" stroke-opacity=\"0.85\"{dash} points=\"{}\"/>",
        escape_markup(&t.id),
        path.join(" ")
    );
    for (l, v) in points {
        let (x, y) = f.point(l.index, v);
        let title = escape_markup(&format!(
            "{} · #{} {} ({}) · {} dB{}",
            t.id,
            l.index,
            l.node,
            l.op_type,
            match v {
                LayerValue::Finite(d) => format!("{d:.2}"),
                LayerValue::PlusInf => "inf".into(),
                LayerValue::MinusInf => "-inf".into(),
            },
            if v == LayerValue::PlusInf { " (exact match)" } else { "" }
        ));
        match v {
            LayerValue::Finite(_) => {
                let _ = writeln!(
                    s,
                    "<circle class=\"mark\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{radius:.1}\" fill=\"{colour}\" stroke=\"#fff\" stroke-width=\"0.8\"><title>{title}</title></circle>"
                );
            }
            LayerValue::PlusInf | LayerValue::MinusInf => {
                let r = radius + 2.0;
                let dir = if v == LayerValue::PlusInf { -1.0 } else { 1.0 };
                let _ = writeln!(
                    s,
                    "<path class=\"mark inf\" d=\"M{x:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\" fill=\"{colour}\" stroke=\"#fff\" stroke-width=\"0.8\"><title>{title}</title></path>",
                    y + dir * r,
                    x + r,
                    y - dir * r * 0.8,
                    x - r,
                    y - dir * r * 0.8,
                );
            }
        }
    }
    s.push_str("</g>\n");
}

/// A dashed line at each target's first departure beyond rounding from the baseline, with a triangle above
/// the plot (stacked when several targets diverge at the same layer).
fn divergence_markers(s: &mut String, f: &LayerFrame, report: &Report, series: &[&TargetReport]) {
    let rules = report.layer_audit.as_ref().map(|l| l.divergence).unwrap_or_default();
    let mut stacked: BTreeMap<usize, usize> = BTreeMap::new();
    for t in series {
        let Some(d) = t.layer_summary.as_ref().and_then(|x| x.first_beyond_rounding.as_ref()) else {
            continue;
        };
        let colour = target_colour(report, t);
        let x = f.x.at(d.index as f64);
        let k = stacked.entry(d.index).or_insert(0);
        let y = f.top - 6.0 - 9.0 * *k as f64;
        *k += 1;
        let title = escape_markup(&format!("{}: {}", t.id, divergence_sentence(t, &rules)));
        let _ = writeln!(
            s,
            "<g class=\"divergence\" data-target=\"{}\" data-index=\"{}\"><line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" \
             stroke=\"{colour}\" stroke-width=\"1.5\" stroke-dasharray=\"5 4\"><title>{title}</title></line>\
             <path d=\"M{x:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\" fill=\"{colour}\"><title>{title}</title></path></g>",
            escape_markup(&t.id),
            d.index,
            f.top,
            f.bottom,
            y + 4.0,
            x + 5.0,
            y - 4.0,
            x - 5.0,
            y - 4.0,
        );
    }
}

fn layer_legend(s: &mut String, f: &LayerFrame, report: &Report, series: &[&TargetReport]) {
    let x = f.right + 24.0;
    let mut y = f.top + 6.0;
    s.push_str("<g class=\"legend\">\n");
    for t in series {
        let colour = target_colour(report, t);
        let dash = if t.role == TargetRole::Baseline {
            " stroke-dasharray=\"7 4\""
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-width=\"3\"{dash}/>\
             <circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}<title>{}</title></text>",
            x + 26.0,
            x + 13.0,
            x + 34.0,
            y + 4.0,
            escape_markup(&shorten(&t.id, 24)),
            escape_markup(&t.id)
        );
        y += 20.0;
    }
    y += 6.0;
    let has_inf = series
        .iter()
        .flat_map(|t| t.layers.iter())
        .any(|l| layer_value(l) == Some(LayerValue::PlusInf));
    if has_inf {
        let _ = writeln!(
            s,
            "<path d=\"M{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\" fill=\"#555\"/><text x=\"{:.1}\" y=\"{:.1}\">exact match (∞ dB)</text>",
            x + 13.0,
            y - 5.0,
            x + 18.0,
            y + 4.0,
            x + 8.0,
            y + 4.0,
            x + 34.0,
            y + 4.0
        );
        y += 20.0;
    }
    if series.iter().any(|t| {
        t.layer_summary
            .as_ref()
            .is_some_and(|x| x.first_beyond_rounding.is_some())
    }) {
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#555\" stroke-width=\"1.5\" stroke-dasharray=\"5 4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">first divergence</text><text x=\"{:.1}\" y=\"{:.1}\">from the baseline</text>",
            x + 13.0,
            y - 8.0,
            x + 13.0,
            y + 8.0,
            x + 34.0,
            y + 4.0,
            x + 34.0,
            y + 18.0
        );
    }
    s.push_str("</g>\n");
}
