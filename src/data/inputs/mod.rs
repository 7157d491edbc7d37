//! The inputs every target of one audit is fed: loaded from `.npz`/`.npy` files or generated, then
//! checked against the model's signature before anything runs.

pub mod generate;
pub mod prng;
pub mod sequence;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

pub use generate::GenSpec;

use crate::data::model::{Dim, Signature, TensorInfo};
use crate::data::tensor::{checked_len, read_npz_bytes_checked, read_npz_checked, DType, Tensor, MAX_ELEMENTS};
use crate::foundation::error::bad_input;

/// One input tensor of one sample, stored as `.npy`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InputFile {
    pub name: String,
    pub path: PathBuf,
}

/// `--input NAME=FILE.npy`: one input of every sample, from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedFile {
    pub name: String,
    pub path: PathBuf,
}

impl NamedFile {
    /// Parses `NAME=FILE.npy`.
    pub fn parse(text: &str) -> Result<NamedFile> {
        match text.split_once('=') {
            Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok(NamedFile {
                name: name.into(),
                path: path.into(),
            }),
            _ => Err(bad_input(format!("'{text}' is not NAME=FILE.npy"))),
        }
    }
}

impl std::fmt::Display for NamedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.name, self.path.display())
    }
}

/// `--gen`, parsed: the input it is for (`None`: every input no file gives) and the generator.
#[derive(Debug, Clone, PartialEq)]
pub struct GenChoice {
    pub input: Option<String>,
    pub spec: GenSpec,
}

impl GenChoice {
    /// Parses `SPEC` or `NAME=SPEC`.
    pub fn parse(text: &str) -> Result<GenChoice> {
        match text.split_once('=') {
            Some((name, spec)) if !name.is_empty() => Ok(GenChoice {
                input: Some(name.into()),
                spec: GenSpec::parse(spec)?,
            }),
            Some(_) => Err(bad_input(format!("--gen '{text}' is not SPEC or NAME=SPEC"))),
            None => Ok(GenChoice {
                input: None,
                spec: GenSpec::parse(text)?,
            }),
        }
    }
}

impl std::fmt::Display for GenChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.input {
            Some(name) => write!(f, "{name}={}", self.spec),
            None => write!(f, "{}", self.spec),
        }
    }
}

/// `--input-shape NAME:D0,D1,...`: the shape one input is fed with (its dynamic dimensions
/// pinned).
#[derive(Debug, Clone, PartialEq)]
pub struct ShapePin {
    pub name: String,
    pub dims: Vec<usize>,
}

impl ShapePin {
    /// Parses `NAME:D0,D1,...`.
    pub fn parse(text: &str) -> Result<ShapePin> {
        let (name, dims) = text
            .rsplit_once(':')
            .filter(|(n, _)| !n.is_empty())
            .ok_or_else(|| bad_input(format!("'{text}' is not NAME:D0,D1,... (e.g. image:1,3,224,224)")))?;
        let dims: Vec<usize> = dims
            .split(',')
            .map(|d| d.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad_input(format!("'{text}': dimensions must be non-negative integers")))?;
        if checked_len(&dims).is_none() {
            return Err(bad_input(format!(
                "'{text}': more than {MAX_ELEMENTS} elements per input"
            )));
        }
        Ok(ShapePin {
            name: name.into(),
            dims,
        })
    }
}

impl std::fmt::Display for ShapePin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(usize::to_string).collect();
        write!(f, "{}:{}", self.name, dims.join(","))
    }
}

/// Samples already in memory (a pipeline stage's upstream outputs, the inputs a device report
/// was fed), loaded as `--inputs` files would be: one sample each, checked against the model.
#[derive(Debug, Clone, Default)]
pub struct MemoryInputs {
    /// What they are, for the report's provenance (`stage detect outputs`).
    pub label: String,
    pub samples: Vec<Vec<(String, Tensor)>>,
}

