//! The HTML rendering of a report (`--html FILE`): one self-contained page to attach to a CI run
//! or send to someone, with the figures the terminal prints and four plots.
//!
//! Everything is inline: CSS in a `<style>` block, the plots as inline SVG, and one small inline
//! script; the page loads nothing from the network (no fonts, images, stylesheets or scripts). Like
//! every renderer it reads only the [`Report`] and recomputes no metric; every string taken from
//! the report is HTML-escaped (node names may hold `<`, `&` or `"`).
//!
//! Sections, in order:
//!
//! 1. the header: model (path, SHA-256), golden run, inputs, the gate verdict with the exit code,
//!    and the gate rules, failing ones first;
//! 2. per model output, the metrics of every target that ran; then the targets that did not run,
//!    with the runtime's error;
//! 3. per-layer SQNR (`layer_plot`): one curve per target over `targets[].layers[]` (x: the
//!    layer's index in execution order, y: cumulative `sqnr_db`); an exact match (+inf dB) is
//!    drawn as a triangle on a band above the axis range, −inf on a band below, null and NaN
//!    are left out; each target's first divergence from the baseline is a dashed line;
//! 4. per output, the target-by-target agreement (`agreement_plot`): the fraction of elements
//!    that are bit-identical, `1 − differing_elements / elements`, hatched when the outputs
//!    cannot be compared (`differing_elements` null);
//! 5. node placement (`placement_plot`): each target's partitions along the runtime graph's
//!    execution order, coloured by execution provider, fallback partitions hatched, and the
//!    compute ops that fell back;
//! 6. the arithmetic fingerprints (probe × target verdicts);
//! 7. notes, the per-layer audit's problems, and the tool version.
//!
//! # Plot self-check
//!
//! Each plot is an `<svg data-plot="NAME">`; its data points, cells or bars carry the class
//! `mark`. The script at the end of the page measures each plot (`getBBox()`), counts the marks
//! that have a non-empty bounding box, and writes `data-rendered="ok"` (or `"empty"`) and
//! `data-marks="N"` on the `<svg>`, and `data-plots-rendered="K of N"` on `<body>`, so that a
//! headless browser's DOM dump shows whether the plots were drawn (`tests/html_report.rs`).
//! The marks a report implies: the layer plot, one per layer whose `sqnr_db` is a number or
//! ±inf; each agreement plot, two per `agreement[]` entry of its output (the matrix is
//! symmetric; the diagonal is not a mark); the placement plot, one per partition.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::markdown::rule_values;
use super::table::fmt_num;
use crate::exec::RunStatus;
use crate::report::model::{
    AgreementEntry, LayerReport, OutputMetrics, Partition, PlacementSummary, Report, RuleResult, TargetReport, Verdict,
};
use crate::target::TargetRole;

/// Colours of the targets' curves, by position among the targets (the baseline is drawn in
/// [`BASELINE_COLOUR`], dashed).
const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
];
const BASELINE_COLOUR: &str = "#333333";

/// Renders the report as one self-contained HTML page.
pub fn render(report: &Report) -> String {
    let mut s = String::with_capacity(64 * 1024);
    page_head(&mut s, report);
    header_section(&mut s, report);
    gate_section(&mut s, report);
    outputs_section(&mut s, report);
    layers_section(&mut s, report);
    agreement_section(&mut s, report);
    placement_section(&mut s, report);
    fingerprint_section(&mut s, report);
    notes_section(&mut s, report);
    s.push_str(SELF_CHECK_SCRIPT);
    s.push_str("</body>\n</html>\n");
    s
}

// ---------------------------------------------------------------------------------------------
// Text helpers

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A number that may be infinite or NaN, with about four significant digits.
fn num_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else {
        fmt_num(v)
    }
}

/// A dB figure: two decimals when finite.
fn db_text(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        num_text(v)
    }
}

/// A dB difference with its sign.
fn signed_db_text(v: f64) -> String {
    if v.is_finite() {
        format!("{v:+.2}")
    } else {
        num_text(v)
    }
}

/// A fraction in [0, 1] as a percentage, or `-`.
fn pct_text(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{:.1}%", x * 100.0))
}

