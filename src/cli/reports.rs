//! `merge` and `render`: commands that read saved reports (or eval shards' files) and write them
//! again, in every format.

use std::path::PathBuf;

use anyhow::Result;

use super::args::{MergeArgs, RenderArgs, ReportFiles, ReportFormat};
use super::shared::{emit_findings, emit_report, findings_outputs, report_outputs, report_paths};
use crate::error::{bad_flag, ExitCode};
use crate::merge::{EvalMergeOptions, MergeOptions, PartKind};
use crate::userfile::{InputFiles, Reads};

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
    let parts = crate::merge::read(&reports)?;
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
    let report = crate::merge::compare::merge(&options)?;
    emit_report(&report, format, &files, outputs)?;
    Ok(report.exit_code)
}

/// `merge` of eval shards: the eval's report from their records, written as `--out` (JSON),
/// `--markdown` and `--html`, the table (or `--format`) on stdout, the gate's exit code.
fn merge_eval(
    parts: &[(PathBuf, Vec<u8>)],
    (allow_other_threads, allow_other_hosts): (bool, bool),
    (outputs, format, files): (Vec<crate::merge::ShardOutputs>, ReportFormat, ReportFiles),
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
    let report = crate::merge::eval::merge(&options)?;
    emit_findings(&report, &files, guarded, |r, json| {
        super::eval::stdout_text(format, r, json)
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

/// `render`: a saved report written again in every format asked for.
pub fn render(a: RenderArgs) -> Result<ExitCode> {
    let RenderArgs { report, format, files } = a;
    let files = report_paths(files);
    let source = RenderSource { report };
    let outputs = report_outputs(&source, &files)?;
    let report = crate::report::json::read(&source.report)?;
    emit_report(&report, format, &files, outputs)?;
    Ok(ExitCode::Success)
}
