//! Reading an ONNX file into a `ModelProto` and rejecting files that are not usable models with a
//! message that says why.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::foundation::error::bad_model;
use crate::foundation::hash::sha256_hex;
use anyhow::{bail, Context, Result};
use prost::Message;

use super::pb::ModelProto;

/// A parsed model and facts about its file.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub path: PathBuf,
    pub proto: ModelProto,
    pub sha256: String,
    pub size: u64,
    /// Whether `proto` was rewritten in memory and no longer matches the file at `path`.
    pub modified: bool,
}

/// The version of a model's default (`ai.onnx`) opset, 0 when it imports none.
pub fn default_opset(model: &ModelProto) -> i64 {
    model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .unwrap_or(0)
}

impl LoadedModel {
    /// The version of the default (`ai.onnx`) opset.
    pub fn opset(&self) -> i64 {
        default_opset(&self.proto)
    }

    /// Whether some graph input has a dimension that is not a fixed size.
    pub fn signature_has_dynamic_inputs(&self) -> bool {
        use super::pb::{tensor_shape_proto::dimension::Value as DimValue, type_proto::Value as TypeValue};
        let Some(graph) = &self.proto.graph else { return false };
        graph
            .input
            .iter()
            .any(|input| match input.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(TypeValue::TensorType(t)) => t.shape.as_ref().is_some_and(|s| {
                    s.dim
                        .iter()
                        .any(|d| !matches!(d.value, Some(DimValue::DimValue(v)) if v >= 0))
                }),
                _ => false,
            })
    }

    /// Names of the files this model keeps its tensors in, relative to its directory: of every
    /// initializer and constant tensor, in subgraphs (`If`, `Loop`, `Scan` bodies) too.
    pub fn external_data_files(&self) -> Vec<String> {
        let mut files: Vec<String> = Vec::new();
        if let Some(graph) = &self.proto.graph {
            collect_external(graph, &mut files, 0);
        }
        files
    }
}

/// Subgraphs nest no deeper than this in any real model; deeper is a hostile file.
const MAX_GRAPH_DEPTH: usize = 64;

fn collect_external(graph: &super::pb::GraphProto, files: &mut Vec<String>, depth: usize) {
    if depth > MAX_GRAPH_DEPTH {
        return;
    }
    let mut visit = |t: &super::pb::TensorProto| {
        if t.data_location != Some(1) {
            return;
        }
        for e in t.external_data.iter().filter(|e| e.key.as_deref() == Some("location")) {
            if let Some(v) = e.value.as_ref().filter(|v| !files.contains(v)) {
                files.push(v.clone());
            }
        }
    };
    graph.initializer.iter().for_each(&mut visit);
    graph
        .sparse_initializer
        .iter()
        .filter_map(|s| s.values.as_ref())
        .for_each(&mut visit);
    for attr in graph.node.iter().flat_map(|n| &n.attribute) {
        attr.t.iter().chain(&attr.tensors).for_each(&mut visit);
    }
    for attr in graph.node.iter().flat_map(|n| &n.attribute) {
        for g in attr.g.iter().chain(&attr.graphs) {
            collect_external(g, files, depth + 1);
        }
    }
}

impl LoadedModel {
    /// Bytes of the model file and its external data files (those that can be read).
    pub fn total_bytes(&self) -> u64 {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        self.size
            + self
                .external_data_files()
                .iter()
                .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
                .map(|m| m.len())
                .sum::<u64>()
    }
}

/// One external data file of a model, with its hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ExternalFile {
    /// Relative to the model's directory, as the model names it.
    pub file: String,
    /// The file's SHA-256.
    pub sha256: String,
}

impl LoadedModel {
    /// The external data files, as paths.
    pub fn external_data_paths(&self) -> Vec<std::path::PathBuf> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        self.external_data_files().into_iter().map(|f| dir.join(f)).collect()
    }

    /// The external data files with their SHA-256: part of the model's identity, which the
    /// `.onnx` file's own hash does not cover.
    pub fn external_data_hashes(&self) -> Result<Vec<ExternalFile>> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        self.external_data_files()
            .into_iter()
            .map(|file| {
                let sha256 = crate::foundation::hash::sha256_file(&dir.join(&file))?;
                Ok(ExternalFile { file, sha256 })
            })
            .collect()
    }
}

/// Reads and checks an ONNX model. Every failure is a usage error naming the file.
pub fn load_model(path: &Path) -> Result<LoadedModel> {
    let shown = path.display();
    if !path.exists() {
        return Err(bad_model(format!("model file {shown} does not exist")));
    }
    if path.is_dir() {
        return Err(bad_model(format!("{shown} is a directory, not an ONNX model file")));
    }
    crate::foundation::userfile::regular_file(path)
        .map_err(|e| bad_model(format!("{shown} is {e}, not an ONNX model file")))?;
    let bytes = std::fs::read(path).map_err(|e| bad_model(format!("cannot read model {shown}: {e}")))?;
    load_model_bytes(path, bytes)
}

