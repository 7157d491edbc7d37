//! An eval set as users keep one (`docs/eval.md`): a directory with one `.npz` per sample (input
//! name -> array; the sample's id is the file's stem), or one `.npz` whose members stack the
//! samples on axis 0 (ids `0`, `1`, ...); labels in `labels.csv` or `labels.jsonl` (id, label), a
//! `labels` member of the stacked archive, or a file named with `--labels`. Samples are read one
//! at a time, in a fixed order, so a set of any size is fed in bounded memory. Everything is a
//! stranger's file: each error names the file and the sample.

pub mod labels;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

pub use labels::Label;

use crate::data::model::{Dim, Signature, TensorInfo};
use crate::data::tensor::rows::{npz_headers, ArrayHeader, RowStream, RowTable};
use crate::data::tensor::{read_npz_checked, DType, Tensor};
use crate::foundation::error::bad_input;

/// How the samples are stored.
#[derive(Debug, Clone)]
enum Layout {
    /// One archive per sample, in id order.
    Files(Vec<PathBuf>),
    /// One archive; every member but `labels` is an input stacked on axis 0.
    Stacked { file: PathBuf, members: Vec<ArrayHeader> },
}

/// An eval set, opened and checked: ids, labels (when it has them), and where the samples are.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub path: PathBuf,
    layout: Layout,
    /// Sample ids in the order samples are fed.
    pub ids: Vec<String>,
    /// One label per sample, in the same order, when the set has labels.
    pub labels: Option<Vec<Label>>,
    /// Where the labels came from (for the report).
    pub labels_from: Option<String>,
    /// The labels file read, when they came from one (an input the outputs must not replace).
    labels_file: Option<PathBuf>,
    /// When the samples are fed in another order than stored ([`Dataset::shuffle`]): the stored
    /// position of each position fed. `ids` and `labels` are in the order fed.
    order: Option<Vec<usize>>,
    /// A stacked set's arrays inflated for reading in that order, made on first use.
    tables: std::sync::OnceLock<Result<std::sync::Arc<Vec<RowTable>>, String>>,
}

/// One sample as fed: its position, id and inputs by name.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its position in the order fed.
    pub index: usize,
    /// Its position in the set as stored (the same unless the set was shuffled): where a stored
    /// golden run keeps its outputs.
    pub stored: usize,
    pub id: String,
    pub inputs: Vec<(String, Tensor)>,
}

/// The most samples a set may hold (ids and labels are kept in memory).
pub const MAX_SAMPLES: usize = 10_000_000;

impl Dataset {
    /// The SHA-256 of the sample ids in the order the set stores them: two runs on the same
    /// samples have the same, whatever order they were fed in (the report's `ids_sha256`, and part
    /// of what a records directory is of).
    pub fn ids_sha256(&self) -> String {
        let stored: Vec<&str> = self.stored_order().into_iter().map(|k| self.ids[k].as_str()).collect();
        crate::foundation::hash::sha256_hex(stored.join("\n").as_bytes())
    }

    /// The positions fed, in the order the set stores the samples.
    fn stored_order(&self) -> Vec<usize> {
        match &self.order {
            None => (0..self.ids.len()).collect(),
            Some(order) => {
                let mut stored = vec![0; order.len()];
                for (fed, &at) in order.iter().enumerate() {
                    stored[at] = fed;
                }
                stored
            }
        }
    }

    /// The SHA-256 of the labels' contents: every sample's id and label as JSON, one per line, in
    /// the order the set stores them (`None` without labels). Two runs judged against the same
    /// labels have the same, wherever the labels came from.
    pub fn labels_sha256(&self) -> Option<String> {
        let labels = self.labels.as_ref()?;
        let mut text = String::new();
        for k in self.stored_order() {
            let line = serde_json::json!([self.ids[k], labels[k]]);
            text.push_str(&line.to_string());
            text.push('\n');
        }
        Some(crate::foundation::hash::sha256_hex(text.as_bytes()))
    }

    /// The SHA-256 of the samples' contents: of each sample file's bytes (a directory set) or of
    /// the stacked archive's, with the ids, in stored order. Reads every byte of the set: a
    /// shard's identity, so that shards run on sets edited between them are not joined.
    pub fn samples_sha256(&self) -> Result<String> {
        let digest = |path: &Path| {
            crate::foundation::hash::sha256_file(path)
                .map_err(|e| bad_input(format!("--dataset {}: {e:#}", path.display())))
        };
        let text = match &self.layout {
            Layout::Stacked { file, .. } => format!("{}\n", digest(file)?),
            Layout::Files(files) => {
                let mut text = String::new();
                for k in self.stored_order() {
                    text.push_str(&format!("{} {}\n", self.ids[k], digest(&files[k])?));
                }
                text
            }
        };
        Ok(crate::foundation::hash::sha256_hex(text.as_bytes()))
    }

