//! The runs of the tapped audit, one after the other: Execute (the whole model with one run's
//! taps on every target, and the reference's matching tensors on the CPU or from a stored golden
//! run; a failing session retried in halves), Analyze (each tapped tensor against the golden
//! activation and the baseline's, accumulated), then the isolated runs of the same layers;
//! after the last run, Report (each target's layers and summary).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::accumulate::Accumulators;
use super::effects::EffectsAcc;
use super::isolated;
use super::layout::{plan_units, runs_of, Feed, Planned};
use super::split::{retry_in_halves, retryable};
use super::state::{golden_tensor, read_any, result_of, write, Context, PerTarget, State};
use super::tap::{self, GraphIndex};
use crate::data::inputs::InputFile;
use crate::execution::exec::executor::reference_job;
use crate::execution::exec::{Job, JobResult, Outcome};
use crate::foundation::timings;
use crate::report::compare::{LayerAuditInfo, LayerReport};

/// The tensors one run exposes.
struct RunTaps {
    /// Each layer's tensor (codes for a quantized layer): what every target returns.
    taps: Vec<String>,
    /// The same with the float values before rounding: what the baseline returns (tie evidence).
    with_floats: Vec<String>,
    /// The reference's counterparts, and what the isolated runs of these layers are fed.
    reference: Vec<String>,
}

impl RunTaps {
    fn new(state: &State<'_>, selected: &[usize], run: &[usize], units: &[Planned], isolate: bool) -> RunTaps {
        let point = |k: usize| &state.points[selected[k]];
        let taps = run.iter().map(|&k| point(k).tensor.clone()).collect();
        let with_floats = run
            .iter()
            .flat_map(|&k| {
                let p = point(k);
                std::iter::once(p.tensor.clone()).chain(p.quant.map(|_| p.float_name.clone()))
            })
            .collect();
        let mut reference: Vec<String> = run
            .iter()
            .filter_map(|&k| state.reference_name(&point(k).float_name).map(String::from))
            .collect();
        if isolate {
            for (_, feeds) in run.iter().filter_map(|&k| units[k].unit.as_ref()) {
                for f in feeds {
                    if let Feed::Codes(r, _) | Feed::Float(r) = f {
                        reference.push(r.clone());
                    }
                }
            }
        }
        reference.sort();
        reference.dedup();
        RunTaps {
            taps,
            with_floats,
            reference,
        }
    }
}

/// What one run returned: the golden activations and, per target, its results (several when
/// the session was retried in halves).
pub(super) struct RunResults {
    pub(super) golden: Option<JobResult>,
    pub(super) targets: BTreeMap<usize, Vec<JobResult>>,
}

/// Cumulative and isolated runs of every selected point, run by run.
pub(super) fn tap_all(
    state: &mut State<'_>,
    selected: &[usize],
    index: &GraphIndex,
    info: &mut LayerAuditInfo,
) -> Result<PerTarget> {
    let ctx = state.ctx;
    let units = plan_units(state, selected, index);
    let isolate = state.opts.isolate && ctx.reference.is_some();
    info.isolated = isolate;
    let mut accs = Accumulators::new(state, selected, &units, isolate);
    let runs = runs_of(state, selected);
    info.tap_runs = runs.len();
    for (n, run) in runs.iter().enumerate() {
        crate::foundation::interrupt::check()?;
        let dir = ctx.work.join("layers").join(format!("run{n}"));
        let taps = RunTaps::new(state, selected, run, &units, isolate);
        let stage = timings::stage("layers: tapped runs");
        let results = execute_run(state, selected, run, &taps, &dir, n, &mut accs)?;
        measure_run(state, selected, run, &results, &mut accs);
        drop(stage);
        if isolate {
            let _stage = timings::stage("layers: isolated runs");
            isolated::run(state, selected, run, &units, results.golden.as_ref(), &dir, &mut accs)?;
        }
        drop(results);
        ctx.executor.discard(&dir);
    }
    Ok(finish(state, selected, accs, isolate))
}

