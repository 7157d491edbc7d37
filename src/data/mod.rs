//! The data layer: what is audited and fed, read and checked: tensors and `.npy`/`.npz`, ONNX
//! models and their rewrites, target specs and chipsets, inputs, eval sets and their labels, and
//! device reports (a stranger's outputs).

pub mod dataset;
pub mod device;
pub mod inputs;
pub mod model;
pub mod target;
pub mod tensor;
