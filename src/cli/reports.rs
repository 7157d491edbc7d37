//! `merge` and `render`: commands that read saved reports (or eval shards' files) and write them
//! again, in every format.

use std::path::PathBuf;

use anyhow::Result;

use super::args::{MergeArgs, RenderArgs, ReportFiles, ReportFormat};
use super::shared::{
    emit_findings, emit_report, findings_files, findings_outputs, report_outputs, report_paths, FileFlag, Forms,
};
use crate::commands::merge::{EvalMergeOptions, MergeOptions, PartKind};
use crate::foundation::error::{bad_flag, bad_report, ExitCode};
use crate::foundation::userfile::{InputFiles, Reads};
use crate::report::common::ReportKind;
use crate::report::compare::Report;
use crate::report::json::AnyReport;

/// `merge`: the parts read once, by kind, and joined into one report, written in every format asked for;
/// no file it writes may replace a shard report or the outputs it reads.
pub fn merge(a: MergeArgs) -> Result<ExitCode> {
    let MergeArgs {
        reports,
        outputs,
        allow_other_threads,
        allow_other_hosts,
        format,
        files,
    } = a;
    let parts = crate::commands::merge::read(&reports)?;
    if parts.kind == PartKind::EvalShard {
        return merge_eval(
            &parts.read,
            (allow_other_threads, allow_other_hosts),
            (outputs, format, files),
        );
    }
    let read = parts.read;
    let files = report_paths(files);
    // The reports are read first: where each shard's saved outputs are is in its report.
    let options = MergeOptions {
        allow_other_hosts,
        ..MergeOptions::new(&read, &outputs, allow_other_threads)?
    };
    let outputs = report_outputs(&options, &files)?;
    let report = crate::commands::merge::compare::merge(&options)?;
    emit_report(&report, format, &files, outputs)?;
    Ok(report.exit_code)
}

/// `merge` of eval shards: the eval's report from their records, written as `--out` (JSON),
/// `--markdown` and `--html`, the table (or `--format`) on stdout, the gate's exit code.
fn merge_eval(
    parts: &[(PathBuf, Vec<u8>)],
    (allow_other_threads, allow_other_hosts): (bool, bool),
    (outputs, format, files): (Vec<crate::commands::merge::ShardOutputs>, ReportFormat, ReportFiles),
) -> Result<ExitCode> {
    let ReportFiles {
        out,
        markdown,
        junit,
        html,
        node_data,
    } = files;
    if !outputs.is_empty() || junit.is_some() || node_data.is_some() {
        return Err(bad_flag(
            "--outputs, --junit and --node-data are for compare shards; an eval's merge writes --out, --markdown and --html",
        ));
    }
    let options = EvalMergeOptions::read(parts, allow_other_threads, allow_other_hosts)?;
    let files = super::eval::report_files(out, markdown, html);
    let guarded = findings_outputs(&options, &files)?;
    let report = crate::commands::merge::eval::merge(&options)?;
    emit_findings(&report, &files, guarded, |r, json| {
        (super::eval::FORMS.stdout)(format, r, json)
    })?;
    super::eval::say_missing_targets(&report);
    Ok(report.exit_code)
}

/// The report `render` reads.
struct RenderSource {
    report: PathBuf,
}

impl Reads for RenderSource {
    fn declare(&self, set: &mut InputFiles) {
        set.add(&self.report);
    }
}

/// What `render` was asked to write: the `--format` on stdout and the file flags.
struct Asked {
    format: ReportFormat,
    files: ReportFiles,
    dispatch: Option<PathBuf>,
}