/// Where an audit's inputs come from: files, generators, or samples in memory.
#[derive(Debug, Clone, Default)]
pub struct InputOptions {
    /// `--inputs FILE.npz`, one sample each.
    pub npz: Vec<PathBuf>,
    /// `--input NAME=FILE.npy`.
    pub npy: Vec<NamedFile>,
    /// `--gen SPEC` or `--gen NAME=SPEC`.
    pub gen: Vec<GenChoice>,
    pub seed: u64,
    pub samples: usize,
    /// `--input-shape NAME:D0,D1,...`.
    pub shapes: Vec<ShapePin>,
    /// Samples given in memory instead of files.
    pub memory: Option<MemoryInputs>,
    /// A stream's `--chunk NAME=FILE.npy[:hop=H]`: one window per step.
    pub chunks: Vec<sequence::ChunkSpec>,
    /// A stream's `--sequence FILE.npz`: every member stacked over the steps.
    pub sequence: Option<PathBuf>,
    /// A stream's `--steps`: the windows or steps taken from `chunks` and `sequence`.
    pub steps: Option<usize>,
    /// Inputs that start as zeros when no file or per-input generator gives them (a stream's
    /// fed-back state, whose first value an app sets to zeros).
    pub zero_default: Vec<String>,
}

impl InputOptions {
    /// Whether any input flag was given (a stored golden run brings its own inputs).
    pub fn any_given(&self) -> bool {
        let InputOptions {
            npz,
            npy,
            gen,
            seed,
            samples,
            shapes,
            memory,
            chunks,
            sequence,
            steps,
            zero_default: _,
        } = self;
        !npz.is_empty()
            || !npy.is_empty()
            || !gen.is_empty()
            || !shapes.is_empty()
            || memory.is_some()
            || !chunks.is_empty()
            || sequence.is_some()
            || steps.is_some()
            || *samples > 1
            || *seed != 0
    }
}

impl crate::foundation::userfile::Reads for InputOptions {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        let InputOptions {
            npz,
            npy,
            gen: _,
            seed: _,
            samples: _,
            shapes: _,
            memory: _,
            chunks,
            sequence,
            steps: _,
            zero_default: _,
        } = self;
        set.add_all(npz);
        set.add_all(npy.iter().map(|f| &f.path));
        set.add_all(chunks.iter().map(|c| &c.file));
        set.add_all(sequence);
    }
}

/// One input of one sample.
#[derive(Debug, Clone)]
pub struct NamedTensor {
    pub name: String,
    pub tensor: Tensor,
}

/// Where the inputs came from, for reports.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InputProvenance {
    /// `files`, `generated`, `mixed` or `golden`.
    pub source: String,
    /// Samples fed to every target.
    pub samples: usize,
    /// Generator per generated input, e.g. `image=uniform:-1,1`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generators: Vec<String>,
    /// The generator's seed, when an input was generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The `--inputs`/`--input` files, when inputs came from files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// Inputs for every sample, in the model's input order.
#[derive(Debug, Clone)]
pub struct InputSet {
    pub samples: Vec<Vec<NamedTensor>>,
    pub provenance: InputProvenance,
    /// Values of symbolic dimensions (`dim_param`) fixed by these inputs.
    pub free_dims: Vec<(String, i64)>,
    /// A stream's fed-back inputs, whose shape may change from step to step (a KV cache): they
    /// keep their open dimensions.
    pub growing: Vec<String>,
}

/// The `--input-shape` pins, checked against the model's inputs and declared shapes.
fn parse_shape_flags(pins: &[ShapePin], sig: &Signature) -> Result<HashMap<String, Vec<usize>>> {
    let mut out = HashMap::new();
    for pin in pins {
        let Some(info) = sig.inputs.iter().find(|i| i.name == pin.name) else {
            return Err(bad_input(format!(
                "--input-shape '{pin}': the model has no input '{}' (inputs: {})",
                pin.name,
                sig.input_names()
            )));
        };
        if let Some(declared) = &info.dims {
            let fits = declared.len() == pin.dims.len()
                && declared
                    .iter()
                    .zip(&pin.dims)
                    .all(|(d, n)| !matches!(d, Dim::Fixed(f) if f != n));
            if !fits {
                return Err(bad_input(format!(
                    "--input-shape '{pin}' conflicts with the model's declared shape {}",
                    info.shape_text()
                )));
            }
        }
        if out.insert(pin.name.clone(), pin.dims.clone()).is_some() {
            return Err(bad_input(format!("--input-shape gives input '{}' twice", pin.name)));
        }
    }
    Ok(out)
}

