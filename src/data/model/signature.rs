//! What a model takes and returns: graph inputs (initializers excluded) and outputs with their
//! element types and possibly symbolic dimensions.

use std::collections::{HashMap, HashSet};
use std::fmt;

use anyhow::Result;

use super::pb::{tensor_shape_proto::dimension::Value as DimValue, type_proto, GraphProto, ValueInfoProto};
use super::LoadedModel;
use crate::data::tensor::DType;
use crate::foundation::error::bad_model;

/// One dimension of a declared shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    Fixed(usize),
    /// A named (`dim_param`) or unnamed dynamic dimension.
    Dynamic(Option<String>),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Dynamic(Some(p)) => f.write_str(p),
            Dim::Dynamic(None) => f.write_str("?"),
        }
    }
}

/// A graph input or output.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// `None` when the model declares no shape at all.
    pub dims: Option<Vec<Dim>>,
}

impl TensorInfo {
    /// The declared shape as text, e.g. `[batch,3,224,224]`.
    pub fn shape_text(&self) -> String {
        match &self.dims {
            None => "[unknown]".to_string(),
            Some(d) => format!("[{}]", d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")),
        }
    }

    /// Whether a value declared as `self` (an output) can be fed to `input`: the same rank, and
    /// the same size wherever both are fixed (a dimension left open may change, as a cache's
    /// length does). Either side without a declared shape fits.
    pub fn can_feed(&self, input: &TensorInfo) -> bool {
        match (&self.dims, &input.dims) {
            (Some(a), Some(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(x, y)| !matches!((x, y), (Dim::Fixed(p), Dim::Fixed(q)) if p != q))
            }
            _ => true,
        }
    }

    /// Whether every dimension is fixed.
    pub fn is_static(&self) -> bool {
        self.dims
            .as_ref()
            .is_some_and(|d| d.iter().all(|x| matches!(x, Dim::Fixed(_))))
    }
}

/// The inputs a model must be fed and the outputs it returns, in graph order.
#[derive(Debug, Clone)]
pub struct Signature {
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    /// For outputs that are score vectors: the class axis found from the graph (Softmax axis).
    pub softmax_axes: HashMap<String, i64>,
}

impl Signature {
    /// The input names, comma-separated: what messages list when an input is named wrong.
    pub fn input_names(&self) -> String {
        self.inputs
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Reads the signature of a loaded model.
    pub fn of(model: &LoadedModel) -> Result<Signature> {
        let graph = model
            .proto
            .graph
            .as_ref()
            .ok_or_else(|| bad_model("model has no graph"))?;
        let initializers: HashSet<&str> = graph.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
        let shown = model.path.display();
        let inputs = graph
            .input
            .iter()
            .filter(|v| !initializers.contains(v.name.as_deref().unwrap_or("")))
            .map(|v| tensor_info(v).map_err(|e| bad_model(format!("{shown}: input {e}"))))
            .collect::<Result<Vec<_>>>()?;
        let outputs = graph
            .output
            .iter()
            .map(|v| tensor_info(v).map_err(|e| bad_model(format!("{shown}: output {e}"))))
            .collect::<Result<Vec<_>>>()?;
        let softmax_axes = softmax_axes(graph, model.opset());
        Ok(Signature {
            inputs,
            outputs,
            softmax_axes,
        })
    }
}

fn tensor_info(v: &ValueInfoProto) -> Result<TensorInfo, String> {
    let name = v.name.clone().unwrap_or_default();
    let Some(type_proto::Value::TensorType(t)) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Err(format!(
            "'{name}' is not a tensor (sequences, maps and optionals are not supported)"
        ));
    };
    let code = t.elem_type.unwrap_or(0);
    let dtype = DType::from_onnx(code).ok_or_else(|| {
        format!(
            "'{name}' has element type {} which the audit does not support",
            DType::onnx_name(code)
        )
    })?;
    let dims = t.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(DimValue::DimValue(n)) if *n >= 0 => Dim::Fixed(*n as usize),
                Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Dynamic(Some(p.clone())),
                _ => Dim::Dynamic(None),
            })
            .collect()
    });
    Ok(TensorInfo { name, dtype, dims })
}

fn declared_rank(v: &ValueInfoProto) -> Option<i64> {
    match v.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => t.shape.as_ref().map(|s| s.dim.len() as i64),
        _ => None,
    }
}

/// Finds graph outputs produced by Softmax/LogSoftmax, looking through the ops quantization
/// tools put after them, and returns the softmax axis of each.
fn softmax_axes(graph: &GraphProto, opset: i64) -> HashMap<String, i64> {
    let producer: HashMap<&str, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i)))
        .collect();
    let mut out = HashMap::new();
    for output in &graph.output {
        let Some(name) = output.name.as_deref() else {
            continue;
        };
        let mut tensor = name;
        for _ in 0..8 {
            let Some(&i) = producer.get(tensor) else {
                break;
            };
            let node = &graph.node[i];
            match node.op_type.as_deref().unwrap_or("") {
                "QuantizeLinear" | "DequantizeLinear" | "Identity" | "Cast" => {
                    let Some(first) = node.input.first() else {
                        break;
                    };
                    tensor = first;
                }
                "Softmax" | "LogSoftmax" => {
                    let default = if opset >= 13 { -1 } else { 1 };
                    let axis = node
                        .attribute
                        .iter()
                        .find(|a| a.name.as_deref() == Some("axis"))
                        .and_then(|a| a.i)
                        .unwrap_or(default);
                    if opset >= 13 {
                        out.insert(name.to_string(), axis);
                    } else if let Some(rank) = declared_rank(output) {
                        // Before opset 13 Softmax normalises over all axes from `axis` on,
                        // flattened: that is one class axis only when it is the last one.
                        let a = if axis < 0 { axis + rank } else { axis };
                        if a == rank - 1 {
                            out.insert(name.to_string(), -1);
                        }
                    }
                    break;
                }
                _ => break,
            }
        }
    }
    out
}
