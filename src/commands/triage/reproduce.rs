//! Local reproduction: reports grouped by the inputs they were fed, and one audit per group of
//! every candidate (the CPU EP, the HTP simulation of every chipset, the QNN releases devices
//! name), keeping every run's outputs in memory for the verdicts.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Result;
use sha2::{Digest, Sha256};

use super::store::Store;
use super::{CandidateRun, TriageOptions};
use crate::commands::compare::{run_compare_with_outputs, CompareOptions, RunTensors};
use crate::data::device::{identify_device, DeviceReport, Samples};
use crate::data::inputs::{InputOptions, MemoryInputs};
use crate::data::target::{distinct, ReleaseSpec, TargetList, TargetSpec};
use crate::execution::runtime::catalog::Build;
use crate::foundation::userfile::Outputs;
use crate::report::compare::Report;

/// The key of a report's inputs: `golden` (the golden run's, or `--inputs`), else their SHA-256.
pub fn input_key(report: &DeviceReport) -> String {
    match &report.inputs {
        None => "golden".into(),
        Some(samples) => samples_key(samples),
    }
}

/// The SHA-256 of input samples (names, types, shapes and bytes).
fn samples_key(samples: &Samples) -> String {
    let mut h = Sha256::new();
    for sample in samples {
        for (name, t) in sample {
            h.update(name.as_bytes());
            h.update(format!("{:?}{:?}", t.dtype(), t.shape).as_bytes());
            h.update(t.data.to_le_bytes());
        }
    }
    crate::foundation::hash::hex(&h.finalize())
}

/// The default inputs (the golden run's, or `--inputs`/`--gen`), as samples in the model's input
/// order, when they can be read.
fn default_inputs(opts: &TriageOptions, sig: &crate::data::model::Signature) -> Option<Samples> {
    match &opts.audited.golden.stored {
        Some(dir) => (0..)
            .map(|k| dir.join("inputs").join(format!("s{k}")))
            .take_while(|d| d.is_dir())
            .map(|d| {
                sig.inputs
                    .iter()
                    .enumerate()
                    .map(|(j, info)| {
                        crate::data::tensor::Tensor::read_npy(&d.join(format!("i{j}.npy")))
                            .ok()
                            .map(|t| (info.name.clone(), t))
                    })
                    .collect::<Option<Vec<_>>>()
            })
            .collect(),
        None => crate::data::inputs::prepare(sig, &opts.audited.inputs).ok().map(|set| {
            set.samples
                .into_iter()
                .map(|s| s.into_iter().map(|nt| (nt.name, nt.tensor)).collect())
                .collect()
        }),
    }
}

