//! Writing rewritten models: keeping their external data reachable, and pinning dynamic input
//! dimensions.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use prost::Message;

use super::pb::ModelProto;
use super::LoadedModel;

/// Writes a rewritten model to `dest`, making the external data files of the original model
/// (relative to its directory) visible beside it.
pub fn write_model(proto: &ModelProto, original: &LoadedModel, dest: &Path) -> Result<()> {
    let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::WriteModels);
    let dir = dest.parent().context("destination has no directory")?;
    let source_dir = original.path.parent().unwrap_or(Path::new("."));
    for file in original.external_data_files() {
        let from = source_dir.join(&file);
        let to = dir.join(&file);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if to.exists() {
            continue;
        }
        let from = from
            .canonicalize()
            .with_context(|| format!("external data file {} is missing", from.display()))?;
        link_or_copy(&from, &to)?;
    }
    std::fs::write(dest, proto.encode_to_vec()).with_context(|| format!("cannot write {}", dest.display()))
}

/// A hard link where the file system allows it, else a copy. Not a symbolic link: ONNX Runtime
/// resolves links and refuses external data that lives outside the model's directory.
///
/// When the model and the work directory are on different file systems, the external data is
/// copied once, and every later rewritten model links to that copy: an audit writes a model per
/// tap run, isolation run and retry, and a multi-gigabyte weight file must not be copied for each
/// (on a `/tmp` in memory, each copy would take that much RAM).
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    static COPIES: Mutex<BTreeMap<PathBuf, PathBuf>> = Mutex::new(BTreeMap::new());
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(copy) = copies.get(from) {
        if std::fs::hard_link(copy, to).is_ok() {
            return Ok(());
        }
    }
    std::fs::copy(from, to).with_context(|| format!("cannot link or copy {} to {}", from.display(), to.display()))?;
    copies.insert(from.to_path_buf(), to.to_path_buf());
    Ok(())
}

/// Replaces the dynamic dimensions of graph inputs with the concrete shapes being fed, so that
/// backends that need static shapes (QNN HTP) see them, whether or not the dimension is named.
/// Returns how many dimensions were pinned.
pub fn pin_input_shapes(proto: &mut ModelProto, shapes: &HashMap<String, Vec<usize>>) -> usize {
    use super::pb::{tensor_shape_proto::dimension::Value as DimValue, type_proto::Value as TypeValue};
    let mut pinned = 0;
    let Some(graph) = proto.graph.as_mut() else { return 0 };
    for input in graph.input.iter_mut() {
        let Some(shape) = input.name.as_ref().and_then(|n| shapes.get(n)) else {
            continue;
        };
        let Some(TypeValue::TensorType(t)) = input.r#type.as_mut().and_then(|t| t.value.as_mut()) else {
            continue;
        };
        let Some(declared) = t.shape.as_mut().filter(|d| d.dim.len() == shape.len()) else {
            continue;
        };
        for (d, &n) in declared.dim.iter_mut().zip(shape) {
            if !matches!(d.value, Some(DimValue::DimValue(v)) if v >= 0) {
                d.value = Some(DimValue::DimValue(n as i64));
                pinned += 1;
            }
        }
    }
    pinned
}
