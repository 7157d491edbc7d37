//! `npu-audit triage`: flags into options, the triage run, its table or JSON.

use anyhow::Result;

use super::args::{Format, TriageArgs};
use super::commands::{exec_options, input_options, print_stdout};
use crate::audit::CompareOptions;
use crate::device::ReportDefaults;
use crate::drift::FingerprintMode;
use crate::error::{bad_flag, ExitCode};
use crate::policy::Policy;
use crate::triage::{Thresholds, TriageOptions};
use crate::userfile::{is_stdio, Outputs};

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

fn options(a: &TriageArgs) -> Result<TriageOptions> {
    let audit = CompareOptions {
        model: a.model.clone(),
        reference: a.reference.reference.clone(),
        golden: a.reference.golden_dir.clone(),
        allow_golden_mismatch: a.reference.allow_golden_mismatch,
        targets: Vec::new(),
        allow_failure: vec!["all".into()],
        no_baseline: true,
        inputs: input_options(&a.inputs),
        class_axis: Vec::new(),
        policy: Policy::empty(),
        shard: None,
        exec: exec_options(&a.exec)?,
        save_outputs: None,
        logs: None,
        repeat: 1,
        thread_probe: 4,
        allow_other_threads: false,
        fingerprint: FingerprintMode::Off,
        layers: None,
    };
    Ok(TriageOptions {
        reports: a.reports.clone(),
        audit,
        defaults: ReportDefaults {
            chipset: a.chipset.clone(),
        },
        candidates: a.candidates.clone(),
        thresholds: thresholds(a)?,
    })
}

/// Runs `triage`: the table (or JSON) on stdout, the JSON in `--out` when asked.
pub fn run(a: &TriageArgs) -> Result<ExitCode> {
    let inputs: Vec<std::path::PathBuf> = [Some(a.model.clone()), a.reference.reference.clone()]
        .into_iter()
        .flatten()
        .chain(a.inputs.npz.iter().cloned())
        .chain(a.reports.iter().cloned())
        .collect();
    let mut outputs = Outputs::new(&inputs);
    if let Some(out) = a.out.as_ref().filter(|o| !is_stdio(o)) {
        outputs.check("--out", out)?;
    }
    let triage = crate::triage::run(&options(a)?)?;
    let json = serde_json::to_string_pretty(&triage)? + "\n";
    match &a.out {
        Some(out) if is_stdio(out) => return print_stdout(&json).map(|_| ExitCode::Success),
        Some(out) => {
            outputs.file("--out", out, json.as_bytes())?;
            outputs.commit()?;
        }
        None => {}
    }
    match a.format {
        Format::Json => print_stdout(&json)?,
        Format::Table => print_stdout(&crate::render::triage::render(&triage))?,
    }
    Ok(ExitCode::Success)
}
