//! The HTML page of `triage` (`--html FILE`): one self-contained page for support staff, with
//! the same figures the terminal and Markdown give, built like the compare report's page (inline
//! CSS, inline SVG, one inline script, nothing loaded from elsewhere; `maud` escapes every
//! string, and the plot escapes what it takes itself).
//!
//! Sections, in order:
//!
//! 1. the header: model, golden run, candidates, thresholds, and the fleet's conclusion as the
//!    banner (`npu` red, `quantization` amber, `healthy` green, otherwise grey);
//! 2. the verdicts counted, the conclusion's sentence, the chipsets the drift concentrates on,
//!    the outliers;
//! 3. the SQNR distribution per chipset (`sqnr_plot`);
//! 4. the fleet's groups by chipset, device model, app version and runtime;
//! 5. every report in a table that filters by verdict and by text and sorts by any column; the
//!    state can also be given in the address (`#verdict=unexplained&q=S24&sort=sqnr:desc`), so a
//!    filtered view can be linked;
//! 6. the candidate runs, the notes and the tool version.
//!
//! Device reports come from strangers: every path, `device.json` value, log line and sentence is
//! text here, never markup (`tests/it/triage_html.rs` checks a `<script>` in a device model does
//! not run in Chromium). The script writes where each plot mark was drawn (`data-x`, `data-y`
//! on `.mark`, `g.tick` and `g.row`) and how many report rows are shown (`data-shown` on the
//! table), so a headless browser's DOM dump can be checked against the JSON.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::sqnr_plot::{rows, sqnr_plot, verdict_colour};
use super::{SELF_CHECK_JS, STYLE};
use crate::commands::triage::fleet::chipset_group_label;
use crate::render::present::{
    chipset_label, copies, count, db, db_opt, fleet_keyword, identity_status, signed_db, triage_thresholds,
    verdict_counts, verdict_keyword,
};
use crate::report::common::Num;
use crate::report::triage::{Fleet, FleetKind, GroupFigures, ReportEntry, Triage};
use crate::report::RunStatus;

/// Renders the triage as one self-contained HTML page.
pub fn render(t: &Triage) -> String {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "npu-audit triage: " (t.model) " (" (count(t.reports.len(), "report")) ")" }
                style { (PreEscaped(STYLE)) (PreEscaped(TRIAGE_STYLE)) }
            }
            body {
                (header(t))
                (verdicts_section(t))
                (plot_section(t))
                @if let Some(f) = &t.fleet { (groups_section(f)) }
                (reports_section(t))
                (candidates_section(t))
                (notes_section(t))
                (PreEscaped(format!("<script>{SELF_CHECK_JS}{TRIAGE_JS}</script>\n")))
            }
        }
    };
    let mut text = escape_controls(page.into_string());
    text.push('\n');
    text
}

