//! The stream plots: the state's SQNR against the golden stream at every step, one curve per
//! target (running free: solid; teacher-forced: dashed, same colour), with the divergence
//! threshold as a line; and the decisions, one strip per target and run with a mark at every
//! step that decided otherwise than the golden stream. Exact steps (+inf dB) sit on a band above
//! the range, −inf on one below; NaN breaks a curve.

use std::fmt::Write as _;

use super::plot::{nice_ticks, svg_open, target_colour, tick_label, Scale};
use crate::render::present::{escape_markup, shorten};
use crate::report::compare::{Report, StreamRun, TargetReport};

const WIDTH: f64 = 1180.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = WIDTH - 250.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = HEIGHT - 60.0;

/// One run of one target, as drawn.
pub(super) struct Run<'a> {
    pub(super) target: &'a TargetReport,
    /// `free` or `teacher-forced`.
    pub(super) kind: &'static str,
    pub(super) run: &'a StreamRun,
}

/// The runs of every target that has a stream, free first then teacher-forced.
pub(super) fn runs(report: &Report) -> Vec<Run<'_>> {
    let mut out = Vec::new();
    for t in &report.targets {
        if let Some(s) = &t.stream {
            out.push(Run {
                target: t,
                kind: "free",
                run: &s.free,
            });
            if let Some(tf) = &s.teacher_forced {
                out.push(Run {
                    target: t,
                    kind: "teacher-forced",
                    run: tf,
                });
            }
        }
    }
    out
}

struct Frame {
    x: Scale,
    y: Scale,
    y_ticks: Vec<f64>,
    plus_inf: f64,
    minus_inf: f64,
}

impl Frame {
    fn new(runs: &[Run<'_>], steps: usize, threshold: f64) -> Frame {
        let finite: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.run.state_sqnr_db.iter().map(|v| v.0))
            .chain([threshold])
            .filter(|v| v.is_finite())
            .collect();
        let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let y_ticks = nice_ticks(lo, hi, 6);
        Frame {
            x: Scale {
                d0: 1.0,
                d1: steps.max(2) as f64,
                p0: LEFT + 10.0,
                p1: RIGHT - 10.0,
            },
            y: Scale {
                d0: y_ticks[0],
                d1: y_ticks[y_ticks.len() - 1],
                p0: BOTTOM - 30.0,
                p1: TOP + 30.0,
            },
            y_ticks,
            plus_inf: TOP + 10.0,
            minus_inf: BOTTOM - 10.0,
        }
    }

    /// Where a value is drawn; `None` for NaN.
    fn y_of(&self, v: f64) -> Option<f64> {
        match v {
            v if v.is_nan() => None,
            f64::INFINITY => Some(self.plus_inf),
            f64::NEG_INFINITY => Some(self.minus_inf),
            v => Some(self.y.at(v)),
        }
    }
}

/// The state-SQNR plot: one curve per run, the divergence threshold, axes and legend.
pub(super) fn sqnr_plot(report: &Report, runs: &[Run<'_>], steps: usize, threshold: f64) -> String {
    let f = Frame::new(runs, steps, threshold);
    let mut s = String::new();
    svg_open(&mut s, "stream-sqnr", WIDTH, HEIGHT, "state SQNR per step and target");
    axes(&mut s, &f, steps);
    let y = f.y.at(threshold);
    let _ = writeln!(
        s,
        "<line class=\"threshold\" x1=\"{LEFT:.1}\" y1=\"{y:.1}\" x2=\"{RIGHT:.1}\" y2=\"{y:.1}\" stroke=\"#c62828\" stroke-dasharray=\"2 3\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#c62828\">diverged below {}</text>",
        LEFT + 6.0,
        y - 5.0,
        escape_markup(&format!("{threshold} dB"))
    );
    for r in runs {
        curve(&mut s, &f, report, r);
    }
    legend(&mut s, report, runs);
    s.push_str("</svg>\n");
    s
}

fn axes(s: &mut String, f: &Frame, steps: usize) {
    s.push_str("<g class=\"axis\">\n");
    let step = f.y_ticks.get(1).map_or(1.0, |b| b - f.y_ticks[0]);
    for &v in &f.y_ticks {
        let y = f.y.at(v);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{LEFT:.1}\" y1=\"{y:.1}\" x2=\"{RIGHT:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + 4.0,
            tick_label(v, step)
        );
    }
    for v in nice_ticks(1.0, steps.max(2) as f64, 10)
        .into_iter()
        .map(f64::round)
        .filter(|v| *v >= 1.0 && *v <= steps as f64)
    {
        let x = f.x.at(v);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{BOTTOM:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{v:.0}</text>",
            BOTTOM + 5.0,
            BOTTOM + 19.0
        );
    }
    for (y, label) in [(f.plus_inf, "∞ exact"), (f.minus_inf, "−∞")] {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"muted\">{label}</text>",
            LEFT - 8.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        s,
        "<path fill=\"none\" d=\"M{LEFT:.1},{TOP:.1} V{BOTTOM:.1} H{RIGHT:.1}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">step</text>\
         <text transform=\"translate({:.1},{:.1}) rotate(-90)\" text-anchor=\"middle\">state SQNR vs golden stream (dB)</text>",
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 42.0,
        LEFT - 48.0,
        (TOP + BOTTOM) / 2.0,
    );
    s.push_str("</g>\n");
}

