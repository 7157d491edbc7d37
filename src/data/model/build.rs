//! Building small ONNX models in code: the fingerprint's probe graphs are generated, not stored,
//! so every scale, zero point and input is visible next to the arithmetic that predicts it.

use super::pb::{attribute_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use super::slice::{value_info, MeasuredType};
use crate::data::tensor::{Tensor, TensorData};

/// ONNX opset of generated models: 21 has 16-bit QuantizeLinear and `Gelu`, and every ONNX
/// Runtime build in the catalogue runs it.
pub const OPSET: i64 = 21;

/// An attribute value of a generated node.
#[derive(Debug, Clone)]
pub enum Attr {
    Int(i64),
    Ints(Vec<i64>),
    Str(&'static str),
}

/// A model under construction: nodes in execution order, constants, typed inputs and outputs.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    graph: GraphProto,
}

impl GraphBuilder {
    /// An empty graph called `name`.
    pub fn new(name: &str) -> GraphBuilder {
        GraphBuilder {
            graph: GraphProto {
                name: Some(name.to_string()),
                ..Default::default()
            },
        }
    }

    /// Declares a graph input with a static shape.
    pub fn input(&mut self, name: &str, elem_type: i32, shape: &[usize]) -> &mut Self {
        self.graph.input.push(value_info(
            name,
            Some(&MeasuredType {
                elem_type,
                shape: shape.to_vec(),
            }),
        ));
        self
    }

    /// Declares a graph output (its type is left to the runtime's inference).
    pub fn output(&mut self, name: &str) -> &mut Self {
        self.graph.output.push(value_info(name, None));
        self
    }

    /// Adds a constant tensor (an initializer).
    pub fn constant(&mut self, name: &str, tensor: &Tensor) -> &mut Self {
        self.graph.initializer.push(TensorProto {
            name: Some(name.to_string()),
            dims: tensor.shape.iter().map(|&d| d as i64).collect(),
            data_type: Some(tensor.dtype().onnx_code()),
            raw_data: Some(tensor.data.to_le_bytes()),
            ..Default::default()
        });
        self
    }

    /// Adds a scalar f32 constant.
    pub fn scalar_f32(&mut self, name: &str, value: f32) -> &mut Self {
        let t = Tensor {
            shape: vec![],
            data: TensorData::Float32(vec![value]),
        };
        self.constant(name, &t)
    }

    /// Adds a node of the default domain.
    pub fn node(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[(&str, Attr)],
    ) -> &mut Self {
        let attribute = attrs
            .iter()
            .map(|(k, v)| {
                let mut a = super::pb::AttributeProto {
                    name: Some(k.to_string()),
                    ..Default::default()
                };
                match v {
                    Attr::Int(i) => {
                        a.i = Some(*i);
                        a.r#type = Some(attribute_proto::AttributeType::Int as i32);
                    }
                    Attr::Ints(v) => {
                        a.ints = v.clone();
                        a.r#type = Some(attribute_proto::AttributeType::Ints as i32);
                    }
                    Attr::Str(s) => {
                        a.s = Some(s.as_bytes().to_vec());
                        a.r#type = Some(attribute_proto::AttributeType::String as i32);
                    }
                }
                a
            })
            .collect();
        self.graph.node.push(NodeProto {
            op_type: Some(op.to_string()),
            name: Some(name.to_string()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute,
            ..Default::default()
        });
        self
    }

    /// The finished model.
    pub fn finish(self) -> ModelProto {
        ModelProto {
            ir_version: Some(10),
            producer_name: Some("npu-audit".into()),
            producer_version: Some(env!("CARGO_PKG_VERSION").into()),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(OPSET),
            }],
            graph: Some(self.graph),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_model_passes_the_loaders_checks_and_keeps_its_constants() {
        let mut b = GraphBuilder::new("g");
        b.input("x", 1, &[2])
            .scalar_f32("s", 0.5)
            .node("Mul", "m", &["x", "s"], &["y"], &[("unused", Attr::Int(1))])
            .output("y");
        let model = b.finish();
        let bytes = prost::Message::encode_to_vec(&model);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, bytes).unwrap();
        let loaded = crate::data::model::load_model(&path).unwrap();
        let g = loaded.proto.graph.unwrap();
        assert_eq!(g.initializer[0].raw_data.as_deref(), Some(&0.5f32.to_le_bytes()[..]));
        assert_eq!(g.node[0].attribute[0].i, Some(1));
    }
}
