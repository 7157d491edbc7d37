//! Drift over time: a stateful model run as a stream (each sample is a step, some outputs fed
//! back as the next step's inputs), every step's outputs against the golden stream's. Per step
//! and output the metrics of `compare`; what each step decides (a threshold on a detector's
//! output, or the top-1 class); the step at which the fed-back state first falls below a chosen
//! SQNR; how fast its error grows. The same figures of a teacher-forced run (the golden state fed
//! at every step) separate what one step introduces from what the loop accumulates.

pub mod spec;

use anyhow::{Context, Result};

use crate::analyses::metrics::errors::ErrorStats;
use crate::data::tensor::Tensor;
use crate::execution::exec::OutputFile;
use crate::report::common::Num;
use crate::report::compare::{DecisionSeries, StepSeries, StreamRun};
pub use spec::{Feeds, StreamSpec};

use crate::analyses::accuracy::stats::median;
use crate::analyses::metrics::Decision;

/// One side of a stream: per step, every output file.
pub type Steps<'a> = &'a [Vec<OutputFile>];

/// What the figures of a run are measured against.
pub struct Golden<'a> {
    /// Per step, the golden run's outputs.
    pub steps: Steps<'a>,
    /// For each audited output (in the model's order), its name in the golden run.
    pub names: &'a [String],
    /// The audited model's outputs, in its order.
    pub outputs: &'a [String],
}

/// Reads the figures of a run (`run`, per step) against the golden stream.
pub fn measure(golden: &Golden<'_>, run: Steps<'_>, spec: &StreamSpec, decisions: &[Decision]) -> Result<StreamRun> {
    let steps = golden.steps.len().min(run.len());
    let mut series: Vec<StepSeries> = golden.outputs.iter().map(|n| empty_series(n)).collect();
    let mut agree: Vec<Vec<bool>> = vec![Vec::with_capacity(steps); decisions.len()];
    // Which output each decision reads (checked against the model when the stream was planned).
    let decided: Vec<usize> = decisions
        .iter()
        .map(|d| golden.outputs.iter().position(|n| n == d.output()).unwrap_or(0))
        .collect();
    for (s, (gold_files, run_files)) in golden.steps.iter().zip(run).enumerate() {
        crate::foundation::interrupt::check()?;
        let mut tensors = Vec::with_capacity(golden.outputs.len());
        for (k, name) in golden.outputs.iter().enumerate() {
            let gold = read(gold_files, &golden.names[k], s, "the golden run")?;
            let out = read(run_files, name, s, "the target")?;
            add_step(&mut series[k], &out, &gold);
            tensors.push((out, gold));
        }
        for ((decision, k), agreed) in decisions.iter().zip(&decided).zip(&mut agree) {
            let (out, gold) = &tensors[*k];
            agreed.push(decision.agrees(out, gold));
        }
    }
    let state: Vec<Num> = (0..steps)
        .map(|s| {
            let lowest = series
                .iter()
                .filter(|x| spec.state_outputs().any(|o| o == x.name))
                .map(|x| x.sqnr_db[s].0)
                .fold(f64::INFINITY, f64::min);
            Num(lowest)
        })
        .collect();
    let divergence_step = state
        .iter()
        .position(|v| v.0 < spec.divergence_db || v.0.is_nan())
        .map(|i| i + 1);
    Ok(StreamRun {
        outputs: series,
        state_sqnr_median_db: Num(median(&state.iter().map(|v| v.0).collect::<Vec<_>>()).unwrap_or(f64::NAN)),
        growth_db_per_step: growth(&state, divergence_step).map(Num),
        state_sqnr_db: state,
        divergence_step,
        decisions: decisions
            .iter()
            .zip(agree)
            .map(|(d, a)| decision_series(d, a))
            .collect(),
    })
}

fn read(files: &[OutputFile], name: &str, step: usize, whose: &str) -> Result<Tensor> {
    let f = files
        .iter()
        .find(|f| f.name == name)
        .with_context(|| format!("{whose} has no output '{name}' at step {}", step + 1))?;
    Tensor::read_npy(&f.path)
}

fn empty_series(name: &str) -> StepSeries {
    StepSeries {
        name: name.into(),
        sqnr_db: Vec::new(),
        max_abs: Vec::new(),
        cosine: Vec::new(),
        bit_identical_steps: 0,
    }
}

/// One step of one output: the same statistics `compare` keeps over samples, over this step
/// alone. Shapes that differ (a growing state that grew otherwise) are not measured (NaN).
fn add_step(series: &mut StepSeries, out: &Tensor, gold: &Tensor) {
    if out.shape != gold.shape {
        series.sqnr_db.push(Num(f64::NAN));
        series.max_abs.push(Num(f64::NAN));
        series.cosine.push(Num(f64::NAN));
        return;
    }
    let same = out.dtype() == gold.dtype();
    let mut stats = ErrorStats::new(same, same && out.dtype().is_float());
    stats.update(&out.data, &gold.data);
    series.sqnr_db.push(Num(stats.sqnr_db()));
    series.max_abs.push(Num(stats.max_abs()));
    series.cosine.push(Num(stats.cosine()));
    if stats.bit_identical == Some(stats.elements) {
        series.bit_identical_steps += 1;
    }
}

fn decision_series(d: &Decision, agrees: Vec<bool>) -> DecisionSeries {
    let disagreements = agrees.iter().filter(|a| !**a).count();
    DecisionSeries {
        decision: d.to_string(),
        agreement: if agrees.is_empty() {
            f64::NAN
        } else {
            (agrees.len() - disagreements) as f64 / agrees.len() as f64
        },
        first_disagreement: agrees.iter().position(|a| !a).map(|i| i + 1),
        disagreements,
        agrees,
    }
}

/// The least-squares slope of `-state` (the error in dB over the golden energy) against the
/// 1-based step, over steps `1..=until` (every step when `until` is `None`), finite values only.
fn growth(state: &[Num], until: Option<usize>) -> Option<f64> {
    let last = until.unwrap_or(state.len()).min(state.len());
    let points: Vec<(f64, f64)> = state[..last]
        .iter()
        .enumerate()
        .filter(|(_, v)| v.0.is_finite())
        .map(|(i, v)| ((i + 1) as f64, -v.0))
        .collect();
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
    let sxx: f64 = points.iter().map(|(x, _)| (x - mean_x) * (x - mean_x)).sum();
    Some(sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-worked: error energies of 1/10, 1/100, 1/1000 of the signal's are SQNRs of 10, 20,
    /// 30 dB, so `-SQNR` falls 10 dB per step.
    #[test]
    fn growth_is_the_least_squares_slope_of_the_error_in_db() {
        let state = [Num(10.0), Num(20.0), Num(30.0)];
        assert_eq!(growth(&state, None), Some(-10.0));
        // Up to the divergence step only, and infinities (exact steps) left out.
        let state = [Num(f64::INFINITY), Num(40.0), Num(30.0), Num(5.0), Num(50.0)];
        assert_eq!(growth(&state, Some(3)), Some(10.0));
        assert_eq!(growth(&state[..2], None), None);
    }
}
