//! Stored golden runs: the reference model's outputs on fixed inputs, with the SHA-256 of the model
//! and of every tensor, so a later audit can use them without the reference model and can tell
//! when anything changed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::inputs::{InputProvenance, InputSet, NamedTensor};
use crate::runtime::wheel::sha256_file;
use crate::tensor::{DType, Tensor};
use crate::worker::{InputFile, OutputFile};

/// Version of the manifest layout.
pub const GOLDEN_SCHEMA_VERSION: u32 = 1;

/// One tensor file of a golden run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TensorEntry {
    pub name: String,
    /// Relative to the golden directory.
    pub file: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub sha256: String,
}

/// One sample: its inputs and the reference outputs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SampleEntry {
    pub inputs: Vec<TensorEntry>,
    pub outputs: Vec<TensorEntry>,
}

/// The reference model a golden run was made with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelEntry {
    pub file: String,
    pub sha256: String,
    pub size_bytes: u64,
}

/// The runtime and settings of the golden run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RuntimeEntry {
    pub package: String,
    pub version: String,
    pub library_sha256: Option<String>,
    pub optimization: String,
    pub intra_threads: usize,
}

/// `manifest.json` of a golden directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub tool_version: String,
    pub reference_model: ModelEntry,
    pub runtime: RuntimeEntry,
    pub input_spec: serde_json::Value,
    pub samples: Vec<SampleEntry>,
}

/// A verified golden run.
#[derive(Debug, Clone)]
pub struct Golden {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Golden {
    /// Reads a golden directory and verifies every file against its recorded SHA-256.
    pub fn load(dir: &Path) -> Result<Golden> {
        let shown = dir.display();
        let manifest_path = dir.join("manifest.json");
        let bytes = std::fs::read(&manifest_path)
            .map_err(|e| usage(format!("--golden {shown}: cannot read manifest.json: {e}")))?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| usage(format!("--golden {shown}: manifest.json is not a golden manifest: {e}")))?;
        if manifest.schema_version != GOLDEN_SCHEMA_VERSION {
            return Err(usage(format!(
                "--golden {shown}: manifest schema version {} is not the supported {GOLDEN_SCHEMA_VERSION}",
                manifest.schema_version
            )));
        }
        if manifest.samples.is_empty() {
            return Err(usage(format!("--golden {shown}: the manifest lists no samples")));
        }
        for sample in &manifest.samples {
            for entry in sample.inputs.iter().chain(&sample.outputs) {
                let path = dir.join(&entry.file);
                if !path.is_file() {
                    return Err(usage(format!("--golden {shown}: {} is missing", entry.file)));
                }
                let actual = sha256_file(&path)?;
                if actual != entry.sha256 {
                    return Err(usage(format!(
                        "--golden {shown}: {} was altered (sha256 {actual}, the manifest says {})",
                        entry.file, entry.sha256
                    )));
                }
            }
        }
        Ok(Golden {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The stored inputs.
    pub fn inputs(&self) -> Result<InputSet> {
        let mut samples = Vec::new();
        for s in &self.manifest.samples {
            let mut sample = Vec::new();
            for e in &s.inputs {
                let tensor = Tensor::read_npy(&self.dir.join(&e.file))?;
                sample.push(NamedTensor {
                    name: e.name.clone(),
                    tensor,
                });
            }
            samples.push(sample);
        }
        Ok(InputSet {
            provenance: InputProvenance {
                source: "golden".into(),
                samples: samples.len(),
                generators: vec![],
                seed: None,
                files: vec![self.dir.display().to_string()],
            },
            samples,
            free_dims: vec![],
        })
    }

    /// The stored reference outputs, as the comparison reads them.
    pub fn outputs(&self) -> Vec<Vec<OutputFile>> {
        self.manifest
            .samples
            .iter()
            .map(|s| {
                s.outputs
                    .iter()
                    .map(|e| OutputFile {
                        name: e.name.clone(),
                        dtype: e.dtype,
                        shape: e.shape.clone(),
                        path: self.dir.join(&e.file),
                    })
                    .collect()
            })
            .collect()
    }

    /// Output names in order.
    pub fn output_names(&self) -> Vec<String> {
        self.manifest.samples[0]
            .outputs
            .iter()
            .map(|e| e.name.clone())
            .collect()
    }
}

/// Everything needed to write a golden directory.
pub struct GoldenWrite<'a> {
    pub reference: &'a crate::model::LoadedModel,
    pub runtime: RuntimeEntry,
    pub input_spec: serde_json::Value,
    pub inputs: &'a [Vec<InputFile>],
    pub outputs: &'a [Vec<OutputFile>],
}

fn copy_entry(from: &Path, dir: &Path, rel: String, name: &str) -> Result<TensorEntry> {
    let dest = dir.join(&rel);
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, &dest).with_context(|| format!("cannot write {}", dest.display()))?;
    let tensor = Tensor::read_npy(&dest)?;
    Ok(TensorEntry {
        name: name.to_string(),
        file: rel,
        dtype: tensor.dtype(),
        shape: tensor.shape,
        sha256: sha256_file(&dest)?,
    })
}

/// Writes a golden directory: into a temporary sibling first, renamed into place when complete,
/// so a failure never leaves a half-written golden run.
pub fn write(dest: &Path, g: GoldenWrite<'_>, force: bool) -> Result<()> {
    if dest.exists() {
        let empty = dest.read_dir().map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty && !force {
            return Err(usage(format!(
                "{} already exists; pass --force to replace it",
                dest.display()
            )));
        }
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| usage(format!("cannot create {}: {e}", parent.display())))?;
    let staging =
        tempfile::tempdir_in(&parent).map_err(|e| usage(format!("cannot write into {}: {e}", parent.display())))?;
    let mut samples = Vec::new();
    for (k, (ins, outs)) in g.inputs.iter().zip(g.outputs).enumerate() {
        let inputs = ins
            .iter()
            .enumerate()
            .map(|(i, f)| copy_entry(&f.path, staging.path(), format!("inputs/s{k}/i{i}.npy"), &f.name))
            .collect::<Result<Vec<_>>>()?;
        let outputs = outs
            .iter()
            .enumerate()
            .map(|(o, f)| copy_entry(&f.path, staging.path(), format!("outputs/s{k}/o{o}.npy"), &f.name))
            .collect::<Result<Vec<_>>>()?;
        samples.push(SampleEntry { inputs, outputs });
    }
    let manifest = Manifest {
        schema_version: GOLDEN_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        reference_model: ModelEntry {
            file: g
                .reference
                .path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            sha256: g.reference.sha256.clone(),
            size_bytes: g.reference.size,
        },
        runtime: g.runtime,
        input_spec: g.input_spec,
        samples,
    };
    std::fs::write(
        staging.path().join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    let staged = staging.keep();
    if dest.exists() {
        std::fs::remove_dir_all(dest).with_context(|| format!("cannot replace {}", dest.display()))?;
    }
    std::fs::rename(&staged, dest).with_context(|| format!("cannot move the golden run into {}", dest.display()))?;
    Ok(())
}