/// One run's curve: a polyline per stretch of measured steps.
fn curve(s: &mut String, f: &Frame, report: &Report, r: &Run<'_>) {
    let colour = target_colour(report, r.target);
    let dash = if r.kind == "free" {
        ""
    } else {
        " stroke-dasharray=\"6 4\""
    };
    let _ = writeln!(
        s,
        "<g class=\"stream-curve\" data-target=\"{}\" data-run=\"{}\" data-steps=\"{}\"><title>{} ({})</title>",
        escape_markup(&r.target.id),
        r.kind,
        r.run.state_sqnr_db.len(),
        escape_markup(&r.target.id),
        r.kind
    );
    let mut stretch: Vec<String> = Vec::new();
    let flush = |s: &mut String, stretch: &mut Vec<String>| {
        if !stretch.is_empty() {
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\"{dash} points=\"{}\"/>",
                stretch.join(" ")
            );
            stretch.clear();
        }
    };
    for (i, v) in r.run.state_sqnr_db.iter().enumerate() {
        match f.y_of(v.0) {
            Some(y) => stretch.push(format!("{:.2},{y:.2}", f.x.at((i + 1) as f64))),
            None => flush(s, &mut stretch),
        }
    }
    flush(s, &mut stretch);
    s.push_str("</g>\n");
}

fn legend(s: &mut String, report: &Report, runs: &[Run<'_>]) {
    let x = RIGHT + 24.0;
    let mut y = TOP + 6.0;
    s.push_str("<g class=\"legend\">\n");
    for r in runs {
        let dash = if r.kind == "free" {
            ""
        } else {
            " stroke-dasharray=\"6 4\""
        };
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"3\"{dash}/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}{}<title>{}</title></text>",
            x + 26.0,
            target_colour(report, r.target),
            x + 34.0,
            y + 4.0,
            escape_markup(&shorten(&r.target.id, 22)),
            if r.kind == "free" { "" } else { " (forced)" },
            escape_markup(&r.target.id)
        );
        y += 20.0;
    }
    s.push_str("</g>\n");
}

/// The decision strips: per run, one row over the steps with a mark at every step whose decision
/// differs from the golden stream's (`decision` indexes the runs' decisions).
pub(super) fn decision_plot(report: &Report, runs: &[Run<'_>], steps: usize, decision: usize) -> String {
    let row = 22.0;
    let height = TOP + row * runs.len() as f64 + 50.0;
    let x = Scale {
        d0: 0.5,
        d1: steps as f64 + 0.5,
        p0: 250.0,
        p1: RIGHT,
    };
    let mut s = String::new();
    svg_open(
        &mut s,
        "stream-decisions",
        WIDTH,
        height,
        "steps deciding otherwise than the golden stream",
    );
    let mark = (x.at(2.0) - x.at(1.0)).max(1.0);
    for (k, r) in runs.iter().enumerate() {
        let Some(d) = r.run.decisions.get(decision) else {
            continue;
        };
        let y = TOP + row * k as f64;
        let _ = writeln!(
            s,
            "<g class=\"decision-strip\" data-target=\"{}\" data-run=\"{}\" data-disagreements=\"{}\">\
             <text x=\"240\" y=\"{:.1}\" text-anchor=\"end\">{}{}: {} of {}</text>\
             <rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#e6f4ea\"/>",
            escape_markup(&r.target.id),
            r.kind,
            d.disagreements,
            y + 14.0,
            escape_markup(&shorten(&r.target.id, 22)),
            if r.kind == "free" { "" } else { " (forced)" },
            d.disagreements,
            d.agrees.len(),
            x.p0,
            x.p1 - x.p0,
            row - 6.0
        );
        for (i, _) in d.agrees.iter().enumerate().filter(|(_, a)| !**a) {
            let _ = writeln!(
                s,
                "<rect class=\"disagree\" data-step=\"{}\" x=\"{:.2}\" y=\"{y:.1}\" width=\"{mark:.2}\" height=\"{:.1}\" fill=\"{}\"/>",
                i + 1,
                x.at((i + 1) as f64) - mark / 2.0,
                row - 6.0,
                target_colour(report, r.target)
            );
        }
        s.push_str("</g>\n");
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">step 1 … {steps}: a mark is a step that decided otherwise</text>",
        (x.p0 + x.p1) / 2.0,
        height - 14.0
    );
    s.push_str("</svg>\n");
    s
}
