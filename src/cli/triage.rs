//! `npu-audit triage`: flags into options, the triage run, its table, JSON, Markdown or HTML.

use anyhow::Result;

use super::args::{ReportFormat, TriageArgs};
use super::commands::{emit_findings, findings_outputs, json_out, FindingsFile};
use crate::device::ReportDefaults;
use crate::error::{bad_flag, ExitCode};
use crate::triage::{Thresholds, Triage, TriageOptions};

fn thresholds(a: &TriageArgs) -> Result<Thresholds> {
    for (flag, v) in [
        ("--excess-db", Some(a.excess_db)),
        ("--outlier-db", Some(a.outlier_db)),
        ("--min-sqnr", a.min_sqnr),
    ] {
        if v.is_some_and(|v| !v.is_finite()) {
            return Err(bad_flag(format!("{flag} must be a finite number of dB")));
        }
    }
    Ok(Thresholds {
        rounding_steps: a.rounding_steps,
        excess_db: a.excess_db,
        outlier_db: a.outlier_db,
        min_sqnr_db: a.min_sqnr,
    })
}

fn options(a: &TriageArgs, model: &std::path::Path) -> Result<TriageOptions> {
    let audit = super::compare::findings_audit(model, &a.reference, &a.inputs, &a.exec)?;
    Ok(TriageOptions {
        reports: a.reports.clone(),
        audit,
        defaults: ReportDefaults {
            chipset: a.chipset.clone(),
            ..Default::default()
        },
        candidates: a.candidates.clone(),
        thresholds: thresholds(a)?,
        db: match (a.no_db, &a.db) {
            (true, _) => None,
            (false, Some(db)) => Some(db.clone()),
            (false, None) => crate::triage::store::default_path(&a.reports),
        },
    })
}

/// The files `--out`, `--markdown` and `--html` ask for, each with its renderer.
fn files(a: &TriageArgs) -> Vec<FindingsFile<'_, Triage>> {
    let markdown: fn(&Triage) -> String = crate::render::triage_markdown::render;
    let html: fn(&Triage) -> String = crate::render::html::triage::render;
    [
        ("--out", &a.out, None),
        ("--markdown", &a.markdown, Some(markdown)),
        ("--html", &a.html, Some(html)),
    ]
    .into_iter()
    .filter_map(|(flag, path, render)| path.as_ref().map(|path| FindingsFile { flag, path, render }))
    .collect()
}

/// Runs `triage`: the `--format` rendering on stdout, and every file asked for, written together
/// once the triage is done (or none of them).
pub fn run(a: &TriageArgs) -> Result<ExitCode> {
    let (Some(model), false) = (&a.model, a.summary) else {
        return summary(a);
    };
    let reads: Vec<std::path::PathBuf> = [Some(model.clone()), a.reference.reference.clone()]
        .into_iter()
        .flatten()
        .chain(a.inputs.npz.iter().cloned())
        .chain(a.reports.iter().cloned())
        .collect();
    let files = files(a);
    let opts = options(a, model)?;
    // The store is read too: an output naming it (by any path) is refused before any work.
    let reads: Vec<std::path::PathBuf> = reads.into_iter().chain(opts.db.clone()).collect();
    if let Some(db) = &opts.db {
        if let Some(f) = files.iter().find(|f| f.path == db) {
            return Err(bad_flag(format!(
                "{} names the triage store {}: give the store and the output different files",
                f.flag,
                db.display()
            )));
        }
    }
    let outputs = findings_outputs(&files, reads)?;
    let triage = crate::triage::run(&opts)?;
    crate::interrupt::check()?;
    emit_findings(&triage, &files, outputs, |t, json| match a.format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::triage::render(t),
        ReportFormat::Markdown => crate::render::triage_markdown::render(t),
    })
}

/// `triage --summary`: what the store holds, without triaging anything.
fn summary(a: &TriageArgs) -> Result<ExitCode> {
    let db =
        a.db.as_ref()
            .ok_or_else(|| bad_flag("--summary reads the store named by --db"))?;
    if !a.reports.is_empty() {
        return Err(bad_flag(
            "--summary triages nothing: give it --db (and --model to narrow it), no reports",
        ));
    }
    if a.markdown.is_some() || a.html.is_some() {
        return Err(bad_flag(
            "--summary writes a table or JSON (--format, --out); --markdown and --html render one triage",
        ));
    }
    let model_sha = a.model.as_ref().map(|m| crate::hash::sha256_file(m)).transpose()?;
    let triages = crate::triage::summary(db, model_sha.as_deref())?;
    let files: Vec<FindingsFile<'_, Vec<Triage>>> = json_out(a.out.as_ref());
    let outputs = findings_outputs(&files, vec![db.clone()])?;
    emit_findings(&triages, &files, outputs, |ts, json| match a.format {
        ReportFormat::Json => json,
        ReportFormat::Table | ReportFormat::Markdown => crate::render::triage::render_summary(db, ts),
    })
}
