//! The terminal rendering of a report: what a person reads after `npu-audit compare`. Colour is
//! added with ANSI styles; `anstream` strips them when stdout is not a terminal or `NO_COLOR` is
//! set.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};
use tabled::builder::Builder;

pub use super::grid::{bold, table};
use super::grid::{paint, table_with, ColumnKind, Look};

use super::present::{
    bytes, cosine, db, ep_short, num, pct, placement_line, printable, signed_db, thread_probe_sentence,
};
use crate::report::compare::{OutputMetrics, Report, TargetReport};
use crate::report::facts::TargetRole;
use crate::report::gate::Verdict;
use crate::report::RunStatus;

fn status_style(s: RunStatus) -> Style {
    match s {
        RunStatus::Ok => AnsiColor::Green.on_default(),
        RunStatus::Unavailable => AnsiColor::Yellow.on_default(),
        _ => AnsiColor::Red.on_default().bold(),
    }
}

fn targets_table(report: &Report) -> String {
    let mut b = Builder::default();
    b.push_record([
        "target",
        "chipset",
        "status",
        "EP",
        "nodes on EP",
        "runtime",
        "create ms",
        "run ms",
        "wall ms",
        "fingerprint",
    ]);
    for t in &report.targets {
        let runtime = t
            .runtime
            .as_ref()
            .map_or_else(|| "-".into(), crate::report::compare::RuntimeInfo::text);
        let ran = t.status == RunStatus::Ok;
        let (create, run, wall) = t
            .timing
            .as_ref()
            .map(|x| {
                let shown = |v: Option<f64>, d: usize| match v.filter(|_| ran) {
                    Some(v) => format!("{v:.d$}"),
                    None => "-".into(),
                };
                (
                    shown(x.session_create_ms, 1),
                    shown(x.run_ms, 2),
                    format!("{:.0}", x.wall_ms),
                )
            })
            .unwrap_or_else(|| ("-".into(), "-".into(), "-".into()));
        let nodes = t
            .placement
            .as_ref()
            .map(|p| format!("{}/{}", p.target_ep_nodes, p.total_nodes))
            .unwrap_or_else(|| "-".into());
        let mut id = t.id.clone();
        if t.role == TargetRole::Baseline {
            id.push_str(" (baseline)");
        }
        let chipset = t.chipset.as_ref().map_or_else(
            || "-".into(),
            |c| format!("{} v{}", c.name.trim_start_matches("Snapdragon "), c.htp_arch),
        );
        b.push_record([
            id,
            chipset,
            paint(t.status.as_str(), status_style(t.status)),
            t.ep.replace("ExecutionProvider", ""),
            nodes,
            runtime,
            create,
            run,
            wall,
            t.fingerprint
                .as_ref()
                .map(|f| f.summary.clone())
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    use ColumnKind::{Figure, Key, Text};
    let kinds = [Key, Text, Key, Key, Figure, Text, Figure, Figure, Figure, Text];
    // Too wide, the chipsets, runtimes and fingerprints follow the statuses and timings.
    table_with(b, &Look::grid(&kinds).splittable(1, &[1, 5, 9]))
}

/// Repeated runs that were not bit-identical, and each target's code differences from the
/// baseline read with the fingerprints.
fn drift_reading(s: &mut String, report: &Report) {
    let repeated: Vec<&TargetReport> = report.targets.iter().filter(|t| t.determinism.is_some()).collect();
    if let Some(first) = repeated.first().and_then(|t| t.determinism.as_ref()) {
        let _ = writeln!(s, "\n{} ({} runs per sample)", bold("DETERMINISM"), first.repeats);
        for t in &repeated {
            let Some(d) = &t.determinism else { continue };
            if d.bit_identical {
                let _ = writeln!(s, "  {:<14} bit-identical across runs", t.id);
            } else {
                let worst = d.differences.iter().map(|x| x.differing).max().unwrap_or(0);
                let _ = writeln!(
                    s,
                    "  {:<14} {} NOT DETERMINISTIC: {} (sample, run, output) differ, up to {worst} elements",
                    t.id,
                    paint("!", AnsiColor::Red.on_default().bold()),
                    d.differences.len()
                );
            }
            if let Some(p) = &d.thread_probe {
                let _ = writeln!(s, "  {:<14} {}", "", thread_probe_sentence(p));
            }
        }
    }
    let explained: Vec<&TargetReport> = report
        .targets
        .iter()
        .filter(|t| !t.drift_explanations.is_empty())
        .collect();
    if explained.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n{}",
        bold("DRIFT READING (codes against the baseline, with the fingerprints)")
    );
    for t in explained {
        for e in &t.drift_explanations {
            let _ = writeln!(s, "  {} {}: {}", t.id, e.output, e.text);
        }
    }
}

fn output_table(report: &Report, name: &str) -> (String, Option<String>) {
    let mut b = Builder::default();
    let baseline = report.baseline.clone();
    let mut header = vec![
        "target",
        "bit-identical",
        "max abs",
        "mean abs",
        "RMSE",
        "max ULP",
        "cosine",
        "SQNR dB",
    ];
    if baseline.is_some() {
        header.push("excess dB");
    }
    header.extend(["top-1", "top-5", "NaN/Inf"]);
    b.push_record(header);
    let mut shape = None;
    for t in report.targets.iter().filter(|t| t.status == RunStatus::Ok) {
        let Some(o) = t.outputs.iter().find(|o| o.name == name) else {
            continue;
        };
        if shape.is_none() && o.error.is_none() {
            shape = Some(format!("{} {:?}", o.dtype, o.shape));
        }
        b.push_record(metric_row(t, o, baseline.is_some()));
    }
    // The target, then figures only (a row whose output failed holds the runtime's words).
    let mut kinds = vec![ColumnKind::Key];
    kinds.extend(vec![ColumnKind::Figure; if baseline.is_some() { 11 } else { 10 }]);
    // Too wide, the figures that decide stay in the first table (bit-identical, max abs, SQNR,
    // excess, top-1, NaN/Inf) and mean abs, RMSE, max ULP, cosine and top-5 go to a second.
    let top5 = if baseline.is_some() { 10 } else { 9 };
    let look = Look::grid(&kinds).splittable(1, &[3, 4, 5, 6, top5]);
    (table_with(b, &look), shape)
}

fn metric_row(t: &TargetReport, o: &OutputMetrics, with_baseline: bool) -> Vec<String> {
    if let Some(err) = &o.error {
        let mut row = vec![t.id.clone(), paint(err, AnsiColor::Red.on_default())];
        row.resize(if with_baseline { 12 } else { 11 }, String::new());
        return row;
    }
    let bits = match o.bit_identical {
        Some(b) => format!("{b}/{}", o.elements),
        None => format!("-/{}", o.elements),
    };
    let mut row = vec![
        t.id.clone(),
        bits,
        num(o.max_abs.0),
        num(o.mean_abs.0),
        num(o.rmse.0),
        o.max_ulp.map(|u| u.to_string()).unwrap_or_else(|| "-".into()),
        cosine(o.cosine.0),
        db(o.sqnr_db.0),
    ];
    if with_baseline {
        row.push(match &o.baseline {
            Some(d) => {
                let text = signed_db(d.excess_db.0);
                if d.excess_db.0 > 1.0 {
                    paint(&text, AnsiColor::Red.on_default())
                } else {
                    text
                }
            }
            None => "(baseline)".into(),
        });
    }
    row.push(pct(o.top1_agreement));
    row.push(pct(o.top5_agreement));
    row.push(format!("{}/{}", o.nan_count, o.inf_count));
    row
}

fn agreement_matrix(report: &Report, output: &str) -> Option<String> {
    let ids: Vec<&str> = report
        .targets
        .iter()
        .filter(|t| t.status == RunStatus::Ok)
        .map(|t| t.id.as_str())
        .collect();
    if ids.len() < 2 {
        return None;
    }
    let mut b = Builder::default();
    let mut header = vec![String::new()];
    header.extend(ids.iter().map(|s| s.to_string()));
    b.push_record(header);
    for a in &ids {
        let mut row = vec![a.to_string()];
        for c in &ids {
            if a == c {
                row.push("·".into());
                continue;
            }
            let e = report
                .agreement
                .iter()
                .find(|e| e.output == output && ((e.a == *a && e.b == *c) || (e.a == *c && e.b == *a)));
            row.push(match e.and_then(|e| e.differing_elements) {
                Some(0) => paint("0", AnsiColor::Green.on_default()),
                Some(n) => n.to_string(),
                None => "-".into(),
            });
        }
        b.push_record(row);
    }
    // Row keys down the side and counts of differing elements.
    let mut kinds = vec![ColumnKind::Key];
    kinds.extend(vec![ColumnKind::Figure; ids.len()]);
    Some(table(b, &kinds))
}

/// A runtime's multi-line error, shown whole: continuation lines indented under the target,
/// blank lines dropped.
fn indent_continuation(text: &str) -> String {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n      ")
}

/// Renders the whole report for a terminal, section by section.
pub fn render(report: &Report) -> String {
    let mut s = String::new();
    header(&mut s, report);
    let _ = writeln!(s, "\n{}\n{}", bold("TARGETS"), targets_table(report));
    placement(&mut s, report);
    outputs(&mut s, report);
    agreement(&mut s, report);
    drift_reading(&mut s, report);
    super::layers::section(&mut s, report);
    stream(&mut s, report);
    failures(&mut s, report);
    if !report.notes.is_empty() {
        let _ = writeln!(s, "\n{}", bold("NOTES"));
        for n in &report.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    let _ = writeln!(s, "\n{}", bold("METRICS"));
    for key in [
        "signal",
        "sqnr_db",
        "cosine",
        "max_abs",
        "rmse",
        "max_ulp",
        "top1_agreement",
        "excess_db",
    ] {
        if let Some(d) = report.metric_definitions.get(key) {
            let _ = writeln!(s, "  {key:<15} {d}");
        }
    }
    verdict(&mut s, report);
    super::grid::prose(&s)
}

/// With `--stream`: per target and run, its decisions, divergence and state SQNR.
fn stream(s: &mut String, report: &Report) {
    let Some(info) = &report.stream else { return };
    let _ = writeln!(
        s,
        "\n{}  {} steps, fed back {}; state = lowest SQNR of {} vs the golden stream; diverged below {} dB",
        bold("STREAM"),
        info.steps,
        info.feedback.join(", "),
        info.state_outputs.join(", "),
        db(info.divergence_sqnr_db.0)
    );
    let mut b = Builder::default();
    b.push_record([
        "target",
        "run",
        "decisions",
        "diverges",
        "growth",
        "median dB",
        "step 1 dB",
        "last dB",
    ]);
    for row in super::present::stream_rows(report) {
        let decisions = if row.decisions.is_empty() {
            "-".to_string()
        } else {
            row.decisions.join("\n")
        };
        b.push_record([
            row.target,
            row.run.to_string(),
            decisions,
            row.divergence,
            row.growth,
            row.median_db,
            row.first_db,
            row.last_db,
        ]);
    }
    use ColumnKind::{Figure, Key, Text};
    let kinds = [Key, Figure, Text, Figure, Figure, Figure, Figure, Figure];
    let _ = writeln!(s, "{}", table(b, &kinds));
}

/// Model, golden run and inputs, one line each.
fn header(s: &mut String, report: &Report) {
    let m = &report.model;
    let producer = if m.producer.is_empty() {
        "unknown producer"
    } else {
        &m.producer
    };
    let _ = writeln!(s, "{} {}", bold("npu-audit"), report.tool.version);
    let sha = &m.sha256[..12.min(m.sha256.len())];
    let _ = writeln!(
        s,
        "{:<9}{}  (sha256 {sha}, opset {}, {producer})",
        "model", m.path, m.opset
    );
    let _ = writeln!(s, "{:<9}{}", "golden", report.reference.description);
    let inputs = &report.inputs.provenance;
    let unit = if report.stream.is_some() {
        "step(s) of one stream"
    } else {
        "sample(s)"
    };
    let mut what = format!("{} {unit}, {}", inputs.samples, inputs.source);
    if !inputs.generators.is_empty() {
        what.push_str(&format!(": {}", inputs.generators.join(", ")));
    }
    if let Some(seed) = inputs.seed {
        what.push_str(&format!(", seed {seed}"));
    }
    if !inputs.files.is_empty() {
        what.push_str(&format!(" [{}]", inputs.files.join(", ")));
    }
    let _ = writeln!(s, "{:<9}{}", "inputs", what);
    let _ = writeln!(s, "{:<9}{}", "threads", threads_text(report));
    let _ = writeln!(
        s,
        "{:<9}{}",
        "host",
        printable(&super::present::host_line(report.host.as_ref()))
    );
}

/// The intra-op threads the sessions ran with (each figure depends on them on some CPU kernels).
fn threads_text(report: &Report) -> String {
    let targets: std::collections::BTreeSet<usize> = report.targets.iter().filter_map(|t| t.intra_op_threads).collect();
    let targets: Vec<String> = targets.iter().map(|n| n.to_string()).collect();
    format!(
        "intra-op threads: golden run {}, targets {}",
        report.reference.intra_op_threads.map_or("-".into(), |n| n.to_string()),
        if targets.is_empty() {
            "-".into()
        } else {
            targets.join("/")
        }
    )
}

/// One metrics table per model output, with the loosest passing gate under it.
fn outputs(s: &mut String, report: &Report) {
    for out in &report.model.outputs {
        let (t, shape) = output_table(report, &out.name);
        let shape = shape.unwrap_or_else(|| out.dtype.clone());
        let _ = writeln!(
            s,
            "\n{} {}  {shape}  against the golden run",
            bold("OUTPUT"),
            bold(&printable(&out.name))
        );
        let _ = writeln!(s, "{t}");
        let Some(tol) = report.tolerances.iter().find(|t| t.output == out.name) else {
            continue;
        };
        if !tol.is_measured() {
            let _ = writeln!(
                s,
                "loosest gate every target passes: none (a figure could not be measured on some target; see the rows)"
            );
            continue;
        }
        let mut line = format!(
            "loosest gate every target passes: --min-sqnr {} --max-abs {}  (cosine >= {:.6}",
            db(tol.min_sqnr_db.0),
            num(tol.max_abs.0),
            tol.min_cosine.0
        );
        if let Some(t1) = tol.min_top1_agreement {
            line.push_str(&format!(", top-1 >= {:.1}%", t1 * 100.0));
        }
        line.push(')');
        if tol.all_bit_exact {
            line.push_str("; every target is bit-exact: --require-bit-exact passes");
        }
        let _ = writeln!(s, "{line}");
    }
}

/// Bit-exact groups and the target-by-target matrices (when at least two targets ran).
fn agreement(s: &mut String, report: &Report) {
    if report.targets.iter().filter(|t| t.status == RunStatus::Ok).count() < 2 {
        return;
    }
    let _ = writeln!(
        s,
        "\n{}",
        bold("BIT-EXACT GROUPS (targets whose outputs are identical bit for bit)")
    );
    for g in &report.bit_exact_groups {
        let groups: Vec<String> = g
            .groups
            .iter()
            .map(|members| format!("{{{}}}", members.join(", ")))
            .collect();
        let _ = writeln!(s, "  {}: {}", printable(&g.output), groups.join("  "));
    }
    for out in &report.model.outputs {
        if let Some(m) = agreement_matrix(report, &out.name) {
            let title = bold("TARGET vs TARGET: differing elements of");
            let _ = writeln!(s, "\n{title} {}\n{m}", bold(&printable(&out.name)));
        }
    }
}

/// Every target that did not run, with the runtime's whole error.
fn failures(s: &mut String, report: &Report) {
    let failed: Vec<&TargetReport> = report.targets.iter().filter(|t| t.status != RunStatus::Ok).collect();
    if failed.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n{}", bold("TARGETS THAT DID NOT RUN"));
    for t in failed {
        let phase = t.failed_at.map(|p| format!(" at {}", p.as_str())).unwrap_or_default();
        let _ = writeln!(
            s,
            "  {} {}{phase}{}: {}",
            t.id,
            paint(t.status.as_str(), status_style(t.status)),
            if t.required { " (required)" } else { "" },
            indent_continuation(&t.error.clone().unwrap_or_default())
        );
        if t.status != RunStatus::Unavailable
            && t.ep != crate::analyses::placement::CPU_EP
            && t.failed_at == Some(crate::report::run::Phase::CreateSession)
        {
            let _ = writeln!(
                s,
                "    to find the node that triggers it: npu-audit explain-failure {} --target {}",
                report.model.path, t.id
            );
        }
    }
}

/// Partitions shown one per line before the strip is abbreviated.
const STRIP_LINES: usize = 12;

/// Per non-CPU target: the summary line, the partition strip, the compute nodes that fell back
/// with the runtime's reason, and the mid-graph crossings.
fn placement(s: &mut String, report: &Report) {
    let shown: Vec<&TargetReport> = report
        .targets
        .iter()
        .filter(|t| t.ep != crate::analyses::placement::CPU_EP && t.placement.is_some())
        .collect();
    if shown.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n{}", bold("PLACEMENT"));
    for t in shown {
        let Some(p) = &t.placement else { continue };
        let _ = writeln!(
            s,
            "  {}  {}  {}",
            bold(&t.id),
            paint(t.status.as_str(), status_style(t.status)),
            placement_line(p, &t.ep)
        );
        let short = |ep: &str| ep_short(ep).to_string();
        let strip: Vec<String> = p
            .partitions
            .iter()
            .map(|x| format!("{} {}", short(&x.ep), x.nodes))
            .collect();
        let _ = writeln!(s, "    strip ({} graph): [{}]", p.graph, strip.join("] ["));
        for (k, x) in p.partitions.iter().enumerate().take(STRIP_LINES) {
            let span = if x.first_index == x.last_index {
                format!("#{}", x.first_index)
            } else {
                format!("#{}-{}", x.first_index, x.last_index)
            };
            let ends = if x.nodes == 1 {
                x.first_node.clone()
            } else {
                format!("{} .. {}", x.first_node, x.last_node)
            };
            let _ = writeln!(s, "      {:>2}. {:<8} {:<12} {ends}", k + 1, short(&x.ep), span);
        }
        if p.partitions.len() > STRIP_LINES {
            let _ = writeln!(s, "      ... {} more partitions", p.partitions.len() - STRIP_LINES);
        }
        for f in p.fallback.iter().filter(|f| f.kind == "compute") {
            let why = f.reason.as_deref().unwrap_or("the runtime logged no reason");
            let _ = writeln!(s, "    on CPU: {} ({}, {}): {why}", f.name, f.op_type, f.position);
        }
        let other: BTreeMap<&str, usize> =
            p.fallback
                .iter()
                .filter(|f| f.kind != "compute")
                .fold(BTreeMap::new(), |mut m, f| {
                    *m.entry(f.kind.as_str()).or_default() += 1;
                    m
                });
        if !other.is_empty() {
            let list: Vec<String> = other.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let _ = writeln!(s, "    also on CPU (expected): {}", list.join(", "));
        }
        for c in p.crossings.iter().filter(|c| c.kind == "mid_graph") {
            let size = match (c.bytes, &c.dtype) {
                (Some(b), Some(d)) => format!("{} x {d} = {}", c.elements.unwrap_or(0), bytes(b)),
                _ => "size unknown".into(),
            };
            let _ = writeln!(
                s,
                "    crossing: {} {} -> {} ({size})",
                c.tensor,
                short(&c.from_ep),
                short(&c.to_ep)
            );
        }
    }
}

/// The verdict and every rule that failed.
fn verdict(s: &mut String, report: &Report) {
    let verdict = match report.gate.verdict {
        Verdict::Pass => paint("PASS", AnsiColor::Green.on_default().bold()),
        Verdict::Fail => paint("FAIL", AnsiColor::Red.on_default().bold()),
        Verdict::None => "no thresholds set".to_string(),
    };
    let _ = writeln!(
        s,
        "\n{} {verdict}  (exit code {})",
        bold("VERDICT"),
        report.exit_code as i32
    );
    if let Some(p) = &report.gate.policy {
        let file = p.file.as_deref().unwrap_or("flags");
        let previous = p
            .baseline_report
            .as_deref()
            .map(|b| format!(", against {b}"))
            .unwrap_or_default();
        let passed = report.gate.rules.iter().filter(|r| r.pass).count();
        let _ = writeln!(
            s,
            "  policy {file} (mode {}{previous}): {passed} of {} rules pass",
            p.mode,
            report.gate.rules.len()
        );
    }
    for r in report.gate.rules.iter().filter(|r| !r.pass) {
        let line = match r.rule.as_str() {
            "ran" => format!("{} did not run and is required", r.target),
            _ if r.previous.is_some() => format!(
                "{} {} {}: changed by {} (was {}), margin {}",
                r.target,
                r.output,
                r.rule,
                num(r.measured.0),
                r.previous.map(|p| num(p.0)).unwrap_or_default(),
                num(r.limit.0)
            ),
            "bit_exact" => format!("{} {} bit_exact: {} elements differ", r.target, r.output, r.measured.0),
            _ if r.output == crate::judge::gate::PLACEMENT_SCOPE && r.measured.0.is_nan() => format!(
                "{} {}: the runtime recorded no placement for this target",
                r.target, r.rule
            ),
            _ if r.output == crate::judge::gate::PLACEMENT_SCOPE => {
                format!("{} {}: {} vs limit {}", r.target, r.rule, r.measured.0, r.limit.0)
            }
            _ => format!(
                "{} {} {}: {} vs limit {}",
                r.target,
                r.output,
                r.rule,
                num(r.measured.0),
                num(r.limit.0)
            ),
        };
        let _ = writeln!(s, "  failed: {line}  [{}]", r.origin);
    }
}