/// The `--gen` choices as a default and per-input generators, checked against the model.
fn parse_gen_flags(flags: &[GenChoice], sig: &Signature) -> Result<(Option<GenSpec>, HashMap<String, GenSpec>)> {
    let mut default = None;
    let mut per_input = HashMap::new();
    for f in flags {
        match &f.input {
            Some(name) if sig.inputs.iter().any(|i| &i.name == name) => {
                if per_input.insert(name.clone(), f.spec).is_some() {
                    return Err(bad_input(format!("--gen gives input '{name}' twice")));
                }
            }
            Some(name) => {
                return Err(bad_input(format!(
                    "--gen '{name}={}': the model has no input '{name}' (inputs: {})",
                    f.spec,
                    sig.input_names()
                )))
            }
            None => {
                if default.replace(f.spec).is_some() {
                    return Err(bad_input("--gen without an input name is given twice"));
                }
            }
        }
    }
    Ok((default, per_input))
}

/// The shape to generate for an input: `--input-shape`, else the declared shape with dynamic
/// dimensions set to 1.
fn generation_shape(info: &TensorInfo, pinned: Option<&Vec<usize>>) -> Result<Vec<usize>> {
    if let Some(p) = pinned {
        return Ok(p.clone());
    }
    let Some(dims) = &info.dims else {
        return Err(bad_input(format!(
            "input '{}' declares no shape; give one with --input-shape {}:D0,D1,...",
            info.name, info.name
        )));
    };
    let dynamic: Vec<String> = dims
        .iter()
        .filter(|d| matches!(d, Dim::Dynamic(_)))
        .map(|d| d.to_string())
        .collect();
    refuse_degenerate_image(info, dims)?;
    if !dynamic.is_empty() {
        crate::foundation::console::note(format!(
            "input '{}' {} has dynamic dimensions ({}); generating with 1 for each. Pin them with --input-shape {}:...",
            info.name,
            info.shape_text(),
            dynamic.join(", "),
            info.name
        ));
    }
    let shape: Vec<usize> = dims
        .iter()
        .map(|d| if let Dim::Fixed(n) = d { *n } else { 1 })
        .collect();
    if checked_len(&shape).is_none() {
        return Err(bad_input(format!(
            "input '{}' {} has more than {MAX_ELEMENTS} elements",
            info.name,
            info.shape_text()
        )));
    }
    Ok(shape)
}

/// Refuses to generate an image whose height or width is dynamic: set to 1 it would be a 1x1
/// image the model was never meant to see, and every figure, recommendation and gate made from
/// it would be about that. Other dynamic dimensions (a batch, a sequence, a cache's length) are
/// set to 1 with a note.
fn refuse_degenerate_image(info: &TensorInfo, dims: &[Dim]) -> Result<()> {
    let Some(labels) = image_layout(info, dims) else {
        return Ok(());
    };
    let spatial_dynamic = dims
        .iter()
        .zip(&labels)
        .any(|(d, l)| matches!(d, Dim::Dynamic(_)) && matches!(*l, "D" | "H" | "W"));
    if !spatial_dynamic {
        return Ok(());
    }
    let pin: Vec<String> = dims
        .iter()
        .zip(&labels)
        .map(|(d, l)| match (d, *l) {
            (Dim::Fixed(n), _) => n.to_string(),
            (Dim::Dynamic(_), "N") => "1".to_string(),
            (Dim::Dynamic(_), l) => l.to_string(),
        })
        .collect();
    Err(bad_input(format!(
        "input '{}' {} is an image with a dynamic height or width: generated with 1 it would be a 1x1 image the model never sees; pin its shape with --input-shape {}:{} or give real inputs with --inputs",
        info.name,
        info.shape_text(),
        info.name,
        pin.join(",")
    )))
}

