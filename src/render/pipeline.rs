//! `pipeline` in the terminal and as Markdown: per target, every stage's outputs with what the
//! stage introduces, what arrives from upstream and what the chain gives, then the final figure
//! and the stage the drift comes from.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::ColumnKind;
use super::present::{db, num};
use crate::report::pipeline::{PipelineReport, PipelineTarget};

/// What the columns of [`HEADER`] hold.
const HEADER_KINDS: [ColumnKind; 7] = [
    ColumnKind::Key,
    ColumnKind::Key,
    ColumnKind::Key,
    ColumnKind::Figure,
    ColumnKind::Figure,
    ColumnKind::Figure,
    ColumnKind::Figure,
];

const HEADER: [&str; 7] = [
    "target",
    "stage",
    "output",
    "introduced dB",
    "from upstream dB",
    "chained dB",
    "chained max abs",
];

fn rows(t: &PipelineTarget) -> Vec<[String; 7]> {
    t.stages
        .iter()
        .flat_map(|s| {
            s.outputs.iter().map(|o| {
                [
                    t.id.clone(),
                    s.stage.clone(),
                    o.name.clone(),
                    db(o.introduced_sqnr_db.0),
                    o.propagated_sqnr_db.map_or("-".into(), |v| db(v.0)),
                    db(o.chained_sqnr_db.0),
                    num(o.chained_max_abs.0),
                ]
            })
        })
        .collect()
}

/// One sentence per target: what it ran on, the final figure and where its drift comes from, or
/// where it failed.
fn verdict_line(t: &PipelineTarget) -> String {
    let runtime = t
        .runtime
        .as_ref()
        .map_or_else(|| "no runtime".into(), crate::report::compare::RuntimeInfo::text);
    let threads = t.intra_op_threads.map_or(String::new(), |n| format!(", {n} thread(s)"));
    format!("{} [{runtime}{threads}]", verdict(t))
}

fn verdict(t: &PipelineTarget) -> String {
    match (&t.failed, &t.origin) {
        (Some(f), _) => format!("{}: failed at stage {f}", t.id),
        (None, Some(origin)) => format!(
            "{}: final output {} dB; the drift comes from stage {origin} ({})",
            t.id,
            db(t.final_sqnr_db.0),
            t.attribution.join("; ")
        ),
        (None, None) => format!("{}: final output {} dB", t.id, db(t.final_sqnr_db.0)),
    }
}

fn intro(r: &PipelineReport) -> String {
    let stages: Vec<String> = r
        .stages
        .iter()
        .map(|s| {
            if s.feeds.is_empty() {
                s.name.clone()
            } else {
                format!("{} ({})", s.name, s.feeds.join(", "))
            }
        })
        .collect();
    format!(
        "pipeline {}: {} sample(s) through {}; every figure against the golden chain (each stage's reference on the golden upstream outputs)",
        r.file,
        r.samples,
        stages.join(" -> ")
    )
}

/// The terminal table.
pub fn table(r: &PipelineReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", intro(r));
    let mut b = Builder::default();
    b.push_record(HEADER);
    for t in &r.targets {
        for row in rows(t) {
            b.push_record(row);
        }
    }
    let _ = writeln!(s, "{}", super::grid::table(b, &HEADER_KINDS));
    for t in &r.targets {
        let _ = writeln!(s, "  {}", verdict_line(t));
    }
    if let Some(m) = r.min_sqnr_db {
        let _ = writeln!(
            s,
            "limit: final output >= {} dB; exit code {}",
            db(m),
            r.exit_code as i32
        );
    }
    super::grid::prose(&s)
}

/// The Markdown rendering.
pub fn markdown(r: &PipelineReport) -> String {
    let mut s = format!("### npu-audit pipeline\n\n{}\n\n", super::markdown::escape(&intro(r)));
    let _ = writeln!(s, "| {} |", HEADER.join(" | "));
    let _ = writeln!(s, "|{}", " --- |".repeat(HEADER.len()));
    for t in &r.targets {
        for row in rows(t) {
            let cells: Vec<String> = row.iter().map(|c| super::markdown::escape(c)).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
    }
    s.push('\n');
    for t in &r.targets {
        let _ = writeln!(s, "- {}", super::markdown::escape(&verdict_line(t)));
    }
    s
}