/// The page with every control character but line breaks and tabs, and every direction override,
/// shown escaped (`\u{1b}`) as the terminal shows them: device strings (paths, `device.json`,
/// log lines) may carry terminal escapes, BEL or bidirectional overrides, and the page's own
/// markup has none of them.
fn escape_controls(page: String) -> String {
    let hostile = |c: char| {
        (c.is_control() && !matches!(c, '\n' | '\t' | '\r')) || crate::foundation::console::is_bidi_control(c)
    };
    if !page.chars().any(hostile) {
        return page;
    }
    let mut out = String::with_capacity(page.len() + 64);
    for c in page.chars() {
        if hostile(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

const TRIAGE_STYLE: &str = r#"
.verdict-npu { background: var(--fail); } .verdict-quantization { background: #9a6700; }
.verdict-healthy { background: var(--pass); } .verdict-undecided, .verdict-single { background: var(--none); }
.verdict .word { font-size: 30px; }
.chips { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.chip { border-radius: 12px; padding: 2px 10px; color: #fff; font-weight: 600; }
.vtag { display: inline-block; border-radius: 3px; padding: 0 5px; color: #fff; font-size: 12px; white-space: nowrap; }
.controls { display: flex; gap: 12px; align-items: center; margin: 8px 0; }
table.reports th[data-sort] { cursor: pointer; user-select: none; }
table.reports th[data-sort]::after { content: " ↕"; color: #999; }
table.reports th[aria-sort="ascending"]::after { content: " ↑"; color: #1f2328; }
table.reports th[aria-sort="descending"]::after { content: " ↓"; color: #1f2328; }
table.reports td.path { max-width: 340px; word-break: break-all; }
svg.plot .mark.dim { opacity: .15; }
svg.plot tspan.muted { fill: #666; }
"#;

/// Sorting, filtering and the positions the self-check reads (see the module documentation).
const TRIAGE_JS: &str = r#"
(function () {
  function centre(el, attr) {
    try {
      var b = el.getBBox();
      el.setAttribute('data-x', (b.x + b.width / 2).toFixed(2));
      el.setAttribute('data-y', (b.y + b.height / 2).toFixed(2));
      if (attr) { el.setAttribute('data-y0', b.y.toFixed(2)); el.setAttribute('data-y1', (b.y + b.height).toFixed(2)); }
    } catch (e) {}
  }
  var plot = document.querySelector('svg[data-plot="sqnr-by-chipset"]');
  if (plot) {
    plot.querySelectorAll('.mark').forEach(function (m) { centre(m); });
    plot.querySelectorAll('g.tick').forEach(function (t) { centre(t.querySelector('line')); t.setAttribute('data-x', t.querySelector('line').getAttribute('data-x')); });
    plot.querySelectorAll('g.row').forEach(function (r) {
      var band = r.querySelector('rect.row-band');
      centre(band, true);
      r.setAttribute('data-y0', band.getAttribute('data-y0'));
      r.setAttribute('data-y1', band.getAttribute('data-y1'));
    });
  }
  var table = document.getElementById('reports');
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var select = document.getElementById('verdict-filter');
  var search = document.getElementById('report-search');
  var dots = plot ? plot.querySelectorAll('.mark') : [];
  function apply() {
    var v = select.value, q = search.value.toLowerCase(), shown = 0;
    rows.forEach(function (r) {
      var ok = (v === 'all' || r.getAttribute('data-verdict') === v) &&
               (q === '' || r.textContent.toLowerCase().indexOf(q) >= 0);
      r.hidden = !ok;
      if (ok) { shown++; }
    });
    for (var i = 0; i < dots.length; i++) {
      dots[i].classList.toggle('dim', v !== 'all' && dots[i].getAttribute('data-verdict') !== v);
    }
    table.setAttribute('data-shown', String(shown));
    document.getElementById('shown-count').textContent = shown + ' of ' + rows.length + ' shown';
  }
  function key(r, col) {
    var c = r.querySelector('td[data-col="' + col + '"]');
    var s = c ? c.getAttribute('data-sort') : null;
    if (s === null) { return c ? c.textContent : ''; }
    if (s === '') { return null; }
    return s === 'inf' ? Infinity : s === '-inf' ? -Infinity : parseFloat(s);
  }
  function sortBy(col, dir) {
    var sign = dir === 'desc' ? -1 : 1;
    var sorted = rows.slice().sort(function (a, b) {
      var x = key(a, col), y = key(b, col);
      if (x === null || (typeof x === 'number' && isNaN(x))) { return (y === null || (typeof y === 'number' && isNaN(y))) ? 0 : 1; }
      if (y === null || (typeof y === 'number' && isNaN(y))) { return -1; }
      return (x < y ? -1 : x > y ? 1 : 0) * sign;
    });
    sorted.forEach(function (r) { body.appendChild(r); });
    table.querySelectorAll('th[data-sort]').forEach(function (th) {
      var on = th.getAttribute('data-sort') === col;
      if (on) { th.setAttribute('aria-sort', dir === 'desc' ? 'descending' : 'ascending'); } else { th.removeAttribute('aria-sort'); }
    });
    table.setAttribute('data-sorted', col + ':' + dir);
  }
  table.querySelectorAll('th[data-sort]').forEach(function (th) {
    th.addEventListener('click', function () {
      var col = th.getAttribute('data-sort');
      sortBy(col, th.getAttribute('aria-sort') === 'ascending' ? 'desc' : 'asc');
    });
  });
  var params = {};
  location.hash.replace(/^#/, '').split('&').forEach(function (p) {
    var i = p.indexOf('=');
    if (i > 0) { params[decodeURIComponent(p.slice(0, i))] = decodeURIComponent(p.slice(i + 1)); }
  });
  if (params.verdict) {
    for (var k = 0; k < select.options.length; k++) {
      if (select.options[k].value === params.verdict) { select.value = params.verdict; }
    }
  }
  if (params.q) { search.value = params.q; }
  if (params.sort) {
    var parts = params.sort.split(':');
    if (table.querySelector('th[data-sort="' + parts[0].replace(/[^a-z_]/g, '') + '"]')) { sortBy(parts[0], parts[1] === 'desc' ? 'desc' : 'asc'); }
  }
  select.addEventListener('change', apply);
  search.addEventListener('input', apply);
  apply();
})();
"#;

// ---------------------------------------------------------------------------------------------
// 1. Header

fn banner(t: &Triage) -> (String, String) {
    match &t.fleet {
        Some(f) => (fleet_keyword(f.kind), fleet_keyword(f.kind).to_uppercase()),
        None => ("single".into(), count(t.reports.len(), "report").to_uppercase()),
    }
}

fn header(t: &Triage) -> Markup {
    let (class, word) = banner(t);
    let mut targets: Vec<&str> = Vec::new();
    for r in &t.candidate_runs {
        if !targets.contains(&r.target.as_str()) {
            targets.push(&r.target);
        }
    }
    let failed = t.candidate_runs.iter().filter(|r| r.status != RunStatus::Ok).count();
    html! {
        h1 { "npu-audit triage" }
        div.summary {
            table.facts {
                tr { th { "model" } td {
                    code { (t.model) } " "
                    span.muted { "sha256 " code title=(t.model_sha256) { (t.model_sha256.get(..12).unwrap_or(&t.model_sha256)) } }
                } }
                tr { th { "golden run" } td { code { (t.reference) } } }
                tr { th { "reports" } td {
                    (t.reports.len()) " (" (t.reports.iter().filter(|e| e.sqnr_db.is_some()).count()) " measured, "
                    (copies(t.reports.iter().filter(|e| e.duplicate_of.is_some()).count())) ")"
                } }
                tr { th { "candidates" } td {
                    (count(t.candidate_runs.len(), "run")) " (" (failed) " failed): " (targets.join(", "))
                    " · " (t.intra_op_threads) " intra-op thread(s)"
                } }
                tr { th { "thresholds" } td.muted { (triage_thresholds(&t.thresholds)) } }
            }
            div class={ "verdict verdict-" (class) } id="verdict" data-fleet=(class) {
                div.word { (word) }
                div.sub { @if let Some(f) = &t.fleet { (count(f.measured_reports, "measured report")) } @else { "no fleet" } }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Verdicts and the conclusion

fn verdicts_section(t: &Triage) -> Markup {
    html! {
        h2 id="verdicts" { "Verdicts" }
        div.chips {
            @for (k, n) in verdict_counts(t) {
                span.chip style={ "background:" (verdict_colour(&k)) } data-verdict=(k) data-count=(n) { (k) " " (n) }
            }
        }
        @if let Some(f) = &t.fleet { (conclusion(f)) }
    }
}

fn conclusion(f: &Fleet) -> Markup {
    html! {
        p id="conclusion" data-kind=(fleet_keyword(f.kind)) {
            strong { (fleet_keyword(f.kind)) ": " } (f.sentence)
        }
        @if !f.concentrated_on.is_empty() {
            p { "Drift beyond the CPU EP concentrated on: "
                @for (i, c) in f.concentrated_on.iter().enumerate() { @if i > 0 { ", " } strong { (chipset_group_label(c)) } } }
        }
        @if f.kind == FleetKind::Undecided { p.muted { "Too few reports were measured against the CPU EP to conclude." } }
        table.chipset-summary {
            tr { th { "chipset" } th { "reports" } th { "median SQNR dB" } th { "median vs CPU EP dB" } }
            @for g in &f.by_chipset {
                tr { td { (chipset_group_label(&g.key)) } td.num { (g.reports) } td.num { (db_opt(g.median_sqnr_db)) }
                     td.num { (g.median_excess_db.map_or("-".into(), |v| signed_db(-v.0))) } }
            }
        }
        @if !f.outliers.is_empty() {
            p { "Device-specific outliers (more than the outlier threshold below their chipset's median):" }
            ul id="outliers" { @for o in &f.outliers { li { code { (o) } } } }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The SQNR distribution

fn plot_section(t: &Triage) -> Markup {
    let drawn: usize = rows(t).iter().map(|r| r.reports.len()).sum();
    let unmeasured = t.reports.iter().filter(|e| e.sqnr_db.is_none()).count();
    let n_copies = t
        .reports
        .iter()
        .filter(|e| e.duplicate_of.is_some() && e.sqnr_db.is_some())
        .count();
    html! {
        h2 id="distribution" { "SQNR per chipset" }
        @if drawn == 0 {
            p.muted id="no-plot" { "No report could be measured against the golden run." }
        } @else {
            p.muted {
                "Each dot is one report's SQNR against the golden run (its worst output), coloured by verdict; the bar is the chipset's median, "
                "the diamond the CPU EP (cpu:noopt) on the same inputs, a red ring an outlier. Bit-identical to the golden run (+inf dB) and NaN are drawn on bands beside the axis."
            }
            (PreEscaped(sqnr_plot(t)))
            p.muted {
                (count(drawn, "report")) " drawn"
                @if n_copies > 0 { "; " (copies(n_copies)) " of another report not drawn again" }
                @if unmeasured > 0 { "; " (unmeasured) " without a figure (malformed or not reproduced) not drawn" }
                "."
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Groups

fn groups_section(f: &Fleet) -> Markup {
    html! {
        h2 id="groups" { "The fleet by chipset, device, app and runtime" }
        p.muted { "Measured reports, copies counted once. \"vs CPU EP\": the median of (report SQNR − CPU EP SQNR) on the same inputs, negative when the devices lose more than the CPU EP." }
        (group_table("chipset", &f.by_chipset, chipset_group_label))
        (group_table("device model", &f.by_device_model, str::to_string))
        (group_table("app version", &f.by_app_version, str::to_string))
        (group_table("runtime", &f.by_runtime, str::to_string))
    }
}

/// One table of the fleet's groups; `label` names a group as people read it.
fn group_table(title: &str, groups: &[GroupFigures], label: fn(&str) -> String) -> Markup {
    html! {
        h3 { "By " (title) }
        table.groups data-group=(title) {
            tr { th { (title) } th { "reports" } th { "median SQNR dB" } th { "min SQNR dB" } th { "median vs CPU EP dB" } th { "verdicts" } }
            @for g in groups {
                tr {
                    td { (label(&g.key)) } td.num { (g.reports) } td.num { (db_opt(g.median_sqnr_db)) } td.num { (db_opt(g.min_sqnr_db)) }
                    td.num { (g.median_excess_db.map_or("-".into(), |v| signed_db(-v.0))) }
                    td { @for (i, (k, n)) in g.verdicts.iter().enumerate() { @if i > 0 { ", " } (k) " " (n) } }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. The reports

/// A figure's sort key: the number, `inf`/`-inf`, empty when there is none (sorted last).
fn sort_key(v: Option<Num>) -> String {
    match v.map(|n| n.0) {
        None => String::new(),
        Some(x) if x.is_nan() => String::new(),
        Some(x) if x == f64::INFINITY => "inf".into(),
        Some(x) if x == f64::NEG_INFINITY => "-inf".into(),
        Some(x) => format!("{x}"),
    }
}

fn reports_section(t: &Triage) -> Markup {
    html! {
        h2 id="report-list" { "Reports" }
        div.controls {
            label { "verdict " select id="verdict-filter" {
                option value="all" { "all" }
                @for (k, n) in verdict_counts(t) { option value=(k) { (k) " (" (n) ")" } }
            } }
            label { "search " input id="report-search" type="search" placeholder="path, chipset, device, sentence"; }
            span.muted id="shown-count" { (t.reports.len()) " of " (t.reports.len()) " shown" }
        }
        table.reports id="reports" data-shown=(t.reports.len()) {
            thead { tr {
                th data-sort="index" { "#" } th data-sort="path" { "report" } th data-sort="chipset" { "chipset" }
                th data-sort="device" { "device" } th data-sort="app" { "app" } th data-sort="sqnr" { "SQNR dB" }
                th data-sort="cpu" { "CPU EP dB" } th data-sort="verdict" { "verdict" } th { "why" }
            } }
            tbody { @for (i, e) in t.reports.iter().enumerate() { (report_row(i, e)) } }
        }
    }
}

fn report_row(i: usize, e: &ReportEntry) -> Markup {
    let keyword = verdict_keyword(e.verdict.kind);
    let device = e.device.as_ref();
    let text = |v: Option<&String>| v.cloned().unwrap_or_else(|| "-".into());
    html! {
        tr data-verdict=(keyword) data-report=(i) {
            td.num data-col="index" data-sort=(i + 1) { (i + 1) }
            td.path data-col="path" { code { (e.path) } }
            td data-col="chipset" {
                (chipset_label(e.identity.as_ref()))
                @if let Some(id) = &e.identity { " " span.tag { (identity_status(id.status)) } }
            }
            td data-col="device" { (text(device.and_then(|d| d.device_model.as_ref()))) }
            td data-col="app" { (text(device.and_then(|d| d.app_version.as_ref()))) }
            td.num data-col="sqnr" data-sort=(sort_key(e.sqnr_db)) { (db_opt(e.sqnr_db)) }
            td.num data-col="cpu" data-sort=(sort_key(e.cpu_sqnr_db)) { (db_opt(e.cpu_sqnr_db)) }
            td data-col="verdict" {
                span.vtag style={ "background:" (verdict_colour(&keyword)) } { (keyword) }
                @if e.duplicate_of.is_some() { " " span.tag { "copy" } }
            }
            td { (e.verdict.sentence) (evidence(e)) }
        }
    }
}

/// How the chipset was told, output problems, log lines and the report copied, folded.
fn evidence(e: &ReportEntry) -> Markup {
    let read = crate::render::present::how_read(e);
    let empty = e.identity.is_none()
        && e.garbage.is_empty()
        && e.log_evidence.is_empty()
        && e.duplicate_of.is_none()
        && read.is_empty();
    html! {
        @if !empty {
            details {
                summary { "evidence" }
                ul {
                    @if let Some(id) = &e.identity { li { "chipset: " (id.sentence) } }
                    @for g in &e.garbage { li { "outputs: " (g) } }
                    @for l in &e.log_evidence { li { "log: " code { (l) } } }
                    @for r in &read { li { "read: " (r) } }
                    @if let Some(d) = &e.duplicate_of { li { "same contents as " code { (d) } } }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Candidates, notes, footer

fn candidates_section(t: &Triage) -> Markup {
    html! {
        h2 id="candidates" { "Candidate runs" }
        p.muted { "What ran here on each input group: SQNR against the golden run per output." }
        table.candidates {
            tr { th { "target" } th { "inputs" } th { "status" } th { "runtime" } th { "SQNR dB per output" } }
            @for r in &t.candidate_runs {
                tr {
                    td { code { (r.target) } } td { code { (r.inputs.get(..12).unwrap_or(&r.inputs)) } }
                    td { @if r.status == RunStatus::Ok { span.ok { (r.status.as_str()) } } @else { span.bad { (r.status.as_str()) } } }
                    td { (r.runtime.as_deref().unwrap_or("-")) }
                    td.num { (r.sqnr_db.iter().map(|v| db(v.0)).collect::<Vec<_>>().join(", "))
                        @if let Some(e) = &r.error { pre { (e) } } }
                }
            }
        }
    }
}

fn notes_section(t: &Triage) -> Markup {
    html! {
        h2 id="notes" { "Notes" }
        @if t.notes.is_empty() { p.muted { "None." } } @else { ul.notes { @for n in &t.notes { li { (n) } } } }
        p.muted id="tool" { "npu-audit " (t.tool.version) " · triage schema " (t.schema_version) }
    }
}