/// Reports whose inputs are the default ones, bit for bit, are measured with them (the golden
/// directory holds their golden run): a capture writes what it fed even when that is the golden
/// run's inputs.
pub fn fold_default_inputs(
    opts: &TriageOptions,
    sig: &crate::data::model::Signature,
    parsed: &mut [(PathBuf, Result<DeviceReport, String>)],
) {
    if parsed
        .iter()
        .all(|(_, r)| r.as_ref().map_or(true, |r| r.inputs.is_none()))
    {
        return;
    }
    let Some(default) = default_inputs(opts, sig) else {
        return;
    };
    let key = samples_key(&default);
    for r in parsed.iter_mut().filter_map(|(_, r)| r.as_mut().ok()) {
        if r.inputs.as_ref().is_some_and(|i| samples_key(i) == key) {
            r.inputs = None;
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

/// The QNN target of a device's own chipset: at the release its `device.json` names when the
/// catalogue has it, else at the catalogue's default release. Every report whose chipset is
/// known is compared with its own chipset, whatever the candidates (`-t`) are.
pub fn release_target(report: &DeviceReport) -> Option<TargetSpec> {
    let sm = identify_device(&report.device).chipset?;
    let chip = crate::data::target::Chipset::find(&sm)?;
    let spec = TargetSpec::qnn(chip);
    let named = report.device.qnn_release.as_deref().map(str::trim);
    let Some(build) = named.and_then(|release| Build::release("qnn", release)) else {
        return Some(spec);
    };
    // The catalogue's default release is what `qnn:<chipset>` runs already.
    if Build::get("qnn").is_some_and(|default| default.version == build.version) {
        return Some(spec);
    }
    Some(spec.with_release(ReleaseSpec::Version {
        version: build.version.clone(),
        host: None,
    }))
}

/// The targets an input group runs on: the candidates, then the releases its devices name.
fn targets_for(opts: &TriageOptions, members: &[&DeviceReport]) -> Vec<TargetSpec> {
    let mut lists: Vec<TargetList> = opts.candidates.clone();
    let mut releases: Vec<TargetSpec> = members.iter().filter_map(|r| release_target(r)).collect();
    releases.sort_by(|a, b| a.id.cmp(&b.id));
    lists.push(TargetList {
        text: String::new(),
        specs: releases,
    });
    distinct(&lists)
}

/// The target ids a report is compared with: the candidates (groups expanded) and its own
/// chipset at the release it names. Other reports of its input group may add runs; they are not
/// this report's candidates, so its entry does not depend on the company it came in.
pub fn report_target_ids(candidates: &[TargetList], report: &DeviceReport) -> Vec<String> {
    let mut ids: Vec<String> = distinct(candidates).into_iter().map(|t| t.id).collect();
    if let Some(own) = release_target(report).filter(|t| !ids.contains(&t.id)) {
        ids.push(own.id);
    }
    ids
}

fn candidate_runs(report: &Report, key: &str) -> Vec<CandidateRun> {
    report
        .targets
        .iter()
        .map(|t| CandidateRun {
            target: t.id.clone(),
            inputs: key.to_string(),
            status: t.status,
            runtime: t.runtime.as_ref().map(|r| r.text()),
            error: t.error.clone(),
            sqnr_db: t.outputs.iter().map(|o| o.sqnr_db).collect(),
        })
        .collect()
}

/// One audit of `targets` on the group's inputs: the default inputs, or the ones its devices
/// were fed (in memory, as `--inputs` files would be).
fn audit_group(opts: &TriageOptions, key: &str, members: &[&DeviceReport], targets: Vec<TargetSpec>) -> Result<Group> {
    let mut audited = opts.audited.clone();
    if let Some(inputs) = members.first().and_then(|r| r.inputs.as_ref()) {
        if let Some(golden) = &opts.audited.golden.stored {
            return Err(crate::foundation::error::bad_input(format!(
                "fed its own inputs ({} sample(s)), and the golden directory {} holds the golden run of its own inputs only: triage with --reference FP32.onnx",
                inputs.len(),
                golden.display()
            )));
        }
        audited.inputs = InputOptions {
            memory: Some(MemoryInputs {
                label: format!("the inputs device reports were fed ({key})"),
                samples: inputs.clone(),
            }),
            ..InputOptions::default()
        };
    }
    let audit = CompareOptions::findings(audited, targets, opts.exec.clone());
    let (report, tensors) = run_compare_with_outputs(&audit, &mut Outputs::none())?;
    Ok(Group {
        key: key.to_string(),
        runs: candidate_runs(&report, key),
        tensors,
        notes: report.notes.clone(),
        error: None,
    })
}

/// How much of the local work the store saved.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunCounts {
    /// Target runs (one target on one input set) made now.
    pub made: usize,
    /// Target runs read back from the store.
    pub reused: usize,
}

/// The store and the context its runs are kept under.
pub struct RunCache<'s> {
    pub store: &'s Store,
    pub context: &'s str,
}

/// Audits every distinct input set the reports were fed, reading back from the store the runs it
/// keeps and running only the others.
pub fn run_groups(
    opts: &TriageOptions,
    reports: &[&DeviceReport],
    cache: Option<&RunCache>,
) -> Result<(Vec<Group>, RunCounts)> {
    let keys: BTreeSet<String> = reports.iter().map(|r| input_key(r)).collect();
    let mut groups = Vec::new();
    let mut counts = RunCounts::default();
    for key in keys {
        let members: Vec<&DeviceReport> = reports.iter().copied().filter(|r| input_key(r) == key).collect();
        match cached_group(opts, &key, &members, cache, &mut counts) {
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
    Ok((groups, counts))
}

/// One input group: the runs the store keeps, and an audit of the targets it does not (and of
/// the golden run, when the store lacks it); what succeeded now is kept for next time.
fn cached_group(
    opts: &TriageOptions,
    key: &str,
    members: &[&DeviceReport],
    cache: Option<&RunCache>,
    counts: &mut RunCounts,
) -> Result<Group> {
    let wanted: Vec<TargetSpec> = targets_for(opts, members);
    let mut kept = Group {
        key: key.to_string(),
        runs: Vec::new(),
        tensors: RunTensors::new(),
        notes: Vec::new(),
        error: None,
    };
    let mut missing = Vec::new();
    for id in wanted.iter().map(|t| t.id.as_str()).chain(["golden"]) {
        match cache
            .map(|c| c.store.reproduction(c.context, id, key))
            .transpose()?
            .flatten()
        {
            Some(stored) => {
                if id != "golden" {
                    kept.runs.push(stored.run);
                    counts.reused += 1;
                }
                kept.tensors.insert(id.to_string(), stored.samples);
            }
            None if id != "golden" => missing.extend(wanted.iter().find(|t| t.id == id).cloned()),
            None => {}
        }
    }
    if missing.is_empty() && kept.tensors.contains_key("golden") {
        return Ok(kept);
    }
    let targets = if missing.is_empty() { wanted.clone() } else { missing };
    counts.made += targets.len();
    let fresh = audit_group(opts, key, members, targets)?;
    if let Some(c) = cache {
        keep_runs(c, &fresh)?;
    }
    kept.runs.extend(fresh.runs);
    kept.tensors.extend(fresh.tensors);
    kept.notes = fresh.notes;
    kept.runs.sort_by_key(|r| wanted.iter().position(|w| w.id == r.target));
    Ok(kept)
}

/// Adds runs of `targets` to an input group that has its first runs: read back from the store
/// when it keeps them, else audited now (and kept). The group's golden run stays the one its
/// verdicts were measured against.
pub fn extend_group(
    opts: &TriageOptions,
    group: &mut Group,
    members: &[&DeviceReport],
    targets: Vec<TargetSpec>,
    cache: Option<&RunCache>,
    counts: &mut RunCounts,
) -> Result<()> {
    let mut missing = Vec::new();
    let new: Vec<TargetSpec> = targets
        .into_iter()
        .filter(|t| !group.tensors.contains_key(&t.id))
        .collect();
    for t in new {
        match cache
            .map(|c| c.store.reproduction(c.context, &t.id, &group.key))
            .transpose()?
            .flatten()
        {
            Some(stored) => {
                group.runs.push(stored.run);
                group.tensors.insert(t.id.clone(), stored.samples);
                counts.reused += 1;
            }
            None => missing.push(t),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    counts.made += missing.len();
    let fresh = audit_group(opts, &group.key, members, missing)?;
    if let Some(c) = cache {
        keep_runs(c, &fresh)?;
    }
    group.runs.extend(fresh.runs);
    for (id, samples) in fresh.tensors.into_iter().filter(|(id, _)| id != "golden") {
        group.tensors.entry(id).or_insert(samples);
    }
    for note in fresh.notes {
        if !group.notes.contains(&note) {
            group.notes.push(note);
        }
    }
    Ok(())
}

/// Keeps the golden run and every run that succeeded (failures are tried again next time).
fn keep_runs(cache: &RunCache, group: &Group) -> Result<()> {
    if let Some(golden) = group.tensors.get("golden") {
        let run = CandidateRun {
            target: "golden".into(),
            inputs: group.key.clone(),
            status: crate::report::RunStatus::Ok,
            runtime: None,
            error: None,
            sqnr_db: Vec::new(),
        };
        cache.store.put_reproduction(cache.context, &run, golden)?;
    }
    for run in &group.runs {
        if let Some(samples) = group.tensors.get(&run.target) {
            cache.store.put_reproduction(cache.context, run, samples)?;
        }
    }
    Ok(())
}

/// Errors that are about one group's inputs (they do not fit the model, or the golden directory
/// holds the golden run of other inputs), which fail that group only. A golden directory that
/// cannot be used (altered, missing files, another model's) is no finding about a report: it fails
/// the triage as it fails `compare` (exit 2).
fn is_about_the_inputs(e: &anyhow::Error) -> bool {
    e.downcast_ref::<crate::foundation::error::InputError>().is_some()
}