/// The axis names of an input that looks like an image (N, C, D, H, W), or `None`: a float input
/// of rank 4 or 5 with its channels (1 to 4) first (NCHW) or last (NHWC), or with every
/// dimension dynamic; never one named as a state, cache or mask (a key/value cache
/// `[batch, heads, past, head_dim]` has the same rank).
fn image_layout(info: &TensorInfo, dims: &[Dim]) -> Option<Vec<&'static str>> {
    const STATE_WORDS: &[&str] = &["past", "present", "cache", "state", "mask", "hidden", "key", "value"];
    let name = info.name.to_ascii_lowercase();
    if !info.dtype.is_float() || !(4..=5).contains(&dims.len()) || STATE_WORDS.iter().any(|w| name.contains(w)) {
        return None;
    }
    let channels = |d: &Dim| matches!(d, Dim::Fixed(1..=4));
    let all_dynamic = dims[1..].iter().all(|d| matches!(d, Dim::Dynamic(_)));
    let spatial: &[&'static str] = if dims.len() == 5 { &["D", "H", "W"] } else { &["H", "W"] };
    let mut labels = vec!["N"];
    if channels(&dims[1]) || all_dynamic {
        labels.push("C");
        labels.extend(spatial);
    } else if dims.last().is_some_and(channels) {
        labels.extend(spatial);
        labels.push("C");
    } else {
        return None;
    }
    Some(labels)
}

/// Tensors given as files: per `--inputs` archive (one sample each), and per `--input`.
struct FileInputs {
    samples: Vec<HashMap<String, Tensor>>,
    per_input: HashMap<String, Tensor>,
    /// The files, for the report.
    files: Vec<String>,
}

/// Reads `--inputs` and `--input` files, refusing arrays the model does not take and inputs
/// given twice.
fn load_files(sig: &Signature, opts: &InputOptions, pinned: &HashMap<String, Vec<usize>>) -> Result<FileInputs> {
    let mut samples: Vec<HashMap<String, Tensor>> = Vec::new();
    let mut files = Vec::new();
    if opts
        .npz
        .iter()
        .filter(|p| crate::foundation::userfile::is_stdio(p))
        .count()
        > 1
    {
        return Err(bad_input("--inputs - (standard input) can be given once"));
    }
    // Each array is checked against the model from its header, before its data is inflated.
    let check = |name: &str, dtype: DType, shape: &[usize]| -> Result<()> {
        let info = sig
            .inputs
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| bad_input(format!("not an input of the model (inputs: {})", sig.input_names())))?;
        check_declared(info, dtype, shape, pinned.get(name))
    };
    for path in &opts.npz {
        let arrays = if crate::foundation::userfile::is_stdio(path) {
            crate::foundation::userfile::read_user_file(path)
                .map_err(anyhow::Error::from)
                .and_then(|bytes| read_npz_bytes_checked(bytes, &check))
        } else {
            read_npz_checked(path, &check)
        }
        .map_err(|e| bad_input(format!("--inputs {}: {e:#}", crate::foundation::userfile::shown(path))))?;
        files.push(path.display().to_string());
        samples.push(arrays.into_iter().collect());
    }
    if let Some(memory) = &opts.memory {
        for sample in &memory.samples {
            for (name, t) in sample {
                check(name, t.dtype(), &t.shape)
                    .map_err(|e| bad_input(format!("{}: '{name}': {e:#}", memory.label)))?;
            }
            samples.push(sample.iter().cloned().collect());
        }
        files.push(memory.label.clone());
    }
    let mut per_input: HashMap<String, Tensor> = HashMap::new();
    for f in &opts.npy {
        let name = f.name.as_str();
        if !sig.inputs.iter().any(|i| i.name == name) {
            return Err(bad_input(format!(
                "--input '{f}': the model has no input '{name}' (inputs: {})",
                sig.input_names()
            )));
        }
        let t = Tensor::read_npy(&f.path).map_err(|e| bad_input(format!("--input {f}: {e:#}")))?;
        files.push(f.path.display().to_string());
        if samples.iter().any(|s| s.contains_key(name)) || per_input.insert(name.to_string(), t).is_some() {
            return Err(bad_input(format!(
                "input '{name}' is given twice (--inputs and --input, or --input twice)"
            )));
        }
    }
    stream_files(sig, opts, pinned, &mut samples, &mut files)?;
    Ok(FileInputs {
        samples,
        per_input,
        files,
    })
}

