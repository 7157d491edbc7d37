//! The reports: the serialized output contracts every command writes and every renderer reads
//! (serde types, JSON load and save, the JSON Schemas derived from them): `compare`'s report
//! ([`compare`], also `layers` and `merge`), and those of `eval`, `generation`, `triage`,
//! `matrix`, `pipeline` and `repro`; what they share ([`common`]: the header, numbers) and the
//! gate every kind emits ([`gate`]). They depend on nothing above the execution layer, so
//! analyses build their parts directly.

pub mod common;
pub mod compare;
pub mod device;
pub mod eval;
pub mod facts;
pub mod gate;
pub mod generation;
pub mod json;
pub mod matrix;
pub mod pipeline;
pub mod repro;
pub mod run;
pub mod schema;
pub mod triage;

pub use run::RunStatus;

use std::collections::BTreeMap;

/// The formula of every metric, printed once per report (`docs/metrics.md` has the details).
pub fn definitions() -> BTreeMap<String, String> {
    [
        ("signal", "the golden run's output r is the signal; a target's output o is compared against it element by element, pooled over all samples"),
        ("bit_identical", "elements whose bits are equal (NaN = NaN whatever the payload; +0 != -0)"),
        ("max_abs", "max |o - r| over positions where both are finite; inf if one side alone is non-finite"),
        ("mean_abs", "Σ|o - r| / n"),
        ("rmse", "sqrt(Σ(o - r)² / n)"),
        ("max_ulp", "max distance in units in the last place (same float type only)"),
        ("cosine", "Σ o·r / (sqrt(Σo²) · sqrt(Σr²))"),
        ("sqnr_db", "10·log10(Σr² / Σ(o - r)²); an exact match is +inf dB"),
        ("top1_agreement", "fraction of rows where argmax(o) = argmax(r) along the class axis"),
        ("top5_agreement", "fraction of rows where argmax(r) is among the 5 largest entries of o"),
        ("excess_db", "baseline SQNR - target SQNR: dB lost beyond the CPU EP on the same quantized model (cpu:noopt)"),
        ("differing_elements", "target vs target: elements that are not bit-identical"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