/// `render`: a saved report of any kind (read from its JSON) written again in every form asked
/// for, by the renderers its own command uses; a form its kind does not have is refused.
pub fn render(a: RenderArgs) -> Result<ExitCode> {
    let RenderArgs {
        report,
        format,
        files,
        dispatch,
    } = a;
    let source = RenderSource { report };
    let shown = crate::foundation::userfile::shown(&source.report);
    let bytes = crate::foundation::userfile::read_user_file(&source.report)
        .map_err(|e| bad_report(format!("{shown}: cannot read: {e}")))?;
    if crate::commands::eval::shard::is_shard_file(&bytes) {
        return Err(bad_report(format!(
            "{shown}: an eval shard's file, not a report: join the shards with `npu-audit merge` (which writes the eval's report, --markdown and --html)"
        )));
    }
    let asked = Asked {
        format,
        files,
        dispatch,
    };
    let report = crate::report::json::any_from_bytes(bytes, &shown)?;
    let as_stored = judged_again(&report).map_err(|e| {
        bad_report(format!(
            "{shown}: {e}: the stored gate does not follow from the report's own figures (edited or damaged), so it is not rendered"
        ))
    })?;
    let kind = report.kind();
    match report {
        AnyReport::Compare(r) => render_compare(&r, &source, asked),
        AnyReport::Eval(r) => render_findings(&*r, ReportKind::Eval, &super::eval::FORMS, &source, asked),
        AnyReport::Triage(r) => render_findings(&*r, ReportKind::Triage, &super::triage::FORMS, &source, asked),
        AnyReport::Matrix(r) => render_findings(&*r, ReportKind::Matrix, &super::matrix::FORMS, &source, asked),
        AnyReport::Pipeline(r) => render_findings(&*r, ReportKind::Pipeline, &super::pipeline::FORMS, &source, asked),
        AnyReport::Repro(r) => render_findings(&*r, ReportKind::Repro, &super::repro::FORMS, &source, asked),
        AnyReport::Generation(r) => {
            render_findings(&*r, ReportKind::Generation, &super::generate::FORMS, &source, asked)
        }
    }?;
    if as_stored {
        crate::foundation::console::note(format!(
            "{}: its verdicts are printed as the report states them (they rest on the runs it made, which it does not hold whole)",
            kind.noun()
        ));
    }
    Ok(ExitCode::Success)
}

/// A report's verdicts judged again from its own figures and limits (`judge::gate::rejudge`);
/// `true` for the kinds whose verdicts rest on what a run saw (triage's candidate runs, repro's
/// windows), which are printed as stored and said to be.
fn judged_again(report: &AnyReport) -> Result<bool, String> {
    use crate::judge::gate::rejudge;
    match report {
        AnyReport::Compare(r) => rejudge::compare(r).map(|()| false),
        AnyReport::Eval(r) => rejudge::eval(r).map(|()| false),
        AnyReport::Generation(r) => rejudge::generation(r).map(|()| false),
        AnyReport::Pipeline(r) => rejudge::pipeline(r).map(|()| false),
        AnyReport::Matrix(r) => rejudge::matrix(r).map(|()| false),
        AnyReport::Triage(_) | AnyReport::Repro(_) => Ok(true),
    }
}

/// A compare report in every format `compare` writes (`--dispatch` is a matrix's).
fn render_compare(report: &Report, source: &RenderSource, asked: Asked) -> Result<()> {
    if asked.dispatch.is_some() {
        return Err(not_for(
            "--dispatch",
            ReportKind::Compare,
            "--out, --markdown, --junit, --html, --node-data",
        ));
    }
    let files = report_paths(asked.files);
    let outputs = report_outputs(source, &files)?;
    emit_report(report, asked.format, &files, outputs)
}

/// A report of a findings command (eval, triage, matrix, pipeline, repro) in the forms its
/// command writes (`forms`); a flag for a form it does not have is refused, naming the kind.
fn render_findings<T: serde::Serialize>(
    report: &T,
    kind: ReportKind,
    forms: &Forms<T>,
    source: &RenderSource,
    asked: Asked,
) -> Result<()> {
    let ReportFiles {
        out,
        markdown,
        junit,
        html,
        node_data,
    } = asked.files;
    let given: Vec<FileFlag<T>> = vec![
        ("--out", out, None),
        ("--markdown", markdown, forms.markdown),
        ("--html", html, forms.html),
        ("--dispatch", asked.dispatch, forms.dispatch),
    ];
    let has = |flag: &str| flag == "--out" || given.iter().any(|(f, _, r)| *f == flag && r.is_some());
    let forms_list: Vec<&str> = given.iter().map(|(f, _, _)| *f).filter(|f| has(f)).collect();
    let refused = [("--junit", junit.is_some()), ("--node-data", node_data.is_some())]
        .into_iter()
        .chain(given.iter().map(|(f, p, _)| (*f, p.is_some() && !has(f))))
        .find(|(_, refused)| *refused);
    if let Some((flag, _)) = refused {
        return Err(not_for(flag, kind, &forms_list.join(", ")));
    }
    let files = findings_files(given);
    let outputs = findings_outputs(source, &files)?;
    emit_findings(report, &files, outputs, |r, json| (forms.stdout)(asked.format, r, json))
}

/// A file flag given for a kind of report that has no such form, on one line.
fn not_for(flag: &str, kind: ReportKind, forms: &str) -> anyhow::Error {
    bad_flag(format!(
        "{flag} does not apply to {}, which renders as {forms} (and --format on stdout)",
        kind.noun()
    ))
}
