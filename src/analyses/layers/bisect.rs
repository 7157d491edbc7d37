//! Localisation without tapping everything: cut the graph at a tensor every path goes through,
//! compare the target's codes there with the baseline's, and recurse into the half where they
//! first depart. The first departing cut is found in O(log N) sessions per target, each running
//! only the prefix of the model up to the cut; the layers between the last agreeing cut and the
//! first departing one are then tapped in one session to name the layer.
//!
//! It assumes a departure persists downstream (a cut after a departing one departs too), which
//! holds for drift that propagates; a departure that later vanishes can be missed, and the
//! steps are reported so the user can see what was tried.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

use super::measure::LayerAcc;
use super::state::{read, result_of, write, PerTarget, State};
use super::tap;
use crate::data::model::topology::Topology;
use crate::execution::exec::{Job, JobResult};
use crate::report::compare::{BisectReport, BisectStep, LayerPointer, LayerReport, TargetLayerSummary};

/// The result of comparing one cut on one target with the baseline.
#[derive(Debug, Clone, Copy)]
struct Probe {
    departs: bool,
    differing: u64,
    max_steps: u64,
}

/// Runs the prefix models of `cuts[i]` for each (target, i) asked, the baseline's where not yet
/// known, and compares the codes.
fn probe(
    state: &mut State<'_>,
    cuts: &[String],
    asked: &[(usize, usize)],
    baseline: usize,
    base_cache: &mut HashMap<usize, PathBuf>,
    round: usize,
) -> Result<Vec<Probe>> {
    let ctx = state.ctx;
    let dir = ctx.work.join("layers").join(format!("bisect{round}"));
    let mut models: BTreeMap<usize, PathBuf> = BTreeMap::new();
    for &(_, i) in asked {
        if let std::collections::btree_map::Entry::Vacant(e) = models.entry(i) {
            let proto = tap::prefix(&state.q_proto, &cuts[i]).ok_or_else(|| anyhow!("cannot cut at {}", cuts[i]))?;
            e.insert(write(&proto, ctx.model, &dir.join(format!("cut{i}.onnx")))?);
        }
    }
    let threads = state.threads();
    let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
    let mut base_jobs: Vec<usize> = Vec::new();
    for (&i, path) in models.iter().filter(|(i, _)| !base_cache.contains_key(i)) {
        if let Some(j) = state.target_job(baseline, path, ctx.input_files, &dir.join(format!("base{i}")), threads) {
            jobs.push(j);
            base_jobs.push(i);
        }
    }
    for (n, &(t, i)) in asked.iter().enumerate() {
        if let Some(j) = state.target_job(t, &models[&i], ctx.input_files, &dir.join(format!("probe{n}")), threads) {
            jobs.push(j);
        }
    }
    let outcomes = state.run_jobs(&jobs)?;
    if outcomes.len() != base_jobs.len() + asked.len() {
        return Err(anyhow!("a target of the bisection has no runtime"));
    }
    let (base_outcomes, target_outcomes) = outcomes.split_at(base_jobs.len());
    for (o, &i) in base_outcomes.iter().zip(&base_jobs) {
        let r = result_of(o).map_err(|e| anyhow!("the baseline's run of the model cut at {} failed: {e}", cuts[i]))?;
        base_cache.insert(i, keep_baseline(ctx, r, i)?);
    }
    let probes = target_outcomes
        .iter()
        .zip(asked)
        .map(|(o, &(t, i))| {
            let r = result_of(o).map_err(|e| {
                anyhow!(
                    "{}: the run of the model cut at {} failed: {e}",
                    ctx.planned[t].spec.id,
                    cuts[i]
                )
            })?;
            compare_cut(state, r, &base_cache[&i], &cuts[i])
        })
        .collect::<Result<Vec<_>>>()?;
    ctx.executor.discard(&dir);
    Ok(probes)
}

/// Keeps the baseline's codes at cut `i` for later rounds: copies the result out of the round's
/// directory and returns the path of its result file.
fn keep_baseline(ctx: &super::state::Context<'_>, r: &JobResult, i: usize) -> Result<PathBuf> {
    let keep = ctx.work.join("layers").join("bisect-baseline").join(format!("cut{i}"));
    std::fs::create_dir_all(&keep)?;
    let mut kept = r.clone();
    for (s, files) in kept.outputs.iter_mut().enumerate() {
        for f in files.iter_mut() {
            let dest = keep.join(format!("s{s}.npy"));
            std::fs::copy(&f.path, &dest)?;
            f.path = dest;
        }
    }
    std::fs::write(keep.join("result.json"), serde_json::to_vec(&kept)?)?;
    Ok(keep.join("result.json"))
}

