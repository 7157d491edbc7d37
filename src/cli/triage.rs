//! `npu-audit triage`: the flags turned once into the triage's options, the triage run, its
//! table, JSON, Markdown or HTML; and `triage --summary`, what the store holds.

use std::path::PathBuf;

use anyhow::Result;

use super::args::{ReportFormat, TriageArgs};
use super::shared::{
    emit_findings, exec_options, findings_files, findings_outputs, golden_source, input_options, FindingsFile, Forms,
};
use crate::commands::compare::Audited;
use crate::commands::triage::{Thresholds, Triage, TriageOptions};
use crate::data::device::ReportDefaults;
use crate::foundation::error::{bad_flag, ExitCode};
use crate::foundation::userfile::{InputFiles, Reads};

/// `triage` as asked: its options, the files it writes and how it prints.
struct TriageCommand {
    options: TriageOptions,
    files: Vec<FindingsFile<Triage>>,
    format: ReportFormat,
    /// Whether `--db` named the store (else it is the user's default one, said when used).
    db_named: bool,
}

/// `triage --summary` as asked: the store, the model that narrows it, the JSON file.
struct SummaryCommand {
    db: PathBuf,
    db_named: bool,
    model: Option<PathBuf>,
    files: Vec<FindingsFile<Vec<Triage>>>,
    format: ReportFormat,
}

impl Reads for SummaryCommand {
    fn declare(&self, set: &mut InputFiles) {
        let SummaryCommand {
            db,
            db_named: _,
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

/// The forms of a triage report (`triage`, `render`).
pub(super) const FORMS: Forms<Triage> = Forms {
    markdown: Some(crate::render::triage_markdown::render),
    html: Some(crate::render::html::triage::render),
    dispatch: None,
    stdout: stdout_text,
};

/// A triage on stdout in the `--format` asked for (`json`: the JSON already rendered).
fn stdout_text(format: ReportFormat, triage: &Triage, json: String) -> String {
    match format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::triage::render(triage),
        ReportFormat::Markdown => crate::render::triage_markdown::render(triage),
    }
}

/// Converts `triage`'s flags, once, into the command.
fn command(a: TriageArgs) -> Result<Asked> {
    let thresholds = thresholds(&a)?;
    let TriageArgs {
        model,
        reports,
        model_flag,
        db,
        no_db,
        summary,
        chipset,
        candidates,
        no_arm64,
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
    let (model, reports) = model_and_reports(model, reports, model_flag, summary)?;
    let (Some(model), false) = (model.clone(), summary) else {
        return summary_command(reports, db, model, (out, markdown, html), format).map(Asked::Summary);
    };
    let db_named = db.is_some();
    let db = match (no_db, db) {
        (true, _) => None,
        (false, Some(db)) => Some(db),
        (false, None) => Some(default_store()?),
    };
    let files = findings_files(vec![
        ("--out", out, None),
        ("--markdown", markdown, FORMS.markdown),
        ("--html", html, FORMS.html),
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
        phone_cpu: !no_arm64,
        db,
    };
    Ok(Asked::Triage(Box::new(TriageCommand {
        options,
        files,
        format,
        db_named,
    })))
}

/// MODEL and the reports: the first argument is the model, unless the model came as the old
/// `--model` flag, when every argument is a report. The model given both ways is refused, as is
/// a triage without a report.
fn model_and_reports(
    first: Option<PathBuf>,
    mut reports: Vec<PathBuf>,
    model_flag: Option<PathBuf>,
    summary: bool,
) -> Result<(Option<PathBuf>, Vec<PathBuf>)> {
    let (model, reports) = match model_flag {
        None => (first, reports),
        Some(model) => {
            if let Some(f) = first.as_ref().filter(|f| **f == model || is_onnx(f)) {
                return Err(bad_flag(format!(
                    "the model is given twice ({} and --model {}): give it once, as the first argument",
                    f.display(),
                    model.display()
                )));
            }
            reports.splice(0..0, first);
            (Some(model), reports)
        }
    };
    if !summary && reports.is_empty() {
        return Err(bad_flag("give at least one REPORT after MODEL (or --summary)"));
    }
    Ok((model, reports))
}

/// Whether a path names an ONNX model (no device report is one).
fn is_onnx(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// The store used when `--db` is not given: one file in the user's data directory, keyed
/// inside by model and reference (said by [`say_default_store`] once used).
fn default_store() -> Result<PathBuf> {
    let path = crate::commands::triage::store::default_path().ok_or_else(|| {
        bad_flag("no data directory for the triage store (neither NPU_AUDIT_DATA, XDG_DATA_HOME nor HOME is set): give --db FILE or --no-db")
    })?;
    Ok(path)
}

/// Says where the default store is, after a run that used it, so the user knows what was
/// written where (a run that failed says only its error).
fn say_default_store(db: Option<&std::path::Path>, named: bool) {
    if let Some(db) = db.filter(|_| !named) {
        crate::foundation::console::note(format_args!(
            "triage store: {} (--db FILE for another, --no-db for none)",
            db.display()
        ));
    }
}

/// `triage --summary`: only the store (`--db`, else the user's), optionally narrowed to MODEL, written as a
/// table or JSON.
fn summary_command(
    reports: Vec<PathBuf>,
    db: Option<PathBuf>,
    model: Option<PathBuf>,
    (out, markdown, html): (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
    format: ReportFormat,
) -> Result<SummaryCommand> {
    if !reports.is_empty() {
        return Err(bad_flag(
            "--summary triages nothing: give it the store (--db, default the user's) and at most MODEL to narrow it, no reports",
        ));
    }
    let db_named = db.is_some();
    let db = match db {
        Some(db) => db,
        None => default_store()?,
    };
    if markdown.is_some() || html.is_some() {
        return Err(bad_flag(
            "--summary writes a table or JSON (--format, --out); --markdown and --html render one triage",
        ));
    }
    Ok(SummaryCommand {
        db,
        db_named,
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
    let triage = crate::commands::triage::run(&cmd.options)?;
    crate::foundation::interrupt::check()?;
    emit_findings(&triage, &cmd.files, outputs, |t, json| {
        (FORMS.stdout)(cmd.format, t, json)
    })?;
    say_default_store(cmd.options.db.as_deref(), cmd.db_named);
    Ok(ExitCode::Success)
}

/// `triage --summary`: what the store holds, without triaging anything.
fn summary(cmd: &SummaryCommand) -> Result<ExitCode> {
    let outputs = findings_outputs(cmd, &cmd.files)?;
    let model_sha = cmd
        .model
        .as_ref()
        .map(|m| crate::foundation::hash::sha256_file(m))
        .transpose()?;
    let triages = crate::commands::triage::summary(&cmd.db, model_sha.as_deref())?;
    emit_findings(&triages, &cmd.files, outputs, |ts, json| match cmd.format {
        ReportFormat::Json => json,
        ReportFormat::Table | ReportFormat::Markdown => crate::render::triage::render_summary(&cmd.db, ts),
    })?;
    say_default_store(Some(&cmd.db), cmd.db_named);
    Ok(ExitCode::Success)
}
