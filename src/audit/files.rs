//! Files an audit writes on request: checking the report path before any work, and the saved
//! outputs of every run.

use std::path::Path;

use anyhow::{Context, Result};

use crate::error::usage;
use crate::exec::executor::sanitize;
use crate::exec::OutputFile;
use crate::tensor::{write_npz, Tensor};

/// `--save-outputs` must name a new or empty directory: outputs of an earlier audit left beside
/// this one's would be mistaken for them.
pub fn check_save_dir(dir: &Path) -> Result<()> {
    if dir.is_file() {
        return Err(usage(format!("--save-outputs {} is a file", dir.display())));
    }
    if dir.is_dir() && dir.read_dir().map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(usage(format!("--save-outputs {} is not empty", dir.display())));
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
pub fn save_logs(dir: &Path, logs: &[(&str, &Path)]) -> Result<std::collections::HashMap<String, std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut kept = std::collections::HashMap::new();
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
