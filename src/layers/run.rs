//! Running the per-layer audit: sizing the taps, splitting them into runs that fit the memory
//! budget, and for each run the tapped sessions (every target, and the reference on the CPU),
//! the isolated sessions, and the comparison of what they returned, before the next run starts.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context as _, Result};

use super::effects::EffectsAcc;
use super::matching::{self, TensorMatch};
use super::measure::LayerAcc;
use super::points::{points, Point, Quant};
use super::select::select;
use super::split::{retry_in_halves, retryable, Retried};
use super::tap::{self, GraphIndex, Unit};
use super::{LayerMode, LayerOptions, LayerResults};
use crate::exec::executor::{reference_job, target_job};
use crate::exec::{Executor, PlannedTarget};
use crate::exec::{Job, JobResult, Outcome, OutputFile, RunStatus};
use crate::inputs::InputFile;
use crate::inputs::InputSet;
use crate::model::pb::ModelProto;
use crate::model::rewrite::{pin_input_shapes, write_model};
use crate::model::slice::MeasuredType;
use crate::model::topology::Topology;
use crate::model::LoadedModel;
use crate::report::model::{LayerAuditInfo, TargetLayerSummary};
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

/// Where an isolated layer's input comes from.
#[derive(Debug, Clone)]
enum Feed {
    /// A graph input: the sample itself.
    GraphInput(String),
    /// Codes: the golden activation quantized with the producing QuantizeLinear's parameters.
    Codes(String, Quant),
    /// A float activation: the golden one.
    Float(String),
}

/// A selected point with what its isolated run needs.
struct Planned {
    unit: Option<(Unit, Vec<Feed>)>,
    /// Why the layer cannot run alone, when it cannot.
    unit_error: Option<String>,
}

/// The audit's state while runs go by.
pub(super) struct State<'a> {
    pub(super) ctx: &'a Context<'a>,
    pub(super) opts: &'a LayerOptions,
    pub(super) points: Vec<Point>,
    pub(super) matches: BTreeMap<String, TensorMatch>,
    /// Targets that ran (indices into `planned`).
    pub(super) ran: Vec<usize>,
    pub(super) q_proto: ModelProto,
    r_proto: Option<ModelProto>,
    types: HashMap<String, MeasuredType>,
    pub(super) sessions: usize,
    pub(super) problems: Vec<String>,
}

fn pinned(model: &LoadedModel, inputs: &InputSet) -> ModelProto {
    let shapes = inputs.shapes();
    let mut proto = model.proto.clone();
    pin_input_shapes(&mut proto, &shapes);
    proto
}

/// The output file of `name` for one sample.
fn output<'r>(r: &'r JobResult, sample: usize, name: &str) -> Option<&'r OutputFile> {
    r.outputs.get(sample)?.iter().find(|f| f.name == name)
}

pub(super) fn read(r: Option<&JobResult>, sample: usize, name: &str) -> Option<Tensor> {
    Tensor::read_npy(&output(r?, sample, name)?.path).ok()
}

/// The tensor `name` of one sample from whichever of `results` returned it.
fn read_any(results: &[JobResult], sample: usize, name: &str) -> Option<Tensor> {
    results
        .iter()
        .find_map(|r| Tensor::read_npy(&output(r, sample, name)?.path).ok())
}

