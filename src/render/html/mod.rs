//! The HTML rendering of a report (`--html FILE`): one self-contained page to attach to a CI run
//! or send to someone, with the figures the terminal prints and four plots.
//!
//! Everything is inline: CSS in a `<style>` block, the plots as inline SVG, and one small inline
//! script; the page loads nothing from the network (no fonts, images, stylesheets or scripts). Like
//! every renderer it reads only the [`Report`] and recomputes no metric. The markup is written
//! with `maud`, which escapes every string taken from the report by construction (node names
//! may hold `<`, `&` or `"`); the SVG plots are drawn by hand (`plot`, `layer_plot`,
//! `agreement_plot`, `placement_plot`) and escape what they take from the report themselves.
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
//! headless browser's DOM dump shows whether the plots were drawn (`tests/it/html_report.rs`).
//! The marks a report implies: the layer plot, one per layer whose `sqnr_db` is a number or
//! ±inf; each agreement plot, two per `agreement[]` entry of its output (the matrix is
//! symmetric; the diagonal is not a mark); the placement plot, one per partition.

mod agreement_plot;
pub mod corpus;
pub mod eval;
pub mod generation;
mod layer_plot;
pub mod matrix;
mod placement_plot;
mod plot;
mod sqnr_plot;
mod stream_plot;
pub mod triage;

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::present::{
    count, db, divergence_sentence, ep_short, num, pct, rule_values, signed_db, thread_probe_sentence,
};
use crate::report::compare::{OutputMetrics, PlacementSummary, Report, TargetReport, ThreadProbe};
use crate::report::facts::TargetRole;
use crate::report::gate::{RuleResult, Verdict};
use crate::report::RunStatus;
use plot::target_colour;

/// Renders the report as one self-contained HTML page.
pub fn render(report: &Report) -> String {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "npu-audit: " (report.model.path) " (" (verdict_word(report.gate.verdict)) ")" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                (header_section(report))
                (gate_section(report))
                (outputs_section(report))
                (layers_section(report))
                (stream_section(report))
                (agreement_section(report))
                (placement_section(report))
                (fingerprint_section(report))
                (notes_section(report))
                (PreEscaped(format!("<script>{SELF_CHECK_JS}</script>\n")))
            }
        }
    };
    let mut text = page.into_string();
    text.push('\n');
    text
}

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

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::None => "NO GATE",
    }
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::None => "none",
    }
}

/// The script that checks every plot was drawn (see the module documentation); the triage page
/// runs it too.
const SELF_CHECK_JS: &str = r#"
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
"#;

// ---------------------------------------------------------------------------------------------
// 1. Header and gate

fn header_section(report: &Report) -> Markup {
    let m = &report.model;
    let r = &report.reference;
    let ran = report.targets.iter().filter(|t| t.status == RunStatus::Ok).count();
    html! {
        h1 { "npu-audit report" }
        div.summary {
            table.facts {
                tr { th { "model" } td {
                    code { (m.path) } " "
                    span.muted {
                        "sha256 " code title=(m.sha256) { (m.sha256.get(..12).unwrap_or(&m.sha256)) }
                        " · " (m.size_bytes) " bytes · IR " (m.ir_version) " · opset " (m.opset) " · " (m.producer)
                    }
                } }
                tr { th { "golden run" } td { (r.description) " " span.tag { (r.kind) } } }
                tr { th { "inputs" } td { (inputs_text(report)) } }
                tr { th { "host" } td { (crate::render::present::host_line(report.host.as_ref())) } }
                tr { th { "targets" } td {
                    (ran) " of " (report.targets.len()) " ran; baseline: " (report.baseline.as_deref().unwrap_or("none"))
                } }
                @if let Some(shard) = &report.shard {
                    tr { th { "shard" } td { (shard.index) " of " (shard.count) ": " (shard.targets.join(", ")) } }
                }
                @if !report.merged_from.is_empty() {
                    tr { th { "merged from" } td { (report.merged_from.join(", ")) } }
                }
            }
            (verdict_box(report))
        }
    }
}