/// A target's codes at a cut against the baseline's.
fn compare_cut(state: &State<'_>, r: &JobResult, base: &Path, cut: &str) -> Result<Probe> {
    let base: JobResult = serde_json::from_slice(&std::fs::read(base)?)?;
    let mut acc = LayerAcc::new(false, true, true);
    for s in 0..state.ctx.input_files.len() {
        match (read(Some(r), s, cut), read(Some(&base), s, cut)) {
            (Some(x), Some(b)) => acc.add(&x, None, None, Some(&b), None),
            _ => return Err(anyhow!("{cut} missing from the run cut there")),
        }
    }
    let c = super::code_comparison(&acc).ok_or_else(|| anyhow!("no comparison"))?;
    Ok(Probe {
        departs: super::divergence::beyond_rounding(&c, true, &state.opts.divergence),
        differing: c.differing,
        max_steps: c.max_steps,
    })
}

/// The bisection of every target so far: the cuts tried, sessions spent, the interval that
/// holds its first departing cut, and why a target could not be bisected.
#[derive(Default)]
struct Search {
    steps: BTreeMap<usize, Vec<BisectStep>>,
    sessions: BTreeMap<usize, usize>,
    /// (lo, hi): the first departing cut is in [lo, hi]; hi is known to depart.
    bounds: BTreeMap<usize, (usize, usize)>,
    errors: BTreeMap<usize, String>,
}

impl Search {
    /// Records a probe of cut `i` on target `t`; returns the next cut to try, if any.
    fn advance(&mut self, t: usize, i: usize, p: &Probe, cuts: &[String], spent: usize) -> Option<usize> {
        let last = cuts.len() - 1;
        *self.sessions.entry(t).or_default() += spent;
        self.steps.entry(t).or_default().push(BisectStep {
            tensor: cuts[i].clone(),
            departs: p.departs,
            differing: p.differing,
            max_steps: p.max_steps,
        });
        let (lo, hi) = *self.bounds.get(&t).unwrap_or(&(0, last));
        let (lo, hi) = match (self.bounds.contains_key(&t), p.departs) {
            (false, false) => {
                self.errors.insert(
                    t,
                    format!("the last cut ({}) does not depart: nothing to localise", cuts[i]),
                );
                return None;
            }
            (false, true) => (lo, hi),
            (true, true) => (lo, i),
            (true, false) => (i + 1, hi),
        };
        self.bounds.insert(t, (lo, hi));
        (lo < hi).then_some((lo + hi) / 2)
    }
}

/// The selected quantized tensors every path goes through, in execution order.
fn cut_tensors(state: &State<'_>, selected: &[usize]) -> Result<Vec<String>> {
    let topo = Topology::of_model(&state.q_proto);
    let chosen: Vec<&str> = selected
        .iter()
        .filter(|&&p| state.points[p].quant.is_some())
        .map(|&p| state.points[p].tensor.as_str())
        .collect();
    let cuts: Vec<String> = tap::cut_tensors(&topo)
        .into_iter()
        .filter(|c| chosen.contains(&c.as_str()))
        .collect();
    if cuts.is_empty() {
        return Err(anyhow!(
            "no selected quantized tensor is one every path goes through: nothing to cut at"
        ));
    }
    Ok(cuts)
}

/// Bisects every target that is not the baseline.
pub(super) fn run(state: &mut State<'_>, selected: &[usize]) -> Result<PerTarget> {
    let baseline = state
        .ctx
        .baseline
        .ok_or_else(|| anyhow!("bisection compares with the baseline (cpu:noopt), which did not run"))?;
    let cuts = cut_tensors(state, selected)?;
    let targets: Vec<usize> = state.ran.iter().copied().filter(|&t| t != baseline).collect();
    let mut base_cache: HashMap<usize, PathBuf> = HashMap::new();
    let mut search = Search::default();
    let mut asked: Vec<(usize, usize)> = targets.iter().map(|&t| (t, cuts.len() - 1)).collect();
    let mut round = 0;
    while !asked.is_empty() {
        let before = state.sessions;
        let probes = probe(state, &cuts, &asked, baseline, &mut base_cache, round)?;
        let spent = (state.sessions - before).div_ceil(asked.len());
        round += 1;
        asked = asked
            .iter()
            .zip(&probes)
            .filter_map(|(&(t, i), p)| search.advance(t, i, p, &cuts, spent).map(|next| (t, next)))
            .collect();
    }
    targets
        .iter()
        .map(|&t| name_layer(state, selected, &cuts, &mut search, t, baseline))
        .collect()
}

