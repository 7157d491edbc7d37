//! The Markdown rendering of `triage` (`--format markdown`, `--markdown FILE`), for a support
//! ticket or a CI step summary: the summary first (how many reports, the verdicts counted, the
//! fleet's conclusion with its figures: chipsets whose drift goes beyond the CPU EP's, each
//! chipset's median SQNR against the CPU EP, the outliers), then the fleet's groups by chipset,
//! device model, app version and runtime, then every report (path, chipset and how sure it is,
//! SQNR, verdict keyword and sentence, log evidence).
//!
//! Unlike the compare report's Markdown this one is not cut to a pull-request comment: every
//! report is listed (a fleet's Markdown is a document to read), only overlong cells and lines
//! are shortened. Everything a report says about itself (paths, `device.json` values, log lines)
//! is a stranger's text and is escaped as Markdown and HTML would otherwise interpret it. Like
//! every renderer it reads the [`Triage`] and recomputes no figure.

use std::fmt::Write as _;

use super::markdown::{code, escape, push_table, CELL_CHARS, LINE_CHARS};
use super::present::{
    chipset_label, copies, count, db_opt, fleet_keyword, identity_status, shorten, signed_db, triage_thresholds,
    verdict_counts, verdict_keyword,
};
use crate::commands::triage::fleet::chipset_group_label;
use crate::report::triage::{Fleet, GroupFigures, ReportEntry, Triage};

/// Renders the triage as Markdown.
pub fn render(t: &Triage) -> String {
    let mut s = String::new();
    summary(&mut s, t);
    if let Some(f) = &t.fleet {
        fleet_section(&mut s, f);
    }
    reports_table(&mut s, t);
    report_details(&mut s, t);
    notes(&mut s, t);
    s
}

fn summary(s: &mut String, t: &Triage) {
    let _ = writeln!(s, "### npu-audit triage · {}", code(&shorten(&t.model, 200)));
    let short_sha: String = t.model_sha256.chars().take(12).collect();
    let n_copies = t.reports.iter().filter(|e| e.duplicate_of.is_some()).count();
    let measured = t.reports.iter().filter(|e| e.sqnr_db.is_some()).count();
    let _ = writeln!(
        s,
        "\nmodel sha256 {} · golden: {} · {}, {measured} measured, {} · {} intra-op thread{}",
        code(&short_sha),
        code(&shorten(&t.reference, LINE_CHARS)),
        count(t.reports.len(), "report"),
        copies(n_copies),
        t.intra_op_threads,
        if t.intra_op_threads == 1 { "" } else { "s" }
    );
    let verdicts: Vec<String> = verdict_counts(t)
        .iter()
        .map(|(k, n)| format!("{} {n}", code(k)))
        .collect();
    if !verdicts.is_empty() {
        let _ = writeln!(s, "\n**Verdicts:** {}", verdicts.join(" · "));
    }
    if let Some(f) = &t.fleet {
        let kind = fleet_keyword(f.kind);
        let _ = writeln!(
            s,
            "\n**Fleet: {}** ({} measured): {}",
            code(&kind),
            count(f.measured_reports, "report"),
            escape(&f.sentence)
        );
        if !f.concentrated_on.is_empty() {
            let chips: Vec<String> = f
                .concentrated_on
                .iter()
                .map(|c| escape(&chipset_group_label(c)))
                .collect();
            let _ = writeln!(s, "\n- drift beyond the CPU EP concentrated on: {}", chips.join(", "));
        }
        for g in &f.by_chipset {
            let _ = writeln!(
                s,
                "- {}: median SQNR {} dB, {} dB against the CPU EP on the same inputs (median of the differences), {}",
                escape(&chipset_group_label(&g.key)),
                db_opt(g.median_sqnr_db),
                g.median_excess_db.map_or("-".into(), |v| signed_db(-v.0)),
                count(g.reports, "report")
            );
        }
        if !f.outliers.is_empty() {
            let list: Vec<String> = f.outliers.iter().map(|o| code(&shorten(o, CELL_CHARS))).collect();
            let _ = writeln!(s, "- device-specific outliers: {}", list.join(", "));
        }
    }
    let _ = writeln!(s, "\n_{}_", escape(&triage_thresholds(&t.thresholds)));
}