fn inputs_text(report: &Report) -> Markup {
    let p = &report.inputs.provenance;
    html! {
        (p.samples) " sample(s), " (p.source)
        @if !p.generators.is_empty() { " · " code { (p.generators.join(" ")) } }
        @if let Some(seed) = p.seed { " · seed " (seed) }
        @if !p.files.is_empty() { " · files " code { (p.files.join(", ")) } }
    }
}

fn verdict_box(report: &Report) -> Markup {
    let class = verdict_class(report.gate.verdict);
    let failing = report.gate.rules.iter().filter(|r| !r.pass).count();
    let detail = if report.gate.rules.is_empty() {
        "no thresholds set".to_string()
    } else {
        format!("{}, {failing} failing", count(report.gate.rules.len(), "rule"))
    };
    html! {
        div class={ "verdict verdict-" (class) } id="verdict" data-verdict=(class) {
            div.word { (verdict_word(report.gate.verdict)) }
            div.sub { (detail) }
            div.sub { "exit code " (report.exit_code as i32) }
        }
    }
}

fn gate_section(report: &Report) -> Markup {
    let mut rules: Vec<&RuleResult> = report.gate.rules.iter().collect();
    rules.sort_by_key(|r| r.pass);
    html! {
        h2 id="gate" { "Gate rules" }
        @if let Some(p) = &report.gate.policy {
            p.muted {
                "limits from " (p.file.as_deref().unwrap_or("flags only")) ", mode " (p.mode)
                @if let Some(b) = &p.baseline_report { ", previous report " code { (b) } }
                @if !p.allowed_to_fail.is_empty() { ", allowed to fail: " (p.allowed_to_fail.join(", ")) }
            }
        }
        @if rules.is_empty() {
            p.muted { "No thresholds were set: nothing was gated." }
        } @else {
            table.rules id="rules" {
                tr { th { "rule" } th { "target" } th { "output" } th { "measured" } th { "limit" } th { "pass" } th { "origin" } }
                @for r in rules { (rule_row(r)) }
            }
        }
    }
}