/// Execute: the tapped sessions of one run on every target and the reference (or the stored
/// golden activations), with failing sessions retried in halves.
fn execute_run(
    state: &mut State<'_>,
    selected: &[usize],
    run: &[usize],
    taps: &RunTaps,
    dir: &Path,
    n: usize,
    accs: &mut Accumulators,
) -> Result<RunResults> {
    let ctx = state.ctx;
    let q_path = write(
        &tap::tapped(&state.q_proto, &taps.taps),
        ctx.model,
        &dir.join("model.onnx"),
    )?;
    let base_path = write(
        &tap::tapped(&state.q_proto, &taps.with_floats),
        ctx.model,
        &dir.join("model-baseline.onnx"),
    )?;
    let threads = state.threads();
    let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
    let mut job_target: Vec<Option<usize>> = Vec::new();
    let stored = golden_job(state, taps, dir, n, &mut jobs, &mut job_target)?;
    for &t in &state.ran {
        let path = if state.is_baseline(t) { &base_path } else { &q_path };
        if let Some(j) = state.target_job(t, path, ctx.input_files, dir, threads) {
            jobs.push(j);
            job_target.push(Some(t));
        }
    }
    let outcomes = state.run_jobs(&jobs)?;
    let mut results = RunResults {
        golden: stored,
        targets: BTreeMap::new(),
    };
    for (o, t) in outcomes.iter().zip(&job_target) {
        match (t, result_of(o)) {
            (None, Ok(r)) => results.golden = Some(r.clone()),
            (None, Err(e)) => state
                .problems
                .push(format!("the tapped reference run failed ({e}): no SQNR for run {n}")),
            (Some(t), Ok(r)) => {
                results.targets.insert(*t, vec![r.clone()]);
            }
            (Some(t), Err(e)) => {
                let retried = retry_failed(state, selected, run, *t, o, &e, dir, accs)?;
                results.targets.insert(*t, retried);
            }
        }
    }
    let outputs = model_outputs(ctx);
    for (&t, rs) in &results.targets {
        if let (Some(e), Some(u)) = (accs.effects.get_mut(&t), ctx.untapped[t]) {
            for r in rs {
                e.add(u, r, &outputs);
            }
        }
    }
    Ok(results)
}

/// The golden side of a run: the stored activations (returned), or a job of the tapped
/// reference on the CPU (added to `jobs`).
fn golden_job(
    state: &mut State<'_>,
    taps: &RunTaps,
    dir: &Path,
    n: usize,
    jobs: &mut Vec<(Job, PathBuf)>,
    job_target: &mut Vec<Option<usize>>,
) -> Result<Option<JobResult>> {
    let ctx = state.ctx;
    if let (Some(g), Some(_)) = (ctx.stored, &state.r_proto) {
        let read = (0..ctx.inputs.samples.len())
            .map(|k| g.activations(k, &taps.reference, &dir.join("golden")))
            .collect::<Result<Vec<_>>>();
        return Ok(match read {
            Ok(outputs) => Some(JobResult::stored(outputs)),
            Err(e) => {
                state.problems.push(format!(
                    "the stored activations could not be read ({e:#}): no SQNR for run {n}"
                ));
                None
            }
        });
    }
    if let (Some(r_proto), Some(reference), Some(cpu)) = (&state.r_proto, ctx.reference, ctx.cpu) {
        let path = write(
            &tap::tapped(r_proto, &taps.reference),
            reference,
            &dir.join("reference.onnx"),
        )?;
        jobs.push(reference_job(
            cpu,
            path,
            ctx.input_files,
            &dir.join("golden"),
            &ctx.inputs.free_dims,
        ));
        job_target.push(None);
    }
    Ok(None)
}

/// The model's own outputs, which every tapped run also returns (compared with the untapped run).
fn model_outputs(ctx: &Context<'_>) -> Vec<String> {
    ctx.model
        .proto
        .graph
        .as_ref()
        .map(|g| g.output.iter().filter_map(|o| o.name.clone()).collect())
        .unwrap_or_default()
}

