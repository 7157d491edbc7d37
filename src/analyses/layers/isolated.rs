//! The isolated runs of one tap run: every layer's unit side by side in one model, fed the golden
//! activations (quantized as the producing layer does for codes), so what a layer introduces is
//! measured without what it inherits. Execute (feeds written, one session per target, failures
//! retried in halves), then Analyze (each unit's output against the golden activation and the
//! baseline's isolated run).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context as _, Result};

use super::accumulate::Accumulators;
use super::layout::{Feed, Planned};
use super::split::{retry_in_halves, retryable};
use super::state::{golden_tensor, quantize, read_any, result_of, write, Context as AuditContext, State};
use super::tap::{self, Unit};
use crate::data::inputs::InputFile;
use crate::data::model::slice::MeasuredType;
use crate::data::tensor::Tensor;
use crate::execution::exec::{JobResult, Outcome};

/// Types and shapes of the tensors fed to the isolated layers, by name.
type Types = HashMap<String, MeasuredType>;

/// The units of one run that can run alone: (position in the selection, unit, feeds).
type Units<'u> = Vec<(usize, &'u Unit, &'u Vec<Feed>)>;

/// The two isolation models of a run: the units' results only, and with the values before
/// rounding (what the baseline returns, for tie evidence).
struct Models {
    plain: Vec<(usize, Unit)>,
    with_floats: Vec<(usize, Unit)>,
}

/// Runs and measures the isolated layers of one run.
pub(super) fn run(
    state: &mut State<'_>,
    selected: &[usize],
    run: &[usize],
    units: &[Planned],
    golden: Option<&JobResult>,
    dir: &Path,
    accs: &mut Accumulators,
) -> Result<()> {
    let Some(golden) = golden else { return Ok(()) };
    let iso: Units<'_> = run
        .iter()
        .filter_map(|&k| units[k].unit.as_ref().map(|(u, f)| (k, u, f)))
        .collect();
    if iso.is_empty() {
        return Ok(());
    }
    let (samples, types) = write_feeds(state, &iso, golden, dir)?;
    let with_floats: Vec<(usize, Unit)> = iso.iter().map(|&(k, u, _)| (k, u.clone())).collect();
    let plain: Vec<(usize, Unit)> = with_floats
        .iter()
        .map(|(k, u)| {
            let mut u = u.clone();
            u.outputs.truncate(1);
            (*k, u)
        })
        .collect();
    let models = Models { plain, with_floats };
    let results = execute(state, &models, &samples, &types, dir, accs)?;
    measure(state, selected, &iso, golden, &results, accs);
    Ok(())
}

/// Writes every unit input of every sample; returns the samples and the types of what is fed
/// (inference may not know them). A golden activation that feeds several units (the inputs of a
/// dense block's concatenations, a residual branch) is read, quantized and written once per
/// sample, and every unit that reads it is fed the same file.
fn write_feeds(
    state: &State<'_>,
    iso: &Units<'_>,
    golden: &JobResult,
    dir: &Path,
) -> Result<(Vec<Vec<InputFile>>, Types)> {
    let ctx = state.ctx;
    let mut samples: Vec<Vec<InputFile>> = Vec::new();
    let mut types = state.types.clone();
    for (s, files) in ctx.input_files.iter().enumerate() {
        let sdir = dir.join("iso-inputs").join(format!("s{s}"));
        std::fs::create_dir_all(&sdir)?;
        let mut written: HashMap<FeedKey, (PathBuf, MeasuredType)> = HashMap::new();
        let mut sample = Vec::new();
        for &(k, unit, feeds) in iso {
            for (t, feed) in unit.inputs.iter().zip(feeds) {
                let (path, ty) = match feed {
                    Feed::GraphInput(g) => {
                        let f = files.iter().find(|f| &f.name == g).context("sample input missing")?;
                        let ty = ctx.inputs.samples[s]
                            .iter()
                            .find(|nt| &nt.name == g)
                            .map(|nt| measured(&nt.tensor));
                        (f.path.clone(), ty)
                    }
                    Feed::Codes(..) | Feed::Float(..) => {
                        let key = FeedKey::of(feed).context("a golden feed has no key")?;
                        if !written.contains_key(&key) {
                            let file = sdir.join(format!("f{}.npy", written.len()));
                            let fed = feed_tensor(ctx, golden, s, feed)?;
                            fed.write_npy(&file)?;
                            written.insert(key.clone(), (file, measured(&fed)));
                        }
                        let (file, ty) = &written[&key];
                        (file.clone(), Some(ty.clone()))
                    }
                };
                if let Some(ty) = ty {
                    types.insert(t.clone(), ty);
                }
                sample.push(InputFile {
                    name: tap::unit_name(k, t),
                    path,
                });
            }
        }
        samples.push(sample);
    }
    Ok((samples, types))
}

/// What a fed file holds: a golden activation, as codes of one quantization or as floats.
#[derive(Clone, PartialEq, Eq, Hash)]
struct FeedKey {
    tensor: String,
    /// Scale and zero point bits and the code type; `None` for the float activation.
    quant: Option<(u32, u64, i32)>,
}

impl FeedKey {
    /// The key of a feed taken from the golden run; `None` for a graph input (fed the sample's
    /// own file).
    fn of(feed: &Feed) -> Option<FeedKey> {
        match feed {
            Feed::Codes(r, q) => Some(FeedKey {
                tensor: r.clone(),
                quant: Some((q.scale.to_bits(), q.zero_point.to_bits(), q.elem_type)),
            }),
            Feed::Float(r) => Some(FeedKey {
                tensor: r.clone(),
                quant: None,
            }),
            Feed::GraphInput(_) => None,
        }
    }
}

