//! npu-audit: runs one quantized ONNX model through several ONNX Runtime execution providers on
//! identical inputs and measures how far each one drifts from an fp32 golden run.
//!
//! The crate is layered, lowest first; a module uses only modules below it (docs/ARCHITECTURE.md,
//! checked by `tests/it/architecture.rs`). Data flows one way: inputs -> golden run and targets
//! (each in its own process, see [`execution::exec`]) -> the [`analyses`] -> one report of
//! [`report`] judged by [`judge::gate`] -> [`render`]ers.

pub mod analyses;
pub mod cli;
pub mod commands;
pub mod data;
pub mod execution;
pub mod foundation;
pub mod fuzzing;
pub mod into_report;
pub mod judge;
pub mod render;
pub mod report;
