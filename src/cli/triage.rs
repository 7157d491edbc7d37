//! `npu-audit triage`: the flags turned once into the triage's options, the triage run, its
//! table, JSON, Markdown or HTML; and `triage --summary`, what the store holds.

use std::path::PathBuf;

use anyhow::Result;

use super::args::{ReportFormat, TriageArgs};
use super::shared::{
    emit_findings, exec_options, findings_files, findings_outputs, golden_source, input_options, FindingsFile,
};
use crate::audit::Audited;
use crate::device::ReportDefaults;
use crate::error::{bad_flag, ExitCode};
use crate::triage::{Thresholds, Triage, TriageOptions};
use crate::userfile::{InputFiles, Reads};

/// `triage` as asked: its options, the files it writes and how it prints.
struct TriageCommand {
    options: TriageOptions,
    files: Vec<FindingsFile<Triage>>,
    format: ReportFormat,
}

/// `triage --summary` as asked: the store, the model that narrows it, the JSON file.
struct SummaryCommand {
    db: PathBuf,
    model: Option<PathBuf>,
    files: Vec<FindingsFile<Vec<Triage>>>,
    format: ReportFormat,
}

impl Reads for SummaryCommand {
    fn declare(&self, set: &mut InputFiles) {
        let SummaryCommand {
            db,
            model,
            files: _,
            format: _,
        } = self;
        set.add(db).add_all(model);
    }
}

/// What `triage` was asked: a triage, or the store's summary.
enum Asked {
    Triage(Box<TriageCommand>),
    Summary(SummaryCommand),
}

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

/// Converts `triage`'s flags, once, into the command.
fn command(a: TriageArgs) -> Result<Asked> {
    let thresholds = thresholds(&a)?;
    let TriageArgs {
        reports,
        model,
        db,
        no_db,
        summary,
        chipset,
        candidates,
        rounding_steps: _,
        excess_db: _,
        outlier_db: _,
        min_sqnr: _,
        reference,
        inputs,
        exec,
        format,
        out,
        markdown,
        html,
    } = a;
    let (Some(model), false) = (model.clone(), summary) else {
        return summary_command(reports, db, model, (out, markdown, html), format).map(Asked::Summary);
    };
    let db = match (no_db, db) {
        (true, _) => None,
        (false, Some(db)) => Some(db),
        (false, None) => crate::triage::store::default_path(&reports),
    };
    let markdown_of: fn(&Triage) -> String = crate::render::triage_markdown::render;
    let html_of: fn(&Triage) -> String = crate::render::html::triage::render;
    let files = findings_files(vec![
        ("--out", out, None),
        ("--markdown", markdown, Some(markdown_of)),
        ("--html", html, Some(html_of)),
    ]);
    // The store is read and written: an output naming it (by any path) is refused.
    if let Some(f) = db.as_ref().and_then(|db| files.iter().find(|f| f.path == *db)) {
        return Err(bad_flag(format!(
            "{} names the triage store {}: give the store and the output different files",
            f.flag,
            f.path.display()
        )));
    }
    let options = TriageOptions {
        reports,
        audited: Audited {
            model,
            golden: golden_source(reference),
            inputs: input_options(inputs),
        },
        exec: exec_options(exec)?,
        defaults: ReportDefaults {
            chipset,
            ..Default::default()
        },
        candidates,
        thresholds,
        db,
    };
    Ok(Asked::Triage(Box::new(TriageCommand { options, files, format })))
}

/// `triage --summary`: only the store (`--db`), optionally narrowed to `--model`, written as a
/// table or JSON.
fn summary_command(
    reports: Vec<PathBuf>,
    db: Option<PathBuf>,
    model: Option<PathBuf>,
    (out, markdown, html): (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
    format: ReportFormat,
) -> Result<SummaryCommand> {
    let db = db.ok_or_else(|| bad_flag("--summary reads the store named by --db"))?;
    if !reports.is_empty() {
        return Err(bad_flag(
            "--summary triages nothing: give it --db (and --model to narrow it), no reports",
        ));
    }
    if markdown.is_some() || html.is_some() {
        return Err(bad_flag(
            "--summary writes a table or JSON (--format, --out); --markdown and --html render one triage",
        ));
    }
    Ok(SummaryCommand {
        db,
        model,
        files: findings_files(vec![("--out", out, None)]),
        format,
    })
}

/// Runs `triage`: the `--format` rendering on stdout, and every file asked for, written together
/// once the triage is done (or none of them).
pub fn run(a: TriageArgs) -> Result<ExitCode> {
    let cmd = match command(a)? {
        Asked::Triage(cmd) => cmd,
        Asked::Summary(s) => return summary(&s),
    };
    let outputs = findings_outputs(&cmd.options, &cmd.files)?;
    let triage = crate::triage::run(&cmd.options)?;
    crate::interrupt::check()?;
    emit_findings(&triage, &cmd.files, outputs, |t, json| match cmd.format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::triage::render(t),
        ReportFormat::Markdown => crate::render::triage_markdown::render(t),
    })?;
    Ok(ExitCode::Success)
}

/// `triage --summary`: what the store holds, without triaging anything.
fn summary(cmd: &SummaryCommand) -> Result<ExitCode> {
    let outputs = findings_outputs(cmd, &cmd.files)?;
    let model_sha = cmd.model.as_ref().map(|m| crate::hash::sha256_file(m)).transpose()?;
    let triages = crate::triage::summary(&cmd.db, model_sha.as_deref())?;
    emit_findings(&triages, &cmd.files, outputs, |ts, json| match cmd.format {
        ReportFormat::Json => json,
        ReportFormat::Table | ReportFormat::Markdown => crate::render::triage::render_summary(&cmd.db, ts),
    })?;
    Ok(ExitCode::Success)
}