/// A stream's `--sequence` and `--chunk` files, one sample per step: they are the samples
/// (`--sequence` cannot be combined with `--inputs`), or join the `--inputs` samples step by
/// step when their counts agree.
fn stream_files(
    sig: &Signature,
    opts: &InputOptions,
    pinned: &HashMap<String, Vec<usize>>,
    samples: &mut Vec<HashMap<String, Tensor>>,
    files: &mut Vec<String>,
) -> Result<()> {
    if let Some(path) = &opts.sequence {
        if !samples.is_empty() {
            return Err(bad_input("--sequence holds every step: drop --inputs"));
        }
        *samples = sequence::sequence(path, sig, pinned, (opts.steps, &opts.zero_default))?;
        files.push(path.display().to_string());
    }
    for spec in &opts.chunks {
        let text = format!("{}={}", spec.input, spec.file.display());
        let info = sig.inputs.iter().find(|i| i.name == spec.input).ok_or_else(|| {
            bad_input(format!(
                "--chunk '{text}': the model has no input '{}' (inputs: {})",
                spec.input,
                sig.input_names()
            ))
        })?;
        let windows = sequence::chunk(spec, info, pinned.get(&spec.input), opts.steps)?;
        files.push(spec.file.display().to_string());
        if samples.is_empty() {
            samples.resize_with(windows.len(), HashMap::new);
        }
        if samples.len() != windows.len() {
            return Err(bad_input(format!(
                "--chunk '{text}' gives {} steps but the other step files give {}",
                windows.len(),
                samples.len()
            )));
        }
        for (step, window) in samples.iter_mut().zip(windows) {
            if step.insert(spec.input.clone(), window).is_some() {
                return Err(bad_input(format!("input '{}' is given twice", spec.input)));
            }
        }
    }
    Ok(())
}

/// How one input of every sample is produced: from the files, or by a generator at a shape.
type Recipe = Option<(GenSpec, Vec<usize>)>;

/// Loads or generates the inputs and checks them against `sig`.
pub fn prepare(sig: &Signature, opts: &InputOptions) -> Result<InputSet> {
    let shapes = parse_shape_flags(&opts.shapes, sig)?;
    let (default_gen, per_input_gen) = parse_gen_flags(&opts.gen, sig)?;
    let loaded = load_files(sig, opts, &shapes)?;
    let from_files =
        |name: &str| loaded.per_input.contains_key(name) || loaded.samples.iter().any(|s| s.contains_key(name));
    if let Some(name) = per_input_gen.keys().find(|n| from_files(n)) {
        return Err(bad_input(format!(
            "--gen {name}=... but input '{name}' comes from a file"
        )));
    }
    if default_gen.is_some() && !sig.inputs.is_empty() && sig.inputs.iter().all(|i| from_files(&i.name)) {
        return Err(bad_input("--gen is given but every input comes from a file"));
    }
    let n_samples = sample_count(&loaded, opts)?;
    let mut generators = Vec::new();
    let mut recipes: Vec<Recipe> = Vec::with_capacity(sig.inputs.len());
    for info in &sig.inputs {
        let recipe = recipe(
            sig,
            info,
            &loaded,
            (default_gen, &per_input_gen),
            &shapes,
            &opts.zero_default,
        )?;
        if let Some((spec, _)) = &recipe {
            generators.push(format!("{}={spec}", info.name));
        }
        recipes.push(recipe);
    }
    let samples = (0..n_samples)
        .map(|k| {
            crate::foundation::interrupt::check()?;
            build_sample(sig, k, &recipes, &loaded, &shapes, opts.seed)
        })
        .collect::<Result<Vec<_>>>()?;
    let any_files = !loaded.files.is_empty();
    let source = match (any_files, generators.is_empty()) {
        (true, true) => "files",
        (true, false) => "mixed",
        _ => "generated",
    };
    let provenance = InputProvenance {
        source: source.into(),
        samples: n_samples,
        seed: (!generators.is_empty()).then_some(opts.seed),
        generators,
        files: loaded.files,
    };
    InputSet::for_model(sig, samples, provenance)
}

