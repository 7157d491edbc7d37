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
use std::path::PathBuf;

use anyhow::{anyhow, Result};

use super::measure::LayerAcc;
use super::run::{read, result_of, write, PerTarget, State};
use super::tap;
use crate::exec::{Job, JobResult};
use crate::model::topology::Topology;
use crate::report::model::{BisectReport, BisectStep, TargetLayerSummary};

/// The result of comparing one cut on one target with the baseline.
#[derive(Debug, Clone, Copy)]
struct Probe {
    departs: bool,
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
    let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
    let mut models: BTreeMap<usize, PathBuf> = BTreeMap::new();
    for &(_, i) in asked {
        if let std::collections::btree_map::Entry::Vacant(e) = models.entry(i) {
            let proto = tap::prefix(&state.q_proto, &cuts[i]).ok_or_else(|| anyhow!("cannot cut at {}", cuts[i]))?;
            e.insert(write(&proto, ctx.model, &dir.join(format!("cut{i}.onnx")))?);
        }
    }
    let threads = state.threads(asked.len() + 1);
    let mut base_jobs: Vec<usize> = Vec::new();
    for (&i, path) in &models {
        if !base_cache.contains_key(&i) {
            let bdir = dir.join(format!("base{i}"));
            if let Some(j) = state.target_job(baseline, path, ctx.input_files, &bdir, threads) {
                jobs.push(j);
                base_jobs.push(i);
            }
        }
    }
    for (n, &(t, i)) in asked.iter().enumerate() {
        let tdir = dir.join(format!("probe{n}"));
        if let Some(j) = state.target_job(t, &models[&i], ctx.input_files, &tdir, threads) {
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
        // Keep the baseline's codes for later rounds: copy the result out of the round's dir.
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
        base_cache.insert(i, keep.join("result.json"));
    }
    let mut probes = Vec::new();
    for (o, &(t, i)) in target_outcomes.iter().zip(asked) {
        let r = result_of(o).map_err(|e| {
            anyhow!(
                "{}: the run of the model cut at {} failed: {e}",
                state.ctx.planned[t].spec.id,
                cuts[i]
            )
        })?;
        let base: JobResult = serde_json::from_slice(&std::fs::read(&base_cache[&i])?)?;
        let mut acc = LayerAcc::new(false, true, true);
        for s in 0..ctx.input_files.len() {
            match (read(Some(r), s, &cuts[i]), read(Some(&base), s, &cuts[i])) {
                (Some(x), Some(b)) => acc.add(&x, None, None, Some(&b), None),
                _ => return Err(anyhow!("{} missing from the run cut there", cuts[i])),
            }
        }
        let c = super::code_comparison(&acc).ok_or_else(|| anyhow!("no comparison"))?;
        probes.push(Probe {
            departs: super::departs(&c, true, state.opts.tolerance_lsb),
            max_steps: c.max_steps,
        });
    }
    if !ctx.executor.options().keep_work {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(probes)
}

/// Bisects every target that is not the baseline.
pub(super) fn run(state: &mut State<'_>, selected: &[usize]) -> Result<PerTarget> {
    let baseline = state
        .ctx
        .baseline
        .ok_or_else(|| anyhow!("bisection compares with the baseline (cpu:noopt), which did not run"))?;
    let topo = Topology::of_model(&state.q_proto);
    let all_cuts = tap::cut_tensors(&topo);
    let chosen: Vec<&str> = selected
        .iter()
        .filter(|&&p| state.points[p].quant.is_some())
        .map(|&p| state.points[p].tensor.as_str())
        .collect();
    let cuts: Vec<String> = all_cuts.into_iter().filter(|c| chosen.contains(&c.as_str())).collect();
    if cuts.is_empty() {
        return Err(anyhow!(
            "no selected quantized tensor is one every path goes through: nothing to cut at"
        ));
    }
    let targets: Vec<usize> = state.ran.iter().copied().filter(|&t| t != baseline).collect();
    let mut base_cache: HashMap<usize, PathBuf> = HashMap::new();
    let mut steps: BTreeMap<usize, Vec<BisectStep>> = BTreeMap::new();
    let mut sessions: BTreeMap<usize, usize> = BTreeMap::new();
    // (lo, hi): the first departing cut is in [lo, hi]; hi is known to depart.
    let mut bounds: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut errors: BTreeMap<usize, String> = BTreeMap::new();
    let last = cuts.len() - 1;
    let mut asked: Vec<(usize, usize)> = targets.iter().map(|&t| (t, last)).collect();
    let mut round = 0;
    while !asked.is_empty() {
        let before = state.sessions;
        let probes = probe(state, &cuts, &asked, baseline, &mut base_cache, round)?;
        let spent = state.sessions - before;
        round += 1;
        let mut next = Vec::new();
        for (&(t, i), p) in asked.iter().zip(&probes) {
            *sessions.entry(t).or_default() += spent.div_ceil(asked.len());
            steps.entry(t).or_default().push(BisectStep {
                tensor: cuts[i].clone(),
                departs: p.departs,
                max_steps: p.max_steps,
            });
            let (lo, hi) = *bounds.get(&t).unwrap_or(&(0, last));
            let (lo, hi) = match (bounds.contains_key(&t), p.departs) {
                (false, false) => {
                    errors.insert(
                        t,
                        format!("the last cut ({}) does not depart: nothing to localise", cuts[i]),
                    );
                    continue;
                }
                (false, true) => (lo, hi),
                (true, true) => (lo, i),
                (true, false) => (i + 1, hi),
            };
            bounds.insert(t, (lo, hi));
            if lo < hi {
                next.push((t, (lo + hi) / 2));
            }
        }
        asked = next;
    }
    // Name the layer: tap every selected point between the last agreeing cut and the first
    // departing one, in one session per target.
    let mut out: PerTarget = Vec::new();
    for &t in &targets {
        let mut summary = TargetLayerSummary {
            first_divergence: None,
            layers_not_compared: 0,
            tap_effects: None,
            bisect: Some(BisectReport {
                cuts: cuts.len(),
                steps: steps.remove(&t).unwrap_or_default(),
                sessions: sessions.get(&t).copied().unwrap_or(0),
            }),
            error: errors.remove(&t),
        };
        let Some(&(first, _)) = bounds.get(&t) else {
            out.push((t, (Vec::new(), summary)));
            continue;
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
        let layers = segment_layers(state, t, baseline, &segment)?;
        if let Some(b) = summary.bisect.as_mut() {
            b.sessions += 2;
        }
        summary.first_divergence = super::first_divergence(&layers, state.opts.tolerance_lsb);
        summary.layers_not_compared = super::not_compared(&layers, false);
        out.push((t, (layers, summary)));
    }
    Ok(out)
}

/// The layers of one segment, tapped in one session on the target and one on the baseline.
fn segment_layers(
    state: &mut State<'_>,
    target: usize,
    baseline: usize,
    segment: &[usize],
) -> Result<Vec<crate::report::model::LayerReport>> {
    let ctx = state.ctx;
    let dir = ctx.work.join("layers").join(format!("segment{target}"));
    let taps: Vec<String> = segment.iter().map(|&p| state.points[p].tensor.clone()).collect();
    let path = write(&tap::tapped(&state.q_proto, &taps), ctx.model, &dir.join("model.onnx"))?;
    let threads = state.threads(2);
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
    if !ctx.executor.options().keep_work {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(super::reports(&state.points, segment, &state.matches, &accs, None))
}
