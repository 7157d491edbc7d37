//! `--prompt-lengths`: a prompt-length sweep. Each prompt of a decoder-only set is cut to its
//! first L tokens for every L swept that it has, and every cut is decoded as a sample of its own
//! (`lm00@32`); per target and length, how the first new token and the decode fare against the
//! reference's, and the lengths where a prompt's first token departs while every shorter cut of it
//! agreed: where a prefill chunk boundary or the KV buffer's end breaks a target.

use std::path::Path;

use anyhow::Result;

use super::decode::prompt_ids;
use super::GenSample;
use crate::analyses::accuracy::stats::median;
use crate::data::tensor::{Tensor, TensorData};
use crate::foundation::error::bad_input;
use crate::report::common::Num;
use crate::report::generation::{LengthDeparture, LengthRow, PromptCut, PromptSweep, TargetSample};

/// The sample itself without a sweep; with one, a cut per length it has (none when it is
/// shorter than every length).
pub fn cuts(sample: GenSample, lengths: &[usize]) -> Vec<GenSample> {
    if lengths.is_empty() {
        return vec![sample];
    }
    let ids = prompt_ids(&sample.input);
    lengths
        .iter()
        .filter(|&&l| l <= ids.len())
        .map(|&length| GenSample {
            id: format!("{}@{length}", sample.id),
            label: None,
            input: Tensor {
                shape: vec![1, length],
                data: TensorData::Int64(ids[..length].to_vec()),
            },
            cut: Some(PromptCut {
                sample: sample.id.clone(),
                length,
            }),
        })
        .collect()
}

/// Every length swept is one some prompt has (`longest`: the longest prompt of the set): a length
/// past every prompt would sweep nothing.
pub fn check_lengths(lengths: &[usize], longest: usize, set: &Path) -> Result<()> {
    match lengths.iter().find(|&&l| l > longest) {
        Some(l) => Err(bad_input(format!(
            "--prompt-lengths {l}: no prompt of {} has {l} tokens (the longest has {longest})",
            set.display()
        ))),
        None => Ok(()),
    }
}

/// A target's sweep over its scored cuts.
pub fn sweep(lengths: &[usize], rows: &[&TargetSample]) -> PromptSweep {
    let at = |l: usize| -> Vec<&TargetSample> {
        rows.iter()
            .copied()
            .filter(|r| r.prompt.as_ref().is_some_and(|c| c.length == l))
            .collect()
    };
    PromptSweep {
        rows: lengths.iter().map(|&l| length_row(l, &at(l))).collect(),
        departs_at: departs_at(lengths, rows),
    }
}

/// Whether a cut's first new token is the reference's.
fn first_token_same(r: &TargetSample) -> bool {
    r.first_divergence.as_ref().is_none_or(|d| d.step > 0)
}

fn length_row(length: usize, rows: &[&TargetSample]) -> LengthRow {
    let kls: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.steps.first())
        .map(|s| s.kl.0)
        .filter(|v| v.is_finite())
        .collect();
    let divergences: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.first_divergence.as_ref().map(|d| d.step as f64))
        .collect();
    LengthRow {
        length,
        samples: rows.len(),
        first_token_same: rows.iter().filter(|r| first_token_same(r)).count(),
        first_token_kl: Num(if kls.is_empty() {
            f64::NAN
        } else {
            kls.iter().sum::<f64>() / kls.len() as f64
        }),
        diverged: divergences.len(),
        median_divergence_step: median(&divergences),
    }
}

/// The lengths where some prompt's first new token departs while every shorter cut of it swept
/// agreed, each with those prompts.
fn departs_at(lengths: &[usize], rows: &[&TargetSample]) -> Vec<LengthDeparture> {
    let mut found: Vec<LengthDeparture> = Vec::new();
    let mut sources: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.prompt.as_ref().map(|c| c.sample.as_str()))
        .collect();
    sources.sort_unstable();
    sources.dedup();
    for source in sources {
        let first = rows
            .iter()
            .filter_map(|r| r.prompt.as_ref().filter(|c| c.sample == source).map(|c| (c.length, r)))
            .filter(|(_, r)| !first_token_same(r))
            .map(|(l, _)| l)
            .min();
        // A departure at the shortest length is the model's, not a boundary's.
        let Some(l) = first.filter(|l| lengths.first() != Some(l)) else {
            continue;
        };
        match found.iter_mut().find(|d| d.length == l) {
            Some(d) => d.prompts.push(source.to_string()),
            None => found.push(LengthDeparture {
                length: l,
                prompts: vec![source.to_string()],
            }),
        }
    }
    found.sort_by_key(|d| d.length);
    found
}
