//! The per-layer audit's entry point and what its stages share: the [`Context`] the output-level
//! audit hands over, the [`State`] that counts sessions and collects problems as runs go by, and
//! small helpers (reading a tensor a run returned, writing a rewritten model).
//!
//! The stages: Plan ([`super::plan`]: points, matching, selection, sizing, runs within the tap
//! budget, isolation units), then per run Execute and Analyze ([`super::cumulative`],
//! [`super::isolated`]: sessions, retries in halves, accumulation), then Report (layer rows and
//! the summary of each target). Bisection ([`super::bisect`]) replaces the runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

use super::matching::TensorMatch;
use super::points::{Point, Quant};
use super::{LayerMode, LayerOptions, LayerResults};
use crate::exec::executor::target_job;
use crate::exec::{Executor, Job, JobResult, Outcome, OutputFile, PlannedTarget, RunStatus};
use crate::inputs::{InputFile, InputSet};
use crate::model::pb::ModelProto;
use crate::model::rewrite::write_model;
use crate::model::slice::MeasuredType;
use crate::model::LoadedModel;
use crate::report::model::{LayerAuditInfo, LayerReport, TargetLayerSummary};
use crate::runtime::Runtime;
use crate::tensor::{DType, Tensor, TensorData};

/// What the per-layer audit needs from the output-level audit that ran before it.
pub struct Context<'a> {
    pub model: &'a LoadedModel,
    /// The float reference (given with `--reference`, derived, or the copy a golden run with
    /// activations keeps); `None` with a stored golden of final outputs only.
    pub reference: Option<&'a LoadedModel>,
    /// A stored golden run with activations: read instead of running the reference.
    pub stored: Option<&'a crate::golden::Golden>,
    pub planned: &'a [PlannedTarget],
    /// Per planned target: the untapped run's result, when the target ran.
    pub untapped: Vec<Option<&'a JobResult>>,
    /// Index of the baseline target in `planned`, when it ran.
    pub baseline: Option<usize>,
    /// The CPU build: the reference runs and the sizing session.
    pub cpu: Option<&'a Runtime>,
    pub inputs: &'a InputSet,
    pub input_files: &'a [Vec<InputFile>],
    pub work: &'a Path,
    pub executor: &'a Executor,
}

/// The audit's state while runs go by: the plan's facts, and the sessions and problems so far.
pub(super) struct State<'a> {
    pub(super) ctx: &'a Context<'a>,
    pub(super) opts: &'a LayerOptions,
    pub(super) points: Vec<Point>,
    pub(super) matches: BTreeMap<String, TensorMatch>,
    /// Targets that ran (indices into `planned`).
    pub(super) ran: Vec<usize>,
    /// The audited model and the reference with their input dimensions pinned.
    pub(super) q_proto: ModelProto,
    pub(super) r_proto: Option<ModelProto>,
    /// Types and shapes of the tensors the audit exposes, from the sizing session.
    pub(super) types: std::collections::HashMap<String, MeasuredType>,
    pub(super) sessions: usize,
    pub(super) problems: Vec<String>,
}

/// Per target (index into `planned`): its layers and summary.
pub type PerTarget = Vec<(usize, (Vec<LayerReport>, TargetLayerSummary))>;

impl State<'_> {
    /// The reference tensor paired with a float tensor of the audited model.
    pub(super) fn reference_name(&self, float_name: &str) -> Option<&str> {
        self.matches.get(float_name).map(|m| m.reference.as_str())
    }

    pub(super) fn is_baseline(&self, target: usize) -> bool {
        self.ctx.baseline == Some(target)
    }

    /// Runs jobs in the pool, counting sessions.
    pub(super) fn run_jobs(&mut self, jobs: &[(Job, PathBuf)]) -> Result<Vec<Outcome>> {
        self.sessions += jobs.len();
        self.ctx.executor.run(jobs)
    }

    pub(super) fn threads(&self) -> usize {
        self.ctx.executor.threads()
    }

    /// A job of a planned target on a model file, in `dir`.
    pub(super) fn target_job(
        &self,
        target: usize,
        model: &Path,
        samples: &[Vec<InputFile>],
        dir: &Path,
        threads: usize,
    ) -> Option<(Job, PathBuf)> {
        target_job(
            target,
            &self.ctx.planned[target],
            model,
            samples,
            dir,
            threads,
            &self.ctx.inputs.free_dims,
        )
    }
}