    /// Feeds the samples in a random order drawn from `seed` (a sequential eval's, so that the
    /// samples seen first are a fair draw of the set however it is sorted): a Fisher–Yates
    /// shuffle of the stored positions with the tool's SplitMix64 (state `mix(seed)`), from the
    /// last position down, swapping position `i` with `floor(u · (i + 1))` (`docs/eval.md`).
    pub fn shuffle(&mut self, seed: u64) {
        let order = shuffled(self.ids.len(), seed);
        self.ids = order.iter().map(|&k| self.ids[k].clone()).collect();
        if let Some(labels) = &mut self.labels {
            *labels = order.iter().map(|&k| labels[k].clone()).collect();
        }
        if let Layout::Files(files) = &mut self.layout {
            *files = order.iter().map(|&k| files[k].clone()).collect();
        }
        self.order = Some(order);
    }

    /// Where the sample fed at `position` is stored in the set (the same unless shuffled).
    pub fn stored_position(&self, position: usize) -> usize {
        self.order.as_ref().map_or(position, |o| o[position])
    }

    /// Opens the set at `path` (a directory of `.npz` files or one stacked `.npz`), with labels
    /// from `labels_file` when given, and keeps the first `limit` samples.
    pub fn open(path: &Path, labels_file: Option<&Path>, limit: Option<usize>) -> Result<Dataset> {
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| bad_input(format!("--dataset {shown}: {e}")))?;
        let (layout, ids, member_labels) = if meta.is_dir() {
            let files = sample_files(path)?;
            let ids = files.iter().map(|f| stem(f)).collect();
            (Layout::Files(files), ids, None)
        } else {
            stacked(path)?
        };
        if ids.is_empty() {
            return Err(bad_input(format!("--dataset {shown}: no sample (an empty set)")));
        }
        let file = match (labels_file, &member_labels) {
            (Some(file), _) => Some(file.to_path_buf()),
            (None, None) if meta.is_dir() => labels::beside(path)?,
            _ => None,
        };
        let (labels, labels_from) = match (&file, member_labels) {
            (Some(file), _) => (Some(labels::read(file, &ids)?), Some(file.display().to_string())),
            (None, Some(l)) => (Some(l), Some(format!("{shown}: member 'labels'"))),
            (None, None) => (None, None),
        };
        let keep = limit.unwrap_or(usize::MAX).min(ids.len());
        let mut set = Dataset {
            path: path.to_path_buf(),
            layout,
            ids,
            labels,
            labels_from,
            labels_file: file,
            order: None,
            tables: std::sync::OnceLock::new(),
        };
        set.truncate(keep);
        Ok(set)
    }

    fn truncate(&mut self, n: usize) {
        self.ids.truncate(n);
        if let Some(l) = &mut self.labels {
            l.truncate(n);
        }
        if let Layout::Files(files) = &mut self.layout {
            files.truncate(n);
        }
    }

    /// How many samples are fed.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the set has no sample (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Checks every sample against the model's inputs before anything runs, from the arrays'
    /// headers: a stacked set's members, or each file of a directory (every input there, of the
    /// model's type and shape, and of the first sample's shape: the sessions are pinned to it).
    pub fn check(&self, sig: &Signature) -> Result<()> {
        self.check_shapes(sig, true)
    }

    /// [`Dataset::check`], but samples of a directory may differ in the length of a dynamic
    /// dimension (prompts of a decoder-only model, fed to a loop that is not pinned to shapes).
    pub fn check_ragged(&self, sig: &Signature) -> Result<()> {
        self.check_shapes(sig, false)
    }

    fn check_shapes(&self, sig: &Signature, same_shapes: bool) -> Result<()> {
        let (file, members) = match &self.layout {
            Layout::Stacked { file, members } => (file, members),
            Layout::Files(files) => return check_files(files, &self.ids, sig, same_shapes),
        };
        for info in &sig.inputs {
            let Some(m) = members.iter().find(|m| m.name == info.name) else {
                return Err(bad_input(format!(
                    "--dataset {}: no array '{}' (the model's input)",
                    file.display(),
                    info.name
                )));
            };
            row_shape(info, m)
                .map_err(|e| bad_input(format!("--dataset {}: array '{}': {e}", file.display(), m.name)))?;
        }
        if let Some(m) = members.iter().find(|m| !sig.inputs.iter().any(|i| i.name == m.name)) {
            return Err(bad_input(format!(
                "--dataset {}: array '{}' is neither one of the model's inputs ({}) nor 'labels'",
                file.display(),
                m.name,
                sig.input_names()
            )));
        }
        Ok(())
    }

    /// The samples from position `start` on, read one at a time, checked against `sig`.
    pub fn samples(&self, sig: &Signature, start: usize) -> Result<SampleReader<'_>> {
        let source = match &self.layout {
            Layout::Files(_) => Source::Files,
            Layout::Stacked { file, members } if self.order.is_some() => {
                let tables = self
                    .tables
                    .get_or_init(|| spill(file, sig).map(std::sync::Arc::new).map_err(|e| format!("{e:#}")))
                    .clone()
                    .map_err(|e| bad_input(format!("--dataset {}: {e}", file.display())))?;
                let shapes = sig
                    .inputs
                    .iter()
                    .map(|info| {
                        let header = members.iter().find(|m| m.name == info.name).cloned();
                        header.map(|h| row_shape(info, &h)).transpose().map_err(bad_input)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Source::Shuffled(tables, shapes)
            }
            Layout::Stacked { file, members } => {
                let streams = sig
                    .inputs
                    .iter()
                    .map(|info| {
                        let stream = RowStream::open(file, &info.name, start)?;
                        let header = members.iter().find(|m| m.name == info.name).cloned();
                        let reshape = header.map(|h| row_shape(info, &h)).transpose().map_err(bad_input)?;
                        Ok((info.name.clone(), stream, reshape))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Source::Stacked(streams)
            }
        };
        Ok(SampleReader {
            set: self,
            sig: sig.clone(),
            next: start,
            source,
        })
    }
}

/// Where a reader takes samples from.
enum Source {
    Files,
    /// Per input: its rows and the shape a row is fed with (a leading 1 added when stored without).
    Stacked(Vec<(String, RowStream, Option<Vec<usize>>)>),
    /// A stacked set fed in another order: per input (in the model's order) its inflated rows,
    /// and the shape a row is fed with.
    Shuffled(std::sync::Arc<Vec<RowTable>>, Vec<Option<Vec<usize>>>),
}

/// Every input of a stacked set inflated for reading rows in any order, in the model's order.
fn spill(file: &Path, sig: &Signature) -> Result<Vec<RowTable>> {
    sig.inputs
        .iter()
        .map(|info| RowTable::spill(file, &info.name))
        .collect()
}

/// The positions `0..n` shuffled as [`Dataset::shuffle`] documents.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = crate::data::inputs::prng::SplitMix64::from_state(crate::data::inputs::prng::mix(seed));
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = ((rng.next_unit() * (i + 1) as f64) as usize).min(i);
        order.swap(i, j);
    }
    order
}

