//! `eval --shard i/n`: one part of an eval run as work units of (target, sample range), and the
//! shard's file: its units' per-sample records, the reference's records of every sample it ran,
//! and the eval's [`Basis`], which is everything `merge` needs to build the report one machine
//! would have written. Units that share a sample range stream together (one reference session
//! for them); each range keeps its own records directory, so a killed shard resumes.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::assemble::Basis;
use super::summary::{summary, RunSummary};
use super::{feed, open_set, sessions, EvalOptions, Records};
use crate::analyses::accuracy::Record;
use crate::commands::shard::{units, windows, Shard, Unit};
use crate::foundation::error::bad_output;
use crate::foundation::host::HostInfo;
use crate::foundation::userfile::{InputFiles, Outputs};

/// What an eval shard's file says it is.
pub const SHARD_FORMAT: &str = "npu-audit eval shard";
/// The version of the shard file's layout this build reads and writes.
pub const SHARD_VERSION: u32 = 1;

/// An eval shard's file (`eval --shard i/n --out FILE`), read by `merge`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardFile {
    /// [`SHARD_FORMAT`].
    pub format: String,
    pub version: u32,
    pub tool_version: String,
    pub shard: Shard,
    /// What the shard is of (model, set, task, targets' costs, shard): a shard started again
    /// whose file is complete and of the same identity runs nothing.
    pub identity: serde_json::Value,
    /// Each target's weight per sample, as the split used it.
    pub costs: BTreeMap<String, u64>,
    /// The eval's basis (`None` only for a shard that got no unit: more shards than work).
    pub basis: Option<Basis>,
    pub host: HostInfo,
    /// The reference's record of every sample the shard's units cover, in sample order.
    pub reference: Vec<Record>,
    /// The shard's units, in the split's order, each with its run's records.
    pub units: Vec<UnitRun>,
    /// The SHA-256 of every sample's id and truth (`feed::truths_sha256`), which the joined
    /// reference records must give again (`None` for `agree`).
    #[serde(default)]
    pub truths_sha256: Option<String>,
    /// How many values the task's output has: no record's prediction names a class beyond it.
    #[serde(default)]
    pub output_len: usize,
}

/// A unit and what its run recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitRun {
    pub unit: Unit,
    pub run: RunSummary,
}

/// Each target's weight per sample: `--costs`, else its backend's default.
pub fn weights(opts: &EvalOptions, plan: &sessions::EvalPlan) -> Vec<(String, u64)> {
    plan.targets
        .iter()
        .map(|t| (t.spec.id.clone(), opts.costs.weight(&t.spec)))
        .collect()
}

/// How a shard's run ended: it ran its units, or its file was already complete.
pub enum ShardRun {
    Ran(ShardFile),
    AlreadyDone(ShardFile),
}

