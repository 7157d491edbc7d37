//! `npu-audit triage`: flags into options, the triage run, its table or JSON.

use anyhow::Result;

use super::args::TriageArgs;
use super::commands::{emit_findings, findings_outputs};
use crate::device::ReportDefaults;
use crate::error::{bad_flag, ExitCode};
use crate::triage::{Thresholds, TriageOptions};

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

/// Runs `triage`: the table (or JSON) on stdout, the JSON in `--out` when asked.
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
    let outputs = findings_outputs(a.out.as_ref(), reads)?;
    let triage = crate::triage::run(&options(a, model)?)?;
    emit_findings(
        &triage,
        a.out.as_ref(),
        outputs,
        a.format,
        crate::render::triage::render,
    )
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
    let model_sha = a.model.as_ref().map(|m| crate::hash::sha256_file(m)).transpose()?;
    let triages = crate::triage::summary(db, model_sha.as_deref())?;
    let outputs = findings_outputs(a.out.as_ref(), vec![db.clone()])?;
    emit_findings(&triages, a.out.as_ref(), outputs, a.format, |ts: &Vec<_>| {
        crate::render::triage::render_summary(db, ts)
    })
}