/// Samples: one per `--inputs` file, else `--samples`.
fn sample_count(loaded: &FileInputs, opts: &InputOptions) -> Result<usize> {
    if loaded.samples.is_empty() {
        return Ok(opts.samples.max(1));
    }
    if opts.samples > 1 && opts.samples != loaded.samples.len() {
        return Err(bad_input(format!(
            "--samples {} disagrees with the {} --inputs files given (each file is one sample)",
            opts.samples,
            loaded.samples.len()
        )));
    }
    Ok(loaded.samples.len())
}

/// How input `info` is produced: from the files (`None`), or a generator and a shape.
fn recipe(
    sig: &Signature,
    info: &TensorInfo,
    loaded: &FileInputs,
    (default_gen, per_input_gen): (Option<GenSpec>, &HashMap<String, GenSpec>),
    shapes: &HashMap<String, Vec<usize>>,
    zero_default: &[String],
) -> Result<Recipe> {
    let in_every_file = loaded.per_input.contains_key(&info.name)
        || (!loaded.samples.is_empty() && loaded.samples.iter().all(|s| s.contains_key(&info.name)));
    if in_every_file {
        return Ok(None);
    }
    if loaded.samples.iter().any(|s| s.contains_key(&info.name)) {
        return Err(bad_input(format!(
            "input '{}' is in some --inputs files but not in others",
            info.name
        )));
    }
    let spec = match (per_input_gen.get(&info.name), default_gen, !loaded.files.is_empty()) {
        (Some(s), _, _) => *s,
        (None, _, _) if zero_default.contains(&info.name) => GenSpec::ZEROS,
        (None, Some(s), _) => s,
        (None, None, false) => GenSpec::DEFAULT,
        (None, None, true) => {
            let sample = loaded.samples.iter().find(|s| !s.contains_key(&info.name));
            return Err(bad_input(format!(
                "input '{}' is not given: the files supply {} but the model takes {}; add it to the files or generate it with --gen {}=SPEC",
                info.name,
                supplied_names(sample, &loaded.per_input),
                sig.input_names(),
                info.name
            )));
        }
    };
    spec.check_for(info.dtype)
        .map_err(|e| bad_input(format!("--gen for input '{}': {e}", info.name)))?;
    let shape = generation_shape(info, shapes.get(&info.name))?;
    Ok(Some((spec, shape)))
}

/// Sample `k`: every input generated or taken from the files, and checked.
fn build_sample(
    sig: &Signature,
    k: usize,
    recipes: &[Recipe],
    loaded: &FileInputs,
    shapes: &HashMap<String, Vec<usize>>,
    seed: u64,
) -> Result<Vec<NamedTensor>> {
    let mut sample = Vec::with_capacity(sig.inputs.len());
    for (i, (info, recipe)) in sig.inputs.iter().zip(recipes).enumerate() {
        let tensor = match recipe {
            Some((spec, shape)) => spec.generate(info.dtype, shape, seed, k as u64, i as u64),
            None => loaded
                .samples
                .get(k)
                .and_then(|s| s.get(&info.name))
                .or_else(|| loaded.per_input.get(&info.name))
                .cloned()
                .ok_or_else(|| bad_input(format!("input '{}' is missing from sample {k}", info.name)))?,
        };
        check_tensor(info, &tensor, shapes.get(&info.name))?;
        sample.push(NamedTensor {
            name: info.name.clone(),
            tensor,
        });
    }
    Ok(sample)
}

fn supplied_names(sample: Option<&HashMap<String, Tensor>>, per_input: &HashMap<String, Tensor>) -> String {
    let mut names: Vec<&str> = sample
        .map(|s| s.keys().map(String::as_str).collect())
        .unwrap_or_default();
    names.extend(per_input.keys().map(String::as_str));
    names.sort();
    if names.is_empty() {
        "nothing".into()
    } else {
        names.join(", ")
    }
}

/// Checks one tensor against the model's declaration (and a pinned shape).
pub fn check_tensor(info: &TensorInfo, t: &Tensor, pinned: Option<&Vec<usize>>) -> Result<()> {
    check_declared(info, t.dtype(), &t.shape, pinned)
}

