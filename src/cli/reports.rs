//! `merge` and `render`: commands that read saved reports and write them again, in every format.

use std::path::PathBuf;

use anyhow::Result;

use super::args::{MergeArgs, RenderArgs};
use super::shared::{emit_report, report_outputs, report_paths};
use crate::error::ExitCode;
use crate::merge::MergeOptions;
use crate::userfile::{InputFiles, Reads};

/// `merge`: the shard reports read and joined into one report, written in every format asked for;
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
    let files = report_paths(files);
    // The reports are read first: where each shard's saved outputs are is in its report.
    let options = MergeOptions {
        allow_other_hosts,
        ..MergeOptions::new(&reports, &outputs, allow_other_threads)?
    };
    let outputs = report_outputs(&options, &files)?;
    let report = crate::merge::merge(&options)?;
    emit_report(&report, format, &files, outputs)?;
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
