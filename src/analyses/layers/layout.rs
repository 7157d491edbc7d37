//! The layout of the per-layer audit (its Plan stage): the observation points of the audited graph, their
//! counterparts in the reference, the user's selection, one compile-only sizing session for the
//! types of everything exposed, the runs the taps are split into (each within the tap budget),
//! and each layer's isolation unit with where its inputs come from.

use std::collections::{BTreeMap, HashMap};

use anyhow::{anyhow, Context as _, Result};

use super::matching::{self, TensorMatch};
use super::points::{points, Point, Quant};
use super::select::select;
use super::state::{result_of, Context, State};
use super::tap::{self, GraphIndex, Unit};
use super::LayerOptions;
use crate::data::inputs::InputSet;
use crate::data::model::pb::ModelProto;
use crate::data::model::rewrite::{pin_input_shapes, write_model};
use crate::data::model::slice::MeasuredType;
use crate::data::model::topology::Topology;
use crate::data::model::LoadedModel;
use crate::data::tensor::DType;
use crate::execution::exec::executor::reference_job;
use crate::report::compare::LayerAuditInfo;

/// Where an isolated layer's input comes from.
#[derive(Debug, Clone)]
pub(super) enum Feed {
    /// A graph input: the sample itself.
    GraphInput(String),
    /// Codes: the golden activation quantized with the producing QuantizeLinear's parameters.
    Codes(String, Quant),
    /// A float activation: the golden one.
    Float(String),
}

/// A selected point with what its isolated run needs.
pub(super) struct Planned {
    pub(super) unit: Option<(Unit, Vec<Feed>)>,
    /// Why the layer cannot run alone, when it cannot.
    pub(super) unit_error: Option<String>,
}

fn pinned(model: &LoadedModel, inputs: &InputSet) -> ModelProto {
    let shapes = inputs.shapes();
    let mut proto = model.proto.clone();
    pin_input_shapes(&mut proto, &shapes);
    proto
}

