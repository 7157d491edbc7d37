//! Stored golden runs: the reference model's outputs on fixed inputs, with the SHA-256 of the model
//! and of every tensor, so a later audit can use them without the reference model and can tell
//! when anything changed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::data::inputs::InputFile;
use crate::data::inputs::{InputProvenance, InputSet, NamedTensor};
use crate::data::model::load::ExternalFile;
use crate::data::model::Signature;
use crate::data::tensor::{read_npy_header, read_npz_entries, DType, Tensor};
use crate::execution::exec::OutputFile;
use crate::foundation::error::bad_golden;
use crate::foundation::hash::{copy_and_hash, sha256_file};

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

/// A file of a golden run that is not a single tensor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the golden directory.
    pub file: String,
    pub sha256: String,
}

/// The reference's per-layer activations (`golden create --layers`), which let a per-layer audit
/// against this golden run skip running the reference.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ActivationsEntry {
    /// A copy of the reference model (with its external data), whose graph the per-layer audit
    /// matches the audited model's layers against.
    pub reference_copy: String,
    /// One `.npz` per sample holding every float tensor the reference computes, by name.
    pub files: Vec<FileEntry>,
    /// Tensors per archive.
    pub tensors: usize,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activations: Option<ActivationsEntry>,
}

/// Checks a file named by the manifest: inside the directory, present, with its recorded hash.
fn verify_file(dir: &Path, file: &str, sha256: &str) -> Result<PathBuf> {
    let shown = dir.display();
    let rel = Path::new(file);
    let inside = rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside {
        return Err(bad_golden(format!(
            "--golden {shown}: {file} points outside the golden directory"
        )));
    }
    let path = dir.join(rel);
    match crate::foundation::userfile::regular_file(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad_golden(format!("--golden {shown}: {file} is missing")))
        }
        Err(e) => return Err(bad_golden(format!("--golden {shown}: {file} is {e}"))),
        Ok(()) => {}
    }
    let actual = sha256_file(&path)?;
    if actual != sha256 {
        return Err(bad_golden(format!(
            "--golden {shown}: {file} was altered (sha256 {actual}, the manifest says {sha256})"
        )));
    }
    Ok(path)
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
        let bytes = crate::foundation::userfile::regular_file(&manifest_path)
            .and_then(|_| crate::foundation::userfile::read_user_file(&manifest_path))
            .map_err(|e| bad_golden(format!("--golden {shown}: cannot read manifest.json: {e}")))?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| bad_golden(format!("--golden {shown}: manifest.json is not a golden manifest: {e}")))?;
        if manifest.schema_version != GOLDEN_SCHEMA_VERSION {
            return Err(bad_golden(format!(
                "--golden {shown}: manifest schema version {} is not the supported {GOLDEN_SCHEMA_VERSION}",
                manifest.schema_version
            )));
        }
        if manifest.samples.is_empty() {
            return Err(bad_golden(format!("--golden {shown}: the manifest lists no samples")));
        }
        let names = |entries: &[TensorEntry]| entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        let (first_inputs, first_outputs) = (names(&manifest.samples[0].inputs), names(&manifest.samples[0].outputs));
        for (what, list) in [("input", &first_inputs), ("output", &first_outputs)] {
            if let Some(twice) = list
                .iter()
                .enumerate()
                .find(|(i, n)| list[..*i].contains(n))
                .map(|(_, n)| n)
            {
                return Err(bad_golden(format!(
                    "--golden {shown}: the manifest lists {what} '{twice}' twice; tensors are matched by name"
                )));
            }
        }
        for (k, sample) in manifest.samples.iter().enumerate() {
            if names(&sample.inputs) != first_inputs || names(&sample.outputs) != first_outputs {
                return Err(bad_golden(format!(
                    "--golden {shown}: sample {k} lists other tensors than sample 0; the manifest is inconsistent"
                )));
            }
            for entry in sample.inputs.iter().chain(&sample.outputs) {
                let path = verify_file(dir, &entry.file, &entry.sha256)?;
                let (dtype, shape) =
                    read_npy_header(&path).map_err(|e| bad_golden(format!("--golden {shown}: {e:#}")))?;
                if dtype != entry.dtype || shape != entry.shape {
                    return Err(bad_golden(format!(
                        "--golden {shown}: {} holds {dtype} {shape:?}, the manifest says {} {:?}",
                        entry.file, entry.dtype, entry.shape
                    )));
                }
            }
        }
        if let Some(a) = &manifest.activations {
            if a.files.len() != manifest.samples.len() {
                return Err(bad_golden(format!(
                    "--golden {shown}: {} activation archives for {} samples; the manifest is inconsistent",
                    a.files.len(),
                    manifest.samples.len()
                )));
            }
            for f in &a.files {
                verify_file(dir, &f.file, &f.sha256)?;
            }
            let r = &manifest.reference_model;
            verify_file(dir, &a.reference_copy, &r.sha256)?;
            let copy_dir = Path::new(&a.reference_copy).parent().unwrap_or(Path::new(""));
            for x in &r.external_data {
                verify_file(dir, &copy_dir.join(&x.file).to_string_lossy(), &x.sha256)?;
            }
        }
        Ok(Golden {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The stored copy of the reference model, when the run stored activations.
    pub fn reference_copy(&self) -> Option<PathBuf> {
        self.manifest
            .activations
            .as_ref()
            .map(|a| self.dir.join(&a.reference_copy))
    }

    /// The named activations of one sample, unpacked into `.npy` files under `into` (only these
    /// are read from the archive); names the run did not store are left out.
    pub fn activations(&self, sample: usize, names: &[String], into: &Path) -> Result<Vec<OutputFile>> {
        let Some(entry) = self.manifest.activations.as_ref().and_then(|a| a.files.get(sample)) else {
            return Ok(Vec::new());
        };
        std::fs::create_dir_all(into)?;
        let tensors = read_npz_entries(&self.dir.join(&entry.file), names)?;
        let mut out = Vec::new();
        for (i, (name, tensor)) in tensors.into_iter().enumerate() {
            let path = into.join(format!("s{sample}-a{i}.npy"));
            tensor.write_npy(&path)?;
            out.push(OutputFile {
                name,
                dtype: tensor.dtype(),
                shape: tensor.shape.clone(),
                path,
            });
        }
        Ok(out)
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
    pub reference: &'a crate::data::model::LoadedModel,
    pub runtime: RuntimeEntry,
    pub input_spec: serde_json::Value,
    pub inputs: &'a [Vec<InputFile>],
    pub outputs: &'a [Vec<OutputFile>],
    /// Per sample, the tapped reference run's outputs: its float tensors become activations.
    pub activations: Option<&'a [Vec<OutputFile>]>,
}

/// Streams `.npy` files into one uncompressed `.npz` archive (each entry is the file's bytes),
/// so a sample's activations are never all in memory.
fn write_activations(path: &Path, files: &[&OutputFile]) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut zip = zip::ZipWriter::new(std::io::BufWriter::new(file));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    for f in files {
        zip.start_file(format!("{}.npy", f.name), options)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut reader = std::fs::File::open(&f.path).with_context(|| format!("cannot open {}", f.path.display()))?;
        std::io::copy(&mut reader, &mut zip).with_context(|| format!("cannot write {}", path.display()))?;
    }
    zip.finish()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Copies the reference model and its external data into `reference/`, and stores every float
/// activation per sample.
fn write_activation_store(
    staging: &Path,
    g: &GoldenWrite<'_>,
    samples: &[Vec<OutputFile>],
) -> Result<ActivationsEntry> {
    let model = g.reference;
    let name = model
        .path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "reference.onnx".into());
    let copy_dir = staging.join("reference");
    std::fs::create_dir_all(&copy_dir)?;
    std::fs::copy(&model.path, copy_dir.join(&name))
        .with_context(|| format!("cannot copy {}", model.path.display()))?;
    let source_dir = model.path.parent().unwrap_or(Path::new("."));
    for x in model.external_data_files() {
        let dest = copy_dir.join(&x);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(source_dir.join(&x), &dest).with_context(|| format!("cannot copy {x}"))?;
    }
    std::fs::create_dir_all(staging.join("layers"))?;
    let mut files = Vec::new();
    let mut tensors = 0;
    for (k, outs) in samples.iter().enumerate() {
        let floats: Vec<&OutputFile> = outs.iter().filter(|f| f.dtype.is_float()).collect();
        tensors = floats.len();
        let rel = format!("layers/s{k}.npz");
        let path = staging.join(&rel);
        write_activations(&path, &floats)?;
        files.push(FileEntry {
            file: rel,
            sha256: sha256_file(&path)?,
        });
    }
    Ok(ActivationsEntry {
        reference_copy: format!("reference/{name}"),
        files,
        tensors,
    })
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
    if std::fs::symlink_metadata(dest).is_ok() && !dest.exists() {
        return Err(bad_golden(format!(
            "{shown} is a symbolic link to a missing directory; name the directory itself"
        )));
    }
    let absolute = if dest.exists() {
        dest.canonicalize()
            .map_err(|e| bad_golden(format!("cannot resolve {shown}: {e}")))?
    } else {
        let name = dest
            .file_name()
            .ok_or_else(|| bad_golden(format!("{shown} is not a directory name")))?;
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| bad_golden(format!("cannot create {}: {e}", parent.display())))?;
        parent
            .canonicalize()
            .map_err(|e| bad_golden(format!("cannot resolve {}: {e}", parent.display())))?
            .join(name)
    };
    if let Ok(cwd) = std::env::current_dir().and_then(|c| c.canonicalize()) {
        if cwd.starts_with(&absolute) {
            return Err(bad_golden(format!(
                "{shown} is the current directory or one of its parents; choose a new directory"
            )));
        }
    }
    if let Ok(meta) = std::fs::metadata(&absolute) {
        if !meta.is_dir() {
            let kind = if meta.is_file() {
                "a file"
            } else {
                crate::foundation::userfile::kind_of(&meta)
            };
            return Err(bad_golden(format!("{shown} is {kind}, not a golden directory")));
        }
    }
    if absolute.is_dir() {
        let empty = absolute.read_dir().map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty {
            if !force {
                return Err(bad_golden(format!(
                    "{shown} already exists; pass --force to replace it"
                )));
            }
            let manifest = std::fs::read(absolute.join("manifest.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok());
            let Some(manifest) = manifest else {
                return Err(bad_golden(format!(
                    "{shown} is not a golden run (no golden manifest.json); refusing to replace it"
                )));
            };
            if let Some(stranger) = unrelated_files(&absolute, &manifest).first() {
                return Err(bad_golden(format!(
                    "{shown} holds {}, which is not part of its golden run; refusing to replace it (move it out, or write the golden run elsewhere)",
                    stranger.display()
                )));
            }
        }
    }
    Ok(absolute)
}

/// The files and links under a golden directory that its manifest does not account for (the
/// manifest itself, every input and output it lists, the activation archives, and the reference
/// copy's directory): what replacing the directory would delete besides the golden run.
fn unrelated_files(dir: &Path, manifest: &Manifest) -> Vec<PathBuf> {
    let mut own: Vec<PathBuf> = vec![dir.join("manifest.json")];
    for sample in &manifest.samples {
        own.extend(sample.inputs.iter().chain(&sample.outputs).map(|e| dir.join(&e.file)));
    }
    let mut own_dirs: Vec<PathBuf> = Vec::new();
    if let Some(a) = &manifest.activations {
        own.extend(a.files.iter().map(|f| dir.join(&f.file)));
        if let Some(copy_dir) = Path::new(&a.reference_copy)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            own_dirs.push(dir.join(copy_dir));
        }
    }
    let mut strangers = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if own_dirs.iter().any(|o| path.starts_with(o)) {
                continue;
            }
            if is_dir {
                stack.push(path);
            } else if !own.contains(&path) {
                strangers.push(path);
            }
        }
    }
    strangers.sort();
    strangers
}

