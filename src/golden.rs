//! Stored golden runs: the reference model's outputs on fixed inputs, with the SHA-256 of the model
//! and of every tensor, so a later audit can use them without the reference model and can tell
//! when anything changed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::hash::{copy_and_hash, sha256_file};
use crate::inputs::{InputProvenance, InputSet, NamedTensor};
use crate::model::load::ExternalFile;
use crate::model::Signature;
use crate::tensor::{read_npy_header, DType, Tensor};
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
    /// The model's external data files, which its own hash does not cover.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_data: Vec<ExternalFile>,
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
        let names = |entries: &[TensorEntry]| entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        let (first_inputs, first_outputs) = (names(&manifest.samples[0].inputs), names(&manifest.samples[0].outputs));
        for (k, sample) in manifest.samples.iter().enumerate() {
            if names(&sample.inputs) != first_inputs || names(&sample.outputs) != first_outputs {
                return Err(usage(format!(
                    "--golden {shown}: sample {k} lists other tensors than sample 0; the manifest is inconsistent"
                )));
            }
            for entry in sample.inputs.iter().chain(&sample.outputs) {
                let rel = Path::new(&entry.file);
                let inside = rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
                if !inside {
                    return Err(usage(format!(
                        "--golden {shown}: {} points outside the golden directory",
                        entry.file
                    )));
                }
                let path = dir.join(rel);
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
                let (dtype, shape) = read_npy_header(&path).map_err(|e| usage(format!("--golden {shown}: {e:#}")))?;
                if dtype != entry.dtype || shape != entry.shape {
                    return Err(usage(format!(
                        "--golden {shown}: {} holds {dtype} {shape:?}, the manifest says {} {:?}",
                        entry.file, entry.dtype, entry.shape
                    )));
                }
            }
        }
        Ok(Golden {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The stored inputs, checked against the model they will be fed to.
    pub fn inputs(&self, sig: &Signature) -> Result<InputSet> {
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
        let provenance = InputProvenance {
            source: "golden".into(),
            samples: samples.len(),
            generators: vec![],
            seed: None,
            files: vec![self.dir.display().to_string()],
        };
        InputSet::for_model(sig, samples, provenance)
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

/// Copies one tensor file into the golden directory, hashing it on the way.
fn copy_entry(from: &TensorFile<'_>, dir: &Path, rel: String) -> Result<TensorEntry> {
    let dest = dir.join(&rel);
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let reader = std::fs::File::open(from.path).with_context(|| format!("cannot open {}", from.path.display()))?;
    let writer = std::fs::File::create(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let (_, sha256) = copy_and_hash(std::io::BufReader::new(reader), std::io::BufWriter::new(writer))
        .with_context(|| format!("cannot write {}", dest.display()))?;
    let (dtype, shape) = read_npy_header(&dest)?;
    Ok(TensorEntry {
        name: from.name.to_string(),
        file: rel,
        dtype,
        shape,
        sha256,
    })
}

/// A tensor file and its name, whichever side (input or output) it comes from.
struct TensorFile<'a> {
    name: &'a str,
    path: &'a Path,
}

/// Checks where a golden run may be written and returns the absolute path to write to. A path
/// that exists must be an empty directory or, with `force`, an earlier golden run; the current
/// directory and its ancestors are never replaced.
pub fn check_destination(dest: &Path, force: bool) -> Result<PathBuf> {
    let shown = dest.display();
    let absolute = if dest.exists() {
        dest.canonicalize()
            .map_err(|e| usage(format!("cannot resolve {shown}: {e}")))?
    } else {
        let name = dest
            .file_name()
            .ok_or_else(|| usage(format!("{shown} is not a directory name")))?;
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| usage(format!("cannot create {}: {e}", parent.display())))?;
        parent
            .canonicalize()
            .map_err(|e| usage(format!("cannot resolve {}: {e}", parent.display())))?
            .join(name)
    };
    if let Ok(cwd) = std::env::current_dir().and_then(|c| c.canonicalize()) {
        if cwd.starts_with(&absolute) {
            return Err(usage(format!(
                "{shown} is the current directory or one of its parents; choose a new directory"
            )));
        }
    }
    if absolute.is_file() {
        return Err(usage(format!("{shown} is a file, not a golden directory")));
    }
    if absolute.is_dir() {
        let empty = absolute.read_dir().map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty {
            if !force {
                return Err(usage(format!("{shown} already exists; pass --force to replace it")));
            }
            let is_golden = std::fs::read(absolute.join("manifest.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok())
                .is_some();
            if !is_golden {
                return Err(usage(format!(
                    "{shown} is not a golden run (no golden manifest.json); refusing to replace it"
                )));
            }
        }
    }
    Ok(absolute)
}

/// Writes a golden directory: into a temporary sibling first, moved into place when complete, so
/// a failure never leaves a half-written golden run and never removes the previous one early.
pub fn write(dest: &Path, g: GoldenWrite<'_>, force: bool) -> Result<()> {
    let dest = check_destination(dest, force)?;
    let parent = dest
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let staging =
        tempfile::tempdir_in(&parent).map_err(|e| usage(format!("cannot write into {}: {e}", parent.display())))?;
    let mut samples = Vec::new();
    for (k, (ins, outs)) in g.inputs.iter().zip(g.outputs).enumerate() {
        let inputs = ins
            .iter()
            .enumerate()
            .map(|(i, f)| {
                copy_entry(
                    &TensorFile {
                        name: &f.name,
                        path: &f.path,
                    },
                    staging.path(),
                    format!("inputs/s{k}/i{i}.npy"),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let outputs = outs
            .iter()
            .enumerate()
            .map(|(o, f)| {
                copy_entry(
                    &TensorFile {
                        name: &f.name,
                        path: &f.path,
                    },
                    staging.path(),
                    format!("outputs/s{k}/o{o}.npy"),
                )
            })
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
            external_data: g.reference.external_data_hashes()?,
        },
        runtime: g.runtime,
        input_spec: g.input_spec,
        samples,
    };
    std::fs::write(
        staging.path().join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    // Until the new run is in place, `staging` still removes it on any error.
    if dest.exists() {
        // Move the old run aside first; only once the new one is in place is the old one removed,
        // and if moving the new one in fails, the old one goes back.
        let old = parent.join(format!(".golden-old-{}", std::process::id()));
        std::fs::rename(&dest, &old).with_context(|| format!("cannot move {} aside", dest.display()))?;
        if let Err(e) = std::fs::rename(staging.path(), &dest) {
            let _ = std::fs::rename(&old, &dest);
            return Err(e).with_context(|| format!("cannot move the golden run into {}", dest.display()));
        }
        let _ = staging.keep();
        std::fs::remove_dir_all(&old).with_context(|| format!("cannot remove the previous run {}", old.display()))?;
    } else {
        std::fs::rename(staging.path(), &dest)
            .with_context(|| format!("cannot move the golden run into {}", dest.display()))?;
        let _ = staging.keep();
    }
    Ok(())
}
