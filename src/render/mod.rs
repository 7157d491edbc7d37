//! Renderers: one report, rendered (never recomputed) for a terminal, Markdown, JUnit XML, HTML
//! and Model Explorer node data, and written as files all together or not at all.

pub mod bisect;
pub mod corpus;
pub mod eval;
pub mod explain_failure;
pub mod explorer;
pub mod fingerprint;
pub mod generation;
pub mod grid;
pub mod html;
pub mod jobs;
pub mod junit;
pub mod layers;
pub mod markdown;
pub mod matrix;
pub mod outputs;
pub mod pipeline;
pub mod present;
pub mod repro;
pub mod runtime_cache;
pub mod table;
pub mod targets;
pub mod timings;
pub mod triage;
pub mod triage_markdown;
