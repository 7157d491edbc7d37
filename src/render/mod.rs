//! Renderers: one report, rendered (never recomputed) for a terminal, Markdown, JUnit XML, HTML
//! and Model Explorer node data, and written as files all together or not at all.

pub mod eval;
pub mod explain;
pub mod explorer;
pub mod fingerprint;
pub mod grid;
pub mod html;
pub mod junit;
pub mod layers;
pub mod listing;
pub mod markdown;
pub mod matrix;
pub mod outputs;
pub mod pipeline;
pub mod plan;
pub mod present;
pub mod releases;
pub mod repro;
pub mod table;
pub mod timings;
pub mod triage;
pub mod triage_markdown;