fn rule_row(r: &RuleResult) -> Markup {
    let (measured, limit) = rule_values(r.rule.as_str(), r.measured, r.limit);
    html! {
        tr class=(if r.pass { "rule-pass" } else { "rule-fail" }) {
            td { code { (r.rule.as_str()) } } td { (r.target) } td { (r.output) }
            td.num { (measured) } td.num { (limit) }
            td { @if r.pass { span.ok { "✔ pass" } } @else { span.bad { "✘ FAIL" } } }
            td { (r.origin) @if let Some(prev) = r.previous { " " span.muted { "(previous " (num(prev.0)) ")" } } }
        }
    }
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

fn outputs_section(report: &Report) -> Markup {
    html! {
        h2 id="outputs" { "Outputs against the golden run" }
        (targets_table(report))
        @for name in output_names(report) { (output_table(report, &name)) }
        (drift_reading(report))
        (not_run_table(report))
    }
}

fn targets_table(report: &Report) -> Markup {
    html! {
        table.targets {
            tr { th { "target" } th { "status" } th { "EP" } th { "runtime" } th { "nodes on EP" } th { "run ms" } th { "wall ms" } th { "fingerprint" } }
            @for t in &report.targets {
                @let ran = t.status == RunStatus::Ok;
                tr {
                    td { (target_label(t)) }
                    td { (status_html(t.status)) }
                    td { (ep_short(&t.ep)) }
                    td { (t.runtime.as_ref().map_or_else(|| "-".into(), crate::report::compare::RuntimeInfo::text)) }
                    td.num { (t.placement.as_ref().map_or_else(|| "-".into(), |p| format!("{}/{}", p.target_ep_nodes, p.total_nodes))) }
                    td.num { (t.timing.as_ref().and_then(|x| x.run_ms).filter(|_| ran).map_or_else(|| "-".into(), |v| format!("{v:.2}"))) }
                    td.num { (t.timing.as_ref().map_or_else(|| "-".into(), |x| format!("{:.0}", x.wall_ms))) }
                    td { (t.fingerprint.as_ref().map_or("-", |f| f.summary.as_str())) }
                }
            }
        }
    }
}

/// A target's id with its role and chipset.
fn target_label(t: &TargetReport) -> Markup {
    html! {
        code { (t.id) }
        @if t.role == TargetRole::Baseline { span.tag { "baseline" } }
        @if let Some(c) = &t.chipset { " " span.muted { (c.name) " v" (c.htp_arch) } }
    }
}

fn status_html(status: RunStatus) -> Markup {
    let class = match status {
        RunStatus::Ok => "ok",
        RunStatus::Unavailable => "warn",
        _ => "bad",
    };
    html! { span class=(class) { (status.as_str()) } }
}

fn output_table(report: &Report, name: &str) -> Markup {
    let rows: Vec<(&TargetReport, &OutputMetrics)> = report
        .targets
        .iter()
        .filter_map(|t| t.outputs.iter().find(|o| o.name == name).map(|o| (t, o)))
        .collect();
    let decl = report.model.outputs.iter().find(|o| o.name == name);
    html! {
        h3 { "output " code { (name) } @if let Some(d) = decl { " " span.muted { (d.dtype) } } }
        @if rows.is_empty() {
            p.muted { "No target returned this output." }
        } @else {
            table.metrics {
                tr { th { "target" } th { "status" } th { "bit-identical" } th { "max abs" } th { "SQNR dB" } th { "excess dB" } th { "top-1" } th { "top-5" } th { "note" } }
                @for (t, o) in rows { (metrics_row(report, t, o)) }
            }
            (tolerance_line(report, name))
        }
    }
}

fn metrics_row(report: &Report, t: &TargetReport, o: &OutputMetrics) -> Markup {
    let excess = if report.baseline.as_deref() == Some(t.id.as_str()) {
        "(baseline)".to_string()
    } else {
        o.baseline
            .as_ref()
            .map_or_else(|| "-".into(), |b| signed_db(b.excess_db.0))
    };
    html! {
        tr {
            td { (target_label(t)) }
            td { (status_html(t.status)) }
            td.num { (o.bit_identical.map_or_else(|| "-".into(), |b| format!("{b}/{}", o.elements))) }
            td.num { (num(o.max_abs.0)) }
            td.num { (db(o.sqnr_db.0)) }
            td.num { (excess) }
            td.num { (pct(o.top1_agreement)) }
            td.num { (pct(o.top5_agreement)) }
            td {
                (o.error.as_deref().unwrap_or(""))
                @if o.nan_count + o.inf_count + o.nonfinite_mismatch > 0 {
                    " NaN " (o.nan_count) " · Inf " (o.inf_count) " · non-finite mismatches " (o.nonfinite_mismatch)
                }
            }
        }
    }
}

fn tolerance_line(report: &Report, name: &str) -> Markup {
    let tol = report.tolerances.iter().find(|x| x.output == name);
    let groups = report.bit_exact_groups.iter().find(|g| g.output == name);
    html! {
        @if tol.is_some_and(|t| !t.is_measured()) {
            p.muted { "loosest gate every gated target passes: none (a figure could not be measured on some target)" }
        } @else if let Some(tol) = tol {
            p.muted {
                "loosest gate every gated target passes: "
                code { "--min-sqnr " (db(tol.min_sqnr_db.0)) " --max-abs " (num(tol.max_abs.0)) }
                " (cosine ≥ " (num(tol.min_cosine.0))
                @if let Some(top1) = tol.min_top1_agreement { ", top-1 ≥ " (pct(Some(top1))) }
                ")"
            }
        }
        @if let Some(g) = groups {
            p.muted {
                "bit-exact groups:"
                @for members in &g.groups { " {" (members.join(", ")) "}" }
            }
        }
    }
}

fn drift_reading(report: &Report) -> Markup {
    let unstable: Vec<&TargetReport> = report
        .targets
        .iter()
        .filter(|t| t.determinism.as_ref().is_some_and(|d| !d.bit_identical))
        .collect();
    let explained = report.targets.iter().any(|t| !t.drift_explanations.is_empty());
    let probed: Vec<(&TargetReport, &ThreadProbe)> = report
        .targets
        .iter()
        .filter_map(|t| Some((t, t.determinism.as_ref()?.thread_probe.as_ref()?)))
        .collect();
    html! {
        @if explained || !unstable.is_empty() || !probed.is_empty() {
            h3 { "Drift reading" }
            ul {
                @for t in &unstable {
                    li { code { (t.id) } ": " span.bad { "not deterministic" } " across repeated runs" }
                }
                @for (t, p) in &probed {
                    li {
                        code { (t.id) } ": "
                        @if p.bit_identical { (thread_probe_sentence(p)) } @else { span.bad { (thread_probe_sentence(p)) } }
                    }
                }
                @for t in &report.targets {
                    @for e in &t.drift_explanations { li { code { (t.id) } " " (e.output) ": " (e.text) } }
                }
            }
        }
    }
}

fn not_run_table(report: &Report) -> Markup {
    let failed: Vec<&TargetReport> = report.targets.iter().filter(|t| t.status != RunStatus::Ok).collect();
    html! {
        @if !failed.is_empty() {
            h3 id="not-run" { "Targets that did not run" }
            table.not-run {
                tr { th { "target" } th { "status" } th { "phase" } th { "required" } th { "error" } }
                @for t in failed {
                    tr {
                        td { (target_label(t)) }
                        td { (status_html(t.status)) }
                        td { (t.failed_at.map_or("-", |p| p.as_str())) }
                        td { (if t.required { "yes" } else { "no (allowed to fail)" }) }
                        td { pre { (t.error.as_deref().unwrap_or("(no error text)")) } }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Per-layer SQNR

fn layers_section(report: &Report) -> Markup {
    let rules = report.layer_audit.as_ref().map(|l| l.divergence).unwrap_or_default();
    let series: Vec<&TargetReport> = report.targets.iter().filter(|t| !t.layers.is_empty()).collect();
    html! {
        h2 id="layers" { "Per-layer SQNR" }
        @if series.is_empty() {
            p.note id="no-layers" { "No per-layer audit in this report (run with " code { "--layers all" } ")." }
        } @else {
            @if let Some(info) = &report.layer_audit {
                p.muted {
                    (info.selected) " of " (info.points) " points tapped (" (info.mode) "), " (info.matched)
                    " matched to the reference; beyond rounding: more than " (info.divergence.tolerance_lsb) " LSB (float layers: " (num(info.divergence.float_tolerance)) " of the largest magnitude); SQNR loss: more than " (num(info.divergence.sqnr_loss_db)) " dB below the baseline; " (count(info.sessions, "session"))
                    ", " (format!("{:.1}", info.seconds)) " s. Cumulative SQNR of each tapped activation against the golden activation; hover a point for the node."
                }
            }
            (PreEscaped(layer_plot::layer_plot(report, &series)))
            p.muted { "Identical curves overlap: targets listed first are drawn wider, underneath. Layers without a figure (no reference counterpart, NaN) are left out." }
            ul.divergences {
                @for t in &series {
                    li { span style={ "color:" (target_colour(report, t)) } { "■" } " " (t.id) ": " (divergence_sentence(t, &rules)) }
                    @if let Some(e) = t.layer_summary.as_ref().and_then(|x| x.error.as_deref()) {
                        li.bad { (t.id) ": " (e) }
                    }
                    @if let Some(cmd) = super::present::repro_command(report, t) {
                        li.repro { (t.id) ", a standalone repro of that layer for the vendor: " code { (cmd) } }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3b. Streams (only in a report made with --stream)

fn stream_section(report: &Report) -> Markup {
    let Some(info) = &report.stream else {
        return html! {};
    };
    let runs = stream_plot::runs(report);
    let decisions = runs.first().map_or(0, |r| r.run.decisions.len());
    html! {
        h2 id="stream" { "Stream" }
        p.muted {
            (info.steps) " steps; fed back: " code { (info.feedback.join(", ")) } "; the state is the lowest SQNR of "
            (info.state_outputs.join(", ")) " against the golden stream at each step; diverged below "
            (super::present::db(info.divergence_sqnr_db.0)) " dB."
            @if info.teacher_forcing { " Dashed: teacher-forced (the golden state fed at every step): the error one step introduces." }
        }
        table.stream {
            tr { th { "target" } th { "run" } th { "decisions" } th { "diverges" } th { "growth" } th { "median" } th { "step 1" } th { "last step" } }
            @for row in super::present::stream_rows(report) {
                tr {
                    td { (row.target) } td { (row.run) }
                    td { @for d in &row.decisions { div { (d) } } @if row.decisions.is_empty() { "-" } }
                    td { (row.divergence) } td.num { (row.growth) } td.num { (row.median_db) }
                    td.num { (row.first_db) } td.num { (row.last_db) }
                }
            }
        }
        @if !runs.is_empty() {
            (PreEscaped(stream_plot::sqnr_plot(report, &runs, info.steps, info.divergence_sqnr_db.0)))
            @for d in 0..decisions {
                h3 { "Decisions: " (info.decisions.get(d).cloned().unwrap_or_default()) }
                (PreEscaped(stream_plot::decision_plot(report, &runs, info.steps, d)))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Target-by-target agreement

fn agreement_section(report: &Report) -> Markup {
    let mut outputs: Vec<&str> = Vec::new();
    for e in &report.agreement {
        if !outputs.contains(&e.output.as_str()) {
            outputs.push(&e.output);
        }
    }
    html! {
        h2 id="agreement" { "Target against target: bit agreement" }
        @if report.agreement.is_empty() {
            p.muted { "No pair of targets to compare (fewer than two targets ran)." }
        } @else {
            p.muted { "Fraction of elements that are bit-identical between two targets (1 − differing / elements), whatever the golden run says. Hatched: not comparable (different types or shapes)." }
            @for (k, output) in outputs.iter().enumerate() {
                h3 { "output " code { (output) } }
                (PreEscaped(agreement_plot::agreement_plot(report, output, k)))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Placement

fn placement_section(report: &Report) -> Markup {
    let placed: Vec<(&TargetReport, &PlacementSummary)> = report
        .targets
        .iter()
        .filter_map(|t| t.placement.as_ref().map(|p| (t, p)))
        .collect();
    html! {
        h2 id="placement" { "Node placement" }
        @if placed.is_empty() {
            p.muted { "No target recorded where its nodes ran." }
        } @else {
            @if placed.iter().any(|(_, p)| !p.partitions.is_empty()) {
                p.muted { "Each row is one target's graph in execution order (the graph the runtime partitioned), one bar per connected run of nodes on one execution provider; hatched: nodes of a non-CPU target that fell back to the CPU (red when a compute op the EP rejected is among them)." }
                (PreEscaped(placement_plot::placement_plot(&placed)))
            }
            (placement_table(&placed))
            (fallback_list(&placed))
        }
    }
}

fn placement_table(placed: &[(&TargetReport, &PlacementSummary)]) -> Markup {
    html! {
        table.placement {
            tr { th { "target" } th { "nodes on EP" } th { "EP partitions" } th { "compute fallback nodes" } th { "ops on CPU" } th { "crossings (mid-graph)" } th { "bytes / inference" } th { "graph" } }
            @for (t, p) in placed {
                tr {
                    td { (target_label(t)) }
                    td.num { (p.target_ep_nodes) "/" (p.total_nodes) }
                    td.num { (p.ep_partitions) }
                    td class={ "num" @if p.compute_fallback_nodes > 0 { " bad" } } { (p.compute_fallback_nodes) }
                    td { (p.cpu_op_types.iter().map(|(op, c)| format!("{op}×{c}")).collect::<Vec<_>>().join(", ")) }
                    td.num { (p.crossing_count) " (" (p.mid_graph_crossing_count) ")" }
                    td.num { (p.crossing_bytes.map_or_else(|| "unknown".into(), |b| b.to_string())) }
                    td.muted { (p.graph) " via " (p.source) }
                }
            }
        }
    }
}

fn fallback_list(placed: &[(&TargetReport, &PlacementSummary)]) -> Markup {
    let rows: Vec<(&TargetReport, &crate::report::compare::FallbackNode)> = placed
        .iter()
        .flat_map(|(t, p)| p.fallback.iter().filter(|f| f.kind == "compute").map(move |f| (*t, f)))
        .collect();
    html! {
        @if !rows.is_empty() {
            h3 { "Compute ops that fell back to the CPU" }
            table.fallback {
                tr { th { "target" } th { "node" } th { "op" } th { "position" } th { "the EP's reason" } }
                @for (t, f) in rows {
                    tr {
                        td { code { (t.id) } } td { code { (f.name) } } td { (f.op_type) } td { (f.position) }
                        td { (f.reason.as_deref().unwrap_or("(no reason logged)")) }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Fingerprints

fn fingerprint_class(v: &str) -> &'static str {
    match v {
        "half_even" | "exact" | "saturate" | "fp32" | "floor" => "v-ref",
        "cpu_fallback" => "v-fallback",
        "non_deterministic" | "refused" | "crashed" | "timeout" | "other" | "wrap" => "v-bad",
        _ => "v-diff",
    }
}

fn fingerprint_section(report: &Report) -> Markup {
    let cols: Vec<&TargetReport> = report.targets.iter().filter(|t| t.fingerprint.is_some()).collect();
    let mut probes: Vec<&str> = Vec::new();
    for k in cols
        .iter()
        .flat_map(|t| t.fingerprint.iter().flat_map(|f| f.verdicts.keys()))
    {
        if !probes.contains(&k.as_str()) {
            probes.push(k);
        }
    }
    probes.sort_unstable();
    html! {
        h2 id="fingerprint" { "Arithmetic fingerprints" }
        @if cols.is_empty() {
            p.muted { "No fingerprint in this report (" code { "--fingerprint off" } ", or no target ran)." }
        } @else {
            table.fingerprint {
                tr { th { "probe" } @for t in &cols { th { code { (t.id) } } } }
                @for probe in probes {
                    tr {
                        td { code { (probe) } }
                        @for t in &cols {
                            @match t.fingerprint.as_ref().and_then(|f| f.verdicts.get(probe)) {
                                Some(v) => td class=(fingerprint_class(v)) { (v) },
                                None => td.muted { "-" },
                            }
                        }
                    }
                }
                tr {
                    th { "summary" }
                    @for f in cols.iter().filter_map(|t| t.fingerprint.as_ref()) {
                        td { (f.summary) @if f.cached { " " span.tag { "cached" } } }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Notes and footer

fn notes_section(report: &Report) -> Markup {
    let problems = report.layer_audit.as_ref().map_or(&[][..], |l| l.problems.as_slice());
    html! {
        h2 id="notes" { "Notes" }
        @if report.notes.is_empty() && problems.is_empty() { p.muted { "None." } }
        @if !report.notes.is_empty() {
            ul.notes { @for n in &report.notes { li { (n) } } }
        }
        @if !problems.is_empty() {
            h3 { "Per-layer audit problems" }
            ul.problems { @for p in problems { li { (p) } } }
        }
        @if !report.metric_definitions.is_empty() {
            details {
                summary { "Metric definitions" }
                table { @for (k, v) in &report.metric_definitions { tr { td { code { (k) } } td { (v) } } } }
            }
        }
        p.muted id="tool" { (report.tool.name) " " (report.tool.version) " · report schema " (report.schema_version) }
    }
}

#[cfg(test)]
mod tests {
    use super::layer_plot::{LayerFrame, LayerValue};
    use super::plot::{nice_ticks, tick_label};
    use super::*;
    use crate::render::markdown::tests::small_report;
    use crate::render::present::escape_markup as escape;
    use crate::report::compare::{FallbackNode, Partition};

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
}