/// Checks an array's element type and shape (read from a file's header) against the model's
/// declaration of the input (and a pinned shape).
fn check_declared(info: &TensorInfo, dtype: DType, shape: &[usize], pinned: Option<&Vec<usize>>) -> Result<()> {
    if dtype != info.dtype {
        return Err(bad_input(format!(
            "input '{}' must be {} but the given array is {dtype}",
            info.name, info.dtype
        )));
    }
    if let Some(dims) = &info.dims {
        let ok = dims.len() == shape.len()
            && dims.iter().zip(shape).all(|(d, n)| match d {
                Dim::Fixed(f) => f == n,
                Dim::Dynamic(_) => true,
            });
        if !ok {
            return Err(bad_input(format!(
                "input '{}' must have shape {} but the given array has shape {shape:?}",
                info.name,
                info.shape_text()
            )));
        }
    }
    if let Some(p) = pinned {
        if p.as_slice() != shape {
            return Err(bad_input(format!(
                "input '{}' has shape {shape:?} but --input-shape says {p:?}",
                info.name
            )));
        }
    }
    Ok(())
}

/// Values of named dynamic dimensions, read off the first sample. A name the sample gives two
/// sizes (exporters write `?` for every unknown axis) names no one dimension, and is left out: a
/// session told `? = 48` would refuse a `[1, 3, 48, 192]` input.
fn free_dims(sig: &Signature, samples: &[Vec<NamedTensor>]) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = Vec::new();
    let mut clashing: Vec<String> = Vec::new();
    let Some(first) = samples.first() else {
        return out;
    };
    for (info, nt) in sig.inputs.iter().zip(first) {
        let Some(dims) = &info.dims else { continue };
        for (d, n) in dims.iter().zip(&nt.tensor.shape) {
            if let Dim::Dynamic(Some(param)) = d {
                match out.iter().find(|(p, _)| p == param) {
                    None => out.push((param.clone(), *n as i64)),
                    Some((_, v)) if *v != *n as i64 => clashing.push(param.clone()),
                    Some(_) => {}
                }
            }
        }
    }
    out.retain(|(p, _)| !clashing.contains(p));
    out
}

impl InputSet {
    /// Puts samples in the model's input order and checks them: every input present, with the
    /// declared type and shape, and the same shapes in every sample (one model file, its dynamic
    /// dimensions pinned, serves them all). Records the values of symbolic dimensions.
    pub fn for_model(sig: &Signature, samples: Vec<Vec<NamedTensor>>, provenance: InputProvenance) -> Result<InputSet> {
        let mut ordered = Vec::with_capacity(samples.len());
        for (k, mut sample) in samples.into_iter().enumerate() {
            let mut inputs = Vec::with_capacity(sig.inputs.len());
            for info in &sig.inputs {
                let pos = sample
                    .iter()
                    .position(|nt| nt.name == info.name)
                    .ok_or_else(|| bad_input(format!("sample {k} has no input '{}'", info.name)))?;
                let nt = sample.swap_remove(pos);
                check_tensor(info, &nt.tensor, None)?;
                inputs.push(nt);
            }
            if let Some(extra) = sample.first() {
                return Err(bad_input(format!(
                    "sample {k}: '{}' is not an input of the model ({})",
                    extra.name,
                    sig.input_names()
                )));
            }
            ordered.push(inputs);
        }
        if ordered.is_empty() {
            return Err(bad_input("no input samples"));
        }
        for (i, info) in sig.inputs.iter().enumerate() {
            let first = &ordered[0][i].tensor.shape;
            if let Some((k, other)) = ordered.iter().enumerate().find(|(_, s)| &s[i].tensor.shape != first) {
                return Err(bad_input(format!(
                    "input '{}' has shape {:?} in sample 0 but {:?} in sample {k}; every sample of one audit must have the same shapes",
                    info.name, first, other[i].tensor.shape
                )));
            }
        }
        let free_dims = free_dims(sig, &ordered);
        Ok(InputSet {
            growing: Vec::new(),
            samples: ordered,
            provenance,
            free_dims,
        })
    }

