//! The integration tests, as one binary (one link of the crate instead of one per file): each
//! module runs the real `npu-audit` binary end to end, or checks the sources and committed data.

mod common;

mod architecture;
mod arm64;
mod bad_input;
mod capture;
mod cli_conventions;
mod committed_reports;
mod context_cache;
mod device_reports;
mod docs_examples;
mod eval;
mod fingerprint;
mod fixtures_e2e;
mod fuzz_corpora;
mod gate_policy;
mod generated_code;
mod golden_and_inputs;
mod hardening;
mod hosts;
mod html_report;
mod junit_format;
mod layers;
mod matrix;
mod output_guard;
mod placement;
mod plan;
mod progress;
mod render_snapshots;
mod report_formats;
mod report_schema;
mod repro;
mod runtime_cache;
mod runtime_releases;
mod statuses;
mod streams;
mod terminal_width;
mod timings;
mod transformer_real;
mod triage;
mod triage_html;
mod triage_outputs;
mod triage_store;
mod wheel;
mod wording;