/// A target's failed tapped session: retried in halves when the failure may come from one
/// tensor, else every layer of the run is marked. Returns the results of the sessions that ran.
#[allow(clippy::too_many_arguments)]
fn retry_failed(
    state: &mut State<'_>,
    selected: &[usize],
    run: &[usize],
    t: usize,
    outcome: &Outcome,
    error: &str,
    dir: &Path,
    accs: &mut Accumulators,
) -> Result<Vec<JobResult>> {
    let ctx = state.ctx;
    if !retryable(outcome) {
        let items: Vec<(usize, String)> = run
            .iter()
            .map(|&k| (k, format!("the tapped session failed: {error}")))
            .collect();
        accs.fail(true, t, &items, format!("a tapped session failed: {error}"));
        return Ok(Vec::new());
    }
    let floats = state.is_baseline(t);
    let q_proto = state.q_proto.clone();
    let points = state.points.clone();
    let mut build = |subset: &[usize], d: &Path| -> Result<(PathBuf, Vec<Vec<InputFile>>)> {
        let taps: Vec<String> = subset
            .iter()
            .flat_map(|&k| {
                let p = &points[selected[k]];
                std::iter::once(p.tensor.clone()).chain(p.quant.filter(|_| floats).map(|_| p.float_name.clone()))
            })
            .collect();
        let path = write(&tap::tapped(&q_proto, &taps), ctx.model, &d.join("model.onnx"))?;
        Ok((path, ctx.input_files.to_vec()))
    };
    let retried = retry_in_halves(state, t, run, error, &mut build, &dir.join(format!("retry{t}")))?;
    accs.retried(true, t, &retried, error, run.len());
    Ok(retried.results)
}

/// Analyze: every tapped tensor of one run against the golden activation and the baseline's.
fn measure_run(state: &State<'_>, selected: &[usize], run: &[usize], results: &RunResults, accs: &mut Accumulators) {
    let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Compare);
    let ctx = state.ctx;
    let baseline: &[JobResult] = ctx
        .baseline
        .and_then(|b| results.targets.get(&b))
        .map_or(&[], |v| v.as_slice());
    for s in 0..ctx.input_files.len() {
        for &k in run {
            let p = &state.points[selected[k]];
            let gold = state
                .reference_name(&p.float_name)
                .and_then(|r| results.golden.as_ref().and_then(|g| golden_tensor(ctx, g, s, r).ok()));
            let base = read_any(baseline, s, &p.tensor);
            let base_float = p.quant.and_then(|_| read_any(baseline, s, &p.float_name));
            for (&t, rs) in &results.targets {
                let Some(accs) = accs.cumulative.get_mut(&t) else {
                    continue;
                };
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
}

/// Report: each target's layers and summary.
fn finish(state: &State<'_>, selected: &[usize], mut accs: Accumulators, isolate: bool) -> PerTarget {
    let layers_of = |t: usize| {
        super::reports(
            &state.points,
            selected,
            &state.matches,
            &accs.cumulative[&t],
            isolate.then(|| accs.isolated[&t].as_slice()),
            state.ctx.planned[t].spec.computes_floats_in_float16(),
        )
    };
    let all: Vec<(usize, Vec<LayerReport>)> = state.ran.iter().map(|&t| (t, layers_of(t))).collect();
    let baseline_layers = all.iter().find(|(t, _)| state.is_baseline(*t)).map(|(_, l)| l.clone());
    let mut out = Vec::new();
    for (t, layers) in all {
        let is_baseline = state.is_baseline(t);
        let against = baseline_layers.as_deref().filter(|_| !is_baseline);
        let not_compared = super::not_compared(&layers, is_baseline || state.ctx.baseline.is_none());
        let mut summary = super::summary(&layers, against, &state.opts.divergence, not_compared);
        summary.tap_effects = accs.effects.remove(&t).and_then(EffectsAcc::finish);
        summary.error = accs.failures.remove(&t);
        out.push((t, (layers, summary)));
    }
    out
}