/// The tensor an isolated unit is fed from the golden run: the activation, quantized when it is
/// codes. A graph input is not taken from the golden run.
fn feed_tensor(ctx: &AuditContext<'_>, golden: &JobResult, sample: usize, feed: &Feed) -> Result<Tensor> {
    match feed {
        Feed::Codes(r, q) => {
            let g = golden_tensor(ctx, golden, sample, r)?;
            let data = quantize(&super::measure::real_values(&g, None), q)
                .ok_or_else(|| anyhow!("codes of type {} cannot be fed", q.elem_type))?;
            Ok(Tensor::new(g.shape.clone(), data)?)
        }
        Feed::Float(r) => golden_tensor(ctx, golden, sample, r),
        Feed::GraphInput(g) => Err(anyhow!("graph input {g} is fed from the sample, not the golden run")),
    }
}

fn measured(t: &Tensor) -> MeasuredType {
    MeasuredType {
        elem_type: t.dtype().onnx_code(),
        shape: t.shape.clone(),
    }
}

/// Execute: one isolated session per target that ran (the baseline's with the values before
/// rounding); a failing session is retried in halves to name the layers that fail alone.
fn execute(
    state: &mut State<'_>,
    models: &Models,
    samples: &[Vec<InputFile>],
    types: &HashMap<String, MeasuredType>,
    dir: &Path,
    accs: &mut Accumulators,
) -> Result<BTreeMap<usize, Vec<JobResult>>> {
    let ctx = state.ctx;
    let (Some(model), Some(base_model)) = (
        tap::isolation_model(&state.q_proto, &models.plain, types),
        tap::isolation_model(&state.q_proto, &models.with_floats, types),
    ) else {
        state
            .problems
            .push("isolated runs skipped: an isolated layer's input has no inferred type".into());
        return Ok(BTreeMap::new());
    };
    let q_path = write(&model, ctx.model, &dir.join("isolated.onnx"))?;
    let base_path = write(&base_model, ctx.model, &dir.join("isolated-baseline.onnx"))?;
    let threads = state.threads();
    let mut jobs = Vec::new();
    let mut job_target = Vec::new();
    for &t in &state.ran {
        let path = if state.is_baseline(t) { &base_path } else { &q_path };
        if let Some(j) = state.target_job(t, path, samples, &dir.join("iso"), threads) {
            jobs.push(j);
            job_target.push(t);
        }
    }
    let outcomes = state.run_jobs(&jobs)?;
    let mut results: BTreeMap<usize, Vec<JobResult>> = BTreeMap::new();
    for (o, &t) in outcomes.iter().zip(&job_target) {
        match result_of(o) {
            Ok(r) => {
                results.insert(t, vec![r.clone()]);
            }
            Err(e) => {
                let retried = retry_failed(state, models, samples, types, t, o, &e, dir, accs)?;
                results.insert(t, retried);
            }
        }
    }
    Ok(results)
}

/// A target's failed isolated session, retried in halves when a layer may fail on its own.
#[allow(clippy::too_many_arguments)]
fn retry_failed(
    state: &mut State<'_>,
    models: &Models,
    samples: &[Vec<InputFile>],
    types: &HashMap<String, MeasuredType>,
    t: usize,
    outcome: &Outcome,
    error: &str,
    dir: &Path,
    accs: &mut Accumulators,
) -> Result<Vec<JobResult>> {
    let ctx = state.ctx;
    let items: Vec<usize> = models.plain.iter().map(|(k, _)| *k).collect();
    if !retryable(outcome) {
        let failed: Vec<(usize, String)> = items
            .iter()
            .map(|&k| (k, format!("the isolated session failed: {error}")))
            .collect();
        accs.fail(false, t, &failed, format!("an isolated session failed: {error}"));
        return Ok(Vec::new());
    }
    let units = if state.is_baseline(t) {
        &models.with_floats
    } else {
        &models.plain
    };
    let q_proto = state.q_proto.clone();
    let mut build = |subset: &[usize], d: &Path| -> Result<(PathBuf, Vec<Vec<InputFile>>)> {
        let chosen: Vec<(usize, Unit)> = units.iter().filter(|(k, _)| subset.contains(k)).cloned().collect();
        let model = tap::isolation_model(&q_proto, &chosen, types)
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
    let retried = retry_in_halves(state, t, &items, error, &mut build, &dir.join(format!("iso-retry{t}")))?;
    accs.retried(false, t, &retried, error, items.len());
    Ok(retried.results)
}

/// Analyze: each unit's output against the golden activation and the baseline's isolated run.
fn measure(
    state: &State<'_>,
    selected: &[usize],
    iso: &Units<'_>,
    golden: &JobResult,
    results: &BTreeMap<usize, Vec<JobResult>>,
    accs: &mut Accumulators,
) {
    let _span = crate::foundation::timings::span(crate::foundation::timings::Phase::Compare);
    let ctx = state.ctx;
    let baseline: &[JobResult] = ctx.baseline.and_then(|b| results.get(&b)).map_or(&[], |v| v.as_slice());
    for s in 0..ctx.input_files.len() {
        for &(k, _, _) in iso {
            let p = &state.points[selected[k]];
            let gold = state
                .reference_name(&p.float_name)
                .and_then(|r| golden_tensor(ctx, golden, s, r).ok());
            let name = tap::unit_name(k, &p.tensor);
            let base = read_any(baseline, s, &name);
            let base_float = p
                .quant
                .and_then(|_| read_any(baseline, s, &tap::unit_name(k, &p.float_name)));
            for (&t, rs) in results {
                let Some(accs) = accs.isolated.get_mut(&t) else {
                    continue;
                };
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
}
