//! The execution layer: which ONNX Runtime build a target runs on (`runtime`), the worker
//! processes that run every session and the one `Executor` (`exec`), and golden-run storage.

pub mod exec;
pub mod golden;
pub mod runtime;