    /// Writes every input as `.npy` under `dir/s{k}/i{index}.npy` and returns the files per sample.
    /// The shape fed to each input (first sample): what dynamic dimensions are pinned to.
    pub fn shapes(&self) -> HashMap<String, Vec<usize>> {
        self.samples
            .first()
            .map(|s| {
                s.iter()
                    .filter(|nt| !self.growing.contains(&nt.name))
                    .map(|nt| (nt.name.clone(), nt.tensor.shape.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn write(&self, dir: &Path) -> Result<Vec<Vec<InputFile>>> {
        let mut all = Vec::with_capacity(self.samples.len());
        for (k, sample) in self.samples.iter().enumerate() {
            // A long stream writes thousands of steps: Ctrl-C must not wait for them.
            crate::foundation::interrupt::check()?;
            let sdir = dir.join(format!("s{k}"));
            std::fs::create_dir_all(&sdir)?;
            let mut files = Vec::with_capacity(sample.len());
            for (i, nt) in sample.iter().enumerate() {
                let path = sdir.join(format!("i{i}.npy"));
                nt.tensor.write_npy(&path)?;
                files.push(InputFile {
                    name: nt.name.clone(),
                    path,
                });
            }
            all.push(files);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::{image_layout, refuse_degenerate_image, Dim, TensorInfo};
    use crate::data::tensor::DType;

    fn info(name: &str, dtype: DType, dims: &[Option<usize>]) -> (TensorInfo, Vec<Dim>) {
        let dims: Vec<Dim> = dims.iter().map(|d| d.map_or(Dim::Dynamic(None), Dim::Fixed)).collect();
        let info = TensorInfo {
            name: name.into(),
            dtype,
            dims: Some(dims.clone()),
        };
        (info, dims)
    }

    #[test]
    fn images_with_a_dynamic_height_or_width_are_refused_with_the_pin_to_give() {
        let refused = |name: &str, dims: &[Option<usize>]| {
            let (i, d) = info(name, DType::Float32, dims);
            refuse_degenerate_image(&i, &d).err().map(|e| e.to_string())
        };
        let nchw = refused("x", &[None, Some(3), None, None]).unwrap();
        assert!(nchw.contains("--input-shape x:1,3,H,W"), "{nchw}");
        let ocr = refused("x", &[None, Some(3), Some(48), None]).unwrap();
        assert!(ocr.contains("--input-shape x:1,3,48,W"), "{ocr}");
        let nhwc = refused("image", &[None, None, None, Some(3)]).unwrap();
        assert!(nhwc.contains("--input-shape image:1,H,W,3"), "{nhwc}");
        let unknown = refused("x", &[None, None, None, None]).unwrap();
        assert!(unknown.contains("--input-shape x:1,C,H,W"), "{unknown}");
        let video = refused("clip", &[None, Some(3), None, Some(112), Some(112)]).unwrap();
        assert!(video.contains("--input-shape clip:1,3,D,112,112"), "{video}");
        // A dynamic batch alone is generated (with 1, and a note).
        assert_eq!(refused("x", &[None, Some(3), Some(224), Some(224)]), None);
    }

    #[test]
    fn caches_sequences_and_integer_inputs_are_not_images() {
        let layout = |name: &str, dtype: DType, dims: &[Option<usize>]| {
            let (i, d) = info(name, dtype, dims);
            image_layout(&i, &d)
        };
        assert_eq!(
            layout(
                "past_key_values.0.key",
                DType::Float32,
                &[None, Some(4), None, Some(64)]
            ),
            None
        );
        assert_eq!(
            layout("attention_mask", DType::Float32, &[None, Some(1), None, None]),
            None
        );
        assert_eq!(layout("input_ids", DType::Int64, &[None, None, None, None]), None);
        assert_eq!(layout("x", DType::Float32, &[None, None, Some(80)]), None);
        assert_eq!(layout("feats", DType::Float32, &[None, Some(12), None, Some(64)]), None);
        assert_eq!(
            layout("x", DType::Float16, &[None, Some(3), None, None]),
            Some(vec!["N", "C", "H", "W"])
        );
    }
}