/// The output file of `name` for one sample.
fn output<'r>(r: &'r JobResult, sample: usize, name: &str) -> Option<&'r OutputFile> {
    r.outputs.get(sample)?.iter().find(|f| f.name == name)
}

/// The tensor `name` of one sample from a run's result.
pub(super) fn read(r: Option<&JobResult>, sample: usize, name: &str) -> Option<Tensor> {
    Tensor::read_npy(&output(r?, sample, name)?.path).ok()
}

/// The tensor `name` of one sample from whichever of `results` returned it.
pub(super) fn read_any(results: &[JobResult], sample: usize, name: &str) -> Option<Tensor> {
    results
        .iter()
        .find_map(|r| Tensor::read_npy(&output(r, sample, name)?.path).ok())
}

/// A finished worker's result, or why there is none.
pub(super) fn result_of(o: &Outcome) -> Result<&JobResult, String> {
    match (&o.status, &o.result) {
        (RunStatus::Ok, Some(r)) => Ok(r),
        _ => Err(format!(
            "{}: {}",
            o.status.as_str(),
            crate::error::one_line(&anyhow!(o.error.clone().unwrap_or_default()))
        )),
    }
}

/// QuantizeLinear as the ONNX specification defines it: `x / scale` in float32, rounded half to
/// even, plus the zero point, saturated to the code type.
pub fn quantize(x: &[f32], q: &Quant) -> Option<TensorData> {
    let dtype = DType::from_onnx(q.elem_type)?;
    let (lo, hi) = dtype.int_range()?;
    let codes = x
        .iter()
        .map(|&v| ((v / q.scale).round_ties_even() as f64 + q.zero_point).clamp(lo, hi));
    Some(match dtype {
        DType::Uint8 => TensorData::Uint8(codes.map(|c| c as u8).collect()),
        DType::Int8 => TensorData::Int8(codes.map(|c| c as i8).collect()),
        DType::Uint16 => TensorData::Uint16(codes.map(|c| c as u16).collect()),
        DType::Int16 => TensorData::Int16(codes.map(|c| c as i16).collect()),
        DType::Int32 => TensorData::Int32(codes.map(|c| c as i32).collect()),
        _ => return None,
    })
}

/// Writes a model beside its original's external data.
pub(super) fn write(proto: &ModelProto, original: &LoadedModel, path: &Path) -> Result<PathBuf> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    write_model(proto, original, path)?;
    Ok(path.to_path_buf())
}

/// The common part of the report before anything ran.
fn blank_info(opts: &LayerOptions) -> LayerAuditInfo {
    LayerAuditInfo {
        mode: match (opts.mode, opts.selection.is_all()) {
            (LayerMode::Bisect, _) => "bisect".into(),
            (LayerMode::Tap, true) => "all".into(),
            (LayerMode::Tap, false) => "selected".into(),
        },
        points: 0,
        selected: 0,
        matched: 0,
        matched_by: BTreeMap::new(),
        unmatched: Vec::new(),
        divergence: opts.divergence,
        tap_runs: 0,
        sessions: 0,
        isolated: false,
        isolate_window: opts.isolate_window,
        seconds: 0.0,
        top: opts.top,
        problems: Vec::new(),
    }
}

/// The per-layer audit of either mode. Never fails: what goes wrong is in `info.problems`.
pub fn execute(ctx: &Context<'_>, opts: &LayerOptions) -> LayerResults {
    let mut info = blank_info(opts);
    let mut targets: Vec<Option<(Vec<LayerReport>, TargetLayerSummary)>> = vec![None; ctx.planned.len()];
    let planning = crate::timings::stage("layers: plan");
    let prepared = super::plan::prepare(ctx, opts, &mut info);
    drop(planning);
    match prepared {
        Ok(Some((mut state, selected, index))) => {
            let outcome = match opts.mode {
                LayerMode::Tap => super::cumulative::tap_all(&mut state, &selected, &index, &mut info),
                LayerMode::Bisect => {
                    let _stage = crate::timings::stage("layers: bisection");
                    super::bisect::run(&mut state, &selected)
                }
            };
            match outcome {
                Ok(per_target) => {
                    for (t, v) in per_target {
                        targets[t] = Some(v);
                    }
                }
                Err(e) => state
                    .problems
                    .push(format!("per-layer audit stopped: {}", crate::error::one_line(&e))),
            }
            info.sessions = state.sessions;
            info.problems.append(&mut state.problems);
        }
        Ok(None) => {}
        Err(e) => info.problems.push(crate::error::one_line(&e)),
    }
    LayerResults { info, targets }
}
