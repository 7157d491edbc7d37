//! What the per-layer audit's stages share: the [`Context`] the output-level audit hands over,
//! the [`State`] that counts sessions and collects problems as runs go by, and small helpers
//! (reading a tensor a run returned or the golden run's activation, writing a rewritten model,
//! quantizing as the ONNX specification does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

use super::matching::TensorMatch;
use super::points::{Point, Quant};
use super::LayerOptions;
use crate::data::inputs::{InputFile, InputSet};
use crate::data::model::pb::ModelProto;
use crate::data::model::rewrite::write_model;
use crate::data::model::slice::MeasuredType;
use crate::data::model::LoadedModel;
use crate::data::tensor::{DType, Tensor, TensorData};
use crate::execution::exec::executor::target_job;
use crate::execution::exec::RunStatus;
use crate::execution::exec::{Executor, Job, JobResult, Outcome, OutputFile, PlannedTarget};
use crate::execution::runtime::Runtime;
use crate::report::compare::{LayerReport, TargetLayerSummary};

/// What the per-layer audit needs from the output-level audit that ran before it.
pub struct Context<'a> {
    pub model: &'a LoadedModel,
    /// The float reference (given with `--reference`, derived, or the copy a golden run with
    /// activations keeps); `None` with a stored golden of final outputs only.
    pub reference: Option<&'a LoadedModel>,
    /// A stored golden run with activations: read instead of running the reference.
    pub stored: Option<&'a crate::execution::golden::Golden>,
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

    /// A job of a planned target on a model file, in `dir`. Every model of the per-layer audit
    /// is a temporary one (tapped, isolated, a bisection's cut): its QNN context is not stored.
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
            (model, crate::execution::exec::ModelScope::Part),
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
pub fn result_of(o: &Outcome) -> Result<&JobResult, String> {
    match (&o.status, &o.result) {
        (RunStatus::Ok, Some(r)) => Ok(r),
        _ => Err(format!(
            "{}: {}",
            o.status.as_str(),
            crate::foundation::error::one_line(&anyhow!(o.error.clone().unwrap_or_default()))
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

/// A golden activation: returned by the tapped reference run, or a graph input (the sample).
pub(super) fn golden_tensor(ctx: &Context<'_>, golden: &JobResult, sample: usize, name: &str) -> Result<Tensor> {
    if let Some(t) = read(Some(golden), sample, name) {
        return Ok(t);
    }
    ctx.inputs
        .samples
        .get(sample)
        .and_then(|s| s.iter().find(|nt| nt.name == name))
        .map(|nt| nt.tensor.clone())
        .ok_or_else(|| anyhow::anyhow!("the reference run returned no {name}"))
}
