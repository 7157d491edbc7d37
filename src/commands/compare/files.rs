//! Files an audit writes on request besides its report: the saved outputs of every run
//! (`--save-outputs`, each file's SHA-256 recorded so `merge` can tell they are the ones the run
//! wrote) and each target's runtime log (`--logs`). They are staged with the report's files and
//! committed together (`userfile::Outputs`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::analyze::Analysis;
use super::execute::Executed;
use super::plan::{AuditPlan, LOGS_MARKER, LOGS_MARKER_TEXT};
use super::CompareOptions;
use crate::data::tensor::{npz_bytes, Tensor};
use crate::execution::exec::executor::sanitize;
use crate::execution::exec::{Executor, OutputFile};
use crate::foundation::hash::sha256_hex;
use crate::foundation::userfile::Outputs;
use crate::report::RunStatus;

/// Stages every run's outputs as `DIR/<run>/s<k>.npz`, keyed by output name (run ids that map
/// to the same directory name get a numeric suffix). Returns the SHA-256 of each file, by its
/// path relative to `DIR`.
pub fn save_outputs(
    (dir, flag): (&Path, &str),
    runs: &[(&str, &[Vec<OutputFile>])],
    outputs: &mut Outputs,
) -> Result<BTreeMap<String, String>> {
    let mut used: Vec<String> = Vec::new();
    let mut hashes = BTreeMap::new();
    outputs.dir(flag, dir)?;
    for (id, samples) in runs {
        let mut name = sanitize(id);
        let base = name.clone();
        let mut n = 2;
        while used.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        used.push(name.clone());
        outputs.dir(flag, &dir.join(&name))?;
        for (k, files) in samples.iter().enumerate() {
            let tensors = files
                .iter()
                .map(|f| Tensor::read_npy(&f.path).map(|t| (f.name.clone(), t)))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<(String, &Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
            let bytes = npz_bytes(&refs)?;
            let rel = format!("{name}/s{k}.npz");
            outputs.file(flag, &dir.join(&rel), &bytes)?;
            hashes.insert(rel, sha256_hex(&bytes));
        }
    }
    Ok(hashes)
}

/// Stages each target's runtime log as `DIR/<target>.log`. Returns the path kept for each
/// target id.
pub fn save_logs(
    (dir, flag): (&Path, &str),
    logs: &[(&str, &Path)],
    outputs: &mut Outputs,
) -> Result<HashMap<String, PathBuf>> {
    outputs.dir(flag, dir)?;
    outputs.file(flag, &dir.join(LOGS_MARKER), LOGS_MARKER_TEXT.as_bytes())?;
    let mut kept = HashMap::new();
    for (id, log) in logs {
        let Ok(text) = std::fs::read(log) else { continue };
        let dest = dir.join(format!("{}.log", sanitize(id)));
        outputs.file(flag, &dest, &text)?;
        kept.insert(id.to_string(), dest);
    }
    Ok(kept)
}

/// What the run kept besides the report.
pub struct Persisted {
    /// The kept log of each target id.
    pub logs: HashMap<String, PathBuf>,
    /// The SHA-256 of each saved output file, by its path relative to the outputs directory.
    pub output_files: BTreeMap<String, String>,
}

/// Stages what the user asked to keep besides the report: every run's outputs and every
/// target's log.
pub fn persist(
    opts: &CompareOptions,
    plan: &AuditPlan,
    executed: &Executed,
    analysis: &Analysis<'_>,
    executor: &Executor,
    outputs: &mut Outputs,
) -> Result<Persisted> {
    let mut output_files = BTreeMap::new();
    if let Some(saved) = &opts.kept.save_outputs {
        let mut all: Vec<(&str, &[Vec<OutputFile>])> = vec![("golden", &analysis.golden_samples)];
        for (t, end) in plan.targets.iter().zip(&analysis.ends) {
            if let Some(r) = end
                .outcome
                .and_then(|o| o.result.as_ref())
                .filter(|_| end.status == RunStatus::Ok)
            {
                all.push((t.spec.id.as_str(), &r.outputs));
            }
        }
        // A stream's teacher-forced runs, as `<target>@teacher-forced`.
        let forced: Vec<(String, &[Vec<OutputFile>])> = plan
            .targets
            .iter()
            .zip(&executed.teacher_forced)
            .filter_map(|(t, o)| {
                let r = o.as_ref()?.result.as_ref().filter(|r| r.ok)?;
                Some((format!("{}@teacher-forced", t.spec.id), r.outputs.as_slice()))
            })
            .collect();
        all.extend(forced.iter().map(|(id, o)| (id.as_str(), *o)));
        output_files = save_outputs((&saved.dir, &saved.flag), &all, outputs)?;
    }
    let logs: Vec<(&str, &Path)> = plan
        .targets
        .iter()
        .enumerate()
        .filter_map(|(i, t)| executed.outcome(i).map(|o| (t.spec.id.as_str(), o.log.as_path())))
        .collect();
    let logs = match &opts.kept.logs {
        Some(kept) => save_logs((&kept.dir, &kept.flag), &logs, outputs)
            .with_context(|| format!("{} {}", kept.flag, kept.dir.display()))?,
        None if executor.options().keep_work => logs.iter().map(|(id, p)| (id.to_string(), p.to_path_buf())).collect(),
        None => HashMap::new(),
    };
    Ok(Persisted { logs, output_files })
}