/// At most `max` characters of `text`, with `…` when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// An execution provider's name without the `ExecutionProvider` suffix.
fn ep_short(ep: &str) -> &str {
    ep.strip_suffix("ExecutionProvider").unwrap_or(ep)
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The colour of a target's curve, by its position in the report.
fn target_colour(report: &Report, t: &TargetReport) -> &'static str {
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
fn ep_colour(ep: &str) -> &'static str {
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

// ---------------------------------------------------------------------------------------------
// Page skeleton

const STYLE: &str = r#"
:root { --pass: #1a7f37; --fail: #c62828; --none: #6b6b6b; --muted: #666; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; font-size: 14px;
       color: #1f2328; margin: 0 auto; padding: 16px 24px 48px; max-width: 1320px; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 12px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 12.5px; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f8fa; padding: 6px 8px; margin: 0; border-radius: 4px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; vertical-align: top; }
th { background: #f6f8fa; text-align: left; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.muted { color: var(--muted); }
.summary { display: flex; gap: 24px; align-items: stretch; flex-wrap: wrap; }
.facts { flex: 1 1 600px; }
.facts th { width: 110px; }
.verdict { flex: 0 0 240px; border-radius: 8px; color: #fff; text-align: center; padding: 14px 10px; }
.verdict .word { font-size: 44px; font-weight: 800; letter-spacing: 2px; line-height: 1.1; }
.verdict .sub { font-size: 13px; opacity: .95; margin-top: 6px; }
.verdict-pass { background: var(--pass); } .verdict-fail { background: var(--fail); } .verdict-none { background: var(--none); }
tr.rule-fail td { background: #fdecea; }
.ok { color: var(--pass); font-weight: 600; } .bad { color: var(--fail); font-weight: 600; } .warn { color: #9a6700; font-weight: 600; }
.tag { display: inline-block; font-size: 11px; padding: 0 5px; border-radius: 3px; background: #eaeef2; color: #444; margin-left: 4px; }
.note { background: #fff8c5; border: 1px solid #e6d98c; padding: 8px 12px; border-radius: 4px; }
svg.plot { display: block; max-width: 100%; height: auto; margin: 6px 0; }
svg.plot text { font-family: -apple-system, "Segoe UI", Roboto, Arial, sans-serif; font-size: 12px; fill: #1f2328; }
svg.plot .axis line, svg.plot .axis path { stroke: #555; }
svg.plot .axis line.grid { stroke: #e3e3e3; }
td.v-ref { background: #e6f4ea; } td.v-diff { background: #fff3cd; } td.v-fallback { background: #eeeeee; color: #555; }
td.v-bad { background: #fdecea; }
details summary { cursor: pointer; color: var(--muted); }
"#;

fn page_head(s: &mut String, report: &Report) {
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>npu-audit: {} ({})</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&report.model.path),
        verdict_word(report.gate.verdict),
    );
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::None => "NO GATE",
    }
}

/// The script that checks every plot was drawn (see the module documentation).
const SELF_CHECK_SCRIPT: &str = r#"<script>
(function () {
  var plots = document.querySelectorAll('svg[data-plot]');
  var ok = 0;
  for (var i = 0; i < plots.length; i++) {
    var svg = plots[i];
    var box = { width: 0, height: 0 };
    try { box = svg.getBBox(); } catch (e) {}
    var marks = 0;
    var all = svg.querySelectorAll('.mark');
    for (var j = 0; j < all.length; j++) {
      try {
        var b = all[j].getBBox();
        if (b.width > 0 && b.height > 0) { marks++; }
      } catch (e) {}
    }
    var drawn = box.width > 0 && box.height > 0 && marks > 0;
    svg.setAttribute('data-rendered', drawn ? 'ok' : 'empty');
    svg.setAttribute('data-marks', String(marks));
    if (drawn) { ok++; }
  }
  document.body.setAttribute('data-plots-rendered', ok + ' of ' + plots.length);
})();
</script>
"#;

// ---------------------------------------------------------------------------------------------
// 1. Header and gate

fn header_section(s: &mut String, report: &Report) {
    let m = &report.model;
    let short = m.sha256.get(..12).unwrap_or(&m.sha256);
    let _ = writeln!(
        s,
        "<h1>npu-audit report</h1>\n<div class=\"summary\">\n<table class=\"facts\">"
    );
    let _ = writeln!(
        s,
        "<tr><th>model</th><td><code>{}</code> <span class=\"muted\">sha256 <code title=\"{}\">{}</code> · {} bytes · IR {} · opset {} · {}</span></td></tr>",
        escape(&m.path),
        escape(&m.sha256),
        escape(short),
        m.size_bytes,
        m.ir_version,
        m.opset,
        escape(&m.producer)
    );
    let r = &report.reference;
    let _ = writeln!(
        s,
        "<tr><th>golden run</th><td>{} <span class=\"tag\">{}</span></td></tr>",
        escape(&r.description),
        escape(&r.kind)
    );
    let _ = writeln!(s, "<tr><th>inputs</th><td>{}</td></tr>", inputs_text(report));
    let ran = report.targets.iter().filter(|t| t.status == RunStatus::Ok).count();
    let _ = writeln!(
        s,
        "<tr><th>targets</th><td>{ran} of {} ran; baseline: {}</td></tr>",
        report.targets.len(),
        report.baseline.as_deref().map_or_else(|| "none".into(), escape)
    );
    if let Some(shard) = &report.shard {
        let _ = writeln!(
            s,
            "<tr><th>shard</th><td>{} of {}: {}</td></tr>",
            shard.index,
            shard.count,
            escape(&shard.targets.join(", "))
        );
    }
    if !report.merged_from.is_empty() {
        let _ = writeln!(
            s,
            "<tr><th>merged from</th><td>{}</td></tr>",
            escape(&report.merged_from.join(", "))
        );
    }
    s.push_str("</table>\n");
    verdict_box(s, report);
    s.push_str("</div>\n");
}

fn inputs_text(report: &Report) -> String {
    let p = &report.inputs.provenance;
    let mut parts = vec![format!("{} sample(s), {}", p.samples, escape(&p.source))];
    if !p.generators.is_empty() {
        parts.push(format!("<code>{}</code>", escape(&p.generators.join(" "))));
    }
    if let Some(seed) = p.seed {
        parts.push(format!("seed {seed}"));
    }
    if !p.files.is_empty() {
        parts.push(format!("files <code>{}</code>", escape(&p.files.join(", "))));
    }
    parts.join(" · ")
}

fn verdict_box(s: &mut String, report: &Report) {
    let class = match report.gate.verdict {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::None => "none",
    };
    let failing = report.gate.rules.iter().filter(|r| !r.pass).count();
    let detail = if report.gate.rules.is_empty() {
        "no thresholds set".to_string()
    } else {
        format!("{}, {failing} failing", plural(report.gate.rules.len(), "rule"))
    };
    let _ = writeln!(
        s,
        "<div class=\"verdict verdict-{class}\" id=\"verdict\" data-verdict=\"{class}\"><div class=\"word\">{}</div>\
         <div class=\"sub\">{detail}</div><div class=\"sub\">exit code {}</div></div>",
        verdict_word(report.gate.verdict),
        report.exit_code as i32
    );
}

fn gate_section(s: &mut String, report: &Report) {
    s.push_str("<h2 id=\"gate\">Gate rules</h2>\n");
    if let Some(p) = &report.gate.policy {
        let file = p.file.as_deref().map_or_else(|| "flags only".into(), escape);
        let _ = write!(s, "<p class=\"muted\">limits from {file}, mode {}", escape(&p.mode));
        if let Some(b) = &p.baseline_report {
            let _ = write!(s, ", previous report <code>{}</code>", escape(b));
        }
        if !p.allowed_to_fail.is_empty() {
            let _ = write!(s, ", allowed to fail: {}", escape(&p.allowed_to_fail.join(", ")));
        }
        s.push_str("</p>\n");
    }
    if report.gate.rules.is_empty() {
        s.push_str("<p class=\"muted\">No thresholds were set: nothing was gated.</p>\n");
        return;
    }
    let mut rules: Vec<&RuleResult> = report.gate.rules.iter().collect();
    rules.sort_by_key(|r| r.pass);
    s.push_str(
        "<table class=\"rules\" id=\"rules\">\n<tr><th>rule</th><th>target</th><th>output</th><th>measured</th>\
         <th>limit</th><th>pass</th><th>origin</th></tr>\n",
    );
    for r in rules {
        rule_row(s, r);
    }
    s.push_str("</table>\n");
}

fn rule_row(s: &mut String, r: &RuleResult) {
    let (measured, limit) = rule_values(&r.rule, r.measured, r.limit);
    let mut origin = escape(&r.origin);
    if let Some(prev) = r.previous {
        let _ = write!(origin, " <span class=\"muted\">(previous {})</span>", num_text(prev.0));
    }
    let (class, mark) = if r.pass {
        ("rule-pass", "<span class=\"ok\">✔ pass</span>")
    } else {
        ("rule-fail", "<span class=\"bad\">✘ FAIL</span>")
    };
    let _ = writeln!(
        s,
        "<tr class=\"{class}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td><td>{mark}</td><td>{origin}</td></tr>",
        escape(&r.rule),
        escape(&r.target),
        escape(&r.output),
        escape(&measured),
        escape(&limit),
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Per-output metrics and the targets that did not run

/// Output names in model order, then any only the targets name.
fn output_names(report: &Report) -> Vec<String> {
    let mut names: Vec<String> = report.model.outputs.iter().map(|o| o.name.clone()).collect();
    for t in &report.targets {
        for o in &t.outputs {
            if !names.contains(&o.name) {
                names.push(o.name.clone());
            }
        }
    }
    names
}

fn outputs_section(s: &mut String, report: &Report) {
    s.push_str("<h2 id=\"outputs\">Outputs against the golden run</h2>\n");
    targets_table(s, report);
    for name in output_names(report) {
        output_table(s, report, &name);
    }
    drift_reading(s, report);
    not_run_table(s, report);
}

fn targets_table(s: &mut String, report: &Report) {
    s.push_str(
        "<table class=\"targets\">\n<tr><th>target</th><th>status</th><th>EP</th><th>runtime</th>\
         <th>nodes on EP</th><th>run ms</th><th>wall ms</th><th>fingerprint</th></tr>\n",
    );
    for t in &report.targets {
        let runtime = t.runtime.as_ref().map_or_else(
            || "-".to_string(),
            |r| match &r.plugin {
                Some(p) => format!("{} {} on {} {}", p.package, p.version, r.package, r.version),
                None => format!("{} {}", r.package, r.version),
            },
        );
        let nodes = t
            .placement
            .as_ref()
            .map_or_else(|| "-".into(), |p| format!("{}/{}", p.target_ep_nodes, p.total_nodes));
        let run_ms = t
            .timing
            .as_ref()
            .and_then(|x| x.run_ms)
            .filter(|_| t.status == RunStatus::Ok)
            .map_or_else(|| "-".into(), |v| format!("{v:.2}"));
        let wall = t
            .timing
            .as_ref()
            .map_or_else(|| "-".into(), |x| format!("{:.0}", x.wall_ms));
        let fp = t.fingerprint.as_ref().map_or("-", |f| f.summary.as_str());
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{nodes}</td><td class=\"num\">{run_ms}</td>\
             <td class=\"num\">{wall}</td><td>{}</td></tr>",
            target_label(t),
            status_html(t.status),
            escape(ep_short(&t.ep)),
            escape(&runtime),
            escape(fp)
        );
    }
    s.push_str("</table>\n");
}

/// A target's id with its role and chipset.
fn target_label(t: &TargetReport) -> String {
    let mut out = format!("<code>{}</code>", escape(&t.id));
    if t.role == TargetRole::Baseline {
        out.push_str("<span class=\"tag\">baseline</span>");
    }
    if let Some(c) = &t.chipset {
        let _ = write!(out, " <span class=\"muted\">{} v{}</span>", escape(&c.name), c.htp_arch);
    }
    out
}

fn status_html(status: RunStatus) -> String {
    let class = match status {
        RunStatus::Ok => "ok",
        RunStatus::Unavailable => "warn",
        _ => "bad",
    };
    format!("<span class=\"{class}\">{}</span>", status.as_str())
}

fn output_table(s: &mut String, report: &Report, name: &str) {
    let rows: Vec<(&TargetReport, &OutputMetrics)> = report
        .targets
        .iter()
        .filter_map(|t| t.outputs.iter().find(|o| o.name == name).map(|o| (t, o)))
        .collect();
    let decl = report.model.outputs.iter().find(|o| o.name == name);
    let _ = write!(s, "<h3>output <code>{}</code>", escape(name));
    if let Some(d) = decl {
        let _ = write!(s, " <span class=\"muted\">{}</span>", escape(&d.dtype));
    }
    s.push_str("</h3>\n");
    if rows.is_empty() {
        s.push_str("<p class=\"muted\">No target returned this output.</p>\n");
        return;
    }
    s.push_str(
        "<table class=\"metrics\">\n<tr><th>target</th><th>status</th><th>bit-identical</th><th>max abs</th>\
         <th>SQNR dB</th><th>excess dB</th><th>top-1</th><th>top-5</th><th>note</th></tr>\n",
    );
    for (t, o) in rows {
        metrics_row(s, report, t, o);
    }
    s.push_str("</table>\n");
    tolerance_line(s, report, name);
}

fn metrics_row(s: &mut String, report: &Report, t: &TargetReport, o: &OutputMetrics) {
    let bits = o
        .bit_identical
        .map_or_else(|| "-".into(), |b| format!("{b}/{}", o.elements));
    let excess = if report.baseline.as_deref() == Some(t.id.as_str()) {
        "(baseline)".to_string()
    } else {
        o.baseline
            .as_ref()
            .map_or_else(|| "-".into(), |b| signed_db_text(b.excess_db.0))
    };
    let mut note = o.error.as_deref().map(escape).unwrap_or_default();
    if o.nan_count + o.inf_count + o.nonfinite_mismatch > 0 {
        let _ = write!(
            note,
            " NaN {} · Inf {} · non-finite mismatches {}",
            o.nan_count, o.inf_count, o.nonfinite_mismatch
        );
    }
    let _ = writeln!(
        s,
        "<tr><td>{}</td><td>{}</td><td class=\"num\">{bits}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{excess}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{note}</td></tr>",
        target_label(t),
        status_html(t.status),
        num_text(o.max_abs.0),
        db_text(o.sqnr_db.0),
        pct_text(o.top1_agreement),
        pct_text(o.top5_agreement),
    );
}

fn tolerance_line(s: &mut String, report: &Report, name: &str) {
    if let Some(tol) = report.tolerances.iter().find(|x| x.output == name) {
        let _ = write!(
            s,
            "<p class=\"muted\">loosest gate every gated target passes: <code>--min-sqnr {} --max-abs {}</code> (cosine ≥ {}",
            db_text(tol.min_sqnr_db.0),
            num_text(tol.max_abs.0),
            num_text(tol.min_cosine.0)
        );
        if let Some(top1) = tol.min_top1_agreement {
            let _ = write!(s, ", top-1 ≥ {}", pct_text(Some(top1)));
        }
        s.push_str(")</p>\n");
    }
    if let Some(g) = report.bit_exact_groups.iter().find(|g| g.output == name) {
        let groups: Vec<String> = g
            .groups
            .iter()
            .map(|x| format!("{{{}}}", escape(&x.join(", "))))
            .collect();
        let _ = writeln!(s, "<p class=\"muted\">bit-exact groups: {}</p>", groups.join(" "));
    }
}

fn drift_reading(s: &mut String, report: &Report) {
    let lines: Vec<String> = report
        .targets
        .iter()
        .flat_map(|t| {
            t.drift_explanations.iter().map(move |e| {
                format!(
                    "<li><code>{}</code> {}: {}</li>",
                    escape(&t.id),
                    escape(&e.output),
                    escape(&e.text)
                )
            })
        })
        .collect();
    let unstable: Vec<String> = report
        .targets
        .iter()
        .filter(|t| t.determinism.as_ref().is_some_and(|d| !d.bit_identical))
        .map(|t| {
            format!(
                "<li><code>{}</code>: <span class=\"bad\">not deterministic</span> across repeated runs</li>",
                escape(&t.id)
            )
        })
        .collect();
    if lines.is_empty() && unstable.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "<h3>Drift reading</h3>\n<ul>\n{}{}</ul>",
        unstable.concat(),
        lines.concat()
    );
}

fn not_run_table(s: &mut String, report: &Report) {
    let failed: Vec<&TargetReport> = report.targets.iter().filter(|t| t.status != RunStatus::Ok).collect();
    if failed.is_empty() {
        return;
    }
    s.push_str(
        "<h3 id=\"not-run\">Targets that did not run</h3>\n<table class=\"not-run\">\n\
         <tr><th>target</th><th>status</th><th>phase</th><th>required</th><th>error</th></tr>\n",
    );
    for t in failed {
        let phase = t.failed_at.map_or("-", |p| p.as_str());
        let required = if t.required { "yes" } else { "no (allowed to fail)" };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{phase}</td><td>{required}</td><td><pre>{}</pre></td></tr>",
            target_label(t),
            status_html(t.status),
            escape(t.error.as_deref().unwrap_or("(no error text)"))
        );
    }
    s.push_str("</table>\n");
}

// ---------------------------------------------------------------------------------------------
// Plot helpers

/// Evenly spaced round tick values covering `[lo, hi]` (about `n` intervals): the first and last
/// ticks enclose the range.
fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
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
fn tick_label(v: f64, step: f64) -> String {
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
struct Scale {
    d0: f64,
    d1: f64,
    p0: f64,
    p1: f64,
}

impl Scale {
    fn at(&self, v: f64) -> f64 {
        if (self.d1 - self.d0).abs() < f64::EPSILON {
            return (self.p0 + self.p1) / 2.0;
        }
        self.p0 + (v - self.d0) / (self.d1 - self.d0) * (self.p1 - self.p0)
    }
}

fn svg_open(s: &mut String, plot: &str, width: f64, height: f64, label: &str) {
    let _ = writeln!(
        s,
        "<svg class=\"plot\" data-plot=\"{}\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" \
         role=\"img\" aria-label=\"{}\">",
        escape(plot),
        escape(label)
    );
}

/// A diagonal hatch pattern with id `id`.
fn hatch_pattern(s: &mut String, id: &str, background: &str, stripe: &str) {
    let _ = writeln!(
        s,
        "<pattern id=\"{id}\" patternUnits=\"userSpaceOnUse\" width=\"8\" height=\"8\" patternTransform=\"rotate(45)\">\
         <rect width=\"8\" height=\"8\" fill=\"{background}\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"{stripe}\" stroke-width=\"3\"/></pattern>"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Per-layer SQNR plot

/// Where a layer's SQNR is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
enum LayerValue {
    Finite(f64),
    PlusInf,
    MinusInf,
}

fn layer_value(l: &LayerReport) -> Option<LayerValue> {
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
struct LayerFrame {
    x: Scale,
    y: Scale,
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
    fn new(series: &[&TargetReport]) -> LayerFrame {
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

    fn point(&self, index: usize, v: LayerValue) -> (f64, f64) {
        let y = match v {
            LayerValue::Finite(x) => self.y.at(x),
            LayerValue::PlusInf => self.y_plus_inf,
            LayerValue::MinusInf => self.y_minus_inf,
        };
        (self.x.at(index as f64), y)
    }
}

fn layers_section(s: &mut String, report: &Report) {
    s.push_str("<h2 id=\"layers\">Per-layer SQNR</h2>\n");
    let series: Vec<&TargetReport> = report.targets.iter().filter(|t| !t.layers.is_empty()).collect();
    if series.is_empty() {
        s.push_str("<p class=\"note\" id=\"no-layers\">No per-layer audit in this report (run with <code>--layers all</code>).</p>\n");
        return;
    }
    if let Some(info) = &report.layer_audit {
        let _ = writeln!(
            s,
            "<p class=\"muted\">{} of {} points tapped ({}), {} matched to the reference; tolerance {} LSB; {}, {:.1} s. \
             Cumulative SQNR of each tapped activation against the golden activation; hover a point for the node.</p>",
            info.selected,
            info.points,
            escape(&info.mode),
            info.matched,
            info.tolerance_lsb,
            plural(info.sessions, "session"),
            info.seconds
        );
    }
    s.push_str(&layer_plot(report, &series));
    s.push_str(
        "<p class=\"muted\">Identical curves overlap: targets listed first are drawn wider, underneath. \
         Layers without a figure (no reference counterpart, NaN) are left out.</p>\n",
    );
    divergence_list(s, report, &series);
}

/// The per-layer SQNR plot of the targets in `series` (each with layers).
fn layer_plot(report: &Report, series: &[&TargetReport]) -> String {
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
        escape(&t.id),
        path.join(" ")
    );
    for (l, v) in points {
        let (x, y) = f.point(l.index, v);
        let title = escape(&format!(
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

/// A dashed line at each target's first divergence from the baseline, with a triangle above
/// the plot (stacked when several targets diverge at the same layer).
fn divergence_markers(s: &mut String, f: &LayerFrame, report: &Report, series: &[&TargetReport]) {
    let mut stacked: BTreeMap<usize, usize> = BTreeMap::new();
    for t in series {
        let Some(d) = t.layer_summary.as_ref().and_then(|x| x.first_divergence.as_ref()) else {
            continue;
        };
        let colour = target_colour(report, t);
        let x = f.x.at(d.index as f64);
        let k = stacked.entry(d.index).or_insert(0);
        let y = f.top - 6.0 - 9.0 * *k as f64;
        *k += 1;
        let title = escape(&divergence_text(t));
        let _ = writeln!(
            s,
            "<g class=\"divergence\" data-target=\"{}\" data-index=\"{}\"><line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" \
             stroke=\"{colour}\" stroke-width=\"1.5\" stroke-dasharray=\"5 4\"><title>{title}</title></line>\
             <path d=\"M{x:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\" fill=\"{colour}\"><title>{title}</title></path></g>",
            escape(&t.id),
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

/// One line on where a target first departs from the baseline.
fn divergence_text(t: &TargetReport) -> String {
    let Some(summary) = &t.layer_summary else {
        return format!("{}: no per-layer summary", t.id);
    };
    match &summary.first_divergence {
        Some(d) => {
            let how = match d.introduced {
                Some(true) => "; alone on golden inputs it departs too: introduced here",
                Some(false) => "; alone on golden inputs it agrees: inherited",
                None => "",
            };
            format!(
                "{} first departs from the baseline at #{} {} ({}), tensor {}: {} codes differ, max {} LSB{how}",
                t.id, d.index, d.node, d.op_type, d.tensor, d.differing, d.max_steps
            )
        }
        None if t.role == TargetRole::Baseline => format!("{}: the baseline", t.id),
        None if summary.layers_not_compared > 0 => format!(
            "{}: no departure among the compared layers ({} not compared)",
            t.id, summary.layers_not_compared
        ),
        None => format!("{}: no layer departs from the baseline", t.id),
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
            escape(&shorten(&t.id, 24)),
            escape(&t.id)
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
    if series
        .iter()
        .any(|t| t.layer_summary.as_ref().is_some_and(|x| x.first_divergence.is_some()))
    {
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

fn divergence_list(s: &mut String, report: &Report, series: &[&TargetReport]) {
    s.push_str("<ul class=\"divergences\">\n");
    for t in series {
        let colour = target_colour(report, t);
        let _ = writeln!(
            s,
            "<li><span style=\"color:{colour}\">■</span> {}</li>",
            escape(&divergence_text(t))
        );
        if let Some(e) = t.layer_summary.as_ref().and_then(|x| x.error.as_deref()) {
            let _ = writeln!(s, "<li class=\"bad\">{}: {}</li>", escape(&t.id), escape(e));
        }
    }
    s.push_str("</ul>\n");
}

// ---------------------------------------------------------------------------------------------
// 4. Target-by-target agreement

fn agreement_section(s: &mut String, report: &Report) {
    s.push_str("<h2 id=\"agreement\">Target against target: bit agreement</h2>\n");
    if report.agreement.is_empty() {
        s.push_str("<p class=\"muted\">No pair of targets to compare (fewer than two targets ran).</p>\n");
        return;
    }
    s.push_str(
        "<p class=\"muted\">Fraction of elements that are bit-identical between two targets \
         (1 − differing / elements), whatever the golden run says. Hatched: not comparable (different types or shapes).</p>\n",
    );
    let mut outputs: Vec<&str> = Vec::new();
    for e in &report.agreement {
        if !outputs.contains(&e.output.as_str()) {
            outputs.push(&e.output);
        }
    }
    for (k, output) in outputs.iter().enumerate() {
        let _ = writeln!(s, "<h3>output <code>{}</code></h3>", escape(output));
        s.push_str(&agreement_plot(report, output, k));
    }
}

/// The agreement fraction of an entry, `None` when the outputs cannot be compared.
fn agreement_fraction(e: &AgreementEntry) -> Option<f64> {
    let d = e.differing_elements?;
    if e.elements == 0 {
        return None;
    }
    Some(1.0 - d as f64 / e.elements as f64)
}

/// The cell text of an agreement fraction: a percentage with one decimal, `100%` only when
/// every element agrees.
fn agreement_text(e: &AgreementEntry) -> String {
    match (agreement_fraction(e), e.differing_elements) {
        (Some(_), Some(0)) => "100%".into(),
        (Some(f), _) => {
            let text = format!("{:.1}%", f * 100.0);
            if text == "100.0%" {
                ">99.9%".into()
            } else {
                text
            }
        }
        _ => "n/a".into(),
    }
}

/// Red (0) through yellow (0.5) to green (1).
fn agreement_colour(f: f64) -> String {
    const STOPS: [(f64, [f64; 3]); 3] = [
        (0.0, [215.0, 48.0, 39.0]),
        (0.5, [254.0, 224.0, 139.0]),
        (1.0, [26.0, 152.0, 80.0]),
    ];
    let f = f.clamp(0.0, 1.0);
    let (a, b) = if f <= 0.5 {
        (STOPS[0], STOPS[1])
    } else {
        (STOPS[1], STOPS[2])
    };
    let t = (f - a.0) / (b.0 - a.0);
    let c: Vec<u8> = (0..3).map(|i| (a.1[i] + (b.1[i] - a.1[i]) * t).round() as u8).collect();
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

fn text_colour_on(f: f64) -> &'static str {
    if !(0.12..=0.85).contains(&f) {
        "#ffffff"
    } else {
        "#1f2328"
    }
}

/// The heatmap of one output: targets by targets, symmetric.
fn agreement_plot(report: &Report, output: &str, k: usize) -> String {
    let entries: Vec<&AgreementEntry> = report.agreement.iter().filter(|e| e.output == output).collect();
    let ids: Vec<&str> = report
        .targets
        .iter()
        .map(|t| t.id.as_str())
        .filter(|id| entries.iter().any(|e| e.a == *id || e.b == *id))
        .collect();
    let find = |a: &str, b: &str| {
        entries
            .iter()
            .find(|e| (e.a == a && e.b == b) || (e.a == b && e.b == a))
            .copied()
    };
    let label_chars = ids.iter().map(|id| id.chars().count().min(28)).max().unwrap_or(4) as f64;
    let (cw, ch) = (92.0, 34.0);
    let left = 16.0 + label_chars * 7.2;
    let top = 20.0 + label_chars * 5.2;
    let n = ids.len() as f64;
    let width = (left + n * cw + 40.0).max(left + 440.0);
    let height = top + n * ch + 74.0;
    let pid = format!("agr{k}");
    let mut s = String::new();
    svg_open(
        &mut s,
        &format!("agreement:{output}"),
        width,
        height,
        &format!("bit agreement on {output}"),
    );
    s.push_str("<defs>\n");
    hatch_pattern(&mut s, &format!("{pid}-na"), "#f2f2f2", "#bdbdbd");
    let _ = writeln!(
        s,
        "<linearGradient id=\"{pid}-scale\"><stop offset=\"0\" stop-color=\"{}\"/><stop offset=\"0.5\" stop-color=\"{}\"/>\
         <stop offset=\"1\" stop-color=\"{}\"/></linearGradient>\n</defs>",
        agreement_colour(0.0),
        agreement_colour(0.5),
        agreement_colour(1.0)
    );
    for (i, id) in ids.iter().enumerate() {
        let y = top + i as f64 * ch + ch / 2.0 + 4.0;
        let x = left + i as f64 * cw + cw / 2.0;
        let short = escape(&shorten(id, 28));
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{y:.1}\" text-anchor=\"end\">{short}<title>{}</title></text>\
             <text transform=\"translate({x:.1},{:.1}) rotate(-35)\" text-anchor=\"start\">{short}<title>{}</title></text>",
            left - 8.0,
            escape(id),
            top - 8.0,
            escape(id)
        );
    }
    for (i, a) in ids.iter().enumerate() {
        for (j, b) in ids.iter().enumerate() {
            let (x, y) = (left + j as f64 * cw, top + i as f64 * ch);
            agreement_cell(
                &mut s,
                &pid,
                (x, y, cw, ch),
                a,
                b,
                output,
                if i == j { None } else { Some(find(a, b)) },
            );
        }
    }
    agreement_legend(&mut s, &pid, left, top + n * ch + 22.0);
    s.push_str("</svg>\n");
    s
}

/// One cell: `entry` is `None` on the diagonal, `Some(None)` for a pair the report does not
/// compare.
fn agreement_cell(
    s: &mut String,
    pid: &str,
    (x, y, w, h): (f64, f64, f64, f64),
    a: &str,
    b: &str,
    output: &str,
    entry: Option<Option<&AgreementEntry>>,
) {
    let data = format!(
        "data-a=\"{}\" data-b=\"{}\" data-output=\"{}\"",
        escape(a),
        escape(b),
        escape(output)
    );
    let (cx, cy) = (x + w / 2.0, y + h / 2.0 + 4.0);
    let (class, fill, text, text_fill, title) = match entry {
        None => (
            "diag",
            "#eeeeee".to_string(),
            "—".to_string(),
            "#777777",
            format!("{a}: itself"),
        ),
        Some(None) => (
            "missing",
            "#ffffff".to_string(),
            "?".to_string(),
            "#777777",
            format!("{a} vs {b}: not in the report"),
        ),
        Some(Some(e)) => {
            let text = agreement_text(e);
            let title = agreement_title(e);
            match agreement_fraction(e) {
                Some(f) => ("mark", agreement_colour(f), text, text_colour_on(f), title),
                None => ("mark na", format!("url(#{pid}-na)"), text, "#555555", title),
            }
        }
    };
    let _ = writeln!(
        s,
        "<g class=\"cell\" {data}><rect class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" stroke=\"#ffffff\" stroke-width=\"2\">\
         <title>{}</title></rect><text class=\"cell-text\" {data} x=\"{cx:.1}\" y=\"{cy:.1}\" text-anchor=\"middle\" fill=\"{text_fill}\" \
         style=\"fill:{text_fill}\" pointer-events=\"none\">{}</text></g>",
        x,
        y,
        w,
        h,
        escape(&title),
        escape(&text)
    );
}

fn agreement_title(e: &AgreementEntry) -> String {
    let mut t = match e.differing_elements {
        Some(d) => format!(
            "{} vs {} on {}: {d} of {} elements differ, max |a−b| {}",
            e.a,
            e.b,
            e.output,
            e.elements,
            num_text(e.max_abs.0)
        ),
        None => format!(
            "{} vs {} on {}: not comparable (different types or shapes)",
            e.a, e.b, e.output
        ),
    };
    if let Some(c) = &e.code_differences {
        let _ = write!(
            t,
            "; in codes: ±1 {}, ±2 {}, more {}, max {} LSB",
            c.off_by_one, c.off_by_two, c.off_by_more, c.max_steps
        );
    }
    t
}

fn agreement_legend(s: &mut String, pid: &str, x: f64, y: f64) {
    let w = 220.0;
    let _ = writeln!(
        s,
        "<g class=\"legend\"><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"12\" fill=\"url(#{pid}-scale)\" stroke=\"#999\"/>\
         <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"start\">0%</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">50%</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">100% bit-identical</text>\
         <rect x=\"{:.1}\" y=\"{y:.1}\" width=\"24\" height=\"12\" fill=\"url(#{pid}-na)\" stroke=\"#999\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\">not comparable</text></g>",
        y + 28.0,
        x + w / 2.0,
        y + 28.0,
        x + w + 60.0,
        y + 28.0,
        x + w + 80.0,
        x + w + 110.0,
        y + 10.0,
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Placement

fn placement_section(s: &mut String, report: &Report) {
    s.push_str("<h2 id=\"placement\">Node placement</h2>\n");
    let placed: Vec<(&TargetReport, &PlacementSummary)> = report
        .targets
        .iter()
        .filter_map(|t| t.placement.as_ref().map(|p| (t, p)))
        .collect();
    if placed.is_empty() {
        s.push_str("<p class=\"muted\">No target recorded where its nodes ran.</p>\n");
        return;
    }
    if placed.iter().any(|(_, p)| !p.partitions.is_empty()) {
        s.push_str(
            "<p class=\"muted\">Each row is one target's graph in execution order (the graph the runtime partitioned), \
             one bar per connected run of nodes on one execution provider; hatched: nodes of a non-CPU target that fell back to the CPU (red when a compute op the EP rejected is among them).</p>\n",
        );
        s.push_str(&placement_plot(&placed));
    }
    placement_table(s, &placed);
    fallback_list(s, &placed);
}

/// What a partition of a target is: nodes on the target's own EP (or any EP of a CPU target),
/// nodes of a non-CPU target that fell back to the CPU, or such nodes that include a compute op
/// the EP rejected (a `compute` entry of `placement.fallback` named at either end of the
/// partition or of one of its op types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartitionKind {
    Own,
    Fallback,
    ComputeFallback,
}

fn partition_kind(t: &TargetReport, p: &PlacementSummary, part: &Partition) -> PartitionKind {
    if t.ep.starts_with("CPU") || part.ep == t.ep {
        return PartitionKind::Own;
    }
    let compute = p
        .fallback
        .iter()
        .filter(|f| f.kind == "compute")
        .any(|f| f.name == part.first_node || f.name == part.last_node || part.op_types.contains_key(&f.op_type));
    if compute {
        PartitionKind::ComputeFallback
    } else {
        PartitionKind::Fallback
    }
}

const PP_WIDTH: f64 = 1180.0;
const PP_LABEL: f64 = 190.0;
const PP_STRIP: f64 = 800.0;
const PP_ROW: f64 = 52.0;

/// The placement strips of the targets that recorded a placement.
fn placement_plot(placed: &[(&TargetReport, &PlacementSummary)]) -> String {
    let rows: Vec<&(&TargetReport, &PlacementSummary)> =
        placed.iter().filter(|(_, p)| !p.partitions.is_empty()).collect();
    let height = 20.0 + rows.len() as f64 * PP_ROW + 40.0;
    let mut s = String::new();
    svg_open(&mut s, "placement", PP_WIDTH, height, "node placement per target");
    s.push_str("<defs>\n");
    hatch_pattern(&mut s, "plc-compute", "#f6c9c4", "#c62828");
    hatch_pattern(&mut s, "plc-fallback", "#e4e4e4", "#8a8a8a");
    s.push_str("</defs>\n");
    for (i, (t, p)) in rows.iter().enumerate() {
        placement_row(&mut s, t, p, 14.0 + i as f64 * PP_ROW);
    }
    placement_legend(&mut s, &rows, 20.0 + rows.len() as f64 * PP_ROW);
    s.push_str("</svg>\n");
    s
}

fn placement_row(s: &mut String, t: &TargetReport, p: &PlacementSummary, y: f64) {
    let n = p
        .partitions
        .iter()
        .map(|x| x.last_index + 1)
        .max()
        .unwrap_or(0)
        .max(p.total_nodes)
        .max(1) as f64;
    let x = Scale {
        d0: 0.0,
        d1: n,
        p0: PP_LABEL,
        p1: PP_LABEL + PP_STRIP,
    };
    let _ = writeln!(
        s,
        "<g class=\"strip\" data-target=\"{}\"><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}<title>{}</title></text>",
        escape(&t.id),
        PP_LABEL - 10.0,
        y + 16.0,
        escape(&shorten(&t.id, 24)),
        escape(&t.id)
    );
    for part in &p.partitions {
        partition_bar(s, t, part, partition_kind(t, p, part), &x, y);
    }
    let fallback = match p.compute_fallback_nodes {
        0 if t.ep.starts_with("CPU") => String::new(),
        0 => "no compute op on CPU".to_string(),
        c => plural(c, "compute op") + " on CPU",
    };
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#666\" style=\"font-size:11px\">#0</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" style=\"font-size:11px\">#{}</text>\
         <text x=\"{:.1}\" y=\"{:.1}\">{}/{} on {}</text><text x=\"{:.1}\" y=\"{:.1}\" class=\"{}\">{}</text></g>",
        PP_LABEL,
        y + 37.0,
        PP_LABEL + PP_STRIP,
        y + 37.0,
        n as usize - 1,
        PP_LABEL + PP_STRIP + 12.0,
        y + 10.0,
        p.target_ep_nodes,
        p.total_nodes,
        escape(ep_short(&t.ep)),
        PP_LABEL + PP_STRIP + 12.0,
        y + 26.0,
        if p.compute_fallback_nodes > 0 {
            "fallback-count bad"
        } else {
            "fallback-count"
        },
        fallback
    );
}

fn partition_bar(s: &mut String, t: &TargetReport, part: &Partition, kind: PartitionKind, x: &Scale, y: f64) {
    let x0 = x.at(part.first_index as f64);
    let x1 = x.at(part.last_index as f64 + 1.0);
    let w = (x1 - x0).max(2.0);
    let (class, fill, stroke, what) = match kind {
        PartitionKind::Own => ("mark", ep_colour(&part.ep).to_string(), "#ffffff", ""),
        PartitionKind::Fallback => (
            "mark fallback",
            "url(#plc-fallback)".to_string(),
            "#6e6e6e",
            " (fallback)",
        ),
        PartitionKind::ComputeFallback => (
            "mark fallback compute",
            "url(#plc-compute)".to_string(),
            "#c62828",
            " (fallback: compute op)",
        ),
    };
    let ops: Vec<String> = part.op_types.iter().map(|(op, c)| format!("{op}×{c}")).collect();
    let title = format!(
        "{}: #{}–{} on {}{what}: {}, {} .. {}; ops: {}",
        t.id,
        part.first_index,
        part.last_index,
        ep_short(&part.ep),
        plural(part.nodes, "node"),
        part.first_node,
        part.last_node,
        ops.join(", ")
    );
    let _ = writeln!(
        s,
        "<rect class=\"{class}\" data-ep=\"{}\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"24\" fill=\"{fill}\" \
         stroke=\"{stroke}\" stroke-width=\"{}\"><title>{}</title></rect>",
        escape(&part.ep),
        if kind == PartitionKind::Own { 1.0 } else { 1.5 },
        escape(&title)
    );
    let label = format!("{} {}", ep_short(&part.ep), part.nodes);
    if w > label.chars().count() as f64 * 7.0 + 8.0 {
        let colour = if kind != PartitionKind::Own || part.ep.starts_with("CPU") || part.ep == "unknown" {
            "#1f2328"
        } else {
            "#ffffff"
        };
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{colour}\" style=\"fill:{colour}\" \
             pointer-events=\"none\">{}</text>",
            x0 + w / 2.0,
            y + 16.0,
            escape(&label)
        );
    }
}

fn placement_legend(s: &mut String, rows: &[&(&TargetReport, &PlacementSummary)], y: f64) {
    let mut eps: Vec<&str> = Vec::new();
    let mut kinds: Vec<PartitionKind> = Vec::new();
    for (t, p) in rows {
        for part in &p.partitions {
            let kind = partition_kind(t, p, part);
            if kind == PartitionKind::Own && !eps.contains(&part.ep.as_str()) {
                eps.push(&part.ep);
            }
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    let mut items: Vec<(String, &str, String)> = eps
        .iter()
        .map(|ep| (ep_colour(ep).to_string(), "#999999", ep_short(ep).to_string()))
        .collect();
    if kinds.contains(&PartitionKind::ComputeFallback) {
        items.push(("url(#plc-compute)".into(), "#c62828", "CPU fallback: compute op".into()));
    }
    if kinds.contains(&PartitionKind::Fallback) {
        items.push((
            "url(#plc-fallback)".into(),
            "#6e6e6e",
            "CPU fallback: boundary Q/DQ, shape, inserted".into(),
        ));
    }
    let mut x = PP_LABEL;
    s.push_str("<g class=\"legend\">\n");
    for (fill, stroke, label) in items {
        let _ = writeln!(
            s,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"18\" height=\"12\" fill=\"{fill}\" stroke=\"{stroke}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 24.0,
            y + 11.0,
            escape(&label)
        );
        x += 44.0 + label.chars().count() as f64 * 6.8;
    }
    s.push_str("</g>\n");
}

fn placement_table(s: &mut String, placed: &[(&TargetReport, &PlacementSummary)]) {
    s.push_str(
        "<table class=\"placement\">\n<tr><th>target</th><th>nodes on EP</th><th>EP partitions</th>\
         <th>compute fallback nodes</th><th>ops on CPU</th><th>crossings (mid-graph)</th><th>bytes / inference</th><th>graph</th></tr>\n",
    );
    for (t, p) in placed {
        let cpu_ops: Vec<String> = p.cpu_op_types.iter().map(|(op, c)| format!("{op}×{c}")).collect();
        let bytes = p.crossing_bytes.map_or_else(|| "unknown".into(), |b| b.to_string());
        let class = if p.compute_fallback_nodes > 0 { " bad" } else { "" };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"num\">{}/{}</td><td class=\"num\">{}</td><td class=\"num{class}\">{}</td><td>{}</td>\
             <td class=\"num\">{} ({})</td><td class=\"num\">{bytes}</td><td class=\"muted\">{} via {}</td></tr>",
            target_label(t),
            p.target_ep_nodes,
            p.total_nodes,
            p.ep_partitions,
            p.compute_fallback_nodes,
            escape(&cpu_ops.join(", ")),
            p.crossing_count,
            p.mid_graph_crossing_count,
            escape(&p.graph),
            escape(&p.source)
        );
    }
    s.push_str("</table>\n");
}

fn fallback_list(s: &mut String, placed: &[(&TargetReport, &PlacementSummary)]) {
    let rows: Vec<String> = placed
        .iter()
        .flat_map(|(t, p)| {
            p.fallback.iter().filter(|f| f.kind == "compute").map(move |f| {
                format!(
                    "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    escape(&t.id),
                    escape(&f.name),
                    escape(&f.op_type),
                    escape(&f.position),
                    escape(f.reason.as_deref().unwrap_or("(no reason logged)"))
                )
            })
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "<h3>Compute ops that fell back to the CPU</h3>\n<table class=\"fallback\">\n\
         <tr><th>target</th><th>node</th><th>op</th><th>position</th><th>the EP's reason</th></tr>\n{}</table>",
        rows.concat()
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Fingerprints

fn verdict_class(v: &str) -> &'static str {
    match v {
        "half_even" | "exact" | "saturate" | "fp32" | "floor" => "v-ref",
        "cpu_fallback" => "v-fallback",
        "non_deterministic" | "refused" | "crashed" | "timeout" | "other" | "wrap" => "v-bad",
        _ => "v-diff",
    }
}

fn fingerprint_section(s: &mut String, report: &Report) {
    s.push_str("<h2 id=\"fingerprint\">Arithmetic fingerprints</h2>\n");
    let cols: Vec<&TargetReport> = report.targets.iter().filter(|t| t.fingerprint.is_some()).collect();
    if cols.is_empty() {
        s.push_str("<p class=\"muted\">No fingerprint in this report (<code>--fingerprint off</code>, or no target ran).</p>\n");
        return;
    }
    let mut probes: Vec<&str> = Vec::new();
    for t in &cols {
        for k in t.fingerprint.iter().flat_map(|f| f.verdicts.keys()) {
            if !probes.contains(&k.as_str()) {
                probes.push(k);
            }
        }
    }
    probes.sort_unstable();
    s.push_str("<table class=\"fingerprint\">\n<tr><th>probe</th>");
    for t in &cols {
        let _ = write!(s, "<th><code>{}</code></th>", escape(&t.id));
    }
    s.push_str("</tr>\n");
    for probe in probes {
        let _ = write!(s, "<tr><td><code>{}</code></td>", escape(probe));
        for t in &cols {
            match t.fingerprint.as_ref().and_then(|f| f.verdicts.get(probe)) {
                Some(v) => {
                    let _ = write!(s, "<td class=\"{}\">{}</td>", verdict_class(v), escape(v));
                }
                None => s.push_str("<td class=\"muted\">-</td>"),
            }
        }
        s.push_str("</tr>\n");
    }
    s.push_str("<tr><th>summary</th>");
    for t in &cols {
        if let Some(f) = &t.fingerprint {
            let cached = if f.cached {
                " <span class=\"tag\">cached</span>"
            } else {
                ""
            };
            let _ = write!(s, "<td>{}{cached}</td>", escape(&f.summary));
        }
    }
    s.push_str("</tr>\n</table>\n");
}

// ---------------------------------------------------------------------------------------------
// 7. Notes and footer

fn notes_section(s: &mut String, report: &Report) {
    s.push_str("<h2 id=\"notes\">Notes</h2>\n");
    let problems = report.layer_audit.as_ref().map_or(&[][..], |l| l.problems.as_slice());
    if report.notes.is_empty() && problems.is_empty() {
        s.push_str("<p class=\"muted\">None.</p>\n");
    }
    if !report.notes.is_empty() {
        s.push_str("<ul class=\"notes\">\n");
        for n in &report.notes {
            let _ = writeln!(s, "<li>{}</li>", escape(n));
        }
        s.push_str("</ul>\n");
    }
    if !problems.is_empty() {
        s.push_str("<h3>Per-layer audit problems</h3>\n<ul class=\"problems\">\n");
        for p in problems {
            let _ = writeln!(s, "<li>{}</li>", escape(p));
        }
        s.push_str("</ul>\n");
    }
    if !report.metric_definitions.is_empty() {
        s.push_str("<details><summary>Metric definitions</summary>\n<table>\n");
        for (k, v) in &report.metric_definitions {
            let _ = writeln!(s, "<tr><td><code>{}</code></td><td>{}</td></tr>", escape(k), escape(v));
        }
        s.push_str("</table>\n</details>\n");
    }
    let _ = writeln!(
        s,
        "<p class=\"muted\" id=\"tool\">{} {} · report schema {}</p>",
        escape(&report.tool.name),
        escape(&report.tool.version),
        report.schema_version
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::markdown::tests::small_report;
    use crate::report::model::{FallbackNode, Partition};
    use serde_json::Value;

    fn load(name: &str) -> Option<(Report, Value)> {
        let text = std::fs::read_to_string(format!("/tmp/reports/{name}.json")).ok()?;
        Some((
            serde_json::from_str(&text).expect("report parses"),
            serde_json::from_str(&text).expect("json parses"),
        ))
    }

    fn count(haystack: &str, needle: &str) -> usize {
        haystack.matches(needle).count()
    }

    /// The `<svg data-plot="NAME">` element, up to its `</svg>`.
    fn plot<'a>(html: &'a str, name: &str) -> Option<&'a str> {
        let start = html.find(&format!("data-plot=\"{}\"", escape(name)))?;
        let start = html[..start].rfind("<svg")?;
        let end = start + html[start..].find("</svg>")?;
        Some(&html[start..end])
    }

    /// The text of the agreement cell of `a` against `b` on `output`.
    fn cell_text(html: &str, a: &str, b: &str, output: &str) -> Option<String> {
        let key = format!("class=\"cell-text\" data-a=\"{a}\" data-b=\"{b}\" data-output=\"{output}\"");
        let at = html.find(&key)? + key.len();
        let open = at + html[at..].find('>')? + 1;
        let close = open + html[open..].find('<')?;
        Some(html[open..close].to_string())
    }

    /// Asserts the page loads nothing from elsewhere.
    fn assert_self_contained(html: &str) {
        for needle in [
            "http:",
            "https:",
            "<script src",
            "<link",
            "@import",
            "url(http",
            "src=\"",
        ] {
            assert!(!html.contains(needle), "the page must not contain {needle:?}");
        }
        assert_eq!(count(html, "<script"), 1, "one inline script");
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.trim_end().ends_with("</html>"));
    }

    /// A JSON number or "inf"/"-inf"; `None` for null and "nan".
    fn plotted(v: &Value) -> bool {
        match v {
            Value::Number(_) => true,
            Value::String(s) => s == "inf" || s == "-inf",
            _ => false,
        }
    }

    #[test]
    fn escape_covers_markup() {
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;"
        );
    }

    #[test]
    fn small_report_escapes_names_orders_rules_and_lists_failures() {
        let html = render(&small_report());
        assert_self_contained(&html);
        // The node `conv1 <&"'>` never appears raw, in titles or anywhere else.
        assert!(!html.contains("conv1 <&"));
        assert!(
            html.contains("conv1 &lt;&amp;&quot;&#39;&gt;"),
            "escaped node name in a point's title"
        );
        assert!(html.contains("models/m|x.onnx"));
        assert!(html.contains("data-verdict=\"fail\""));
        assert!(html.contains(">FAIL</div>"));
        assert!(html.contains("exit code 3"));
        // Three failing rules, then the passing one.
        let fails: Vec<usize> = html.match_indices("class=\"rule-fail\"").map(|(i, _)| i).collect();
        let passes: Vec<usize> = html.match_indices("class=\"rule-pass\"").map(|(i, _)| i).collect();
        assert_eq!((fails.len(), passes.len()), (3, 1));
        assert!(fails.iter().all(|f| *f < passes[0]), "failing rules first");
        // A NaN measurement says so instead of printing a number.
        assert!(html.contains("not measured"));
        // The target that did not run, with its full error.
        let not_run = &html[html.find("id=\"not-run\"").expect("not-run table")..];
        assert!(not_run.contains("<code>openvino</code>"));
        assert!(not_run.contains("first line of the error\nsecond line"));
        assert!(
            html.contains("<td class=\"num\">25.06</td>"),
            "SQNR of qnn:sm8650 on probs"
        );
        assert!(html.contains("<td class=\"num\">+6.10</td>"), "excess dB with its sign");
        assert!(
            html.contains("<td class=\"num\">inf</td>"),
            "an exact output has inf dB"
        );
    }

    #[test]
    fn layer_plot_clamps_inf_to_the_top_skips_null_and_marks_the_divergence() {
        let report = small_report();
        let html = render(&report);
        let svg = plot(&html, "layers").expect("layer plot");
        // Only qnn:sm8650 has layers: one curve, one inf point, one finite point, the null one left out.
        assert_eq!(count(svg, "<polyline"), 1);
        assert_eq!(count(svg, "class=\"mark inf\""), 1);
        assert_eq!(count(svg, "<circle class=\"mark\""), 1);
        assert!(!svg.contains("relu_nomatch"), "a layer without a figure is not drawn");
        assert!(svg.contains("∞ exact"), "the infinite band is labelled");
        assert!(svg.contains("(exact match)"));
        // The infinite point sits on the band above every finite value.
        let series: Vec<&TargetReport> = report.targets.iter().filter(|t| !t.layers.is_empty()).collect();
        let f = LayerFrame::new(&series);
        let (_, y_inf) = f.point(0, LayerValue::PlusInf);
        let (_, y_fin) = f.point(1, LayerValue::Finite(36.19));
        assert!(y_inf < f.y.at(f.y.d1) && y_fin > y_inf);
        assert!(svg.contains("class=\"divergence\" data-target=\"qnn:sm8650\" data-index=\"1\""));
    }

    #[test]
    fn without_layers_the_page_says_how_to_get_them() {
        let mut report = small_report();
        for t in &mut report.targets {
            t.layers.clear();
        }
        let html = render(&report);
        assert!(plot(&html, "layers").is_none());
        assert!(html.contains("id=\"no-layers\""));
        assert!(html.contains("--layers all"));
    }

    #[test]
    fn agreement_cells_are_symmetric_and_uncomparable_pairs_hatched() {
        let mut report = small_report();
        report.agreement = serde_json::from_str(
            r#"[{"a": "qnn:sm8650", "b": "cpu:noopt", "output": "probs", "elements": 3, "differing_elements": 1, "max_abs": 0.01},
                {"a": "qnn:sm8650", "b": "cpu:noopt", "output": "out|put\ntwo", "elements": 4, "differing_elements": null, "max_abs": "nan"}]"#,
        )
        .expect("agreement parses");
        let html = render(&report);
        for (a, b) in [("qnn:sm8650", "cpu:noopt"), ("cpu:noopt", "qnn:sm8650")] {
            assert_eq!(cell_text(&html, a, b, "probs").as_deref(), Some("66.7%"));
        }
        let svg = plot(&html, "agreement:out|put\ntwo").expect("second heatmap");
        assert_eq!(count(svg, "class=\"mark na\""), 2);
        assert_eq!(count(svg, "class=\"diag\""), 2);
        assert!(svg.contains(">n/a</text>"));
    }

    #[test]
    fn placement_strip_tells_compute_fallback_from_boundary_nodes() {
        let mut report = small_report();
        let part = |ep: &str, first: usize, last: usize, op: &str, node: &str| Partition {
            ep: ep.into(),
            nodes: last - first + 1,
            first_node: node.into(),
            last_node: node.into(),
            first_index: first,
            last_index: last,
            op_types: [(op.to_string(), last - first + 1)].into_iter().collect(),
        };
        let p = report.targets[0].placement.as_mut().expect("placement");
        p.partitions = vec![
            part("CPUExecutionProvider", 0, 0, "QuantizeLinear", "x_q"),
            part("QNNExecutionProvider", 1, 4, "Conv", "conv <1>"),
            part("CPUExecutionProvider", 5, 5, "Celu", "celu"),
            part("QNNExecutionProvider", 6, 10, "Conv", "conv2"),
        ];
        p.fallback = vec![FallbackNode {
            name: "celu".into(),
            op_type: "Celu".into(),
            kind: "compute".into(),
            position: "middle".into(),
            reason: Some("Operators of type `Celu` are not supported <by QNN>".into()),
        }];
        let html = render(&report);
        let svg = plot(&html, "placement").expect("placement plot");
        assert_eq!(count(svg, "class=\"mark\""), 2, "two QNN partitions");
        assert_eq!(count(svg, "class=\"mark fallback\""), 1, "the boundary QuantizeLinear");
        assert_eq!(count(svg, "class=\"mark fallback compute\""), 1, "the Celu");
        assert!(svg.contains("conv &lt;1&gt;"));
        assert!(svg.contains("1 compute op on CPU"));
        assert!(html.contains("not supported &lt;by QNN&gt;"));
    }

    #[test]
    fn nice_ticks_enclose_the_range() {
        for (lo, hi) in [(25.3, 48.1), (0.0, 1.0), (-3.0, 7.5), (12.0, 12.0), (0.001, 0.0042)] {
            let t = nice_ticks(lo, hi, 6);
            assert!(t.len() >= 2 && t.len() <= 16, "{lo}..{hi}: {t:?}");
            assert!(t[0] <= lo && *t.last().expect("ticks") >= hi, "{lo}..{hi}: {t:?}");
        }
        assert_eq!(tick_label(-0.0, 5.0), "0");
        assert_eq!(tick_label(2.5, 0.5), "2.5");
        assert_eq!(tick_label(37.5, 2.5), "37.5");
        assert_eq!(tick_label(40.0, 2.5), "40.0");
        assert_eq!(tick_label(40.0, 5.0), "40");
        assert_eq!(tick_label(0.75, 0.25), "0.75");
    }

    /// The reports the real binary wrote (not in the repository; skipped when absent).
    #[test]
    fn real_reports_draw_what_the_json_says() {
        for name in ["cnn", "fallback", "transformer"] {
            let Some((report, json)) = load(name) else { continue };
            let html = render(&report);
            assert_self_contained(&html);
            let targets = json["targets"].as_array().expect("targets");
            let with_layers: Vec<&Value> = targets
                .iter()
                .filter(|t| t["layers"].as_array().is_some_and(|l| !l.is_empty()))
                .collect();
            match plot(&html, "layers") {
                Some(svg) => {
                    assert_eq!(count(svg, "<polyline"), with_layers.len(), "{name}");
                    let points: usize = with_layers
                        .iter()
                        .flat_map(|t| t["layers"].as_array().into_iter().flatten())
                        .filter(|l| plotted(&l["sqnr_db"]))
                        .count();
                    assert_eq!(count(svg, "class=\"mark"), points, "{name}");
                }
                None => assert!(with_layers.is_empty() && html.contains("id=\"no-layers\""), "{name}"),
            }
            for e in json["agreement"].as_array().expect("agreement") {
                let (a, b, o) = (e["a"].as_str(), e["b"].as_str(), e["output"].as_str());
                let (Some(a), Some(b), Some(o)) = (a, b, o) else {
                    panic!("{e}")
                };
                let want = match (e["differing_elements"].as_u64(), e["elements"].as_u64()) {
                    (Some(0), Some(n)) if n > 0 => "100%".to_string(),
                    (Some(d), Some(n)) if n > 0 => format!("{:.1}%", 100.0 * (n - d) as f64 / n as f64),
                    _ => "n/a".to_string(),
                };
                assert_eq!(
                    cell_text(&html, a, b, o),
                    Some(want.clone()),
                    "{name}: {a} vs {b} on {o}"
                );
                assert_eq!(cell_text(&html, b, a, o), Some(want), "{name}: symmetric");
            }
            let partitions: usize = targets
                .iter()
                .filter_map(|t| t["placement"]["partitions"].as_array())
                .map(Vec::len)
                .sum();
            let svg = plot(&html, "placement").expect("placement plot");
            assert_eq!(count(svg, "class=\"mark"), partitions, "{name}");
            let verdict = json["gate"]["verdict"].as_str().expect("verdict");
            assert!(html.contains(&format!("data-verdict=\"{verdict}\"")), "{name}");
            let fingerprinted = targets.iter().filter(|t| t["fingerprint"].is_object()).count();
            let header = &html[html.find("<table class=\"fingerprint\">").expect("fingerprint table")..];
            let header = &header[..header.find("</tr>").expect("row")];
            assert_eq!(count(header, "<th><code>"), fingerprinted, "{name}");
        }
    }
}