/// Names the layer: taps every selected point between the last agreeing cut and the first
/// departing one, in one session on the target and one on the baseline.
fn name_layer(
    state: &mut State<'_>,
    selected: &[usize],
    cuts: &[String],
    search: &mut Search,
    t: usize,
    baseline: usize,
) -> Result<(usize, (Vec<LayerReport>, TargetLayerSummary))> {
    let mut summary = TargetLayerSummary {
        first_code_difference: None,
        first_beyond_rounding: None,
        first_sqnr_loss: None,
        first_divergence: None,
        first_overflow: None,
        layers_not_compared: 0,
        tap_effects: None,
        bisect: Some(BisectReport {
            cuts: cuts.len(),
            steps: search.steps.remove(&t).unwrap_or_default(),
            sessions: search.sessions.get(&t).copied().unwrap_or(0),
        }),
        error: search.errors.remove(&t),
    };
    let Some(&(first, _)) = search.bounds.get(&t) else {
        return Ok((t, (Vec::new(), summary)));
    };
    let start = if first == 0 {
        0
    } else {
        selected
            .iter()
            .position(|&p| state.points[p].tensor == cuts[first - 1])
            .map_or(0, |k| k + 1)
    };
    let end = selected
        .iter()
        .position(|&p| state.points[p].tensor == cuts[first])
        .unwrap_or(selected.len() - 1);
    let segment: Vec<usize> = selected[start..=end].to_vec();
    if let Some(b) = summary.bisect.as_mut() {
        b.sessions += 2;
    }
    // Bisection searches for the first cut beyond rounding; the other levels need every layer.
    let rules = &state.opts.divergence;
    let (layers, beyond) = match segment_layers(state, t, baseline, &segment) {
        Ok(layers) => {
            let beyond = super::divergence::first_departures(&layers, Some(&[]), rules).beyond_rounding;
            (layers, beyond)
        }
        // The cut is known to depart: name it, and say that an earlier layer of the segment may.
        Err(e) => {
            let cut = &cuts[first];
            summary.error = Some(format!(
                "{e:#}; the first departing cut {cut} is named instead (a layer before it, after the last agreeing cut, may depart first)"
            ));
            let step = summary
                .bisect
                .as_ref()
                .and_then(|b| b.steps.iter().find(|s| &s.tensor == cut));
            let pointer = step.and_then(|step| cut_pointer(state, selected, step));
            (Vec::new(), pointer)
        }
    };
    summary.first_beyond_rounding = beyond.clone();
    summary.first_divergence = beyond;
    summary.layers_not_compared = super::not_compared(&layers, false);
    Ok((t, (layers, summary)))
}

/// The layer of a departing cut, as the bisection step measured it.
fn cut_pointer(state: &State<'_>, selected: &[usize], step: &BisectStep) -> Option<LayerPointer> {
    let index = *selected.iter().find(|&&p| state.points[p].tensor == step.tensor)?;
    let p = &state.points[index];
    Some(LayerPointer {
        index,
        node: p.node.clone(),
        op_type: p.op_type.clone(),
        tensor: step.tensor.clone(),
        differing: step.differing,
        max_steps: step.max_steps,
        max_rel_error: None,
        sqnr_db: None,
        baseline_sqnr_db: None,
        introduced: None,
    })
}

/// The layers of one segment, tapped in one session on the target and one on the baseline.
fn segment_layers(
    state: &mut State<'_>,
    target: usize,
    baseline: usize,
    segment: &[usize],
) -> Result<Vec<LayerReport>> {
    let ctx = state.ctx;
    let dir = ctx.work.join("layers").join(format!("segment{target}"));
    let taps: Vec<String> = segment.iter().map(|&p| state.points[p].tensor.clone()).collect();
    let path = write(&tap::tapped(&state.q_proto, &taps), ctx.model, &dir.join("model.onnx"))?;
    let threads = state.threads();
    let jobs: Vec<(Job, PathBuf)> = [
        state.target_job(target, &path, ctx.input_files, &dir.join("t"), threads),
        state.target_job(baseline, &path, ctx.input_files, &dir.join("b"), threads),
    ]
    .into_iter()
    .flatten()
    .collect();
    let outcomes = state.run_jobs(&jobs)?;
    let result = |i: usize| {
        outcomes
            .get(i)
            .ok_or_else(|| anyhow!("tapped segment: no session"))
            .and_then(|o| result_of(o).map_err(|e| anyhow!("tapped segment: {e}")))
    };
    let (t, b) = (result(0)?, result(1)?);
    let mut accs: Vec<LayerAcc> = segment
        .iter()
        .map(|&p| LayerAcc::new(false, true, state.points[p].quant.is_some()))
        .collect();
    for s in 0..ctx.input_files.len() {
        for (k, &p) in segment.iter().enumerate() {
            let name = &state.points[p].tensor;
            match (read(Some(t), s, name), read(Some(b), s, name)) {
                (Some(x), Some(y)) => accs[k].add(&x, state.points[p].quant.as_ref(), None, Some(&y), None),
                _ => accs[k].error = Some(format!("{name} missing from the tapped segment")),
            }
        }
    }
    ctx.executor.discard(&dir);
    // No golden values in a bisection's segments: nothing there is named an overflow.
    Ok(super::reports(
        &state.points,
        segment,
        &state.matches,
        &accs,
        None,
        false,
    ))
}
