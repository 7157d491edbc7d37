//! Which execution provider ONNX Runtime assigned each node to, read through the C API
//! `Session_GetEpGraphAssignmentInfo` (no safe wrapper exists in `ort` yet). A target whose EP
//! took no node at all ran entirely on the CPU: reporting it as that EP would be a lie.

use std::ffi::{c_char, CStr};

use anyhow::{bail, Result};
use ort::session::Session;
use ort::AsPointer;
use serde::{Deserialize, Serialize};

/// Session config entry that makes ONNX Runtime record the assignment.
pub const RECORD_ASSIGNMENT: &str = "session.record_ep_graph_assignment_info";

/// Session config entry that makes ONNX Runtime save the graph after each step of the layout
/// transformation (NCHW to NHWC for EPs such as QNN) as `post_layout_transform_step_N.onnx` in
/// the working directory. The last step is the graph the EP was given: the names of inserted
/// and renamed nodes in the assignment only make sense against it.
pub const DUMP_LAYOUT_TRANSFORMATION: &str = "session.debug_layout_transformation";

/// Reads the last layout-transformation step ONNX Runtime saved in `dir` (its topology only)
/// and removes the files: they hold a copy of the weights.
pub fn read_layout_dump(dir: &std::path::Path) -> Option<crate::data::model::topology::Topology> {
    let mut last: Option<(u32, std::path::PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let step = name
            .strip_prefix("post_layout_transform_step_")
            .and_then(|r| r.strip_suffix(".onnx"))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(step) = step {
            if last.as_ref().is_none_or(|(s, _)| step > *s) {
                last = Some((step, entry.path()));
            }
        }
    }
    let graph = last.and_then(|(_, path)| {
        let bytes = std::fs::read(path).ok()?;
        let model = <crate::data::model::pb::ModelProto as prost::Message>::decode(bytes.as_slice()).ok()?;
        Some(crate::data::model::topology::Topology::of_model(&model))
    });
    let _ = std::fs::remove_dir_all(dir);
    graph
}

/// One node as placed.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AssignedNode {
    pub name: String,
    pub op_type: String,
}

/// A run of nodes ONNX Runtime handed to one EP, in execution order.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AssignedSubgraph {
    pub ep: String,
    pub nodes: Vec<AssignedNode>,
}

/// Converts a returned status into a `Result`, releasing it.
///
/// # Safety
/// `status` must be null or a status returned by the ONNX Runtime API.
unsafe fn check(status: ort::sys::OrtStatusPtr) -> Result<()> {
    if status.0.is_null() {
        return Ok(());
    }
    let api = ort::api();
    let msg = CStr::from_ptr((api.GetErrorMessage)(status.0))
        .to_string_lossy()
        .into_owned();
    (api.ReleaseStatus)(status.0);
    bail!("{msg}")
}

/// # Safety
/// `p` must be null or a NUL-terminated string owned by the session.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Reads the EP assignment of a session created with [`RECORD_ASSIGNMENT`] set.
pub fn graph_assignment(session: &Session) -> Result<Vec<AssignedSubgraph>> {
    let api = ort::api();
    let mut subgraphs: *const *const ort::sys::OrtEpAssignedSubgraph = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: the session pointer is live for the duration of the call; the arrays and strings
    // returned are owned by the session, which outlives this function, and are copied out here.
    unsafe {
        check((api.Session_GetEpGraphAssignmentInfo)(
            session.ptr(),
            &mut subgraphs,
            &mut count,
        ))?;
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let sg = *subgraphs.add(i);
            let mut name: *const c_char = std::ptr::null();
            check((api.EpAssignedSubgraph_GetEpName)(sg, &mut name))?;
            let mut nodes: *const *const ort::sys::OrtEpAssignedNode = std::ptr::null();
            let mut n = 0usize;
            check((api.EpAssignedSubgraph_GetNodes)(sg, &mut nodes, &mut n))?;
            let mut list = Vec::with_capacity(n);
            for j in 0..n {
                let node = *nodes.add(j);
                let (mut node_name, mut op): (*const c_char, *const c_char) = (std::ptr::null(), std::ptr::null());
                check((api.EpAssignedNode_GetName)(node, &mut node_name))?;
                check((api.EpAssignedNode_GetOperatorType)(node, &mut op))?;
                list.push(AssignedNode {
                    name: text(node_name),
                    op_type: text(op),
                });
            }
            out.push(AssignedSubgraph {
                ep: text(name),
                nodes: list,
            });
        }
        Ok(out)
    }
}
