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

/// Types generated from `proto/onnx.proto` by prost-build (through protox, a protobuf compiler in
/// Rust), committed so that building needs neither: `tests/it/generated_code.rs` fails when the
/// file is not what the generator makes of the `.proto` today, and rewrites it with
/// `NPU_AUDIT_REGENERATE=1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!("onnx.pb.rs");
}

pub use load::{load_model, load_model_bytes, LoadedModel};
pub use signature::{Dim, Signature, TensorInfo};