/// The samples of a set in order, read as they are asked for.
pub struct SampleReader<'d> {
    set: &'d Dataset,
    sig: Signature,
    next: usize,
    source: Source,
}

impl Iterator for SampleReader<'_> {
    type Item = Result<Sample>;

    fn next(&mut self) -> Option<Result<Sample>> {
        if self.next >= self.set.len() {
            return None;
        }
        let index = self.next;
        self.next += 1;
        Some(self.read(index))
    }
}

impl SampleReader<'_> {
    fn read(&mut self, index: usize) -> Result<Sample> {
        let id = self.set.ids[index].clone();
        let inputs = match (&mut self.source, &self.set.layout) {
            (Source::Files, Layout::Files(files)) => read_file(&files[index], &self.sig)?,
            (Source::Shuffled(tables, shapes), Layout::Stacked { file, .. }) => {
                let at = self.set.stored_position(index);
                let mut inputs = Vec::with_capacity(tables.len());
                for (table, shape) in tables.iter().zip(shapes) {
                    let mut row = table
                        .row(at)
                        .map_err(|e| bad_input(format!("--dataset {}: sample {id}: {e:#}", file.display())))?;
                    if let Some(s) = shape {
                        row.shape = s.clone();
                    }
                    inputs.push((table.header.name.clone(), row));
                }
                inputs
            }
            (Source::Stacked(streams), Layout::Stacked { file, .. }) => {
                let mut inputs = Vec::with_capacity(streams.len());
                for (name, stream, shape) in streams.iter_mut() {
                    let mut row = stream
                        .next_row()
                        .map_err(|e| bad_input(format!("--dataset {}: sample {id}: {e:#}", file.display())))?;
                    if let Some(s) = shape {
                        row.shape = s.clone();
                    }
                    inputs.push((name.clone(), row));
                }
                inputs
            }
            _ => unreachable!("a reader's source follows its set's layout"),
        };
        for (name, t) in &inputs {
            if let Some(info) = self.sig.inputs.iter().find(|i| &i.name == name) {
                crate::data::inputs::check_tensor(info, t, None).map_err(|e| {
                    bad_input(format!(
                        "--dataset {}: sample {id}: input '{name}': {e:#}",
                        self.set.path.display()
                    ))
                })?;
            }
        }
        Ok(Sample {
            index,
            stored: self.set.stored_position(index),
            id,
            inputs,
        })
    }
}