/// Refuses a destination that holds one of the run's inputs (the model, its external data, an
/// inputs file): replacing the directory would delete them.
pub fn check_inputs_outside(dest: &Path, inputs: &[PathBuf]) -> Result<()> {
    let Ok(dest_real) = dest.canonicalize() else {
        return Ok(());
    };
    for input in inputs {
        if input.canonicalize().is_ok_and(|p| p.starts_with(&dest_real)) {
            return Err(bad_golden(format!(
                "{} holds {}, an input of this run; write the golden run to another directory",
                dest.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Writes a golden directory: into a temporary sibling first, moved into place when complete, so
/// a failure never leaves a half-written golden run and never removes the previous one early.
pub fn write(dest: &Path, g: GoldenWrite<'_>, force: bool) -> Result<()> {
    let dest = check_destination(dest, force)?;
    let parent = dest
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let staging = tempfile::tempdir_in(&parent)
        .map_err(|e| bad_golden(format!("cannot write into {}: {e}", parent.display())))?;
    let samples = stage_samples(staging.path(), &g)?;
    let activations = match g.activations {
        Some(samples) => Some(write_activation_store(staging.path(), &g, samples)?),
        None => None,
    };
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
        activations,
    };
    std::fs::write(
        staging.path().join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    move_into_place(staging, &dest, &parent)
}

/// Copies every sample's inputs and outputs into the staging directory.
fn stage_samples(staging: &Path, g: &GoldenWrite<'_>) -> Result<Vec<SampleEntry>> {
    let copy = |name: &str, path: &Path, rel: String| copy_entry(&TensorFile { name, path }, staging, rel);
    let mut samples = Vec::new();
    for (k, (ins, outs)) in g.inputs.iter().zip(g.outputs).enumerate() {
        let inputs = ins
            .iter()
            .enumerate()
            .map(|(i, f)| copy(&f.name, &f.path, format!("inputs/s{k}/i{i}.npy")))
            .collect::<Result<Vec<_>>>()?;
        let outputs = outs
            .iter()
            .enumerate()
            .map(|(o, f)| copy(&f.name, &f.path, format!("outputs/s{k}/o{o}.npy")))
            .collect::<Result<Vec<_>>>()?;
        samples.push(SampleEntry { inputs, outputs });
    }
    Ok(samples)
}

/// Moves the complete staging directory to `dest`. An existing run is moved aside first and
/// removed only once the new one is in place; if moving the new one in fails, it goes back.
fn move_into_place(staging: tempfile::TempDir, dest: &Path, parent: &Path) -> Result<()> {
    // Until the new run is in place, `staging` still removes it on any error.
    if dest.exists() {
        let old = parent.join(format!(".golden-old-{}", std::process::id()));
        std::fs::rename(dest, &old).with_context(|| format!("cannot move {} aside", dest.display()))?;
        if let Err(e) = std::fs::rename(staging.path(), dest) {
            let _ = std::fs::rename(&old, dest);
            return Err(e).with_context(|| format!("cannot move the golden run into {}", dest.display()));
        }
        let _ = staging.keep();
        std::fs::remove_dir_all(&old).with_context(|| format!("cannot remove the previous run {}", old.display()))?;
    } else {
        std::fs::rename(staging.path(), dest)
            .with_context(|| format!("cannot move the golden run into {}", dest.display()))?;
        let _ = staging.keep();
    }
    Ok(())
}
