//! What the SVG plots of the HTML report share: round tick values, linear scales, the `<svg>`
//! element every plot opens with (the self-check script finds plots by `data-plot`), hatch
//! patterns, and the colours of targets and execution providers. The plots are drawn by hand as
//! SVG text; every string taken from the report is escaped.

use std::fmt::Write as _;

use crate::render::present::escape_markup;
use crate::report::compare::{Report, TargetReport};
use crate::report::facts::TargetRole;

/// Evenly spaced round tick values covering `[lo, hi]` (about `n` intervals): the first and last
/// ticks enclose the range.
pub(super) fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let (lo, hi) = if hi - lo > 1e-12 {
        (lo, hi)
    } else {
        (lo - 1.0, hi + 1.0)
    };
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|st| *st >= raw)
        .unwrap_or(10.0 * mag);
    let start = (lo / step).floor() * step;
    let count = ((hi - start) / step).ceil().max(1.0) as usize;
    (0..=count.min(100)).map(|k| start + k as f64 * step).collect()
}

/// A tick label with as many decimals as the tick step needs (2.5 → one, 0.25 → two).
pub(super) fn tick_label(v: f64, step: f64) -> String {
    let decimals = (0..6)
        .find(|d| {
            let scaled = step * 10f64.powi(*d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0)
        })
        .unwrap_or(6) as usize;
    let text = format!("{v:.decimals$}");
    if text.starts_with('-') && text.trim_start_matches(['-', '0', '.']).is_empty() {
        text[1..].to_string()
    } else {
        text
    }
}

/// A linear map from a data range to pixels.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scale {
    pub(super) d0: f64,
    pub(super) d1: f64,
    pub(super) p0: f64,
    pub(super) p1: f64,
}

impl Scale {
    pub(super) fn at(&self, v: f64) -> f64 {
        if (self.d1 - self.d0).abs() < f64::EPSILON {
            return (self.p0 + self.p1) / 2.0;
        }
        self.p0 + (v - self.d0) / (self.d1 - self.d0) * (self.p1 - self.p0)
    }
}

pub(super) fn svg_open(s: &mut String, plot: &str, width: f64, height: f64, label: &str) {
    let _ = writeln!(
        s,
        "<svg class=\"plot\" data-plot=\"{}\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" \
         role=\"img\" aria-label=\"{}\">",
        escape_markup(plot),
        escape_markup(label)
    );
}

/// A diagonal hatch pattern with id `id`.
pub(super) fn hatch_pattern(s: &mut String, id: &str, background: &str, stripe: &str) {
    let _ = writeln!(
        s,
        "<pattern id=\"{id}\" patternUnits=\"userSpaceOnUse\" width=\"8\" height=\"8\" patternTransform=\"rotate(45)\">\
         <rect width=\"8\" height=\"8\" fill=\"{background}\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"{stripe}\" stroke-width=\"3\"/></pattern>"
    );
}

/// Colours of the targets' curves, by position among the targets (the baseline is drawn in
/// [`BASELINE_COLOUR`], dashed).
pub(super) const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
];
pub(super) const BASELINE_COLOUR: &str = "#333333";

/// The colour of a target's curve, by its position in the report.
pub(super) fn target_colour(report: &Report, t: &TargetReport) -> &'static str {
    if t.role == TargetRole::Baseline {
        return BASELINE_COLOUR;
    }
    let pos = report
        .targets
        .iter()
        .filter(|x| x.role != TargetRole::Baseline)
        .position(|x| x.id == t.id)
        .unwrap_or(0);
    PALETTE[pos % PALETTE.len()]
}

/// The colour of an execution provider in the placement strip.
pub(super) fn ep_colour(ep: &str) -> &'static str {
    let e = ep.to_ascii_lowercase();
    if e.starts_with("qnn") {
        "#1f77b4"
    } else if e.starts_with("cpu") {
        "#a0a0a0"
    } else if e.starts_with("openvino") {
        "#7b3294"
    } else if e.starts_with("tensorrt") || e.starts_with("nv_tensorrt") {
        "#1b7837"
    } else if e.starts_with("cuda") {
        "#5aae61"
    } else if e.starts_with("dml") {
        "#e6550d"
    } else if e == "unknown" {
        "#ffffff"
    } else {
        "#bcbd22"
    }
}