/// Points, matching, selection, sizing. `None` when nothing can be tapped (said in `info`).
pub(super) fn prepare<'a>(
    ctx: &'a Context<'a>,
    opts: &'a LayerOptions,
    info: &mut LayerAuditInfo,
) -> Result<Option<(State<'a>, Vec<usize>, GraphIndex)>> {
    let graph = ctx.model.proto.graph.as_ref().context("the model has no graph")?;
    let pts = points(graph, ctx.model.path.parent());
    info.points = pts.len();
    let matches = match_reference(ctx, graph, info);
    let mut state = State {
        ctx,
        opts,
        points: pts,
        matches,
        ran: (0..ctx.planned.len()).filter(|&i| ctx.untapped[i].is_some()).collect(),
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
    let sized = sized_tensors(&state, &selected, &index);
    state.size(&sized)?;
    let selected = activations(&state, selected);
    count_matches(&state, &selected, info);
    if ctx.reference.is_some() && info.matched == 0 && info.selected > 0 {
        info.problems.push(format!(
            "none of the {} tapped layers has a counterpart in the reference model (no tensor name, quantizer naming convention or graph structure in common): they are compared with the baseline only, without SQNR or isolated runs",
            info.selected
        ));
    }
    Ok(Some((state, selected, index)))
}

/// The reference's counterpart of every float tensor of the audited graph.
fn match_reference(
    ctx: &Context<'_>,
    graph: &crate::data::model::pb::GraphProto,
    info: &mut LayerAuditInfo,
) -> BTreeMap<String, TensorMatch> {
    match ctx.reference {
        Some(r) => matching::match_tensors(&Topology::of_graph(graph), &Topology::of_model(&r.proto)),
        None => {
            info.problems.push(
                "no reference model (the stored golden run holds final outputs only; `golden create --layers` stores activations): layers are compared with the baseline, without SQNR or isolated runs"
                    .into(),
            );
            BTreeMap::new()
        }
    }
}

/// Every tensor the audit will expose or feed: the selected points (codes and their float
/// values) and the inputs of their isolation units.
fn sized_tensors(state: &State<'_>, selected: &[usize], index: &GraphIndex) -> Vec<String> {
    let units = plan_units(state, selected, index);
    let mut sized: Vec<String> = Vec::new();
    for &p in selected {
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
    sized
}

/// Integer tensors that are not codes (shapes, indices) are not activations.
fn activations(state: &State<'_>, selected: Vec<usize>) -> Vec<usize> {
    selected
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
        .collect()
}

/// The selected points paired with the reference, by how, and those that were not.
fn count_matches(state: &State<'_>, selected: &[usize], info: &mut LayerAuditInfo) {
    info.selected = selected.len();
    for &p in selected {
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
}

/// The layers upstream of `point` that run with it in isolation: those it reads, and theirs, up
/// to `isolate_window - 1` layers back (graph-input quantization excluded: it has nothing to
/// attribute).
fn window(state: &State<'_>, point: usize) -> Vec<usize> {
    let mut chosen: Vec<usize> = Vec::new();
    let mut frontier = vec![point];
    for _ in 1..state.opts.isolate_window.max(1) {
        let next: Vec<usize> = frontier
            .iter()
            .flat_map(|&p| state.points[p].inputs.iter().copied())
            .filter(|&i| !chosen.contains(&i) && state.points[i].op_type != "QuantizeLinear")
            .collect();
        chosen.extend(next.iter().copied());
        frontier = next;
    }
    chosen.sort_unstable();
    chosen.dedup();
    chosen
}

/// Plans each selected point's isolated run: its unit and where each input comes from.
pub(super) fn plan_units(state: &State<'_>, selected: &[usize], index: &GraphIndex) -> Vec<Planned> {
    let by_code: HashMap<&str, usize> = state
        .points
        .iter()
        .enumerate()
        .filter(|(_, p)| p.quant.is_some())
        .map(|(i, p)| (p.tensor.as_str(), i))
        .collect();
    selected
        .iter()
        .map(|&p| match unit_of(state, p, index, &by_code) {
            Ok(u) => Planned {
                unit: Some(u),
                unit_error: None,
            },
            Err(e) => Planned {
                unit: None,
                unit_error: Some(e),
            },
        })
        .collect()
}

/// One point's isolation unit (the layer and its window) and the feed of each of its inputs.
fn unit_of(
    state: &State<'_>,
    p: usize,
    index: &GraphIndex,
    by_code: &HashMap<&str, usize>,
) -> Result<(Unit, Vec<Feed>), String> {
    let point = &state.points[p];
    let node = point.node_index.ok_or("no node computes it")?;
    let mut outputs = vec![point.tensor.clone()];
    if point.quant.is_some() && point.float_name != point.tensor {
        outputs.push(point.float_name.clone());
    }
    let window: Vec<(usize, Option<usize>)> = window(state, p)
        .into_iter()
        .filter_map(|w| Some((state.points[w].node_index?, state.points[w].q_index)))
        .chain(std::iter::once((node, point.q_index)))
        .collect();
    let unit = index.unit(&window, outputs);
    let feeds = unit
        .inputs
        .iter()
        .map(|t| feed_of(state, t, index, by_code))
        .collect::<Result<Vec<_>, String>>()?;
    Ok((unit, feeds))
}

/// Where a unit's input `t` comes from: the sample, the golden activation quantized as its
/// producer does, or the golden float activation.
fn feed_of(state: &State<'_>, t: &str, index: &GraphIndex, by_code: &HashMap<&str, usize>) -> Result<Feed, String> {
    if index.topo.inputs.iter().any(|i| i == t) {
        return Ok(Feed::GraphInput(t.to_string()));
    }
    let missing = || format!("its input {t} has no counterpart in the reference");
    if let Some(&c) = by_code.get(t) {
        let src = &state.points[c];
        let r = state.reference_name(&src.float_name).ok_or_else(missing)?;
        return Ok(Feed::Codes(r.to_string(), src.quant.ok_or("unquantized")?));
    }
    state
        .reference_name(t)
        .map(|r| Feed::Float(r.to_string()))
        .ok_or_else(missing)
}

impl State<'_> {
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
        for t in result.output_types.iter().filter(|t| t.elem_type == 0) {
            self.problems.push(format!("{}: not a tensor; not compared", t.name));
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

/// Splits the selection into runs whose tensors fit the budget, in execution order (positions in
/// `selected`).
pub(super) fn runs_of(state: &State<'_>, selected: &[usize]) -> Vec<Vec<usize>> {
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
