//! Files an audit writes on request besides its report: the saved outputs of every run
//! (`--save-outputs`) and each target's runtime log (`--logs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::bad_output;
use crate::exec::executor::sanitize;
use crate::exec::{Executor, OutputFile, RunStatus};
use crate::tensor::{write_npz, Tensor};

use super::analyze::Analysis;
use super::execute::Executed;
use super::plan::AuditPlan;
use super::CompareOptions;

/// `--save-outputs` must name a new or empty directory: outputs of an earlier audit left beside
/// this one's would be mistaken for them.
pub fn check_save_dir(dir: &Path) -> Result<()> {
    if dir.is_file() {
        return Err(bad_output(format!("--save-outputs {} is a file", dir.display())));
    }
    if dir.is_dir() && dir.read_dir().map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(bad_output(format!("--save-outputs {} is not empty", dir.display())));
    }
    Ok(())
}

/// Writes every run's outputs as `DIR/<run>/s<k>.npz`, keyed by output name. Run ids that map
/// to the same directory name get a numeric suffix.
pub fn save_outputs(dir: &Path, runs: &[(&str, &[Vec<OutputFile>])]) -> Result<()> {
    let mut used: Vec<String> = Vec::new();
    for (id, samples) in runs {
        let mut name = sanitize(id);
        let base = name.clone();
        let mut n = 2;
        while used.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        used.push(name.clone());
        let tdir = dir.join(&name);
        std::fs::create_dir_all(&tdir).with_context(|| format!("cannot create {}", tdir.display()))?;
        for (k, files) in samples.iter().enumerate() {
            let tensors = files
                .iter()
                .map(|f| Tensor::read_npy(&f.path).map(|t| (f.name.clone(), t)))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<(String, &Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
            write_npz(&tdir.join(format!("s{k}.npz")), &refs)?;
        }
    }
    Ok(())
}

/// Copies each target's runtime log to `DIR/<target>.log` (written under a temporary name and
/// renamed, so a log file is whole or absent). Returns the path kept for each target id.
pub fn save_logs(dir: &Path, logs: &[(&str, &Path)]) -> Result<HashMap<String, PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut kept = HashMap::new();
    for (id, log) in logs {
        if !log.exists() {
            continue;
        }
        let dest = dir.join(format!("{}.log", sanitize(id)));
        let tmp = dir.join(format!(".{}.log.tmp", sanitize(id)));
        std::fs::copy(log, &tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &dest).with_context(|| format!("cannot write {}", dest.display()))?;
        kept.insert(id.to_string(), dest);
    }
    Ok(kept)
}

/// Writes what the user asked to keep besides the report: every run's outputs and every
/// target's log. Returns the kept log of each target id.
pub fn persist(
    opts: &CompareOptions,
    plan: &AuditPlan,
    executed: &Executed,
    analysis: &Analysis<'_>,
    executor: &Executor,
) -> Result<HashMap<String, PathBuf>> {
    if let Some(saved) = &opts.save_outputs {
        let dir = &saved.dir;
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
        save_outputs(dir, &all).map_err(|e| bad_output(format!("--save-outputs {}: {e:#}", dir.display())))?;
    }
    let logs: Vec<(&str, &Path)> = plan
        .targets
        .iter()
        .enumerate()
        .filter_map(|(i, t)| executed.outcome(i).map(|o| (t.spec.id.as_str(), o.log.as_path())))
        .collect();
    Ok(match &opts.logs {
        Some(dir) => save_logs(dir, &logs).map_err(|e| bad_output(format!("--logs {}: {e:#}", dir.display())))?,
        None if executor.options().keep_work => logs.iter().map(|(id, p)| (id.to_string(), p.to_path_buf())).collect(),
        None => HashMap::new(),
    })
}