/// Runs shard `shard` of the eval: its units, grouped by sample range, each group streamed with
/// the reference. When `previous` (the shard's `--out`) already holds this shard's complete file,
/// nothing runs.
pub fn run(opts: &EvalOptions, shard: Shard, previous: &Path, outputs: &mut Outputs) -> Result<ShardRun> {
    let dataset = open_set(opts)?;
    let mut plan = sessions::plan(opts, &dataset)?;
    outputs.add_inputs(InputFiles::new().add_all(&plan.model.external_data_paths()));
    let weights = weights(opts, &plan);
    let split = units(&weights, dataset.len(), shard.count);
    let given = format!("--shard {}/{}", shard.index, shard.count);
    crate::commands::shard::jobs::refuse_idle_eval_shards(&given, &split, (dataset.len(), weights.len()))?;
    let units = split.into_iter().nth(shard.index - 1).unwrap_or_default();
    let (identity, samples_sha256) = identity_with_contents(opts, &plan, &dataset, (shard, &weights))?;
    if let Some(done) = finished(previous, &identity) {
        return Ok(ShardRun::AlreadyDone(done));
    }
    // Each shard keeps its records in a directory of its own, so shards given one `--records`
    // never meet; without it, in the cache under the digest of the shard's identity.
    let records_root = match &opts.records {
        Records::Named(d) => Some(d.join(format!("{}-of-{}", shard.index, shard.count))),
        Records::Cached => Some(super::records_cache::cached_dir(&identity)),
        Records::Work => None,
    };
    if let Some(dir) = &records_root {
        claim_records(dir, &identity)?;
    }
    let all = std::mem::take(&mut plan.targets);
    let mut reference: BTreeMap<usize, Record> = BTreeMap::new();
    let mut runs: Vec<UnitRun> = Vec::new();
    let mut task = None;
    let mut facts = (None, 0);
    for (window, members) in windows(&units) {
        plan.targets = members
            .iter()
            .filter_map(|u| all.iter().find(|t| t.spec.id == u.run).cloned())
            .collect();
        let records = records_root.as_ref().map_or(Records::Work, |d| {
            Records::Named(d.join(format!("{}-{}", window.start, window.end)))
        });
        crate::foundation::console::note(format!(
            "eval shard {}/{}: samples {}..{} on {}",
            shard.index,
            shard.count,
            window.start,
            window.end,
            members.iter().map(|u| u.run.as_str()).collect::<Vec<_>>().join(", ")
        ));
        let done = feed::run(opts, &plan, &dataset, (window, &records))?;
        for r in done.reference.records {
            reference.entry(r.index).or_insert(r);
        }
        for ((unit, planned), r) in members.iter().zip(&plan.targets).zip(done.targets) {
            runs.push(UnitRun {
                unit: (*unit).clone(),
                run: summary(Some(planned), r),
            });
        }
        task.get_or_insert(done.task);
        facts = (done.truths_sha256, done.output_len);
    }
    plan.targets = all;
    runs.sort_by_key(|u| units.iter().position(|x| *x == u.unit));
    Ok(ShardRun::Ran(ShardFile {
        format: SHARD_FORMAT.into(),
        version: SHARD_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        shard,
        identity,
        costs: weights.into_iter().collect(),
        basis: task.map(|t| {
            let mut basis = Basis::of(opts, &plan, &dataset, &t);
            basis.dataset.samples_sha256 = Some(samples_sha256);
            basis
        }),
        host: crate::foundation::host::this_host(),
        reference: reference.into_values().collect(),
        units: runs,
        truths_sha256: facts.0,
        output_len: facts.1,
    }))
}

/// The shard's identity with what the set holds, not only what it names (shards run while the set
/// or its labels were edited between them must not be joined), and the samples' SHA-256.
fn identity_with_contents(
    opts: &EvalOptions,
    plan: &sessions::EvalPlan,
    dataset: &crate::data::dataset::Dataset,
    part: (Shard, &[(String, u64)]),
) -> Result<(serde_json::Value, String)> {
    let samples_sha256 = dataset.samples_sha256()?;
    let mut identity = shard_identity(opts, plan, dataset, part);
    identity["samples_sha256"] = samples_sha256.clone().into();
    identity["labels_sha256"] = dataset.labels_sha256().into();
    Ok((identity, samples_sha256))
}

/// The shard's file at `path` when it is this shard's and complete: every unit recorded all its
/// samples or stopped.
fn finished(path: &Path, identity: &serde_json::Value) -> Option<ShardFile> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_file())?;
    let file = read(path).ok()?;
    let complete = file
        .units
        .iter()
        .all(|u| u.run.end.is_some() || u.run.records.len() == u.unit.end - u.unit.start);
    (file.identity == *identity && complete).then_some(file)
}

/// What a shard is of: everything that changes its records or its basis (model, reference, set,
/// labels, task, statistics, targets with their runtimes and limits, threads, host class, costs,
/// shard). A shard started again with the same identity resumes in its records directory, or runs
/// nothing when its file is complete; any other eval or shard is refused the directory.
fn shard_identity(
    opts: &EvalOptions,
    plan: &sessions::EvalPlan,
    dataset: &crate::data::dataset::Dataset,
    (shard, weights): (Shard, &[(String, u64)]),
) -> serde_json::Value {
    // The whole eval's records context (tool, model, reference, set, labels, task, runs,
    // runtimes, threads, host class), and what a shard's file holds besides its records.
    let runs: Vec<String> = std::iter::once("reference".to_string())
        .chain(plan.targets.iter().map(|t| t.spec.id.clone()))
        .collect();
    let mut identity = feed::context(opts, plan, dataset, &runs, &(0..dataset.len()));
    let gate: Vec<serde_json::Value> = plan
        .targets
        .iter()
        .map(|t| {
            let limits = opts.policy.limits(&t.spec.id, None);
            let limit =
                |l: &Option<crate::judge::policy::limits::Limit<f64>>| l.as_ref().map(|l| (l.value, l.origin.clone()));
            serde_json::json!([
                t.spec.id,
                t.required,
                limit(&limits.min_accuracy),
                limit(&limits.max_accuracy_drop)
            ])
        })
        .collect();
    identity["shard"] = serde_json::json!([shard.index, shard.count]);
    identity["costs"] = serde_json::json!(weights);
    identity["class_axis"] = opts
        .class_axis
        .iter()
        .map(|f| serde_json::json!({ "output": f.output, "axis": f.axis }))
        .collect::<Vec<_>>()
        .into();
    identity["stats"] = serde_json::to_value(opts.stats).unwrap_or_default();
    identity["gate"] = gate.into();
    identity
}