/// The summary line of a session that failed and was retried in halves.
fn split_failure(what: &str, error: &str, retried: &Retried, items: usize) -> String {
    if retried.localised && !retried.failed.is_empty() {
        format!(
            "{what} failed ({error}); retried in halves: {} of {items} layer(s) make it fail, the others were measured",
            retried.failed.len()
        )
    } else if retried.failed.is_empty() {
        format!("{what} failed ({error}); retried in halves, every layer was then measured")
    } else {
        format!(
            "{what} failed ({error}); retried in halves without isolating a cause: {} of {items} layer(s) not measured",
            retried.failed.len()
        )
    }
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

impl<'a> State<'a> {
    fn reference_name(&self, float_name: &str) -> Option<&str> {
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

    pub(super) fn threads(&self, jobs: usize) -> usize {
        self.ctx.executor.threads(jobs)
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

    /// The layers upstream of `point` that run with it in isolation: those it reads, and theirs,
    /// up to `isolate_window - 1` layers back (graph-input quantization excluded: it has nothing
    /// to attribute).
    fn window(&self, point: usize) -> Vec<usize> {
        let mut chosen: Vec<usize> = Vec::new();
        let mut frontier = vec![point];
        for _ in 1..self.opts.isolate_window.max(1) {
            let next: Vec<usize> = frontier
                .iter()
                .flat_map(|&p| self.points[p].inputs.iter().copied())
                .filter(|&i| !chosen.contains(&i) && self.points[i].op_type != "QuantizeLinear")
                .collect();
            chosen.extend(next.iter().copied());
            frontier = next;
        }
        chosen.sort_unstable();
        chosen.dedup();
        chosen
    }

    /// Plans each selected point's isolated run: its unit and where each input comes from.
    fn plan_units(&self, selected: &[usize], index: &GraphIndex) -> Vec<Planned> {
        let by_code: HashMap<&str, usize> = self
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.quant.is_some())
            .map(|(i, p)| (p.tensor.as_str(), i))
            .collect();
        selected
            .iter()
            .map(|&p| {
                let point = &self.points[p];
                let unit_or = || -> Result<(Unit, Vec<Feed>), String> {
                    let node = point.node_index.ok_or("no node computes it")?;
                    let mut outputs = vec![point.tensor.clone()];
                    if point.quant.is_some() && point.float_name != point.tensor {
                        outputs.push(point.float_name.clone());
                    }
                    let window: Vec<(usize, Option<usize>)> = self
                        .window(p)
                        .into_iter()
                        .filter_map(|w| Some((self.points[w].node_index?, self.points[w].q_index)))
                        .chain(std::iter::once((node, point.q_index)))
                        .collect();
                    let unit = index.unit(&window, outputs);
                    let feeds = unit
                        .inputs
                        .iter()
                        .map(|t| {
                            if index.topo.inputs.contains(t) {
                                return Ok(Feed::GraphInput(t.clone()));
                            }
                            if let Some(&c) = by_code.get(t.as_str()) {
                                let src = &self.points[c];
                                let r = self
                                    .reference_name(&src.float_name)
                                    .ok_or_else(|| format!("its input {t} has no counterpart in the reference"))?;
                                return Ok(Feed::Codes(r.to_string(), src.quant.ok_or("unquantized")?));
                            }
                            self.reference_name(t)
                                .map(|r| Feed::Float(r.to_string()))
                                .ok_or_else(|| format!("its input {t} has no counterpart in the reference"))
                        })
                        .collect::<Result<Vec<_>, String>>()?;
                    Ok((unit, feeds))
                };
                match unit_or() {
                    Ok(u) => Planned {
                        unit: Some(u),
                        unit_error: None,
                    },
                    Err(e) => Planned {
                        unit: None,
                        unit_error: Some(e),
                    },
                }
            })
            .collect()
    }

    /// One compile-only CPU session of the model with every tensor the audit will expose: ONNX
    /// Runtime's type and shape inference says what they are.
    fn size(&mut self, tensors: &[String]) -> Result<()> {
        let cpu = self
            .ctx
            .cpu
            .ok_or_else(|| anyhow!("no CPU build to infer the tapped tensors' types"))?;
        let dir = self.ctx.work.join("layers").join("sizing");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("model.onnx");
        write_model(&tap::tapped(&self.q_proto, tensors), self.ctx.model, &path)?;
        let (mut job, jdir) = reference_job(cpu, path, &[], &dir, &self.ctx.inputs.free_dims);
        job.compile_only = true;
        job.target_id = "layer-sizing".into();
        let outcomes = self.run_jobs(&[(job, jdir)])?;
        let result = result_of(&outcomes[0])
            .map_err(|e| anyhow!("ONNX Runtime cannot infer the types of the tapped tensors ({e})"))?;
        for t in &result.output_types {
            // An empty shape is what ONNX Runtime reports when inference left the rank open.
            if !t.shape.is_empty() && t.shape.iter().all(|&d| d >= 0) && t.elem_type != 0 {
                self.types.insert(
                    t.name.clone(),
                    MeasuredType {
                        elem_type: t.elem_type,
                        shape: t.shape.iter().map(|&d| d as usize).collect(),
                    },
                );
            }
        }
        for t in &result.output_types {
            if t.elem_type == 0 {
                self.problems.push(format!("{}: not a tensor; not compared", t.name));
            }
        }
        Ok(())
    }

    /// Bytes one run returns per sample for a point (its tensor on every target, the value
    /// before rounding on the baseline, the reference's float).
    fn point_bytes(&self, p: &Point, largest: u64) -> u64 {
        let elems = |t: &str| self.types.get(t).map(|m| m.shape.iter().product::<usize>() as u64);
        let size = |t: &str| {
            self.types
                .get(t)
                .and_then(|m| DType::from_onnx(m.elem_type))
                .map(|d| d.size() as u64)
                .unwrap_or(4)
        };
        let own = elems(&p.tensor).map(|e| e * size(&p.tensor)).unwrap_or(largest);
        let float = elems(&p.tensor).map(|e| e * 4).unwrap_or(largest);
        own + if p.quant.is_some() { 2 * float } else { float }
    }
}

/// Writes a model beside its original's external data.
pub(super) fn write(proto: &ModelProto, original: &LoadedModel, path: &Path) -> Result<PathBuf> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    write_model(proto, original, path)?;
    Ok(path.to_path_buf())
}

/// The per-layer audit of the `Tap` mode (and the common preparation of `Bisect`).
pub fn execute(ctx: &Context<'_>, opts: &LayerOptions) -> LayerResults {
    let mut info = LayerAuditInfo {
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
        tolerance_lsb: opts.tolerance_lsb,
        tap_runs: 0,
        sessions: 0,
        isolated: false,
        isolate_window: opts.isolate_window,
        seconds: 0.0,
        top: opts.top,
        problems: Vec::new(),
    };
    let mut targets: Vec<Option<(Vec<crate::report::model::LayerReport>, TargetLayerSummary)>> =
        vec![None; ctx.planned.len()];
    match prepare(ctx, opts, &mut info) {
        Ok(Some((mut state, selected, index))) => {
            let outcome = match opts.mode {
                LayerMode::Tap => tap_all(&mut state, &selected, &index, &mut info),
                LayerMode::Bisect => super::bisect::run(&mut state, &selected),
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

/// Points, matching, selection, sizing. `None` when nothing can be tapped (said in `info`).
fn prepare<'a>(
    ctx: &'a Context<'a>,
    opts: &'a LayerOptions,
    info: &mut LayerAuditInfo,
) -> Result<Option<(State<'a>, Vec<usize>, GraphIndex)>> {
    let graph = ctx.model.proto.graph.as_ref().context("the model has no graph")?;
    let pts = points(graph, ctx.model.path.parent());
    info.points = pts.len();
    let quantized_topo = Topology::of_graph(graph);
    let matches = match ctx.reference {
        Some(r) => matching::match_tensors(&quantized_topo, &Topology::of_model(&r.proto)),
        None => {
            info.problems.push(
                "no reference model (the stored golden run holds final outputs only; `golden create --layers` stores activations): layers are compared with the baseline, without SQNR or isolated runs"
                    .into(),
            );
            BTreeMap::new()
        }
    };
    let ran: Vec<usize> = (0..ctx.planned.len()).filter(|&i| ctx.untapped[i].is_some()).collect();
    let mut state = State {
        ctx,
        opts,
        points: pts,
        matches,
        ran,
        q_proto: pinned(ctx.model, ctx.inputs),
        r_proto: ctx.reference.map(|r| pinned(r, ctx.inputs)),
        types: HashMap::new(),
        sessions: 0,
        problems: Vec::new(),
    };
    let (selected, problems) = select(&state.points, &opts.selection, &|p: &Point| {
        state.matches.get(&p.float_name).map(|m| m.reference.clone())
    })?;
    info.problems.extend(problems);
    if selected.is_empty() {
        info.problems.push("no layer selected: nothing to tap".into());
        return Ok(None);
    }
    let index = GraphIndex::of(graph);
    // Sizing covers what the isolated runs read too (inputs of units may be unselected layers).
    let units = state.plan_units(&selected, &index);
    let mut sized: Vec<String> = Vec::new();
    for &p in &selected {
        let pt = &state.points[p];
        sized.push(pt.tensor.clone());
        if pt.quant.is_some() {
            sized.push(pt.float_name.clone());
        }
    }
    for u in units.iter().filter_map(|u| u.unit.as_ref()) {
        sized.extend(u.0.inputs.iter().filter(|t| !index.topo.inputs.contains(t)).cloned());
    }
    sized.sort();
    sized.dedup();
    state.size(&sized)?;
    // Integer tensors that are not codes (shapes, indices) are not activations.
    let selected: Vec<usize> = selected
        .into_iter()
        .filter(|&p| {
            let pt = &state.points[p];
            pt.quant.is_some()
                || state
                    .types
                    .get(&pt.tensor)
                    .and_then(|m| DType::from_onnx(m.elem_type))
                    .is_some_and(|d| d.is_float())
        })
        .collect();
    info.selected = selected.len();
    for &p in &selected {
        match state.matches.get(&state.points[p].float_name) {
            Some(m) => {
                info.matched += 1;
                let kind = serde_json::to_value(m.how)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                *info.matched_by.entry(kind).or_default() += 1;
            }
            None => info.unmatched.push(state.points[p].float_name.clone()),
        }
    }
    if ctx.reference.is_some() && info.matched == 0 && info.selected > 0 {
        info.problems.push(format!(
            "none of the {} tapped layers has a counterpart in the reference model (no tensor name, quantizer naming convention or graph structure in common): they are compared with the baseline only, without SQNR or isolated runs",
            info.selected
        ));
    }
    Ok(Some((state, selected, index)))
}

/// Per target (index into `planned`): its layers and summary.
pub type PerTarget = Vec<(usize, (Vec<crate::report::model::LayerReport>, TargetLayerSummary))>;

/// Splits the selection into runs whose tensors fit the budget, in execution order.
fn runs_of(state: &State<'_>, selected: &[usize]) -> Vec<Vec<usize>> {
    let largest = selected
        .iter()
        .filter_map(|&p| state.types.get(&state.points[p].tensor))
        .map(|m| m.shape.iter().product::<usize>() as u64 * 4)
        .max()
        .unwrap_or(4 << 20);
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut used = 0u64;
    for (k, &p) in selected.iter().enumerate() {
        let bytes = state.point_bytes(&state.points[p], largest);
        match runs.last_mut() {
            Some(run) if used + bytes <= state.opts.tap_budget_bytes => {
                run.push(k);
                used += bytes;
            }
            _ => {
                runs.push(vec![k]);
                used = bytes;
            }
        }
    }
    runs
}

/// Cumulative and isolated runs of every selected point, run by run.
fn tap_all(
    state: &mut State<'_>,
    selected: &[usize],
    index: &GraphIndex,
    info: &mut LayerAuditInfo,
) -> Result<PerTarget> {
    let ctx = state.ctx;
    let units = state.plan_units(selected, index);
    let isolate = state.opts.isolate && ctx.reference.is_some();
    info.isolated = isolate;
    let quantized: Vec<bool> = selected.iter().map(|&p| state.points[p].quant.is_some()).collect();
    let has_ref = |state: &State<'_>, p: usize| state.reference_name(&state.points[p].float_name).is_some();
    let new_accs = |state: &State<'_>, target: usize| -> Vec<LayerAcc> {
        selected
            .iter()
            .zip(&quantized)
            .map(|(&p, &q)| {
                LayerAcc::new(
                    has_ref(state, p),
                    state.ctx.baseline.is_some() && !state.is_baseline(target),
                    q,
                )
            })
            .collect()
    };
    let mut cumulative: BTreeMap<usize, Vec<LayerAcc>> = state.ran.iter().map(|&t| (t, new_accs(state, t))).collect();
    let mut isolated: BTreeMap<usize, Vec<LayerAcc>> = state.ran.iter().map(|&t| (t, new_accs(state, t))).collect();
    let mut effects: BTreeMap<usize, EffectsAcc> = state
        .ran
        .iter()
        .filter_map(|&t| Some((t, EffectsAcc::new(ctx.untapped[t]?))))
        .collect();
    let mut failures: BTreeMap<usize, String> = BTreeMap::new();
    let model_outputs: Vec<String> = ctx
        .model
        .proto
        .graph
        .as_ref()
        .map(|g| g.output.iter().filter_map(|o| o.name.clone()).collect())
        .unwrap_or_default();
    for (k, u) in units.iter().enumerate() {
        if let (Some(e), true) = (&u.unit_error, isolate) {
            for accs in isolated.values_mut() {
                accs[k].error = Some(format!("not run alone: {e}"));
            }
        }
    }
    let runs = runs_of(state, selected);
    info.tap_runs = runs.len();
    for (n, run) in runs.iter().enumerate() {
        crate::interrupt::check()?;
        let dir = ctx.work.join("layers").join(format!("run{n}"));
        let taps: Vec<String> = run.iter().map(|&k| state.points[selected[k]].tensor.clone()).collect();
        let with_floats: Vec<String> = run
            .iter()
            .flat_map(|&k| {
                let p = &state.points[selected[k]];
                std::iter::once(p.tensor.clone()).chain(p.quant.map(|_| p.float_name.clone()))
            })
            .collect();
        let mut ref_taps: Vec<String> = run
            .iter()
            .filter_map(|&k| {
                state
                    .reference_name(&state.points[selected[k]].float_name)
                    .map(String::from)
            })
            .collect();
        if isolate {
            for &k in run {
                if let Some((_, feeds)) = &units[k].unit {
                    for f in feeds {
                        if let Feed::Codes(r, _) | Feed::Float(r) = f {
                            ref_taps.push(r.clone());
                        }
                    }
                }
            }
        }
        ref_taps.sort();
        ref_taps.dedup();

        // Cumulative: the whole model, tapped, on every target and the reference.
        let q_path = write(&tap::tapped(&state.q_proto, &taps), ctx.model, &dir.join("model.onnx"))?;
        let base_path = write(
            &tap::tapped(&state.q_proto, &with_floats),
            ctx.model,
            &dir.join("model-baseline.onnx"),
        )?;
        let threads = state.threads(state.ran.len() + 1);
        let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
        let mut job_target: Vec<Option<usize>> = Vec::new();
        let mut stored: Option<JobResult> = None;
        if let (Some(g), Some(_)) = (ctx.stored, &state.r_proto) {
            let read = (0..ctx.inputs.samples.len())
                .map(|k| g.activations(k, &ref_taps, &dir.join("golden")))
                .collect::<Result<Vec<_>>>();
            match read {
                Ok(outputs) => stored = Some(JobResult::stored(outputs)),
                Err(e) => state.problems.push(format!(
                    "the stored activations could not be read ({e:#}): no SQNR for run {n}"
                )),
            }
        } else if let (Some(r_proto), Some(reference), Some(cpu)) = (&state.r_proto, ctx.reference, ctx.cpu) {
            let path = write(&tap::tapped(r_proto, &ref_taps), reference, &dir.join("reference.onnx"))?;
            jobs.push(reference_job(
                cpu,
                path,
                ctx.input_files,
                &dir.join("golden"),
                &ctx.inputs.free_dims,
            ));
            job_target.push(None);
        }
        for &t in &state.ran {
            let path = if state.is_baseline(t) { &base_path } else { &q_path };
            if let Some(j) = state.target_job(t, path, ctx.input_files, &dir, threads) {
                jobs.push(j);
                job_target.push(Some(t));
            }
        }
        let outcomes = state.run_jobs(&jobs)?;
        let mut golden: Option<JobResult> = stored;
        let mut results: BTreeMap<usize, Vec<JobResult>> = BTreeMap::new();
        for (o, t) in outcomes.iter().zip(&job_target) {
            match (t, result_of(o)) {
                (None, Ok(r)) => golden = Some(r.clone()),
                (None, Err(e)) => state
                    .problems
                    .push(format!("the tapped reference run failed ({e}): no SQNR for run {n}")),
                (Some(t), Ok(r)) => {
                    results.insert(*t, vec![r.clone()]);
                }
                (Some(t), Err(e)) if retryable(o) => {
                    let t = *t;
                    let floats = state.is_baseline(t);
                    let q_proto = state.q_proto.clone();
                    let points = state.points.clone();
                    let mut build = |subset: &[usize], d: &Path| -> Result<(PathBuf, Vec<Vec<InputFile>>)> {
                        let taps: Vec<String> = subset
                            .iter()
                            .flat_map(|&k| {
                                let p = &points[selected[k]];
                                std::iter::once(p.tensor.clone())
                                    .chain(p.quant.filter(|_| floats).map(|_| p.float_name.clone()))
                            })
                            .collect();
                        let path = write(&tap::tapped(&q_proto, &taps), ctx.model, &d.join("model.onnx"))?;
                        Ok((path, ctx.input_files.to_vec()))
                    };
                    let retried = retry_in_halves(state, t, run, &e, &mut build, &dir.join(format!("retry{t}")))?;
                    for (k, err) in &retried.failed {
                        if let Some(accs) = cumulative.get_mut(&t) {
                            accs[*k].error = Some(format!("the tapped session fails with this tensor exposed: {err}"));
                        }
                    }
                    failures
                        .entry(t)
                        .or_insert_with(|| split_failure("a tapped session", &e, &retried, run.len()));
                    results.insert(t, retried.results);
                }
                (Some(t), Err(e)) => {
                    failures
                        .entry(*t)
                        .or_insert_with(|| format!("a tapped session failed: {e}"));
                    if let Some(accs) = cumulative.get_mut(t) {
                        for &k in run {
                            accs[k].error = Some(format!("the tapped session failed: {e}"));
                        }
                    }
                }
            }
        }
        for (&t, rs) in &results {
            if let (Some(e), Some(u)) = (effects.get_mut(&t), ctx.untapped[t]) {
                for r in rs {
                    e.add(u, r, &model_outputs);
                }
            }
        }
        let baseline: &[JobResult] = ctx.baseline.and_then(|b| results.get(&b)).map_or(&[], |v| v.as_slice());
        for s in 0..ctx.input_files.len() {
            for &k in run {
                let p = &state.points[selected[k]];
                let gold = state
                    .reference_name(&p.float_name)
                    .and_then(|r| golden.as_ref().and_then(|g| golden_tensor(ctx, g, s, r).ok()));
                let base = read_any(baseline, s, &p.tensor);
                let base_float = p.quant.and_then(|_| read_any(baseline, s, &p.float_name));
                for (&t, rs) in &results {
                    let Some(accs) = cumulative.get_mut(&t) else { continue };
                    if accs[k].error.is_some() {
                        continue;
                    }
                    match read_any(rs, s, &p.tensor) {
                        Some(x) => accs[k].add(&x, p.quant.as_ref(), gold.as_ref(), base.as_ref(), base_float.as_ref()),
                        None => accs[k].error = Some(format!("{} missing from the tapped run", p.tensor)),
                    }
                }
            }
        }

        if isolate {
            isolated_run(
                state,
                selected,
                run,
                &units,
                golden.as_ref(),
                &dir,
                &mut isolated,
                &mut failures,
            )?;
        }
        drop(outcomes);
        if !ctx.executor.options().keep_work {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    let mut out = Vec::new();
    for &t in &state.ran {
        let layers = super::reports(
            &state.points,
            selected,
            &state.matches,
            &cumulative[&t],
            isolate.then(|| isolated[&t].as_slice()),
        );
        let summary = TargetLayerSummary {
            first_divergence: super::first_divergence(&layers, state.opts.tolerance_lsb),
            layers_not_compared: super::not_compared(&layers, state.is_baseline(t) || state.ctx.baseline.is_none()),
            tap_effects: effects.remove(&t).and_then(EffectsAcc::finish),
            bisect: None,
            error: failures.remove(&t),
        };
        out.push((t, (layers, summary)));
    }
    Ok(out)
}

/// Writes one isolated input; its type is the type of what is fed (inference may not know it).
fn feed_file(t: Tensor, name: &str, path: &Path, types: &mut HashMap<String, MeasuredType>) -> Result<PathBuf> {
    t.write_npy(path)?;
    types.insert(
        name.to_string(),
        MeasuredType {
            elem_type: t.dtype().onnx_code(),
            shape: t.shape.clone(),
        },
    );
    Ok(path.to_path_buf())
}

/// A golden activation: returned by the tapped reference run, or a graph input (the sample).
fn golden_tensor(ctx: &Context<'_>, golden: &JobResult, sample: usize, name: &str) -> Result<Tensor> {
    if let Some(t) = read(Some(golden), sample, name) {
        return Ok(t);
    }
    ctx.inputs
        .samples
        .get(sample)
        .and_then(|s| s.iter().find(|nt| nt.name == name))
        .map(|nt| nt.tensor.clone())
        .ok_or_else(|| anyhow!("the reference run returned no {name}"))
}

/// The isolated run of one tap run: every unit side by side in one model, fed the golden
/// activations (quantized as the producing layer does for codes).
#[allow(clippy::too_many_arguments)]
fn isolated_run(
    state: &mut State<'_>,
    selected: &[usize],
    run: &[usize],
    units: &[Planned],
    golden: Option<&JobResult>,
    dir: &Path,
    isolated: &mut BTreeMap<usize, Vec<LayerAcc>>,
    failures: &mut BTreeMap<usize, String>,
) -> Result<()> {
    let ctx = state.ctx;
    let Some(golden) = golden else { return Ok(()) };
    let iso: Vec<(usize, &Unit, &Vec<Feed>)> = run
        .iter()
        .filter_map(|&k| units[k].unit.as_ref().map(|(u, f)| (k, u, f)))
        .collect();
    if iso.is_empty() {
        return Ok(());
    }
    // Inputs: per sample, one file per unit input.
    let mut samples: Vec<Vec<InputFile>> = Vec::new();
    let mut types = state.types.clone();
    for (s, files) in ctx.input_files.iter().enumerate() {
        let sdir = dir.join("iso-inputs").join(format!("s{s}"));
        std::fs::create_dir_all(&sdir)?;
        let mut sample = Vec::new();
        for &(k, unit, feeds) in &iso {
            for (i, (t, feed)) in unit.inputs.iter().zip(feeds).enumerate() {
                let name = tap::unit_name(k, t);
                let path = match feed {
                    Feed::GraphInput(g) => {
                        let f = files.iter().find(|f| &f.name == g).context("sample input missing")?;
                        if let Some(nt) = ctx.inputs.samples[s].iter().find(|nt| &nt.name == g) {
                            types.insert(
                                t.clone(),
                                MeasuredType {
                                    elem_type: nt.tensor.dtype().onnx_code(),
                                    shape: nt.tensor.shape.clone(),
                                },
                            );
                        }
                        f.path.clone()
                    }
                    Feed::Codes(r, q) => {
                        let g = golden_tensor(ctx, golden, s, r)?;
                        let data = quantize(&super::measure::real_values(&g, None), q)
                            .ok_or_else(|| anyhow!("codes of type {} cannot be fed", q.elem_type))?;
                        feed_file(
                            Tensor::new(g.shape.clone(), data)?,
                            t,
                            &sdir.join(format!("u{k}-{i}.npy")),
                            &mut types,
                        )?
                    }
                    Feed::Float(r) => {
                        let g = golden_tensor(ctx, golden, s, r)?;
                        feed_file(g, t, &sdir.join(format!("u{k}-{i}.npy")), &mut types)?
                    }
                };
                sample.push(InputFile { name, path });
            }
        }
        samples.push(sample);
    }
    let units_k: Vec<(usize, Unit)> = iso.iter().map(|&(k, u, _)| (k, u.clone())).collect();
    // The baseline also returns each value before rounding (tie evidence); others only results.
    let plain: Vec<(usize, Unit)> = units_k
        .iter()
        .map(|(k, u)| {
            let mut u = u.clone();
            u.outputs.truncate(1);
            (*k, u)
        })
        .collect();
    let (Some(model), Some(base_model)) = (
        tap::isolation_model(&state.q_proto, &plain, &types),
        tap::isolation_model(&state.q_proto, &units_k, &types),
    ) else {
        state
            .problems
            .push("isolated runs skipped: an isolated layer's input has no inferred type".into());
        return Ok(());
    };
    let q_path = write(&model, ctx.model, &dir.join("isolated.onnx"))?;
    let base_path = write(&base_model, ctx.model, &dir.join("isolated-baseline.onnx"))?;
    let threads = state.threads(state.ran.len());
    let mut jobs = Vec::new();
    let mut job_target = Vec::new();
    let idir = dir.join("iso");
    for &t in &state.ran {
        let path = if state.is_baseline(t) { &base_path } else { &q_path };
        if let Some(j) = state.target_job(t, path, &samples, &idir, threads) {
            jobs.push(j);
            job_target.push(t);
        }
    }
    let outcomes = state.run_jobs(&jobs)?;
    let mut results: BTreeMap<usize, Vec<JobResult>> = BTreeMap::new();
    let iso_items: Vec<usize> = iso.iter().map(|&(k, _, _)| k).collect();
    for (o, &t) in outcomes.iter().zip(&job_target) {
        match result_of(o) {
            Ok(r) => {
                results.insert(t, vec![r.clone()]);
            }
            Err(e) if retryable(o) => {
                let with_floats = state.is_baseline(t);
                let q_proto = state.q_proto.clone();
                let mut build = |subset: &[usize], d: &Path| -> Result<(PathBuf, Vec<Vec<InputFile>>)> {
                    let chosen: Vec<(usize, Unit)> = (if with_floats { &units_k } else { &plain })
                        .iter()
                        .filter(|(k, _)| subset.contains(k))
                        .cloned()
                        .collect();
                    let model = tap::isolation_model(&q_proto, &chosen, &types)
                        .ok_or_else(|| anyhow!("an isolated layer's input has no type"))?;
                    let path = write(&model, ctx.model, &d.join("isolated.onnx"))?;
                    let prefixes: Vec<String> = subset.iter().map(|&k| tap::unit_name(k, "")).collect();
                    let inputs = samples
                        .iter()
                        .map(|s| {
                            s.iter()
                                .filter(|f| prefixes.iter().any(|p| f.name.starts_with(p.as_str())))
                                .cloned()
                                .collect()
                        })
                        .collect();
                    Ok((path, inputs))
                };
                let retried =
                    retry_in_halves(state, t, &iso_items, &e, &mut build, &dir.join(format!("iso-retry{t}")))?;
                if let Some(accs) = isolated.get_mut(&t) {
                    for (k, err) in &retried.failed {
                        accs[*k].error = Some(format!("the layer alone fails on this target: {err}"));
                    }
                }
                failures
                    .entry(t)
                    .or_insert_with(|| split_failure("an isolated session", &e, &retried, iso_items.len()));
                results.insert(t, retried.results);
            }
            Err(e) => {
                if let Some(accs) = isolated.get_mut(&t) {
                    for &k in &iso_items {
                        accs[k].error = Some(format!("the isolated session failed: {e}"));
                    }
                }
                failures
                    .entry(t)
                    .or_insert_with(|| format!("an isolated session failed: {e}"));
            }
        }
    }
    let baseline: &[JobResult] = ctx.baseline.and_then(|b| results.get(&b)).map_or(&[], |v| v.as_slice());
    for s in 0..ctx.input_files.len() {
        for &(k, _, _) in &iso {
            let p = &state.points[selected[k]];
            let gold = state
                .reference_name(&p.float_name)
                .and_then(|r| golden_tensor(ctx, golden, s, r).ok());
            let name = tap::unit_name(k, &p.tensor);
            let base = read_any(baseline, s, &name);
            let base_float = p
                .quant
                .and_then(|_| read_any(baseline, s, &tap::unit_name(k, &p.float_name)));
            for (&t, rs) in &results {
                let Some(accs) = isolated.get_mut(&t) else { continue };
                if accs[k].error.is_some() {
                    continue;
                }
                match read_any(rs, s, &name) {
                    Some(x) => accs[k].add(&x, p.quant.as_ref(), gold.as_ref(), base.as_ref(), base_float.as_ref()),
                    None => accs[k].error = Some(format!("{name} missing from the isolated run")),
                }
            }
        }
    }
    Ok(())
}
