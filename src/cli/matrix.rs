//! `npu-audit matrix`: flags into options, the matrix run, its table, JSON, Markdown, HTML and
//! dispatch table.

use std::path::PathBuf;

use anyhow::Result;

use super::args::{MatrixArgs, RemedyChoice, ReportFormat};
use super::commands::{emit_findings, findings_outputs, FindingsFile};
use crate::error::{bad_flag, ExitCode};
use crate::matrix::remedy::RemedyKind;
use crate::matrix::{Matrix, MatrixOptions, RemedyOptions, Variant};

fn options(a: &MatrixArgs) -> Result<MatrixOptions> {
    let variants = a
        .variants
        .iter()
        .map(|v| Variant::parse(v))
        .collect::<Result<Vec<_>>>()?;
    for (i, v) in variants.iter().enumerate() {
        if variants[..i].iter().any(|w| w.name == v.name) {
            return Err(bad_flag(format!("--variant {}: the name is given twice", v.name)));
        }
        if !v.path.is_file() {
            return Err(bad_flag(format!(
                "--variant {}: {} is not a file",
                v.name,
                v.path.display()
            )));
        }
    }
    if !a.cost.is_empty() {
        let mut named: Vec<&str> = a.cost.iter().map(String::as_str).collect();
        named.sort_unstable();
        let mut all: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
        all.sort_unstable();
        if named != all {
            return Err(bad_flag(format!(
                "--cost must name every variant once: {}",
                all.join(",")
            )));
        }
    }
    if let Some(dir) = &a.write_candidates {
        crate::userfile::check_dir_destination("--write-candidates", dir)?;
        if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(bad_flag(format!(
                "--write-candidates {}: give a new or empty directory",
                dir.display()
            )));
        }
    }
    let mut kinds: Vec<RemedyKind> = Vec::new();
    for s in &a.search {
        let kind = match s {
            RemedyChoice::Widen16 => RemedyKind::Widen16,
            RemedyChoice::Float => RemedyKind::Float,
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let audit = super::compare::matrix_audit(a)?;
    Ok(MatrixOptions {
        variants,
        asked_inputs: None,
        audit,
        cost: a.cost.clone(),
        remedies: RemedyOptions {
            kinds,
            max_promoted: a.max_promoted as usize,
            write_candidates: a.write_candidates.clone(),
        },
    })
}

/// The files asked for, each with its renderer.
fn files(a: &MatrixArgs) -> Vec<FindingsFile<'_, Matrix>> {
    let markdown: fn(&Matrix) -> String = crate::render::matrix::markdown;
    let html: fn(&Matrix) -> String = crate::render::html::matrix::render;
    let dispatch: fn(&Matrix) -> String = crate::render::matrix::dispatch_json;
    [
        ("--out", &a.out, None),
        ("--markdown", &a.markdown, Some(markdown)),
        ("--html", &a.html, Some(html)),
        ("--dispatch", &a.dispatch, Some(dispatch)),
    ]
    .into_iter()
    .filter_map(|(flag, path, render)| path.as_ref().map(|path| FindingsFile { flag, path, render }))
    .collect()
}

/// Runs `matrix`: every file asked for written together once the matrix is done (or none), the
/// `--format` rendering on stdout; exit 1 when some target has no variant that meets the policy.
pub fn run(a: &MatrixArgs) -> Result<ExitCode> {
    let opts = options(a)?;
    let specs = crate::matrix::expand_targets(&a.targets)?;
    let reads: Vec<PathBuf> = opts
        .variants
        .iter()
        .map(|v| v.path.clone())
        .chain(a.reference.reference.clone())
        .chain(a.inputs.npz.iter().cloned())
        .chain(a.gate.config.clone())
        .chain(
            a.reference
                .golden_dir
                .iter()
                .flat_map(|d| super::compare::files_under(d, 4)),
        )
        .collect();
    let files = files(a);
    let mut outputs = findings_outputs(&files, reads)?;
    let matrix = crate::matrix::run(&opts, &specs, &mut outputs)?;
    crate::interrupt::check()?;
    emit_findings(&matrix, &files, outputs, |m, json| match a.format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::matrix::table(m),
        ReportFormat::Markdown => crate::render::matrix::markdown(m),
    })?;
    Ok(if matrix.exit_code == 0 {
        ExitCode::Success
    } else {
        ExitCode::DriftExceeded
    })
}