/// Reads one sample's archive: every model input, nothing else.
fn read_file(path: &Path, sig: &Signature) -> Result<Vec<(String, Tensor)>> {
    let check = |name: &str, _: DType, _: &[usize]| -> Result<()> {
        if sig.inputs.iter().any(|i| i.name == name) {
            Ok(())
        } else {
            Err(anyhow::anyhow!(
                "not an input of the model (inputs: {})",
                sig.inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    };
    crate::foundation::userfile::regular_file(path)
        .map_err(|e| bad_input(format!("--dataset {}: {e}", path.display())))?;
    let mut arrays: HashMap<String, Tensor> = read_npz_checked(path, &check)
        .map_err(|e| bad_input(format!("--dataset {}: {e:#}", path.display())))?
        .into_iter()
        .collect();
    sig.inputs
        .iter()
        .map(|info| {
            arrays
                .remove(&info.name)
                .map(|t| (info.name.clone(), t))
                .ok_or_else(|| {
                    bad_input(format!(
                        "--dataset {}: no array '{}' (the model's input)",
                        path.display(),
                        info.name
                    ))
                })
        })
        .collect()
}

/// Checks each sample file's arrays against the model's inputs and the first sample's shapes.
fn check_files(files: &[PathBuf], ids: &[String], sig: &Signature, same_shapes: bool) -> Result<()> {
    let mut first: Option<Vec<ArrayHeader>> = None;
    for (file, id) in files.iter().zip(ids) {
        let fail = |e: String| bad_input(format!("--dataset {}: sample {id}: {e}", file.display()));
        let headers = npz_headers(file).map_err(|e| fail(format!("{e:#}")))?;
        for info in &sig.inputs {
            let Some(h) = headers.iter().find(|h| h.name == info.name) else {
                return Err(fail(format!("no array '{}' (the model's input)", info.name)));
            };
            if h.shape.contains(&0) {
                return Err(fail(format!(
                    "array '{}' of shape {:?} holds no value (an empty dimension); a sample holds data",
                    h.name, h.shape
                )));
            }
            let fed = ArrayHeader {
                shape: std::iter::once(1).chain(h.shape.iter().copied()).collect(),
                ..h.clone()
            };
            match row_shape(info, &fed) {
                Ok(shape) if shape == h.shape => {}
                Ok(_) | Err(_) => {
                    return Err(fail(format!(
                        "array '{}' is {} {:?} where the model's input is {} {}",
                        h.name,
                        h.dtype.name(),
                        h.shape,
                        info.dtype.name(),
                        info.shape_text()
                    )))
                }
            }
            let expected = first
                .as_ref()
                .filter(|_| same_shapes)
                .and_then(|f| f.iter().find(|f| f.name == info.name));
            if let Some(e) = expected.filter(|e| e.shape != h.shape) {
                return Err(fail(format!(
                    "array '{}' is {:?} where the first sample's is {:?}: every sample of a set has the same shapes",
                    h.name, h.shape, e.shape
                )));
            }
        }
        if let Some(h) = headers.iter().find(|h| !sig.inputs.iter().any(|i| i.name == h.name)) {
            return Err(fail(format!(
                "array '{}' is not one of the model's inputs ({})",
                h.name,
                sig.input_names()
            )));
        }
        first.get_or_insert(headers);
    }
    Ok(())
}

/// The shape a stacked row is fed with: the row as stored, or with a leading 1 when the model's
/// input has a leading 1 the archive left out (`[N, 3, 224, 224]` for an input `[1, 3, 224, 224]`).
fn row_shape(info: &TensorInfo, member: &ArrayHeader) -> Result<Vec<usize>, String> {
    let row: Vec<usize> = member.shape.get(1..).unwrap_or_default().to_vec();
    if row.contains(&0) {
        return Err(format!(
            "rows of shape {row:?} hold no value (an empty dimension); a sample holds data"
        ));
    }
    if member.dtype != info.dtype {
        return Err(format!(
            "{} where the model's input takes {}",
            member.dtype.name(),
            info.dtype.name()
        ));
    }
    let Some(dims) = &info.dims else { return Ok(row) };
    let fits = |shape: &[usize]| {
        shape.len() == dims.len()
            && dims
                .iter()
                .zip(shape)
                .all(|(d, n)| !matches!(d, Dim::Fixed(f) if f != n))
    };
    if fits(&row) {
        return Ok(row);
    }
    let with_batch: Vec<usize> = std::iter::once(1).chain(row.iter().copied()).collect();
    if fits(&with_batch) {
        return Ok(with_batch);
    }
    Err(format!(
        "rows of shape {row:?} do not fit the model's input {} (stack samples on axis 0: [N, ...])",
        info.shape_text()
    ))
}

/// A stacked archive: its members, the ids (`0`, `1`, ...) and the `labels` member's labels.
fn stacked(path: &Path) -> Result<(Layout, Vec<String>, Option<Vec<Label>>)> {
    let shown = path.display();
    crate::foundation::userfile::regular_file(path).map_err(|e| bad_input(format!("--dataset {shown}: {e}")))?;
    let headers = npz_headers(path).map_err(|e| bad_input(format!("--dataset {shown}: {e:#}")))?;
    let count = headers.first().and_then(|h| h.shape.first().copied()).unwrap_or(0);
    if let Some(h) = headers.iter().find(|h| h.shape.first() != Some(&count)) {
        let rows = h
            .shape
            .first()
            .map_or("is a scalar (no rows)".to_string(), |n| format!("has {n} rows"));
        return Err(bad_input(format!(
            "--dataset {shown}: array '{}' {rows} where the first has {count}: every array stacks the same samples on axis 0",
            h.name
        )));
    }
    if count > MAX_SAMPLES {
        return Err(bad_input(format!("--dataset {shown}: more than {MAX_SAMPLES} samples")));
    }
    let ids: Vec<String> = (0..count).map(|k| k.to_string()).collect();
    let labels = headers
        .iter()
        .any(|h| h.name == "labels")
        .then(|| labels::from_member(path, count))
        .transpose()?;
    let members = headers.into_iter().filter(|h| h.name != "labels").collect();
    Ok((
        Layout::Stacked {
            file: path.to_path_buf(),
            members,
        },
        ids,
        labels,
    ))
}

/// The `.npz` files of a directory, in the byte order of their names (links refused).
fn sample_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let shown = dir.display();
    let entries = std::fs::read_dir(dir).map_err(|e| bad_input(format!("--dataset {shown}: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| bad_input(format!("--dataset {shown}: {e}")))?;
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "npz") {
            match entry.file_type() {
                Ok(t) if t.is_file() => files.push(path),
                Ok(t) if t.is_symlink() => {
                    return Err(bad_input(format!(
                        "--dataset {}: a symbolic link; the set's files must be its own",
                        path.display()
                    )))
                }
                _ => {
                    return Err(bad_input(format!(
                        "--dataset {}: not a regular file; a sample is an .npz file",
                        path.display()
                    )))
                }
            }
        }
        if files.len() > MAX_SAMPLES {
            return Err(bad_input(format!("--dataset {shown}: more than {MAX_SAMPLES} samples")));
        }
    }
    files.sort_by(|a, b| stem(a).as_bytes().cmp(stem(b).as_bytes()));
    if let Some(pair) = files.windows(2).find(|p| stem(&p[0]) == stem(&p[1])) {
        return Err(bad_input(format!(
            "--dataset {shown}: {} and {} have the same id '{}' (names that are not UTF-8 read alike); rename one",
            pair[0].display(),
            pair[1].display(),
            stem(&pair[0])
        )));
    }
    Ok(files)
}

/// A sample file's id: its name without `.npz`.
fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default()
}

impl crate::foundation::userfile::Reads for Dataset {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        set.add(&self.path);
        if let Some(file) = &self.labels_file {
            set.add(file);
        }
    }
}
