//! `npu-audit pipeline`: flags into options, the chain audited per target, its table and JSON.

use std::path::PathBuf;

use anyhow::Result;

use super::args::{PipelineArgs, ReportFormat};
use super::commands::{emit_findings, findings_outputs, json_out, FindingsFile};
use crate::error::{bad_flag, ExitCode};
use crate::pipeline::{PipelineOptions, PipelineReport};

/// Runs `pipeline`: the JSON file (when asked) written once the chain is audited, the `--format`
/// rendering on stdout; exit 1 when a target's final output is below `--min-sqnr`.
pub fn run(a: &PipelineArgs) -> Result<ExitCode> {
    if a.min_sqnr.is_some_and(f64::is_nan) {
        return Err(bad_flag("--min-sqnr must be a number of dB"));
    }
    let stages = crate::pipeline::file::read(&a.file)?;
    let mut audit = super::compare::findings_audit(std::path::Path::new(""), &no_reference(), &a.inputs, &a.exec)?;
    audit.targets = a.targets.clone();
    let reads: Vec<PathBuf> = stages
        .iter()
        .flat_map(|s| std::iter::once(s.model.clone()).chain(s.reference.clone()))
        .chain([a.file.clone()])
        .chain(a.inputs.npz.iter().cloned())
        .collect();
    let files: Vec<FindingsFile<'_, PipelineReport>> = json_out(a.out.as_ref());
    let mut outputs = findings_outputs(&files, reads)?;
    let opts = PipelineOptions {
        file: a.file.clone(),
        stages,
        audit,
        min_sqnr_db: a.min_sqnr,
    };
    let report = crate::pipeline::run(&opts, &mut outputs)?;
    crate::interrupt::check()?;
    emit_findings(&report, &files, outputs, |r, json| match a.format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::pipeline::table(r),
        ReportFormat::Markdown => crate::render::pipeline::markdown(r),
    })?;
    Ok(if report.exit_code == 0 {
        ExitCode::Success
    } else {
        ExitCode::DriftExceeded
    })
}

/// Every stage names its own reference in the pipeline file.
fn no_reference() -> super::args::ReferenceArgs {
    super::args::ReferenceArgs {
        reference: None,
        golden_dir: None,
        allow_golden_mismatch: false,
    }
}
