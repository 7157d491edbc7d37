//! `npu-audit pipeline`: the flags and the pipeline file turned once into the options, the chain
//! audited per target, its table and JSON.

use anyhow::Result;

use super::args::{PipelineArgs, ReportFormat};
use super::shared::{emit_findings, exec_options, findings_files, findings_outputs, input_options, Forms};
use crate::commands::pipeline::{PipelineOptions, PipelineReport};
use crate::data::target::distinct;
use crate::foundation::error::{bad_flag, ExitCode};

/// The forms of a pipeline report (`pipeline`, `render`): its `--format markdown` is the only
/// file form besides the JSON.
pub(super) const FORMS: Forms<PipelineReport> = Forms {
    markdown: Some(crate::render::pipeline::markdown),
    html: None,
    dispatch: None,
    stdout: stdout_text,
};

/// A pipeline report on stdout in the `--format` asked for (`json`: the JSON already rendered).
fn stdout_text(format: ReportFormat, report: &PipelineReport, json: String) -> String {
    match format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::pipeline::table(report),
        ReportFormat::Markdown => crate::render::pipeline::markdown(report),
    }
}

/// The targets named, else every target this machine can run (as `compare` does), said.
fn asked_or_default(targets: &[crate::data::target::TargetList]) -> Vec<crate::data::target::TargetSpec> {
    if targets.is_empty() {
        crate::execution::exec::selection::default_specs_said()
    } else {
        distinct(targets)
    }
}

/// Runs `pipeline`: the JSON file (when asked) written once the chain is audited, the `--format`
/// rendering on stdout; exit 1 when a target's final output is below `--min-sqnr`.
pub fn run(a: PipelineArgs) -> Result<ExitCode> {
    let PipelineArgs {
        file,
        targets,
        min_sqnr,
        inputs,
        exec,
        format,
        out,
    } = a;
    if min_sqnr.is_some_and(f64::is_nan) {
        return Err(bad_flag("--min-sqnr must be a number of dB"));
    }
    let options = PipelineOptions {
        stages: crate::commands::pipeline::file::read(&file)?,
        file,
        targets_named: !targets.is_empty(),
        targets: asked_or_default(&targets),
        inputs: input_options(inputs),
        exec: exec_options(exec)?,
        min_sqnr_db: min_sqnr,
    };
    let files = findings_files::<PipelineReport>(vec![("--out", out, None)]);
    let mut outputs = findings_outputs(&options, &files)?;
    let report = crate::commands::pipeline::run(&options, &mut outputs)?;
    crate::foundation::interrupt::check()?;
    emit_findings(&report, &files, outputs, |r, json| (FORMS.stdout)(format, r, json))?;
    Ok(report.exit_code)
}
