//! Local reproduction: reports grouped by the inputs they were fed, and one audit per group of
//! every candidate (the CPU EP, the HTP simulation of every chipset, the QNN releases devices
//! name), keeping every run's outputs in memory for the verdicts.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Result;
use sha2::{Digest, Sha256};

use super::{CandidateRun, TriageOptions};
use crate::audit::{run_compare_with_outputs, RunTensors};
use crate::device::{identify_device, DeviceReport, Samples};
use crate::drift::FingerprintMode;
use crate::report::model::Report;
use crate::runtime::catalog::Build;
use crate::tensor::npz_bytes;
use crate::userfile::Outputs;

/// The key of a report's inputs: `golden` (the golden run's, or `--inputs`), else their SHA-256.
pub fn input_key(report: &DeviceReport) -> String {
    match &report.inputs {
        None => "golden".into(),
        Some(samples) => {
            let mut h = Sha256::new();
            for sample in samples {
                for (name, t) in sample {
                    h.update(name.as_bytes());
                    h.update(format!("{:?}{:?}", t.dtype(), t.shape).as_bytes());
                    h.update(t.data.to_le_bytes());
                }
            }
            crate::hash::hex(&h.finalize())
        }
    }
}

/// One input group's audit.
pub struct Group {
    pub key: String,
    pub runs: Vec<CandidateRun>,
    /// `golden` and every candidate that ran, by target id.
    pub tensors: RunTensors,
    pub notes: Vec<String>,
    /// Why the group's audit did not run, when it did not.
    pub error: Option<String>,
}

/// The QNN target of a device's chipset at the release it names, when the catalogue has it.
pub fn release_target(report: &DeviceReport) -> Option<String> {
    let sm = identify_device(&report.device).chipset?;
    let release = report.device.qnn_release.as_deref()?.trim();
    Build::release("qnn", release).map(|_| format!("qnn:{sm}@{release}"))
}

fn targets_for(opts: &TriageOptions, members: &[&DeviceReport]) -> Vec<String> {
    let mut out: Vec<String> = opts.candidates.clone();
    let releases: BTreeSet<String> = members.iter().filter_map(|r| release_target(r)).collect();
    out.extend(releases);
    out
}

/// Writes each sample of `inputs` as an `.npz` for `--inputs`.
fn write_inputs(dir: &std::path::Path, inputs: &Samples) -> Result<Vec<PathBuf>> {
    inputs
        .iter()
        .enumerate()
        .map(|(k, sample)| {
            let refs: Vec<(String, &crate::tensor::Tensor)> = sample.iter().map(|(n, t)| (n.clone(), t)).collect();
            let path = dir.join(format!("s{k}.npz"));
            std::fs::write(&path, npz_bytes(&refs)?)?;
            Ok(path)
        })
        .collect()
}

fn candidate_runs(report: &Report, key: &str) -> Vec<CandidateRun> {
    report
        .targets
        .iter()
        .map(|t| CandidateRun {
            target: t.id.clone(),
            inputs: key.to_string(),
            status: format!("{:?}", t.status).to_lowercase(),
            runtime: t.runtime.as_ref().map(|r| r.text()),
            error: t.error.clone(),
            sqnr_db: t.outputs.iter().map(|o| o.sqnr_db).collect(),
        })
        .collect()
}

fn audit_group(opts: &TriageOptions, key: &str, members: &[&DeviceReport]) -> Result<Group> {
    let scratch = tempfile::tempdir()?;
    let mut audit = opts.audit.clone();
    audit.targets = targets_for(opts, members);
    audit.allow_failure = vec!["all".into()];
    audit.no_baseline = true;
    audit.fingerprint = FingerprintMode::Off;
    audit.save_outputs = None;
    audit.logs = None;
    audit.layers = None;
    if let Some(inputs) = members.first().and_then(|r| r.inputs.as_ref()) {
        audit.inputs = crate::inputs::InputOptions {
            npz: write_inputs(scratch.path(), inputs)?,
            ..Default::default()
        };
    }
    let (report, tensors) = run_compare_with_outputs(&audit, &mut Outputs::new(&[]))?;
    Ok(Group {
        key: key.to_string(),
        runs: candidate_runs(&report, key),
        tensors,
        notes: report.notes.clone(),
        error: None,
    })
}

/// Audits every distinct input set the parsed reports were fed.
pub fn run_groups(opts: &TriageOptions, parsed: &[(PathBuf, Result<DeviceReport, String>)]) -> Result<Vec<Group>> {
    let ok: Vec<&DeviceReport> = parsed.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    let keys: BTreeSet<String> = ok.iter().map(|r| input_key(r)).collect();
    let mut groups = Vec::new();
    for key in keys {
        let members: Vec<&DeviceReport> = ok.iter().copied().filter(|r| input_key(r) == key).collect();
        match audit_group(opts, &key, &members) {
            Ok(g) => groups.push(g),
            Err(e) if is_about_the_inputs(&e) => groups.push(Group {
                key: key.clone(),
                runs: Vec::new(),
                tensors: RunTensors::new(),
                notes: Vec::new(),
                error: Some(format!("{e:#}")),
            }),
            Err(e) => return Err(e),
        }
    }
    Ok(groups)
}

/// Errors that are about one group's inputs (they do not fit the model, or the golden run was
/// made on other inputs), which fail that group only.
fn is_about_the_inputs(e: &anyhow::Error) -> bool {
    e.downcast_ref::<crate::error::InputError>().is_some() || e.downcast_ref::<crate::error::GoldenError>().is_some()
}
