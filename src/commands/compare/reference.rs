//! Choosing the golden run: a float model given with `--reference`, a stored golden directory, or
//! a float model derived from the audited QDQ model.

use std::path::PathBuf;

use anyhow::Result;

use crate::data::model::derive::derive_float_reference;
use crate::data::model::{load_model, LoadedModel, Signature};
use crate::execution::golden::Golden;
use crate::foundation::error::{bad_golden, bad_model};

/// Where the golden outputs come from.
pub enum ReferencePlan {
    /// Run this model on the CPU, graph optimizations off.
    Model {
        model: Box<LoadedModel>,
        signature: Signature,
        /// `model` or `derived`.
        kind: &'static str,
        description: String,
        removed_pairs: Option<usize>,
    },
    /// Use a stored golden run.
    Stored { golden: Box<Golden>, description: String },
}

impl ReferencePlan {
    /// The intra-op threads of the golden run: as a stored run's manifest records, else those
    /// every golden run uses.
    pub fn intra_op_threads(&self) -> usize {
        match self {
            ReferencePlan::Stored { golden, .. } => golden.manifest.runtime.intra_threads,
            ReferencePlan::Model { .. } => crate::execution::exec::executor::GOLDEN_INTRA_OP_THREADS,
        }
    }
}

/// Decides the reference for `audited`.
pub fn plan(audited: &LoadedModel, source: &super::GoldenSource, notes: &mut Vec<String>) -> Result<ReferencePlan> {
    let reference = source.reference.as_ref();
    if let Some(dir) = &source.stored {
        return stored(dir, reference, source.allow_mismatch, notes);
    }
    if let Some(path) = reference {
        let model = load_model(path)?;
        let signature = Signature::of(&model)?;
        let description = format!(
            "fp32 model {} on the CPU execution provider, graph optimizations off",
            path.display()
        );
        return Ok(ReferencePlan::Model {
            model: Box::new(model),
            signature,
            kind: "model",
            description,
            removed_pairs: None,
        });
    }
    derived(audited, notes)
}

/// A stored golden run, checked against `--reference` when both are given.
fn stored(
    dir: &std::path::Path,
    reference: Option<&PathBuf>,
    allow_mismatch: bool,
    notes: &mut Vec<String>,
) -> Result<ReferencePlan> {
    let golden = Golden::load(dir)?;
    if let Some(path) = reference {
        let model = load_model(path)?;
        let recorded = &golden.manifest.reference_model;
        let external = model.external_data_hashes()?;
        if model.sha256 != recorded.sha256 || external != recorded.external_data {
            let what = if model.sha256 != recorded.sha256 {
                "model file"
            } else {
                "external data"
            };
            let message = format!(
                "--reference {} is not the model the golden run {} was made with ({}, sha256 {}): its {what} differs",
                path.display(),
                dir.display(),
                recorded.file,
                recorded.sha256
            );
            if !allow_mismatch {
                return Err(bad_golden(format!(
                    "{message} (--allow-golden-mismatch compares anyway)"
                )));
            }
            notes.push(format!("{message}; compared anyway (--allow-golden-mismatch)"));
        }
    }
    let m = &golden.manifest;
    let description = format!(
        "stored golden run {} of {} on {} {} (graph optimizations {})",
        dir.display(),
        m.reference_model.file,
        m.runtime.package,
        m.runtime.version,
        m.runtime.optimization
    );
    Ok(ReferencePlan::Stored {
        golden: Box::new(golden),
        description,
    })
}

/// The float reference derived from the audited model (activation Q/DQ pairs become clips), or
/// the model itself when it has no such pairs.
fn derived(audited: &LoadedModel, notes: &mut Vec<String>) -> Result<ReferencePlan> {
    let derived = derive_float_reference(audited);
    if derived.removed_pairs == 0 {
        return itself(audited, &derived.qoperator_nodes, notes);
    }
    let mut model = audited.clone();
    model.proto = derived.proto;
    model.modified = true;
    let signature = Signature::of(&model)?;
    let description = format!(
        "DERIVED float reference: {} with its {} activation QuantizeLinear/DequantizeLinear pairs replaced by a clip to their range (rounding removed, ranges and dequantized weights kept), on the CPU, graph optimizations off; it measures activation rounding and integer execution, not weight quantization or clipping{}",
        audited.path.display(),
        derived.removed_pairs,
        if derived.kept_activation_pairs > 0 {
            format!(" ({} per-axis activation pairs kept as they are)", derived.kept_activation_pairs)
        } else {
            String::new()
        }
    );
    notes.push(
        "no --reference given: the golden run is derived from the quantized model itself (see reference.description)"
            .into(),
    );
    Ok(ReferencePlan::Model {
        model: Box::new(model),
        signature,
        kind: "derived",
        description,
        removed_pairs: Some(derived.removed_pairs),
    })
}

/// A model without activation Q/DQ pairs is its own reference; one with quantized operators
/// (QOperator format) cannot be turned back into float.
fn itself(audited: &LoadedModel, qoperator_nodes: &[String], notes: &mut Vec<String>) -> Result<ReferencePlan> {
    if !qoperator_nodes.is_empty() {
        return Err(bad_model(format!(
            "{} uses quantized operators ({}{}) that cannot be turned back into float; give the fp32 model with --reference",
            audited.path.display(),
            qoperator_nodes.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            if qoperator_nodes.len() > 3 { ", ..." } else { "" }
        )));
    }
    notes.push(format!(
        "{} has no activation QuantizeLinear/DequantizeLinear pairs, so the golden run is the model itself on the CPU with graph optimizations off",
        audited.path.display()
    ));
    let description = format!(
        "the model itself ({}) on the CPU, graph optimizations off",
        audited.path.display()
    );
    let signature = Signature::of(audited)?;
    Ok(ReferencePlan::Model {
        model: Box::new(audited.clone()),
        signature,
        kind: "model",
        description,
        removed_pairs: None,
    })
}