/// One table of the fleet's groups; `label` names a group as people read it. The figure against
/// the CPU EP is signed as the conclusion's sentence signs it: report minus CPU EP.
fn group_table(s: &mut String, title: &str, groups: &[GroupFigures], label: fn(&str) -> String) {
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n**By {title}**\n");
    let rows = groups.iter().map(|g| {
        let verdicts: Vec<String> = g.verdicts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        vec![
            label(&g.key),
            g.reports.to_string(),
            db_opt(g.median_sqnr_db),
            db_opt(g.min_sqnr_db),
            g.median_excess_db.map_or("-".into(), |v| signed_db(-v.0)),
            verdicts.join(", "),
        ]
    });
    push_table(
        s,
        &[
            title,
            "reports",
            "median SQNR dB",
            "min SQNR dB",
            "median vs CPU EP dB",
            "verdicts",
        ],
        rows,
        groups.len(),
        usize::MAX,
        usize::MAX,
        "groups",
    );
}

fn fleet_section(s: &mut String, f: &Fleet) {
    group_table(s, "chipset", &f.by_chipset, chipset_group_label);
    group_table(s, "device model", &f.by_device_model, str::to_string);
    group_table(s, "app version", &f.by_app_version, str::to_string);
    group_table(s, "runtime", &f.by_runtime, str::to_string);
}

fn report_row(i: usize, e: &ReportEntry) -> Vec<String> {
    let mut verdict = verdict_keyword(e.verdict.kind);
    if e.duplicate_of.is_some() {
        verdict.push_str(" (copy)");
    }
    vec![
        (i + 1).to_string(),
        e.path.clone(),
        chipset_label(e.identity.as_ref()),
        e.identity
            .as_ref()
            .map_or_else(|| "-".into(), |id| identity_status(id.status)),
        e.device
            .as_ref()
            .and_then(|d| d.device_model.clone())
            .unwrap_or_else(|| "-".into()),
        e.samples.to_string(),
        db_opt(e.sqnr_db),
        db_opt(e.cpu_sqnr_db),
        verdict,
    ]
}

fn reports_table(s: &mut String, t: &Triage) {
    if t.reports.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n**Reports**\n");
    push_table(
        s,
        &[
            "#",
            "report",
            "chipset",
            "identity",
            "device",
            "samples",
            "SQNR dB",
            "CPU EP dB",
            "verdict",
        ],
        t.reports.iter().enumerate().map(|(i, e)| report_row(i, e)),
        t.reports.len(),
        usize::MAX,
        usize::MAX,
        "reports",
    );
}

/// One numbered item per report: the verdict's keyword and sentence, how the chipset was told,
/// the log lines that show where the model ran, and the report it copies.
fn report_details(s: &mut String, t: &Triage) {
    if t.reports.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n**Verdicts, report by report**\n");
    for (i, e) in t.reports.iter().enumerate() {
        let _ = writeln!(
            s,
            "{}. {} {}: {}",
            i + 1,
            code(&verdict_keyword(e.verdict.kind)),
            code(&shorten(&e.path, CELL_CHARS)),
            escape(&shorten(&e.verdict.sentence, 2 * LINE_CHARS))
        );
        if let Some(id) = &e.identity {
            let _ = writeln!(s, "   - chipset: {}", escape(&shorten(&id.sentence, LINE_CHARS)));
        }
        for g in e.garbage.iter().filter(|g| !e.verdict.sentence.contains(g.as_str())) {
            let _ = writeln!(s, "   - outputs: {}", escape(&shorten(g, LINE_CHARS)));
        }
        for line in &e.log_evidence {
            let _ = writeln!(s, "   - log: {}", code(&shorten(line, LINE_CHARS)));
        }
        for line in crate::render::present::how_read(e) {
            let _ = writeln!(s, "   - read: {}", escape(&shorten(&line, LINE_CHARS)));
        }
        if let Some(d) = &e.duplicate_of {
            let _ = writeln!(s, "   - same contents as {}", code(&shorten(d, CELL_CHARS)));
        }
    }
}

fn notes(s: &mut String, t: &Triage) {
    if t.notes.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n**Notes**\n");
    for n in &t.notes {
        let _ = writeln!(s, "- {}", escape(&shorten(n, LINE_CHARS)));
    }
}
