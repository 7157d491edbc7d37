//! The terminal rendering of `triage`: one row per report (chipset, verdict, SQNR against the
//! golden run and the CPU EP), each verdict's sentence, and the fleet's groups and conclusion.
//! Everything a report said about itself is a stranger's text and is printed escaped.

use std::fmt::Write as _;

use tabled::builder::Builder;

use super::grid::{bold, prose, table_with, ColumnKind, Look};
use super::present::{chipset_label, db, fleet_keyword, signed_db, verdict_keyword};
use crate::commands::triage::fleet::chipset_group_label;
use crate::foundation::console::printable;
use crate::report::triage::{Fleet, GroupFigures, ReportEntry, Triage};

fn keyword(e: &ReportEntry) -> String {
    verdict_keyword(e.verdict.kind)
}

fn chipset(e: &ReportEntry) -> String {
    chipset_label(e.identity.as_ref())
}

fn reports_table(t: &Triage) -> String {
    let mut b = Builder::default();
    b.push_record(["#", "report", "chipset", "samples", "SQNR dB", "CPU EP dB", "verdict"]);
    for (i, e) in t.reports.iter().enumerate() {
        b.push_record([
            (i + 1).to_string(),
            printable(&e.path),
            chipset(e),
            e.samples.to_string(),
            e.sqnr_db.map_or("-".into(), |v| db(v.0)),
            e.cpu_sqnr_db.map_or("-".into(), |v| db(v.0)),
            keyword(e) + if e.duplicate_of.is_some() { " (copy)" } else { "" },
        ]);
    }
    // The path is cut from its start, where reports differ; the verdict is the row's status.
    use ColumnKind::{Figure, Key, Path, Text};
    table_with(b, &Look::grid(&[Key, Path, Text, Figure, Figure, Figure, Key]))
}

/// One table of the fleet's groups; `label` names a group as people read it. The figure against
/// the CPU EP is signed as the conclusion's sentence signs it: report minus CPU EP, negative
/// when the devices lose more than the CPU EP does.
fn groups_table(title: &str, groups: &[GroupFigures], label: fn(&str) -> String) -> String {
    let mut b = Builder::default();
    b.push_record([
        title,
        "reports",
        "median SQNR dB",
        "min SQNR dB",
        "median vs CPU EP dB",
        "verdicts",
    ]);
    for g in groups {
        let verdicts: Vec<String> = g.verdicts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        b.push_record([
            printable(&label(&g.key)),
            g.reports.to_string(),
            g.median_sqnr_db.map_or("-".into(), |v| db(v.0)),
            g.min_sqnr_db.map_or("-".into(), |v| db(v.0)),
            g.median_excess_db.map_or("-".into(), |v| signed_db(-v.0)),
            verdicts.join(", "),
        ]);
    }
    use ColumnKind::{Figure, Key, Wrapped};
    table_with(b, &Look::grid(&[Key, Figure, Figure, Figure, Figure, Wrapped]))
}

/// The fleet's conclusion under its keyword as the JSON writes it (`npu`, `quantization`, ...).
fn conclusion(f: &Fleet) -> String {
    format!("conclusion ({}): {}", fleet_keyword(f.kind), printable(&f.sentence))
}

/// The triage as text.
pub fn render(t: &Triage) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {} report(s) of {}",
        bold("TRIAGE"),
        t.reports.len(),
        printable(&t.model)
    );
    let _ = writeln!(s, "{}", reports_table(t));
    for (i, e) in t.reports.iter().enumerate() {
        let _ = writeln!(s, "  {}. {}: {}", i + 1, keyword(e), printable(&e.verdict.sentence));
        if let Some(id) = &e.identity {
            let _ = writeln!(s, "     chipset: {}", printable(&id.sentence));
        }
        for line in &e.log_evidence {
            let _ = writeln!(s, "     log: {}", printable(line));
        }
        for line in crate::render::present::how_read(e) {
            let _ = writeln!(s, "     read: {}", printable(&line));
        }
        for c in e.logs.iter().flat_map(|l| &l.contradictions) {
            let _ = writeln!(s, "     log contradicts device.json: {}", printable(c));
        }
        if let Some(d) = &e.duplicate_of {
            let _ = writeln!(s, "     same contents as {}", printable(d));
        }
    }
    if let Some(f) = &t.fleet {
        let _ = writeln!(s, "\n{} {} measured report(s)", bold("FLEET"), f.measured_reports);
        let _ = writeln!(s, "{}", groups_table("chipset", &f.by_chipset, chipset_group_label));
        let _ = writeln!(s, "{}", groups_table("runtime", &f.by_runtime, str::to_string));
        let _ = writeln!(s, "{}", conclusion(f));
        if !f.outliers.is_empty() {
            let outliers: Vec<String> = f.outliers.iter().map(|o| printable(o)).collect();
            let _ = writeln!(s, "device-specific outliers: {}", outliers.join(", "));
        }
    }
    if let Some(u) = &t.store {
        let _ = writeln!(
            s,
            "store {}: {} report(s) read back, {} triaged now; {} local run(s) read back, {} made now",
            printable(&u.path),
            u.reports_from_store,
            u.reports_triaged,
            u.runs_from_store,
            u.runs_made
        );
    }
    for n in &t.notes {
        let _ = writeln!(s, "  - {}", printable(n));
    }
    prose(&s)
}

/// `triage --summary`: one block per model and reference the store holds.
pub fn render_summary(db: &std::path::Path, triages: &[Triage]) -> String {
    if triages.is_empty() {
        return format!("{} holds no triaged report\n", printable(&db.display().to_string()));
    }
    let mut s = String::new();
    for t in triages {
        let _ = writeln!(
            s,
            "{} {} (sha256 {}) against {}",
            bold("STORE"),
            printable(&t.model),
            &t.model_sha256[..t.model_sha256.len().min(12)],
            printable(&t.reference)
        );
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for e in &t.reports {
            *counts.entry(keyword(e)).or_default() += 1;
        }
        let counts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(s, "{} report(s): {}", t.reports.len(), counts.join(", "));
        if let Some(f) = &t.fleet {
            let _ = writeln!(s, "{}", groups_table("chipset", &f.by_chipset, chipset_group_label));
            let _ = writeln!(s, "{}\n", conclusion(f));
        }
    }
    prose(&s)
}
