//! npu-audit: runs one quantized ONNX model through several ONNX Runtime execution providers on
//! identical inputs and measures how far each one drifts from an fp32 golden run.
//!
//! Data flows one way: inputs -> golden run and targets (each in its own process, see [`exec`])
//! -> [`compare`] (its stages) and [`metrics`] (the comparison kernels) -> one [`report::model::Report`] -> renderers.

pub mod accuracy;
pub mod bisect;
pub mod cli;
pub mod compare;
pub mod console;
pub mod dataset;
pub mod device;
pub mod drift;
pub mod error;
pub mod eval;
pub mod exec;
pub mod explain_failure;
pub mod fingerprint;
pub mod fuzzing;
pub mod gate;
pub mod generation;
pub mod golden;
pub mod hash;
pub mod host;
pub mod inputs;
pub mod interrupt;
pub mod into_report;
pub mod layers;
pub mod matrix;
pub mod merge;
pub mod metrics;
pub mod model;
pub mod outcome;
pub mod pattern;
pub mod pipeline;
pub mod placement;
pub mod policy;
pub mod process;
pub mod render;
pub mod report;
pub mod repro;
pub mod runtime;
pub mod runtime_cache;
pub mod shard;
pub mod stream;
pub mod target;
pub mod targets;
pub mod tensor;
pub mod timings;
pub mod triage;
pub mod userfile;
