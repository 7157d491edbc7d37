//! ONNX models: protobuf I/O, the signature the audit feeds and reads, and the float reference
//! derived from a QDQ model.

pub mod build;
pub mod constant;
pub mod derive;
pub mod load;
pub mod precision;
pub mod rewrite;
pub mod signature;
pub mod slice;
pub mod topology;

/// Types generated from `proto/onnx.proto` by `build.rs`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use load::{load_model, load_model_bytes, LoadedModel};
pub use signature::{Dim, Signature, TensorInfo};