/// Decodes and checks the bytes of the model at `path` (its external data is looked up beside
/// it). Every failure is a usage error naming the file.
pub fn load_model_bytes(path: &Path, bytes: Vec<u8>) -> Result<LoadedModel> {
    let shown = path.display();
    if bytes.is_empty() {
        return Err(bad_model(format!("{shown} is empty, not an ONNX model")));
    }
    let proto = ModelProto::decode(bytes.as_slice()).map_err(|e| {
        let why = e.to_string();
        // Models start with the ir_version field (tag 0x08); a model cut short fails mid-field.
        let looks_like_onnx = bytes.first() == Some(&0x08);
        if looks_like_onnx && (why.contains("buffer underflow") || why.contains("invalid varint")) {
            bad_model(format!(
                "{shown} is truncated or corrupt: the protobuf ends mid-field ({why})"
            ))
        } else {
            bad_model(format!(
                "{shown} is not an ONNX model: it does not decode as a protobuf ModelProto ({why})"
            ))
        }
    })?;
    check_model(&proto).map_err(|e| bad_model(format!("{shown} is not a usable ONNX model: {e:#}")))?;
    if path.to_str().is_none() {
        return Err(bad_model(format!(
            "{shown}: the path is not valid UTF-8, which the worker processes need"
        )));
    }
    let model = LoadedModel {
        path: path.to_path_buf(),
        sha256: sha256_hex(&bytes),
        size: bytes.len() as u64,
        proto,
        modified: false,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    for file in model.external_data_files() {
        check_external_file(&shown.to_string(), dir, &file)?;
    }
    Ok(model)
}

/// Refuses an external data file the model names unless it is a regular file inside the model's
/// directory, by its name and by where it resolves with every link followed: a link inside the
/// directory to a file elsewhere would let a stranger's model pull host files into what the tool
/// reads, copies and bundles for a vendor.
fn check_external_file(shown: &str, dir: &Path, file: &str) -> Result<()> {
    if file.contains('\0') || file.ends_with('/') {
        return Err(bad_model(format!(
            "{shown}: external data location '{}' is not a file name",
            file.escape_debug()
        )));
    }
    let inside = Path::new(file)
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    if !inside {
        return Err(bad_model(format!(
            "{shown}: external data file '{file}' is outside the model's directory"
        )));
    }
    let at = dir.join(file);
    match crate::foundation::userfile::regular_file(&at) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad_model(format!("{shown}: external data file '{file}' is missing")))
        }
        Err(e) => return Err(bad_model(format!("{shown}: external data file '{file}' is {e}"))),
    }
    let real_dir = dir
        .canonicalize()
        .map_err(|e| bad_model(format!("{shown}: its directory: {e}")))?;
    let real = at
        .canonicalize()
        .map_err(|e| bad_model(format!("{shown}: external data file '{file}': {e}")))?;
    if !real.starts_with(&real_dir) {
        return Err(bad_model(format!(
            "{shown}: external data file '{file}' is a link to {}, outside the model's directory; external data must be the model's own files",
            real.display()
        )));
    }
    Ok(())
}

/// Structural checks that catch non-ONNX protobufs and truncation at a field boundary.
fn check_model(proto: &ModelProto) -> Result<()> {
    let ir = proto.ir_version.unwrap_or(0);
    if ir <= 0 {
        bail!("no ir_version");
    }
    if proto.opset_import.is_empty() {
        bail!("no opset_import");
    }
    let graph = proto.graph.as_ref().context("no graph")?;
    if graph.output.is_empty() {
        bail!("the graph has no outputs");
    }
    let mut defined: HashSet<&str> = HashSet::new();
    defined.extend(graph.input.iter().filter_map(|v| v.name.as_deref()));
    defined.extend(graph.initializer.iter().filter_map(|t| t.name.as_deref()));
    defined.extend(
        graph
            .sparse_initializer
            .iter()
            .filter_map(|s| s.values.as_ref().and_then(|v| v.name.as_deref())),
    );
    for node in &graph.node {
        defined.extend(node.output.iter().map(String::as_str));
    }
    for node in &graph.node {
        for input in &node.input {
            if !input.is_empty() && !defined.contains(input.as_str()) {
                bail!(
                    "tensor '{}' used by node '{}' ({}) is never produced (truncated file?)",
                    input,
                    node.name.as_deref().unwrap_or(""),
                    node.op_type.as_deref().unwrap_or("?")
                );
            }
        }
    }
    for output in &graph.output {
        let name = output.name.as_deref().unwrap_or("");
        if !defined.contains(name) {
            bail!("graph output '{name}' is never produced (truncated file?)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::pb::{GraphProto, NodeProto, OperatorSetIdProto, ValueInfoProto};

    fn tiny_model() -> ModelProto {
        ModelProto {
            ir_version: Some(9),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(GraphProto {
                node: vec![NodeProto {
                    input: vec!["x".into()],
                    output: vec!["y".into()],
                    op_type: Some("Relu".into()),
                    ..Default::default()
                }],
                input: vec![ValueInfoProto {
                    name: Some("x".into()),
                    ..Default::default()
                }],
                output: vec![ValueInfoProto {
                    name: Some("y".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_complete_model_passes_and_a_dangling_input_fails() {
        let mut m = tiny_model();
        check_model(&m).unwrap();
        m.graph.as_mut().unwrap().node[0].input[0] = "missing".into();
        let err = check_model(&m).unwrap_err().to_string();
        assert!(err.contains("'missing'"), "{err}");
    }

    #[test]
    fn truncated_bytes_are_reported_as_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        let bytes = tiny_model().encode_to_vec();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let err = format!("{:#}", load_model(&path).unwrap_err());
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn text_is_not_onnx() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, "hello, this is not a model\n").unwrap();
        let err = format!("{:#}", load_model(&path).unwrap_err());
        assert!(err.contains("not"), "{err}");
    }
}
