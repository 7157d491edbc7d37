//! The commands: one module per command of the tool, each a pipeline from its typed options to
//! its report, over the layers below. `shard` comes first, as `compare`, `eval`, `merge` and
//! `plan` share it.

pub mod availability;
pub mod bisect;
pub mod compare;
pub mod eval;
pub mod explain_failure;
pub mod generation;
pub mod matrix;
pub mod merge;
pub mod pipeline;
pub mod repro;
pub mod runtime_cache;
pub mod shard;
pub mod triage;