/// The file in a shard's records directory that says whose records it holds.
const SHARD_IDENTITY_FILE: &str = "shard.json";

/// Takes `dir` for this shard's records: a new or empty directory, or one this same shard used.
fn claim_records(dir: &Path, identity: &serde_json::Value) -> Result<()> {
    let shown = dir.display();
    crate::foundation::userfile::check_dir_destination("--records", dir)?;
    std::fs::create_dir_all(dir).map_err(|e| bad_output(format!("--records {shown}: {e}")))?;
    let file = dir.join(SHARD_IDENTITY_FILE);
    let empty = std::fs::read_dir(dir).map(|mut d| d.next().is_none()).unwrap_or(false);
    if empty {
        return std::fs::write(&file, serde_json::to_vec_pretty(identity)?)
            .map_err(|e| bad_output(format!("--records {shown}: {e}")));
    }
    let found = std::fs::symlink_metadata(&file)
        .ok()
        .filter(|m| m.file_type().is_file() && m.len() < 1 << 20)
        .and_then(|_| std::fs::read(&file).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    match found {
        Some(f) if &f == identity => Ok(()),
        Some(_) => Err(bad_output(format!(
            "--records {shown} holds the records of another eval or another shard of it (model, set, task, targets, costs or shard differ); give a new or empty directory"
        ))),
        None => Err(bad_output(format!(
            "--records {shown} holds files that are not an eval shard's records; give a new or empty directory"
        ))),
    }
}

/// Reads a shard file (a stranger's until parsed: size-capped, its format and version checked).
pub fn read(path: &Path) -> Result<ShardFile> {
    let shown = crate::foundation::userfile::shown(path);
    let bytes = crate::foundation::userfile::read_user_file(path)
        .map_err(|e| crate::foundation::error::bad_report(format!("{shown}: cannot read: {e}")))?;
    from_bytes(&bytes, &shown)
}

/// Parses a shard file's bytes; `shown` names where they came from.
pub fn from_bytes(bytes: &[u8], shown: &str) -> Result<ShardFile> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        crate::foundation::error::bad_report(format!("{shown}:{}:{}: not JSON: {e}", e.line(), e.column()))
    })?;
    if value.get("format").and_then(|f| f.as_str()) != Some(SHARD_FORMAT) {
        return Err(crate::foundation::error::bad_report(format!(
            "{shown}: not an eval shard's file (no format \"{SHARD_FORMAT}\")"
        )));
    }
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(SHARD_VERSION) => {}
        v => {
            return Err(crate::foundation::error::bad_report(format!(
                "{shown}: eval shard layout version {}, this npu-audit reads version {SHARD_VERSION}",
                v.map_or("unknown".to_string(), |v| v.to_string())
            )))
        }
    }
    serde_json::from_value(value).map_err(|e| {
        crate::foundation::error::bad_report(format!(
            "{shown}: not an eval shard's file: {}",
            crate::foundation::error::plain_serde_message(&e.to_string())
        ))
    })
}

/// Whether these bytes are (or mean to be) an eval shard's file, else `merge` reads compare
/// reports: the shard's format, or a shard's parts (`units` and `identity`) without it, so that a
/// damaged shard is refused for what it lacks, not as "not a compare report".
pub fn is_shard_file(bytes: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return false;
    };
    let format = v.get("format").and_then(|f| f.as_str());
    let shard_parts = ["units", "identity", "basis", "shard"]
        .iter()
        .any(|k| v.get(k).is_some());
    format == Some(SHARD_FORMAT) || (shard_parts && v.get("tool").is_none())
}

/// A shard's one-line summary per unit, for the terminal.
pub fn summary_text(file: &ShardFile) -> String {
    let mut lines = vec![format!(
        "eval shard {}/{}: {} unit(s); join every shard with `npu-audit merge`",
        file.shard.index,
        file.shard.count,
        file.units.len()
    )];
    for u in &file.units {
        let status = u
            .run
            .end
            .as_ref()
            .map_or("ok".to_string(), |e| e.status.as_str().to_string());
        lines.push(format!(
            "  {} samples {}..{}: {} recorded, {status}",
            u.unit.run,
            u.unit.start,
            u.unit.end,
            u.run.records.len()
        ));
    }
    lines.join("\n") + "\n"
}
